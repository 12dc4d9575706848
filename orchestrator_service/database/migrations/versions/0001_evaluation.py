"""The orchestrator's first schema: evaluation sets, items, runs, results, operations, the run
history and feedback.

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
    op.create_table(
        "runs",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("question", sa.Text, nullable=False),
        sa.Column("standalone_question", sa.Text, nullable=False),
        sa.Column("knowledge_bases", _json(), nullable=False),
        sa.Column("kb_list", sa.Text, nullable=False),
        sa.Column("filter", sa.Text, nullable=False),
        sa.Column("route", sa.String(32), nullable=False),
        sa.Column("retrieval_status", sa.String(32), nullable=False),
        sa.Column("answer", sa.Text, nullable=False),
        sa.Column("cited", _json(), nullable=False),
        sa.Column("trace", _json(), nullable=True),
        sa.Column("key_id", sa.String(128), nullable=False),
        sa.Column("create_time", sa.BigInteger, nullable=False),
        sa.Column("end_time", sa.BigInteger, nullable=False),
        sa.Column("feedback_rating", sa.SmallInteger, nullable=False),
    )
    op.create_index("runs_create_time", "runs", ["create_time"])
    op.create_table(
        "feedback",
        sa.Column("run_id", sa.String(36), primary_key=True),
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("rating", sa.SmallInteger, nullable=False),
        sa.Column("reasons", _json(), nullable=False),
        sa.Column("comment", sa.Text, nullable=False),
        sa.Column("expected", _json(), nullable=False),
        sa.Column("corrected_answer", sa.Text, nullable=False),
        sa.Column("question", sa.Text, nullable=False),
        sa.Column("answer", sa.Text, nullable=False),
        sa.Column("key_id", sa.String(128), nullable=False),
        sa.Column("knowledge_bases", _json(), nullable=False),
        sa.Column("create_time", sa.BigInteger, nullable=False),
    )
    op.create_index("feedback_create_time", "feedback", ["create_time"])


def downgrade() -> None:
    op.drop_index("feedback_create_time", "feedback")
    op.drop_index("runs_create_time", "runs")
    op.drop_index("operations_state", "operations")
    for table in (
        "feedback",
        "runs",
        "operations",
        "evaluation_results",
        "evaluation_runs",
        "evaluation_items",
    ):
        op.drop_table(table)
    op.drop_table("evaluation_sets")
