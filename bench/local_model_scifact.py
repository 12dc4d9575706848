"""The local grader against SciFact's relevance judgements: ingest
abstracts through the real retrieval service, Retrieve each training claim (the service's
default top_k, as the orchestrator asks), grade the evidence with the built-in local model, and
compare its verdict with the judgements:

- relevant = at least one of the claim's judged abstracts is among the retrieved chunks;
- graded answerable = evidence_grade's answerability is sufficient or partial (the route is
  not no_knowledge); "answer" counts only the strict route = answer.

Prints precision and recall of "answerable" (and of the strict route) over the claims, for
the claims with even ids (the grader's thresholds were calibrated on these), with odd ids
(held out) and all of them.

    python -m bench.local_model_scifact [--limit DOCS] [--claims N] [--db PATH]
        [--unseen N] [--cache FILE]

`--unseen N` adds N claims none of whose judged abstracts is in the store (negatives: an
answer for them is a false one); `--cache FILE` keeps the retrieved chunks, so calibrating
the grader does not re-embed the corpus.

`--db` reuses a store built by `bench.retrieval_scifact` (same filenames), so the full corpus
need not be embedded twice; the default subset is `_retrieval_rig.subset`'s."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
from orchestrator_service.models.local.grading import WINDOW
from retrieval_service.bootstrap import create_app
from shared.codec import chunk_from_proto


def precision_recall(counts: Counter[tuple[bool, bool]]) -> tuple[float, float]:
    """From (predicted, relevant) counts."""
    tp, fp, fn = counts[(True, True)], counts[(True, False)], counts[(False, True)]
    return (tp / (tp + fp) if tp + fp else 0.0), (tp / (tp + fn) if tp + fn else 0.0)


async def retrieve_all(args: argparse.Namespace) -> tuple[dict[str, Any], int]:
    """{claim id: retrieved chunks} for the evaluated claims and `--unseen` claims whose judged
    abstracts are not in the store, and the top_k used. With `--cache`, read from / written to
    that JSON file, so the grader can be re-run without re-embedding anything."""
    if args.cache and Path(args.cache).exists():
        cached = json.loads(Path(args.cache).read_text(encoding="utf-8"))
        return cached["retrieved"], int(cached["top_k"])
    data, doc_ids, claim_ids = selection(args.data, args.limit, args.judged_share, args.claims)
    unseen = unseen_claims(data, set(doc_ids), args.unseen)
    retrieved: dict[str, Any] = {}
    with scratch_db("bench-local-scifact-", args.db) as db:
        app = await create_app(bench_settings(db))
        try:
            async with serve_modes(app, {"hybrid+merge": MODES["hybrid+merge"]}) as endpoints:
                endpoint = endpoints["hybrid+merge"]
                todo = await missing_abstracts(app, doc_ids)
                if todo:
                    await ingest(endpoint, data, todo, args.batch)
                for q in [*claim_ids, *unseen]:
                    reply = await endpoint.retrieve(data.claims[q])
                    retrieved[q] = {
                        "claim": data.claims[q],
                        "qrels": sorted(data.qrels[q]),
                        "in_store": q not in unseen,
                        "docs": [chunk_from_proto(c) for c in reply.docs],
                    }
                top_k = endpoint.config.top_k
        finally:
            await app.aclose()
    meta = {"abstracts": len(doc_ids), "top_k": top_k, "retrieved": retrieved}
    if args.cache:
        Path(args.cache).write_text(json.dumps(meta, ensure_ascii=False), encoding="utf-8")
    return retrieved, top_k


def unseen_claims(data: Any, stored: set[str], count: int) -> list[str]:
    """The first `count` claims none of whose judged abstracts is stored: every chunk
    retrieved for them is off-target, so each answer route is a false one."""
    if count <= 0:
        return []
    return [q for q in data.qrels if not data.qrels[q] & stored and q in data.claims][:count]


@dataclass
class Tally:
    """Counts for one group of claims."""

    claims: int = 0
    relevant: int = 0
    answers: int = 0
    answers_supported: int = 0  # a judged abstract in the graded window
    answered_relevant: int = 0
    answerable: Counter[tuple[bool, bool]] = field(default_factory=Counter)

    def add(self, route: str, answerability: str, *, relevant: bool, supported: bool) -> None:
        """One graded claim: `relevant` = a judged abstract retrieved, `supported` = one in the
        graded window."""
        self.claims += 1
        self.relevant += relevant
        self.answerable[(answerability != "none", relevant)] += 1
        if route == "answer":
            self.answers += 1
            self.answers_supported += supported
            self.answered_relevant += relevant

    def row(self, label: str) -> list[object]:
        p, r = precision_recall(self.answerable)
        return [
            label,
            self.claims,
            self.relevant,
            self.answers,
            _ratio(self.answered_relevant, self.relevant),
            _ratio(self.answers_supported, self.answers),
            round(p, 3),
            round(r, 3),
        ]


def _ratio(part: int, whole: int) -> float | str:
    return round(part / whole, 3) if whole else "–"


async def run(args: argparse.Namespace) -> None:
    quiet()
    retrieved, top_k = await retrieve_all(args)
    model = LocalModel()
    groups = {
        "in store, even ids (calibration)": Tally(),
        "in store, odd ids (held out)": Tally(),
        "in store": Tally(),
        "unseen": Tally(),
    }
    verdicts: Counter[tuple[str, bool]] = Counter()
    for claim_id, item in retrieved.items():
        docs, judged = item["docs"], set(item["qrels"])
        relevant = any(d["filename"].removesuffix(".txt") in judged for d in docs)
        verdict = await model.grade_evidence(item["claim"], docs)
        verdicts[(verdict.route, relevant)] += 1
        if item["in_store"]:
            half = "even ids (calibration)" if int(claim_id) % 2 == 0 else "odd ids (held out)"
            tallies = [groups["in store"], groups[f"in store, {half}"]]
        else:
            tallies = [groups["unseen"]]
        supported = any(d["filename"].removesuffix(".txt") in judged for d in docs[:WINDOW])
        for tally in tallies:
            tally.add(verdict.route, verdict.answerability, relevant=relevant, supported=supported)
    print(
        f"SciFact train claims, {len(retrieved)} graded, top_k {top_k} chunks per claim. "
        "'in store': claims whose judged abstracts are all in the store (the issue's "
        "population); 'unseen': claims with none stored (every answer is a false one)."
    )
    headers = ["claims", "n", "judged retrieved", "answered", "answer recall", "answer precision"]
    headers += ["answerable precision", "answerable recall"]
    print(table([tally.row(label) for label, tally in groups.items() if tally.claims], headers))
    print(
        "answer recall = route answer among claims whose judged abstract is retrieved; "
        f"answer precision = a judged abstract in the graded window (top {WINDOW}) of the "
        "answered claims; answerable = not no_knowledge, relevant = a judged abstract retrieved"
    )
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
    p.add_argument("--unseen", type=int, default=0, help="also N claims with no stored abstract")
    p.add_argument("--cache", help="JSON file of the retrieved chunks (read if present)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    asyncio.run(run(parse([] if argv is None else argv)))


if __name__ == "__main__":
    main(sys.argv[1:])
