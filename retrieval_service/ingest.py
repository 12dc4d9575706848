"""Ingestion (API.md IngestDocuments/StreamIngestDocuments/DeleteDocuments/ListDocuments):
validate → load → sanitise → three-level split for every document, then a pipeline: the
leaves of all documents embed window by window (parents are the normalised mean of their
leaves) while the documents already embedded are written, one at a time, through a bounded
hand-over; plus start-up reconciliation.

The write path is crash-safe (README "Crash safety"): every ingest writes a new *version* of
the document beside the current one — a PENDING registry record naming all its rows, the rows
of the three levels, then the COMMITTED record, which is the instant the new version becomes
current — and only then removes older versions. A delete commits a TOMBSTONE version first.
Readers see current versions only, so a crash at any instant leaves the previous version
intact or the new one complete; `reconcile` removes what a crash left behind."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import unicodedata
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from retrieval_service.chunk_store import ChunkStore
from retrieval_service.chunking import ChunkingConfig, ChunkRecord, chunk_document
from retrieval_service.embedding import Embedder, embed_windows, normalise
from retrieval_service.loaders import (
    FILE_TYPES_BY_EXTENSION,
    extension_of,
    load_pages,
    resolve_file_type,
)
from retrieval_service.metrics import record_ingested
from retrieval_service.milvus_schema import COMMITTED, LEVELS, PENDING, TOMBSTONE, version_pk
from retrieval_service.pipeline import EMBEDDER_FAILURES
from retrieval_service.registry import (
    DocumentEntry,
    DocumentPage,
    DocumentRegistry,
    RecordKey,
    current_of,
    new_version,
    version_age_seconds,
)
from retrieval_service.store import STORE_FAILURES, MilvusStore
from shared.errors import DeadlineExceeded, DependencyUnavailable, InvalidArgument
from shared.lexical import bm25_text

log = logging.getLogger(__name__)

MAX_FILENAME_CHARS = 255
DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000

#: Called with the name of each step of a write as it is reached (`CRASH_POINTS`). The
#: service passes a no-op; the kill-anywhere test hook (`SUPERMEW_CRASH_AT`, read by
#: `__main__`) ends the process there, and in-process tests pause there.
Checkpoint = Callable[[str], Awaitable[None]]
#: Every named step of an ingest and a delete, in order.
CRASH_POINTS = (
    "before_write",
    "after_intent",
    "after_level_1",
    "after_level_2",
    "after_level_3",
    "after_commit",
    "during_cleanup",
    "after_cleanup",
    "delete_before_commit",
    "delete_after_commit",
    "delete_during_cleanup",
    "delete_after_cleanup",
)


async def no_checkpoint(name: str) -> None:
    return None


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


@dataclass(frozen=True, slots=True)
class IngestProgress:
    """How far one document's leaves have embedded (API.md StreamIngestDocuments)."""

    filename: str
    leaves_done: int
    leaves_total: int
    elapsed_ms: int


@dataclass(frozen=True, slots=True)
class IngestResult:
    """The last event of a streamed ingest: what `ingest` returns."""

    documents: list[IngestedDocument]


IngestEvent = IngestProgress | IngestResult
ProgressSink = Callable[[IngestProgress], None]

# Embedding windows: at least one full round of a remote endpoint's concurrent batches, so it
# never idles between windows (32 = the default 8 texts × 4 requests in flight).
MIN_WINDOW = 32
# Embedded documents waiting for the writer, counted in leaves: enough that a burst of small
# documents keeps the embedder busy, small next to a large document's own vectors.
PENDING_WINDOWS = 16
# StreamIngestDocuments reports at least this often while a call runs.
HEARTBEAT_SECONDS = 1.0


@dataclass(slots=True)
class _Prepared:
    filename: str
    file_type: str
    pages: int
    chunks: list[ChunkRecord]
    vectors: dict[str, np.ndarray]

    @property
    def leaves(self) -> list[ChunkRecord]:
        return [c for c in self.chunks if c.chunk_level == 3]


class _ProgressCounter:
    """Turns the embedder's running count over all leaves of a request into per-document
    progress, in request order: each document's events start at 0, follow its leaves as they
    embed and end at its total."""

    def __init__(self, prepared: Sequence[_Prepared], sink: ProgressSink, started: float) -> None:
        self._docs: list[tuple[str, int, int]] = []
        offset = 0
        for p in prepared:
            n = len(p.leaves)
            self._docs.append((p.filename, offset, n))
            offset += n
        self._sink = sink
        self._started = started
        self._reported = [-1] * len(self._docs)
        self._first = 0  # the first document not yet reported complete

    def advance(self, done: int, _total: int = 0) -> None:
        for i in range(self._first, len(self._docs)):
            name, start, n = self._docs[i]
            if start > done:
                break
            value = min(done - start, n)
            # Every document's events start at 0, also when one batch ends the previous
            # document and goes on into this one.
            for report in (0, value) if self._reported[i] < 0 < value else (value,):
                if report != self._reported[i]:
                    self._reported[i] = report
                    elapsed = int((time.monotonic() - self._started) * 1000)
                    self._sink(IngestProgress(name, report, n, elapsed))
            if value == n:
                self._first = i + 1


