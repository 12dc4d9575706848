"""Alembic's entry point for the control-plane migrations: always run online, on the
connection `retrieval_service.adapters.sql.migrate` hands over (one transaction, under the
migration lock), never from an ini file."""

from __future__ import annotations

from alembic import context

from retrieval_service.adapters.sql.tables import metadata

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=metadata)
with context.begin_transaction():
    context.run_migrations()
