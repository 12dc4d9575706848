"""The index records in the control-plane database (the `IndexStore` port): `indexes`, one
row per index of a knowledge base, and `knowledge_bases.active_index`. The switch and the
deletion's mark are each one statement, so the check and the change are atomic across
replicas: a switch lands only on a READY index, and a deletion never marks the active one."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import and_, delete, exists, select, update

from retrieval_service.adapters.sql.database import Database, dialect_insert
from retrieval_service.adapters.sql.tables import indexes, knowledge_bases
from retrieval_service.core.indexes.model import (
    DELETING,
    INITIAL,
    READY,
    IndexConfig,
    IndexRecord,
)

_I = indexes.c
_K = knowledge_bases.c
_ACTIVE_KB = 0


def _row(record: IndexRecord) -> dict[str, Any]:
    c = record.config
    return {
        "knowledge_base": record.knowledge_base,
        "index_id": record.index_id,
        "embedder": c.embedder,
        "dimension": c.dimension,
        "chunk_size": c.chunk_size,
        "chunk_overlap": c.chunk_overlap,
        "leaf_context_header": c.leaf_context_header,
        "analyzer": c.analyzer,
        "collection": record.collection,
        "state": record.state,
        "documents_indexed": record.documents_indexed,
        "documents_total": record.documents_total,
        "create_time": record.create_time,
        "operation": record.operation,
        "build_read_to": record.build_read_to,
    }


def _record(row: Any) -> IndexRecord:
    return IndexRecord(
        knowledge_base=row.knowledge_base,
        index_id=row.index_id,
        config=IndexConfig(
            row.embedder,
            int(row.dimension),
            int(row.chunk_size),
            int(row.chunk_overlap),
            bool(row.leaf_context_header),
            row.analyzer,
        ),
        collection=row.collection,
        state=int(row.state),
        documents_indexed=int(row.documents_indexed),
        documents_total=int(row.documents_total),
        create_time=int(row.create_time),
        operation=row.operation,
        build_read_to=row.build_read_to,
    )


class SqlIndexStore:
    """The `IndexStore` port on the control-plane database."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def create(self, record: IndexRecord) -> bool:
        statement = dialect_insert(self._db, indexes).on_conflict_do_nothing(
            index_elements=["knowledge_base", "index_id"]
        )
        async with self._db.write("indexes_create") as connection:
            result = await connection.execute(statement, _row(record))
        return bool(result.rowcount == 1)

    async def get(self, knowledge_base: str, index_id: str) -> IndexRecord | None:
        async with self._db.read("indexes_read") as connection:
            row = (
                await connection.execute(
                    select(indexes).where(
                        _I.knowledge_base == knowledge_base, _I.index_id == index_id
                    )
                )
            ).first()
        return _record(row) if row is not None else None

    async def of(self, knowledge_base: str) -> list[IndexRecord]:
        async with self._db.read("indexes_read") as connection:
            rows = await connection.execute(
                select(indexes).where(_I.knowledge_base == knowledge_base).order_by(_I.index_id)
            )
            return [_record(row) for row in rows]

    async def all(self) -> list[IndexRecord]:
        async with self._db.read("indexes_read") as connection:
            rows = await connection.execute(
                select(indexes).order_by(_I.knowledge_base, _I.index_id)
            )
            return [_record(row) for row in rows]

    async def active(self, names: Sequence[str]) -> dict[str, IndexRecord]:
        """The active index of each named knowledge base that has its record (one query)."""
        query = (
            select(indexes)
            .join(
                knowledge_bases,
                and_(_K.name == _I.knowledge_base, _K.active_index == _I.index_id),
            )
            .where(_K.name.in_(list(names)))
        )
        async with self._db.read("indexes_read") as connection:
            return {row.knowledge_base: _record(row) for row in await connection.execute(query)}

    async def update(
        self,
        record: IndexRecord,
        *,
        states: Sequence[int],
    ) -> bool:
        """Writes `record`'s state and counts while its stored state is one of `states`."""
        statement = (
            update(indexes)
            .where(
                _I.knowledge_base == record.knowledge_base,
                _I.index_id == record.index_id,
                _I.state.in_(list(states)),
            )
            .values(
                state=record.state,
                documents_indexed=record.documents_indexed,
                documents_total=record.documents_total,
            )
        )
        async with self._db.write("indexes_update") as connection:
            result = await connection.execute(statement)
        return bool(result.rowcount == 1)

    async def set_state(
        self, knowledge_base: str, index_id: str, state: int, *, states: Sequence[int]
    ) -> bool:
        statement = (
            update(indexes)
            .where(
                _I.knowledge_base == knowledge_base,
                _I.index_id == index_id,
                _I.state.in_(list(states)),
            )
            .values(state=state)
        )
        async with self._db.write("indexes_update") as connection:
            result = await connection.execute(statement)
        return bool(result.rowcount == 1)

    async def activate(self, knowledge_base: str, index_id: str) -> bool:
        """Switches the knowledge base's active index to a READY one, in one statement."""
        ready = exists().where(
            _I.knowledge_base == knowledge_base, _I.index_id == index_id, _I.state == READY
        )
        statement = (
            update(knowledge_bases)
            .where(_K.name == knowledge_base, _K.state == _ACTIVE_KB, ready)
            .values(active_index=index_id)
        )
        async with self._db.write("knowledge_bases_activate") as connection:
            result = await connection.execute(statement)
        return bool(result.rowcount == 1)

    async def mark_deleting(self, knowledge_base: str, index_id: str) -> bool:
        """→ DELETING unless it is the knowledge base's active index (one statement)."""
        active = select(_K.active_index).where(_K.name == knowledge_base).scalar_subquery()
        statement = (
            update(indexes)
            .where(
                _I.knowledge_base == knowledge_base,
                _I.index_id == index_id,
                _I.index_id != active,
            )
            .values(state=DELETING)
        )
        async with self._db.write("indexes_update") as connection:
            result = await connection.execute(statement)
        return bool(result.rowcount == 1)

    async def remove(self, knowledge_base: str, index_id: str) -> None:
        async with self._db.write("indexes_remove") as connection:
            await connection.execute(
                delete(indexes).where(_I.knowledge_base == knowledge_base, _I.index_id == index_id)
            )

    async def ensure_initial(self, template: IndexRecord) -> int:
        """Gives every knowledge base without an `initial` index one like `template` (its
        config and collection, READY), and brings the config of every index in `template`'s
        collection up to `template`'s (the service's settings decide how its own collections
        are written). Returns how many it created."""
        async with self._db.write("indexes_create") as connection:
            missing = [
                (row.name, int(row.create_time))
                for row in await connection.execute(
                    select(_K.name, _K.create_time).where(
                        ~exists().where(_I.knowledge_base == _K.name, _I.index_id == INITIAL)
                    )
                )
            ]
            for name, created in missing:
                # As old as its knowledge base: its rows are the knowledge base's own.
                row = _row(template) | {
                    "knowledge_base": name,
                    "index_id": INITIAL,
                    "create_time": created,
                }
                await connection.execute(indexes.insert(), row)
            config = {
                k: v
                for k, v in _row(template).items()
                if k
                in (
                    "embedder",
                    "dimension",
                    "chunk_size",
                    "chunk_overlap",
                    "leaf_context_header",
                    "analyzer",
                )
            }
            await connection.execute(
                update(indexes).where(_I.collection == template.collection).values(**config)
            )
        return len(missing)
