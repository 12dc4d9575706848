"""The orchestrator's first schema: evaluation sets, items, runs, results and operations.

Revision ID: 0001_evaluation
Revises:
Create Date: 2026-12-05
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0001_evaluation"
down_revision = None
branch_labels = None
depends_on = None


def _key(length: int) -> sa.types.TypeEngine[str]:
    return sa.String(length).with_variant(postgresql.VARCHAR(length, collation="C"), "postgresql")


def _json() -> sa.types.TypeEngine[Any]:
    return sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def _set_key() -> sa.Column[Any]:
    return sa.Column(
        "set_id",
        _key(63),
        sa.ForeignKey("evaluation_sets.id", ondelete="CASCADE"),
        primary_key=True,
    )


def upgrade() -> None:
    op.create_table(
        "evaluation_sets",
        sa.Column("id", _key(63), primary_key=True),
        sa.Column("display_name", sa.Text, nullable=False),
        sa.Column("knowledge_bases", _json(), nullable=False),
        sa.Column("filter", sa.Text, nullable=False),
        sa.Column("item_count", sa.BigInteger, nullable=False),
        sa.Column("create_time", sa.BigInteger, nullable=False),
    )
    op.create_table(
        "evaluation_items",
        _set_key(),
        sa.Column("id", _key(128), primary_key=True),
        sa.Column("question", sa.Text, nullable=False),
        sa.Column("body", _json(), nullable=False),
        sa.Column("create_time", sa.BigInteger, nullable=False),
    )
    op.create_table(
        "evaluation_runs",
        _set_key(),
        sa.Column("id", _key(32), primary_key=True),
        sa.Column("config", _json(), nullable=False),
        sa.Column("state", sa.SmallInteger, nullable=False),
        sa.Column("metrics", _json(), nullable=False),
        sa.Column("items_total", sa.BigInteger, nullable=False),
        sa.Column("items_done", sa.BigInteger, nullable=False),
        sa.Column("items_failed", sa.BigInteger, nullable=False),
        sa.Column("create_time", sa.BigInteger, nullable=False),
        sa.Column("end_time", sa.BigInteger, nullable=True),
    )
    # Results outlive nothing: a set's deletion removes them with its runs (the store does).
    op.create_table(
        "evaluation_results",
        sa.Column("set_id", _key(63), primary_key=True),
        sa.Column("run_id", _key(32), primary_key=True),
        sa.Column("item_id", _key(128), primary_key=True),
        sa.Column("body", _json(), nullable=False),
    )
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
    op.create_index("operations_state", "operations", ["state"])


def downgrade() -> None:
    op.drop_index("operations_state", "operations")
    for table in ("operations", "evaluation_results", "evaluation_runs", "evaluation_items"):
        op.drop_table(table)
    op.drop_table("evaluation_sets")
