"""`python -m retrieval_service db upgrade|current` (shared/sql/db_command.py) on the
control-plane database: DATABASE_URL, or the SQLite file beside MILVUS_URI."""

from __future__ import annotations

from retrieval_service.adapters.sql.database import Database
from retrieval_service.adapters.sql.migrate import MIGRATIONS
from retrieval_service.bootstrap import database_config
from retrieval_service.settings import RetrievalSettings
from shared.sql.db_command import db_main


def _database() -> Database:
    settings = RetrievalSettings()
    return Database(database_config(settings, settings.milvus_uri))


def main(argv: list[str]) -> int:
    return db_main(
        argv,
        service="retrieval_service",
        setting="DATABASE_URL",
        database=_database,
        migrations=MIGRATIONS,
    )
