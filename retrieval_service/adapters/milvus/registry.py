"""The document registry: the commit records of `{collection}_v2_documents`. Each ingest of a
document writes one record per version (pk `{filename}#{version}`): PENDING before its chunk
rows are written, COMMITTED once they all are; a delete commits a TOMBSTONE version. The
current version of a document is its greatest committed version (a tombstone = deleted), so
"newest wins" is decidable without compare-and-set, which Milvus does not have. A record also
holds the document's file type, page count and per-page chunk counts, from which every chunk
id of that version is derived (never scanned)."""

from __future__ import annotations

import heapq
import json
from collections.abc import Generator, Iterable
from typing import Any

from retrieval_service.adapters.milvus.connection import MilvusStore, in_filter, quote
from retrieval_service.adapters.milvus.schema import (
    REGISTRY_FIELDS,
    REGISTRY_KEY_FIELDS,
    REGISTRY_VECTOR_DIM,
    registry_pk,
)
from retrieval_service.core.documents import (
    COMMITTED,
    PENDING,
    TOMBSTONE,
    DocumentEntry,
    DocumentPage,
    RecordKey,
    current_of,
    decode_page_token,
    encode_page_token,
)

_BATCH = 1000


def _pk(record: DocumentEntry | RecordKey) -> str:
    return registry_pk(record.filename, record.version)


def _entry(row: dict[str, Any]) -> DocumentEntry:
    return DocumentEntry(
        filename=row["filename"],
        file_type=row["file_type"],
        pages=int(row["pages"]),
        page_counts=json.loads(row["page_counts"]),
        version=row["version"],
        state=int(row["state"]),
    )


def _row(entry: DocumentEntry) -> dict[str, Any]:
    return {
        "pk": _pk(entry),
        "filename": entry.filename,
        "version": entry.version,
        "state": entry.state,
        "file_type": entry.file_type,
        "pages": entry.pages,
        "page_counts": json.dumps(entry.page_counts, separators=(",", ":")),
        "marker": [0.0] * REGISTRY_VECTOR_DIM,
    }


