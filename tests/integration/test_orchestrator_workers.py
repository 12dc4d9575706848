"""ORCHESTRATOR_WORKERS (docs/api.md#workers): `python -m orchestrator_service` as N server
processes on one port, run for real against the scripted model server and retrieval service;
SIGTERM reaches every worker and drains it, a worker that dies stops the set."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from supermew.v1 import orchestrator_pb2, orchestrator_pb2_grpc

from orchestrator_service.settings import OrchestratorSettings
from shared.cpus import available_cpus
from tests.fakes.model_server import FakeModelServer, ModelScript, complexity, grade
from tests.fakes.retrieval_servicer import FakeRetrieval, RetrievalScript, chunk
from tests.integration.retrieval_harness import free_port

ROOT = Path(__file__).resolve().parents[2]
Q = "丹瑾是什么属性？"
SERVING = health_pb2.HealthCheckResponse.SERVING


def _listeners(port: int) -> int:
    """Sockets listening on `port` (Linux /proc/net/tcp and tcp6, state 0A): gRPC binds
    127.0.0.1 as the IPv4-mapped IPv6 address."""
    count = 0
    for table in ("tcp", "tcp6"):
        for row in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            fields = row.split()
            count += int(fields[1].endswith(f":{port:04X}") and fields[3] == "0A")
    return count


def _workers_of(pid: int) -> list[int]:
    """The spawned worker processes among `pid`'s children (not multiprocessing's tracker)."""
    workers = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if int(stat[1]) == pid and b"spawn_main" in cmdline:
            workers.append(int(entry.name))
    return sorted(workers)


@dataclass
class Workers:
    proc: asyncio.subprocess.Process
    port: int
    health_port: int
    metrics_port: int
    model: FakeModelServer

    def channel(self, port: int | None = None) -> grpc.aio.Channel:
        # A private subchannel pool: each channel is its own TCP connection, so the kernel
        # may hand it to either worker (it balances connections, not calls).
        return grpc.aio.insecure_channel(
            f"127.0.0.1:{port or self.port}", options=[("grpc.use_local_subchannel_pool", 1)]
        )


@asynccontextmanager
async def running_workers(count: int, *, model_delay: float = 0.0) -> AsyncIterator[Workers]:
    script = ModelScript()
    script.fallback = lambda task, q: (
        complexity("simple", "one fact")
        if task == "complexity_classification"
        else grade("strong", "sufficient", "answer")
    )
    retrieval_script = RetrievalScript().add(Q, [chunk("roles.md", "1", "丹瑾：衍射属性。")])
    async with (
        FakeModelServer(script, delay=model_delay) as model,
        FakeRetrieval(retrieval_script) as retrieval,
    ):
        port, health_port, metrics_port = free_port(), free_port(), free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AUTH_", "LLM_", "TLS_"))}
        env.update(
            ORCHESTRATOR_WORKERS=str(count),
            ORCHESTRATOR_PORT=str(port),
            HEALTH_PORT=str(health_port),
            METRICS_PORT=str(metrics_port),
            RETRIEVAL_ADDR=retrieval.address,
            LLM_BASE_URL=model.base_url,
            MODEL="m",
            BIND_HOST="127.0.0.1",
            LOG_LEVEL="WARNING",
        )
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "orchestrator_service", cwd=ROOT, env=env
        )
        workers = Workers(proc, port, health_port, metrics_port, model)
        try:
            await _until_serving(workers, count)
            yield workers
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()


async def _until_serving(workers: Workers, count: int) -> None:
    """Until `count` workers exist and the port answers health (any of them may answer)."""
    async with workers.channel() as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for _ in range(1200):
            if workers.proc.returncode is not None:
                raise AssertionError(f"the service exited with {workers.proc.returncode}")
            if _listeners(workers.port) == count:
                try:
                    reply = await health.Check(health_pb2.HealthCheckRequest(), timeout=1)
                    if reply.status == SERVING:
                        return
                except grpc.aio.AioRpcError:
                    pass
            await asyncio.sleep(0.1)
    raise AssertionError("the workers did not start")


async def _run(channel: grpc.aio.Channel) -> orchestrator_pb2.RunResponse:
    stub = orchestrator_pb2_grpc.OrchestratorServiceStub(channel)
    return await stub.Run(orchestrator_pb2.RunRequest(question=Q), timeout=30)


@pytest.mark.parametrize(("value", "expected"), [("3", 3), ("1", 1), ("auto", available_cpus())])
def test_the_workers_setting(value: str, expected: int) -> None:
    settings = OrchestratorSettings(_env_file=None, orchestrator_workers=value)  # type: ignore[arg-type]
    assert settings.worker_count == expected
    assert OrchestratorSettings(_env_file=None).worker_count == 1


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"orchestrator_workers": "0"}, "positive"),
        ({"orchestrator_workers": "2", "orchestrator_port": "0"}, "fixed ORCHESTRATOR_PORT"),
    ],
)
def test_invalid_workers_settings(env: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        OrchestratorSettings(_env_file=None, **env)  # type: ignore[arg-type]


async def test_two_workers_serve_one_port_then_sigterm_drains_every_one() -> None:
    async with running_workers(2, model_delay=0.5) as workers:
        children = _workers_of(workers.proc.pid)
        assert len(children) == 2
        # One listening socket per worker on each shared port, one /metrics (worker 0's).
        assert (_listeners(workers.port), _listeners(workers.health_port)) == (2, 2)
        assert _listeners(workers.metrics_port) == 1
        for port in (workers.port, workers.health_port):
            async with workers.channel(port) as channel:
                reply = await health_pb2_grpc.HealthStub(channel).Check(
                    health_pb2.HealthCheckRequest(), timeout=5
                )
                assert reply.status == SERVING
        channels = [workers.channel() for _ in range(8)]
        try:
            replies = await asyncio.gather(*(_run(c) for c in channels for _ in range(2)))
            assert {r.route for r in replies} == {"answer"}
            calls = [asyncio.ensure_future(_run(c)) for c in channels]
            while len(workers.model.requests) < len(replies) + len(calls):  # all in flight
                await asyncio.sleep(0.02)
            workers.proc.send_signal(signal.SIGTERM)
            replies = await asyncio.gather(*calls)
        finally:
            for channel in channels:
                await channel.close()
        assert {r.route for r in replies} == {"answer"}
        assert await asyncio.wait_for(workers.proc.wait(), 60) == 0
        assert all(not Path(f"/proc/{pid}").exists() for pid in children)


async def test_a_worker_that_dies_stops_the_set_with_a_failure_status() -> None:
    async with running_workers(2) as workers:
        first, second = _workers_of(workers.proc.pid)
        os.kill(first, signal.SIGKILL)
        assert await asyncio.wait_for(workers.proc.wait(), 60) != 0
        assert not Path(f"/proc/{second}").exists()
