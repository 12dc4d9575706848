"""The in-place upgrades of a store written by an earlier layout, at start-up, into the `_v4`
collections (whose registry and knowledge-base records then move into the control-plane
database: `adapters/sql/upgrade.py`); nothing is embedded again:

- `_v3` (knowledge bases, before document access: docs/api.md#document-access): every row is
  copied as it is, each chunk row given its document's `acl` column (`filters.acl_column`,
  from the metadata it carries); the registry and the knowledge-base records unchanged.
- `_v2` (before knowledge bases, docs/api.md#knowledge-bases): every chunk row is copied with
  its vector (knowledge base `knowledge_bases/default`, document_id = its filename, no
  metadata, ingest time = its version's timestamp) and every registry record likewise.

Crash-safe: a copy is idempotent (rows keep their primary keys, so a copy repeated after a
crash replaces what the first one wrote), the completion marker is written only after
everything was copied and flushed, and the old collections are dropped only after the marker;
a start that finds the marker drops whatever old collection is left."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from retrieval_service.adapters.milvus.connection import MilvusStore, quote
from retrieval_service.adapters.milvus.filters import acl_column
from retrieval_service.adapters.milvus.registry import row_of
from retrieval_service.adapters.milvus.schema import (
    KNOWLEDGE_BASE_FIELDS,
    REGISTRY_FIELDS,
    REGISTRY_VECTOR_DIM,
)
from retrieval_service.core.documents import LEVELS, DocumentEntry, version_time_ms
from retrieval_service.core.identity import DEFAULT_KB

log = logging.getLogger(__name__)

#: The row of the knowledge-base collection that says the upgrade completed (not a
#: knowledge base's name: those start with `knowledge_bases/`).
UPGRADE_MARKER = "upgrade/v2"
V3_UPGRADE_MARKER = "upgrade/v3"
#: The chunk fields of the `_v2` layout (its sparse field is its BM25 function's output).
V2_CHUNK_FIELDS = [
    "pk",
    "chunk_id",
    "version",
    "text",
    "bm25_text",
    "dense",
    "filename",
    "file_type",
    "file_path",
    "page_number",
    "parent_chunk_id",
    "root_chunk_id",
    "chunk_level",
    "chunk_idx",
]
V2_REGISTRY_FIELDS = ["filename", "version", "state", "file_type", "pages", "page_counts"]
#: The chunk fields of the `_v3` layout: `_v4`'s but the `acl` column.
V3_CHUNK_FIELDS = [
    *V2_CHUNK_FIELDS,
    "knowledge_base",
    "document_id",
    "metadata",
    "ingest_time",
]
_BATCH = 256


def upgraded_chunk(row: dict[str, Any]) -> dict[str, Any]:
    """A `_v2` chunk row as a current one: in the default knowledge base, its filename as its
    document_id, no metadata, ingested when its version was started."""
    out = {name: row[name] for name in V2_CHUNK_FIELDS}
    out["dense"] = [float(x) for x in row["dense"]]
    out["knowledge_base"] = DEFAULT_KB
    out["document_id"] = row["filename"]
    out["metadata"] = {}
    out["ingest_time"] = version_time_ms(row["version"])
    out["acl"] = acl_column(None)
    return out


def v3_chunk(row: dict[str, Any]) -> dict[str, Any]:
    """A `_v3` chunk row as a `_v4` one: the same, with its document's `acl` column."""
    out = {name: row[name] for name in V3_CHUNK_FIELDS}
    out["dense"] = [float(x) for x in row["dense"]]
    out["acl"] = acl_column(row["metadata"])
    return out


def upgraded_record(row: dict[str, Any]) -> dict[str, Any]:
    """A `_v2` registry record as a current one (no content hash, size or fingerprint: a
    document stored before knowledge bases is never `unchanged`)."""
    entry = DocumentEntry(
        filename=row["filename"],
        file_type=row["file_type"],
        pages=int(row["pages"]),
        page_counts=json.loads(row["page_counts"]),
        version=row["version"],
        state=int(row["state"]),
        ingest_time=version_time_ms(row["version"]),
    )
    return row_of(entry)


