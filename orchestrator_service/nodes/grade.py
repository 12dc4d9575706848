"""S2/C3/S5/H2 grade_documents (docs/trace.md#node-by-node): the empty-evidence short circuit or the
`evidence_grade` model task, then the route resolver, status, HITL prompt and clearing rules."""

from __future__ import annotations

from typing import Any, Literal

from langgraph.runtime import Runtime

from orchestrator_service import steps
from orchestrator_service.models.base import EvidenceGrade
from orchestrator_service.nodes import END_NODE
from orchestrator_service.routing import (
    CLEARING_ROUTES,
    hitl_prompt_for,
    resolve_route,
    retrieval_status_for,
)
from orchestrator_service.runtime import RunContext
from orchestrator_service.state import RagState, RouteView
from shared.trace_fields import (
    GRADE_FIELD_NAMES,
    HITL_ROUTES,
    Ambiguity,
    Answerability,
    Relevance,
    RetrievalStatus,
    Route,
)

#: The grade used, without a model call, when there is no evidence
#: (docs/trace.md#routes-and-statuses).
EMPTY_EVIDENCE_GRADE = EvidenceGrade(
    relevance=Relevance.NONE,
    answerability=Answerability.NONE,
    ambiguity=Ambiguity.NONE,
    route=Route.NO_KNOWLEDGE,
    confidence=1.0,
    missing_slots=[],
    hitl_prompt="",
    hitl_options=[],
    reason="no_retrieved_documents",
)


async def grade_documents(state: RagState, runtime: Runtime[RunContext]) -> dict[str, Any]:
    """Overwrite GRADE in T (stage unchanged). clarify/scope_select/no_knowledge clear
    S.docs/context; only HITL also empties `T.retrieved_chunks` (stage snapshots stay);
    no_knowledge keeps the recalled chunks in T."""
    ctx = runtime.context
    docs = state.get("docs") or []
    ctx.emit(state, steps.GRADE)
    if docs:
        grade = await ctx.model.grade_evidence(state["question"], docs, timeout=ctx.time_left())
    else:
        grade = EMPTY_EVIDENCE_GRADE
    route = resolve_route(
        grade,
        has_docs=bool(docs),
        rewrite_count=state.get("rewrite_count") or 0,
        is_sub_agent=bool(state.get("is_sub_agent")),
    )
    status = retrieval_status_for(route, grade.answerability)
    prompt = hitl_prompt_for(route, grade)
    graded: dict[str, Any] = {
        "route": route,
        "retrieval_status": status,
        "evidence_relevance": grade.relevance,
        "evidence_answerability": grade.answerability,
        "evidence_ambiguity": grade.ambiguity,
        "evidence_confidence": grade.confidence,
        "evidence_reason": grade.reason,
        "missing_slots": list(grade.missing_slots),
        "hitl_prompt": prompt,
        "hitl_options": list(grade.hitl_options),
    }
    trace = dict(state.get("rag_trace") or {})
    # The catalogue says which keys a grading overwrites; a GRADE key missing above fails here.
    trace.update({name: graded[name] for name in GRADE_FIELD_NAMES})
    # The reason is trace-only: S has no evidence_reason.
    update: dict[str, Any] = {k: v for k, v in graded.items() if k != "evidence_reason"}
    update["rag_trace"] = trace
    if route in CLEARING_ROUTES:
        update["docs"], update["context"] = [], ""
    if route in HITL_ROUTES and docs:
        trace["retrieved_chunks"] = []

    if route == Route.ANSWER:
        partial = status == RetrievalStatus.PARTIAL
        icon_label = steps.GRADE_PARTIAL if partial else steps.GRADE_ANSWER
        ctx.emit(state, icon_label, steps.confidence_detail(grade.confidence))
    elif route == Route.REWRITE:
        ctx.emit(state, steps.GRADE_REWRITE, steps.confidence_detail(grade.confidence))
    elif route in HITL_ROUTES:
        ctx.emit(state, steps.GRADE_HITL, prompt)
    else:
        ctx.emit(state, steps.GRADE_NO_KNOWLEDGE, grade.reason or Route.NO_KNOWLEDGE.value)
    return update


async def route_after_grade(state: RouteView) -> Literal["rewrite_question", "__end__"]:
    """Only a rewrite verdict continues the main graph; every other route ends the run."""
    return "rewrite_question" if state.get("route") == Route.REWRITE else END_NODE
