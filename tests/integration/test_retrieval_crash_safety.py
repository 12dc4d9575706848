"""Crash safety of ingest, replace and delete, on real processes and real
Milvus Lite: the retrieval service runs as `python -m retrieval_service`, re-ingests or deletes
a document and is killed at every named step of the write (`SUPERMEW_CRASH_AT`, the test
hook read by the composition root: the process exits like `kill -9`). A restart must show the
previous version intact or the new one complete — never a mix — with the store's rows per
level equal to ListDocuments' counts and one registry record per document. Then the same on a
shared `milvus-lite server`, and two replicas on one server: concurrent ingests of one
filename end with exactly one complete version, and a replica never serves another replica's
uncommitted rows. Leases (INGEST_LEASE_SECONDS): a replica killed mid re-ingest leaves no
orphan row once the other replica's reconciliation finds its lease expired, and an ingest
slowed to several lease periods completes whole while the other replica reconciles.

A version's rows are written in pieces as its leaves embed, so NEW spans two embedding windows
(the service's 32 leaves each): the `during_level_N` points kill the process with rows of that
level written and more to come, which the server test checks in the store before cleaning up.
"""

from __future__ import annotations

import asyncio
import atexit
import shutil
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from supermew.v1 import retrieval_pb2, retrieval_pb2_grpc

from retrieval_service.adapters.embedders import OpenAIEmbedder
from retrieval_service.adapters.milvus.chunk_store import ChunkStore
from retrieval_service.adapters.milvus.connection import MilvusStore, StoreConfig
from retrieval_service.adapters.sql.database import Database, DatabaseConfig
from retrieval_service.adapters.sql.registry import SqlDocumentRegistry
from retrieval_service.core.documents import LEVELS, PENDING, TOMBSTONE, DocumentEntry, RecordKey
from retrieval_service.core.ingest import CRASH_POINTS, KB_DELETE_CRASH_POINTS
from tests.fakes.embeddings_server import EmbeddingsServer
from tests.integration.retrieval_harness import (
    MILVUS_LITE,
    LiteServer,
    Service,
    copy_store,
    free_port,
    running_service,
    spawn_retrieval_service,
)

DIM = 64
DOC = "kb.md"
OTHER = "other.md"
# Default chunk sizes (L1 2400, L2 1600, L3 800 characters): both versions span several
# chunks on every level, and their counts differ; NEW has more leaves than one embedding
# window (32), so its rows are written in more than one piece.
OLD = "".join(
    f"The lighthouse keeper counts seagulls on the northern cliff {i}. " for i in range(90)
)
NEW = "".join(
    f"A glacier researcher measures icebergs in the southern fjord {i}. " for i in range(600)
)
OTHER_TEXT = "Bees dance to tell the hive where the flowers are. " * 20
OLD_QUERY = "lighthouse keeper counts seagulls north cliff"
NEW_QUERY = "glacier researcher measures icebergs south fjord"
#: The document write's points (a knowledge base's deletion has its own test).
DOCUMENT_POINTS = [p for p in CRASH_POINTS if p not in KB_DELETE_CRASH_POINTS]
INGEST_POINTS = [p for p in DOCUMENT_POINTS if not p.startswith("delete_")]
DELETE_POINTS = [p for p in CRASH_POINTS if p.startswith("delete_")]
# Where the new version has become current (its commit record is written).
NEW_WINS = {"after_commit", "during_cleanup", "after_cleanup"}
# Where the new version's rows of one level are partly written.
MID_LEVEL = {f"during_level_{lvl}": lvl for lvl in LEVELS}
WINDOW = 32
#: INGEST_LEASE_SECONDS of a writer the server tests kill: its dead write stays (lease live)
#: long enough to be looked at, then expires.
WRITER_LEASE = "10"


@pytest.fixture(scope="module")
def embedding_server() -> Iterator[EmbeddingsServer]:
    # A little time per batch, as a real endpoint takes: the writer has NEW's first window
    # written well before its second one is embedded.
    server = EmbeddingsServer(DIM, batch_delay=0.05).start()
    yield server
    server.stop()


def embedding_env(server: EmbeddingsServer) -> dict[str, str]:
    """The settings that point a service process at the embeddings double."""
    return {
        "EMBEDDING_BASE_URL": server.base_url,
        "EMBEDDING_MODEL": "fake",
        "EMBEDDING_DIM": str(DIM),
    }


