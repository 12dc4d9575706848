"""The AIP-160 subset ListRuns and ListFeedback accept: comparisons joined by AND, each
`field OP value` (value bare or double-quoted). Which fields and operators each list takes is
data (`RUN_FIELDS`, `FEEDBACK_FIELDS`); a malformed filter is INVALID_ARGUMENT naming
`filter`, saying which part is wrong."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from orchestrator_service.history.model import REASONS, Rating
from shared.errors import InvalidArgument

_TERM: Final = re.compile(r'\s*([a-z_.]+)\s*(<=|>=|!=|=|<|>|:)\s*("(?:[^"\\]|\\.)*"|[^\s"]+)\s*')
_AND: Final = re.compile(r"\s+AND\s+")

EQUALITY: Final = frozenset({"=", "!="})
ORDER: Final = frozenset({"=", "<", "<=", ">", ">="})


@dataclass(frozen=True, slots=True)
class Condition:
    field: str
    op: str
    value: Any


@dataclass(frozen=True, slots=True)
class FieldSpec:
    ops: frozenset[str]
    parse: Callable[[str], Any]


def _time_ms(text: str) -> int:
    try:
        stamp = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError("an RFC 3339 time (2026-12-01T00:00:00Z)") from None
    if stamp.tzinfo is None:
        raise ValueError("an RFC 3339 time with its offset (…Z or …+01:00)")
    return int(stamp.timestamp() * 1000)


def _rating(text: str) -> int:
    try:
        return int(Rating[text])
    except KeyError:
        raise ValueError("THUMBS_UP, THUMBS_DOWN or RATING_UNSPECIFIED") from None


def _reason(text: str) -> int:
    for number, name in REASONS.items():
        if name == text:
            return number
    raise ValueError(", ".join(REASONS.values()))


def _word(text: str) -> str:
    return text


RUN_FIELDS: Final[Mapping[str, FieldSpec]] = {
    "route": FieldSpec(EQUALITY, _word),
    "retrieval_status": FieldSpec(EQUALITY, _word),
    "knowledge_base": FieldSpec(frozenset({"="}), lambda t: t.removeprefix("knowledge_bases/")),
    "create_time": FieldSpec(ORDER, _time_ms),
    "feedback.rating": FieldSpec(EQUALITY, _rating),
}
FEEDBACK_FIELDS: Final[Mapping[str, FieldSpec]] = {
    "rating": FieldSpec(EQUALITY, _rating),
    "reasons": FieldSpec(frozenset({":"}), _reason),
    "create_time": FieldSpec(ORDER, _time_ms),
}


def parse_filter(text: str, fields: Mapping[str, FieldSpec]) -> list[Condition]:
    if not text.strip():
        return []
    conditions = []
    for term in _AND.split(text.strip()):
        match = _TERM.fullmatch(term)
        if match is None:
            raise InvalidArgument(
                "filter", f"cannot read {term.strip()!r} (expected field OP value, joined by AND)"
            )
        name, op, raw = match.groups()
        spec = fields.get(name)
        if spec is None:
            raise InvalidArgument("filter", f"unknown field {name!r} (one of {', '.join(fields)})")
        if op not in spec.ops:
            raise InvalidArgument("filter", f"{name} takes {' '.join(sorted(spec.ops))}, not {op}")
        value = raw[1:-1].replace('\\"', '"') if raw.startswith('"') else raw
        try:
            conditions.append(Condition(name, op, spec.parse(value)))
        except ValueError as exc:
            raise InvalidArgument("filter", f"{name}: {value!r} is not {exc}") from None
    return conditions
