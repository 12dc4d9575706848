"""A conversation's earlier turns as a request carries them (docs/api.md#conversations): the
caller sends them on every call and the server keeps no session, so any replica answers. This
module owns their shape and limits; the condensation itself is a model task."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from shared.errors import InvalidArgument
from shared.text_input import check_text

HISTORY_FIELD = "history"
#: At most this many earlier turns per request.
MAX_HISTORY_TURNS = 20
#: At most this many UTF-8 bytes of questions and answers in all.
MAX_HISTORY_BYTES = 16 * 1024


@dataclass(frozen=True, slots=True)
class Turn:
    """One earlier exchange: the user's question and the answer they were shown ("" when
    none was written)."""

    question: str
    answer: str = ""


def check_history(history: Sequence[Turn], max_chars: int) -> None:
    """The limits of docs/api.md#conversations, checked before any work: at most
    MAX_HISTORY_TURNS turns and MAX_HISTORY_BYTES in all; each question not blank and, like
    each answer, free of control characters. InvalidArgument names `history` (with the turn)."""
    if len(history) > MAX_HISTORY_TURNS:
        raise InvalidArgument(
            HISTORY_FIELD, f"holds {len(history)} turns, at most {MAX_HISTORY_TURNS}"
        )
    size = sum(len(t.question.encode()) + len(t.answer.encode()) for t in history)
    if size > MAX_HISTORY_BYTES:
        raise InvalidArgument(
            HISTORY_FIELD, f"is {size} bytes of text in all, at most {MAX_HISTORY_BYTES}"
        )
    for index, turn in enumerate(history):
        check_text(f"{HISTORY_FIELD}[{index}].question", turn.question, max_chars)
        if turn.answer:
            # An answer may be long (the byte limit above bounds it); its characters are checked.
            check_text(f"{HISTORY_FIELD}[{index}].answer", turn.answer, MAX_HISTORY_BYTES)


def recent_history(history: Sequence[Turn]) -> list[Turn]:
    """The most recent turns that fit the limits (what a client keeping a conversation sends
    next): the oldest ones are dropped first."""
    kept: list[Turn] = []
    size = 0
    for turn in reversed(history):
        size += len(turn.question.encode()) + len(turn.answer.encode())
        if len(kept) == MAX_HISTORY_TURNS or size > MAX_HISTORY_BYTES:
            break
        kept.append(turn)
    return kept[::-1]


def history_from_json(data: Any) -> tuple[Turn, ...]:
    """Turns from JSON data: a list of {"question": …, "answer": …} objects (an `ask --json`
    result's question and answer text read the same way). ValueError names what is wrong."""
    if not isinstance(data, list):
        raise ValueError("history must be a JSON list of {question, answer} objects")
    turns = []
    for index, item in enumerate(data):
        if not isinstance(item, Mapping) or not isinstance(item.get("question"), str):
            raise ValueError(f"history[{index}] needs a string `question`")
        answer = item.get("answer") or ""
        if isinstance(answer, Mapping):  # an `ask --json` result's answer object
            answer = answer.get("text") or ""
        if not isinstance(answer, str):
            raise ValueError(f"history[{index}].answer must be a string")
        turns.append(Turn(item["question"], answer))
    return tuple(turns)


def history_to_json(history: Iterable[Turn]) -> list[dict[str, str]]:
    return [{"question": t.question, "answer": t.answer} for t in history]
