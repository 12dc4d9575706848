"""Index builds take the writes made while they run (docs/api.md#indexes): where each build has
read to (`indexes.build_read_to`) and the documents committed behind that point meanwhile
(`index_build_backlog`), which the build reads again once it has read every document. A write
during a build's pass then embeds once, for the active index, instead of once per index. NULL
(every index before this revision, and a build past its pass) means every write reaches the
index itself.

Revision ID: 0005_build_read_to
Revises: 0004_indexes
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0005_build_read_to"
down_revision = "0004_indexes"
branch_labels = None
depends_on = None


def _key(length: int = 1024) -> sa.types.TypeEngine[str]:
    return sa.String(length).with_variant(postgresql.VARCHAR(length, collation="C"), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("indexes") as table:
        table.add_column(sa.Column("build_read_to", _key(), nullable=True))
    op.create_table(
        "index_build_backlog",
        sa.Column("knowledge_base", _key(255), primary_key=True),
        sa.Column("index_id", sa.String(64), primary_key=True),
        sa.Column("document_id", _key(), primary_key=True),
        sa.Column("version", _key(64), nullable=False),
        sa.ForeignKeyConstraint(
            ["knowledge_base", "index_id"],
            ["indexes.knowledge_base", "indexes.index_id"],
            ondelete="CASCADE",
        ),
    )


def downgrade() -> None:
    op.drop_table("index_build_backlog")
    with op.batch_alter_table("indexes") as table:
        table.drop_column("build_read_to")
