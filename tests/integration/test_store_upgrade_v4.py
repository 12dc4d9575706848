"""The move of a store whose control records live in Milvus (the layout of the release before
the control-plane database: `_v4` chunk collections plus `_v4_documents` and
`_v4_knowledge_bases`) into the database at the first start (docs/api.md#database "Upgrade in
place"). The store is written by the service, then turned back into that layout with the
previous release's own Milvus adapters (its registry and knowledge-base stores, kept for the
move): every record written into the two collections, the database file removed. The next
start moves them into the database, embeds nothing, drops the two collections; a move killed
before its commit leaves the database empty and the next start finishes it; one killed after
its commit has its collections dropped by the next start, unread."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from supermew.v1 import retrieval_pb2

from retrieval_service.adapters.milvus.connection import MilvusStore, StoreConfig
from retrieval_service.adapters.milvus.knowledge_bases import KnowledgeBaseStore
from retrieval_service.adapters.milvus.knowledge_bases import row_of as kb_row
from retrieval_service.adapters.milvus.lite_process import LiteProcess
from retrieval_service.adapters.milvus.registry import DocumentRegistry
from retrieval_service.adapters.milvus.registry import row_of as registry_row
from retrieval_service.adapters.milvus.schema import (
    knowledge_base_schema,
    registry_index_params,
    registry_schema,
)
from retrieval_service.adapters.sql.database import SQLITE_SUFFIX, Database, DatabaseConfig
from retrieval_service.adapters.sql.knowledge_bases import SqlKnowledgeBaseStore
from retrieval_service.adapters.sql.migrate import ensure_schema
from retrieval_service.adapters.sql.registry import SqlDocumentRegistry
from retrieval_service.adapters.sql.upgrade import move_control_plane
from retrieval_service.bootstrap import clear_milvus_env
from retrieval_service.core.documents import LEVELS
from retrieval_service.core.errors import DatabaseUnavailable
from retrieval_service.core.indexes.model import READY
from retrieval_service.core.knowledge_bases import KnowledgeBaseRecord
from shared.errors import NotFound
from tests.fakes.hashing_embedder import HashingEmbedder
from tests.integration.retrieval_harness import running_service
from tests.integration.test_knowledge_bases import BEES, DIM, SEA, ingest, listed, source

pytestmark = [pytest.mark.integration]

COLLECTION = "supermew_chunks"


def database_file(db: Path) -> Path:
    return db.with_name(db.name.removesuffix(".db") + SQLITE_SUFFIX)


def database_of(db: Path) -> Database:
    return Database(DatabaseConfig(f"sqlite+aiosqlite:///{database_file(db)}"))


async def control_rows(db: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The store's knowledge-base and registry records, as Milvus rows of the previous
    layout; the database file is removed (that release had none)."""
    database = database_of(db)
    try:
        records = await SqlKnowledgeBaseStore(database).all()
        registry = SqlDocumentRegistry(database)
        entries = await registry.full(await registry.scan())
    finally:
        await database.aclose()
    for path in db.parent.glob(database_file(db).name + "*"):
        path.unlink()
    return [kb_row(r) for r in records], [registry_row(e) for e in entries]


async def open_milvus(db: Path) -> MilvusStore:
    clear_milvus_env()
    config = StoreConfig(uri=str(db), token=None, collection=COLLECTION, dim=DIM)
    lite = LiteProcess(config.uri)
    await lite.start()
    return MilvusStore(config, lite)


async def rewrite_as_previous_release(db: Path) -> tuple[int, int]:
    """The store as the release before the database left it: its control records in the
    `_v4` registry and knowledge-base collections. Returns (knowledge bases, records)."""
    knowledge_bases, records = await control_rows(db)
    milvus = await open_milvus(db)

    def write(client: Any) -> None:
        for name, schema, rows in (
            (milvus.registry_collection, registry_schema(), records),
            (milvus.knowledge_base_collection, knowledge_base_schema(), knowledge_bases),
        ):
            client.create_collection(
                name, schema=schema, index_params=registry_index_params(client)
            )
            client.insert(name, rows)
            client.flush(name)

    try:
        await milvus.run(write)
    finally:
        await milvus.aclose()
    return len(knowledge_bases), len(records)


async def populated(db: Path, embedder: HashingEmbedder) -> dict[str, Any]:
    async with running_service(db, embedder=embedder) as service:
        await service.stub.CreateKnowledgeBase(
            retrieval_pb2.CreateKnowledgeBaseRequest(knowledge_base_id="team")
        )
        await ingest(
            service,
            source("open.md", SEA),
            source("secret.md", BEES, metadata={"acl": ["bees"], "team": "x"}),
        )
        await ingest(service, source("team.md", BEES), kb="knowledge_bases/team")
        await ingest(service, source("open.md", SEA + " Revised."))  # a second version
        return {d.document_id: d for d in await listed(service)}


