"""Orchestration overhead per Run with zero-latency fakes (target ≤ 3 ms p50; a published
LangGraph RAG pipeline adds ≈ 14 ms per query, a bare 6-node no-op LangGraph ≈ 1 ms here).

Two layers: the core (compiled graph + nodes + normalisation, in-memory clients) and the whole
Run RPC over loopback minus the bare downstream round trips it makes (one Retrieve RPC and one
model HTTP call for a fast-path question)."""

from __future__ import annotations

import asyncio
import gc
import time
from typing import Any

import grpc
import httpx
from supermew.v1 import retrieval_pb2, retrieval_pb2_grpc

from bench._orchestrator_rig import median, percentile
from orchestrator_service.graph import build_graphs
from orchestrator_service.orchestrator import Orchestrator
from tests.fakes.in_memory import InMemoryModel, InMemoryRetriever
from tests.fakes.model_server import ModelScript, complexity, grade, rewrite
from tests.fakes.orchestrator_stack import start_stack
from tests.fakes.retrieval_servicer import RetrievalScript, chunk

TARGET_MS, PUBLISHED_MS = 3.0, 14.0
Q_FAST = "丹瑾是什么属性？"
Q_MODEL = "请介绍一下公司年假制度里面关于新员工的具体规定内容"
Q_REWRITE = "请讲讲丹瑾在队伍里一般担任的职责以及配队思路"
Q_COMPLEX = "比较丹瑾与卡卡罗的战斗定位"
SUBS = ["丹瑾的定位？", "卡卡罗的定位？", "丹瑾的武器？", "卡卡罗的武器？"]
DOCS = [
    chunk("roles.md", "1", "丹瑾：衍射属性。"),
    chunk("roles.md", "2", "卡卡罗：导电。", rrf_rank=2),
]


def _decide(task: str, question: str | None) -> Any:
    if task == "complexity_classification":
        if question == Q_COMPLEX:
            return complexity("complex", "对比", SUBS)
        return complexity("simple", "单一")
    if task == "query_rewrite":
        return rewrite("step_back", "角色职责？")
    if question == Q_REWRITE:
        return grade("weak", "partial", "rewrite")
    return grade("strong", "sufficient", "answer")


async def _time(fn, n: int) -> list[float]:
    for _ in range(max(50, n // 10)):
        await fn()
    gc.collect()
    samples = []
    for _ in range(n):
        started = time.perf_counter()
        await fn()
        samples.append((time.perf_counter() - started) * 1000)
    return samples


async def _core() -> dict[str, list[float]]:
    core = Orchestrator(InMemoryModel(_decide), InMemoryRetriever(lambda q: DOCS), build_graphs())
    return {
        name: await _time(lambda q=q: core.run(q), 2000)
        for name, q in (
            ("simple, fast path (3 nodes)", Q_FAST),
            ("simple, model classified", Q_MODEL),
            ("rewrite path (5 nodes)", Q_REWRITE),
            ("complex, 4 sub-agents", Q_COMPLEX),
        )
    }


async def _rpc() -> tuple[list[float], list[float]]:
    ms = ModelScript()
    ms.fallback = _decide
    stack = await start_stack(ms, RetrievalScript().add(Q_FAST, DOCS))
    try:
        runs = await _time(lambda: stack.run(Q_FAST), 1000)
        async with (
            grpc.aio.insecure_channel(stack.retrieval.address) as channel,
            httpx.AsyncClient() as http,
        ):
            retrieve = retrieval_pb2_grpc.RetrievalServiceStub(channel).Retrieve
            body = {
                "model": "m",
                "messages": [{"role": "user", "content": f"<question>\n{Q_FAST}\n</question>"}],
                "response_format": {"json_schema": {"name": "evidence_grade"}},
            }

            async def bare() -> None:
                await retrieve(retrieval_pb2.RetrieveRequest(query=Q_FAST))
                await http.post(stack.model.base_url + "/chat/completions", json=body)

            baseline = await _time(bare, 1000)
        return runs, baseline
    finally:
        await stack.aclose()


def main() -> None:
    core = asyncio.run(_core())
    print(f"{'core path (in-memory clients)':<34} {'p50 ms':>8} {'p95 ms':>8} {'p50/target':>11}")
    for name, samples in core.items():
        p50, p95 = median(samples), percentile(samples, 0.95)
        print(f"{name:<34} {p50:>8.3f} {p95:>8.3f} {p50 / TARGET_MS:>11.2f}")
    runs, baseline = asyncio.run(_rpc())
    run50, run95 = median(runs), percentile(runs, 0.95)
    base50 = median(baseline)
    print(f"\nRun RPC, fast path, loopback fakes: p50 {run50:.3f} ms  p95 {run95:.3f} ms")
    print(f"bare downstream round trips (1 Retrieve + 1 model call): p50 {base50:.3f} ms")
    print(f"Run overhead beyond its round trips: p50 {run50 - base50:.3f} ms")
    headline = median(core["simple, fast path (3 nodes)"])
    print(
        f"\nratio: core p50 ÷ target {TARGET_MS} ms = {headline / TARGET_MS:.2f} (≤ 1 meets it); "
        f"÷ published {PUBLISHED_MS} ms = {headline / PUBLISHED_MS:.2f}"
    )


if __name__ == "__main__":
    main()
