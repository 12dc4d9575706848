"""The orchestrator service wired exactly as in production (`build_app`) against the scripted
model server and the scripted retrieval service, on ephemeral ports, plus a client stub."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import grpc
from supermew.v1 import orchestrator_pb2, orchestrator_pb2_grpc

from orchestrator_service.bootstrap import App, build_app
from orchestrator_service.settings import OrchestratorSettings
from tests.fakes.model_server import FakeModelServer, ModelScript
from tests.fakes.retrieval_servicer import FakeRetrieval, RetrievalScript

API_KEY = "sk-test-key"
MODELS = {"model": "main-model", "grade_model": "grade-model", "fast_model": "fast-model"}


@dataclass
class Stack:
    model: FakeModelServer
    retrieval: FakeRetrieval
    app: App
    channel: grpc.aio.Channel
    stub: orchestrator_pb2_grpc.OrchestratorServiceStub

    async def run(
        self, question: str, *, knowledge_bases: Sequence[str] = (), filter: str = "", **kw: Any
    ) -> orchestrator_pb2.RunResult:
        request = orchestrator_pb2.RunRequest(
            question=question, knowledge_bases=knowledge_bases, filter=filter
        )
        return await self.stub.Run(request, **kw)

    async def resume(
        self,
        snapshot: Any,
        answer: str,
        *,
        knowledge_bases: Sequence[str] = (),
        filter: str = "",
        **kw: Any,
    ) -> orchestrator_pb2.RunResult:
        request = orchestrator_pb2.ResumeRequest(
            resume_state=snapshot,
            user_answer=answer,
            knowledge_bases=knowledge_bases,
            filter=filter,
        )
        return await self.stub.Resume(request, **kw)

    async def aclose(self) -> None:
        await self.channel.close()
        await self.app.server.stop(0)
        await self.app.aclose()
        await self.retrieval.stop()
        await self.model.stop()


async def start_stack(
    model_script: ModelScript | None = None,
    retrieval_script: RetrievalScript | None = None,
    *,
    model_delay: float = 0.0,
    retrieval_addr: str | None = None,
    **settings_overrides: Any,
) -> Stack:
    model = await FakeModelServer(model_script, delay=model_delay).start()
    retrieval = await FakeRetrieval(retrieval_script).start()
    settings = OrchestratorSettings(
        _env_file=None,
        orchestrator_port=0,
        bind_host="127.0.0.1",
        retrieval_addr=retrieval_addr or retrieval.address,
        llm_base_url=model.base_url,
        llm_api_key=API_KEY,
        **{**MODELS, **settings_overrides},
    )
    app = build_app(settings)
    port = await app.server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    return Stack(
        model, retrieval, app, channel, orchestrator_pb2_grpc.OrchestratorServiceStub(channel)
    )
