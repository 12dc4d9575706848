"""Three-level splitting (docs/api.md#documents-and-chunks): each page → L1 pieces → L2 pieces →
L3 leaves, with the ids `{filename}::p{page}::l{level}::{n}`, parent/root links and a running
`chunk_idx` in depth-first order. Pieces are cut where the answerer reads a paragraph or a
sentence to end (`shared.sentences`), so a chunk holds whole sentences whenever they fit in it.
Pure functions, no I/O."""

from __future__ import annotations

import bisect
import itertools
import re
from array import array
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace

from retrieval_service.core.leaf_context import leaf_header, page_contexts, with_header
from shared.sentences import iter_sentence_spans, paragraph_starts, trimmed

#: A span of the page: (start, end) offsets, `page[start:end]`.
Span = tuple[int, int]


@dataclass(frozen=True, slots=True)
class Reading:
    """Where a page's paragraphs start and its sentences end, read once for the whole page
    (`shared.sentences`), so a piece of any level is cut where the page is read to end one,
    not where a reading of the piece alone would (its first line may be the short tail of a
    wrapped one). Offsets are held as 8-byte integers, about one per sentence."""

    #: Where each paragraph-level part starts (a heading, list item, table row, code line or
    #: hard-wrapped paragraph; the blank lines after one stay with it).
    paragraphs: array[int]
    #: Where each sentence ends (after its mark), increasing.
    sentences: array[int]

    @classmethod
    def of(cls, text: str) -> Reading:
        ends = (end for _, end in iter_sentence_spans(text))
        return cls(array("q", paragraph_starts(text)), array("q", ends))


#: Where a span of the page may be cut: the offsets strictly inside it at which one part ends
#: and the next starts, increasing.
Cuts = Callable[[str, Reading, int, int], Iterator[int]]


def paragraph_cuts(text: str, reading: Reading, start: int, end: int) -> Iterator[int]:
    """Between paragraphs as `shared.sentences.paragraph_spans` reads them: a hard-wrapped
    paragraph is one part (its line breaks are no cut); a heading, a list item, a table row
    and a code line each are one."""
    return _inside(reading.paragraphs, start, end)


def sentence_cuts(text: str, reading: Reading, start: int, end: int) -> Iterator[int]:
    """After each sentence as `shared.sentences.sentence_spans` reads it (CJK marks anywhere,
    Latin ones before whitespace; a wrapped line break ends none): the mark closes its part,
    the whitespace after it opens the next (a list bullet stays with its first sentence)."""
    return _inside(reading.sentences, start, end)


_CLAUSE_MARK = re.compile(r"[，、]+")
_WHITESPACE = re.compile(r"\s+")


def clause_cuts(text: str, reading: Reading, start: int, end: int) -> Iterator[int]:
    """After a full-width comma or enumeration comma: a long Chinese sentence's clauses."""
    return (mark.end() for mark in _CLAUSE_MARK.finditer(text, start, end) if mark.end() < end)


def word_cuts(text: str, reading: Reading, start: int, end: int) -> Iterator[int]:
    """After a run of whitespace (a space or a line break): between words."""
    return (gap.end() for gap in _WHITESPACE.finditer(text, start, end) if gap.end() < end)


def _inside(offsets: array[int], start: int, end: int) -> Iterator[int]:
    """The offsets strictly between `start` and `end` (`offsets` increasing)."""
    i = bisect.bisect_right(offsets, start)
    while i < len(offsets) and offsets[i] < end:
        yield offsets[i]
        i += 1


#: The cuts tried in turn, coarsest first; a part still too long after the last is cut into
#: single characters. Paragraph runs come first, then sentences, so a chunk ends inside a
#: sentence only when that sentence alone is longer than the chunk, and never at a wrapped
#: line break inside a paragraph.
BOUNDARIES: tuple[Cuts, ...] = (paragraph_cuts, sentence_cuts, clause_cuts, word_cuts)


@dataclass(frozen=True, slots=True)
class LevelSizes:
    """Character size and overlap of one level's splitter."""

    size: int
    overlap: int


