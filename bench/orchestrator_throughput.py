"""Throughput: 64 concurrent callers issuing Runs back to back against the orchestrator as its
own process (`python -m orchestrator_service`), the scripted model server answering after 50 ms
and the scripted retrieval service in this process. Ratio = achieved runs/s ÷ the ideal
64 ÷ per-run model time (target ≥ 0.8).

The ideal assumes the orchestrator costs no CPU. It also prints what each Run costs in CPU in
the orchestrator process and in this one (callers + fakes), so a shortfall can be read as
"model-bound" or "CPU-bound": the orchestrator cannot exceed 1 ÷ its CPU seconds per Run."""

from __future__ import annotations

import asyncio
import os
import time

from supermew.v1 import orchestrator_pb2

from bench._orchestrator_rig import Service, fakes, process_cpu_seconds, subprocess_service
from tests.fakes.model_server import ModelScript, complexity, grade
from tests.fakes.retrieval_servicer import RetrievalScript, chunk

CONCURRENCY, LATENCY, SECONDS, TARGET = 64, 0.050, 6.0, 0.8
DOCS = [chunk("roles.md", "1", "丹瑾：衍射属性。")]
# (label, question, model round trips per run)
CASES = [
    ("fast-path simple (1 model call)", "丹瑾是什么属性？", 1),
    ("model-classified simple (2 calls)", "请介绍一下公司年假制度里面关于新员工的具体规定内容", 2),
]


def _script() -> tuple[ModelScript, RetrievalScript]:
    ms = ModelScript()
    ms.fallback = lambda task, q: (
        complexity("simple", "单一")
        if task == "complexity_classification"
        else grade("strong", "sufficient", "answer")
    )
    rs = RetrievalScript()
    for _, question, _ in CASES:
        rs.add(question, DOCS)
    return ms, rs


async def _closed_loop(service: Service, question: str, seconds: float) -> tuple[int, float]:
    """CONCURRENCY callers, each issuing Runs back to back for `seconds`."""
    done = 0
    stop_at = time.perf_counter() + seconds

    async def caller() -> None:
        nonlocal done
        request = orchestrator_pb2.RunRequest(question=question)
        while time.perf_counter() < stop_at:
            result = await service.stub.Run(request, timeout=30)
            assert result.route == "answer", result.route
            done += 1

    started = time.perf_counter()
    await asyncio.gather(*(caller() for _ in range(CONCURRENCY)))
    return done, time.perf_counter() - started


async def _run() -> list[tuple[str, float, float, float, float]]:
    rows = []
    ms, rs = _script()
    async with (
        fakes(ms, rs, model_delay=LATENCY) as (model, retrieval),
        subprocess_service(model, retrieval) as service,
    ):
        for label, question, trips in CASES:
            await _closed_loop(service, question, 1.0)  # warm-up
            model.requests.clear()
            server_cpu, own_cpu = service.cpu_seconds(), process_cpu_seconds(os.getpid())
            done, wall = await _closed_loop(service, question, SECONDS)
            server_ms = (service.cpu_seconds() - server_cpu) * 1000 / done
            own_ms = (process_cpu_seconds(os.getpid()) - own_cpu) * 1000 / done
            ideal = CONCURRENCY / (trips * LATENCY)
            rows.append((label, done / wall, ideal, server_ms, own_ms))
    return rows


def main() -> None:
    rows = asyncio.run(_run())
    print(
        f"{CONCURRENCY} concurrent callers, model latency {LATENCY * 1000:.0f} ms, "
        f"{SECONDS:.0f} s per case, {os.cpu_count()} cores"
    )
    head = ["case", "runs/s", "ideal", "ratio", "orch CPU ms/run", "CPU ceiling", "bench CPU ms"]
    print(f"{head[0]:<36} {head[1]:>8} {head[2]:>8} {head[3]:>6} {head[4]:>15} {head[5]:>11} "
          f"{head[6]:>12}")  # fmt: skip
    for label, achieved, ideal, server_ms, own_ms in rows:
        print(
            f"{label:<36} {achieved:>8.1f} {ideal:>8.1f} {achieved / ideal:>6.2f} "
            f"{server_ms:>15.2f} {1000 / server_ms:>11.0f} {own_ms:>12.2f}"
        )
    print(
        f"ratio target ≥ {TARGET}. CPU ceiling = 1000 ÷ orchestrator CPU ms per Run: the most "
        "runs/s one orchestrator process (one core, the GIL) can do whatever the model latency."
    )


if __name__ == "__main__":
    main()
