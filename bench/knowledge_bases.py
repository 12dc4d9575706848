"""Knowledge bases at scale, three ratios in one run (docs/api.md#knowledge-bases):

(a) Retrieve p50 in a knowledge base of 100 documents inside a store of ≥ 20,000 leaves spread
    over 200 knowledge bases ÷ the same 100 documents alone in a fresh store (wanted ≤ 1.5);
(b) a Retrieve whose filter (`metadata.x = 3`) admits 10 % of that knowledge base's documents
    ÷ the same Retrieve unfiltered (wanted ≤ 1.5);
(c) `python -m retrieval_service sync` of an unchanged 1,000-document folder: the CLI as a user
    runs it (a process, its start-up included), no embedding call, wall time (wanted ≤ 10 s).

    python -m bench.knowledge_bases [--queries 100] [--leaves 20000]

Rows are written straight through the store adapter (`store_row` with each chunk's knowledge
base, document_id and metadata) with random unit vectors and Zipf words, as
bench/retrieval_latency.py does; each document is one L2 parent over three leaves and gets a
committed registry record, so Retrieve (hybrid + auto-merge, rerank off) serves it. The
target knowledge base's rows are generated once and written to both stores. Queries name one
target document's topic words plus common words, are embedded by the hashing embedder, and the
three Retrieve variants run interleaved query by query so drift hits them alike. For (c) the
1,000 documents' registry records carry the SHA-256 of the files in the folder (nothing to
embed), and the embedder counts every passage it is asked for."""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import math
import os
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import numpy as np
from supermew.v1 import retrieval_pb2, retrieval_pb2_grpc

from bench._hashing import HashingEmbedder
from bench._retrieval_rig import bench_settings, p50_p95, quiet, scratch_db, store_uri, table
from bench.retrieval_latency import zipf_words
from retrieval_service.adapters.milvus.chunk_store import store_row
from retrieval_service.bootstrap import RetrievalApp, create_app, retrieval_server
from retrieval_service.core.chunking import ChunkRecord
from retrieval_service.core.documents import DocumentEntry
from retrieval_service.core.embedding import normalise
from retrieval_service.core.ports import ProgressCallback, StoredChunk

ROOT = Path(__file__).resolve().parents[1]
DIM = 384
KNOWLEDGE_BASES = 200
TARGET_DOCUMENTS = 100
LEAVES_PER_DOCUMENT = 3
FILTER_VALUES = 10  # metadata.x cycles over 0..9: one value admits 10 % of the documents
SYNC_DOCUMENTS = 1000
VERSION = "00000000000000000001-bench"
TARGET = "knowledge_bases/kb-000"


class CountingEmbedder(HashingEmbedder):
    """The hashing embedder, counting the passages it embeds (an ingest's only embedder use)."""

    def __init__(self, dim: int = DIM) -> None:
        super().__init__(dim)
        self.passages = 0

    async def embed_passages(
        self,
        texts: Sequence[str],
        *,
        on_batch: ProgressCallback | None = None,
        deadline: float | None = None,
    ) -> np.ndarray:
        self.passages += len(texts)
        return await super().embed_passages(texts, on_batch=on_batch, deadline=deadline)


@dataclass
class Document:
    leaves: list[dict[str, Any]]
    parent: dict[str, Any]
    entry: DocumentEntry


