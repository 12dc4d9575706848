"""Shared rig of the retrieval benchmarks: SciFact loading, subsets and document-level metrics;
the real service (store + embedder + pipeline) on a throwaway Milvus Lite file, served by one
in-process gRPC server per recall mode on 127.0.0.1; timing and table helpers."""

from __future__ import annotations

import json
import logging
import math
import os
import random
import shutil
import statistics
import tempfile
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import grpc
import numpy as np
from supermew.v1 import retrieval_pb2, retrieval_pb2_grpc

from retrieval_service.adapters.milvus.chunk_store import ChunkStore
from retrieval_service.adapters.milvus.connection import StoreConfig
from retrieval_service.adapters.milvus.schema import OUTPUT_FIELDS, bm25_spec, dense_spec
from retrieval_service.adapters.rerank import Reranker
from retrieval_service.bootstrap import RetrievalApp, clear_milvus_env, retrieval_config
from retrieval_service.core.documents import DocumentEntry
from retrieval_service.core.errors import StoreUnavailable
from retrieval_service.core.identity import DEFAULT_KB
from retrieval_service.core.ports import DEFAULT_SCOPE, Doc, SearchScope, StoredChunk
from retrieval_service.core.recall import RetrievalConfig, RetrievalPipeline
from retrieval_service.policy import RETRIEVAL_POLICIES
from retrieval_service.server import RetrievalServicer
from retrieval_service.settings import SERVICE_NAME, RetrievalSettings
from shared.serve import GrpcServer

ROOT = Path(__file__).resolve().parents[1]
SCIFACT_DIR = Path(os.environ.get("SCIFACT_DIR", ROOT.parent / "shared" / "data" / "scifact"))

# name → (recall side, auto-merge on?). "dense" recalls like the service's dense fallback,
# "bm25" with BM25 alone (OneSidedRecall); "hybrid" is the service's own pipeline.
MODES: dict[str, tuple[str, bool]] = {
    "dense": ("dense", False),
    "bm25": ("bm25", False),
    "hybrid": ("hybrid", False),
    "hybrid+merge": ("hybrid", True),
}


def quiet() -> None:
    """Benchmarks print tables; the service's INFO logs would drown them."""
    logging.basicConfig(level=logging.WARNING)
    for name in ("retrieval_service", "shared", "pymilvus", "milvus_lite"):
        logging.getLogger(name).setLevel(logging.WARNING)
    # Milvus Lite's in-process (sync) gRPC server logs a traceback for each AllocTimestamp call
    # pymilvus makes, which Lite does not implement; the services here run on grpc.aio.
    logging.getLogger("grpc._server").setLevel(logging.CRITICAL)
    import jieba  # Milvus Lite's analyser; it sets its own logger to DEBUG on import

    jieba.setLogLevel(logging.WARNING)


# ---- SciFact -------------------------------------------------------------------------------


@dataclass(frozen=True)
class SciFact:
    corpus: dict[str, str]  # doc id → "title\n\nabstract"
    claims: dict[str, str]  # claim id → text
    qrels: dict[str, set[str]]  # claim id → relevant doc ids (train split)

    @property
    def judged_share(self) -> float:
        judged = set().union(*self.qrels.values())
        return len(judged) / len(self.corpus)


