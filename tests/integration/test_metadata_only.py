"""A change of a document's metadata alone, against the real service on Milvus Lite: through
StreamIngestDocuments (beside a new document that does embed) and through the CLI's `sync` of
an edited sidecar, the document's chunks are copied with their vectors into a new version
carrying the new metadata — nothing of it is embedded (the embedder's count), the vectors
are the stored ones, and a filter by the new metadata finds it while one by the old does
not; rows per level equal the registry's counts afterwards. A real `python -m
retrieval_service` killed at each step of the copy leaves, after a restart, the old metadata
or the new on every row, never a mix."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
from google.protobuf import json_format
from supermew.v1 import retrieval_pb2

from retrieval_service.core.documents import LEVELS
from tests.fakes.embeddings_server import EmbeddingsServer
from tests.fakes.hashing_embedder import HashingEmbedder
from tests.integration import test_retrieval_crash_safety as crash
from tests.integration.retrieval_harness import Service, running_service
from tests.integration.test_retrieval_cli import _cli

pytestmark = pytest.mark.integration

TEAM = "knowledge_bases/team"
SEA = "The lighthouse keeper counts seagulls on the northern cliff every morning. " * 12
BEES = "Bees dance to tell the hive where the flowers are blooming this spring. " * 12


def source(filename: str, text: str, metadata: dict[str, Any]) -> retrieval_pb2.SourceDocument:
    doc = retrieval_pb2.SourceDocument(filename=filename, content=text.encode())
    doc.metadata.update(metadata)
    return doc


async def stream_ingest(
    svc: Service, *docs: retrieval_pb2.SourceDocument
) -> list[retrieval_pb2.IngestedDocument]:
    request = retrieval_pb2.IngestDocumentsRequest(documents=docs, knowledge_base=TEAM)
    events = [e async for e in svc.stub.StreamIngestDocuments(request)]
    assert events[-1].WhichOneof("event") == "result"
    return list(events[-1].result.documents)


async def rows(svc: Service, document_id: str) -> dict[int, dict[str, dict[str, Any]]]:
    """Per level, the document's rows by chunk_id: version, metadata and vector."""
    out: dict[int, dict[str, dict[str, Any]]] = {}
    for lvl in LEVELS:
        name = svc.app.store.level_collection(lvl)
        found = await svc.app.store.run(
            lambda client, name=name: client.query(
                name,
                filter=f'document_id == "{document_id}"',
                output_fields=["chunk_id", "version", "metadata", "dense", "bm25_text"],
            )
        )
        out[lvl] = {r["chunk_id"]: dict(r) for r in found}
    return out


async def found_by(svc: Service, expr: str) -> set[str]:
    reply = await svc.stub.Retrieve(
        retrieval_pb2.RetrieveRequest(
            query="lighthouse keeper seagulls bees hive", knowledge_bases=[TEAM], filter=expr
        )
    )
    return {d.document_id for d in reply.docs}


async def listing(svc: Service) -> dict[str, retrieval_pb2.DocumentInfo]:
    reply = await svc.stub.ListDocuments(
        retrieval_pb2.ListDocumentsRequest(knowledge_base=TEAM, page_size=1000)
    )
    return {d.document_id: d for d in reply.documents}


async def assert_rows_match_registry(svc: Service) -> None:
    documents = await listing(svc)
    counts = await svc.counts()
    assert counts == tuple(
        sum((d.l1_chunks, d.l2_chunks, d.l3_chunks)[i] for d in documents.values())
        for i in range(3)
    )
    keys = await svc.app.registry.scan()
    assert sorted(k.document_id for k in keys) == sorted(documents)  # one record each


async def test_a_metadata_change_copies_the_vectors_and_moves_the_filter(tmp_path: Path) -> None:
    embedder = HashingEmbedder()
    async with running_service(tmp_path / "kb.db", embedder=embedder) as svc:
        await svc.stub.CreateKnowledgeBase(
            retrieval_pb2.CreateKnowledgeBaseRequest(knowledge_base_id="team")
        )
        (first,) = await stream_ingest(svc, source("sea.md", SEA, {"team": "a", "year": 2023}))
        before = await rows(svc, "sea.md")
        embedded = embedder.passages

        sea, bees = await stream_ingest(
            svc,
            source("sea.md", SEA, {"team": "b", "year": 2024}),
            source("bees.md", BEES, {"team": "a"}),
        )
        after = await rows(svc, "sea.md")
        by_new, by_old = (
            await found_by(svc, 'metadata.team = "b"'),
            await found_by(svc, 'metadata.team = "a"'),
        )
        by_year = await found_by(svc, "metadata.year >= 2024")
        documents = await listing(svc)
        await assert_rows_match_registry(svc)

    # Reported as a metadata-only replacement with the stored counts.
    assert sea.metadata_only and sea.replaced and not sea.unchanged
    assert (sea.l1_chunks, sea.l2_chunks, sea.l3_chunks) == (
        first.l1_chunks,
        first.l2_chunks,
        first.l3_chunks,
    )
    assert sea.content_sha256 == first.content_sha256
    assert not bees.metadata_only and not bees.replaced
    # Only the new document was embedded.
    assert embedder.passages - embedded == bees.l3_chunks
    # The same chunks, one new version, the same vectors and BM25 text, the new metadata.
    for lvl in LEVELS:
        assert set(after[lvl]) == set(before[lvl]) and after[lvl]
        assert len({r["version"] for r in after[lvl].values()}) == 1
        for chunk_id, row in after[lvl].items():
            old = before[lvl][chunk_id]
            assert row["version"] != old["version"]
            assert np.array_equal(
                np.asarray(row["dense"], dtype=np.float32),
                np.asarray(old["dense"], dtype=np.float32),
            )
            assert row["bm25_text"] == old["bm25_text"]
            assert row["metadata"] == {"team": "b", "year": 2024}
    # Every reader sees the new metadata: filters, Chunk and DocumentInfo.
    assert by_new == {"sea.md"} and by_old == {"bees.md"} and by_year == {"sea.md"}
    assert json_format.MessageToDict(documents["sea.md"].metadata) == {"team": "b", "year": 2024}


