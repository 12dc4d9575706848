"""The retrieval client against a real in-process retrieval server (the shared serve helper and
its error table): each downstream status carries its typed details (docs/api.md#error-details)
and arrives as the domain error the orchestrator's caller should see, decided from its code and
those details, never from its text; nothing of retrieval's own details leaks through."""

from __future__ import annotations

import asyncio
import hashlib
import json
from typing import ClassVar

import grpc
import pytest
from supermew.v1 import retrieval_pb2, retrieval_pb2_grpc

from orchestrator_service.retrieval_client import RetrievalClient
from retrieval_service.policy import RETRIEVAL_POLICIES
from retrieval_service.settings import SERVICE_NAME
from shared.auth import QUOTA_SPENT
from shared.error_details import ErrorDetails, abort_with, read_details, rich_status
from shared.errors import (
    ConfigurationError,
    DeadlineExceeded,
    DependencyUnavailable,
    InternalFailure,
    InvalidArgument,
    NotFound,
    ResourceExhausted,
)
from shared.logs import REQUEST_ID, REQUEST_ID_HEADER
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
            case "bad filter, in other words":
                raise InvalidArgument("filter", "未知字段 metadata.部门 (第 3 列)")
            case "exhausted":
                raise ResourceExhausted(SECRET_DETAIL)
            case "quota look-alike":
                # Load shedding whose words happen to be a quota refusal's: its reason is not.
                raise ResourceExhausted(f"{QUOTA_SPENT}; retry in 1.00 s")
            case "looks like the caller's filter":
                # A verdict on our own query whose message happens to start with "filter: ".
                await abort_with(context, LOOKS_LIKE_FILTER)
            case "untyped verdict":
                # The caller's NOT_FOUND as an older retrieval (or a proxy) answers it.
                await context.abort(grpc.StatusCode.NOT_FOUND, UNKNOWN_KB)
            case "rewritten by a proxy":
                # Details of another status than the call's own (a proxy rewrote the message
                # but passed the trailers on): they are not this status's details.
                await context.abort(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    "filter: rejected by the gateway",
                    trailing_metadata=tuple(BAD_FILTER.trailing_metadata),
                )
            case "misconfigured":
                raise ConfigurationError(SECRET_DETAIL)
            case "slow":
                await asyncio.sleep(5)
            case "bug":
                raise RuntimeError(SECRET_DETAIL)
        return retrieval_pb2.RetrieveResponse()


UNKNOWN_KB = "knowledge_bases[0]: knowledge_bases/nope does not exist"
BAD_FILTER = rich_status(
    grpc.StatusCode.INVALID_ARGUMENT,
    "filter: unexpected 'AND' at column 9",
    reason="INVALID_ARGUMENT",
    field="filter",
    description="unexpected 'AND' at column 9",
)
LOOKS_LIKE_FILTER = rich_status(
    grpc.StatusCode.INVALID_ARGUMENT,
    "filter: unexpected 'AND' at column 9",
    reason="INVALID_ARGUMENT",
    field="query",
    description="filter: unexpected 'AND' at column 9",
)


async def _serve(token: str | None = None, keys_file: str | None = None) -> GrpcServer:
    def add(server: grpc.aio.Server) -> None:
        retrieval_pb2_grpc.add_RetrievalServiceServicer_to_server(SteeredRetrieval(), server)

    server = GrpcServer(
        ServerSettings(auth_token=token, auth_keys_file=keys_file),
        port=0,
        service_names=[SERVICE_NAME],
        add_servicers=add,
        policies=RETRIEVAL_POLICIES,
    )
    await server.start()
    return server


@pytest.fixture
async def retrieval():
    server = await _serve()
    yield server
    await server.stop(0)


