"""Run history and feedback end to end (docs/api.md#run-history): the real retrieval service, the
real orchestrator on the built-in model with its own SQLite database, every call over gRPC."""

from __future__ import annotations

import re
import time
import uuid
from pathlib import Path

import grpc
import pytest
from supermew.v1 import evaluation_pb2, orchestrator_pb2, retrieval_pb2

from orchestrator_service.history.model import HistoryEntry
from orchestrator_service.metrics import REGISTRY
from shared.codec import rag_trace_from_proto
from tests.integration.retrieval_harness import running_service
from tests.integration.test_api_keys import LEGACY, auth, entry, write_keys
from tests.integration.test_evaluation import orchestrator

pytestmark = pytest.mark.integration

E = evaluation_pb2
LEAVE = (
    b"# Leave\n\nEmployees get sixteen weeks of paid parental leave.\n\n"
    b"Sick leave is ten days a year.\n"
)
QUESTION = "How many weeks of paid parental leave do employees get?"
UUID7 = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")


async def refused(call: object) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call  # type: ignore[misc]
    return caught.value.code(), caught.value.details() or ""


def feedback_count(rating: str) -> float:
    return REGISTRY.get_sample_value("supermew_feedback_total", {"rating": rating}) or 0.0


async def test_runs_are_recorded_listed_filtered_and_rated(tmp_path: Path) -> None:
    async with running_service(tmp_path / "kb.db") as svc:
        await svc.ingest(("leave.md", LEAVE))
        async with orchestrator(
            svc.port, tmp_path / "orchestrator.sqlite3", run_history=True
        ) as stack:
            before = time.time()
            result = await stack.orchestrator.Run(
                orchestrator_pb2.RunRequest(question=QUESTION, generate_answer=True)
            )
            assert UUID7.fullmatch(result.run_id)
            assert uuid.UUID(result.run_id).version == 7
            record = await stack.evaluation.GetRun(E.GetRunRequest(name=f"runs/{result.run_id}"))
            assert (record.kind, record.question, record.route) == ("run", QUESTION, "answer")
            assert record.retrieval_status == result.retrieval_status
            assert record.answer == result.answer.text and "sixteen" in record.answer.lower()
            assert list(record.cited_document_ids) == ["leave.md"]
            assert list(record.knowledge_bases) == ["knowledge_bases/default"]
            assert rag_trace_from_proto(record.rag_trace) == rag_trace_from_proto(result.rag_trace)
            assert before - 1 <= record.create_time.seconds <= record.end_time.seconds + 1
            assert record.feedback_rating == E.Feedback.RATING_UNSPECIFIED

            events = [
                event
                async for event in stack.orchestrator.StreamRun(
                    orchestrator_pb2.RunRequest(question="What is the boiling point of lava?")
                )
            ]
            streamed = events[-1].result
            assert UUID7.fullmatch(streamed.run_id) and streamed.run_id > result.run_id
            other = await stack.evaluation.GetRun(E.GetRunRequest(name=f"runs/{streamed.run_id}"))
            assert other.route == streamed.route

            listed = await stack.evaluation.ListRuns(E.ListRunsRequest())
            assert [r.name for r in listed.runs] == [other.name, record.name]  # newest first
            answered = await stack.evaluation.ListRuns(E.ListRunsRequest(filter='route = "answer"'))
            assert [r.name for r in answered.runs] == [record.name]
            since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(before - 60))
            recent = await stack.evaluation.ListRuns(
                E.ListRunsRequest(filter=f"create_time >= {since} AND knowledge_base = default")
            )
            assert len(recent.runs) == 2
            paged = await stack.evaluation.ListRuns(E.ListRunsRequest(page_size=1))
            rest = await stack.evaluation.ListRuns(
                E.ListRunsRequest(page_size=1, page_token=paged.next_page_token)
            )
            assert [paged.runs[0].name, rest.runs[0].name] == [other.name, record.name]
            for bad in ("route ~ answer", "colour = red", "create_time > yesterday"):
                code, details = await refused(
                    stack.evaluation.ListRuns(E.ListRunsRequest(filter=bad))
                )
                assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith("filter")

            down_before = feedback_count("THUMBS_DOWN")
            given = await stack.evaluation.CreateFeedback(
                E.CreateFeedbackRequest(
                    parent=record.name,
                    feedback=E.Feedback(
                        rating=E.Feedback.THUMBS_DOWN,
                        reasons=[E.Feedback.MISSING_INFORMATION],
                        comment="Says nothing about adoption.",
                        expected_document_ids=["leave.md"],
                        corrected_answer="Sixteen weeks, adoption included.",
                    ),
                )
            )
            assert given.name.startswith(f"{record.name}/feedback/")
            assert (given.question, given.answer) == (QUESTION, record.answer)
            assert feedback_count("THUMBS_DOWN") == down_before + 1
            rated = await stack.evaluation.GetRun(E.GetRunRequest(name=record.name))
            assert rated.feedback_rating == E.Feedback.THUMBS_DOWN
            disliked = await stack.evaluation.ListRuns(
                E.ListRunsRequest(filter="feedback.rating = THUMBS_DOWN")
            )
            assert [r.name for r in disliked.runs] == [record.name]
            everything = await stack.evaluation.ListFeedback(
                E.ListFeedbackRequest(parent="runs/-", filter="reasons: MISSING_INFORMATION")
            )
            assert [f.name for f in everything.feedback] == [given.name]
            none = await stack.evaluation.ListFeedback(
                E.ListFeedbackRequest(parent=other.name, filter="rating = THUMBS_DOWN")
            )
            assert not none.feedback

            made = await stack.evaluation.CreateEvaluationSet(
                E.CreateEvaluationSetRequest(evaluation_set_id="from-feedback")
            )
            added = await stack.evaluation.AddFeedbackToEvaluationSet(
                E.AddFeedbackToEvaluationSetRequest(feedback=[given.name], evaluation_set=made.name)
            )
            (item,) = added.evaluation_items
            assert item.question == QUESTION
            assert [(r.document_id, r.grade) for r in item.relevant] == [("leave.md", 1)]
            assert item.reference_answer == "Sixteen weeks, adoption included."

            code, details = await refused(
                stack.evaluation.CreateFeedback(
                    E.CreateFeedbackRequest(parent=record.name, feedback=E.Feedback())
                )
            )
            assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith(
                "feedback.rating"
            )
            code, details = await refused(
                stack.evaluation.GetRun(E.GetRunRequest(name="runs/not-a-uuid"))
            )
            assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith("name")


