"""A knowledge base created again right after a forced delete returned, and ingested into,
stays (docs/api.md#knowledge-bases): two real retrieval processes (`python -m retrieval_service`)
sharing one `milvus-lite server` collection and one PostgreSQL database, talked to over
grpc.aio, that reconcile every second, so a replica's periodic reconciliation often runs while
a deletion is under way on the other. Before the DELETING mark carried its deleter's lease,
that reconciliation finished the deletion a second time and lost the new knowledge base (3 of
30 tries). The rows are counted in Milvus directly and the records read from PostgreSQL
directly. Prints what it saw (`-s`); skipped where PostgreSQL is not installed."""

from __future__ import annotations

import asyncio
import shutil
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import grpc
import pytest
from supermew.v1 import retrieval_pb2, retrieval_pb2_grpc

from retrieval_service.bootstrap import clear_milvus_env
from tests.fakes.embeddings_server import EmbeddingsServer
from tests.integration.retrieval_harness import (
    MILVUS_LITE,
    LiteServer,
    free_port,
    spawn_retrieval_service,
)
from tests.postgres import PostgresServer

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DIM = 64
COLLECTION = "xreplica"
LEVELS = (1, 2, 3)
#: Rounds of lanes run at once; each lane deletes, creates again and ingests one knowledge base.
RECREATE_ROUNDS = 8
RECREATE_LANES = 4
CALL_TIMEOUT = 60.0


# ---- the two replicas ----------------------------------------------------------------------


@dataclass
class Replica:
    name: str
    log: Path
    proc: Any
    port: int

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def log_tail(self, lines: int = 25) -> str:
        text = self.log.read_text(errors="replace").splitlines() if self.log.exists() else []
        notable = [line for line in text if "WARNING" in line or "ERROR" in line]
        return f"--- {self.name} ({self.log.name}), warnings/errors, last {lines} ---\n" + (
            "\n".join(notable[-lines:]) or "(none)"
        )

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except Exception:
                self.proc.kill()
                self.proc.wait()


@dataclass
class Cluster:
    a: Replica
    b: Replica
    milvus_uri: str
    dsn: str  # plain postgresql:// DSN of the shared database, for asyncpg
    milvus: Any = field(default=None)

    def logs(self) -> str:
        return self.a.log_tail() + "\n" + self.b.log_tail()

    # -- Milvus, directly (sync client: call through asyncio.to_thread) --

    def _rows(self, expr: str, fields: list[str]) -> dict[int, list[dict[str, Any]]]:
        out = {}
        for level in LEVELS:
            out[level] = self.milvus.query(
                f"{COLLECTION}_v4_l{level}",
                filter=expr,
                output_fields=fields,
                consistency_level="Strong",
            )
        return out

    async def row_counts(self, expr: str) -> tuple[int, int, int]:
        found = await asyncio.to_thread(self._rows, expr, ["count(*)"])
        return tuple(int(found[level][0]["count(*)"]) for level in LEVELS)  # type: ignore[return-value]

    async def rows(self, expr: str) -> dict[int, list[dict[str, Any]]]:
        return await asyncio.to_thread(self._rows, expr, ["version", "text"])

    # -- PostgreSQL, directly --

    async def until_committed(self, name: str, count: int, running: asyncio.Future[Any]) -> None:
        """Returns as soon as `name` holds `count` committed documents, or `running` ended."""
        connection = await asyncpg.connect(self.dsn)
        try:
            while not running.done():
                found = await connection.fetchval(
                    "SELECT count(*) FROM documents WHERE knowledge_base = $1", name
                )
                if found >= count:
                    return
                await asyncio.sleep(0.003)
        finally:
            await connection.close()

    async def sql(self, query: str, *args: Any) -> list[Any]:
        connection = await asyncpg.connect(self.dsn)
        try:
            return list(await connection.fetch(query, *args))
        finally:
            await connection.close()


