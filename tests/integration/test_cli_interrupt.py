"""Ctrl-C in the CLIs (retrieval's and the orchestrator's) ends with one line, `interrupted`,
and exit code 130, never a traceback: each CLI runs as a real process against a TCP server on
127.0.0.1 that accepts the connection and never answers, and gets SIGINT while it waits."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A listening socket that accepts connections and never writes a byte."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(server.accept()[0])
            except TimeoutError:
                continue
            except OSError:
                return

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join(timeout=5)
        for conn in accepted:
            conn.close()
        server.close()


@pytest.mark.parametrize(
    "command",
    [
        ["retrieval_service", "search", "anything", "--timeout", "60"],
        ["orchestrator_service", "ask", "anything?"],
        ["orchestrator_service", "eval", "sets", "list"],
    ],
    ids=["retrieval", "orchestrator", "orchestrator-eval"],
)
def test_ctrl_c_ends_with_one_line_and_130(silent_server: int, command: list[str]) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AUTH_", "RETRIEVAL_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "gen"), env.get("PYTHONPATH", "")])
    proc = subprocess.Popen(
        [sys.executable, "-m", *command, "--addr", f"127.0.0.1:{silent_server}"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(3)  # imported, connected, waiting for the answer
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, (out, err)
    assert err.strip().splitlines()[-1] == "interrupted", err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
