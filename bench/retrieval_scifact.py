"""SciFact through the real retrieval service: ingest abstracts with
IngestDocuments, then

- quality: nDCG@10, recall@100 and MRR@10 at document level (a document ranks at its best
  chunk) for dense only, BM25 only, hybrid and hybrid + auto-merge, each through Retrieve;
- ingestion: leaf chunks/s end to end ÷ the embedder's own rate on the same leaves (and ÷ the
  embedder plus a raw pymilvus insert of those rows);
- latency: Retrieve p50/p95 against the raw pymilvus hybrid_search on the same collection and
  numpy brute force over the same vectors, in the same run.

    python -m bench.retrieval_scifact [--limit DOCS] [--claims N] [--db PATH]

The default is a documented subset (BENCH_SCIFACT_LIMIT, 1,000 abstracts, see
`_retrieval_rig.subset`): the built-in CPU embedder does ≈ 10 leaves/s on 2 cores, so the full
corpus (5,183 abstracts, ≈ 19k leaves) takes ≈ 35 min; `--limit 0` runs it."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from supermew.v1 import retrieval_pb2

from bench._retrieval_rig import (
    MODES,
    SCIFACT_DIR,
    Endpoint,
    SciFact,
    all_documents,
    bench_settings,
    doc_filename,
    doc_metrics,
    doc_ranking,
    measure_latency,
    missing_abstracts,
    quiet,
    scratch_db,
    selection,
    serve_modes,
    store_uri,
    table,
    time_async,
    time_sync,
)
from retrieval_service.adapters.milvus.chunk_store import store_row
from retrieval_service.bootstrap import RetrievalApp, create_app
from retrieval_service.core.chunking import ChunkingConfig, Page, chunk_document

PUBLISHED = (
    "published SciFact nDCG@10 (test split, full corpus): BM25 0.665, all-MiniLM-L6-v2 0.645"
)
PUBLISHED += ", bge-small 0.713; issue target for the default's hybrid ≥ 0.72"
QUALITY_TOP_K = 100  # the RPC's maximum; recall@100 counts documents among these chunks


async def ingest(endpoint: Endpoint, data: SciFact, doc_ids: list[str], batch: int) -> None:
    started = time.perf_counter()
    leaves = chunks = 0
    for i in range(0, len(doc_ids), batch):
        reply = await endpoint.stub.IngestDocuments(
            retrieval_pb2.IngestDocumentsRequest(
                documents=[
                    retrieval_pb2.SourceDocument(
                        filename=doc_filename(d), content=data.corpus[d].encode()
                    )
                    for d in doc_ids[i : i + batch]
                ]
            )
        )
        leaves += sum(r.l3_chunks for r in reply.documents)
        chunks += sum(r.l1_chunks + r.l2_chunks + r.l3_chunks for r in reply.documents)
        done = i + batch
        if done % (batch * 25) == 0 or done >= len(doc_ids):
            rate = leaves / (time.perf_counter() - started)
            print(
                f"  ingested {min(done, len(doc_ids))}/{len(doc_ids)} abstracts, "
                f"{leaves} leaves, {rate:.1f} leaves/s",
                flush=True,
            )
    seconds = time.perf_counter() - started
    print(
        f"ingest: {len(doc_ids)} abstracts → {chunks} chunks ({leaves} L3 leaves) in "
        f"{seconds:.0f} s: {leaves / seconds:.1f} leaves/s, {chunks / seconds:.1f} chunks/s"
    )


async def ingestion_ratio(
    app: RetrievalApp, endpoint: Endpoint, raw: Any, data: SciFact, sample: list[str]
) -> None:
    """The same abstracts three ways: IngestDocuments (parse, split, embed leaves, mean
    parents, write three levels and the registry), the embedder alone on their leaves, and the
    embedder plus one raw pymilvus insert of the leaf rows."""
    settings = app.settings
    chunking = ChunkingConfig.from_chunk_size(
        settings.chunk_size, settings.chunk_overlap, context_header=settings.leaf_context_header
    )
    docs = [
        retrieval_pb2.SourceDocument(filename=f"copy-{d}.txt", content=data.corpus[d].encode())
        for d in sample
    ]
    ms, reply = await time_async(
        lambda: endpoint.stub.IngestDocuments(retrieval_pb2.IngestDocumentsRequest(documents=docs))
    )
    leaves = sum(r.l3_chunks for r in reply.documents)
    service = leaves / (ms / 1000)

    records = [
        c
        for d in sample
        for c in chunk_document(f"raw-{d}.txt", "Text", [Page(0, data.corpus[d])], chunking)
        if c.chunk_level == 3
    ]
    texts = [c.embedded_text for c in records]
    started = time.perf_counter()
    vectors = [
        await app.embedder.embed_passages(texts[i : i + 32]) for i in range(0, len(texts), 32)
    ]
    embed_s = time.perf_counter() - started
    matrix = np.concatenate(vectors)
    rows = [store_row(c, matrix[i], "bench") for i, c in enumerate(records)]
    collection = app.store.level_collection(3)
    insert_ms, _ = time_sync(lambda: raw.insert(collection, rows))
    embedder = len(texts) / embed_s
    embed_insert = len(texts) / (embed_s + insert_ms / 1000)

    raw.delete(collection, ids=[r["pk"] for r in rows])
    await endpoint.stub.DeleteDocuments(
        retrieval_pb2.DeleteDocumentsRequest(filenames=[d.filename for d in docs])
    )
    print(f"\ningestion, the same {len(sample)} abstracts ({leaves} leaves) three ways:")
    print(
        table(
            [
                ["IngestDocuments RPC (end to end)", round(service, 2), 1.0],
                [
                    "embedder alone (batches of 32)",
                    round(embedder, 2),
                    round(service / embedder, 3),
                ],
                [
                    "embedder + raw pymilvus insert",
                    round(embed_insert, 2),
                    round(service / embed_insert, 3),
                ],
            ],
            ["path", "leaves/s", "service ÷ this (target ≥ 0.8)"],
        )
    )


async def quality(endpoints: dict[str, Endpoint], data: SciFact, claim_ids: list[str]) -> None:
    rows = []
    for name, endpoint in endpoints.items():
        sums = np.zeros(3)
        modes: set[str] = set()
        merged = 0
        started = time.perf_counter()
        for q in claim_ids:
            reply = await endpoint.retrieve(data.claims[q], QUALITY_TOP_K)
            modes.add(reply.meta.retrieval_mode)
            merged += reply.meta.auto_merge_replaced_chunks
            sums += doc_metrics(doc_ranking([c.filename for c in reply.docs]), data.qrels[q])
        ms = (time.perf_counter() - started) * 1000 / len(claim_ids)
        n = len(claim_ids)
        rows.append(
            [
                name,
                *(round(float(x) / n, 4) for x in sums),
                round(merged / n, 1),
                round(ms, 1),
                "/".join(sorted(modes)),
            ]
        )
    cfg = next(iter(endpoints.values())).config
    print(
        f"\nquality over {len(claim_ids)} claims, document level, Retrieve top_k={QUALITY_TOP_K}"
        f" chunks (candidate_k={QUALITY_TOP_K * cfg.candidate_multiplier}):"
    )
    print(
        table(
            rows,
            [
                "mode",
                "nDCG@10",
                "recall@100",
                "MRR@10",
                "merged/claim",
                "ms/claim",
                "retrieval_mode",
            ],
        )
    )
    print(PUBLISHED)


async def leaf_vectors(app: RetrievalApp, raw: Any, collection: str) -> np.ndarray:
    """Every current leaf vector, by primary key (derived from the registry, like the service:
    one per chunk version)."""
    ids = [i for entry in await all_documents(app) for i in entry.pks(3)]
    rows: list[dict[str, Any]] = []
    for start in range(0, len(ids), 1000):
        batch = raw.get(collection, ids=ids[start : start + 1000], output_fields=["dense"])
        rows.extend(r["dense"] for r in batch)
    return np.asarray(rows, dtype=np.float32)


async def run(args: argparse.Namespace) -> None:
    quiet()
    data, doc_ids, claim_ids = selection(args.data, args.limit, args.judged_share, args.claims)
    scope = (
        "the full corpus"
        if len(doc_ids) == len(data.corpus)
        else f"a subset: the judged abstracts of the first {len(claim_ids)} train claims "
        f"+ seeded random unjudged abstracts, {args.judged_share:.0%} judged"
    )
    with scratch_db("bench-scifact-", args.db) as db:
        app = await create_app(bench_settings(db))
        print(
            f"SciFact: {len(doc_ids)} of {len(data.corpus)} abstracts ({scope}); "
            f"{len(claim_ids)} train claims; embedder {app.embedder.name}; "
            f"L3 chunk size {app.settings.chunk_size}; {os.cpu_count()} cores; store {db}",
            flush=True,
        )
        from pymilvus import MilvusClient

        raw = MilvusClient(uri=store_uri(app))  # the same Milvus Lite child, reached directly
        try:
            async with serve_modes(app, MODES) as endpoints:
                todo = await missing_abstracts(app, doc_ids)
                if todo:
                    await ingest(endpoints["hybrid"], data, todo, args.batch)
                else:
                    print(f"ingest: skipped, {db} already holds all {len(doc_ids)} abstracts")
                if args.ratio_docs > 0:  # 0 skips it: a quality study needs no ingest rate
                    await ingestion_ratio(
                        app, endpoints["hybrid"], raw, data, doc_ids[: args.ratio_docs]
                    )
                if not args.no_quality:
                    await quality(endpoints, data, claim_ids)
                texts = [data.claims[q] for q in claim_ids[: args.latency_queries]]
                if texts:  # --latency-queries 0 skips it: a quality study
                    matrix = await leaf_vectors(app, raw, app.store.level_collection(3))
                    await measure_latency(
                        app, endpoints["hybrid+merge"], raw, texts, matrix, "SciFact collection"
                    )
        finally:
            raw.close()
            await app.aclose()


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.retrieval_scifact")
    p.add_argument("--data", type=Path, default=SCIFACT_DIR)
    p.add_argument(
        "--limit",
        type=int,
        default=int(os.environ.get("BENCH_SCIFACT_LIMIT", "1000")),
        help="abstracts to ingest; 0 = all 5,183 (≈ 35 min on 2 cores)",
    )
    p.add_argument("--judged-share", type=float, default=0.25)
    p.add_argument("--claims", type=int, default=0, help="evaluate only the first N claims")
    p.add_argument("--db", default=os.environ.get("BENCH_SCIFACT_DB"), help="reuse this store")
    p.add_argument("--batch", type=int, default=16, help="abstracts per IngestDocuments call")
    p.add_argument("--ratio-docs", type=int, default=40)
    p.add_argument("--latency-queries", type=int, default=100)
    p.add_argument("--no-quality", action="store_true", help="latency only (a re-run)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    asyncio.run(run(parse([] if argv is None else argv)))


if __name__ == "__main__":
    main(sys.argv[1:])
