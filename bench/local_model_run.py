"""End-to-end `Run` latency with the built-in local model on the bundled samples:
`make run`'s configuration — the retrieval service on Milvus Lite with the built-in
embedder, the orchestrator with no model endpoint — both served on loopback in this process.

Per question: Run p50/p95 beside one bare Retrieve RPC of the same question, so the table shows
what classification, grading, rewrite and the graph add on top of recall (which embeds the
query and searches, and dominates)."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Any

from supermew.v1 import orchestrator_pb2

from bench._local_stack import local_stack
from bench._retrieval_rig import (
    p50_p95,
    quiet,
    table,
)
from retrieval_service.bootstrap import seed_samples

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
ROUNDS = 30
QUESTIONS = (
    "成年人每晚需要睡多久？",
    "What is an event loop?",
    "这个角色的属性是什么？",
    "云存储套餐包含多少存储空间？",
    "What is the response time for support tickets?",
    "晚上喝茶会失眠吗？",
    "比较绿茶和红茶的发酵程度",
    "量子计算机的原理是什么？",
    "Why is Venus so hot?",
    "多肉要浇多少水？",
    "What does asyncio.gather do and how does asyncio.wait_for handle timeouts?",
)


async def _timed(call: Any, rounds: int) -> tuple[list[float], Any]:
    reply = await call()  # warm-up
    samples = []
    for _ in range(rounds):
        started = time.perf_counter()
        reply = await call()
        samples.append((time.perf_counter() - started) * 1000)
    return samples, reply


async def run(rounds: int) -> None:
    quiet()
    async with local_stack("bench-local-run-", lambda app: seed_samples(app, str(SAMPLES))) as s:
        rows: list[list[Any]] = []
        for question in QUESTIONS:
            request = orchestrator_pb2.RunRequest(question=question)
            runs, result = await _timed(lambda r=request: s.orchestrator.Run(r), rounds)
            bare, _ = await _timed(lambda q=question: s.retrieval.retrieve(q), rounds)
            route = result.route
            if result.rag_trace.HasField("rewrite_method"):
                route = f"rewrite ({result.rag_trace.rewrite_method}) → {route}"
            if result.rag_trace.complexity == "complex":
                route = f"complex → {route}"
            run50, run95 = p50_p95(runs)
            bare50, _ = p50_p95(bare)
            rows.append(
                [question, route, round(run50, 1), round(run95, 1), round(bare50, 1),
                 round(run50 / bare50, 2)]
            )  # fmt: skip
    print(
        f"Run through the real RPCs, local model, {len(list(SAMPLES.iterdir()))} sample documents, "
        f"{rounds} Runs per question after a warm-up (ms)"
    )
    print(
        table(
            rows,
            ["question", "route", "Run p50", "Run p95", "one Retrieve p50", "Run ÷ Retrieve"],
        )
    )
    print("a complex question retrieves once per sub-question, a rewrite twice")


def main(argv: list[str] | None = None) -> None:
    rounds = int(argv[0]) if argv else ROUNDS
    asyncio.run(run(rounds))


if __name__ == "__main__":
    main(sys.argv[1:])
