"""Knowledge bases, document ids, metadata and unchanged documents in the retrieval core, on
the in-memory fakes (docs/api.md#knowledge-bases): names and their errors, Create / Get / List /
Update / Delete, documents keyed by (knowledge base, document_id) in ingest, list, delete and
recall, filters, `unchanged` ingests without an embedding call, and a forced deletion killed
at each of its crash points, whole or gone after a new instance reconciles. No Milvus, no
socket."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import pytest

from retrieval_service.adapters.loaders import load_pages
from retrieval_service.core.chunking import ChunkingConfig
from retrieval_service.core.documents import LEVELS
from retrieval_service.core.identity import DEFAULT_KB, check_metadata, kb_name
from retrieval_service.core.ingest import (
    KB_DELETE_CRASH_POINTS,
    Checkpoint,
    Ingestor,
    IngestProgress,
    IngestResult,
    SourceDocument,
    no_checkpoint,
)
from retrieval_service.core.knowledge_bases import KnowledgeBases
from retrieval_service.core.ports import Doc
from retrieval_service.core.recall import RetrievalConfig, RetrievalPipeline
from shared.errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound
from tests.fakes.hashing_embedder import HashingEmbedder
from tests.fakes.in_memory_store import (
    InMemoryChunkRepository,
    InMemoryDocumentRegistry,
    InMemoryKnowledgeBaseStore,
)
from tests.unit.test_recall_core import ScoreSortReranker

DIM = 32
SMALL = ChunkingConfig.from_chunk_size(80, 10, floors=False)
TEAM = "knowledge_bases/team"
SEA = "The lighthouse keeper counts seagulls on the cliff every morning. " * 4
BEES = "Bees dance to tell the hive where the flowers are blooming. " * 4


class Crash(BaseException):
    """The process dies here."""


@dataclass
class World:
    chunks: InMemoryChunkRepository = field(default_factory=lambda: InMemoryChunkRepository(DIM))
    registry: InMemoryDocumentRegistry = field(default_factory=InMemoryDocumentRegistry)
    kb_store: InMemoryKnowledgeBaseStore = field(default_factory=InMemoryKnowledgeBaseStore)
    embedder: HashingEmbedder = field(default_factory=lambda: HashingEmbedder(DIM))

    def build(self, checkpoint: Checkpoint = no_checkpoint) -> tuple[KnowledgeBases, Ingestor]:
        kbs = KnowledgeBases(
            self.kb_store, self.registry, purge=lambda n: ingestor.purge(n), checkpoint=checkpoint
        )
        ingestor = Ingestor(
            self.chunks,
            self.registry,
            self.embedder,
            SMALL,
            load_pages=load_pages,
            max_document_bytes=10_000,
            window=4,
            checkpoint=checkpoint,
            require=kbs.require,
        )
        return kbs, ingestor

    def pipeline(self, kbs: KnowledgeBases) -> RetrievalPipeline:
        return RetrievalPipeline(
            self.chunks,
            self.embedder,
            ScoreSortReranker(),
            RetrievalConfig(top_k=20, auto_merge_enabled=False),
            self.registry,
            require=kbs.require,
        )

    def rows(self, knowledge_base: str) -> list[Doc]:
        return [
            r
            for lvl in LEVELS
            for r in self.chunks.rows(lvl)
            if r["knowledge_base"] == knowledge_base
        ]


@pytest.fixture
async def world() -> World:
    w = World()
    kbs, _ = w.build()
    await kbs.ensure_default()
    await kbs.create("team", "Team", "the team's notes")
    return w


def doc(name: str, text: str, **kw: object) -> SourceDocument:
    return SourceDocument(name, text.encode(), **kw)  # type: ignore[arg-type]


# ---- names and values ------------------------------------------------------------------------


def test_knowledge_base_names() -> None:
    assert kb_name("", "f") == DEFAULT_KB
    assert kb_name("team", "f") == TEAM
    assert kb_name(TEAM, "f") == TEAM
    for bad in ("Team", "1team", "knowledge_bases/", "knowledge_bases/a_b", "x" * 64, "a/b"):
        with pytest.raises(InvalidArgument) as raised:
            kb_name(bad, "knowledge_base")
        assert raised.value.field == "knowledge_base"


def test_metadata_rules() -> None:
    assert check_metadata(None, "m") == {}
    assert check_metadata({"b": 2.0, "a": ["x"], "c": True, "d": 1.5}, "m") == {
        "a": ["x"],
        "b": 2,
        "c": True,
        "d": 1.5,
    }
    cases: list[tuple[dict[str, Any], str]] = [
        ({f"k{i}": 1 for i in range(33)}, "m"),
        ({"Bad": 1}, "m"),
        ({"9x": 1}, "m"),
        ({"k": {"nested": 1}}, "m.k"),
        ({"k": [1, 2]}, "m.k"),
        ({"k": float("nan")}, "m.k"),
        ({"k": "x" * 9000}, "m"),
    ]
    for metadata, where in cases:
        with pytest.raises(InvalidArgument) as raised:
            check_metadata(metadata, "m")
        assert raised.value.field == where, metadata


# ---- the knowledge-base RPCs -----------------------------------------------------------------


async def test_create_get_list_update(world: World) -> None:
    kbs, ingestor = world.build()
    with pytest.raises(AlreadyExists) as exists:
        await kbs.create("team")
    assert exists.value.field == "knowledge_base_id"
    with pytest.raises(InvalidArgument) as bad:
        await kbs.create("Bad_Id")
    assert bad.value.field == "knowledge_base_id"
    await ingestor.ingest([doc("a.md", SEA), doc("b.md", BEES)], knowledge_base="team")
    got = await kbs.get(TEAM)
    assert (got.record.display_name, got.record.description) == ("Team", "the team's notes")
    assert got.document_count == 2
    entries = (await ingestor.list_page(10, "", knowledge_base="team")).entries
    assert got.chunk_count == sum(e.level_count(lvl) for e in entries for lvl in LEVELS) > 2
    assert (await kbs.get("default")).document_count == 0  # the default
    for i in range(3):
        await kbs.create(f"z{i}")
    names: list[str] = []
    token = ""
    while True:
        page = await kbs.list_page(2, token)
        names += [kb.record.name for kb in page.knowledge_bases]
        if not (token := page.next_page_token):
            break
    assert names == [
        DEFAULT_KB,
        "knowledge_bases/team",
        *(f"knowledge_bases/z{i}" for i in range(3)),
    ]
    updated = await kbs.update("team", "New", "ignored", ["display_name"])
    assert (updated.record.display_name, updated.record.description) == ("New", "the team's notes")
    both = await kbs.update(TEAM, "N2", "D2", [])
    assert (both.record.display_name, both.record.description) == ("N2", "D2")
    with pytest.raises(InvalidArgument) as mask:
        await kbs.update(TEAM, "", "", ["name"])
    assert mask.value.field == "update_mask"
    with pytest.raises(NotFound) as missing:
        await kbs.get("nope")
    assert missing.value.field == "name"


async def test_delete_rules(world: World) -> None:
    kbs, ingestor = world.build()
    with pytest.raises(FailedPrecondition):
        await kbs.delete("default", force=True)
    await ingestor.ingest([doc("a.md", SEA)], knowledge_base="team")
    await ingestor.ingest([doc("a.md", SEA)])
    with pytest.raises(FailedPrecondition) as held:
        await kbs.delete("team", force=False)
    assert held.value.field == "name"
    await kbs.delete("team", force=True)
    with pytest.raises(NotFound):
        await kbs.get("team")
    with pytest.raises(NotFound) as gone:
        await ingestor.ingest([doc("a.md", SEA)], knowledge_base="team")
    assert gone.value.field == "knowledge_base"
    assert world.rows(TEAM) == []
    assert await world.registry.scan(TEAM) == []
    assert world.rows(DEFAULT_KB)  # the default's copy stays
    await kbs.create("empty")
    await kbs.delete("knowledge_bases/empty", force=False)  # an empty one needs no force


async def test_get_update_delete_need_a_name_and_texts_have_limits(world: World) -> None:
    kbs, _ = world.build()
    for call, named in (
        (kbs.get(""), "name"),
        (kbs.delete(" ", force=False), "name"),
        (kbs.update("", "x", "", ["display_name"]), "knowledge_base.name"),
    ):
        with pytest.raises(InvalidArgument) as bad:
            await call
        assert bad.value.field == named
    with pytest.raises(InvalidArgument) as long_name:
        await kbs.create("wordy", "n" * 257)
    assert long_name.value.field == "knowledge_base.display_name"
    with pytest.raises(InvalidArgument) as long_text:
        await kbs.update("team", "", "d" * 4097, ["description"])
    assert long_text.value.field == "knowledge_base.description"
    # Only the masked field is checked: a long description not in the mask changes nothing.
    kept = await kbs.update("team", "Team B", "d" * 4097, ["display_name"])
    assert (kept.record.display_name, kept.record.description) == ("Team B", "the team's notes")
    with pytest.raises(NotFound):
        await kbs.get("wordy")


# ---- documents keyed by (knowledge base, document_id) -----------------------------------------


async def test_one_file_name_in_two_knowledge_bases_and_two_folders(world: World) -> None:
    kbs, ingestor = world.build()
    await ingestor.ingest([doc("notes.md", SEA)])
    reports = await ingestor.ingest(
        [
            doc("notes.md", SEA, document_id="a/notes.md", metadata={"team": "sea"}),
            doc("notes.md", BEES, document_id="b/notes.md", metadata={"team": "bees"}),
        ],
        knowledge_base="team",
    )
    assert [(r.document_id, r.knowledge_base) for r in reports] == [
        ("a/notes.md", TEAM),
        ("b/notes.md", TEAM),
    ]
    listed = (await ingestor.list_page(10, "", knowledge_base="team")).entries
    assert [(e.document_id, e.filename, e.metadata) for e in listed] == [
        ("a/notes.md", "notes.md", {"team": "sea"}),
        ("b/notes.md", "notes.md", {"team": "bees"}),
    ]
    assert listed[0].content_sha256 and listed[0].size_bytes == len(SEA.encode())
    assert listed[0].ingest_time > 0
    assert [e.document_id for e in (await ingestor.list_page(10, "")).entries] == ["notes.md"]
    for row in world.rows(TEAM):
        assert row["chunk_id"].startswith(row["document_id"] + "::p")
        assert row["metadata"] == {"team": "sea" if row["document_id"] == "a/notes.md" else "bees"}
    pipeline = world.pipeline(kbs)
    only_team = await pipeline.retrieve("lighthouse seagulls", knowledge_bases=["team"])
    assert {(d["knowledge_base"], d["document_id"]) for d in only_team.docs} <= {
        (TEAM, "a/notes.md"),
        (TEAM, "b/notes.md"),
    }
    assert only_team.docs
    default = await pipeline.retrieve("lighthouse seagulls")
    assert {d["knowledge_base"] for d in default.docs} == {DEFAULT_KB}
    both = await pipeline.retrieve("lighthouse seagulls", knowledge_bases=["team", DEFAULT_KB])
    assert {d["knowledge_base"] for d in both.docs} == {DEFAULT_KB, TEAM}
    filtered = await pipeline.retrieve(
        "lighthouse seagulls", knowledge_bases=["team"], filter_text='metadata.team = "bees"'
    )
    assert {d["document_id"] for d in filtered.docs} == {"b/notes.md"}
    # A delete names a document of one knowledge base only.
    assert await ingestor.delete([], ["a/notes.md"], knowledge_base="team") > 0
    assert await ingestor.delete(["notes.md"], knowledge_base="team") == 0  # no such id there
    assert [
        e.document_id for e in (await ingestor.list_page(10, "", knowledge_base="team")).entries
    ] == ["b/notes.md"]
    assert await ingestor.delete(["notes.md"]) > 0
    assert (await ingestor.list_page(10, "")).entries == []


async def test_request_errors_name_their_field(world: World) -> None:
    kbs, ingestor = world.build()
    pipeline = world.pipeline(kbs)
    cases = [
        (ingestor.ingest([doc("a.md", SEA)], knowledge_base="nope"), NotFound, "knowledge_base"),
        (
            ingestor.ingest([doc("a.md", SEA)], knowledge_base="Bad"),
            InvalidArgument,
            "knowledge_base",
        ),
        (
            ingestor.ingest(
                [doc("a.md", SEA, document_id="x"), doc("b.md", BEES, document_id="x")]
            ),
            InvalidArgument,
            "documents[1].document_id",
        ),
        (
            ingestor.ingest([doc("a.md", SEA, document_id="bad id")]),
            InvalidArgument,
            "documents[0].document_id",
        ),
        (
            ingestor.ingest([doc("a.md", SEA, metadata={"Bad": 1})]),
            InvalidArgument,
            "documents[0].metadata",
        ),
        (ingestor.delete([], ["bad id"]), InvalidArgument, "document_ids[0]"),
        (ingestor.delete([], []), InvalidArgument, "filenames"),
        (ingestor.delete(["a.md"], knowledge_base="nope"), NotFound, "knowledge_base"),
        (ingestor.list_page(10, "", knowledge_base="nope"), NotFound, "knowledge_base"),
        (pipeline.retrieve("q", knowledge_bases=["team", "nope"]), NotFound, "knowledge_bases[1]"),
        (pipeline.retrieve("q", filter_text="metadata.x = "), InvalidArgument, "filter"),
    ]
    for call, error, where in cases:
        with pytest.raises(error) as raised:
            await call
        assert raised.value.field == where  # type: ignore[attr-defined]
    assert world.registry.entries() == []
    assert world.embedder.passages == 0


async def test_an_unchanged_document_is_neither_embedded_nor_written(world: World) -> None:
    _, ingestor = world.build()
    first = await ingestor.ingest([doc("a.md", SEA, metadata={"k": 1})], knowledge_base="team")
    embedded, records = world.embedder.passages, world.registry.entries()
    seals = world.chunks.seals
    again = await ingestor.ingest(
        [doc("a.md", SEA, metadata={"k": 1.0}), doc("b.md", BEES)], knowledge_base="team"
    )
    assert [r.unchanged for r in again] == [True, False]
    assert again[0].content_sha256 == first[0].content_sha256
    assert (again[0].l1_chunks, again[0].l3_chunks) == (first[0].l1_chunks, first[0].l3_chunks)
    assert not again[0].replaced
    b_leaves = again[1].l3_chunks
    assert world.embedder.passages == embedded + b_leaves  # only b.md's leaves
    assert [e for e in world.registry.entries() if e.document_id == "a.md"] == records
    assert world.chunks.seals > seals
    only = await ingestor.ingest([doc("a.md", SEA, metadata={"k": 1})], knowledge_base="team")
    assert only[0].unchanged and world.embedder.passages == embedded + b_leaves
    # Other metadata, another knowledge base: embedded again.
    changed = await ingestor.ingest([doc("a.md", SEA, metadata={"k": 2})], knowledge_base="team")
    assert not changed[0].unchanged and changed[0].replaced
    elsewhere = await ingestor.ingest([doc("a.md", SEA, metadata={"k": 2})])
    assert not elsewhere[0].unchanged


async def test_progress_names_the_document_id(world: World) -> None:
    _, ingestor = world.build()
    events = [
        e
        async for e in ingestor.ingest_events(
            [doc("a.md", SEA, document_id="x/a.md")], knowledge_base="team"
        )
    ]
    progress = [e for e in events if isinstance(e, IngestProgress)]
    assert progress and {e.document_id for e in progress} == {"x/a.md"}
    assert isinstance(events[-1], IngestResult)


# ---- a forced deletion killed at each step -----------------------------------------------------


@pytest.mark.parametrize("point", KB_DELETE_CRASH_POINTS)
async def test_a_deletion_killed_anywhere_is_finished_by_the_next_start(
    world: World, point: str
) -> None:
    _, ingestor = world.build()
    await ingestor.ingest([doc("a.md", SEA), doc("b.md", BEES)], knowledge_base="team")
    await ingestor.ingest([doc("a.md", SEA)])
    default_rows = world.rows(DEFAULT_KB)

    async def checkpoint(name: str) -> None:
        if name == point:
            for fake in (world.chunks, world.registry, world.kb_store):
                fake.faults.fail_all()
            raise Crash(point)

    dying, _ = world.build(checkpoint)
    with pytest.raises(Crash):
        await dying.delete("team", force=True)
    for fake in (world.chunks, world.registry, world.kb_store):
        fake.faults.heal()
    marked, _ = world.build()
    with pytest.raises(NotFound):  # marked: gone for every request from here on
        await marked.get("team")
    restarted, ingestor = world.build()
    # The dead deleter's lease still runs: another replica leaves it alone; a restart of the
    # only writer (embedded Lite) does not wait for it.
    assert await restarted.reconcile() == 0
    assert await restarted.reconcile(sole_writer=True) == 1
    assert world.rows(TEAM) == [] and await world.registry.scan(TEAM) == []
    assert await world.kb_store.get(TEAM) is None
    assert world.rows(DEFAULT_KB) == default_rows
    assert await restarted.reconcile() == 0
    await restarted.create("team")  # the name is free again
    assert (await restarted.get("team")).document_count == 0


async def test_a_deletion_that_fails_before_its_mark_leaves_the_knowledge_base_whole(
    world: World,
) -> None:
    kbs, ingestor = world.build()
    await ingestor.ingest([doc("a.md", SEA)], knowledge_base="team")
    before = (world.rows(TEAM), world.registry.entries())
    world.kb_store.faults.fail_next("mark_deleting")
    with pytest.raises(Exception):  # noqa: B017 - the store's failure, whatever it is
        await kbs.delete("team", force=True)
    assert await kbs.reconcile() == 0
    assert (world.rows(TEAM), world.registry.entries()) == before
    assert (await kbs.get("team")).document_count == 1


async def test_auto_merge_keeps_one_chunk_id_of_two_knowledge_bases_apart(world: World) -> None:
    """Chunk ids are unique within a knowledge base only: the parents merged for the children
    of `notes.md` in one are never those of `notes.md` in the other."""
    kbs, ingestor = world.build()
    await ingestor.ingest([doc("notes.md", SEA)])
    await ingestor.ingest(
        [doc("notes.md", SEA.replace("seagulls", "puffins"))], knowledge_base="team"
    )
    pipeline = RetrievalPipeline(
        world.chunks,
        world.embedder,
        ScoreSortReranker(),
        RetrievalConfig(top_k=20, auto_merge_threshold=1),
        world.registry,
        require=kbs.require,
    )
    result = await pipeline.retrieve("lighthouse keeper cliff", knowledge_bases=["team", "default"])
    assert result.meta.auto_merge_applied
    by_kb = {d["knowledge_base"]: d for d in result.docs}
    assert set(by_kb) == {DEFAULT_KB, TEAM}
    assert "seagulls" in by_kb[DEFAULT_KB]["text"] and "puffins" in by_kb[TEAM]["text"]


async def test_an_ingest_racing_the_deletion_of_its_knowledge_base_leaves_nothing(
    world: World,
) -> None:
    """The deletion removes the rows under the writer's lock; the ingest's next write finds
    the knowledge base gone, stops NOT_FOUND and removes what it wrote."""
    kbs, _ = world.build()
    long_text = "".join(f"Sentence number {i} about the lighthouse keeper. " for i in range(60))
    started = asyncio.Event()

    async def checkpoint(name: str) -> None:
        if name == "during_level_3" and not started.is_set():
            started.set()
            await asyncio.sleep(0.05)  # the deletion runs while this ingest is midway

    _, ingestor = world.build(checkpoint)
    kbs = KnowledgeBases(world.kb_store, world.registry, purge=ingestor.purge)
    ingest = asyncio.ensure_future(ingestor.ingest([doc("a.md", long_text)], knowledge_base="team"))
    await started.wait()
    await kbs.delete("team", force=True)
    with pytest.raises(NotFound):
        await ingest
    assert world.rows(TEAM) == [] and await world.registry.scan(TEAM) == []


async def test_retrieve_with_the_store_down_is_a_failed_recall_not_an_error(
    world: World,
) -> None:
    kbs, _ = world.build()
    pipeline = world.pipeline(kbs)
    world.kb_store.faults.fail_all()
    result = await pipeline.retrieve("lighthouse", knowledge_bases=["team"])
    assert result.meta.retrieval_mode == "failed" and result.docs == []
    # A malformed name or filter is still the caller's error.
    with pytest.raises(InvalidArgument) as raised:
        await pipeline.retrieve("lighthouse", knowledge_bases=["team", "Bad"])
    assert raised.value.field == "knowledge_bases[1]"
    with pytest.raises(InvalidArgument):
        await pipeline.retrieve("lighthouse", filter_text="(")
