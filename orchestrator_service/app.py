"""Composition of the orchestrator service from one settings object: the model client, the
retrieval client, the core and the gRPC server. `__main__` and the integration tests both
build the service through `build_app`, so tests exercise the production wiring."""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator_service.metrics import InstrumentedModelClient
from orchestrator_service.models import build_model_client
from orchestrator_service.models.base import ModelClient
from orchestrator_service.orchestrator import Orchestrator
from orchestrator_service.retrieval_client import RetrievalClient
from orchestrator_service.server import add_servicer
from orchestrator_service.settings import SERVICE_NAME, OrchestratorSettings
from shared.serve import GrpcServer
from shared.tls import channel_credentials
from shared.tracing import client_interceptors


@dataclass
class App:
    server: GrpcServer
    core: Orchestrator
    model: ModelClient
    retrieval: RetrievalClient

    async def aclose(self) -> None:
        await self.model.aclose()
        await self.retrieval.aclose()


def build_app(settings: OrchestratorSettings, *, model: ModelClient | None = None) -> App:
    """Must be called inside the event loop that will serve (grpc.aio channels bind to it)."""
    model = InstrumentedModelClient(model or build_model_client(settings))
    retrieval = RetrievalClient.connect(
        settings.retrieval_addr,
        default_timeout=settings.retrieval_timeout_seconds,
        auth_token=settings.auth_token,
        max_query_chars=settings.max_question_chars,
        credentials=channel_credentials(
            settings.retrieval_tls_ca_file,
            settings.retrieval_tls_cert_file,
            settings.retrieval_tls_key_file,
        )
        if settings.retrieval_tls_ca_file
        else None,
        interceptors=client_interceptors(),
    )
    core = Orchestrator(model, retrieval, max_question_chars=settings.max_question_chars)
    server = GrpcServer(
        settings,
        port=settings.orchestrator_port,
        port_setting="ORCHESTRATOR_PORT",
        service_names=[SERVICE_NAME],
        add_servicers=add_servicer(core),
    )
    return App(server=server, core=core, model=model, retrieval=retrieval)
