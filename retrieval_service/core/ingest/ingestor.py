"""Ingestion (API.md IngestDocuments/StreamIngestDocuments/DeleteDocuments/ListDocuments):
validate → load → sanitise → three-level split for every document, then a pipeline: the
leaves of all documents embed window by window, and each embedded window is written at once
(its leaves, and every parent whose leaves are now all embedded: the normalised mean of
them), several documents' rows per write, through a bounded hand-over; plus start-up
reconciliation.

The write path is crash-safe (README "Crash safety"): every ingest writes a new *version* of
the document beside the current one — a PENDING registry record naming all its rows (chunk
ids are known once the document is parsed, before any vector is), the rows of the three
levels in pieces as they embed, then the COMMITTED record, which is the instant the new
version becomes current — and only then removes older versions. A delete commits a TOMBSTONE
version first. Readers see current versions only, so a crash at any instant leaves the
previous version intact or the new one complete; `reconcile` removes what a crash left
behind."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import unicodedata
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Generic, TypeVar

import numpy as np

from retrieval_service.core.chunking import ChunkingConfig, ChunkRecord, Page, iter_chunks
from retrieval_service.core.documents import (
    COMMITTED,
    LEVELS,
    PENDING,
    TOMBSTONE,
    DocumentEntry,
    DocumentPage,
    RecordKey,
    current_of,
    new_version,
    version_age_seconds,
)
from retrieval_service.core.embedding import embed_windows, normalise
from retrieval_service.core.errors import STORE_FAILURES, EmbedderUnavailable
from retrieval_service.core.file_types import (
    FILE_TYPES_BY_EXTENSION,
    extension_of,
    resolve_file_type,
)
from retrieval_service.core.ports import (
    ChunkRepository,
    DocumentRegistry,
    Embedder,
    PageLoader,
    StoredChunk,
)
from retrieval_service.metrics import record_ingested
from shared.errors import InvalidArgument

log = logging.getLogger(__name__)
T = TypeVar("T")

MAX_FILENAME_CHARS = 255
DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000

#: Called with the name of each step of a write as it is reached (`CRASH_POINTS`). The
#: service passes a no-op; the kill-anywhere test hook (`SUPERMEW_CRASH_AT`, read by
#: `__main__`) ends the process there, and in-process tests pause there.
Checkpoint = Callable[[str], Awaitable[None]]
#: Every named step of an ingest and a delete, in order of first arrival. `during_level_N` is
#: reached after each write of level-N rows while their document is not yet committed: for a
#: document spanning several embedding windows, the first one comes with rows of that level
#: still to write.
CRASH_POINTS = (
    "before_write",
    "after_intent",
    "during_level_3",
    "during_level_2",
    "during_level_1",
    "before_commit",
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
# Embedded windows waiting for the writer: enough that the embedder keeps going while a slow
# write runs, small next to a large document's own vectors (16 × 32 leaves).
PENDING_WINDOWS = 16
# The writer takes every window already waiting, up to this many leaves, into one write (one
# write per level, one commit record upsert for every document it completes): when writes
# lag, fewer and larger Milvus calls; the bound keeps the rows built at once small.
MAX_FLUSH_LEAVES = 256
# Milvus Lite buffers written rows in its memtable until a flush or 128 MB of Arrow buffers
# (plus its Python index over them): a long write seals every this many rows. It bounds Lite's
# memory, and it spreads the sealing over the ingest, where the store has spare time while the
# embedder works, instead of one long seal after the last window before the reply (0.59 s of
# a 4.6 s ingest of 1,086 leaves with 4,096; README "Ingestion").
SEAL_EVERY_ROWS = 512
# StreamIngestDocuments reports at least this often while a call runs.
HEARTBEAT_SECONDS = 1.0

#: A leaf with the parents it is the last leaf of (its L2 before the L1 around it).
Closing = tuple[ChunkRecord, tuple[ChunkRecord, ...]]
#: One embedding window as the writer receives it: each leaf with the parents it completes,
#: its vector and its version.
Window = list[tuple["_Version", ChunkRecord, tuple[ChunkRecord, ...], np.ndarray]]


def closing_leaves(records: Iterable[ChunkRecord]) -> Iterator[Closing]:
    """Each leaf of a depth-first chunk stream (`iter_chunks`) with the parents it is the last
    leaf of, known one record later: a new L2 closes the open L2, a new L1 both. A parent
    without leaves (which the splitter never makes) is a ValueError."""
    open_parents: dict[int, ChunkRecord] = {}
    last: ChunkRecord | None = None
    for c in records:
        if c.chunk_level == 3:
            if last is not None:
                yield last, ()
            last = c
            continue
        closing = [lvl for lvl in (2, 1) if lvl >= c.chunk_level and lvl in open_parents]
        if last is not None:
            yield last, tuple(open_parents.pop(lvl) for lvl in closing)
            last = None
        elif closing:
            raise ValueError(f"chunk {open_parents[closing[0]].chunk_id} has no leaves")
        open_parents[c.chunk_level] = c
    if last is not None:
        yield last, tuple(open_parents.pop(lvl) for lvl in (2, 1) if lvl in open_parents)
    elif open_parents:
        raise ValueError(f"chunk {next(iter(open_parents.values())).chunk_id} has no leaves")


@dataclass(slots=True)
class _Prepared:
    """One parsed document: its loaded pages and how many chunks each page has per level
    (which names every chunk id of the version). The chunks themselves are split again as
    the leaves embed (`leaves`), so a large document's three levels of chunks (≈ 3.5 × its
    text, plus an object per chunk) are never held at once: a second split costs less than
    a tenth of what embedding the leaves does."""

    filename: str
    file_type: str
    loaded: list[Page]
    chunking: ChunkingConfig
    counts: dict[str, list[int]] = field(default_factory=dict)
    leaf_count: int = 0

    @property
    def pages(self) -> int:
        return len(self.loaded)

    @classmethod
    def of(
        cls, filename: str, file_type: str, loaded: list[Page], chunking: ChunkingConfig
    ) -> _Prepared:
        """Splits once to count (and to check the tree), keeping no chunk."""
        doc = cls(filename, file_type, loaded, chunking)

        def counted(records: Iterable[ChunkRecord]) -> Iterator[ChunkRecord]:
            for c in records:
                doc.counts.setdefault(c.page_number, [0, 0, 0])[c.chunk_level - 1] += 1
                yield c

        doc.leaf_count = sum(1 for _ in closing_leaves(counted(doc._chunks())))
        return doc

    def _chunks(self) -> Iterator[ChunkRecord]:
        return iter_chunks(self.filename, self.file_type, self.loaded, self.chunking)

    def leaves(self) -> Iterator[Closing]:
        """The leaves in order, each with the parents it completes."""
        return closing_leaves(self._chunks())


class _Version:
    """The new version of one document while its rows are written piecewise: the vectors of
    the leaves of each parent not yet written (a parent's vector is the normalised mean of
    its leaves'), so at most one L1's leaf vectors are held per document."""

    def __init__(self, doc: _Prepared) -> None:
        self.doc = doc
        self.entry = DocumentEntry(
            doc.filename, doc.file_type, doc.pages, doc.counts, new_version(), PENDING
        )
        self.replaced = False
        self.committed = False
        self.leaves_left = doc.leaf_count
        self._held: dict[str, list[np.ndarray]] = {}

    def take(
        self, leaf: ChunkRecord, closes: Sequence[ChunkRecord], vector: np.ndarray
    ) -> list[tuple[ChunkRecord, np.ndarray]]:
        """Records one embedded leaf; returns the parents it completes (`closes`), with their
        vectors."""
        self._held.setdefault(leaf.parent_chunk_id, []).append(vector)
        self._held.setdefault(leaf.root_chunk_id, []).append(vector)
        self.leaves_left -= 1
        return [
            (parent, normalise(np.mean(np.stack(self._held.pop(parent.chunk_id)), axis=0)))
            for parent in closes
        ]

    def report(self) -> IngestedDocument:
        return IngestedDocument(
            filename=self.doc.filename,
            file_type=self.doc.file_type,
            pages=self.doc.pages,
            l1_chunks=self.entry.level_count(1),
            l2_chunks=self.entry.level_count(2),
            l3_chunks=self.entry.level_count(3),
            replaced=self.replaced,
        )


class _ProgressCounter:
    """Turns the embedder's running count over all leaves of a request into per-document
    progress, in request order: each document's events start at 0, follow its leaves as they
    embed and end at its total."""

    def __init__(self, prepared: Sequence[_Prepared], sink: ProgressSink, started: float) -> None:
        self._docs: list[tuple[str, int, int]] = []
        offset = 0
        for p in prepared:
            n = p.leaf_count
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


class _Handover(Generic[T]):
    """The bounded queue between the embedder and the writer, bounded in leaves (an item
    larger than the bound passes alone), so that embedding runs ahead of writing without
    holding every vector at once."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._held = 0
        self._queue: asyncio.Queue[tuple[T, int] | None] = asyncio.Queue()
        self._room = asyncio.Condition()

    async def put(self, item: T, size: int) -> None:
        async with self._room:
            await self._room.wait_for(lambda: self._held == 0 or self._held + size <= self._limit)
            self._held += size
        self._queue.put_nowait((item, size))

    def close(self) -> None:
        self._queue.put_nowait(None)

    async def get(self) -> tuple[T, int] | None:
        """The next item and its size; None once closed and drained."""
        return await self._queue.get()

    def ready(self) -> bool:
        """Whether `get` would return at once."""
        return not self._queue.empty()

    async def done(self, size: int) -> None:
        async with self._room:
            self._held -= size
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

    def _versions_of(self, documents: Sequence[SourceDocument]) -> list[_Version]:
        return [_Version(self._parse(i, d)) for i, d in enumerate(documents)]

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
        pages = self._load_pages(doc.content, file_type, f"{prefix}.content", doc.filename)
        prepared = _Prepared.of(doc.filename, file_type, pages, self._chunking)
        if not prepared.leaf_count:
            raise InvalidArgument(f"{prefix}.content", "no text could be extracted")
        return prepared

    async def _embed(
        self,
        versions: list[_Version],
        handover: _Handover[Window],
        deadline: float | None,
        progress: _ProgressCounter | None,
    ) -> None:
        """Embeds the leaves of all documents in windows that span documents (a request of many
        small documents still fills every window) and hands each window to the writer. Only
        leaves go through the model: embedding is the ingest bottleneck, and a parent's mean
        vector keeps level-2 recall sound (README "Ingestion")."""
        # The leaves are split from the documents' pages as the windows are read (at most two
        # windows ahead of the one handed over), and wait here for their vectors.
        owners: deque[tuple[_Version, ChunkRecord, tuple[ChunkRecord, ...]]] = deque()

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
        self, handover: _Handover[Window], reports: list[IngestedDocument]
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
            rows, completed = stage([w for w, _ in taken], self._bm25_levels)
            async with self._lock:
                await self._flush(rows, completed)
                unsealed += sum(map(len, rows.values()))
                if unsealed >= SEAL_EVERY_ROWS:
                    await self._seal()
                    unsealed = 0
            reports.extend(v.report() for v in completed)
            for _, size in taken:
                await handover.done(size)

    async def _flush(self, rows: dict[int, list[StoredChunk]], completed: list[_Version]) -> None:
        """One write: the staged rows (several documents', one write per level), then the
        commit records of the documents they complete, in one upsert (each record commits its
        own document: a crash between two leaves each document whole, old or new)."""
        try:
            for lvl in (3, 2, 1):  # leaves first: they are what the writer holds vectors for
                if rows[lvl]:
                    await self._chunks.write_chunks(lvl, rows[lvl])
                    await self._checkpoint(f"during_level_{lvl}")
            if not completed:
                return
            await self._checkpoint("before_commit")
            committed = [replace(v.entry, state=COMMITTED) for v in completed]
            await self._registry.put(*committed)  # the commit: these versions are current
        except STORE_FAILURES:
            log.error("writing %d rows failed; previous versions stay current", len(rows[3]))
            raise
        for v, entry in zip(completed, committed, strict=True):
            v.entry, v.committed = entry, True
            record_ingested(*(entry.level_count(lvl) for lvl in LEVELS))
        await self._checkpoint("after_commit")
        await self._settle([v.entry for v in completed])
        await self._checkpoint("after_cleanup")

    async def _begin(self, versions: list[_Version]) -> None:
        """The PENDING records of every document of the request, in one upsert, before any of
        their rows: each names all rows its version will have, so reconciliation can always
        find (and remove) the rows of a version that died."""
        records = await self._registry.records_of([v.doc.filename for v in versions])
        for v in versions:
            keys = (
                RecordKey(r.filename, r.version, r.state) for r in records.get(v.doc.filename, [])
            )
            current = current_of(keys).get(v.doc.filename)
            v.replaced = current is not None and current.state == COMMITTED
        await self._checkpoint("before_write")
        await self._registry.put(*(v.entry for v in versions))
        await self._checkpoint("after_intent")

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
        if not documents:
            raise InvalidArgument("documents", "must hold at least one document")
        seen: set[str] = set()
        for i, doc in enumerate(documents):
            if doc.filename in seen:
                raise InvalidArgument(f"documents[{i}].filename", "appears twice in the request")
            seen.add(doc.filename)
        versions = await asyncio.to_thread(self._versions_of, documents)
        # The pages hold the text now: the request's bytes need not live as long as the call
        # (a 20 MiB document's copy), unless the caller keeps them.
        del documents
        progress = (
            _ProgressCounter([v.doc for v in versions], on_progress, started)
            if on_progress
            else None
        )
        handover: _Handover[Window] = _Handover(PENDING_WINDOWS * self._window)
        reports: list[IngestedDocument] = []
        tasks: list[asyncio.Future[None]] = []
        try:
            # Embedding starts while the intent is recorded; nothing is written before it is.
            embedder = asyncio.ensure_future(self._embed(versions, handover, deadline, progress))
            tasks = [embedder]
            async with self._lock:
                await self._begin(versions)
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
                        await self._discard_quietly(unfinished)
                    # Before the reply, not after it: while Lite flushes, a search misses the
                    # rows being flushed (5 of 75 searches right after a reply did, when the
                    # seal ran after it), and a caller must find what it just ingested.
                    if reports:
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
        del documents  # `ingest` lets them go once parsed
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
            await self._chunks.seal()
        except STORE_FAILURES:
            log.warning("could not flush the written rows into indexed segments")

    async def _discard_quietly(self, entries: list[DocumentEntry]) -> None:
        """Removes versions that will never commit (rows first, records last)."""
        try:
            await self._remove_versions(entries, "discard")
        except STORE_FAILURES:
            # The write's own error is what the caller hears; reconciliation removes the rest.
            log.error("removing %d uncommitted versions failed", len(entries))

    async def _settle(self, entries: list[DocumentEntry]) -> None:
        """After a commit, per document: if a newer version was committed meanwhile (another
        replica won), this one is removed; otherwise the older committed versions are. One
        registry query and one delete per level for all of them. Failures are logged: the
        commits stand and reconciliation finishes the job."""
        try:
            records = await self._registry.records_of([e.filename for e in entries])
            doomed: list[DocumentEntry] = []
            for entry in entries:
                mine = records.get(entry.filename, [])
                current = current_of(RecordKey(r.filename, r.version, r.state) for r in mine)
                winner = current.get(entry.filename)
                if winner is not None and winner.version != entry.version:
                    log.info("a newer version of %s was committed meanwhile", entry.filename)
                    doomed.append(entry)
                    continue
                doomed += [r for r in mine if r.state != PENDING and r.version < entry.version]
            await self._remove_versions(doomed, "during_cleanup")
        except STORE_FAILURES:
            log.error("removing older versions of %d documents failed", len(entries))

    async def _remove_versions(self, entries: list[DocumentEntry], checkpoint: str) -> int:
        """Removes whole versions, rows first (one delete per level for all of them) and
        records last, so a record always names every row that may exist."""
        if not entries:
            return 0
        deleted = 0
        for lvl in LEVELS:
            pks = [pk for e in entries for pk in e.pks(lvl)]
            deleted += await self._chunks.delete_rows(lvl, pks)
            if lvl == 1:
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


def stage(
    windows: list[Window], bm25_levels: frozenset[int] = frozenset(LEVELS)
) -> tuple[dict[int, list[StoredChunk]], list[_Version]]:
    """The chunks of embedded windows to write (their leaves and every parent they complete)
    per level, and the versions they complete. Cheap: the store builds its rows (and their
    BM25 text) off the event loop."""
    staged: dict[int, list[StoredChunk]] = {lvl: [] for lvl in LEVELS}
    completed: list[_Version] = []
    for window in windows:
        for v, leaf, closes, vector in window:
            version = v.entry.version
            staged[3].append(StoredChunk(leaf, vector, version, 3 in bm25_levels))
            for parent, mean in v.take(leaf, closes, vector):
                level = parent.chunk_level
                staged[level].append(StoredChunk(parent, mean, version, level in bm25_levels))
            if v.leaves_left == 0:
                completed.append(v)
    return staged, completed
