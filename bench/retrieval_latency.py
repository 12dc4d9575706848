"""Retrieve latency at scale: synthetic collections of 10k and 100k leaf
chunks in the service's own collections, the Retrieve RPC (hybrid + auto-merge, rerank off)
against the raw pymilvus hybrid_search on the same collection and numpy brute force over the
same vectors, in one run.

    python -m bench.retrieval_latency [--sizes 10000,100000] [--queries 100]

Synthetic on purpose: embedding 100k real chunks with the CPU model would take hours. Leaves
carry random unit vectors and Zipf-distributed words (60–140 per leaf, 30k-word vocabulary);
every three leaves share a parent (an L2 row with a short text, fetched by primary key when
auto-merge applies) and two topic words, and each query names one parent's topic words plus
four common words, so BM25 finds sibling leaves and auto-merge really runs. Queries are
embedded by the hashing embedder (≈ 0.1 ms), so the overhead ratio is not diluted by model
time."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time

import numpy as np

from bench._hashing import HashingEmbedder
from bench._retrieval_rig import (
    bench_settings,
    measure_latency,
    quiet,
    scratch_db,
    serve_modes,
    store_uri,
    table,
)
from retrieval_service.adapters.milvus.chunk_store import store_row
from retrieval_service.bootstrap import create_app
from retrieval_service.core.chunking import ChunkRecord
from retrieval_service.core.documents import DocumentEntry
from retrieval_service.core.embedding import normalise

DIM = 384
VOCABULARY = 30_000
LEAVES_PER_PARENT = 3
PARENTS_PER_DOCUMENT = 10

# Rows are inserted raw (no ingest); Retrieve serves committed versions only, so every
# synthetic document gets a commit record of this version.
BENCH_VERSION = "00000000000000000001-bench"


def zipf_words(rng: np.random.Generator, count: int) -> np.ndarray:
    weights = 1.0 / np.arange(1, VOCABULARY + 1) ** 1.07
    return rng.choice(VOCABULARY, size=count, p=weights / weights.sum())


def rows_for(
    rng: np.random.Generator, start: int, stop: int
) -> tuple[list[dict], list[dict], np.ndarray]:
    """Leaf rows [start, stop) (a multiple of LEAVES_PER_PARENT), their parents, their vectors."""
    n = stop - start
    lengths = rng.integers(60, 141, size=n)
    words = zipf_words(rng, int(lengths.sum()))
    vectors = normalise(rng.standard_normal((n, DIM)).astype(np.float32))
    leaves, parents = [], []
    offset = 0
    for i in range(n):
        leaf = start + i
        group = leaf // LEAVES_PER_PARENT
        filename = f"doc{group // PARENTS_PER_DOCUMENT}.txt"
        body = " ".join(f"w{w}" for w in words[offset : offset + lengths[i]])
        offset += lengths[i]
        parent_id = f"{filename}::p1::l2::{group % PARENTS_PER_DOCUMENT}"
        n_in_doc = leaf % (LEAVES_PER_PARENT * PARENTS_PER_DOCUMENT)
        leaves.append(
            _row(
                f"{filename}::p1::l3::{n_in_doc}",
                f"topic{group}a topic{group}b {body}",
                vectors[i],
                filename,
                parent_id,
                level=3,
                idx=n_in_doc,
            )
        )
        if leaf % LEAVES_PER_PARENT == LEAVES_PER_PARENT - 1:
            siblings = leaves[-LEAVES_PER_PARENT:]
            mean = normalise(vectors[i - LEAVES_PER_PARENT + 1 : i + 1].mean(axis=0))
            # Parents are fetched by id, never searched: a short text keeps the build quick.
            # No L1 rows: the second merge pass finds no grandparent and stops.
            text = " ".join(r["text"][:200] for r in siblings)
            parents.append(_row(parent_id, text, mean, filename, "", level=2, idx=group))
    return leaves, parents, vectors


def _row(
    chunk_id: str,
    text: str,
    vector: np.ndarray,
    filename: str,
    parent: str,
    *,
    level: int,
    idx: int,
) -> dict:
    record = ChunkRecord(
        chunk_id=chunk_id,
        parent_chunk_id=parent,
        root_chunk_id=parent or chunk_id,
        chunk_level=level,
        chunk_idx=idx,
        text=text,
        filename=filename,
        file_type="Text",
        file_path=filename,
        page_number="1",
    )
    return store_row(record, vector, BENCH_VERSION)


def wait_until_idle(max_seconds: float = 300.0) -> float:
    """Milvus Lite builds HNSW and compacts in a background thread after a flush and offers no
    call to wait for it; wait until this process's CPU use falls to idle."""
    started = time.perf_counter()
    while time.perf_counter() - started < max_seconds:
        cpu, wall = time.process_time(), time.perf_counter()
        time.sleep(2.0)
        if (time.process_time() - cpu) / (time.perf_counter() - wall) < 0.15:
            break
    return time.perf_counter() - started


