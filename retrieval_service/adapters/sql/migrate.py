"""The control-plane schema's migrations (Alembic, `migrations/versions/`): run at start-up
(MIGRATE_ON_START) or on demand (`python -m retrieval_service db upgrade`, e.g. a Kubernetes
Job), one replica at a time (PostgreSQL: an advisory lock; SQLite: the write lock), each in
one transaction. A database whose schema is newer than this code, or older with migrations
off, refuses start-up in one line saying what to do."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import text

from retrieval_service.adapters.sql.database import Database
from shared.errors import ConfigurationError

log = logging.getLogger(__name__)

SCRIPTS = Path(__file__).with_name("migrations")
#: Any constant: the key of the PostgreSQL advisory lock that serialises replicas' migrations.
_MIGRATION_LOCK = 0x5350_4D45_5700


def _config(connection: Any | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(SCRIPTS))
    config.attributes["connection"] = connection
    return config


def _scripts() -> ScriptDirectory:
    return ScriptDirectory.from_config(_config())


def head() -> str:
    """The schema revision this code needs."""
    revision = _scripts().get_current_head()
    assert revision is not None
    return revision


def _current(connection: Any) -> str | None:
    return MigrationContext.configure(connection).get_current_revision()


def _upgrade(connection: Any) -> str | None:
    before = _current(connection)
    command.upgrade(_config(connection), "head")
    return before


async def current_revision(db: Database) -> str | None:
    async with db.read("migrate") as connection:
        return await connection.run_sync(_current)


async def upgrade(db: Database) -> tuple[str | None, str]:
    """Brings the schema to `head()`; returns (the revision before, the revision after)."""
    await _refuse_newer(db)
    async with db.write("migrate") as connection:
        if db.dialect == "postgresql":
            await connection.execute(
                text("SELECT pg_advisory_xact_lock(:key)"), {"key": _MIGRATION_LOCK}
            )
        before = await connection.run_sync(_upgrade)
    after = head()
    if before != after:
        log.info("database schema migrated from %s to %s", before or "empty", after)
    return before, after


async def _refuse_newer(db: Database) -> str | None:
    current = await current_revision(db)
    known = {script.revision for script in _scripts().walk_revisions()}
    if current is not None and current not in known:
        raise ConfigurationError(
            f"DATABASE_URL={db.shown_url}: the database schema (revision {current}) is newer "
            f"than this service's ({head()}); run the release that wrote it"
        )
    return current


async def ensure_schema(db: Database, *, migrate: bool) -> None:
    """Start-up: migrate (MIGRATE_ON_START) or check that the schema is the one this code
    needs; ConfigurationError naming DATABASE_URL otherwise."""
    current = await _refuse_newer(db)
    if current == head():
        return
    if migrate:
        await upgrade(db)
        return
    raise ConfigurationError(
        f"DATABASE_URL={db.shown_url}: the database schema is at {current or 'no revision'}, "
        f"this service needs {head()}; run `python -m retrieval_service db upgrade` "
        "(or set MIGRATE_ON_START=true)"
    )
