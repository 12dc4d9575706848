"""The retrieval service as the nodes see it: a `grpc.aio` stub wrapper that propagates the
caller's deadline and translates every status retrieval can answer with into a domain error
(docs/api.md#status-codes), so no downstream status leaks to the orchestrator's caller as if
it were about the caller's own request — except when it is: retrieval's verdict on the
`knowledge_bases`, `filter` and `index` the caller sent is passed on as the caller's NOT_FOUND
or INVALID_ARGUMENT (and, for an index that is not READY, FAILED_PRECONDITION) naming that
field. What is the caller's is decided from retrieval's typed
details (its ErrorInfo and BadRequest, shared/error_details.py), never from its message text;
a status without them is decided by its code alone. The channel retries an UNAVAILABLE
Retrieve (it is idempotent) within the call's deadline, and every query is cut to the length
retrieval accepts, because a rewrite adds generated text to a question that may already be at
the limit."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import grpc
from supermew.v1 import retrieval_pb2, retrieval_pb2_grpc

from orchestrator_service.runtime import UNSCOPED, Retrieval, RetrievalScope
from shared.auth import caller_key
from shared.codec import chunk_from_proto, retrieval_meta_from_proto
from shared.error_details import ERROR_REASONS, QUOTA_SPENT_REASON, ErrorDetails, read_details
from shared.errors import (
    DeadlineExceeded,
    DependencyUnavailable,
    DomainError,
    FailedPrecondition,
    InternalFailure,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
)
from shared.logs import REQUEST_ID, REQUEST_ID_HEADER

log = logging.getLogger(__name__)

DEPENDENCY = "retrieval"

# gRPC retries a Retrieve that ended UNAVAILABLE (a replica restarting, a connection reset
# before the call was sent) with backoff; the attempts share the call's deadline, so a retry
# never makes a call outlive it. Retrieve only changes nothing, so a repeat is harmless;
# ingest and delete are not retried.
RETRY_SERVICE_CONFIG: dict[str, object] = {
    "methodConfig": [
        {
            "name": [{"service": "supermew.v1.RetrievalService", "method": "Retrieve"}],
            "retryPolicy": {
                "maxAttempts": 3,
                "initialBackoff": "0.1s",
                "maxBackoff": "1s",
                "backoffMultiplier": 2,
                "retryableStatusCodes": ["UNAVAILABLE"],
            },
        }
    ]
}


@dataclass(frozen=True, slots=True)
class CallLimit:
    """The time limit one Retrieve call ran under and which setting imposed it."""

    seconds: float
    caller_deadline: bool  # False: RETRIEVAL_TIMEOUT_SECONDS, since the caller set none
    address: str = ""  # RETRIEVAL_ADDR, named when retrieval cannot be reached


def _unavailable(limit: CallLimit) -> DomainError:
    at = f" at {limit.address}" if limit.address else ""
    return DependencyUnavailable(DEPENDENCY, f"the retrieval service{at} did not serve the call")


def _deadline(limit: CallLimit) -> DomainError:
    if limit.caller_deadline:
        return DeadlineExceeded("the caller's deadline passed while retrieving")
    return DeadlineExceeded(
        f"retrieval did not answer within RETRIEVAL_TIMEOUT_SECONDS ({limit.seconds:g}s)"
    )


def _exhausted(limit: CallLimit) -> DomainError:
    return ResourceExhausted("the retrieval service is out of capacity; retry later")


def _denied(limit: CallLimit) -> DomainError:
    # The caller's key passed the orchestrator's own check of the knowledge bases: retrieval's
    # keys file says otherwise (the two files differ), and retrieval's word stands.
    return PermissionDenied("the retrieval service refused this key the knowledge bases named")


def _internal(limit: CallLimit) -> DomainError:
    # Generic on purpose: the downstream details name retrieval's internals, and the caller can
    # do nothing about them. They are logged instead.
    return InternalFailure("retrieval failed")


# The fields of a RetrieveRequest the caller sent through the orchestrator unchanged, each
# with whether it is repeated (then retrieval's ErrorInfo may name one element,
# "knowledge_bases[1]"). A verdict on any other field (the query, top_k) is about text or
# settings of our own.
CALLERS_FIELDS: dict[str, bool] = {"knowledge_bases": True, "filter": False, "index": False}

# The caller's own errors: a status whose ErrorInfo has this error's reason and names one of
# CALLERS_FIELDS is passed on as this error, naming that field
# (docs/api.md#what-the-orchestrator-answers-when-retrieval-fails).
CALLERS_ERRORS: dict[
    grpc.StatusCode, type[NotFound] | type[InvalidArgument] | type[FailedPrecondition]
] = {
    # An unknown (or just deleted) knowledge base or index.
    grpc.StatusCode.NOT_FOUND: NotFound,
    # A malformed filter, a knowledge base name that is not one, an index name that is not
    # one or is of another knowledge base.
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    # An index the caller chose that is not READY (still building, failed, being deleted).
    grpc.StatusCode.FAILED_PRECONDITION: FailedPrecondition,
}

# The CALLERS_ERRORS that are the caller's only about some of CALLERS_FIELDS: a
# FAILED_PRECONDITION about the index is the caller's choice of an index not READY; about any
# other field it is retrieval's store not fitting its configuration (ours, INTERNAL).
CALLERS_ONLY_ABOUT: dict[grpc.StatusCode, frozenset[str]] = {
    grpc.StatusCode.FAILED_PRECONDITION: frozenset({"index"}),
}


def is_callers_field(field: str | None) -> bool:
    """Whether an ErrorInfo's `field` names a field the caller sent (CALLERS_FIELDS):
    `knowledge_bases`, `knowledge_bases[i]`, `filter` or `index`."""
    name, bracket, rest = (field or "").partition("[")
    repeated = CALLERS_FIELDS.get(name)
    if repeated is None or not bracket:
        return repeated is not None
    index = rest.removesuffix("]")
    return repeated and rest.endswith("]") and index.isascii() and index.isdecimal()


# Every status Retrieve can end with, decided one by one (OK is not an error). NOT_FOUND and
# INVALID_ARGUMENT are INTERNAL unless CALLERS_ERRORS applies.
DOWNSTREAM_ERRORS: dict[grpc.StatusCode, Callable[[CallLimit], DomainError]] = {
    # Retrieval cancelled the call (it is shutting down and its drain ran out): another replica
    # or a retry can answer, exactly as when it is unreachable.
    grpc.StatusCode.CANCELLED: _unavailable,
    grpc.StatusCode.UNKNOWN: _internal,
    # The query is text this system produced (a rewrite, a merged clarification), and top_k
    # comes from our settings: a rejection is our failure, not the caller's invalid argument.
    # (A rejected `filter`, `knowledge_bases` or `index` is the caller's: see CALLERS_ERRORS.)
    grpc.StatusCode.INVALID_ARGUMENT: _internal,
    grpc.StatusCode.DEADLINE_EXCEEDED: _deadline,
    # Retrieve names no resource of its own but the caller's knowledge bases and index
    # (CALLERS_ERRORS).
    grpc.StatusCode.NOT_FOUND: _internal,
    grpc.StatusCode.ALREADY_EXISTS: _internal,
    grpc.StatusCode.PERMISSION_DENIED: _denied,
    grpc.StatusCode.RESOURCE_EXHAUSTED: _exhausted,
    # Retrieval's store does not fit its configuration: an operator's problem, not the caller's
    # (an index the caller chose that is not READY is theirs: see CALLERS_ERRORS).
    grpc.StatusCode.FAILED_PRECONDITION: _internal,
    grpc.StatusCode.ABORTED: _internal,
    grpc.StatusCode.OUT_OF_RANGE: _internal,
    # Version skew between the two services.
    grpc.StatusCode.UNIMPLEMENTED: _internal,
    grpc.StatusCode.INTERNAL: _internal,
    grpc.StatusCode.UNAVAILABLE: _unavailable,
    grpc.StatusCode.DATA_LOSS: _internal,
    # The key sent (the caller's, or our AUTH_TOKEN) is one retrieval does not know, though
    # the orchestrator does: a configuration mismatch between the two services. Passing
    # UNAUTHENTICATED on would tell the caller their own key is wrong.
    grpc.StatusCode.UNAUTHENTICATED: _internal,
}


def translate(
    code: grpc.StatusCode, limit: CallLimit, details: str = "", info: ErrorDetails | None = None
) -> DomainError:
    """The domain error for a Retrieve call that ended with `code`, `details` and the typed
    details `info` (docs/api.md#error-details; None: it had none) under `limit`:

    - the caller's own error (CALLERS_ERRORS) when `info` has that error's reason and names a
      field the caller sent (for a code in CALLERS_ONLY_ABOUT, one of the fields listed
      there), with that field and retrieval's words about it (the BadRequest's description;
      else `details` after "field: ");
    - RESOURCE_EXHAUSTED with retrieval's message (it says when to retry) when the reason is
      QUOTA_SPENT: retrieval refused the caller's own key;
    - else the status's entry in DOWNSTREAM_ERRORS.

    The message text decides nothing."""
    if info is not None:
        if code == grpc.StatusCode.RESOURCE_EXHAUSTED and info.reason == QUOTA_SPENT_REASON:
            return ResourceExhausted(details)
        callers, field = CALLERS_ERRORS.get(code), info.field
        only = CALLERS_ONLY_ABOUT.get(code)
        if (
            callers is not None
            and info.reason == ERROR_REASONS[callers]
            and is_callers_field(field)
            and (only is None or field in only)
        ):
            assert field is not None  # is_callers_field says so
            message = info.description
            if message is None:
                message = details.removeprefix(f"{field}: ")
            return callers(field, message)
    return DOWNSTREAM_ERRORS.get(code, _internal)(limit)


class RetrievalClient:
    def __init__(
        self,
        channel: grpc.aio.Channel,
        *,
        default_timeout: float = 30.0,
        auth_token: str | None = None,
        max_query_chars: int = 4000,
        address: str = "",
    ) -> None:
        self._channel = channel
        self.address = address
        self._max_query_chars = max_query_chars
        self._stub = retrieval_pb2_grpc.RetrievalServiceStub(channel)
        self._default_timeout = default_timeout
        self._metadata = (("authorization", f"Bearer {auth_token}"),) if auth_token else None

    @classmethod
    def connect(
        cls,
        address: str,
        *,
        default_timeout: float = 30.0,
        auth_token: str | None = None,
        credentials: grpc.ChannelCredentials | None = None,
        max_query_chars: int = 4000,
        interceptors: Sequence[grpc.aio.ClientInterceptor] = (),
    ) -> RetrievalClient:
        """A channel to RETRIEVAL_ADDR. Calls are balanced round-robin over every address the
        target resolves to (`dns:///retrieval:50051` behind a headless Service,
        `ipv4:10.0.0.1:50051,10.0.0.2:50051`); gRPC's default, pick_first, would pin every
        call to one replica. A single address behaves as before. `max_query_chars` is the
        longest query retrieval accepts (its MAX_QUESTION_CHARS). `credentials` = TLS (mTLS
        when they hold a client certificate); None = plaintext. `interceptors`: the tracing
        ones (client spans, `traceparent` in the metadata)."""
        options: list[tuple[str, str | int]] = [
            ("grpc.lb_policy_name", "round_robin"),
            ("grpc.enable_retries", 1),
            ("grpc.service_config", json.dumps(RETRY_SERVICE_CONFIG)),
        ]
        channel = (
            grpc.aio.secure_channel(address, credentials, options, interceptors=interceptors)
            if credentials is not None
            else grpc.aio.insecure_channel(address, options, interceptors=interceptors)
        )
        return cls(
            channel,
            default_timeout=default_timeout,
            auth_token=auth_token,
            max_query_chars=max_query_chars,
            address=address,
        )

    async def retrieve(
        self,
        query: str,
        *,
        scope: RetrievalScope = UNSCOPED,
        top_k: int | None = None,
        timeout: float | None = None,
    ) -> Retrieval:
        if len(query) > self._max_query_chars:
            # The question comes first in every generated query, so the cut drops only the
            # tail of the generated helper text.
            log.debug("query of %d characters cut to %d", len(query), self._max_query_chars)
            query = query[: self._max_query_chars]
        request = retrieval_pb2.RetrieveRequest(
            query=query,
            knowledge_bases=scope.knowledge_bases,
            filter=scope.filter,
            index=scope.index,
        )
        if top_k is not None:
            request.top_k = top_k
        limit = (
            CallLimit(self._default_timeout, caller_deadline=False, address=self.address)
            if timeout is None
            else CallLimit(timeout, caller_deadline=True, address=self.address)
        )
        try:
            response = await self._stub.Retrieve(
                request, timeout=limit.seconds, metadata=self._call_metadata()
            )
        except grpc.aio.AioRpcError as exc:
            error = translate(exc.code(), limit, exc.details() or "", read_details(exc))
            log.warning(
                "Retrieve to %s failed with %s (%s); answering %s",
                self.address or "retrieval",
                exc.code().name,
                exc.details(),
                type(error).__name__,
            )
            raise error from exc
        return Retrieval(
            docs=[chunk_from_proto(c) for c in response.docs],
            meta=retrieval_meta_from_proto(response.meta),
        )

    def _call_metadata(self) -> tuple[tuple[str, str], ...] | None:
        """The caller's own key (so retrieval decides what the caller may see:
        docs/api.md#api-keys), else our AUTH_TOKEN, and the request id of the call being
        served, so that both services log one request under one id (docs/api.md#access-logs);
        `traceparent` is added by the tracing interceptors."""
        key = caller_key()
        metadata = (("authorization", f"Bearer {key}"),) if key else self._metadata
        request_id = REQUEST_ID.get()
        if not request_id:
            return metadata
        return (*(metadata or ()), (REQUEST_ID_HEADER, request_id))

    async def aclose(self) -> None:
        await self._channel.close()
