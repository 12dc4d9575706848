"""Grounded answers (docs/api.md#grounded-answers): the rules that turn a model's raw answer
text into the `Answer` a caller receives. Pure: no model call, no I/O.

- `[n]` markers cite the 1-based position in RunResult.docs; markers outside 1..len(docs) are
  removed, also from the streamed pieces (`MarkerFilter`), so the deltas always concatenate to
  the final text.
- Each cited doc gets one `Citation` whose quote is a verbatim span of its text: the sentence(s)
  holding the claim when the claim is copied from the doc, else the doc's sentence sharing most
  words (Latin) or character pairs (CJK) with the claim. Sentences are read by
  `shared.sentences`, the reading the retrieval chunker cuts by too.
- A partial answer ends with a sentence naming what the evidence lacks (the grade's
  missing_slots) and the sub-questions of a compound question it does not answer or answers
  only in part, in the question's language.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from shared.lang import CJK_RUN
from shared.sentences import CLAIM_EDGES, sentence_spans, unwrap

#: "[3]", "[1, 2]", "[1，2]", "[1、2]": one or more chunk numbers in square brackets.
MARKER = re.compile(r"\[\s*(\d{1,4}(?:\s*[,，、]\s*\d{1,4})*)\s*\]")
_MARKER_WITH_SPACE = re.compile(r"[ \t]*" + MARKER.pattern)
#: What an unfinished marker can look like at the end of a streamed piece.
_OPEN_MARKER = re.compile(r"\[[\d\s,，、]{0,24}$")
_NUMBER = re.compile(r"\d+")
_LATIN_WORD = re.compile(r"[a-z0-9]+")


@dataclass(frozen=True, slots=True)
class Citation:
    """One cited doc: `index` is its 1-based position in the docs; `quote` is verbatim;
    `document_id` is the doc's identity in its knowledge base (docs/api.md#knowledge-bases)."""

    index: int
    filename: str
    page_number: str
    quote: str
    document_id: str
    #: The mean score of the claims citing it (docs/api.md#grounding-check).
    support_score: float = 0.0


@dataclass(frozen=True, slots=True)
class Answer:
    text: str
    citations: tuple[Citation, ...]
    model: str
    partial: bool
    #: The mean score of its claims that need support, after unsupported ones were dropped.
    support_score: float = 0.0
    #: Claims the model wrote that the grounding check dropped.
    dropped_claims: int = 0


# ---- markers ---------------------------------------------------------------------------------


def marker_numbers(marker: str) -> list[int]:
    return [int(n) for n in _NUMBER.findall(marker)]


def clean_markers(text: str, doc_count: int) -> str:
    """`text` with each marker reduced to its numbers within 1..doc_count, written `[a][b]`;
    a marker with none left is removed together with the spaces before it."""

    def keep(match: re.Match[str]) -> str:
        valid = [n for n in dict.fromkeys(marker_numbers(match.group(1))) if 1 <= n <= doc_count]
        if not valid:
            return ""
        lead = match.group(0)[: match.group(0).index("[")]
        return lead + "".join(f"[{n}]" for n in valid)

    return _MARKER_WITH_SPACE.sub(keep, text)


class MarkerFilter:
    """`clean_markers` over a stream: `feed` returns what can be sent now, holding back an
    unfinished marker and the spaces before it until the next piece decides them; `finish`
    returns the rest. The outputs concatenate to `clean_markers` of the whole input."""

    def __init__(self, doc_count: int) -> None:
        self._doc_count = doc_count
        self._pending = ""

    def feed(self, piece: str) -> str:
        self._pending += piece
        cut = len(self._pending)
        opened = _OPEN_MARKER.search(self._pending)
        if opened:
            cut = opened.start()
        while cut > 0 and self._pending[cut - 1] in " \t":
            cut -= 1
        ready, self._pending = self._pending[:cut], self._pending[cut:]
        return clean_markers(ready, self._doc_count)

    def finish(self) -> str:
        ready, self._pending = self._pending, ""
        return clean_markers(ready, self._doc_count)


# ---- citations -------------------------------------------------------------------------------


def _tokens(text: str) -> set[str]:
    lowered = text.lower()
    tokens = {word for word in _LATIN_WORD.findall(lowered) if len(word) > 1 or word.isdigit()}
    for run in CJK_RUN.findall(lowered):
        tokens.update(run[i : i + 2] for i in range(max(1, len(run) - 1)))
    return tokens


