"""The retrieval service's Prometheus families (docs/api.md#metrics), each recorded where its
value is decided: mode, stage durations and threshold drops in pipeline.py, rerank outcomes in
rerank.py, ingest counts in ingest.py, embedding batches in embedding.py, Milvus failures in
store.translate. Label values are fixed sets, never a query, file name or error text."""

from __future__ import annotations

import types
from collections.abc import Mapping
from contextlib import AbstractContextManager

from prometheus_client import Counter, Gauge, Histogram

from retrieval_service.settings import SERVICE_NAME
from shared.metrics import LATENCY_BUCKETS, OPERATION_STORE_CALLS, OTHER, bounded, registry_for
from shared.operations import OperationState

REGISTRY = registry_for(SERVICE_NAME)

#: retrieval_mode values (docs/trace.md#fields).
RETRIEVAL_MODES = ("hybrid", "dense_fallback", "failed")
STAGES = ("embed", "recall", "merge", "rerank")
#: `outcome` of the rerank step: the endpoint's reply was used, or why it was not.
RERANK_OUTCOMES = ("applied", "http_error", "timeout", "empty", "off")
LEVELS = ("1", "2", "3")
#: `state` of a document version reconciliation removed.
RECLAIMED_STATES = ("pending", "committed", "tombstone")

RETRIEVE = Counter(
    "supermew_retrieve_total",
    "Retrievals answered, by retrieval_mode.",
    ("retrieval_mode",),
    registry=REGISTRY,
)
STAGE_DURATION = Histogram(
    "supermew_retrieval_stage_duration_seconds",
    "Duration of one stage of a retrieval (embed, recall, merge, rerank), in seconds.",
    ("stage",),
    buckets=LATENCY_BUCKETS,
    registry=REGISTRY,
)
RERANK = Counter(
    "supermew_rerank_total",
    "Rerank steps, by outcome (off = no rerank call: not configured or no candidates).",
    ("outcome",),
    registry=REGISTRY,
)
THRESHOLD_DROPPED = Counter(
    "supermew_threshold_dropped_total",
    "Chunks dropped by RERANK_MIN_SCORE after ranking.",
    registry=REGISTRY,
)
INGESTED_DOCUMENTS = Counter(
    "supermew_ingested_documents_total",
    "Documents written (new or replaced).",
    registry=REGISTRY,
)
INGESTED_CHUNKS = Counter(
    "supermew_ingested_chunks_total",
    "Chunks written, by chunk level (1 = largest, 3 = leaf).",
    ("level",),
    registry=REGISTRY,
)
RECLAIMED_VERSIONS = Counter(
    "supermew_reclaimed_versions_total",
    "Document versions reconciliation removed, by record state (pending = an uncommitted "
    "version whose writer's lease expired).",
    ("state",),
    registry=REGISTRY,
)
EMBEDDING_DURATION = Histogram(
    "supermew_embedding_duration_seconds",
    "Duration of one passage-embedding batch, in seconds.",
    buckets=LATENCY_BUCKETS,
    registry=REGISTRY,
)
MILVUS_ERRORS = Counter(
    "supermew_milvus_errors_total",
    "Failed Milvus calls, by MilvusClient operation (connect for the client's start).",
    ("operation",),
    registry=REGISTRY,
)

#: `operation` of a failed control-plane database call: the store method it came from.
DB_OPERATIONS = (
    "connect",
    "migrate",
    "knowledge_bases_create",
    "knowledge_bases_update",
    "knowledge_bases_get",
    "knowledge_bases_remove",
    "knowledge_bases_all",
    "knowledge_bases_mark_deleting",
    "knowledge_bases_renew_deleting",
    "knowledge_bases_claim_deleting",
    *OPERATION_STORE_CALLS,
    "import_sources_read",
    "import_sources_write",
    "import_sources_forget",
    "registry_put",
    "registry_remove",
    "registry_read",
    "registry_counts",
    "registry_texts",
    "registry_build_page",
    "registry_build_written",
    "indexes_create",
    "indexes_read",
    "indexes_update",
    "indexes_remove",
    "knowledge_bases_activate",
    "upgrade",
)
DB_ERRORS = Counter(
    "supermew_db_errors_total",
    "Failed control-plane database calls (DATABASE_URL), by store operation.",
    ("operation",),
    registry=REGISTRY,
)
DB_POOL_IN_USE = Gauge(
    "supermew_db_pool_in_use",
    "Control-plane database connections checked out of the pool right now.",
    registry=REGISTRY,
)

