"""The user's reply on resume (docs/trace.md#the-resume-snapshot): q* keeps a reply unless it is
already part of the question as a whole word, and a reply choosing an option by its place is
always kept; a number that is part of one option's name picks that option."""

from __future__ import annotations

import pytest

from orchestrator_service.models.local.answer import answer_pieces
from orchestrator_service.models.local.grading import grade
from orchestrator_service.resume import already_asked, is_choice, refined_question

PRO = "How much does the Orion Pro plan cost?"
KESTREL = "How long can the Kestrel 2 drone fly?"


@pytest.mark.parametrize(
    ("question", "reply", "merged"),
    [
        # the rules as they were
        ("这个角色的属性是什么？", " 丹瑾 ", "丹瑾：这个角色的属性是什么？"),
        ("丹瑾的属性？", "丹瑾", "丹瑾的属性？"),
        ("q", "", "q"),
        ("q", "   ", "q"),
        ("", "a", "a"),
        (PRO, "Orion Pro", PRO),
        (PRO, "orion pro", PRO),
        # a reply inside a longer word is not part of the question
        ("Which Orion product fits a team?", "Pro", "Pro：Which Orion product fits a team?"),
        ("Who leads the bakery shift?", "b", "b：Who leads the bakery shift?"),
        ("What is the range of model 25?", "2", "2：What is the range of model 25?"),
        ("What is the range of the X200?", "X2", "X2：What is the range of the X200?"),
        # a choice by place is kept, even where the question holds the same characters
        ("How long can the Kestrel drone fly?", "2", "2：How long can the Kestrel drone fly?"),
        ("Kestrel 2：How long can it fly?", "2", "2：Kestrel 2：How long can it fly?"),
        ("Is team B or team A faster?", "B", "B：Is team B or team A faster?"),
        ("What is the second plan?", "the second", "the second：What is the second plan?"),
        ("第二个版本的价格是多少？", "第二个", "第二个：第二个版本的价格是多少？"),
        ("Which plan, #2 or #3?", "#2", "#2：Which plan, #2 or #3?"),
        # a name that is a whole word of the question is still part of it
        (KESTREL, "Kestrel 2", KESTREL),
        ("华东仓库早班的负责人是谁？", "早班", "华东仓库早班的负责人是谁？"),
    ],
)  # fmt: skip
def test_refined_question(question: str, reply: str, merged: str) -> None:
    assert refined_question(question, reply) == merged


@pytest.mark.parametrize(
    ("reply", "choice"),
    [
        ("2", True), ("#2", True), ("option 3", True), ("no. 1", True), ("B", True),
        ("the second", True), ("second one", True), ("the last", True), ("第二个", True),
        ("第3项", True), ("Kestrel 2", False), ("Pro", False), ("丹瑾", False), ("25 km", False),
    ],
)  # fmt: skip
def test_is_choice(reply: str, choice: bool) -> None:
    assert is_choice(reply) is choice


@pytest.mark.parametrize(
    ("text", "reply", "found"),
    [
        ("Kestrel 2", "2", True), ("Kestrel 25", "2", False), ("Orion Pro plan", "pro", True),
        ("product", "pro", False), ("丹瑾的属性", "丹瑾", True), ("Café Noir", "café", True),
        ("Cafés", "café", False),
    ],
)  # fmt: skip
def test_already_asked_matches_whole_words(text: str, reply: str, found: bool) -> None:
    assert already_asked(text, reply) is found


DRONES = (
    "# Kestrel drones\n\n## Kestrel 3\nThe Kestrel 3 drone flies for up to 45 minutes.\n\n"
    "## Kestrel 2\nThe Kestrel 2 drone flies for up to 31 minutes."
)


@pytest.mark.parametrize(
    ("reply", "minutes"),
    [("2", "31"), ("3", "45"), ("1", "45"), ("the second", "31"), ("B", "31"), ("第一个", "45")],
)
def test_a_number_in_one_options_name_picks_that_option(reply: str, minutes: str) -> None:
    docs = [{"text": DRONES, "filename": "kestrel.md", "score": 2 / 61, "rrf_rank": 1}]
    question = "How long can this drone fly?"
    assert grade(question, docs).hitl_options == ["Kestrel 3", "Kestrel 2"]
    merged = refined_question(question, reply)
    assert grade(merged, docs).route == "answer"
    assert f"up to {minutes} minutes" in "".join(answer_pieces(merged, docs))
