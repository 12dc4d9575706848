"""The orchestrator's tables (docs/api.md#orchestrator-database), as the stores query them; the
migrations in `migrations/versions/` create them.

- `evaluation_sets`: one row per set; `item_count` kept in the same transaction as its items.
- `evaluation_items`: a set's questions; what each expects (relevant documents, reference
  answer, expected route, tags) and its history as one JSON body.
- `evaluation_runs`: one row per run of a set: its config, state, metrics and progress; its id
  is its operation's.
- `evaluation_results`: one row per (run, item) that ran, written as the item finishes, so a
  run taken over after a restart skips what is done; holds a copy of what the item expected.
- `operations`: the long-running operations (evaluation runs), as retrieval's."""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, ForeignKey, MetaData, SmallInteger, Table, Text

from shared.sql.columns import json_type, key_type
from shared.sql.operations import operations_table

metadata = MetaData()

evaluation_sets = Table(
    "evaluation_sets",
    metadata,
    Column("id", key_type(63), primary_key=True),
    Column("display_name", Text, nullable=False, default=""),
    Column("knowledge_bases", json_type(), nullable=False),
    Column("filter", Text, nullable=False, default=""),
    Column("item_count", BigInteger, nullable=False, default=0),
    Column("create_time", BigInteger, nullable=False),
)

evaluation_items = Table(
    "evaluation_items",
    metadata,
    Column(
        "set_id",
        key_type(63),
        ForeignKey("evaluation_sets.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    Column("id", key_type(128), primary_key=True),
    Column("question", Text, nullable=False),
    Column("body", json_type(), nullable=False),
    Column("create_time", BigInteger, nullable=False),
)

evaluation_runs = Table(
    "evaluation_runs",
    metadata,
    Column(
        "set_id",
        key_type(63),
        ForeignKey("evaluation_sets.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    Column("id", key_type(32), primary_key=True),
    Column("config", json_type(), nullable=False),
    Column("state", SmallInteger, nullable=False),
    Column("metrics", json_type(), nullable=False),
    Column("items_total", BigInteger, nullable=False, default=0),
    Column("items_done", BigInteger, nullable=False, default=0),
    Column("items_failed", BigInteger, nullable=False, default=0),
    Column("create_time", BigInteger, nullable=False),
    Column("end_time", BigInteger, nullable=True),
)

evaluation_results = Table(
    "evaluation_results",
    metadata,
    Column("set_id", key_type(63), primary_key=True),
    Column("run_id", key_type(32), primary_key=True),
    Column("item_id", key_type(128), primary_key=True),
    Column("body", json_type(), nullable=False),
)

operations = operations_table(metadata)
