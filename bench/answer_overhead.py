"""What a grounded answer adds to a Run, with the built-in local model on the bundled
samples: `make run`'s configuration (the retrieval service on Milvus Lite with the built-in
embedder, the orchestrator with no model endpoint) served on loopback in this process.

Per answered sample question: Run p50 with `generate_answer` false and true, alternated round by
round so a busy neighbour core weighs on both alike, and their ratio. The local answer is pure
Python over the final docs, so the ratio shows what extraction and citation cost next to the
recall the Run already paid for; the last columns time that answer alone, in process, and the
grounding check every answer goes through (its share of Run+answer p50 is what it costs a Run)."""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from typing import Any

from supermew.v1 import orchestrator_pb2, orchestrator_pb2_grpc

from bench._local_stack import local_stack
from bench._retrieval_rig import (
    p50_p95,
    quiet,
    table,
)
from bench.local_model_run import SAMPLES
from orchestrator_service.answer import build_citations, clean_markers
from orchestrator_service.grounding import DEFAULT_CITATION_THRESHOLD, claim_spans
from orchestrator_service.models.local.answer import answer_pieces
from orchestrator_service.models.local.grounding import check, forget_facts
from retrieval_service.bootstrap import seed_samples
from shared.codec import chunk_from_proto

ROUNDS = 30
QUESTIONS = (
    "成年人每晚需要睡多久？",
    "What is an event loop?",
    "喝茶会影响睡眠吗？",
    "How much water do succulents need?",
    "多肉要浇多少水？",
    "比较绿茶和红茶的发酵程度",
)


async def _measure(
    stub: orchestrator_pb2_grpc.OrchestratorServiceStub, question: str, rounds: int
) -> tuple[list[float], list[float], orchestrator_pb2.RunResult]:
    plain = orchestrator_pb2.RunRequest(question=question)
    answered = orchestrator_pb2.RunRequest(question=question, generate_answer=True)
    await stub.Run(plain)  # warm-up
    result = await stub.Run(answered)
    without: list[float] = []
    with_answer: list[float] = []
    for _ in range(rounds):
        for request, samples in ((plain, without), (answered, with_answer)):
            started = time.perf_counter()
            await stub.Run(request)
            samples.append((time.perf_counter() - started) * 1000)
    return without, with_answer, result


def _answer_alone(result: orchestrator_pb2.RunResult, repeats: int = 200) -> float:
    """p50 µs of the local answer itself over the Run's final docs: extraction, marker
    cleaning and citations, without the RPC and the workflow around them."""
    docs = [chunk_from_proto(doc) for doc in result.docs]
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        text = clean_markers("".join(answer_pieces(result.question, docs)), len(docs))
        build_citations(text, docs)
        samples.append((time.perf_counter() - started) * 1e6)
    return p50_p95(samples)[0]


def _check_alone(result: orchestrator_pb2.RunResult, repeats: int = 200) -> float:
    """p50 µs of the grounding check of the answer's claims over the Run's final docs, as the
    orchestrator runs it for every generated answer (docs/api.md#grounding-check)."""
    text = result.answer.text
    facts = [doc.text for doc in result.docs]
    claims = [span.to_check(text, len(facts)) for span in claim_spans(text)]
    samples = []
    for _ in range(repeats):
        forget_facts()  # each Run meets its docs afresh
        started = time.perf_counter()
        check(claims, facts, DEFAULT_CITATION_THRESHOLD)
        samples.append((time.perf_counter() - started) * 1e6)
    return p50_p95(samples)[0]


async def run(rounds: int) -> None:
    quiet()
    rows: list[list[Any]] = []
    async with local_stack("bench-answer-", lambda app: seed_samples(app, str(SAMPLES))) as s:
        for question in QUESTIONS:
            without, with_answer, result = await _measure(s.orchestrator, question, rounds)
            plain50, _ = p50_p95(without)
            answer50, answer95 = p50_p95(with_answer)
            rows.append(
                [question, result.route, len(result.answer.citations),
                 round(plain50, 1), round(answer50, 1), round(answer95, 1),
                 round(answer50 / plain50, 2), round(_answer_alone(result), 1),
                 round(_check_alone(result), 1)]
            )  # fmt: skip
    print(
        f"Run through the real RPCs, local model, {len(list(SAMPLES.iterdir()))} sample documents, "
        f"{rounds} rounds per question after a warm-up, with and without the answer alternated (ms)"
    )
    headers = ["question", "route", "cited", "Run p50", "Run+answer p50", "Run+answer p95",
               "answer overhead (÷)", "answer alone p50 (µs)", "check alone p50 (µs)"]  # fmt: skip
    print(table(rows, headers))
    ratios = sorted(row[6] for row in rows)
    alone = sorted(row[7] / 1000 / row[3] for row in rows)
    print(
        f"answer overhead over Run (p50 ÷ p50): median {statistics.median(ratios):.2f}×, "
        f"range {ratios[0]:.2f}–{ratios[-1]:.2f}× (round-to-round noise included); the answer "
        f"alone is {alone[0]:.1%}–{alone[-1]:.1%} of a Run p50"
    )
    # The check runs inside Run+answer: its share is what the Run p50 gained by it.
    checked = sorted(row[4] / (row[4] - row[8] / 1000) for row in rows if row[1] == "answer")
    if checked:
        print(
            f"grounding check: Run+answer p50 ÷ (the same without the check's time): median "
            f"{statistics.median(checked):.3f}×, range {checked[0]:.3f}–{checked[-1]:.3f}×"
        )


def main(argv: list[str] | None = None) -> None:
    rounds = int(argv[0]) if argv else ROUNDS
    asyncio.run(run(rounds))


if __name__ == "__main__":
    main(sys.argv[1:])
