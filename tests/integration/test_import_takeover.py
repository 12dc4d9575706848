"""An import survives the replica running it (docs/api.md#imports): two real retrieval
processes on one PostgreSQL and one `milvus-lite server`; the replica running an import is
killed (SIGKILL) mid-job, and the other takes the job over once its lease expires and finishes
it. Afterwards every document is in once (ListDocuments), the rows per level in Milvus equal
the registry's counts, and the counts of the operation are whole. Skipped where PostgreSQL is
not installed (CI installs it: .ci/run)."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from google.longrunning import operations_pb2_grpc
from google.longrunning import operations_proto_pb2 as operations_pb2
from google.protobuf import duration_pb2
from supermew.v1 import retrieval_pb2

from retrieval_service.core.imports.job import IMPORT_BATCH_DOCUMENTS
from tests.fakes.embeddings_server import EmbeddingsServer
from tests.integration.retrieval_harness import MILVUS_LITE, LiteServer, free_port
from tests.integration.test_retrieval_crash_safety import DIM, ServiceProcess, embedding_env
from tests.postgres import PostgresServer

pytestmark = [pytest.mark.integration, pytest.mark.slow]

COLLECTION = "imports"
DOCUMENTS = 400
SENTENCE = "Harbour log {n}: the ferry to the island leaves at dawn and returns at dusk. "
State = retrieval_pb2.ImportDocumentsMetadata.State


@pytest.fixture
def folder() -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="import-takeover-"))
    docs = root / "docs"
    docs.mkdir()
    for i in range(DOCUMENTS):
        (docs / f"log-{i:03}.md").write_text(SENTENCE.format(n=i) * 20)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def progress(op: operations_pb2.Operation) -> retrieval_pb2.ImportDocumentsMetadata:
    out = retrieval_pb2.ImportDocumentsMetadata()
    op.metadata.Unpack(out)
    return out


def until(check: object, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_a_killed_replicas_import_finishes_on_the_other(
    postgres_server: PostgresServer, folder: Path
) -> None:
    if not MILVUS_LITE.exists():
        pytest.fail("milvus-lite CLI not installed in the venv")
    # Slow embedding: the import is still running when its replica is killed.
    embeddings = EmbeddingsServer(DIM, batch_delay=0.05).start()
    server = LiteServer(folder / "milvus", free_port())
    server.start()
    postgres_server.start()
    env = {
        **embedding_env(embeddings),
        "MILVUS_URI": server.uri,
        "MILVUS_COLLECTION": COLLECTION,
        "DATABASE_URL": postgres_server.create_database("import_takeover"),
        "INGEST_LEASE_SECONDS": "3",
        "IMPORT_ROOTS": str(folder),
        "IMPORT_WORKERS": "1",
    }
    a = ServiceProcess(folder / "a.log", env)
    b: ServiceProcess | None = None
    from pymilvus import MilvusClient

    milvus = MilvusClient(uri=server.uri)
    try:
        ops_a = operations_pb2_grpc.OperationsStub(a.channel)
        op = a.stub.ImportDocuments(
            retrieval_pb2.ImportDocumentsRequest(uris=[(folder / "docs").as_uri()]), timeout=30
        )
        get = operations_pb2.GetOperationRequest(name=op.name)
        until(lambda: progress(ops_a.GetOperation(get)).documents_new >= 48, 120)
        b = ServiceProcess(folder / "b.log", env)  # started while a runs the job
        before = progress(ops_a.GetOperation(get))
        assert not ops_a.GetOperation(get).done, "the import ended before the kill"
        a.proc.kill()
        a.proc.wait(timeout=30)

        ops_b = operations_pb2_grpc.OperationsStub(b.channel)
        done = ops_b.WaitOperation(
            operations_pb2.WaitOperationRequest(
                name=op.name, timeout=duration_pb2.Duration(seconds=240)
            ),
            timeout=250,
        )
        assert done.done and done.WhichOneof("result") == "response", done
        meta = progress(done)
        assert meta.state == State.SUCCEEDED
        assert meta.documents_total == DOCUMENTS
        assert meta.documents_new + meta.documents_unchanged + meta.documents_replaced == DOCUMENTS
        assert meta.documents_failed == 0
        # Only the documents in flight at the kill were done again (those committed are
        # "unchanged" the second time): at most one job's batch per worker.
        assert meta.documents_unchanged <= IMPORT_BATCH_DOCUMENTS
        assert meta.documents_new >= before.documents_new
        assert "(taken over)" in (folder / "b.log").read_text()

        listing = b.stub.ListDocuments(
            retrieval_pb2.ListDocumentsRequest(page_size=1000), timeout=30
        ).documents
        assert sorted(d.document_id for d in listing) == [
            f"log-{i:03}.md" for i in range(DOCUMENTS)
        ]
        registry = [sum(getattr(d, f"l{level}_chunks") for d in listing) for level in (1, 2, 3)]
        rows = [
            int(
                milvus.query(f"{COLLECTION}_v4_l{level}", filter="", output_fields=["count(*)"])[0][
                    "count(*)"
                ]
            )
            for level in (1, 2, 3)
        ]
        # Rows of an uncommitted version the kill left go once their lease expires.
        until(
            lambda: (
                [
                    int(
                        milvus.query(
                            f"{COLLECTION}_v4_l{level}", filter="", output_fields=["count(*)"]
                        )[0]["count(*)"]
                    )
                    for level in (1, 2, 3)
                ]
                == registry
            ),
            60,
        )
        assert rows[2] >= registry[2]
    except grpc.RpcError as error:
        pytest.fail(f"{error.code()}: {error.details()}\n{(folder / 'a.log').read_text()[-2000:]}")
    finally:
        milvus.close()
        a.stop()
        if b is not None:
            b.stop()
        server.stop()
        embeddings.stop()


def test_sigterm_stops_an_import_at_its_checkpoint_and_a_restart_finishes_it(
    folder: Path,
) -> None:
    """One replica on embedded Milvus Lite and SQLite: SIGTERM mid-import; the drain lets the
    job reach its next checkpoint and gives its lease up (the process exits 0, the operation
    is not FAILED), and the same replica restarted resumes it at once and finishes it."""
    embeddings = EmbeddingsServer(DIM, batch_delay=0.05).start()
    env = {
        **embedding_env(embeddings),
        "MILVUS_URI": str(folder / "kb.db"),
        "INGEST_LEASE_SECONDS": "30",  # a restart must not wait for it: the lease is given up
        "IMPORT_ROOTS": str(folder),
        "IMPORT_WORKERS": "1",
        "SHUTDOWN_GRACE_SECONDS": "20",
    }
    first = ServiceProcess(folder / "first.log", env)
    second: ServiceProcess | None = None
    try:
        ops = operations_pb2_grpc.OperationsStub(first.channel)
        op = first.stub.ImportDocuments(
            retrieval_pb2.ImportDocumentsRequest(uris=[(folder / "docs").as_uri()]), timeout=30
        )
        get = operations_pb2.GetOperationRequest(name=op.name)
        until(lambda: progress(ops.GetOperation(get)).documents_new >= 48, 120)
        first.channel.close()
        first.proc.terminate()
        assert first.proc.wait(timeout=60) == 0
        log = (folder / "first.log").read_text()
        assert "stopping at its checkpoint" in log or "stopped by the shutdown" in log, log[-3000:]

        second = ServiceProcess(folder / "second.log", env)
        done = operations_pb2_grpc.OperationsStub(second.channel).WaitOperation(
            operations_pb2.WaitOperationRequest(
                name=op.name, timeout=duration_pb2.Duration(seconds=240)
            ),
            timeout=250,
        )
        meta = progress(done)
        assert done.WhichOneof("result") == "response", done.error
        assert meta.state == State.SUCCEEDED and meta.documents_failed == 0
        assert meta.documents_new + meta.documents_unchanged == DOCUMENTS
        listing = second.stub.ListDocuments(
            retrieval_pb2.ListDocumentsRequest(page_size=1000), timeout=30
        ).documents
        assert len(listing) == DOCUMENTS
    finally:
        first.stop()
        if second is not None:
            second.stop()
        embeddings.stop()


def test_a_killed_embedded_replica_resumes_its_import_at_restart_without_waiting(
    folder: Path,
) -> None:
    """Embedded Milvus Lite and SQLite, kill -9 mid-import, a lease far longer than the test's
    wait: the restarted process (the only one that can run the job) resumes it at once."""
    embeddings = EmbeddingsServer(DIM, batch_delay=0.05).start()
    env = {
        **embedding_env(embeddings),
        "MILVUS_URI": str(folder / "kb.db"),
        "INGEST_LEASE_SECONDS": "600",
        "IMPORT_ROOTS": str(folder),
        "IMPORT_WORKERS": "1",
    }
    first = ServiceProcess(folder / "first.log", env)
    second: ServiceProcess | None = None
    try:
        ops = operations_pb2_grpc.OperationsStub(first.channel)
        op = first.stub.ImportDocuments(
            retrieval_pb2.ImportDocumentsRequest(uris=[(folder / "docs").as_uri()]), timeout=30
        )
        get = operations_pb2.GetOperationRequest(name=op.name)
        until(lambda: progress(ops.GetOperation(get)).documents_new >= 48, 120)
        first.proc.kill()
        first.proc.wait(timeout=30)
        second = ServiceProcess(folder / "second.log", env)
        done = operations_pb2_grpc.OperationsStub(second.channel).WaitOperation(
            operations_pb2.WaitOperationRequest(
                name=op.name, timeout=duration_pb2.Duration(seconds=120)
            ),
            timeout=130,
        )
        assert done.done, "not resumed within 120 s (the lease is 600 s)"
        meta = progress(done)
        assert meta.state == State.SUCCEEDED
        assert meta.documents_new + meta.documents_unchanged == DOCUMENTS
        assert "resuming 1 import(s)" in (folder / "second.log").read_text()
        assert "embedder openai:fake (dim 64)" in (folder / "second.log").read_text()
    finally:
        first.stop()
        if second is not None:
            second.stop()
        embeddings.stop()