def choose_quote(claim: str, doc_text: str) -> str:
    """The verbatim span of `doc_text` that `claim` rests on (see the module docstring)."""
    spans = sentence_spans(doc_text)
    if not spans:
        return doc_text.strip()
    core = claim.strip(CLAIM_EDGES)
    where = doc_text.find(core) if core else -1
    if where != -1:
        inside = [(a, b) for a, b in spans if a < where + len(core) and b > where]
        if inside:
            return doc_text[inside[0][0] : inside[-1][1]]
    if core:  # a claim read from wrapped lines (`unwrap`): the span that holds it
        holding = [(a, b) for a, b in spans if core in unwrap(doc_text[a:b])]
        if holding:
            return doc_text[holding[0][0] : holding[0][1]]
    wanted = _tokens(claim)

    def similarity(span: tuple[int, int]) -> float:
        have = _tokens(doc_text[span[0] : span[1]])
        shared = len(wanted & have)
        return shared / math.sqrt(len(wanted) * len(have)) if shared else 0.0

    best = max(spans, key=similarity)  # max keeps the first of equals: the earliest sentence
    return doc_text[best[0] : best[1]]


def cited_claims(text: str) -> list[tuple[int, str]]:
    """(doc number, the claim before its marker) for every marker number in `text`, in order.
    The claim is the text since the previous marker; markers side by side share one claim."""
    claims: list[tuple[int, str]] = []
    previous_end, claim = 0, ""
    for match in MARKER.finditer(text):
        between = text[previous_end : match.start()]
        if between.strip(CLAIM_EDGES):
            claim = between
        previous_end = match.end()
        claims.extend((n, claim) for n in marker_numbers(match.group(1)))
    return claims


def build_citations(text: str, docs: Sequence[Mapping[str, Any]]) -> tuple[Citation, ...]:
    """One citation per cited doc, in order of first citation (markers already cleaned)."""
    citations: dict[int, Citation] = {}
    for number, claim in cited_claims(text):
        if number in citations or not 1 <= number <= len(docs):
            continue
        doc = docs[number - 1]
        page = doc.get("page_number")
        filename = str(doc.get("filename") or "")
        citations[number] = Citation(
            index=number,
            filename=filename,
            page_number="" if page is None else str(page),
            quote=choose_quote(claim, str(doc.get("text") or "")),
            # A document ingested without an id is known by its file name.
            document_id=str(doc.get("document_id") or filename),
        )
    return tuple(citations.values())


# ---- partial evidence ------------------------------------------------------------------------


def partial_note(
    missing_slots: Iterable[str],
    *,
    chinese: bool,
    unanswered: Iterable[str] = (),
    incomplete: Iterable[str] = (),
) -> str:
    """The closing sentence of an answer from partial evidence, in the question's language:
    what the evidence lacks (the grade's missing slots), the sub-questions of a compound
    question it answers only in part (`incomplete`) and those it does not answer
    (`unanswered`), each quoted as it was asked."""
    slots, partly, questions = (
        _distinct(missing_slots),
        _distinct(incomplete),
        _distinct(unanswered),
    )
    if chinese:
        parts = ["注意：现有资料只能部分回答这个问题"]
        if slots:
            parts.append(f"缺少关于{'、'.join(slots)}的信息")
        if partly:
            parts.append(f"关于{'、'.join(f'“{q}”' for q in partly)}的信息不完整")
        if questions:
            asked = "、".join(f"“{q}”" for q in questions)
            parts.append(f"{'也' if len(parts) > 1 else ''}无法回答其中的{asked}")
        return "，".join(parts) + "。"
    clauses = []
    if slots:
        clauses.append(f"it says nothing about {', '.join(slots)}")
    if partly:
        clauses.append(f"its answer to {_en_list([f'“{q}”' for q in partly])} is incomplete")
    if questions:
        clauses.append(f"it does not answer {_en_list([f'“{q}”' for q in questions])}")
    text = "Note: the evidence answers this question only in part"
    if clauses:
        text += "; " + ", and ".join(clauses)
    return text if questions and questions[-1][-1:] in "?!." else text + "."


def _distinct(values: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(value.strip() for value in values if value.strip()))


def _en_list(items: list[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def join_note(text: str, note: str) -> str:
    """What follows the model's text when a note closes the answer."""
    return ("\n\n" if text.strip() else "") + note
