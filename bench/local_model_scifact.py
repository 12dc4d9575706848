"""The local grader against SciFact's relevance judgements (issue 3 "Benchmark"): ingest
abstracts through the real retrieval service, Retrieve each training claim (the service's
default top_k, as the orchestrator asks), grade the evidence with the built-in local model, and
compare its verdict with the judgements:

- relevant = at least one of the claim's judged abstracts is among the retrieved chunks;
- graded answerable = evidence_grade's answerability is sufficient or partial (the route is
  not no_knowledge); "answer" counts only the strict route = answer.

Prints precision and recall of "answerable" (and of the strict route) over the claims.

    python -m bench.local_model_scifact [--limit DOCS] [--claims N] [--db PATH]

`--db` reuses a store built by `bench.retrieval_scifact` (same filenames), so the full corpus
need not be embedded twice; the default subset is `_retrieval_rig.subset`'s."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections import Counter
from pathlib import Path

from bench._retrieval_rig import (
    MODES,
    SCIFACT_DIR,
    bench_settings,
    missing_abstracts,
    quiet,
    scratch_db,
    selection,
    serve_modes,
    table,
)
from bench.retrieval_scifact import ingest
from orchestrator_service.models.local import LocalModel
from retrieval_service.app import create_app
from shared.codec import chunk_from_proto


def precision_recall(counts: Counter[tuple[bool, bool]]) -> tuple[float, float]:
    """From (predicted, relevant) counts."""
    tp, fp, fn = counts[(True, True)], counts[(True, False)], counts[(False, True)]
    return (tp / (tp + fp) if tp + fp else 0.0), (tp / (tp + fn) if tp + fn else 0.0)


async def run(args: argparse.Namespace) -> None:
    quiet()
    data, doc_ids, claim_ids = selection(args.data, args.limit, args.judged_share, args.claims)
    model = LocalModel()
    with scratch_db("bench-local-scifact-", args.db) as db:
        app = await create_app(bench_settings(db))
        try:
            async with serve_modes(app, {"hybrid+merge": MODES["hybrid+merge"]}) as endpoints:
                endpoint = endpoints["hybrid+merge"]
                todo = await missing_abstracts(app, doc_ids)
                if todo:
                    await ingest(endpoint, data, todo, args.batch)
                answerable: Counter[tuple[bool, bool]] = Counter()
                strict: Counter[tuple[bool, bool]] = Counter()
                verdicts: Counter[tuple[str, bool]] = Counter()
                for q in claim_ids:
                    reply = await endpoint.retrieve(data.claims[q])
                    docs = [chunk_from_proto(c) for c in reply.docs]
                    relevant = any(
                        d["filename"].removesuffix(".txt") in data.qrels[q] for d in docs
                    )
                    verdict = await model.grade_evidence(data.claims[q], docs)
                    answerable[(verdict.answerability != "none", relevant)] += 1
                    strict[(verdict.route == "answer", relevant)] += 1
                    verdicts[(verdict.route, relevant)] += 1
        finally:
            await app.aclose()
    n = len(claim_ids)
    relevant_n = sum(v for (_, rel), v in answerable.items() if rel)
    print(
        f"SciFact: {len(doc_ids)} abstracts, {n} train claims, top_k "
        f"{endpoint.config.top_k} chunks per claim; a judged abstract retrieved for "
        f"{relevant_n} claims ({relevant_n / n:.0%}), none for {n - relevant_n}"
    )
    rows = []
    kinds = (("answerable (not no_knowledge)", answerable), ("route = answer", strict))
    for label, counts in kinds:
        p, r = precision_recall(counts)
        agree = (counts[(True, True)] + counts[(False, False)]) / n
        rows.append([label, round(p, 3), round(r, 3), round(agree, 3)])
    print(table(rows, ["graded as", "precision", "recall", "agreement"]))
    routes = sorted({route for route, _ in verdicts})
    print(
        table(
            [[route, verdicts[(route, True)], verdicts[(route, False)]] for route in routes],
            ["local route", "judged abstract retrieved", "none retrieved"],
        )
    )


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.local_model_scifact")
    p.add_argument("--data", type=Path, default=SCIFACT_DIR)
    p.add_argument("--limit", type=int, default=int(os.environ.get("BENCH_SCIFACT_LIMIT", "1000")))
    p.add_argument("--judged-share", type=float, default=0.25)
    p.add_argument("--claims", type=int, default=0, help="evaluate only the first N claims")
    p.add_argument("--db", default=os.environ.get("BENCH_SCIFACT_DB"), help="reuse this store")
    p.add_argument("--batch", type=int, default=16, help="abstracts per IngestDocuments call")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    asyncio.run(run(parse([] if argv is None else argv)))


if __name__ == "__main__":
    main(sys.argv[1:])
