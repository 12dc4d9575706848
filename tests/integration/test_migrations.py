"""The control-plane schema's migrations on both engines (SQLite, PostgreSQL): a database
written at an older revision, its rows included, is brought to head by start-up's
`ensure_schema` without losing any. `0002_deleting_lease` keeps every knowledge base and its
documents (SQLite's table rebuilds would cascade-delete them), and a knowledge base left
DELETING before deletions held leases is claimable at once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from alembic import command
from alembic.config import Config
from sqlalchemy import text

from retrieval_service.adapters.sql.database import Database, DatabaseConfig
from retrieval_service.adapters.sql.knowledge_bases import SqlKnowledgeBaseStore
from retrieval_service.adapters.sql.migrate import SCRIPTS, current_revision, ensure_schema, head
from retrieval_service.core.knowledge_bases import ACTIVE, DELETING, KnowledgeBaseRecord

pytestmark = [pytest.mark.integration]


def _upgrade_to(revision: str) -> Any:
    def run(connection: Any) -> None:
        config = Config()
        config.set_main_option("script_location", str(SCRIPTS))
        config.attributes["connection"] = connection
        command.upgrade(config, revision)

    return run


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path / 'control.sqlite3'}"
    return str(request.getfixturevalue("postgres_url"))


async def test_an_old_schema_is_migrated_keeping_every_row(url: str) -> None:
    db = Database(DatabaseConfig(url))
    try:
        async with db.write("migrate") as connection:
            await connection.run_sync(_upgrade_to("0001_control_plane"))
            await connection.execute(
                text(
                    "INSERT INTO knowledge_bases "
                    "(name, display_name, description, create_time, state) VALUES "
                    "('knowledge_bases/kept', 'Kept', '', 1, :active), "
                    "('knowledge_bases/doomed', '', '', 2, :deleting)"
                ),
                {"active": ACTIVE, "deleting": DELETING},
            )
            await connection.execute(
                text(
                    "INSERT INTO documents (knowledge_base, document_id, version, "
                    "content_sha256, metadata, acl, size_bytes, ingest_time, l1_chunks, "
                    "l2_chunks, l3_chunks) VALUES ('knowledge_bases/kept', 'a.md', 'v1', '', "
                    "'{}', NULL, 1, 1, 1, 1, 2)"
                )
            )
        await ensure_schema(db, migrate=True)
        assert await current_revision(db) == head()
        store = SqlKnowledgeBaseStore(db)
        assert await store.all() == [
            KnowledgeBaseRecord("knowledge_bases/doomed", "", "", 2, DELETING),
            KnowledgeBaseRecord("knowledge_bases/kept", "Kept", "", 1, ACTIVE),
        ]
        async with db.read("registry_read") as connection:
            kept = (await connection.execute(text("SELECT count(*) FROM documents"))).scalar()
        assert kept == 1
        # Left DELETING with no lease: claimable at once; the ACTIVE one never.
        assert await store.claim_deleting("reconciler", 1, 30_000) == ["knowledge_bases/doomed"]
    finally:
        await db.aclose()
