"""Evaluation sets and runs end to end (docs/api.md#evaluation): the real retrieval service on
Milvus Lite holding a SciFact slice, the real orchestrator (built-in model) with its own SQLite
database, every call over gRPC. The figures a RETRIEVAL run reports are those the SciFact bench
computes from Retrieve on the same store."""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.longrunning import operations_pb2_grpc
from google.longrunning import operations_proto_pb2 as operations_pb2
from google.protobuf import duration_pb2, field_mask_pb2
from supermew.v1 import (
    evaluation_pb2,
    evaluation_pb2_grpc,
    orchestrator_pb2_grpc,
    retrieval_pb2,
)

from orchestrator_service.bootstrap import App, build_app
from orchestrator_service.settings import OrchestratorSettings
from tests.integration.retrieval_harness import Service, running_service

pytestmark = pytest.mark.integration

SCIFACT = Path(__file__).resolve().parents[1] / "data" / "scifact-small"
E = evaluation_pb2


@dataclass
class Orchestrator:
    app: App
    evaluation: evaluation_pb2_grpc.EvaluationServiceStub
    operations: operations_pb2_grpc.OperationsStub
    orchestrator: orchestrator_pb2_grpc.OrchestratorServiceStub


@asynccontextmanager
async def orchestrator(
    retrieval_port: int, database: Path | str, **settings: Any
) -> AsyncIterator[Orchestrator]:
    """The real orchestrator on the built-in model, its database a SQLite file (a path) or
    any URL (PostgreSQL), started as `serve_app` starts it."""
    url = database if isinstance(database, str) else f"sqlite+aiosqlite:///{database}"
    config = OrchestratorSettings(
        _env_file=None,
        orchestrator_port=0,
        bind_host="127.0.0.1",
        retrieval_addr=f"127.0.0.1:{retrieval_port}",
        llm_base_url=None,
        orchestrator_database_url=url,
        **settings,
    )
    app = build_app(config)
    await app.start()
    port = await app.server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield Orchestrator(
            app,
            evaluation_pb2_grpc.EvaluationServiceStub(channel),
            operations_pb2_grpc.OperationsStub(channel),
            orchestrator_pb2_grpc.OrchestratorServiceStub(channel),
        )
    finally:
        await channel.close()
        await app.server.stop(0)
        await app.aclose()


def scifact() -> tuple[dict[str, str], dict[str, str], dict[str, set[str]]]:
    corpus = {}
    for line in (SCIFACT / "corpus.jsonl").read_text().splitlines():
        row = json.loads(line)
        corpus[row["_id"]] = f"{row['title']}\n\n{row['text']}".strip()
    claims = {
        json.loads(line)["_id"]: json.loads(line)["text"]
        for line in (SCIFACT / "queries.jsonl").read_text().splitlines()
    }
    qrels: dict[str, set[str]] = {}
    for line in (SCIFACT / "qrels" / "train.tsv").read_text().splitlines()[1:]:
        qid, did, _ = line.split("\t")
        qrels.setdefault(qid, set()).add(did)
    return corpus, claims, qrels


async def ingest_scifact(svc: Service) -> None:
    corpus, _, _ = scifact()
    ids = list(corpus)
    for i in range(0, len(ids), 16):
        await svc.stub.IngestDocuments(
            retrieval_pb2.IngestDocumentsRequest(
                documents=[
                    retrieval_pb2.SourceDocument(
                        filename=f"{d}.txt", document_id=d, content=corpus[d].encode()
                    )
                    for d in ids[i : i + 16]
                ]
            )
        )


def bench_ndcg_at_10(ranked: list[str], relevant: set[str]) -> float:
    """bench/_retrieval_rig.doc_metrics's nDCG@10 (binary relevance), written out again."""
    dcg = sum(1 / math.log2(i + 2) for i, d in enumerate(ranked[:10]) if d in relevant)
    idcg = sum(1 / math.log2(i + 2) for i in range(min(len(relevant), 10)))
    return dcg / idcg


async def wait_done(stack: Orchestrator, operation: str) -> operations_pb2.Operation:
    for _ in range(600):
        op = await stack.operations.WaitOperation(
            operations_pb2.WaitOperationRequest(
                name=operation, timeout=duration_pb2.Duration(seconds=5)
            )
        )
        if op.done:
            return op
    raise AssertionError(f"{operation} never finished")


