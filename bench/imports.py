"""Imports as jobs (docs/api.md#imports), measured in one run on real `python -m retrieval_service`
processes (embedded Milvus Lite and its SQLite control plane), embedding through the
OpenAI-compatible fake of tests/fakes/embeddings_server.py (dim 64, in its own process):

(a) 1,000 text documents (1–3 leaves each) from one folder: `ImportDocuments` of the folder's
    `file://` uri, followed to its end with GetOperation every 50 ms, against
    `StreamIngestDocuments` of the same files read by the client, in calls of 100 documents
    (the CLI's own ingest sends one per call: slower), each into a new knowledge base of one
    service; 3 repetitions, alternating which goes first; the medians and their ratio.
(b) A takeover: the service running an import of the folder is killed (SIGKILL) once 300
    documents are in, restarted on the same store, and resumes the job once its lease
    (INGEST_LEASE_SECONDS=2) expired. Redone documents = the leaves embedded over both runs
    minus the folder's leaves, in documents (each document's leaves are known), plus the
    documents counted `unchanged` (committed before the kill, after the last checkpoint).

Wanted: (a) import ÷ stream ≤ 1.1; (b) redone ≤ IMPORT_WORKERS × IMPORT_BATCH_DOCUMENTS, the
documents one job has in flight (1 × 3 calls × 48 here). About 2 minutes on 2 cores."""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import grpc
import numpy as np
from google.longrunning import operations_pb2_grpc
from google.longrunning import operations_proto_pb2 as operations_pb2
from supermew.v1 import retrieval_pb2, retrieval_pb2_grpc

from bench._retrieval_rig import table
from bench.control_plane import (
    DIM,
    ROOT,
    SERVING_LINE,
    START_SECONDS,
    Embeddings,
    Tree,
    embeddings_fake,
    paragraphs,
    tree_env,
    wait_idle,
)
from bench.control_plane import Service as Process
from retrieval_service.core.imports.job import IMPORT_BATCH_DOCUMENTS

WORKERS = 1
POLL_SECONDS = 0.05


def write_folder(folder: Path, count: int) -> dict[str, int]:
    """`count` distinct text files of 1–3 paragraphs; returns each file's paragraphs."""
    rng = np.random.default_rng(11)
    folder.mkdir(parents=True)
    leaves = {}
    for i in range(count):
        name = f"note{i:04d}.txt"
        leaves[name] = 1 + i % 3
        (folder / name).write_text(paragraphs(rng, leaves[name], f"note{i}"))
    return leaves


@asynccontextmanager
async def service(
    store: Path, embeddings: Embeddings, imports_root: Path, log: Path
) -> AsyncIterator[Process]:
    """The working tree's service on `store` (kept between starts), stopped with SIGTERM."""
    values = {
        "MILVUS_URI": str(store),
        "EMBEDDING_BASE_URL": embeddings.base_url,
        "EMBEDDING_MODEL": "fake",
        "EMBEDDING_DIM": str(DIM),
        "EMBEDDING_API_KEY": "bench",
        "SAMPLES_DIR": "",
        "RETRIEVAL_PORT": "0",
        "BIND_HOST": "127.0.0.1",
        "LOG_LEVEL": "INFO",
        "IMPORT_ROOTS": str(imports_root),
        "IMPORT_WORKERS": str(WORKERS),
        "INGEST_LEASE_SECONDS": "2",
    }
    start = log.stat().st_size if log.exists() else 0
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "retrieval_service"],
            cwd=ROOT,
            env=tree_env(Tree("after", ROOT), **values),
            stdout=out,
            stderr=out,
        )
    try:
        deadline = time.monotonic() + START_SECONDS
        while not (found := SERVING_LINE.search(log.read_bytes()[start:])):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the service did not start:\n{log.read_text()[-3000:]}")
            await asyncio.sleep(0.1)
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{int(found[1])}")
        try:
            stub = retrieval_pb2_grpc.RetrievalServiceStub(channel)
            yield Process("after", Tree("after", ROOT), proc, int(found[1]), log, channel, stub)
        finally:
            await channel.close()
    finally:
        if proc.poll() is None:
            proc.terminate()
            await asyncio.to_thread(proc.wait, 60)


def progress(op: operations_pb2.Operation) -> retrieval_pb2.ImportDocumentsMetadata:
    out = retrieval_pb2.ImportDocumentsMetadata()
    op.metadata.Unpack(out)
    return out


async def until_done(
    ops: operations_pb2_grpc.OperationsStub, name: str
) -> operations_pb2.Operation:
    request = operations_pb2.GetOperationRequest(name=name)
    while True:
        op = await ops.GetOperation(request, timeout=30)
        if op.done:
            return op
        await asyncio.sleep(POLL_SECONDS)


async def timed_import(svc: Process, folder: Path, kb: str) -> float:
    ops = operations_pb2_grpc.OperationsStub(svc.channel)
    started = time.perf_counter()
    op = await svc.stub.ImportDocuments(
        retrieval_pb2.ImportDocumentsRequest(knowledge_base=kb, uris=[folder.as_uri()]),
        timeout=30,
    )
    done = await until_done(ops, op.name)
    elapsed = time.perf_counter() - started
    assert done.WhichOneof("result") == "response", done.error
    assert progress(done).documents_new == len(list(folder.iterdir())), progress(done)
    return elapsed


