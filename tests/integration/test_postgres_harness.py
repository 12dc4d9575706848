"""The PostgreSQL test harness (tests/postgres.py, the fixtures in conftest.py) against a real
server: the URLs it hands out connect, carry a password that is checked, and a stop and start
keep the data."""

from __future__ import annotations

import asyncpg
import pytest

from tests.postgres import PASSWORD, PostgresServer

pytestmark = pytest.mark.integration


def _dsn(url: str) -> str:
    # asyncpg takes the plain scheme; the fixtures hand out SQLAlchemy's driver-qualified one.
    return url.replace("postgresql+asyncpg://", "postgresql://", 1)


async def test_url_connects(postgres_url: str) -> None:
    assert postgres_url.startswith("postgresql+asyncpg://supermew:")
    connection = await asyncpg.connect(_dsn(postgres_url))
    try:
        assert await connection.fetchval("select 1") == 1
        # A fresh database: nothing in it yet.
        tables = await connection.fetchval(
            "select count(*) from information_schema.tables where table_schema = 'public'"
        )
        assert tables == 0
    finally:
        await connection.close()


async def test_wrong_password_is_refused(postgres_server: PostgresServer) -> None:
    postgres_server.start()
    wrong = postgres_server.url(driver="postgresql").replace(PASSWORD, "not-the-password")
    with pytest.raises(asyncpg.InvalidPasswordError):
        await asyncpg.connect(wrong)


async def test_stop_and_start_keep_the_data(
    postgres_server: PostgresServer, postgres_url: str
) -> None:
    port = postgres_server.port
    connection = await asyncpg.connect(_dsn(postgres_url))
    try:
        await connection.execute("create table kept (id int primary key, name text)")
        await connection.execute("insert into kept values (1, 'before the stop')")
    finally:
        await connection.close()

    try:
        postgres_server.stop()
        assert not postgres_server.running
        with pytest.raises(OSError):
            await asyncpg.connect(_dsn(postgres_url), timeout=5)
    finally:
        # The server is shared by the session: the tests after this one need it up.
        postgres_server.start()

    assert postgres_server.port == port
    connection = await asyncpg.connect(_dsn(postgres_url))
    try:
        assert await connection.fetchval("select name from kept where id = 1") == (
            "before the stop"
        )
    finally:
        await connection.close()
