"""How an index build takes the writes made while it runs, on SQLite and PostgreSQL
(docs/api.md#indexes): each page a build reads moves its read position in the same
transaction, never back; a commit that leaves a document out of the building index puts it in
the build's backlog when the build has read past it; once the pass is read, a commit that
leaves a document out of an index is refused whole (IndexesBehind), so its writer writes it
there first, and the backlog only shrinks."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from retrieval_service.adapters.sql.database import Database, DatabaseConfig
from retrieval_service.adapters.sql.indexes import SqlIndexStore
from retrieval_service.adapters.sql.knowledge_bases import SqlKnowledgeBaseStore
from retrieval_service.adapters.sql.migrate import ensure_schema
from retrieval_service.adapters.sql.registry import SqlDocumentRegistry, require_active
from retrieval_service.core.documents import TOMBSTONE, DocumentEntry
from retrieval_service.core.identity import DEFAULT_KB
from retrieval_service.core.indexes.model import (
    BUILDING,
    FAILED,
    INITIAL,
    READ_ALL,
    READY,
    IndexConfig,
    IndexesBehind,
    IndexRecord,
)
from retrieval_service.core.knowledge_bases import KnowledgeBaseRecord

pytestmark = pytest.mark.integration

ACTIVE, BUILD = "own", "own_c1600"


@pytest_asyncio.fixture(params=["sqlite", "postgresql"])
async def db(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Database]:
    if request.param == "sqlite":
        url = f"sqlite+aiosqlite:///{tmp_path_factory.mktemp('read-to') / 'control.sqlite3'}"
    else:
        url = str(request.getfixturevalue("postgres_url"))
    database = Database(DatabaseConfig(url, pool_size=4, timeout_seconds=10))
    await ensure_schema(database, migrate=True)
    await SqlKnowledgeBaseStore(database).create(
        KnowledgeBaseRecord(DEFAULT_KB, "Default", "", 1_600_000_000_000)
    )
    indexes = SqlIndexStore(database)
    await indexes.create(IndexRecord(DEFAULT_KB, INITIAL, IndexConfig(), ACTIVE, READY))
    try:
        yield database
    finally:
        await database.aclose()


def version(document_id: str, version: str = "v1") -> DocumentEntry:
    return DocumentEntry(
        f"{document_id}.txt", "txt", 1, {"1": [1, 1, 1]}, version, document_id=document_id
    )


async def commit(
    registry: SqlDocumentRegistry, document_id: str, *into: str, v: str = "v1"
) -> None:
    """Commits a version of `document_id` said to be written into the indexes `into` (by
    collection)."""
    await registry.put(version(document_id, v), written={c: frozenset({document_id}) for c in into})


async def building(db: Database) -> None:
    record = IndexRecord(
        DEFAULT_KB, "c1600", IndexConfig(chunk_size=1600), BUILD, BUILDING, build_read_to=""
    )
    assert await SqlIndexStore(db).create(record)


async def read_to(db: Database) -> str | None:
    record = await SqlIndexStore(db).get(DEFAULT_KB, "c1600")
    assert record is not None
    return record.build_read_to


async def backlog(registry: SqlDocumentRegistry) -> list[tuple[str, str]]:
    page = await registry.build_page(DEFAULT_KB, "c1600", READ_ALL, 100)
    assert page is not None
    return [(e.document_id, e.version) for e in page.entries]


async def test_a_build_takes_the_writes_made_while_it_runs(db: Database) -> None:
    registry = SqlDocumentRegistry(db)
    for document_id in ("a", "b", "c", "d"):
        await commit(registry, document_id, ACTIVE)
    await building(db)

    # Nothing read yet: a new version is the pass's to read.
    await commit(registry, "b", ACTIVE, v="v2")
    page = await registry.build_page(DEFAULT_KB, "c1600", "", 2)
    assert page is not None and page.next_page_token
    assert [(e.document_id, e.version) for e in page.entries] == [("a", "v1"), ("b", "v2")]
    assert await read_to(db) == "b"

    # Behind the read position: into the backlog; past it: the pass reads it.
    await commit(registry, "a", ACTIVE, v="v2")
    await commit(registry, "c", ACTIVE, v="v2")
    await commit(registry, "e", ACTIVE)
    # A resumed build (or a stale runner) re-reads from an earlier save: never back.
    again = await registry.build_page(DEFAULT_KB, "c1600", "", 1)
    assert again is not None and [e.document_id for e in again.entries] == ["a"]
    assert await read_to(db) == "b"

    last = await registry.build_page(DEFAULT_KB, "c1600", "b", 10)
    assert last is not None and not last.next_page_token
    assert [(e.document_id, e.version) for e in last.entries] == [
        ("c", "v2"),
        ("d", "v1"),
        ("e", "v1"),
    ]
    assert await read_to(db) is None  # the pass read: every commit must reach the index now
    with pytest.raises(IndexesBehind) as refused:
        await commit(registry, "y", ACTIVE)
    assert refused.value.collections == {BUILD}
    assert await registry.current_versions(["y"], DEFAULT_KB) == {}  # nothing committed
    await commit(registry, "y", ACTIVE, BUILD)
    assert await backlog(registry) == [("a", "v2")]  # only what the pass left behind

    # A version written leaves the backlog, unless a later one is current meanwhile.
    await commit(registry, "a", ACTIVE, BUILD, v="v3")
    await registry.build_written(DEFAULT_KB, "c1600", [("a", "v1")])
    assert await backlog(registry) == [("a", "v3")]
    await registry.build_written(DEFAULT_KB, "c1600", [("a", "v3")])
    assert await backlog(registry) == []
    assert await read_to(db) is None


async def test_a_document_deleted_since_leaves_the_backlog(db: Database) -> None:
    registry = SqlDocumentRegistry(db)
    for document_id in ("a", "b"):
        await commit(registry, document_id, ACTIVE)
    await building(db)
    assert await registry.build_page(DEFAULT_KB, "c1600", "", 1) is not None
    await commit(registry, "a", ACTIVE, v="v2")
    await registry.put(DocumentEntry("a.txt", "", 0, {}, "v3", TOMBSTONE, document_id="a"))
    page = await registry.build_page(DEFAULT_KB, "c1600", "a", 10)
    assert page is not None and [e.document_id for e in page.entries] == ["b"]
    assert await backlog(registry) == []


async def test_an_index_the_writer_did_not_know_of_is_checked_too(db: Database) -> None:
    registry = SqlDocumentRegistry(db)
    await commit(registry, "a", ACTIVE)
    standby = IndexRecord(DEFAULT_KB, "standby", IndexConfig(chunk_size=400), "own_c400", READY)
    assert await SqlIndexStore(db).create(standby)
    with pytest.raises(IndexesBehind) as refused:
        await commit(registry, "b", ACTIVE)
    assert refused.value.collections == {"own_c400"}
    await commit(registry, "b", ACTIVE, "own_c400")
    # A FAILED index needs nothing; a commit without `written` (a copy's) is not checked.
    assert await SqlIndexStore(db).set_state(DEFAULT_KB, "standby", FAILED, states=(READY,))
    await commit(registry, "c", ACTIVE)
    await registry.put(version("d"))


async def test_a_build_page_of_an_index_not_building_is_none(db: Database) -> None:
    registry = SqlDocumentRegistry(db)
    await building(db)
    assert await SqlIndexStore(db).set_state(DEFAULT_KB, "c1600", FAILED, states=(BUILDING,))
    assert await registry.build_page(DEFAULT_KB, "c1600", "", 10) is None
    assert await registry.build_page(DEFAULT_KB, "missing", "", 10) is None


async def test_a_build_page_waits_for_a_commit_in_flight(db: Database) -> None:
    """A commit's check and a build's move of its read position never interleave: the page
    read waits for the transaction that holds the knowledge base's row."""
    registry = SqlDocumentRegistry(db)
    await building(db)
    async with db.write("registry_put") as connection:
        await require_active(db, connection, DEFAULT_KB)
        reading = asyncio.create_task(registry.build_page(DEFAULT_KB, "c1600", "", 10))
        await asyncio.sleep(0.5)
        assert not reading.done()
    page = await reading
    assert page is not None and page.entries == []
