"""Honest partials (docs/api.md#grounded-answers): a compound question whose sub-question found
no answer keeps the synthesis table's trace, and its answer is partial and names that
sub-question in the question's language; the local answerer makes no claim for it."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator_service.answer import clean_markers, partial_note
from orchestrator_service.models.local.answer import answer_pieces, asked_terms
from orchestrator_service.synthesis import (
    MissingParts,
    missing_parts,
    synthesize,
)
from shared.normalize import normalize_sub_trace


def child(
    index: int,
    question: str,
    status: str,
    docs: list[dict[str, Any]] | None = None,
    missing_slots: list[str] | None = None,
) -> dict[str, Any]:
    return {
        "index": index,
        "question": question,
        "docs": docs or [],
        "retrieval_status": status,
        "route": {"answerable": "answer", "partial": "answer"}.get(status, status),
        "rag_trace": None if missing_slots is None else {"missing_slots": missing_slots},
    }


DOC = {"chunk_id": "a", "filename": "a.md", "text": "t", "score": 0.5, "rrf_rank": 1}


@pytest.mark.parametrize(
    ("children", "unanswered"),
    [
        # every child answered: nothing to name
        ([child(0, "A?", "answerable", [DOC]), child(1, "B?", "partial", [DOC])], []),
        # one found nothing
        ([child(0, "A?", "answerable", [DOC]), child(1, "B?", "no_knowledge")], ["B?"]),
        # plan order, whatever order the children finished in; HITL children count too
        (
            [
                child(2, "C?", "needs_clarification"),
                child(0, "A?", "no_knowledge"),
                child(1, "B?", "answerable", [DOC]),
            ],
            ["A?", "C?"],
        ),
        # accepted but without evidence: it answered nothing
        ([child(0, "A?", "answerable", [DOC]), child(1, "B?", "answerable")], ["B?"]),
        # the same sub-question twice is named once; blank ones never
        (
            [
                child(0, "A?", "answerable", [DOC]),
                child(1, " B? ", "no_knowledge"),
                child(2, "B?", "needs_scope_selection"),
                child(3, "  ", "no_knowledge"),
            ],
            ["B?"],
        ),
        ([], []),
    ],
)
def test_unanswered_parts(children: list[dict[str, Any]], unanswered: list[str]) -> None:
    assert list(missing_parts(children).unanswered) == unanswered


@pytest.mark.parametrize(
    ("children", "parts"),
    [
        ([child(0, "A?", "answerable", [DOC])], MissingParts()),
        # a partial child with no slot to name is named by its sub-question
        (
            [child(0, "A?", "answerable", [DOC]), child(1, "B?", "partial", [DOC])],
            MissingParts(incomplete=("B?",)),
        ),
        (
            [child(0, "A?", "partial", [DOC], [" "]), child(1, "B?", "no_knowledge")],
            MissingParts(unanswered=("B?",), incomplete=("A?",)),
        ),
        # … one whose grade names what it lacks is not: the slots say it
        (
            [child(0, "A?", "answerable", [DOC]), child(1, "B?", "partial", [DOC], ["version"])],
            MissingParts(),
        ),
    ],
)
def test_missing_parts(children: list[dict[str, Any]], parts: MissingParts) -> None:
    assert missing_parts(children) == parts
    assert bool(missing_parts(children)) is bool(parts.unanswered or parts.incomplete)


def test_the_trace_keeps_the_synthesis_rule_when_a_part_is_unanswered() -> None:
    children = [child(0, "A?", "answerable", [DOC]), child(1, "B?", "no_knowledge")]
    update = synthesize(
        question="A and B?",
        complexity_reason="r",
        sub_questions=["A?", "B?"],
        sub_results=children,
        normalize_sub_trace=normalize_sub_trace,
    )
    trace = update["rag_trace"]
    assert (update["route"], update["retrieval_status"]) == ("answer", "answerable")
    assert (trace["evidence_relevance"], trace["evidence_answerability"]) == (
        "strong",
        "sufficient",
    )
    assert list(missing_parts(children).unanswered) == ["B?"]


@pytest.mark.parametrize(
    ("slots", "unanswered", "chinese", "note"),
    [
        (["版本"], [], True, "注意：现有资料只能部分回答这个问题，缺少关于版本的信息。"),
        ([], [], True, "注意：现有资料只能部分回答这个问题。"),
        (
            [],
            ["白云茶园在哪里？"],
            True,
            "注意：现有资料只能部分回答这个问题，无法回答其中的“白云茶园在哪里？”。",
        ),
        (
            ["版本"],
            ["白云茶园在哪里？", "白云茶园在哪里？"],
            True,
            "注意：现有资料只能部分回答这个问题，缺少关于版本的信息，"
            "也无法回答其中的“白云茶园在哪里？”。",
        ),
        (
            [],
            ["What is team B's secret code?"],
            False,
            "Note: the evidence answers this question only in part; it does not answer "
            "“What is team B's secret code?”",
        ),
        (
            ["price"],
            ["Where is Heron Island?", "Who runs it"],
            False,
            "Note: the evidence answers this question only in part; it says nothing about "
            "price, and it does not answer “Where is Heron Island?” and “Who runs it”.",
        ),
        (
            [],
            ["A?", "B?", "C?"],
            False,
            "Note: the evidence answers this question only in part; it does not answer "
            "“A?”, “B?” and “C?”",
        ),
        (
            ["version"],
            [],
            False,
            "Note: the evidence answers this question only in part; it says nothing about version.",
        ),
        ([], [], False, "Note: the evidence answers this question only in part."),
    ],
)
def test_partial_note_names_slots_and_unanswered_parts(
    slots: list[str], unanswered: list[str], chinese: bool, note: str
) -> None:
    assert partial_note(slots, chinese=chinese, unanswered=unanswered) == note


@pytest.mark.parametrize(
    ("slots", "incomplete", "unanswered", "chinese", "note"),
    [
        (
            [],
            ["企业套餐每月多少钱？"],
            [],
            True,
            "注意：现有资料只能部分回答这个问题，关于“企业套餐每月多少钱？”的信息不完整。",
        ),
        (
            ["版本"],
            ["A？"],
            ["B？"],
            True,
            "注意：现有资料只能部分回答这个问题，缺少关于版本的信息，关于“A？”的信息不完整，"
            "也无法回答其中的“B？”。",
        ),
        (
            [],
            ["How much is the Enterprise plan?"],
            [],
            False,
            "Note: the evidence answers this question only in part; its answer to “How much is "
            "the Enterprise plan?” is incomplete.",
        ),
        (
            [],
            ["A?"],
            ["B?"],
            False,
            "Note: the evidence answers this question only in part; its answer to “A?” is "
            "incomplete, and it does not answer “B?”",
        ),
    ],
)
def test_partial_note_names_incomplete_parts(
    slots: list[str], incomplete: list[str], unanswered: list[str], chinese: bool, note: str
) -> None:
    assert (
        partial_note(slots, chinese=chinese, unanswered=unanswered, incomplete=incomplete) == note
    )


@pytest.mark.parametrize(
    ("question", "missing", "asked"),
    [
        # nothing missing: every key term
        ("Who leads the morning shift?", [], ["lead", "morn", "shift"]),
        # a term the answered part uses too stays; one only the missing part asks goes
        (
            "Who leads the morning shift at Aurelia and who leads the evening shift at Borealis?",
            ["Who leads the evening shift at Borealis?"],
            ["lead", "morn", "shift", "aurelia"],
        ),
        ("青岚茶园在哪里？白云茶园在哪里？", ["白云茶园在哪里？"], ["青岚", "茶园"]),
        # a sub-question restating the whole question leaves the terms as they are
        (
            "What is the default port of KestrelDB and how do I change it?",
            ["How do I change the default port of KestrelDB?"],
            ["default", "port", "kestreldb", "chang"],
        ),
    ],
)
def test_asked_terms(question: str, missing: list[str], asked: list[str]) -> None:
    assert [term.key for term in asked_terms(question, missing)] == asked


BAKERY = (
    "Aurelia Bakery staff handbook\n\nAurelia Bakery opens at 5:30 in the morning and closes "
    "at 9 in the evening.\n\nShift | Lead | Hours\n\nMorning shift | Giulia Ferraro | 5:30 to "
    "13:30\n\nEvening shift | Tomas Lindqvist | 13:00 to 21:00"
)
TEAMS = (
    "Field notes for team A\n\nThe secret code of team A is PELICAN. Team B stores its files "
    "in the archive."
)


@pytest.mark.parametrize(
    ("question", "missing", "docs", "written"),
    [
        (
            "Who leads the morning shift at Aurelia Bakery and who leads the evening shift at "
            "Borealis Bakery?",
            ["Who leads the evening shift at Borealis Bakery?"],
            [BAKERY],
            "Morning shift — Lead: Giulia Ferraro; Hours: 5:30 to 13:30[1].",
        ),
        (
            "What is team A's secret code and what is team B's secret code?",
            ["What is team B's secret code?"],
            [TEAMS],
            "The secret code of team A is PELICAN[1].",
        ),
    ],
)
def test_the_local_answer_claims_nothing_for_the_unanswered_part(
    question: str, missing: list[str], docs: list[str], written: str
) -> None:
    records = [
        {"text": text, "filename": f"{i}.md", "score": 2 / (60 + i), "rrf_rank": i}
        for i, text in enumerate(docs, start=1)
    ]
    assert clean_markers("".join(answer_pieces(question, records, missing=missing)), 1) == written


PLANS_ZH = (
    "# 云端存储套餐\n\n## 基础套餐\n\n基础套餐每月九元，包含五十GB存储空间。\n\n"
    "## 专业套餐\n\n专业套餐每月二十九元，包含一TB存储空间。"
)
GARDEN_ZH = (
    "# 青岚茶园简介\n\n## 位置\n\n青岚茶园位于浙江省丽水市松阳县的南坡山腰，海拔约六百米。\n\n"
    "## 参观\n\n茶园每周二至周日对游客开放，门票为三十元。"
)


@pytest.mark.parametrize(
    ("question", "missing", "text", "written"),
    [
        # each part of a compound question answered by its own leading claim, in order
        (
            "青岚茶园在哪里？青岚茶园的门票多少钱？",
            [],
            GARDEN_ZH,
            "青岚茶园位于浙江省丽水市松阳县的南坡山腰，海拔约六百米[1]。"
            "茶园每周二至周日对游客开放，门票为三十元[1]。",
        ),
        # a part named missing gets no claim
        (
            "比较基础套餐和专业套餐的价格",
            ["基础套餐的价格？"],
            PLANS_ZH,
            "专业套餐每月二十九元，包含一TB存储空间[1]。",
        ),
        # every part missing: the question as a whole, never an empty answer
        (
            "比较基础套餐和专业套餐的价格",
            ["基础套餐的价格？", "专业套餐的价格？"],
            PLANS_ZH,
            "基础套餐每月九元，包含五十GB存储空间[1]。专业套餐每月二十九元，包含一TB存储空间[1]。",
        ),
    ],
)
def test_a_compound_question_is_answered_part_by_part(
    question: str, missing: list[str], text: str, written: str
) -> None:
    records = [{"text": text, "filename": "d.md", "score": 2 / 61, "rrf_rank": 1}]
    assert clean_markers("".join(answer_pieces(question, records, missing=missing)), 1) == written
