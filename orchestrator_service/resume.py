"""Cross-turn HITL (SPEC.md §7, REFERENCE.md §2.11–§2.12): the 7-key resume snapshot a result
carries, its validation when it comes back, the merged question q*, and the state H0 builds."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from orchestrator_service.routing import HITL_ROUTES
from orchestrator_service.state import RagState, initial_state
from orchestrator_service.synthesis import TOOL_NAME
from shared.errors import InvalidArgument

SNAPSHOT_FIELD = "resume_state"
_STATUS_FOR_ROUTE = {"clarify": "needs_clarification", "scope_select": "needs_scope_selection"}
MAX_SUB_QUESTIONS = 4


def build_resume_state(state: Mapping[str, Any]) -> dict[str, Any]:
    """The snapshot of an HITL result: exactly the 7 keys of SPEC.md §7, None kept."""
    trace = state.get("rag_trace") or {}
    return {
        "question": state.get("question") or trace.get("query") or "",
        "route": state.get("route") or trace.get("route"),
        "retrieval_status": state.get("retrieval_status") or trace.get("retrieval_status"),
        "rewrite_count": int(state.get("rewrite_count") or 0),
        "complexity": state.get("complexity"),
        "complexity_reason": state.get("complexity_reason"),
        "sub_questions": list(state.get("sub_questions") or ()),
    }


def validate_resume_state(snapshot: Mapping[str, Any]) -> dict[str, Any]:
    """The snapshot checked against SPEC.md §7; InvalidArgument naming the failing field
    (`resume_state.<key>`) otherwise. Returns a clean 7-key copy."""

    def bad(key: str, message: str) -> InvalidArgument:
        return InvalidArgument(f"{SNAPSHOT_FIELD}.{key}", message)

    question = snapshot.get("question")
    if not isinstance(question, str) or not question.strip():
        raise bad("question", "must not be blank")
    route = snapshot.get("route")
    if route not in HITL_ROUTES:
        raise bad("route", f"must be clarify or scope_select, got {route!r}")
    status = snapshot.get("retrieval_status")
    if status != _STATUS_FOR_ROUTE[route]:
        raise bad("retrieval_status", f"must be {_STATUS_FOR_ROUTE[route]} with route {route}")
    rewrite_count = snapshot.get("rewrite_count") or 0
    if not isinstance(rewrite_count, int) or rewrite_count < 0:
        raise bad("rewrite_count", "must be a non-negative integer")
    complexity = snapshot.get("complexity")
    if complexity not in (None, "simple", "complex"):
        raise bad("complexity", f"must be simple, complex or absent, got {complexity!r}")
    reason = snapshot.get("complexity_reason")
    if reason is not None and not isinstance(reason, str):
        raise bad("complexity_reason", "must be a string or absent")
    sub_questions = list(snapshot.get("sub_questions") or ())
    if len(sub_questions) > MAX_SUB_QUESTIONS:
        raise bad("sub_questions", f"at most {MAX_SUB_QUESTIONS}, got {len(sub_questions)}")
    return {
        "question": question,
        "route": route,
        "retrieval_status": status,
        "rewrite_count": rewrite_count,
        "complexity": complexity,
        "complexity_reason": reason,
        "sub_questions": sub_questions,
    }


def refined_question(question: str, user_answer: str) -> str:
    """q* (REFERENCE.md §2.12): "{answer}：{question}" with a full-width colon, unless the
    (stripped) answer is empty or already contained in the question."""
    answer = user_answer.strip()
    if not question:
        return answer
    if not answer or answer in question:
        return question
    return f"{answer}：{question}"


def state_from_resume(snapshot: Mapping[str, Any], user_answer: str) -> RagState:
    """H0 (SPEC.md §2): a fresh main-question state for q* with the budget restored and the
    seed trace (tool identity, q*, the hitl_* keys; complexity, reason and plan only when they
    have a value). No stage, evidence or grade yet."""
    refined = refined_question(snapshot["question"], user_answer)
    trace: dict[str, Any] = {
        "tool_used": True,
        "tool_name": TOOL_NAME,
        "query": refined,
        "hitl_resumed": True,
        "hitl_answer": user_answer,
        "hitl_resume_from_status": snapshot["retrieval_status"],
        "hitl_resume_from_route": snapshot["route"],
    }
    for key in ("complexity", "complexity_reason", "sub_questions"):
        if snapshot.get(key):
            trace[key] = snapshot[key]
    state = initial_state(refined)
    state.update(
        rewrite_count=snapshot["rewrite_count"],
        complexity=snapshot.get("complexity"),
        complexity_reason=snapshot.get("complexity_reason"),
        sub_questions=list(snapshot.get("sub_questions") or ()),
        rag_trace=trace,
    )
    return state
