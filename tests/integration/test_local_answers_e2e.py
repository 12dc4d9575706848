"""A newcomer's folder, end to end: the evaluation set of `bench/local_answers.py` (a Markdown
handbook with headings, a GBK text file, a PDF, .docx files with a table, FAQs; zh and en)
ingested into the real retrieval service on Milvus Lite with the built-in embedder, the
orchestrator with no model endpoint, driven through the real Run / Resume RPCs. The cases the
newcomer met: the answer cites the sentence (or table row) that answers, a name the folder does
not hold gets no answer, one document's sections are not things to choose between, and a
follow-up answered by its number picks that option."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from supermew.v1 import orchestrator_pb2

from bench.local_answers import documents
from shared.codec import rag_trace_from_proto
from tests.integration.retrieval_harness import local_orchestrator, running_service

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stub(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[object]:
    async with running_service(tmp_path_factory.mktemp("kb") / "kb.db", chunking=None) as kb:
        await kb.app.ingestor.ingest(documents())
        async with local_orchestrator(kb.port) as orchestrator:
            yield orchestrator


async def ask(stub: object, question: str) -> orchestrator_pb2.RunResult:
    request = orchestrator_pb2.RunRequest(question=question, generate_answer=True)
    return await stub.Run(request)  # type: ignore[attr-defined]


def flat(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


@pytest.mark.parametrize(
    ("question", "claim", "quote"),
    [
        ("Who leads the morning shift at Aurelia Bakery?",
         "Morning shift — Lead: Giulia Ferraro; Hours: 5:30 to 13:30[1].",
         "Morning shift | Giulia Ferraro | 5:30 to 13:30"),
        ("华东仓库早班的负责人是谁？", "早班 — 负责人：李明；时间：8:00至16:00",
         "早班 | 李明 | 8:00至16:00"),
        ("青岚茶园在哪里？", "青岚茶园位于浙江省丽水市松阳县的南坡山腰",
         "青岚茶园位于浙江省丽水市松阳县的南坡山腰，海拔约六百米。"),
        ("What is a coroutine?", "A coroutine is a function that can suspend its execution",
         "A coroutine is a function that can suspend its execution at an await and resume later "
         "from the same point."),
        ("How long do the Zephyr Widget batteries last?",
         "The Zephyr Widget batteries last about 18 hours of continuous use",
         "The Zephyr Widget batteries last about 18 hours of continuous use."),
        ("What did the inspectors find at the Northgate warehouse?",
         "Inspectors found three blocked fire exits on the ground floor",
         "Inspectors found three blocked fire exits on the ground floor."),
        ("云雀智能手环的防水等级是多少？", "云雀智能手环的防水等级为5ATM",
         "云雀智能手环的防水等级为5ATM，可以佩戴游泳，但不能佩戴潜水或洗桑拿。"),
    ],
)  # fmt: skip
async def test_the_answer_cites_the_sentence_that_answers(
    stub: object, question: str, claim: str, quote: str
) -> None:
    result = await ask(stub, question)
    assert result.route == "answer", result.rag_trace.evidence_reason
    text = result.answer.text
    assert text.startswith(claim)
    assert flat(result.answer.citations[0].quote) == quote
    # Never a heading, a title line or a table header as a claim.
    for title in (
        "Shift | Lead | Hours",
        "班次 | 负责人 | 时间",
        "Inspection findings",
        "青岚茶园简介",
    ):
        assert title not in text


@pytest.mark.parametrize(
    "question",
    [
        "What is team B's secret code?",
        "Who is the captain of team C?",
        "How long can the Kestrel 3 drone fly?",
        "How much does the Orion Enterprise plan cost?",
        "华北仓库早班的负责人是谁？",
        "白云茶园在哪里？",
        "云雀智能手环支持NFC支付吗？",
        "星河科技的产假有多少天？",
    ],
)
async def test_no_answer_without_support(stub: object, question: str) -> None:
    result = await ask(stub, question)
    assert result.route in ("no_knowledge", "clarify"), result.rag_trace.evidence_reason
    assert not result.HasField("answer")


async def test_team_a_answers_where_team_b_does_not(stub: object) -> None:
    result = await ask(stub, "What is team A's secret code?")
    assert result.route == "answer"
    assert result.answer.text == "The secret code of team A is PELICAN[1]."


@pytest.mark.parametrize(
    ("question", "text"),
    [
        ("What is team A's secret code and what is team B's secret code?",
         "The secret code of team A is PELICAN[1].\n\nNote: the evidence answers this question "
         "only in part; it does not answer “What is team B's secret code?”"),
        ("Who leads the morning shift at Aurelia Bakery and who leads the evening shift at "
         "Borealis Bakery?",
         "Morning shift — Lead: Giulia Ferraro; Hours: 5:30 to 13:30[1].\n\nNote: the evidence "
         "answers this question only in part; it does not answer “Who leads the evening shift "
         "at Borealis Bakery?”"),
        ("青岚茶园在哪里？白云茶园在哪里？",
         "青岚茶园位于浙江省丽水市松阳县的南坡山腰，海拔约六百米[1]。\n\n注意：现有资料只能部分"
         "回答这个问题，无法回答其中的“白云茶园在哪里？”。"),
    ],
)  # fmt: skip
async def test_a_compound_question_with_an_unanswered_part_is_partial(
    stub: object, question: str, text: str
) -> None:
    result = await ask(stub, question)
    assert (result.route, result.retrieval_status) == ("answer", "answerable")
    assert result.answer.partial and result.answer.text == text


@pytest.mark.parametrize("choice", ["2", "#2", "the second", "第二个", "B"])
async def test_a_follow_up_answered_by_its_number_picks_that_option(
    stub: object, choice: str
) -> None:
    asked = await ask(stub, "How much does this plan cost?")
    assert asked.route == "clarify", asked.rag_trace.evidence_reason
    options = rag_trace_from_proto(asked.rag_trace)["hitl_options"]
    assert list(options) == ["Orion Basic plan", "Orion Pro plan"]
    resumed = await stub.Resume(  # type: ignore[attr-defined]
        orchestrator_pb2.ResumeRequest(
            resume_state=asked.hitl_resume_state, user_answer=choice, generate_answer=True
        )
    )
    assert resumed.route == "answer"
    assert resumed.answer.text.startswith("The Orion Pro plan costs 29 dollars a month")
