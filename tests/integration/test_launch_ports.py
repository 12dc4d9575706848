"""`make run` (shared/launch.py) with a service port another process already listens on: it
stops before starting anything, with one line naming the setting, and prints no ready block
(that process would otherwise answer on the port and make the failed service look ready)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def test_a_taken_port_is_named_and_nothing_is_called_ready() -> None:
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        env = {**os.environ, "RETRIEVAL_PORT": str(port), "BIND_HOST": "127.0.0.1"}
        done = subprocess.run(
            [sys.executable, "-m", "shared.launch"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 2, done.stderr
    assert f"RETRIEVAL_PORT={port} is already in use" in done.stderr
    assert "ready:" not in done.stderr and "Traceback" not in done.stderr