def document(rng: np.random.Generator, kb: str, index: int, now_ms: int) -> Document:
    """One synthetic document of knowledge base `kb`: an L2 parent over three leaves, each leaf
    naming the document's two topic words, with metadata x = index mod 10."""
    document_id = f"docs/d{index:05d}.txt"
    filename = f"d{index:05d}.txt"
    metadata = {"x": index % FILTER_VALUES, "team": f"t{index % 7}"}
    topic = f"{kb.rsplit('/', 1)[1].replace('-', '')}d{index}"
    vectors = normalise(rng.standard_normal((LEAVES_PER_DOCUMENT, DIM)).astype(np.float32))
    lengths = rng.integers(40, 81, size=LEAVES_PER_DOCUMENT)
    words = zipf_words(rng, int(lengths.sum()))
    parent_id = f"{document_id}::p1::l2::0"

    def row(chunk_id: str, text: str, vector: np.ndarray, level: int, idx: int) -> dict:
        record = ChunkRecord(
            chunk_id=chunk_id,
            parent_chunk_id=parent_id if level == 3 else "",
            root_chunk_id=parent_id,
            chunk_level=level,
            chunk_idx=idx,
            text=text,
            filename=filename,
            file_type="Text",
            file_path=filename,
            page_number="1",
        )
        owner = StoredChunk(
            record,
            vector,
            VERSION,
            knowledge_base=kb,
            document_id=document_id,
            metadata=metadata,
            ingest_time=now_ms,
        )
        return store_row(record, vector, VERSION, True, owner)

    leaves, offset = [], 0
    for n in range(LEAVES_PER_DOCUMENT):
        body = " ".join(f"w{w}" for w in words[offset : offset + lengths[n]])
        offset += lengths[n]
        leaves.append(
            row(f"{document_id}::p1::l3::{n}", f"{topic}a {topic}b {body}", vectors[n], 3, n + 1)
        )
    parent_text = " ".join(r["text"][:200] for r in leaves)
    parent = row(parent_id, parent_text, normalise(vectors.mean(axis=0)), 2, 0)
    entry = DocumentEntry(
        filename,
        "Text",
        1,
        {"1": [0, 1, LEAVES_PER_DOCUMENT]},
        VERSION,
        knowledge_base=kb,
        document_id=document_id,
        metadata=metadata,
        content_sha256=hashlib.sha256(parent_text.encode()).hexdigest(),
        size_bytes=len(parent_text),
        ingest_time=now_ms,
    )
    return Document(leaves, parent, entry)


def wait_lite_idle(app: RetrievalApp, max_seconds: float = 300.0) -> None:
    """Milvus Lite builds indexes and compacts in the background after a flush, in its own
    process (the service's Lite child), and offers no call to wait for it: wait until that
    process's CPU use falls to idle (its /proc stat; no-op on a Milvus server)."""
    lite = app.store.lite
    pid = lite.pid if lite is not None else None
    if pid is None:
        return
    stat = Path(f"/proc/{pid}/stat")
    tick = os.sysconf("SC_CLK_TCK")

    def cpu_seconds() -> float:
        fields = stat.read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / tick  # utime + stime

    deadline = time.monotonic() + max_seconds
    while time.monotonic() < deadline:
        cpu, wall = cpu_seconds(), time.monotonic()
        time.sleep(2.0)
        if (cpu_seconds() - cpu) / (time.monotonic() - wall) < 0.1:
            return


@dataclass
class Served:
    app: RetrievalApp
    stub: retrieval_pb2_grpc.RetrievalServiceStub
    port: int
    embedder: CountingEmbedder


@asynccontextmanager
async def served(db: str) -> AsyncIterator[Served]:
    """The real service (the composition root's wiring) on a scratch store, on 127.0.0.1:0."""
    embedder = CountingEmbedder()
    settings = bench_settings(db)
    app = await create_app(settings, embedder=embedder)
    server = retrieval_server(app, settings, port=0)
    port = await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield Served(app, retrieval_pb2_grpc.RetrievalServiceStub(channel), port, embedder)
    finally:
        await channel.close()
        await server.stop(0)
        await app.aclose()


