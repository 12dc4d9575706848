"""The chunk store: one Milvus collection per chunk level, because Milvus Lite scans every row
of whatever it searches. Recall touches only the leaf level; parents come back by primary
key. A row is one *version* of a chunk (pk `{chunk_id}#{version}`): which version is current
is the registry's business, not this module's. Rows are dicts with the fields of
`milvus_schema.OUTPUT_FIELDS` (plus `score` on search hits)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from retrieval_service.adapters.milvus.connection import MilvusStore, in_filter, quote
from retrieval_service.adapters.milvus.filters import acl_column, acl_expr, to_milvus_expr
from retrieval_service.adapters.milvus.schema import (
    OUTPUT_FIELDS,
    UNANALYSED,
    WRITABLE_FIELDS,
    bm25_spec,
    dense_spec,
    scope_filter,
)
from retrieval_service.core.chunking import ChunkRecord
from retrieval_service.core.documents import DocumentEntry, version_pk
from retrieval_service.core.identity import DEFAULT_KB
from retrieval_service.core.ports import DEFAULT_SCOPE, SearchScope, StoredChunk
from shared.lexical import bm25_text

Row = dict[str, Any]
_READ_BATCH = 500
_WRITE_BATCH = 256


def hits(result: Any) -> list[Row]:
    """The entities of a single-query search answer, each with its `score` (the distance)."""
    out = []
    for hit in result[0] if result else []:
        entity = dict(hit.get("entity", {}))
        entity.setdefault("chunk_id", hit.get("chunk_id", hit.get("id")))
        entity["score"] = float(hit.get("distance", 0.0))
        out.append(entity)
    return out


def store_row(
    c: ChunkRecord,
    vector: np.ndarray,
    version: str,
    analysed: bool = True,
    owner: StoredChunk | None = None,
) -> dict[str, Any]:
    """The Milvus row of one version of a chunk: its record fields plus the dense vector, and
    its BM25 text when `analysed` (else `UNANALYSED`: nothing for the analyser to read);
    `owner` gives its document's knowledge base, document_id, metadata and ingest time
    (None: the default knowledge base, the filename, none, 0)."""
    return {
        "pk": version_pk(c.chunk_id, version),
        "chunk_id": c.chunk_id,
        "version": version,
        "text": c.text,
        "bm25_text": bm25_text(c.embedded_text) if analysed else UNANALYSED,
        # The array itself: the client turns it into the request's floats row by row, so a
        # staged write never holds a Python float per dimension (≈ 9 MiB per 256 leaves).
        "dense": np.asarray(vector, dtype=np.float32),
        "filename": c.filename,
        "file_type": c.file_type,
        "file_path": c.file_path,
        "page_number": c.page_number,
        "parent_chunk_id": c.parent_chunk_id,
        "root_chunk_id": c.root_chunk_id,
        "chunk_level": c.chunk_level,
        "chunk_idx": c.chunk_idx,
        "knowledge_base": owner.knowledge_base if owner else DEFAULT_KB,
        "document_id": (owner.document_id if owner else "") or c.filename,
        "metadata": (owner.metadata if owner else None) or {},
        "ingest_time": owner.ingest_time if owner else 0,
        "acl": acl_column(owner.metadata if owner else None),
    }


def scope_expr(level: int, scope: SearchScope) -> str:
    compiled = to_milvus_expr(scope.filter) if scope.filter is not None else None
    return scope_filter(level, scope.knowledge_bases, compiled, acl_expr(scope.groups))


def _delete_count(result: Any, fallback: int) -> int:
    if isinstance(result, dict):
        return int(result.get("delete_count", fallback))
    if isinstance(result, list):
        return len(result)
    count = getattr(result, "delete_count", None)
    return int(count) if count is not None else fallback


def _version_expr(knowledge_base: str, versions: Sequence[str]) -> str:
    """The rows of these versions of one knowledge base (its partition only)."""
    return f"knowledge_base == {quote(knowledge_base)} and " + in_filter("version", versions)


class ChunkStore:
    """The `ChunkRepository` port on Milvus: search, read, write and delete chunk rows by
    level. Failures arrive as the core's `StoreUnavailable` or `StoreFailed`."""

    def __init__(self, milvus: MilvusStore) -> None:
        self._milvus = milvus
        self._config = milvus.config

    def _collection(self, level: int) -> str:
        return self._milvus.level_collection(level)

    # ---- recall --------------------------------------------------------------------------

    async def hybrid_search(
        self,
        level: int,
        text: str,
        vector: Sequence[float],
        candidate_k: int,
        scope: SearchScope = DEFAULT_SCOPE,
    ) -> list[Row]:
        """Dense + BM25, each asking recall_depth × candidate_k within `scope`, fused with
        RRF(rrf_k) to candidate_k (StoreConfig)."""
        from pymilvus import RRFRanker

        cfg = self._config
        depth = cfg.recall_depth * candidate_k
        expr = scope_expr(level, scope)
        drop = cfg.bm25_drop_ratio_search
        requests = [
            dense_spec(vector, depth, level, hnsw_ef=cfg.hnsw_ef, expr=expr).request(),
            bm25_spec(text, depth, level, drop_ratio=drop, expr=expr).request(),
        ]
        result = await self._milvus.run(
            lambda client: client.hybrid_search(
                self._collection(level),
                reqs=requests,
                ranker=RRFRanker(cfg.rrf_k),
                limit=candidate_k,
                output_fields=OUTPUT_FIELDS,
            )
        )
        return hits(result)

    async def dense_search(
        self, level: int, vector: Sequence[float], limit: int, scope: SearchScope = DEFAULT_SCOPE
    ) -> list[Row]:
        expr = scope_expr(level, scope)
        spec = dense_spec(vector, limit, level, hnsw_ef=self._config.hnsw_ef, expr=expr)
        result = await self._milvus.run(
            lambda client: client.search(
                self._collection(level), output_fields=OUTPUT_FIELDS, **spec.search_kwargs()
            )
        )
        return hits(result)

    async def bm25_search(
        self, level: int, text: str, limit: int, scope: SearchScope = DEFAULT_SCOPE
    ) -> list[Row]:
        """BM25 alone within `scope` (the benches' one-sided recall; not a port method)."""
        drop = self._config.bm25_drop_ratio_search
        spec = bm25_spec(text, limit, level, drop_ratio=drop, expr=scope_expr(level, scope))
        result = await self._milvus.run(
            lambda client: client.search(
                self._collection(level), output_fields=OUTPUT_FIELDS, **spec.search_kwargs()
            )
        )
        found = hits(result)
        for hit in found:  # Lite returns negated BM25 distances; real Milvus positive ones
            hit["score"] = abs(hit["score"])
        return found

    # ---- by id ---------------------------------------------------------------------------

    def _get(self, client: Any, level: int, field: str, keys: list[str]) -> dict[str, Row]:
        rows: dict[str, Row] = {}
        for start in range(0, len(keys), _READ_BATCH):
            batch = keys[start : start + _READ_BATCH]
            for row in client.query(
                self._collection(level), filter=in_filter(field, batch), output_fields=OUTPUT_FIELDS
            ):
                rows[row["chunk_id"]] = dict(row)
        return rows

    async def get_versioned(self, level: int, keys: Sequence[tuple[str, str]]) -> dict[str, Row]:
        """Chunks of one level by (chunk_id, version), a primary-key look-up, keyed by
        chunk_id; missing ones are absent."""
        if not keys:
            return {}
        pks = [version_pk(chunk_id, version) for chunk_id, version in keys]
        return await self._milvus.run(self._get, level, "pk", pks)

    async def get_chunks(self, level: int, ids: Sequence[str]) -> dict[str, Row]:
        """Chunks of one level by chunk_id, whatever their version (a scan: diagnostics and
        tests; a settled store holds one version per chunk)."""
        if not ids:
            return {}
        return await self._milvus.run(self._get, level, "chunk_id", list(ids))

    # ---- writes ----------------------------------------------------------------------------

    def _insert(self, client: Any, level: int, chunks: Sequence[StoredChunk]) -> None:
        # The rows are built here, in the store's worker thread: the BM25 text of a window's
        # chunks is CPU work the event loop must not wait on.
        rows = [store_row(c.record, c.vector, c.version, c.analysed, c) for c in chunks]
        # A retried write of the same version must not duplicate rows. A Milvus server keeps
        # both copies of a primary key inserted twice, so it gets upserts. Milvus Lite's
        # insert already replaces a row of the same key (its newest write wins), and its
        # upsert first looks every row's key up in the memtable and in each segment, which a
        # full row never needs (retrieval_service/README.md, "The store").
        write = client.insert if self._milvus.config.embedded else client.upsert
        for start in range(0, len(rows), _WRITE_BATCH):
            write(self._collection(level), rows[start : start + _WRITE_BATCH])

    async def write_chunks(self, level: int, chunks: Sequence[StoredChunk]) -> None:
        """Writes chunk versions of one level, one row each (`store_row`)."""
        await self._milvus.run(self._insert, level, chunks)

    def _copy(self, client: Any, level: int, source: DocumentEntry, target: DocumentEntry) -> int:
        # Whole rows, their vector and BM25 text included, a write batch at a time: a large
        # document's vectors as Python floats would be hundreds of MB at once. The rows are
        # found by version, not by the ids the record's counts name: an index of another
        # chunking holds other chunks of the same version.
        write = client.insert if self._milvus.config.embedded else client.upsert
        copied = 0
        batches = client.query_iterator(
            self._collection(level),
            batch_size=_WRITE_BATCH,
            filter=_version_expr(source.knowledge_base, [source.version]),
            output_fields=WRITABLE_FIELDS,
        )
        while rows := batches.next():
            copies = [
                {
                    **row,
                    "pk": version_pk(row["chunk_id"], target.version),
                    "version": target.version,
                    "dense": np.asarray(row["dense"], dtype=np.float32),
                    "metadata": target.metadata or {},
                    "acl": acl_column(target.metadata),
                    "ingest_time": target.ingest_time,
                }
                for row in rows
            ]
            if copies:
                write(self._collection(level), copies)
            copied += len(copies)
        batches.close()
        return copied

    async def copy_rows(self, level: int, source: DocumentEntry, target: DocumentEntry) -> int:
        """Copies `source`'s rows of one level into `target`'s version with its metadata
        (`ChunkRepository.copy_rows`): read and written back whole, so the vector and the BM25
        text are the stored ones, bit for bit."""
        return await self._milvus.run(self._copy, level, source, target)

    async def seal(self) -> None:
        await self._milvus.seal()

    def _delete(self, client: Any, level: int, pks: list[str]) -> int:
        deleted = 0
        for start in range(0, len(pks), _READ_BATCH):
            batch = pks[start : start + _READ_BATCH]
            result = client.delete(self._collection(level), filter=in_filter("pk", batch))
            deleted += _delete_count(result, len(batch))
        return deleted

    async def delete_rows(self, level: int, pks: Sequence[str]) -> int:
        """Deletes rows by primary key; returns how many the store reports deleted."""
        if not pks:
            return 0
        return await self._milvus.run(self._delete, level, list(pks))

    async def delete_versions(self, level: int, entries: Sequence[DocumentEntry]) -> int:
        """Deletes every row of these versions (one delete per knowledge base and batch)."""
        by_kb: dict[str, list[str]] = {}
        for e in entries:
            by_kb.setdefault(e.knowledge_base, []).append(e.version)
        deleted = 0
        for kb, versions in by_kb.items():
            for start in range(0, len(versions), _READ_BATCH):
                expr = _version_expr(kb, versions[start : start + _READ_BATCH])
                result = await self._milvus.run(
                    lambda client, e=expr: client.delete(self._collection(level), filter=e)
                )
                deleted += _delete_count(result, 0)
        return deleted

    async def delete_older(
        self, level: int, document_id: str, version: str, knowledge_base: str = DEFAULT_KB
    ) -> int:
        """Deletes every row of one document on one level whose version is older than
        `version` (a scan of its knowledge base's partition; sweeps rows no record names any
        more)."""
        expr = (
            f"knowledge_base == {quote(knowledge_base)} and document_id == {quote(document_id)}"
            f" and version < {quote(version)}"
        )
        result = await self._milvus.run(
            lambda client: client.delete(self._collection(level), filter=expr)
        )
        return _delete_count(result, 0)

    async def delete_knowledge_base(self, level: int, knowledge_base: str) -> int:
        """Deletes every row of one knowledge base on one level."""
        expr = f"knowledge_base == {quote(knowledge_base)}"
        result = await self._milvus.run(
            lambda client: client.delete(self._collection(level), filter=expr)
        )
        return _delete_count(result, 0)

    # ---- diagnostics -----------------------------------------------------------------------

    async def _scan(self, level: int, knowledge_base: str, a: str, b: str) -> set[tuple[str, str]]:
        def scan(client: Any) -> set[tuple[str, str]]:
            found: set[tuple[str, str]] = set()
            batches = client.query_iterator(
                self._collection(level),
                batch_size=1000,
                filter=f"knowledge_base == {quote(knowledge_base)}",
                output_fields=[a, b],
            )
            while rows := batches.next():
                found |= {(r[a], r[b]) for r in rows}
            batches.close()
            return found

        return await self._milvus.run(scan)

    async def document_versions(self, level: int, knowledge_base: str) -> set[tuple[str, str]]:
        """The (document_id, version) of every row of one knowledge base on one level (a
        scan: tests and benchmarks compare what two indexes hold)."""
        return await self._scan(level, knowledge_base, "document_id", "version")

    async def chunk_texts(self, level: int, knowledge_base: str) -> set[tuple[str, str]]:
        """The (chunk_id, text) of every row of one knowledge base on one level (a scan)."""
        return await self._scan(level, knowledge_base, "chunk_id", "text")

    async def count(self, level: int) -> int:
        rows = await self._milvus.run(
            lambda client: client.query(
                self._collection(level), filter="", output_fields=["count(*)"]
            )
        )
        return int(rows[0]["count(*)"]) if rows else 0

    async def unanalysed_filename(self, level: int) -> str | None:
        """The filename of one row of `level` written without its BM25 text (`UNANALYSED`),
        or None when every row there carries it (a scan, once at start-up)."""
        rows = await self._milvus.run(
            lambda client: client.query(
                self._collection(level),
                filter=f"bm25_text == {quote(UNANALYSED)}",
                output_fields=["filename"],
                limit=1,
            )
        )
        return str(rows[0]["filename"]) if rows else None
