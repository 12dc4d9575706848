"""`python -m retrieval_service`: the composition root of the retrieval service (serve), and
`python -m retrieval_service ingest|list|delete …`: the CLI that calls the running service."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from supermew.v1 import retrieval_pb2, retrieval_pb2_grpc

from retrieval_service.settings import SERVICE_NAME, RetrievalSettings
from shared.errors import ConfigurationError
from shared.serve import GrpcServer, serve
from shared.startup import run_service

if TYPE_CHECKING:
    from retrieval_service.core.ingest import Checkpoint

#: TEST HOOK, not a setting: `SUPERMEW_CRASH_AT=<point>` (one of `ingest.CRASH_POINTS`) makes
#: the process die like `kill -9` (exit status 137, nothing flushed or closed) when a write
#: reaches that point. The kill-anywhere test uses it to stop a real process at each step.
CRASH_AT_ENV = "SUPERMEW_CRASH_AT"


def crash_hook(point: str | None) -> Checkpoint:
    """The checkpoint the composition root passes to the ingestor: a no-op, or an immediate
    process exit at `point`."""
    from retrieval_service.core.ingest import CRASH_POINTS, no_checkpoint

    if not point:
        return no_checkpoint
    if point not in CRASH_POINTS:
        raise SystemExit(f"{CRASH_AT_ENV}={point!r} is not one of {', '.join(CRASH_POINTS)}")

    async def crash(name: str) -> None:
        if name == point:
            os._exit(137)

    return crash


async def _serve(settings: RetrievalSettings, on_started: Callable[[], None]) -> None:
    # Imported here: app imports the store, and pymilvus must not load before MILVUS_URI is
    # cleared (clear_milvus_env runs first in create_app).
    from retrieval_service.bootstrap import clear_milvus_env

    clear_milvus_env()
    from retrieval_service.adapters.milvus.connection import is_embedded_uri
    from retrieval_service.bootstrap import create_app, reconcile_periodically, seed_samples
    from retrieval_service.core.errors import STORE_FAILURES

    checkpoint = crash_hook(os.environ.get(CRASH_AT_ENV))
    try:
        app = await create_app(settings, checkpoint=checkpoint)
    except STORE_FAILURES as exc:
        # Milvus Lite reports a data directory another process holds as a failed open; a
        # server URI as a failed connection. Either way the operator fixes MILVUS_URI.
        what = (
            "cannot open the Milvus Lite data directory (is another process using it?)"
            if is_embedded_uri(settings.milvus_uri)
            else "cannot connect to the Milvus server (or MILVUS_TOKEN is refused)"
        )
        raise ConfigurationError(f"MILVUS_URI: {what}") from exc
    await seed_samples(app, settings.samples_dir)
    reconciler = asyncio.create_task(reconcile_periodically(app))
    server = GrpcServer(
        settings,
        port=settings.retrieval_port,
        port_setting="RETRIEVAL_PORT",
        service_names=[SERVICE_NAME],
        add_servicers=lambda s: retrieval_pb2_grpc.add_RetrievalServiceServicer_to_server(
            app.servicer, s
        ),
    )
    assert retrieval_pb2.DESCRIPTOR  # descriptors registered for reflection
    if app.store.lite is not None:
        # The Milvus Lite child died → NOT_SERVING until its restart (lite_process.py).
        app.store.lite.on_health = server.set_serving

    async def stop() -> None:
        reconciler.cancel()
        await app.aclose()

    await serve(server, on_stop=stop, on_started=on_started)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv:
        from retrieval_service.cli import main as cli_main

        return cli_main(argv)
    # Settings are read once, before pymilvus is imported.
    return run_service("retrieval_service", RetrievalSettings, _serve)


if __name__ == "__main__":
    sys.exit(main())
