"""Fixtures of the integration tests that need a real PostgreSQL server.

`postgres_server` is one throwaway cluster for the whole session (tests/postgres.py starts it
and removes it); `postgres_url` is a fresh, empty database on it for one test. Both skip the
test when no PostgreSQL binaries are installed (CI installs them, .ci/run)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.postgres import PostgresServer, skip_reason


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A started PostgreSQL server, shared by the session. A test that stop()s it must
    start() it again before it ends (a `finally`), for the tests after it."""
    reason = skip_reason()
    if reason is not None:
        pytest.skip(reason)
    with PostgresServer() as server:
        yield server


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> str:
    """The `postgresql+asyncpg://` URL of a new empty database, for this test alone."""
    # A test that left the shared server stopped must not fail every test after it.
    postgres_server.start()
    return postgres_server.create_database(f"test_{uuid.uuid4().hex[:16]}")
