"""The shape of the store in Milvus: the chunk and registry schemas, their index parameters,
the start-up check of an existing collection against them, and the one place search
parameters are built. Pure functions over pymilvus objects and description dicts; no I/O.

pymilvus is imported lazily: it reads MILVUS_URI at import time (the composition root clears
that variable first)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from retrieval_service.adapters.milvus.filters import quote
from retrieval_service.core.ports import CHUNK_FIELDS
from shared.lexical import bm25_text

# The analyser both Milvus Lite (jieba package) and real Milvus 2.5+ accept; it splits Chinese
# into words and English on whitespace/punctuation.
ANALYZER_PARAMS: dict[str, Any] = {"tokenizer": "jieba"}
#: The BM25 text of a row whose level recall does not search with BM25 (every level but
#: LEAF_RETRIEVE_LEVEL's, unless BM25_ALL_LEVELS): a lone space, which the analyser reads as no
#: terms at all. Milvus Lite's jieba analysis is most of an insert's cost and the parents
#: carry two thirds of the characters; recall at a level holding such rows is refused at
#: start-up (`unanalysed_problem`). No chunk's own BM25 text is ever a lone space.
UNANALYSED = " "
#: Appended to `MILVUS_COLLECTION`: the layout of document access (`_v3`, the knowledge-base
#: layout — chunk rows with a `knowledge_base` partition key, `document_id`, `metadata` and
#: `ingest_time`; the registry keyed by (knowledge base, document_id, version); the
#: knowledge-base records — with each chunk row's document `acl` in a scalar column,
#: `filters.acl_column`) lives in new collections. A store of an earlier versioned layout (`_v3`,
#: `_v2`) is upgraded into them at start-up (`upgrade.py`); one of the first layout
#: (`{collection}_l1` …) is left alone.
LAYOUT_SUFFIX = "_v4"
#: The knowledge-base layout, before document access (`upgrade.py` reads it).
V3_SUFFIX = "_v3"
#: The versioned layout before knowledge bases (`upgrade.py` reads it).
V2_SUFFIX = "_v2"
VERSION_MAX = 64
#: A knowledge base's full name: `knowledge_bases/` and an id of at most 63 characters.
KB_NAME_MAX = 128
#: A document_id: 512 ASCII characters, or a default one (a file name of at most 255
#: characters of at most 4 UTF-8 bytes).
DOCUMENT_ID_MAX = 1024
# The registry key: the knowledge base's and the document_id's UTF-8 bytes in hex, then the
# version (`registry_pk`).
REGISTRY_PK_MAX = 2 * KB_NAME_MAX + 1 + 2 * DOCUMENT_ID_MAX + 1 + VERSION_MAX
OUTPUT_FIELDS = list(CHUNK_FIELDS)
#: Everything a chunk row holds that a caller writes (the sparse field is the BM25 function's).
WRITABLE_FIELDS = ["pk", *OUTPUT_FIELDS, "bm25_text", "dense", "acl"]
#: The `acl` column: its groups' hex forms, each between `|`s; 8 KiB of metadata at most, so
#: never more than twice that.
ACL_MAX = 2 * 8 * 1024 + 2
#: What a scan of the registry needs to find the current version of each document.
REGISTRY_KEY_FIELDS = ["knowledge_base", "document_id", "version", "state"]
REGISTRY_FIELDS = [
    *REGISTRY_KEY_FIELDS,
    "filename",
    "file_type",
    "pages",
    "page_counts",
    "metadata",
    "content_sha256",
    "size_bytes",
    "ingest_time",
    "fingerprint",
]
KNOWLEDGE_BASE_FIELDS = ["name", "display_name", "description", "create_time", "state"]
ID_MAX = 2048
REGISTRY_VECTOR_DIM = 2  # Milvus requires a vector field in every collection
TEXT_MAX = 65535


def chunk_schema(dim: int) -> Any:
    from pymilvus import DataType, Function, FunctionType, MilvusClient

    schema = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
    # One row per chunk *version*: pk = f"{chunk_id}#{version}" (see `version_pk`).
    schema.add_field("pk", DataType.VARCHAR, is_primary=True, max_length=ID_MAX + VERSION_MAX)
    schema.add_field("chunk_id", DataType.VARCHAR, max_length=ID_MAX)
    schema.add_field("version", DataType.VARCHAR, max_length=VERSION_MAX)
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
    schema.add_field("dense", DataType.FLOAT_VECTOR, dim=dim)
    schema.add_field("filename", DataType.VARCHAR, max_length=1024)
    schema.add_field("file_type", DataType.VARCHAR, max_length=64)
    schema.add_field("file_path", DataType.VARCHAR, max_length=2048)
    schema.add_field("page_number", DataType.VARCHAR, max_length=32)
    schema.add_field("parent_chunk_id", DataType.VARCHAR, max_length=ID_MAX)
    schema.add_field("root_chunk_id", DataType.VARCHAR, max_length=ID_MAX)
    schema.add_field("chunk_level", DataType.INT64)
    schema.add_field("chunk_idx", DataType.INT64)
    # Milvus's multi-tenancy: rows are hashed into partitions by knowledge base, and a search
    # naming knowledge bases in its filter reads only their partitions.
    schema.add_field(
        "knowledge_base", DataType.VARCHAR, max_length=KB_NAME_MAX, is_partition_key=True
    )
    schema.add_field("document_id", DataType.VARCHAR, max_length=DOCUMENT_ID_MAX)
    schema.add_field("metadata", DataType.JSON)
    schema.add_field("ingest_time", DataType.INT64)  # epoch milliseconds
    # The document's `acl` as one scalar string (`acl_column`): a search's visibility condition
    # is then a comparison and LIKEs on a column, which Milvus Lite evaluates vectorised (JSON
    # paths and array functions it evaluates row by row: 2.5 × a search's time). See
    # `filters.acl_column`.
    schema.add_field("acl", DataType.VARCHAR, max_length=ACL_MAX)
    schema.add_function(
        Function(
            name="text_bm25",
            function_type=FunctionType.BM25,
            input_field_names=["bm25_text"],
            output_field_names=["sparse"],
        )
    )
    return schema


def chunk_index_params(client: Any, bm25: dict[str, float]) -> Any:
    # Build parameters go nested under "params": pymilvus would otherwise send each one as its
    # own key, which Milvus Lite 3.2 silently drops (k1 falls back to 1.5, HNSW to its
    # defaults); real Milvus unpacks the nested form the same way.
    params = client.prepare_index_params()
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
        params={"params": bm25},
    )
    return params


def registry_schema() -> Any:
    from pymilvus import DataType, MilvusClient

    schema = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
    # One record per document version (see `registry_pk`).
    schema.add_field("pk", DataType.VARCHAR, is_primary=True, max_length=REGISTRY_PK_MAX)
    schema.add_field("knowledge_base", DataType.VARCHAR, max_length=KB_NAME_MAX)
    schema.add_field("document_id", DataType.VARCHAR, max_length=DOCUMENT_ID_MAX)
    schema.add_field("filename", DataType.VARCHAR, max_length=1024)
    schema.add_field("version", DataType.VARCHAR, max_length=VERSION_MAX)
    schema.add_field("state", DataType.INT64)
    schema.add_field("file_type", DataType.VARCHAR, max_length=64)
    schema.add_field("pages", DataType.INT64)
    schema.add_field("page_counts", DataType.VARCHAR, max_length=TEXT_MAX)
    schema.add_field("metadata", DataType.JSON)
    schema.add_field("content_sha256", DataType.VARCHAR, max_length=64)
    schema.add_field("size_bytes", DataType.INT64)
    schema.add_field("ingest_time", DataType.INT64)  # epoch milliseconds
    schema.add_field("fingerprint", DataType.VARCHAR, max_length=64)
    schema.add_field("marker", DataType.FLOAT_VECTOR, dim=REGISTRY_VECTOR_DIM)
    return schema


def knowledge_base_schema() -> Any:
    from pymilvus import DataType, MilvusClient

    schema = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
    # One record per knowledge base, keyed by its full name; also the upgrade's marker row
    # (`UPGRADE_MARKER`), which is no knowledge base's name.
    schema.add_field("name", DataType.VARCHAR, is_primary=True, max_length=KB_NAME_MAX)
    schema.add_field("display_name", DataType.VARCHAR, max_length=TEXT_MAX)
    schema.add_field("description", DataType.VARCHAR, max_length=TEXT_MAX)
    schema.add_field("create_time", DataType.INT64)  # epoch milliseconds
    schema.add_field("state", DataType.INT64)
    schema.add_field("marker", DataType.FLOAT_VECTOR, dim=REGISTRY_VECTOR_DIM)
    return schema


def registry_index_params(client: Any) -> Any:
    params = client.prepare_index_params()
    params.add_index(field_name="marker", index_type="FLAT", metric_type="L2")
    return params


def _described_fields(description: dict[str, Any]) -> dict[str, tuple[str, dict[str, Any]]]:
    out: dict[str, tuple[str, dict[str, Any]]] = {}
    for f in description.get("fields", []):
        out[f["name"]] = (str(getattr(f["type"], "name", f["type"])), f.get("params", {}))
    return out


def schema_problems(description: dict[str, Any], expected_schema: Any) -> list[str]:
    """What keeps an existing collection (`describe_collection`'s answer) from serving as
    `expected_schema`: missing, extra or retyped fields, another vector dimension or
    analyser, no BM25 function. Empty when it fits."""
    actual = _described_fields(description)
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
                problems.append(f"field {fname!r} analyzer is {got}, expected {ANALYZER_PARAMS}")
    extra = sorted(set(actual) - set(expected))
    if extra:
        problems.append(f"unexpected fields {extra}")
    if expected_schema.functions:
        functions = description.get("functions", [])
        if not any(str(getattr(fn["type"], "name", fn["type"])) == "BM25" for fn in functions):
            problems.append("no BM25 function writes the sparse field")
    return problems


def registry_pk(knowledge_base: str, document_id: str, version: str) -> str:
    """The primary key of one version's registry record: the knowledge base's and the
    document_id's UTF-8 bytes in hex, then the version. Hex digits sort above "#", so
    primary-key order is knowledge-base order, then document_id order (then version order) —
    a query iterator, which walks primary keys in order, reads a knowledge base's records
    sorted by document_id. With the raw id, "a b.txt#…" would sort before "a#…"."""
    return f"{knowledge_base.encode().hex()}#{document_id.encode().hex()}#{version}"


def level_filter(level: int) -> str:
    return f"chunk_level == {level}"


def scope_filter(
    level: int, knowledge_bases: Sequence[str], compiled: str | None, acl: str | None = None
) -> str:
    """A search's expression: the level, the knowledge bases (the partition key: Milvus reads
    only their partitions), the compiled filter (`adapters.milvus.filters`) and the caller's
    document visibility (`adapters.milvus.filters.acl_expr`), each if any."""
    names = ", ".join(quote(name) for name in knowledge_bases)
    parts = [f"{level_filter(level)} and knowledge_base in [{names}]"]
    parts += [f"({extra})" for extra in (compiled, acl) if extra]
    return " and ".join(parts)


@dataclass(frozen=True, slots=True)
class SearchSpec:
    """One side of a search, built once (`dense_spec`, `bm25_spec`) and spoken in both of pymilvus's
    forms: an `AnnSearchRequest` inside a hybrid search, or the arguments of a plain one."""

    data: list[Any]
    anns_field: str
    param: dict[str, Any]
    limit: int
    expr: str

    def request(self) -> Any:
        from pymilvus import AnnSearchRequest

        return AnnSearchRequest(
            data=self.data,
            anns_field=self.anns_field,
            param=self.param,
            limit=self.limit,
            expr=self.expr,
        )

    def search_kwargs(self) -> dict[str, Any]:
        return {
            "data": self.data,
            "anns_field": self.anns_field,
            "search_params": self.param,
            "limit": self.limit,
            "filter": self.expr,
        }


def dense_spec(
    vector: Sequence[float], limit: int, level: int, *, hnsw_ef: int, expr: str | None = None
) -> SearchSpec:
    """IP over a unit vector; ef is at least `limit` (HNSW returns at most ef hits). `expr`:
    the search's scope (`scope_filter`; default: the whole level)."""
    return SearchSpec(
        data=[list(map(float, vector))],
        anns_field="dense",
        param={"metric_type": "IP", "params": {"ef": max(hnsw_ef, limit)}},
        limit=limit,
        expr=expr or level_filter(level),
    )