class _Handover:
    """The bounded queue between the embedder and the writer, bounded in leaves (a document
    larger than the bound passes alone), so that embedding runs ahead of writing without
    holding every document's vectors at once."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._held = 0
        self._queue: asyncio.Queue[_Prepared | None] = asyncio.Queue()
        self._room = asyncio.Condition()

    async def put(self, p: _Prepared) -> None:
        size = len(p.leaves)
        async with self._room:
            await self._room.wait_for(lambda: self._held == 0 or self._held + size <= self._limit)
            self._held += size
        self._queue.put_nowait(p)

    def close(self) -> None:
        self._queue.put_nowait(None)

    async def get(self) -> _Prepared | None:
        return await self._queue.get()

    async def done(self, p: _Prepared) -> None:
        async with self._room:
            self._held -= len(p.leaves)
            self._room.notify_all()


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
        window: int | None = None,
        checkpoint: Checkpoint = no_checkpoint,
    ) -> None:
        self._milvus = milvus
        self._chunks = chunks
        self._registry = registry
        self._embedder = embedder
        self._chunking = chunking
        self._max_bytes = max_document_bytes
        self._window = window or embedding_window(embedder)
        self._checkpoint = checkpoint
        # One writer per process at a time; across processes, versions order the writers.
        self._lock = asyncio.Lock()

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

    async def _embed(
        self,
        prepared: list[_Prepared],
        handover: _Handover,
        deadline: float | None,
        progress: _ProgressCounter | None,
    ) -> None:
        """Embeds the leaves of all documents in windows that span documents (a request of many
        small documents still fills every window) and hands each document over as soon as its
        last leaf is embedded. Only leaves go through the model: embedding is the ingest
        bottleneck, and a parent's mean vector keeps level-2 recall sound (README
        "Ingestion")."""
        leaves = [(p, c) for p in prepared for c in p.leaves]
        ends: list[int] = []
        for p in prepared:
            ends.append((ends[-1] if ends else 0) + len(p.leaves))
        if progress is not None:
            progress.advance(0)
        next_doc = 0
        windows = embed_windows(
            self._embedder,
            [c.text for _, c in leaves],
            self._window,
            on_batch=progress.advance if progress is not None else None,
            deadline=deadline,
        )
        async with contextlib.aclosing(windows):
            while True:
                try:
                    offset, vectors = await anext(windows)
                except StopAsyncIteration:
                    break
                except (DependencyUnavailable, DeadlineExceeded):
                    raise
                except EMBEDDER_FAILURES as exc:
                    log.error("embedding the passages failed", exc_info=exc)
                    raise DependencyUnavailable("embedder", "the embedding model failed") from exc
                owners = leaves[offset : offset + self._window]
                vectors = np.asarray(vectors, dtype=np.float32)
                if vectors.shape != (len(owners), self._embedder.dim):
                    log.error("embedder returned shape %s for %d texts", vectors.shape, len(owners))
                    raise DependencyUnavailable("embedder", "the embedding model failed")
                for (p, chunk), vector in zip(owners, vectors, strict=True):
                    p.vectors[chunk.chunk_id] = vector
                while next_doc < len(prepared) and ends[next_doc] <= offset + len(owners):
                    _mean_parent_vectors(prepared[next_doc])
                    await handover.put(prepared[next_doc])
                    next_doc += 1

    async def _write_handed_over(
        self, handover: _Handover, reports: list[IngestedDocument]
    ) -> None:
        while (p := await handover.get()) is not None:
            async with self._lock:
                reports.append(await self._write(p))
            p.vectors.clear()
            await handover.done(p)

    async def ingest(
        self,
        documents: Sequence[SourceDocument],
        *,
        deadline: float | None = None,
        on_progress: ProgressSink | None = None,
    ) -> list[IngestedDocument]:
        """All documents are validated and parsed before anything is embedded or written, so
        bad input changes nothing. Then embedding and writing overlap: document k is written
        while the leaves after it embed, each document all or nothing. When embedding fails,
        the documents embedded before the failure are still written, then the error is
        raised; when a write fails, embedding stops. `deadline` is a `time.monotonic()`
        instant for the embedder; `on_progress` hears each document's embedding progress."""
        started = time.monotonic()
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
        progress = _ProgressCounter(prepared, on_progress, started) if on_progress else None
        handover = _Handover(PENDING_WINDOWS * self._window)
        reports: list[IngestedDocument] = []
        writer = asyncio.ensure_future(self._write_handed_over(handover, reports))
        embedder = asyncio.ensure_future(self._embed(prepared, handover, deadline, progress))
        try:
            await asyncio.wait({writer, embedder}, return_when=asyncio.FIRST_COMPLETED)
            if writer.done():  # before the embedder: only by a failed write
                await writer
            # Documents embedded before an embedding failure are still written, then the
            # failure is raised.
            handover.close()
            await writer
            await embedder
            return reports
        finally:
            for task in (embedder, writer):
                task.cancel()
            await asyncio.gather(embedder, writer, return_exceptions=True)
            if reports:
                async with self._lock:
                    await self._seal()

    async def ingest_events(
        self,
        documents: Sequence[SourceDocument],
        *,
        deadline: float | None = None,
        heartbeat: float = HEARTBEAT_SECONDS,
    ) -> AsyncIterator[IngestEvent]:
        """`ingest` as events: every progress change (only the latest per document when they
        come faster than they are consumed), the latest progress again with a fresh
        `elapsed_ms` whenever `heartbeat` seconds pass without one, then one IngestResult. An
        error of the ingest is raised after the events before it."""
        started = time.monotonic()
        pending: dict[str, IngestProgress] = {}
        latest: IngestProgress | None = None
        changed = asyncio.Event()

        def hear(event: IngestProgress) -> None:
            pending[event.filename] = event
            changed.set()

        task = asyncio.ensure_future(self.ingest(documents, deadline=deadline, on_progress=hear))
        try:
            while not task.done():
                waiter = asyncio.ensure_future(changed.wait())
                await asyncio.wait(
                    {task, waiter}, timeout=heartbeat, return_when=asyncio.FIRST_COMPLETED
                )
                waiter.cancel()
                changed.clear()
                if pending:
                    events, latest = list(pending.values()), list(pending.values())[-1]
                    pending.clear()
                    for event in events:
                        yield event
                elif latest is not None and not task.done():
                    elapsed = int((time.monotonic() - started) * 1000)
                    yield replace(latest, elapsed_ms=max(elapsed, latest.elapsed_ms))
            for event in pending.values():
                yield event
            yield IngestResult(await task)
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def _seal(self) -> None:
        """The rows are written (and durable in Milvus's log) by now; sealing only makes them
        fast to search, so a failure is logged and the request still succeeds."""
        try:
            await self._milvus.seal()
        except STORE_FAILURES:
            log.warning("could not flush the written rows into indexed segments")

    async def _write(self, p: _Prepared) -> IngestedDocument:
        version = new_version()
        rows: dict[int, list[dict[str, Any]]] = {lvl: [] for lvl in LEVELS}
        counts: dict[str, list[int]] = {}
        for c in p.chunks:
            rows[c.chunk_level].append(store_row(c, p.vectors[c.chunk_id], version))
            counts.setdefault(c.page_number, [0, 0, 0])[c.chunk_level - 1] += 1
        entry = DocumentEntry(p.filename, p.file_type, p.pages, counts, version, PENDING)
        previous = await self._registry.get(p.filename)
        await self._checkpoint("before_write")
        try:
            # The pending record comes first: it names every row about to be written, so
            # reconciliation can always find (and remove) the rows of a version that died.
            await self._registry.put(entry)
            await self._checkpoint("after_intent")
            for lvl in LEVELS:
                await self._chunks.write_chunks(lvl, rows[lvl])
                await self._checkpoint(f"after_level_{lvl}")
            entry.state = COMMITTED
            await self._registry.put(entry)  # the commit: from here on this version is current
        except STORE_FAILURES:
            log.error("writing %s failed; its previous version stays current", p.filename)
            await self._discard_quietly(entry)
            raise
        record_ingested(len(rows[1]), len(rows[2]), len(rows[3]))
        await self._checkpoint("after_commit")
        await self._settle(entry)
        await self._checkpoint("after_cleanup")
        return IngestedDocument(
            filename=p.filename,
            file_type=p.file_type,
            pages=p.pages,
            l1_chunks=len(rows[1]),
            l2_chunks=len(rows[2]),
            l3_chunks=len(rows[3]),
            replaced=previous is not None,
        )

    async def _discard(self, entry: DocumentEntry) -> int:
        """Removes one version: rows first, its record last (a record always names every row
        that may exist)."""
        deleted = 0
        for lvl in LEVELS:
            deleted += await self._chunks.delete_rows(lvl, entry.pks(lvl))
        await self._registry.remove([entry])
        return deleted

    async def _discard_quietly(self, entry: DocumentEntry) -> None:
        try:
            await self._discard(entry)
        except STORE_FAILURES:
            # The write's own error is what the caller hears; reconciliation removes the rest.
            log.error("removing the failed version of %s failed", entry.filename)

    async def _settle(self, entry: DocumentEntry) -> None:
        """After a commit: if a newer version was committed meanwhile (another replica won),
        this one is removed; otherwise the older committed versions are. Failures are logged:
        the commit stands and reconciliation finishes the job."""
        try:
            records = await self._registry.records(entry.filename)
            current = current_of(RecordKey(r.filename, r.version, r.state) for r in records)
            winner = current.get(entry.filename)
            if winner is not None and winner.version != entry.version:
                log.info("a newer version of %s was committed meanwhile", entry.filename)
                await self._discard(entry)
                return
            older = [r for r in records if r.state != PENDING and r.version < entry.version]
            await self._remove_versions(older, "during_cleanup")
        except STORE_FAILURES:
            log.error("removing older versions of %s failed", entry.filename)

    async def _remove_versions(self, entries: list[DocumentEntry], checkpoint: str) -> int:
        deleted = 0
        for lvl in LEVELS:
            for e in entries:
                deleted += await self._chunks.delete_rows(lvl, e.pks(lvl))
            if entries and lvl == 1:
                await self._checkpoint(checkpoint)
        await self._registry.remove(entries)
        return deleted

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
                deleted += await self._delete_one(name)
            await self._seal()
        return deleted

    async def _delete_one(self, name: str) -> int:
        if await self._registry.get(name) is None:
            return 0
        tombstone = DocumentEntry(name, "", 0, {}, new_version(), TOMBSTONE)
        await self._checkpoint("delete_before_commit")
        await self._registry.put(tombstone)  # the commit: from here on the document is gone
        await self._checkpoint("delete_after_commit")
        records = await self._registry.records(name)
        older = [r for r in records if r.state != PENDING and r.version < tombstone.version]
        deleted = await self._remove_versions(older, "delete_during_cleanup")
        # Rows of versions no committed record names (a crashed or superseded writer's):
        # older than the tombstone, so they can never become current.
        for lvl in LEVELS:
            deleted += await self._chunks.delete_older(lvl, name, tombstone.version)
        await self._checkpoint("delete_after_cleanup")
        return deleted

    async def list_documents(self) -> list[DocumentEntry]:
        return await self._registry.entries()

    async def list_page(self, page_size: int, page_token: str) -> DocumentPage:
        """One page of documents by filename (AIP-158): page_size 0 → 100, above 1000 → 1000,
        negative → INVALID_ARGUMENT; a token this service did not issue → INVALID_ARGUMENT."""
        if page_size < 0:
            raise InvalidArgument("page_size", f"must not be negative, got {page_size}")
        size = min(page_size or DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)
        return await self._registry.page(size, page_token)

    # ---- reconciliation -------------------------------------------------------------------

    async def reconcile(self, grace_seconds: float | None) -> int:
        """Removes what crashed or superseded writers left: records (and their rows) older
        than their document's current version, pending versions older than `grace_seconds`
        and tombstones older than it. `None` means this process is the store's only writer
        (embedded Milvus Lite at start-up): every pending version is dead. On a shared
        server the grace keeps another replica's in-flight ingest alive; it must exceed the
        longest ingest. Returns the number of records removed."""
        async with self._lock:
            keys = await self._registry.scan()
            current = current_of(keys)
            now = new_version()

            def expired(key: RecordKey) -> bool:
                if grace_seconds is None:
                    return True
                return version_age_seconds(key.version, int(now.split("-")[0])) > grace_seconds

            stale = []
            for key in keys:
                live = current.get(key.filename)
                superseded = live is not None and key.version < live.version
                if key.state == PENDING:
                    # One older than the current version can never become current; a newer
                    # one is dead only once older than the grace.
                    if superseded or expired(key):
                        stale.append(key)
                elif superseded or (key.state == TOMBSTONE and expired(key)):
                    stale.append(key)
            if not stale:
                return 0
            entries = await self._registry.full(stale)
            await self._remove_versions(entries, "reconcile")
            await self._seal()
            log.info("reconciliation removed %d stale document versions", len(entries))
            return len(entries)


def embedding_window(embedder: Embedder) -> int:
    """Texts per embedding window: one full round of the embedder's concurrent batches, and
    at least MIN_WINDOW."""
    batch = int(getattr(embedder, "batch_size", 1))
    concurrency = int(getattr(embedder, "concurrency", 1))
    return max(MIN_WINDOW, batch * concurrency)


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


def store_row(c: ChunkRecord, vector: np.ndarray, version: str) -> dict[str, Any]:
    """The Milvus row of one version of a chunk: its record fields plus the dense vector."""
    return {
        "pk": version_pk(c.chunk_id, version),
        "chunk_id": c.chunk_id,
        "version": version,
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
