"""Long-running operations (imports) and the source each imported document came from.

Revision ID: 0003_operations
Revises: 0002_deleting_lease
Create Date: 2026-12-05
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0003_operations"
down_revision = "0002_deleting_lease"
branch_labels = None
depends_on = None


def _key(length: int = 1024) -> sa.types.TypeEngine[str]:
    return sa.String(length).with_variant(postgresql.VARCHAR(length, collation="C"), "postgresql")


def _json() -> sa.types.TypeEngine[Any]:
    return sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "operations",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("kind", sa.String(64), nullable=False),
        sa.Column("knowledge_base", _key(255), nullable=False),
        sa.Column("request_id", sa.String(128), nullable=True, unique=True),
        sa.Column("request_sha256", sa.String(64), nullable=False),
        sa.Column("request", sa.LargeBinary, nullable=False),
        sa.Column("state", sa.SmallInteger, nullable=False),
        sa.Column("cancel_requested", sa.Boolean, nullable=False),
        sa.Column("metadata", sa.LargeBinary, nullable=False),
        sa.Column("response", sa.LargeBinary, nullable=False),
        sa.Column("error", sa.LargeBinary, nullable=False),
        sa.Column("checkpoint", _json(), nullable=False),
        sa.Column("owner", sa.String(64), nullable=False),
        sa.Column("lease_expires_ms", sa.BigInteger, nullable=False),
        sa.Column("create_time", sa.BigInteger, nullable=False),
        sa.Column("update_time", sa.BigInteger, nullable=False),
    )
    # The runners' claim reads unfinished operations by state.
    op.create_index("operations_state", "operations", ["state"])
    op.create_table(
        "import_sources",
        sa.Column(
            "knowledge_base",
            _key(255),
            sa.ForeignKey("knowledge_bases.name", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("document_id", _key(), primary_key=True),
        sa.Column("source", sa.Text, nullable=False),
        sa.Column("hint", sa.Text, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("import_sources")
    op.drop_index("operations_state", "operations")
    op.drop_table("operations")
