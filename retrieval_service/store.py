"""The chunk store on Milvus (pymilvus `MilvusClient`; a `.db` path = embedded Milvus Lite, an
`http(s)://` URI = Milvus standalone/cluster, one code path). One collection per chunk level,
because Milvus Lite scans every row of whatever it searches: recall touches only the leaf
level, parents come back with primary-key look-ups. A small registry collection records each
document's pages and per-page chunk counts, so a document's ids are derived, never scanned.

pymilvus is imported lazily: it reads MILVUS_URI at import time (the composition root clears
that variable first)."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from shared.lexical import bm25_text

log = logging.getLogger(__name__)
T = TypeVar("T")

# The analyser both Milvus Lite (jieba package) and real Milvus 2.5+ accept; it splits Chinese
# into words and English on whitespace/punctuation.
ANALYZER_PARAMS: dict[str, Any] = {"tokenizer": "jieba"}
#: What a BM25 index without explicit parameters scores with (Milvus and Milvus Lite alike).
BM25_DEFAULTS: dict[str, float] = {"bm25_k1": 1.5, "bm25_b": 0.75}
LEVELS = (1, 2, 3)
OUTPUT_FIELDS = [
    "chunk_id",
    "text",
    "filename",
    "file_type",
    "file_path",
    "page_number",
    "parent_chunk_id",
    "root_chunk_id",
    "chunk_level",
    "chunk_idx",
]
_ID_MAX = 2048
_REGISTRY_VECTOR_DIM = 2  # Milvus requires a vector field in every collection


def quote(value: str) -> str:
    """A Milvus expression string literal (double quotes, backslash escapes)."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def ids_filter(ids: Iterable[str]) -> str:
    return "chunk_id in [" + ", ".join(quote(i) for i in ids) + "]"


#: URI schemes that name a Milvus server; anything else is a Milvus Lite file path.
SERVER_SCHEMES = ("http://", "https://", "tcp://", "unix:")


def is_embedded_uri(uri: str) -> bool:
    """A file path means Milvus Lite in this process; a URL means a Milvus server."""
    return not uri.startswith(SERVER_SCHEMES)


@dataclass(frozen=True, slots=True)
class StoreConfig:
    uri: str
    token: str | None
    collection: str
    dim: int
    hnsw_ef: int = 256
    bm25_k1: float = 1.2
    bm25_b: float = 0.75
    # Milvus Lite supports only 0; real Milvus may prune low-weight query terms with > 0.
    bm25_drop_ratio_search: float = 0.0
    timeout_seconds: float = 10.0

    @property
    def embedded(self) -> bool:
        return is_embedded_uri(self.uri)


@dataclass(slots=True)
class DocumentEntry:
    """One registry row: what a document holds. `page_counts[page] = [l1, l2, l3]` counts
    chunks per page and level, from which every chunk id is derived."""

    filename: str
    file_type: str
    pages: int
    page_counts: dict[str, list[int]] = field(default_factory=dict)

    def level_count(self, level: int) -> int:
        return sum(counts[level - 1] for counts in self.page_counts.values())

    def ids(self, level: int) -> list[str]:
        return [
            f"{self.filename}::p{page}::l{level}::{n}"
            for page, counts in self.page_counts.items()
            for n in range(counts[level - 1])
        ]


