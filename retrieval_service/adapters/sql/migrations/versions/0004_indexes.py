"""Index generations: the indexes of each knowledge base, the one every read uses
(`knowledge_bases.active_index`), and each document's extracted text, compressed, so a build
re-chunks what the knowledge base holds without the caller sending it again. The `initial`
index of every existing knowledge base is written at start-up from the service's settings
(`core/indexes/service.py`): a migration does not know them.

Revision ID: 0004_indexes
Revises: 0003_operations
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0004_indexes"
down_revision = "0003_operations"
branch_labels = None
depends_on = None


def _key(length: int = 1024) -> sa.types.TypeEngine[str]:
    return sa.String(length).with_variant(postgresql.VARCHAR(length, collation="C"), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("knowledge_bases") as table:
        table.add_column(
            sa.Column("active_index", sa.String(64), nullable=False, server_default="initial")
        )
    op.create_table(
        "indexes",
        sa.Column(
            "knowledge_base",
            _key(255),
            sa.ForeignKey("knowledge_bases.name", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("index_id", sa.String(64), primary_key=True),
        sa.Column("embedder", sa.String(128), nullable=False),
        sa.Column("dimension", sa.Integer, nullable=False),
        sa.Column("chunk_size", sa.Integer, nullable=False),
        sa.Column("chunk_overlap", sa.Integer, nullable=False),
        sa.Column("leaf_context_header", sa.Boolean, nullable=False),
        sa.Column("analyzer", sa.String(32), nullable=False),
        sa.Column("collection", sa.String(255), nullable=False),
        sa.Column("state", sa.SmallInteger, nullable=False),
        sa.Column("documents_indexed", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("documents_total", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("create_time", sa.BigInteger, nullable=False),
        sa.Column("operation", sa.String(64), nullable=False, server_default=""),
    )
    op.create_table(
        "document_texts",
        sa.Column(
            "knowledge_base",
            _key(255),
            sa.ForeignKey("knowledge_bases.name", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("document_id", _key(), primary_key=True),
        sa.Column("content_sha256", sa.String(64), primary_key=True),
        sa.Column("pages", sa.LargeBinary, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("document_texts")
    op.drop_table("indexes")
    with op.batch_alter_table("knowledge_bases") as table:
        table.drop_column("active_index")
