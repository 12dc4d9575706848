"""Fusion and BM25 study on an ingested SciFact store, without
re-embedding anything:

- fusion: each claim's dense and BM25 leaf lists are recalled once through the service's own
  `ChunkStore` searches, deep enough for every setting, then fused offline with Milvus's RRF
  formula (Σ 1/(k + rank), ranks from 1) for each RRF k and per-path depth, cut to the
  candidate pool and scored at document level like `bench.retrieval_scifact`'s "hybrid" row;
- BM25 (`--bm25 K1:B …`): the leaf rows (text, `bm25_text`, vectors) are copied into a scratch
  collection built with those parameters, written in one insert and one flush, so its BM25
  scores with one IDF over all leaves (one segment) instead of the store's per-segment IDF.
  "store" rows are the store's own BM25 (its segments, its k1/b); the copy's rows show what
  the skew and k1/b cost.

    python -m bench.retrieval_fusion --db PATH [--limit DOCS] [--claims N]
        [--rrf-k 60 …] [--depth 2 …] [--bm25 1.2:0.75 …]

`--limit` must match the one the store was built with (it picks the claims judged inside)."""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench._retrieval_rig import (
    SCIFACT_DIR,
    bench_settings,
    doc_metrics,
    doc_ranking,
    quiet,
    selection,
    table,
)
from retrieval_service.adapters.milvus.chunk_store import hits
from retrieval_service.adapters.milvus.schema import (
    WRITABLE_FIELDS,
    bm25_spec,
    chunk_index_params,
    chunk_schema,
)
from retrieval_service.bootstrap import create_app

QUALITY_TOP_K = 100
#: The candidate pool at top_k 100 with the default multiplier (3), as the service asks it.
CANDIDATE_K = 300


@dataclass(frozen=True)
class Lists:
    """One claim's recalled leaves per side, best first: (chunk key, filename)."""

    dense: list[tuple[str, str]]
    bm25: list[tuple[str, str]]


