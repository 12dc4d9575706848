"""The error tables are complete: every domain error in the tree has a status code in
`shared.serve.STATUS_FOR_ERROR` and a reason in `shared.error_details.ERROR_REASONS`, every
domain error's status carries its typed details (docs/api.md#error-details), and the retrieval
client decides every status retrieval can answer with from its code and those details, never
from its text (docs/api.md#what-the-orchestrator-answers-when-retrieval-fails)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from dataclasses import dataclass

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2

import orchestrator_service
import retrieval_service
import shared
from orchestrator_service.retrieval_client import (
    CALLERS_ERRORS,
    CALLERS_FIELDS,
    CALLERS_ONLY_ABOUT,
    DOWNSTREAM_ERRORS,
    CallLimit,
    is_callers_field,
    translate,
)
from shared.auth import quota_spent_status
from shared.error_details import (
    ERROR_REASONS,
    INTERNAL_REASON,
    QUOTA_SPENT_REASON,
    ErrorDetails,
    error_status,
    read_details,
    reason_for,
    rich_status,
)
from shared.errors import (
    AlreadyExists,
    ConfigurationError,
    DomainError,
    FailedPrecondition,
    InternalFailure,
    InvalidArgument,
    NotFound,
    ResourceExhausted,
)
from shared.serve import STATUS_FOR_ERROR, status_code_for, status_for


def _import_whole_tree() -> None:
    # Subclasses exist only once their module is imported; entry points are skipped because
    # they are scripts, not definitions.
    for package in (shared, retrieval_service, orchestrator_service):
        for module in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
            if not module.name.endswith("__main__"):
                importlib.import_module(module.name)


def _all_subclasses(cls: type[DomainError]) -> set[type[DomainError]]:
    found: set[type[DomainError]] = set()
    for sub in cls.__subclasses__():
        if sub.__module__.split(".")[0] in {"shared", "retrieval_service", "orchestrator_service"}:
            found |= {sub} | _all_subclasses(sub)
    return found


def test_every_domain_error_in_the_tree_has_a_status() -> None:
    _import_whole_tree()
    subclasses = _all_subclasses(DomainError)
    assert subclasses >= set(STATUS_FOR_ERROR)
    missing = sorted(c.__qualname__ for c in subclasses if status_code_for(c) is None)
    assert missing == []


def test_a_domain_error_without_a_meaning_is_not_mapped() -> None:
    # Raised bare, the base class says nothing a caller could act on: serve treats it as a bug.
    assert status_for(DomainError("x")) is None
    assert status_for(RuntimeError("x")) is None


def test_the_retrieval_client_decides_every_status_but_ok() -> None:
    assert set(DOWNSTREAM_ERRORS) == set(grpc.StatusCode) - {grpc.StatusCode.OK}


CALLER = CallLimit(1.5, caller_deadline=True)
SETTING = CallLimit(30.0, caller_deadline=False)


@pytest.mark.parametrize(
    ("downstream", "upstream"),
    [
        (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.UNAVAILABLE),
        (grpc.StatusCode.CANCELLED, grpc.StatusCode.UNAVAILABLE),
        (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.DEADLINE_EXCEEDED),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.RESOURCE_EXHAUSTED),
        # Caused by text the system generated, or by our own credentials: never the caller's.
        (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.INTERNAL),
        (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.INTERNAL),
        (grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.INTERNAL),
        (grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.INTERNAL),
        (grpc.StatusCode.INTERNAL, grpc.StatusCode.INTERNAL),
        (grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL),
    ],
)
def test_downstream_status_becomes_the_upstream_status(downstream, upstream) -> None:
    mapped = status_for(translate(downstream, CALLER))
    assert mapped is not None and mapped[0] == upstream


def test_only_the_named_downstream_statuses_leave_as_something_other_than_internal() -> None:
    not_internal = {
        code
        for code in DOWNSTREAM_ERRORS
        if status_code_for(type(translate(code, CALLER))) != grpc.StatusCode.INTERNAL
    }
    assert not_internal == {
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.PERMISSION_DENIED,  # retrieval refused the caller's own key
    }


def test_deadline_says_which_limit_fired() -> None:
    assert str(translate(grpc.StatusCode.DEADLINE_EXCEEDED, CALLER)) == (
        "the caller's deadline passed while retrieving"
    )
    assert str(translate(grpc.StatusCode.DEADLINE_EXCEEDED, SETTING)) == (
        "retrieval did not answer within RETRIEVAL_TIMEOUT_SECONDS (30s)"
    )


def test_internal_failures_carry_a_generic_message() -> None:
    for code in DOWNSTREAM_ERRORS:
        mapped = status_for(translate(code, CALLER))
        assert mapped is not None
        if mapped[0] == grpc.StatusCode.INTERNAL:
            assert mapped[1] == "retrieval failed"


@dataclass(frozen=True)
class Ended:
    """A failed call as the retrieval client sees it: the `grpc.aio.AioRpcError` it catches
    answers `code()`, `details()` and `trailing_metadata()` like this."""

    status_code: grpc.StatusCode
    status_details: str
    trailers: tuple[tuple[str, str | bytes], ...] = ()

    def code(self) -> grpc.StatusCode:
        return self.status_code

    def details(self) -> str:
        return self.status_details

    def trailing_metadata(self) -> tuple[tuple[str, str | bytes], ...]:
        return (("x-request-id", "r-1"), *self.trailers)


def ended(status: grpc.Status) -> Ended:
    """The call a server ended with `status` (shared.error_details.abort_with)."""
    return Ended(status.code, status.details, tuple(status.trailing_metadata))


def as_retrieval_answers(error: DomainError) -> tuple[grpc.StatusCode, str, ErrorDetails | None]:
    """The code, details and typed details (read back from the wire form) of a Retrieve that
    raised `error` in retrieval."""
    code = status_code_for(type(error))
    assert code is not None
    call = ended(error_status(error, code))
    return call.code(), call.details(), read_details(call)


INTERNAL = (grpc.StatusCode.INTERNAL, "retrieval failed")


@pytest.mark.parametrize(
    "error",
    [
        NotFound("knowledge_bases[1]", "knowledge_bases/hr does not exist"),
        NotFound("knowledge_bases", "knowledge_bases/hr does not exist"),
        InvalidArgument("filter", "unexpected 'AND' at column 9"),
        InvalidArgument("knowledge_bases[0]", "'HR!' is not a knowledge base id"),
        InvalidArgument("filter", "未知字段 metadata.部门"),
        NotFound("index", "knowledge_bases/hr/indexes/v2 does not exist"),
        InvalidArgument("index", "is an index of knowledge_bases/hr, not of knowledge_bases/it"),
        FailedPrecondition("index", "knowledge_bases/hr/indexes/v2 is BUILDING, not READY"),
    ],
    ids=repr,
)
def test_retrievals_verdict_on_the_callers_fields_is_passed_on(error) -> None:
    # The caller sent knowledge_bases, filter and index through unchanged: their errors are
    # theirs, with the field retrieval's ErrorInfo names and its words about it.
    code, details, info = as_retrieval_answers(error)
    assert info is not None and info.field == error.field
    passed_on = translate(code, CALLER, details, info)
    assert type(passed_on) is type(error) and passed_on.field == error.field
    assert status_for(passed_on) == (code, error.message)
    # Decided by the typed details alone: the same status and text without them stays ours.
    assert status_for(translate(code, CALLER, details)) == INTERNAL


@pytest.mark.parametrize(
    "error",
    [
        InvalidArgument("query", "is 5000 characters, at most 4000"),
        InvalidArgument("top_k", "must be 1..100"),
        InvalidArgument("filters", "not a field"),  # not the caller's field
        InvalidArgument("knowledge_bases_extra", "not a field"),
        NotFound("collection", "supermew_chunks does not exist"),
        AlreadyExists("knowledge_bases[0]", "knowledge_bases/hr exists"),
        FailedPrecondition("filter", "the store has no metadata field"),
        # Only an index not READY is the caller's FAILED_PRECONDITION.
        FailedPrecondition("knowledge_bases[0]", "the store was ingested at another level"),
        FailedPrecondition("indexes", "not a field"),
        AlreadyExists("index", "not an answer Retrieve gives"),
        InternalFailure("knowledge_bases[0]: lost"),
        ConfigurationError("filter: the store was ingested at another level"),
    ],
    ids=repr,
)
def test_every_other_verdict_stays_internal(error) -> None:
    code, details, info = as_retrieval_answers(error)
    assert status_for(translate(code, CALLER, details, info)) == INTERNAL


def test_a_message_that_looks_like_the_callers_field_decides_nothing() -> None:
    # Retrieval's ErrorInfo says the verdict is about the query (text of our own), whatever
    # its message starts with.
    status = rich_status(
        grpc.StatusCode.INVALID_ARGUMENT,
        "filter: unexpected 'AND' at column 9",
        reason="INVALID_ARGUMENT",
        field="query",
        description="unexpected 'AND' at column 9",
    )
    call = ended(status)
    info = read_details(call)
    assert info == ErrorDetails("INVALID_ARGUMENT", "query", None, "unexpected 'AND' at column 9")
    assert status_for(translate(call.code(), CALLER, call.details(), info)) == INTERNAL


def test_the_reason_must_be_that_of_the_callers_error() -> None:
    # A NOT_FOUND whose ErrorInfo reason is not NOT_FOUND is not the caller's NOT_FOUND.
    info = ErrorDetails("FAILED_PRECONDITION", "knowledge_bases[0]")
    details = "knowledge_bases[0]: knowledge_bases/hr does not exist"
    assert status_for(translate(grpc.StatusCode.NOT_FOUND, CALLER, details, info)) == INTERNAL
    info = ErrorDetails("NOT_FOUND", "filter")
    details = "filter: bad"
    assert (
        status_for(translate(grpc.StatusCode.INVALID_ARGUMENT, CALLER, details, info)) == INTERNAL
    )


@pytest.mark.parametrize(
    ("field", "callers"),
    [
        ("knowledge_bases", True),
        ("knowledge_bases[0]", True),
        ("knowledge_bases[12]", True),
        ("filter", True),
        ("index", True),
        ("index[0]", False),  # not a repeated field
        ("indexes", False),
        (None, False),
        ("", False),
        ("query", False),
        ("top_k", False),
        ("filters", False),
        ("filter[0]", False),  # not a repeated field
        ("knowledge_bases[]", False),
        ("knowledge_bases[x]", False),
        ("knowledge_bases[-1]", False),
        ("knowledge_bases[1]x", False),
        ("knowledge_bases[1][2]", False),
        ("knowledge_bases[١]", False),  # a digit, but not an ASCII index
        ("knowledge_bases.name", False),
    ],
)
def test_the_callers_fields(field, callers) -> None:
    assert is_callers_field(field) is callers


def test_only_not_found_invalid_argument_and_an_index_not_ready_can_be_the_callers() -> None:
    assert set(CALLERS_ERRORS) == {
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.FAILED_PRECONDITION,
    }
    only_about = {grpc.StatusCode.FAILED_PRECONDITION: frozenset({"index"})}
    assert only_about == CALLERS_ONLY_ABOUT
    assert set(CALLERS_FIELDS) == {"knowledge_bases", "filter", "index"}


def test_a_quota_refusal_of_the_callers_key_is_passed_on_with_when_to_retry() -> None:
    refusal = ended(quota_spent_status(3.2))
    assert refusal.details() == "this key's quota is spent; retry in 3.20 s"
    info = read_details(refusal)
    assert info == ErrorDetails(QUOTA_SPENT_REASON)
    mapped = status_for(translate(refusal.code(), CALLER, refusal.details(), info))
    assert mapped == (grpc.StatusCode.RESOURCE_EXHAUSTED, refusal.details())
    # Decided by the reason, not the words: retrieval's own load shedding that happens to read
    # the same, and the same refusal without details, stay the generic "out of capacity".
    code, details, shed = as_retrieval_answers(ResourceExhausted(refusal.details()))
    assert shed == ErrorDetails("RESOURCE_EXHAUSTED")
    for info in (shed, None):
        assert str(translate(code, CALLER, details, info)) == (
            "the retrieval service is out of capacity; retry later"
        )


# ---- the reasons and the details trailer (shared/error_details.py) --------------------------


def test_every_status_mapped_error_has_a_reason() -> None:
    assert list(STATUS_FOR_ERROR) == list(ERROR_REASONS)
    reasons = list(ERROR_REASONS.values())
    assert len(set(reasons)) == len(reasons)
    assert QUOTA_SPENT_REASON not in reasons
    for reason in [*reasons, QUOTA_SPENT_REASON]:
        assert re.fullmatch(r"[A-Z][A-Z0-9]*(_[A-Z0-9]+)*", reason), reason
        assert len(reason) <= 63  # AIP-193


def test_a_subclass_takes_its_nearest_listed_bases_reason() -> None:
    _import_whole_tree()
    for cls in _all_subclasses(DomainError):
        listed = next(c for c in cls.__mro__ if c in STATUS_FOR_ERROR)
        assert reason_for(cls) == ERROR_REASONS[listed], cls
    # Errors without a meaning are internal errors, reason and all.
    assert reason_for(DomainError) == reason_for(RuntimeError) == INTERNAL_REASON == "INTERNAL"


_ARGUMENTS = {"field": "knowledge_bases[2]", "dependency": "embedding", "task": "evidence_grade"}


def _instance(cls: type[DomainError]) -> DomainError:
    """`cls` raised as the services raise it: its leading arguments, then the message."""
    names = list(inspect.signature(cls.__init__).parameters)[1:]
    return cls(*(_ARGUMENTS[name] for name in names[:-1]), "what went wrong")


@pytest.mark.parametrize("cls", list(STATUS_FOR_ERROR), ids=lambda c: c.__name__)
def test_every_domain_errors_status_carries_its_details(cls) -> None:
    error = _instance(cls)
    code = STATUS_FOR_ERROR[cls]
    status = error_status(error, code)
    # The status itself is today's: the code of the table, the message unchanged.
    assert (status.code, status.details) == (code, error.message)
    ((key, raw),) = status.trailing_metadata
    assert key == "grpc-status-details-bin" and isinstance(raw, bytes)
    rich = status_pb2.Status.FromString(raw)
    assert (rich.code, rich.message) == (code.value[0], error.message)
    info = error_details_pb2.ErrorInfo()
    assert rich.details[0].Unpack(info)
    assert (info.domain, info.reason) == ("supermew.v1", ERROR_REASONS[cls])
    expected = {k: v for k, v in _ARGUMENTS.items() if k != "task" and hasattr(error, k)}
    assert dict(info.metadata) == expected
    if cls is InvalidArgument:
        # INVALID_ARGUMENT also says which field is wrong, and how, in a BadRequest.
        bad = error_details_pb2.BadRequest()
        assert len(rich.details) == 2 and rich.details[1].Unpack(bad)
        (violation,) = bad.field_violations
        assert (violation.field, violation.description) == ("knowledge_bases[2]", "what went wrong")
    else:
        assert len(rich.details) == 1
    assert read_details(ended(status)) == ErrorDetails(
        ERROR_REASONS[cls],
        expected.get("field"),
        expected.get("dependency"),
        "what went wrong" if cls is InvalidArgument else None,
    )


def test_a_quota_refusal_carries_retry_info_beside_its_reason() -> None:
    rich = status_pb2.Status.FromString(quota_spent_status(95.5).trailing_metadata[0][1])
    info, retry = error_details_pb2.ErrorInfo(), error_details_pb2.RetryInfo()
    assert rich.details[0].Unpack(info) and rich.details[1].Unpack(retry)
    assert (info.domain, info.reason, dict(info.metadata)) == ("supermew.v1", "QUOTA_SPENT", {})
    assert (retry.retry_delay.seconds, retry.retry_delay.nanos) == (95, 500_000_000)


def test_what_reads_as_no_details() -> None:
    nf = grpc.StatusCode.NOT_FOUND
    found = error_status(NotFound("knowledge_bases[0]", "knowledge_bases/x does not exist"), nf)
    trailer = tuple(found.trailing_metadata)
    assert read_details(Ended(nf, found.details, trailer)) is not None
    # No trailer: an older peer, a proxy, a transport failure.
    assert read_details(Ended(nf, found.details)) is None
    # A trailer that is no google.rpc.Status.
    assert read_details(Ended(nf, found.details, ((trailer[0][0], b"not a status"),))) is None
    # A status about another code or message than the call's: a proxy rewrote the status.
    assert read_details(Ended(grpc.StatusCode.INTERNAL, found.details, trailer)) is None
    assert read_details(Ended(nf, "not found", trailer)) is None
    # An ErrorInfo of another domain, or none at all (a RetryInfo alone, as auth sent before).
    other = status_pb2.Status.FromString(trailer[0][1])
    info = error_details_pb2.ErrorInfo()
    other.details[0].Unpack(info)
    info.domain = "googleapis.com"
    other.details[0].Pack(info)
    raw = other.SerializeToString()
    assert read_details(Ended(nf, found.details, ((trailer[0][0], raw),))) is None
    del other.details[:]
    raw = other.SerializeToString()
    assert read_details(Ended(nf, found.details, ((trailer[0][0], raw),))) is None
