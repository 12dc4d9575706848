"""N1 classify_complexity and C1 prepare_sub_questions / the Send fan-out
(docs/trace.md#node-by-node)."""

from __future__ import annotations

from typing import Any, Literal

from langgraph.runtime import Runtime
from langgraph.types import Send

from orchestrator_service import steps
from orchestrator_service.fast_path import fast_path_reason
from orchestrator_service.metrics import record_fan_out
from orchestrator_service.models.base import TASK_COMPLEXITY
from orchestrator_service.runtime import RunContext
from orchestrator_service.state import RagState, RouteView, initial_state
from shared.errors import ModelOutputInvalid
from shared.trace_fields import MAX_SUB_QUESTIONS, Complexity


def clean_sub_questions(sub_questions: list[str] | None) -> list[str]:
    """Stripped, blank ones dropped (docs/trace.md#classification)."""
    return [sq.strip() for sq in sub_questions or () if sq and sq.strip()]


async def classify_complexity(state: RagState, runtime: Runtime[RunContext]) -> dict[str, Any]:
    """The local fast path first (S only: simple + reason, sub_questions left None); else the
    `complexity_classification` model task. T is not touched. A complex verdict needs 1–4
    valid sub-questions, otherwise the call fails naming the task."""
    ctx = runtime.context
    question = state["question"]
    ctx.emit(state, steps.CLASSIFY)
    reason = fast_path_reason(question)
    if reason is not None:
        ctx.emit(state, steps.CLASSIFY_FAST)
        return {"complexity": Complexity.SIMPLE, "complexity_reason": reason}
    result = await ctx.model.classify_complexity(question, timeout=ctx.time_left())
    if len(result.sub_questions) > MAX_SUB_QUESTIONS:
        raise ModelOutputInvalid(TASK_COMPLEXITY, f"more than {MAX_SUB_QUESTIONS} sub-questions")
    if result.complexity == Complexity.COMPLEX:
        sub_questions = clean_sub_questions(result.sub_questions)
        if not sub_questions:
            raise ModelOutputInvalid(TASK_COMPLEXITY, "complex verdict without a sub-question")
        ctx.emit(state, steps.CLASSIFY_COMPLEX, f"理由: {result.reason[:60]}")
    else:
        sub_questions = []
        ctx.emit(state, steps.CLASSIFY_SIMPLE, f"理由: {result.reason[:60]}")
    return {
        "complexity": result.complexity,
        "complexity_reason": result.reason,
        "sub_questions": sub_questions,
    }


async def route_after_classify(
    state: RouteView,
) -> Literal["prepare_sub_questions", "retrieve_initial"]:
    if state.get("complexity") == Complexity.COMPLEX:
        return "prepare_sub_questions"
    return "retrieve_initial"


async def prepare_sub_questions(state: RagState, runtime: Runtime[RunContext]) -> dict[str, Any]:
    """Tidy the parent plan and announce each sub-question; T stays None."""
    sub_questions = clean_sub_questions(state.get("sub_questions"))
    record_fan_out(len(sub_questions))
    for i, sq in enumerate(sub_questions, start=1):
        runtime.context.emit(state, ("📌", f"子问题 {i}"), f"{sq[:80]} 已加入并行检索")
    return {"sub_questions": sub_questions}


async def fan_out(state: RagState) -> list[Send]:
    """One NEW state per sub-question (is_sub_agent, budget 0, complexity None, T None),
    grouped "子问题 {i}" for progress events; the sub-agents run concurrently."""
    return [
        Send(
            "rag_sub_agent",
            initial_state(sq, is_sub_agent=True, group=f"子问题 {i}", group_label=sq, sub_index=i),
        )
        for i, sq in enumerate(state.get("sub_questions") or (), start=1)
    ]
