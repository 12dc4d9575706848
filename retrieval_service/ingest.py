"""Ingestion (API.md IngestDocuments/DeleteDocuments/ListDocuments): validate → load →
sanitise → three-level split → embed (leaves by the model, parents the normalised mean of
their leaves) → write. Replacing a document loses nothing: every vector is computed
before the store is touched, the previous version's rows are kept in memory while the new
rows are written, and any store failure restores them before the error is raised."""

from __future__ import annotations

import asyncio
import logging
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from retrieval_service.chunk_store import ChunkStore
from retrieval_service.chunking import ChunkingConfig, ChunkRecord, chunk_document
from retrieval_service.embedding import Embedder, normalise
from retrieval_service.loaders import (
    FILE_TYPES_BY_EXTENSION,
    extension_of,
    load_pages,
    resolve_file_type,
)
from retrieval_service.metrics import record_ingested
from retrieval_service.milvus_schema import LEVELS
from retrieval_service.pipeline import EMBEDDER_FAILURES
from retrieval_service.registry import DocumentEntry, DocumentRegistry
from retrieval_service.store import STORE_FAILURES, MilvusStore
from shared.errors import DependencyUnavailable, InvalidArgument
from shared.lexical import bm25_text

log = logging.getLogger(__name__)

MAX_FILENAME_CHARS = 255


@dataclass(frozen=True, slots=True)
class SourceDocument:
    filename: str
    content: bytes
    file_type: str | None = None


@dataclass(frozen=True, slots=True)
class IngestedDocument:
    filename: str
    file_type: str
    pages: int
    l1_chunks: int
    l2_chunks: int
    l3_chunks: int
    replaced: bool


@dataclass(slots=True)
class _Prepared:
    filename: str
    file_type: str
    pages: int
    chunks: list[ChunkRecord]
    vectors: dict[str, np.ndarray]


def validate_filename(filename: str, field: str) -> None:
    """A plain file name: not blank, no path separators or "..", no control or format
    characters, at most 255 characters, with a supported extension."""
    if not filename or not filename.strip():
        raise InvalidArgument(field, "must not be empty")
    if len(filename) > MAX_FILENAME_CHARS:
        raise InvalidArgument(field, f"is longer than {MAX_FILENAME_CHARS} characters")
    if "/" in filename or "\\" in filename:
        raise InvalidArgument(field, "must not contain path separators")
    if ".." in filename:
        raise InvalidArgument(field, 'must not contain ".."')
    if filename != filename.strip():
        raise InvalidArgument(field, "must not start or end with whitespace")
    if any(unicodedata.category(ch) in ("Cc", "Cf", "Co", "Cs") for ch in filename):
        raise InvalidArgument(field, "must not contain control characters")
    if extension_of(filename) not in FILE_TYPES_BY_EXTENSION:
        supported = ", ".join(sorted(FILE_TYPES_BY_EXTENSION))
        raise InvalidArgument(field, f"unsupported file type (supported: {supported})")


