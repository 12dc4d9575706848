"""The control plane in SQL: knowledge bases, documents and their versions (with leases), and
the record of completed moves from older layouts.

Revision ID: 0001_control_plane
Revises:
Create Date: 2026-12-05
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0001_control_plane"
down_revision = None
branch_labels = None
depends_on = None


def _key(length: int = 1024) -> sa.types.TypeEngine[str]:
    return sa.String(length).with_variant(postgresql.VARCHAR(length, collation="C"), "postgresql")


def _json() -> sa.types.TypeEngine[Any]:
    return sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "knowledge_bases",
        sa.Column("name", _key(255), primary_key=True),
        sa.Column("display_name", sa.Text, nullable=False),
        sa.Column("description", sa.Text, nullable=False),
        sa.Column("create_time", sa.BigInteger, nullable=False),
        sa.Column("state", sa.SmallInteger, nullable=False),
    )
    op.create_table(
        "document_versions",
        sa.Column(
            "knowledge_base",
            _key(255),
            sa.ForeignKey("knowledge_bases.name", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("document_id", _key(), primary_key=True),
        sa.Column("version", _key(64), primary_key=True),
        sa.Column("state", sa.SmallInteger, nullable=False),
        sa.Column("filename", sa.Text, nullable=False),
        sa.Column("file_type", sa.String(32), nullable=False),
        sa.Column("pages", sa.Integer, nullable=False),
        sa.Column("page_counts", _json(), nullable=False),
        sa.Column("metadata", _json(), nullable=False),
        sa.Column("content_sha256", sa.String(64), nullable=False),
        sa.Column("size_bytes", sa.BigInteger, nullable=False),
        sa.Column("ingest_time", sa.BigInteger, nullable=False),
        sa.Column("fingerprint", sa.Text, nullable=False),
        sa.Column("lease_expires_ms", sa.BigInteger, nullable=False),
    )
    op.create_table(
        "documents",
        sa.Column(
            "knowledge_base",
            _key(255),
            sa.ForeignKey("knowledge_bases.name", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("document_id", _key(), primary_key=True),
        sa.Column("version", _key(64), nullable=False),
        sa.Column("content_sha256", sa.String(64), nullable=False),
        sa.Column("metadata", _json(), nullable=False),
        sa.Column("acl", _json(), nullable=True),
        sa.Column("size_bytes", sa.BigInteger, nullable=False),
        sa.Column("ingest_time", sa.BigInteger, nullable=False),
        sa.Column("l1_chunks", sa.Integer, nullable=False),
        sa.Column("l2_chunks", sa.Integer, nullable=False),
        sa.Column("l3_chunks", sa.Integer, nullable=False),
    )
    op.create_table(
        "control_plane_upgrades",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("completed_time", sa.BigInteger, nullable=False),
        sa.Column("note", sa.Text, nullable=False),
    )


def downgrade() -> None:
    for table in ("control_plane_upgrades", "documents", "document_versions", "knowledge_bases"):
        op.drop_table(table)
