"""The rich error model between the services (AIP-193; docs/api.md#error-details): every
domain error's status carries, in its `grpc-status-details-bin` trailer, a `google.rpc.Status`
with an `ErrorInfo` (domain `supermew.v1`, a `reason` per kind of error, the request `field`
or the `dependency` it is about in `metadata`) and, for INVALID_ARGUMENT, a `BadRequest`
naming the field. A caller decides from these details, never from the message text (the
orchestrator does so with retrieval's, orchestrator_service/retrieval_client.py)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

import grpc
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2

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
#: for its status code, shared/serve.py STATUS_FOR_ERROR).
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


def reason_for(error_type: type[DomainError]) -> str | None:
    for cls in error_type.__mro__:
        if cls in ERROR_REASONS:
            return ERROR_REASONS[cls]
    return None


def _packed(message: Any) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(message)
    return packed


def details_trailer(
    code: grpc.StatusCode,
    message: str,
    *,
    reason: str,
    field: str | None = None,
    dependency: str | None = None,
    description: str | None = None,
    extra: Iterable[Any] = (),
) -> tuple[str, bytes]:
    """The trailer of a status with an ErrorInfo (and, for a `field` with a `description`, a
    BadRequest naming it), plus any `extra` detail messages."""
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
    return STATUS_DETAILS_KEY, status.SerializeToString()


def trailer_for(error: DomainError, code: grpc.StatusCode) -> tuple[str, bytes] | None:
    """The details trailer of a domain error answered with `code` (None for an error class
    without a reason)."""
    reason = reason_for(type(error))
    if reason is None:
        return None
    field = getattr(error, "field", None)
    description = None
    if isinstance(error, InvalidArgument):
        description = error.message.removeprefix(f"{error.field}: ")
    return details_trailer(
        code,
        error.message,
        reason=reason,
        field=field,
        dependency=getattr(error, "dependency", None),
        description=description,
    )


@dataclass(frozen=True, slots=True)
class ErrorDetails:
    """What a status's details say: the ErrorInfo's reason, field and dependency, and the
    BadRequest's description of that field (None where absent)."""

    reason: str
    field: str | None = None
    dependency: str | None = None
    description: str | None = None


def read_details(trailing_metadata: Any) -> ErrorDetails | None:
    """The ErrorInfo (and BadRequest) of a call's trailing metadata; None when it carries
    none of this domain (an older peer, a proxy, a transport failure)."""
    raw = next((v for k, v in trailing_metadata or () if k == STATUS_DETAILS_KEY), None)
    if not isinstance(raw, bytes):
        return None
    status = status_pb2.Status()
    try:
        status.ParseFromString(raw)
    except Exception:  # a peer's malformed trailer is no details, not a failure of ours
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
