"""RunConfig.index (docs/api.md#evaluation-runs) through the real orchestrator (built-in model,
its own SQLite database) against the scripted retrieval server: a RETRIEVAL run sends it as
RetrieveRequest.index, a RUN run with every retrieval of its workflow; the run's config keeps
it for GetEvaluationRun, ListEvaluationRuns and the CLI; a malformed index, or one of a
knowledge base the set does not search, is refused naming `config.index`; and retrieval's
verdict that the index is not READY ends the run FAILED with that status."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from supermew.v1 import evaluation_pb2 as E

from tests.fakes.retrieval_servicer import FakeRetrieval, RetrievalScript, chunk
from tests.integration.test_evaluation import Orchestrator, orchestrator, run_evaluation, wait_done
from tests.integration.test_orchestrator_cli_evaluation import _cli

pytestmark = pytest.mark.integration

INDEX = "knowledge_bases/hr/indexes/e5-large"
QUESTIONS = {
    "leave": "How many days of paid leave do employees get?",
    "pay": "When are salaries paid?",
}
DOCS = {
    "leave": chunk(
        "leave.md", "0", "Employees get 25 days of paid leave a year.",
        document_id="leave.md", knowledge_base="knowledge_bases/hr",
    ),
    "pay": chunk(
        "pay.md", "0", "Salaries are paid on the last working day of each month.",
        document_id="pay.md", knowledge_base="knowledge_bases/hr",
    ),
}  # fmt: skip


def _script() -> RetrievalScript:
    script = RetrievalScript()
    for key, question in QUESTIONS.items():
        script.add(question, [DOCS[key]])
    return script


async def _set(stack: Orchestrator) -> str:
    made = await stack.evaluation.CreateEvaluationSet(
        E.CreateEvaluationSetRequest(
            evaluation_set_id="hr", evaluation_set=E.EvaluationSet(knowledge_bases=["hr"])
        )
    )
    await stack.evaluation.BatchCreateEvaluationItems(
        E.BatchCreateEvaluationItemsRequest(
            parent=made.name,
            requests=[
                E.CreateEvaluationItemRequest(
                    evaluation_item_id=key,
                    evaluation_item=E.EvaluationItem(
                        question=question,
                        relevant=[E.RelevantDocument(document_id=f"{key}.md")],
                    ),
                )
                for key, question in QUESTIONS.items()
            ],
        )
    )
    return made.name


async def test_both_modes_read_the_index_and_the_run_keeps_it(tmp_path: Path) -> None:
    async with (
        FakeRetrieval(_script()) as retrieval,
        orchestrator(retrieval.port, tmp_path / "orchestrator.sqlite3") as stack,
    ):
        name = await _set(stack)
        config = E.RunConfig(mode=E.RunConfig.RETRIEVAL, top_k=5, index=INDEX)
        run = await run_evaluation(stack, name, config)
        assert run.config == config
        assert run.metrics["recall@1"] == 1.0
        assert sorted((s.query, s.knowledge_bases, s.index) for s in retrieval.sent) == sorted(
            (q, ("knowledge_bases/hr",), INDEX) for q in QUESTIONS.values()
        )

        retrieval.sent.clear()
        run_mode = await run_evaluation(stack, name, E.RunConfig(mode=E.RunConfig.RUN, index=INDEX))
        assert run_mode.config.index == INDEX
        assert retrieval.sent and {s.index for s in retrieval.sent} == {INDEX}
        assert {s.knowledge_bases for s in retrieval.sent} == {("knowledge_bases/hr",)}

        retrieval.sent.clear()
        active = await run_evaluation(stack, name, E.RunConfig())
        assert active.config.index == "" and {s.index for s in retrieval.sent} == {""}

        got = await stack.evaluation.GetEvaluationRun(E.GetEvaluationRunRequest(name=run.name))
        assert got.config.index == INDEX
        listed = await stack.evaluation.ListEvaluationRuns(E.ListEvaluationRunsRequest(parent=name))
        assert [r.config.index for r in listed.evaluation_runs] == ["", INDEX, INDEX]

        port = stack.app.server.port
        rc, out, err = await _cli(port, "eval", "runs", "hr")
        assert rc == 0, err
        rows = [line.split() for line in out.splitlines()]
        assert rows[0] == ["run", "state", "mode", "top_k", "index", "items", "failed", "created"]
        assert [(r[2], r[4]) for r in rows[1:]] == [
            ("retrieval", "active"),
            ("run", INDEX),
            ("retrieval", INDEX),
        ]
        rc, out, err = await _cli(port, "eval", "compare", active.name, run.name)
        assert rc == 0, err
        assert out.splitlines()[:2] == [
            f"a: {active.name} (index: active)",
            f"b: {run.name} (index: {INDEX})",
        ]
        rc, out, err = await _cli(port, "eval", "run", "hr", "--index", INDEX, "--top-k", "3")
        assert rc == 0, err
        assert f"index:  {INDEX}" in out.splitlines()


@pytest.mark.parametrize(
    ("index", "message"),
    [
        ("e5-large", "config.index: must be knowledge_bases/{kb}/indexes/{id}"),
        (
            "knowledge_bases/sales/indexes/v2",
            "config.index: is an index of knowledge_bases/sales, which the set does not search",
        ),
    ],
    ids=["malformed", "other_kb"],
)
async def test_a_bad_index_is_refused_naming_config_index(tmp_path: Path, index, message) -> None:
    async with (
        FakeRetrieval(_script()) as retrieval,
        orchestrator(retrieval.port, tmp_path / "orchestrator.sqlite3") as stack,
    ):
        name = await _set(stack)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stack.evaluation.RunEvaluation(
                E.RunEvaluationRequest(evaluation_set=name, config=E.RunConfig(index=index))
            )
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert (err.value.details() or "").startswith(message)
        assert retrieval.sent == []


async def test_an_index_not_ready_fails_the_run_with_that_status(tmp_path: Path) -> None:
    script = RetrievalScript()
    details = f"index: {INDEX} is BUILDING, not READY"
    for question in QUESTIONS.values():
        script.fail(question, grpc.StatusCode.FAILED_PRECONDITION, details)
    async with (
        FakeRetrieval(script) as retrieval,
        orchestrator(retrieval.port, tmp_path / "orchestrator.sqlite3") as stack,
    ):
        name = await _set(stack)
        operation = await stack.evaluation.RunEvaluation(
            E.RunEvaluationRequest(evaluation_set=name, config=E.RunConfig(index=INDEX))
        )
        done = await wait_done(stack, operation.name)
        assert done.error.code == grpc.StatusCode.FAILED_PRECONDITION.value[0]
        assert done.error.message == details
