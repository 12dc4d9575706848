"""What RUN_HISTORY costs a Run (target ≤ ×1.1 p50, docs/api.md#run-history): the built-in
model on the local-answers set's documents, two orchestrators in front of the same retrieval
service — history off and history on (its SQLite database written once per Run) — asked the
same questions in alternation, so both see the same machine at the same moments.

    python -m bench.run_history [--rounds N]"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import grpc
from supermew.v1 import orchestrator_pb2, orchestrator_pb2_grpc

from bench._local_stack import local_stack
from bench._retrieval_rig import quiet
from bench.local_answers import documents, questions
from orchestrator_service.bootstrap import build_app
from orchestrator_service.settings import OrchestratorSettings
from retrieval_service.bootstrap import RetrievalApp

TARGET = 1.1


async def _timed(stub: orchestrator_pb2_grpc.OrchestratorServiceStub, question: str) -> float:
    started = time.perf_counter()
    await stub.Run(orchestrator_pb2.RunRequest(question=question, generate_answer=True))
    return time.perf_counter() - started


async def run(rounds: int) -> tuple[list[float], list[float], int]:
    quiet()

    async def fill(app: RetrievalApp) -> None:
        await app.ingestor.ingest(documents())

    asked = [q["question"] for q in questions()]
    async with local_stack("bench-run-history-", fill) as stack:
        with tempfile.TemporaryDirectory(prefix="bench-run-history-") as folder:
            recording = build_app(
                OrchestratorSettings(
                    _env_file=None,
                    orchestrator_port=0,
                    bind_host="127.0.0.1",
                    retrieval_addr=stack.retrieval.address,
                    llm_base_url=None,
                    log_level="WARNING",
                    run_history=True,
                    orchestrator_database_url=f"sqlite+aiosqlite:///{Path(folder) / 'h.sqlite3'}",
                )
            )
            await recording.start()
            port = await recording.server.start()
            try:
                async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                    on = orchestrator_pb2_grpc.OrchestratorServiceStub(channel)
                    off = stack.orchestrator
                    for question in asked[:10]:  # warm both
                        await _timed(stack.orchestrator, question)
                        await _timed(on, question)
                    off_times: list[float] = []
                    on_times: list[float] = []
                    for i in range(rounds):
                        for j, question in enumerate(asked):
                            if (i + j) % 2:
                                off_times.append(await _timed(off, question))
                                on_times.append(await _timed(on, question))
                            else:
                                on_times.append(await _timed(on, question))
                                off_times.append(await _timed(off, question))
                    recorded = len((await recording.history.page("", 1000, "", None))[0])
            finally:
                await recording.server.stop(0)
                await recording.aclose()
    return off_times, on_times, recorded


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench.run_history")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    off, on, recorded = asyncio.run(run(args.rounds))
    p50_off, p50_on = statistics.median(off) * 1000, statistics.median(on) * 1000
    ratio = p50_on / p50_off
    print(
        f"{len(off)} Run calls each (generate_answer, built-in model, local-answers set), "
        f"alternating; history rows written: {recorded}"
    )
    print(f"Run p50 RUN_HISTORY off  {p50_off:8.1f} ms")
    print(f"Run p50 RUN_HISTORY on   {p50_on:8.1f} ms")
    verdict = "within" if ratio <= TARGET else "OVER"
    print(f"on ÷ off                 ×{ratio:.3f}  ({verdict} the ×{TARGET} target)")


if __name__ == "__main__":
    main(sys.argv[1:])
