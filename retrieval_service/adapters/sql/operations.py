"""Import operations in the control-plane database (docs/api.md#operations): the shared
operations store (`shared/sql/operations.py`) on this schema's `operations` table, and the
source of each imported document (`import_sources`), for `delete_missing` and for skipping
unchanged objects."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import and_, delete, select

from retrieval_service.adapters.sql.database import Database, upsert
from retrieval_service.adapters.sql.tables import documents, import_sources, operations
from shared.sql import operations as shared_operations
from shared.sql.operations import ClaimedOperation, LeaseLost, NewOperation

__all__ = ["ClaimedOperation", "LeaseLost", "NewOperation", "SqlOperationStore"]

_S = import_sources.c
_D = documents.c


class SqlOperationStore(shared_operations.SqlOperationStore):
    """The operations table, and which source brought each imported document in."""

    def __init__(self, db: Database) -> None:
        super().__init__(db, operations)

    # ---- import sources -------------------------------------------------------------------

    async def imported_from(self, knowledge_base: str, source: str) -> dict[str, str]:
        """document_id → change hint of the knowledge base's live documents that `source`
        brought in."""
        query = (
            select(_S.document_id, _S.hint)
            .join(
                documents,
                and_(_D.knowledge_base == _S.knowledge_base, _D.document_id == _S.document_id),
            )
            .where(_S.knowledge_base == knowledge_base, _S.source == source)
        )
        async with self._db.read("import_sources_read") as connection:
            return {r.document_id: r.hint for r in await connection.execute(query)}

    async def remember(
        self, knowledge_base: str, source: str, hints: Sequence[tuple[str, str]]
    ) -> None:
        """Records that `source` brought in these (document_id, hint)."""
        if not hints:
            return
        rows = [
            {"knowledge_base": knowledge_base, "document_id": d, "source": source, "hint": h}
            for d, h in hints
        ]
        async with self._db.write("import_sources_write") as connection:
            await connection.execute(
                upsert(self._db, import_sources, ["knowledge_base", "document_id"]), rows
            )

    async def forget(self, knowledge_base: str, document_ids: Sequence[str]) -> None:
        if not document_ids:
            return
        async with self._db.write("import_sources_forget") as connection:
            await connection.execute(
                delete(import_sources).where(
                    _S.knowledge_base == knowledge_base, _S.document_id.in_(list(document_ids))
                )
            )
