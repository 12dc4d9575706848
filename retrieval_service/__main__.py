"""`python -m retrieval_service`: the composition root of the retrieval service (serve), and
`python -m retrieval_service ingest|list|delete …`: the CLI that calls the running service."""

from __future__ import annotations

import asyncio
import sys

from supermew.v1 import retrieval_pb2, retrieval_pb2_grpc

from retrieval_service.settings import SERVICE_NAME, RetrievalSettings
from shared.logs import configure_logging
from shared.serve import GrpcServer, serve


async def _serve(settings: RetrievalSettings) -> None:
    # Imported here: app imports the store, and pymilvus must not load before MILVUS_URI is
    # cleared (clear_milvus_env runs first in create_app).
    from retrieval_service.app import clear_milvus_env

    clear_milvus_env()
    from retrieval_service.app import create_app, seed_samples

    app = await create_app(settings)
    await seed_samples(app, settings.samples_dir)
    server = GrpcServer(
        settings,
        port=settings.retrieval_port,
        service_names=[SERVICE_NAME],
        add_servicers=lambda s: retrieval_pb2_grpc.add_RetrievalServiceServicer_to_server(
            app.servicer, s
        ),
    )
    assert retrieval_pb2.DESCRIPTOR  # descriptors registered for reflection
    await serve(server, on_stop=app.aclose)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv:
        from retrieval_service.cli import main as cli_main

        return cli_main(argv)
    settings = RetrievalSettings()  # read once, before pymilvus is imported
    configure_logging(settings.log_level, settings.log_format)
    asyncio.run(_serve(settings))
    return 0


if __name__ == "__main__":
    sys.exit(main())
