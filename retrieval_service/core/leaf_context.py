"""The contextual header of a leaf: the document's title and, for Markdown
and HTML, the section path above the leaf. A leaf of 800 characters cut from the middle of a
document rarely names what the document is about (SciFact's titles sit in the first leaf
only), so the model and BM25 see `header + leaf` while the stored `text` a caller reads stays
the leaf itself. Parts already inside the leaf are left out of its header (the first leaf
carries the title itself). Pure functions, no I/O."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

#: A first line longer than this is prose, not a title.
MAX_TITLE_CHARS = 200
#: The header never outweighs the leaf: deep or long section paths are cut to this.
MAX_HEADER_CHARS = 300
SEPARATOR = " › "

_MD_HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.+?)(?:[ \t]+#+)?[ \t]*$")
_MD_FENCE = re.compile(r"^ {0,3}(```|~~~)")


@dataclass(frozen=True, slots=True)
class Heading:
    """A heading line of a page: where its line starts and ends, its depth and its text."""

    start: int
    end: int
    level: int
    text: str


def markdown_headings(text: str) -> list[Heading]:
    """ATX headings (`# …` to `###### …`) outside fenced code blocks, in order."""
    out: list[Heading] = []
    fenced = False
    offset = 0
    for line in text.splitlines(keepends=True):
        stripped = line.rstrip("\r\n")
        if _MD_FENCE.match(stripped):
            fenced = not fenced
        elif not fenced and (match := _MD_HEADING.match(stripped)):
            out.append(Heading(offset, offset + len(stripped), len(match[1]), match[2].strip()))
        offset += len(line)
    return out


def _first_line(text: str) -> tuple[str, int, int] | None:
    """The first non-blank line, with its span, when it reads as a title: short, and not the
    whole text (a one-line document has no title apart from itself)."""
    stripped = text.lstrip()
    if not stripped:
        return None
    start = len(text) - len(stripped)
    end = text.find("\n", start)
    if end < 0:
        return None
    line = text[start:end].strip()
    if not line or len(line) > MAX_TITLE_CHARS:
        return None
    return line, start, end


@dataclass(frozen=True, slots=True)
class PageContext:
    """What a page contributes to its leaves' headers: the document title (with its span on
    this page when it sits here) and the headings that open sections."""

    title: str
    title_span: tuple[int, int] | None
    headings: list[Heading]


def page_contexts(file_type: str, pages: Sequence[tuple[int, str]]) -> list[PageContext]:
    """One context per page (`(number, stripped text)` pairs, as `chunk_document` splits them).

    The title: Markdown's first level-1 heading (else its first heading), otherwise the first
    line of the first page when it is short. Sections: Markdown's headings; HTML's pages are
    its `<h2>` sections (loaders.py), each opening with the heading's line."""
    texts = [t for _, t in pages]
    title, title_page, span = "", -1, None
    headings_by_page: list[list[Heading]] = [[] for _ in pages]
    if file_type == "Markdown":
        headings_by_page = [markdown_headings(t) for t in texts]
        every = [(i, h) for i, hs in enumerate(headings_by_page) for h in hs]
        top = next(((i, h) for i, h in every if h.level == 1), every[0] if every else None)
        if top is not None:
            title, title_page, span = top[1].text, top[0], (top[1].start, top[1].end)
    if file_type == "HTML":
        for i, (number, text) in enumerate(pages):
            line = _first_line(text)
            if number > 0 and line is not None:
                headings_by_page[i] = [Heading(line[1], line[2], 2, line[0])]
    if not title:
        for i, text in enumerate(texts):
            if text.strip():
                line = _first_line(text)
                if line is not None:
                    title, title_page, span = line[0], i, (line[1], line[2])
                break
    return [
        PageContext(title, span if i == title_page else None, headings_by_page[i])
        for i in range(len(pages))
    ]


def leaf_header(context: PageContext, start: int | None, end: int) -> str:
    """The header of a leaf spanning `[start, end)` of its page (`start` None = unknown, then
    the title only): the title, then the path of headings the leaf sits under, leaving out
    those whose line lies inside the leaf."""

    def inside(span: tuple[int, int]) -> bool:
        return start is not None and start <= span[0] and span[1] <= end

    parts: list[str] = []
    if context.title and not (context.title_span is not None and inside(context.title_span)):
        parts.append(context.title)
    if start is not None:
        path: list[Heading] = []
        for h in context.headings:
            if h.start > start:
                break
            path = [p for p in path if p.level < h.level]
            path.append(h)
        for h in path:
            if h.text != context.title and not inside((h.start, h.end)):
                parts.append(h.text)
    return SEPARATOR.join(parts)[:MAX_HEADER_CHARS].strip()


def with_header(header: str, text: str) -> str:
    """What the embedder and BM25 read for a leaf."""
    return f"{header}\n\n{text}" if header else text
