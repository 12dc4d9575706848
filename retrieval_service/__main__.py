"""`python -m retrieval_service`: settings → logging → serve the RetrievalService that
`retrieval_service.bootstrap` wires; `python -m retrieval_service ingest|list|delete …` is the
CLI that calls the running service (retrieval_service.cli)."""

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


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv:
        from retrieval_service.cli import main as cli_main

        return cli_main(argv)
    checkpoint = crash_hook(os.environ.get(CRASH_AT_ENV))
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
