"""`python -m orchestrator_service db upgrade|current` (shared/sql/db_command.py) on the
orchestrator's database: ORCHESTRATOR_DATABASE_URL, or ./data/orchestrator.sqlite3."""

from __future__ import annotations

from orchestrator_service.database.database import SETTING, Database, default_database_url
from orchestrator_service.database.migrate import MIGRATIONS
from orchestrator_service.settings import OrchestratorSettings
from shared.sql.database import DatabaseConfig
from shared.sql.db_command import db_main


def _database() -> Database:
    settings = OrchestratorSettings()
    return Database(DatabaseConfig(settings.orchestrator_database_url or default_database_url()))


def main(argv: list[str]) -> int:
    return db_main(
        argv,
        service="orchestrator_service",
        setting=SETTING,
        database=_database,
        migrations=MIGRATIONS,
    )