async def test_a_store_of_the_previous_release_moves_into_the_database(tmp_path: Path) -> None:
    db = tmp_path / "kb.db"
    embedder = HashingEmbedder(DIM)
    before = await populated(db, embedder)
    kbs, records = await rewrite_as_previous_release(db)
    assert (kbs, records) == (2, 3)  # open.md's first version went when it was replaced
    assert not database_file(db).exists()
    passages = embedder.passages
    async with running_service(db, embedder=embedder) as service:
        after = {d.document_id: d for d in await listed(service)}
        assert after == before  # every record, counts and metadata as they were
        assert embedder.passages == passages  # nothing embedded again
        every = [*after.values(), *await listed(service, "knowledge_bases/team")]
        assert await service.counts() == tuple(
            sum(getattr(d, f"l{level}_chunks") for d in every) for level in LEVELS
        )
        result = await service.app.pipeline.retrieve("bees dance hive flowers", 20)
        assert "secret.md" in {doc["document_id"] for doc in result.docs}
        team = await service.app.knowledge_bases.get("knowledge_bases/team")
        assert (team.document_count, team.record.name) == (1, "knowledge_bases/team")
        # Every knowledge base reads its `initial` index, made from the settings at the
        # upgrade, its rows the store's own (nothing embedded again, above).
        for kb in ("knowledge_bases/default", "knowledge_bases/team"):
            (initial,) = (await service.app.indexes.list_page(kb, 0, "")).indexes
            assert (initial.index_id, initial.state, initial.collection) == (
                "initial",
                READY,
                service.app.store.config.collection,
            )
            assert (await service.app.knowledge_bases.get(kb)).record.active_index == "initial"
        names = await service.app.store.run(lambda client: client.list_collections())
        assert f"{COLLECTION}_v4_documents" not in names
        assert f"{COLLECTION}_v4_knowledge_bases" not in names
    async with running_service(db, embedder=embedder) as service:  # a second start: as it was
        assert {d.document_id: d for d in await listed(service)} == before


async def test_a_move_killed_before_its_commit_is_redone_by_the_next_start(
    tmp_path: Path,
) -> None:
    db = tmp_path / "kb.db"
    embedder = HashingEmbedder(DIM)
    before = await populated(db, embedder)
    await rewrite_as_previous_release(db)
    # The move dies inside its transaction: the database stops answering half-way (its
    # engine is disposed under it), as a kill would leave it — nothing committed.
    database = database_of(db)
    await ensure_schema(database, migrate=True)
    milvus = await open_milvus(db)
    try:
        original = database.write

        def dying(operation: str) -> Any:
            if operation == "upgrade":
                raise DatabaseUnavailable()
            return original(operation)

        database.write = dying  # type: ignore[method-assign]
        with pytest.raises(DatabaseUnavailable):
            await move_control_plane(milvus, database)
        database.write = original  # type: ignore[method-assign]
        assert await SqlDocumentRegistry(database).scan() == []
        names = await milvus.run(lambda client: client.list_collections())
        assert f"{COLLECTION}_v4_documents" in names
    finally:
        await milvus.aclose()
        await database.aclose()
    async with running_service(db, embedder=embedder) as service:
        assert {d.document_id: d for d in await listed(service)} == before


async def test_collections_a_committed_move_left_are_dropped_unread(tmp_path: Path) -> None:
    db = tmp_path / "kb.db"
    embedder = HashingEmbedder(DIM)
    before = await populated(db, embedder)
    await rewrite_as_previous_release(db)
    database = database_of(db)
    await ensure_schema(database, migrate=True)
    milvus = await open_milvus(db)
    try:
        assert await move_control_plane(milvus, database)
        # Killed after the commit, before the drops: the collections come back, here with a
        # record the database does not have — which the next start must not read.
        await rewrite_leftovers(milvus)
    finally:
        await milvus.aclose()
        await database.aclose()
    async with running_service(db, embedder=embedder) as service:
        assert {d.document_id: d for d in await listed(service)} == before
        with pytest.raises(NotFound):
            await service.app.knowledge_bases.require("knowledge_bases/ghost", "name")
        # Every knowledge base reads its `initial` index, made from the settings at the
        # upgrade, its rows the store's own (nothing embedded again, above).
        for kb in ("knowledge_bases/default", "knowledge_bases/team"):
            (initial,) = (await service.app.indexes.list_page(kb, 0, "")).indexes
            assert (initial.index_id, initial.state, initial.collection) == (
                "initial",
                READY,
                service.app.store.config.collection,
            )
            assert (await service.app.knowledge_bases.get(kb)).record.active_index == "initial"
        names = await service.app.store.run(lambda client: client.list_collections())
        assert f"{COLLECTION}_v4_documents" not in names


async def rewrite_leftovers(milvus: MilvusStore) -> None:
    def create(client: Any) -> None:
        for name, schema in (
            (milvus.registry_collection, registry_schema()),
            (milvus.knowledge_base_collection, knowledge_base_schema()),
        ):
            client.create_collection(
                name, schema=schema, index_params=registry_index_params(client)
            )
            client.load_collection(name)

    await milvus.run(create)
    await KnowledgeBaseStore(milvus).put(KnowledgeBaseRecord("knowledge_bases/ghost"))
    assert [r.name for r in await KnowledgeBaseStore(milvus).all()] == ["knowledge_bases/ghost"]
    assert await DocumentRegistry(milvus).scan() == []
