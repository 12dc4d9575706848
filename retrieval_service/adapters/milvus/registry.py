"""The document registry of the layout before the control plane moved into the database
(`adapters/sql/registry.py` is the registry now): the commit records of
`{collection}_v4_documents`, kept to read (and, in tests, write) such a store for its move
(`adapters/sql/upgrade.py`) and for the older layouts' upgrades, which write into it first.
Each ingest of a document writes one record per version (pk
`{knowledge_base}#{document_id}#{version}`, hex encoded: `schema.registry_pk`): PENDING
before its chunk rows are written, COMMITTED once they all are; a delete commits a TOMBSTONE
version. The
current version of a document is its greatest committed version (a tombstone = deleted), so
"newest wins" is decidable without compare-and-set, which Milvus does not have. A record also
holds the document's file name and type, page count and per-page chunk counts, from which
every chunk id of that version is derived (never scanned), and its metadata, content hash,
size, ingest time and fingerprint.

The lease of a writer in flight (`core/ingest/leases.py`) lives in the `ingest_time` column of
the records it holds, so the registry layout is unchanged: a PENDING version's ingest time is
its version's timestamp until it commits (the COMMITTED record stores the real one), and a
TOMBSTONE has none, so that column holds their lease's expiry (epoch ms). A record written
before leases holds its version's time or 0 there, i.e. no lease (`leases.lease_expiry_ms`)."""

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
    record_key,
    version_time_ms,
)
from retrieval_service.core.identity import DEFAULT_KB

_BATCH = 1000
#: What a scan reads: the key fields and the column that holds an uncommitted record's lease.
_SCAN_FIELDS = [*REGISTRY_KEY_FIELDS, "ingest_time"]


def _pk(record: DocumentEntry | RecordKey) -> str:
    return registry_pk(record.knowledge_base, record.document_id, record.version)


def _lease(row: dict[str, Any]) -> int:
    """The lease a row's record holds (0 for a committed one; `ingest_time` if read)."""
    return 0 if int(row["state"]) == COMMITTED else int(row.get("ingest_time") or 0)


def _key(row: dict[str, Any]) -> RecordKey:
    return RecordKey(
        row["document_id"], row["version"], int(row["state"]), row["knowledge_base"], _lease(row)
    )


def entry_of(row: dict[str, Any]) -> DocumentEntry:
    """The record a registry row holds."""
    committed = int(row["state"]) == COMMITTED
    return DocumentEntry(
        filename=row["filename"],
        file_type=row["file_type"],
        pages=int(row["pages"]),
        page_counts=json.loads(row["page_counts"]),
        version=row["version"],
        state=int(row["state"]),
        knowledge_base=row["knowledge_base"],
        document_id=row["document_id"],
        metadata=dict(row.get("metadata") or {}),
        content_sha256=row["content_sha256"],
        size_bytes=int(row["size_bytes"]),
        ingest_time=int(row["ingest_time"]) if committed else version_time_ms(row["version"]),
        fingerprint=row["fingerprint"],
        lease_expires_ms=_lease(row),
    )


def row_of(entry: DocumentEntry) -> dict[str, Any]:
    """The registry row of a record."""
    return {
        "pk": _pk(entry),
        "knowledge_base": entry.knowledge_base,
        "document_id": entry.document_id,
        "filename": entry.filename,
        "version": entry.version,
        "state": entry.state,
        "file_type": entry.file_type,
        "pages": entry.pages,
        "page_counts": json.dumps(entry.page_counts, separators=(",", ":")),
        "metadata": entry.metadata,
        "content_sha256": entry.content_sha256,
        "size_bytes": entry.size_bytes,
        "ingest_time": entry.ingest_time if entry.state == COMMITTED else entry.lease_expires_ms,
        "fingerprint": entry.fingerprint,
        "marker": [0.0] * REGISTRY_VECTOR_DIM,
    }


def _in_kb(knowledge_base: str, expr: str) -> str:
    return f"knowledge_base == {quote(knowledge_base)} and {expr}"


