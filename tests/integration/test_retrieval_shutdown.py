"""SIGTERM during an ingest, on a real `python -m retrieval_service` and real Milvus Lite
(docs/api.md#servers): the drain waits for the ingest for SHUTDOWN_GRACE_SECONDS; an ingest
still running then stops between write batches and its call ends UNAVAILABLE saying the
server is shutting down (or, had it finished in time, OK). The process exits 0, and after a
restart on the same data every document is whole — its old version or its new one, never a
mix — with the rows per level equal to the registry's counts and no uncommitted record left.

The embeddings double takes a little time per batch and the service embeds one batch at a
time, so the new versions take seconds to embed against a grace of half a second."""

from __future__ import annotations

import asyncio
import hashlib
import signal
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from supermew.v1 import retrieval_pb2

from retrieval_service.core.documents import LEVELS, PENDING
from tests.fakes.embeddings_server import EmbeddingsServer
from tests.integration.test_retrieval_crash_safety import (
    DIM,
    ServiceProcess,
    embedding_env,
    restarted,
)

pytestmark = pytest.mark.integration

DOCS = [f"doc{i}.md" for i in range(6)]


def old_text(i: int) -> str:
    return "".join(f"The lighthouse keeper {i} counts seagulls, note {n}. " for n in range(40))


def new_text(i: int) -> str:
    return "".join(f"A glacier researcher {i} measures icebergs, log {n}. " for n in range(500))


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.fixture(scope="module")
def slow_embeddings() -> Iterator[EmbeddingsServer]:
    server = EmbeddingsServer(DIM, batch_delay=0.1).start()
    yield server
    server.stop()


def request(text_of) -> retrieval_pb2.IngestDocumentsRequest:
    return retrieval_pb2.IngestDocumentsRequest(
        documents=[
            retrieval_pb2.SourceDocument(filename=name, content=text_of(i).encode())
            for i, name in enumerate(DOCS)
        ]
    )


def ingest_then_sigterm(service: ServiceProcess) -> tuple[grpc.StatusCode, str, int]:
    """Streams the new versions, sends SIGTERM once the first leaves are embedded, and reads
    the call to its end; returns its code, details and the process's exit status."""
    events = service.stub.StreamIngestDocuments(request(new_text), timeout=120)
    code, details, signalled = grpc.StatusCode.OK, "", False
    try:
        for event in events:
            embedding = event.WhichOneof("event") == "progress" and event.progress.leaves_done
            if embedding and not signalled:
                service.proc.send_signal(signal.SIGTERM)
                signalled = True
    except grpc.RpcError as exc:
        code, details = exc.code(), exc.details() or ""
    return code, details, service.proc.wait(timeout=120)


async def test_sigterm_during_a_streamed_ingest_leaves_every_document_whole(
    tmp_path: Path, slow_embeddings: EmbeddingsServer
) -> None:
    db = tmp_path / "kb.db"
    env = {
        **embedding_env(slow_embeddings),
        "MILVUS_URI": str(db),
        "MILVUS_COLLECTION": "drain",
        "SHUTDOWN_GRACE_SECONDS": "0.5",
        "EMBEDDING_CONCURRENCY": "1",
    }
    log = tmp_path / "service.log"
    service = ServiceProcess(log, env)
    try:
        seeded = await asyncio.to_thread(
            lambda: service.stub.IngestDocuments(request(old_text), timeout=120)
        )
        old_counts = {
            d.document_id: (d.l1_chunks, d.l2_chunks, d.l3_chunks) for d in seeded.documents
        }
        code, details, status = await asyncio.to_thread(ingest_then_sigterm, service)
    finally:
        service.stop()

    assert code in (grpc.StatusCode.OK, grpc.StatusCode.UNAVAILABLE), (code, details)
    if code == grpc.StatusCode.UNAVAILABLE:
        assert "shutting down" in details, details
    assert status == 0, log.read_text()[-3000:]

    async with restarted(slow_embeddings, str(db), "drain") as svc:
        reply = await svc.stub.ListDocuments(retrieval_pb2.ListDocumentsRequest(page_size=100))
        documents = {d.document_id: d for d in reply.documents}
        keys = await svc.app.registry.scan()
        store_counts = await svc.counts()
        rows = {}
        for lvl in LEVELS:
            name = svc.app.store.level_collection(lvl)
            rows[lvl] = await svc.app.store.run(
                lambda client, name=name: client.query(
                    name, filter="", output_fields=["document_id", "version", "text"], limit=16384
                )
            )
        # The store keeps working: the interrupted ingest, sent again, completes.
        again = await svc.stub.IngestDocuments(request(new_text))

    assert set(documents) == set(DOCS)
    assert not [k for k in keys if k.state == PENDING]
    assert sorted(k.document_id for k in keys) == sorted(DOCS)  # one record each
    assert store_counts == tuple(
        sum((d.l1_chunks, d.l2_chunks, d.l3_chunks)[i] for d in documents.values())
        for i in range(3)
    )
    current = {k.document_id: k.version for k in keys}
    for i, name in enumerate(DOCS):
        d = documents[name]
        mine = [r for lvl in LEVELS for r in rows[lvl] if r["document_id"] == name]
        assert {r["version"] for r in mine} == {current[name]}
        if d.content_sha256 == sha(old_text(i)):
            assert (d.l1_chunks, d.l2_chunks, d.l3_chunks) == old_counts[name]
            assert all("lighthouse" in r["text"] for r in mine)
        else:
            assert d.content_sha256 == sha(new_text(i))
            assert all("glacier" in r["text"] for r in mine)
        levels = tuple(sum(r in rows[lvl] for r in mine) for lvl in LEVELS)
        assert levels == (d.l1_chunks, d.l2_chunks, d.l3_chunks)
    assert all(d.content_sha256 == sha(new_text(i)) for i, d in enumerate(again.documents))
