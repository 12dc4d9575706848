"""Both CLIs as subprocesses send SUPERMEW_API_KEY as `authorization: Bearer <key>`, else
AUTH_TOKEN, else nothing (docs/api.md#making-a-key): the headers a recording server saw."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
import pytest_asyncio
from supermew.v1 import orchestrator_pb2, orchestrator_pb2_grpc, retrieval_pb2, retrieval_pb2_grpc

from orchestrator_service.policy import ORCHESTRATOR_POLICIES
from orchestrator_service.settings import SERVICE_NAME as ORCHESTRATOR
from retrieval_service.policy import RETRIEVAL_POLICIES
from retrieval_service.settings import SERVICE_NAME as RETRIEVAL
from shared.serve import GrpcServer
from shared.settings import ServerSettings

pytestmark = [pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[2]


def _authorization(context: grpc.aio.ServicerContext) -> str:
    return next(
        (str(v) for k, v in context.invocation_metadata() or () if k == "authorization"), ""
    )


class Recorder(
    retrieval_pb2_grpc.RetrievalServiceServicer, orchestrator_pb2_grpc.OrchestratorServiceServicer
):
    def __init__(self) -> None:
        self.seen: list[str] = []

    async def ListDocuments(self, request, context):
        self.seen.append(_authorization(context))
        return retrieval_pb2.ListDocumentsResponse()

    async def Run(self, request, context):
        self.seen.append(_authorization(context))
        return orchestrator_pb2.RunResult(question=request.question, route="no_knowledge")


@pytest_asyncio.fixture
async def recorder() -> AsyncIterator[tuple[Recorder, int]]:
    servicer = Recorder()

    def add(server: grpc.aio.Server) -> None:
        retrieval_pb2_grpc.add_RetrievalServiceServicer_to_server(servicer, server)
        orchestrator_pb2_grpc.add_OrchestratorServiceServicer_to_server(servicer, server)

    server = GrpcServer(
        ServerSettings(),
        port=0,
        service_names=[RETRIEVAL, ORCHESTRATOR],
        add_servicers=add,
        policies={**RETRIEVAL_POLICIES, **ORCHESTRATOR_POLICIES},
    )
    port = await server.start()
    yield servicer, port
    await server.stop(0)


async def _cli(module: str, port: int, env_keys: dict[str, str], *args: str) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("AUTH_TOKEN", "SUPERMEW_API_KEY")}
    env.update(env_keys)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "gen"), env.get("PYTHONPATH", "")])
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", module, *args, "--addr", f"127.0.0.1:{port}",
        cwd=ROOT, env=env, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    await proc.wait()


@pytest.mark.parametrize(
    ("module", "args"),
    [("retrieval_service", ("list",)), ("orchestrator_service", ("ask", "q", "--no-answer"))],
)
async def test_both_clis_send_supermew_api_key_else_auth_token(recorder, module, args) -> None:
    servicer, port = recorder
    await _cli(module, port, {"SUPERMEW_API_KEY": "new-key", "AUTH_TOKEN": "old"}, *args)
    await _cli(module, port, {"AUTH_TOKEN": "old"}, *args)
    await _cli(module, port, {}, *args)
    assert servicer.seen == ["Bearer new-key", "Bearer old", ""]
