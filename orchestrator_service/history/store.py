"""Run history and feedback in the orchestrator's database (docs/api.md#run-history). Pages go
newest first by id (run ids are UUIDv7, feedback ids time-ordered hex), so a page token is the
last id shown."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import delete, select, update

from orchestrator_service.database.database import Database
from orchestrator_service.database.tables import feedback, runs
from orchestrator_service.history.filters import Condition
from orchestrator_service.history.model import FeedbackRecord, HistoryEntry, Rating

_R = runs.c
_F = feedback.c

_OPS = {
    "=": lambda c, v: c == v,
    "!=": lambda c, v: c != v,
    "<": lambda c, v: c < v,
    "<=": lambda c, v: c <= v,
    ">": lambda c, v: c > v,
    ">=": lambda c, v: c >= v,
}


def _entry(row: Any) -> HistoryEntry:
    return HistoryEntry(
        run_id=row.id,
        kind=row.kind,
        question=row.question,
        standalone_question=row.standalone_question,
        knowledge_bases=tuple(row.knowledge_bases),
        filter=row.filter,
        route=row.route,
        retrieval_status=row.retrieval_status,
        answer=row.answer,
        cited_document_ids=tuple(row.cited),
        rag_trace=row.trace,
        key_id=row.key_id,
        create_time_ms=int(row.create_time),
        end_time_ms=int(row.end_time),
        feedback_rating=Rating(row.feedback_rating),
    )


def _feedback(row: Any) -> FeedbackRecord:
    return FeedbackRecord(
        run_id=row.run_id,
        id=row.id,
        rating=Rating(row.rating),
        reasons=tuple(row.reasons),
        comment=row.comment,
        expected_document_ids=tuple(row.expected),
        corrected_answer=row.corrected_answer,
        question=row.question,
        answer=row.answer,
        key_id=row.key_id,
        create_time_ms=int(row.create_time),
        knowledge_bases=tuple(row.knowledge_bases),
    )


def _run_condition(condition: Condition) -> Any:
    column = {
        "route": _R.route,
        "retrieval_status": _R.retrieval_status,
        "create_time": _R.create_time,
        "feedback.rating": _R.feedback_rating,
    }.get(condition.field)
    if column is None:  # knowledge_base
        return _R.kb_list.contains(f",{condition.value},", autoescape=True)
    return _OPS[condition.op](column, condition.value)


def _feedback_condition(condition: Condition) -> Any:
    column = _F.rating if condition.field == "rating" else _F.create_time
    return _OPS[condition.op](column, condition.value)


class HistoryStore:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def record(self, entry: HistoryEntry) -> None:
        row = {
            "id": entry.run_id,
            "kind": entry.kind,
            "question": entry.question,
            "standalone_question": entry.standalone_question,
            "knowledge_bases": list(entry.knowledge_bases),
            "kb_list": "," + ",".join(entry.knowledge_bases) + ",",
            "filter": entry.filter,
            "route": entry.route,
            "retrieval_status": entry.retrieval_status,
            "answer": entry.answer,
            "cited": list(entry.cited_document_ids),
            "trace": dict(entry.rag_trace) if entry.rag_trace is not None else None,
            "key_id": entry.key_id,
            "create_time": entry.create_time_ms,
            "end_time": entry.end_time_ms,
            "feedback_rating": int(entry.feedback_rating),
        }
        async with self._db.write("runs_write") as connection:
            await connection.execute(runs.insert(), row)

    async def get(self, run_id: str) -> HistoryEntry | None:
        async with self._db.read("runs_read") as connection:
            row = (await connection.execute(select(runs).where(_R.id == run_id))).first()
        return None if row is None else _entry(row)

    async def scan(
        self, conditions: Sequence[Condition], size: int, before: str | None
    ) -> list[HistoryEntry]:
        """Up to `size` runs matching every condition, newest first, older than `before`."""
        query = select(runs).order_by(_R.id.desc()).limit(size)
        if before is not None:
            query = query.where(_R.id < before)
        for condition in conditions:
            query = query.where(_run_condition(condition))
        async with self._db.read("runs_read") as connection:
            return [_entry(r) for r in await connection.execute(query)]

    async def expire(self, before_ms: int) -> int:
        """Deletes the runs (and their feedback) older than `before_ms`; how many runs."""
        async with self._db.write("runs_expire") as connection:
            old = select(_R.id).where(_R.create_time < before_ms)
            await connection.execute(delete(feedback).where(_F.run_id.in_(old)))
            result = await connection.execute(delete(runs).where(_R.create_time < before_ms))
        return int(result.rowcount or 0)

    async def add_feedback(self, record: FeedbackRecord) -> None:
        row = {
            "run_id": record.run_id,
            "id": record.id,
            "rating": int(record.rating),
            "reasons": list(record.reasons),
            "comment": record.comment,
            "expected": list(record.expected_document_ids),
            "corrected_answer": record.corrected_answer,
            "question": record.question,
            "answer": record.answer,
            "key_id": record.key_id,
            "knowledge_bases": list(record.knowledge_bases),
            "create_time": record.create_time_ms,
        }
        async with self._db.write("feedback_write") as connection:
            await connection.execute(feedback.insert(), row)
            await connection.execute(
                update(runs)
                .where(_R.id == record.run_id)
                .values(feedback_rating=int(record.rating))
            )

    async def get_feedback(self, run_id: str, feedback_id: str) -> FeedbackRecord | None:
        query = select(feedback).where(_F.run_id == run_id, _F.id == feedback_id)
        async with self._db.read("feedback_read") as connection:
            row = (await connection.execute(query)).first()
        return None if row is None else _feedback(row)

    async def scan_feedback(
        self,
        run_id: str | None,
        conditions: Sequence[Condition],
        size: int,
        before: tuple[int, str] | None,
    ) -> list[FeedbackRecord]:
        """Newest first by (create_time, id); `reasons` conditions are applied by the caller."""
        query = select(feedback).order_by(_F.create_time.desc(), _F.id.desc()).limit(size)
        if run_id is not None:
            query = query.where(_F.run_id == run_id)
        if before is not None:
            time_ms, last_id = before
            query = query.where(
                (_F.create_time < time_ms) | ((_F.create_time == time_ms) & (_F.id < last_id))
            )
        for condition in conditions:
            if condition.field != "reasons":
                query = query.where(_feedback_condition(condition))
        async with self._db.read("feedback_read") as connection:
            return [_feedback(r) for r in await connection.execute(query)]
