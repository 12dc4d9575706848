"""The in-place upgrade of a store written before knowledge bases (the `_v2` layout,
docs/api.md#knowledge-bases) on Milvus Lite: its collections written with that layout's
schema, then opened by the service, which serves its documents in `knowledge_bases/default`
without embedding anything again and drops the old collections; and an upgrade that died
midway, finished by the next start."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from supermew.v1 import retrieval_pb2

from retrieval_service.adapters.milvus.connection import MilvusStore, StoreConfig
from retrieval_service.adapters.milvus.lite_process import LiteProcess
from retrieval_service.adapters.milvus.schema import (
    ANALYZER_PARAMS,
    REGISTRY_VECTOR_DIM,
    chunk_index_params,
    registry_index_params,
)
from retrieval_service.adapters.milvus.upgrade import upgraded_chunk
from retrieval_service.bootstrap import clear_milvus_env
from retrieval_service.core.documents import LEVELS
from retrieval_service.core.identity import DEFAULT_KB
from shared.lexical import bm25_text
from tests.fakes.hashing_embedder import HashingEmbedder
from tests.integration.retrieval_harness import running_service
from tests.integration.test_knowledge_bases import DIM, SEA, ingest, listed, retrieve, source

pytestmark = [pytest.mark.integration]


def v2_chunk_schema(dim: int) -> Any:
    """The chunk collections' schema before knowledge bases (the `_v2` layout)."""
    from pymilvus import DataType, Function, FunctionType, MilvusClient

    schema = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
    schema.add_field("pk", DataType.VARCHAR, is_primary=True, max_length=2048 + 64)
    schema.add_field("chunk_id", DataType.VARCHAR, max_length=2048)
    schema.add_field("version", DataType.VARCHAR, max_length=64)
    schema.add_field("text", DataType.VARCHAR, max_length=65535)
    schema.add_field(
        "bm25_text",
        DataType.VARCHAR,
        max_length=65535,
        enable_analyzer=True,
        analyzer_params=ANALYZER_PARAMS,
    )
    schema.add_field("sparse", DataType.SPARSE_FLOAT_VECTOR)
    schema.add_field("dense", DataType.FLOAT_VECTOR, dim=dim)
    schema.add_field("filename", DataType.VARCHAR, max_length=1024)
    schema.add_field("file_type", DataType.VARCHAR, max_length=64)
    schema.add_field("file_path", DataType.VARCHAR, max_length=2048)
    schema.add_field("page_number", DataType.VARCHAR, max_length=32)
    schema.add_field("parent_chunk_id", DataType.VARCHAR, max_length=2048)
    schema.add_field("root_chunk_id", DataType.VARCHAR, max_length=2048)
    schema.add_field("chunk_level", DataType.INT64)
    schema.add_field("chunk_idx", DataType.INT64)
    schema.add_function(
        Function(
            name="text_bm25",
            function_type=FunctionType.BM25,
            input_field_names=["bm25_text"],
            output_field_names=["sparse"],
        )
    )
    return schema


def v2_registry_schema() -> Any:
    from pymilvus import DataType, MilvusClient

    schema = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
    schema.add_field("pk", DataType.VARCHAR, is_primary=True, max_length=2 * 4 * 255 + 1 + 64)
    schema.add_field("filename", DataType.VARCHAR, max_length=1024)
    schema.add_field("version", DataType.VARCHAR, max_length=64)
    schema.add_field("state", DataType.INT64)
    schema.add_field("file_type", DataType.VARCHAR, max_length=64)
    schema.add_field("pages", DataType.INT64)
    schema.add_field("page_counts", DataType.VARCHAR, max_length=65535)
    schema.add_field("marker", DataType.FLOAT_VECTOR, dim=REGISTRY_VECTOR_DIM)
    return schema


#: One document of the old layout: an L1, an L2 and two leaves on page 0.
V2_VERSION = f"{1_700_000_000 * 10**9:020d}-abcd1234"
V2_TEXTS = {
    1: ["The lighthouse keeper counts seagulls. The glacier melts slowly."],
    2: ["The lighthouse keeper counts seagulls. The glacier melts slowly."],
    3: ["The lighthouse keeper counts seagulls.", "The glacier melts slowly."],
}


def v2_rows(level: int, embedder: HashingEmbedder) -> list[dict[str, Any]]:
    rows = []
    for n, text in enumerate(V2_TEXTS[level]):
        chunk_id = f"old.md::p0::l{level}::{n}"
        rows.append(
            {
                "pk": f"{chunk_id}#{V2_VERSION}",
                "chunk_id": chunk_id,
                "version": V2_VERSION,
                "text": text,
                "bm25_text": bm25_text(text),
                "dense": embedder.vector(text).tolist(),
                "filename": "old.md",
                "file_type": "Markdown",
                "file_path": "old.md",
                "page_number": "0",
                "parent_chunk_id": "" if level == 1 else f"old.md::p0::l{level - 1}::0",
                "root_chunk_id": "old.md::p0::l1::0",
                "chunk_level": level,
                "chunk_idx": n,
            }
        )
    return rows


