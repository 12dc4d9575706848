"""The shutdown's drain (shared/draining.py) and the ingestor under it, on the in-memory store:
the drain waits for a job; once the stop is requested an ingest stops before its next write
batch with ShuttingDown, the documents it committed stay new and every other one stays old,
with no row of an unfinished version left. No model, no Milvus, no socket."""

from __future__ import annotations

import asyncio

import pytest

from retrieval_service.adapters.loaders import load_pages
from retrieval_service.core.documents import COMMITTED, LEVELS
from retrieval_service.core.ingest import Ingestor, SourceDocument
from shared.draining import Draining
from shared.errors import ShuttingDown
from tests.fakes.hashing_embedder import HashingEmbedder
from tests.fakes.in_memory_store import InMemoryChunkRepository, InMemoryDocumentRegistry
from tests.unit.test_ingest_core import DIM, SMALL

NAMES = [f"doc{i}.md" for i in range(4)]


def text(i: int, word: str) -> bytes:
    return "".join(f"The {word} number {i} counts item {n}. " for n in range(20)).encode()


async def test_the_drain_waits_for_a_job_then_asks_it_to_stop() -> None:
    draining = Draining()
    heard: list[str] = []

    async def job() -> None:
        async with draining.job("import"):
            await draining.stopped()
            with pytest.raises(ShuttingDown):
                draining.check()
            heard.append("stopped")

    task = asyncio.ensure_future(job())
    await asyncio.sleep(0)
    assert draining.in_flight == {"import": 1}
    draining.check()  # nothing requested yet
    assert await draining.drain(0.0, margin=30.0)
    await task
    assert heard == ["stopped"] and draining.in_flight == {} and draining.begun


async def test_an_ingest_told_to_stop_leaves_each_document_old_or_new() -> None:
    chunks, registry = InMemoryChunkRepository(DIM), InMemoryDocumentRegistry()
    draining = Draining()
    armed = False

    async def checkpoint(name: str) -> None:
        # The stop comes once the first batch is committed, as the grace would end mid-ingest.
        if armed and name == "after_commit":
            draining.request_stop()

    ingestor = Ingestor(
        chunks,
        registry,
        HashingEmbedder(DIM),
        SMALL,
        load_pages=load_pages,
        max_document_bytes=100_000,
        window=4,
        checkpoint=checkpoint,
        draining=draining,
    )
    await ingestor.ingest([SourceDocument(n, text(i, "gull")) for i, n in enumerate(NAMES)])
    old = {n: await registry.get(n) for n in NAMES}
    armed = True
    with pytest.raises(ShuttingDown):
        await ingestor.ingest([SourceDocument(n, text(i, "owl")) for i, n in enumerate(NAMES)])

    current = {n: await registry.get(n) for n in NAMES}
    new = [n for n in NAMES if current[n] != old[n]]
    assert 0 < len(new) < len(NAMES)  # the first batch landed, the rest did not
    keys = await registry.scan()
    assert all(k.state == COMMITTED for k in keys) and len(keys) == len(NAMES)
    for lvl in LEVELS:
        rows = chunks.rows(lvl)
        assert len(rows) == sum(e.level_count(lvl) for e in current.values() if e)
        for r in rows:
            entry = current[r["document_id"]]
            assert entry is not None and r["version"] == entry.version
            i = NAMES.index(r["document_id"])
            word = "owl" if r["document_id"] in new else "gull"
            assert r["text"] in text(i, word).decode()
    assert draining.in_flight == {}
    # Told to stop, it starts nothing new.
    with pytest.raises(ShuttingDown):
        await ingestor.ingest([SourceDocument("x.md", b"x")])
