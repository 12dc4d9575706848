"""The shared serve helper on a real in-process grpc.aio server: health, reflection, error
mapping, bearer auth and graceful drain."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from supermew.v1 import (
    orchestrator_pb2,
    orchestrator_pb2_grpc,
    retrieval_pb2,
    retrieval_pb2_grpc,
)

from orchestrator_service.policy import ORCHESTRATOR_POLICIES
from orchestrator_service.settings import SERVICE_NAME as ORCHESTRATOR
from retrieval_service.policy import RETRIEVAL_POLICIES
from retrieval_service.settings import SERVICE_NAME as RETRIEVAL
from shared.error_details import ErrorDetails, read_details
from shared.errors import (
    ConfigurationError,
    DeadlineExceeded,
    DependencyUnavailable,
    DomainError,
    InternalFailure,
    InvalidArgument,
    ModelOutputInvalid,
    ResourceExhausted,
)
from shared.logs import REQUEST_ID_HEADER
from shared.serve import GrpcServer
from shared.settings import ServerSettings

# One instance of every mapped domain error, and a bare DomainError (no meaning → a bug).
RAISED: dict[str, DomainError] = {
    "late": DeadlineExceeded("the caller's deadline passed while retrieving"),
    "busy": ResourceExhausted("the retrieval service is out of capacity; retry later"),
    "garbled": ModelOutputInvalid("evidence_grade", "no valid route"),
    "misconfigured": ConfigurationError("collection dimension does not fit"),
    "failed": InternalFailure("retrieval failed"),
    "bare": DomainError("/srv/secret/path"),
}


class ProbeServicer(retrieval_pb2_grpc.RetrievalServiceServicer):
    """A servicer whose behaviour each test steers, to exercise the serve helper itself."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.release = asyncio.Event()

    async def ListDocuments(self, request, context):
        # Slow call: used to prove that in-flight calls finish during the drain.
        self.started.set()
        await self.release.wait()
        return retrieval_pb2.ListDocumentsResponse(
            documents=[retrieval_pb2.DocumentInfo(filename="done.txt")]
        )

    async def Retrieve(self, request, context):
        if request.query == "bad":
            raise InvalidArgument("query", "must not be blank")
        if request.query == "down":
            raise DependencyUnavailable("milvus", "connection refused")
        if request.query in RAISED:
            raise RAISED[request.query]
        raise RuntimeError("secret internals")

    async def DeleteDocuments(self, request, context):
        return retrieval_pb2.DeleteDocumentsResponse(deleted_chunks=len(request.filenames))

    async def IngestDocuments(self, request, context):
        raise RuntimeError("the store refused the rows")


class StreamingProbe(orchestrator_pb2_grpc.OrchestratorServiceServicer):
    async def StreamRun(self, request, context):
        yield orchestrator_pb2.RunEvent(result=orchestrator_pb2.RunResult(question="first"))
        raise InvalidArgument("question", "too long")


async def _start(token: str | None = None, grace: float = 5.0):
    settings = ServerSettings(auth_token=token, shutdown_grace_seconds=grace)
    probe = ProbeServicer()

    def add(server: grpc.aio.Server) -> None:
        retrieval_pb2_grpc.add_RetrievalServiceServicer_to_server(probe, server)
        orchestrator_pb2_grpc.add_OrchestratorServiceServicer_to_server(StreamingProbe(), server)

    server = GrpcServer(
        settings,
        port=0,
        service_names=[RETRIEVAL, ORCHESTRATOR],
        add_servicers=add,
        policies={**RETRIEVAL_POLICIES, **ORCHESTRATOR_POLICIES},
    )
    await server.start()
    return server, probe


@pytest.fixture
async def running():
    server, probe = await _start()
    channel = grpc.aio.insecure_channel(server.address)
    yield server, probe, channel
    await channel.close()
    await server.stop(0)


async def _health(channel: grpc.aio.Channel, service: str) -> int:
    stub = health_pb2_grpc.HealthStub(channel)
    reply = await stub.Check(health_pb2.HealthCheckRequest(service=service))
    return reply.status


async def test_health_serving_for_empty_and_service_names(running):
    _, _, channel = running
    for name in ("", RETRIEVAL, ORCHESTRATOR):
        assert await _health(channel, name) == health_pb2.HealthCheckResponse.SERVING


