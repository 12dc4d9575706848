"""The retrieval nodes (docs/trace.md#node-by-node): S1/C2 retrieve_initial, S4 retrieve_rewritten
and H1 retrieve_resume_query. Each replaces S.docs/context and writes its stage's keys of T."""

from __future__ import annotations

from typing import Any, Literal

from langgraph.runtime import Runtime

from orchestrator_service import steps
from orchestrator_service.models.base import TASK_REWRITE
from orchestrator_service.runtime import Retrieval, RunContext
from orchestrator_service.state import RagState
from shared.context_text import format_context
from shared.errors import ModelOutputInvalid
from shared.trace_fields import RETRIEVAL_META_FIELD_NAMES, TOOL_NAME, RewriteMethod, Stage


async def _retrieve(ctx: RunContext, query: str) -> Retrieval:
    # Every retrieval of the run searches the caller's knowledge bases under its filter.
    return await ctx.retrieval.retrieve(query, scope=ctx.scope, timeout=ctx.time_left())


async def retrieve_initial(state: RagState, runtime: Runtime[RunContext]) -> dict[str, Any]:
    """A NEW T: tool identity, query, D₀ as both current and initial evidence, stage
    `initial`, complexity/reason copied from S (None on a sub-question), and R."""
    ctx = runtime.context
    question = state["question"]
    ctx.emit(state, steps.RETRIEVE, "初始检索")
    found = await _retrieve(ctx, question)
    docs, meta = found.docs, found.meta
    ctx.emit(state, steps.RETRIEVE_LEVELS, steps.levels_detail(meta))
    ctx.emit(state, steps.AUTO_MERGE, steps.auto_merge_detail(meta))
    ctx.emit(state, ("✅", f"检索完成，找到 {len(docs)} 个片段"), steps.mode_detail(meta))
    if not docs:
        ctx.emit(state, steps.RETRIEVE_EMPTY)
    trace: dict[str, Any] = {
        "tool_used": True,
        "tool_name": TOOL_NAME,
        "query": question,
        "retrieved_chunks": docs,
        "initial_retrieved_chunks": docs,
        "retrieval_stage": Stage.INITIAL,
        "complexity": state.get("complexity"),
        "complexity_reason": state.get("complexity_reason"),
        **meta,
    }
    return {"query": question, "docs": docs, "context": format_context(docs), "rag_trace": trace}


async def retrieve_rewritten(state: RagState, runtime: Runtime[RunContext]) -> dict[str, Any]:
    """Retrieve with `rewritten_query`: D₁ becomes current and `rewrite_retrieved_chunks`,
    stage `rewritten`, and R is replaced (keys the second retrieval did not write are
    removed). S.query, `initial_retrieved_chunks` and the old grade stay until re-grading."""
    ctx = runtime.context
    method, rewritten = state.get("rewrite_method"), state.get("rewritten_query")
    if method not in steps.METHOD_LABELS or not rewritten:
        raise ModelOutputInvalid(TASK_REWRITE, "no rewritten query to retrieve with")
    # The guard above admits only a RewriteMethod value, so the conversion cannot fail.
    label = steps.METHOD_LABELS[RewriteMethod(method)]
    ctx.emit(state, ("🔄", f"使用 {label} 查询重新检索..."))
    found = await _retrieve(ctx, rewritten)
    docs, meta = found.docs, found.meta
    ctx.emit(
        state,
        ("🧱", f"{label} 三级检索"),
        f"L{meta.get('leaf_retrieve_level') or 3} 召回，候选 {meta.get('candidate_k') or 0}，"
        f"合并替换 {meta.get('auto_merge_replaced_chunks') or 0}",
    )
    ctx.emit(state, ("✅", f"重写检索完成，共 {len(docs)} 个片段"))
    trace = {k: v for k, v in (state.get("rag_trace") or {}).items() if k not in _R_KEYS}
    trace.update(
        rewrite_method=method,
        rewritten_query=rewritten,
        retrieved_chunks=docs,
        rewrite_retrieved_chunks=docs,
        retrieval_stage=Stage.REWRITTEN,
        **meta,
    )
    helper_key: Literal["step_back_question", "hyde_document"] = (
        "step_back_question" if method == RewriteMethod.STEP_BACK else "hyde_document"
    )
    if state.get(helper_key):
        trace[helper_key] = state[helper_key]
    return {"docs": docs, "context": format_context(docs), "rag_trace": trace}


async def retrieve_resume_query(state: RagState, runtime: Runtime[RunContext]) -> dict[str, Any]:
    """H1: retrieve with q*; Dₕ becomes current and `hitl_targeted_retrieved_chunks`, stage
    `hitl_targeted_retrieval`, strategy `targeted_retrieval`, and R. Grading follows at once."""
    ctx = runtime.context
    question = state["question"]
    ctx.emit(state, steps.RESUME_RETRIEVE, "跳过复杂度判断与子问题分解")
    found = await _retrieve(ctx, question)
    docs, meta = found.docs, found.meta
    ctx.emit(state, steps.RESUME_LEVELS, steps.levels_detail(meta))
    ctx.emit(state, steps.AUTO_MERGE, steps.auto_merge_detail(meta))
    ctx.emit(
        state, ("✅", f"HITL 针对性检索完成，找到 {len(docs)} 个片段"), steps.mode_detail(meta)
    )
    trace = dict(state.get("rag_trace") or {})
    trace.update(
        tool_used=True,
        tool_name=TOOL_NAME,
        query=question,
        retrieved_chunks=docs,
        hitl_targeted_retrieved_chunks=docs,
        hitl_resumed=True,
        hitl_resume_strategy="targeted_retrieval",
        retrieval_stage=Stage.HITL_TARGETED_RETRIEVAL,
        **meta,
    )
    return {"query": question, "docs": docs, "context": format_context(docs), "rag_trace": trace}


_R_KEYS = frozenset(RETRIEVAL_META_FIELD_NAMES)
