"""A service's SQL database (docs/api.md#database): one SQLAlchemy async engine on a URL
setting — SQLite (aiosqlite) in a file by default, PostgreSQL (asyncpg) at scale — its
transactions, and the one place database errors become domain errors. Each service binds it to
its own setting (retrieval: DATABASE_URL; orchestrator: ORCHESTRATOR_DATABASE_URL), its own
metric families and its own errors (`DatabaseBinding`)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import event, exc, text
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL, make_url
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from shared.errors import ConfigurationError, DependencyUnavailable, DomainError, InternalFailure

log = logging.getLogger(__name__)

#: The drivers this service speaks, by the scheme a URL may use; a scheme without a driver
#: gets the async one (`postgresql://` is `postgresql+asyncpg://`).
DRIVERS = {
    "sqlite": "sqlite+aiosqlite",
    "sqlite+aiosqlite": "sqlite+aiosqlite",
    "postgresql": "postgresql+asyncpg",
    "postgres": "postgresql+asyncpg",
    "postgresql+asyncpg": "postgresql+asyncpg",
}


def redacted(url: str | URL) -> str:
    """A URL as it may be printed: the password replaced by ***."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except exc.ArgumentError:
        return "(unparsable)"


def parse_database_url(raw: str, setting: str = "DATABASE_URL") -> URL:
    """The URL as an async driver's URL; ConfigurationError naming `setting` (never the
    password) for anything else."""
    try:
        url = make_url(raw)
    except exc.ArgumentError:
        raise ConfigurationError(
            f"{setting}: not a database URL (expected sqlite+aiosqlite:///path or "
            "postgresql+asyncpg://user:password@host:port/db)"
        ) from None
    driver = DRIVERS.get(url.drivername)
    if driver is None:
        raise ConfigurationError(
            f"{setting}={redacted(url)}: unsupported driver {url.drivername!r} "
            "(use sqlite+aiosqlite or postgresql+asyncpg)"
        )
    url = url.set(drivername=driver)
    if driver.startswith("sqlite"):
        if not url.database or url.database == ":memory:":
            raise ConfigurationError(
                f"{setting}: SQLite needs a file (sqlite+aiosqlite:///path/to/file); an "
                "in-memory database would lose every record at restart"
            )
        Path(url.database).expanduser().resolve().parent.mkdir(parents=True, exist_ok=True)
    elif not url.database:
        raise ConfigurationError(f"{setting}={redacted(url)}: names no database")
    return url


@dataclass(frozen=True, slots=True)
class DatabaseConfig:
    url: str
    pool_size: int = 10
    timeout_seconds: float = 10.0


class DatabaseBinding:
    """What one service puts around the shared engine: the setting its URL comes from (named
    in every configuration error), its metric hooks and the domain errors its core catches.
    The defaults suit a service without metrics of its own."""

    setting = "DATABASE_URL"

    def pool_checked_out(self, delta: int) -> None:
        """A connection left (+1) or returned to (-1) the pool."""

    def failed(self, operation: str) -> None:
        """A call of the store method `operation` failed."""

    def unavailable(self) -> DomainError:
        return DependencyUnavailable("database", "the database cannot be reached")

    def broken(self) -> DomainError:
        return InternalFailure("internal store failure")


#: What a database failure looks like when the server is down, unreachable, refusing the
#: credentials, or too slow: the caller may retry (UNAVAILABLE).
_UNREACHABLE = (
    exc.InterfaceError,
    exc.TimeoutError,  # the pool's checkout timeout
    exc.DisconnectionError,
    OSError,
    asyncio.TimeoutError,
)
#: Words of an OperationalError that mean "cannot reach or use the database now" (SQLite: a
#: lock held too long, a file that cannot be opened; PostgreSQL: the connection); any other
#: OperationalError (a missing table, say) is a broken store: INTERNAL.
_UNREACHABLE_WORDS = (
    "locked",
    "unable to open",
    "disk i/o",
    "connection",
    "connect",
    "timeout",
    "timed out",
    "terminat",
    "closed",
    "shutdown",
    "starting up",
)
#: asyncpg's own errors while connecting (not wrapped as DBAPI errors there).
_ASYNCPG_UNREACHABLE = (
    "Connection",
    "Password",
    "Authorization",
    "CannotConnectNow",
    "TooManyConnections",
    "AdminShutdown",
)


def _unreachable(error: BaseException) -> bool:
    if isinstance(error, _UNREACHABLE):
        return True
    if isinstance(error, exc.DBAPIError) and error.connection_invalidated:
        return True
    if isinstance(error, exc.OperationalError):
        text_ = str(error.orig).lower()
        return any(word in text_ for word in _UNREACHABLE_WORDS)
    cause = getattr(error, "orig", None) or error
    name = type(cause).__name__
    return type(cause).__module__.startswith("asyncpg") and any(
        part in name for part in _ASYNCPG_UNREACHABLE
    )


