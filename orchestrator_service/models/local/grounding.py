"""`check_grounding` for the built-in model (LOCAL_MODEL.md §7): a claim is supported by a
fact when one of the fact's sentences (or two side by side) holds the claim's key terms, every
number the claim states, the names it states, and says it with the same polarity. Pure."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from orchestrator_service.answer import sentences, unwrap
from orchestrator_service.models.base import ClaimToCheck, ClaimVerdict
from orchestrator_service.models.local.support import question_names
from orchestrator_service.models.local.text import Term, evidence_stems, key_terms
from shared.lang import CJK_CHAR

#: Text that asserts nothing to support: the answer's own note on what the evidence lacks
#: (answer.partial_note), greetings and closing lines.
_NO_CLAIM = re.compile(
    r"^\s*(?:note: the evidence answers|注意：现有资料|"
    r"(?:hi|hello|sure|certainly|of course|thanks|thank you)\b[\s,.!]*$|"
    r"here (?:is|are) what|hope this helps|let me know|i hope|"
    r"你好|您好|好的[，,。！!]?$|以下是|希望(?:这|以上|对)|如有其他问题)",
    re.IGNORECASE,
)
#: A number as the claim states it: "4", "1,000", "2.5", "24/7"'s parts.
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_EN_NEGATION = re.compile(
    r"\b(?:not|no|never|none|nothing|cannot|neither|nor|without|unless)\b|n't\b|\bnon-",
    re.IGNORECASE,
)
_ZH_NEGATION = re.compile(r"[不没无未非勿别]")
#: Words that hold a negation character without negating anything.
_ZH_NOT_NEGATION = re.compile(
    r"不同|不仅|不断|不过|不管|不少|无论|非常|未来|别的|别人|区别|分别|特别|类别|级别|性别|识别"
)
#: How much a missing name or a changed number or polarity leaves of a claim's score.
CONTRADICTED_SCORE = 0.1


@dataclass(frozen=True, slots=True)
class _Window:
    """One sentence of a fact, or two side by side, prepared for matching."""

    flat: str
    lowered: str
    stems: frozenset[str]
    numbers: frozenset[str]
    negated: bool


def check(
    claims: Sequence[ClaimToCheck], facts: Sequence[str], threshold: float
) -> list[ClaimVerdict]:
    """One verdict per claim, in order."""
    windows = [_windows(fact) for fact in facts]
    return [_verdict(index, claim, windows, threshold) for index, claim in enumerate(claims)]


def _verdict(
    index: int, claim: ClaimToCheck, windows: Sequence[tuple[_Window, ...]], threshold: float
) -> ClaimVerdict:
    text = claim.text.strip()
    terms = _content_terms(text)
    if not terms or _NO_CLAIM.match(text):
        return ClaimVerdict(claim_index=index, grounding_check_required=False, score=0.0)
    allowed = claim.cited or tuple(range(len(windows)))
    scored = sorted(
        ((claim_score(text, terms, windows[f]), f) for f in allowed if 0 <= f < len(windows)),
        key=lambda pair: -pair[0],
    )
    best = scored[0][0] if scored else 0.0
    return ClaimVerdict(
        claim_index=index,
        grounding_check_required=True,
        score=round(best, 4),
        citation_indices=[f for score, f in scored if score >= threshold],
    )


def claim_score(text: str, terms: list[Term], windows: Sequence[_Window]) -> float:
    """How well the best window supports the claim: 1 when it holds the claim verbatim;
    else the share of key terms it holds, each missing one halving it; at most
    CONTRADICTED_SCORE when a name, a number or the polarity differs."""
    flat = _flat(text)
    numbers = frozenset(_numbers(text))
    negated = _negated(text)
    names = [key_terms(name) for name in question_names(text)]
    best = 0.0
    for window in windows:
        if flat and flat in window.flat:
            return 1.0
        missing = [term for term in terms if not _covers(window, term)]
        score = 1.0 - len(missing) / len(terms)
        if (
            any(not all(_covers(window, term) for term in name) for name in names)
            or not numbers <= window.numbers
            or negated != window.negated
        ):
            score = min(score, CONTRADICTED_SCORE)
        best = max(best, score)
    return best


def _content_terms(text: str) -> list[Term]:
    """The claim's key terms that words can match: numbers are checked as numbers, and a lone
    Chinese character (时, 多) is too common to tell anything."""
    return [
        term
        for term in key_terms(text)
        if not _NUMBER.fullmatch(term.key) and not (term.chinese and len(term.key) == 1)
    ]


def _covers(window: _Window, term: Term) -> bool:
    return term.key in window.lowered if term.chinese else term.key in window.stems


@lru_cache(maxsize=256)
def _windows(fact: str) -> tuple[_Window, ...]:
    """Each sentence of the fact, and each pair of neighbours (a claim may join two)."""
    parts = [unwrap(sentence) for sentence in sentences(fact)] or [fact]
    texts = parts + [f"{a} {b}" for a, b in zip(parts, parts[1:], strict=False)]
    return tuple(_window(text) for text in texts)


def _window(text: str) -> _Window:
    lowered = text.lower()
    return _Window(
        _flat(text), lowered, evidence_stems(lowered), frozenset(_numbers(text)), _negated(text)
    )


def _numbers(text: str) -> list[str]:
    """The numbers the text states, as digits: "1,000" is 1000, "six" and "六" are 6."""
    spelled = _SPELLED.sub(lambda m: f" {_SPELLED_VALUES[m[0].lower()]} ", text)
    return [n.replace(",", "") for n in _NUMBER.findall(spelled)]


_SPELLED_VALUES = (
    {
        word: str(value)
        for value, word in enumerate(
            [
                "zero",
                "one",
                "two",
                "three",
                "four",
                "five",
                "six",
                "seven",
                "eight",
                "nine",
                "ten",
                "eleven",
                "twelve",
            ]
        )
    }
    | {"twenty": "20", "thirty": "30", "fifty": "50", "hundred": "100", "两": "2"}
    | {char: str(value) for value, char in enumerate("零一二三四五六七八九十")}
)
#: A spelled-out number: an English word on its own, a Chinese numeral before a measure word
#: or unit (三天, 两个) — not one inside a word (一线, 统一).
_SPELLED = re.compile(
    r"\b(?:" + "|".join(w for w in _SPELLED_VALUES if w.isascii()) + r")\b"
    r"|[零一二三四五六七八九十两](?=[个天周月年次台份名位小分秒倍元块层])",
    re.IGNORECASE,
)


def _negated(text: str) -> bool:
    """Whether the text says "not" (or "without", "unless", 不, 无, …) anywhere: a claim and
    the sentence it rests on must agree on it."""
    if CJK_CHAR.search(text):
        return bool(_ZH_NEGATION.search(_ZH_NOT_NEGATION.sub("", text)))
    return bool(_EN_NEGATION.search(text))


def _flat(text: str) -> str:
    """Lower-cased, spaces and closing marks dropped: a claim copied from a sentence matches."""
    return re.sub(r"[\s。！？；.!?;，,]+", "", text.lower())
