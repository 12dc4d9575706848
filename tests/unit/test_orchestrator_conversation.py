"""The core with in-memory clients on a conversation: the condensation runs first only when a
history is sent, the run works on the standalone question while the outcome keeps the caller's
words, a complex standalone question fans out without the history, and a schema-breaking
reply falls back to the caller's question with `condense_error` in the trace."""

from __future__ import annotations

from dataclasses import replace

import pytest

from orchestrator_service.conversation import Turn
from orchestrator_service.graph import build_graphs
from orchestrator_service.models.base import TASK_CONDENSE
from orchestrator_service.orchestrator import Orchestrator
from shared.errors import InvalidArgument, ModelOutputInvalid
from tests.fakes.in_memory import InMemoryModel, InMemoryRetriever
from tests.fakes.model_server import complexity, condense, grade
from tests.fakes.retrieval_servicer import chunk

HISTORY = [Turn("丹瑾的武器是什么？", "珊瑚法杖[1]。")]
FOLLOW, STANDALONE = "赤羽呢？", "赤羽的武器是什么？"
COMPLEX_FOLLOW = "那赤羽和墨言呢？"
COMPLEX = "比较赤羽和墨言的武器"
SUBS = ["赤羽的武器是什么？", "墨言的武器是什么？"]
DOC = chunk("roles.md", "1", "赤羽的武器是一对弯刀。")


def _decide(task: str, question: str):
    if task == TASK_CONDENSE:
        if question == "坏":
            raise ModelOutputInvalid(TASK_CONDENSE, "output violates the task schema")
        return condense({FOLLOW: STANDALONE, COMPLEX_FOLLOW: COMPLEX}.get(question, question))
    if task == "complexity_classification":
        return complexity("complex", "cmp", SUBS)
    return grade("strong", "sufficient", "answer")


def _core() -> tuple[Orchestrator, InMemoryModel, InMemoryRetriever]:
    model = InMemoryModel(_decide)
    retriever = InMemoryRetriever(lambda q: [DOC])
    return Orchestrator(model, retriever, build_graphs()), model, retriever


async def test_follow_up_runs_on_the_standalone_question() -> None:
    core, model, retriever = _core()
    outcome = await core.run(FOLLOW, history=HISTORY)
    assert (outcome.question, outcome.standalone_question) == (FOLLOW, STANDALONE)
    assert model.calls == [(TASK_CONDENSE, FOLLOW), ("evidence_grade", STANDALONE)]
    assert retriever.queries == [STANDALONE]
    trace = outcome.rag_trace or {}
    assert (trace["query"], trace["history_turns"]) == (STANDALONE, 1)
    assert "condense_error" not in trace


async def test_without_history_nothing_changes() -> None:
    core, model, _ = _core()
    outcome = await core.run(STANDALONE)
    again = await core.run(STANDALONE, history=[])
    assert replace(outcome, run_id="") == replace(again, run_id="")
    assert outcome.standalone_question == "" and outcome.run_id != again.run_id
    assert TASK_CONDENSE not in {task for task, _ in model.calls}
    assert "history_turns" not in (outcome.rag_trace or {})


async def test_complex_standalone_question_fans_out_without_the_history() -> None:
    core, model, retriever = _core()
    outcome = await core.run(COMPLEX_FOLLOW, history=HISTORY)
    assert outcome.standalone_question == COMPLEX and outcome.question == COMPLEX_FOLLOW
    assert model.calls[:2] == [
        (TASK_CONDENSE, COMPLEX_FOLLOW),
        ("complexity_classification", COMPLEX),
    ]
    assert sorted(retriever.queries) == sorted(SUBS)
    trace = outcome.rag_trace or {}
    assert trace["history_turns"] == 1 and trace["query"] == COMPLEX
    assert all("history_turns" not in sub for sub in trace["sub_traces"])


async def test_schema_breaking_reply_falls_back_to_the_question() -> None:
    core, _, retriever = _core()
    outcome = await core.run("坏", history=HISTORY)
    assert outcome.standalone_question == outcome.question == "坏"
    assert retriever.queries == ["坏"]
    assert (outcome.rag_trace or {})["condense_error"] == (
        "invalid_output: model task condense_question: output violates the task schema"
    )


async def test_history_is_checked_before_any_work() -> None:
    core, model, retriever = _core()
    with pytest.raises(InvalidArgument, match=r"^history: holds 21 turns"):
        await core.run(FOLLOW, history=HISTORY * 21)
    assert model.calls == [] and retriever.queries == []
