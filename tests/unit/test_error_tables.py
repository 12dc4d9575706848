"""The two error tables are complete: every domain error in the tree has a status code in
`shared.serve.STATUS_FOR_ERROR`, and the retrieval client decides every status retrieval can
answer with (docs/api.md#status-codes)."""

from __future__ import annotations

import importlib
import pkgutil

import grpc
import pytest

import orchestrator_service
import retrieval_service
import shared
from orchestrator_service.retrieval_client import (
    CALLERS_ERRORS,
    DOWNSTREAM_ERRORS,
    CallLimit,
    translate,
)
from shared.error_details import (
    ERROR_REASONS,
    QUOTA_SPENT_REASON,
    ErrorDetails,
    details_trailer,
    read_details,
    reason_for,
    trailer_for,
)
from shared.errors import DomainError, InvalidArgument, NotFound
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


@pytest.mark.parametrize(
    ("downstream", "details"),
    [
        (grpc.StatusCode.NOT_FOUND, "knowledge_bases[1]: knowledge_bases/hr does not exist"),
        (grpc.StatusCode.NOT_FOUND, "knowledge_bases: knowledge_bases/hr does not exist"),
        (grpc.StatusCode.INVALID_ARGUMENT, "filter: unexpected 'AND' at column 9"),
        (grpc.StatusCode.INVALID_ARGUMENT, "knowledge_bases[0]: 'HR!' is not a knowledge base id"),
    ],
)
def test_retrievals_verdict_on_the_callers_fields_is_passed_on(downstream, details) -> None:
    # The caller sent knowledge_bases and filter through unchanged: their errors are theirs.
    info = as_retrieval_sends(downstream, details)
    assert status_for(translate(downstream, CALLER, details, info)) == (downstream, details)
    # Decided by the typed details alone: the same status without them stays ours.
    assert status_for(translate(downstream, CALLER, details)) == (
        grpc.StatusCode.INTERNAL,
        "retrieval failed",
    )


def as_retrieval_sends(code: grpc.StatusCode, details: str) -> ErrorDetails | None:
    """The typed details retrieval attaches to `details` (its domain errors' messages start
    with their field), read back from the wire form."""
    head, sep, rest = details.partition(": ")
    field = head if sep and " " not in head else None
    reason = "INVALID_ARGUMENT" if code == grpc.StatusCode.INVALID_ARGUMENT else code.name
    described = rest if field and code == grpc.StatusCode.INVALID_ARGUMENT else None
    trailer = details_trailer(code, details, reason=reason, field=field, description=described)
    return read_details([trailer])


def test_a_message_that_looks_like_the_callers_field_decides_nothing() -> None:
    details = "filter: unexpected 'AND' at column 9"
    info = ErrorDetails("INVALID_ARGUMENT", field="query")  # about our own text, says retrieval
    assert status_for(translate(grpc.StatusCode.INVALID_ARGUMENT, CALLER, details, info)) == (
        grpc.StatusCode.INTERNAL,
        "retrieval failed",
    )


@pytest.mark.parametrize(
    ("downstream", "details"),
    [
        (grpc.StatusCode.INVALID_ARGUMENT, "query: is 5000 characters, at most 4000"),
        (grpc.StatusCode.INVALID_ARGUMENT, "top_k: must be 1..100"),
        (grpc.StatusCode.INVALID_ARGUMENT, "filters: not a field"),  # not the caller's field
        (grpc.StatusCode.INVALID_ARGUMENT, ""),
        (grpc.StatusCode.NOT_FOUND, "collection supermew_chunks does not exist"),
        (grpc.StatusCode.FAILED_PRECONDITION, "filter: the store has no metadata field"),
        (grpc.StatusCode.INTERNAL, "knowledge_bases[0]: lost"),
    ],
)
def test_every_other_verdict_stays_internal(downstream, details) -> None:
    info = as_retrieval_sends(downstream, details)
    assert status_for(translate(downstream, CALLER, details, info)) == (
        grpc.StatusCode.INTERNAL,
        "retrieval failed",
    )


def test_only_not_found_and_invalid_argument_can_be_the_callers() -> None:
    assert set(CALLERS_ERRORS) == {grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT}


def test_a_quota_refusal_of_the_callers_key_is_passed_on_with_when_to_retry() -> None:
    details = "this key's quota is spent; retry in 3.20 s"
    info = ErrorDetails(QUOTA_SPENT_REASON)
    mapped = status_for(translate(grpc.StatusCode.RESOURCE_EXHAUSTED, CALLER, details, info))
    assert mapped == (grpc.StatusCode.RESOURCE_EXHAUSTED, details)
    # Retrieval's own load shedding stays the generic "out of capacity".
    shed = translate(grpc.StatusCode.RESOURCE_EXHAUSTED, CALLER, "serving its limit of 256")
    assert str(shed) == "the retrieval service is out of capacity; retry later"


def test_every_status_mapped_error_has_a_reason() -> None:
    assert set(STATUS_FOR_ERROR) == set(ERROR_REASONS)


@pytest.mark.parametrize(
    ("error", "field", "description"),
    [
        (InvalidArgument("filter", "unexpected 'AND'"), "filter", "unexpected 'AND'"),
        (
            NotFound("knowledge_bases[1]", "knowledge_bases/hr does not exist"),
            "knowledge_bases[1]",
            None,
        ),
    ],
)
def test_a_domain_errors_trailer_carries_its_reason_and_field(error, field, description) -> None:
    code = status_code_for(type(error))
    assert code is not None
    trailer = trailer_for(error, code)
    assert trailer is not None and trailer[0] == "grpc-status-details-bin"
    read = read_details([trailer])
    assert read == ErrorDetails(reason_for(type(error)) or "", field, None, description)


def test_a_trailer_of_another_domain_or_none_reads_as_no_details() -> None:
    assert read_details([]) is None
    assert read_details([("grpc-status-details-bin", b"not a status")]) is None
