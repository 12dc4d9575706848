"""A request's history (docs/api.md#conversations): the limits, checked before any work and
naming `history`; the most recent turns a chat client keeps; the JSON form the CLI reads."""

from __future__ import annotations

import pytest

from orchestrator_service.conversation import (
    MAX_HISTORY_BYTES,
    MAX_HISTORY_TURNS,
    Turn,
    check_history,
    history_from_json,
    recent_history,
)
from shared.errors import InvalidArgument


@pytest.mark.parametrize(
    ("history", "message"),
    [
        ([Turn("q", "a")] * 21, "history: holds 21 turns, at most 20"),
        ([Turn("q" * 8000, "a" * 8385)], "history: is 16385 bytes of text in all, at most 16384"),
        ([Turn("问" * 5462)], "history: is 16386 bytes of text in all, at most 16384"),
        ([Turn("q"), Turn(" ")], "history[1].question: must not be blank"),
        ([Turn("q" * 4001)], "history[0].question: is 4001 characters, at most 4000"),
        ([Turn("q", "a\x00")], "history[0].answer: must not contain control character U+0000"),
    ],
)
def test_over_the_limits(history: list[Turn], message: str) -> None:
    with pytest.raises(InvalidArgument) as raised:
        check_history(history, 4000)
    assert str(raised.value) == message and raised.value.field.startswith("history")


@pytest.mark.parametrize(
    "history",
    [
        [],
        [Turn("q", "a")] * MAX_HISTORY_TURNS,
        [Turn("q" * 4000, "a" * (MAX_HISTORY_BYTES - 4000))],
        [Turn("问" * 1000, "")],
    ],
)
def test_within_the_limits(history: list[Turn]) -> None:
    check_history(history, 4000)


def test_recent_history_drops_the_oldest_turns_first() -> None:
    turns = [Turn(f"q{i}", "") for i in range(25)]
    assert recent_history(turns) == turns[5:]
    big = [Turn("old", "x" * 11_000), Turn("mid", "y" * 6_000), Turn("new", "z" * 300)]
    assert recent_history(big) == big[1:]
    check_history(recent_history(big), 4000)


def test_history_from_json() -> None:
    data = [{"question": "q1", "answer": "a1"}, {"question": "q2"}, {"question": "q3",
            "answer": {"text": "a3", "citations": []}}]  # fmt: skip
    assert history_from_json(data) == (Turn("q1", "a1"), Turn("q2", ""), Turn("q3", "a3"))
    for bad in ({"question": "q"}, [{"answer": "a"}], [{"question": "q", "answer": 3}]):
        with pytest.raises(ValueError, match="history"):
            history_from_json(bad)
