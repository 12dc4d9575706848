"""The knowledge-base records of `{collection}_v4_knowledge_bases`, the layout before the
control plane moved into the database: one row per knowledge base, keyed by its full name. Kept
to read (and, in tests, write) such a store for its move (`adapters/sql/upgrade.py`) and for
the older layouts' upgrades, which write into it first. The collection also holds those
upgrades' completion markers (`upgrade.UPGRADE_MARKER`), which are no knowledge base's name
and are never read as one."""

from __future__ import annotations

from typing import Any

from retrieval_service.adapters.milvus.connection import MilvusStore, in_filter, quote
from retrieval_service.adapters.milvus.schema import KNOWLEDGE_BASE_FIELDS, REGISTRY_VECTOR_DIM
from retrieval_service.core.identity import KB_PREFIX
from retrieval_service.core.knowledge_bases import KnowledgeBaseRecord


def _record(row: dict[str, Any]) -> KnowledgeBaseRecord:
    return KnowledgeBaseRecord(
        name=row["name"],
        display_name=row["display_name"],
        description=row["description"],
        create_time=int(row["create_time"]),
        state=int(row["state"]),
    )


def row_of(record: KnowledgeBaseRecord) -> dict[str, Any]:
    """The Milvus row of a knowledge-base record."""
    return {
        "name": record.name,
        "display_name": record.display_name,
        "description": record.description,
        "create_time": record.create_time,
        "state": record.state,
        "marker": [0.0] * REGISTRY_VECTOR_DIM,
    }


class KnowledgeBaseStore:
    """The `KnowledgeBaseStore` port on Milvus. Failures arrive as the core's
    `StoreUnavailable` or `StoreFailed`."""

    def __init__(self, milvus: MilvusStore) -> None:
        self._milvus = milvus
        self._collection = milvus.knowledge_base_collection

    async def put(self, record: KnowledgeBaseRecord) -> None:
        row = row_of(record)
        await self._milvus.run(lambda client: client.upsert(self._collection, [row]))

    async def get(self, name: str) -> KnowledgeBaseRecord | None:
        rows = await self._milvus.run(
            lambda client: client.query(
                self._collection,
                filter=in_filter("name", [name]),
                output_fields=KNOWLEDGE_BASE_FIELDS,
            )
        )
        return _record(rows[0]) if rows else None

    async def remove(self, name: str) -> None:
        await self._milvus.run(
            lambda client: client.delete(self._collection, filter=in_filter("name", [name]))
        )

    async def all(self) -> list[KnowledgeBaseRecord]:
        expr = f"name like {quote(KB_PREFIX + '%')}"
        rows = await self._milvus.run(
            lambda client: list(
                client.query(self._collection, filter=expr, output_fields=KNOWLEDGE_BASE_FIELDS)
            )
        )
        return sorted((_record(r) for r in rows), key=lambda r: r.name)
