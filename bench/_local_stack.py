"""The whole local stack a bench asks questions of: a retrieval service on a scratch Milvus Lite
store (filled by the bench) and the orchestrator on the built-in local model in front of it,
both real gRPC servers on loopback."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

import grpc
from supermew.v1 import orchestrator_pb2_grpc

from bench._retrieval_rig import MODES, Endpoint, bench_settings, scratch_db, serve_modes
from orchestrator_service.bootstrap import App, build_app
from orchestrator_service.settings import OrchestratorSettings
from retrieval_service.bootstrap import RetrievalApp, create_app


@dataclass(frozen=True, slots=True)
class LocalStack:
    orchestrator: orchestrator_pb2_grpc.OrchestratorServiceStub
    retrieval: Endpoint


@asynccontextmanager
async def local_stack(
    prefix: str, fill: Callable[[RetrievalApp], Awaitable[object]]
) -> AsyncIterator[LocalStack]:
    """Both services, the store filled by `fill(app)` before the orchestrator starts; all of
    it stopped and removed afterwards."""
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
                    )
                )
                port = await orchestrator.server.start()
                async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                    stub = orchestrator_pb2_grpc.OrchestratorServiceStub(channel)
                    yield LocalStack(stub, retrieval)
        finally:
            if orchestrator is not None:
                await orchestrator.server.stop(0)
                await orchestrator.aclose()
            await app.aclose()