def load_scifact(data: Path = SCIFACT_DIR) -> SciFact:
    corpus = {}
    with (data / "corpus.jsonl").open(encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            corpus[row["_id"]] = f"{row['title']}\n\n{row['text']}".strip()
    claims = {}
    with (data / "queries.jsonl").open(encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            claims[row["_id"]] = row["text"]
    qrels: dict[str, set[str]] = defaultdict(set)
    with (data / "qrels" / "train.tsv").open(encoding="utf-8") as f:
        next(f)
        for line in f:
            qid, did, score = line.rstrip("\n").split("\t")
            if int(score) > 0:
                qrels[qid].add(did)
    return SciFact(corpus, claims, dict(qrels))


def subset(data: SciFact, limit: int, judged_share: float) -> tuple[list[str], list[str]]:
    """(doc ids, claim ids). `limit` 0 = the whole corpus and every judged claim. Otherwise
    `limit` abstracts: the judged abstracts of the first claims (file order) up to
    `judged_share` of the subset, the rest seeded random unjudged distractors; only claims
    whose judged abstracts are all inside are evaluated."""
    judged = [q for q in data.claims if q in data.qrels and data.qrels[q] <= data.corpus.keys()]
    if not limit or limit >= len(data.corpus):
        return list(data.corpus), judged
    chosen: dict[str, None] = {}
    picked: list[str] = []
    budget = int(limit * judged_share)
    for q in judged:
        if len(chosen) + len(data.qrels[q] - chosen.keys()) > budget:
            break
        chosen.update(dict.fromkeys(sorted(data.qrels[q])))
        picked.append(q)
    every_judged = set().union(*data.qrels.values())
    rest = [d for d in data.corpus if d not in every_judged]
    random.Random(13).shuffle(rest)
    chosen.update(dict.fromkeys(rest[: limit - len(chosen)]))
    return list(chosen), picked


def selection(
    data_dir: Path, limit: int, judged_share: float, claims: int
) -> tuple[SciFact, list[str], list[str]]:
    """The benchmark's SciFact, its doc ids and its claim ids (the first `claims` when > 0)."""
    data = load_scifact(data_dir)
    doc_ids, claim_ids = subset(data, limit, judged_share)
    return data, doc_ids, claim_ids[:claims] if claims else claim_ids


def doc_filename(doc_id: str) -> str:
    return f"{doc_id}.txt"


async def all_documents(app: RetrievalApp) -> list[DocumentEntry]:
    """Every current document of the store, page by page (the registry's ListDocuments)."""
    out: list[DocumentEntry] = []
    token = ""
    while True:
        page = await app.registry.page(1000, token)
        out += page.entries
        if not (token := page.next_page_token):
            return out


async def missing_abstracts(app: Any, doc_ids: list[str]) -> list[str]:
    """The abstracts a reused store (`--db`) does not hold yet, so a re-run ingests only those."""
    have = {entry.filename for entry in await all_documents(app)}
    return [d for d in doc_ids if doc_filename(d) not in have]


def doc_ranking(filenames: list[str]) -> list[str]:
    """Chunk filenames in rank order → doc ids ranked by their best chunk."""
    return list(dict.fromkeys(name.removesuffix(".txt") for name in filenames))


def doc_metrics(ranked: list[str], relevant: set[str]) -> tuple[float, float, float]:
    """(nDCG@10, recall@100, MRR@10) with binary relevance."""
    dcg = sum(1 / math.log2(i + 2) for i, d in enumerate(ranked[:10]) if d in relevant)
    idcg = sum(1 / math.log2(i + 2) for i in range(min(len(relevant), 10)))
    recall = len(relevant & set(ranked[:100])) / len(relevant)
    mrr = next((1 / (i + 1) for i, d in enumerate(ranked[:10]) if d in relevant), 0.0)
    return dcg / idcg, recall, mrr


# ---- the service on a scratch store --------------------------------------------------------


def store_uri(app: Any) -> str:
    """Where a second, raw pymilvus client reaches a running app's store: its Milvus Lite child
    (which holds the data directory's lock) or the Milvus server URI."""
    lite = app.store.lite
    return str(lite.uri if lite is not None else app.store.config.uri)


@contextmanager
def scratch_db(prefix: str, keep: str | None = None) -> Iterator[str]:
    """A Milvus Lite path in a fresh temp dir, removed afterwards; `keep` = a path to reuse
    (not removed). Milvus Lite holds one lock per .db, so a bench never shares the service's."""
    if keep:
        yield keep
        return
    folder = tempfile.mkdtemp(prefix=prefix)
    try:
        yield str(Path(folder) / "bench.db")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def bench_settings(db: str, **overrides: Any) -> RetrievalSettings:
    clear_milvus_env()
    return RetrievalSettings(
        milvus_uri=db,
        bind_host="127.0.0.1",
        auth_token=None,
        rerank_host=None,
        log_level="WARNING",
        **overrides,
    )


@dataclass
class Endpoint:
    name: str
    stub: retrieval_pb2_grpc.RetrievalServiceStub
    config: RetrievalConfig
    address: str

    async def retrieve(
        self, query: str, top_k: int | None = None
    ) -> retrieval_pb2.RetrieveResponse:
        request = retrieval_pb2.RetrieveRequest(query=query)
        if top_k is not None:
            request.top_k = top_k
        return await self.stub.Retrieve(request)


class OneSidedRecall:
    """The chunk store with one recall side only, given to the service's own pipeline as its
    store, for measuring each side's quality: "bm25" answers hybrid recall with BM25 alone
    (retrieval_mode hybrid); "dense" turns hybrid recall down, so the pipeline takes its dense
    fallback (retrieval_mode dense_fallback, the path it is). An evaluation option, so it lives
    here rather than in the service's settings."""

    def __init__(self, chunks: ChunkStore, side: str) -> None:
        self._chunks = chunks
        self._side = side

    async def hybrid_search(
        self,
        level: int,
        text: str,
        vector: Sequence[float],
        candidate_k: int,
        scope: SearchScope = DEFAULT_SCOPE,
    ) -> list[Doc]:
        if self._side == "dense":
            raise StoreUnavailable(DENSE_ONLY)
        return await self._chunks.bm25_search(level, text, candidate_k, scope)

    async def dense_search(
        self, level: int, vector: Sequence[float], limit: int, scope: SearchScope = DEFAULT_SCOPE
    ) -> list[Doc]:
        return await self._chunks.dense_search(level, vector, limit, scope)

    async def get_versioned(self, level: int, keys: Sequence[tuple[str, str]]) -> dict[str, Doc]:
        return await self._chunks.get_versioned(level, keys)

    async def write_chunks(self, level: int, chunks: Sequence[StoredChunk]) -> None:
        await self._chunks.write_chunks(level, chunks)

    async def copy_rows(self, level: int, source: DocumentEntry, target: DocumentEntry) -> int:
        return await self._chunks.copy_rows(level, source, target)

    async def delete_rows(self, level: int, pks: Sequence[str]) -> int:
        return await self._chunks.delete_rows(level, pks)

    async def delete_versions(self, level: int, entries: Sequence[DocumentEntry]) -> int:
        return await self._chunks.delete_versions(level, entries)

    async def delete_older(
        self, level: int, document_id: str, version: str, knowledge_base: str = DEFAULT_KB
    ) -> int:
        return await self._chunks.delete_older(level, document_id, version, knowledge_base)

    async def delete_knowledge_base(self, level: int, knowledge_base: str) -> int:
        return await self._chunks.delete_knowledge_base(level, knowledge_base)

    async def seal(self) -> None:
        await self._chunks.seal()


DENSE_ONLY = "one-sided recall: dense only"


class _QuietDenseOnly(logging.Filter):
    """Drops the pipeline's "hybrid recall failed" warning that every "dense" query raises on
    purpose (the modes' table reports each mode's retrieval_mode anyway)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("hybrid recall failed")


def mode_pipeline(app: RetrievalApp, side: str, config: RetrievalConfig) -> RetrievalPipeline:
    reranker = Reranker(None, None, None)
    if side == "hybrid":
        return RetrievalPipeline(app.chunks, app.embedder, reranker, config, app.registry)
    if side == "dense":
        logging.getLogger("retrieval_service.core.recall").addFilter(_QuietDenseOnly())
    store = OneSidedRecall(app.chunks, side)
    return RetrievalPipeline(store, app.embedder, reranker, config, app.registry)


def _add_servicer(servicer: RetrievalServicer, server: grpc.aio.Server) -> None:
    retrieval_pb2_grpc.add_RetrievalServiceServicer_to_server(servicer, server)


@asynccontextmanager
async def serve_modes(
    app: RetrievalApp, modes: dict[str, tuple[str, bool]], **overrides: Any
) -> AsyncIterator[dict[str, Endpoint]]:
    """One real gRPC server per mode over the same store and embedder; rerank off."""
    servers: list[GrpcServer] = []
    channels: list[grpc.aio.Channel] = []
    endpoints: dict[str, Endpoint] = {}
    base = retrieval_config(app.settings)
    try:
        for name, (recall, merge) in modes.items():
            config = replace(base, auto_merge_enabled=merge, **overrides)
            pipeline = mode_pipeline(app, recall, config)
            servicer = RetrievalServicer(pipeline, app.ingestor)
            server = GrpcServer(
                app.settings,
                port=0,
                service_names=[SERVICE_NAME],
                add_servicers=partial(_add_servicer, servicer),
                policies=RETRIEVAL_POLICIES,
            )
            port = await server.start()
            servers.append(server)
            size = app.settings.grpc_max_message_bytes
            channel = grpc.aio.insecure_channel(
                f"127.0.0.1:{port}",
                options=[
                    ("grpc.max_receive_message_length", size),
                    ("grpc.max_send_message_length", size),
                ],
            )
            channels.append(channel)
            stub = retrieval_pb2_grpc.RetrievalServiceStub(channel)
            endpoints[name] = Endpoint(name, stub, config, f"127.0.0.1:{port}")
        yield endpoints
    finally:
        for channel in channels:
            await channel.close()
        for server in servers:
            await server.stop(0)


# ---- timing and tables ---------------------------------------------------------------------


def elapsed_ms(started: float) -> float:
    return (time.perf_counter() - started) * 1000


async def time_async(fn: Callable[[], Awaitable[Any]]) -> tuple[float, Any]:
    started = time.perf_counter()
    result = await fn()
    return elapsed_ms(started), result


def time_sync(fn: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    result = fn()
    return elapsed_ms(started), result


def p50_p95(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]


def table(rows: list[list[Any]], header: list[str]) -> str:
    def cell(value: Any) -> str:
        if isinstance(value, float):
            return f"{value:.3f}" if abs(value) < 10 else f"{value:.1f}"
        return str(value)

    cells = [header, *[[cell(c) for c in row] for row in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def latency_rows(
    paths: dict[str, list[float]], reference: str
) -> tuple[list[list[Any]], list[str]]:
    """p50/p95 per path and `reference`'s p50 ÷ each path's p50."""
    ref50 = p50_p95(paths[reference])[0]
    rows = []
    for name, values in paths.items():
        p50, p95 = p50_p95(values)
        rows.append([name, round(p50, 2), round(p95, 2), round(ref50 / p50, 2)])
    return rows, ["path", "p50 ms", "p95 ms", f"{reference} p50 ÷ this p50"]


# ---- latency: the service against raw pymilvus and numpy ----------------------------------


def raw_hybrid(raw: Any, collection: str, text: str, vector: np.ndarray, k: int) -> Any:
    """What the service's hybrid recall asks Milvus (dense + BM25 at the default recall depth
    each, the default RRF k, the level filter, named output fields), directly in pymilvus."""
    from pymilvus import RRFRanker

    cfg = StoreConfig(uri="", token=None, collection="", dim=0)
    depth = cfg.recall_depth * k
    dense = dense_spec(vector.tolist(), depth, 3, hnsw_ef=cfg.hnsw_ef).request()
    sparse = bm25_spec(text, depth, 3, drop_ratio=cfg.bm25_drop_ratio_search).request()
    return raw.hybrid_search(
        collection,
        reqs=[dense, sparse],
        ranker=RRFRanker(cfg.rrf_k),
        limit=k,
        output_fields=OUTPUT_FIELDS,
    )


def numpy_top(matrix: np.ndarray, vector: np.ndarray, k: int) -> np.ndarray:
    """Exact dense top-k by inner product: the physical floor of one dense search."""
    scores = matrix @ vector
    top = np.argpartition(-scores, min(k, len(scores) - 1))[:k]
    return top[np.argsort(-scores[top])]


async def measure_latency(
    app: RetrievalApp,
    endpoint: Endpoint,
    raw: Any,
    texts: list[str],
    matrix: np.ndarray,
    label: str,
) -> dict[str, tuple[float, float]]:
    """Per query, in turn (so drift hits every path alike): the Retrieve RPC with the
    endpoint's config, embed + raw hybrid_search, raw hybrid_search with the vector given, and
    numpy brute force over `matrix` (the same leaf vectors). Prints the table; returns
    path → (p50, p95)."""
    cfg = endpoint.config
    k = cfg.top_k * cfg.candidate_multiplier
    collection = app.store.level_collection(3)
    vectors = [np.asarray(await app.embedder.embed_query(t), dtype=np.float32) for t in texts]
    for t, v in zip(texts[:5], vectors[:5], strict=False):  # warm-up
        await endpoint.retrieve(t)
        raw_hybrid(raw, collection, t, v, k)
    paths: dict[str, list[float]] = {
        "Retrieve RPC": [],
        "embed + raw hybrid_search": [],
        "raw hybrid_search": [],
        "numpy brute-force dense": [],
    }
    merged = 0
    for t, v in zip(texts, vectors, strict=True):
        ms, reply = await time_async(partial(endpoint.retrieve, t))
        paths["Retrieve RPC"].append(ms)
        merged += reply.meta.auto_merge_applied

        async def embed_and_search(t: str = t) -> Any:
            vector = np.asarray(await app.embedder.embed_query(t), dtype=np.float32)
            return raw_hybrid(raw, collection, t, vector, k)

        paths["embed + raw hybrid_search"].append((await time_async(embed_and_search))[0])
        paths["raw hybrid_search"].append(
            time_sync(partial(raw_hybrid, raw, collection, t, v, k))[0]
        )
        paths["numpy brute-force dense"].append(time_sync(partial(numpy_top, matrix, v, k))[0])
    rows, header = latency_rows(paths, "Retrieve RPC")
    print(
        f"\nlatency, {label}: {len(texts)} queries over {len(matrix)} leaf rows, embedder "
        f"{app.embedder.name}, top_k={cfg.top_k}, candidate_k={k}, auto-merge "
        f"{'on' if cfg.auto_merge_enabled else 'off'} (applied on {merged} queries), rerank off:"
    )
    print(table(rows, header))
    stats = {name: p50_p95(values) for name, values in paths.items()}
    overhead = stats["Retrieve RPC"][0] / stats["embed + raw hybrid_search"][0]
    floor = stats["Retrieve RPC"][0] / stats["numpy brute-force dense"][0]
    print(
        f"service overhead = Retrieve p50 ÷ (embed + raw hybrid_search) p50 = {overhead:.2f} "
        f"(target ≤ 1.3); Retrieve p50 ÷ numpy floor p50 = {floor:.0f}×"
    )
    return stats
