"""Index generations (docs/api.md#indexes), measured in one run on the real service (embedded
Milvus Lite, its SQLite control plane, the built-in embedder) over a SciFact subset:

(a) Another chunking built beside the active index: CreateIndex of `chunk_size` OTHER (default
    1600) on a knowledge base ingested with the service's default (800), followed to READY;
    its build time.
(b) What the build costs the callers meanwhile: Retrieve p50 over train claims one after
    another, idle and while the build runs (wanted ≤ 1.5×); and the time of one
    IngestDocuments of WRITE abstracts, idle and while the build runs (wanted ≤ 2×; it writes
    the active index, the build takes the new versions into its own), and once the build is
    READY with the old index kept (both written, no build running: what writing two indexes
    costs by itself).
(c) The two indexes compared on the same questions: an evaluation set of the subset's train
    claims (BEIR import), RunEvaluation RETRIEVAL top_k=100 once per index (RunConfig.index),
    and CompareEvaluationRuns(initial, other): each metric's means, difference, paired-
    bootstrap 95 % interval and won/lost/tied.

    python -m bench.index_generations [--limit DOCS] [--claims N] [--other-chunk-size N]

Default: 600 abstracts (≈ 6–10 minutes on 2 cores, most of it the ingest and the build)."""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import grpc
from google.longrunning import operations_pb2_grpc
from google.longrunning import operations_proto_pb2 as operations_pb2
from google.protobuf import duration_pb2
from supermew.v1 import evaluation_pb2, retrieval_pb2, retrieval_pb2_grpc

from bench._retrieval_rig import (
    SCIFACT_DIR,
    SciFact,
    bench_settings,
    doc_filename,
    quiet,
    scratch_db,
    selection,
    table,
)
from bench.evaluation_scifact import SET_ID, orchestrator, qrels_tsv
from retrieval_service.bootstrap import create_app, retrieval_server
from retrieval_service.core.identity import DEFAULT_KB

E = evaluation_pb2
INITIAL = DEFAULT_KB + "/indexes/initial"
WRITE = 16
#: Writes of WRITE abstracts timed idle, and during the build (medians: one write is noisy).
WRITES = 3


def documents(data: SciFact, ids: list[str]) -> list[retrieval_pb2.SourceDocument]:
    return [
        retrieval_pb2.SourceDocument(
            filename=doc_filename(d), document_id=d, content=data.corpus[d].encode()
        )
        for d in ids
    ]


async def ingest(
    stub: retrieval_pb2_grpc.RetrievalServiceStub, data: SciFact, ids: list[str]
) -> float:
    """Seconds of one IngestDocuments of `ids`."""
    started = time.perf_counter()
    await stub.IngestDocuments(retrieval_pb2.IngestDocumentsRequest(documents=documents(data, ids)))
    return time.perf_counter() - started


def fields(config: retrieval_pb2.IndexConfig) -> str:
    """An index config on one line."""
    return ", ".join(f"{f.name}={value}" for f, value in config.ListFields())


async def retrieve_ms(stub: retrieval_pb2_grpc.RetrievalServiceStub, claim: str) -> float:
    started = time.perf_counter()
    await stub.Retrieve(retrieval_pb2.RetrieveRequest(query=claim, top_k=10))
    return (time.perf_counter() - started) * 1000


async def evaluate(
    ev: object, ops: operations_pb2_grpc.OperationsStub, set_name: str, index: str
) -> E.EvaluationRun:
    operation = await ev.RunEvaluation(  # type: ignore[attr-defined]
        E.RunEvaluationRequest(
            evaluation_set=set_name,
            config=E.RunConfig(mode=E.RunConfig.RETRIEVAL, top_k=100, concurrency=4, index=index),
        )
    )
    while not operation.done:
        operation = await ops.WaitOperation(
            operations_pb2.WaitOperationRequest(
                name=operation.name, timeout=duration_pb2.Duration(seconds=5)
            )
        )
    if operation.HasField("error"):
        raise SystemExit(f"the run on {index} failed: {operation.error}")
    run = E.EvaluationRun()
    operation.response.Unpack(run)
    return run