async def run_evaluation(
    stack: Orchestrator, set_name: str, config: evaluation_pb2.RunConfig
) -> evaluation_pb2.EvaluationRun:
    operation = await stack.evaluation.RunEvaluation(
        E.RunEvaluationRequest(evaluation_set=set_name, config=config)
    )
    metadata = E.RunEvaluationMetadata()
    assert operation.metadata.Unpack(metadata)
    assert metadata.run.startswith(f"{set_name}/runs/")
    done = await wait_done(stack, operation.name)
    assert not done.HasField("error"), done.error
    run = E.EvaluationRun()
    assert done.response.Unpack(run)
    assert run.state == E.EvaluationRun.SUCCEEDED
    assert run.name == metadata.run
    return run


async def test_a_retrieval_run_reports_the_benchs_ndcg_and_two_runs_compare(
    tmp_path: Path,
) -> None:
    _, claims, qrels = scifact()
    async with running_service(tmp_path / "kb.db") as svc:
        await ingest_scifact(svc)
        # The bench's way: Retrieve top_k=100, documents ranked by their best chunk.
        expected = []
        for qid in qrels:
            docs, _ = await svc.retrieve(claims[qid], top_k=100)
            ranked = list(dict.fromkeys(d["document_id"] for d in docs))
            expected.append(bench_ndcg_at_10(ranked, qrels[qid]))
        async with orchestrator(svc.port, tmp_path / "orchestrator.sqlite3") as stack:
            created = await stack.evaluation.CreateEvaluationSet(
                E.CreateEvaluationSetRequest(
                    evaluation_set_id="scifact",
                    evaluation_set=E.EvaluationSet(display_name="SciFact slice"),
                )
            )
            assert created.name == "evaluation_sets/scifact"
            assert list(created.knowledge_bases) == ["knowledge_bases/default"]
            imported = await stack.evaluation.ImportEvaluationItems(
                E.ImportEvaluationItemsRequest(
                    evaluation_set=created.name,
                    format=E.ImportEvaluationItemsRequest.BEIR,
                    queries=(SCIFACT / "queries.jsonl").read_bytes(),
                    qrels=(SCIFACT / "qrels" / "train.tsv").read_bytes(),
                )
            )
            assert (imported.items_imported, imported.queries_skipped) == (len(qrels), 0)
            got = await stack.evaluation.GetEvaluationSet(
                E.GetEvaluationSetRequest(name=created.name)
            )
            assert got.item_count == len(qrels)

            deep = await run_evaluation(
                stack, created.name, E.RunConfig(mode=E.RunConfig.RETRIEVAL, top_k=100)
            )
            assert deep.metrics["ndcg@10"] == pytest.approx(sum(expected) / len(expected), abs=1e-9)
            assert deep.items_done == len(qrels) and deep.items_failed == 0
            assert deep.HasField("end_time")
            for name in ("recall@1", "precision@3", "mrr@10", "latency_p50", "latency_p95"):
                assert name in deep.metrics
            assert "route_accuracy" not in deep.metrics  # no item judged a route

            results = await stack.evaluation.ListEvaluationResults(
                E.ListEvaluationResultsRequest(run=deep.name, page_size=1000)
            )
            assert len(results.results) == len(qrels)
            first = results.results[0]
            assert first.item.startswith("evaluation_sets/scifact/items/")
            assert first.ranked_document_ids and first.latency_seconds > 0
            assert "ndcg@10" in first.metrics and not first.error

            shallow = await run_evaluation(
                stack, created.name, E.RunConfig(mode=E.RunConfig.RETRIEVAL, top_k=1)
            )
            comparison = await stack.evaluation.CompareEvaluationRuns(
                E.CompareEvaluationRunsRequest(a=deep.name, b=shallow.name)
            )
            assert comparison.items_paired == len(qrels)
            rows = {row.metric: row for row in comparison.metrics}
            recall = rows["recall@10"]
            assert recall.mean_a == pytest.approx(deep.metrics["recall@10"])
            assert recall.mean_b == pytest.approx(shallow.metrics["recall@10"])
            assert recall.difference == pytest.approx(recall.mean_b - recall.mean_a)
            # One chunk finds at most one document: ten cut-offs lose recall, never gain it.
            assert recall.difference < 0 and recall.ci_high <= 0 <= -recall.ci_low
            assert recall.won == 0 and recall.lost > 0
            assert recall.won + recall.lost + recall.tied == len(qrels)

            runs = await stack.evaluation.ListEvaluationRuns(
                E.ListEvaluationRunsRequest(parent=created.name)
            )
            assert [r.name for r in runs.evaluation_runs] == [shallow.name, deep.name]


