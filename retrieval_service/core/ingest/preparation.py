"""Preparation: a validated document's pages split into its three chunk levels, counted once
(the counts name every chunk id of its version) and split again, leaf by leaf, as the leaves
embed; and the leaves in order with the parents each one completes."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from retrieval_service.core.chunking import ChunkingConfig, ChunkRecord, Page, iter_chunks
from retrieval_service.core.identity import DEFAULT_KB, Metadata

#: A leaf with the parents it is the last leaf of (its L2 before the L1 around it).
Closing = tuple[ChunkRecord, tuple[ChunkRecord, ...]]


def closing_leaves(records: Iterable[ChunkRecord]) -> Iterator[Closing]:
    """Each leaf of a depth-first chunk stream (`iter_chunks`) with the parents it is the last
    leaf of, known one record later: a new L2 closes the open L2, a new L1 both. A parent
    without leaves (which the splitter never makes) is a ValueError."""
    open_parents: dict[int, ChunkRecord] = {}
    last: ChunkRecord | None = None
    for c in records:
        if c.chunk_level == 3:
            if last is not None:
                yield last, ()
            last = c
            continue
        closing = [lvl for lvl in (2, 1) if lvl >= c.chunk_level and lvl in open_parents]
        if last is not None:
            yield last, tuple(open_parents.pop(lvl) for lvl in closing)
            last = None
        elif closing:
            raise ValueError(f"chunk {open_parents[closing[0]].chunk_id} has no leaves")
        open_parents[c.chunk_level] = c
    if last is not None:
        yield last, tuple(open_parents.pop(lvl) for lvl in (2, 1) if lvl in open_parents)
    elif open_parents:
        raise ValueError(f"chunk {next(iter(open_parents.values())).chunk_id} has no leaves")


@dataclass(slots=True)
class Prepared:
    """One parsed document: its loaded pages and how many chunks each page has per level
    (which names every chunk id of the version). The chunks themselves are split again as
    the leaves embed (`leaves`), so a large document's three levels of chunks (≈ 3.5 × its
    text, plus an object per chunk) are never held at once: a second split costs less than
    a tenth of what embedding the leaves does."""

    filename: str
    file_type: str
    loaded: list[Page]
    chunking: ChunkingConfig
    counts: dict[str, list[int]] = field(default_factory=dict)
    leaf_count: int = 0
    #: The document's identity and what its version records (`DocumentEntry`).
    knowledge_base: str = DEFAULT_KB
    document_id: str = ""
    metadata: Metadata = field(default_factory=dict)
    content_sha256: str = ""
    size_bytes: int = 0
    fingerprint: str = ""

    @property
    def pages(self) -> int:
        return len(self.loaded)

    @classmethod
    def of(
        cls,
        filename: str,
        file_type: str,
        loaded: list[Page],
        chunking: ChunkingConfig,
        **identity: Any,
    ) -> Prepared:
        """Splits once to count (and to check the tree), keeping no chunk. `identity`: the
        identity fields (knowledge_base, document_id, metadata, content_sha256, size_bytes,
        fingerprint)."""
        doc = cls(filename, file_type, loaded, chunking, **identity)
        doc.document_id = doc.document_id or filename

        def counted(records: Iterable[ChunkRecord]) -> Iterator[ChunkRecord]:
            for c in records:
                doc.counts.setdefault(c.page_number, [0, 0, 0])[c.chunk_level - 1] += 1
                yield c

        doc.leaf_count = sum(1 for _ in closing_leaves(counted(doc._chunks())))
        return doc

    def _chunks(self) -> Iterator[ChunkRecord]:
        return iter_chunks(
            self.filename, self.file_type, self.loaded, self.chunking, document_id=self.document_id
        )

    def leaves(self) -> Iterator[Closing]:
        """The leaves in order, each with the parents it completes."""
        return closing_leaves(self._chunks())
