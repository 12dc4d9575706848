"""The control-plane schema's migrations (`migrations/versions/`, run by `shared/sql/migrate.py`):
at start-up (MIGRATE_ON_START) or by `python -m retrieval_service db upgrade`."""

from __future__ import annotations

from pathlib import Path

from retrieval_service.adapters.sql.database import Database
from shared.sql.migrate import Migrations

SCRIPTS = Path(__file__).with_name("migrations")
MIGRATIONS = Migrations(
    SCRIPTS, lock_key=0x5350_4D45_5700, command="python -m retrieval_service db upgrade"
)


def head() -> str:
    return MIGRATIONS.head()


async def current_revision(db: Database) -> str | None:
    return await MIGRATIONS.current_revision(db)


async def upgrade(db: Database) -> tuple[str | None, str]:
    return await MIGRATIONS.upgrade(db)


async def ensure_schema(db: Database, *, migrate: bool) -> None:
    await MIGRATIONS.ensure_schema(db, migrate=migrate)