async def test_sets_and_items_crud_and_every_bad_input(tmp_path: Path) -> None:
    async with (
        running_service(tmp_path / "kb.db") as svc,
        orchestrator(svc.port, tmp_path / "orchestrator.sqlite3") as stack,
    ):
        ev = stack.evaluation
        made = await ev.CreateEvaluationSet(
            E.CreateEvaluationSetRequest(
                evaluation_set_id="hr",
                evaluation_set=E.EvaluationSet(
                    display_name="HR", knowledge_bases=["knowledge_bases/default"]
                ),
            )
        )
        item = await ev.CreateEvaluationItem(
            E.CreateEvaluationItemRequest(
                parent=made.name,
                evaluation_item_id="leave-1",
                evaluation_item=E.EvaluationItem(
                    question="How many weeks of parental leave?",
                    relevant=[E.RelevantDocument(document_id="policy.docx", grade=2)],
                    reference_answer="Sixteen weeks.",
                    expected_route="answer",
                    tags=["hr"],
                ),
            )
        )
        assert item.name == "evaluation_sets/hr/items/leave-1"
        batch = await ev.BatchCreateEvaluationItems(
            E.BatchCreateEvaluationItemsRequest(
                parent=made.name,
                requests=[
                    E.CreateEvaluationItemRequest(
                        evaluation_item=E.EvaluationItem(
                            question=f"q{i}", expected_route="no_knowledge"
                        )
                    )
                    for i in range(3)
                ],
            )
        )
        assert len(batch.evaluation_items) == 3
        fetched = await ev.GetEvaluationItem(E.GetEvaluationItemRequest(name=item.name))
        assert fetched == item
        listed = await ev.ListEvaluationItems(E.ListEvaluationItemsRequest(parent=made.name))
        assert len(listed.evaluation_items) == 4
        await ev.DeleteEvaluationItem(E.DeleteEvaluationItemRequest(name=item.name))
        after = await ev.GetEvaluationSet(E.GetEvaluationSetRequest(name=made.name))
        assert after.item_count == 3
        updated = await ev.UpdateEvaluationSet(
            E.UpdateEvaluationSetRequest(
                evaluation_set=E.EvaluationSet(name=made.name, display_name="People"),
                update_mask=field_mask_pb2.FieldMask(paths=["display_name"]),
            )
        )
        assert (updated.display_name, updated.item_count) == ("People", 3)
        jsonl = json.dumps(
            {"question": "What is the VPN rule?", "relevant": [{"document_id": "policy.docx"}]}
        ).encode()
        imported = await ev.ImportEvaluationItems(
            E.ImportEvaluationItemsRequest(
                evaluation_set=made.name,
                format=E.ImportEvaluationItemsRequest.JSONL,
                content=jsonl,
            )
        )
        assert imported.items_imported == 1

        async def refused(call: Any, request: Any) -> tuple[grpc.StatusCode, str]:
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await call(request)
            return caught.value.code(), caught.value.details() or ""

        bad = grpc.StatusCode.INVALID_ARGUMENT
        cases = [
            (
                ev.GetEvaluationSet,
                E.GetEvaluationSetRequest(name="evaluation_sets/nope"),
                grpc.StatusCode.NOT_FOUND,
                "name",
            ),
            (ev.GetEvaluationSet, E.GetEvaluationSetRequest(name="sets/x"), bad, "name"),
            (
                ev.CreateEvaluationSet,
                E.CreateEvaluationSetRequest(evaluation_set_id="hr"),
                grpc.StatusCode.ALREADY_EXISTS,
                "evaluation_set_id",
            ),
            (
                ev.CreateEvaluationSet,
                E.CreateEvaluationSetRequest(evaluation_set_id="Bad Id"),
                bad,
                "evaluation_set_id",
            ),
            (
                ev.ImportEvaluationItems,
                E.ImportEvaluationItemsRequest(
                    evaluation_set=made.name,
                    format=E.ImportEvaluationItemsRequest.BEIR,
                    queries=b'{"_id": "1", "text": "q"}\n',
                    qrels=b"query-id\tcorpus-id\tscore\n1\td1\n",
                ),
                bad,
                "qrels",
            ),
            (
                ev.ImportEvaluationItems,
                E.ImportEvaluationItemsRequest(
                    evaluation_set=made.name,
                    format=E.ImportEvaluationItemsRequest.JSONL,
                    content=json.dumps(
                        {"question": "q", "relevant": [{"document_id": "d", "grade": 101}]}
                    ).encode(),
                ),
                bad,
                "items",
            ),
            (
                ev.ImportEvaluationItems,
                E.ImportEvaluationItemsRequest(evaluation_set=made.name),
                bad,
                "format",
            ),
            (
                ev.ImportEvaluationItems,
                E.ImportEvaluationItemsRequest(
                    evaluation_set=made.name,
                    format=E.ImportEvaluationItemsRequest.JSONL,
                    uri="file:///etc/passwd",
                ),
                bad,
                "uri",
            ),
            (
                ev.CreateEvaluationItem,
                E.CreateEvaluationItemRequest(
                    parent=made.name,
                    evaluation_item=E.EvaluationItem(
                        question="q", relevant=[E.RelevantDocument(document_id="d", grade=-1)]
                    ),
                ),
                bad,
                "evaluation_item.relevant[0].grade",
            ),
            (
                ev.CreateEvaluationItem,
                E.CreateEvaluationItemRequest(
                    parent=made.name,
                    evaluation_item=E.EvaluationItem(question="q", expected_route="maybe"),
                ),
                bad,
                "evaluation_item.expected_route",
            ),
            (
                ev.CreateEvaluationItem,
                E.CreateEvaluationItemRequest(parent=made.name, evaluation_item=E.EvaluationItem()),
                bad,
                "evaluation_item.question",
            ),
            (
                ev.RunEvaluation,
                E.RunEvaluationRequest(evaluation_set=made.name, config=E.RunConfig(top_k=0)),
                bad,
                "config.top_k",
            ),
            (
                ev.ListEvaluationResults,
                E.ListEvaluationResultsRequest(run="evaluation_sets/hr/runs/0123456789abcdef0123"),
                grpc.StatusCode.NOT_FOUND,
                "run",
            ),
            (
                ev.UpdateEvaluationSet,
                E.UpdateEvaluationSetRequest(
                    evaluation_set=E.EvaluationSet(name=made.name),
                    update_mask=field_mask_pb2.FieldMask(paths=["item_count"]),
                ),
                bad,
                "update_mask",
            ),
        ]
        for call, request, code, field in cases:
            got_code, details = await refused(call, request)
            assert got_code == code, (request, details)
            assert details.startswith(field), (field, details)
        # Nothing refused changed what was stored.
        still = await ev.GetEvaluationSet(E.GetEvaluationSetRequest(name=made.name))
        assert still.item_count == 4
        empty = await ev.CreateEvaluationSet(
            E.CreateEvaluationSetRequest(evaluation_set_id="empty")
        )
        code, details = await refused(
            ev.RunEvaluation, E.RunEvaluationRequest(evaluation_set=empty.name)
        )
        assert code == grpc.StatusCode.FAILED_PRECONDITION and details.startswith("evaluation_set")
        await ev.DeleteEvaluationSet(E.DeleteEvaluationSetRequest(name=made.name))
        code, _ = await refused(ev.GetEvaluationItem, E.GetEvaluationItemRequest(name=fetched.name))
        assert code == grpc.StatusCode.NOT_FOUND