@contextmanager
def two_replicas(postgres_server: PostgresServer, root: Path, lease: str) -> Iterator[Cluster]:
    """Two replicas (INGEST_LEASE_SECONDS `lease`: they reconcile once per lease) on a new
    `milvus-lite server` and a new PostgreSQL database; their logs in `root`."""
    if not MILVUS_LITE.exists() and shutil.which("milvus-lite") is None:
        pytest.fail("milvus-lite CLI not installed in the venv")
    # A little time per embedding batch, as a real endpoint takes: an ingest of several
    # documents lasts long enough for a delete to land in the middle of it.
    embeddings = EmbeddingsServer(DIM, batch_delay=0.03).start()
    lite = LiteServer(root / "milvus", free_port())
    started: list[Replica] = []
    try:
        lite.start()
        postgres_server.start()
        database = f"xr_{uuid.uuid4().hex[:12]}"
        url = postgres_server.create_database(database)
        env = {
            "EMBEDDING_BASE_URL": embeddings.base_url,
            "EMBEDDING_MODEL": "fake",
            "EMBEDDING_DIM": str(DIM),
            "MILVUS_URI": lite.uri,
            "MILVUS_COLLECTION": COLLECTION,
            "DATABASE_URL": url,
            "INGEST_LEASE_SECONDS": lease,
        }
        for name in ("a", "b"):
            log = root / f"replica-{name}.log"
            proc, port = spawn_retrieval_service(env, log)
            started.append(Replica(name, log, proc, port))
        clear_milvus_env()
        from pymilvus import MilvusClient

        made = Cluster(
            started[0],
            started[1],
            lite.uri,
            postgres_server.url(database, driver="postgresql"),
            MilvusClient(uri=lite.uri),
        )
        yield made
        made.milvus.close()
        for replica in started:
            assert replica.proc.poll() is None, f"replica {replica.name} died\n{made.logs()}"
    finally:
        for replica in started:
            replica.stop()
        lite.stop()
        embeddings.stop()


@dataclass
class Stubs:
    a: retrieval_pb2_grpc.RetrievalServiceStub
    b: retrieval_pb2_grpc.RetrievalServiceStub

    def both(self) -> tuple[retrieval_pb2_grpc.RetrievalServiceStub, ...]:
        return (self.a, self.b)


@asynccontextmanager
async def stubs(cluster: Cluster) -> AsyncIterator[Stubs]:
    """A grpc.aio channel to each replica, on the running test's loop."""
    async with (
        grpc.aio.insecure_channel(cluster.a.target) as ca,
        grpc.aio.insecure_channel(cluster.b.target) as cb,
    ):
        yield Stubs(
            retrieval_pb2_grpc.RetrievalServiceStub(ca),
            retrieval_pb2_grpc.RetrievalServiceStub(cb),
        )


@dataclass
class Ended:
    code: grpc.StatusCode
    details: str
    seconds: float
    reply: Any = None


async def ended(call: Awaitable[Any]) -> Ended:
    began = time.monotonic()
    try:
        reply = await call
    except grpc.aio.AioRpcError as error:
        return Ended(error.code(), error.details() or "", time.monotonic() - began)
    return Ended(grpc.StatusCode.OK, "", time.monotonic() - began, reply)


def kb_expr(name: str) -> str:
    return f'knowledge_base == "{name}"'


def documents(tag: str, count: int, sentences: int) -> list[retrieval_pb2.SourceDocument]:
    """`count` documents of `sentences` distinct sentences each (default chunking: L3 800
    characters, so ≈ sentences / 10 leaves each)."""
    return [
        retrieval_pb2.SourceDocument(
            filename=f"{tag}-{i}.md",
            content="".join(
                f"The lighthouse keeper {tag} {i} counts {n} seagulls on the northern cliff. "
                for n in range(sentences)
            ).encode(),
        )
        for i in range(count)
    ]


# ---- 1. concurrent creates ----------------------------------------------------------------


