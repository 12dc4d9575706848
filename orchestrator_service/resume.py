"""Cross-turn HITL (docs/trace.md#the-resume-snapshot): the 7-key resume snapshot a result
carries, its validation when it comes back, the merged question q*, and the state H0 builds."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from orchestrator_service.state import RagState, initial_state
from shared.errors import InvalidArgument
from shared.trace_fields import (
    HITL_RESUME_STATE_FIELDS,
    HITL_STATUS_FOR_ROUTE,
    MAX_SUB_QUESTIONS,
    TOOL_NAME,
    Complexity,
    FieldSpec,
    RetrievalStatus,
    Route,
)

SNAPSHOT_FIELD = "resume_state"
_SPECS: dict[str, FieldSpec] = {spec.name: spec for spec in HITL_RESUME_STATE_FIELDS}


def _bad(key: str, message: str) -> InvalidArgument:
    return InvalidArgument(f"{SNAPSHOT_FIELD}.{key}", message)


def _allowed(key: str) -> frozenset[str]:
    return _SPECS[key].allowed or frozenset()


@dataclass(frozen=True, slots=True)
class ResumeSnapshot:
    """The resume snapshot (docs/trace.md#the-resume-snapshot): exactly the keys of the catalogue's
    HITL_RESUME_STATE_FIELDS. `complexity` / `complexity_reason` are None when unknown."""

    question: str
    route: Route
    retrieval_status: RetrievalStatus
    rewrite_count: int
    complexity: Complexity | None
    complexity_reason: str | None
    sub_questions: tuple[str, ...]

    @classmethod
    def from_mapping(cls, snapshot: Mapping[str, Any]) -> ResumeSnapshot:
        """A snapshot coming back from a caller, checked against the catalogue (kinds, allowed
        values) and its rules (question not blank, status matching the route, budget ≥ 0, at
        most MAX_SUB_QUESTIONS sub-questions). InvalidArgument names the failing field as
        `resume_state.<key>`. A missing rewrite_count or sub_questions reads as 0 / none."""
        question = snapshot.get("question")
        if not isinstance(question, str) or not question.strip():
            raise _bad("question", "must not be blank")
        route = snapshot.get("route")
        if not isinstance(route, str) or route not in _allowed("route"):
            raise _bad("route", f"must be clarify or scope_select, got {route!r}")
        expected = HITL_STATUS_FOR_ROUTE[Route(route)]
        status = snapshot.get("retrieval_status")
        if not isinstance(status, str) or status != expected:
            raise _bad("retrieval_status", f"must be {expected} with route {route}")
        rewrite_count = snapshot.get("rewrite_count") or 0
        if (
            not isinstance(rewrite_count, int)
            or isinstance(rewrite_count, bool)
            or rewrite_count < 0
        ):
            raise _bad("rewrite_count", "must be a non-negative integer")
        complexity = snapshot.get("complexity")
        if complexity is not None and (
            not isinstance(complexity, str) or complexity not in _allowed("complexity")
        ):
            raise _bad("complexity", f"must be simple, complex or absent, got {complexity!r}")
        reason = snapshot.get("complexity_reason")
        if reason is not None and not isinstance(reason, str):
            raise _bad("complexity_reason", "must be a string or absent")
        sub_questions = snapshot.get("sub_questions") or ()
        if not isinstance(sub_questions, list | tuple) or not all(
            isinstance(sq, str) for sq in sub_questions
        ):
            raise _bad("sub_questions", "must be a list of strings")
        if len(sub_questions) > MAX_SUB_QUESTIONS:
            raise _bad("sub_questions", f"at most {MAX_SUB_QUESTIONS}, got {len(sub_questions)}")
        return cls(
            question=question,
            route=Route(route),
            retrieval_status=expected,
            rewrite_count=rewrite_count,
            complexity=None if complexity is None else Complexity(complexity),
            complexity_reason=reason,
            sub_questions=tuple(sub_questions),
        )

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> ResumeSnapshot:
        """The snapshot of an HITL result's final state (route and status falling back to
        the trace's). Built, not validated: the workflow only ends HITL with a matching pair."""
        trace = state.get("rag_trace") or {}
        complexity = state.get("complexity")
        return cls(
            question=state.get("question") or trace.get("query") or "",
            # "" when both are missing: not a member, so the enum raises as it would on None.
            route=Route(state.get("route") or trace.get("route", "")),
            retrieval_status=RetrievalStatus(
                state.get("retrieval_status") or trace.get("retrieval_status", "")
            ),
            rewrite_count=int(state.get("rewrite_count") or 0),
            complexity=None if complexity is None else Complexity(complexity),
            complexity_reason=state.get("complexity_reason"),
            sub_questions=tuple(state.get("sub_questions") or ()),
        )

    def to_dict(self) -> dict[str, Any]:
        """The 7-key dict form (None kept, plain strings) the codec and the CLI's JSON carry."""
        return {
            "question": self.question,
            "route": self.route.value,
            "retrieval_status": self.retrieval_status.value,
            "rewrite_count": self.rewrite_count,
            "complexity": None if self.complexity is None else self.complexity.value,
            "complexity_reason": self.complexity_reason,
            "sub_questions": list(self.sub_questions),
        }


#: A reply that picks an option by its place rather than naming it: "2", "#2", "option 2",
#: "no. 2", "B", "the second (one)", "the last", "第二个" (docs/trace.md#the-resume-snapshot).
CHOICE = (
    r"(?:(?:option\s*|#\s*|no\.?\s*)?(?P<number>\d{1,2})|(?P<letter>[A-Ha-h])|"
    r"(?:the\s+)?(?P<ordinal>first|second|third|fourth|fifth|last)(?:\s+one)?|"
    r"第(?P<zh>[一二三四五六七八\d])(?:个|项|种|份)?)"
)
_CHOICE_REPLY = re.compile(rf"^\s*{CHOICE}\s*$", re.IGNORECASE)
#: Letters and digits that continue a Latin word: a reply found next to one is inside it.
_WORD_CHAR = "0-9A-Za-z\u00c0-\u024f"


def is_choice(reply: str) -> bool:
    """Whether `reply` picks an option by its place (see CHOICE)."""
    return _CHOICE_REPLY.match(reply) is not None


def already_asked(question: str, answer: str) -> bool:
    """Whether the reply is already part of the question: found there as written (letters in
    any case), not inside a longer word ("Pro" is not in "product", "2" not in "25", "b" not
    in "bakery"). Chinese has no word breaks, so a Chinese reply is looked for as it is."""
    before = rf"(?<![{_WORD_CHAR}])" if re.match(rf"[{_WORD_CHAR}]", answer) else ""
    after = rf"(?![{_WORD_CHAR}])" if re.search(rf"[{_WORD_CHAR}]$", answer) else ""
    return re.search(before + re.escape(answer) + after, question, re.IGNORECASE) is not None


def refined_question(question: str, user_answer: str) -> str:
    """q* (docs/trace.md#the-resume-snapshot): "{answer}：{question}" with a full-width colon,
    unless the (stripped) answer is empty or already part of the question (`already_asked`).
    A reply choosing an option by its place ("2", "B", "第二个") is always kept: it names no
    part of the question, even where the question holds the same characters ("Kestrel 2")."""
    answer = user_answer.strip()
    if not question:
        return answer
    if not answer or (not is_choice(answer) and already_asked(question, answer)):
        return question
    return f"{answer}：{question}"


def state_from_resume(snapshot: ResumeSnapshot, user_answer: str) -> RagState:
    """H0 (docs/trace.md#node-by-node): a fresh main-question state for q* with the budget restored
    and the seed trace (tool identity, q*, the hitl_* keys; complexity, reason and plan only when
    they have a value). No stage, evidence or grade yet."""
    refined = refined_question(snapshot.question, user_answer)
    trace: dict[str, Any] = {
        "tool_used": True,
        "tool_name": TOOL_NAME,
        "query": refined,
        "hitl_resumed": True,
        "hitl_answer": user_answer,
        "hitl_resume_from_status": snapshot.retrieval_status.value,
        "hitl_resume_from_route": snapshot.route.value,
    }
    if snapshot.complexity:
        trace["complexity"] = snapshot.complexity.value
    if snapshot.complexity_reason:
        trace["complexity_reason"] = snapshot.complexity_reason
    if snapshot.sub_questions:
        trace["sub_questions"] = list(snapshot.sub_questions)
    state = initial_state(refined)
    state.update(
        {
            "rewrite_count": snapshot.rewrite_count,
            "complexity": snapshot.complexity,
            "complexity_reason": snapshot.complexity_reason,
            "sub_questions": list(snapshot.sub_questions),
            "rag_trace": trace,
        }
    )
    return state
