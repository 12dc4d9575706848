"""S, the run state passed between graph nodes (docs/trace.md#node-by-node). The raw
trace T lives in `rag_trace`; the request's clients and progress sink are not state but the
graph's runtime context (orchestrator_service.runtime)."""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Annotated, Any, TypedDict

from orchestrator_service.conversation import Turn


class RagState(TypedDict, total=False):
    question: str
    query: str
    docs: list[dict[str, Any]]
    context: str
    route: str | None
    retrieval_status: str | None
    evidence_relevance: str | None
    evidence_answerability: str | None
    evidence_ambiguity: str | None
    evidence_confidence: float | None
    missing_slots: list[str]
    hitl_prompt: str
    hitl_options: list[str]
    rewrite_count: int
    rewrite_method: str | None
    rewritten_query: str | None
    step_back_question: str | None
    hyde_document: str | None
    rag_trace: dict[str, Any] | None
    complexity: str | None
    complexity_reason: str | None
    sub_questions: list[str] | None
    is_sub_agent: bool
    # Parallel sub-agent results; the additive reducer gathers the Send fan-out.
    sub_results: Annotated[list[dict[str, Any]], operator.add]
    # Progress-event grouping of a sub-agent ("子问题 {i}", the sub-question) and its position.
    rag_step_group: str | None
    rag_step_group_label: str | None
    sub_index: int | None


class RouteView(TypedDict, total=False):
    """The keys the routers after classify, grade and rewrite read. Each router runs inside
    its node (`graph._add_routed`) on these keys as the node's update leaves them, not as a
    conditional edge, which would copy every channel of the state on every run
    (docs/benchmarks.md#orchestrator_throughput)."""

    route: str | None
    complexity: str | None


class ConversationState(RagState, total=False):
    """S of a run with a history (docs/trace.md#conversations): the request's earlier turns,
    the caller's own words once `question` holds the standalone question, and why a
    condensation fell back. A run without a history runs on RagState alone, so its state is
    exactly today's and its graph has no channels for these (each costs every run some CPU)."""

    history: list[Turn]
    asked_question: str | None
    condense_error: str | None


def initial_state(
    question: str,
    *,
    is_sub_agent: bool = False,
    group: str | None = None,
    group_label: str | None = None,
    sub_index: int | None = None,
) -> RagState:
    """N0 (docs/trace.md#node-by-node): question = query = Q, budget 0, no evidence, T = None."""
    return {
        "question": question,
        "query": question,
        "docs": [],
        "context": "",
        "route": None,
        "retrieval_status": None,
        "evidence_relevance": None,
        "evidence_answerability": None,
        "evidence_ambiguity": None,
        "evidence_confidence": None,
        "missing_slots": [],
        "hitl_prompt": "",
        "hitl_options": [],
        "rewrite_count": 0,
        "rewrite_method": None,
        "rewritten_query": None,
        "step_back_question": None,
        "hyde_document": None,
        "rag_trace": None,
        "complexity": None,
        "complexity_reason": None,
        "sub_questions": None,
        "is_sub_agent": is_sub_agent,
        "sub_results": [],
        "rag_step_group": group,
        "rag_step_group_label": group_label,
        "sub_index": sub_index,
    }


def with_history(state: RagState, history: Sequence[Turn]) -> ConversationState:
    """`state` with the request's earlier turns, oldest first."""
    return {**state, "history": list(history)}