@pytest.fixture(scope="module")
def eager_reconcilers(
    postgres_server: PostgresServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    """Two replicas that reconcile every second (INGEST_LEASE_SECONDS=1), the shortest period:
    a deletion in progress is then often under way while a replica reconciles."""
    with two_replicas(postgres_server, tmp_path_factory.mktemp("eager-reconcilers"), "1") as made:
        yield made


async def test_a_knowledge_base_created_again_after_a_forced_delete_stays(
    eager_reconcilers: Cluster,
) -> None:
    """Forced delete on one replica, then at once CreateKnowledgeBase of the same id and an
    ingest into it: the new knowledge base must stay, with its document and rows. Every
    replica's periodic reconciliation also "finishes" each knowledge base it finds DELETING
    (`KnowledgeBases.reconcile`), a deletion running right now on a live replica included;
    that second deletion's purge and record removal may run after the first one returned."""
    cluster = eager_reconcilers
    tag = uuid.uuid4().hex[:6]

    async def lane(s: Stubs, round_: int, lane_: int) -> tuple[bool, str]:
        kb = f"again-{tag}-{round_}-{lane_}"
        name = f"knowledge_bases/{kb}"
        first, second = (s.a, s.b) if (round_ + lane_) % 2 == 0 else (s.b, s.a)
        await first.CreateKnowledgeBase(
            retrieval_pb2.CreateKnowledgeBaseRequest(knowledge_base_id=kb)
        )
        await first.IngestDocuments(
            retrieval_pb2.IngestDocumentsRequest(
                documents=documents(f"old{round_}x{lane_}", 4, 150), knowledge_base=kb
            ),
            timeout=CALL_TIMEOUT,
        )
        deleted = await ended(
            second.DeleteKnowledgeBase(
                retrieval_pb2.DeleteKnowledgeBaseRequest(name=name, force=True),
                timeout=CALL_TIMEOUT,
            )
        )
        created = await ended(
            second.CreateKnowledgeBase(
                retrieval_pb2.CreateKnowledgeBaseRequest(knowledge_base_id=kb),
                timeout=CALL_TIMEOUT,
            )
        )
        ingested = await ended(
            second.IngestDocuments(
                retrieval_pb2.IngestDocumentsRequest(
                    documents=documents(f"new{round_}x{lane_}", 1, 40), knowledge_base=kb
                ),
                timeout=CALL_TIMEOUT,
            )
        )
        await asyncio.sleep(1.2)  # any other deletion of the old one has finished by now
        got = await ended(
            first.GetKnowledgeBase(
                retrieval_pb2.GetKnowledgeBaseRequest(name=name), timeout=CALL_TIMEOUT
            )
        )
        listed = await ended(
            first.ListDocuments(
                retrieval_pb2.ListDocumentsRequest(knowledge_base=kb), timeout=CALL_TIMEOUT
            )
        )
        rows = await cluster.row_counts(kb_expr(name))
        want = (
            tuple(
                sum(getattr(d, f"l{lvl}_chunks") for d in listed.reply.documents) for lvl in LEVELS
            )
            if listed.reply is not None
            else None
        )
        counts = (got.reply.document_count,) if got.reply is not None else ()
        line = (
            f"{kb}: delete {deleted.code.name}, create again {created.code.name}, "
            f"ingest {ingested.code.name} {ingested.details}; then Get {got.code.name} "
            f"{counts}, rows in Milvus {rows}, listed {want}"
        )
        fine = (
            (deleted.code, created.code, ingested.code, got.code) == (grpc.StatusCode.OK,) * 4
            and counts == (1,)
            and rows == want
        )
        return fine, line

    async with stubs(cluster) as s:
        outcomes: list[tuple[bool, str]] = []
        for round_ in range(RECREATE_ROUNDS):
            began = time.monotonic()
            outcomes += await asyncio.gather(
                *(lane(s, round_, lane_) for lane_ in range(RECREATE_LANES))
            )
            print(f"round {round_}: {time.monotonic() - began:.2f} s")
            if not all(fine for fine, _ in outcomes):
                break  # one is enough to tell
        broken = [line for fine, line in outcomes if not fine]
        print(f"\ncreated again after a forced delete: {len(outcomes)} tries, {len(broken)} lost")
        print("\n".join(broken))
        reconciled = [
            line
            for replica in (cluster.a, cluster.b)
            for line in replica.log.read_text(errors="replace").splitlines()
            if "finishing the interrupted deletion" in line
        ]
        assert broken == [], (
            "a knowledge base created again right after a forced delete was lost:\n"
            + "\n".join(broken)
            + "\nreconciliations that 'finished' a deletion in progress:\n"
            + "\n".join(reconciled)
        )
