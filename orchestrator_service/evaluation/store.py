"""Evaluation sets, items, runs and results in the orchestrator's database
(docs/api.md#evaluation). Every write is one transaction: a batch of items is added whole or
not at all, and a set's item count moves with its items."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import delete, select, update

from orchestrator_service.database.database import Database
from orchestrator_service.database.tables import (
    evaluation_items,
    evaluation_results,
    evaluation_runs,
    evaluation_sets,
)
from orchestrator_service.evaluation.model import Item, RelevantDocument, Turn
from shared.errors import AlreadyExists, NotFound
from shared.operations import OperationState
from shared.sql.database import dialect_insert, upsert

_SETS = evaluation_sets.c
_ITEMS = evaluation_items.c
_RUNS = evaluation_runs.c
_RESULTS = evaluation_results.c


@dataclass(frozen=True, slots=True)
class SetRecord:
    id: str
    display_name: str
    knowledge_bases: tuple[str, ...]
    filter: str
    create_time_ms: int
    item_count: int = 0


@dataclass(frozen=True, slots=True)
class StoredItem:
    set_id: str
    id: str
    item: Item


@dataclass(frozen=True, slots=True)
class RunRecord:
    set_id: str
    id: str
    config: Mapping[str, Any]
    state: OperationState
    create_time_ms: int
    metrics: Mapping[str, float] = field(default_factory=dict)
    items_total: int = 0
    items_done: int = 0
    items_failed: int = 0
    end_time_ms: int | None = None


def item_body(item: Item) -> dict[str, Any]:
    return {
        "history": [[t.question, t.answer] for t in item.history],
        "relevant": [[r.document_id, r.knowledge_base, r.grade] for r in item.relevant],
        "reference_answer": item.reference_answer,
        "expected_route": item.expected_route,
        "tags": list(item.tags),
    }


def item_of(question: str, body: Mapping[str, Any], item_id: str = "") -> Item:
    return Item(
        question=question,
        history=tuple(Turn(q, a) for q, a in body.get("history", ())),
        relevant=tuple(RelevantDocument(d, kb, int(g)) for d, kb, g in body.get("relevant", ())),
        reference_answer=body.get("reference_answer", ""),
        expected_route=body.get("expected_route", ""),
        tags=tuple(body.get("tags", ())),
        item_id=item_id,
    )


def _set(row: Any) -> SetRecord:
    return SetRecord(
        id=row.id,
        display_name=row.display_name,
        knowledge_bases=tuple(row.knowledge_bases),
        filter=row.filter,
        create_time_ms=int(row.create_time),
        item_count=int(row.item_count),
    )


def _run(row: Any) -> RunRecord:
    return RunRecord(
        set_id=row.set_id,
        id=row.id,
        config=dict(row.config),
        state=OperationState(row.state),
        create_time_ms=int(row.create_time),
        metrics={k: float(v) for k, v in dict(row.metrics).items()},
        items_total=int(row.items_total),
        items_done=int(row.items_done),
        items_failed=int(row.items_failed),
        end_time_ms=None if row.end_time is None else int(row.end_time),
    )


class EvaluationStore:
    def __init__(self, db: Database) -> None:
        self._db = db

    # ---- sets -----------------------------------------------------------------------------

    async def create_set(self, record: SetRecord) -> SetRecord:
        values = {
            "id": record.id,
            "display_name": record.display_name,
            "knowledge_bases": list(record.knowledge_bases),
            "filter": record.filter,
            "item_count": 0,
            "create_time": record.create_time_ms,
        }
        async with self._db.write("evaluation_sets_write") as connection:
            result = await connection.execute(
                dialect_insert(self._db, evaluation_sets).on_conflict_do_nothing(), values
            )
        if result.rowcount != 1:
            raise AlreadyExists("evaluation_set_id", f"evaluation_sets/{record.id} already exists")
        return record

    async def get_set(self, set_id: str) -> SetRecord | None:
        async with self._db.read("evaluation_sets_read") as connection:
            row = (
                await connection.execute(select(evaluation_sets).where(_SETS.id == set_id))
            ).first()
        return None if row is None else _set(row)

    async def page_sets(self, size: int, after: str | None) -> list[SetRecord]:
        query = select(evaluation_sets).order_by(_SETS.id).limit(size)
        if after is not None:
            query = query.where(_SETS.id > after)
        async with self._db.read("evaluation_sets_read") as connection:
            return [_set(r) for r in await connection.execute(query)]

    async def update_set(self, set_id: str, changes: Mapping[str, Any]) -> SetRecord:
        values = dict(changes)
        if "knowledge_bases" in values:
            values["knowledge_bases"] = list(values["knowledge_bases"])
        async with self._db.write("evaluation_sets_write") as connection:
            if values:
                await connection.execute(
                    update(evaluation_sets).where(_SETS.id == set_id).values(**values)
                )
            row = (
                await connection.execute(select(evaluation_sets).where(_SETS.id == set_id))
            ).first()
        if row is None:
            raise NotFound("evaluation_set.name", f"evaluation_sets/{set_id} does not exist")
        return _set(row)

    async def delete_set(self, set_id: str) -> bool:
        async with self._db.write("evaluation_sets_write") as connection:
            await connection.execute(delete(evaluation_results).where(_RESULTS.set_id == set_id))
            await connection.execute(delete(evaluation_runs).where(_RUNS.set_id == set_id))
            await connection.execute(delete(evaluation_items).where(_ITEMS.set_id == set_id))
            result = await connection.execute(delete(evaluation_sets).where(_SETS.id == set_id))
        return bool(result.rowcount == 1)

    # ---- items ----------------------------------------------------------------------------

    async def add_items(
        self, set_id: str, items: Sequence[tuple[str, Item]], now_ms: int, field_name: str
    ) -> None:
        """All of `items` (id, item) or none: ALREADY_EXISTS naming `field_name` for an id the
        set holds or that repeats; NOT_FOUND when the set is gone."""
        ids = [item_id for item_id, _ in items]
        if len(set(ids)) != len(ids):
            repeated = next(i for i in ids if ids.count(i) > 1)
            raise AlreadyExists(field_name, f"item id {repeated!r} is given twice")
        rows = [
            {
                "set_id": set_id,
                "id": item_id,
                "question": item.question,
                "body": item_body(item),
                "create_time": now_ms,
            }
            for item_id, item in items
        ]
        async with self._db.write("evaluation_items_write") as connection:
            counted = await connection.execute(
                update(evaluation_sets)
                .where(_SETS.id == set_id)
                .values(item_count=_SETS.item_count + len(rows))
            )
            if counted.rowcount != 1:
                raise NotFound("parent", f"evaluation_sets/{set_id} does not exist")
            taken = (
                await connection.execute(
                    select(_ITEMS.id).where(_ITEMS.set_id == set_id, _ITEMS.id.in_(ids)).limit(1)
                )
            ).scalar()
            if taken is not None:
                raise AlreadyExists(
                    field_name, f"evaluation_sets/{set_id}/items/{taken} already exists"
                )
            if rows:
                await connection.execute(evaluation_items.insert(), rows)

    async def get_item(self, set_id: str, item_id: str) -> StoredItem | None:
        query = select(evaluation_items).where(_ITEMS.set_id == set_id, _ITEMS.id == item_id)
        async with self._db.read("evaluation_items_read") as connection:
            row = (await connection.execute(query)).first()
        return (
            None
            if row is None
            else StoredItem(set_id, row.id, item_of(row.question, row.body, row.id))
        )

    async def page_items(self, set_id: str, size: int, after: str | None) -> list[StoredItem]:
        query = (
            select(evaluation_items).where(_ITEMS.set_id == set_id).order_by(_ITEMS.id).limit(size)
        )
        if after is not None:
            query = query.where(_ITEMS.id > after)
        async with self._db.read("evaluation_items_read") as connection:
            return [
                StoredItem(set_id, r.id, item_of(r.question, r.body, r.id))
                for r in await connection.execute(query)
            ]

    async def delete_item(self, set_id: str, item_id: str) -> bool:
        async with self._db.write("evaluation_items_write") as connection:
            result = await connection.execute(
                delete(evaluation_items).where(_ITEMS.set_id == set_id, _ITEMS.id == item_id)
            )
            if result.rowcount == 1:
                await connection.execute(
                    update(evaluation_sets)
                    .where(_SETS.id == set_id)
                    .values(item_count=_SETS.item_count - 1)
                )
        return bool(result.rowcount == 1)

    # ---- runs -----------------------------------------------------------------------------

    async def create_run(self, run: RunRecord) -> None:
        async with self._db.write("evaluation_runs_write") as connection:
            await connection.execute(
                evaluation_runs.insert(),
                {
                    "set_id": run.set_id,
                    "id": run.id,
                    "config": dict(run.config),
                    "state": int(run.state),
                    "metrics": {},
                    "items_total": run.items_total,
                    "items_done": 0,
                    "items_failed": 0,
                    "create_time": run.create_time_ms,
                    "end_time": None,
                },
            )

    async def get_run(self, set_id: str, run_id: str) -> RunRecord | None:
        query = select(evaluation_runs).where(_RUNS.set_id == set_id, _RUNS.id == run_id)
        async with self._db.read("evaluation_runs_read") as connection:
            row = (await connection.execute(query)).first()
        return None if row is None else _run(row)

    async def page_runs(self, set_id: str, size: int, after: str | None) -> list[RunRecord]:
        query = (
            select(evaluation_runs)
            .where(_RUNS.set_id == set_id)
            .order_by(_RUNS.id.desc())
            .limit(size)
        )
        if after is not None:
            query = query.where(_RUNS.id < after)
        async with self._db.read("evaluation_runs_read") as connection:
            return [_run(r) for r in await connection.execute(query)]

    async def update_run(self, set_id: str, run_id: str, **values: Any) -> None:
        """Progress or the end of a run: any of state, items_total, items_done, items_failed,
        metrics, end_time."""
        if "state" in values:
            values["state"] = int(values["state"])
        async with self._db.write("evaluation_runs_write") as connection:
            await connection.execute(
                update(evaluation_runs)
                .where(_RUNS.set_id == set_id, _RUNS.id == run_id)
                .values(**values)
            )

    # ---- results --------------------------------------------------------------------------

    async def put_result(
        self, set_id: str, run_id: str, item_id: str, body: Mapping[str, Any]
    ) -> None:
        row = {"set_id": set_id, "run_id": run_id, "item_id": item_id, "body": dict(body)}
        async with self._db.write("evaluation_results_write") as connection:
            await connection.execute(
                upsert(self._db, evaluation_results, ["set_id", "run_id", "item_id"]), row
            )

    async def results(
        self, set_id: str, run_id: str, size: int | None = None, after: str | None = None
    ) -> list[tuple[str, dict[str, Any]]]:
        """(item id, result body) in item order."""
        query = (
            select(_RESULTS.item_id, _RESULTS.body)
            .where(_RESULTS.set_id == set_id, _RESULTS.run_id == run_id)
            .order_by(_RESULTS.item_id)
        )
        if after is not None:
            query = query.where(_RESULTS.item_id > after)
        if size is not None:
            query = query.limit(size)
        async with self._db.read("evaluation_results_read") as connection:
            return [(r.item_id, dict(r.body)) for r in await connection.execute(query)]
