"""`python -m orchestrator_service`: the composition root of the orchestrator service."""

from __future__ import annotations

import asyncio

from supermew.v1 import orchestrator_pb2  # noqa: F401  (descriptors for reflection)

from orchestrator_service.settings import SERVICE_NAME, OrchestratorSettings
from shared.logs import configure_logging
from shared.serve import GrpcServer, serve


def main() -> None:
    settings = OrchestratorSettings()
    configure_logging(settings.log_level, settings.log_format)
    # The RPCs are built by the orchestrator issue; until then gRPC answers UNIMPLEMENTED.
    server = GrpcServer(
        settings,
        port=settings.orchestrator_port,
        service_names=[SERVICE_NAME],
        add_servicers=lambda _server: None,
    )
    asyncio.run(serve(server))


if __name__ == "__main__":
    main()
