"""The typed protocol vocabulary (shared.trace_fields' StrEnums): it is what the catalogue's
allowed sets, trace.proto's documented values, the model task schemas and the resume snapshot
all say; plus the resume snapshot's reader and the shared score-folding rule."""

from __future__ import annotations

import json
import re
from dataclasses import fields
from enum import StrEnum
from pathlib import Path
from typing import Any

import pytest

from orchestrator_service.models.base import ComplexityResult, EvidenceGrade, RewritePlan
from orchestrator_service.models.remote import strict_schema
from orchestrator_service.resume import ResumeSnapshot
from shared.codec import hitl_state_from_proto, hitl_state_to_proto
from shared.errors import InvalidArgument
from shared.scores import effective_score, fold_score
from shared.trace_fields import (
    HITL_RESUME_STATE_FIELDS,
    HITL_ROUTES,
    HITL_STATUS_FOR_ROUTE,
    HITL_STATUSES,
    MAX_SUB_QUESTIONS,
    TRACE_FIELD_BY_NAME,
    Ambiguity,
    Answerability,
    Complexity,
    Relevance,
    RetrievalStatus,
    RewriteMethod,
    Route,
    Stage,
)

TRACE_PROTO = Path(__file__).parents[2] / "protos" / "supermew" / "v1" / "trace.proto"

#: Every trace field whose values the spec enumerates from the vocabulary.
ENUM_FIELDS: dict[str, type[StrEnum]] = {
    "retrieval_stage": Stage,
    "complexity": Complexity,
    "route": Route,
    "retrieval_status": RetrievalStatus,
    "evidence_relevance": Relevance,
    "evidence_answerability": Answerability,
    "evidence_ambiguity": Ambiguity,
    "rewrite_method": RewriteMethod,
}


def _values(members: Any) -> set[str]:
    return {m.value for m in members}


@pytest.mark.parametrize(("name", "enum"), ENUM_FIELDS.items(), ids=list(ENUM_FIELDS))
def test_catalogue_allowed_sets_are_the_enums(name: str, enum: type[StrEnum]) -> None:
    allowed = TRACE_FIELD_BY_NAME[name].allowed
    assert allowed == _values(enum)
    assert all(type(v) is str for v in allowed or ())


def test_hitl_subsets_and_snapshot_fields_come_from_the_enums() -> None:
    assert _values(HITL_ROUTES) == {"clarify", "scope_select"}
    assert _values(HITL_STATUSES) == {"needs_clarification", "needs_scope_selection"}
    assert {k.value: v.value for k, v in HITL_STATUS_FOR_ROUTE.items()} == {
        "clarify": "needs_clarification",
        "scope_select": "needs_scope_selection",
    }
    assert TRACE_FIELD_BY_NAME["hitl_resume_from_route"].allowed == _values(HITL_ROUTES)
    assert TRACE_FIELD_BY_NAME["hitl_resume_from_status"].allowed == _values(HITL_STATUSES)
    snapshot = {s.name: s.allowed for s in HITL_RESUME_STATE_FIELDS}
    assert snapshot["route"] == _values(HITL_ROUTES)
    assert snapshot["retrieval_status"] == _values(HITL_STATUSES)
    assert snapshot["complexity"] == _values(Complexity)


def _proto_comment(field: str) -> str:
    """The comment block right above `field`'s declaration inside message RagTrace."""
    lines = TRACE_PROTO.read_text(encoding="utf-8").splitlines()
    start = lines.index("message RagTrace {")
    declaration = re.compile(rf"\b{field} = \d+;")
    at = next(i for i in range(start, len(lines)) if declaration.search(lines[i]))
    comment: list[str] = []
    for line in reversed(lines[start + 1 : at]):
        if not line.strip().startswith("//"):
            break
        comment.insert(0, line.strip().removeprefix("//"))
    return " ".join(comment)


@pytest.mark.parametrize(("name", "enum"), ENUM_FIELDS.items(), ids=list(ENUM_FIELDS))
def test_trace_proto_documents_exactly_the_enum_values(name: str, enum: type[StrEnum]) -> None:
    comment = _proto_comment(name)
    # The values a comment lists are its quoted snake_case words.
    quoted = set(re.findall(r'"([a-z_]+)"', comment))
    assert quoted == _values(enum), comment


def test_model_task_schemas_enumerate_the_vocabulary() -> None:
    grade = strict_schema(EvidenceGrade)["properties"]
    assert set(grade["relevance"]["enum"]) == _values(Relevance)
    assert set(grade["answerability"]["enum"]) == _values(Answerability)
    assert set(grade["ambiguity"]["enum"]) == _values(Ambiguity)
    assert set(grade["route"]["enum"]) == _values(Route)
    assert "$defs" not in json.dumps(strict_schema(EvidenceGrade))
    complexity = strict_schema(ComplexityResult)["properties"]
    assert set(complexity["complexity"]["enum"]) == _values(Complexity)
    assert set(strict_schema(RewritePlan)["properties"]["method"]["enum"]) == _values(RewriteMethod)
    with pytest.raises(ValueError, match="sub_questions"):
        ComplexityResult(complexity="complex", sub_questions=["q"] * (MAX_SUB_QUESTIONS + 1))


