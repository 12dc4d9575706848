"""SciFact measured twice in one run, on one store: the retrieval bench's way (Retrieve
top_k=100 per claim, documents ranked by their best chunk, `doc_metrics`) and through the
EvaluationService (a set, the train qrels imported as BEIR, RunEvaluation RETRIEVAL with
top_k=100, its metrics and per-item rankings). The figures must agree to 1e-9: the API reports
what the bench reports. Also the run's wall time against the bench's own loop.

    python -m bench.evaluation_scifact [--limit DOCS] [--judged-share S] [--claims N]
                                       [--concurrency N]

recall@100 is not one of the run's metrics (its cut-offs stop at 10), so its API figure is
computed from ListEvaluationResults' ranked_document_ids, the run's own rankings; nDCG@10 and
MRR@10 are the run's `ndcg@10` and `mrr@10` as EvaluationRun.metrics reports them.

The default is a small subset (300 abstracts, ≈ 3–6 minutes on 2 cores, the ingest nearly all
of it); `--limit 0` runs the whole corpus (≈ 35 min of ingest)."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import grpc
from google.longrunning import operations_pb2_grpc
from google.longrunning import operations_proto_pb2 as operations_pb2
from google.protobuf import duration_pb2
from supermew.v1 import evaluation_pb2, evaluation_pb2_grpc, retrieval_pb2

from bench._retrieval_rig import (
    MODES,
    SCIFACT_DIR,
    Endpoint,
    SciFact,
    bench_settings,
    doc_filename,
    doc_metrics,
    doc_ranking,
    quiet,
    scratch_db,
    selection,
    serve_modes,
    table,
)
from orchestrator_service.bootstrap import build_app
from orchestrator_service.settings import OrchestratorSettings
from retrieval_service.bootstrap import create_app

E = evaluation_pb2
TOP_K = 100  # the RPC's maximum, as bench.retrieval_scifact
TOLERANCE = 1e-9
SET_ID = "scifact"


async def ingest(endpoint: Endpoint, data: SciFact, doc_ids: list[str], batch: int) -> None:
    """The abstracts with document_id = the corpus `_id` (what BEIR qrels name) and filename
    `{_id}.txt` (what the bench ranks by)."""
    started = time.perf_counter()
    leaves = 0
    for i in range(0, len(doc_ids), batch):
        reply = await endpoint.stub.IngestDocuments(
            retrieval_pb2.IngestDocumentsRequest(
                documents=[
                    retrieval_pb2.SourceDocument(
                        filename=doc_filename(d), document_id=d, content=data.corpus[d].encode()
                    )
                    for d in doc_ids[i : i + batch]
                ]
            )
        )
        leaves += sum(r.l3_chunks for r in reply.documents)
    seconds = time.perf_counter() - started
    print(
        f"ingest: {len(doc_ids)} abstracts ({leaves} leaves) in {seconds:.0f} s, "
        f"{leaves / seconds:.1f} leaves/s",
        flush=True,
    )


async def bench_way(
    endpoint: Endpoint, data: SciFact, claim_ids: list[str]
) -> tuple[dict[str, float], float]:
    """(metric → mean over the claims, seconds): one Retrieve after another, as
    bench.retrieval_scifact's quality table."""
    sums = [0.0, 0.0, 0.0]
    started = time.perf_counter()
    for q in claim_ids:
        reply = await endpoint.retrieve(data.claims[q], TOP_K)
        ranking = doc_ranking([c.filename for c in reply.docs])
        for i, value in enumerate(doc_metrics(ranking, data.qrels[q])):
            sums[i] += value
    seconds = time.perf_counter() - started
    n = len(claim_ids)
    return {"nDCG@10": sums[0] / n, "recall@100": sums[1] / n, "MRR@10": sums[2] / n}, seconds


def qrels_tsv(data_dir: Path, claim_ids: list[str]) -> bytes:
    """The train qrels' header and the lines of the claims evaluated (the subset's)."""
    wanted = set(claim_ids)
    lines = (data_dir / "qrels" / "train.tsv").read_text(encoding="utf-8").splitlines()
    kept = [lines[0], *(line for line in lines[1:] if line.split("\t", 1)[0] in wanted)]
    return ("\n".join(kept) + "\n").encode()


@asynccontextmanager
async def orchestrator(
    retrieval_address: str, folder: Path
) -> AsyncIterator[
    tuple[evaluation_pb2_grpc.EvaluationServiceStub, operations_pb2_grpc.OperationsStub]
]:
    """The real orchestrator (built-in model, its own SQLite database in `folder`) in front of
    the bench's retrieval server, started as `python -m orchestrator_service` starts it."""
    app = build_app(
        OrchestratorSettings(
            _env_file=None,
            orchestrator_port=0,
            bind_host="127.0.0.1",
            retrieval_addr=retrieval_address,
            llm_base_url=None,
            log_level="WARNING",
            orchestrator_database_url=f"sqlite+aiosqlite:///{folder / 'orchestrator.sqlite3'}",
        )
    )
    await app.start()
    try:
        port = await app.server.start()
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield (
                evaluation_pb2_grpc.EvaluationServiceStub(channel),
                operations_pb2_grpc.OperationsStub(channel),
            )
    finally:
        await app.server.stop(0)
        await app.aclose()


