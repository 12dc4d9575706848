"""The control-plane database failing (docs/api.md#database): at start-up, a bad URL, an
unreachable server, refused credentials, a schema newer than the code, or an old one with
migrations off, each stop the service with one line naming DATABASE_URL and never its
password; `python -m retrieval_service db upgrade|current` migrate and inspect on demand; and
a PostgreSQL that goes away under a running service makes its calls UNAVAILABLE naming the
database, with nothing half written, and readiness NOT_SERVING until it is back — then
SERVING again without a restart."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from supermew.v1 import retrieval_pb2, retrieval_pb2_grpc

from retrieval_service.adapters.sql.migrate import head
from tests.fakes.embeddings_server import EmbeddingsServer
from tests.integration.retrieval_harness import spawn_retrieval_service
from tests.integration.test_retrieval_crash_safety import embedding_env
from tests.postgres import PostgresServer

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
SECRET = "hunter2-secret"
_SCRUB = ("RETRIEVAL_", "MILVUS_", "DATABASE_", "MIGRATE_", "LOG_", "SUPERMEW_")


@pytest.fixture(scope="module")
def embedding_server() -> Iterator[EmbeddingsServer]:
    server = EmbeddingsServer(64).start()
    yield server
    server.stop()


def _run(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(_SCRUB)}
    clean.update(
        {"MILVUS_URI": str(tmp_path / "kb.db"), "PYTHONUNBUFFERED": "1", "SAMPLES_DIR": ""}
    )
    clean.update(env)
    return subprocess.run(
        [sys.executable, "-m", "retrieval_service", *args],
        cwd=ROOT,
        env=clean,
        capture_output=True,
        text=True,
        timeout=180,
    )


def _one_line_naming_database_url(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode != 0, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert SECRET not in result.stderr + result.stdout
    failures = [line for line in result.stderr.splitlines() if ": cannot start: " in line]
    assert len(failures) == 1, result.stderr
    assert "DATABASE_URL" in failures[0], failures[0]
    return failures[0]


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_url_that_is_no_database_url(tmp_path: Path) -> None:
    line = _one_line_naming_database_url(
        _run(tmp_path, DATABASE_URL=f"mysql://root:{SECRET}@127.0.0.1/x")
    )
    assert "unsupported driver" in line


def test_an_unreachable_server(tmp_path: Path) -> None:
    url = f"postgresql+asyncpg://supermew:{SECRET}@127.0.0.1:{_free_port()}/supermew"
    line = _one_line_naming_database_url(
        _run(tmp_path, DATABASE_URL=url, DATABASE_TIMEOUT_SECONDS="3")
    )
    assert "cannot connect" in line and "***" in line


def test_refused_credentials(tmp_path: Path, postgres_url: str) -> None:
    wrong = postgres_url.replace(":supermew-test@", f":{SECRET}@")
    line = _one_line_naming_database_url(_run(tmp_path, DATABASE_URL=wrong))
    assert "wrong user name or password" in line


def test_a_schema_newer_than_the_code_refuses_to_start(tmp_path: Path) -> None:
    path = tmp_path / "control.sqlite3"
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE alembic_version (version_num VARCHAR(32) PRIMARY KEY)")
        connection.execute("INSERT INTO alembic_version VALUES ('9999_from_the_future')")
    line = _one_line_naming_database_url(_run(tmp_path, DATABASE_URL=f"sqlite:///{path}"))
    assert "newer than this service" in line and "9999_from_the_future" in line


def test_migrations_on_demand(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'control.sqlite3'}"
    off = _run(tmp_path, DATABASE_URL=url, MIGRATE_ON_START="false")
    line = _one_line_naming_database_url(off)
    assert "python -m retrieval_service db upgrade" in line
    current = _run(tmp_path, "db", "current", DATABASE_URL=url)
    assert current.returncode == 0 and "schema at no revision" in current.stdout
    upgraded = _run(tmp_path, "db", "upgrade", DATABASE_URL=url)
    assert upgraded.returncode == 0, upgraded.stderr
    assert f"migrated from empty to {head()}" in upgraded.stdout
    again = _run(tmp_path, "db", "upgrade", DATABASE_URL=url)
    assert f"already at {head()}" in again.stdout
    bad = _run(tmp_path, "db", "upgrade", DATABASE_URL=f"postgresql://u:{SECRET}@127.0.0.1:1/x")
    assert bad.returncode == 1 and "DATABASE_URL=" in bad.stderr
    assert SECRET not in bad.stderr and "Traceback" not in bad.stderr


async def _health(channel: grpc.aio.Channel) -> int:
    stub = health_pb2_grpc.HealthStub(channel)
    reply = await stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
    return int(reply.status)


async def _until_health(channel: grpc.aio.Channel, status: int, seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while await _health(channel) != status:
        assert time.monotonic() < deadline, f"health never became {status}"
        await asyncio.sleep(0.2)


async def test_the_database_going_away_and_coming_back(
    tmp_path: Path,
    postgres_server: PostgresServer,
    postgres_url: str,
    embedding_server: EmbeddingsServer,
) -> None:
    env = {
        **embedding_env(embedding_server),
        "MILVUS_URI": str(tmp_path / "kb.db"),
        "DATABASE_URL": postgres_url,
        "DATABASE_TIMEOUT_SECONDS": "2",
    }
    proc, port = spawn_retrieval_service(env, tmp_path / "service.log", scrub=_SCRUB)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    stub = retrieval_pb2_grpc.RetrievalServiceStub(channel)

    def doc(name: str) -> retrieval_pb2.SourceDocument:
        text = f"The lighthouse keeper of {name} counts seagulls every morning. " * 20
        return retrieval_pb2.SourceDocument(filename=name, content=text.encode())

    try:
        await stub.IngestDocuments(retrieval_pb2.IngestDocumentsRequest(documents=[doc("a.md")]))
        assert await _health(channel) == health_pb2.HealthCheckResponse.SERVING
        postgres_server.stop()
        try:
            for call in (
                stub.ListKnowledgeBases(retrieval_pb2.ListKnowledgeBasesRequest(), timeout=20),
                stub.IngestDocuments(
                    retrieval_pb2.IngestDocumentsRequest(documents=[doc("b.md")]), timeout=20
                ),
            ):
                with pytest.raises(grpc.aio.AioRpcError) as raised:
                    await call
                assert raised.value.code() == grpc.StatusCode.UNAVAILABLE
                assert "database" in (raised.value.details() or "")
                assert "asyncpg" not in (raised.value.details() or "")
            # Retrieve degrades as for any store failure: OK, retrieval_mode "failed", no docs.
            down = await stub.Retrieve(retrieval_pb2.RetrieveRequest(query="lighthouse"))
            assert (down.meta.retrieval_mode, list(down.docs)) == ("failed", [])
            await _until_health(channel, health_pb2.HealthCheckResponse.NOT_SERVING)
        finally:
            postgres_server.start()
        await _until_health(channel, health_pb2.HealthCheckResponse.SERVING)
        listed = await stub.ListDocuments(retrieval_pb2.ListDocumentsRequest(), timeout=20)
        assert [d.document_id for d in listed.documents] == ["a.md"]  # b.md: nothing half-written
        hits = await stub.Retrieve(retrieval_pb2.RetrieveRequest(query="lighthouse"), timeout=20)
        assert {d.document_id for d in hits.docs} == {"a.md"}
        await stub.IngestDocuments(retrieval_pb2.IngestDocumentsRequest(documents=[doc("b.md")]))
        listed = await stub.ListDocuments(retrieval_pb2.ListDocumentsRequest())
        assert [d.document_id for d in listed.documents] == ["a.md", "b.md"]
    finally:
        await channel.close()
        proc.terminate()
        proc.wait(timeout=30)
    log = (tmp_path / "service.log").read_text()
    assert "the database does not answer" in log and "the database answers again" in log
    assert "supermew-test" not in log  # the password of postgres_url
