"""How a text is read as paragraphs and sentences, decided once for both services: the grounded
answer's quotes and claims, the grounding check and the local model (orchestrator_service) and
the chunker's boundaries (retrieval_service/core/chunking.py) all read these definitions, so a
chunk ends where a quote or a claim may end. Pure: `re` only.

A line break inside a paragraph of hard-wrapped text (plain text, Markdown, man pages,
changelogs) does not end a sentence; lists, tables, headings and code blocks keep their lines.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum

from shared.lang import CJK_CHAR

#: Sentence ends: CJK marks anywhere, "；" included (a Chinese clause reads on its own); Latin
#: marks before whitespace or the end, ";" excluded (an English clause after it is lower case).
_SENTENCE_END = re.compile(r"[。！？；]+|[.!?]+(?=\s|$)")
_LINE_PREFIX = re.compile(r"^\s*(?:[-*+•]\s+|\d{1,3}[.)]\s+|>\s*)?")
_HEADING = re.compile(r"^\s*#{1,6}\s")
_FENCE = re.compile(r"^\s*(```|~~~)")
#: A line this wide (columns) or wider may have been wrapped: the next line may continue its
#: sentence. Hard-wrapped text fills lines to 65–80 columns; titles and labels are shorter.
WRAP_MIN_WIDTH = 45
#: What may stand around a claim without being part of it: spaces and punctuation.
CLAIM_EDGES = " \t\r\n。！？；，、.!?;,:：-—"


class LineKind(Enum):
    """What a line is to the paragraph reading."""

    BLANK = "blank"
    HEADING = "heading"  # a Markdown heading: part of no paragraph
    FENCE = "fence"  # a code fence's ``` or ~~~ line: part of no paragraph
    CODE = "code"  # a line inside a fenced code block: a paragraph of its own
    ROW = "row"  # a table row: a paragraph of its own
    ITEM = "item"  # a list item's first line: starts a paragraph
    PROSE = "prose"  # anything else (a quote's lines too): may continue the paragraph before


@dataclass(frozen=True, slots=True)
class Line:
    """One line of a text as the paragraph reading sees it (offsets into the text)."""

    start: int
    #: Where its words start: after a list bullet or a quote mark.
    body_start: int
    #: Its end, the line break left out.
    end: int
    kind: LineKind
    #: Whether it continues the paragraph of the line before (that one was wrapped).
    joins: bool


#: The kinds that belong to no paragraph.
_OUTSIDE = frozenset({LineKind.BLANK, LineKind.HEADING, LineKind.FENCE})


def read_lines(text: str) -> Iterator[Line]:
    """Every line of `text` with its kind and whether it continues the paragraph before: a
    prose line does when the line before was prose or a list item long enough to have been
    wrapped (`line_may_wrap`); a list item, a table row and a code line never do."""
    fenced = False
    joinable = False  # whether the next line may continue the current paragraph
    offset = 0
    for raw in _lines(text):
        start, offset = offset, offset + len(raw)
        body = raw.rstrip("\r\n")
        end = start + len(body)
        stripped = body.strip()
        kind = _line_kind(body, stripped, fenced)
        if kind is LineKind.FENCE:
            fenced = not fenced
        if kind in _OUTSIDE or kind in (LineKind.CODE, LineKind.ROW):
            yield Line(start, start, end, kind, joins=False)
            joinable = False
            continue
        prefix = _LINE_PREFIX.match(body)
        body_start = start + (prefix.end() if prefix else 0)
        yield Line(start, body_start, end, kind, joins=joinable and kind is LineKind.PROSE)
        joinable = line_may_wrap(stripped)


#: What `str.splitlines` ends a line at.
_LINE_BREAK = re.compile(r"\r\n|[\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]")


def _lines(text: str) -> Iterator[str]:
    """`text.splitlines(keepends=True)` one line at a time: a large page is not copied into a
    list of its lines (the chunker reads pages of any size)."""
    start = 0
    for match in _LINE_BREAK.finditer(text):
        yield text[start : match.end()]
        start = match.end()
    if start < len(text):
        yield text[start:]


def _line_kind(body: str, stripped: str, fenced: bool) -> LineKind:
    if _FENCE.match(body):
        return LineKind.FENCE
    if not stripped:
        return LineKind.BLANK
    if _HEADING.match(body):  # also inside a fence: a shell or Python comment reads as one
        return LineKind.HEADING
    if fenced:
        return LineKind.CODE
    if body.count("|") >= 2:
        return LineKind.ROW
    prefix = _LINE_PREFIX.match(body)
    marker = body[: prefix.end()].strip() if prefix else ""
    # A quote's lines wrap as prose; a bullet or a number starts an item.
    return LineKind.ITEM if marker and not marker.startswith(">") else LineKind.PROSE


def iter_paragraph_spans(text: str) -> Iterator[tuple[int, int]]:
    """`paragraph_spans` one at a time (a page is read without a list of its paragraphs)."""
    run: tuple[int, int] | None = None
    for line in read_lines(text):
        if line.kind in _OUTSIDE:
            continue
        if line.joins and run is not None:
            run = (run[0], line.end)
            continue
        if run is not None:
            yield run
        run = (line.body_start, line.end)
    if run is not None:
        yield run


def paragraph_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of each run of text a sentence may not cross: a paragraph of hard-wrapped
    lines (plain text, Markdown, man pages, changelogs) is one run; a heading is none (skipped);
    a list item, a table row and a line of a fenced code block each start their own (a list
    item's wrapped continuation joins it as prose does). A line joins the one before when that
    one was long enough to have been wrapped (`WRAP_MIN_WIDTH`): a short line — a title, a
    label, an address — ends its run."""
    return list(iter_paragraph_spans(text))