async def test_a_run_mode_evaluation_runs_the_workflow_and_judges_routes(tmp_path: Path) -> None:
    async with running_service(tmp_path / "kb.db") as svc:
        await svc.ingest(
            (
                "leave.md",
                b"# Leave\n\nEmployees get sixteen weeks of paid parental leave.\n\n"
                b"Sick leave is ten days a year.\n",
            )
        )
        async with orchestrator(svc.port, tmp_path / "orchestrator.sqlite3") as stack:
            ev = stack.evaluation
            made = await ev.CreateEvaluationSet(
                E.CreateEvaluationSetRequest(evaluation_set_id="hr")
            )
            await ev.BatchCreateEvaluationItems(
                E.BatchCreateEvaluationItemsRequest(
                    parent=made.name,
                    requests=[
                        E.CreateEvaluationItemRequest(
                            evaluation_item_id="parental",
                            evaluation_item=E.EvaluationItem(
                                question="How many weeks of paid parental leave do employees get?",
                                relevant=[E.RelevantDocument(document_id="leave.md")],
                                reference_answer="Sixteen weeks of paid parental leave.",
                                expected_route="answer",
                            ),
                        ),
                        E.CreateEvaluationItemRequest(
                            evaluation_item_id="volcano",
                            evaluation_item=E.EvaluationItem(
                                question="What is the boiling point of lava on Jupiter's moons?",
                                expected_route="no_knowledge",
                            ),
                        ),
                    ],
                )
            )
            run = await run_evaluation(
                stack, made.name, E.RunConfig(mode=E.RunConfig.RUN, generate_answer=True)
            )
            results = {
                r.item.rsplit("/", 1)[1]: r
                for r in (
                    await ev.ListEvaluationResults(E.ListEvaluationResultsRequest(run=run.name))
                ).results
            }
            parental = results["parental"]
            assert parental.route == "answer"
            assert "sixteen" in parental.answer.lower()
            assert parental.ranked_document_ids[0] == "leave.md"
            assert "leave.md" in parental.cited_document_ids
            assert parental.metrics["route_correct"] == 1.0
            assert parental.metrics["citation_precision"] == 1.0
            assert parental.metrics["answer_f1"] > 0.3
            # The embedder's cosine of the answer and its reference (a paraphrase scores high).
            assert 0.8 < parental.metrics["answer_similarity"] <= 1.0 + 1e-6
            assert "answer_similarity" not in results["volcano"].metrics  # no reference
            assert run.metrics["answer_similarity"] == pytest.approx(
                parental.metrics["answer_similarity"]
            )
            # The share of the answer's claims the grounding check found supported.
            assert parental.metrics["groundedness"] == 1.0
            assert "groundedness" not in results["volcano"].metrics  # no answer written
            assert run.metrics["groundedness"] == 1.0
            assert all(c.support_score >= 0.6 for c in parental.citations)
            # The route figures are the items' own, averaged.
            routes = [r.metrics["route_correct"] for r in results.values()]
            assert run.metrics["route_accuracy"] == pytest.approx(sum(routes) / len(routes))


