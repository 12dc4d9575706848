"""`make run`: both services on the embedded default (Milvus Lite under ./data, the built-in
embedder and local model), in the foreground. Ctrl-C (or SIGTERM) drains and stops both; if
one exits on its own, the other is stopped too and the exit code is passed on."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SERVICES = ("retrieval_service", "orchestrator_service")


def _environment() -> dict[str, str]:
    env = dict(os.environ)
    # `make run` seeds an empty knowledge base with the bundled samples.
    env.setdefault("SAMPLES_DIR", str(ROOT / "samples"))
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def main() -> int:
    env = _environment()
    procs = [subprocess.Popen([sys.executable, "-m", name], cwd=ROOT, env=env) for name in SERVICES]
    requested = False

    def stop() -> None:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)

    def on_signal(*_: object) -> None:
        nonlocal requested
        requested = True
        stop()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        while all(proc.poll() is None for proc in procs):
            time.sleep(0.2)
        stop()
        codes = [proc.wait() for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    if requested:
        return 0
    failed = [code for code in codes if code != 0]
    return failed[0] if failed else 1  # a service stopped although nobody asked it to


if __name__ == "__main__":
    sys.exit(main())
