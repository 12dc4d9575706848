"""`python -m retrieval_service`: the composition root of the retrieval service."""

from __future__ import annotations

import asyncio

from supermew.v1 import retrieval_pb2  # noqa: F401  (descriptors for reflection)

from retrieval_service.settings import SERVICE_NAME, RetrievalSettings
from shared.logs import configure_logging
from shared.serve import GrpcServer, serve


def main() -> None:
    settings = RetrievalSettings()
    configure_logging(settings.log_level, settings.log_format)
    # The RPCs are built by the retrieval issue; until then gRPC answers UNIMPLEMENTED.
    server = GrpcServer(
        settings,
        port=settings.retrieval_port,
        service_names=[SERVICE_NAME],
        add_servicers=lambda _server: None,
    )
    asyncio.run(serve(server))


if __name__ == "__main__":
    main()