def embedder(server: EmbeddingsServer) -> OpenAIEmbedder:
    return OpenAIEmbedder(server.base_url, "fake", DIM)


class ServiceProcess:
    """`python -m retrieval_service` in a subprocess on 127.0.0.1, embedding through the
    fake endpoint; its log goes to a file for the failure message."""

    def __init__(self, log: Path, env: dict[str, str]) -> None:
        self.log = log
        self.proc, self.port = spawn_retrieval_service(env, log)
        self.channel = grpc.insecure_channel(f"127.0.0.1:{self.port}")
        self.stub = retrieval_pb2_grpc.RetrievalServiceStub(self.channel)

    def ingest(self, filename: str, text: str) -> retrieval_pb2.IngestDocumentsResponse:
        return self.stub.IngestDocuments(
            retrieval_pb2.IngestDocumentsRequest(
                documents=[retrieval_pb2.SourceDocument(filename=filename, content=text.encode())]
            ),
            timeout=60,
        )

    def retrieve(self, query: str) -> list[str]:
        reply = self.stub.Retrieve(retrieval_pb2.RetrieveRequest(query=query, top_k=10))
        return [d.text for d in reply.docs]

    def listing(self) -> dict[str, tuple[int, int, int]]:
        reply = self.stub.ListDocuments(retrieval_pb2.ListDocumentsRequest())
        return {d.filename: (d.l1_chunks, d.l2_chunks, d.l3_chunks) for d in reply.documents}

    def wait_crashed(self) -> int:
        return self.proc.wait(timeout=60)

    def stop(self) -> None:
        if getattr(self, "channel", None) is not None:
            self.channel.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def run_until_crash(log: Path, env: dict[str, str], point: str, text: str = NEW) -> None:
    """Start a service that dies at `point`, make it write (`text` as DOC), and see it die
    there."""
    service = ServiceProcess(log, {**env, "SUPERMEW_CRASH_AT": point})
    try:
        with pytest.raises(grpc.RpcError) as err:
            if point.startswith("delete_"):
                service.stub.DeleteDocuments(
                    retrieval_pb2.DeleteDocumentsRequest(filenames=[DOC]), timeout=60
                )
            else:
                service.ingest(DOC, text)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE  # the connection died with it
        assert service.wait_crashed() == 137, log.read_text()[-3000:]
    finally:
        service.stop()


@asynccontextmanager
async def restarted(
    server: EmbeddingsServer, uri: str, collection: str, **settings: Any
) -> AsyncIterator[Service]:
    """The service started again on the same store (start-up reconciliation included)."""
    store = StoreConfig(uri=uri, token=None, collection=collection, dim=DIM, timeout_seconds=10)
    if not uri.endswith(".db"):
        settings.setdefault("database_url", control_url(uri, collection))
    model = embedder(server)
    try:
        async with running_service(
            uri, embedder=model, store=store, chunking=None, **settings
        ) as svc:
            yield svc
    finally:
        await model.aclose()


async def rows_of(svc: Service, filename: str) -> dict[int, list[dict[str, Any]]]:
    out = {}
    for lvl in LEVELS:
        name = svc.app.store.level_collection(lvl)
        out[lvl] = await svc.app.store.run(
            lambda client, name=name: client.query(
                name, filter=f'filename == "{filename}"', output_fields=["text", "version"]
            )
        )
    return out


async def pending_rows(svc: Service) -> dict[int, int]:
    """The rows per level of DOC's one pending version."""
    pending = [k for k in await svc.app.registry.scan() if k.state == PENDING]
    assert [k.document_id for k in pending] == [DOC]
    rows = await rows_of(svc, DOC)
    return {lvl: sum(r["version"] == pending[0].version for r in rows[lvl]) for lvl in LEVELS}


#: The control-plane databases of the stores on the shared server: one SQLite file per store,
#: shared by every replica of it (processes of one host), kept until the session ends.
_CONTROL_ROOT = Path(tempfile.mkdtemp(prefix="crash-control-"))
atexit.register(shutil.rmtree, _CONTROL_ROOT, True)


def control_url(uri: str, collection: str) -> str:
    """DATABASE_URL of the store `collection` on the Milvus server `uri`."""
    port = uri.rsplit(":", 1)[-1]
    return f"sqlite+aiosqlite:///{_CONTROL_ROOT / f'{port}-{collection}.sqlite3'}"


