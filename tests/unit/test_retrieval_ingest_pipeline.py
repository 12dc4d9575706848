"""The ingest pipeline's pure parts: the hand-over between embedder and writer is bounded in
leaves (a document larger than the bound passes alone), and the embedder's running count over
a request becomes per-document progress in request order."""

from __future__ import annotations

import asyncio

from retrieval_service.chunking import ChunkingConfig, Page, chunk_document
from retrieval_service.ingest import IngestProgress, _Handover, _Prepared, _ProgressCounter

SMALL = ChunkingConfig.from_chunk_size(80, 10, floors=False)


def prepared(name: str, sentences: int) -> _Prepared:
    text = " ".join(f"Sentence {i} of {name} is about tides." for i in range(sentences))
    chunks = chunk_document(name, "Text", [Page(0, text)], SMALL)
    return _Prepared(name, "Text", 1, chunks, {})


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_the_handover_holds_the_embedder_back_until_the_writer_catches_up() -> None:
    a, b = prepared("a.txt", 4), prepared("b.txt", 4)
    handover = _Handover(limit=len(a.leaves) + len(b.leaves) - 1)
    await handover.put(a)
    blocked = asyncio.ensure_future(handover.put(b))
    await settle()
    assert not blocked.done()
    assert await handover.get() is a
    await handover.done(a)
    await blocked
    assert await handover.get() is b


async def test_a_document_larger_than_the_bound_passes_alone() -> None:
    big, small = prepared("big.txt", 20), prepared("small.txt", 1)
    handover = _Handover(limit=2)
    assert len(big.leaves) > 2
    await handover.put(big)
    blocked = asyncio.ensure_future(handover.put(small))
    await settle()
    assert not blocked.done()
    await handover.get()
    await handover.done(big)
    await blocked
    handover.close()
    assert await handover.get() is small
    assert await handover.get() is None


def test_progress_per_document_in_request_order() -> None:
    a, b = prepared("a.txt", 3), prepared("b.txt", 5)
    na, nb = len(a.leaves), len(b.leaves)
    heard: list[IngestProgress] = []
    counter = _ProgressCounter([a, b], heard.append, started=0.0)
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