#: One timer per stage, bound once: `with STAGE["recall"].time(): …`.
STAGE = {stage: STAGE_DURATION.labels(stage) for stage in STAGES}


def record_retrieve(mode: str) -> None:
    RETRIEVE.labels(bounded(mode, RETRIEVAL_MODES)).inc()


def record_rerank(outcome: str) -> None:
    RERANK.labels(bounded(outcome, RERANK_OUTCOMES)).inc()


def record_threshold_dropped(count: int) -> None:
    if count > 0:
        THRESHOLD_DROPPED.inc(count)


def record_ingested(l1_chunks: int, l2_chunks: int, l3_chunks: int) -> None:
    """One document written with its chunk counts per level."""
    INGESTED_DOCUMENTS.inc()
    for level, count in (("1", l1_chunks), ("2", l2_chunks), ("3", l3_chunks)):
        INGESTED_CHUNKS.labels(level).inc(count)


def record_reclaimed(state: str, count: int) -> None:
    """`count` versions in `state` (one of RECLAIMED_STATES) removed by reconciliation."""
    if count > 0:
        RECLAIMED_VERSIONS.labels(bounded(state, RECLAIMED_STATES)).inc(count)


_CLIENT_MODULE = "pymilvus.milvus_client.milvus_client"


def milvus_operation(exc: BaseException) -> str:
    """The MilvusClient method a failure came out of (`search`, `upsert`, …; `connect` for the
    constructor), read from the traceback so every call site is covered without naming its
    operation. OTHER when the failure did not pass through a MilvusClient method."""
    tb: types.TracebackType | None = exc.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_globals.get("__name__") == _CLIENT_MODULE:
            name = frame.f_code.co_name
            if name == "__init__":
                return "connect"
            # Method names of one class: a fixed set; anything private folds into OTHER.
            return name if name.isidentifier() and not name.startswith("_") else OTHER
        tb = tb.tb_next
    return OTHER


def record_milvus_error(exc: BaseException) -> None:
    MILVUS_ERRORS.labels(milvus_operation(exc)).inc()


def record_db_error(operation: str) -> None:
    DB_ERRORS.labels(bounded(operation, DB_OPERATIONS)).inc()


class PrometheusTelemetry:
    """The core's `Telemetry` port on this service's Prometheus families."""

    def stage(self, name: str) -> AbstractContextManager[object]:
        return STAGE[name].time()

    def retrieved(self, mode: str) -> None:
        record_retrieve(mode)

    def threshold_dropped(self, count: int) -> None:
        record_threshold_dropped(count)

    def ingested(self, l1_chunks: int, l2_chunks: int, l3_chunks: int) -> None:
        record_ingested(l1_chunks, l2_chunks, l3_chunks)

    def reclaimed(self, state: str, count: int) -> None:
        record_reclaimed(state, count)


TELEMETRY = PrometheusTelemetry()

#: `result` of one document of an import (docs/api.md#imports).
IMPORT_RESULTS = ("new", "replaced", "unchanged", "deleted", "failed")
IMPORT_DOCUMENTS = Counter(
    "supermew_import_documents_total",
    "Documents imports brought in, kept or deleted, by result.",
    ("result",),
    registry=REGISTRY,
)
#: What an index build did with a document (docs/api.md#metrics).
INDEX_BUILD_RESULTS = ("written", "superseded", "no_text")
INDEX_BUILD_DOCUMENTS = Counter(
    "supermew_index_build_documents_total",
    "Documents index builds wrote into their new index, or could not (no stored text).",
    ("result",),
    registry=REGISTRY,
)
OPERATIONS = Gauge(
    "supermew_operations",
    "Long-running operations in the database, by state (every replica reports the same).",
    ("state",),
    registry=REGISTRY,
)


def record_operation_states(counts: Mapping[OperationState, int]) -> None:
    for state in OperationState:
        OPERATIONS.labels(state.name).set(counts.get(state, 0))
