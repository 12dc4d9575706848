"""Milvus Lite out of the service process: the embedded default (`MILVUS_URI` = a `.db` path)
runs Milvus Lite's gRPC server in a supervised child process on 127.0.0.1, and the service
connects to it over loopback.

Why: Milvus Lite 3.2 is pure Python. In-process, its BM25 analyser (jieba, 86 % of an insert)
shared one GIL with the event loop, the embeddings client and the writer, and its data grew the
service's own resident set. In a child it runs on the other core and its memory is its own.

`LiteProcess` (the parent side) starts the child, waits for its `READY <port>` line, watches
it, reports it down (`on_health(False)`: readiness NOT_SERVING) and restarts it on the same
port with backoff; while it is down every store call is UNAVAILABLE at once. The child
(`python -m retrieval_service.adapters.milvus.lite_process`) holds the data directory's lock,
exactly as the in-process server did, and never outlives the service: it exits when its stdin
(a pipe from the parent) reaches end of file, which the kernel delivers however the parent
dies, and when spawned from the main thread it also asks the kernel for SIGKILL on the
parent's death (`PR_SET_PDEATHSIG`), which releases the lock at once."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import itertools
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from shared.errors import ConfigurationError

log = logging.getLogger(__name__)

READY = "READY"
FAILED = "FAILED"
#: How long the child keeps trying for the data directory's lock: a predecessor killed with its
#: service may still be exiting (a crash-restart); a live holder makes start-up fail after it.
LOCK_WAIT_SECONDS = 3.0
#: Opening a large store replays and loads its segments (8 s for 100k rows measured).
READY_TIMEOUT_SECONDS = 300.0
STOP_TIMEOUT_SECONDS = 15.0
RESTART_BACKOFF_SECONDS = (0.5, 1.0, 2.0, 5.0, 10.0)
_MAX_MESSAGE_BYTES = 256 * 1024 * 1024  # Milvus Lite's own server limit
_PR_SET_PDEATHSIG = 1

HealthCallback = Callable[[bool], Awaitable[None]]


class LiteProcess:
    """The supervised Milvus Lite child of one data directory (see the module docstring)."""

    def __init__(self, data_dir: str | Path) -> None:
        self.data_dir = str(Path(data_dir).expanduser().resolve())
        self.port = 0
        self.restarts = 0
        #: Awaited with False when the child dies unexpectedly and True once it is back.
        self.on_health: HealthCallback | None = None
        self._proc: asyncio.subprocess.Process | None = None
        self._watcher: asyncio.Task[None] | None = None
        self._closing = False

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.returncode is None

    async def start(self) -> str:
        """Start the child and return the URI to connect to; ConfigurationError (naming
        MILVUS_URI) when it cannot open the data directory."""
        await self._spawn()
        self._watcher = asyncio.create_task(self._watch())
        return self.uri

    async def _spawn(self) -> None:
        argv = [
            sys.executable, "-m", "retrieval_service.adapters.milvus.lite_process",
            "--data-dir", self.data_dir, "--port", str(self.port), "--parent", str(os.getpid()),
        ]  # fmt: skip
        if threading.current_thread() is threading.main_thread():
            # PR_SET_PDEATHSIG fires when the spawning *thread* ends: only the main one is safe.
            argv.append("--kill-with-parent")
        # pymilvus, which the child imports, rejects a file path in MILVUS_URI.
        env = {k: v for k, v in os.environ.items() if k != "MILVUS_URI"}
        # Its own session: a terminal's Ctrl-C (SIGINT to the foreground group) must not stop
        # the store while the service drains; the service ends the child itself.
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            env=env,
            start_new_session=True,
        )
        assert proc.stdout is not None
        try:
            line = await asyncio.wait_for(proc.stdout.readline(), READY_TIMEOUT_SECONDS)
        except BaseException:
            await _kill(proc)
            raise
        word, _, rest = line.decode(errors="replace").strip().partition(" ")
        if word != READY:
            await _kill(proc)
            reason = rest or f"it exited with status {proc.returncode}"
            raise ConfigurationError(
                f"MILVUS_URI: cannot open the Milvus Lite data directory {self.data_dir} ({reason})"
            )
        self.port = int(rest)
        self._proc = proc
        log.info("Milvus Lite serves %s from process %d on %s", self.data_dir, proc.pid, self.uri)

    async def _watch(self) -> None:
        while not self._closing:
            assert self._proc is not None
            status = await self._proc.wait()
            if self._closing:
                return
            log.error(
                "the Milvus Lite process %d exited with status %s; store calls are UNAVAILABLE "
                "until it is restarted",
                self._proc.pid, status,
            )  # fmt: skip
            await self._report(False)
            for attempt in itertools.count():
                delay = RESTART_BACKOFF_SECONDS[min(attempt, len(RESTART_BACKOFF_SECONDS) - 1)]
                await asyncio.sleep(delay)
                if self._closing:
                    return
                try:
                    await self._spawn()
                except (ConfigurationError, OSError, TimeoutError) as exc:
                    log.warning("restarting Milvus Lite failed (%s); retrying", exc)
                    continue
                break
            self.restarts += 1
            log.warning("Milvus Lite restarted as process %d", self.pid)
            await self._report(True)

    async def _report(self, up: bool) -> None:
        if self.on_health is not None:
            try:
                await self.on_health(up)
            except Exception:
                log.exception("reporting Milvus Lite health failed")

    async def aclose(self) -> None:
        """Stop the child (it closes its store and releases the lock) and the watcher."""
        self._closing = True
        if self._watcher is not None:
            self._watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watcher
        proc, self._proc = self._proc, None
        if proc is None or proc.returncode is not None:
            return
        assert proc.stdin is not None
        proc.stdin.close()  # the child's signal to shut down cleanly
        try:
            await asyncio.wait_for(proc.wait(), STOP_TIMEOUT_SECONDS)
        except TimeoutError:
            log.warning("Milvus Lite process %d did not stop; killing it", proc.pid)
            await _kill(proc)


async def _kill(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
    await proc.wait()


# ---- the child ---------------------------------------------------------------------------


def _die_with_parent(parent: int) -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (AttributeError, OSError):  # not Linux: the stdin watch alone ends the child
        return
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)


def _open(data_dir: str) -> object:
    from milvus_lite.db import MilvusLite
    from milvus_lite.exceptions import DataDirLockedError

    deadline = time.monotonic() + LOCK_WAIT_SECONDS
    while True:
        try:
            return MilvusLite(data_dir)
        except DataDirLockedError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.1)


def _warm_analyser() -> None:
    with contextlib.suppress(ImportError):
        import jieba

        jieba.setLogLevel(logging.WARNING)
        jieba.initialize()


def child_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m retrieval_service.adapters.milvus.lite_process")
    p.add_argument("--data-dir", required=True)
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--parent", type=int, required=True)
    p.add_argument("--kill-with-parent", action="store_true")
    args = p.parse_args(argv)
    if args.kill_with_parent:
        _die_with_parent(args.parent)
    stop = threading.Event()

    def watch_stdin() -> None:
        # End of file: the parent closed the pipe (a clean stop) or died.
        while sys.stdin.buffer.read(4096):
            pass
        stop.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def report(line: str) -> None:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    try:
        db = _open(args.data_dir)
    except Exception as exc:  # a lock held by another process, a broken store, …
        report(f"{FAILED} {' '.join(str(exc).split())}")
        return 2
    from concurrent import futures

    import grpc
    from milvus_lite.adapter.grpc.servicer import MilvusServicer
    from pymilvus.grpc_gen import milvus_pb2_grpc

    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=10),
        options=[
            ("grpc.max_receive_message_length", _MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", _MAX_MESSAGE_BYTES),
            # A restart reuses the port: fail if someone else took it, never share it.
            ("grpc.so_reuseport", 0),
        ],
    )
    milvus_pb2_grpc.add_MilvusServiceServicer_to_server(MilvusServicer(db), server)
    try:
        port = server.add_insecure_port(f"127.0.0.1:{args.port}")
    except RuntimeError:
        port = 0
    if port == 0:
        db.close()  # type: ignore[attr-defined]
        report(f"{FAILED} cannot listen on 127.0.0.1:{args.port}")
        return 3
    server.start()
    report(f"{READY} {port}")
    # jieba loads its dictionary (≈ 0.5–0.7 s) on the first analysed row; load it now, while
    # the service starts, instead of inside the first ingest.
    threading.Thread(target=_warm_analyser, daemon=True).start()
    stop.wait()
    server.stop(grace=2).wait()
    db.close()  # type: ignore[attr-defined]
    return 0


if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1:]))
