"""Flow control of the ingest pipeline: how many leaves embed per window and how many windows
wait for the writer (the bounded `Handover` between them), per-document progress from the
embedder's running count (`ProgressCounter`), and the progress events of a streamed ingest with
their heartbeat (`ProgressEvents`)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar

from retrieval_service.core.documents import IngestedDocument
from retrieval_service.core.ingest.preparation import Prepared
from retrieval_service.core.ports import Embedder

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class IngestProgress:
    """How far one document's leaves have embedded (StreamIngestDocuments,
    docs/api.md#retrievalservice)."""

    filename: str
    leaves_done: int
    leaves_total: int
    elapsed_ms: int
    document_id: str = ""


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


def embedding_window(embedder: Embedder) -> int:
    """Texts per embedding window: one full round of the embedder's concurrent batches, and
    at least MIN_WINDOW."""
    batch = int(getattr(embedder, "batch_size", 1))
    concurrency = int(getattr(embedder, "concurrency", 1))
    return max(MIN_WINDOW, batch * concurrency)


class ProgressCounter:
    """Turns the embedder's running count over all leaves of a request into per-document
    progress, in request order: each document's events start at 0, follow its leaves as they
    embed and end at its total."""

    def __init__(self, prepared: Sequence[Prepared], sink: ProgressSink, started: float) -> None:
        self._docs: list[tuple[str, str, int, int]] = []
        offset = 0
        for p in prepared:
            n = p.leaf_count
            self._docs.append((p.filename, p.document_id or p.filename, offset, n))
            offset += n
        self._sink = sink
        self._started = started
        self._reported = [-1] * len(self._docs)
        self._first = 0  # the first document not yet reported complete

    def advance(self, done: int, _total: int = 0) -> None:
        for i in range(self._first, len(self._docs)):
            name, document_id, start, n = self._docs[i]
            if start > done:
                break
            value = min(done - start, n)
            # Every document's events start at 0, also when one batch ends the previous
            # document and goes on into this one.
            for report in (0, value) if self._reported[i] < 0 < value else (value,):
                if report != self._reported[i]:
                    self._reported[i] = report
                    elapsed = int((time.monotonic() - self._started) * 1000)
                    self._sink(IngestProgress(name, report, n, elapsed, document_id))
            if value == n:
                self._first = i + 1


class Handover(Generic[T]):
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


class ProgressEvents:
    """The events of a streamed ingest: the ingest reports to `hear`, and `follow(task)` yields
    every progress change (only the latest per document when they come faster than they are
    consumed), the latest progress again with a fresh `elapsed_ms` whenever `heartbeat` seconds
    pass without one, then one IngestResult. An error of the ingest is raised after the events
    before it; closing `follow` early cancels the ingest."""

    def __init__(self, heartbeat: float = HEARTBEAT_SECONDS) -> None:
        self._heartbeat = heartbeat
        self._started = time.monotonic()
        self._pending: dict[str, IngestProgress] = {}
        self._changed = asyncio.Event()

    def hear(self, event: IngestProgress) -> None:
        self._pending[event.document_id or event.filename] = event
        self._changed.set()

    async def follow(
        self, task: asyncio.Future[list[IngestedDocument]]
    ) -> AsyncGenerator[IngestEvent]:
        pending = self._pending
        latest: IngestProgress | None = None
        try:
            while not task.done():
                waiter = asyncio.ensure_future(self._changed.wait())
                watched: set[asyncio.Future[Any]] = {task, waiter}
                await asyncio.wait(
                    watched, timeout=self._heartbeat, return_when=asyncio.FIRST_COMPLETED
                )
                waiter.cancel()
                self._changed.clear()
                if pending:
                    events, latest = list(pending.values()), list(pending.values())[-1]
                    pending.clear()
                    for event in events:
                        yield event
                elif latest is not None and not task.done():
                    elapsed = int((time.monotonic() - self._started) * 1000)
                    yield replace(latest, elapsed_ms=max(elapsed, latest.elapsed_ms))
            for event in pending.values():
                yield event
            yield IngestResult(await task)
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
