"""The control-plane tables (docs/api.md#database), as the stores query them; the migrations in
`migrations/versions/` create them. Keys compare byte-wise on every engine (PostgreSQL's "C"
collation, SQLite's default), so pages come in the same order as the document ids' UTF-8
bytes whatever the server's locale.

- `knowledge_bases`: one row per knowledge base, name unique (the primary key).
- `document_versions`: one row per version of a document (PENDING, COMMITTED, TOMBSTONE), its
  chunk counts per page, metadata, fingerprint and its writer's lease.
- `documents`: the current version of each live document (knowledge base + document_id
  unique), kept in the same transaction as every write of `document_versions`, with its
  per-level chunk counts and `acl`, so counts and listings read it instead of scanning.
- `control_plane_upgrades`: the moves of older layouts that completed (`upgrade.py`).
- `operations`: the long-running operations (imports), their progress, outcome and the lease of
  the replica running them; `request_id` unique (AIP-155).
- `indexes`: the indexes of each knowledge base (docs/api.md#indexes), their config, state,
  build counts, the generation's collection base name and where a build has read to;
  `knowledge_bases.active_index` is the id of the one every read uses.
- `index_build_backlog`: the documents committed during a build's pass behind where it had read,
  with their version, which it reads again once its pass is done (a write during the pass
  writes the active index only).
- `document_texts`: each document's extracted pages, compressed, by content digest (a version
  that changes only the metadata shares its predecessor's), what an index build re-chunks.
- `import_sources`: which source (an import's uri) brought each document in, and the source's
  change hint (an S3 ETag, a file's size and mtime), for `delete_missing` and for skipping
  unchanged objects without reading them."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    ForeignKey,
    ForeignKeyConstraint,
    Integer,
    LargeBinary,
    MetaData,
    SmallInteger,
    String,
    Table,
    Text,
)

from shared.sql.columns import json_type, key_type
from shared.sql.operations import operations_table

metadata = MetaData()


knowledge_bases = Table(
    "knowledge_bases",
    metadata,
    Column("name", key_type(255), primary_key=True),
    Column("display_name", Text, nullable=False, default=""),
    Column("description", Text, nullable=False, default=""),
    Column("create_time", BigInteger, nullable=False),
    Column("state", SmallInteger, nullable=False, default=0),
    # A DELETING record's deleter and the end of its lease (epoch ms), renewed while it purges.
    Column("deleter", String(32), nullable=False, default=""),
    Column("deleting_until_ms", BigInteger, nullable=False, default=0),
    Column("active_index", String(64), nullable=False, default="initial"),
)

document_versions = Table(
    "document_versions",
    metadata,
    Column(
        "knowledge_base",
        key_type(255),
        ForeignKey("knowledge_bases.name", ondelete="CASCADE"),
        primary_key=True,
    ),
    Column("document_id", key_type(), primary_key=True),
    Column("version", key_type(64), primary_key=True),
    Column("state", SmallInteger, nullable=False),
    Column("filename", Text, nullable=False),
    Column("file_type", String(32), nullable=False),
    Column("pages", Integer, nullable=False),
    Column("page_counts", json_type(), nullable=False),
    Column("metadata", json_type(), nullable=False),
    Column("content_sha256", String(64), nullable=False, default=""),
    Column("size_bytes", BigInteger, nullable=False, default=0),
    Column("ingest_time", BigInteger, nullable=False, default=0),
    Column("fingerprint", Text, nullable=False, default=""),
    Column("lease_expires_ms", BigInteger, nullable=False, default=0),
)

documents = Table(
    "documents",
    metadata,
    Column(
        "knowledge_base",
        key_type(255),
        ForeignKey("knowledge_bases.name", ondelete="CASCADE"),
        primary_key=True,
    ),
    Column("document_id", key_type(), primary_key=True),
    Column("version", key_type(64), nullable=False),
    Column("content_sha256", String(64), nullable=False, default=""),
    Column("metadata", json_type(), nullable=False),
    # The document's `acl` (metadata["acl"]) as stored, null when it has none: counts for a
    # key with groups read only the documents that have one.
    Column("acl", json_type(none_as_null=True), nullable=True),
    Column("size_bytes", BigInteger, nullable=False, default=0),
    Column("ingest_time", BigInteger, nullable=False, default=0),
    Column("l1_chunks", Integer, nullable=False, default=0),
    Column("l2_chunks", Integer, nullable=False, default=0),
    Column("l3_chunks", Integer, nullable=False, default=0),
)

control_plane_upgrades = Table(
    "control_plane_upgrades",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("completed_time", BigInteger, nullable=False),
    Column("note", Text, nullable=False, default=""),
)

operations = operations_table(metadata)

import_sources = Table(
    "import_sources",
    metadata,
    Column(
        "knowledge_base",
        key_type(255),
        ForeignKey("knowledge_bases.name", ondelete="CASCADE"),
        primary_key=True,
    ),
    Column("document_id", key_type(), primary_key=True),
    Column("source", Text, nullable=False),
    Column("hint", Text, nullable=False, default=""),
)

indexes = Table(
    "indexes",
    metadata,
    Column(
        "knowledge_base",
        key_type(255),
        ForeignKey("knowledge_bases.name", ondelete="CASCADE"),
        primary_key=True,
    ),
    Column("index_id", String(64), primary_key=True),
    Column("embedder", String(128), nullable=False),
    Column("dimension", Integer, nullable=False),
    Column("chunk_size", Integer, nullable=False),
    Column("chunk_overlap", Integer, nullable=False),
    Column("leaf_context_header", Boolean, nullable=False),
    Column("analyzer", String(32), nullable=False),
    Column("collection", String(255), nullable=False),
    Column("state", SmallInteger, nullable=False),
    Column("documents_indexed", BigInteger, nullable=False, default=0),
    Column("documents_total", BigInteger, nullable=False, default=0),
    Column("create_time", BigInteger, nullable=False),
    Column("operation", String(64), nullable=False, default=""),
    Column("build_read_to", key_type(), nullable=True),
)

index_build_backlog = Table(
    "index_build_backlog",
    metadata,
    Column("knowledge_base", key_type(255), primary_key=True),
    Column("index_id", String(64), primary_key=True),
    Column("document_id", key_type(), primary_key=True),
    Column("version", key_type(64), nullable=False),
    ForeignKeyConstraint(
        ["knowledge_base", "index_id"],
        ["indexes.knowledge_base", "indexes.index_id"],
        ondelete="CASCADE",
    ),
)

document_texts = Table(
    "document_texts",
    metadata,
    Column(
        "knowledge_base",
        key_type(255),
        ForeignKey("knowledge_bases.name", ondelete="CASCADE"),
        primary_key=True,
    ),
    Column("document_id", key_type(), primary_key=True),
    Column("content_sha256", String(64), primary_key=True),
    Column("pages", LargeBinary, nullable=False),
)
