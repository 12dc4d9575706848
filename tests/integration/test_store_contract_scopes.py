"""The store ports' contract, continued: knowledge bases, document ids, metadata and search
scopes (docs/api.md#knowledge-bases, #filters), run against the in-memory fakes and the Milvus
adapters on Milvus Lite with the fixtures of test_store_contract.py: one file name in two
knowledge bases stays two documents in searches, deletes and the registry; a scope's filter
admits what `core.filters.matches` says; the knowledge-base records."""

from __future__ import annotations

import pytest

from retrieval_service.core.documents import COMMITTED, TOMBSTONE, DocumentEntry
from retrieval_service.core.filters import parse_filter
from retrieval_service.core.identity import DEFAULT_KB
from retrieval_service.core.knowledge_bases import DELETING, KnowledgeBaseRecord
from retrieval_service.core.ports import SearchScope, StoredChunk
from tests.integration.test_store_contract import (  # the fixtures, shared with that suite
    CORPUS,
    OTHER_KB,
    SEEDED,
    Stores,
    lite_stores,
    stores,
    unit,
)

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]
_FIXTURES = (lite_stores, stores)


def owned(
    base: StoredChunk, knowledge_base: str, document_id: str, metadata: dict, ingest_time: int
) -> StoredChunk:
    # Versions are unique across knowledge bases (a time and a random suffix), so one chunk id
    # in two knowledge bases is two rows.
    version = base.version if knowledge_base == DEFAULT_KB else "v7"
    return StoredChunk(
        base.record,
        base.vector,
        version,
        True,
        knowledge_base,
        document_id,
        metadata,
        ingest_time,
    )


#: The same file name in two knowledge bases, with metadata and ingest times to filter by.
SCOPED = [
    owned(CORPUS[0], DEFAULT_KB, "a.txt", {"team": "sea", "year": 2023, "tags": ["x"]}, 1000),
    owned(CORPUS[1], DEFAULT_KB, "a.txt", {"team": "sea", "year": 2023, "tags": ["x"]}, 1000),
    owned(CORPUS[2], DEFAULT_KB, "b.txt", {"team": "land", "year": 2021}, 2000),
    owned(CORPUS[0], OTHER_KB, "a.txt", {"team": "other"}, 3000),
    owned(CORPUS[4], OTHER_KB, "folder/c.txt", {}, 4000),
]


async def test_rows_carry_their_knowledge_base_document_and_metadata(stores: Stores) -> None:
    await stores.chunks.write_chunks(3, SCOPED)
    await stores.chunks.seal()
    hits = await stores.chunks.dense_search(3, unit(1, 0, 0), 10)
    assert {(h["knowledge_base"], h["document_id"]) for h in hits} == {
        (DEFAULT_KB, "a.txt"),
        (DEFAULT_KB, "b.txt"),
    }
    first = next(h for h in hits if h["chunk_id"] == CORPUS[0].record.chunk_id)
    assert first["metadata"] == {"team": "sea", "year": 2023, "tags": ["x"]}
    assert first["ingest_time"] == 1000


