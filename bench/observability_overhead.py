"""What metrics and traces cost a Run (targets: ≤ 1.05 × with METRICS_PORT set and the
trace exporter off, ≤ 1.15 × with traces exported too).

Three orchestrator stacks (production wiring, zero-latency scripted model and retrieval servers
on loopback) answer the same questions in rotating order so that machine noise falls on all
alike: `off` (no METRICS_PORT, no OTEL_EXPORTER_OTLP_ENDPOINT), `metrics` (METRICS_PORT set,
exporter off) and `traced` (METRICS_PORT set and traces exported by OTLP/HTTP to a receiver in
its own process, as a collector is; the SDK's default batching). The metrics sides are scraped
once a second meanwhile, as Prometheus would. Unset METRICS_PORT removes the per-RPC families
and the endpoint; the domain families are recorded either way (a labelled counter add is well
under a microsecond).

Tracing is per process: it is configured after the first two stacks are built, so they have no
tracing interceptors and their span helpers find no recording span and return at once (what a
process without an endpoint does, plus one context lookup per helper)."""

from __future__ import annotations

import asyncio
import gc
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx

from bench._orchestrator_rig import ROOT, median, percentile
from shared.tracing import configure_tracing, shutdown_tracing
from tests.fakes.model_server import ModelScript, complexity, grade, rewrite
from tests.fakes.orchestrator_stack import Stack, start_stack
from tests.fakes.retrieval_servicer import RetrievalScript, chunk

TARGET_RATIO = 1.05
TARGET_TRACED_RATIO = 1.15
SIDES = ("off", "metrics", "traced")
OTEL_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_SERVICE_NAME")
ROUNDS = 400
Q_FAST = "丹瑾是什么属性？"
Q_REWRITE = "请讲讲丹瑾在队伍里一般担任的职责以及配队思路"
DOCS = [chunk("roles.md", "1", "丹瑾：衍射属性。"), chunk("roles.md", "2", "卡卡罗：导电。")]


def _decide(task: str, question: str | None) -> Any:
    if task == "complexity_classification":
        return complexity("simple", "单一")
    if task == "query_rewrite":
        return rewrite("step_back", "角色职责？")
    if question == Q_REWRITE:
        return grade("weak", "partial", "rewrite")
    return grade("strong", "sufficient", "answer")


async def _stack(**settings: Any) -> Stack:
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


@contextmanager
def _collector() -> Iterator[tuple[str, list[int]]]:
    """An OTLP receiver process; yields its endpoint and, once closed, the spans it got."""
    receiver = subprocess.Popen(
        [sys.executable, "-m", "tests.fakes.otlp_receiver"],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert receiver.stdin is not None and receiver.stdout is not None
    received: list[int] = []
    try:
        yield f"http://127.0.0.1:{receiver.stdout.readline().strip()}", received
    finally:
        receiver.stdin.close()
        received.append(int(receiver.stdout.readline().strip() or 0))
        receiver.wait()


async def _measure(question: str, endpoint: str) -> tuple[dict[str, list[float]], int]:
    off, metrics = await _stack(), await _stack(metrics_port=0)
    values = (endpoint, "http/protobuf", "bench-orchestrator")
    os.environ.update(zip(OTEL_VARIABLES, values, strict=True))
    assert configure_tracing("bench-orchestrator")
    traced = await _stack(metrics_port=0)
    stacks = {"off": off, "metrics": metrics, "traced": traced}
    stop = asyncio.Event()
    scrapers = []
    for stack in (metrics, traced):
        port = stack.app.server.observability.metrics_port
        assert port is not None
        scrapers.append(asyncio.create_task(_scraper(port, stop)))
    samples: dict[str, list[float]] = {side: [] for side in SIDES}
    try:
        for _ in range(50):  # warm all
            for stack in stacks.values():
                await stack.run(question)
        gc.collect()
        for i in range(ROUNDS):
            for k in range(len(SIDES)):
                name = SIDES[(i + k) % len(SIDES)]
                started = time.perf_counter()
                await stacks[name].run(question)
                samples[name].append((time.perf_counter() - started) * 1000)
    finally:
        stop.set()
        scrapes = sum([await scraper for scraper in scrapers])
        for stack in stacks.values():
            await stack.aclose()
        shutdown_tracing()
        for name in OTEL_VARIABLES:
            os.environ.pop(name, None)
    return samples, scrapes


async def _main() -> None:
    print(
        f"Run latency: off / METRICS_PORT set, exporter off / metrics + traces exported "
        f"({ROUNDS} rotating Runs per side, ms)"
    )
    print(
        f"{'question':<20} {'off p50':>8} {'metr p50':>8} {'trace p50':>9} {'off p95':>8} "
        f"{'trace p95':>9} {'metrics':>7} {'traced':>7}"
    )
    for label, question in (("fast path", Q_FAST), ("rewrite (4 model)", Q_REWRITE)):
        with _collector() as (endpoint, received):
            samples, scrapes = await _measure(question, endpoint)
        off, on, traced = (samples[side] for side in SIDES)
        ratio, traced_ratio = median(on) / median(off), median(traced) / median(off)
        verdicts = [
            "ok" if ratio <= TARGET_RATIO else f"metrics above {TARGET_RATIO}",
            "ok" if traced_ratio <= TARGET_TRACED_RATIO else f"traced above {TARGET_TRACED_RATIO}",
        ]
        print(
            f"{label:<20} {median(off):8.2f} {median(on):8.2f} {median(traced):9.2f} "
            f"{percentile(off, 95):8.2f} {percentile(traced, 95):9.2f} {ratio:7.3f} "
            f"{traced_ratio:7.3f}  ({', '.join(verdicts)}; {scrapes} scrapes, "
            f"{received[0]} spans exported)"
        )


def main() -> None:
    asyncio.run(_main())


if __name__ == "__main__":
    main()
