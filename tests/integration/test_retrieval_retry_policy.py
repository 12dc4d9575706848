"""The orchestrator's retrieval channel (production options from
`RetrievalClient.connect`) retries an UNAVAILABLE Retrieve through gRPC's retry policy, a
bounded number of times and never past the call's deadline. The retrieval side is a real
in-process server (the shared serve helper) whose servicer fails the first calls."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from supermew.v1 import retrieval_pb2, retrieval_pb2_grpc

from orchestrator_service.retrieval_client import RETRY_SERVICE_CONFIG, RetrievalClient
from retrieval_service.policy import RETRIEVAL_POLICIES
from retrieval_service.settings import SERVICE_NAME
from shared.errors import DeadlineExceeded, DependencyUnavailable
from shared.serve import GrpcServer
from shared.settings import ServerSettings

MAX_ATTEMPTS = RETRY_SERVICE_CONFIG["methodConfig"][0]["retryPolicy"]["maxAttempts"]  # type: ignore[index]


class FlakyRetrieval(retrieval_pb2_grpc.RetrievalServiceServicer):
    """Answers UNAVAILABLE to the first `failures` calls (after `delay` seconds each)."""

    def __init__(self, failures: int, delay: float = 0.0) -> None:
        self.failures = failures
        self.delay = delay
        self.calls = 0

    async def Retrieve(self, request, context):
        self.calls += 1
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.calls <= self.failures:
            raise DependencyUnavailable("milvus", "the vector store cannot be reached")
        return retrieval_pb2.RetrieveResponse()


@pytest.fixture
async def serve_flaky():
    servers: list[GrpcServer] = []
    clients: list[RetrievalClient] = []

    async def start(servicer: FlakyRetrieval) -> RetrievalClient:
        def add(server: grpc.aio.Server) -> None:
            retrieval_pb2_grpc.add_RetrievalServiceServicer_to_server(servicer, server)

        server = GrpcServer(
            ServerSettings(),
            port=0,
            service_names=[SERVICE_NAME],
            add_servicers=add,
            policies=RETRIEVAL_POLICIES,
        )
        port = await server.start()
        servers.append(server)
        clients.append(RetrievalClient.connect(f"127.0.0.1:{port}", default_timeout=10))
        return clients[-1]

    yield start
    for client in clients:
        await client.aclose()
    for server in servers:
        await server.stop(0)


async def test_one_unavailable_answer_is_retried_transparently(serve_flaky) -> None:
    servicer = FlakyRetrieval(failures=1)
    client = await serve_flaky(servicer)
    found = await client.retrieve("tea")
    assert found.docs == [] and servicer.calls == 2


async def test_retries_stop_after_max_attempts(serve_flaky) -> None:
    servicer = FlakyRetrieval(failures=100)
    client = await serve_flaky(servicer)
    with pytest.raises(DependencyUnavailable):
        await client.retrieve("tea")
    assert servicer.calls == MAX_ATTEMPTS


async def test_retries_never_outlive_the_callers_deadline(serve_flaky) -> None:
    servicer = FlakyRetrieval(failures=100, delay=0.4)
    client = await serve_flaky(servicer)
    with pytest.raises(DeadlineExceeded) as err:
        await client.retrieve("tea", timeout=0.6)
    assert "caller's deadline" in str(err.value)
    assert servicer.calls < MAX_ATTEMPTS
