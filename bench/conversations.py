"""What a conversation costs a Run: the same follow-ups asked with a 3-turn history (one
`condense_question` call, then the run of the standalone question) and their standalone
questions asked alone, with the built-in local model on the bundled samples — `make run`'s
configuration, both services served on loopback in this process. Target: Run p50 with the
history ÷ without ≤ 1.3.

Then the follow-ups of `bench/sets/conversations/follow_ups.json` — a changed attribute of the
same subject ("And its price?", "那它的价格呢？") or "the other" of two things named earlier
("What about the other one?", "另一个呢？"), zh and en, after one or two earlier turns — each
asked once with its history: how many condense to the expected standalone question, are
answered, and answer with the subject's fact (a phrase of its sentence in the samples: another
subject's sentence does not count). `python -m bench.conversations [ROUNDS]`; ROUNDS 0 runs the
follow-ups alone."""

from __future__ import annotations

import asyncio
import json
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
FOLLOW_UPS = Path(__file__).resolve().parent / "sets" / "conversations" / "follow_ups.json"
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


def _request(
    question: str, history: tuple[tuple[str, str], ...] = (), *, answer: bool = False
) -> Any:
    turns = [orchestrator_pb2.ConversationTurn(question=q, answer=a) for q, a in history]
    return orchestrator_pb2.RunRequest(question=question, history=turns, generate_answer=answer)


async def _ms(call: Awaitable[Any]) -> float:
    started = time.perf_counter()
    await call
    return (time.perf_counter() - started) * 1000


def _language(text: str) -> str:
    return "zh" if any("\u4e00" <= c <= "\u9fff" for c in text) else "en"


async def follow_ups(orchestrator: Any) -> None:
    """Each follow-up of FOLLOW_UPS once, with its history: condensed as expected, answered,
    stating the subject's fact; a row per miss, then the counts by kind and language."""
    cases = json.loads(FOLLOW_UPS.read_text(encoding="utf-8"))
    counts: dict[tuple[str, str], list[int]] = {}
    misses = []
    for case in cases:
        history = tuple((q, a) for q, a in case["history"])
        result = await orchestrator.Run(_request(case["follow_up"], history, answer=True))
        standalone = result.standalone_question == case["standalone"]
        answered = result.route == "answer"
        stated = case["fact"].lower() in result.answer.text.lower()
        key = (case["kind"], f"{_language(case['follow_up'])}, {len(history) + 1}-turn")
        row = counts.setdefault(key, [0, 0, 0, 0])
        for i, hit in enumerate((True, standalone, answered, stated)):
            row[i] += hit
        if not (standalone and stated):
            misses.append([case["follow_up"], result.standalone_question, result.route, stated])
    print(f"\nfollow-ups of {FOLLOW_UPS.relative_to(FOLLOW_UPS.parents[2])}, one Run each")
    rows: list[list[Any]] = [[kind, where, *hits] for (kind, where), hits in sorted(counts.items())]
    total = [sum(hits[i] for hits in counts.values()) for i in range(4)]
    rows.append(["all", "", *total])
    print(table(rows, ["kind", "language, turns", "follow-ups", "standalone as expected",
                       "answered", "states the subject's fact"]))  # fmt: skip
    if misses:
        print("misses (standalone question or fact):")
        print(table(misses, ["follow-up", "standalone question", "route", "fact stated"]))
    n, as_expected, answered_n, stated_n = total
    print(
        f"standalone as expected {as_expected}/{n} = {as_expected / n:.2f}; answered "
        f"{answered_n / n:.2f}; state the subject's fact {stated_n / n:.2f}"
    )


async def run(rounds: int) -> None:
    quiet()
    fill = lambda app: seed_samples(app, str(SAMPLES))  # noqa: E731
    async with local_stack("bench-conversations-", fill) as s:
        await follow_ups(s.orchestrator)
        if rounds <= 0:
            return
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
