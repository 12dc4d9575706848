"""The retrieval client against a real in-process retrieval server (the shared serve helper and
its error table): each downstream status arrives as the domain error the orchestrator's caller
should see, and nothing of retrieval's own details leaks through."""

from __future__ import annotations

import asyncio
from typing import ClassVar

import grpc
import pytest
from supermew.v1 import retrieval_pb2, retrieval_pb2_grpc

from orchestrator_service.retrieval_client import RetrievalClient
from retrieval_service.settings import SERVICE_NAME
from shared.errors import (
    ConfigurationError,
    DeadlineExceeded,
    DependencyUnavailable,
    InternalFailure,
    InvalidArgument,
    NotFound,
    ResourceExhausted,
)
from shared.logs import REQUEST_ID
from shared.serve import GrpcServer, status_for
from shared.settings import ServerSettings

SECRET_DETAIL = "collection /srv/secret/path.db filter chunk_level == 3"


class SteeredRetrieval(retrieval_pb2_grpc.RetrievalServiceServicer):
    """Answers each query with the failure it names."""

    #: The metadata of the last call, with the request id the server logged it under.
    seen: ClassVar[dict[str, str]] = {}

    async def Retrieve(self, request, context):
        SteeredRetrieval.seen = {
            **dict(context.invocation_metadata() or ()),
            "logged-as": REQUEST_ID.get(),
        }
        match request.query:
            case "invalid":
                raise InvalidArgument("query", SECRET_DETAIL)
            case "unknown knowledge base":
                raise NotFound("knowledge_bases[0]", "knowledge_bases/nope does not exist")
            case "bad filter":
                raise InvalidArgument("filter", "unexpected end of input at column 12")
            case "exhausted":
                raise ResourceExhausted(SECRET_DETAIL)
            case "misconfigured":
                raise ConfigurationError(SECRET_DETAIL)
            case "slow":
                await asyncio.sleep(5)
            case "bug":
                raise RuntimeError(SECRET_DETAIL)
        return retrieval_pb2.RetrieveResponse()


async def _serve(token: str | None = None) -> GrpcServer:
    def add(server: grpc.aio.Server) -> None:
        retrieval_pb2_grpc.add_RetrievalServiceServicer_to_server(SteeredRetrieval(), server)

    server = GrpcServer(
        ServerSettings(auth_token=token), port=0, service_names=[SERVICE_NAME], add_servicers=add
    )
    await server.start()
    return server


@pytest.fixture
async def retrieval():
    server = await _serve()
    yield server
    await server.stop(0)


@pytest.mark.parametrize(
    ("query", "error", "code", "details"),
    [
        ("invalid", InternalFailure, grpc.StatusCode.INTERNAL, "retrieval failed"),
        # The caller's own knowledge_bases and filter: retrieval's verdict is theirs.
        (
            "unknown knowledge base",
            NotFound,
            grpc.StatusCode.NOT_FOUND,
            "knowledge_bases[0]: knowledge_bases/nope does not exist",
        ),
        (
            "bad filter",
            InvalidArgument,
            grpc.StatusCode.INVALID_ARGUMENT,
            "filter: unexpected end of input at column 12",
        ),
        ("bug", InternalFailure, grpc.StatusCode.INTERNAL, "retrieval failed"),
        ("misconfigured", InternalFailure, grpc.StatusCode.INTERNAL, "retrieval failed"),
        (
            "exhausted",
            ResourceExhausted,
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            "the retrieval service is out of capacity; retry later",
        ),
    ],
)
async def test_downstream_status_is_translated(retrieval, query, error, code, details) -> None:
    client = RetrievalClient.connect(retrieval.address)
    try:
        with pytest.raises(error) as raised:
            await client.retrieve(query)
        assert status_for(raised.value) == (code, details)
    finally:
        await client.aclose()


async def test_caller_deadline_is_named(retrieval) -> None:
    client = RetrievalClient.connect(retrieval.address, default_timeout=30.0)
    try:
        with pytest.raises(DeadlineExceeded, match="the caller's deadline passed"):
            await client.retrieve("slow", timeout=0.2)
    finally:
        await client.aclose()


async def test_retrieval_timeout_setting_is_named(retrieval) -> None:
    client = RetrievalClient.connect(retrieval.address, default_timeout=0.2)
    try:
        with pytest.raises(DeadlineExceeded, match=r"RETRIEVAL_TIMEOUT_SECONDS \(0.2s\)"):
            await client.retrieve("slow")
    finally:
        await client.aclose()


async def test_stopped_retrieval_is_unavailable() -> None:
    server = await _serve()
    address = server.address
    await server.stop(0)
    client = RetrievalClient.connect(address, default_timeout=5.0)
    try:
        with pytest.raises(DependencyUnavailable) as raised:
            await client.retrieve("anything")
        assert status_for(raised.value) == (
            grpc.StatusCode.UNAVAILABLE,
            # The address tried: a RETRIEVAL_ADDR pointing elsewhere is seen at once.
            f"retrieval unavailable: the retrieval service at {address} did not serve the call",
        )
    finally:
        await client.aclose()


async def test_wrong_orchestrator_token_is_not_the_callers_unauthenticated() -> None:
    server = await _serve(token="right")
    client = RetrievalClient.connect(server.address, auth_token="wrong")
    try:
        with pytest.raises(InternalFailure):
            await client.retrieve("anything")
        right = RetrievalClient.connect(server.address, auth_token="right")
        assert (await right.retrieve("anything")).docs == []
        await right.aclose()
    finally:
        await client.aclose()
        await server.stop(0)


async def test_the_callers_request_id_reaches_retrieval(retrieval) -> None:
    # One request, one id: the orchestrator's call to retrieval carries the x-request-id of
    # the call it serves, and retrieval logs it under that id (it used to mint its own).
    client = RetrievalClient.connect(retrieval.address)
    token = REQUEST_ID.set("my-req-123")
    try:
        await client.retrieve("anything")
    finally:
        REQUEST_ID.reset(token)
        await client.aclose()
    assert SteeredRetrieval.seen["x-request-id"] == "my-req-123"
    assert SteeredRetrieval.seen["logged-as"] == "my-req-123"
