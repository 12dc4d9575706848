"""Alembic's entry point for the orchestrator's migrations: always run online, on the
connection `shared.sql.migrate` hands over (one transaction, under the migration lock)."""

from __future__ import annotations

from alembic import context

from orchestrator_service.database.tables import metadata

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=metadata)
with context.begin_transaction():
    context.run_migrations()