def _copy(
    client: Any,
    source: str,
    target: str,
    fields: list[str],
    convert: Any,
    write: Any,
    key: str = "pk",
) -> int:
    client.load_collection(source)
    iterator = client.query_iterator(
        source, batch_size=_BATCH, filter=f'{key} != ""', output_fields=fields
    )
    copied = 0
    try:
        while batch := iterator.next():
            write(target, [convert(dict(r)) for r in batch])
            copied += len(batch)
    finally:
        iterator.close()
    return copied


@dataclass(frozen=True, slots=True)
class Copy:
    """One collection of an old layout and how its rows become the current collection's."""

    source: str
    target: str
    fields: list[str]
    convert: Callable[[dict[str, Any]], dict[str, Any]]
    chunks: bool = False  # written as the chunk store writes (see `_upgrade`)
    key: str = "pk"


def _as_is(row: dict[str, Any]) -> dict[str, Any]:
    return row


def _upgrade(
    client: Any, milvus: MilvusStore, layout: list[str], marker_name: str, copies: list[Copy]
) -> bool:
    """Copies an old layout's collections (`layout`, those that exist) into the current ones
    unless its marker row says it was done, writes the marker, then drops them; returns
    whether there were any (the module docstring says why each step is where it is)."""
    old = [name for name in layout if client.has_collection(name)]
    if not old:
        return False
    marker = milvus.knowledge_base_collection
    if not client.query(marker, filter=f"name == {quote(marker_name)}", output_fields=["name"]):
        started = time.monotonic()
        log.info("upgrading the store of %s in place (no re-embedding)", ", ".join(old))
        # Chunk rows go the chunk store's way: Lite's insert replaces a row of the same key.
        chunk_write = client.insert if milvus.config.embedded else client.upsert
        copied = {}
        for c in copies:
            if client.has_collection(c.source):
                write = chunk_write if c.chunks else client.upsert
                copied[c.source] = _copy(
                    client, c.source, c.target, c.fields, c.convert, write, c.key
                )
        for name in [*milvus.all_collections(), *milvus.control_collections()]:
            client.flush(name)
        _mark(client, marker, marker_name, old)
        counts = ", ".join(f"{n} rows of {name}" for name, n in copied.items())
        log.info("upgraded %s in %.1f s", counts, time.monotonic() - started)
    for name in old:
        client.drop_collection(name)
        log.info("dropped the upgraded collection %s", name)
    return True


def _mark(client: Any, marker: str, name: str, old: list[str]) -> None:
    client.upsert(
        marker,
        [
            {
                "name": name,
                "display_name": "",
                "description": f"upgraded from {', '.join(old)}",
                "create_time": int(time.time() * 1000),
                "state": 0,
                "marker": [0.0] * REGISTRY_VECTOR_DIM,
            }
        ],
    )
    client.flush(marker)


def upgrade_v2(client: Any, milvus: MilvusStore) -> bool:
    """Upgrades a `_v2` store into the `_v4` collections (which exist and are loaded);
    returns whether there was one. Runs in the store's worker thread (`MilvusStore.run`)."""
    *levels, registry = layout = milvus.v2_collections()
    copies = [
        Copy(source, milvus.level_collection(level), V2_CHUNK_FIELDS, upgraded_chunk, True)
        for level, source in zip(LEVELS, levels, strict=True)
    ]
    fields = ["pk", *V2_REGISTRY_FIELDS]
    copies.append(Copy(registry, milvus.registry_collection, fields, upgraded_record))
    return _upgrade(client, milvus, layout, UPGRADE_MARKER, copies)


def upgrade_v3(client: Any, milvus: MilvusStore) -> bool:
    """Upgrades a `_v3` store into the `_v4` collections (which exist and are loaded);
    returns whether there was one. Runs in the store's worker thread (`MilvusStore.run`)."""
    *levels, registry, knowledge_bases = layout = milvus.v3_collections()
    copies = [
        Copy(source, milvus.level_collection(level), V3_CHUNK_FIELDS, v3_chunk, True)
        for level, source in zip(LEVELS, levels, strict=True)
    ]
    fields = ["pk", *REGISTRY_FIELDS, "marker"]
    copies.append(Copy(registry, milvus.registry_collection, fields, _as_is))
    fields = ["name", *KNOWLEDGE_BASE_FIELDS[1:], "marker"]
    target = milvus.knowledge_base_collection
    copies.append(Copy(knowledge_bases, target, fields, _as_is, key="name"))
    return _upgrade(client, milvus, layout, V3_UPGRADE_MARKER, copies)
