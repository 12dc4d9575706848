"""The embedded default's Milvus Lite runs in a supervised child process (docs/api.md
"Embedded Milvus Lite"), on real processes: the service serves from it over loopback, reports
its death (NOT_SERVING, UNAVAILABLE at once) and restarts it on the same store, and the child
never outlives the service, whether the service stops or is killed."""

from __future__ import annotations

import fcntl
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from supermew.v1 import retrieval_pb2

from tests.fakes.embeddings_server import EmbeddingsServer
from tests.integration.retrieval_harness import running_service
from tests.integration.test_retrieval_crash_safety import ServiceProcess, embedding_env

TEXT = "The lighthouse keeper counts seagulls on the northern cliff every morning. " * 30


@pytest.fixture(scope="module")
def embedding_server() -> Iterator[EmbeddingsServer]:
    server = EmbeddingsServer(64).start()
    yield server
    server.stop()


def children_of(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry.name))
    return out


def gone(pid: int) -> bool:
    """Exited: no such process, or a zombie nobody has reaped yet."""
    try:
        return (Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]) == "Z"
    except OSError:
        return True


def wait_for(condition, what: str, limit: float = 60.0) -> None:
    deadline = time.monotonic() + limit
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def lite_child(service: ServiceProcess) -> int:
    (pid,) = [p for p in children_of(service.proc.pid) if not gone(p)]
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    assert b"retrieval_service.adapters.milvus.lite_process" in cmdline
    return pid


def health(service: ServiceProcess) -> int:
    stub = health_pb2_grpc.HealthStub(service.channel)
    return stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=10).status


async def test_the_store_is_served_by_a_child_process_on_loopback(tmp_path) -> None:
    async with running_service(tmp_path / "kb.db") as svc:
        lite = svc.app.store.lite
        assert lite is not None and lite.alive and lite.pid != os.getpid()
        assert lite.uri.startswith("http://127.0.0.1:")
        await svc.ingest(("a.txt", TEXT.encode()))
        assert (await svc.listing())["a.txt"][2] > 0
        pid = lite.pid
    assert pid is not None and gone(pid)


def test_a_dead_child_is_reported_and_restarted_on_the_same_store(
    tmp_path, embedding_server
) -> None:
    db = tmp_path / "kb.db"
    service = ServiceProcess(
        tmp_path / "service.log", {**embedding_env(embedding_server), "MILVUS_URI": str(db)}
    )
    try:
        service.ingest("a.txt", TEXT)
        assert health(service) == health_pb2.HealthCheckResponse.SERVING
        child = lite_child(service)
        os.kill(child, signal.SIGKILL)
        # Hold the store's lock as the child did, so that its restart waits for the test.
        with (db / "LOCK").open("a") as lock:

            def locked() -> bool:
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    return False
                return True

            wait_for(locked, "the dead child's lock")
            wait_for(
                lambda: health(service) == health_pb2.HealthCheckResponse.NOT_SERVING,
                "NOT_SERVING",
            )
            # A call that needs the chunks (the listing reads the database alone now).
            with pytest.raises(grpc.RpcError) as err:
                service.ingest("b.txt", TEXT)
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE
            assert "milvus unavailable" in (err.value.details() or "")
            fcntl.flock(lock, fcntl.LOCK_UN)
        wait_for(lambda: health(service) == health_pb2.HealthCheckResponse.SERVING, "SERVING")
        assert lite_child(service) != child
        assert service.listing()["a.txt"][2] > 0
        assert "exited with status" in service.log.read_text()
    finally:
        service.stop()


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_the_child_never_outlives_the_service(tmp_path, embedding_server, how) -> None:
    service = ServiceProcess(
        tmp_path / "service.log",
        {**embedding_env(embedding_server), "MILVUS_URI": str(tmp_path / "kb.db")},
    )
    try:
        child = lite_child(service)
        os.kill(service.proc.pid, how)
        service.proc.wait(timeout=60)
        wait_for(lambda: gone(child), "the child to exit")
    finally:
        service.stop()
    # The store's lock went with it: the next service starts on the same directory.
    again = ServiceProcess(
        tmp_path / "again.log",
        {**embedding_env(embedding_server), "MILVUS_URI": str(tmp_path / "kb.db")},
    )
    try:
        assert health(again) == health_pb2.HealthCheckResponse.SERVING
        assert again.stub.ListDocuments(retrieval_pb2.ListDocumentsRequest()).documents == []
    finally:
        again.stop()
