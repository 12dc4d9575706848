"""The in-place upgrade of a store of the knowledge-base layout (`_v3`, before document access:
docs/api.md#document-access) on Milvus Lite: its chunk collections written with that layout's
schema (no `acl` column), then opened by the service, which copies every row into the current
collections with its document's `acl` column, hides a document with an `acl` from keys outside
its groups, embeds nothing again and drops the old collections."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from retrieval_service.adapters.milvus.connection import MilvusStore, StoreConfig
from retrieval_service.adapters.milvus.lite_process import LiteProcess
from retrieval_service.adapters.milvus.schema import (
    KB_NAME_MAX,
    chunk_index_params,
    knowledge_base_schema,
    registry_index_params,
    registry_schema,
)
from retrieval_service.bootstrap import clear_milvus_env
from retrieval_service.core.documents import LEVELS
from tests.fakes.hashing_embedder import HashingEmbedder
from tests.integration.retrieval_harness import running_service
from tests.integration.test_knowledge_bases import BEES, DIM, SEA, ingest, listed, source
from tests.integration.test_store_upgrade import v2_chunk_schema
from tests.integration.test_store_upgrade_v4 import control_rows

pytestmark = [pytest.mark.integration]

COLLECTION = "supermew_chunks"


def v3_chunk_schema(dim: int) -> Any:
    """The chunk collections' schema of the knowledge-base layout: `_v2`'s and the knowledge
    base (partition key), document_id, metadata and ingest time; no `acl` column."""
    from pymilvus import DataType

    schema = v2_chunk_schema(dim)
    schema.add_field(
        "knowledge_base", DataType.VARCHAR, max_length=KB_NAME_MAX, is_partition_key=True
    )
    schema.add_field("document_id", DataType.VARCHAR, max_length=1024)
    schema.add_field("metadata", DataType.JSON)
    schema.add_field("ingest_time", DataType.INT64)
    return schema


async def rewrite_as_v3(db: Path) -> int:
    """Moves a current store's rows into `_v3` collections (the chunk rows without their `acl`
    column; the registry and knowledge-base records, from the database, as Milvus rows of
    the layout they kept until the database) and drops the current ones and the database:
    the store as that release left it. Returns the rows."""
    knowledge_bases, records = await control_rows(db)
    clear_milvus_env()
    config = StoreConfig(uri=str(db), token=None, collection=COLLECTION, dim=DIM)
    lite = LiteProcess(config.uri)
    await lite.start()
    milvus = MilvusStore(config, lite)
    old = milvus.v3_collections()

    def move(client: Any) -> int:
        rows = 0
        for level, target in zip(LEVELS, old[:3], strict=True):
            source = milvus.level_collection(level)
            client.create_collection(
                target,
                schema=v3_chunk_schema(DIM),
                index_params=chunk_index_params(client, config.bm25_params),
            )
            found = client.query(source, filter='pk != ""', output_fields=["*"])
            moved = [{k: v for k, v in row.items() if k not in ("acl", "sparse")} for row in found]
            client.insert(target, moved)
            rows += len(moved)
        for target, schema, control in (
            (old[3], registry_schema(), records),
            (old[4], knowledge_base_schema(), knowledge_bases),
        ):
            client.create_collection(
                target, schema=schema, index_params=registry_index_params(client)
            )
            client.insert(target, control)
        for name in old:
            client.flush(name)
        for name in milvus.all_collections():
            client.drop_collection(name)
        return rows

    try:
        await milvus.ensure_collections()  # and loads them
        return await milvus.run(move)
    finally:
        await milvus.aclose()


async def test_a_store_of_the_knowledge_base_layout_is_upgraded_with_its_acls(
    tmp_path: Path,
) -> None:
    db = tmp_path / "kb.db"
    embedder = HashingEmbedder(DIM)
    async with running_service(db, embedder=embedder) as service:
        await ingest(
            service,
            source("open.md", SEA),
            source("secret.md", BEES, metadata={"acl": ["bees"], "team": "x"}),
        )
        before = {d.document_id: d for d in await listed(service)}
    moved = await rewrite_as_v3(db)
    assert moved > 0
    passages = embedder.passages
    async with running_service(db, embedder=embedder) as service:
        after = {d.document_id: d for d in await listed(service)}
        assert after == before  # every record, counts and metadata as they were
        assert embedder.passages == passages  # nothing embedded again
        assert await service.counts() == tuple(
            sum(getattr(d, f"l{level}_chunks") for d in after.values()) for level in LEVELS
        )
        pipeline = service.app.pipeline

        async def seen(groups: frozenset[str] | None) -> set[str]:
            result = await pipeline.retrieve("bees dance hive flowers", 20, groups=groups)
            return {doc["document_id"] for doc in result.docs}

        assert "secret.md" in await seen(None)
        assert "secret.md" in await seen(frozenset({"bees"}))
        assert "secret.md" not in await seen(frozenset({"ants"}))
        names = await service.app.store.run(lambda client: client.list_collections())
        assert not any(name.startswith(f"{COLLECTION}_v3") for name in names)
    async with running_service(db, embedder=embedder) as service:  # a second start: as it was
        assert {d.document_id: d for d in await listed(service)} == before
