"""N0′ condense_question (docs/trace.md#conversations): with a history, one `condense_question`
model call rewrites the question to stand alone before anything else runs; the run then
classifies, retrieves, grades and answers that standalone question. A reply that breaks the
task schema (after the client's retry) is not fatal: the caller's question is searched as it
is and `condense_error` says why."""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from orchestrator_service import steps
from orchestrator_service.models.base import TASK_CONDENSE
from orchestrator_service.runtime import RunContext
from orchestrator_service.state import ConversationState
from shared.errors import ModelOutputInvalid

#: The longest `condense_error` kept (as `rerank_error`, docs/api.md#status-codes).
MAX_ERROR_CHARS = 500


async def condense_question(
    state: ConversationState, runtime: Runtime[RunContext]
) -> dict[str, Any]:
    """question = query = the standalone question; the caller's words stay in
    `asked_question` for RunResult.question. T is not touched (docs/trace.md#node-by-node)."""
    ctx = runtime.context
    question = state["question"]
    history = state.get("history") or []
    ctx.emit(state, steps.CONDENSE, steps.history_detail(len(history)))
    error: str | None = None
    try:
        result = await ctx.model.condense_question(question, history, timeout=ctx.time_left())
        standalone = result.standalone_question.strip()
        if not standalone:
            raise ModelOutputInvalid(TASK_CONDENSE, "the standalone question is blank")
    except ModelOutputInvalid as exc:
        standalone, error = question, f"invalid_output: {exc.message}"[:MAX_ERROR_CHARS]
        ctx.emit(state, steps.CONDENSE_FALLBACK, question)
    else:
        done = steps.CONDENSE_UNCHANGED if standalone == question.strip() else steps.CONDENSE_DONE
        ctx.emit(state, done, standalone)
    return {
        "question": standalone,
        "query": standalone,
        "asked_question": question,
        "condense_error": error,
    }
