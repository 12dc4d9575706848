"""A run's `index` (RunRequest.index, docs/api.md#indexes): the core checks its form before
any work, naming `index`, and every Retrieve of the run — the first recall, each sub-question,
the rewrite's — carries it, as it carries the knowledge bases and the filter."""

from __future__ import annotations

import pytest

from orchestrator_service.conversation import Turn
from orchestrator_service.graph import build_graphs
from orchestrator_service.models.base import (
    TASK_COMPLEXITY,
    TASK_CONDENSE,
    TASK_GRADE,
    TASK_REWRITE,
)
from orchestrator_service.orchestrator import Orchestrator, check_scope, searched_kb_ids
from orchestrator_service.runtime import RetrievalScope
from shared.errors import InvalidArgument
from shared.index_names import index_kb_id, index_kb_name, is_index_name
from tests.fakes.in_memory import InMemoryModel, InMemoryRetriever
from tests.fakes.model_server import complexity, condense, grade, rewrite
from tests.fakes.retrieval_servicer import chunk

INDEX = "knowledge_bases/hr/indexes/e5-large-v2"
DOC = chunk("policy.md", "1", "Leave is 25 days a year.")
SUBS = ["How long is annual leave?", "How long is sick leave?"]


@pytest.mark.parametrize(
    "name",
    [
        "knowledge_bases/hr/indexes/initial",
        "knowledge_bases/default/indexes/v2",
        INDEX,
        "knowledge_bases/" + "k" * 63 + "/indexes/" + "i" * 63,
    ],
)
def test_well_formed_index_names(name) -> None:
    assert is_index_name(name)
    check_scope(RetrievalScope(index=name))


@pytest.mark.parametrize(
    "name",
    [
        "initial",  # an id alone: the name needs its knowledge base
        "indexes/initial",
        "knowledge_bases/hr",
        "knowledge_bases/hr/indexes/",
        "knowledge_bases//indexes/initial",
        "knowledge_bases/hr/indexes/Initial",  # ids are lower case
        "knowledge_bases/hr/indexes/1st",  # and start with a letter
        "knowledge_bases/hr/indexes/a_b",
        "knowledge_bases/hr/indexes/initial/",
        "knowledge_bases/hr/indexes/initial/x",
        "knowledge_bases/hr/indices/initial",
        " knowledge_bases/hr/indexes/initial",
        "knowledge_bases/hr/indexes/" + "i" * 64,
    ],
)
def test_a_malformed_index_is_invalid_argument_naming_index(name) -> None:
    assert not is_index_name(name)
    with pytest.raises(InvalidArgument, match=r"^index: must be knowledge_bases/\{kb\}/") as err:
        check_scope(RetrievalScope(index=name))
    assert err.value.field == "index"


@pytest.mark.parametrize(
    "knowledge_bases", [(), ("hr",), ("knowledge_bases/hr",), ("sales", "knowledge_bases/hr")]
)
def test_an_index_of_a_knowledge_base_the_run_searches_is_accepted(knowledge_bases) -> None:
    check_scope(RetrievalScope(knowledge_bases, index=INDEX))


@pytest.mark.parametrize("knowledge_bases", [("sales",), ("knowledge_bases/sales", "default")])
def test_an_index_of_another_knowledge_base_is_invalid_argument(knowledge_bases) -> None:
    with pytest.raises(InvalidArgument) as err:
        check_scope(RetrievalScope(knowledge_bases, index=INDEX))
    assert err.value.field == "index"
    assert str(err.value) == (
        "index: is an index of knowledge_bases/hr, which this run does not name"
    )


def test_the_knowledge_bases_a_run_searches() -> None:
    assert searched_kb_ids(RetrievalScope()) == ("default",)
    assert searched_kb_ids(RetrievalScope(index=INDEX)) == ("hr",)  # the index's own
    assert searched_kb_ids(RetrievalScope(("sales", "knowledge_bases/sales"), index=INDEX)) == (
        "sales",
    )
    assert searched_kb_ids(RetrievalScope(index="not a name")) == ("default",)


def test_index_name_parts() -> None:
    assert index_kb_id(INDEX) == "hr"
    assert index_kb_name(INDEX) == "knowledge_bases/hr"
    with pytest.raises(ValueError, match="is not knowledge_bases/"):
        index_kb_name("hr/indexes/initial")


def _core(decide) -> tuple[Orchestrator, InMemoryModel, InMemoryRetriever]:
    model = InMemoryModel(decide)
    retriever = InMemoryRetriever(lambda q: [DOC])
    return Orchestrator(model, retriever, build_graphs()), model, retriever


async def test_a_malformed_index_is_refused_before_any_work() -> None:
    core, model, retriever = _core(lambda task, q: grade("strong", "sufficient", "answer"))
    with pytest.raises(InvalidArgument, match=r"^index: "):
        await core.run("How long is annual leave?", scope=RetrievalScope(index="initial"))
    assert model.calls == [] and retriever.queries == []


async def test_every_retrieval_of_a_complex_run_reads_the_index() -> None:
    def decide(task: str, question: str):
        if task == TASK_COMPLEXITY:
            return complexity("complex", "two kinds of leave", SUBS)
        return grade("strong", "sufficient", "answer")

    core, _, retriever = _core(decide)
    scope = RetrievalScope(("hr",), "metadata.year >= 2024", INDEX)
    await core.run("Compare annual and sick leave", scope=scope)
    assert sorted(retriever.queries) == sorted(SUBS)
    assert retriever.scopes == [scope, scope]


async def test_the_rewrites_retrieval_reads_the_index_too() -> None:
    grades = iter([grade("weak", "partial", "rewrite"), grade("strong", "sufficient", "answer")])

    def decide(task: str, question: str):
        if task == TASK_GRADE:
            return next(grades)
        if task == TASK_REWRITE:
            return rewrite("step_back", "annual leave policy")
        return complexity("simple")

    core, model, retriever = _core(decide)
    scope = RetrievalScope(index=INDEX)
    outcome = await core.run("How long is annual leave?", scope=scope)
    assert outcome.route == "answer"
    assert TASK_REWRITE in {task for task, _ in model.calls}
    assert len(retriever.queries) == 2
    assert retriever.scopes == [scope, scope]


async def test_a_conversations_retrieval_and_a_resumes_read_the_scope_given() -> None:
    def decide(task: str, question: str):
        if task == TASK_CONDENSE:
            return condense("How long is annual leave at the Berlin office?")
        if task == TASK_COMPLEXITY:
            return complexity("simple")
        return grade("strong", "sufficient", "answer")

    core, _, retriever = _core(decide)
    scope = RetrievalScope(("hr",), index=INDEX)
    history = [Turn("Which office has the longest leave?", "Berlin.")]
    outcome = await core.run("And how long is it?", scope=scope, history=history)
    assert outcome.standalone_question == "How long is annual leave at the Berlin office?"
    snapshot = {
        "question": "How long is leave?",
        "route": "clarify",
        "retrieval_status": "needs_clarification",
    }
    await core.resume(snapshot, "annual leave", scope=scope, history=history)
    assert retriever.scopes == [scope, scope]