class DocumentRegistry:
    """The `DocumentRegistry` port on Milvus: reads and writes commit records. Failures
    arrive as the core's `StoreUnavailable` or `StoreFailed`."""

    def __init__(self, milvus: MilvusStore) -> None:
        self._milvus = milvus
        self._collection = milvus.registry_collection

    # ---- writes ----------------------------------------------------------------------------

    async def put(self, *entries: DocumentEntry) -> None:
        """Insert or replace the records of these versions (each one row: atomic)."""
        rows = [row_of(e) for e in entries]
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

    async def records(
        self, document_id: str, knowledge_base: str = DEFAULT_KB
    ) -> list[DocumentEntry]:
        """Every record of one document (pending ones included), oldest first."""
        return (await self.records_of([document_id], knowledge_base)).get(document_id, [])

    async def records_of(
        self, document_ids: Iterable[str], knowledge_base: str = DEFAULT_KB
    ) -> dict[str, list[DocumentEntry]]:
        """Every record of each named document of one knowledge base (pending ones
        included), oldest first: one query per 1000 ids, for a write of many documents."""
        ids = sorted(set(document_ids))
        out: dict[str, list[DocumentEntry]] = {}
        for start in range(0, len(ids), _BATCH):
            expr = _in_kb(knowledge_base, in_filter("document_id", ids[start : start + _BATCH]))
            rows = await self._milvus.run(self._query, expr, REGISTRY_FIELDS)
            for entry in sorted((entry_of(r) for r in rows), key=lambda e: e.version):
                out.setdefault(entry.document_id, []).append(entry)
        return out

    async def get(self, document_id: str, knowledge_base: str = DEFAULT_KB) -> DocumentEntry | None:
        """The current version of a document; None when it has none or was deleted."""
        records = await self.records(document_id, knowledge_base)
        key = current_of(record_key(e) for e in records).get((knowledge_base, document_id))
        if key is None or key.state == TOMBSTONE:
            return None
        return next(e for e in records if e.version == key.version)

    async def current_versions(
        self, document_ids: Iterable[str], knowledge_base: str = DEFAULT_KB
    ) -> dict[str, str]:
        """The current version of each named document of one knowledge base that has one
        (deleted ones are absent), by document_id: what a reader filters recalled rows by."""
        ids = sorted(set(document_ids))
        if not ids:
            return {}
        expr = _in_kb(knowledge_base, f"{in_filter('document_id', ids)} and state != {PENDING}")
        rows = await self._milvus.run(self._query, expr, REGISTRY_KEY_FIELDS)
        current = current_of(_key(r) for r in rows)
        return {doc: k.version for (_, doc), k in current.items() if k.state == COMMITTED}

    def _scan(self, client: Any, expr: str) -> Generator[RecordKey, None, None]:
        """Every matching record's key, in primary-key order, i.e. by knowledge base, then
        document_id, then version (`registry_pk`). A query iterator, because a plain query
        stops at Milvus's 16,384-row window and returns rows in no order."""
        iterator = client.query_iterator(
            self._collection, batch_size=_BATCH, filter=expr, output_fields=_SCAN_FIELDS
        )
        try:
            while batch := iterator.next():
                for r in batch:
                    yield _key(r)
        finally:
            iterator.close()

    async def scan(self, knowledge_base: str | None = None) -> list[RecordKey]:
        """Every record's key, of one knowledge base or of all (reconciliation, counts)."""
        expr = 'pk != ""' if knowledge_base is None else _in_kb(knowledge_base, 'pk != ""')
        return await self._milvus.run(lambda client: list(self._scan(client, expr)))

    async def full(self, keys: Iterable[RecordKey]) -> list[DocumentEntry]:
        """The complete records of `keys` (by primary key)."""
        pks = [_pk(k) for k in keys]
        out: list[DocumentEntry] = []
        for start in range(0, len(pks), _BATCH):
            rows = await self._milvus.run(
                self._query, in_filter("pk", pks[start : start + _BATCH]), REGISTRY_FIELDS
            )
            out.extend(entry_of(r) for r in rows)
        return out

    def _page_keys(
        self, client: Any, knowledge_base: str, after: str, size: int
    ) -> tuple[list[RecordKey], bool]:
        """The current records of the `size` smallest live document_ids of a knowledge base
        after `after`, and whether more follow. The scan arrives sorted by document_id, so it
        stops after the page; should a store ever return keys out of order, the whole rest is
        read and sorted instead."""
        expr = _in_kb(knowledge_base, f"state != {PENDING}")
        if after:
            expr = f"document_id > {quote(after)} and {expr}"
        live: list[RecordKey] = []
        group: list[RecordKey] = []
        previous = ""
        scan = self._scan(client, expr)
        for key in scan:
            if _pk(key) < previous:
                scan.close()
                return self._page_keys_unordered(client, expr, size)
            previous = _pk(key)
            if group and key.document_id != group[0].document_id:
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
        smallest = heapq.nsmallest(size + 1, live, key=lambda k: k.document_id.encode())
        return smallest[:size], len(smallest) > size

    async def page(
        self, page_size: int, page_token: str = "", knowledge_base: str = DEFAULT_KB
    ) -> DocumentPage:
        """One page of a knowledge base's current documents ordered by document_id
        (AIP-158): `page_size` ≥ 1, `page_token` "" for the first page or a previous page's
        `next_page_token`."""
        after = decode_page_token(page_token) if page_token else ""
        keys, more = await self._milvus.run(self._page_keys, knowledge_base, after, page_size)
        entries = sorted(await self.full(keys), key=lambda e: e.document_id.encode())
        token = encode_page_token(entries[-1].document_id) if more and entries else ""
        return DocumentPage(entries, token)