async def timed_stream(svc: Process, folder: Path, kb: str, per_call: int = 100) -> float:
    files = sorted(folder.iterdir())
    started = time.perf_counter()
    for at in range(0, len(files), per_call):
        request = retrieval_pb2.IngestDocumentsRequest(
            knowledge_base=kb,
            documents=[
                retrieval_pb2.SourceDocument(filename=f.name, content=f.read_bytes())
                for f in files[at : at + per_call]
            ],
        )
        async for event in svc.stub.StreamIngestDocuments(request, timeout=600):
            if event.HasField("result"):
                assert len(event.result.documents) == len(request.documents)
    return time.perf_counter() - started


async def measure_speed(
    scratch: Path, embeddings: Embeddings, folder: Path, repetitions: int
) -> dict[str, float]:
    times: dict[str, list[float]] = {"import": [], "stream": []}
    async with service(scratch / "speed.db", embeddings, scratch, scratch / "speed.log") as svc:
        for rep in range(repetitions):
            order = ["import", "stream"] if rep % 2 == 0 else ["stream", "import"]
            for way in order:
                kb = f"{way}-{rep}"
                await svc.stub.CreateKnowledgeBase(
                    retrieval_pb2.CreateKnowledgeBaseRequest(knowledge_base_id=kb)
                )
                await wait_idle([svc])
                run = timed_import if way == "import" else timed_stream
                times[way].append(await run(svc, folder, f"knowledge_bases/{kb}"))
                print(f"  rep {rep + 1} {way}: {times[way][-1]:.2f} s", flush=True)
    return {way: statistics.median(values) for way, values in times.items()}


async def measure_takeover(
    scratch: Path, embeddings: Embeddings, folder: Path, leaves: dict[str, int], kill_after: int
) -> dict[str, int]:
    store, log = scratch / "takeover.db", scratch / "takeover.log"
    before = embeddings.texts_embedded()
    async with service(store, embeddings, scratch, log) as svc:
        ops = operations_pb2_grpc.OperationsStub(svc.channel)
        op = await svc.stub.ImportDocuments(
            retrieval_pb2.ImportDocumentsRequest(uris=[folder.as_uri()]), timeout=30
        )
        request = operations_pb2.GetOperationRequest(name=op.name)
        while progress(await ops.GetOperation(request, timeout=30)).documents_new < kill_after:
            await asyncio.sleep(0.02)
        svc.proc.kill()
        await asyncio.to_thread(svc.proc.wait, 30)
    async with service(store, embeddings, scratch, log) as svc:
        done = await until_done(operations_pb2_grpc.OperationsStub(svc.channel), op.name)
    meta = progress(done)
    assert meta.documents_new + meta.documents_unchanged == len(leaves), meta
    embedded = embeddings.texts_embedded() - before
    extra_leaves = embedded - sum(leaves.values())
    mean_leaves = sum(leaves.values()) / len(leaves)
    return {
        "documents": len(leaves),
        "committed_twice": meta.documents_unchanged,
        "extra_leaves": extra_leaves,
        "redone": meta.documents_unchanged + round(extra_leaves / mean_leaves),
    }


async def run(args: argparse.Namespace) -> None:
    scratch = Path(tempfile.mkdtemp(prefix="bench-imports-"))
    try:
        folder = scratch / "docs"
        leaves = write_folder(folder, args.documents)
        with embeddings_fake() as embeddings:
            speed = await measure_speed(scratch, embeddings, folder, args.repetitions)
            takeover = await measure_takeover(
                scratch, embeddings, folder, leaves, min(300, args.documents // 3)
            )
        ratio = speed["import"] / speed["stream"]
        limit = WORKERS * IMPORT_BATCH_DOCUMENTS
        print(
            table(
                [
                    [
                        f"(a) StreamIngest, {args.documents} documents (median)",
                        f"{speed['stream']:.2f} s",
                        "",
                    ],
                    [
                        "(a) ImportDocuments, the same files (median)",
                        f"{speed['import']:.2f} s",
                        "",
                    ],
                    ["(a) import ÷ stream", f"×{ratio:.2f}", "≤ 1.1"],
                    [
                        "(b) documents committed twice (unchanged)",
                        str(takeover["committed_twice"]),
                        "",
                    ],
                    ["(b) leaves embedded twice", str(takeover["extra_leaves"]), ""],
                    ["(b) documents redone after the kill", str(takeover["redone"]), f"≤ {limit}"],
                ],
                ["measure", "value", "wanted"],
            )
        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.imports", description=__doc__)
    parser.add_argument("--documents", type=int, default=1000)
    parser.add_argument("--repetitions", type=int, default=3)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    asyncio.run(run(parse([] if argv is None else argv)))


if __name__ == "__main__":
    main(sys.argv[1:])
