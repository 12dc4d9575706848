"""The document registry: one row per document in `{collection}_documents` with its file type,
page count and per-page chunk counts, from which every chunk id is derived (never scanned)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from retrieval_service.milvus_schema import REGISTRY_FIELDS, REGISTRY_VECTOR_DIM
from retrieval_service.store import MilvusStore, in_filter

# Milvus caps offset + limit of a query at 16,384 rows.
_QUERY_WINDOW = 16384
_PAGE = 1000


@dataclass(slots=True)
class DocumentEntry:
    """One registry row: what a document holds. `page_counts[page] = [l1, l2, l3]` counts
    chunks per page and level, from which every chunk id is derived."""

    filename: str
    file_type: str
    pages: int
    page_counts: dict[str, list[int]] = field(default_factory=dict)

    def level_count(self, level: int) -> int:
        return sum(counts[level - 1] for counts in self.page_counts.values())

    def ids(self, level: int) -> list[str]:
        return [
            f"{self.filename}::p{page}::l{level}::{n}"
            for page, counts in self.page_counts.items()
            for n in range(counts[level - 1])
        ]


def _entry(row: dict[str, Any]) -> DocumentEntry:
    return DocumentEntry(
        filename=row["filename"],
        file_type=row["file_type"],
        pages=int(row["pages"]),
        page_counts=json.loads(row["page_counts"]),
    )


def _row(entry: DocumentEntry) -> dict[str, Any]:
    return {
        "filename": entry.filename,
        "file_type": entry.file_type,
        "pages": entry.pages,
        "page_counts": json.dumps(entry.page_counts, separators=(",", ":")),
        "marker": [0.0] * REGISTRY_VECTOR_DIM,
    }


class DocumentRegistry:
    """Get, put, delete and list registry rows. Failures arrive as the store's domain errors
    (`DependencyUnavailable("milvus", …)` or `StoreError`)."""

    def __init__(self, milvus: MilvusStore) -> None:
        self._milvus = milvus
        self._collection = milvus.registry_collection

    async def get(self, filename: str) -> DocumentEntry | None:
        rows = await self._milvus.run(
            lambda client: client.query(
                self._collection,
                filter=in_filter("filename", [filename]),
                output_fields=REGISTRY_FIELDS,
            )
        )
        return _entry(rows[0]) if rows else None

    async def put(self, entry: DocumentEntry) -> None:
        """Insert or replace the row of `entry.filename`."""
        await self._milvus.run(lambda client: client.upsert(self._collection, [_row(entry)]))

    async def delete(self, filename: str) -> None:
        await self._milvus.run(
            lambda client: client.delete(self._collection, filter=in_filter("filename", [filename]))
        )

    def _all(self, client: Any) -> list[DocumentEntry]:
        entries: list[DocumentEntry] = []
        offset = 0
        while True:
            rows = client.query(
                self._collection,
                filter='filename != ""',
                output_fields=REGISTRY_FIELDS,
                limit=_PAGE,
                offset=offset,
            )
            entries.extend(_entry(r) for r in rows)
            if len(rows) < _PAGE or offset + 2 * _PAGE > _QUERY_WINDOW:
                break
            offset += _PAGE
        return sorted(entries, key=lambda e: e.filename)

    async def entries(self) -> list[DocumentEntry]:
        """Every document, sorted by filename (at most Milvus's 16,384-row query window)."""
        return await self._milvus.run(self._all)