class Ingestor:
    def __init__(
        self,
        milvus: MilvusStore,
        chunks: ChunkStore,
        registry: DocumentRegistry,
        embedder: Embedder,
        chunking: ChunkingConfig,
        *,
        max_document_bytes: int,
        batch_size: int = 32,
    ) -> None:
        self._milvus = milvus
        self._chunks = chunks
        self._registry = registry
        self._embedder = embedder
        self._chunking = chunking
        self._max_bytes = max_document_bytes
        self._batch_size = batch_size
        self._lock = asyncio.Lock()  # one writer at a time: replace is read-modify-write

    # ---- ingest ---------------------------------------------------------------------------

    def _parse(self, index: int, doc: SourceDocument) -> _Prepared:
        prefix = f"documents[{index}]"
        validate_filename(doc.filename, f"{prefix}.filename")
        file_type = resolve_file_type(doc.filename, doc.file_type, f"{prefix}.file_type")
        if not doc.content:
            raise InvalidArgument(f"{prefix}.content", "must not be empty")
        if len(doc.content) > self._max_bytes:
            raise InvalidArgument(
                f"{prefix}.content",
                f"is {len(doc.content)} bytes, at most {self._max_bytes}",
            )
        pages = load_pages(doc.content, file_type, f"{prefix}.content", doc.filename)
        chunks = chunk_document(doc.filename, file_type, pages, self._chunking)
        if not any(c.chunk_level == 3 for c in chunks):
            raise InvalidArgument(f"{prefix}.content", "no text could be extracted")
        return _Prepared(doc.filename, file_type, len(pages), chunks, {})

    async def _embed(self, prepared: list[_Prepared]) -> None:
        """Fill every leaf's vector; raises before anything is written. Only leaves go
        through the model: embedding is the ingest bottleneck, and a parent's mean vector
        keeps level-2 recall sound (README "Ingestion")."""
        todo = [c for p in prepared for c in p.chunks if c.chunk_level == 3]
        owner = {c.chunk_id + "\x00" + c.filename: p for p in prepared for c in p.chunks}
        for start in range(0, len(todo), self._batch_size):
            batch = todo[start : start + self._batch_size]
            vectors = await self._embedder.embed_passages([c.text for c in batch])
            vectors = np.asarray(vectors, dtype=np.float32)
            if vectors.shape != (len(batch), self._embedder.dim):
                raise ValueError(f"embedder returned shape {vectors.shape} for {len(batch)} texts")
            for chunk, vector in zip(batch, vectors, strict=True):
                owner[chunk.chunk_id + "\x00" + chunk.filename].vectors[chunk.chunk_id] = vector

    async def ingest(self, documents: Sequence[SourceDocument]) -> list[IngestedDocument]:
        """All documents are validated and parsed before anything is embedded or written, so
        bad input changes nothing; each document is then written all or nothing."""
        if not documents:
            raise InvalidArgument("documents", "must hold at least one document")
        seen: set[str] = set()
        for i, doc in enumerate(documents):
            if doc.filename in seen:
                raise InvalidArgument(f"documents[{i}].filename", "appears twice in the request")
            seen.add(doc.filename)
        prepared = await asyncio.to_thread(
            lambda: [self._parse(i, d) for i, d in enumerate(documents)]
        )
        try:
            await self._embed(prepared)
        except DependencyUnavailable:
            raise
        except EMBEDDER_FAILURES as exc:
            log.error("embedding the passages failed", exc_info=exc)
            raise DependencyUnavailable("embedder", "the embedding model failed") from exc
        for p in prepared:
            _mean_parent_vectors(p)
        reports = []
        async with self._lock:
            for p in prepared:
                reports.append(await self._write(p))
            await self._seal()
        return reports

    async def _seal(self) -> None:
        """The rows are written (and durable in Milvus's log) by now; sealing only makes them
        fast to search, so a failure is logged and the request still succeeds."""
        try:
            await self._milvus.seal()
        except STORE_FAILURES:
            log.warning("could not flush the written rows into indexed segments")

    async def _write(self, p: _Prepared) -> IngestedDocument:
        old = await self._registry.get(p.filename)
        backup = (
            {lvl: await self._chunks.full_rows(lvl, old.ids(lvl)) for lvl in LEVELS} if old else {}
        )
        rows: dict[int, list[dict[str, Any]]] = {lvl: [] for lvl in LEVELS}
        counts: dict[str, list[int]] = {}
        for c in p.chunks:
            rows[c.chunk_level].append(store_row(c, p.vectors[c.chunk_id]))
            counts.setdefault(c.page_number, [0, 0, 0])[c.chunk_level - 1] += 1
        entry = DocumentEntry(p.filename, p.file_type, p.pages, counts)
        new_ids = {lvl: {r["chunk_id"] for r in rows[lvl]} for lvl in LEVELS}
        try:
            for lvl in LEVELS:
                await self._chunks.upsert_chunks(lvl, rows[lvl])
            if old:
                for lvl in LEVELS:
                    stale = [i for i in old.ids(lvl) if i not in new_ids[lvl]]
                    await self._chunks.delete_chunks(lvl, stale)
            await self._registry.put(entry)
        except STORE_FAILURES:
            log.error("writing %s failed, restoring the previous version", p.filename)
            await self._restore(p.filename, new_ids, old, backup)
            raise
        record_ingested(len(rows[1]), len(rows[2]), len(rows[3]))
        return IngestedDocument(
            filename=p.filename,
            file_type=p.file_type,
            pages=p.pages,
            l1_chunks=len(rows[1]),
            l2_chunks=len(rows[2]),
            l3_chunks=len(rows[3]),
            replaced=old is not None,
        )

    async def _restore(
        self,
        filename: str,
        new_ids: dict[int, set[str]],
        old: DocumentEntry | None,
        backup: dict[int, list[dict[str, Any]]],
    ) -> None:
        try:
            for lvl in LEVELS:
                old_ids = set(old.ids(lvl)) if old else set()
                await self._chunks.delete_chunks(lvl, sorted(new_ids[lvl] - old_ids))
                if backup.get(lvl):
                    await self._chunks.upsert_chunks(lvl, backup[lvl])
            if old:
                await self._registry.put(old)
        except STORE_FAILURES:
            # The write's own error is what the caller hears; this one is only logged.
            log.error("restoring the previous version of %s failed", filename)

    # ---- delete / list --------------------------------------------------------------------

    async def delete(self, filenames: Sequence[str]) -> int:
        """Removes every level of each named document; unknown names are ignored."""
        if not filenames:
            raise InvalidArgument("filenames", "must hold at least one file name")
        for i, name in enumerate(filenames):
            validate_filename(name, f"filenames[{i}]")  # the same rule as on ingest
        deleted = 0
        async with self._lock:
            for name in dict.fromkeys(filenames):
                entry = await self._registry.get(name)
                for lvl in LEVELS:
                    if entry:
                        deleted += await self._chunks.delete_chunks(lvl, entry.ids(lvl))
                    # Sweep rows a crashed writer may have left without a registry entry.
                    deleted += await self._chunks.delete_by_filename(lvl, name)
                if entry:
                    await self._registry.delete(name)
            await self._seal()
        return deleted

    async def list_documents(self) -> list[DocumentEntry]:
        return await self._registry.entries()