class Database:
    """The engine of one DatabaseConfig. `read()` and `write()` open a transaction (SQLite:
    a write takes the database's write lock at its start, so two writers queue instead of
    failing half-way; PostgreSQL: READ COMMITTED with row locks where a store asks for them).
    Failures leave as the binding's `unavailable()` (down, unreachable, refused, timed out) or
    `broken()` (anything else, logged), each counted by the binding's `failed`."""

    def __init__(self, config: DatabaseConfig, binding: DatabaseBinding | None = None) -> None:
        self.config = config
        self.binding = binding or DatabaseBinding()
        self.setting = self.binding.setting
        self.url = parse_database_url(config.url, self.setting)
        self.dialect = "sqlite" if self.url.drivername.startswith("sqlite") else "postgresql"
        timeout = config.timeout_seconds
        options: dict[str, Any] = {"pool_pre_ping": True}
        if self.dialect == "sqlite":
            options["connect_args"] = {"timeout": timeout}
            options["pool_size"] = config.pool_size
        else:
            options["connect_args"] = {"timeout": timeout, "command_timeout": timeout}
            options["pool_size"] = config.pool_size
            options["max_overflow"] = 0
            options["pool_timeout"] = timeout
        self.engine: AsyncEngine = create_async_engine(self.url, **options)
        self._writer = self.engine.execution_options(sqlite_immediate=True)
        self._instrument(self.engine)

    def _instrument(self, engine: AsyncEngine) -> None:
        sync = engine.sync_engine

        @event.listens_for(sync.pool, "checkout")
        def _checkout(*_: Any) -> None:
            self.binding.pool_checked_out(1)

        @event.listens_for(sync.pool, "checkin")
        def _checkin(*_: Any) -> None:
            self.binding.pool_checked_out(-1)

        if self.dialect != "sqlite":
            return

        @event.listens_for(sync, "connect")
        def _connect(dbapi_connection: Any, _record: Any) -> None:
            # SQLAlchemy, not the driver, decides when a transaction begins (`_begin`).
            dbapi_connection.isolation_level = None
            cursor = dbapi_connection.cursor()
            busy_ms = int(self.config.timeout_seconds * 1000)
            for pragma in (
                "journal_mode=WAL",  # readers never wait for the writer
                "synchronous=NORMAL",
                "foreign_keys=ON",
                f"busy_timeout={busy_ms}",
            ):
                cursor.execute(f"PRAGMA {pragma}")
            cursor.close()

        @event.listens_for(sync, "begin")
        def _begin(connection: Any) -> None:
            immediate = connection.get_execution_options().get("sqlite_immediate")
            connection.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    @property
    def shown_url(self) -> str:
        return redacted(self.url)

    @asynccontextmanager
    async def read(self, operation: str) -> AsyncIterator[AsyncConnection]:
        async with self._transaction(self.engine, operation) as connection:
            yield connection

    @asynccontextmanager
    async def write(self, operation: str) -> AsyncIterator[AsyncConnection]:
        """One transaction that commits when the block ends, or changes nothing."""
        async with self._transaction(self._writer, operation) as connection:
            yield connection

    @asynccontextmanager
    async def _transaction(
        self, engine: AsyncEngine, operation: str
    ) -> AsyncIterator[AsyncConnection]:
        try:
            async with engine.begin() as connection:
                yield connection
        except DomainError:
            raise
        except Exception as error:
            raise self.translate(error, operation) from error

    def translate(self, error: BaseException, operation: str) -> DomainError:
        self.binding.failed(operation)
        if _unreachable(error):
            log.warning("the database is unavailable (%s): %s", operation, type(error).__name__)
            return self.binding.unavailable()
        log.error("database call %s failed", operation, exc_info=error)
        return self.binding.broken()

    async def ping(self) -> bool:
        """Whether the database answers `SELECT 1` within the configured timeout."""
        try:
            async with asyncio.timeout(self.config.timeout_seconds):
                async with self.engine.connect() as connection:
                    await connection.execute(text("SELECT 1"))
            return True
        except Exception:  # any failure means "not ready"; the reason is in the next call's log
            return False

    async def check_reachable(self) -> None:
        """Start-up: ConfigurationError in one line naming the setting (its password hidden)
        when the database cannot be opened, reached or logged into."""
        try:
            async with asyncio.timeout(self.config.timeout_seconds):
                async with self.engine.connect() as connection:
                    await connection.execute(text("SELECT 1"))
        except Exception as error:
            self.binding.failed("connect")
            raise ConfigurationError(
                f"{self.setting}={self.shown_url}: cannot connect to the database "
                f"({_reason(error)})"
            ) from None

    async def aclose(self) -> None:
        await self.engine.dispose()


def _reason(error: BaseException) -> str:
    """A short reason for a failed connection, without the URL or password."""
    name = type(getattr(error, "orig", None) or error).__name__
    known = {
        "InvalidPasswordError": "wrong user name or password",
        "InvalidAuthorizationSpecificationError": "the user is not allowed to log in",
        "InvalidCatalogNameError": "the database does not exist",
        "ConnectionRefusedError": "connection refused",
        "TimeoutError": "timed out",
        "gaierror": "unknown host",
    }
    if name in known:
        return known[name]
    text_ = str(getattr(error, "orig", None) or error).lower()
    for needle, reason in (
        ("password", "wrong user name or password"),
        ("does not exist", "the database or user does not exist"),
        ("refused", "connection refused"),
        ("unable to open", "cannot open the database file"),
        ("name or service not known", "unknown host"),
        ("timed out", "timed out"),
    ):
        if needle in text_:
            return reason
    return name


def dialect_insert(db: Database, table: Any) -> Any:
    """INSERT with the engine's ON CONFLICT clauses."""
    return (postgresql.insert if db.dialect == "postgresql" else sqlite.insert)(table)


def upsert(db: Database, table: Any, keys: Sequence[str]) -> Any:
    """INSERT … ON CONFLICT (keys) DO UPDATE of every other column."""
    statement = dialect_insert(db, table)
    changed = {c.name: statement.excluded[c.name] for c in table.c if c.name not in keys}
    return statement.on_conflict_do_update(index_elements=list(keys), set_=changed)
