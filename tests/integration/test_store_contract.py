"""The store ports' contract: one suite of chunk-repository, document-registry and
knowledge-base tests, run against the in-memory fakes (`tests/fakes/in_memory_store.py`), the
chunk store on Milvus Lite, and the control-plane stores on SQLite and on PostgreSQL, so the
fakes the core's unit tests stand on cannot drift from the real stores. Each test gets empty
stores holding the two knowledge bases `SEEDED` (on Lite: emptied collections in one
module-wide Lite process; SQLite: a new file; PostgreSQL: a new database on the session's
server, tests/postgres.py — skipped with one line where PostgreSQL is not installed)."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pytest
import pytest_asyncio

from retrieval_service.adapters.milvus.chunk_store import ChunkStore
from retrieval_service.adapters.milvus.connection import MilvusStore, StoreConfig
from retrieval_service.adapters.milvus.lite_process import LiteProcess
from retrieval_service.adapters.sql.database import Database, DatabaseConfig
from retrieval_service.adapters.sql.knowledge_bases import SqlKnowledgeBaseStore
from retrieval_service.adapters.sql.migrate import ensure_schema
from retrieval_service.adapters.sql.registry import SqlDocumentRegistry
from retrieval_service.bootstrap import clear_milvus_env
from retrieval_service.core.chunking import ChunkRecord
from retrieval_service.core.documents import (
    COMMITTED,
    LEVELS,
    PENDING,
    TOMBSTONE,
    DocumentEntry,
    RecordKey,
    encode_page_token,
    version_pk,
)
from retrieval_service.core.identity import DEFAULT_KB
from retrieval_service.core.knowledge_bases import KnowledgeBaseRecord
from retrieval_service.core.ports import CHUNK_FIELDS, ChunkRepository, StoredChunk
from retrieval_service.core.ports import DocumentRegistry as RegistryPort
from retrieval_service.core.ports import KnowledgeBaseStore as KnowledgeBaseStorePort
from shared.errors import InvalidArgument, NotFound
from tests.fakes.in_memory_store import (
    InMemoryChunkRepository,
    InMemoryDocumentRegistry,
    InMemoryKnowledgeBaseStore,
)

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

DIM = 8
HIT_FIELDS = {*CHUNK_FIELDS, "score"}
ROW_FIELDS = {*CHUNK_FIELDS, "pk"}
#: Every filename a chunk of this suite belongs to (how a test's rows are emptied on Lite).
FILENAMES = ("a.txt", "b.txt", "c.txt")
#: The second knowledge base of the isolation tests (emptied whole on Lite).
OTHER_KB = "knowledge_bases/other"


#: The knowledge bases every test's stores start with (the registry writes only into an
#: existing, ACTIVE one).
SEEDED = [
    KnowledgeBaseRecord(DEFAULT_KB, "Default", "", 1_600_000_000_000),
    KnowledgeBaseRecord(OTHER_KB, "Other", "", 1_600_000_000_001),
]


@dataclass
class Stores:
    chunks: ChunkRepository
    registry: RegistryPort
    knowledge_bases: KnowledgeBaseStorePort


class LiteStores:
    """The chunk store on one Milvus Lite store for the whole module (creating collections
    takes seconds); each test starts from it emptied through the port itself."""

    def __init__(self, milvus: MilvusStore) -> None:
        self.milvus = milvus
        self.chunks = ChunkStore(milvus)

    async def emptied(self) -> ChunkStore:
        chunks = self.chunks
        for level in LEVELS:
            for name in FILENAMES:
                await chunks.delete_older(level, name, "\uffff")
            await chunks.delete_knowledge_base(level, OTHER_KB)
        await chunks.seal()
        return chunks


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def lite_stores() -> AsyncIterator[LiteStores]:
    clear_milvus_env()
    with tempfile.TemporaryDirectory() as data:
        config = StoreConfig(
            uri=str(Path(data) / "contract.db"), token=None, collection="contract", dim=DIM
        )
        lite = LiteProcess(config.uri)
        await lite.start()
        try:
            milvus = MilvusStore(config, lite)
        except BaseException:
            await lite.aclose()
            raise
        try:
            await milvus.ensure_collections()
            yield LiteStores(milvus)
        finally:
            await milvus.aclose()  # stops the Lite process too


async def seeded(stores: Stores) -> Stores:
    for record in SEEDED:
        assert await stores.knowledge_bases.create(record)
    return stores


async def _memory(_: LiteStores, __: pytest.FixtureRequest) -> tuple[Stores, Database | None]:
    knowledge_bases = InMemoryKnowledgeBaseStore()
    registry = InMemoryDocumentRegistry(knowledge_bases)
    return Stores(InMemoryChunkRepository(DIM), registry, knowledge_bases), None


async def _database(url: str) -> Database:
    db = Database(DatabaseConfig(url, pool_size=4, timeout_seconds=10))
    await ensure_schema(db, migrate=True)
    return db


async def _lite_sqlite(
    lite_stores: LiteStores, request: pytest.FixtureRequest
) -> tuple[Stores, Database | None]:
    folder = Path(tempfile.mkdtemp(prefix="contract-sqlite-"))
    request.addfinalizer(lambda: __import__("shutil").rmtree(folder, ignore_errors=True))
    db = await _database(f"sqlite+aiosqlite:///{folder / 'control.sqlite3'}")
    chunks = await lite_stores.emptied()
    return Stores(chunks, SqlDocumentRegistry(db), SqlKnowledgeBaseStore(db)), db


async def _memory_postgresql(
    _: LiteStores, request: pytest.FixtureRequest
) -> tuple[Stores, Database | None]:
    db = await _database(request.getfixturevalue("postgres_url"))
    return Stores(
        InMemoryChunkRepository(DIM), SqlDocumentRegistry(db), SqlKnowledgeBaseStore(db)
    ), db


#: Each maker names its chunk store and its control-plane stores.
MAKERS: dict[
    str, Callable[[LiteStores, pytest.FixtureRequest], Awaitable[tuple[Stores, Database | None]]]
] = {
    "memory": _memory,
    "milvus_lite+sqlite": _lite_sqlite,
    "memory+postgresql": _memory_postgresql,
}


@pytest_asyncio.fixture(params=sorted(MAKERS), loop_scope="module")
async def stores(request: pytest.FixtureRequest, lite_stores: LiteStores) -> AsyncIterator[Stores]:
    made, db = await MAKERS[request.param](lite_stores, request)
    try:
        yield await seeded(made)
    finally:
        if db is not None:
            await db.aclose()


# ---- building chunks ---------------------------------------------------------------------


def unit(*components: float) -> np.ndarray:
    vec = np.zeros(DIM, dtype=np.float32)
    vec[: len(components)] = components
    return vec / np.linalg.norm(vec)


def record(filename: str, level: int, n: int, text: str, page: int = 1) -> ChunkRecord:
    parent = f"{filename}::p{page}::l{level - 1}::0" if level > 1 else ""
    root = f"{filename}::p{page}::l1::0"
    chunk_id = f"{filename}::p{page}::l{level}::{n}"
    return ChunkRecord(
        chunk_id=chunk_id,
        parent_chunk_id=parent,
        root_chunk_id=root if level > 1 else chunk_id,
        chunk_level=level,
        chunk_idx=n,
        text=text,
        filename=filename,
        file_type="txt",
        file_path=filename,
        page_number=str(page),
    )


def chunk(
    filename: str, n: int, text: str, vector: np.ndarray, version: str = "v1", level: int = 3
) -> StoredChunk:
    return StoredChunk(record(filename, level, n, text), vector, version)


def entry(filename: str, version: str, state: int, leaves: int = 2) -> DocumentEntry:
    return DocumentEntry(filename, "txt", 1, {"1": [1, 1, leaves]}, version, state)


CORPUS = [
    chunk("a.txt", 0, "the lighthouse keeper counts seagulls", unit(1, 0, 0)),
    chunk("a.txt", 1, "a glacier researcher measures icebergs", unit(0.8, 0.6, 0)),
    chunk("b.txt", 0, "bees dance to tell the hive about flowers", unit(0, 1, 0)),
    chunk("b.txt", 1, "the orchard needs pollination by bees", unit(0, 0.6, 0.8)),
    chunk("c.txt", 0, "volcanic ash covers the village after the eruption", unit(0, 0, 1)),
]


async def write_corpus(stores: Stores) -> None:
    await stores.chunks.write_chunks(3, CORPUS)
    await stores.chunks.seal()


# ---- chunk repository ----------------------------------------------------------------------


async def test_written_chunks_come_back_by_version(stores: Stores) -> None:
    await write_corpus(stores)
    first, second = CORPUS[0].record, CORPUS[2].record
    got = await stores.chunks.get_versioned(
        3, [(first.chunk_id, "v1"), (second.chunk_id, "v1"), (first.chunk_id, "v2")]
    )
    assert set(got) == {first.chunk_id, second.chunk_id}
    row = got[first.chunk_id]
    assert set(row) == ROW_FIELDS
    assert row == {
        "pk": version_pk(first.chunk_id, "v1"),
        "chunk_id": first.chunk_id,
        "version": "v1",
        "text": first.text,
        "filename": "a.txt",
        "file_type": "txt",
        "file_path": "a.txt",
        "page_number": "1",
        "parent_chunk_id": first.parent_chunk_id,
        "root_chunk_id": first.root_chunk_id,
        "chunk_level": 3,
        "chunk_idx": 0,
        "knowledge_base": DEFAULT_KB,
        "document_id": "a.txt",
        "metadata": {},
        "ingest_time": 0,
    }
    assert await stores.chunks.get_versioned(3, []) == {}
    assert await stores.chunks.get_versioned(2, [(first.chunk_id, "v1")]) == {}


async def test_a_rewritten_version_replaces_its_rows(stores: Stores) -> None:
    await write_corpus(stores)
    again = chunk("a.txt", 0, "the lighthouse keeper counts gulls", unit(1, 0, 0))
    await stores.chunks.write_chunks(3, [again])
    await stores.chunks.seal()
    hits = await stores.chunks.dense_search(3, unit(1, 0, 0), 10)
    assert [h["chunk_id"] for h in hits].count(again.record.chunk_id) == 1
    got = await stores.chunks.get_versioned(3, [(again.record.chunk_id, "v1")])
    assert got[again.record.chunk_id]["text"] == "the lighthouse keeper counts gulls"


async def test_versions_of_one_chunk_are_separate_rows(stores: Stores) -> None:
    await write_corpus(stores)
    newer = chunk("a.txt", 0, "the lighthouse was rebuilt", unit(1, 0, 0), version="v2")
    await stores.chunks.write_chunks(3, [newer])
    await stores.chunks.seal()
    cid = newer.record.chunk_id
    old = await stores.chunks.get_versioned(3, [(cid, "v1")])
    new = await stores.chunks.get_versioned(3, [(cid, "v2")])
    assert old[cid]["text"] == "the lighthouse keeper counts seagulls"
    assert new[cid]["text"] == "the lighthouse was rebuilt"
    hits = await stores.chunks.dense_search(3, unit(1, 0, 0), 10)
    assert sorted(h["version"] for h in hits if h["chunk_id"] == cid) == ["v1", "v2"]


async def test_dense_search_orders_by_inner_product(stores: Stores) -> None:
    await write_corpus(stores)
    query = unit(1, 0.2, 0)
    hits = await stores.chunks.dense_search(3, query, 3)
    expected = sorted(CORPUS, key=lambda c: -float(np.dot(c.vector, query)))[:3]
    assert [h["chunk_id"] for h in hits] == [c.record.chunk_id for c in expected]
    for hit, c in zip(hits, expected, strict=True):
        assert set(hit) == HIT_FIELDS
        assert hit["score"] == pytest.approx(float(np.dot(c.vector, query)), abs=1e-4)
    assert await stores.chunks.dense_search(2, query, 3) == []


async def test_hybrid_search_finds_an_exact_term_the_vectors_miss(stores: Stores) -> None:
    await write_corpus(stores)
    # The query vector points at a.txt's first chunk; the term is only in c.txt's chunk.
    hits = await stores.chunks.hybrid_search(3, "eruption", unit(1, 0, 0), 2)
    assert len(hits) == 2
    ids = [h["chunk_id"] for h in hits]
    assert CORPUS[4].record.chunk_id in ids
    assert CORPUS[0].record.chunk_id in ids
    assert all(set(h) == HIT_FIELDS for h in hits)
    assert hits[0]["score"] >= hits[1]["score"]


async def test_hybrid_search_ranks_what_both_sides_find_first(stores: Stores) -> None:
    await write_corpus(stores)
    # b.txt's first chunk is nearest to the vector and the only one naming "hive".
    hits = await stores.chunks.hybrid_search(3, "hive", unit(0, 1, 0), 5)
    assert hits[0]["chunk_id"] == CORPUS[2].record.chunk_id
    assert hits[0]["score"] == pytest.approx(2 / 61, abs=1e-4)  # RRF(60), rank 1 on both sides


async def test_an_unanalysed_chunk_is_found_by_its_vector_only(stores: Stores) -> None:
    vector = unit(0.3, 0.3, 0.9)
    analysed = chunk("c.txt", 1, "lava and ash after the eruption", vector)
    unanalysed = StoredChunk(
        record("c.txt", 3, 2, "ash and lava after the eruption"), vector, "v1", analysed=False
    )
    await stores.chunks.write_chunks(3, [analysed, unanalysed])
    await stores.chunks.seal()
    hits = await stores.chunks.hybrid_search(3, "eruption", vector, 2)
    assert [h["chunk_id"] for h in hits] == [analysed.record.chunk_id, unanalysed.record.chunk_id]
    assert hits[0]["score"] > 1 / 60 > hits[1]["score"]  # both sides, then the dense side only


async def test_delete_rows_counts_and_removes(stores: Stores) -> None:
    await write_corpus(stores)
    pks = [version_pk(c.record.chunk_id, "v1") for c in CORPUS[:2]]
    assert await stores.chunks.delete_rows(3, pks) == 2
    assert await stores.chunks.delete_rows(3, []) == 0
    # The store reports every key it was asked to delete, present or not.
    assert await stores.chunks.delete_rows(3, [pks[0], version_pk("gone", "v1")]) == 2
    await stores.chunks.seal()
    keys = [(c.record.chunk_id, "v1") for c in CORPUS]
    got = await stores.chunks.get_versioned(3, keys)
    assert set(got) == {c.record.chunk_id for c in CORPUS[2:]}


async def test_delete_older_removes_older_versions_of_one_file(stores: Stores) -> None:
    await write_corpus(stores)
    newer = [
        chunk("a.txt", 0, "rebuilt lighthouse", unit(1, 0, 0), version="v3"),
        chunk("a.txt", 5, "a new chunk", unit(0, 1, 0), version="v3"),
    ]
    older = chunk("a.txt", 7, "an abandoned write", unit(0, 0, 1), version="v0")
    await stores.chunks.write_chunks(3, [*newer, older])
    await stores.chunks.seal()
    assert await stores.chunks.delete_older(3, "a.txt", "v3") == 3  # v1 × 2, v0 × 1
    assert await stores.chunks.delete_older(3, "a.txt", "v3") == 0
    await stores.chunks.seal()
    hits = await stores.chunks.dense_search(3, unit(1, 1, 1), 20)
    assert sorted((h["filename"], h["version"]) for h in hits) == [
        ("a.txt", "v3"),
        ("a.txt", "v3"),
        ("b.txt", "v1"),
        ("b.txt", "v1"),
        ("c.txt", "v1"),
    ]


async def test_levels_are_separate(stores: Stores) -> None:
    await write_corpus(stores)
    parent = chunk("a.txt", 0, "the lighthouse and the glacier", unit(1, 0, 0), level=2)
    await stores.chunks.write_chunks(2, [parent])
    await stores.chunks.seal()
    assert [h["chunk_id"] for h in await stores.chunks.dense_search(2, unit(1, 0, 0), 5)] == [
        parent.record.chunk_id
    ]
    got = await stores.chunks.get_versioned(2, [(parent.record.chunk_id, "v1")])
    assert got[parent.record.chunk_id]["chunk_level"] == 2
    assert await stores.chunks.delete_rows(2, [version_pk(parent.record.chunk_id, "v1")]) == 1
    assert len(await stores.chunks.dense_search(3, unit(1, 0, 0), 10)) == len(CORPUS)


# ---- document registry -----------------------------------------------------------------------


def as_keys(entries: list[DocumentEntry]) -> list[tuple[str, str, int]]:
    return [(e.filename, e.version, e.state) for e in entries]


async def test_a_pending_version_is_not_current(stores: Stores) -> None:
    reg = stores.registry
    await reg.put(entry("a.txt", "v1", PENDING))
    assert await reg.get("a.txt") is None
    assert await reg.current_versions(["a.txt"]) == {}
    assert as_keys(await reg.records("a.txt")) == [("a.txt", "v1", PENDING)]


async def test_the_greatest_committed_version_is_current(stores: Stores) -> None:
    reg = stores.registry
    await reg.put(entry("a.txt", "v1", COMMITTED, leaves=3))
    await reg.put(entry("a.txt", "v2", PENDING))
    got = await reg.get("a.txt")
    assert got == entry("a.txt", "v1", COMMITTED, leaves=3)
    assert await reg.current_versions(["a.txt", "unknown.txt"]) == {"a.txt": "v1"}
    await reg.put(entry("a.txt", "v2", COMMITTED))
    assert await reg.current_versions(["a.txt"]) == {"a.txt": "v2"}
    assert (await reg.get("a.txt")) == entry("a.txt", "v2", COMMITTED)
    assert as_keys(await reg.records("a.txt")) == [
        ("a.txt", "v1", COMMITTED),
        ("a.txt", "v2", COMMITTED),
    ]


async def test_a_tombstone_deletes_the_document(stores: Stores) -> None:
    reg = stores.registry
    await reg.put(entry("a.txt", "v1", COMMITTED), entry("b.txt", "v1", COMMITTED))
    await reg.put(DocumentEntry("a.txt", "", 0, {}, "v2", TOMBSTONE))
    assert await reg.get("a.txt") is None
    assert await reg.current_versions(["a.txt", "b.txt"]) == {"b.txt": "v1"}
    # A pending version newer than the tombstone does not bring the document back.
    await reg.put(entry("a.txt", "v3", PENDING))
    assert await reg.get("a.txt") is None
    records = await reg.records_of(["a.txt", "b.txt", "unknown.txt"])
    assert {name: as_keys(found) for name, found in records.items()} == {
        "a.txt": [("a.txt", "v1", COMMITTED), ("a.txt", "v2", TOMBSTONE), ("a.txt", "v3", PENDING)],
        "b.txt": [("b.txt", "v1", COMMITTED)],
    }


async def test_scan_and_full(stores: Stores) -> None:
    reg = stores.registry
    written = [
        entry("b.txt", "v1", COMMITTED),
        entry("a b.txt", "v2", PENDING),
        entry("a.txt", "v2", COMMITTED),
        entry("a.txt", "v1", COMMITTED),
        DocumentEntry("c.txt", "", 0, {}, "v4", TOMBSTONE),
    ]
    await reg.put(*written)
    keys = await reg.scan()
    assert keys == sorted(
        (RecordKey(e.filename, e.version, e.state) for e in written),
        key=lambda k: (k.document_id, k.version),
    )
    wanted = [k for k in keys if k.document_id != "b.txt"]
    full = await reg.full(wanted)
    assert sorted(as_keys(full)) == sorted((k.document_id, k.version, k.state) for k in wanted)
    assert sorted(full, key=lambda e: (e.filename, e.version))[1] == written[3]


async def test_remove_takes_entries_and_keys(stores: Stores) -> None:
    reg = stores.registry
    await reg.put(entry("a.txt", "v1", COMMITTED), entry("a.txt", "v2", COMMITTED))
    await reg.put(entry("b.txt", "v1", COMMITTED))
    await reg.remove([RecordKey("a.txt", "v2", COMMITTED)])
    assert await reg.current_versions(["a.txt"]) == {"a.txt": "v1"}
    await reg.remove([entry("a.txt", "v1", COMMITTED), RecordKey("zzz.txt", "v1", PENDING)])
    assert await reg.records("a.txt") == []
    assert await reg.get("a.txt") is None
    assert as_keys(await reg.records("b.txt")) == [("b.txt", "v1", COMMITTED)]


async def test_pages_in_filename_order(stores: Stores) -> None:
    reg = stores.registry
    live = ["a b.txt", "a.txt", "b.txt", "c.txt", "é.txt"]
    await reg.put(*(entry(name, "v1", COMMITTED) for name in reversed(live)))
    await reg.put(entry("b.txt", "v2", COMMITTED))  # a newer version: listed once
    await reg.put(entry("aa.txt", "v1", PENDING))  # never committed: not listed
    await reg.put(entry("bb.txt", "v1", COMMITTED))
    await reg.put(DocumentEntry("bb.txt", "", 0, {}, "v2", TOMBSTONE))  # deleted: not listed
    pages: list[list[tuple[str, str]]] = []
    token = ""
    while True:
        page = await reg.page(2, token)
        pages.append([(e.filename, e.version) for e in page.entries])
        token = page.next_page_token
        if not token:
            break
        assert token == encode_page_token(page.entries[-1].filename)
    assert pages == [
        [("a b.txt", "v1"), ("a.txt", "v1")],
        [("b.txt", "v2"), ("c.txt", "v1")],
        [("é.txt", "v1")],
    ]
    whole = await reg.page(5)
    assert [e.filename for e in whole.entries] == live
    assert whole.next_page_token == ""
    assert whole.entries[0] == entry("a b.txt", "v1", COMMITTED)


async def test_a_foreign_page_token_is_invalid(stores: Stores) -> None:
    with pytest.raises(InvalidArgument) as raised:
        await stores.registry.page(2, "not-a-token")
    assert raised.value.field == "page_token"


async def test_an_empty_registry(stores: Stores) -> None:
    reg = stores.registry
    assert await reg.scan() == []
    assert await reg.records_of(["a.txt"]) == {}
    assert (await reg.page(10)).entries == []
    assert (await reg.page(10)).next_page_token == ""
    assert await reg.full([]) == []


async def test_a_writer_lease_round_trips(stores: Stores) -> None:
    """An uncommitted record's lease comes back from a scan and a read (the Milvus registry
    keeps it in the `ingest_time` column); a committed record has none and keeps its ingest
    time."""
    reg = stores.registry
    started = 1_800_000_000_000
    version = f"{started * 1_000_000:020d}-0000beef"
    pending = replace(entry("a.txt", version, PENDING), ingest_time=started)
    tombstone = DocumentEntry("b.txt", "", 0, {}, version, TOMBSTONE)
    await reg.put(
        replace(pending, lease_expires_ms=started + 30_000),
        replace(tombstone, lease_expires_ms=started + 5_000),
        replace(entry("c.txt", version, COMMITTED), ingest_time=started + 7),
    )
    leases = {k.document_id: k.lease_expires_ms for k in await reg.scan()}
    assert leases == {"a.txt": started + 30_000, "b.txt": started + 5_000, "c.txt": 0}
    [read] = await reg.records("a.txt")
    assert read == replace(pending, lease_expires_ms=started + 30_000)
    [committed] = await reg.records("c.txt")
    assert (committed.ingest_time, committed.lease_expires_ms) == (started + 7, 0)


# ---- the control plane's guarantees ------------------------------------------------------


async def test_concurrent_creates_of_one_knowledge_base_make_one(stores: Stores) -> None:
    record = KnowledgeBaseRecord("knowledge_bases/raced", "", "", 1_700_000_000_000)
    won = await asyncio.gather(*(stores.knowledge_bases.create(record) for _ in range(12)))
    assert sorted(won) == [False] * 11 + [True]
    assert await stores.knowledge_bases.get(record.name) == record


@pytest.mark.parametrize("state", ["missing", "deleting"])
async def test_a_write_into_a_knowledge_base_that_is_not_active_is_refused(
    stores: Stores, state: str
) -> None:
    name = "knowledge_bases/doomed"
    if state == "deleting":
        assert await stores.knowledge_bases.create(KnowledgeBaseRecord(name, "", "", 1))
        assert await stores.knowledge_bases.mark_deleting(name, "deleter", 1)
    doomed = replace(entry("a.txt", "v1", COMMITTED), knowledge_base=name)
    fine = entry("a.txt", "v1", COMMITTED)
    with pytest.raises(NotFound) as raised:
        await stores.registry.put(fine, doomed)  # all or nothing
    assert raised.value.field == "knowledge_base"
    assert await stores.registry.scan() == []


async def test_removing_a_knowledge_base_removes_its_records(stores: Stores) -> None:
    await stores.registry.put(
        replace(entry("a.txt", "v1", COMMITTED), knowledge_base=OTHER_KB),
        entry("a.txt", "v1", COMMITTED),
    )
    await stores.knowledge_bases.remove(OTHER_KB)
    assert [k.knowledge_base for k in await stores.registry.scan()] == [DEFAULT_KB]


async def test_counts_come_from_current_versions_and_respect_groups(stores: Stores) -> None:
    reg = stores.registry
    secret = replace(entry("s.txt", "v1", COMMITTED, leaves=5), metadata={"acl": ["hr"]})
    await reg.put(
        entry("a.txt", "v1", COMMITTED, leaves=3),
        entry("a.txt", "v2", COMMITTED, leaves=4),  # the current one: 1 + 1 + 4 chunks
        entry("b.txt", "v1", PENDING),
        secret,
        entry("gone.txt", "v1", COMMITTED),
        DocumentEntry("gone.txt", "", 0, {}, "v2", TOMBSTONE),
    )
    assert await reg.counts([DEFAULT_KB, OTHER_KB]) == {DEFAULT_KB: (2, 13), OTHER_KB: (0, 0)}
    assert await reg.counts([DEFAULT_KB], frozenset({"sales"})) == {DEFAULT_KB: (1, 6)}
    assert await reg.counts([DEFAULT_KB], frozenset({"hr"})) == {DEFAULT_KB: (2, 13)}
    await reg.remove([RecordKey("a.txt", "v2", COMMITTED)])
    assert await reg.counts([DEFAULT_KB]) == {DEFAULT_KB: (2, 12)}
    assert await reg.current_versions(["a.txt", "gone.txt", "s.txt"]) == {
        "a.txt": "v1",
        "s.txt": "v1",
    }
