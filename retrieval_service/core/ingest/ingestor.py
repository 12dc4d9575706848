"""The ingestor (IngestDocuments, StreamIngestDocuments, DeleteDocuments, ListDocuments:
docs/api.md#retrievalservice): validate → load → sanitise → three-level split for every
document, then a pipeline: the leaves of all documents embed window by window, and each
embedded window is written at once (its leaves, and every parent whose leaves are now all
embedded: the normalised mean of them), several documents' rows per write, through a bounded
hand-over. Every write follows the crash-safe version protocol (`versions.py`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence

import numpy as np

from retrieval_service.core.chunking import ChunkingConfig, ChunkRecord
from retrieval_service.core.documents import LEVELS, DocumentPage, IngestedDocument
from retrieval_service.core.embedding import embed_windows
from retrieval_service.core.errors import EmbedderUnavailable
from retrieval_service.core.file_types import resolve_file_type
from retrieval_service.core.ingest.flow import (
    HEARTBEAT_SECONDS,
    MAX_FLUSH_LEAVES,
    PENDING_WINDOWS,
    SEAL_EVERY_ROWS,
    Handover,
    IngestEvent,
    ProgressCounter,
    ProgressEvents,
    ProgressSink,
    embedding_window,
)
from retrieval_service.core.ingest.preparation import Prepared
from retrieval_service.core.ingest.validation import (
    SourceDocument,
    check_content,
    check_delete_request,
    check_ingest_request,
    list_page_size,
    validate_filename,
)
from retrieval_service.core.ingest.versions import (
    Checkpoint,
    Version,
    VersionProtocol,
    Window,
    no_checkpoint,
    stage,
)
from retrieval_service.core.ports import (
    ChunkRepository,
    DocumentRegistry,
    Embedder,
    PageLoader,
)
from shared.errors import InvalidArgument

log = logging.getLogger(__name__)


class Ingestor:
    """IngestDocuments, StreamIngestDocuments, DeleteDocuments and ListDocuments on the two
    store ports, the embedder and a page loader; and reconciliation of what crashed writers
    left."""

    def __init__(
        self,
        chunks: ChunkRepository,
        registry: DocumentRegistry,
        embedder: Embedder,
        chunking: ChunkingConfig,
        *,
        load_pages: PageLoader,
        max_document_bytes: int,
        window: int | None = None,
        checkpoint: Checkpoint = no_checkpoint,
        bm25_levels: Iterable[int] = LEVELS,
    ) -> None:
        """`load_pages` turns a document's bytes into pages; `window`: texts per embedding
        window (default `embedding_window(embedder)`); `bm25_levels`: the levels whose chunks
        are indexed for BM25 (the recalled level, LEAF_RETRIEVE_LEVEL, or all with
        BM25_ALL_LEVELS; `StoredChunk.analysed`)."""
        self._load_pages = load_pages
        self._bm25_levels = frozenset(bm25_levels)
        self._registry = registry
        self._embedder = embedder
        self._chunking = chunking
        self._max_bytes = max_document_bytes
        self._window = window or embedding_window(embedder)
        self._versions = VersionProtocol(chunks, registry, checkpoint)
        # One writer per process at a time; across processes, versions order the writers.
        self._lock = asyncio.Lock()

    # ---- ingest ---------------------------------------------------------------------------

    def _versions_of(self, documents: Sequence[SourceDocument]) -> list[Version]:
        return [Version(self._parse(i, d)) for i, d in enumerate(documents)]

    def _parse(self, index: int, doc: SourceDocument) -> Prepared:
        prefix = f"documents[{index}]"
        validate_filename(doc.filename, f"{prefix}.filename")
        file_type = resolve_file_type(doc.filename, doc.file_type, f"{prefix}.file_type")
        check_content(doc, f"{prefix}.content", self._max_bytes)
        pages = self._load_pages(doc.content, file_type, f"{prefix}.content", doc.filename)
        prepared = Prepared.of(doc.filename, file_type, pages, self._chunking)
        if not prepared.leaf_count:
            raise InvalidArgument(f"{prefix}.content", "no text could be extracted")
        return prepared

    async def _embed(
        self,
        versions: list[Version],
        handover: Handover[Window],
        deadline: float | None,
        progress: ProgressCounter | None,
    ) -> None:
        """Embeds the leaves of all documents in windows that span documents (a request of many
        small documents still fills every window) and hands each window to the writer. Only
        leaves go through the model: embedding is the ingest bottleneck, and a parent's mean
        vector keeps level-2 recall sound (retrieval_service/README.md "Ingestion")."""
        # The leaves are split from the documents' pages as the windows are read (at most two
        # windows ahead of the one handed over), and wait here for their vectors.
        owners: deque[tuple[Version, ChunkRecord, tuple[ChunkRecord, ...]]] = deque()

        def texts() -> Iterator[str]:
            for v in versions:
                for leaf, closes in v.doc.leaves():
                    owners.append((v, leaf, closes))
                    yield leaf.embedded_text

        total = sum(v.doc.leaf_count for v in versions)
        if progress is not None:
            progress.advance(0)
        windows = embed_windows(
            self._embedder,
            texts(),
            self._window,
            total=total,
            on_batch=progress.advance if progress is not None else None,
            deadline=deadline,
        )
        # The embedder's failures arrive as EmbedderUnavailable or DeadlineExceeded.
        async with contextlib.aclosing(windows):
            async for offset, vectors in windows:
                expected = min(self._window, total - offset)
                vectors = np.asarray(vectors, dtype=np.float32)
                if vectors.shape != (expected, self._embedder.dim):
                    log.error("embedder returned shape %s for %d texts", vectors.shape, expected)
                    raise EmbedderUnavailable()
                window: Window = [(*owners.popleft(), vec) for vec in vectors]
                await handover.put(window, len(window))

    async def _write_windows(
        self, handover: Handover[Window], reports: list[IngestedDocument]
    ) -> None:
        """Writes each embedded window as it arrives, together with every window already
        waiting (up to MAX_FLUSH_LEAVES leaves), and commits the documents it completes;
        seals every SEAL_EVERY_ROWS rows."""
        closed = False
        unsealed = 0
        while not closed:
            first = await handover.get()
            if first is None:
                return
            taken = [first]
            while handover.ready() and sum(size for _, size in taken) < MAX_FLUSH_LEAVES:
                more = await handover.get()
                if more is None:
                    closed = True
                    break
                taken.append(more)
            staged, completed = stage([w for w, _ in taken], self._bm25_levels)
            async with self._lock:
                await self._versions.commit(staged, completed)
                unsealed += sum(map(len, staged.values()))
                if unsealed >= SEAL_EVERY_ROWS:
                    await self._versions.seal()
                    unsealed = 0
            reports.extend(v.report() for v in completed)
            for _, size in taken:
                await handover.done(size)

    async def ingest(
        self,
        documents: Sequence[SourceDocument],
        *,
        deadline: float | None = None,
        on_progress: ProgressSink | None = None,
    ) -> list[IngestedDocument]:
        """All documents are validated and parsed before anything is embedded or written, so
        bad input changes nothing. Then embedding and writing overlap: each embedded window's
        rows are written while the next windows embed, and a document is committed (all or
        nothing) once its last rows are. When embedding fails, the documents embedded before
        the failure are still committed, the uncommitted versions removed, then the error is
        raised; when a write fails, embedding stops. `deadline` is a `time.monotonic()`
        instant for the embedder; `on_progress` hears each document's embedding progress."""
        started = time.monotonic()
        check_ingest_request(documents)
        versions = await asyncio.to_thread(self._versions_of, documents)
        # The pages hold the text now: the request's bytes need not live as long as the call
        # (a 20 MiB document's copy), unless the caller keeps them.
        del documents
        progress = (
            ProgressCounter([v.doc for v in versions], on_progress, started)
            if on_progress
            else None
        )
        handover: Handover[Window] = Handover(PENDING_WINDOWS * self._window)
        reports: list[IngestedDocument] = []
        tasks: list[asyncio.Future[None]] = []
        try:
            # Embedding starts while the intent is recorded; nothing is written before it is.
            embedder = asyncio.ensure_future(self._embed(versions, handover, deadline, progress))
            tasks = [embedder]
            async with self._lock:
                await self._versions.begin(versions)
            writer = asyncio.ensure_future(self._write_windows(handover, reports))
            tasks.append(writer)
            await asyncio.wait({writer, embedder}, return_when=asyncio.FIRST_COMPLETED)
            if writer.done():  # before the embedder: only by a failed write
                await writer
            # Documents embedded before an embedding failure are still committed, then the
            # failure is raised.
            handover.close()
            await writer
            await embedder
            return reports
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            unfinished = [v.entry for v in versions if not v.committed]
            if unfinished or reports:
                async with self._lock:
                    if unfinished:
                        await self._versions.discard_quietly(unfinished)
                    # Before the reply, not after it: while Lite flushes, a search misses the
                    # rows being flushed (5 of 75 searches right after a reply did, when the
                    # seal ran after it), and a caller must find what it just ingested.
                    if reports:
                        await self._versions.seal()

    async def ingest_events(
        self,
        documents: Sequence[SourceDocument],
        *,
        deadline: float | None = None,
        heartbeat: float = HEARTBEAT_SECONDS,
    ) -> AsyncIterator[IngestEvent]:
        """`ingest` as events (`flow.ProgressEvents`): its progress, a heartbeat while none
        comes, then one IngestResult; an error of the ingest is raised after the events before
        it."""
        events = ProgressEvents(heartbeat)
        task = asyncio.ensure_future(
            self.ingest(documents, deadline=deadline, on_progress=events.hear)
        )
        del documents  # `ingest` lets them go once parsed
        async with contextlib.aclosing(events.follow(task)) as stream:
            async for event in stream:
                yield event

    # ---- delete / list --------------------------------------------------------------------

    async def delete(self, filenames: Sequence[str]) -> int:
        """Removes every level of each named document; unknown names are ignored."""
        check_delete_request(filenames)
        deleted = 0
        async with self._lock:
            for name in dict.fromkeys(filenames):
                deleted += await self._versions.delete(name)
            await self._versions.seal()
        return deleted

    async def list_page(self, page_size: int, page_token: str) -> DocumentPage:
        """One page of documents by filename (AIP-158): page_size 0 → 100, above 1000 → 1000,
        negative → INVALID_ARGUMENT; a token this service did not issue → INVALID_ARGUMENT."""
        return await self._registry.page(list_page_size(page_size), page_token)

    # ---- reconciliation -------------------------------------------------------------------

    async def reconcile(self, grace_seconds: float | None) -> int:
        """`VersionProtocol.reconcile` while no write of this process runs: removes what
        crashed or superseded writers left (`None`: this process is the store's only writer,
        so every pending version is dead). Returns the number of records removed."""
        async with self._lock:
            return await self._versions.reconcile(grace_seconds)
