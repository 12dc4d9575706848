"""A DELETING knowledge base's deleter and lease: reconciliation on any replica finishes a
deletion only once its deleter stopped renewing, and only the current deleter removes the record.

Revision ID: 0002_deleting_lease
Revises: 0001_control_plane
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002_deleting_lease"
down_revision = "0001_control_plane"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Records DELETING before this revision carry no lease (0): claimable at once, as a
    # crashed deletion's were.
    with op.batch_alter_table("knowledge_bases") as table:
        table.add_column(sa.Column("deleter", sa.String(32), nullable=False, server_default=""))
        table.add_column(
            sa.Column("deleting_until_ms", sa.BigInteger, nullable=False, server_default="0")
        )


def downgrade() -> None:
    with op.batch_alter_table("knowledge_bases") as table:
        table.drop_column("deleting_until_ms")
        table.drop_column("deleter")