def test_enum_members_serialise_as_their_plain_values() -> None:
    grade = EvidenceGrade(relevance="strong", answerability="partial", route="rewrite")
    assert grade.relevance is Relevance.STRONG and grade.ambiguity is Ambiguity.NONE
    assert json.loads(grade.model_dump_json())["route"] == "rewrite"
    assert json.dumps({"route": Route.CLARIFY}) == '{"route": "clarify"}'
    assert f"{Route.SCOPE_SELECT}" == "scope_select"


SNAPSHOT: dict[str, Any] = {
    "question": "这个角色的属性是什么？",
    "route": "scope_select",
    "retrieval_status": "needs_scope_selection",
    "rewrite_count": 1,
    "complexity": "complex",
    "complexity_reason": "comparison: 2 sub-questions",
    "sub_questions": ["丹瑾的属性", "卡卡罗的属性"],
}


def test_resume_snapshot_holds_exactly_the_catalogue_keys() -> None:
    assert [f.name for f in fields(ResumeSnapshot)] == [s.name for s in HITL_RESUME_STATE_FIELDS]


def test_resume_snapshot_round_trips_through_dict_and_proto() -> None:
    snap = ResumeSnapshot.from_mapping(SNAPSHOT)
    assert snap.route is Route.SCOPE_SELECT and snap.complexity is Complexity.COMPLEX
    assert snap.sub_questions == ("丹瑾的属性", "卡卡罗的属性")
    as_dict = snap.to_dict()
    assert as_dict == SNAPSHOT
    assert all(type(as_dict[k]) is str for k in ("route", "retrieval_status", "complexity"))
    assert json.loads(json.dumps(as_dict)) == SNAPSHOT
    decoded = hitl_state_from_proto(hitl_state_to_proto(as_dict))
    assert ResumeSnapshot.from_mapping(decoded) == snap


def test_resume_snapshot_defaults_and_absent_complexity() -> None:
    snap = ResumeSnapshot.from_mapping(
        {"question": "q", "route": "clarify", "retrieval_status": "needs_clarification"}
    )
    assert snap.to_dict() == {
        "question": "q",
        "route": "clarify",
        "retrieval_status": "needs_clarification",
        "rewrite_count": 0,
        "complexity": None,
        "complexity_reason": None,
        "sub_questions": [],
    }


@pytest.mark.parametrize(
    ("change", "key", "message"),
    [
        ({"question": None}, "question", "must not be blank"),
        ({"route": "no_knowledge"}, "route", "must be clarify or scope_select, got 'no_knowledge'"),
        ({"route": ["clarify"]}, "route", "must be clarify or scope_select"),
        (
            {"retrieval_status": "needs_clarification"},
            "retrieval_status",
            "must be needs_scope_selection with route scope_select",
        ),
        ({"rewrite_count": "1"}, "rewrite_count", "must be a non-negative integer"),
        ({"rewrite_count": True}, "rewrite_count", "must be a non-negative integer"),
        ({"complexity": "SIMPLE"}, "complexity", "must be simple, complex or absent"),
        ({"complexity_reason": 3}, "complexity_reason", "must be a string or absent"),
        ({"sub_questions": "a,b"}, "sub_questions", "must be a list of strings"),
        ({"sub_questions": ["a", 2]}, "sub_questions", "must be a list of strings"),
        ({"sub_questions": list("abcde")}, "sub_questions", "at most 4, got 5"),
    ],
)
def test_resume_snapshot_rejections_name_the_field(
    change: dict[str, Any], key: str, message: str
) -> None:
    with pytest.raises(InvalidArgument) as err:
        ResumeSnapshot.from_mapping({**SNAPSHOT, **change})
    assert err.value.field == f"resume_state.{key}"
    assert str(err.value).startswith(f"resume_state.{key}: {message}")


def test_resume_snapshot_from_a_final_state_falls_back_to_the_trace() -> None:
    state = {
        "question": "",
        "route": None,
        "retrieval_status": None,
        "rewrite_count": None,
        "rag_trace": {"query": "q", "route": "clarify", "retrieval_status": "needs_clarification"},
    }
    assert ResumeSnapshot.from_state(state).to_dict() == {
        "question": "q",
        "route": "clarify",
        "retrieval_status": "needs_clarification",
        "rewrite_count": 0,
        "complexity": None,
        "complexity_reason": None,
        "sub_questions": [],
    }


@pytest.mark.parametrize(
    ("target", "incoming", "expected"),
    [
        ({"score": 0.2}, {"score": 0.5}, {"score": 0.5}),
        ({"score": 0.7}, {"score": 0.5}, {"score": 0.7}),
        ({"score": 0.2, "rerank_score": 0.3}, {"score": 0.9}, {"score": 0.2, "rerank_score": 0.9}),
        ({"score": 0.2}, {"score": 0.1, "rerank_score": 0.4}, {"score": 0.2, "rerank_score": 0.4}),
        ({"score": 0.2}, {}, {"score": 0.2}),
        ({}, {"score": 0.1}, {"score": 0.1}),
    ],
)
def test_fold_score_max_rule(
    target: dict[str, Any], incoming: dict[str, Any], expected: dict[str, Any]
) -> None:
    fold_score(target, incoming)
    assert target == expected


def test_effective_score_prefers_rerank() -> None:
    assert effective_score({"score": 0.1, "rerank_score": 0.6}) == 0.6
    assert effective_score({"score": 1}) == 1.0
    assert effective_score({}) is None
