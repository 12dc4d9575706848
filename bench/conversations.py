"""What a conversation costs a Run: the same follow-ups asked with a 3-turn history (one
`condense_question` call, then the run of the standalone question) and their standalone
questions asked alone, with the built-in local model on the bundled samples — `make run`'s
configuration, both services served on loopback in this process. Target: Run p50 with the
history ÷ without ≤ 1.3."""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

from supermew.v1 import orchestrator_pb2

from bench._local_stack import local_stack
from bench._retrieval_rig import p50_p95, quiet, table
from retrieval_service.bootstrap import seed_samples

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
ROUNDS = 30
TARGET = 1.3
#: (three earlier turns, the follow-up)
CONVERSATIONS: tuple[tuple[tuple[tuple[str, str], ...], str], ...] = (
    (
        (
            ("What is the Premium support plan?", "A plan with a named contact[1]."),
            ("How much does it cost?", "49 euros per month[1]."),
            ("How many tickets can its customers open?", "Unlimited support tickets[1]."),
        ),
        "And the Basic one?",
    ),
    (
        (
            ("Which skill does the Navigator have?", "Star Chart[1]."),
            ("What is its weapon?", "A brass sextant[1]."),
            ("What about the Quartermaster?", "A heavy boarding axe[1]."),
        ),
        "What is his skill?",
    ),
    (
        (
            ("专业版云存储套餐每月多少钱？", "专业版云存储套餐每月 45 元[1]。"),
            ("它包含多少存储空间？", "2 TB[1]。"),
            ("那标准版呢？", "100 GB[1]。"),
        ),
        "它的回收站保留多久？",
    ),
    (
        (
            ("丹瑾的武器是什么？", "珊瑚法杖[1]。"),
            ("赤羽呢？", "一对弯刀[1]。"),
            ("他的属性是什么？", "火[1]。"),
        ),
        "这个角色的技能是什么？",
    ),
)


def _request(question: str, history: tuple[tuple[str, str], ...] = ()) -> Any:
    turns = [orchestrator_pb2.ConversationTurn(question=q, answer=a) for q, a in history]
    return orchestrator_pb2.RunRequest(question=question, history=turns)


async def _ms(call: Awaitable[Any]) -> float:
    started = time.perf_counter()
    await call
    return (time.perf_counter() - started) * 1000


async def run(rounds: int) -> None:
    quiet()
    fill = lambda app: seed_samples(app, str(SAMPLES))  # noqa: E731
    async with local_stack("bench-conversations-", fill) as s:
        rows, with_all, without_all = [], [], []
        for history, question in CONVERSATIONS:
            followed = await s.orchestrator.Run(_request(question, history))  # warm-up
            standalone = followed.standalone_question
            await s.orchestrator.Run(_request(standalone))
            # Interleaved, so a passing load spike hits both sides alike.
            with_ms: list[float] = []
            without_ms: list[float] = []
            for _ in range(rounds):
                with_ms.append(await _ms(s.orchestrator.Run(_request(question, history))))
                without_ms.append(await _ms(s.orchestrator.Run(_request(standalone))))
            with50, without50 = p50_p95(with_ms)[0], p50_p95(without_ms)[0]
            with_all += with_ms
            without_all += without_ms
            rows.append(
                [question, standalone, followed.route, round(with50, 1), round(without50, 1),
                 round(with50 / without50, 2)]
            )  # fmt: skip
    print(
        f"Run with a 3-turn history vs the standalone question alone, local model, "
        f"{len(list(SAMPLES.iterdir()))} sample documents, {rounds} Runs each (ms)"
    )
    header = ["follow-up", "standalone question", "route", "with history p50", "alone p50"]
    print(table(rows, [*header, "with ÷ alone"]))
    ratio = statistics.median(row[-1] for row in rows)
    verdict = "met" if ratio <= TARGET else "NOT met"
    print(
        f"median over the follow-ups: Run p50 with history ÷ without = {ratio:.2f} "
        f"(target ≤ {TARGET}: {verdict}); all Runs pooled: with history p50 "
        f"{statistics.median(with_all):.1f} ms, alone {statistics.median(without_all):.1f} ms"
    )


def main(argv: list[str] | None = None) -> None:
    rounds = int(argv[0]) if argv else ROUNDS
    asyncio.run(run(rounds))


if __name__ == "__main__":
    main(sys.argv[1:])
