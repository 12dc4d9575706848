"""The ingest pipeline's pure parts: the hand-over between embedder and writer is bounded in
leaves (an item larger than the bound passes alone); the embedder's running count over a
request becomes per-document progress in request order; and embedded windows become rows
piecewise — each parent as soon as its last leaf is in, with the normalised mean of its
leaves' vectors — holding no more than one L1's leaf vectors per document."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import numpy as np
import pytest

from retrieval_service.core.chunking import ChunkingConfig, Page, chunk_document
from retrieval_service.core.embedding import normalise
from retrieval_service.core.ingest.flow import Handover, IngestProgress, ProgressCounter
from retrieval_service.core.ingest.preparation import Prepared, closing_leaves
from retrieval_service.core.ingest.versions import Version, stage

SMALL = ChunkingConfig.from_chunk_size(80, 10, floors=False)


def pages(name: str, sentences: int) -> list[Page]:
    return [Page(0, " ".join(f"Sentence {i} of {name} is about tides." for i in range(sentences)))]


def prepared(name: str, sentences: int) -> Prepared:
    return Prepared.of(name, "Text", pages(name, sentences), SMALL)


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_the_handover_holds_the_embedder_back_until_the_writer_catches_up() -> None:
    a, b = prepared("a.txt", 4), prepared("b.txt", 4)
    handover: Handover[Prepared] = Handover(limit=a.leaf_count + b.leaf_count - 1)
    await handover.put(a, a.leaf_count)
    blocked = asyncio.ensure_future(handover.put(b, b.leaf_count))
    await settle()
    assert not blocked.done()
    assert await handover.get() == (a, a.leaf_count)
    await handover.done(a.leaf_count)
    await blocked
    assert await handover.get() == (b, b.leaf_count)


async def test_a_document_larger_than_the_bound_passes_alone() -> None:
    big, small = prepared("big.txt", 20), prepared("small.txt", 1)
    handover: Handover[Prepared] = Handover(limit=2)
    assert big.leaf_count > 2
    await handover.put(big, big.leaf_count)
    blocked = asyncio.ensure_future(handover.put(small, small.leaf_count))
    await settle()
    assert not blocked.done()
    await handover.get()
    await handover.done(big.leaf_count)
    await blocked
    handover.close()
    assert await handover.get() == (small, small.leaf_count)
    assert await handover.get() is None


def test_progress_per_document_in_request_order() -> None:
    a, b = prepared("a.txt", 3), prepared("b.txt", 5)
    na, nb = a.leaf_count, b.leaf_count
    heard: list[IngestProgress] = []
    counter = ProgressCounter([a, b], heard.append, started=0.0)
    counter.advance(0)
    counter.advance(na + 1)
    counter.advance(na + 1)  # no change, nothing new
    counter.advance(na + nb)
    assert [(p.filename, p.leaves_done, p.leaves_total) for p in heard] == [
        ("a.txt", 0, na),
        ("a.txt", na, na),
        ("b.txt", 0, nb),
        ("b.txt", 1, nb),
        ("b.txt", nb, nb),
    ]


def test_windows_become_rows_piecewise_with_parents_once_their_leaves_are_in() -> None:
    doc = prepared("tides.txt", 40)
    version = Version.of(doc)
    chunks = chunk_document("tides.txt", "Text", pages("tides.txt", 40), SMALL)
    leaves = [c for c in chunks if c.chunk_level == 3]
    assert [leaf for leaf, _ in doc.leaves()] == leaves  # the streamed split is the same
    rng = np.random.default_rng(7)
    vectors = {c.chunk_id: normalise(rng.standard_normal(8)).astype(np.float32) for c in leaves}
    window = [(version, c, closes, vectors[c.chunk_id]) for c, closes in doc.leaves()]
    assert len(window) > 6
    written: dict[int, dict[str, list[float]]] = {1: {}, 2: {}, 3: {}}
    for start in range(0, len(window), 3):  # windows of 3 leaves
        staged, completed = stage([window[start : start + 3]])
        leaves_so_far = {c.chunk_id for _, c, _, _ in window[: start + 3]}
        for lvl, level_chunks in staged.items():
            for chunk in level_chunks:
                assert chunk.version == version.entry.version
                written[lvl][chunk.record.chunk_id] = chunk.vector
        # A parent is written exactly when all its leaves are in, never before.
        for c in chunks:
            if c.chunk_level < 3:
                mine = [
                    x.chunk_id for x in leaves if c.chunk_id in (x.parent_chunk_id, x.root_chunk_id)
                ]
                assert (c.chunk_id in written[c.chunk_level]) == (set(mine) <= leaves_so_far)
        last = start + 3 >= len(window)
        assert completed == ([version] if last else [])
    by_level = {lvl: [c for c in chunks if c.chunk_level == lvl] for lvl in (1, 2, 3)}
    assert {lvl: len(written[lvl]) for lvl in written} == {
        lvl: len(by_level[lvl]) for lvl in by_level
    }
    for c in by_level[2]:
        mean = np.mean(
            [vectors[x.chunk_id] for x in leaves if x.parent_chunk_id == c.chunk_id], axis=0
        )
        assert np.allclose(written[2][c.chunk_id], normalise(mean), atol=1e-6)
    for c in by_level[1]:
        mean = np.mean(
            [vectors[x.chunk_id] for x in leaves if x.root_chunk_id == c.chunk_id], axis=0
        )
        assert np.allclose(written[1][c.chunk_id], normalise(mean), atol=1e-6)
    assert version.leaves_left == 0 and version.holding == 0
    assert doc.counts == {"0": [len(by_level[lvl]) for lvl in (1, 2, 3)]}


def test_each_leaf_closes_the_parents_it_is_the_last_leaf_of_across_pages() -> None:
    loaded = [*pages("a.txt", 30), Page(1, pages("b.txt", 12)[0].text)]
    doc = Prepared.of("two.txt", "Text", loaded, SMALL)
    chunks = chunk_document("two.txt", "Text", loaded, SMALL)
    last_leaf: dict[str, str] = {}
    for c in chunks:
        if c.chunk_level == 3:
            last_leaf[c.parent_chunk_id] = last_leaf[c.root_chunk_id] = c.chunk_id
    expected: dict[str, list[str]] = {c.chunk_id: [] for c in chunks if c.chunk_level == 3}
    for c in sorted(chunks, key=lambda c: -c.chunk_level):
        if c.chunk_level < 3:
            expected[last_leaf[c.chunk_id]].append(c.chunk_id)
    assert {leaf.chunk_id: [p.chunk_id for p in closes] for leaf, closes in doc.leaves()} == (
        expected
    )
    assert doc.pages == 2 and set(doc.counts) == {"0", "1"}
    l1, l2, leaf = chunks[0], chunks[1], chunks[2]
    with pytest.raises(ValueError, match="has no leaves"):
        list(closing_leaves([l1, l2, leaf, replace(l2, chunk_id="x"), l1]))
