"""A schema's migrations (Alembic scripts in a service's `migrations/versions/`): run at
start-up (MIGRATE_ON_START) or on demand (`python -m <service> db upgrade`, e.g. a Kubernetes
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

from shared.errors import ConfigurationError
from shared.sql.database import Database

log = logging.getLogger(__name__)


def _current(connection: Any) -> str | None:
    return MigrationContext.configure(connection).get_current_revision()


class Migrations:
    """One schema's migration scripts. `lock_key`: any constant, distinct per schema (the
    PostgreSQL advisory lock that serialises replicas' migrations); `command`: what an operator
    runs to migrate by hand."""

    def __init__(self, scripts: Path, *, lock_key: int, command: str) -> None:
        self.scripts = scripts
        self._lock_key = lock_key
        self._command = command

    def _config(self, connection: Any | None = None) -> Config:
        config = Config()
        config.set_main_option("script_location", str(self.scripts))
        config.attributes["connection"] = connection
        return config

    def _script_directory(self) -> ScriptDirectory:
        return ScriptDirectory.from_config(self._config())

    def head(self) -> str:
        """The schema revision this code needs."""
        revision = self._script_directory().get_current_head()
        assert revision is not None
        return revision

    def _upgrade(self, connection: Any) -> str | None:
        before = _current(connection)
        command.upgrade(self._config(connection), "head")
        return before

    async def current_revision(self, db: Database) -> str | None:
        async with db.read("migrate") as connection:
            return await connection.run_sync(_current)

    async def upgrade(self, db: Database) -> tuple[str | None, str]:
        """Brings the schema to `head()`; returns (the revision before, the revision after)."""
        await self._refuse_newer(db)
        async with db.write("migrate") as connection:
            if db.dialect == "postgresql":
                await connection.execute(
                    text("SELECT pg_advisory_xact_lock(:key)"), {"key": self._lock_key}
                )
            before = await connection.run_sync(self._upgrade)
        after = self.head()
        if before != after:
            log.info("database schema migrated from %s to %s", before or "empty", after)
        return before, after

    async def _refuse_newer(self, db: Database) -> str | None:
        current = await self.current_revision(db)
        known = {script.revision for script in self._script_directory().walk_revisions()}
        if current is not None and current not in known:
            raise ConfigurationError(
                f"{db.setting}={db.shown_url}: the database schema (revision {current}) is "
                f"newer than this service's ({self.head()}); run the release that wrote it"
            )
        return current

    async def ensure_schema(self, db: Database, *, migrate: bool) -> None:
        """Start-up: migrate (MIGRATE_ON_START) or check that the schema is the one this code
        needs; ConfigurationError naming the database setting otherwise."""
        current = await self._refuse_newer(db)
        if current == self.head():
            return
        if migrate:
            await self.upgrade(db)
            return
        raise ConfigurationError(
            f"{db.setting}={db.shown_url}: the database schema is at "
            f"{current or 'no revision'}, this service needs {self.head()}; run "
            f"`{self._command}` (or set MIGRATE_ON_START=true)"
        )