class DocumentRegistry:
    """The `DocumentRegistry` port on Milvus: reads and writes commit records. Failures
    arrive as the core's `StoreUnavailable` or `StoreFailed`."""

    def __init__(self, milvus: MilvusStore) -> None:
        self._milvus = milvus
        self._collection = milvus.registry_collection

    # ---- writes ----------------------------------------------------------------------------

    async def put(self, *entries: DocumentEntry) -> None:
        """Insert or replace the records of these versions (each one row: atomic)."""
        rows = [_row(e) for e in entries]
        for start in range(0, len(rows), _BATCH):
            await self._milvus.run(self._upsert, rows[start : start + _BATCH])

    def _upsert(self, client: Any, rows: list[dict[str, Any]]) -> None:
        client.upsert(self._collection, rows)

    async def remove(self, entries: Iterable[DocumentEntry | RecordKey]) -> None:
        pks = [_pk(e) for e in entries]
        for start in range(0, len(pks), _BATCH):
            batch = pks[start : start + _BATCH]
            await self._milvus.run(
                lambda client, batch=batch: client.delete(
                    self._collection, filter=in_filter("pk", batch)
                )
            )

    # ---- reads -----------------------------------------------------------------------------

    def _query(self, client: Any, expr: str, fields: list[str]) -> list[dict[str, Any]]:
        return list(client.query(self._collection, filter=expr, output_fields=fields))

    async def records(self, filename: str) -> list[DocumentEntry]:
        """Every record of one document (pending ones included), oldest first."""
        rows = await self._milvus.run(
            self._query, in_filter("filename", [filename]), REGISTRY_FIELDS
        )
        return sorted((_entry(r) for r in rows), key=lambda e: e.version)

    async def records_of(self, filenames: Iterable[str]) -> dict[str, list[DocumentEntry]]:
        """Every record of each named document (pending ones included), oldest first: one
        query per 1000 names, for a write of many documents."""
        names = sorted(set(filenames))
        out: dict[str, list[DocumentEntry]] = {}
        for start in range(0, len(names), _BATCH):
            rows = await self._milvus.run(
                self._query, in_filter("filename", names[start : start + _BATCH]), REGISTRY_FIELDS
            )
            for entry in sorted((_entry(r) for r in rows), key=lambda e: e.version):
                out.setdefault(entry.filename, []).append(entry)
        return out

    async def get(self, filename: str) -> DocumentEntry | None:
        """The current version of a document; None when it has none or was deleted."""
        records = await self.records(filename)
        current = current_of(RecordKey(e.filename, e.version, e.state) for e in records)
        key = current.get(filename)
        if key is None or key.state == TOMBSTONE:
            return None
        return next(e for e in records if e.version == key.version)

    async def current_versions(self, filenames: Iterable[str]) -> dict[str, str]:
        """The current version of each named document that has one (deleted ones are absent):
        what a reader filters recalled rows by."""
        names = sorted(set(filenames))
        if not names:
            return {}
        expr = f"{in_filter('filename', names)} and state != {PENDING}"
        rows = await self._milvus.run(self._query, expr, REGISTRY_KEY_FIELDS)
        current = current_of(RecordKey(r["filename"], r["version"], int(r["state"])) for r in rows)
        return {name: k.version for name, k in current.items() if k.state == COMMITTED}

    def _scan(self, client: Any, expr: str) -> Generator[RecordKey, None, None]:
        """Every matching record's key, in primary-key order, i.e. by filename then version
        (`registry_pk`). A query iterator, because a plain query stops at Milvus's 16,384-row
        window and returns rows in no order."""
        iterator = client.query_iterator(
            self._collection, batch_size=_BATCH, filter=expr, output_fields=REGISTRY_KEY_FIELDS
        )
        try:
            while batch := iterator.next():
                for r in batch:
                    yield RecordKey(r["filename"], r["version"], int(r["state"]))
        finally:
            iterator.close()

    async def scan(self) -> list[RecordKey]:
        """Every record's key (reconciliation)."""
        return await self._milvus.run(lambda client: list(self._scan(client, 'pk != ""')))

    async def full(self, keys: Iterable[RecordKey]) -> list[DocumentEntry]:
        """The complete records of `keys` (by primary key)."""
        pks = [_pk(k) for k in keys]
        out: list[DocumentEntry] = []
        for start in range(0, len(pks), _BATCH):
            rows = await self._milvus.run(
                self._query, in_filter("pk", pks[start : start + _BATCH]), REGISTRY_FIELDS
            )
            out.extend(_entry(r) for r in rows)
        return out

    def _page_keys(self, client: Any, after: str, size: int) -> tuple[list[RecordKey], bool]:
        """The current records of the `size` smallest live filenames after `after`, and whether
        more follow. The scan arrives sorted by filename, so it stops after the page; should
        a store ever return keys out of order, the whole rest is read and sorted instead."""
        expr = f"state != {PENDING}"
        if after:
            expr = f"filename > {quote(after)} and {expr}"
        live: list[RecordKey] = []
        group: list[RecordKey] = []
        previous = ""
        scan = self._scan(client, expr)
        for key in scan:
            if _pk(key) < previous:
                scan.close()
                return self._page_keys_unordered(client, expr, size)
            previous = _pk(key)
            if group and key.filename != group[0].filename:
                live.extend(k for k in current_of(group).values() if k.state == COMMITTED)
                group = []
                if len(live) > size:
                    scan.close()
                    return live[:size], True
            group.append(key)
        live.extend(k for k in current_of(group).values() if k.state == COMMITTED)
        return live[:size], len(live) > size

    def _page_keys_unordered(
        self, client: Any, expr: str, size: int
    ) -> tuple[list[RecordKey], bool]:
        current = current_of(self._scan(client, expr))
        live = [k for k in current.values() if k.state == COMMITTED]
        smallest = heapq.nsmallest(size + 1, live, key=lambda k: k.filename)
        return smallest[:size], len(smallest) > size

    async def page(self, page_size: int, page_token: str = "") -> DocumentPage:
        """One page of current documents ordered by filename (AIP-158): `page_size` ≥ 1,
        `page_token` "" for the first page or a previous page's `next_page_token`."""
        after = decode_page_token(page_token) if page_token else ""
        keys, more = await self._milvus.run(self._page_keys, after, page_size)
        entries = sorted(await self.full(keys), key=lambda e: e.filename)
        token = encode_page_token(entries[-1].filename) if more and entries else ""
        return DocumentPage(entries, token)
