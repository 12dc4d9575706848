"""S3 rewrite_question (docs/trace.md#rewrite): one `query_rewrite` model call picks
step-back or HyDE and writes its helper text; the budget of one rewrite is spent here."""

from __future__ import annotations

from typing import Any, Literal

from langgraph.runtime import Runtime

from orchestrator_service import steps
from orchestrator_service.metrics import record_rewrite
from orchestrator_service.models.base import TASK_REWRITE, RewritePlan
from orchestrator_service.nodes import END_NODE
from orchestrator_service.routing import REWRITE_BUDGET
from orchestrator_service.runtime import RunContext
from orchestrator_service.state import RagState, RouteView
from shared.errors import ModelOutputInvalid
from shared.trace_fields import RetrievalStatus, RewriteMethod, Route

BUDGET_EXHAUSTED_REASON = "rewrite_budget_exhausted"
_HELPER_PREFIX: dict[RewriteMethod, str] = {
    RewriteMethod.STEP_BACK: "退步问题：",
    RewriteMethod.HYDE: "假设性答案文档：",
}


def rewritten_query_for(question: str, method: RewriteMethod, helper: str) -> str:
    """The query of the second retrieval: Q, a blank line, then the labelled helper text
    (full-width colon), docs/trace.md#rewrite."""
    return f"{question}\n\n{_HELPER_PREFIX[method]}{helper}"


def helper_text(plan: RewritePlan) -> str:
    """The chosen method's text; ModelOutputInvalid unless exactly that one is non-empty."""
    step_back, hyde = plan.step_back_question.strip(), plan.hyde_document.strip()
    if plan.method == RewriteMethod.STEP_BACK and step_back and not hyde:
        return plan.step_back_question
    if plan.method == RewriteMethod.HYDE and hyde and not step_back:
        return plan.hyde_document
    raise ModelOutputInvalid(TASK_REWRITE, f"{plan.method} needs exactly its own helper text")


async def rewrite_question(state: RagState, runtime: Runtime[RunContext]) -> dict[str, Any]:
    """Spend the budget (0 → 1): method, rewritten query, raw `rewrite_count` and the one
    helper text go into T; route, status and grades keep their values; stage stays `initial`.

    Defensive branch: with the budget already spent the node ends the run at no_knowledge
    (`evidence_reason = rewrite_budget_exhausted`); normal routing never gets here."""
    ctx = runtime.context
    ctx.emit(state, steps.REWRITE)
    rewrite_count = state.get("rewrite_count") or 0
    trace = dict(state.get("rag_trace") or {})
    if rewrite_count >= REWRITE_BUDGET:
        trace.update(
            route=Route.NO_KNOWLEDGE,
            retrieval_status=RetrievalStatus.NO_KNOWLEDGE,
            evidence_reason=BUDGET_EXHAUSTED_REASON,
        )
        ctx.emit(state, steps.REWRITE_EXHAUSTED)
        return {
            "route": Route.NO_KNOWLEDGE,
            "retrieval_status": RetrievalStatus.NO_KNOWLEDGE,
            "docs": [],
            "context": "",
            "rag_trace": trace,
        }
    ctx.emit(state, steps.REWRITE_CHOOSE)
    question = state["question"]
    plan = await ctx.model.rewrite_query(question, state.get("docs") or [], timeout=ctx.time_left())
    helper = helper_text(plan)
    record_rewrite(plan.method)
    rewritten = rewritten_query_for(question, plan.method, helper)
    step_back = plan.method == RewriteMethod.STEP_BACK
    helper_key = "step_back_question" if step_back else "hyde_document"
    trace.update(
        {
            "rewrite_method": plan.method,
            "rewritten_query": rewritten,
            "rewrite_count": rewrite_count + 1,
            helper_key: helper,
        }
    )
    ctx.emit(
        state, ("✅", f"已选择 {steps.METHOD_LABELS[plan.method]} 重写"), "本轮只执行这一种重写检索"
    )
    return {
        "rewrite_method": plan.method,
        "rewritten_query": rewritten,
        "step_back_question": helper if step_back else "",
        "hyde_document": "" if step_back else helper,
        "rewrite_count": rewrite_count + 1,
        "rag_trace": trace,
    }


async def route_after_rewrite(state: RouteView) -> Literal["retrieve_rewritten", "__end__"]:
    """Re-retrieval after a real rewrite; the defensive branch ends the run (never reaches
    retrieve_rewritten — docs/trace.md#rewrite)."""
    return "retrieve_rewritten" if state.get("route") == Route.REWRITE else END_NODE