async def test_without_history_feedback_needs_the_question_and_answer(tmp_path: Path) -> None:
    async with running_service(tmp_path / "kb.db") as svc:
        await svc.ingest(("leave.md", LEAVE))
        async with orchestrator(svc.port, tmp_path / "orchestrator.sqlite3") as stack:
            result = await stack.orchestrator.Run(orchestrator_pb2.RunRequest(question=QUESTION))
            assert UUID7.fullmatch(result.run_id)
            name = f"runs/{result.run_id}"
            code, details = await refused(stack.evaluation.GetRun(E.GetRunRequest(name=name)))
            assert code == grpc.StatusCode.NOT_FOUND and details.startswith("name")
            code, details = await refused(
                stack.evaluation.CreateFeedback(
                    E.CreateFeedbackRequest(
                        parent=name, feedback=E.Feedback(rating=E.Feedback.THUMBS_UP)
                    )
                )
            )
            assert code == grpc.StatusCode.INVALID_ARGUMENT
            assert details.startswith("feedback.question")
            given = await stack.evaluation.CreateFeedback(
                E.CreateFeedbackRequest(
                    parent=name,
                    feedback=E.Feedback(
                        rating=E.Feedback.THUMBS_UP, question=QUESTION, answer="Sixteen weeks."
                    ),
                )
            )
            assert given.answer == "Sixteen weeks."
            listed = await stack.evaluation.ListFeedback(E.ListFeedbackRequest(parent=name))
            assert [f.name for f in listed.feedback] == [given.name]


