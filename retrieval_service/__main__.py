"""`python -m retrieval_service`: settings → logging → serve the RetrievalService that
`retrieval_service.bootstrap` wires; `python -m retrieval_service ingest|list|delete …` is the
CLI that calls the running service (retrieval_service.cli); `python -m retrieval_service db
upgrade|current` migrates or inspects the control-plane database (retrieval_service.db_command)."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

from retrieval_service.settings import RetrievalSettings
from shared.startup import run_service

if TYPE_CHECKING:
    from retrieval_service.core.ingest import Checkpoint

#: TEST HOOK, not a setting: `SUPERMEW_CRASH_AT=<point>` (one of `ingest.CRASH_POINTS`) makes
#: the process die like `kill -9` (exit status 137, nothing flushed or closed) when a write
#: reaches that point. The kill-anywhere test uses it to stop a real process at each step.
CRASH_AT_ENV = "SUPERMEW_CRASH_AT"
#: TEST HOOK, not a setting: `SUPERMEW_PAUSE_AT=<point>:<seconds>` makes a write wait that long
#: each time it reaches that point (its lease renewed meanwhile), logging one WARNING line
#: "TEST HOOK: pausing …" first. The lease test slows an ingest to several lease periods with
#: it, and kills a process while it waits.
PAUSE_AT_ENV = "SUPERMEW_PAUSE_AT"


def crash_hook(point: str | None) -> Checkpoint:
    """The checkpoint the composition root (bootstrap.serve_app) passes to the ingestor: a
    no-op, or an immediate process exit at `point`."""
    from retrieval_service.core.ingest import CRASH_POINTS, no_checkpoint

    if not point:
        return no_checkpoint
    if point not in CRASH_POINTS:
        raise SystemExit(f"{CRASH_AT_ENV}={point!r} is not one of {', '.join(CRASH_POINTS)}")

    async def crash(name: str) -> None:
        if name == point:
            os._exit(137)

    return crash


def pause_hook(spec: str | None, then: Checkpoint) -> Checkpoint:
    """`then` (the crash hook), preceded by a pause at the point `spec` names, if any."""
    import asyncio
    import logging

    from retrieval_service.core.ingest import CRASH_POINTS

    if not spec:
        return then
    point, _, seconds = spec.partition(":")
    try:
        delay = float(seconds)
    except ValueError:
        delay = -1.0
    if point not in CRASH_POINTS or delay < 0:
        raise SystemExit(f"{PAUSE_AT_ENV}={spec!r} is not <one of CRASH_POINTS>:<seconds>")

    async def pause(name: str) -> None:
        if name == point:
            logging.getLogger(__name__).warning("TEST HOOK: pausing %g s at %s", delay, name)
            await asyncio.sleep(delay)
        await then(name)

    return pause


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["db"]:
        from retrieval_service.db_command import main as db_main

        return db_main(argv[1:])
    if argv:
        from retrieval_service.cli import main as cli_main

        return cli_main(argv)
    checkpoint = pause_hook(os.environ.get(PAUSE_AT_ENV), crash_hook(os.environ.get(CRASH_AT_ENV)))
    return run_service(
        "retrieval_service", RetrievalSettings, partial(_serve, checkpoint=checkpoint)
    )


async def _serve(
    settings: RetrievalSettings, on_started: Callable[[], None], *, checkpoint: Checkpoint
) -> None:
    # Imported once the settings are read and the ports checked free (a busy port fails
    # before the slow import), and before pymilvus (bootstrap clears MILVUS_URI first).
    from retrieval_service.bootstrap import clear_milvus_env, serve_app
    from shared.logs import adopt_library_loggers

    # pymilvus installs its own stderr handler when first imported (lazily, deep in a call):
    # imported now, its loggers are routed through ours, so LOG_FORMAT=json stays JSON.
    clear_milvus_env()
    importlib.import_module("pymilvus")
    adopt_library_loggers()
    await serve_app(settings, on_started, checkpoint=checkpoint)


if __name__ == "__main__":
    sys.exit(main())
