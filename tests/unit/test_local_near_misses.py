"""Near misses (LOCAL_MODEL.md §2 "distinctive terms absent", §4 "the thing named"): a question
whose distinctive term — a name, a model number, a quantity, a specific kind of a thing — the
evidence holds only a sibling of ends at no_knowledge, in zh and en; the same question about
what the evidence does hold, inflected or with a synonym for a word that names nothing, is
still answered, and from the sentence about the thing it names."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from orchestrator_service.answer import clean_markers
from orchestrator_service.models.local.answer import answer_pieces
from orchestrator_service.models.local.grading import grade

SAMPLES = Path(__file__).resolve().parents[2] / "samples"

LEAVE = (
    "# Northwind Labs staff handbook\n\n## Annual leave\n\nEvery employee of Northwind Labs gets "
    "25 days of annual leave per year.\n\n## Maternity leave\n\nEmployees who give birth get 16 "
    "weeks of paid maternity leave.\n\n## Sick leave\n\nEmployees must send a doctor's note to "
    "their manager after three days of sick leave."
)
SHIFTS = (
    "Aurelia Bakery staff handbook\n\nAurelia Bakery opens at 5:30 in the morning and closes at "
    "9 in the evening.\n\nShift | Lead | Hours\n\nMorning shift | Giulia Ferraro | 5:30 to 13:30"
    "\n\nAfternoon shift | Tomas Lindqvist | 13:00 to 21:00"
)
BAGS = (
    "# Harbour Roastery price list\n\nA 250 g bag of Harbour Blend costs 9 euros. A 1 kg bag of "
    "Harbour Blend costs 30 euros."
)
PROJECTOR = (
    "# Lumen 5 projector\n\nThe Lumen 5 projector has a brightness of 3,000 lumens. Its lamp "
    "lasts 20,000 hours before it needs replacing."
)
FERRY = (
    "# Gull Island ferry\n\nThe first ferry to Gull Island leaves Port Ellis at 6:15 every "
    "morning.\n\n## Tickets\n\nA single adult ticket to Gull Island costs 4.50 euros."
)
LEAVE_ZH = (
    "# 启航物流员工手册\n\n## 产假\n\n女员工生育可享受一百五十八天产假，产假期间工资照常发放。\n\n"
    "## 婚假\n\n员工结婚可享受十天婚假，婚假须在领证后一年内休完。"
)
PLANS_ZH = (
    "# 云端存储套餐\n\n## 基础套餐\n\n基础套餐每月九元，包含五十GB存储空间。\n\n"
    "## 专业套餐\n\n专业套餐每月二十九元，包含一TB存储空间。"
)
BAND_ZH = "# 云雀智能手环说明书\n\n云雀智能手环的防水等级为5ATM，可以佩戴游泳。"
TEA_ZH = "# 青岚茶园简介\n\n## 采摘\n\n每年三月下旬开始采摘春茶，清明前采摘的茶叶价格最高。"
README = (
    "OpenSSH portable\n\nOpenSSH is a complete SSH protocol implementation, created by the "
    "OpenBSD project and ported to other systems by Damien Miller."
)


def doc(text: str, filename: str = "doc.md", rank: int = 1) -> dict[str, Any]:
    return {"text": text, "filename": filename, "score": 2 / (60 + rank), "rrf_rank": rank}


@pytest.mark.parametrize(
    ("question", "text", "route"),
    [
        # another kind of the thing
        ("How many weeks of paternity leave do Northwind Labs employees get?", LEAVE,
         "no_knowledge"),
        ("How long is the bereavement leave at Northwind Labs?", LEAVE, "no_knowledge"),
        ("Who leads the evening shift at Aurelia Bakery?", SHIFTS, "no_knowledge"),
        ("How much is a single child ticket to Gull Island?", FERRY, "no_knowledge"),
        ("When does the last ferry from Gull Island leave?", FERRY, "no_knowledge"),
        ("启航物流的陪产假有多少天？", LEAVE_ZH, "no_knowledge"),
        ("启航物流的丧假有几天？", LEAVE_ZH, "no_knowledge"),
        ("启航物流的年假有几天？", LEAVE_ZH, "no_knowledge"),
        ("团队套餐每月多少钱？", PLANS_ZH, "no_knowledge"),
        ("青岚茶园什么时候开始采摘秋茶？", TEA_ZH, "no_knowledge"),
        # another model, another number
        ("How bright is the Lumen 6 projector?", PROJECTOR, "no_knowledge"),
        ("How long does the lamp of the Lumen 5 Pro projector last?", PROJECTOR, "no_knowledge"),
        ("How much does a 500 g bag of Harbour Blend cost?", BAGS, "no_knowledge"),
        ("How much does a 2 kg bag of Harbour Blend cost?", BAGS, "no_knowledge"),
        ("云雀二代智能手环的防水等级是多少？", BAND_ZH, "no_knowledge"),
        # what the evidence holds: as written, inflected, or with a synonym for a word that
        # names nothing
        ("How many weeks of maternity leave do Northwind Labs employees get?", LEAVE, "answer"),
        ("How many weeks of maternity leave does a Northwind Labs employee receive?", LEAVE,
         "answer"),
        ("How many days of annual leave does each employee of Northwind Labs get?", LEAVE,
         "answer"),
        ("Who leads the afternoon shifts at Aurelia Bakery?", SHIFTS, "answer"),
        ("How much is a single adult ticket to Gull Island?", FERRY, "answer"),
        ("When does the first ferry to Gull Island leave?", FERRY, "answer"),
        ("How much does a 250 g bag of Harbour Blend cost?", BAGS, "answer"),
        ("How much do 1 kg bags of Harbour Blend cost?", BAGS, "answer"),
        ("How long does the lamp of the Lumen 5 projector last?", PROJECTOR, "answer"),
        ("启航物流的产假有多少天？", LEAVE_ZH, "answer"),
        ("启航物流员工的婚假有几天？", LEAVE_ZH, "answer"),
        ("专业套餐每月多少钱？", PLANS_ZH, "answer"),
        ("云雀智能手环的防水等级是多少？", BAND_ZH, "answer"),
        ("青岚茶园什么时候开始采摘春茶？", TEA_ZH, "answer"),
    ],
)  # fmt: skip
def test_a_distinctive_term_the_evidence_lacks_decides_no_knowledge(
    question: str, text: str, route: str
) -> None:
    verdict = grade(question, [doc(text)])
    assert verdict.route == route, verdict.reason
    if route == "no_knowledge":
        assert "not in the evidence" in verdict.reason


@pytest.mark.parametrize(
    "question",
    [
        "Who created OpenSSH according to the README?",
        "Who created OpenSSH according to its readme?",
        "What does the OpenSSH README say about the OpenBSD project?",
    ],
)
def test_a_word_naming_the_document_does_not_send_the_question_elsewhere(question: str) -> None:
    verdict = grade(question, [doc(README, "openssh-README.txt")])
    assert verdict.route == "answer", verdict.reason


def test_a_question_verb_after_a_named_subject_is_not_a_kind() -> None:
    text = "# asyncio\n\nThe function asyncio.gather runs awaitables concurrently."
    verdict = grade("Which asyncio function runs awaitables concurrently?", [doc(text)])
    assert verdict.route == "answer", verdict.reason


SUPPORT = [
    doc((SAMPLES / "support_plan_basic.en.md").read_text(encoding="utf-8"), "basic.md", 1),
    doc((SAMPLES / "support_plan_premium.en.md").read_text(encoding="utf-8"), "premium.md", 2),
]


@pytest.mark.parametrize(
    ("question", "said"),
    [
        ("What is the response time of the Premium support plan?", "four hours"),
        ("Premium Support Plan：What is the response time for support tickets?", "four hours"),
        ("What is the response time of the Basic support plan?", "two business days"),
        ("Basic Support Plan：What is the response time for support tickets?", "two business days"),
    ],
)
def test_the_named_thing_s_sentence_answers(question: str, said: str) -> None:
    written = clean_markers("".join(answer_pieces(question, SUPPORT)), len(SUPPORT))
    assert said in written.split("[")[0], written


def test_the_named_section_s_sentence_answers_within_one_document() -> None:
    orion = (
        "# Orion hosting plans\n\n## Orion Basic plan\n\nThe Orion Basic plan costs 9 dollars a "
        "month.\n\n## Orion Pro plan\n\nThe Orion Pro plan costs 29 dollars a month.\n\n"
        "## Support\n\nEvery plan includes email support."
    )
    written = "".join(answer_pieces("How much is the Pro one of the Orion plans?", [doc(orion)]))
    assert written.startswith("The Orion Pro plan costs 29 dollars a month[1]"), written


def test_an_attribute_asked_about_is_not_a_kind() -> None:
    text = "绿茶不经过发酵，保留了较多的茶多酚。红茶是全发酵茶，口感醇厚。冲泡绿茶的水温约八十度。"
    verdict = grade("绿茶的发酵程度？", [doc(text)])
    assert verdict.route != "no_knowledge", verdict.reason


def test_a_statement_s_modifiers_are_not_kinds() -> None:
    """A claim searched for support paraphrases the evidence's modifiers (SciFact): the kind
    rules read questions only."""
    text = (
        "# Bariatric surgery\n\nBariatric surgery was followed by negative outcomes in mental "
        "health and by improved physical outcomes in most patients."
    )
    claim = "Bariatric surgery leads to positive outcomes in mental health."
    asked = "Does bariatric surgery lead to positive outcomes in mental health?"
    assert "kinds not in the evidence" not in grade(claim, [doc(text)]).reason
    assert "kinds not in the evidence" in grade(asked, [doc(text)]).reason
