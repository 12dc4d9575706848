"""The `Ingestor` on the in-memory store: ingest, replace, delete and list; bad input and
failing dependencies change nothing that was stored; and the version protocol at every crash
point (docs/api.md#documents-and-chunks, retrieval_service/README.md "Crash safety"): the
process dies at a named step (a checkpoint raises, and from that instant nothing it would
still do reaches the store), a new Ingestor over the same stores reconciles, and each document
is its old version whole or its new one whole, with no orphan rows. No model, no Milvus, no
socket."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass, field

import pytest

from retrieval_service.adapters.loaders import load_pages
from retrieval_service.core.chunking import ChunkingConfig
from retrieval_service.core.documents import COMMITTED, LEVELS, PENDING, TOMBSTONE, DocumentEntry
from retrieval_service.core.errors import EmbedderUnavailable, StoreUnavailable
from retrieval_service.core.ingest import (
    CRASH_POINTS,
    KB_DELETE_CRASH_POINTS,
    Checkpoint,
    IngestedDocument,
    Ingestor,
    SourceDocument,
    no_checkpoint,
)
from retrieval_service.core.ingest.leases import Clock, wall_clock_ms
from retrieval_service.metrics import REGISTRY, TELEMETRY
from shared.errors import InvalidArgument
from tests.fakes.hashing_embedder import HashingEmbedder
from tests.fakes.in_memory_store import InMemoryChunkRepository, InMemoryDocumentRegistry

DIM = 32
# Small sizes (no floors), so short documents form three levels: L1 240, L2 160, L3 80.
SMALL = ChunkingConfig.from_chunk_size(80, 10, floors=False)
DOC = "kb.md"
OTHER = "other.md"
OLD = "".join(f"The lighthouse keeper counts seagulls on cliff {i}. " for i in range(12))
NEW = "".join(f"A glacier researcher measures icebergs in fjord {i}. " for i in range(30))
OTHER_TEXT = "Bees dance to tell the hive where the flowers are. " * 6


class Crash(BaseException):
    """The process dies here: raised past every `except Exception`."""


@dataclass
class World:
    chunks: InMemoryChunkRepository = field(default_factory=lambda: InMemoryChunkRepository(DIM))
    registry: InMemoryDocumentRegistry = field(default_factory=InMemoryDocumentRegistry)
    embedder: HashingEmbedder = field(default_factory=lambda: HashingEmbedder(DIM))

    def ingestor(
        self,
        checkpoint: Checkpoint = no_checkpoint,
        window: int = 4,
        clock: Clock = wall_clock_ms,
        lease_seconds: float = 30.0,
    ) -> Ingestor:
        return Ingestor(
            self.chunks,
            self.registry,
            self.embedder,
            SMALL,
            load_pages=load_pages,
            max_document_bytes=10_000,
            window=window,
            checkpoint=checkpoint,
            clock=clock,
            lease_seconds=lease_seconds,
            telemetry=TELEMETRY,  # the reclaimed counts below are read from its registry
        )

    def crashing_at(self, point: str) -> Ingestor:
        async def checkpoint(name: str) -> None:
            if name == point:
                # Nothing the dying process would still do reaches the store.
                self.chunks.faults.fail_all()
                self.registry.faults.fail_all()
                raise Crash(point)

        return self.ingestor(checkpoint)

    def restart(self, clock: Clock = wall_clock_ms) -> Ingestor:
        self.chunks.faults.heal()
        self.registry.faults.heal()
        return self.ingestor(clock=clock)

    def rows_of(self, filename: str) -> dict[int, list[tuple[str, str]]]:
        """Per level, the (chunk_id, version) of every row of `filename`."""
        return {
            level: sorted(
                (r["chunk_id"], r["version"])
                for r in self.chunks.rows(level)
                if r["filename"] == filename
            )
            for level in LEVELS
        }

    def snapshot(self) -> tuple[list[DocumentEntry], dict[int, list[dict[str, object]]]]:
        return self.registry.entries(), {lvl: self.chunks.rows(lvl) for lvl in LEVELS}


def whole(entry: DocumentEntry) -> dict[int, list[tuple[str, str]]]:
    """The rows a complete version has: every chunk id it names, on every level."""
    return {lvl: sorted((cid, entry.version) for cid in entry.ids(lvl)) for lvl in LEVELS}


def counts(report: IngestedDocument) -> tuple[int, int, int]:
    return report.l1_chunks, report.l2_chunks, report.l3_chunks


def md(filename: str, text: str) -> SourceDocument:
    return SourceDocument(filename, text.encode())


@pytest.fixture
def world() -> World:
    return World()


async def assert_only(world: World, filename: str, entry: DocumentEntry) -> None:
    """`filename` is exactly the version `entry` names, whole: one committed record, every
    row of that version on every level, no row of any other."""
    assert [(e.version, e.state) for e in world.registry.entries() if e.filename == filename] == [
        (entry.version, COMMITTED)
    ]
    assert await world.registry.get(filename) == entry
    assert world.rows_of(filename) == whole(entry)


# ---- ingest, replace, delete, list -----------------------------------------------------------


async def test_ingest_one_document(world: World) -> None:
    [report] = await world.ingestor().ingest([md(DOC, OLD)])
    entry = await world.registry.get(DOC)
    assert entry is not None
    assert (report.filename, report.file_type, report.pages, report.replaced) == (
        DOC,
        "Markdown",
        1,
        False,
    )
    assert counts(report) == tuple(entry.level_count(lvl) for lvl in LEVELS)
    assert all(n > 1 for n in counts(report))  # three levels, several chunks each
    await assert_only(world, DOC, entry)
    assert world.chunks.seals >= 1  # sealed before the reply


async def test_ingest_several_documents_in_one_call(world: World) -> None:
    reports = await world.ingestor().ingest([md(DOC, OLD), md(OTHER, OTHER_TEXT), md("n.txt", NEW)])
    assert [r.filename for r in reports] == [DOC, OTHER, "n.txt"]
    for report in reports:
        entry = await world.registry.get(report.filename)
        assert entry is not None
        assert counts(report) == tuple(entry.level_count(lvl) for lvl in LEVELS)
        await assert_only(world, report.filename, entry)
    # Leaves carry the embedder's vector of their text: recall finds them.
    hits = await world.chunks.dense_search(3, world.embedder.vector("bees hive flowers"), 1)
    assert hits[0]["filename"] == OTHER


async def test_re_ingest_replaces_the_previous_version(world: World) -> None:
    ingestor = world.ingestor()
    await ingestor.ingest([md(DOC, OLD), md(OTHER, OTHER_TEXT)])
    old = await world.registry.get(DOC)
    other = await world.registry.get(OTHER)
    [report] = await ingestor.ingest([md(DOC, NEW)])
    new = await world.registry.get(DOC)
    assert old is not None and other is not None and new is not None
    assert report.replaced is True
    assert new.version > old.version
    assert counts(report) == tuple(new.level_count(lvl) for lvl in LEVELS)
    await assert_only(world, DOC, new)
    await assert_only(world, OTHER, other)


async def test_delete_removes_every_level(world: World) -> None:
    ingestor = world.ingestor()
    await ingestor.ingest([md(DOC, OLD), md(OTHER, OTHER_TEXT)])
    entry = await world.registry.get(DOC)
    assert entry is not None
    deleted = await ingestor.delete([DOC, "unknown.md", DOC])
    assert deleted == sum(entry.level_count(lvl) for lvl in LEVELS)
    assert await world.registry.get(DOC) is None
    assert world.rows_of(DOC) == {lvl: [] for lvl in LEVELS}
    # What remains of it is the tombstone, until reconciliation.
    assert [e.state for e in world.registry.entries() if e.filename == DOC] == [TOMBSTONE]
    assert await ingestor.delete(["unknown.md"]) == 0
    assert await world.registry.get(OTHER) is not None
    assert await world.restart().reconcile(sole_writer=True) == 1
    assert [e.filename for e in world.registry.entries()] == [OTHER]


async def test_list_page_pages_by_filename(world: World) -> None:
    ingestor = world.ingestor()
    names = [f"doc{n}.txt" for n in (4, 1, 3, 0, 2)]
    await ingestor.ingest([md(name, OTHER_TEXT) for name in names])
    await ingestor.delete(["doc3.txt"])
    seen: list[list[str]] = []
    token = ""
    while True:
        page = await ingestor.list_page(2, token)
        seen.append([e.filename for e in page.entries])
        if not (token := page.next_page_token):
            break
    assert seen == [["doc0.txt", "doc1.txt"], ["doc2.txt", "doc4.txt"]]
    everything = await ingestor.list_page(0, "")  # 0 → the default page size
    assert [e.filename for e in everything.entries] == [
        "doc0.txt",
        "doc1.txt",
        "doc2.txt",
        "doc4.txt",
    ]
    assert everything.next_page_token == ""
    with pytest.raises(InvalidArgument) as raised:
        await ingestor.list_page(-1, "")
    assert raised.value.field == "page_size"
    with pytest.raises(InvalidArgument) as raised:
        await ingestor.list_page(2, "bm90IG91cnM=")
    assert raised.value.field == "page_token"


# ---- bad input and failing dependencies ------------------------------------------------------


@pytest.mark.parametrize(
    ("documents", "field"),
    [
        ([], "documents"),
        ([md("new.md", NEW), md("", NEW)], "documents[1].filename"),
        ([md("new.md", NEW), md("../x.md", NEW)], "documents[1].filename"),
        ([md("new.md", NEW), md("x.exe", NEW)], "documents[1].filename"),
        ([md("new.md", NEW), md("new.md", OLD)], "documents[1].filename"),
        ([md("new.md", NEW), SourceDocument("e.md", b"")], "documents[1].content"),
        ([md("new.md", NEW), SourceDocument("e.md", b" \n\t ")], "documents[1].content"),
        ([md("new.md", NEW), md("big.md", "x" * 10_001)], "documents[1].content"),
        (
            [md("new.md", NEW), SourceDocument("w.txt", b"x", "spreadsheet")],
            "documents[1].file_type",
        ),
        ([md(DOC, NEW), SourceDocument("bad.pdf", b"not a pdf")], "documents[1].content"),
    ],
)
async def test_bad_input_changes_nothing(
    world: World, documents: list[SourceDocument], field: str
) -> None:
    ingestor = world.ingestor()
    await ingestor.ingest([md(DOC, OLD)])
    before = world.snapshot()
    with pytest.raises(InvalidArgument) as raised:
        await ingestor.ingest(documents)
    assert raised.value.field == field
    assert world.snapshot() == before


@pytest.mark.parametrize(
    ("filenames", "field"),
    [([], "filenames"), ([DOC, "a/b.md"], "filenames[1]"), ([" x.md"], "filenames[0]")],
)
async def test_a_bad_delete_changes_nothing(world: World, filenames: list[str], field: str) -> None:
    ingestor = world.ingestor()
    await ingestor.ingest([md(DOC, OLD)])
    before = world.snapshot()
    with pytest.raises(InvalidArgument) as raised:
        await ingestor.delete(filenames)
    assert raised.value.field == field
    assert world.snapshot() == before


async def test_an_embedder_failure_commits_the_documents_embedded_before_it(world: World) -> None:
    docs = [md("a.md", OLD), md("b.md", OTHER_TEXT), md("c.md", NEW)]
    dry = await World().ingestor().ingest(docs)
    leaves = [r.l3_chunks for r in dry]
    # Two of c.md's leaves embed, then the embedder fails (one leaf per window).
    world.embedder.fail_from_passage = leaves[0] + leaves[1] + 2
    with pytest.raises(EmbedderUnavailable):
        await world.ingestor(window=1).ingest(docs)
    for name in ("a.md", "b.md"):
        entry = await world.registry.get(name)
        assert entry is not None
        await assert_only(world, name, entry)
    assert [e for e in world.registry.entries() if e.filename == "c.md"] == []
    assert world.rows_of("c.md") == {lvl: [] for lvl in LEVELS}


async def test_a_failed_write_keeps_the_previous_version(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    await world.ingestor().ingest([md(DOC, OLD)])
    old = await world.registry.get(DOC)
    assert old is not None
    world.chunks.faults.fail_next("write_chunks", after=1)  # the second write fails
    with pytest.raises(StoreUnavailable):
        await world.ingestor(window=2).ingest([md(DOC, NEW)])
    await assert_only(world, DOC, old)
    # The operator's log names the document whose write failed.
    failed = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert any(DOC in line and "failed" in line for line in failed), failed


async def test_a_failed_commit_keeps_the_previous_version(world: World) -> None:
    await world.ingestor().ingest([md(DOC, OLD)])
    old = await world.registry.get(DOC)
    assert old is not None
    world.registry.faults.fail_next("put", after=1)  # the intent lands, the commit does not
    with pytest.raises(StoreUnavailable):
        await world.ingestor().ingest([md(DOC, NEW)])
    await assert_only(world, DOC, old)


# ---- the version protocol at every crash point -------------------------------------------------

INGEST_POINTS = [
    p for p in CRASH_POINTS if not p.startswith("delete_") and p not in KB_DELETE_CRASH_POINTS
]
DELETE_POINTS = [p for p in CRASH_POINTS if p.startswith("delete_")]
#: From these on, the new version (or the delete) is committed: it is what survives.
COMMITTED_FROM = ("after_commit", "during_cleanup", "after_cleanup")
DELETE_COMMITTED_FROM = ("delete_after_commit", "delete_during_cleanup", "delete_after_cleanup")


def test_the_crash_points_are_all_covered() -> None:
    assert set(INGEST_POINTS) | set(DELETE_POINTS) | set(KB_DELETE_CRASH_POINTS) == set(
        CRASH_POINTS
    )
    assert set(COMMITTED_FROM) <= set(INGEST_POINTS)
    assert set(DELETE_COMMITTED_FROM) <= set(DELETE_POINTS)


async def test_a_replace_and_a_delete_reach_every_crash_point(world: World) -> None:
    reached: Counter[str] = Counter()

    async def record(name: str) -> None:
        reached[name] += 1

    ingestor = world.ingestor(record)
    await ingestor.ingest([md(DOC, OLD)])
    await ingestor.ingest([md(DOC, NEW)])
    await ingestor.delete([DOC])
    assert set(INGEST_POINTS) | set(DELETE_POINTS) <= set(reached)
    assert reached["during_level_3"] > 1  # NEW's rows are written in several pieces


async def prepared(world: World) -> tuple[DocumentEntry, DocumentEntry]:
    """DOC at its OLD version beside OTHER, both committed and settled."""
    await world.ingestor().ingest([md(DOC, OLD), md(OTHER, OTHER_TEXT)])
    old, other = await world.registry.get(DOC), await world.registry.get(OTHER)
    assert old is not None and other is not None
    return old, other


@pytest.mark.parametrize("point", INGEST_POINTS)
async def test_a_replace_survives_a_crash_at_every_point(world: World, point: str) -> None:
    old, other = await prepared(world)
    with pytest.raises(Crash):
        await world.crashing_at(point).ingest([md(DOC, NEW)])

    # Readers in the dead writer's wake see one whole version.
    world.registry.faults.heal()
    seen = await world.registry.get(DOC)
    assert seen is not None
    committed = point in COMMITTED_FROM
    assert (seen.version == old.version) is not committed

    await world.restart().reconcile(sole_writer=True)
    survivor = await world.registry.get(DOC)
    assert survivor is not None
    if committed:
        assert survivor.version > old.version
        assert survivor.level_count(3) != old.level_count(3)  # NEW, not OLD
    else:
        assert survivor == old
    await assert_only(world, DOC, survivor)
    await assert_only(world, OTHER, other)


@pytest.mark.parametrize("point", DELETE_POINTS)
async def test_a_delete_survives_a_crash_at_every_point(world: World, point: str) -> None:
    old, other = await prepared(world)
    with pytest.raises(Crash):
        await world.crashing_at(point).delete([DOC])
    await world.restart().reconcile(sole_writer=True)
    if point in DELETE_COMMITTED_FROM:
        assert await world.registry.get(DOC) is None
        assert [e for e in world.registry.entries() if e.filename == DOC] == []
        assert world.rows_of(DOC) == {lvl: [] for lvl in LEVELS}
    else:
        await assert_only(world, DOC, old)
    await assert_only(world, OTHER, other)


@pytest.mark.parametrize("point", [p for p in INGEST_POINTS if p != "during_cleanup"])
async def test_a_first_ingest_survives_a_crash_at_every_point(world: World, point: str) -> None:
    """No previous version (so no cleanup): the document is absent or whole."""
    with pytest.raises(Crash):
        await world.crashing_at(point).ingest([md(DOC, NEW)])
    await world.restart().reconcile(sole_writer=True)
    entry = await world.registry.get(DOC)
    if point in COMMITTED_FROM:
        assert entry is not None
        await assert_only(world, DOC, entry)
    else:
        assert entry is None
        assert [e for e in world.registry.entries() if e.filename == DOC] == []
        assert world.rows_of(DOC) == {lvl: [] for lvl in LEVELS}


async def test_reconcile_leaves_a_settled_store_alone(world: World) -> None:
    await prepared(world)
    before = world.snapshot()
    assert await world.restart().reconcile(sole_writer=True) == 0
    assert world.snapshot() == before


async def test_reconcile_keeps_a_pending_version_while_its_lease_is_live(world: World) -> None:
    """On a shared server another replica may be writing it: reconciliation removes it only
    once its writer's lease (INGEST_LEASE_SECONDS) has expired."""
    old, _ = await prepared(world)
    with pytest.raises(Crash):
        await world.crashing_at("during_level_2").ingest([md(DOC, NEW)])
    [pending] = [e for e in world.registry.entries() if e.state == PENDING]
    assert pending.lease_expires_ms > 0
    clock = [pending.lease_expires_ms - 1]
    ingestor = world.restart(clock=lambda: clock[0])
    assert await ingestor.reconcile() == 0
    assert PENDING in {e.state for e in world.registry.entries() if e.filename == DOC}
    assert await world.registry.get(DOC) == old
    clock[0] = pending.lease_expires_ms
    before = reclaimed("pending")
    assert await ingestor.reconcile() == 1
    await assert_only(world, DOC, old)
    assert reclaimed("pending") == before + 1