@dataclass(frozen=True, slots=True)
class ChunkingConfig:
    """The three splitters, derived from the L3 size like the reference: L1 = max(2000, 3×size),
    L2 = max(1000, 2×size), L3 = max(600, size) and likewise for the overlaps (400/200/100).
    All three cut at the same `BOUNDARIES`: where a text may be cut is not a setting, it is
    where the answerer reads a paragraph or a sentence to end."""

    l1: LevelSizes
    l2: LevelSizes
    l3: LevelSizes
    #: Give each leaf its contextual header (leaf_context.py) for embedding and BM25.
    context_header: bool = False

    @classmethod
    def from_chunk_size(
        cls,
        chunk_size: int = 800,
        chunk_overlap: int = 100,
        *,
        floors: bool = True,
        context_header: bool = False,
    ) -> ChunkingConfig:
        if floors:
            return cls(
                l1=LevelSizes(max(2000, 3 * chunk_size), max(400, 3 * chunk_overlap)),
                l2=LevelSizes(max(1000, 2 * chunk_size), max(200, 2 * chunk_overlap)),
                l3=LevelSizes(max(600, chunk_size), max(100, chunk_overlap)),
                context_header=context_header,
            )
        # Without floors (small test corpora): the same 3:2:1 ratios, nothing more.
        return cls(
            l1=LevelSizes(3 * chunk_size, 3 * chunk_overlap),
            l2=LevelSizes(2 * chunk_size, 2 * chunk_overlap),
            l3=LevelSizes(chunk_size, chunk_overlap),
            context_header=context_header,
        )

    def level(self, level: int) -> LevelSizes:
        return (self.l1, self.l2, self.l3)[level - 1]


@dataclass(frozen=True, slots=True)
class ChunkRecord:
    """One chunk of any level as it is stored (the runtime keys of
    docs/trace.md#evidence-records)."""

    chunk_id: str
    parent_chunk_id: str
    root_chunk_id: str
    chunk_level: int
    chunk_idx: int
    text: str
    filename: str
    file_type: str
    file_path: str
    page_number: str
    #: A leaf's contextual header (leaf_context.py); empty on parents and when disabled.
    #: Never stored or returned: only what the model and BM25 read carries it.
    context: str = ""

    @property
    def embedded_text(self) -> str:
        """What the embedder and the BM25 field read: the header, then the chunk text."""
        return with_header(self.context, self.text)


def split_text(text: str, size: int, overlap: int) -> list[str]:
    """Recursive splitting: cut `text` at the coarsest of `BOUNDARIES` that cuts it, merge the
    parts greedily up to `size` characters with up to `overlap` characters of whole parts
    carried over, and cut any part still too long at the next boundaries (single characters
    last). Each piece is a verbatim slice of `text`, stripped."""
    return list(iter_split_text(text, size, overlap))


def iter_split_text(text: str, size: int, overlap: int) -> Iterator[str]:
    """`split_text` one piece at a time: what is held at once is the text's `Reading` and one
    piece being merged, not every part of `text` (for a large page, several times its size)."""
    return (text[a:b] for a, b in split_spans(text, Reading.of(text), size, overlap))


def split_spans(
    text: str, reading: Reading, size: int, overlap: int, span: Span | None = None
) -> Iterator[Span]:
    """`split_text` of `text[span]` (all of it by default) as spans of `text`, cut where
    `reading` (the whole text's) says, each stripped of surrounding whitespace and not empty."""
    if overlap >= size:
        overlap = max(0, size - 1)
    start, end = span or (0, len(text))
    for piece in _split(text, reading, start, end, size, overlap, BOUNDARIES):
        first, last = trimmed(text, *piece)
        if first < last:
            yield first, last


def _split(
    text: str,
    reading: Reading,
    start: int,
    end: int,
    size: int,
    overlap: int,
    boundaries: Sequence[Cuts],
) -> Iterator[Span]:
    parts, finer = _parts_at_coarsest_cut(text, reading, start, end, boundaries)
    # Runs of parts that fit are merged; a part too long is cut at the finer boundaries.
    for fits, run in itertools.groupby(parts, key=lambda part: _fits(text, part, size)):
        if fits:
            yield from _merge(run, size, overlap)
            continue
        for a, b in run:
            yield from _split(text, reading, a, b, size, overlap, finer)


def _fits(text: str, part: Span, size: int) -> bool:
    """Whether a part is no longer than a chunk, the whitespace around it left out (it is
    stripped from a chunk it starts or ends): a sentence of exactly `size` characters after a
    space or before a blank line is still a chunk of its own, not cut between words."""
    start, end = trimmed(text, *part)
    return end - start <= size