async def test_reflection_lists_both_services(running):
    _, _, channel = running
    stub = reflection_pb2_grpc.ServerReflectionStub(channel)
    request = reflection_pb2.ServerReflectionRequest(list_services="")
    names = set()
    async for reply in stub.ServerReflectionInfo(iter([request])):
        names |= {s.name for s in reply.list_services_response.service}
    assert {RETRIEVAL, ORCHESTRATOR, "grpc.health.v1.Health"} <= names


@pytest.mark.parametrize(
    ("query", "code", "message", "details"),
    [
        (
            "bad",
            grpc.StatusCode.INVALID_ARGUMENT,
            "query: must not be blank",
            ErrorDetails("INVALID_ARGUMENT", "query", None, "must not be blank"),
        ),
        (
            "down",
            grpc.StatusCode.UNAVAILABLE,
            "milvus unavailable: connection refused",
            ErrorDetails("DEPENDENCY_UNAVAILABLE", dependency="milvus"),
        ),
        ("boom", grpc.StatusCode.INTERNAL, "internal error", ErrorDetails("INTERNAL")),
        (
            "late",
            grpc.StatusCode.DEADLINE_EXCEEDED,
            "the caller's deadline passed while retrieving",
            ErrorDetails("DEADLINE_EXCEEDED"),
        ),
        (
            "busy",
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            RAISED["busy"].message,
            ErrorDetails("RESOURCE_EXHAUSTED"),
        ),
        (
            "garbled",
            grpc.StatusCode.INTERNAL,
            "model task evidence_grade: no valid route",
            ErrorDetails("MODEL_OUTPUT_INVALID"),
        ),
        (
            "misconfigured",
            grpc.StatusCode.FAILED_PRECONDITION,
            RAISED["misconfigured"].message,
            ErrorDetails("CONFIGURATION"),
        ),
        ("failed", grpc.StatusCode.INTERNAL, "retrieval failed", ErrorDetails("INTERNAL")),
        ("bare", grpc.StatusCode.INTERNAL, "internal error", ErrorDetails("INTERNAL")),
    ],
)
async def test_domain_errors_map_to_status_codes(running, query, code, message, details):
    _, _, channel = running
    stub = retrieval_pb2_grpc.RetrievalServiceStub(channel)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.Retrieve(
            retrieval_pb2.RetrieveRequest(query=query), metadata=((REQUEST_ID_HEADER, "r-42"),)
        )
    assert err.value.code() == code
    assert err.value.details() == message
    # The typed details (docs/api.md#error-details), beside the call's request id.
    assert read_details(err.value) == details
    assert (REQUEST_ID_HEADER, "r-42") in tuple(err.value.trailing_metadata() or ())


async def test_stream_error_after_first_event_maps_to_status(running):
    _, _, channel = running
    stub = orchestrator_pb2_grpc.OrchestratorServiceStub(channel)
    events = []
    with pytest.raises(grpc.aio.AioRpcError) as err:
        async for event in stub.StreamRun(orchestrator_pb2.RunRequest(question="q")):
            events.append(event)
    assert [e.result.question for e in events] == ["first"]
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.value.details() == "question: too long"
    assert read_details(err.value) == ErrorDetails("INVALID_ARGUMENT", "question", None, "too long")


async def test_unimplemented_rpc_keeps_grpc_answer(running):
    _, _, channel = running
    stub = orchestrator_pb2_grpc.OrchestratorServiceStub(channel)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.Run(orchestrator_pb2.RunRequest(question="q"))
    assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED


async def test_graceful_shutdown_lets_the_in_flight_call_finish():
    server, probe = await _start(grace=5.0)
    channel = grpc.aio.insecure_channel(server.address)
    stub = retrieval_pb2_grpc.RetrievalServiceStub(channel)
    in_flight = asyncio.ensure_future(stub.ListDocuments(retrieval_pb2.ListDocumentsRequest()))
    await asyncio.wait_for(probe.started.wait(), 5)

    stopping = asyncio.ensure_future(server.stop())
    probe.release.set()
    reply = await asyncio.wait_for(in_flight, 5)
    assert [d.filename for d in reply.documents] == ["done.txt"]
    await asyncio.wait_for(stopping, 10)
    await channel.close()