def keyed(rows: Sequence[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(f"{r['chunk_id']}#{r.get('version', '')}", str(r["filename"])) for r in rows]


def rrf(sides: Sequence[list[tuple[str, str]]], k: float, limit: int) -> list[str]:
    """Milvus's RRF over the given lists; the fused filenames, best first."""
    scores: dict[str, float] = {}
    names: dict[str, str] = {}
    for side in sides:
        for rank, (key, name) in enumerate(side, start=1):
            scores[key] = scores.get(key, 0.0) + 1.0 / (k + rank)
            names[key] = name
    ordered = sorted(scores, key=lambda key: scores[key], reverse=True)[:limit]
    return [names[key] for key in ordered]


def score(rankings: dict[str, list[str]], qrels: dict[str, set[str]]) -> list[float]:
    """Metrics over the first QUALITY_TOP_K chunks, what Retrieve returns at top_k 100 with
    rerank off (the pool in fused order)."""
    sums = np.zeros(3)
    for q, names in rankings.items():
        sums += doc_metrics(doc_ranking(names[:QUALITY_TOP_K]), qrels[q])
    return [round(float(x) / len(rankings), 4) for x in sums]


async def recall_lists(app: Any, claims: dict[str, str], depth: int) -> dict[str, Lists]:
    out: dict[str, Lists] = {}
    for q, text in claims.items():
        vector = np.asarray(await app.embedder.embed_query(text), dtype=np.float32)
        dense = await app.chunks.dense_search(3, vector, depth)
        bm25 = await app.chunks.bm25_search(3, text, depth)
        out[q] = Lists(keyed(dense), keyed(bm25))
    return out


def fusion_table(
    lists: dict[str, Lists], qrels: dict[str, set[str]], ks: list[float], depths: list[int]
) -> None:
    rows = []
    for k in ks:
        for factor in depths:
            d = factor * CANDIDATE_K
            ranked = {q: rrf([s.dense[:d], s.bm25[:d]], k, CANDIDATE_K) for q, s in lists.items()}
            rows.append([f"RRF k={k:g}, {factor}×pool per side", *score(ranked, qrels)])
    for name, pick in (("dense only", "dense"), ("BM25 only (store)", "bm25")):
        ranked = {q: [n for _, n in getattr(s, pick)[:CANDIDATE_K]] for q, s in lists.items()}
        rows.append([name, *score(ranked, qrels)])
    print(f"\nfusion over {len(lists)} claims (offline RRF on the service's recall lists):")
    print(table(rows, ["setting", "nDCG@10", "recall@100", "MRR@10"]))


def copy_leaves(source: Any, collection: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    iterator = source.query_iterator(
        collection, batch_size=1000, filter="", output_fields=WRITABLE_FIELDS
    )
    while batch := iterator.next():
        rows.extend({f: r[f] for f in WRITABLE_FIELDS} for r in batch)
    iterator.close()
    return rows


async def bm25_study(
    app: Any,
    lists: dict[str, Lists],
    claims: dict[str, str],
    qrels: dict[str, set[str]],
    grid: list[tuple[float, float]],
    k: float,
    depth: int,
) -> None:
    from pymilvus import MilvusClient

    collection = app.store.level_collection(3)
    started = time.perf_counter()
    rows = await app.store.run(lambda client: copy_leaves(client, collection))
    print(f"\ncopied {len(rows)} leaf rows in {time.perf_counter() - started:.0f} s")
    folder = tempfile.mkdtemp(prefix="bench-bm25-")
    table_rows = []
    try:
        for k1, b in grid:
            client = MilvusClient(uri=str(Path(folder) / f"k{k1}-b{b}.db"))
            name = "leaves"
            client.create_collection(
                name,
                schema=chunk_schema(len(rows[0]["dense"])),
                index_params=chunk_index_params(client, {"bm25_k1": k1, "bm25_b": b}),
            )
            for start in range(0, len(rows), 2000):
                client.insert(name, rows[start : start + 2000])
            client.flush(name)
            ranked_bm25: dict[str, list[tuple[str, str]]] = {}
            for q, text in claims.items():
                spec = bm25_spec(text, depth, 3, drop_ratio=0.0)
                found = hits(
                    client.search(name, output_fields=["chunk_id", "version", "filename"],
                                  **spec.search_kwargs())
                )  # fmt: skip
                ranked_bm25[q] = keyed(found)
            client.close()
            only = {q: [n for _, n in v[:CANDIDATE_K]] for q, v in ranked_bm25.items()}
            fused = {
                q: rrf([lists[q].dense[:depth], ranked_bm25[q]], k, CANDIDATE_K) for q in lists
            }
            table_rows.append([f"one segment, k1={k1:g} b={b:g}", "BM25", *score(only, qrels)])
            table_rows.append([f"one segment, k1={k1:g} b={b:g}", "hybrid", *score(fused, qrels)])
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    built = app.store.config.bm25_params
    store_only = {q: [n for _, n in s.bm25[:CANDIDATE_K]] for q, s in lists.items()}
    store_fused = {
        q: rrf([s.dense[:depth], s.bm25[:depth]], k, CANDIDATE_K) for q, s in lists.items()
    }
    label = f"store (its segments), k1={built['bm25_k1']:g} b={built['bm25_b']:g}"
    table_rows.insert(0, [label, "BM25", *score(store_only, qrels)])
    table_rows.insert(1, [label, "hybrid", *score(store_fused, qrels)])
    print(f"BM25 over {len(lists)} claims (hybrid = RRF k={k:g}, {depth} per side):")
    print(table(table_rows, ["BM25 index", "mode", "nDCG@10", "recall@100", "MRR@10"]))


def segment_files(db: str, collection: str) -> list[int]:
    data = Path(db) / "collections" / collection / "partitions" / "_default" / "data"
    return sorted((p.stat().st_size for p in data.glob("*.parquet")), reverse=True)


async def run(args: argparse.Namespace) -> None:
    quiet()
    data, _, claim_ids = selection(args.data, args.limit, 0.25, args.claims)
    app = await create_app(bench_settings(args.db))
    try:
        collection = app.store.level_collection(3)
        sizes = segment_files(args.db, collection)
        print(
            f"store {args.db}: {await app.chunks.count(3)} leaves in {len(sizes)} segment files "
            f"({', '.join(f'{s / 1e6:.1f}' for s in sizes)} MB); {len(claim_ids)} train claims",
            flush=True,
        )
        depth = max(args.depth) * CANDIDATE_K
        started = time.perf_counter()
        claims = {q: data.claims[q] for q in claim_ids}
        lists = await recall_lists(app, claims, depth)
        print(f"recalled {depth} per side for each claim in {time.perf_counter() - started:.0f} s")
        fusion_table(lists, data.qrels, args.rrf_k, args.depth)
        if args.bm25:
            grid = [(float(k1), float(b)) for k1, b in (g.split(":") for g in args.bm25)]
            await bm25_study(app, lists, claims, data.qrels, grid, args.bm25_rrf_k, 2 * CANDIDATE_K)
    finally:
        await app.aclose()


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.retrieval_fusion")
    p.add_argument("--data", type=Path, default=SCIFACT_DIR)
    p.add_argument(
        "--db",
        default=os.environ.get("BENCH_SCIFACT_DB"),
        help="a store built by bench.retrieval_scifact --db (BENCH_SCIFACT_DB)",
    )
    p.add_argument("--limit", type=int, default=int(os.environ.get("BENCH_SCIFACT_LIMIT", "1000")))
    p.add_argument("--claims", type=int, default=0)
    p.add_argument("--rrf-k", type=float, nargs="+", default=[10, 20, 40, 60, 100])
    p.add_argument("--depth", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--bm25", nargs="*", default=[], help="k1:b pairs for one-segment copies")
    p.add_argument("--bm25-rrf-k", type=float, default=60)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse([] if argv is None else argv)
    if not args.db:
        # `make bench` runs every module: this one studies a store built before, not a new one.
        print("skipped: needs a SciFact store, --db PATH or BENCH_SCIFACT_DB (see the docstring)")
        return
    asyncio.run(run(args))


if __name__ == "__main__":
    main(sys.argv[1:])
