"""StreamIngestDocuments and the ingest pipeline through the real service on real Milvus Lite,
with a scripted OpenAI-compatible embeddings endpoint on 127.0.0.1 that takes a fixed time per
batch: progress arrives while a multi-batch document embeds and the stream ends with exactly
one result; a document is written while a later one still embeds, and a large one in pieces
under its pending version, which readers never see before its commit; failures end the stream
with the unary call's status; a passed deadline stops the embedder."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

import grpc
import numpy as np
import pytest
from supermew.v1 import retrieval_pb2

from retrieval_service.adapters.embedders import OpenAIEmbedder
from retrieval_service.core.documents import LEVELS, PENDING
from retrieval_service.core.ingest import SourceDocument
from shared.errors import DeadlineExceeded
from tests.fakes.embeddings_server import EmbeddingsServer
from tests.fakes.retrieval_doubles import FailingEmbedder
from tests.integration.retrieval_harness import Service, running_service

DIM = 16
# About 20 leaves of the harness's 80-character chunks.
LONG_TEXT = " ".join(f"Sentence number {i} talks about lighthouses and tides." for i in range(30))


@pytest.fixture
async def endpoint() -> AsyncIterator[EmbeddingsServer]:
    server = EmbeddingsServer(DIM, batch_delay=0.15).start()
    yield server
    server.stop()


@pytest.fixture
async def embedder(endpoint: EmbeddingsServer) -> AsyncIterator[OpenAIEmbedder]:
    client = OpenAIEmbedder(endpoint.base_url, "scripted", DIM, batch_size=2, concurrency=1)
    yield client
    await client.aclose()


def request(*docs: tuple[str, bytes]) -> retrieval_pb2.IngestDocumentsRequest:
    return retrieval_pb2.IngestDocumentsRequest(
        documents=[retrieval_pb2.SourceDocument(filename=f, content=c) for f, c in docs]
    )


async def collect(stream: Any, endpoint: EmbeddingsServer) -> list[tuple[Any, int]]:
    """Each event with the number of embedding requests the endpoint had seen on its arrival."""
    return [(event, len(endpoint.requests)) async for event in stream]


async def test_progress_arrives_while_a_multi_batch_document_embeds(
    tmp_path, endpoint, embedder
) -> None:
    async with running_service(tmp_path / "kb.db", embedder=embedder) as svc:
        events = await collect(
            svc.stub.StreamIngestDocuments(request(("tides.txt", LONG_TEXT.encode()))), endpoint
        )
        listing = await svc.listing()
    kinds = [e.WhichOneof("event") for e, _ in events]
    assert kinds.count("result") == 1 and kinds[-1] == "result"
    result = events[-1][0].result.documents
    assert [d.filename for d in result] == ["tides.txt"]
    leaves = result[0].l3_chunks
    batches = -(-leaves // 2)
    assert batches >= 5 and listing["tides.txt"][2] == leaves
    progress = [(e.progress, seen) for e, seen in events[:-1]]
    assert progress and all(p.filename == "tides.txt" for p, _ in progress)
    assert all(p.leaves_total == leaves for p, _ in progress)
    done = [p.leaves_done for p, _ in progress]
    assert done[0] == 0 and done[-1] == leaves and done == sorted(done)
    elapsed = [p.elapsed_ms for p, _ in progress]
    assert elapsed == sorted(elapsed)
    # Streamed, not buffered: a partial count reached the client before the endpoint had
    # been asked for every batch.
    assert any(0 < p.leaves_done < leaves and seen < batches for p, seen in progress)


async def test_each_document_reports_and_the_result_keeps_request_order(
    tmp_path, endpoint, embedder
) -> None:
    async with running_service(tmp_path / "kb.db", embedder=embedder, window=4) as svc:
        events = [
            e
            async for e in svc.stub.StreamIngestDocuments(
                request(
                    ("a.txt", LONG_TEXT[:300].encode()),
                    ("b.md", b"A short note about gulls."),
                    ("c.txt", LONG_TEXT[300:].encode()),
                )
            )
        ]
        listing = await svc.listing()
    result = events[-1].result.documents
    assert [d.filename for d in result] == ["a.txt", "b.md", "c.txt"]
    assert set(listing) == {"a.txt", "b.md", "c.txt"}
    last: dict[str, retrieval_pb2.IngestProgress] = {}
    for e in events[:-1]:
        assert e.WhichOneof("event") == "progress"
        last[e.progress.filename] = e.progress
    assert {name: (p.leaves_done, p.leaves_total) for name, p in last.items()} == {
        d.filename: (d.l3_chunks, d.l3_chunks) for d in result
    }


class GatedEmbedder(FailingEmbedder):
    """Holds its `gate_on`-th passages call until `gate` is set."""

    def __init__(self, inner: OpenAIEmbedder, gate_on: int) -> None:
        super().__init__(inner)
        self.gate = asyncio.Event()
        self.gate_on = gate_on
        self.calls = 0

    async def embed_passages(self, texts: Sequence[str], **options: Any) -> np.ndarray:
        self.calls += 1
        if self.calls == self.gate_on:
            await self.gate.wait()
        return await self.inner.embed_passages(texts, **options)


async def test_a_document_is_written_while_a_later_one_still_embeds(tmp_path, embedder) -> None:
    gated = GatedEmbedder(embedder, gate_on=2)
    # Window 1 = first.md's one leaf + later.txt's first.
    async with running_service(tmp_path / "kb.db", embedder=gated, window=2) as svc:
        task = asyncio.ensure_future(
            svc.ingest(("first.md", b"Gulls."), ("later.txt", LONG_TEXT.encode()))
        )
        for _ in range(400):  # wait for first.md's write, with later.txt held mid-embedding
            if await svc.app.registry.get("first.md") is not None or task.done():
                break
            await asyncio.sleep(0.05)
        written_while_embedding = await svc.app.registry.get("first.md")
        held = not task.done()
        gated.gate.set()
        reply = await task
    assert held and written_while_embedding is not None
    assert [d.filename for d in reply.documents] == ["first.md", "later.txt"]


async def pending_rows(svc: Service, filename: str) -> dict[int, int]:
    """Rows per level of the pending versions of `filename`, read straight from the store."""
    pending = {k.version for k in await svc.app.registry.scan() if k.state == PENDING}
    out = {}
    for lvl in LEVELS:
        name = svc.app.store.level_collection(lvl)
        rows = await svc.app.store.run(
            lambda client, name=name: client.query(
                name, filter=f'filename == "{filename}"', output_fields=["version"]
            )
        )
        out[lvl] = sum(r["version"] in pending for r in rows)
    return out


async def test_a_large_document_is_written_in_pieces_before_its_commit(tmp_path, embedder) -> None:
    gated = GatedEmbedder(embedder, gate_on=3)  # windows 1 and 2 embed, window 3 is held
    async with running_service(tmp_path / "kb.db", embedder=embedder) as svc:
        await svc.ingest(("gulls.md", b"Gulls nest on the cliffs by the lighthouse."))
    async with running_service(tmp_path / "kb.db", embedder=gated, window=4) as svc:
        task = asyncio.ensure_future(svc.ingest(("tides.txt", LONG_TEXT.encode())))
        written: dict[int, int] = {}
        # Until both windows' rows are in the store: their leaves, and the L1s they complete,
        # which a write upserts last.
        for _ in range(400):
            written = await pending_rows(svc, "tides.txt")
            if (written[3] >= 8 and written[1] > 0) or task.done():
                break
            await asyncio.sleep(0.05)
        listing_meanwhile = await svc.listing()
        docs_meanwhile, _ = await svc.retrieve("lighthouses and tides", top_k=10)
        held = not task.done()
        gated.gate.set()
        reply = await task
        after = await pending_rows(svc, "tides.txt")
        listing = await svc.listing()
    assert held
    counts = listing["tides.txt"]
    # Mid-ingest: the leaves of two windows and the parents they complete are written, the
    # rest (more than a window) not yet — and nothing of it is listed or served.
    assert written[3] == 8 and counts[2] == reply.documents[0].l3_chunks > 12
    assert 0 < written[2] < counts[1] and 0 < written[1] < counts[0]
    assert listing_meanwhile == {"gulls.md": listing_meanwhile["gulls.md"]}
    assert docs_meanwhile and all(d["filename"] == "gulls.md" for d in docs_meanwhile)
    assert after == {1: 0, 2: 0, 3: 0}  # committed: no version is pending any more


async def test_a_failing_embedder_ends_the_stream_with_unavailable(tmp_path, embedder) -> None:
    failing = FailingEmbedder(embedder, fail_on_batch=2)
    async with running_service(tmp_path / "kb.db", embedder=failing, window=4) as svc:
        received: list[retrieval_pb2.IngestEvent] = []
        with pytest.raises(grpc.aio.AioRpcError) as err:
            async for event in svc.stub.StreamIngestDocuments(
                request(("tides.txt", LONG_TEXT.encode()))
            ):
                received.append(event)
        listing = await svc.listing()
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "RuntimeError" not in (err.value.details() or "")
    assert received and all(e.WhichOneof("event") == "progress" for e in received)
    assert listing == {}


async def test_bad_input_ends_the_stream_with_invalid_argument(tmp_path, embedder) -> None:
    async with running_service(tmp_path / "kb.db", embedder=embedder) as svc:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            async for _ in svc.stub.StreamIngestDocuments(request(("../evil.txt", b"x"))):
                pass
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "documents[0].filename" in (err.value.details() or "")


async def test_a_passed_deadline_stops_the_embedder(tmp_path) -> None:
    async with running_service(tmp_path / "kb.db") as svc:
        doc = SourceDocument("late.txt", LONG_TEXT.encode())
        with pytest.raises(DeadlineExceeded):
            await svc.app.ingestor.ingest([doc], deadline=time.monotonic())
        with pytest.raises(DeadlineExceeded):
            await svc.app.pipeline.retrieve("lighthouses", deadline=time.monotonic())
        assert await svc.listing() == {}
        # A deadline with room is no obstacle.
        reply = await svc.stub.IngestDocuments(
            request(("late.txt", LONG_TEXT.encode())), timeout=600
        )
        docs, _ = await svc.retrieve("lighthouses and tides", top_k=1)
    assert reply.documents[0].l3_chunks > 0 and docs[0]["filename"] == "late.txt"
