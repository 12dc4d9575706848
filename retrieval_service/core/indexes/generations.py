"""Generations: the chunk collections one index config writes (docs/api.md#indexes), how an
ingest reaches every index of its knowledge base (`WritePlan`), and how a version is written
into an index that did not make its rows — re-chunked from its pages and embedded with that
index's embedder (`write_documents`), which both the dual writes of an ingest and a build use.
Deletes reach every generation (`EveryGeneration`): a version token names one version of one
document, whatever chunking made its rows."""

from __future__ import annotations

import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, replace

import numpy as np

from retrieval_service.core.chunking import ChunkingConfig, ChunkRecord, Page
from retrieval_service.core.documents import LEVELS, DocumentEntry
from retrieval_service.core.embedding import embed_windows
from retrieval_service.core.errors import EmbedderUnavailable
from retrieval_service.core.identity import DEFAULT_KB
from retrieval_service.core.indexes.model import build_takes_writes
from retrieval_service.core.ingest.preparation import Prepared
from retrieval_service.core.ingest.versions import Version, Window, stage
from retrieval_service.core.ports import (
    DEFAULT_SCOPE,
    ChunkRepository,
    Doc,
    Embedder,
    SearchScope,
    StoredChunk,
    Written,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Generation:
    """One generation's collections (`collection`, their base name) as a chunk store, with
    the embedder and chunking that make its rows, its embedding window and BM25 levels."""

    collection: str
    chunks: ChunkRepository
    embedder: Embedder
    chunking: ChunkingConfig
    window: int
    bm25_levels: frozenset[int]


async def embed_documents(
    generation: Generation,
    documents: Sequence[tuple[DocumentEntry, list[Page]]],
    *,
    pause: Callable[[], Awaitable[None]] | None = None,
) -> dict[int, list[StoredChunk]]:
    """The rows of each (version, pages) in `generation`, per level: split with its chunking,
    the leaves embedded with its embedder (parents as the mean of their leaves, as an ingest
    makes them), under the version's own token, so the registry's current version selects
    them as it selects the active index's. `pause` (a build's): awaited before each of the
    embedder's batches, one at a time, so the build gives way between them."""
    versions = []
    for entry, pages in documents:
        prepared = Prepared.of(
            entry.filename,
            entry.file_type,
            pages,
            generation.chunking,
            knowledge_base=entry.knowledge_base,
            document_id=entry.document_id,
            metadata=entry.metadata,
            content_sha256=entry.content_sha256,
            size_bytes=entry.size_bytes,
            fingerprint=entry.fingerprint,
        )
        versions.append(
            Version(prepared, entry=replace(entry, page_counts=prepared.counts, text=b""))
        )
    owners: deque[tuple[Version, ChunkRecord, tuple[ChunkRecord, ...]]] = deque()

    def texts() -> Iterator[str]:
        for v in versions:
            for leaf, closes in v.doc.leaves():
                owners.append((v, leaf, closes))
                yield leaf.embedded_text

    total = sum(v.doc.leaf_count for v in versions)
    embedder = generation.embedder
    staged: dict[int, list[StoredChunk]] = {level: [] for level in LEVELS}

    def take(vectors: np.ndarray, expected: int) -> None:
        array = np.asarray(vectors, dtype=np.float32)
        if array.shape != (expected, embedder.dim):
            log.error("embedder returned shape %s for %d texts", array.shape, expected)
            raise EmbedderUnavailable()
        window: Window = [(*owners.popleft(), vector) for vector in array]
        rows, _ = stage([window], generation.bm25_levels)
        for level, chunks in rows.items():
            staged[level] += chunks

    if pause is not None:
        every = list(texts())
        size = int(getattr(embedder, "batch_size", generation.window))
        for start in range(0, len(every), size):
            await pause()
            batch = every[start : start + size]
            take(await embedder.embed_passages(batch), len(batch))
        return staged
    windows = embed_windows(embedder, texts(), generation.window, total=total)
    async with contextlib.aclosing(windows):
        async for offset, vectors in windows:
            take(vectors, min(generation.window, total - offset))
    return staged


async def write_staged(generation: Generation, staged: dict[int, list[StoredChunk]]) -> None:
    """Writes rows into `generation`, leaves first. Rewriting a version writes the same keys."""
    for level in (3, 2, 1):
        if staged[level]:
            await generation.chunks.write_chunks(level, staged[level])


async def write_documents(
    generation: Generation, documents: Sequence[tuple[DocumentEntry, list[Page]]]
) -> None:
    """`embed_documents`, then `write_staged`."""
    await write_staged(generation, await embed_documents(generation, documents))


@dataclass(frozen=True, slots=True)
class OtherIndex:
    """An index an ingest reaches besides the one it writes (a build's, or one kept to switch
    back to): its generation, its state and where its build has read to (`IndexRecord`),
    and the callback that marks it FAILED."""

    generation: Generation
    state: int
    build_read_to: str | None
    fail: Callable[[], Awaitable[None]]

    @property
    def takes_writes(self) -> bool:
        return build_takes_writes(self.state, self.build_read_to)


#: The other indexes an ingest into a knowledge base reaches now (BUILDING and READY ones but
#: the one it writes), read when asked.
Others = Callable[[str, str], Awaitable[Sequence[OtherIndex]]]


@dataclass(frozen=True, slots=True)
class WritePlan:
    """An ingest's target (`ingest.IngestTarget`): the knowledge base's active index when the
    ingest began (`primary`: its rows are made for it) and, read again at every commit under
    the write lock, every other live index of the knowledge base, which gets each completed
    version chunked and embedded its own way — unless it is an index whose build takes the
    writes (`OtherIndex.takes_writes`: it reads the committed versions itself), so a write
    during a build embeds once, not twice. The commit checks, in its own transaction, that
    every index holds its versions or takes them (`written`, IndexesBehind) and `catch_up`
    writes them where that changed meanwhile. An index whose write fails is marked FAILED (a
    build or a standby that missed a version is no longer whole) and the ingest goes on: the
    active index is what callers read."""

    knowledge_base: str
    primary: Generation
    others: Others

    @property
    def chunks(self) -> ChunkRepository:
        return self.primary.chunks

    @property
    def chunking(self) -> ChunkingConfig:
        return self.primary.chunking

    @property
    def embedder(self) -> Embedder:
        return self.primary.embedder

    @property
    def window(self) -> int:
        return self.primary.window

    @property
    def bm25_levels(self) -> frozenset[int]:
        return self.primary.bm25_levels

    async def mirror(self, versions: Sequence[Version]) -> Written:
        """Writes these versions (not yet committed) into every other index but those whose
        build takes the writes; what each index holds then (the primary: all of them)."""
        return await self._write(versions, {}, lambda other: not other.takes_writes)

    async def catch_up(
        self, versions: Sequence[Version], behind: frozenset[str], written: Written
    ) -> Written:
        """After IndexesBehind: writes every one of these versions into the indexes `behind`
        names (by collection), adding them to `written`."""
        return await self._write(
            versions, written, lambda other: other.generation.collection in behind
        )

    async def _write(
        self, versions: Sequence[Version], written: Written, due: Callable[[OtherIndex], bool]
    ) -> Written:
        ids = frozenset(v.entry.document_id for v in versions)
        out = dict(written) | {self.primary.collection: ids}
        documents = [(v.entry, v.doc.loaded) for v in versions]
        for other in await self.others(self.knowledge_base, self.primary.collection):
            if not due(other):
                continue
            collection = other.generation.collection
            try:
                await write_documents(other.generation, documents)
            except Exception:
                log.exception(
                    "writing %d document(s) into the index in %s failed; it is marked FAILED",
                    len(documents),
                    collection,
                )
                await other.fail()
                continue
            out[collection] = ids
        return out

    async def mirror_copy(self, source: DocumentEntry, target: DocumentEntry) -> Written:
        """Copies `source`'s rows under `target`'s version into every other index but those
        whose build takes the writes (the build embeds the new version); what holds it then."""
        out = {self.primary.collection: frozenset({target.document_id})}
        for other in await self.others(self.knowledge_base, self.primary.collection):
            if other.takes_writes:
                continue
            try:
                for level in LEVELS:
                    await other.generation.chunks.copy_rows(level, source, target)
            except Exception:
                log.exception(
                    "copying %s into %s failed",
                    target.document_id,
                    other.generation.collection,
                )
                await other.fail()
                continue
            out[other.generation.collection] = frozenset({target.document_id})
        return out


class EveryGeneration:
    """The chunk store every delete and seal of the version protocol goes through: each
    generation some index uses (`stores()`, read when asked: another replica may have begun
    a build), so removing a version or a knowledge base removes its rows from every index.
    Reads and plain writes go to the service's own generation (`own`; an ingestor without a
    plan)."""

    def __init__(
        self, own: ChunkRepository, stores: Callable[[], Awaitable[Sequence[ChunkRepository]]]
    ) -> None:
        self._own = own
        self._stores = stores

    async def hybrid_search(
        self,
        level: int,
        text: str,
        vector: Sequence[float],
        candidate_k: int,
        scope: SearchScope = DEFAULT_SCOPE,
    ) -> list[Doc]:
        return await self._own.hybrid_search(level, text, vector, candidate_k, scope)

    async def dense_search(
        self, level: int, vector: Sequence[float], limit: int, scope: SearchScope = DEFAULT_SCOPE
    ) -> list[Doc]:
        return await self._own.dense_search(level, vector, limit, scope)

    async def get_versioned(self, level: int, keys: Sequence[tuple[str, str]]) -> dict[str, Doc]:
        return await self._own.get_versioned(level, keys)

    async def write_chunks(self, level: int, chunks: Sequence[StoredChunk]) -> None:
        await self._own.write_chunks(level, chunks)

    async def copy_rows(self, level: int, source: DocumentEntry, target: DocumentEntry) -> int:
        return await self._own.copy_rows(level, source, target)

    async def delete_rows(self, level: int, pks: Sequence[str]) -> int:
        return sum([await s.delete_rows(level, pks) for s in await self._stores()])

    async def delete_versions(self, level: int, entries: Sequence[DocumentEntry]) -> int:
        return sum([await s.delete_versions(level, entries) for s in await self._stores()])

    async def delete_older(
        self, level: int, document_id: str, version: str, knowledge_base: str = DEFAULT_KB
    ) -> int:
        stores = await self._stores()
        return sum(
            [await s.delete_older(level, document_id, version, knowledge_base) for s in stores]
        )

    async def delete_knowledge_base(self, level: int, knowledge_base: str) -> int:
        stores = await self._stores()
        return sum([await s.delete_knowledge_base(level, knowledge_base) for s in stores])

    async def seal(self) -> None:
        for store in await self._stores():
            await store.seal()
