"""The evaluation records as protos (supermew.v1 evaluation messages) and back: one place for
the servicer and the runner (whose operation metadata and response are these messages)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from google.protobuf import any_pb2, timestamp_pb2
from supermew.v1 import evaluation_pb2, orchestrator_pb2

from orchestrator_service.evaluation.compare import MetricComparison
from orchestrator_service.evaluation.model import Item, RelevantDocument, RunConfig, Turn
from orchestrator_service.evaluation.names import item_name, run_name, set_name
from orchestrator_service.evaluation.store import RunRecord, SetRecord, StoredItem
from orchestrator_service.history.model import REASONS, FeedbackRecord, HistoryEntry
from orchestrator_service.history.service import FeedbackInput
from shared.codec import rag_trace_to_proto

_MODE = evaluation_pb2.RunConfig.Mode


def timestamp(ms: int) -> timestamp_pb2.Timestamp:
    stamp = timestamp_pb2.Timestamp()
    stamp.FromMilliseconds(ms)
    return stamp


def set_to_proto(record: SetRecord) -> evaluation_pb2.EvaluationSet:
    return evaluation_pb2.EvaluationSet(
        name=set_name(record.id),
        display_name=record.display_name,
        knowledge_bases=[f"knowledge_bases/{kb}" for kb in record.knowledge_bases],
        filter=record.filter,
        create_time=timestamp(record.create_time_ms),
        item_count=record.item_count,
    )


def item_from_proto(pb: evaluation_pb2.EvaluationItem, item_id: str = "") -> Item:
    return Item(
        question=pb.question,
        history=tuple(Turn(t.question, t.answer) for t in pb.history),
        relevant=tuple(
            RelevantDocument(
                r.document_id,
                r.knowledge_base.removeprefix("knowledge_bases/"),
                r.grade if r.HasField("grade") else 1,
            )
            for r in pb.relevant
        ),
        reference_answer=pb.reference_answer,
        expected_route=pb.expected_route,
        tags=tuple(pb.tags),
        item_id=item_id,
    )


def item_to_proto(stored: StoredItem) -> evaluation_pb2.EvaluationItem:
    item = stored.item
    return evaluation_pb2.EvaluationItem(
        name=item_name(stored.set_id, stored.id),
        question=item.question,
        history=[
            orchestrator_pb2.ConversationTurn(question=t.question, answer=t.answer)
            for t in item.history
        ],
        relevant=[
            evaluation_pb2.RelevantDocument(
                document_id=r.document_id, knowledge_base=r.knowledge_base, grade=r.grade
            )
            for r in item.relevant
        ],
        reference_answer=item.reference_answer,
        expected_route=item.expected_route,
        tags=list(item.tags),
    )


def config_from_proto(pb: evaluation_pb2.RunConfig) -> RunConfig:
    return RunConfig(
        mode="RUN" if pb.mode == _MODE.RUN else "RETRIEVAL",
        top_k=pb.top_k if pb.HasField("top_k") else None,
        generate_answer=pb.generate_answer,
        concurrency=pb.concurrency if pb.HasField("concurrency") else None,
        index=pb.index,
    )


def config_to_proto(config: RunConfig) -> evaluation_pb2.RunConfig:
    pb = evaluation_pb2.RunConfig(
        mode=_MODE.RUN if config.mode == "RUN" else _MODE.RETRIEVAL,
        generate_answer=config.generate_answer,
        index=config.index,
    )
    if config.top_k is not None:
        pb.top_k = config.top_k
    if config.concurrency is not None:
        pb.concurrency = config.concurrency
    return pb


def run_to_proto(run: RunRecord) -> evaluation_pb2.EvaluationRun:
    pb = evaluation_pb2.EvaluationRun(
        name=run_name(run.set_id, run.id),
        config=config_to_proto(RunConfig.of(run.config)),
        state=run.state.name,
        metrics=dict(run.metrics),
        create_time=timestamp(run.create_time_ms),
        items_total=run.items_total,
        items_done=run.items_done,
        items_failed=run.items_failed,
        operation=f"operations/{run.id}",
    )
    if run.end_time_ms is not None:
        pb.end_time.CopyFrom(timestamp(run.end_time_ms))
    return pb


def run_metadata(run: RunRecord, update_ms: int) -> evaluation_pb2.RunEvaluationMetadata:
    return evaluation_pb2.RunEvaluationMetadata(
        run=run_name(run.set_id, run.id),
        state=run.state.name,
        items_total=run.items_total,
        items_done=run.items_done,
        create_time=timestamp(run.create_time_ms),
        update_time=timestamp(update_ms),
    )


def packed_run_metadata(run: RunRecord, update_ms: int) -> bytes:
    """The metadata as the operation store keeps it: a serialized google.protobuf.Any, which
    GetOperation and WaitOperation return as Operation.metadata."""
    packed = any_pb2.Any()
    packed.Pack(run_metadata(run, update_ms))
    return packed.SerializeToString()


def result_to_proto(
    set_id: str, item_id: str, body: Mapping[str, Any]
) -> evaluation_pb2.EvaluationResult:
    return evaluation_pb2.EvaluationResult(
        item=item_name(set_id, item_id),
        question=body.get("question", ""),
        ranked_document_ids=list(body.get("ranked", ())),
        route=body.get("route", ""),
        answer=body.get("answer", ""),
        metrics={k: float(v) for k, v in body.get("metrics", {}).items()},
        latency_seconds=float(body.get("latency", 0.0)),
        run_id=body.get("run_id", ""),
        error=body.get("error", ""),
        cited_document_ids=list(body.get("cited", ())),
        citations=[orchestrator_pb2.Citation(**c) for c in body.get("citations", ())],
    )


def comparison_to_proto(row: MetricComparison) -> evaluation_pb2.MetricComparison:
    return evaluation_pb2.MetricComparison(
        metric=row.metric,
        mean_a=row.mean_a,
        mean_b=row.mean_b,
        difference=row.difference,
        ci_low=row.ci_low,
        ci_high=row.ci_high,
        won=row.won,
        lost=row.lost,
        tied=row.tied,
    )


def history_to_proto(entry: HistoryEntry) -> evaluation_pb2.RunRecord:
    pb = evaluation_pb2.RunRecord(
        name=f"runs/{entry.run_id}",
        kind=entry.kind,
        question=entry.question,
        standalone_question=entry.standalone_question,
        knowledge_bases=[f"knowledge_bases/{kb}" for kb in entry.knowledge_bases],
        filter=entry.filter,
        route=entry.route,
        retrieval_status=entry.retrieval_status,
        answer=entry.answer,
        cited_document_ids=list(entry.cited_document_ids),
        key_id=entry.key_id,
        create_time=timestamp(entry.create_time_ms),
        end_time=timestamp(entry.end_time_ms),
        feedback_rating=entry.feedback_rating.name,
    )
    if entry.rag_trace is not None:
        pb.rag_trace.CopyFrom(rag_trace_to_proto(entry.rag_trace))
    return pb


def feedback_input(pb: evaluation_pb2.Feedback) -> FeedbackInput:
    return FeedbackInput(
        rating=int(pb.rating),
        reasons=tuple(int(r) for r in pb.reasons),
        comment=pb.comment,
        expected_document_ids=tuple(pb.expected_document_ids),
        corrected_answer=pb.corrected_answer,
        question=pb.question,
        answer=pb.answer,
    )


def feedback_to_proto(record: FeedbackRecord) -> evaluation_pb2.Feedback:
    return evaluation_pb2.Feedback(
        name=record.name,
        rating=record.rating.name,
        reasons=[REASONS[r] for r in record.reasons],
        comment=record.comment,
        expected_document_ids=list(record.expected_document_ids),
        corrected_answer=record.corrected_answer,
        question=record.question,
        answer=record.answer,
        create_time=timestamp(record.create_time_ms),
        key_id=record.key_id,
    )


def item_from_feedback(record: FeedbackRecord, entry: HistoryEntry | None) -> Item:
    """AddFeedbackToEvaluationSet: the question asked (the standalone one when the run
    condensed a conversation, so the item stands alone), the expected documents as relevant,
    the corrected answer as the reference."""
    question = record.question
    if entry is not None and entry.standalone_question:
        question = entry.standalone_question
    return Item(
        question=question,
        relevant=tuple(RelevantDocument(d) for d in record.expected_document_ids),
        reference_answer=record.corrected_answer,
        tags=("feedback", record.rating.name.lower()),
    )