async def run(args: argparse.Namespace) -> None:
    quiet()
    data, doc_ids, claim_ids = selection(args.data, args.limit, args.judged_share, args.claims)
    chosen = set(doc_ids)
    spare = [d for d in data.corpus if d not in chosen][: (2 * WRITES + 1) * WRITE]
    other = f"{DEFAULT_KB}/indexes/c{args.other_chunk_size}"
    with scratch_db("bench-indexes-") as db, tempfile.TemporaryDirectory() as folder:
        app = await create_app(bench_settings(db))
        server = retrieval_server(app, app.settings, port=0)
        port = await server.start()
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
        stub = retrieval_pb2_grpc.RetrievalServiceStub(channel)
        ops = operations_pb2_grpc.OperationsStub(channel)
        try:
            print(
                f"SciFact: {len(doc_ids)} abstracts, {len(claim_ids)} train claims; "
                f"{os.cpu_count()} cores",
                flush=True,
            )
            started = time.perf_counter()
            for i in range(0, len(doc_ids), 16):
                await ingest(stub, data, doc_ids[i : i + 16])
            print(f"ingest: {time.perf_counter() - started:.0f} s", flush=True)
            questions = [data.claims[c] for c in claim_ids]

            for q in questions[:10]:  # warm-up: the store just sealed its last ingest
                await retrieve_ms(stub, q)
            idle_ms = [await retrieve_ms(stub, q) for q in questions[: args.retrieves]]
            idle_writes = [
                await ingest(stub, data, spare[i * WRITE : (i + 1) * WRITE]) for i in range(WRITES)
            ]

            # The initial index's config with only the chunk size changed: the comparison is
            # of chunk sizes, not of overlaps or leaf headers (a field left at zero is zero).
            initial = (await stub.GetIndex(retrieval_pb2.GetIndexRequest(name=INITIAL))).config
            config = retrieval_pb2.IndexConfig()
            config.CopyFrom(initial)
            config.chunk_size = args.other_chunk_size
            print(f"{INITIAL}: {fields(initial)}\n{other}: {fields(config)}", flush=True)
            started = time.perf_counter()
            operation = await stub.CreateIndex(
                retrieval_pb2.CreateIndexRequest(
                    parent=DEFAULT_KB,
                    index_id=other.rsplit("/", 1)[1],
                    index=retrieval_pb2.Index(config=config),
                )
            )

            async def building() -> bool:
                request = operations_pb2.GetOperationRequest(name=operation.name)
                return not (await ops.GetOperation(request)).done

            busy_ms: list[float] = []
            busy_writes: list[float] = []
            while await building():
                for q in questions[: args.retrieves]:
                    ms = await retrieve_ms(stub, q)
                    if not await building():
                        break
                    busy_ms.append(ms)
                # Between rounds of reads, while the build still runs: one write (WRITES at most).
                if len(busy_writes) < WRITES and await building():
                    n = WRITES + len(busy_writes)
                    ids = spare[n * WRITE : (n + 1) * WRITE]
                    seconds = await ingest(stub, data, ids)
                    if await building():
                        busy_writes.append(seconds)
            final = await ops.WaitOperation(
                operations_pb2.WaitOperationRequest(
                    name=operation.name, timeout=duration_pb2.Duration(seconds=3600)
                )
            )
            build_seconds = time.perf_counter() - started
            if final.HasField("error"):
                raise SystemExit(f"the build failed: {final.error}")
            # READY and kept: every write still reaches both indexes, no build running.
            standby_write = await ingest(stub, data, spare[2 * WRITES * WRITE :])
            index = retrieval_pb2.Index()
            final.response.Unpack(index)
            meta = retrieval_pb2.CreateIndexMetadata()
            final.metadata.Unpack(meta)

            async with orchestrator(f"127.0.0.1:{port}", Path(folder)) as (ev, eops):
                created = await ev.CreateEvaluationSet(
                    E.CreateEvaluationSetRequest(
                        evaluation_set_id=SET_ID,
                        evaluation_set=E.EvaluationSet(display_name="SciFact"),
                    )
                )
                await ev.ImportEvaluationItems(
                    E.ImportEvaluationItemsRequest(
                        evaluation_set=created.name,
                        format=E.ImportEvaluationItemsRequest.BEIR,
                        queries=(args.data / "queries.jsonl").read_bytes(),
                        qrels=qrels_tsv(args.data, claim_ids),
                    )
                )
                a = await evaluate(ev, eops, created.name, INITIAL)
                b = await evaluate(ev, eops, created.name, other)
                compared = await ev.CompareEvaluationRuns(
                    E.CompareEvaluationRunsRequest(a=a.name, b=b.name)
                )
        finally:
            await channel.close()
            await server.stop(0)
            await app.aclose()

    print(
        f"\n(a) build of {other} (chunk_size {args.other_chunk_size}) beside {INITIAL} "
        f"(chunk_size {app.settings.chunk_size}): {index.documents_indexed} documents, "
        f"{meta.leaves_written} leaves in {build_seconds:.1f} s "
        f"({index.documents_indexed / build_seconds:.1f} documents/s)"
    )
    idle_p50, busy_p50 = statistics.median(idle_ms), statistics.median(busy_ms or [float("nan")])
    rows = [
        [
            "Retrieve p50 (ms)",
            f"{idle_p50:.1f}",
            f"{busy_p50:.1f}",
            f"{busy_p50 / idle_p50:.2f}",
            "≤ 1.5",
        ],
    ]
    idle_write = statistics.median(idle_writes)
    if busy_writes:
        busy_write = statistics.median(busy_writes)
        rows.append(
            [
                f"IngestDocuments of {WRITE} abstracts (s, median of {len(idle_writes)} / "
                f"{len(busy_writes)})",
                f"{idle_write:.2f}",
                f"{busy_write:.2f}",
                f"{busy_write / idle_write:.2f}",
                "≤ 2",
            ]
        )
    rows.append(
        [
            f"IngestDocuments of {WRITE} abstracts after it, the old index kept (s)",
            f"{idle_write:.2f}",
            f"{standby_write:.2f}",
            f"{standby_write / idle_write:.2f}",
            "",
        ]
    )
    print(f"\n(b) callers while the build runs ({len(busy_ms)} Retrieves during it):")
    print(table(rows, ["call", "idle", "during the build", "ratio", "wanted"]))
    if not busy_writes:
        print("the build ended before a write during it did: no write ratio measured")
    print(
        f"\n(c) CompareEvaluationRuns(a = {INITIAL}, b = {other}) over {compared.items_paired} "
        "claims, RETRIEVAL top_k=100:"
    )
    print(
        table(
            [
                [
                    m.metric,
                    f"{m.mean_a:.4f}",
                    f"{m.mean_b:.4f}",
                    f"{m.difference:+.4f}",
                    f"[{m.ci_low:+.4f}, {m.ci_high:+.4f}]",
                    f"{m.won}/{m.lost}/{m.tied}",
                ]
                for m in compared.metrics
            ],
            [
                "metric",
                "initial (800)",
                f"c{args.other_chunk_size}",
                "b − a",
                "95 % CI",
                "won/lost/tied",
            ],
        )
    )


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.index_generations")
    p.add_argument("--data", type=Path, default=SCIFACT_DIR)
    p.add_argument("--limit", type=int, default=600, help="abstracts to ingest (0 = all)")
    p.add_argument("--judged-share", type=float, default=0.25)
    p.add_argument("--claims", type=int, default=0, help="evaluate only the first N claims")
    p.add_argument("--retrieves", type=int, default=60, help="Retrieves per idle/busy sample")
    p.add_argument("--other-chunk-size", type=int, default=1600)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    asyncio.run(run(parse([] if argv is None else argv)))


if __name__ == "__main__":
    main(sys.argv[1:])
