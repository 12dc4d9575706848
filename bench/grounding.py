"""The built-in model's grounding check against claims labelled by hand
(`tests/data/grounding/claims.jsonl`, described in its README): each claim with its facts goes
through `check_grounding` as CheckGrounding sends it, and the verdict — supported (score at
least the 0.6 threshold), unsupported, or needing no check — is compared with the label.

Printed: claim-level accuracy overall, by kind and by language; the confusion of labels; the
time per claim; and every miss. `--held-out` reports the odd-numbered rows only (the rules
were tuned looking at the even ones); `--tuning` lists the misses of the even rows only."""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from orchestrator_service.grounding import DEFAULT_CITATION_THRESHOLD, claim_spans
from orchestrator_service.models.local import LocalModel

SET = Path(__file__).resolve().parents[1] / "tests" / "data" / "grounding" / "claims.jsonl"


def load(held_out: bool = False) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in SET.read_text(encoding="utf-8").splitlines() if line]
    if held_out:
        rows = [row for row in rows if _held_out(row)]
    return rows


def _held_out(row: dict[str, Any]) -> bool:
    return int(row["id"].rsplit("-", 1)[1]) % 2 == 1


async def verdicts(model: LocalModel, rows: list[dict[str, Any]]) -> tuple[list[str], float]:
    """The predicted label of each row, and the mean seconds per claim."""
    predicted, seconds = [], []
    for row in rows:
        answer = row["claim"]
        claims = [span.to_check(answer, len(row["facts"])) for span in claim_spans(answer)]
        start = time.perf_counter()
        result = await model.check_grounding(
            claims, row["facts"], threshold=DEFAULT_CITATION_THRESHOLD
        )
        seconds.append(time.perf_counter() - start)
        required = [v for v in result.claims if v.grounding_check_required]
        if not required:
            predicted.append("no_check")
        elif all(v.score >= DEFAULT_CITATION_THRESHOLD for v in required):
            predicted.append("supported")
        else:
            predicted.append("unsupported")
    return predicted, statistics.mean(seconds)


def report(
    rows: list[dict[str, Any]], predicted: list[str], per_claim: float, *, tuning: bool = False
) -> float:
    """Print the figures and the misses (with `tuning`, those of the even rows only, so the
    held-out figure stays honest); return the accuracy."""
    hits = [row["label"] == label for row, label in zip(rows, predicted, strict=True)]
    accuracy = sum(hits) / len(rows)
    print(f"claims: {len(rows)}   claim-level accuracy: {accuracy:.3f}")
    for key in ("kind", "lang"):
        groups: dict[str, list[bool]] = defaultdict(list)
        for row, hit in zip(rows, hits, strict=True):
            groups[row[key]].append(hit)
        print(
            f"  by {key}: "
            + "   ".join(
                f"{name} {sum(h) / len(h):.3f} ({len(h)})" for name, h in sorted(groups.items())
            )
        )
    confusion = Counter((row["label"], label) for row, label in zip(rows, predicted, strict=True))
    print(
        "  label → verdict: " + ", ".join(f"{a}→{b} {n}" for (a, b), n in sorted(confusion.items()))
    )
    print(f"  time per claim: {per_claim * 1000:.2f} ms")
    for row, label, hit in zip(rows, predicted, hits, strict=True):
        if not hit and not (tuning and _held_out(row)):
            print(
                f"  miss {row['id']} [{row['kind']}] labelled {row['label']}, judged {label}:",
                row["claim"],
            )
    return accuracy


async def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench grounding", description=__doc__)
    parser.add_argument("--held-out", action="store_true", help="the odd-numbered rows only")
    parser.add_argument(
        "--tuning", action="store_true", help="list the misses of the even-numbered rows only"
    )
    args = parser.parse_args(argv)
    rows = load(args.held_out)
    model = LocalModel(semantic=False)
    predicted, per_claim = await verdicts(model, rows)
    report(rows, predicted, per_claim, tuning=args.tuning)


if __name__ == "__main__":
    asyncio.run(main())
