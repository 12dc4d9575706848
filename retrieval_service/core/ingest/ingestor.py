"""The ingestor (IngestDocuments, StreamIngestDocuments, DeleteDocuments, ListDocuments:
docs/api.md#retrievalservice): validate → load → sanitise → three-level split for every
document, then a pipeline: the leaves of all documents embed window by window, and each
embedded window is written at once (its leaves, and every parent whose leaves are now all
embedded: the normalised mean of them), several documents' rows per write, through a bounded
hand-over. Every write follows the crash-safe version protocol (`versions.py`)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections import deque
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np

from retrieval_service.core.chunking import ChunkingConfig, ChunkRecord
from retrieval_service.core.documents import (
    COMMITTED,
    LEVELS,
    DocumentEntry,
    DocumentPage,
    IngestedDocument,
    current_of,
    record_key,
)
from retrieval_service.core.embedding import embed_windows
from retrieval_service.core.errors import EmbedderUnavailable
from retrieval_service.core.file_types import resolve_file_type
from retrieval_service.core.identity import Metadata, canonical_json, check_metadata, kb_name
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
from retrieval_service.core.ingest.leases import Clock, Lease, wall_clock_ms
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
    WriteTarget,
    no_checkpoint,
    stage,
)
from retrieval_service.core.ports import (
    NO_TELEMETRY,
    ChunkRepository,
    DocumentRegistry,
    Embedder,
    PageLoader,
    Telemetry,
    Written,
)
from shared.access import document_visible
from shared.draining import Draining
from shared.errors import InvalidArgument, PermissionDenied

log = logging.getLogger(__name__)

#: `require(text, field)`: the full name of the existing knowledge base a request names
#: (`KnowledgeBases.require`); NOT_FOUND or INVALID_ARGUMENT naming `field` otherwise.
Require = Callable[[str, str], Awaitable[str]]


async def any_well_formed(text: str, field: str) -> str:
    """A `Require` that checks the name's form only (cores built without knowledge bases)."""
    return kb_name(text, field)


class IngestTarget(WriteTarget, Protocol):
    """Where one ingest into a knowledge base writes (`WriteTarget`), with how its active
    index makes chunks: the chunking and embedder its rows are made with, the texts per
    embedding window, and the levels indexed for BM25."""

    @property
    def chunking(self) -> ChunkingConfig: ...

    @property
    def embedder(self) -> Embedder: ...

    @property
    def window(self) -> int: ...

    @property
    def bm25_levels(self) -> frozenset[int]: ...


#: The target of an ingest into a knowledge base (full name): its active index and the others.
Plans = Callable[[str], Awaitable[IngestTarget]]


@dataclass(frozen=True, slots=True)
class _OneIndex:
    """The target of an ingestor built without indexes: its own store, chunking and embedder."""

    chunks: ChunkRepository
    chunking: ChunkingConfig
    embedder: Embedder
    window: int
    bm25_levels: frozenset[int]

    async def mirror(self, versions: Sequence[Version]) -> Written | None:
        return None

    async def catch_up(
        self, versions: Sequence[Version], behind: frozenset[str], written: Written
    ) -> Written:
        return written

    async def mirror_copy(self, source: DocumentEntry, target: DocumentEntry) -> Written | None:
        return None