async def test_an_ingest_of_several_lease_periods_outlives_another_replicas_reconciliation(
    world: World,
) -> None:
    """A replace slowed to more than three lease periods keeps renewing its lease, so another
    replica reconciling all the while never removes it; it commits whole."""
    await prepared(world)
    lease = 0.3

    async def slow(name: str) -> None:
        if name == "before_commit":  # every row written, none committed
            await asyncio.sleep(3.5 * lease)

    writer = world.ingestor(slow, lease_seconds=lease)
    replica = world.ingestor(lease_seconds=lease)
    before = reclaimed("pending")
    started = time.monotonic()
    task = asyncio.ensure_future(writer.ingest([md(DOC, NEW)]))
    passes = 0
    while not task.done():
        await replica.reconcile()
        passes += 1
        await asyncio.sleep(lease / 4)
    [report] = await task
    assert time.monotonic() - started > 3 * lease and passes > 12
    assert reclaimed("pending") == before
    new = await world.registry.get(DOC)
    assert new is not None and report.replaced
    await assert_only(world, DOC, new)


async def test_a_write_whose_lease_lapsed_commits_nothing(world: World) -> None:
    """A writer that could not renew its lease in time (here: its clock jumps past it) fails
    UNAVAILABLE before its commit; the previous version stays current and whole."""
    old, _ = await prepared(world)
    clock = [wall_clock_ms()]

    async def stall(name: str) -> None:
        if name == "during_level_3":
            clock[0] += 3_600_000

    with pytest.raises(StoreUnavailable, match="lease"):
        await world.ingestor(stall, clock=lambda: clock[0]).ingest([md(DOC, NEW)])
    assert [e.state for e in world.registry.entries() if e.filename == DOC] == [COMMITTED]
    await assert_only(world, DOC, old)


def reclaimed(state: str) -> float:
    return REGISTRY.get_sample_value("supermew_reclaimed_versions_total", {"state": state}) or 0.0
