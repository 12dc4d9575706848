"""The orchestrator's tables (docs/api.md#orchestrator-database), as the stores query them; the
migrations in `migrations/versions/` create them.

- `evaluation_sets`: one row per set; `item_count` kept in the same transaction as its items.
- `evaluation_items`: a set's questions; what each expects (relevant documents, reference
  answer, expected route, tags) and its history as one JSON body.
- `evaluation_runs`: one row per run of a set: its config, state, metrics and progress; its id
  is its operation's.
- `evaluation_results`: one row per (run, item) that ran, written as the item finishes, so a
  run taken over after a restart skips what is done; holds a copy of what the item expected.
- `operations`: the long-running operations (evaluation runs), as retrieval's.
- `runs`: the run history (RUN_HISTORY): one row per Run or Resume, id its UUIDv7 run_id;
  `kb_list` holds its knowledge bases as `,a,b,` so a filter on one is an index-free LIKE.
- `feedback`: users' ratings of runs' answers, keyed by the run's id (the run may have no row)."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Column,
    ForeignKey,
    Index,
    MetaData,
    SmallInteger,
    String,
    Table,
    Text,
)

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

runs = Table(
    "runs",
    metadata,
    Column("id", String(36), primary_key=True),
    Column("kind", String(16), nullable=False),
    Column("question", Text, nullable=False),
    Column("standalone_question", Text, nullable=False, default=""),
    Column("knowledge_bases", json_type(), nullable=False),
    Column("kb_list", Text, nullable=False),
    Column("filter", Text, nullable=False, default=""),
    Column("route", String(32), nullable=False),
    Column("retrieval_status", String(32), nullable=False),
    Column("answer", Text, nullable=False, default=""),
    Column("cited", json_type(), nullable=False),
    Column("trace", json_type(none_as_null=True), nullable=True),
    Column("key_id", String(128), nullable=False, default=""),
    Column("create_time", BigInteger, nullable=False),
    Column("end_time", BigInteger, nullable=False),
    Column("feedback_rating", SmallInteger, nullable=False, default=0),
    Index("runs_create_time", "create_time"),
)

feedback = Table(
    "feedback",
    metadata,
    Column("run_id", String(36), primary_key=True),
    Column("id", String(32), primary_key=True),
    Column("rating", SmallInteger, nullable=False),
    Column("reasons", json_type(), nullable=False),
    Column("comment", Text, nullable=False, default=""),
    Column("expected", json_type(), nullable=False),
    Column("corrected_answer", Text, nullable=False, default=""),
    Column("question", Text, nullable=False, default=""),
    Column("answer", Text, nullable=False, default=""),
    Column("key_id", String(128), nullable=False, default=""),
    Column("knowledge_bases", json_type(), nullable=False),
    Column("create_time", BigInteger, nullable=False),
    Index("feedback_create_time", "create_time"),
)
