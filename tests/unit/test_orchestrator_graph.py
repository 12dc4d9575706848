"""The compiled graph with in-memory clients: concurrency of the fan-out, the defensive
rewrite-budget branch, and the clearing rules on S versus T."""

from __future__ import annotations

import asyncio

from langgraph.graph import END
from langgraph.runtime import Runtime

from orchestrator_service.graph import build_graphs, build_rag_graph
from orchestrator_service.nodes import END_NODE
from orchestrator_service.nodes.rewrite import rewrite_question, route_after_rewrite
from orchestrator_service.orchestrator import Orchestrator
from orchestrator_service.runtime import UNSCOPED, RunContext
from orchestrator_service.state import initial_state
from orchestrator_service.steps import QueueStepSink
from tests.fakes.in_memory import InMemoryModel, InMemoryRetriever
from tests.fakes.model_server import complexity, grade
from tests.fakes.retrieval_servicer import chunk

Q_CMP = "比较丹瑾与卡卡罗的战斗定位"
SUBS = ["q1？", "q2？", "q3？", "q4？"]
DOC = chunk("a.md", "1", "text")


def _decide(task: str, question: str):
    if task == "complexity_classification":
        return complexity("complex", "cmp", SUBS)
    return grade("strong", "sufficient", "answer")


async def test_sub_agents_run_concurrently() -> None:
    model = InMemoryModel(_decide, latency=0.2)
    core = Orchestrator(model, InMemoryRetriever(lambda q: [DOC]), build_graphs())
    outcome = await core.run(Q_CMP)
    assert outcome.retrieval_status == "answerable"
    assert sorted(model.calls[1:]) == [("evidence_grade", q) for q in SUBS]
    # The four gradings were awaiting their replies at the same time (sequential would be 1).
    assert model.max_in_flight == len(SUBS)


async def test_sub_results_keep_send_order_whatever_finishes_first() -> None:
    class SlowFirst(InMemoryRetriever):
        async def retrieve(self, query, *, scope=UNSCOPED, top_k=None, timeout=None):
            await asyncio.sleep(0.05 if query == "q1？" else 0)
            return await super().retrieve(query, scope=scope)

    core = Orchestrator(
        InMemoryModel(_decide),
        SlowFirst(lambda q: [chunk("a.md", "1", q, chunk_id=q)]),
        build_graphs(),
    )
    outcome = await core.run(Q_CMP)
    assert [t["query"] for t in outcome.rag_trace["sub_traces"]] == SUBS
    assert [d["text"] for d in outcome.docs] == SUBS


async def test_defensive_budget_branch_ends_at_no_knowledge_without_re_retrieval() -> None:
    retriever = InMemoryRetriever(lambda q: [DOC])
    model = InMemoryModel(_decide)
    sink = QueueStepSink()
    state = initial_state("q")
    state.update(
        rewrite_count=1, docs=[DOC], context="c", route="rewrite", rag_trace={"query": "q"}
    )
    runtime = Runtime(context=RunContext(model, retriever, sink))
    update = await rewrite_question(state, runtime)
    assert update == {
        "route": "no_knowledge",
        "retrieval_status": "no_knowledge",
        "docs": [],
        "context": "",
        "rag_trace": {
            "query": "q",
            "route": "no_knowledge",
            "retrieval_status": "no_knowledge",
            "evidence_reason": "rewrite_budget_exhausted",
        },
    }
    assert await route_after_rewrite({**state, **update}) == "__end__"
    assert model.calls == [] and retriever.queries == []
    assert [s.label for s in sink.steps] == ["正在重写查询...", "改写预算已用完，停止检索"]


def test_graph_wiring_rewrite_branch_can_end() -> None:
    # The routed nodes (graph._add_routed) declare where they may go, so the drawn graph keeps
    # every branch a conditional edge would have shown.
    graph = build_rag_graph().get_graph()

    def targets(source: str) -> set[str]:
        return {e.target for e in graph.edges if e.source == source}

    assert targets("rewrite_question") == {"retrieve_rewritten", "__end__"}
    assert targets("classify_complexity") == {"retrieve_initial", "prepare_sub_questions"}
    assert targets("grade_documents") == {"rewrite_question", "__end__"}
    assert targets("prepare_sub_questions") == {"rag_sub_agent"}
    assert targets("rag_sub_agent") == {"synthesis"}


def test_routers_run_inside_their_nodes() -> None:
    # No conditional edge: LangGraph would copy every state channel to show it the node's writes
    # on every run (docs/benchmarks.md#orchestrator_throughput).
    for graph in (build_rag_graph(), build_graphs().rag_conversation):
        assert not any(graph.builder.branches.values())


def test_routers_end_literal_is_langgraphs_end() -> None:
    # The routers return END_NODE so their Literal return types check; the graph only ends
    # the run if that is the very string LangGraph treats as END.
    assert END_NODE == END


async def test_no_knowledge_clears_state_docs_but_keeps_trace_chunks() -> None:
    def decide(task, question):
        return grade("weak", "none", "no_knowledge")

    core = Orchestrator(InMemoryModel(decide), InMemoryRetriever(lambda q: [DOC]), build_graphs())
    outcome = await core.run("丹瑾是什么属性？")
    assert outcome.docs == [] and outcome.context == ""
    assert len(outcome.rag_trace["retrieved_chunks"]) == 1
    assert outcome.hitl_resume_state is None