def bm25_spec(
    text: str, limit: int, level: int, *, drop_ratio: float, expr: str | None = None
) -> SearchSpec:
    """BM25 over the query's `bm25_text`: the same stemming the stored text went through."""
    return SearchSpec(
        data=[bm25_text(text)],
        anns_field="sparse",
        param={"metric_type": "BM25", "params": {"drop_ratio_search": drop_ratio}},
        limit=limit,
        expr=expr or level_filter(level),
    )


def unanalysed_problem(level: int, collection: str, example_filename: str | None) -> str | None:
    """The start-up failure for recall at `level` over a collection holding rows written
    without their BM25 text (`UNANALYSED`), or None when it holds none."""
    if example_filename is None:
        return None
    return (
        f"LEAF_RETRIEVE_LEVEL={level}: collection {collection!r} holds chunks written without "
        f"their BM25 text (e.g. of {example_filename!r}), because they were ingested while "
        "LEAF_RETRIEVE_LEVEL named another level and BM25_ALL_LEVELS was off; recall at this "
        "level would find them by their vectors only. Remedy: start the service with the "
        "previous LEAF_RETRIEVE_LEVEL and BM25_ALL_LEVELS=true, re-ingest the documents, "
        "then switch; or ingest into a fresh store (MILVUS_COLLECTION / MILVUS_URI)."
    )
