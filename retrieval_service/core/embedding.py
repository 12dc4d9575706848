"""Embedding as the core drives it, whatever the model: unit vectors (`normalise`), a batch
splitter that runs an embedder's batches concurrently (`embed_in_batches`), and the window feed of
an ingest pipeline (`embed_windows`), so that writing one window overlaps with embedding the
next."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections import deque
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable, Sequence, Sized

import numpy as np

from retrieval_service.core.ports import Embedder, ProgressCallback


def normalise(vectors: np.ndarray) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=-1, keepdims=True)
    return vectors / np.where(norms == 0, 1.0, norms)


#: Windows embedding at once in `embed_windows`: the next one's batches queue behind the
#: current one's in the embedder (its own concurrency still bounds the requests in flight),
#: so a remote endpoint's slots never idle at a window's end. With one, every window waited
#: for its slowest batch: IngestDocuments reached 0.67–0.69 of the scripted endpoint's ideal
#: while the embedder alone reached 0.88–0.92 (bench.retrieval_ingest --only scripted).
WINDOWS_IN_FLIGHT = 2


async def embed_windows(
    embedder: Embedder,
    texts: Iterable[str],
    window: int,
    *,
    total: int | None = None,
    on_batch: ProgressCallback | None = None,
    deadline: float | None = None,
) -> AsyncGenerator[tuple[int, np.ndarray]]:
    """Yields `(offset, vectors)` for each window of `window` texts, in order. The next
    WINDOWS_IN_FLIGHT − 1 windows are already embedding while the consumer handles the current
    one, so a consumer that writes each window to the store overlaps writing with embedding
    while holding at most WINDOWS_IN_FLIGHT + 1 windows of vectors. `texts` is read a window
    at a time, in a worker thread (a generator may split documents as it is read: the first
    piece of a 20 MiB page took 1.5 s), and never more than WINDOWS_IN_FLIGHT windows ahead of
    what was yielded; `total` is its length when it has none. `on_batch(done, total)` counts
    the texts embedded so far over all `texts`; the counts only grow."""
    if window <= 0:
        raise ValueError("window must be positive")
    if total is None:
        total = len(texts) if isinstance(texts, Sized) else 0
    source = iter(texts)
    next_offset = 0
    embedded = 0

    def counter(report: ProgressCallback) -> ProgressCallback:
        seen = 0

        def count(done: int, _n: int) -> None:
            nonlocal seen, embedded
            embedded += done - seen
            seen = done
            report(embedded, total)

        return count

    async def launch() -> tuple[int, asyncio.Task[np.ndarray]] | None:
        nonlocal next_offset
        batch = await asyncio.to_thread(lambda: list(itertools.islice(source, window)))
        if not batch:
            return None
        offset, next_offset = next_offset, next_offset + len(batch)
        progress = None if on_batch is None else counter(on_batch)
        return offset, asyncio.ensure_future(
            embedder.embed_passages(batch, on_batch=progress, deadline=deadline)
        )

    pending: deque[tuple[int, asyncio.Task[np.ndarray]]] = deque()
    exhausted = False

    async def fill() -> None:
        nonlocal exhausted
        while not exhausted and len(pending) < WINDOWS_IN_FLIGHT:
            launched = await launch()
            if launched is None:
                exhausted = True
            else:
                pending.append(launched)

    try:
        await fill()
        while pending:
            offset, task = pending[0]
            vectors = await task
            pending.popleft()
            await fill()
            yield offset, vectors
    finally:
        for _, task in pending:
            task.cancel()
        for _, task in pending:
            with contextlib.suppress(BaseException):
                await task


async def embed_in_batches(
    texts: Sequence[str],
    batch_size: int,
    dim: int,
    embed_batch: Callable[[list[str]], Awaitable[np.ndarray]],
    on_batch: ProgressCallback | None = None,
) -> np.ndarray:
    """`texts` cut into batches of `batch_size`, one task each, results in input order;
    `embed_batch` bounds how many run at once. `on_batch(done, total)` as batches finish, in
    whatever order. The first failure cancels the rest, so a failed ingest stops spending the
    embedder (or a remote endpoint's quota)."""
    total = len(texts)
    out = np.zeros((total, dim), dtype=np.float32)
    done = 0

    async def one(start: int) -> None:
        nonlocal done
        batch = list(texts[start : start + batch_size])
        out[start : start + len(batch)] = await embed_batch(batch)
        done += len(batch)
        if on_batch is not None:
            on_batch(done, total)

    tasks = [asyncio.ensure_future(one(s)) for s in range(0, total, batch_size)]
    try:
        await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    return out