@pytest.mark.parametrize(
    ("query", "sent"),
    [
        ("invalid", ErrorDetails("INVALID_ARGUMENT", "query", None, SECRET_DETAIL)),
        ("unknown knowledge base", ErrorDetails("NOT_FOUND", "knowledge_bases[0]")),
        (
            "bad filter",
            ErrorDetails(
                "INVALID_ARGUMENT", "filter", None, "unexpected end of input at column 12"
            ),
        ),
        ("exhausted", ErrorDetails("RESOURCE_EXHAUSTED")),
        ("misconfigured", ErrorDetails("CONFIGURATION")),
        ("bug", ErrorDetails("INTERNAL")),
        ("untyped verdict", None),
    ],
)
async def test_retrieval_sends_typed_details(retrieval, query, sent) -> None:
    """What retrieval's status carries: an ErrorInfo naming the field (a BadRequest for an
    invalid one), beside the call's request id."""
    async with grpc.aio.insecure_channel(retrieval.address) as channel:
        stub = retrieval_pb2_grpc.RetrievalServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await stub.Retrieve(
                retrieval_pb2.RetrieveRequest(query=query), metadata=((REQUEST_ID_HEADER, "r-7"),)
            )
    assert read_details(raised.value) == sent
    assert (REQUEST_ID_HEADER, "r-7") in tuple(raised.value.trailing_metadata() or ())


@pytest.mark.parametrize(
    ("query", "error", "code", "details"),
    [
        # Retrieval's verdict on our own query (its ErrorInfo names `query`): ours.
        ("invalid", InternalFailure, grpc.StatusCode.INTERNAL, "retrieval failed"),
        # The caller's own knowledge_bases and filter (named by the ErrorInfo): theirs.
        ("unknown knowledge base", NotFound, grpc.StatusCode.NOT_FOUND, UNKNOWN_KB),
        (
            "bad filter",
            InvalidArgument,
            grpc.StatusCode.INVALID_ARGUMENT,
            "filter: unexpected end of input at column 12",
        ),
        (
            "bad filter, in other words",
            InvalidArgument,
            grpc.StatusCode.INVALID_ARGUMENT,
            "filter: 未知字段 metadata.部门 (第 3 列)",
        ),
        ("bug", InternalFailure, grpc.StatusCode.INTERNAL, "retrieval failed"),
        ("misconfigured", InternalFailure, grpc.StatusCode.INTERNAL, "retrieval failed"),
        (
            "exhausted",
            ResourceExhausted,
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            "the retrieval service is out of capacity; retry later",
        ),
        # The text decides nothing: these read like the caller's errors, but their details
        # say otherwise or are missing, so their code alone decides.
        (
            "quota look-alike",
            ResourceExhausted,
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            "the retrieval service is out of capacity; retry later",
        ),
        (
            "looks like the caller's filter",
            InternalFailure,
            grpc.StatusCode.INTERNAL,
            "retrieval failed",
        ),
        ("untyped verdict", InternalFailure, grpc.StatusCode.INTERNAL, "retrieval failed"),
        ("rewritten by a proxy", InternalFailure, grpc.StatusCode.INTERNAL, "retrieval failed"),
    ],
)
async def test_downstream_status_is_translated(retrieval, query, error, code, details) -> None:
    client = RetrievalClient.connect(retrieval.address)
    try:
        with pytest.raises(error) as raised:
            await client.retrieve(query)
        assert status_for(raised.value) == (code, details)
        if isinstance(raised.value, NotFound | InvalidArgument):
            assert raised.value.field == details.partition(": ")[0]
    finally:
        await client.aclose()


async def test_a_quota_refusal_of_the_callers_key_is_passed_on(tmp_path) -> None:
    """Retrieval's auth refuses a key past its quota (reason QUOTA_SPENT): that is about the
    caller's own key, so it is passed on with retrieval's words, which say when to retry."""
    key = "key-quota"
    keys_file = tmp_path / "keys.json"
    entry = {
        # Its own id: the refusals counter (supermew_rate_limited_total) is per process.
        "id": "client-errors-quota",
        "sha256": hashlib.sha256(key.encode()).hexdigest(),
        "role": "reader",
        "knowledge_bases": ["*"],
        "rate_per_second": 0.01,
        "burst": 1,
    }
    keys_file.write_text(json.dumps({"keys": [entry]}))
    server = await _serve(keys_file=str(keys_file))
    client = RetrievalClient.connect(server.address, auth_token=key)
    try:
        assert (await client.retrieve("anything")).docs == []
        with pytest.raises(ResourceExhausted) as raised:
            await client.retrieve("anything")
        code, details = status_for(raised.value) or (None, "")
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert details.startswith(f"{QUOTA_SPENT}; retry in ") and details.endswith(" s")
    finally:
        await client.aclose()
        await server.stop(0)


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