@dataclass(frozen=True, slots=True)
class Identified:
    """A validated document before it is parsed: its identity and fingerprint (what its
    version is built from: content, metadata, file name and type, chunking, embedder)."""

    index: int
    source: SourceDocument
    file_type: str
    document_id: str
    metadata: Metadata
    content_sha256: str
    fingerprint: str


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
        require: Require = any_well_formed,
        lease_seconds: float = 30.0,
        clock: Clock = wall_clock_ms,
        telemetry: Telemetry = NO_TELEMETRY,
        draining: Draining | None = None,
        plans: Plans | None = None,
        lock: asyncio.Lock | None = None,
    ) -> None:
        """`load_pages` turns a document's bytes into pages; `window`: texts per embedding
        window (default `embedding_window(embedder)`); `bm25_levels`: the levels whose chunks
        are indexed for BM25 (the recalled level, LEAF_RETRIEVE_LEVEL, or all with
        BM25_ALL_LEVELS; `StoredChunk.analysed`); `lease_seconds`: INGEST_LEASE_SECONDS, the
        lease a write holds on its unfinished records (`leases.py`); `clock`: epoch ms;
        `draining`: the server's shutdown (`shared.draining`), which waits for each ingest as
        a job and, once its grace is over, stops it between write batches (default: one that
        never begins); `plans`: where an ingest into a knowledge base writes, its active
        index first (`core/indexes`; default: `chunks`, `chunking` and `embedder`, for every
        knowledge base). With plans, `chunks` is every index's store, which deletes reach;
        `lock`: the write lock (shared with index builds, which write under it too)."""
        self._draining = draining or Draining()
        self._load_pages = load_pages
        self._bm25_levels = frozenset(bm25_levels)
        self._registry = registry
        self._max_bytes = max_document_bytes
        window = window or embedding_window(embedder)
        self._versions = VersionProtocol(
            chunks,
            registry,
            checkpoint,
            lease_seconds=lease_seconds,
            clock=clock,
            telemetry=telemetry,
        )
        self._require = require
        fixed = _OneIndex(chunks, chunking, embedder, window, self._bm25_levels)
        self._plans = plans

        async def one_index(_kb: str) -> IngestTarget:
            return fixed

        self._plan: Plans = plans or one_index
        # One writer per process at a time; across processes, versions order the writers.
        self._lock = lock or asyncio.Lock()
        self._in_flight = 0

    @property
    def busy(self) -> bool:
        """Whether an ingest runs in this process now (index builds give way to it)."""
        return self._in_flight > 0

    # ---- ingest ---------------------------------------------------------------------------

    def _identify(self, index: int, doc: SourceDocument, target: IngestTarget) -> Identified:
        prefix = f"documents[{index}]"
        validate_filename(doc.filename, f"{prefix}.filename")
        file_type = resolve_file_type(doc.filename, doc.file_type, f"{prefix}.file_type")
        check_content(doc, f"{prefix}.content", self._max_bytes)
        metadata = check_metadata(doc.metadata, f"{prefix}.metadata")
        sha = hashlib.sha256(doc.content).hexdigest()
        fingerprint = _fingerprint(target, sha, metadata, doc.filename, file_type)
        document_id = doc.document_id if doc.document_id is not None else doc.filename
        return Identified(index, doc, file_type, document_id, metadata, sha, fingerprint)

    def _metadata_only(self, doc: Identified, current: DocumentEntry, target: IngestTarget) -> bool:
        """Whether `doc` differs from its current version in its metadata alone: the current
        fingerprint is what `doc`'s would be with the current metadata (the same bytes, file
        name and type, chunking and embedder), so its chunks and vectors would be the same."""
        as_stored = _fingerprint(
            target, doc.content_sha256, current.metadata, doc.source.filename, doc.file_type
        )
        return bool(current.fingerprint) and as_stored == current.fingerprint

    def _identify_all(
        self, documents: Sequence[SourceDocument], target: IngestTarget
    ) -> list[Identified]:
        return [self._identify(i, d, target) for i, d in enumerate(documents)]

    def _parse_all(
        self,
        docs: list[Identified],
        knowledge_base: str,
        skipped: set[int],
        chunking: ChunkingConfig,
    ) -> list[Version]:
        return [self._parse(d, knowledge_base, chunking) for d in docs if d.index not in skipped]

    def _parse(self, doc: Identified, knowledge_base: str, chunking: ChunkingConfig) -> Version:
        source = doc.source
        field = f"documents[{doc.index}].content"
        pages = self._load_pages(source.content, doc.file_type, field, source.filename)
        prepared = Prepared.of(
            source.filename,
            doc.file_type,
            pages,
            chunking,
            knowledge_base=knowledge_base,
            document_id=doc.document_id,
            metadata=doc.metadata,
            content_sha256=doc.content_sha256,
            size_bytes=len(source.content),
            fingerprint=doc.fingerprint,
        )
        if not prepared.leaf_count:
            raise InvalidArgument(field, "no text could be extracted")
        return Version.of(prepared, doc.index)

    async def _current(
        self, docs: list[Identified], knowledge_base: str
    ) -> dict[int, DocumentEntry]:
        """The committed current record of each document that has one, by request index."""
        records = await self._registry.records_of([d.document_id for d in docs], knowledge_base)
        out: dict[int, DocumentEntry] = {}
        for d in docs:
            mine = records.get(d.document_id, [])
            key = current_of(record_key(r) for r in mine).get((knowledge_base, d.document_id))
            if key is not None and key.state == COMMITTED:
                out[d.index] = next(r for r in mine if r.version == key.version)
        return out

    async def _embed(
        self,
        versions: list[Version],
        handover: Handover[Window],
        deadline: float | None,
        progress: ProgressCounter | None,
        target: IngestTarget,
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
        embedder, size = target.embedder, target.window
        windows = embed_windows(
            embedder,
            texts(),
            size,
            total=total,
            on_batch=progress.advance if progress is not None else None,
            deadline=deadline,
        )
        # The embedder's failures arrive as EmbedderUnavailable or DeadlineExceeded.
        async with contextlib.aclosing(windows):
            async for offset, vectors in windows:
                expected = min(size, total - offset)
                vectors = np.asarray(vectors, dtype=np.float32)
                if vectors.shape != (expected, embedder.dim):
                    log.error("embedder returned shape %s for %d texts", vectors.shape, expected)
                    raise EmbedderUnavailable()
                window: Window = [(*owners.popleft(), vec) for vec in vectors]
                await handover.put(window, len(window))

    async def _write_windows(
        self,
        handover: Handover[Window],
        reports: list[tuple[int, IngestedDocument]],
        knowledge_base: str,
        lease: Lease,
        target: IngestTarget,
    ) -> None:
        """Writes each embedded window as it arrives, together with every window already
        waiting (up to MAX_FLUSH_LEAVES leaves), and commits the documents it completes;
        seals every SEAL_EVERY_ROWS rows. Each write first checks that the knowledge base
        still exists: one deleted meanwhile (its rows removed under this lock) ends the
        ingest NOT_FOUND rather than leaving rows behind it."""
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
            staged, completed = stage([w for w, _ in taken], target.bm25_levels)
            async with self._lock:
                self._draining.check()  # between writes: what is committed stays whole
                await self._require(knowledge_base, "knowledge_base")
                await self._versions.commit(staged, completed, lease, target)
                unsealed += sum(map(len, staged.values()))
                if unsealed >= SEAL_EVERY_ROWS:
                    await self._versions.seal()
                    unsealed = 0
            reports.extend((v.index, v.report()) for v in completed)
            for _, size in taken:
                await handover.done(size)

    async def ingest(
        self,
        documents: Sequence[SourceDocument],
        *,
        knowledge_base: str = "",
        deadline: float | None = None,
        on_progress: ProgressSink | None = None,
        groups: frozenset[str] | None = None,
        seal: bool = True,
    ) -> list[IngestedDocument]:
        """All documents are validated and parsed before anything is embedded or written, so
        bad input changes nothing. Then embedding and writing overlap: each embedded window's
        rows are written while the next windows embed, and a document is committed (all or
        nothing) once its last rows are. When embedding fails, the documents embedded before
        the failure are still committed, the uncommitted versions removed, then the error is
        raised; when a write fails, embedding stops. `deadline` is a `time.monotonic()`
        instant for the embedder; `on_progress` hears each document's embedding progress.
        A document whose current version has the same fingerprint is reported `unchanged`
        and neither embedded nor written; one that differs from it in its metadata alone is
        neither parsed nor embedded: its stored rows are copied into a new version with the
        new metadata (`metadata_only`, `VersionProtocol.copy`). Reports come in request
        order. A caller restricted to `groups` may not replace a document it cannot see
        (PERMISSION_DENIED naming `documents[i]`). The ingest is a job of the server's drain:
        once the shutdown's grace is over it stops between write batches, leaving every
        document not yet committed as it was, and raises ShuttingDown."""
        async with self._draining.job("ingest"):
            self._draining.check()
            self._in_flight += 1
            try:
                return await self._ingest(
                    documents, knowledge_base, deadline, on_progress, groups, seal
                )
            finally:
                self._in_flight -= 1

    async def _ingest(
        self,
        documents: Sequence[SourceDocument],
        knowledge_base: str,
        deadline: float | None,
        on_progress: ProgressSink | None,
        groups: frozenset[str] | None,
        seal: bool,
    ) -> list[IngestedDocument]:
        started = time.monotonic()
        kb = await self._require(knowledge_base, "knowledge_base")
        check_ingest_request(documents)
        target = await self._plan(kb)
        identified = await asyncio.to_thread(self._identify_all, documents, target)
        del documents
        current = await self._current(identified, kb)
        refuse_hidden(current, groups)
        unchanged = {
            d.index: _unchanged_report(current[d.index])
            for d in identified
            if d.index in current and current[d.index].fingerprint == d.fingerprint
        }
        copies = [
            Version.copying(current[d.index], d.metadata, d.fingerprint, d.index)
            for d in identified
            if d.index in current
            and d.index not in unchanged
            and self._metadata_only(d, current[d.index], target)
        ]
        skipped = set(unchanged) | {v.index for v in copies}
        versions = await asyncio.to_thread(
            self._parse_all, identified, kb, skipped, target.chunking
        )
        # The pages hold the text now: the request's bytes need not live as long as the call
        # (a 20 MiB document's copy), unless the caller keeps them.
        del identified
        if not versions and not copies:
            return [unchanged[i] for i in sorted(unchanged)]
        progress = (
            ProgressCounter([v.doc for v in versions], on_progress, started)
            if on_progress and versions
            else None
        )
        handover: Handover[Window] = Handover(PENDING_WINDOWS * target.window)
        reports: list[tuple[int, IngestedDocument]] = []
        tasks: list[asyncio.Future[None]] = []
        lease = self._versions.lease()
        try:
            # Embedding starts while the intent is recorded; nothing is written before it is.
            if versions:
                embedder = asyncio.ensure_future(
                    self._embed(versions, handover, deadline, progress, target)
                )
                tasks.append(embedder)
            async with self._lock:
                self._draining.check()
                await self._require(kb, "knowledge_base")
                await self._versions.begin([*versions, *copies], lease)
            if versions:
                writer = asyncio.ensure_future(
                    self._write_windows(handover, reports, kb, lease, target)
                )
                tasks.append(writer)
            await self._copy(copies, reports, kb, lease, target)
            if versions:
                await self._finish(embedder, writer, handover)
            done = dict(reports) | unchanged
            return [done[i] for i in sorted(done)]
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await lease.stop()  # before a discard, which no renewal may undo
            unfinished = [v.entry for v in [*versions, *copies] if not v.committed]
            if unfinished or reports:
                async with self._lock:
                    if unfinished:
                        await self._versions.discard_quietly(unfinished)
                    # Before the reply, not after it: while Lite flushes, a search misses the
                    # rows being flushed (5 of 75 searches right after a reply did, when the
                    # seal ran after it), and a caller must find what it just ingested. An
                    # import (`seal=False`) seals once, when its last batch is in.
                    if reports and seal:
                        await self._versions.seal()

    async def _copy(
        self,
        copies: list[Version],
        reports: list[tuple[int, IngestedDocument]],
        knowledge_base: str,
        lease: Lease,
        target: IngestTarget,
    ) -> None:
        """Commits each metadata-only version, one document at a time, while the embedder
        and the writer run for the others (the write lock is taken per document)."""
        for v in copies:
            async with self._lock:
                self._draining.check()
                await self._require(knowledge_base, "knowledge_base")
                await self._versions.copy(v, lease, target)
            reports.append((v.index, v.report()))

    async def _finish(
        self,
        embedder: asyncio.Future[None],
        writer: asyncio.Future[None],
        handover: Handover[Window],
    ) -> None:
        """Waits for the embedder and the writer. Documents embedded before an embedding
        failure are still committed, then the failure is raised; a failed write stops
        embedding. Once the drain asks the ingest to stop, nothing more is embedded and the
        writer stops before its next write (ShuttingDown)."""
        stop = asyncio.ensure_future(self._draining.stopped())
        try:
            await asyncio.wait({writer, embedder, stop}, return_when=asyncio.FIRST_COMPLETED)
            if writer.done():  # before the embedder: only by a failed write
                await writer
            stopped = stop.done() and not embedder.done()
            if stopped:  # the embedder writes nothing: the windows not yet embedded are dropped
                embedder.cancel()
                await asyncio.gather(embedder, return_exceptions=True)
            handover.close()
            await writer
            if stopped:
                self._draining.check()
            await embedder
        finally:
            stop.cancel()

    async def ingest_events(
        self,
        documents: Sequence[SourceDocument],
        *,
        knowledge_base: str = "",
        deadline: float | None = None,
        heartbeat: float = HEARTBEAT_SECONDS,
        groups: frozenset[str] | None = None,
    ) -> AsyncIterator[IngestEvent]:
        """`ingest` as events (`flow.ProgressEvents`): its progress, a heartbeat while none
        comes, then one IngestResult; an error of the ingest is raised after the events before
        it."""
        events = ProgressEvents(heartbeat)
        task = asyncio.ensure_future(
            self.ingest(
                documents,
                knowledge_base=knowledge_base,
                deadline=deadline,
                on_progress=events.hear,
                groups=groups,
            )
        )
        del documents  # `ingest` lets them go once parsed
        async with contextlib.aclosing(events.follow(task)) as stream:
            async for event in stream:
                yield event

    # ---- delete / list --------------------------------------------------------------------

    async def delete(
        self,
        filenames: Sequence[str],
        document_ids: Sequence[str] = (),
        *,
        knowledge_base: str = "",
        groups: frozenset[str] | None = None,
    ) -> int:
        """Removes every level of each named document of one knowledge base (a filename names
        the document whose document_id is that filename); unknown ones, and those `groups`
        may not see, are ignored."""
        kb = await self._require(knowledge_base, "knowledge_base")
        check_delete_request(filenames, document_ids)
        deleted = 0
        async with self._lock:
            for document_id in dict.fromkeys([*document_ids, *filenames]):
                if groups is not None and not await self._visible(document_id, kb, groups):
                    continue
                deleted += await self._versions.delete(document_id, kb)
            await self._versions.seal()
        return deleted

    async def _visible(self, document_id: str, knowledge_base: str, groups: frozenset[str]) -> bool:
        entry = await self._registry.get(document_id, knowledge_base)
        return entry is None or document_visible(entry.metadata, groups)

    async def list_page(
        self,
        page_size: int,
        page_token: str,
        *,
        knowledge_base: str = "",
        groups: frozenset[str] | None = None,
    ) -> DocumentPage:
        """One page of a knowledge base's documents by document_id (AIP-158): page_size 0 →
        100, above 1000 → 1000, negative → INVALID_ARGUMENT; a token this service did not
        issue → INVALID_ARGUMENT. Documents `groups` may not see are left out (a page may
        then hold fewer than page_size, as AIP-158 allows)."""
        kb = await self._require(knowledge_base, "knowledge_base")
        page = await self._registry.page(list_page_size(page_size), page_token, kb)
        if groups is None:
            return page
        return replace(
            page, entries=[e for e in page.entries if document_visible(e.metadata, groups)]
        )

    async def seal(self) -> None:
        """Makes what was written fast to search (`VersionProtocol.seal`), for callers that
        ingested with `seal=False`."""
        async with self._lock:
            await self._versions.seal()

    async def purge(self, knowledge_base: str) -> int:
        """Removes every row and record of a knowledge base being deleted, while no write
        of this process runs (`VersionProtocol.purge`)."""
        async with self._lock:
            return await self._versions.purge(knowledge_base)

    # ---- reconciliation -------------------------------------------------------------------

    async def reconcile(self, *, sole_writer: bool = False) -> int:
        """`VersionProtocol.reconcile` while no write of this process runs: removes what
        crashed or superseded writers left, uncommitted versions once their lease expired
        (`sole_writer`: this process is the store's only writer, so every lease is a dead
        process's). Returns the number of records removed."""
        async with self._lock:
            return await self._versions.reconcile(sole_writer=sole_writer)


def _fingerprint(
    target: IngestTarget, sha: str, metadata: Metadata, filename: str, file_type: str
) -> str:
    """What a version is built from: the document, and the chunking and embedder of the index
    that writes it (so a switch of index re-embeds a document at its next ingest)."""
    embedder = target.embedder
    made_of = [
        sha,
        metadata,
        filename,
        file_type,
        repr(target.chunking),
        embedder.name,
        embedder.dim,
    ]
    return hashlib.sha256(canonical_json(made_of).encode()).hexdigest()


def refuse_hidden(current: Mapping[int, DocumentEntry], groups: frozenset[str] | None) -> None:
    """A caller restricted to `groups` may not replace a document it cannot see."""
    for index, entry in current.items():
        if not document_visible(entry.metadata, groups):
            raise PermissionDenied(
                f'documents[{index}]: permission "write" on this document is not granted to '
                "this key"
            )


def _unchanged_report(entry: DocumentEntry) -> IngestedDocument:
    return IngestedDocument(
        filename=entry.filename,
        file_type=entry.file_type,
        pages=entry.pages,
        l1_chunks=entry.level_count(1),
        l2_chunks=entry.level_count(2),
        l3_chunks=entry.level_count(3),
        replaced=False,
        document_id=entry.document_id,
        content_sha256=entry.content_sha256,
        unchanged=True,
        knowledge_base=entry.knowledge_base,
    )
