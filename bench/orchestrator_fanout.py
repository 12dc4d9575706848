"""Fan-out: one complex question with 4 sub-questions against the orchestrator as its own
process, the scripted model server answering every call after 200 ms. Ratio = Run wall time ÷
the ideal of two model round trips (classification, then the four gradings side by side);
target ≤ 1.2, sub-agents run one after another would score ≈ 2.5 (five round trips)."""

from __future__ import annotations

import asyncio
import time

from supermew.v1 import orchestrator_pb2

from bench._orchestrator_rig import fakes, median, percentile, subprocess_service
from tests.fakes.model_server import ModelScript, complexity, grade
from tests.fakes.retrieval_servicer import RetrievalScript, chunk

LATENCY, RUNS, TARGET = 0.200, 15, 1.2
QUESTION = "比较丹瑾与卡卡罗的战斗定位和武器"
SUBS = ["丹瑾的战斗定位？", "卡卡罗的战斗定位？", "丹瑾的武器？", "卡卡罗的武器？"]


def _script() -> tuple[ModelScript, RetrievalScript]:
    ms = ModelScript()
    ms.add("complexity_classification", QUESTION, complexity("complex", "对比", SUBS))
    ms.fallback = lambda task, q: grade("strong", "sufficient", "answer")
    rs = RetrievalScript()
    for i, sub in enumerate(SUBS):
        rs.add(sub, [chunk("roles.md", str(i), f"{sub.rstrip('？')}：见角色手册第 {i} 节。")])
    return ms, rs


async def _run() -> tuple[list[float], int]:
    ms, rs = _script()
    async with (
        fakes(ms, rs, model_delay=LATENCY) as (model, retrieval),
        subprocess_service(model, retrieval) as service,
    ):
        request = orchestrator_pb2.RunRequest(question=QUESTION)
        first = await service.stub.Run(request, timeout=30)  # warm-up: channels, graph, connections
        sub_traces = len(first.rag_trace.sub_traces.items)
        walls = []
        for _ in range(RUNS):
            started = time.perf_counter()
            result = await service.stub.Run(request, timeout=30)
            walls.append(time.perf_counter() - started)
            assert result.route == "answer", result.route
        return walls, sub_traces


def main() -> None:
    walls, sub_traces = asyncio.run(_run())
    ideal = 2 * LATENCY
    p50, p95 = median(walls), percentile(walls, 0.95)
    print(
        f"complex question, {sub_traces} sub-questions, model latency {LATENCY * 1000:.0f} ms, "
        f"{RUNS} Runs after a warm-up"
    )
    print(f"Run wall time: p50 {p50 * 1000:.0f} ms, p95 {p95 * 1000:.0f} ms")
    print(f"ideal (classification + 4 gradings side by side): {ideal * 1000:.0f} ms")
    print(
        f"ratio: p50 ÷ ideal = {p50 / ideal:.2f} (target ≤ {TARGET}; sequential sub-agents "
        f"≈ {5 * LATENCY / ideal:.1f})"
    )


if __name__ == "__main__":
    main()