async def test_a_scope_searches_only_its_knowledge_bases(stores: Stores) -> None:
    await stores.chunks.write_chunks(3, SCOPED)
    await stores.chunks.seal()
    other = SearchScope((OTHER_KB,))
    for hits in (
        await stores.chunks.dense_search(3, unit(1, 0, 0), 10, other),
        await stores.chunks.hybrid_search(3, "lighthouse eruption", unit(1, 0, 0), 10, other),
    ):
        assert {(h["knowledge_base"], h["document_id"]) for h in hits} == {
            (OTHER_KB, "a.txt"),
            (OTHER_KB, "folder/c.txt"),
        }
    both = SearchScope((DEFAULT_KB, OTHER_KB))
    hits = await stores.chunks.dense_search(3, unit(1, 0, 0), 10, both)
    assert len(hits) == len(SCOPED)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('metadata.team = "sea"', {(DEFAULT_KB, "a.txt")}),
        ("metadata.year >= 2022", {(DEFAULT_KB, "a.txt")}),
        ('metadata.tags : "x"', {(DEFAULT_KB, "a.txt")}),
        # A missing key's comparison is false, so NOT admits the document without one.
        (
            'NOT metadata.team = "sea"',
            {(DEFAULT_KB, "b.txt"), (OTHER_KB, "a.txt"), (OTHER_KB, "folder/c.txt")},
        ),
        (
            'document_id = "folder/c.txt" OR metadata.year = 2021',
            {
                (DEFAULT_KB, "b.txt"),
                (OTHER_KB, "folder/c.txt"),
            },
        ),
        (
            'ingest_time >= "1970-01-01T00:00:03Z"',
            {(OTHER_KB, "a.txt"), (OTHER_KB, "folder/c.txt")},
        ),
        ('filename = "a.txt" AND metadata.team != "sea"', {(OTHER_KB, "a.txt")}),
        ('metadata.team = "x\\" or 1==1"', set()),
    ],
)
async def test_a_scope_filter_admits_what_it_names(
    stores: Stores, text: str, expected: set[tuple[str, str]]
) -> None:
    await stores.chunks.write_chunks(3, SCOPED)
    await stores.chunks.seal()
    scope = SearchScope((DEFAULT_KB, OTHER_KB), parse_filter(text))
    dense = await stores.chunks.dense_search(3, unit(1, 1, 1), 10, scope)
    hybrid = await stores.chunks.hybrid_search(
        3, "the bees eruption glacier", unit(1, 1, 1), 10, scope
    )
    assert {(h["knowledge_base"], h["document_id"]) for h in dense} == expected
    assert {(h["knowledge_base"], h["document_id"]) for h in hybrid} <= expected


async def test_deleting_a_knowledge_base_leaves_the_others(stores: Stores) -> None:
    await stores.chunks.write_chunks(3, SCOPED)
    await stores.chunks.seal()
    assert await stores.chunks.delete_knowledge_base(3, OTHER_KB) == 2
    await stores.chunks.seal()
    hits = await stores.chunks.dense_search(
        3, unit(1, 0, 0), 10, SearchScope((DEFAULT_KB, OTHER_KB))
    )
    assert {h["knowledge_base"] for h in hits} == {DEFAULT_KB}
    # delete_older is per (knowledge base, document_id) too
    await stores.chunks.write_chunks(3, SCOPED)
    assert await stores.chunks.delete_older(3, "a.txt", "\uffff", OTHER_KB) == 1
    await stores.chunks.seal()
    hits = await stores.chunks.dense_search(3, unit(1, 0, 0), 10, SearchScope((OTHER_KB,)))
    assert [h["document_id"] for h in hits] == ["folder/c.txt"]


def kb_entry(
    knowledge_base: str, document_id: str, version: str, state: int = COMMITTED
) -> DocumentEntry:
    return DocumentEntry(
        "notes.md",
        "Markdown",
        1,
        {"0": [1, 1, 2]},
        version,
        state,
        knowledge_base=knowledge_base,
        document_id=document_id,
        metadata={"team": "sea", "n": 1.5, "ok": True, "tags": ["a", "b"]},
        content_sha256="ab" * 32,
        size_bytes=123,
        ingest_time=1_700_000_000_000,
        fingerprint="cd" * 32,
    )


async def test_the_registry_keys_documents_by_knowledge_base_and_document_id(
    stores: Stores,
) -> None:
    reg = stores.registry
    a, b = kb_entry(DEFAULT_KB, "a/notes.md", "v1"), kb_entry(DEFAULT_KB, "b/notes.md", "v1")
    other = kb_entry(OTHER_KB, "a/notes.md", "v2")
    await reg.put(a, b, other)
    assert await reg.get("a/notes.md") == a
    assert await reg.get("a/notes.md", OTHER_KB) == other
    assert await reg.current_versions(["a/notes.md", "b/notes.md"]) == {
        "a/notes.md": "v1",
        "b/notes.md": "v1",
    }
    assert await reg.current_versions(["a/notes.md", "b/notes.md"], OTHER_KB) == {
        "a/notes.md": "v2"
    }
    assert list(await reg.records_of(["a/notes.md"], OTHER_KB)) == ["a/notes.md"]
    assert [e.document_id for e in (await reg.page(10)).entries] == ["a/notes.md", "b/notes.md"]
    assert (await reg.page(10, "", OTHER_KB)).entries == [other]
    assert {(k.knowledge_base, k.document_id) for k in await reg.scan(OTHER_KB)} == {
        (OTHER_KB, "a/notes.md")
    }
    assert len(await reg.scan()) == 3
    tombstone = DocumentEntry(
        "notes.md", "", 0, {}, "v3", TOMBSTONE, knowledge_base=OTHER_KB, document_id="a/notes.md"
    )
    await reg.put(tombstone)
    assert await reg.get("a/notes.md", OTHER_KB) is None
    assert await reg.get("a/notes.md") == a
    await reg.remove(await reg.scan(OTHER_KB))
    assert await reg.scan(OTHER_KB) == []
    assert len(await reg.scan()) == 2