async def test_sync_of_an_edited_sidecar_changes_metadata_only(tmp_path: Path) -> None:
    root = tmp_path / "folder"
    root.mkdir()
    (root / "sea.md").write_text(SEA, encoding="utf-8")
    (root / "sea.md.meta.json").write_text('{"team": "a"}', encoding="utf-8")
    (root / "bees.md").write_text(BEES, encoding="utf-8")
    embedder = HashingEmbedder()
    async with running_service(tmp_path / "kb.db", embedder=embedder) as svc:
        await _cli(svc.port, "kb", "create", "team")
        rc1, _, err1 = await _cli(svc.port, "sync", str(root), "--kb", "team")
        embedded = embedder.passages
        (root / "sea.md.meta.json").write_text('{"team": "b"}', encoding="utf-8")
        rc_dry, out_dry, _ = await _cli(svc.port, "sync", str(root), "--kb", "team", "--dry-run")
        rc2, out2, err2 = await _cli(svc.port, "sync", str(root), "--kb", "team", "--json")
        by_new = await found_by(svc, 'metadata.team = "b"')
        by_old = await found_by(svc, 'metadata.team = "a"')
        await assert_rows_match_registry(svc)

    assert rc1 == 0, err1
    assert rc_dry == 0 and "changed sea.md: metadata only" in out_dry
    assert rc2 == 0, err2
    files = {f["document_id"]: f for f in json.loads(out2)["files"]}
    assert files["sea.md"]["action"] == "changed" and files["sea.md"]["metadata_only"]
    assert files["sea.md"]["leaves"] > 0
    assert files["bees.md"]["action"] == "unchanged"
    assert embedder.passages == embedded  # nothing embedded again
    assert by_new == {"sea.md"} and by_old == set()


# ---- killed while the metadata changes ---------------------------------------------------

#: The steps a copy passes (it writes no row before the intent, all in one piece per level).
COPY_POINTS = ["after_intent", "during_level_3", "during_level_1", "before_commit", "after_commit"]


@pytest.mark.parametrize("point", COPY_POINTS)
async def test_a_process_killed_mid_copy_leaves_the_old_metadata_or_the_new(
    tmp_path: Path, point: str
) -> None:
    server = EmbeddingsServer(crash.DIM).start()
    try:
        db = tmp_path / "kb.db"
        async with crash.restarted(server, str(db), "meta") as svc:
            await svc.stub.IngestDocuments(
                retrieval_pb2.IngestDocumentsRequest(
                    documents=[source("sea.md", SEA, {"team": "a"})]
                )
            )
            before = await rows(svc, "sea.md")
        seeded = len(server.requests)
        env = {
            **crash.embedding_env(server),
            "MILVUS_URI": str(db),
            "MILVUS_COLLECTION": "meta",
            "SUPERMEW_CRASH_AT": point,
        }
        process = crash.ServiceProcess(tmp_path / "service.log", env)
        try:
            with pytest.raises(grpc.RpcError):
                process.stub.IngestDocuments(
                    retrieval_pb2.IngestDocumentsRequest(
                        documents=[source("sea.md", SEA, {"team": "b"})]
                    ),
                    timeout=60,
                )
            assert process.wait_crashed() == 137
        finally:
            process.stop()
        # What the killed process asked the embedder: never a passage of the document.
        asked = json.dumps(server.requests[seeded:])
        async with crash.restarted(server, str(db), "meta") as svc:
            after = await rows(svc, "sea.md")
            (doc,) = (await svc.stub.ListDocuments(retrieval_pb2.ListDocumentsRequest())).documents
            teams = {t: await found_by_default(svc, f'metadata.team = "{t}"') for t in "ab"}
            counts = await svc.counts()
    finally:
        server.stop()

    team = json_format.MessageToDict(doc.metadata)["team"]
    assert team == ("b" if point == "after_commit" else "a")
    assert teams == {team: {"sea.md"}, ("b" if team == "a" else "a"): set()}
    assert counts == (doc.l1_chunks, doc.l2_chunks, doc.l3_chunks)
    for lvl in LEVELS:
        assert set(after[lvl]) == set(before[lvl])
        assert len({r["version"] for r in after[lvl].values()}) == 1
        assert all(r["metadata"] == {"team": team} for r in after[lvl].values())
        for chunk_id, row in after[lvl].items():
            assert np.array_equal(
                np.asarray(row["dense"], dtype=np.float32),
                np.asarray(before[lvl][chunk_id]["dense"], dtype=np.float32),
            )
    assert "lighthouse" not in asked


async def found_by_default(svc: Service, expr: str) -> set[str]:
    reply = await svc.stub.Retrieve(
        retrieval_pb2.RetrieveRequest(query="lighthouse keeper seagulls", filter=expr)
    )
    return {d.document_id for d in reply.docs}
