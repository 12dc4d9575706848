"""The knowledge-base records in the control-plane database (the `KnowledgeBaseStore` port):
`knowledge_bases`, name unique, so two replicas creating one id at once get one row and one
`False` (ALREADY_EXISTS), never two. Removing a record removes its documents' records with it
(foreign keys, ON DELETE CASCADE)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import delete, select, update

from retrieval_service.adapters.sql.database import Database, dialect_insert
from retrieval_service.adapters.sql.tables import knowledge_bases
from retrieval_service.core.knowledge_bases import ACTIVE, DELETING, KnowledgeBaseRecord

_K = knowledge_bases.c


def _row(record: KnowledgeBaseRecord) -> dict[str, Any]:
    return {
        "name": record.name,
        "display_name": record.display_name,
        "description": record.description,
        "create_time": record.create_time,
        "state": record.state,
        "deleter": "",
        "deleting_until_ms": 0,
        "active_index": record.active_index,
    }


def _record(row: Any) -> KnowledgeBaseRecord:
    return KnowledgeBaseRecord(
        name=row.name,
        display_name=row.display_name,
        description=row.description,
        create_time=int(row.create_time),
        state=int(row.state),
        active_index=row.active_index,
    )


class SqlKnowledgeBaseStore:
    """The `KnowledgeBaseStore` port on the control-plane database."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def create(self, record: KnowledgeBaseRecord) -> bool:
        statement = dialect_insert(self._db, knowledge_bases).on_conflict_do_nothing(
            index_elements=["name"]
        )
        async with self._db.write("knowledge_bases_create") as connection:
            result = await connection.execute(statement, _row(record))
        return bool(result.rowcount == 1)

    async def update(self, record: KnowledgeBaseRecord) -> bool:
        statement = (
            update(knowledge_bases)
            .where(_K.name == record.name, _K.state == ACTIVE)
            .values(display_name=record.display_name, description=record.description)
        )
        async with self._db.write("knowledge_bases_update") as connection:
            result = await connection.execute(statement)
        return bool(result.rowcount == 1)

    async def mark_deleting(self, name: str, owner: str, until_ms: int) -> bool:
        statement = (
            update(knowledge_bases)
            .where(_K.name == name, _K.state == ACTIVE)
            .values(state=DELETING, deleter=owner, deleting_until_ms=until_ms)
        )
        async with self._db.write("knowledge_bases_mark_deleting") as connection:
            result = await connection.execute(statement)
        return bool(result.rowcount == 1)

    async def renew_deleting(self, name: str, owner: str, until_ms: int) -> bool:
        statement = (
            update(knowledge_bases)
            .where(_K.name == name, _K.state == DELETING, _K.deleter == owner)
            .values(deleting_until_ms=until_ms)
        )
        async with self._db.write("knowledge_bases_renew_deleting") as connection:
            result = await connection.execute(statement)
        return bool(result.rowcount == 1)

    async def claim_deleting(self, owner: str, now_ms: int, until_ms: int) -> list[str]:
        async with self._db.read("knowledge_bases_all") as connection:
            expired = [
                (row.name, row.deleter, row.deleting_until_ms)
                for row in await connection.execute(
                    select(_K.name, _K.deleter, _K.deleting_until_ms).where(
                        _K.state == DELETING, _K.deleting_until_ms < now_ms
                    )
                )
            ]
        claimed = []
        for name, deleter, until in expired:
            statement = (
                update(knowledge_bases)
                .where(
                    _K.name == name,
                    _K.state == DELETING,
                    _K.deleter == deleter,
                    _K.deleting_until_ms == until,
                )
                .values(deleter=owner, deleting_until_ms=until_ms)
            )
            async with self._db.write("knowledge_bases_claim_deleting") as connection:
                if (await connection.execute(statement)).rowcount == 1:
                    claimed.append(name)
        return claimed

    async def remove_deleted(self, name: str, owner: str) -> bool:
        statement = delete(knowledge_bases).where(
            _K.name == name, _K.state == DELETING, _K.deleter == owner
        )
        async with self._db.write("knowledge_bases_remove") as connection:
            result = await connection.execute(statement)
        return bool(result.rowcount == 1)

    async def get(self, name: str) -> KnowledgeBaseRecord | None:
        async with self._db.read("knowledge_bases_get") as connection:
            row = (await connection.execute(select(knowledge_bases).where(_K.name == name))).first()
        return _record(row) if row is not None else None

    async def remove(self, name: str) -> None:
        async with self._db.write("knowledge_bases_remove") as connection:
            await connection.execute(delete(knowledge_bases).where(_K.name == name))

    async def all(self) -> list[KnowledgeBaseRecord]:
        async with self._db.read("knowledge_bases_all") as connection:
            rows = await connection.execute(select(knowledge_bases).order_by(_K.name))
            return [_record(row) for row in rows]