async def test_a_run_survives_a_restart_of_the_orchestrator(tmp_path: Path) -> None:
    """A run whose orchestrator stops mid-run is taken over by the next one (lease expired) and
    finishes with every item once; nothing hangs."""
    async with running_service(tmp_path / "kb.db") as svc:
        await svc.ingest(("note.md", b"The office opens at nine and closes at five.\n"))
        database = tmp_path / "orchestrator.sqlite3"
        count = 300
        async with orchestrator(svc.port, database, evaluation_lease_seconds=1.0) as first:
            made = await first.evaluation.CreateEvaluationSet(
                E.CreateEvaluationSetRequest(evaluation_set_id="many")
            )
            await first.evaluation.BatchCreateEvaluationItems(
                E.BatchCreateEvaluationItemsRequest(
                    parent=made.name,
                    requests=[
                        E.CreateEvaluationItemRequest(
                            evaluation_item=E.EvaluationItem(
                                question=f"When does the office open? ({i})",
                                relevant=[E.RelevantDocument(document_id="note.md")],
                            )
                        )
                        for i in range(count)
                    ],
                )
            )
            operation = await first.evaluation.RunEvaluation(
                E.RunEvaluationRequest(
                    evaluation_set=made.name, config=E.RunConfig(mode=E.RunConfig.RETRIEVAL)
                )
            )
            metadata = E.RunEvaluationMetadata()
            operation.metadata.Unpack(metadata)
            for _ in range(400):
                run = await first.evaluation.GetEvaluationRun(
                    E.GetEvaluationRunRequest(name=metadata.run)
                )
                if run.items_done >= 20:
                    break
                await asyncio.sleep(0.05)
            assert 0 < run.items_done < count
        async with orchestrator(svc.port, database, evaluation_lease_seconds=1.0) as second:
            done = await wait_done(second, operation.name)
            assert not done.HasField("error")
            finished = E.EvaluationRun()
            done.response.Unpack(finished)
            assert finished.state == E.EvaluationRun.SUCCEEDED
            assert finished.items_done == count and finished.items_failed == 0
            results = await second.evaluation.ListEvaluationResults(
                E.ListEvaluationResultsRequest(run=metadata.run, page_size=1000)
            )
            assert len(results.results) == count
            assert finished.metrics["recall@1"] == 1.0


