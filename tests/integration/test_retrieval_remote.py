"""The remote path (`MILVUS_URI=http://…`, what a Milvus cluster uses) against milvus-lite's
own server mode on 127.0.0.1: the same round trips, then a Milvus that goes away mid-run
(Retrieve answers OK with retrieval_mode failed, IngestDocuments UNAVAILABLE) and comes back
(both recover without restarting the service)."""

from __future__ import annotations

import asyncio
import shutil
import time

import grpc
import pytest

from retrieval_service.adapters.milvus.connection import StoreConfig
from tests.integration.retrieval_harness import (
    MILVUS_LITE,
    LiteServer,
    corpus_documents,
    free_port,
    running_service,
)


@pytest.fixture
def lite_server(tmp_path):
    if not MILVUS_LITE.exists() and shutil.which("milvus-lite") is None:
        pytest.fail("milvus-lite CLI not installed in the venv")
    server = LiteServer(tmp_path / "milvus-data", free_port())
    server.start()
    yield server
    server.stop()


async def test_remote_round_trips_outage_and_recovery(lite_server) -> None:
    store = StoreConfig(
        uri=lite_server.uri, token=None, collection="remote_kb", dim=384, timeout_seconds=3.0
    )
    async with running_service(lite_server.uri, store=store) as svc:
        docs_in = corpus_documents()
        reply = await svc.ingest(*[(d.filename, d.content) for d in docs_in])
        assert [d.filename for d in reply.documents] == [d.filename for d in docs_in]
        assert set(await svc.listing()) == {d.filename for d in docs_in}
        docs, meta = await svc.retrieve("which planet is the hottest", top_k=3)
        assert meta["retrieval_mode"] == "hybrid"
        assert docs[0]["filename"] == "solar.html" and "Venus" in docs[0]["text"]
        docs, _ = await svc.retrieve("《茶经》的作者是谁", top_k=3)
        assert "陆羽" in docs[0]["text"]
        merged, meta = await svc.retrieve("Venus hottest Jupiter largest Saturn rings", top_k=10)
        assert meta["auto_merge_applied"] is True and any(d["chunk_level"] < 3 for d in merged)
        await svc.ingest(("tea.txt", "绿茶适合八十度的水。".encode()))
        assert (await svc.listing())["tea.txt"] == (1, 1, 1)

        lite_server.stop()  # Milvus goes away mid-run
        started = time.monotonic()
        docs, meta = await svc.retrieve("which planet is the hottest", top_k=3)
        assert docs == [] and meta["retrieval_mode"] == "failed"
        assert meta["rerank_error"] == "retrieve_failed"
        assert time.monotonic() - started < 30
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await svc.ingest(("new.txt", b"written while Milvus is down"))
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "milvus" in err.value.details()

        lite_server.start()  # and comes back: the client reconnects within seconds
        deadline = time.monotonic() + 30
        while True:
            # Not just "not failed": a hybrid attempt that reached the server just before it
            # listened, followed by a dense fallback just after, answers dense_fallback once.
            docs, meta = await svc.retrieve("which planet is the hottest", top_k=3)
            if meta["retrieval_mode"] == "hybrid" or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.5)
        assert meta["retrieval_mode"] == "hybrid" and docs[0]["filename"] == "solar.html"
        reply = await svc.ingest(("new.txt", b"written after Milvus came back"))
        assert reply.documents[0].l3_chunks == 1
        assert "new.txt" in await svc.listing()