async def one_size(size: int, queries: int, seed: int) -> list:
    from pymilvus import MilvusClient

    rng = np.random.default_rng(seed)
    size -= size % LEAVES_PER_PARENT
    with scratch_db(f"bench-latency-{size}-") as db:
        app = await create_app(bench_settings(db), embedder=HashingEmbedder(DIM))
        raw = MilvusClient(uri=store_uri(app))
        try:
            leaf_collection, parent_collection = (
                app.store.level_collection(3),
                app.store.level_collection(2),
            )
            matrices = []
            started = time.perf_counter()
            step = 999  # a multiple of LEAVES_PER_PARENT
            for start in range(0, size, step):
                leaves, parents, vectors = rows_for(rng, start, min(size, start + step))
                raw.insert(leaf_collection, leaves)
                raw.insert(parent_collection, parents)
                matrices.append(vectors)
            filenames = sorted(
                {f"doc{g // PARENTS_PER_DOCUMENT}.txt" for g in range(size // LEAVES_PER_PARENT)}
            )
            await app.registry.put(
                *(DocumentEntry(f, "Text", 1, {}, BENCH_VERSION) for f in filenames)
            )
            raw.flush(leaf_collection)
            raw.flush(parent_collection)
            insert_s = time.perf_counter() - started
            idle_s = wait_until_idle()
            matrix = np.concatenate(matrices)
            print(
                f"\n{size} leaves + {size // LEAVES_PER_PARENT} parents inserted in "
                f"{insert_s:.0f} s ({size / insert_s:.0f} leaves/s incl. text generation), "
                f"background index build {idle_s:.0f} s",
                flush=True,
            )
            groups = rng.integers(0, size // LEAVES_PER_PARENT, size=queries)
            common = zipf_words(rng, 4 * queries).reshape(queries, 4)
            texts = [
                f"topic{g}a topic{g}b " + " ".join(f"w{w}" for w in common[i])
                for i, g in enumerate(groups)
            ]
            async with serve_modes(app, {"hybrid+merge": ("hybrid", True)}) as endpoints:
                stats = await measure_latency(
                    app, endpoints["hybrid+merge"], raw, texts, matrix, f"{size} synthetic leaves"
                )
        finally:
            raw.close()
            await app.aclose()
    retrieve, embed_raw = stats["Retrieve RPC"], stats["embed + raw hybrid_search"]
    floor = stats["numpy brute-force dense"]
    return [
        size,
        round(retrieve[0], 1),
        round(retrieve[1], 1),
        round(embed_raw[0], 1),
        round(floor[0], 2),
        round(retrieve[0] / embed_raw[0], 2),
        round(retrieve[0] / floor[0]),
    ]


async def run(args: argparse.Namespace) -> None:
    quiet()
    print(f"synthetic Retrieve latency, {os.cpu_count()} cores, Milvus Lite (embedded)")
    rows = [await one_size(size, args.queries, seed=7) for size in args.sizes]
    print("\nsummary (ms):")
    print(
        table(
            rows,
            [
                "leaves",
                "Retrieve p50",
                "Retrieve p95",
                "raw hybrid p50",
                "numpy p50",
                "overhead ratio",
                "÷ numpy floor",
            ],
        )
    )


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.retrieval_latency")
    p.add_argument(
        "--sizes",
        type=lambda s: [int(x) for x in s.split(",") if x],
        default=os.environ.get("BENCH_LATENCY_SIZES", "10000,100000"),
    )
    p.add_argument("--queries", type=int, default=100)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    asyncio.run(run(parse([] if argv is None else argv)))


if __name__ == "__main__":
    main(sys.argv[1:])
