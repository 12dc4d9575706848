"""What Prometheus metrics cost a Run (issue 13 target: ≤ 1.05 × with METRICS_PORT set vs unset).

Two orchestrator stacks (production wiring, zero-latency scripted model and retrieval servers
on loopback), one with METRICS_PORT and one without, answer the same questions in alternating
order so that machine noise falls on both alike; each side is scraped once a second meanwhile,
as Prometheus would. Unset METRICS_PORT removes the per-RPC families and the endpoint; the
domain families are recorded either way (a labelled counter add is well under a microsecond),
so the ratio is what an operator pays for turning metrics on."""

from __future__ import annotations

import asyncio
import gc
import time

import httpx

from bench._orchestrator_rig import median, percentile
from tests.fakes.model_server import ModelScript, complexity, grade, rewrite
from tests.fakes.orchestrator_stack import Stack, start_stack
from tests.fakes.retrieval_servicer import RetrievalScript, chunk

TARGET_RATIO = 1.05
ROUNDS = 400
Q_FAST = "丹瑾是什么属性？"
Q_REWRITE = "请讲讲丹瑾在队伍里一般担任的职责以及配队思路"
DOCS = [chunk("roles.md", "1", "丹瑾：衍射属性。"), chunk("roles.md", "2", "卡卡罗：导电。")]


def _decide(task: str, question: str):
    if task == "complexity_classification":
        return complexity("simple", "单一")
    if task == "query_rewrite":
        return rewrite("step_back", "角色职责？")
    if question == Q_REWRITE:
        return grade("weak", "partial", "rewrite")
    return grade("strong", "sufficient", "answer")


async def _stack(**settings: object) -> Stack:
    ms = ModelScript()
    ms.fallback = _decide
    rs = RetrievalScript()
    for q in (Q_FAST, Q_REWRITE, f"{Q_REWRITE}\n\n退步问题：角色职责？"):
        rs.add(q, DOCS)
    return await start_stack(ms, rs, **settings)


async def _scraper(port: int, stop: asyncio.Event) -> int:
    scrapes = 0
    async with httpx.AsyncClient() as http:
        while not stop.is_set():
            (await http.get(f"http://127.0.0.1:{port}/metrics")).raise_for_status()
            scrapes += 1
            await asyncio.sleep(1.0)
    return scrapes


async def _measure(question: str) -> tuple[list[float], list[float], int]:
    off, on = await _stack(), await _stack(metrics_port=0)
    stop = asyncio.Event()
    port = on.app.server.observability.metrics_port
    assert port is not None
    scraper = asyncio.create_task(_scraper(port, stop))
    samples: dict[str, list[float]] = {"off": [], "on": []}
    try:
        for _ in range(50):  # warm both
            await off.run(question)
            await on.run(question)
        gc.collect()
        for i in range(ROUNDS):
            order = (("off", off), ("on", on)) if i % 2 else (("on", on), ("off", off))
            for name, stack in order:
                started = time.perf_counter()
                await stack.run(question)
                samples[name].append((time.perf_counter() - started) * 1000)
    finally:
        stop.set()
        scrapes = await scraper
        await off.aclose()
        await on.aclose()
    return samples["off"], samples["on"], scrapes


async def _main() -> None:
    print(f"Run latency, METRICS_PORT unset vs set ({ROUNDS} alternating Runs per side, ms)")
    print(
        f"{'question':<22} {'off p50':>8} {'on p50':>8} {'off p95':>8} {'on p95':>8} {'ratio':>6}"
    )
    for label, question in (("fast path", Q_FAST), ("rewrite (4 model)", Q_REWRITE)):
        off, on, scrapes = await _measure(question)
        ratio = median(on) / median(off)
        verdict = "ok" if ratio <= TARGET_RATIO else f"above {TARGET_RATIO}"
        print(
            f"{label:<22} {median(off):8.2f} {median(on):8.2f} {percentile(off, 95):8.2f} "
            f"{percentile(on, 95):8.2f} {ratio:6.3f}  ({verdict}; {scrapes} scrapes meanwhile)"
        )


def main() -> None:
    asyncio.run(_main())


if __name__ == "__main__":
    main()