async def write_v2_store(db: Path, collection: str, embedder: HashingEmbedder) -> None:
    clear_milvus_env()
    config = StoreConfig(uri=str(db), token=None, collection=collection, dim=DIM)
    lite = LiteProcess(config.uri)
    await lite.start()
    milvus = MilvusStore(config, lite)
    prefix = f"{collection}_v2"

    def write(client: Any) -> None:
        for level in LEVELS:
            name = f"{prefix}_l{level}"
            client.create_collection(
                name,
                schema=v2_chunk_schema(DIM),
                index_params=chunk_index_params(client, config.bm25_params),
            )
            client.insert(name, v2_rows(level, embedder))
            client.flush(name)
        name = f"{prefix}_documents"
        client.create_collection(
            name, schema=v2_registry_schema(), index_params=registry_index_params(client)
        )
        client.insert(
            name,
            [
                {
                    "pk": f"{b'old.md'.hex()}#{V2_VERSION}",
                    "filename": "old.md",
                    "version": V2_VERSION,
                    "state": 1,
                    "file_type": "Markdown",
                    "pages": 1,
                    "page_counts": json.dumps({"0": [1, 1, 2]}),
                    "marker": [0.0] * REGISTRY_VECTOR_DIM,
                }
            ],
        )
        client.flush(name)

    try:
        await milvus.run(write)
    finally:
        await milvus.aclose()


async def test_a_store_of_the_previous_layout_is_upgraded_in_place(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    embedder = HashingEmbedder(DIM)
    await write_v2_store(db, "supermew_chunks", embedder)
    async with running_service(db, embedder=embedder) as service:
        (info,) = await listed(service)
        assert (info.document_id, info.filename, info.knowledge_base) == (
            "old.md",
            "old.md",
            DEFAULT_KB,
        )
        assert (info.l1_chunks, info.l2_chunks, info.l3_chunks) == (1, 1, 2)
        assert info.ingest_time.seconds == 1_700_000_000 and info.content_sha256 == ""
        assert embedder.passages == 0  # nothing embedded again
        docs = await retrieve(service, "lighthouse keeper seagulls")
        assert docs and docs[0]["document_id"] == "old.md"
        assert docs[0]["knowledge_base"] == DEFAULT_KB
        names = await service.app.store.run(lambda client: client.list_collections())
        assert not any(name.startswith("supermew_chunks_v2") for name in names)
        # The upgraded document is replaced and deleted like any other.
        replaced = await ingest(service, source("old.md", SEA))
        assert replaced.documents[0].replaced
        deleted = await service.stub.DeleteDocuments(
            retrieval_pb2.DeleteDocumentsRequest(document_ids=["old.md"])
        )
        assert deleted.deleted_chunks > 0
    async with running_service(db, embedder=embedder) as service:  # a second start: nothing left
        assert await listed(service) == []


async def test_an_upgrade_killed_midway_is_finished_by_the_next_start(tmp_path: Path) -> None:
    """A start that died while copying left some rows in the new collections and no marker:
    the next start copies everything again (the copy replaces, never duplicates); one that
    died after the marker but before dropping the old collections only drops them."""
    db = tmp_path / "old.db"
    embedder = HashingEmbedder(DIM)
    await write_v2_store(db, "supermew_chunks", embedder)
    # The first start's copy of the leaves, then its death: the new collections exist and
    # hold these rows, the marker is not written.
    config = StoreConfig(uri=str(db), token=None, collection="supermew_chunks", dim=DIM)
    lite = LiteProcess(config.uri)
    await lite.start()
    milvus = MilvusStore(config, lite)
    try:
        await milvus.ensure_collections()
        leaves = [upgraded_chunk(row) for row in v2_rows(3, embedder)]
        await milvus.run(lambda client: client.insert(milvus.level_collection(3), leaves[:1]))
        await milvus.seal()
    finally:
        await milvus.aclose()
    async with running_service(db, embedder=embedder) as service:
        assert await service.counts() == (1, 1, 2)
        (info,) = await listed(service)
        assert (info.l1_chunks, info.l2_chunks, info.l3_chunks) == (1, 1, 2)
    # Died after the marker: the old collections are back (as a kill before the drop leaves
    # them); the next start drops them and copies nothing again.
    await write_v2_store(db, "supermew_chunks", embedder)
    async with running_service(db, embedder=embedder) as service:
        assert await service.counts() == (1, 1, 2)
        names = await service.app.store.run(lambda client: client.list_collections())
        assert not any(name.startswith("supermew_chunks_v2") for name in names)
        assert len(await listed(service)) == 1
