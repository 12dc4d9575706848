"""Knowledge bases against the real service on Milvus Lite (docs/api.md#knowledge-bases,
#filters): the same file name in two knowledge bases isolated in Retrieve, ListDocuments and
DeleteDocuments; metadata and document ids round trip on Chunk and DocumentInfo; a filter
table through Retrieve; `unchanged` on a second ingest with no embedder call; every request
error with its status and field; and DeleteKnowledgeBase killed in a real process at two of
its steps, gone after the restart. The upgrade of a store older than knowledge bases is in
test_store_upgrade.py."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import pytest_asyncio
from google.protobuf import field_mask_pb2, struct_pb2
from supermew.v1 import retrieval_pb2, retrieval_pb2_grpc

from retrieval_service.adapters.embedders import OpenAIEmbedder
from retrieval_service.adapters.milvus.connection import StoreConfig
from retrieval_service.core.documents import LEVELS
from retrieval_service.core.identity import DEFAULT_KB
from shared.codec import chunk_from_proto
from tests.fakes.embeddings_server import EmbeddingsServer
from tests.fakes.hashing_embedder import HashingEmbedder
from tests.integration.retrieval_harness import (
    Service,
    copy_store,
    running_service,
    spawn_retrieval_service,
)
from tests.unit.test_filters import CASES, ROWS

pytestmark = [pytest.mark.integration]

DIM = 32
TEAM = "knowledge_bases/team"
SEA = "The lighthouse keeper counts seagulls on the northern cliff every morning. " * 3
BEES = "Bees dance to tell the hive where the flowers are blooming this spring. " * 3


def source(filename: str, text: str, **kw: Any) -> retrieval_pb2.SourceDocument:
    doc = retrieval_pb2.SourceDocument(filename=filename, content=text.encode())
    if "document_id" in kw:
        doc.document_id = kw["document_id"]
    if "metadata" in kw:
        doc.metadata.update(kw["metadata"])
    return doc


def struct(values: dict[str, Any]) -> struct_pb2.Struct:
    out = struct_pb2.Struct()
    out.update(values)
    return out


@pytest_asyncio.fixture
async def svc(tmp_path: Path) -> AsyncIterator[tuple[Service, HashingEmbedder]]:
    embedder = HashingEmbedder(DIM)
    async with running_service(tmp_path / "kb.db", embedder=embedder) as service:
        yield service, embedder


async def ingest(
    service: Service, *docs: retrieval_pb2.SourceDocument, kb: str = ""
) -> retrieval_pb2.IngestDocumentsResponse:
    return await service.stub.IngestDocuments(
        retrieval_pb2.IngestDocumentsRequest(documents=list(docs), knowledge_base=kb)
    )


async def retrieve(service: Service, query: str, *kbs: str, filter: str = "") -> list[dict]:
    reply = await service.stub.Retrieve(
        retrieval_pb2.RetrieveRequest(query=query, top_k=50, knowledge_bases=kbs, filter=filter)
    )
    return [chunk_from_proto(c) for c in reply.docs]


async def listed(service: Service, kb: str = "") -> list[retrieval_pb2.DocumentInfo]:
    reply = await service.stub.ListDocuments(retrieval_pb2.ListDocumentsRequest(knowledge_base=kb))
    return list(reply.documents)


async def test_the_knowledge_base_rpcs(svc: tuple[Service, HashingEmbedder]) -> None:
    service, _ = svc
    stub = service.stub
    created = await stub.CreateKnowledgeBase(
        retrieval_pb2.CreateKnowledgeBaseRequest(
            knowledge_base_id="team",
            knowledge_base=retrieval_pb2.KnowledgeBase(display_name="Team", description="d"),
        )
    )
    assert (created.name, created.display_name, created.description) == (TEAM, "Team", "d")
    assert created.create_time.seconds > 0
    await ingest(service, source("a.md", SEA), source("b.md", BEES), kb="team")
    got = await stub.GetKnowledgeBase(retrieval_pb2.GetKnowledgeBaseRequest(name=TEAM))
    infos = await listed(service, "team")
    assert got.document_count == 2
    assert got.chunk_count == sum(i.l1_chunks + i.l2_chunks + i.l3_chunks for i in infos)
    page = await stub.ListKnowledgeBases(retrieval_pb2.ListKnowledgeBasesRequest(page_size=1))
    assert [kb.name for kb in page.knowledge_bases] == [DEFAULT_KB]
    rest = await stub.ListKnowledgeBases(
        retrieval_pb2.ListKnowledgeBasesRequest(page_token=page.next_page_token)
    )
    assert [kb.name for kb in rest.knowledge_bases] == [TEAM] and not rest.next_page_token
    updated = await stub.UpdateKnowledgeBase(
        retrieval_pb2.UpdateKnowledgeBaseRequest(
            knowledge_base=retrieval_pb2.KnowledgeBase(name="team", description="new"),
            update_mask=field_mask_pb2.FieldMask(paths=["description"]),
        )
    )
    assert (updated.display_name, updated.description) == ("Team", "new")
    await stub.DeleteKnowledgeBase(retrieval_pb2.DeleteKnowledgeBaseRequest(name=TEAM, force=True))
    with pytest.raises(grpc.aio.AioRpcError) as gone:
        await stub.GetKnowledgeBase(retrieval_pb2.GetKnowledgeBaseRequest(name=TEAM))
    assert gone.value.code() == grpc.StatusCode.NOT_FOUND
    assert await service.app.registry.scan(TEAM) == []


async def test_one_file_name_in_two_knowledge_bases(svc: tuple[Service, HashingEmbedder]) -> None:
    service, _ = svc
    await service.stub.CreateKnowledgeBase(
        retrieval_pb2.CreateKnowledgeBaseRequest(knowledge_base_id="team")
    )
    await ingest(service, source("notes.md", SEA))
    await ingest(service, source("notes.md", BEES), kb="team")
    default = await retrieve(service, "lighthouse seagulls bees hive")
    team = await retrieve(service, "lighthouse seagulls bees hive", "team")
    both = await retrieve(service, "lighthouse seagulls bees hive", "team", DEFAULT_KB)
    assert default and all("lighthouse" in d["text"] for d in default)
    assert {d["knowledge_base"] for d in default} == {DEFAULT_KB}
    assert team and all("Bees" in d["text"] for d in team)
    assert {d["knowledge_base"] for d in team} == {TEAM}
    assert {d["knowledge_base"] for d in both} == {DEFAULT_KB, TEAM}
    assert [(i.document_id, i.knowledge_base) for i in await listed(service)] == [
        ("notes.md", DEFAULT_KB)
    ]
    assert [(i.document_id, i.knowledge_base) for i in await listed(service, "team")] == [
        ("notes.md", TEAM)
    ]
    deleted = await service.stub.DeleteDocuments(
        retrieval_pb2.DeleteDocumentsRequest(filenames=["notes.md"], knowledge_base="team")
    )
    assert deleted.deleted_chunks > 0
    assert await listed(service, "team") == []
    assert len(await listed(service)) == 1
    assert await retrieve(service, "bees hive", "team") == []
    assert await retrieve(service, "lighthouse seagulls")


async def test_metadata_and_document_ids_round_trip(svc: tuple[Service, HashingEmbedder]) -> None:
    service, _ = svc
    metadata = {"department": "sales", "year": 2023, "tags": ["red", "blue"], "public": True}
    reply = await ingest(
        service,
        source("notes.md", SEA, document_id="a/notes.md", metadata=metadata),
        source("notes.md", BEES, document_id="b/notes.md"),
    )
    assert [(d.document_id, d.knowledge_base) for d in reply.documents] == [
        ("a/notes.md", DEFAULT_KB),
        ("b/notes.md", DEFAULT_KB),
    ]
    assert len(reply.documents[0].content_sha256) == 64 and not reply.documents[0].unchanged
    infos = await listed(service)
    assert [i.document_id for i in infos] == ["a/notes.md", "b/notes.md"]
    first, second = infos
    assert first.filename == "notes.md" and first.metadata == struct(metadata)
    assert not second.HasField("metadata")
    assert first.size_bytes == len(SEA.encode())
    assert first.content_sha256 == reply.documents[0].content_sha256
    assert first.ingest_time.seconds > 1_700_000_000
    docs = await retrieve(service, "lighthouse seagulls")
    sea = [d for d in docs if d["document_id"] == "a/notes.md"]
    assert sea and all(d["metadata"] == metadata for d in sea)
    assert all(d["knowledge_base"] == DEFAULT_KB for d in docs)
    assert all(d["id"].startswith(d["document_id"] + "::p") for d in docs if d.get("id"))


async def test_an_unchanged_document_is_not_embedded_again(
    svc: tuple[Service, HashingEmbedder],
) -> None:
    service, embedder = svc
    first = await ingest(service, source("a.md", SEA, metadata={"k": "v"}))
    embedded, records = embedder.passages, await service.app.registry.scan()
    again = await ingest(service, source("a.md", SEA, metadata={"k": "v"}))
    (doc,) = again.documents
    assert doc.unchanged and not doc.replaced
    assert doc.content_sha256 == first.documents[0].content_sha256
    assert (doc.l1_chunks, doc.l2_chunks, doc.l3_chunks) == (
        first.documents[0].l1_chunks,
        first.documents[0].l2_chunks,
        first.documents[0].l3_chunks,
    )
    assert embedder.passages == embedded
    assert await service.app.registry.scan() == records
    retagged = await ingest(service, source("a.md", SEA, metadata={"k": "w"}))
    assert retagged.documents[0].metadata_only and retagged.documents[0].replaced
    assert embedder.passages == embedded  # metadata alone: the stored vectors are kept
    changed = await ingest(service, source("a.md", SEA + " More.", metadata={"k": "w"}))
    assert not changed.documents[0].unchanged and changed.documents[0].replaced
    assert not changed.documents[0].metadata_only
    assert embedder.passages > embedded


ERRORS = [
    (
        "IngestDocuments",
        retrieval_pb2.IngestDocumentsRequest(
            documents=[source("a.md", SEA)], knowledge_base="nope"
        ),
        grpc.StatusCode.NOT_FOUND,
        "knowledge_base",
    ),
    (
        "IngestDocuments",
        retrieval_pb2.IngestDocumentsRequest(
            documents=[source("a.md", SEA, document_id="x"), source("b.md", BEES, document_id="x")]
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
        "documents[1].document_id",
    ),
    (
        "IngestDocuments",
        retrieval_pb2.IngestDocumentsRequest(documents=[source("a.md", SEA, document_id="a b")]),
        grpc.StatusCode.INVALID_ARGUMENT,
        "documents[0].document_id",
    ),
    (
        "IngestDocuments",
        retrieval_pb2.IngestDocumentsRequest(
            documents=[source("a.md", SEA, metadata={"Bad-Key": 1})]
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
        "documents[0].metadata",
    ),
    (
        "IngestDocuments",
        retrieval_pb2.IngestDocumentsRequest(
            documents=[source("a.md", SEA, metadata={"k": {"nested": 1}})]
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
        "documents[0].metadata.k",
    ),
    (
        "Retrieve",
        retrieval_pb2.RetrieveRequest(query="q", knowledge_bases=["default", "nope"]),
        grpc.StatusCode.NOT_FOUND,
        "knowledge_bases[1]",
    ),
    (
        "Retrieve",
        retrieval_pb2.RetrieveRequest(query="q", knowledge_bases=["Bad"]),
        grpc.StatusCode.INVALID_ARGUMENT,
        "knowledge_bases[0]",
    ),
    (
        "Retrieve",
        retrieval_pb2.RetrieveRequest(query="q", filter='metadata.x = "unterminated'),
        grpc.StatusCode.INVALID_ARGUMENT,
        "filter",
    ),
    (
        "DeleteDocuments",
        retrieval_pb2.DeleteDocumentsRequest(document_ids=["a.md"], knowledge_base="nope"),
        grpc.StatusCode.NOT_FOUND,
        "knowledge_base",
    ),
    (
        "DeleteDocuments",
        retrieval_pb2.DeleteDocumentsRequest(document_ids=["a b"]),
        grpc.StatusCode.INVALID_ARGUMENT,
        "document_ids[0]",
    ),
    (
        "ListDocuments",
        retrieval_pb2.ListDocumentsRequest(knowledge_base="nope"),
        grpc.StatusCode.NOT_FOUND,
        "knowledge_base",
    ),
    (
        "CreateKnowledgeBase",
        retrieval_pb2.CreateKnowledgeBaseRequest(knowledge_base_id="default"),
        grpc.StatusCode.ALREADY_EXISTS,
        "knowledge_base_id",
    ),
    (
        "CreateKnowledgeBase",
        retrieval_pb2.CreateKnowledgeBaseRequest(knowledge_base_id="Not_An_Id"),
        grpc.StatusCode.INVALID_ARGUMENT,
        "knowledge_base_id",
    ),
    (
        "GetKnowledgeBase",
        retrieval_pb2.GetKnowledgeBaseRequest(name="knowledge_bases/nope"),
        grpc.StatusCode.NOT_FOUND,
        "name",
    ),
    (
        "UpdateKnowledgeBase",
        retrieval_pb2.UpdateKnowledgeBaseRequest(
            knowledge_base=retrieval_pb2.KnowledgeBase(name=DEFAULT_KB),
            update_mask=field_mask_pb2.FieldMask(paths=["create_time"]),
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
        "update_mask",
    ),
    (
        "UpdateKnowledgeBase",
        retrieval_pb2.UpdateKnowledgeBaseRequest(
            knowledge_base=retrieval_pb2.KnowledgeBase(name="knowledge_bases/nope")
        ),
        grpc.StatusCode.NOT_FOUND,
        "knowledge_base.name",
    ),
    (
        "DeleteKnowledgeBase",
        retrieval_pb2.DeleteKnowledgeBaseRequest(name=DEFAULT_KB, force=True),
        grpc.StatusCode.FAILED_PRECONDITION,
        "name",
    ),
    (
        "DeleteKnowledgeBase",
        retrieval_pb2.DeleteKnowledgeBaseRequest(name="knowledge_bases/nope"),
        grpc.StatusCode.NOT_FOUND,
        "name",
    ),
]


async def test_every_error_names_its_field_and_changes_nothing(
    svc: tuple[Service, HashingEmbedder],
) -> None:
    service, _ = svc
    await ingest(service, source("kept.md", SEA))
    before = await service.app.registry.scan()
    for method, request, code, field in ERRORS:
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await getattr(service.stub, method)(request)
        assert raised.value.code() == code, (method, field, raised.value.details())
        assert (raised.value.details() or "").startswith(f"{field}: "), raised.value.details()
    # Non-empty without force, with its documents kept.
    await service.stub.CreateKnowledgeBase(
        retrieval_pb2.CreateKnowledgeBaseRequest(knowledge_base_id="team")
    )
    await ingest(service, source("a.md", SEA), kb="team")
    with pytest.raises(grpc.aio.AioRpcError) as held:
        await service.stub.DeleteKnowledgeBase(retrieval_pb2.DeleteKnowledgeBaseRequest(name=TEAM))
    assert held.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert len(await listed(service, "team")) == 1
    assert await service.app.registry.scan(DEFAULT_KB) == before


# ---- filters through Retrieve ------------------------------------------------------------------

#: The filter table's cases on what a caller sets (metadata and document_id); file names, types
#: and ingest times are the service's to set and are covered on Milvus Lite directly
#: (test_filters_milvus.py).
FILTER_CASES = [
    (text, expected)
    for text, expected in CASES
    if not any(column in text for column in ("filename", "file_type", "ingest_time"))
]


@pytest.fixture(scope="module")
def filter_store() -> Iterator[Path]:
    """A store holding the filter table's ROWS as documents (their document ids and
    metadata), built once."""
    root = Path(tempfile.mkdtemp(prefix="kb-filters-"))

    async def build() -> None:
        async with running_service(root / "kb.db", embedder=HashingEmbedder(DIM)) as service:
            docs = [
                source(
                    f"doc{i}.md",
                    f"shared words about the table row number {i}",
                    document_id=row["document_id"],
                    metadata=row["metadata"],
                )
                for i, row in enumerate(ROWS)
            ]
            await ingest(service, *docs)

    thread = threading.Thread(target=lambda: asyncio.run(build()))
    thread.start()
    thread.join()
    yield root / "kb.db"
    shutil.rmtree(root, ignore_errors=True)


async def test_the_filter_table_through_retrieve(filter_store: Path, tmp_path: Path) -> None:
    db = copy_store(filter_store, tmp_path / "kb.db")
    async with running_service(db, embedder=HashingEmbedder(DIM)) as service:
        everything = await retrieve(service, "shared words table row")
        assert {d["document_id"] for d in everything} == {row["document_id"] for row in ROWS}
        for text, expected in FILTER_CASES:
            docs = await retrieve(service, "shared words table row", filter=text)
            assert {d["document_id"] for d in docs} == expected, text


# ---- DeleteKnowledgeBase killed in a real process ------------------------------------------------


@pytest.fixture(scope="module")
def embedding_server() -> Iterator[EmbeddingsServer]:
    server = EmbeddingsServer(DIM).start()
    yield server
    server.stop()


@pytest.mark.parametrize("point", ["kb_delete_after_mark", "kb_delete_during_cleanup"])
async def test_a_knowledge_base_deletion_killed_midway_is_gone_after_restart(
    tmp_path: Path, embedding_server: EmbeddingsServer, point: str
) -> None:
    db = tmp_path / "kb.db"
    store = StoreConfig(uri=str(db), token=None, collection="crash", dim=DIM)
    model = OpenAIEmbedder(embedding_server.base_url, "fake", DIM)
    try:
        async with running_service(db, embedder=model, store=store) as service:
            await service.stub.CreateKnowledgeBase(
                retrieval_pb2.CreateKnowledgeBaseRequest(knowledge_base_id="team")
            )
            await ingest(service, source("a.md", SEA), source("b.md", BEES), kb="team")
            await ingest(service, source("a.md", SEA))
            kept = await listed(service)
        env = {
            "EMBEDDING_BASE_URL": embedding_server.base_url,
            "EMBEDDING_MODEL": "fake",
            "EMBEDDING_DIM": str(DIM),
            "MILVUS_URI": str(db),
            "MILVUS_COLLECTION": "crash",
            "SUPERMEW_CRASH_AT": point,
        }
        await asyncio.to_thread(kill_during_delete, tmp_path / "service.log", env)
        async with running_service(db, embedder=model, store=store) as service:
            with pytest.raises(grpc.aio.AioRpcError) as gone:
                await service.stub.GetKnowledgeBase(
                    retrieval_pb2.GetKnowledgeBaseRequest(name=TEAM)
                )
            assert gone.value.code() == grpc.StatusCode.NOT_FOUND
            assert await service.app.registry.scan(TEAM) == []
            rows = await service.app.store.run(
                lambda client: [
                    client.query(
                        service.app.store.level_collection(lvl),
                        filter=f'knowledge_base == "{TEAM}"',
                        output_fields=["pk"],
                    )
                    for lvl in LEVELS
                ]
            )
            assert rows == [[], [], []]
            assert await listed(service) == kept  # the default knowledge base is untouched
            docs = await retrieve(service, "lighthouse seagulls")
            assert docs and {d["knowledge_base"] for d in docs} == {DEFAULT_KB}
            # The name is free again.
            await service.stub.CreateKnowledgeBase(
                retrieval_pb2.CreateKnowledgeBaseRequest(knowledge_base_id="team")
            )
    finally:
        await model.aclose()


def kill_during_delete(log: Path, env: dict[str, str]) -> None:
    proc, port = spawn_retrieval_service(env, log)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = retrieval_pb2_grpc.RetrievalServiceStub(channel)
            with pytest.raises(grpc.RpcError) as err:
                stub.DeleteKnowledgeBase(
                    retrieval_pb2.DeleteKnowledgeBaseRequest(name=TEAM, force=True), timeout=60
                )
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        assert proc.wait(timeout=60) == 137, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