async def test_retention_deletes_old_runs_and_their_feedback(tmp_path: Path) -> None:
    async with (
        running_service(tmp_path / "kb.db") as svc,
        orchestrator(
            svc.port, tmp_path / "orchestrator.sqlite3", run_history=True, run_history_days=1
        ) as stack,
    ):
        history = stack.app.history
        now = int(time.time() * 1000)
        for run_id, age_days in (("old", 3), ("new", 0)):
            await history.store.record(
                HistoryEntry(
                    run_id=str(uuid.uuid5(uuid.NAMESPACE_URL, run_id)),
                    kind="run",
                    question=f"{run_id}?",
                    standalone_question="",
                    knowledge_bases=("default",),
                    filter="",
                    route="no_knowledge",
                    retrieval_status="no_hits",
                    answer="",
                    cited_document_ids=(),
                    rag_trace=None,
                    key_id="",
                    create_time_ms=now - age_days * 86_400_000,
                    end_time_ms=now - age_days * 86_400_000,
                )
            )
        old = f"runs/{uuid.uuid5(uuid.NAMESPACE_URL, 'old')}"
        await stack.evaluation.CreateFeedback(
            E.CreateFeedbackRequest(parent=old, feedback=E.Feedback(rating=E.Feedback.THUMBS_UP))
        )
        assert await history.sweep() == 1
        code, _ = await refused(stack.evaluation.GetRun(E.GetRunRequest(name=old)))
        assert code == grpc.StatusCode.NOT_FOUND
        left = await stack.evaluation.ListRuns(E.ListRunsRequest())
        assert [r.question for r in left.runs] == ["new?"]
        feedback = await stack.evaluation.ListFeedback(E.ListFeedbackRequest(parent="runs/-"))
        assert not feedback.feedback


async def test_keys_see_only_runs_on_their_knowledge_bases(tmp_path: Path) -> None:
    keys_file = tmp_path / "keys.json"
    write_keys(keys_file, [entry("reader-a"), entry("admin")])
    reader_a, admin = auth("key-reader-a"), auth("key-admin")
    async with running_service(
        tmp_path / "kb.db", auth_keys_file=str(keys_file), auth_token=LEGACY
    ) as svc:
        for kb_id in ("team-a", "team-b"):
            await svc.stub.CreateKnowledgeBase(
                retrieval_pb2.CreateKnowledgeBaseRequest(knowledge_base_id=kb_id),
                metadata=auth(LEGACY),
            )
        async with orchestrator(
            svc.port,
            tmp_path / "orchestrator.sqlite3",
            run_history=True,
            auth_keys_file=str(keys_file),
        ) as stack:
            ran = {}
            for key, kb in ((reader_a, "team-a"), (admin, "team-b")):
                result = await stack.orchestrator.Run(
                    orchestrator_pb2.RunRequest(question="Who leads Falcon?", knowledge_bases=[kb]),
                    metadata=key,
                )
                ran[kb] = f"runs/{result.run_id}"
            seen_a = await stack.evaluation.ListRuns(E.ListRunsRequest(), metadata=reader_a)
            assert [r.name for r in seen_a.runs] == [ran["team-a"]]
            assert seen_a.runs[0].key_id == "reader-a"
            code, _ = await refused(
                stack.evaluation.GetRun(E.GetRunRequest(name=ran["team-b"]), metadata=reader_a)
            )
            assert code == grpc.StatusCode.NOT_FOUND
            code, _ = await refused(
                stack.evaluation.CreateFeedback(
                    E.CreateFeedbackRequest(
                        parent=ran["team-b"], feedback=E.Feedback(rating=E.Feedback.THUMBS_UP)
                    ),
                    metadata=reader_a,
                )
            )
            assert code == grpc.StatusCode.NOT_FOUND
            admin_view = await stack.evaluation.ListRuns(E.ListRunsRequest(), metadata=admin)
            assert {r.name for r in admin_view.runs} == set(ran.values())
