"""Overload: a burst of 1,000 concurrent StreamRun calls against the orchestrator as its own
process (`python -m orchestrator_service`), the scripted model answering after 1 s (a short
LLM call) and the scripted retrieval service in this process, once per MAX_CONCURRENT_RPCS
value. Without a limit every call is admitted and all of them share one process's CPU, so
callers wait for much of the burst; with a limit below what the process holds at once, the
calls beyond it are refused with RESOURCE_EXHAUSTED (a retryable answer) and the admitted ones
keep their latency.

Ratio = p50 latency of admitted calls with the limit ÷ the same without one (lower is better).
The figures and what they mean for choosing the limit: docs/api.md, "Choosing
MAX_CONCURRENT_RPCS"."""

from __future__ import annotations

import asyncio
import os
import time

import grpc
from supermew.v1 import orchestrator_pb2

from bench._orchestrator_rig import fakes, percentile, subprocess_service
from tests.fakes.model_server import ModelScript, complexity, grade
from tests.fakes.retrieval_servicer import RetrievalScript, chunk

BURST, LATENCY = 1000, 1.0
LIMITS = (100_000, 256, 64)  # 100,000 = no effective limit
QUESTION = "丹瑾是什么属性？"


def _script() -> tuple[ModelScript, RetrievalScript]:
    ms = ModelScript()
    ms.fallback = lambda task, q: (
        complexity("simple", "单一")
        if task == "complexity_classification"
        else grade("strong", "sufficient", "answer")
    )
    return ms, RetrievalScript().add(QUESTION, [chunk("roles.md", "1", "丹瑾：衍射属性。")])


async def _burst(stub: object) -> tuple[list[float], list[float], int]:
    """(latencies of answered calls, latencies of refusals, other failures)."""
    answered: list[float] = []
    refused: list[float] = []
    other = 0
    request = orchestrator_pb2.RunRequest(question=QUESTION)

    async def call() -> None:
        nonlocal other
        started = time.perf_counter()
        try:
            async for _ in stub.StreamRun(request, timeout=300):  # type: ignore[attr-defined]
                pass
            answered.append(time.perf_counter() - started)
        except grpc.aio.AioRpcError as err:
            if err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
                refused.append(time.perf_counter() - started)
            else:
                other += 1

    await asyncio.gather(*(call() for _ in range(BURST)))
    return answered, refused, other


async def _run() -> list[tuple[int, list[float], list[float], int, float]]:
    rows = []
    ms, rs = _script()
    for limit in LIMITS:
        os.environ["MAX_CONCURRENT_RPCS"] = str(limit)
        async with (
            fakes(ms, rs, model_delay=LATENCY) as (model, retrieval),
            subprocess_service(model, retrieval) as service,
        ):
            await _burst_warm_up(service.stub)
            started = time.perf_counter()
            answered, refused, other = await _burst(service.stub)
            rows.append((limit, answered, refused, other, time.perf_counter() - started))
    os.environ.pop("MAX_CONCURRENT_RPCS", None)
    return rows


async def _burst_warm_up(stub: object) -> None:
    request = orchestrator_pb2.RunRequest(question=QUESTION)
    await asyncio.gather(*(stub.Run(request, timeout=60) for _ in range(16)))  # type: ignore[attr-defined]


def main() -> None:
    rows = asyncio.run(_run())
    print(f"burst of {BURST} concurrent StreamRun calls, model latency {LATENCY * 1000:.0f} ms, "
          f"{os.cpu_count()} cores")  # fmt: skip
    head = ("limit", "answered", "refused", "other", "p50 s", "p95 s", "refusal p50 ms",
            "wall s", "ratio")  # fmt: skip
    print(" ".join(f"{h:>14}" for h in head))
    baseline = percentile(rows[0][1], 0.5) if rows[0][1] else float("nan")
    for limit, answered, refused, other, wall in rows:
        p50 = percentile(answered, 0.5) if answered else float("nan")
        p95 = percentile(answered, 0.95) if answered else float("nan")
        refusal = percentile(refused, 0.5) * 1000 if refused else float("nan")
        label = "none" if limit >= BURST else str(limit)
        cells = (label, len(answered), len(refused), other, f"{p50:.2f}", f"{p95:.2f}",
                 f"{refusal:.0f}", f"{wall:.1f}", f"{p50 / baseline:.2f}")  # fmt: skip
        print(" ".join(f"{c:>14}" for c in cells))


if __name__ == "__main__":
    main()
