"""The audit log (docs/api.md#audit-log) of the real retrieval service on Milvus Lite with
AUDIT_LOG set to a file: one line per call (health excluded) with every field, the documents
written, returned and deleted, refused calls (UNAUTHENTICATED with no key id, a reader's
PERMISSION_DENIED with its key id), never a key, token or hash, and the query text only with
AUDIT_LOG_QUERIES=true."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from supermew.v1 import retrieval_pb2

from shared.keys import AUTH_TOKEN_KEY_ID
from tests.fakes.hashing_embedder import HashingEmbedder
from tests.integration.retrieval_harness import running_service

pytestmark = [pytest.mark.integration]

TOKEN = "audit-test-token-9f2c1d"
AUTH = (("authorization", f"Bearer {TOKEN}"),)
READER_KEY = "reader-key-5e7a0b"
QUERY = "lighthouse keeper seagulls"
FILTER = 'NOT filename = "bees.txt"'
SEA = "The lighthouse keeper counts seagulls on the northern cliff every morning. " * 3
BEES = "Bees dance to tell the hive where the flowers are blooming this spring. " * 3
FIELDS = {
    "time",
    "request_id",
    "key_id",
    "peer",
    "rpc",
    "knowledge_bases",
    "filter",
    "code",
    "written",
    "deleted",
    "returned",
}
RPC = "/supermew.v1.RetrievalService/"


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def document(filename: str, text: str, document_id: str = "") -> retrieval_pb2.SourceDocument:
    doc = retrieval_pb2.SourceDocument(filename=filename, content=text.encode())
    if document_id:
        doc.document_id = document_id
    return doc


async def test_one_line_per_call_with_its_fields_and_no_key_material(tmp_path: Path) -> None:
    audit = tmp_path / "audit.jsonl"
    keys = tmp_path / "keys.yaml"
    digest = hashlib.sha256(READER_KEY.encode()).hexdigest()
    keys.write_text(
        f"keys:\n- id: reader\n  sha256: {digest}\n  role: reader\n  knowledge_bases: ['*']\n"
    )
    async with running_service(
        tmp_path / "kb.db",
        embedder=HashingEmbedder(32),
        audit_log=str(audit),
        auth_token=TOKEN,
        auth_keys_file=str(keys),
    ) as svc:
        stub = svc.stub
        await stub.IngestDocuments(
            retrieval_pb2.IngestDocumentsRequest(
                documents=[document("sea.txt", SEA, "notes/sea"), document("bees.txt", BEES)]
            ),
            metadata=(*AUTH, ("x-request-id", "req-ingest")),
        )
        events = stub.StreamIngestDocuments(
            retrieval_pb2.IngestDocumentsRequest(documents=[document("more.txt", SEA + BEES)]),
            metadata=AUTH,
        )
        async for _ in events:
            pass
        reply = await stub.Retrieve(
            retrieval_pb2.RetrieveRequest(query=QUERY, top_k=5, filter=FILTER), metadata=AUTH
        )
        listing = await stub.ListDocuments(retrieval_pb2.ListDocumentsRequest(), metadata=AUTH)
        await stub.DeleteDocuments(
            retrieval_pb2.DeleteDocumentsRequest(document_ids=["notes/sea"]), metadata=AUTH
        )
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.Retrieve(
                retrieval_pb2.RetrieveRequest(query=QUERY, knowledge_bases=["team-a"]),
                metadata=(("authorization", "Bearer wrong-key"),),
            )
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        with pytest.raises(grpc.aio.AioRpcError) as invalid:
            await stub.Retrieve(retrieval_pb2.RetrieveRequest(query=" "), metadata=AUTH)
        assert invalid.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        with pytest.raises(grpc.aio.AioRpcError) as denied:
            await stub.IngestDocuments(
                retrieval_pb2.IngestDocumentsRequest(
                    documents=[document("x.txt", BEES)], knowledge_base="team-b"
                ),
                metadata=(("authorization", f"Bearer {READER_KEY}"),),
            )
        assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{svc.port}")
        async with channel:
            health = health_pb2_grpc.HealthStub(channel)
            await health.Check(health_pb2.HealthCheckRequest())

    written = audit.read_text(encoding="utf-8")
    for secret in (TOKEN, READER_KEY, digest, "wrong-key", "Bearer"):
        assert secret not in written
    assert QUERY not in written
    got = lines(audit)
    assert [(g["rpc"].removeprefix(RPC), g["code"]) for g in got] == [
        ("IngestDocuments", "OK"),
        ("StreamIngestDocuments", "OK"),
        ("Retrieve", "OK"),
        ("ListDocuments", "OK"),
        ("DeleteDocuments", "OK"),
        ("Retrieve", "UNAUTHENTICATED"),
        ("Retrieve", "INVALID_ARGUMENT"),
        ("IngestDocuments", "PERMISSION_DENIED"),
    ]
    for g in got:
        assert set(g) == FIELDS
        assert g["time"].endswith("Z") and g["peer"].startswith("ipv4:127.0.0.1:")
        assert g["request_id"]
    ingest, stream, retrieve, listed, deleted, unauthenticated, invalid_line, denied_line = got
    assert ingest["request_id"] == "req-ingest"
    assert ingest["written"] == ["notes/sea", "bees.txt"]
    assert stream["written"] == ["more.txt"]
    assert [g["key_id"] for g in got] == [AUTH_TOKEN_KEY_ID] * 5 + [
        "",
        AUTH_TOKEN_KEY_ID,
        "reader",
    ]
    assert retrieve["knowledge_bases"] == ["default"] and retrieve["filter"] == FILTER
    assert retrieve["returned"] == list(dict.fromkeys(c.document_id for c in reply.docs))
    assert retrieve["returned"]
    assert listed["returned"] == [d.document_id for d in listing.documents]
    assert deleted["deleted"] == ["notes/sea"] and deleted["written"] == []
    assert unauthenticated["knowledge_bases"] == ["team-a"]
    assert unauthenticated["returned"] == []
    assert invalid_line["returned"] == []
    assert denied_line["knowledge_bases"] == ["team-b"] and denied_line["written"] == []


async def test_the_question_is_written_only_with_audit_log_queries(tmp_path: Path) -> None:
    audit = tmp_path / "audit.jsonl"
    async with running_service(
        tmp_path / "kb.db",
        embedder=HashingEmbedder(32),
        audit_log=str(audit),
        audit_log_queries=True,
    ) as svc:
        await svc.stub.Retrieve(retrieval_pb2.RetrieveRequest(query=QUERY))
        await svc.stub.ListDocuments(retrieval_pb2.ListDocumentsRequest())
    retrieve, listed = lines(audit)
    assert retrieve["question"] == QUERY and retrieve["key_id"] == ""
    assert "question" not in listed
