"""docs/trace.md and docs/api.md are the protocol reference a caller reads; their tables are
checked here against the code they describe (the trace catalogue, the error tables and the
settings classes), and every link into them must land on a heading."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import grpc
import pytest
from pydantic_settings import BaseSettings

from orchestrator_service.policy import ORCHESTRATOR_POLICIES
from orchestrator_service.retrieval_client import DOWNSTREAM_ERRORS, CallLimit, translate
from orchestrator_service.settings import OrchestratorSettings
from retrieval_service.policy import RETRIEVAL_POLICIES
from retrieval_service.settings import RetrievalSettings
from shared.access import Permission
from shared.error_details import ERROR_REASONS, QUOTA_SPENT_REASON
from shared.errors import InvalidArgument
from shared.serve import STATUS_FOR_ERROR, status_code_for
from shared.settings import ServerSettings
from shared.trace_fields import (
    CHUNK_FIELDS,
    HITL_RESUME_STATE_FIELDS,
    RETRIEVED_CHUNK_FIELD_NAMES,
    TRACE_FIELDS,
    Kind,
    RetrievalStatus,
    Route,
)

# The vocabulary lives in the StrEnums.
ROUTE_VALUES = tuple(Route)
RETRIEVAL_STATUS_VALUES = tuple(RetrievalStatus)

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
WIRE_TYPE = {
    Kind.BOOL: "bool",
    Kind.STR: "string",
    Kind.INT: "int32",
    Kind.FLOAT: "double",
    Kind.STR_LIST: "StringList",
    Kind.CHUNK_LIST: "RetrievedChunkList",
    Kind.TRACE_LIST: "RagTraceList",
}


def _table(doc: str, heading: str) -> list[dict[str, str]]:
    """The rows of the first table after `heading`, keyed by column name, cells unquoted."""
    lines = (DOCS / doc).read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.lstrip("#").strip() == heading)
    rows: list[list[str]] = []
    for line in lines[start + 1 :]:
        if line.startswith("#"):
            break
        if line.startswith("|"):
            rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
        elif rows:
            break
    header, _, *body = rows
    return [dict(zip(header, row, strict=True)) for row in body]


def _ticks(cell: str) -> list[str]:
    return re.findall(r"`([^`]*)`", cell)


def _name(cell: str) -> str:
    names = _ticks(cell)
    assert len(names) == 1, cell
    return names[0]


def test_trace_field_table_matches_the_catalogue() -> None:
    rows = _table("trace.md", "Fields")
    assert [_name(r["field"]) for r in rows] == [s.name for s in TRACE_FIELDS]
    for number, (row, spec) in enumerate(zip(rows, TRACE_FIELDS, strict=True), start=1):
        assert row["#"] == str(number), spec.name
        assert row["group"] == spec.group, spec.name
        assert row["type"] == WIRE_TYPE[spec.kind], spec.name
        assert set(_ticks(row["values"])) == set(spec.allowed or ()), spec.name
        assert row["written by"] and row["meaning and presence"], spec.name


def test_evidence_table_matches_the_chunk_catalogue() -> None:
    rows = _table("trace.md", "Evidence records")
    assert [_name(r["key"]) for r in rows] == [s.name for s in CHUNK_FIELDS]
    for row, spec in zip(rows, CHUNK_FIELDS, strict=True):
        assert ("optional" in row["type"]) == spec.optional, spec.name
    kept = tuple(_name(r["key"]) for r in rows if r["in the trace"] == "kept")
    assert kept == RETRIEVED_CHUNK_FIELD_NAMES
    assert {r["in the trace"] for r in rows} == {"kept", "dropped"}


def test_snapshot_table_matches_the_catalogue() -> None:
    rows = _table("trace.md", "The resume snapshot")
    assert [_name(r["field"]) for r in rows] == [s.name for s in HITL_RESUME_STATE_FIELDS]
    for row, spec in zip(rows, HITL_RESUME_STATE_FIELDS, strict=True):
        assert ("optional" in row["type"]) == spec.optional, spec.name
        assert set(spec.allowed or ()) <= set(_ticks(row["rule"])), spec.name


def test_route_table_covers_every_route_and_status() -> None:
    rows = _table("trace.md", "Routes and statuses")
    assert [_name(r["route"]) for r in rows] == list(ROUTE_VALUES)
    statuses = {s for r in rows for s in _ticks(r["retrieval_status"])}
    assert statuses == set(RETRIEVAL_STATUS_VALUES)


def test_roles_table_matches_the_services_policy_tables() -> None:
    # Each role's row lists the RPCs its newest permission opens (a writer: "a reader's RPCs
    # and …"), from both services' tables.
    rows = {r["role"].strip("`"): set(_ticks(r["may call"])) for r in _table("api.md", "API keys")}
    newest = {"reader": Permission.READ, "writer": Permission.WRITE, "admin": Permission.MANAGE}
    policies = {**RETRIEVAL_POLICIES, **ORCHESTRATOR_POLICIES}
    assert rows == {
        role: {m.rsplit("/", 1)[1] for m, p in policies.items() if p.permission == permission}
        for role, permission in newest.items()
    }


def test_domain_error_table_matches_serve() -> None:
    rows = _table("api.md", "Domain errors")
    documented = {_name(r["domain error"]): _name(r["code"]) for r in rows}
    assert documented == {cls.__name__: code.name for cls, code in STATUS_FOR_ERROR.items()}


def test_error_details_table_matches_the_reasons() -> None:
    rows = _table("api.md", "Error details")
    documented = {
        _name(r["domain error"]): (_name(r["reason"]), _ticks(r["`metadata`"]))
        for r in rows
        if _ticks(r["domain error"])
    }
    actual = {}
    for cls, reason in ERROR_REASONS.items():
        arguments = inspect.signature(cls.__init__).parameters
        actual[cls.__name__] = (reason, [a for a in ("field", "dependency") if a in arguments])
    assert documented == actual
    assert list(documented) == [cls.__name__ for cls in STATUS_FOR_ERROR]  # the same order
    (quota,) = [r for r in rows if not _ticks(r["domain error"])]
    assert _name(quota["reason"]) == QUOTA_SPENT_REASON
    assert _ticks(quota["more details"]) == ["RetryInfo"]
    bad_request = [_name(r["domain error"]) for r in rows if "BadRequest" in r["more details"]]
    assert bad_request == [InvalidArgument.__name__]


def test_downstream_table_matches_the_retrieval_client() -> None:
    rows = _table("api.md", "What the orchestrator answers when retrieval fails")
    documented = {
        _name(r["retrieval's status"]): _name(r["the orchestrator's status"]) for r in rows
    }
    limit = CallLimit(1.0, caller_deadline=True)
    actual = {}
    for code in DOWNSTREAM_ERRORS:
        upstream = status_code_for(type(translate(code, limit)))
        assert upstream is not None
        actual[code.name] = upstream.name
    assert documented == actual
    assert set(documented) == {c.name for c in grpc.StatusCode} - {"OK"}


def _documented_default(value: object) -> str:
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _own_fields(cls: type[BaseSettings], base: type[BaseSettings] | None) -> dict[str, object]:
    inherited = set(base.model_fields) if base else set()
    return {
        name.upper(): field.default
        for name, field in cls.model_fields.items()
        if name not in inherited
    }


@pytest.mark.parametrize(
    ("service", "cls", "base"),
    [
        ("both", ServerSettings, None),
        ("retrieval", RetrievalSettings, ServerSettings),
        ("orchestrator", OrchestratorSettings, ServerSettings),
    ],
)
def test_settings_table_matches_the_settings_classes(service, cls, base) -> None:
    rows = _table("api.md", "Settings")
    documented = {
        _name(r["variable"]): r["default"].strip("`") for r in rows if r["service"] == service
    }
    expected = {name: _documented_default(v) for name, v in _own_fields(cls, base).items()}
    assert documented == expected
    assert {r["service"] for r in rows} == {"both", "retrieval", "orchestrator"}


def _slug(heading: str) -> str:
    # GitHub's anchor rule: lower case, punctuation dropped, spaces to hyphens.
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(doc: Path) -> set[str]:
    lines = doc.read_text(encoding="utf-8").splitlines()
    return {_slug(line.lstrip("#")) for line in lines if line.startswith("#")}


def test_every_link_into_the_docs_lands_on_a_heading() -> None:
    sources = [
        *DOCS.glob("*.md"),
        ROOT / "README.md",
        *ROOT.glob("*_service/README.md"),
        *(ROOT / "protos").rglob("*.proto"),
    ]
    anchors = {doc.name: _anchors(doc) for doc in DOCS.glob("*.md")}
    checked = 0
    for source in sources:
        text = source.read_text(encoding="utf-8")
        for doc, anchor in re.findall(r"(trace\.md|api\.md)#([\w\-]+)", text):
            assert anchor in anchors[doc], f"{source.relative_to(ROOT)}: {doc}#{anchor}"
            checked += 1
    assert checked > 0


def test_the_service_readmes_stay_short() -> None:
    # A README is the way in; the reference is docs/ (api.md, retrieval-design.md).
    for readme in ("retrieval_service/README.md", "orchestrator_service/README.md"):
        lines = (ROOT / readme).read_text(encoding="utf-8").count("\n")
        assert lines <= 300, f"{readme} has {lines} lines; move detail to docs/"
