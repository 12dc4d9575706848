"""The LangGraph workflows (docs/trace.md#node-by-node): the main RAG graph and the resume
graph. Built by factories and compiled once per process; clients reach the nodes through the
runtime context (`RunContext`), so one compiled graph serves every request."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias

from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

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
from orchestrator_service.state import RagState

#: A compiled graph over RagState (input and output too) whose nodes get RunContext; naming the
#: context type is what lets `ainvoke(..., context=RunContext(...))` type-check.
RagGraph: TypeAlias = CompiledStateGraph[RagState, RunContext, RagState, RagState]


@dataclass(frozen=True, slots=True)
class Graphs:
    """The compiled workflows the core runs: `rag` for a new question, `resume` for H0–H2,
    each with a `_conversation` twin that condenses the question first, for a request with a
    history. Two graphs rather than a branch at START: such a branch reads (copies) the whole
    state on every run, ~13 % of a fast-path Run's graph CPU (docs/benchmarks.md)."""

    rag: RagGraph
    resume: RagGraph
    rag_conversation: RagGraph
    resume_conversation: RagGraph


def build_graphs() -> Graphs:
    """Every workflow, compiled. The composition root calls this once per process (compiled
    graphs are stateless and shared by all requests); tests that drive the core directly call
    it for their own."""
    return Graphs(
        rag=build_rag_graph(),
        resume=build_resume_graph(),
        rag_conversation=build_rag_graph(conversation=True),
        resume_conversation=build_resume_graph(conversation=True),
    )


def build_rag_graph(*, conversation: bool = False) -> RagGraph:
    """(condense, when `conversation`) → classify → simple: retrieve → grade → (rewrite →
    re-retrieve → grade) → end; complex: plan → Send fan-out to sub-agents (retrieve + grade
    each) → synthesis → end."""
    g = StateGraph(RagState, context_schema=RunContext)
    g.add_node("classify_complexity", timed_node("classify_complexity", classify_complexity))
    g.add_node("retrieve_initial", timed_node("retrieve_initial", retrieve_initial))
    g.add_node("grade_documents", timed_node("grade_documents", grade_documents))
    g.add_node("rewrite_question", timed_node("rewrite_question", rewrite_question))
    g.add_node("retrieve_rewritten", timed_node("retrieve_rewritten", retrieve_rewritten))
    g.add_node("prepare_sub_questions", timed_node("prepare_sub_questions", prepare_sub_questions))
    g.add_node("rag_sub_agent", timed_node("rag_sub_agent", rag_sub_agent))
    g.add_node("synthesis", timed_node("synthesis", synthesis))

    _start_with(g, "classify_complexity", conversation=conversation)
    g.add_conditional_edges(
        "classify_complexity", route_after_classify, ["retrieve_initial", "prepare_sub_questions"]
    )
    # simple
    g.add_edge("retrieve_initial", "grade_documents")
    g.add_conditional_edges("grade_documents", route_after_grade, ["rewrite_question", END])
    g.add_conditional_edges("rewrite_question", route_after_rewrite, ["retrieve_rewritten", END])
    g.add_edge("retrieve_rewritten", "grade_documents")
    # complex
    g.add_conditional_edges("prepare_sub_questions", fan_out, ["rag_sub_agent"])
    g.add_edge("rag_sub_agent", "synthesis")
    g.add_edge("synthesis", END)
    return g.compile(name="rag_conversation" if conversation else "rag")


def build_resume_graph(*, conversation: bool = False) -> RagGraph:
    """(condense, when `conversation`) → H1–H2: targeted retrieval with q*, one grading, end.
    No classification, fan-out, synthesis or rewrite: a rewrite verdict is returned as
    `needs_rewrite`."""
    g = StateGraph(RagState, context_schema=RunContext)
    g.add_node("retrieve_resume_query", timed_node("retrieve_resume_query", retrieve_resume_query))
    g.add_node("grade_documents", timed_node("grade_documents", grade_documents))
    _start_with(g, "retrieve_resume_query", conversation=conversation)
    g.add_edge("retrieve_resume_query", "grade_documents")
    g.add_edge("grade_documents", END)
    return g.compile(name="rag_resume_conversation" if conversation else "rag_resume")


def _start_with(
    g: StateGraph[RagState, RunContext, RagState, RagState], first: str, *, conversation: bool
) -> None:
    """START → `first`, through condense_question when `conversation` (N0′,
    docs/trace.md#conversations)."""
    if conversation:
        g.add_node("condense_question", timed_node("condense_question", condense_question))
        g.add_edge(START, "condense_question")
        g.add_edge("condense_question", first)
    else:
        g.add_edge(START, first)
