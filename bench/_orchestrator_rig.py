"""Shared rig of the orchestrator benchmarks: the scripted model server and retrieval service
in this process, and the orchestrator either in-process (`in_process`) or as its own
`python -m orchestrator_service` process (`subprocess_service`), the way it is deployed."""

from __future__ import annotations

import asyncio
import os
import socket
import statistics
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from supermew.v1 import orchestrator_pb2_grpc

from tests.fakes.model_server import FakeModelServer, ModelScript
from tests.fakes.retrieval_servicer import FakeRetrieval, RetrievalScript

ROOT = Path(__file__).resolve().parent.parent


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def median(values: list[float]) -> float:
    return statistics.median(values)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@asynccontextmanager
async def fakes(
    model_script: ModelScript, retrieval_script: RetrievalScript, *, model_delay: float
) -> AsyncIterator[tuple[FakeModelServer, FakeRetrieval]]:
    model = await FakeModelServer(model_script, delay=model_delay).start()
    retrieval = await FakeRetrieval(retrieval_script).start()
    try:
        yield model, retrieval
    finally:
        await retrieval.stop()
        await model.stop()


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process has used so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Service:
    stub: orchestrator_pb2_grpc.OrchestratorServiceStub
    pid: int

    def cpu_seconds(self) -> float:
        return process_cpu_seconds(self.pid)


@asynccontextmanager
async def subprocess_service(
    model: FakeModelServer, retrieval: FakeRetrieval
) -> AsyncIterator[Service]:
    """`python -m orchestrator_service` on a free port, wired to the fakes by environment."""
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AUTH_", "LLM_"))}
    env.update(
        ORCHESTRATOR_PORT=str(port),
        RETRIEVAL_ADDR=retrieval.address,
        LLM_BASE_URL=model.base_url,
        LLM_API_KEY="bench-key",
        MODEL="bench-model",
        LOG_LEVEL="WARNING",
        BIND_HOST="127.0.0.1",
        PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "gen"), env.get("PYTHONPATH", "")]),
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "orchestrator_service", cwd=ROOT, env=env
    )
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    try:
        health = health_pb2_grpc.HealthStub(channel)
        for _ in range(600):
            if proc.returncode is not None:
                raise RuntimeError(f"orchestrator exited with {proc.returncode}")
            try:
                reply = await health.Check(  # type: ignore[attr-defined]  # the stubs' sync Check
                    health_pb2.HealthCheckRequest(), timeout=0.5
                )
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    break
            except grpc.aio.AioRpcError:
                await asyncio.sleep(0.1)
        yield Service(orchestrator_pb2_grpc.OrchestratorServiceStub(channel), proc.pid)
    finally:
        await channel.close()
        if proc.returncode is None:
            proc.terminate()
            await proc.wait()