async def write(svc: Served, kbs: list[str], documents: list[Document]) -> float:
    """Creates the knowledge bases, writes the documents' rows and records, seals them as an
    ingest does, and waits for Milvus Lite's background index build; returns the seconds it
    took."""
    from pymilvus import MilvusClient

    started = time.perf_counter()
    for kb in kbs:
        if kb != "knowledge_bases/default":
            await svc.stub.CreateKnowledgeBase(
                retrieval_pb2.CreateKnowledgeBaseRequest(knowledge_base_id=kb.rsplit("/", 1)[1])
            )
    raw = MilvusClient(uri=store_uri(svc.app))
    try:
        leaf_collection = svc.app.store.level_collection(3)
        parent_collection = svc.app.store.level_collection(2)
        step = 1000
        for start in range(0, len(documents), step):
            batch = documents[start : start + step]
            raw.insert(leaf_collection, [leaf for d in batch for leaf in d.leaves])
            raw.insert(parent_collection, [d.parent for d in batch])
            await svc.app.registry.put(*(d.entry for d in batch))
    finally:
        raw.close()
    # Every collection, the registry's included, into indexed segments, as each ingest seals
    # on Milvus Lite (a registry left in the memtable is scanned row by row on every read).
    await svc.app.store.seal()
    wait_lite_idle(svc.app)
    return time.perf_counter() - started


async def timed_retrieve(svc: Served, request: retrieval_pb2.RetrieveRequest) -> float:
    started = time.perf_counter()
    reply = await svc.stub.Retrieve(request)
    elapsed = (time.perf_counter() - started) * 1000
    if request.filter:
        assert all(d.metadata["x"] == 3 for d in reply.docs), "the filter admitted another x"
    assert all(d.knowledge_base == TARGET for d in reply.docs), "a chunk of another kb"
    return elapsed


async def retrieval_ratios(args: argparse.Namespace) -> list[list[Any]]:
    rng = np.random.default_rng(11)
    now_ms = int(time.time() * 1000)
    target_docs = [document(rng, TARGET, i, now_ms) for i in range(TARGET_DOCUMENTS)]
    other_kbs = [f"knowledge_bases/kb-{k:03d}" for k in range(1, KNOWLEDGE_BASES)]
    per_kb = math.ceil(
        (args.leaves - TARGET_DOCUMENTS * LEAVES_PER_DOCUMENT)
        / (len(other_kbs) * LEAVES_PER_DOCUMENT)
    )
    others = [document(rng, kb, i, now_ms) for kb in other_kbs for i in range(per_kb)]
    big_leaves = (len(target_docs) + len(others)) * LEAVES_PER_DOCUMENT
    with scratch_db("bench-kb-big-") as big_db, scratch_db("bench-kb-alone-") as alone_db:
        async with served(big_db) as big, served(alone_db) as alone:
            seconds = await write(big, [TARGET, *other_kbs], target_docs + others)
            print(
                f"big store: {big_leaves} leaves in {KNOWLEDGE_BASES} knowledge bases "
                f"({TARGET_DOCUMENTS} documents in {TARGET}, {per_kb} in each other), "
                f"written and indexed in {seconds:.0f} s",
                flush=True,
            )
            seconds = await write(alone, [TARGET], target_docs)
            print(
                f"fresh store: the same {TARGET_DOCUMENTS} documents alone, {seconds:.0f} s",
                flush=True,
            )
            picks = rng.integers(0, TARGET_DOCUMENTS, size=args.queries)
            common = zipf_words(rng, 3 * args.queries).reshape(args.queries, 3)
            texts = [
                f"kb000d{p}a kb000d{p}b " + " ".join(f"w{w}" for w in common[i])
                for i, p in enumerate(picks)
            ]

            def request(text: str, filtered: bool) -> retrieval_pb2.RetrieveRequest:
                return retrieval_pb2.RetrieveRequest(
                    query=text,
                    knowledge_bases=[TARGET],
                    filter="metadata.x = 3" if filtered else "",
                )

            for text in texts[:5]:  # warm-up: caches, connections, first-query costs
                await big.stub.Retrieve(request(text, False))
                await big.stub.Retrieve(request(text, True))
                await alone.stub.Retrieve(request(text, False))
            big_ms, filtered_ms, alone_ms = [], [], []
            for text in texts:
                big_ms.append(await timed_retrieve(big, request(text, False)))
                filtered_ms.append(await timed_retrieve(big, request(text, True)))
                alone_ms.append(await timed_retrieve(alone, request(text, False)))
    stats = {
        "alone (fresh store)": p50_p95(alone_ms),
        "in the 200-kb store": p50_p95(big_ms),
        "filtered (10 %)": p50_p95(filtered_ms),
    }
    print(
        "\n"
        + table(
            [[name, p50, p95] for name, (p50, p95) in stats.items()],
            ["Retrieve in the 100-document kb", "p50 ms", "p95 ms"],
        )
    )
    return [
        [
            "(a) p50 in the 200-kb store ÷ alone",
            round(stats["in the 200-kb store"][0] / stats["alone (fresh store)"][0], 2),
            "≤ 1.5",
        ],
        [
            "(b) p50 filtered (10 %) ÷ unfiltered",
            round(stats["filtered (10 %)"][0] / stats["in the 200-kb store"][0], 2),
            "≤ 1.5",
        ],
    ]