async def api_way(
    evaluation: evaluation_pb2_grpc.EvaluationServiceStub,
    operations: operations_pb2_grpc.OperationsStub,
    data_dir: Path,
    data: SciFact,
    claim_ids: list[str],
    concurrency: int,
) -> tuple[dict[str, float], float, E.EvaluationRun]:
    """(metric → value, wall seconds of the run, the run): CreateEvaluationSet,
    ImportEvaluationItems (BEIR), RunEvaluation followed with WaitOperation, then
    ListEvaluationResults for recall@100."""
    created = await evaluation.CreateEvaluationSet(
        E.CreateEvaluationSetRequest(
            evaluation_set_id=SET_ID, evaluation_set=E.EvaluationSet(display_name="SciFact")
        )
    )
    imported = await evaluation.ImportEvaluationItems(
        E.ImportEvaluationItemsRequest(
            evaluation_set=created.name,
            format=E.ImportEvaluationItemsRequest.BEIR,
            queries=(data_dir / "queries.jsonl").read_bytes(),
            qrels=qrels_tsv(data_dir, claim_ids),
        )
    )
    if imported.items_imported != len(claim_ids):
        raise SystemExit(f"imported {imported.items_imported} items, expected {len(claim_ids)}")
    print(
        f"import: {imported.items_imported} items ({imported.queries_skipped} queries without "
        f"qrels skipped)",
        flush=True,
    )
    started = time.perf_counter()
    operation = await evaluation.RunEvaluation(
        E.RunEvaluationRequest(
            evaluation_set=created.name,
            config=E.RunConfig(mode=E.RunConfig.RETRIEVAL, top_k=TOP_K, concurrency=concurrency),
        )
    )
    while not operation.done:
        operation = await operations.WaitOperation(
            operations_pb2.WaitOperationRequest(
                name=operation.name, timeout=duration_pb2.Duration(seconds=5)
            )
        )
    seconds = time.perf_counter() - started
    if operation.HasField("error"):
        raise SystemExit(f"the run failed: {operation.error}")
    run = E.EvaluationRun()
    operation.response.Unpack(run)

    recall_sum = 0.0
    token = ""
    while True:
        page = await evaluation.ListEvaluationResults(
            E.ListEvaluationResultsRequest(run=run.name, page_size=1000, page_token=token)
        )
        for result in page.results:
            claim = result.item.rsplit("/", 1)[1]
            relevant = data.qrels[claim]
            recall_sum += len(relevant & set(result.ranked_document_ids[:100])) / len(relevant)
        if not (token := page.next_page_token):
            break
    figures = {
        "nDCG@10": run.metrics["ndcg@10"],
        "recall@100": recall_sum / run.items_done,
        "MRR@10": run.metrics["mrr@10"],
    }
    return figures, seconds, run


async def run(args: argparse.Namespace) -> None:
    quiet()
    data, doc_ids, claim_ids = selection(args.data, args.limit, args.judged_share, args.claims)
    with scratch_db("bench-evaluation-") as db:
        app = await create_app(bench_settings(db))
        print(
            f"SciFact: {len(doc_ids)} of {len(data.corpus)} abstracts, {len(claim_ids)} train "
            f"claims whose judged abstracts are all in; embedder {app.embedder.name}; "
            f"{os.cpu_count()} cores",
            flush=True,
        )
        try:
            modes = {"hybrid+merge": MODES["hybrid+merge"]}  # the service's defaults
            async with serve_modes(app, modes) as endpoints:
                endpoint = endpoints["hybrid+merge"]
                await ingest(endpoint, data, doc_ids, args.batch)
                bench, bench_seconds = await bench_way(endpoint, data, claim_ids)
                with tempfile.TemporaryDirectory(prefix="bench-evaluation-db-") as folder:
                    async with orchestrator(endpoint.address, Path(folder)) as (ev, ops):
                        api, run_seconds, evaluation_run = await api_way(
                            ev, ops, args.data, data, claim_ids, args.concurrency
                        )
        finally:
            await app.aclose()

    rows = []
    worst = 0.0
    for name in ("nDCG@10", "recall@100", "MRR@10"):
        difference = api[name] - bench[name]
        worst = max(worst, abs(difference))
        rows.append([name, f"{bench[name]:.6f}", f"{api[name]:.6f}", f"{difference:.1e}"])
    print(
        f"\nquality over {len(claim_ids)} claims, Retrieve top_k={TOP_K}, document level "
        f"(a document at its best chunk's rank):"
    )
    print(table(rows, ["metric", "bench (Retrieve + doc_metrics)", "EvaluationRun", "difference"]))
    print(
        "recall@100's API figure comes from ListEvaluationResults.ranked_document_ids "
        "(the run's metrics stop at @10)"
    )
    print(
        f"\nwall time: RunEvaluation → done {run_seconds:.2f} s ({evaluation_run.items_done} "
        f"items, {evaluation_run.items_failed} failed, concurrency {args.concurrency}); the "
        f"bench's Retrieve loop {bench_seconds:.2f} s; run ÷ loop "
        f"{run_seconds / bench_seconds:.2f}"
    )
    verdict = "agree" if worst <= TOLERANCE else "DISAGREE"
    print(f"largest |difference| {worst:.1e}: the two {verdict} (tolerance {TOLERANCE:.0e})")
    if worst > TOLERANCE:
        raise SystemExit(1)


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.evaluation_scifact")
    p.add_argument("--data", type=Path, default=SCIFACT_DIR)
    p.add_argument(
        "--limit",
        type=int,
        default=int(os.environ.get("BENCH_EVALUATION_LIMIT", "300")),
        help="abstracts to ingest (default 300); 0 = all 5,183 (≈ 35 min on 2 cores)",
    )
    p.add_argument("--judged-share", type=float, default=0.25)
    p.add_argument("--claims", type=int, default=0, help="evaluate only the first N claims")
    p.add_argument("--batch", type=int, default=16, help="abstracts per IngestDocuments call")
    p.add_argument("--concurrency", type=int, default=4, help="RunConfig.concurrency (1..16)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    asyncio.run(run(parse([] if argv is None else argv)))


if __name__ == "__main__":
    main(sys.argv[1:])