class ChunkStore:
    """Synchronous Milvus access; every public coroutine runs its call in a worker thread."""

    def __init__(self, config: StoreConfig) -> None:
        from pymilvus import MilvusClient

        self.config = config
        kwargs: dict[str, Any] = {"uri": config.uri, "timeout": config.timeout_seconds}
        if config.token:
            kwargs["token"] = config.token
        self._client = MilvusClient(**kwargs)

    # ---- names -------------------------------------------------------------------------

    def level_collection(self, level: int) -> str:
        return f"{self.config.collection}_l{level}"

    @property
    def registry_collection(self) -> str:
        return f"{self.config.collection}_documents"

    # ---- schema ------------------------------------------------------------------------

    def _chunk_schema(self) -> Any:
        from pymilvus import DataType, Function, FunctionType, MilvusClient

        schema = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
        schema.add_field("chunk_id", DataType.VARCHAR, is_primary=True, max_length=_ID_MAX)
        schema.add_field("text", DataType.VARCHAR, max_length=65535)
        # What BM25 reads: the text with English words stemmed (shared.lexical.bm25_text).
        schema.add_field(
            "bm25_text",
            DataType.VARCHAR,
            max_length=65535,
            enable_analyzer=True,
            analyzer_params=ANALYZER_PARAMS,
        )
        schema.add_field("sparse", DataType.SPARSE_FLOAT_VECTOR)
        schema.add_field("dense", DataType.FLOAT_VECTOR, dim=self.config.dim)
        schema.add_field("filename", DataType.VARCHAR, max_length=1024)
        schema.add_field("file_type", DataType.VARCHAR, max_length=64)
        schema.add_field("file_path", DataType.VARCHAR, max_length=2048)
        schema.add_field("page_number", DataType.VARCHAR, max_length=32)
        schema.add_field("parent_chunk_id", DataType.VARCHAR, max_length=_ID_MAX)
        schema.add_field("root_chunk_id", DataType.VARCHAR, max_length=_ID_MAX)
        schema.add_field("chunk_level", DataType.INT64)
        schema.add_field("chunk_idx", DataType.INT64)
        schema.add_function(
            Function(
                name="text_bm25",
                function_type=FunctionType.BM25,
                input_field_names=["bm25_text"],
                output_field_names=["sparse"],
            )
        )
        return schema

    def bm25_params(self) -> dict[str, float]:
        return {"bm25_k1": self.config.bm25_k1, "bm25_b": self.config.bm25_b}

    def _chunk_indexes(self) -> Any:
        # Build parameters go nested under "params": pymilvus would otherwise send each one
        # as its own key, which Milvus Lite 3.2 silently drops (k1 falls back to 1.5, HNSW to
        # its defaults); real Milvus unpacks the nested form the same way.
        params = self._client.prepare_index_params()
        params.add_index(
            field_name="dense",
            index_type="HNSW",
            metric_type="IP",
            params={"params": {"M": 16, "efConstruction": 256}},
        )
        params.add_index(
            field_name="sparse",
            index_type="SPARSE_INVERTED_INDEX",
            metric_type="BM25",
            params={"params": self.bm25_params()},
        )
        return params

    def _warn_on_bm25_drift(self, name: str) -> None:
        """An existing leaf collection keeps the BM25 parameters it was built with; say so when
        they differ from the configured ones (stores created before the nested-params fix
        carry Lite's default k1 = 1.5)."""
        index = self._client.describe_index(name, "sparse") or {}
        built = {**index, **(index.get("params") or {})}  # Milvus flattens them, Lite nests
        got = {key: float(built.get(key, default)) for key, default in BM25_DEFAULTS.items()}
        if got != self.bm25_params():
            log.warning(
                "collection %s scores BM25 with %s, configured %s; re-create it (new "
                "MILVUS_COLLECTION or a fresh store) and re-ingest to apply the configured values",
                name, got, self.bm25_params(),
            )  # fmt: skip

    def _registry_schema(self) -> Any:
        from pymilvus import DataType, MilvusClient

        schema = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
        schema.add_field("filename", DataType.VARCHAR, is_primary=True, max_length=1024)
        schema.add_field("file_type", DataType.VARCHAR, max_length=64)
        schema.add_field("pages", DataType.INT64)
        schema.add_field("page_counts", DataType.VARCHAR, max_length=65535)
        schema.add_field("marker", DataType.FLOAT_VECTOR, dim=_REGISTRY_VECTOR_DIM)
        return schema

    def _registry_indexes(self) -> Any:
        params = self._client.prepare_index_params()
        params.add_index(field_name="marker", index_type="FLAT", metric_type="L2")
        return params

    @staticmethod
    def _describe_fields(description: dict[str, Any]) -> dict[str, tuple[str, dict[str, Any]]]:
        out: dict[str, tuple[str, dict[str, Any]]] = {}
        for f in description.get("fields", []):
            out[f["name"]] = (str(getattr(f["type"], "name", f["type"])), f.get("params", {}))
        return out

    def _check_existing(self, name: str, expected_schema: Any) -> None:
        """Raise ConfigurationError when an existing collection does not fit this service."""
        from shared.errors import ConfigurationError

        actual = self._describe_fields(self._client.describe_collection(name))
        expected = {f.name: (f.dtype.name, dict(f.params or {})) for f in expected_schema.fields}
        problems: list[str] = []
        for fname, (ftype, params) in expected.items():
            if fname not in actual:
                problems.append(f"field {fname!r} is missing")
                continue
            if actual[fname][0] != ftype:
                problems.append(f"field {fname!r} is {actual[fname][0]}, expected {ftype}")
            if "dim" in params and int(actual[fname][1].get("dim", -1)) != int(params["dim"]):
                problems.append(
                    f"field {fname!r} has dimension {actual[fname][1].get('dim')}, the "
                    f"configured embedder produces {params['dim']}"
                )
            if params.get("enable_analyzer"):
                raw = actual[fname][1].get("analyzer_params") or "{}"
                got = json.loads(raw) if isinstance(raw, str) else raw
                if str(actual[fname][1].get("enable_analyzer")).lower() != "true":
                    problems.append(f"field {fname!r} has no analyzer (BM25 needs one)")
                elif got != ANALYZER_PARAMS:
                    problems.append(
                        f"field {fname!r} analyzer is {got}, expected {ANALYZER_PARAMS}"
                    )
        extra = sorted(set(actual) - set(expected))
        if extra:
            problems.append(f"unexpected fields {extra}")
        if expected_schema.functions:
            functions = self._client.describe_collection(name).get("functions", [])
            if not any(str(getattr(fn["type"], "name", fn["type"])) == "BM25" for fn in functions):
                problems.append("no BM25 function writes the sparse field")
        if problems:
            raise ConfigurationError(
                f"Milvus collection {name!r} at {self.config.uri} does not match this service: "
                + "; ".join(problems)
                + ". Remedy: point MILVUS_COLLECTION at a new name (or drop the collection / "
                "delete the Milvus Lite data directory) and re-ingest the documents, or "
                "configure the embedder that built it (EMBEDDING_* / EMBEDDING_DIM)."
            )

    def _ensure(self) -> None:
        wanted = [
            (self.level_collection(level), self._chunk_schema, self._chunk_indexes)
            for level in LEVELS
        ]
        wanted.append((self.registry_collection, self._registry_schema, self._registry_indexes))
        for name, schema_factory, index_factory in wanted:
            schema = schema_factory()
            if self._client.has_collection(name):
                self._check_existing(name, schema)
                if name != self.registry_collection:
                    self._warn_on_bm25_drift(name)
            else:
                log.info("creating Milvus collection %s", name)
                self._client.create_collection(name, schema=schema, index_params=index_factory())
            self._client.load_collection(name)
        # A Lite store written before writes were sealed replays its whole log into the
        # memtable on every start; seal it once here.
        self._seal()

    def _all_collections(self) -> list[str]:
        return [*(self.level_collection(lvl) for lvl in LEVELS), self.registry_collection]

    def _seal(self) -> None:
        """Milvus Lite keeps writes in its memtable until 128 MB have accumulated, and every
        search walks the memtable row by row and rebuilds its BM25 index: at 19k SciFact leaves
        a Retrieve took 4 s before a flush and 0.2–0.3 s after it, with the same hits (99.6 %
        of the top 100). So on Lite each write is flushed into indexed segments (a no-op when
        nothing is pending). A Milvus server seals and indexes segments itself.

        The price: Lite scores BM25 with each segment's own IDF (its source says so). Its
        size-tiered compaction merges small segments as they pile up, so the skew is confined
        to the few newest, smallest ones; RRF uses ranks, which softens it further."""
        if not self.config.embedded:
            return
        for name in self._all_collections():
            self._client.flush(name)

    async def seal(self) -> None:
        """Make the rows written so far searchable through the indexes (see `_seal`)."""
        await self._run(self._seal)

    def _load_all(self) -> None:
        for name in self._all_collections():
            self._client.load_collection(name)

    def _call(self, fn: Callable[..., T], *args: Any) -> T:
        try:
            return fn(*args)
        except Exception as exc:
            if not _not_loaded(exc):
                raise
        # A restarted Milvus (or a released collection) answers "not loaded": load, retry once.
        log.warning("Milvus collections are not loaded (server restarted?); loading them")
        self._load_all()
        return fn(*args)

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.to_thread(self._call, fn, *args)

    async def ensure_collections(self) -> None:
        """Create missing collections, validate existing ones, load all (start-up)."""
        await asyncio.to_thread(self._ensure)  # no retry: start-up

    # ---- recall ------------------------------------------------------------------------

    @staticmethod
    def _hits(result: Any) -> list[dict[str, Any]]:
        hits = []
        for hit in result[0] if result else []:
            entity = dict(hit.get("entity", {}))
            entity.setdefault("chunk_id", hit.get("chunk_id", hit.get("id")))
            entity["score"] = float(hit.get("distance", 0.0))
            hits.append(entity)
        return hits

    def _dense_request(self, vector: Sequence[float], limit: int, level: int) -> Any:
        from pymilvus import AnnSearchRequest

        return AnnSearchRequest(
            data=[list(map(float, vector))],
            anns_field="dense",
            param={"metric_type": "IP", "params": {"ef": max(self.config.hnsw_ef, limit)}},
            limit=limit,
            expr=f"chunk_level == {level}",
        )

    def _sparse_request(self, text: str, limit: int, level: int) -> Any:
        from pymilvus import AnnSearchRequest

        return AnnSearchRequest(
            data=[bm25_text(text)],
            anns_field="sparse",
            param={
                "metric_type": "BM25",
                "params": {"drop_ratio_search": self.config.bm25_drop_ratio_search},
            },
            limit=limit,
            expr=f"chunk_level == {level}",
        )

    def _hybrid(
        self, level: int, text: str, vector: Sequence[float], candidate_k: int
    ) -> list[dict[str, Any]]:
        from pymilvus import RRFRanker

        result = self._client.hybrid_search(
            self.level_collection(level),
            reqs=[
                self._dense_request(vector, 2 * candidate_k, level),
                self._sparse_request(text, 2 * candidate_k, level),
            ],
            ranker=RRFRanker(60),
            limit=candidate_k,
            output_fields=OUTPUT_FIELDS,
        )
        return self._hits(result)

    def _dense(self, level: int, vector: Sequence[float], limit: int) -> list[dict[str, Any]]:
        result = self._client.search(
            self.level_collection(level),
            data=[list(map(float, vector))],
            anns_field="dense",
            search_params={"metric_type": "IP", "params": {"ef": max(self.config.hnsw_ef, limit)}},
            limit=limit,
            filter=f"chunk_level == {level}",
            output_fields=OUTPUT_FIELDS,
        )
        return self._hits(result)

    def _bm25(self, level: int, text: str, limit: int) -> list[dict[str, Any]]:
        result = self._client.search(
            self.level_collection(level),
            data=[bm25_text(text)],
            anns_field="sparse",
            search_params={
                "metric_type": "BM25",
                "params": {"drop_ratio_search": self.config.bm25_drop_ratio_search},
            },
            limit=limit,
            filter=f"chunk_level == {level}",
            output_fields=OUTPUT_FIELDS,
        )
        hits = self._hits(result)
        for hit in hits:  # Lite returns negated BM25 distances; real Milvus positive ones
            hit["score"] = abs(hit["score"])
        return hits

    async def hybrid_search(
        self, level: int, text: str, vector: Sequence[float], candidate_k: int
    ) -> list[dict[str, Any]]:
        """Dense + BM25, each asking 2×candidate_k, fused with RRF(k=60) to candidate_k."""
        return await self._run(self._hybrid, level, text, vector, candidate_k)

    async def dense_search(
        self, level: int, vector: Sequence[float], limit: int
    ) -> list[dict[str, Any]]:
        return await self._run(self._dense, level, vector, limit)

    async def bm25_search(self, level: int, text: str, limit: int) -> list[dict[str, Any]]:
        return await self._run(self._bm25, level, text, limit)

    # ---- chunks by id --------------------------------------------------------------------

    def _get(
        self, level: int, ids: Sequence[str], fields: Sequence[str] = OUTPUT_FIELDS
    ) -> dict[str, dict[str, Any]]:
        if not ids:
            return {}
        rows: dict[str, dict[str, Any]] = {}
        for start in range(0, len(ids), 500):
            batch = ids[start : start + 500]
            for row in self._client.query(
                self.level_collection(level), filter=ids_filter(batch), output_fields=list(fields)
            ):
                rows[row["chunk_id"]] = dict(row)
        return rows

    async def get_chunks(self, level: int, ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """Chunks of one level by chunk_id (a primary-key look-up); missing ids are absent."""
        return await self._run(self._get, level, list(ids))

    def _upsert(self, level: int, rows: list[dict[str, Any]]) -> None:
        for start in range(0, len(rows), 256):
            self._client.upsert(self.level_collection(level), rows[start : start + 256])

    def _delete(self, level: int, ids: Sequence[str]) -> int:
        deleted = 0
        for start in range(0, len(ids), 500):
            batch = list(ids[start : start + 500])
            result = self._client.delete(self.level_collection(level), filter=ids_filter(batch))
            deleted += _delete_count(result, len(batch))
        return deleted

    def _delete_filename(self, level: int, filename: str) -> int:
        result = self._client.delete(
            self.level_collection(level), filter=f"filename == {quote(filename)}"
        )
        return _delete_count(result, 0)

    def _full_rows(self, level: int, ids: Sequence[str]) -> list[dict[str, Any]]:
        fields = [*OUTPUT_FIELDS, "bm25_text", "dense"]
        return list(self._get(level, list(ids), fields).values())

    async def upsert_chunks(self, level: int, rows: list[dict[str, Any]]) -> None:
        await self._run(self._upsert, level, rows)

    async def delete_chunks(self, level: int, ids: Sequence[str]) -> int:
        return await self._run(self._delete, level, list(ids))

    async def delete_by_filename(self, level: int, filename: str) -> int:
        """Deletes every row of `filename` on one level (a scan; used only to sweep orphans)."""
        return await self._run(self._delete_filename, level, filename)

    async def full_rows(self, level: int, ids: Sequence[str]) -> list[dict[str, Any]]:
        """Complete writable rows (with the dense vector), for restoring a previous version."""
        return await self._run(self._full_rows, level, list(ids))

    # ---- registry ------------------------------------------------------------------------

    @staticmethod
    def _entry(row: dict[str, Any]) -> DocumentEntry:
        return DocumentEntry(
            filename=row["filename"],
            file_type=row["file_type"],
            pages=int(row["pages"]),
            page_counts=json.loads(row["page_counts"]),
        )

    def _get_document(self, filename: str) -> DocumentEntry | None:
        rows = self._client.query(
            self.registry_collection,
            filter=f"filename in [{quote(filename)}]",
            output_fields=["filename", "file_type", "pages", "page_counts"],
        )
        return self._entry(rows[0]) if rows else None

    def _put_document(self, entry: DocumentEntry) -> None:
        self._client.upsert(
            self.registry_collection,
            [
                {
                    "filename": entry.filename,
                    "file_type": entry.file_type,
                    "pages": entry.pages,
                    "page_counts": json.dumps(entry.page_counts, separators=(",", ":")),
                    "marker": [0.0] * _REGISTRY_VECTOR_DIM,
                }
            ],
        )

    def _delete_document(self, filename: str) -> None:
        self._client.delete(self.registry_collection, filter=f"filename in [{quote(filename)}]")

    def _list_documents(self) -> list[DocumentEntry]:
        entries: list[DocumentEntry] = []
        page = 1000
        offset = 0
        while True:  # offset paging: Milvus caps offset + limit at 16,384 documents
            rows = self._client.query(
                self.registry_collection,
                filter='filename != ""',
                output_fields=["filename", "file_type", "pages", "page_counts"],
                limit=page,
                offset=offset,
            )
            entries.extend(self._entry(r) for r in rows)
            if len(rows) < page or offset + 2 * page > 16384:
                break
            offset += page
        return sorted(entries, key=lambda e: e.filename)

    async def get_document(self, filename: str) -> DocumentEntry | None:
        return await self._run(self._get_document, filename)

    async def put_document(self, entry: DocumentEntry) -> None:
        await self._run(self._put_document, entry)

    async def delete_document(self, filename: str) -> None:
        await self._run(self._delete_document, filename)

    async def list_documents(self) -> list[DocumentEntry]:
        return await self._run(self._list_documents)

    # ---- diagnostics -----------------------------------------------------------------------

    def _count(self, level: int) -> int:
        rows = self._client.query(
            self.level_collection(level), filter="", output_fields=["count(*)"]
        )
        return int(rows[0]["count(*)"]) if rows else 0

    async def count(self, level: int) -> int:
        return await self._run(self._count, level)

    @property
    def client(self) -> Any:
        """The underlying MilvusClient, for benchmarks that time raw calls on the same store."""
        return self._client

    async def aclose(self) -> None:
        await asyncio.to_thread(self._client.close)


def _not_loaded(exc: Exception) -> bool:
    code = getattr(exc, "code", None)
    return code == 101 or "call load()" in str(exc) or "not loaded" in str(exc)


def _delete_count(result: Any, fallback: int) -> int:
    if isinstance(result, dict):
        return int(result.get("delete_count", fallback))
    if isinstance(result, list):
        return len(result)
    count = getattr(result, "delete_count", None)
    return int(count) if count is not None else fallback