def control_database(uri: str, collection: str) -> Database:
    return Database(DatabaseConfig(control_url(uri, collection)))


def store_config(uri: str, collection: str) -> StoreConfig:
    return StoreConfig(uri=uri, token=None, collection=collection, dim=DIM, timeout_seconds=10)


async def store_state(uri: str, collection: str) -> tuple[tuple[int, ...], list[RecordKey]]:
    """The rows per level and the registry's records of a store on a server, read through
    the adapters without starting a service (no reconciliation of its own)."""
    milvus = MilvusStore(store_config(uri, collection))
    database = control_database(uri, collection)
    try:
        chunks = ChunkStore(milvus)
        counts = tuple([await chunks.count(lvl) for lvl in LEVELS])
        return counts, await SqlDocumentRegistry(database).scan()
    finally:
        await milvus.aclose()
        await database.aclose()


async def until_leases_expire(uri: str, collection: str) -> None:
    """Waits until no uncommitted version of the store holds a live lease."""
    _, keys = await store_state(uri, collection)
    last = max((k.lease_expires_ms for k in keys if k.state == PENDING), default=0)
    await asyncio.sleep(max(0.0, last / 1000 - time.time()) + 0.2)


@dataclass(frozen=True)
class Versions:
    old: tuple[int, int, int]
    new: tuple[int, int, int]


async def assert_whole(svc: Service, counts: Versions) -> str:
    """Old intact, new complete, or (after a delete) gone: never a mix, no orphan row, one
    registry record per document. Returns which: "old", "new" or "gone"."""
    listing = await svc.listing()
    assert set(listing) <= {DOC, OTHER} and OTHER in listing
    store_counts = await svc.counts()
    assert store_counts == tuple(sum(c[i] for c in listing.values()) for i in range(3))
    keys = await svc.app.registry.scan()
    # A live delete's tombstone stays until the next reconciliation.
    assert sorted(k.document_id for k in keys if k.state != TOMBSTONE) == sorted(listing)
    rows = await rows_of(svc, DOC)
    texts = [r["text"] for lvl in LEVELS for r in rows[lvl]]
    if DOC not in listing:
        assert texts == []
        docs, _ = await svc.retrieve(OLD_QUERY, top_k=10)
        assert not any("lighthouse" in d["text"] or "glacier" in d["text"] for d in docs)
        return "gone"
    current = next(k.version for k in keys if k.document_id == DOC)
    assert {r["version"] for lvl in LEVELS for r in rows[lvl]} == {current}
    assert tuple(len(rows[lvl]) for lvl in LEVELS) == listing[DOC]
    which = "old" if listing[DOC] == counts.old else "new"
    assert listing[DOC] == (counts.old if which == "old" else counts.new)
    mine, other = ("lighthouse", "glacier") if which == "old" else ("glacier", "lighthouse")
    assert all(mine in t and other not in t for t in texts)
    # Both wordings, merged parents included: only the current version's text comes back.
    for query in (OLD_QUERY, NEW_QUERY):
        docs, meta = await svc.retrieve(query, top_k=10)
        assert meta["retrieval_mode"] == "hybrid"
        assert not any(other in d["text"] for d in docs)
    docs, meta = await svc.retrieve(OLD_QUERY if which == "old" else NEW_QUERY, top_k=10)
    assert docs[0]["filename"] == DOC and mine in docs[0]["text"]
    return which


async def seed_old(svc: Service) -> Versions:
    await svc.ingest((OTHER, OTHER_TEXT.encode()), (DOC, OLD.encode()))
    listing = await svc.listing()
    return Versions(old=listing[DOC], new=(0, 0, 0))


def expected(point: str) -> str:
    if point in DELETE_POINTS:
        return "old" if point == "delete_before_commit" else "gone"
    return "new" if point in NEW_WINS else "old"


# ---- embedded Milvus Lite ------------------------------------------------------------------


