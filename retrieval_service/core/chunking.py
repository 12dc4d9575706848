"""Three-level character splitting (docs/api.md#documents-and-chunks): each page → L1 pieces → L2
pieces → L3 leaves, with the ids `{filename}::p{page}::l{level}::{n}`, parent/root links and a
running `chunk_idx` in depth-first order. Pure functions, no I/O."""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace

from retrieval_service.core.leaf_context import leaf_header, page_contexts, with_header

# Separator priority of the reference: paragraph break, full stop, exclamation and question
# marks (full width), newline, comma, enumeration comma, space, and finally single characters.
DEFAULT_SEPARATORS: tuple[str, ...] = ("\n\n", "。", "！", "？", "\n", "，", "、", " ", "")


@dataclass(frozen=True, slots=True)
class LevelSizes:
    """Character size and overlap of one level's splitter."""

    size: int
    overlap: int


@dataclass(frozen=True, slots=True)
class ChunkingConfig:
    """The three splitters, derived from the L3 size like the reference: L1 = max(2000, 3×size),
    L2 = max(1000, 2×size), L3 = max(600, size) and likewise for the overlaps (400/200/100)."""

    l1: LevelSizes
    l2: LevelSizes
    l3: LevelSizes
    separators: tuple[str, ...] = DEFAULT_SEPARATORS
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


def split_text(text: str, size: int, overlap: int, separators: Sequence[str]) -> list[str]:
    """Recursive character splitting: split on the first separator present, merge the pieces
    greedily up to `size` characters with up to `overlap` characters carried over, and split
    any piece still too long with the next separators. A separator stays at the END of the
    piece it closes (so "。" ends a sentence instead of opening the next chunk)."""
    return list(iter_split_text(text, size, overlap, separators))


def iter_split_text(text: str, size: int, overlap: int, separators: Sequence[str]) -> Iterator[str]:
    """`split_text` one piece at a time: what is held at once is one piece being merged, not
    every separator-delimited part of `text` (for a large page, several times its size)."""
    if overlap >= size:
        overlap = max(0, size - 1)
    return (piece for piece in _split(text, size, overlap, list(separators)) if piece.strip())


def _split(text: str, size: int, overlap: int, separators: list[str]) -> Iterator[str]:
    separator = separators[-1] if separators else ""
    rest: list[str] = []
    for i, candidate in enumerate(separators):
        if candidate == "":
            separator, rest = "", []
            break
        if candidate in text:
            separator, rest = candidate, separators[i + 1 :]
            break
    pieces = _parts(text, separator) if separator else iter(text)
    # Runs of pieces that fit are merged; a piece too long is split with the next separators.
    for fits, run in itertools.groupby(pieces, key=lambda piece: len(piece) <= size):
        if fits:
            yield from _merge(run, size, overlap)
            continue
        for piece in run:
            if rest:
                yield from _split(piece, size, overlap, rest)
            else:
                yield from (piece[i : i + size] for i in range(0, len(piece), size))


def _parts(text: str, separator: str) -> Iterator[str]:
    """The non-empty parts of `text` between separators, each ending with the separator that
    closes it."""
    start = 0
    step = len(separator)
    while (at := text.find(separator, start)) >= 0:
        yield text[start : at + step]
        start = at + step
    if start < len(text):
        yield text[start:]


def _merge(pieces: Iterable[str], size: int, overlap: int) -> Iterator[str]:
    current: deque[str] = deque()
    total = 0
    for piece in pieces:
        if current and total + len(piece) > size:
            yield "".join(current).strip()
            while current and (total > overlap or total + len(piece) > size):
                total -= len(current.popleft())
        current.append(piece)
        total += len(piece)
    if current:
        yield "".join(current).strip()


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
    """`chunk_document` one chunk at a time: what is held at once is one page's L1 pieces and
    one L1's L2 and L3 pieces, not the document's chunks (the ingest streams them)."""
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

    seps = config.separators
    stripped = [(page.number, page.text.strip()) for page in pages]
    contexts = page_contexts(file_type, stripped) if config.context_header else None
    for index, (number, text) in enumerate(stripped):
        if not text:
            continue
        for l1_text, l1_at in _located(text, 0, config.l1, seps):
            l1 = make(l1_text, number, 1, "", None)
            yield l1
            for l2_text, l2_at in _located(l1_text, l1_at, config.l2, seps):
                l2 = make(l2_text, number, 2, l1.chunk_id, l1.chunk_id)
                yield l2
                for l3_text, l3_at in _located(l2_text, l2_at, config.l3, seps):
                    leaf = make(l3_text, number, 3, l2.chunk_id, l1.chunk_id)
                    if contexts is not None:
                        end = len(text) if l3_at is None else l3_at + len(l3_text)
                        leaf = replace(leaf, context=leaf_header(contexts[index], l3_at, end))
                    yield leaf


def _located(
    text: str, base: int | None, sizes: LevelSizes, separators: Sequence[str]
) -> Iterator[tuple[str, int | None]]:
    """The pieces of `text` with their offsets in the page (`text` starts at `base`; None =
    unknown). Pieces are stripped substrings whose starts increase, so each is looked for
    after the previous one's start."""
    cursor = 0
    for piece in iter_split_text(text, sizes.size, sizes.overlap, separators):
        at = text.find(piece, cursor)
        if at < 0:
            at = text.find(piece)
        yield piece, None if at < 0 or base is None else base + at
        if at >= 0:
            cursor = at + 1