async def test_the_orchestrator_serves_the_run_operations_with_its_own_api(tmp_path: Path) -> None:
    async with running_service(tmp_path / "kb.db") as svc:
        await svc.ingest(("note.md", b"The office opens at nine.\n"))
        async with orchestrator(svc.port, tmp_path / "orchestrator.sqlite3") as stack:
            made = await stack.evaluation.CreateEvaluationSet(
                E.CreateEvaluationSetRequest(evaluation_set_id="ops")
            )
            await stack.evaluation.CreateEvaluationItem(
                E.CreateEvaluationItemRequest(
                    parent=made.name, evaluation_item=E.EvaluationItem(question="When?")
                )
            )
            run = await run_evaluation(stack, made.name, E.RunConfig())
            got = await stack.operations.GetOperation(
                operations_pb2.GetOperationRequest(name=run.operation)
            )
            progress = E.RunEvaluationMetadata()
            assert got.done and got.metadata.Unpack(progress)
            assert (progress.run, progress.items_done, progress.items_total) == (run.name, 1, 1)
            assert progress.state == E.EvaluationRun.SUCCEEDED
            listed = await stack.operations.ListOperations(
                operations_pb2.ListOperationsRequest(name="operations", filter="done = true")
            )
            assert [op.name for op in listed.operations] == [run.operation]
            await stack.operations.DeleteOperation(
                operations_pb2.DeleteOperationRequest(name=run.operation)
            )
            # The run outlives its operation record.
            again = await stack.evaluation.GetEvaluationRun(
                E.GetEvaluationRunRequest(name=run.name)
            )
            assert again.state == E.EvaluationRun.SUCCEEDED


def test_the_db_command_migrates_the_orchestrators_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from orchestrator_service.__main__ import main
    from orchestrator_service.database.migrate import MIGRATIONS

    monkeypatch.setenv(
        "ORCHESTRATOR_DATABASE_URL", f"sqlite+aiosqlite:///{tmp_path / 'fresh.sqlite3'}"
    )
    assert main(["db", "current"]) == 0
    assert f"schema at no revision; this code needs {MIGRATIONS.head()}" in capsys.readouterr().out
    assert main(["db", "upgrade"]) == 0
    assert f"schema migrated from empty to {MIGRATIONS.head()}" in capsys.readouterr().out
    assert main(["db", "upgrade"]) == 0
    assert "schema already at" in capsys.readouterr().out
    monkeypatch.setenv("ORCHESTRATOR_DATABASE_URL", "mysql://nobody@localhost/x")
    assert main(["db", "upgrade"]) == 1
    assert "ORCHESTRATOR_DATABASE_URL" in capsys.readouterr().err


async def test_sets_runs_history_and_feedback_on_postgresql(
    tmp_path: Path, postgres_url: str
) -> None:
    async with (
        running_service(tmp_path / "kb.db") as svc,
        orchestrator(svc.port, postgres_url, run_history=True) as stack,
    ):
        await svc.ingest(("note.md", b"The office opens at nine and closes at five.\n"))
        ev = stack.evaluation
        made = await ev.CreateEvaluationSet(E.CreateEvaluationSetRequest(evaluation_set_id="pg"))
        await ev.ImportEvaluationItems(
            E.ImportEvaluationItemsRequest(
                evaluation_set=made.name,
                format=E.ImportEvaluationItemsRequest.JSONL,
                content=json.dumps(
                    {
                        "question": "When does the office open?",
                        "relevant": [{"document_id": "note.md", "grade": 2}],
                        "expected_route": "answer",
                        "reference_answer": "At nine.",
                    }
                ).encode(),
            )
        )
        run = await run_evaluation(
            stack, made.name, E.RunConfig(mode=E.RunConfig.RUN, generate_answer=True)
        )
        assert run.metrics["recall@1"] == 1.0 and run.metrics["route_accuracy"] == 1.0
        (result,) = (
            await ev.ListEvaluationResults(E.ListEvaluationResultsRequest(run=run.name))
        ).results
        record = await ev.GetRun(E.GetRunRequest(name=f"runs/{result.run_id}"))
        assert record.question == "When does the office open?"
        await ev.CreateFeedback(
            E.CreateFeedbackRequest(
                parent=record.name, feedback=E.Feedback(rating=E.Feedback.THUMBS_UP)
            )
        )
        liked = await ev.ListRuns(
            E.ListRunsRequest(filter="feedback.rating = THUMBS_UP AND knowledge_base = default")
        )
        assert [r.name for r in liked.runs] == [record.name]
        none = await ev.ListRuns(E.ListRunsRequest(filter="knowledge_base = defaul"))
        assert not none.runs