@pytest.fixture(scope="module")
def lite_template(embedding_server: EmbeddingsServer) -> Iterator[tuple[Path, Versions]]:
    """A Milvus Lite store holding OLD (and another document), built once; plus the counts
    NEW ingests as (measured on a scratch copy)."""
    root = Path(tempfile.mkdtemp(prefix="crash-template-"))

    async def build() -> Versions:
        async with restarted(embedding_server, str(root / "kb.db"), "crash") as svc:
            counts = await seed_old(svc)
        scratch = copy_store(root / "kb.db", root / "scratch.db")
        async with restarted(embedding_server, str(scratch), "crash") as svc:
            await svc.ingest((DOC, NEW.encode()))
            new = (await svc.listing())[DOC]
        shutil.rmtree(scratch)
        return Versions(counts.old, new)

    with ThreadPoolExecutor(1) as pool:
        versions = pool.submit(lambda: asyncio.run(build())).result()
    yield root / "kb.db", versions
    shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize("point", DOCUMENT_POINTS)
async def test_kill_anywhere_on_milvus_lite(tmp_path, embedding_server, lite_template, point):
    template, versions = lite_template
    assert versions.old != versions.new and min(versions.new) > 1 and min(versions.old) > 1
    assert versions.new[2] > WINDOW
    db = copy_store(template, tmp_path / "kb.db")
    env = {**embedding_env(embedding_server), "MILVUS_URI": str(db), "MILVUS_COLLECTION": "crash"}
    await asyncio.to_thread(run_until_crash, tmp_path / "service.log", env, point)
    async with restarted(embedding_server, str(db), "crash") as svc:
        assert await assert_whole(svc, versions) == expected(point)
        assert len(await svc.app.registry.scan()) == len(await svc.listing())
        # And the store keeps working: the interrupted write, done again, completes.
        if point in DELETE_POINTS:
            await svc.stub.DeleteDocuments(retrieval_pb2.DeleteDocumentsRequest(filenames=[DOC]))
            assert await assert_whole(svc, versions) == "gone"
        else:
            await svc.ingest((DOC, NEW.encode()))
            assert await assert_whole(svc, versions) == "new"


# ---- a shared milvus-lite server -----------------------------------------------------------


@pytest.fixture(scope="module")
def shared_server() -> Iterator[LiteServer]:
    if not MILVUS_LITE.exists() and shutil.which("milvus-lite") is None:
        pytest.fail("milvus-lite CLI not installed in the venv")
    root = Path(tempfile.mkdtemp(prefix="crash-server-"))
    server = LiteServer(root / "data", free_port())
    server.start()
    yield server
    server.stop()
    shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize("point", DOCUMENT_POINTS)
async def test_kill_anywhere_on_a_milvus_server(
    tmp_path, embedding_server, lite_template, shared_server, point
):
    """On a server, start-up keeps pending versions whose lease is live (they may be another
    replica's ingest in flight): restarted once the dead writer's lease expired, it removes
    them."""
    versions = lite_template[1]
    collection = f"kill_{CRASH_POINTS.index(point)}"
    uri = shared_server.uri
    async with restarted(embedding_server, uri, collection) as svc:
        assert (await seed_old(svc)).old == versions.old
    env = {
        **embedding_env(embedding_server),
        "MILVUS_URI": uri,
        "MILVUS_COLLECTION": collection,
        "DATABASE_URL": control_url(uri, collection),
        "INGEST_LEASE_SECONDS": WRITER_LEASE,
    }
    await asyncio.to_thread(run_until_crash, tmp_path / "service.log", env, point)
    if point in MID_LEVEL or point == "before_commit":
        # Restarted while the dead writer's lease runs, the dead write is still there to look at.
        async with restarted(embedding_server, uri, collection) as svc:
            written = await pending_rows(svc)
            assert (await svc.listing())[DOC] == versions.old
            docs, _ = await svc.retrieve(NEW_QUERY, top_k=10)
            assert not any("glacier" in d["text"] for d in docs)  # never served
        lvl = MID_LEVEL.get(point)
        if lvl is None:  # all rows written, no commit
            assert written == dict(zip(LEVELS, versions.new, strict=True))
        else:  # killed with rows of this level written and more to come
            assert 0 < written[lvl] < versions.new[lvl - 1], written
    await until_leases_expire(uri, collection)
    async with restarted(embedding_server, uri, collection) as svc:
        assert await assert_whole(svc, versions) == expected(point)