async def test_health_reports_not_serving_to_a_watcher_on_shutdown():
    server, _ = await _start(grace=1.0)
    channel = grpc.aio.insecure_channel(server.address)
    watch = health_pb2_grpc.HealthStub(channel).Watch(
        health_pb2.HealthCheckRequest(service=RETRIEVAL)
    )
    seen = [(await watch.read()).status]
    stopping = asyncio.ensure_future(server.stop())
    # The watch is itself an in-flight call, so it hears NOT_SERVING during the drain.
    seen.append((await asyncio.wait_for(watch.read(), 5)).status)
    await stopping
    await channel.close()
    assert seen == [
        health_pb2.HealthCheckResponse.SERVING,
        health_pb2.HealthCheckResponse.NOT_SERVING,
    ]


async def test_bearer_token_required_but_health_and_reflection_stay_open():
    server, _ = await _start(token="s3cret")
    channel = grpc.aio.insecure_channel(server.address)
    stub = retrieval_pb2_grpc.RetrievalServiceStub(channel)
    request = retrieval_pb2.DeleteDocumentsRequest(filenames=["a.txt"])
    try:
        for metadata in (None, (("authorization", "Bearer wrong"),)):
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await stub.DeleteDocuments(request, metadata=metadata)
            assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        ok = await stub.DeleteDocuments(request, metadata=(("authorization", "Bearer s3cret"),))
        assert ok.deleted_chunks == 1
        assert await _health(channel, "") == health_pb2.HealthCheckResponse.SERVING
        assert await _health(channel, RETRIEVAL) == health_pb2.HealthCheckResponse.SERVING
        # A streaming RPC is denied the same way.
        ostub = orchestrator_pb2_grpc.OrchestratorServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            async for _ in ostub.StreamRun(orchestrator_pb2.RunRequest(question="q")):
                pass
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    finally:
        await channel.close()
        await server.stop(0)


async def _reflected_names(channel: grpc.aio.Channel, service: str) -> set[str]:
    """list_services over reflection `service` (v1 shares v1alpha's messages on the wire)."""
    call = channel.stream_stream(
        f"/{service}/ServerReflectionInfo",
        request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
        response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
    )
    names: set[str] = set()
    async for reply in call(iter([reflection_pb2.ServerReflectionRequest(list_services="")])):
        names |= {s.name for s in reply.list_services_response.service}
    return names


@pytest.mark.parametrize(
    "reflection",
    ["grpc.reflection.v1.ServerReflection", "grpc.reflection.v1alpha.ServerReflection"],
)
async def test_reflection_v1_and_v1alpha_stay_open_under_auth_token(reflection):
    # buf curl asks grpc.reflection.v1 first; it was refused UNAUTHENTICATED under AUTH_TOKEN.
    server, _ = await _start(token="s3cret")
    channel = grpc.aio.insecure_channel(server.address)
    try:
        names = await _reflected_names(channel, reflection)
        assert {RETRIEVAL, ORCHESTRATOR, "grpc.health.v1.Health"} <= names
        assert await _health(channel, "") == health_pb2.HealthCheckResponse.SERVING
    finally:
        await channel.close()
        await server.stop(0)


async def test_a_failed_call_is_logged_naming_its_documents_and_knowledge_base(running, caplog):
    # The log line of a failed ingest named no file.
    _, _, channel = running
    stub = retrieval_pb2_grpc.RetrievalServiceStub(channel)
    request = retrieval_pb2.IngestDocumentsRequest(
        knowledge_base="hr",
        documents=[
            retrieval_pb2.SourceDocument(filename="leave.md", content=b"secret content"),
            retrieval_pb2.SourceDocument(filename="x.md", document_id="policies/pay.md"),
        ],
    )
    with caplog.at_level("ERROR", logger="shared.serve"), pytest.raises(grpc.aio.AioRpcError):
        await stub.IngestDocuments(request)
    [line] = [r.getMessage() for r in caplog.records if r.name == "shared.serve"]
    assert "IngestDocuments" in line and "knowledge base hr" in line
    assert "documents leave.md, policies/pay.md" in line
    assert "secret content" not in line
