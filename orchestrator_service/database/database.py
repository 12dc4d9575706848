"""The orchestrator's database: the shared engine (`shared/sql/`) bound to
ORCHESTRATOR_DATABASE_URL and this service's metric families. SQLite in `./data/` by default,
PostgreSQL at scale (every replica on one database)."""

from __future__ import annotations

from pathlib import Path

from orchestrator_service.metrics import DB_POOL_IN_USE, record_db_error
from shared.sql import database as shared_database
from shared.sql.database import DatabaseConfig

SETTING = "ORCHESTRATOR_DATABASE_URL"


def default_database_url() -> str:
    """ORCHESTRATOR_DATABASE_URL unset: `./data/orchestrator.sqlite3` (one host; replicas on
    several hosts need PostgreSQL)."""
    return f"sqlite+aiosqlite:///{Path('data', 'orchestrator.sqlite3').resolve()}"


class _Binding(shared_database.DatabaseBinding):
    setting = SETTING

    def pool_checked_out(self, delta: int) -> None:
        DB_POOL_IN_USE.inc(delta)

    def failed(self, operation: str) -> None:
        record_db_error(operation)


class Database(shared_database.Database):
    """The orchestrator's database on ORCHESTRATOR_DATABASE_URL."""

    def __init__(self, config: DatabaseConfig) -> None:
        super().__init__(config, _Binding())