async def test_two_replicas_on_one_server(tmp_path, embedding_server, lite_template, shared_server):
    versions = lite_template[1]
    uri, collection = shared_server.uri, "replicas"
    env = {
        **embedding_env(embedding_server),
        "MILVUS_URI": uri,
        "MILVUS_COLLECTION": collection,
        "DATABASE_URL": control_url(uri, collection),
    }
    async with restarted(embedding_server, uri, collection) as svc:
        await seed_old(svc)
    a = await asyncio.to_thread(ServiceProcess, tmp_path / "a.log", env)
    b = await asyncio.to_thread(ServiceProcess, tmp_path / "b.log", env)
    try:
        # Concurrent ingests of one filename from both replicas, three rounds: each round ends
        # with exactly one complete version.
        for _ in range(3):
            await asyncio.gather(
                asyncio.to_thread(a.ingest, DOC, NEW), asyncio.to_thread(b.ingest, DOC, OLD)
            )
            async with restarted(embedding_server, uri, collection) as svc:
                assert await assert_whole(svc, versions) in {"old", "new"}

        await asyncio.to_thread(b.ingest, DOC, OLD)
        # A third replica dies with NEW (one window of it) written on every level but not committed:
        # the live replicas never serve those rows, and reconciliation keeps them while the dead
        # writer's lease runs.
        # (All of NEW's 50-odd pending leaves would fill the readers' recall for NEW_QUERY, which
        # then comes back empty: retrieval_service/README.md, "Readers".)
        short_new = NEW[: len(OLD) * 2 // 3]
        await asyncio.to_thread(
            run_until_crash,
            tmp_path / "c.log",
            {**env, "INGEST_LEASE_SECONDS": WRITER_LEASE},
            "before_commit",
            short_new,
        )
        for replica in (a, b):
            texts = await asyncio.to_thread(replica.retrieve, NEW_QUERY)
            assert texts and not any("glacier" in t for t in texts)
            assert (await asyncio.to_thread(replica.listing))[DOC] == versions.old
        async with restarted(embedding_server, uri, collection) as svc:
            pending = [k for k in await svc.app.registry.scan() if k.state == PENDING]
            assert len(pending) == 1
            assert sum(await svc.counts()) > sum(sum(c) for c in (await svc.listing()).values())
        # Once its lease expired, any replica's reconciliation removes them.
        await until_leases_expire(uri, collection)
        async with restarted(embedding_server, uri, collection) as svc:
            assert await assert_whole(svc, versions) == "old"
    finally:
        a.stop()
        b.stop()


# ---- leases: two replicas on one server ------------------------------------------------------

LEASE = 3  # INGEST_LEASE_SECONDS of both replicas: renewed every second, reconciled every 3 s


def lease_env(server: EmbeddingsServer, uri: str, collection: str) -> dict[str, str]:
    return {
        **embedding_env(server),
        "MILVUS_URI": uri,
        "MILVUS_COLLECTION": collection,
        "DATABASE_URL": control_url(uri, collection),
        "INGEST_LEASE_SECONDS": str(LEASE),
    }


async def until_paused(service: ServiceProcess, ingest: asyncio.Future[object]) -> None:
    """Waits for the pause hook's line in the service's log (SUPERMEW_PAUSE_AT)."""
    deadline = time.monotonic() + 60
    while "TEST HOOK: pausing" not in service.log.read_text():
        assert not ingest.done(), service.log.read_text()[-3000:]
        assert time.monotonic() < deadline, service.log.read_text()[-3000:]
        await asyncio.sleep(0.1)


def listed_totals(listing: dict[str, tuple[int, int, int]]) -> tuple[int, ...]:
    return tuple(sum(c[i] for c in listing.values()) for i in range(3))


@pytest.mark.slow
async def test_a_replica_killed_mid_re_ingest_leaves_no_orphan_row(
    tmp_path, embedding_server, lite_template, shared_server
):
    """kill -9 of one replica mid re-ingest: while it lives, the other replica's reconciliation
    keeps its version (lease live); once dead, within 60 s (about two lease periods) the
    store's rows per level equal ListDocuments' counts."""
    versions = lite_template[1]
    uri, collection = shared_server.uri, "lease_kill"
    env = lease_env(embedding_server, uri, collection)
    async with restarted(embedding_server, uri, collection) as svc:
        await seed_old(svc)
    a = await asyncio.to_thread(
        ServiceProcess, tmp_path / "a.log", {**env, "SUPERMEW_PAUSE_AT": "during_level_2:600"}
    )
    b = await asyncio.to_thread(ServiceProcess, tmp_path / "b.log", env)
    try:
        ingest = asyncio.ensure_future(asyncio.to_thread(a.ingest, DOC, NEW))
        await until_paused(a, ingest)
        await asyncio.sleep(2 * LEASE)  # B reconciles meanwhile; A's lease is live
        counts, keys = await store_state(uri, collection)
        assert [k.document_id for k in keys if k.state == PENDING] == [DOC]
        listing = await asyncio.to_thread(b.listing)
        assert listing[DOC] == versions.old
        assert counts[2] > listed_totals(listing)[2]  # NEW's leaves written so far are kept

        a.proc.kill()  # kill -9, mid re-ingest
        killed = time.monotonic()
        with pytest.raises(grpc.RpcError):
            await ingest
        while True:
            counts, keys = await store_state(uri, collection)
            listing = await asyncio.to_thread(b.listing)
            if counts == listed_totals(listing) and all(k.state != PENDING for k in keys):
                break
            assert time.monotonic() - killed < 60, (counts, listing, keys)
            await asyncio.sleep(0.5)
        assert listing[DOC] == versions.old
        texts = await asyncio.to_thread(b.retrieve, OLD_QUERY)
        assert texts and all("glacier" not in t for t in texts)
        assert "reconciliation removed 1 stale document versions" in b.log.read_text()
    finally:
        a.stop()
        b.stop()


@pytest.mark.slow
async def test_an_ingest_of_three_lease_periods_completes_while_another_replica_reconciles(
    tmp_path, embedding_server, lite_template, shared_server
):
    """A replace that waits 3.5 lease periods with all its rows written but not committed
    completes whole, while the other replica's reconciliation runs (it removes a dead writer's
    record planted meanwhile) and never touches the live version."""
    versions = lite_template[1]
    uri, collection = shared_server.uri, "lease_slow"
    env = lease_env(embedding_server, uri, collection)
    async with restarted(embedding_server, uri, collection) as svc:
        await seed_old(svc)
    pause = 3.5 * LEASE
    a = await asyncio.to_thread(
        ServiceProcess, tmp_path / "a.log", {**env, "SUPERMEW_PAUSE_AT": f"before_commit:{pause}"}
    )
    # The grace that leases replaced: accepted, ignored, named in one warning line.
    b_env = {**env, "RECONCILE_GRACE_SECONDS": "3600"}
    b = await asyncio.to_thread(ServiceProcess, tmp_path / "b.log", b_env)
    try:
        assert b.log.read_text().count("RECONCILE_GRACE_SECONDS is ignored") == 1
        started = time.monotonic()
        ingest = asyncio.ensure_future(asyncio.to_thread(a.ingest, DOC, NEW))
        await until_paused(a, ingest)
        # A writer that died 1,000 s ago (its lease long expired): B's next pass removes it.
        dead = (time.time_ns() - 1_000 * 10**9) // 10**6
        ghost = DocumentEntry(
            "ghost.md",
            "Text",
            1,
            {"0": [1, 1, 1]},
            f"{dead * 10**6:020d}-0badc0de",
            PENDING,
            lease_expires_ms=dead + LEASE * 1000,
        )
        database = control_database(uri, collection)
        try:
            await SqlDocumentRegistry(database).put(ghost)
        finally:
            await database.aclose()
        while any(k.document_id == "ghost.md" for k in (await store_state(uri, collection))[1]):
            assert not ingest.done(), "B did not reconcile while A's ingest ran"
            assert time.monotonic() - started < 60
            await asyncio.sleep(0.3)
        assert not ingest.done()

        reply = await ingest
        took = time.monotonic() - started
        assert took >= 3 * LEASE, took
        [report] = reply.documents
        assert report.replaced and (report.l1_chunks, report.l2_chunks, report.l3_chunks) == (
            versions.new
        )
        listing = await asyncio.to_thread(b.listing)
        assert listing[DOC] == versions.new
        counts, keys = await store_state(uri, collection)
        assert counts == listed_totals(listing)
        assert sorted(k.document_id for k in keys) == sorted(listing)
        texts = await asyncio.to_thread(b.retrieve, NEW_QUERY)
        assert any("glacier" in t for t in texts) and not any("lighthouse" in t for t in texts)
        log = a.log.read_text()
        assert "renewing the lease" not in log and "lapsed" not in log
    finally:
        a.stop()
        b.stop()