def paragraph_starts(text: str) -> Iterator[int]:
    """Where each line that does not continue the paragraph before starts (a list bullet, a
    heading's "#" and a table's "|" included): the places a chunk may start without cutting a
    paragraph. Blank lines start nothing, so they stay with the paragraph they close."""
    lines = read_lines(text)
    return (line.start for line in lines if line.kind is not LineKind.BLANK and not line.joins)


def iter_sentence_spans(text: str) -> Iterator[tuple[int, int]]:
    """`sentence_spans` one at a time."""
    for block_start, block_end in iter_paragraph_spans(text):
        start = block_start
        for mark in _SENTENCE_END.finditer(text, start, block_end):
            if text[start : mark.end()].strip(CLAIM_EDGES):
                yield trimmed(text, start, mark.end())
            start = mark.end()
        if text[start:block_end].strip(CLAIM_EDGES):
            yield trimmed(text, start, block_end)


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of every sentence of `text`, so that `text[start:end]` is the sentence
    verbatim: split at sentence marks (kept with their sentence) and at the ends of paragraphs,
    list bullets and surrounding whitespace left out, Markdown heading lines skipped. A line
    break inside a paragraph of hard-wrapped text does not end a sentence (`paragraph_spans`):
    such a sentence spans lines, its line breaks verbatim (`unwrap` reads it as one line)."""
    return list(iter_sentence_spans(text))


def _width(text: str) -> int:
    """Columns a line takes: a CJK character two, as a terminal shows it."""
    return len(text) + len(CJK_CHAR.findall(text))


def line_may_wrap(line: str) -> bool:
    """Whether the next line may continue `line`'s sentence: it is as wide as wrapped text."""
    return _width(line.strip()) >= WRAP_MIN_WIDTH


_UNWRAP = re.compile(r"[ \t]*\r?\n[ \t]*")
#: A CJK character or full-width mark: no space is written beside one when lines are joined.
_CJK_SIDE = re.compile(f"(?:{CJK_CHAR.pattern})|[\u3000-\u303f\uff00-\uffef]")


def unwrap(sentence: str) -> str:
    """A sentence that spans wrapped lines, as one line: a line break (with the indentation
    around it) is a space between words, nothing between two CJK characters."""

    def join(match: re.Match[str]) -> str:
        before = sentence[match.start() - 1] if match.start() else ""
        after = sentence[match.end()] if match.end() < len(sentence) else ""
        return "" if _CJK_SIDE.match(before) or _CJK_SIDE.match(after) else " "

    return _UNWRAP.sub(join, sentence)


def trimmed(text: str, start: int, end: int) -> tuple[int, int]:
    """`(start, end)` narrowed past the whitespace at either end of `text[start:end]`."""
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


def sentences(text: str) -> list[str]:
    return [text[a:b] for a, b in sentence_spans(text)]


def split_terminal(sentence: str) -> tuple[str, str]:
    """(claim, its closing marks): "It runs tasks." → ("It runs tasks", ".")."""
    claim = sentence.rstrip("。！？；.!?;")
    return claim, sentence[len(claim) :]