async def sync_unchanged() -> list[Any]:
    """(c): a folder of 1,000 files whose records the knowledge base already holds, synced by
    the CLI as a process."""
    now_ms = int(time.time() * 1000)
    with (
        scratch_db("bench-kb-sync-") as db,
        tempfile.TemporaryDirectory(prefix="bench-kb-folder-") as folder,
    ):
        async with served(db) as svc:
            await svc.stub.CreateKnowledgeBase(
                retrieval_pb2.CreateKnowledgeBaseRequest(knowledge_base_id="synced")
            )
            entries = []
            for i in range(SYNC_DOCUMENTS):
                document_id = f"team{i % 10}/note{i:04d}.md"
                content = f"# Note {i}\n\nSynthetic note number {i} for the sync bench.\n".encode()
                path = Path(folder) / document_id
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(content)
                entries.append(
                    DocumentEntry(
                        path.name,
                        "Markdown",
                        1,
                        {"0": [1, 1, 1]},
                        VERSION,
                        knowledge_base="knowledge_bases/synced",
                        document_id=document_id,
                        content_sha256=hashlib.sha256(content).hexdigest(),
                        size_bytes=len(content),
                        ingest_time=now_ms,
                    )
                )
            await svc.app.registry.put(*entries)
            before = svc.embedder.passages
            env = {k: v for k, v in os.environ.items() if not k.startswith(("AUTH_", "RETRIEVAL_"))}
            argv = [sys.executable, "-m", "retrieval_service", "sync", folder, "--kb", "synced"]
            argv += ["--addr", f"127.0.0.1:{svc.port}"]
            started = time.perf_counter()
            proc = await asyncio.create_subprocess_exec(
                *argv,
                cwd=ROOT,
                env=env,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            out, err = await proc.communicate()
            seconds = time.perf_counter() - started
            embedded = svc.embedder.passages - before
    summary = out.decode().strip().splitlines()[-1] if out.strip() else err.decode()[-500:]
    print(f"\nsync of an unchanged {SYNC_DOCUMENTS}-document folder: {summary}")
    print(f"  exit {proc.returncode}, {seconds:.2f} s, passages embedded: {embedded}")
    ok = proc.returncode == 0 and f"{SYNC_DOCUMENTS} unchanged" in summary and embedded == 0
    return [
        f"(c) sync, {SYNC_DOCUMENTS} unchanged files (s)",
        round(seconds, 2),
        "≤ 10, no embedding" + ("" if ok else " — NOT MET: see above"),
    ]


async def run(args: argparse.Namespace) -> None:
    quiet()
    print(f"knowledge bases, {os.cpu_count()} cores, Milvus Lite (embedded)", flush=True)
    rows = await retrieval_ratios(args)
    rows.append(await sync_unchanged())
    print("\nsummary:")
    print(table(rows, ["measure", "value", "wanted"]))


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.knowledge_bases")
    p.add_argument("--queries", type=int, default=100)
    p.add_argument("--leaves", type=int, default=20_000, help="leaves in the big store (≥)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    asyncio.run(run(parse([] if argv is None else argv)))


if __name__ == "__main__":
    main(sys.argv[1:])
