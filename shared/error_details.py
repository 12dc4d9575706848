"""The rich error model between the services (AIP-193; docs/api.md#error-details): every
domain error's status carries, in its `grpc-status-details-bin` trailer, a `google.rpc.Status`
(the call's own code and message) with an `ErrorInfo` (domain `supermew.v1`, a `reason` per
kind of error, the request `field` or the `dependency` it is about in `metadata`) and, for
INVALID_ARGUMENT, a `BadRequest` naming the field. A caller decides from these details, never
from the message text (the orchestrator does so with retrieval's,
orchestrator_service/retrieval_client.py). Statuses are built and read with grpcio-status
(`rpc_status.to_status`, `rpc_status.from_call`)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final, NoReturn

import grpc
from google.protobuf import any_pb2
from google.protobuf.message import DecodeError
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from shared.errors import (
    AlreadyExists,
    ConfigurationError,
    DeadlineExceeded,
    DependencyRejected,
    DependencyUnavailable,
    DomainError,
    FailedPrecondition,
    InternalFailure,
    InvalidArgument,
    ModelOutputInvalid,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
)

DOMAIN: Final = "supermew.v1"
STATUS_DETAILS_KEY: Final = "grpc-status-details-bin"
#: The reason of a call refused because the caller's key spent its quota (shared/auth.py).
QUOTA_SPENT_REASON: Final = "QUOTA_SPENT"

#: `ErrorInfo.reason` of each domain error, the nearest class in an error's MRO deciding (as
#: for its status code, shared/serve.py STATUS_FOR_ERROR). Keyed by the same classes.
ERROR_REASONS: Final[dict[type[DomainError], str]] = {
    InvalidArgument: "INVALID_ARGUMENT",
    NotFound: "NOT_FOUND",
    AlreadyExists: "ALREADY_EXISTS",
    PermissionDenied: "PERMISSION_DENIED",
    FailedPrecondition: "FAILED_PRECONDITION",
    DependencyUnavailable: "DEPENDENCY_UNAVAILABLE",
    DeadlineExceeded: "DEADLINE_EXCEEDED",
    ResourceExhausted: "RESOURCE_EXHAUSTED",
    DependencyRejected: "DEPENDENCY_REJECTED",
    ModelOutputInvalid: "MODEL_OUTPUT_INVALID",
    ConfigurationError: "CONFIGURATION",
    InternalFailure: "INTERNAL",
}
#: The reason of an error without a listed class (an unexpected exception, a bare
#: DomainError): both are answered as internal errors.
INTERNAL_REASON: Final = ERROR_REASONS[InternalFailure]


def reason_for(error_type: type[BaseException]) -> str:
    """The reason of the nearest class in `error_type`'s MRO listed in ERROR_REASONS;
    INTERNAL_REASON when none is."""
    for cls in error_type.__mro__:
        if cls in ERROR_REASONS:
            return ERROR_REASONS[cls]
    return INTERNAL_REASON


def _packed(message: Any) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(message)
    return packed


def rich_status(
    code: grpc.StatusCode,
    message: str,
    *,
    reason: str,
    field: str | None = None,
    dependency: str | None = None,
    description: str | None = None,
    extra: Iterable[Any] = (),
) -> grpc.Status:
    """The status `code` / `message` whose trailing metadata is the details trailer: an
    ErrorInfo (and, for a `field` with a `description`, a BadRequest naming it), then any
    `extra` detail messages (a RetryInfo)."""
    metadata = {k: v for k, v in (("field", field), ("dependency", dependency)) if v}
    details = [
        _packed(error_details_pb2.ErrorInfo(reason=reason, domain=DOMAIN, metadata=metadata))
    ]
    if field and description is not None:
        violation = error_details_pb2.BadRequest.FieldViolation(
            field=field, description=description
        )
        details.append(_packed(error_details_pb2.BadRequest(field_violations=[violation])))
    details.extend(_packed(m) for m in extra)
    status = status_pb2.Status(code=code.value[0], message=message, details=details)
    return rpc_status.to_status(status)


def error_status(error: DomainError, code: grpc.StatusCode) -> grpc.Status:
    """The status of a domain error answered with `code` (shared/serve.py STATUS_FOR_ERROR):
    its message, unchanged, and its typed details (reason, field, dependency; the BadRequest
    of an InvalidArgument holds its message after "field: ")."""
    description = None
    if isinstance(error, InvalidArgument):
        description = error.message.removeprefix(f"{error.field}: ")
    return rich_status(
        code,
        error.message,
        reason=reason_for(type(error)),
        field=getattr(error, "field", None),
        dependency=getattr(error, "dependency", None),
        description=description,
    )


async def abort_with(context: grpc.aio.ServicerContext, status: grpc.Status) -> NoReturn:
    """Ends the call with `status`, details trailer included. abort's trailing metadata
    replaces what the call set before (its x-request-id, shared/observability.py), so that is
    kept beside it; an earlier details trailer is not."""
    earlier = tuple(
        (key, value)
        for key, value in context.trailing_metadata() or ()
        if key != STATUS_DETAILS_KEY
    )
    trailing = earlier + tuple(status.trailing_metadata)
    await context.abort(status.code, status.details, trailing_metadata=trailing)
    raise AssertionError("abort raises")  # pragma: no cover


@dataclass(frozen=True, slots=True)
class ErrorDetails:
    """What a status's details say: the ErrorInfo's reason, field and dependency, and the
    BadRequest's description of that field (None where absent)."""

    reason: str
    field: str | None = None
    dependency: str | None = None
    description: str | None = None


def details_in(status: status_pb2.Status | None) -> ErrorDetails | None:
    """The ErrorInfo (and BadRequest) of a google.rpc.Status; None when it holds none of this
    domain."""
    if status is None:
        return None
    info: error_details_pb2.ErrorInfo | None = None
    bad = error_details_pb2.BadRequest()
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
        elif detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            detail.Unpack(bad)
    if info is None or info.domain != DOMAIN:
        return None
    field = info.metadata.get("field") or None
    description = next((v.description for v in bad.field_violations if v.field == field), None)
    return ErrorDetails(info.reason, field, info.metadata.get("dependency") or None, description)


def read_details(call: Any) -> ErrorDetails | None:
    """The typed details of a failed call (a `grpc.Call`, or the `grpc.aio.AioRpcError` an aio
    call raised: both answer `code()`, `details()` and `trailing_metadata()` at once). None
    when it carries none of this domain (an older peer, a proxy, a transport failure), when
    the trailer is not a google.rpc.Status, or when that status disagrees with the call's own
    code or message (a proxy rewrote the status but passed the trailers on): then the details
    cannot be about this status."""
    try:
        return details_in(rpc_status.from_call(call))
    except (ValueError, TypeError, DecodeError):
        return None