async def test_knowledge_base_records(stores: Stores) -> None:
    kbs = stores.knowledge_bases
    assert await kbs.all() == SEEDED
    b = KnowledgeBaseRecord("knowledge_bases/b", "B", "about b", 1_700_000_000_000)
    a = KnowledgeBaseRecord("knowledge_bases/a", "", "", 1_700_000_000_001)
    assert await kbs.create(b)
    assert await kbs.create(a)
    assert not await kbs.create(KnowledgeBaseRecord(a.name, "again", "", 1))
    assert await kbs.get("knowledge_bases/b") == b
    assert await kbs.get(a.name) == a
    assert await kbs.get("knowledge_bases/zzz") is None
    assert await kbs.all() == sorted([a, b, *SEEDED], key=lambda r: r.name)
    # An update changes the texts only (never the state or creation time).
    renamed = KnowledgeBaseRecord(b.name, "B2", "", 1, DELETING)
    assert await kbs.update(renamed)
    assert await kbs.get(b.name) == KnowledgeBaseRecord(b.name, "B2", "", b.create_time)
    assert not await kbs.update(KnowledgeBaseRecord("knowledge_bases/zzz", "Z"))
    assert await kbs.get("knowledge_bases/zzz") is None  # never inserted by an update
    assert await kbs.mark_deleting(b.name, "deleter-1", 2_000)
    assert not await kbs.mark_deleting(b.name, "deleter-2", 2_000)  # once
    marked = KnowledgeBaseRecord(b.name, "B2", "", b.create_time, DELETING)
    assert await kbs.get(b.name) == marked
    assert not await kbs.update(KnowledgeBaseRecord(b.name, "B3"))  # a deletion is not undone
    assert await kbs.get(b.name) == marked
    await kbs.remove(b.name)
    assert not await kbs.mark_deleting(b.name, "deleter-1", 2_000)
    assert await kbs.all() == sorted([a, *SEEDED], key=lambda r: r.name)


async def test_a_deletion_lease_is_claimed_only_once_expired_and_removes_only_its_own(
    stores: Stores,
) -> None:
    """The DELETING mark's lease (docs/api.md#knowledge-bases): reconciliation on another
    replica claims a deletion only after its deleter stopped renewing; only the current
    deleter removes the record, so a knowledge base created again is never removed."""
    kbs = stores.knowledge_bases
    name = "knowledge_bases/doomed"
    assert await kbs.create(KnowledgeBaseRecord(name, "", "", 1))
    assert await kbs.mark_deleting(name, "first", 1_000)
    assert await kbs.claim_deleting("second", 999, 5_000) == []  # the lease lives
    assert await kbs.renew_deleting(name, "first", 2_000)
    assert not await kbs.renew_deleting(name, "second", 9_000)
    assert await kbs.claim_deleting("second", 1_500, 5_000) == []  # renewed to 2 000
    assert await kbs.claim_deleting("second", 2_001, 5_000) == [name]
    assert await kbs.claim_deleting("third", 2_001, 5_000) == []  # one claimant
    assert not await kbs.renew_deleting(name, "first", 9_000)  # first lost it
    assert not await kbs.remove_deleted(name, "first")
    assert await kbs.remove_deleted(name, "second")
    assert await kbs.get(name) is None
    # Created again at once: no deleter, stale or current, removes the new record.
    assert await kbs.create(KnowledgeBaseRecord(name, "again", "", 2))
    assert not await kbs.remove_deleted(name, "first")
    assert not await kbs.remove_deleted(name, "second")
    assert await kbs.claim_deleting("third", 10**12, 10**12 + 1) == []
    assert (await kbs.get(name)) == KnowledgeBaseRecord(name, "again", "", 2)
