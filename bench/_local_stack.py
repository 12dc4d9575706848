"""The whole local stack a bench asks questions of: a retrieval service on a scratch Milvus Lite
store (filled by the bench) and the orchestrator on the built-in local model in front of it,
both real gRPC servers on loopback."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import grpc
from google.longrunning import operations_pb2_grpc
from supermew.v1 import evaluation_pb2_grpc, orchestrator_pb2_grpc

from bench._retrieval_rig import MODES, Endpoint, bench_settings, scratch_db, serve_modes
from orchestrator_service.bootstrap import App, build_app
from orchestrator_service.settings import OrchestratorSettings
from retrieval_service.bootstrap import RetrievalApp, create_app


@dataclass(frozen=True, slots=True)
class LocalStack:
    orchestrator: orchestrator_pb2_grpc.OrchestratorServiceStub
    retrieval: Endpoint
    #: The orchestrator's EvaluationService and google.longrunning.Operations (its database
    #: a scratch SQLite file beside the store).
    evaluation: evaluation_pb2_grpc.EvaluationServiceStub
    operations: operations_pb2_grpc.OperationsStub


@asynccontextmanager
async def local_stack(
    prefix: str, fill: Callable[[RetrievalApp], Awaitable[object]], **orchestrator_settings: Any
) -> AsyncIterator[LocalStack]:
    """Both services, the store filled by `fill(app)` before the orchestrator starts; all of
    it stopped and removed afterwards. `orchestrator_settings` override (RUN_HISTORY, …)."""
    with scratch_db(prefix) as db:
        app = await create_app(bench_settings(db))
        orchestrator: App | None = None
        try:
            await fill(app)
            async with serve_modes(app, {"hybrid+merge": MODES["hybrid+merge"]}) as endpoints:
                retrieval = endpoints["hybrid+merge"]
                orchestrator = build_app(
                    OrchestratorSettings(
                        _env_file=None,
                        orchestrator_port=0,
                        bind_host="127.0.0.1",
                        retrieval_addr=retrieval.address,
                        llm_base_url=None,
                        log_level="WARNING",
                        orchestrator_database_url=f"sqlite+aiosqlite:///{db}.orchestrator.sqlite3",
                        **orchestrator_settings,
                    )
                )
                await orchestrator.start()
                port = await orchestrator.server.start()
                async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                    yield LocalStack(
                        orchestrator_pb2_grpc.OrchestratorServiceStub(channel),
                        retrieval,
                        evaluation_pb2_grpc.EvaluationServiceStub(channel),
                        operations_pb2_grpc.OperationsStub(channel),
                    )
        finally:
            if orchestrator is not None:
                await orchestrator.server.stop(0)
                await orchestrator.aclose()
            await app.aclose()
