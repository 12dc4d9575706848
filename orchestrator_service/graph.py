"""The LangGraph workflows (docs/trace.md#node-by-node): the main RAG graph and the resume
graph. Built by factories and compiled once per process; clients reach the nodes through the
runtime context (`RunContext`), so one compiled graph serves every request."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias, TypeVar

from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import Runtime
from langgraph.types import Command, Send

from orchestrator_service.metrics import timed_node
from orchestrator_service.nodes.classify import (
    classify_complexity,
    fan_out,
    prepare_sub_questions,
    route_after_classify,
)
from orchestrator_service.nodes.condense import condense_question
from orchestrator_service.nodes.grade import grade_documents, route_after_grade
from orchestrator_service.nodes.retrieve import (
    retrieve_initial,
    retrieve_resume_query,
    retrieve_rewritten,
)
from orchestrator_service.nodes.rewrite import rewrite_question, route_after_rewrite
from orchestrator_service.nodes.sub_agent import rag_sub_agent
from orchestrator_service.nodes.synthesis import synthesis
from orchestrator_service.runtime import RunContext
from orchestrator_service.state import ConversationState, RagState

#: A compiled graph over RagState (input and output too) whose nodes get RunContext; naming the
#: context type is what lets `ainvoke(..., context=RunContext(...))` type-check.
RagGraph: TypeAlias = CompiledStateGraph[RagState, RunContext, RagState, RagState]
#: The same over ConversationState: the workflows of a request with a history.
ConversationGraph: TypeAlias = CompiledStateGraph[
    ConversationState, RunContext, ConversationState, ConversationState
]


S = TypeVar("S", bound=RagState)


@dataclass(frozen=True, slots=True)
class Graphs:
    """The compiled workflows the core runs: `rag` for a new question, `resume` for H0–H2,
    each with a `_conversation` twin over ConversationState that condenses the question
    first, for a request with a history. Twins rather than a branch at START: such a branch
    reads (copies) the whole state on every run, and the conversation keys would be channels
    of every run (docs/benchmarks.md#orchestrator_throughput)."""

    rag: RagGraph
    resume: RagGraph
    rag_conversation: ConversationGraph
    resume_conversation: ConversationGraph


def build_graphs() -> Graphs:
    """Every workflow, compiled. The composition root calls this once per process (compiled
    graphs are stateless and shared by all requests); tests that drive the core directly call
    it for their own."""
    return Graphs(
        rag=build_rag_graph(),
        resume=build_resume_graph(),
        rag_conversation=build_rag_conversation_graph(),
        resume_conversation=build_resume_conversation_graph(),
    )


def build_rag_graph() -> RagGraph:
    """classify → simple: retrieve → grade → (rewrite → re-retrieve → grade) → end; complex:
    plan → Send fan-out to sub-agents (retrieve + grade each) → synthesis → end."""
    g = _rag_workflow(RagState)
    g.add_edge(START, "classify_complexity")
    return g.compile(name="rag")


def build_rag_conversation_graph() -> ConversationGraph:
    """condense → the rest of `build_rag_graph`."""
    g = _rag_workflow(ConversationState)
    _condense_before(g, "classify_complexity")
    return g.compile(name="rag_conversation")


def build_resume_graph() -> RagGraph:
    """H1–H2: targeted retrieval with q*, one grading, end. No classification, fan-out,
    synthesis or rewrite: a rewrite verdict is returned as `needs_rewrite`."""
    g = _resume_workflow(RagState)
    g.add_edge(START, "retrieve_resume_query")
    return g.compile(name="rag_resume")


def build_resume_conversation_graph() -> ConversationGraph:
    """condense q* → the rest of `build_resume_graph`."""
    g = _resume_workflow(ConversationState)
    _condense_before(g, "retrieve_resume_query")
    return g.compile(name="rag_resume_conversation")


def _rag_workflow(schema: type[S]) -> StateGraph[S, RunContext, S, S]:
    """The main workflow from classify_complexity on (its START edge is the caller's)."""
    g = StateGraph(schema, context_schema=RunContext)
    _add_routed(
        g,
        "classify_complexity",
        classify_complexity,
        route_after_classify,
        ("retrieve_initial", "prepare_sub_questions"),
    )
    g.add_node("retrieve_initial", timed_node("retrieve_initial", retrieve_initial))
    _add_routed(g, "grade_documents", grade_documents, route_after_grade, ("rewrite_question", END))
    _add_routed(
        g, "rewrite_question", rewrite_question, route_after_rewrite, ("retrieve_rewritten", END)
    )
    g.add_node("retrieve_rewritten", timed_node("retrieve_rewritten", retrieve_rewritten))
    _add_routed(g, "prepare_sub_questions", prepare_sub_questions, fan_out, ("rag_sub_agent",))
    g.add_node("rag_sub_agent", timed_node("rag_sub_agent", rag_sub_agent))
    g.add_node("synthesis", timed_node("synthesis", synthesis))

    g.add_edge("retrieve_initial", "grade_documents")
    g.add_edge("retrieve_rewritten", "grade_documents")
    g.add_edge("rag_sub_agent", "synthesis")
    g.add_edge("synthesis", END)
    return g


def _resume_workflow(schema: type[S]) -> StateGraph[S, RunContext, S, S]:
    """The resume workflow from retrieve_resume_query on (its START edge is the caller's)."""
    g = StateGraph(schema, context_schema=RunContext)
    g.add_node("retrieve_resume_query", timed_node("retrieve_resume_query", retrieve_resume_query))
    g.add_node("grade_documents", timed_node("grade_documents", grade_documents))
    g.add_edge("retrieve_resume_query", "grade_documents")
    g.add_edge("grade_documents", END)
    return g


#: What the routers read: `RouteView`'s keys, and the sub-questions `fan_out` sends.
_ROUTER_KEYS = ("route", "complexity", "sub_questions")


def _add_routed(
    g: StateGraph[S, RunContext, S, S],
    name: str,
    node: Callable[[S, Runtime[RunContext]], Awaitable[dict[str, Any]]],
    router: Callable[[Any], Awaitable[str | list[Send]]],
    destinations: tuple[str, ...],
) -> None:
    """`node` followed by its conditional edge, taken inside the node: it returns a Command
    whose `goto` is `router` applied to the state as the node's update leaves it. The same
    route as `add_conditional_edges(name, router, destinations)`, without the copy of every
    state channel LangGraph makes to show a conditional edge the node's writes, on every run
    (docs/benchmarks.md#orchestrator_throughput). The node stays a plain function of the state
    returning its update; `destinations` keep the drawn graph's branches."""
    timed = timed_node(name, node)

    async def routed(state: S, runtime: Runtime[RunContext]) -> Command[str]:
        update = await timed(state, runtime)
        return Command(update=update, goto=await router(_after(state, update)))

    g.add_node(name, routed, destinations=destinations)


def _after(state: Mapping[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    return {key: update[key] if key in update else state.get(key) for key in _ROUTER_KEYS}


def _condense_before(
    g: StateGraph[ConversationState, RunContext, ConversationState, ConversationState],
    first: str,
) -> None:
    """START → condense_question (N0′, docs/trace.md#conversations) → `first`."""
    g.add_node("condense_question", timed_node("condense_question", condense_question))
    g.add_edge(START, "condense_question")
    g.add_edge("condense_question", first)
