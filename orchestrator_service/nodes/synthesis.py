"""C5 synthesis (docs/trace.md#synthesis-of-a-complex-question): merge the sub-agents' results into
the parent's NEW trace."""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from orchestrator_service import steps
from orchestrator_service.runtime import RunContext
from orchestrator_service.state import RagState
from orchestrator_service.synthesis import synthesize
from shared.context_text import format_context
from shared.normalize import normalize_sub_trace


async def synthesis(state: RagState, runtime: Runtime[RunContext]) -> dict[str, Any]:
    ctx = runtime.context
    # Send order, whatever order the sub-agents finished in.
    sub_results = sorted(state.get("sub_results") or [], key=lambda r: r.get("index") or 0)
    ctx.emit(state, ("🔬", f"正在合成 {len(sub_results)} 个子问题的检索结果..."))
    update = synthesize(
        question=state["question"],
        complexity_reason=state.get("complexity_reason"),
        sub_questions=state.get("sub_questions") or [],
        sub_results=sub_results,
        normalize_sub_trace=normalize_sub_trace,
    )
    docs = update["docs"]
    if docs:
        ctx.emit(state, ("✅", f"合成完成，共 {len(docs)} 个去重片段"))
    else:
        ctx.emit(state, steps.SYNTHESIS_DONE_EMPTY)
    update["context"] = format_context(docs)
    return update
