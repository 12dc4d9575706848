"""The in-place upgrade of a store written before knowledge bases (the `_v2` layout,
docs/api.md#knowledge-bases): at start-up, every chunk row is copied with its vector into the
`_v3` collections (knowledge base `knowledge_bases/default`, document_id = its filename, no
metadata, ingest time = its version's timestamp) and every registry record likewise; nothing is
embedded again. Crash-safe: the copy is idempotent (rows keep their primary keys, so a copy
repeated after a crash replaces what the first one wrote), the completion marker is written
only after everything was copied and flushed, and the old collections are dropped only after
the marker; a start that finds the marker drops whatever old collection is left."""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from retrieval_service.adapters.milvus.connection import MilvusStore, quote
from retrieval_service.adapters.milvus.registry import row_of
from retrieval_service.adapters.milvus.schema import REGISTRY_VECTOR_DIM
from retrieval_service.core.documents import LEVELS, DocumentEntry, version_time_ms
from retrieval_service.core.identity import DEFAULT_KB

log = logging.getLogger(__name__)

#: The row of the knowledge-base collection that says the upgrade completed (not a
#: knowledge base's name: those start with `knowledge_bases/`).
UPGRADE_MARKER = "upgrade/v2"
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
_BATCH = 256


def upgraded_chunk(row: dict[str, Any]) -> dict[str, Any]:
    """A `_v2` chunk row as a `_v3` one: in the default knowledge base, its filename as its
    document_id, no metadata, ingested when its version was started."""
    out = {name: row[name] for name in V2_CHUNK_FIELDS}
    out["dense"] = [float(x) for x in row["dense"]]
    out["knowledge_base"] = DEFAULT_KB
    out["document_id"] = row["filename"]
    out["metadata"] = {}
    out["ingest_time"] = version_time_ms(row["version"])
    return out


def upgraded_record(row: dict[str, Any]) -> dict[str, Any]:
    """A `_v2` registry record as a `_v3` one (no content hash, size or fingerprint: a
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
    client: Any, source: str, target: str, fields: list[str], convert: Any, write: Any
) -> int:
    client.load_collection(source)
    iterator = client.query_iterator(
        source, batch_size=_BATCH, filter='pk != ""', output_fields=fields
    )
    copied = 0
    try:
        while batch := iterator.next():
            write(target, [convert(dict(r)) for r in batch])
            copied += len(batch)
    finally:
        iterator.close()
    return copied


def upgrade_v2(client: Any, milvus: MilvusStore) -> bool:
    """Upgrades a `_v2` store into the `_v3` collections (which exist and are loaded);
    returns whether there was one. Runs in the store's worker thread (`MilvusStore.run`)."""
    old = [name for name in milvus.v2_collections() if client.has_collection(name)]
    if not old:
        return False
    marker = milvus.knowledge_base_collection
    done = client.query(marker, filter=f"name == {quote(UPGRADE_MARKER)}", output_fields=["name"])
    if not done:
        started = time.monotonic()
        log.info("upgrading the store of %s in place (no re-embedding)", ", ".join(old))
        # The same write as the chunk store's: Lite's insert replaces a row of the same key.
        write = client.insert if milvus.config.embedded else client.upsert
        *levels, registry = milvus.v2_collections()
        rows = 0
        for level, source in zip(LEVELS, levels, strict=True):
            if client.has_collection(source):
                target = milvus.level_collection(level)
                rows += _copy(client, source, target, V2_CHUNK_FIELDS, upgraded_chunk, write)
        records = 0
        if client.has_collection(registry):
            target = milvus.registry_collection
            records = _copy(
                client,
                registry,
                target,
                ["pk", *V2_REGISTRY_FIELDS],
                upgraded_record,
                client.upsert,
            )
        for name in milvus.all_collections():
            client.flush(name)
        client.upsert(
            marker,
            [
                {
                    "name": UPGRADE_MARKER,
                    "display_name": "",
                    "description": f"upgraded from {', '.join(old)}",
                    "create_time": int(time.time() * 1000),
                    "state": 0,
                    "marker": [0.0] * REGISTRY_VECTOR_DIM,
                }
            ],
        )
        client.flush(marker)
        log.info(
            "upgraded %d chunk rows and %d document records into knowledge_bases/default in %.1f s",
            rows,
            records,
            time.monotonic() - started,
        )
    for name in old:
        client.drop_collection(name)
        log.info("dropped the upgraded collection %s", name)
    return True