def _mean_parent_vectors(p: _Prepared) -> None:
    """L2 = normalised mean of its L3 children; L1 = normalised mean of its L3 descendants."""
    children: dict[str, list[np.ndarray]] = {}
    roots: dict[str, list[np.ndarray]] = {}
    for c in p.chunks:
        if c.chunk_level == 3:
            children.setdefault(c.parent_chunk_id, []).append(p.vectors[c.chunk_id])
            roots.setdefault(c.root_chunk_id, []).append(p.vectors[c.chunk_id])
    for c in p.chunks:
        source = children if c.chunk_level == 2 else roots if c.chunk_level == 1 else None
        if source is not None:
            stack = source.get(c.chunk_id)
            if not stack:  # cannot happen for a non-empty parent, but never write a zero
                raise ValueError(f"chunk {c.chunk_id} has no leaves")
            p.vectors[c.chunk_id] = normalise(np.mean(np.stack(stack), axis=0))


def store_row(c: ChunkRecord, vector: np.ndarray) -> dict[str, Any]:
    """The Milvus row of one chunk: its record fields plus the dense vector."""
    return {
        "chunk_id": c.chunk_id,
        "text": c.text,
        "bm25_text": bm25_text(c.text),
        "dense": vector.tolist(),
        "filename": c.filename,
        "file_type": c.file_type,
        "file_path": c.file_path,
        "page_number": c.page_number,
        "parent_chunk_id": c.parent_chunk_id,
        "root_chunk_id": c.root_chunk_id,
        "chunk_level": c.chunk_level,
        "chunk_idx": c.chunk_idx,
    }