def _parts_at_coarsest_cut(
    text: str, reading: Reading, start: int, end: int, boundaries: Sequence[Cuts]
) -> tuple[Iterator[Span], Sequence[Cuts]]:
    """The parts of `text[start:end]` at the first of `boundaries` that cuts it (somewhere
    strictly inside), with the boundaries finer than that one; single characters when none
    does."""
    for i, cuts_of in enumerate(boundaries):
        cuts = cuts_of(text, reading, start, end)
        first = next(cuts, None)
        if first is not None:
            return _parts(start, end, itertools.chain((first,), cuts)), boundaries[i + 1 :]
    return ((at, at + 1) for at in range(start, end)), ()


def _parts(start: int, end: int, cuts: Iterable[int]) -> Iterator[Span]:
    """The spans between `start`, the increasing cut offsets inside, and `end`."""
    for at in cuts:
        yield start, at
        start = at
    yield start, end


def _merge(parts: Iterable[Span], size: int, overlap: int) -> Iterator[Span]:
    """Contiguous parts merged greedily up to `size` characters; each merged span after the
    first starts with the last parts of the one before that fit in `overlap` characters."""
    current: deque[Span] = deque()
    total = 0
    for part in parts:
        length = part[1] - part[0]
        if current and total + length > size:
            yield current[0][0], current[-1][1]
            while current and (total > overlap or total + length > size):
                first = current.popleft()
                total -= first[1] - first[0]
        current.append(part)
        total += length
    if current:
        yield current[0][0], current[-1][1]


@dataclass(frozen=True, slots=True)
class Page:
    """One loaded page (or pseudo-page) of a document."""

    number: int
    text: str


def chunk_document(
    filename: str,
    file_type: str,
    pages: Sequence[Page],
    config: ChunkingConfig,
    *,
    file_path: str | None = None,
    document_id: str | None = None,
) -> list[ChunkRecord]:
    """All chunks of a document, depth-first (L1, its L2s each followed by their L3s).

    Ids are `{document_id}::p{page}::l{level}::{n}` (the document_id defaults to the
    filename) with one counter per (page, level). Counters continue when two loader pages
    share a page number, so ids stay unique within a document
    (docs/api.md#documents-and-chunks)."""
    return list(
        iter_chunks(
            filename, file_type, pages, config, file_path=file_path, document_id=document_id
        )
    )


def iter_chunks(
    filename: str,
    file_type: str,
    pages: Sequence[Page],
    config: ChunkingConfig,
    *,
    file_path: str | None = None,
    document_id: str | None = None,
) -> Iterator[ChunkRecord]:
    """`chunk_document` one chunk at a time: what is held at once is one page's `Reading` and
    the pieces being merged, not the document's chunks (the ingest streams them)."""
    counters: dict[tuple[int, int], int] = {}
    emitted = 0
    path = file_path if file_path is not None else filename
    prefix = document_id or filename

    def next_id(page: int, level: int) -> str:
        n = counters.get((page, level), 0)
        counters[(page, level)] = n + 1
        return f"{prefix}::p{page}::l{level}::{n}"

    def make(text: str, page: int, level: int, parent: str, root: str | None) -> ChunkRecord:
        nonlocal emitted
        chunk_id = next_id(page, level)
        emitted += 1
        return ChunkRecord(
            chunk_id=chunk_id,
            parent_chunk_id=parent,
            root_chunk_id=root or chunk_id,
            chunk_level=level,
            chunk_idx=emitted - 1,
            text=text,
            filename=filename,
            file_type=file_type,
            file_path=path,
            page_number=str(page),
        )

    stripped = [(page.number, page.text.strip()) for page in pages]
    contexts = page_contexts(file_type, stripped) if config.context_header else None
    for index, (number, text) in enumerate(stripped):
        if not text:
            continue
        # Every level cuts where the whole page is read to end a paragraph or a sentence, and
        # each piece lies inside its parent's span: L1 ⊃ L2 ⊃ L3 by construction.
        reading = Reading.of(text)
        for l1_span in split_spans(text, reading, config.l1.size, config.l1.overlap):
            l1 = make(text[slice(*l1_span)], number, 1, "", None)
            yield l1
            for l2_span in split_spans(text, reading, config.l2.size, config.l2.overlap, l1_span):
                l2 = make(text[slice(*l2_span)], number, 2, l1.chunk_id, l1.chunk_id)
                yield l2
                for l3_span in split_spans(
                    text, reading, config.l3.size, config.l3.overlap, l2_span
                ):
                    leaf = make(text[slice(*l3_span)], number, 3, l2.chunk_id, l1.chunk_id)
                    if contexts is not None:
                        leaf = replace(leaf, context=leaf_header(contexts[index], *l3_span))
                    yield leaf
