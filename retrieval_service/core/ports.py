"""The ports of the retrieval core: the small interfaces it talks to, and the values that cross
them. `adapters/` implements them on Milvus, HTTP endpoints and the built-in model;
`tests/fakes/in_memory_store.py` implements the two store ports in memory. Every store call
may raise `core.errors.STORE_FAILURES`; an embedder raises `EmbedderUnavailable` or
`DeadlineExceeded`."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import numpy as np

    from retrieval_service.core.chunking import ChunkRecord, Page
    from retrieval_service.core.documents import DocumentEntry, DocumentPage, RecordKey
    from retrieval_service.core.filters import Filter
    from retrieval_service.core.knowledge_bases import KnowledgeBaseRecord

from retrieval_service.core.identity import DEFAULT_KB, Metadata

#: The fields of a stored chunk that every read returns.
CHUNK_FIELDS = (
    "chunk_id",
    "version",
    "text",
    "filename",
    "file_type",
    "file_path",
    "page_number",
    "parent_chunk_id",
    "root_chunk_id",
    "chunk_level",
    "chunk_idx",
    "knowledge_base",
    "document_id",
    "metadata",
    "ingest_time",
)
#: A chunk as recall returns it: its CHUNK_FIELDS, plus `score` on search hits and the
#: rank/rerank fields added on the way out.
Doc = dict[str, Any]
#: `on_batch(done, total)`: called after each batch with the passages embedded so far.
ProgressCallback = Callable[[int, int], None]


@dataclass(frozen=True, slots=True)
class StoredChunk:
    """One version of one chunk as the ingestor writes it: the chunk, its unit vector, the
    version it belongs to, and whether its text is indexed for BM25 (`analysed`; a level that
    recall never searches with BM25 skips the analyser, retrieval_service/README.md
    "Ingestion")."""

    record: ChunkRecord
    vector: np.ndarray
    version: str
    analysed: bool = True
    knowledge_base: str = DEFAULT_KB
    #: "" means the chunk's filename.
    document_id: str = ""
    metadata: Metadata | None = None
    #: Epoch milliseconds of the version's ingest.
    ingest_time: int = 0


@dataclass(frozen=True, slots=True)
class SearchScope:
    """What a search may return: chunks of these knowledge bases (full names) that `filter`
    admits (None: every chunk of them), of documents visible to `groups` (None: every
    document; otherwise those without an `acl` or whose `acl` names one of the groups,
    `shared.access.document_visible`)."""

    knowledge_bases: tuple[str, ...] = (DEFAULT_KB,)
    filter: Filter | None = None
    groups: frozenset[str] | None = None


#: The default knowledge base, unfiltered.
DEFAULT_SCOPE = SearchScope()


class ChunkRepository(Protocol):
    """Chunks by level, each row one version of a chunk (which version is current is the
    registry's business)."""

    async def hybrid_search(
        self,
        level: int,
        text: str,
        vector: Sequence[float],
        candidate_k: int,
        scope: SearchScope = DEFAULT_SCOPE,
    ) -> list[Doc]:
        """Dense + BM25 recall on one level within `scope` (on each side), fused to at most
        `candidate_k` hits, best first."""
        ...

    async def dense_search(
        self, level: int, vector: Sequence[float], limit: int, scope: SearchScope = DEFAULT_SCOPE
    ) -> list[Doc]:
        """Nearest chunks within `scope` by inner product, best first."""
        ...

    async def get_versioned(self, level: int, keys: Sequence[tuple[str, str]]) -> dict[str, Doc]:
        """The chunks named by (chunk_id, version), by chunk_id; missing ones are absent."""
        ...

    async def write_chunks(self, level: int, chunks: Sequence[StoredChunk]) -> None: ...

    async def copy_rows(self, level: int, source: DocumentEntry, target: DocumentEntry) -> int:
        """Writes, for each row of `source`'s version on one level, a row of `target`'s
        version of the same chunk: the same text, vector and BM25 text, with `target`'s
        metadata and ingest time (a change of metadata alone: nothing is embedded). Returns
        the rows copied: fewer than `source` names when some are gone."""
        ...

    async def delete_rows(self, level: int, pks: Sequence[str]) -> int:
        """Deletes rows by `documents.version_pk(chunk_id, version)`; returns how many."""
        ...

    async def delete_versions(self, level: int, entries: Sequence[DocumentEntry]) -> int:
        """Deletes every row of these versions on one level, whatever chunking made them (a
        version token names one version of one document); returns how many."""
        ...

    async def delete_older(
        self, level: int, document_id: str, version: str, knowledge_base: str = DEFAULT_KB
    ) -> int:
        """Deletes every row of one document whose version sorts before `version`."""
        ...

    async def delete_knowledge_base(self, level: int, knowledge_base: str) -> int:
        """Deletes every row of one knowledge base on one level."""
        ...

    async def seal(self) -> None:
        """Makes what was written fast to search (a flush); what is written is durable
        without it."""
        ...


#: Which documents of a commit each index holds already, by its generation's collection
#: (`DocumentRegistry.put`'s `written`).
Written = Mapping[str, frozenset[str]]


class DocumentRegistry(Protocol):
    """The commit records of document versions (`documents.DocumentEntry`)."""

    async def put(self, *entries: DocumentEntry, written: Written | None = None) -> None:
        """Writes records in one call: all of them or none. `written` (a commit's: which of
        its documents each index, by collection, holds already): IndexesBehind, writing
        nothing, when a live index of the knowledge base neither holds one of them nor takes
        it in its build (`indexes.model.build_takes_writes`)."""
        ...

    async def remove(self, entries: Iterable[DocumentEntry | RecordKey]) -> None: ...

    async def records(
        self, document_id: str, knowledge_base: str = DEFAULT_KB
    ) -> list[DocumentEntry]:
        """Every record of one document, any state, oldest first."""
        ...

    async def records_of(
        self, document_ids: Iterable[str], knowledge_base: str = DEFAULT_KB
    ) -> dict[str, list[DocumentEntry]]:
        """Every record of each named document of one knowledge base, by document_id."""
        ...

    async def get(self, document_id: str, knowledge_base: str = DEFAULT_KB) -> DocumentEntry | None:
        """The current (committed, not deleted) version of a document."""
        ...

    async def current_versions(
        self, document_ids: Iterable[str], knowledge_base: str = DEFAULT_KB
    ) -> dict[str, str]:
        """The current version of each named document of one knowledge base, by document_id;
        deleted or unknown ones are absent."""
        ...

    async def scan(self, knowledge_base: str | None = None) -> list[RecordKey]:
        """The key of every record (of one knowledge base, or of all), with the lease an
        uncommitted one holds (`RecordKey.lease_expires_ms`, kept as written by `put`)."""
        ...

    async def full(self, keys: Iterable[RecordKey]) -> list[DocumentEntry]:
        """The whole records of the given keys."""
        ...

    async def page(
        self, page_size: int, page_token: str = "", knowledge_base: str = DEFAULT_KB
    ) -> DocumentPage:
        """Current documents of one knowledge base in document_id order, `page_size` at a
        time."""
        ...

    async def build_page(
        self, knowledge_base: str, index_id: str, after: str, page_size: int
    ) -> DocumentPage | None:
        """What the build of a BUILDING index reads next — the current documents in id order
        after `after`, then (`after` READ_ALL) those its backlog names — with its read position
        moved atomically (None after the pass's last page: every write reaches the index from
        then on); an empty page once both are read; None when the index is not BUILDING."""
        ...

    async def build_written(
        self, knowledge_base: str, index_id: str, versions: Sequence[tuple[str, str]]
    ) -> None:
        """Takes the (document_id, version)s a build wrote out of its backlog."""
        ...

    async def texts(
        self, knowledge_base: str, keys: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], bytes]:
        """The packed pages (`core/indexes/texts.py`) of each (document_id, content_sha256) of
        one knowledge base that has them (versions ingested before texts were kept have
        none)."""
        ...

    async def counts(
        self, knowledge_bases: Sequence[str], groups: frozenset[str] | None = None
    ) -> dict[str, tuple[int, int]]:
        """(current documents, their chunks over all levels) of each knowledge base, counting
        only the documents visible to `groups` (None: all; `shared.access.document_visible`)."""
        ...


class KnowledgeBaseStore(Protocol):
    """The knowledge-base records (`knowledge_bases.KnowledgeBaseRecord`), by name (unique).
    Writes of the document registry into a knowledge base that is missing or not ACTIVE are
    refused (NOT_FOUND), atomically with the write."""

    async def create(self, record: KnowledgeBaseRecord) -> bool:
        """Inserts the record unless its name exists (atomic across replicas); returns
        whether it did."""
        ...

    async def update(self, record: KnowledgeBaseRecord) -> bool:
        """Replaces the display name and description of the existing ACTIVE record of that
        name (atomic); False when it is missing or not ACTIVE, so a deletion once begun is
        never undone, nor a deleted record brought back, by an update that read it before."""
        ...

    async def mark_deleting(self, name: str, owner: str, until_ms: int) -> bool:
        """ACTIVE → DELETING, atomically, the deletion `owner`'s until `until_ms` (its lease,
        renewed while it runs); False when the record is missing or not ACTIVE (another
        deletion got there first)."""
        ...

    async def renew_deleting(self, name: str, owner: str, until_ms: int) -> bool:
        """Extends `owner`'s lease on a DELETING record; False when it is no longer `owner`'s
        (taken over after the lease expired, or removed)."""
        ...

    async def claim_deleting(self, owner: str, now_ms: int, until_ms: int) -> list[str]:
        """The DELETING records whose deleter's lease expired before `now_ms`, each now
        `owner`'s until `until_ms` (compare-and-set: across replicas, one claimant each)."""
        ...

    async def remove_deleted(self, name: str, owner: str) -> bool:
        """Removes the record only while it is DELETING and `owner`'s, so a deletion can never
        remove a knowledge base created again under the same name; returns whether it did."""
        ...

    async def get(self, name: str) -> KnowledgeBaseRecord | None: ...

    async def remove(self, name: str) -> None:
        """Removes the record whatever its state (upgrades and tests)."""
        ...

    async def all(self) -> list[KnowledgeBaseRecord]:
        """Every record, any state, in name order."""
        ...


class Telemetry(Protocol):
    """What the core reports of its work, for the service's metrics (`retrieval_service.metrics`
    implements it on Prometheus; the core imports no metrics module). Every method is cheap
    and never fails the work it reports."""

    def stage(self, name: str) -> AbstractContextManager[object]:
        """Times one stage of a retrieval (`embed`, `recall`, `merge`, `rerank`)."""
        ...

    def retrieved(self, mode: str) -> None:
        """One retrieval answered with this retrieval_mode."""
        ...

    def threshold_dropped(self, count: int) -> None: ...

    def ingested(self, l1_chunks: int, l2_chunks: int, l3_chunks: int) -> None:
        """One document version committed, with its chunks per level."""
        ...

    def reclaimed(self, state: str, count: int) -> None:
        """`count` versions in `state` (pending, committed, tombstone) reconciliation removed."""
        ...


class NoTelemetry:
    """Reports nothing: the core's default, for tests and rigs that measure nothing."""

    def stage(self, name: str) -> AbstractContextManager[object]:
        return nullcontext()

    def retrieved(self, mode: str) -> None:
        return None

    def threshold_dropped(self, count: int) -> None:
        return None

    def ingested(self, l1_chunks: int, l2_chunks: int, l3_chunks: int) -> None:
        return None

    def reclaimed(self, state: str, count: int) -> None:
        return None


NO_TELEMETRY = NoTelemetry()


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into unit vectors of `dim` floats. Queries and passages may be encoded
    differently (e5 prefixes); the service embeds each query exactly once per retrieval.
    `deadline` is a `time.monotonic()` instant (None = none beyond cancellation)."""

    name: str
    dim: int

    async def embed_query(self, text: str, *, deadline: float | None = None) -> np.ndarray:
        """One query → a (dim,) unit vector."""
        ...

    async def embed_passages(
        self,
        texts: Sequence[str],
        *,
        on_batch: ProgressCallback | None = None,
        deadline: float | None = None,
    ) -> np.ndarray:
        """Passages → an (n, dim) array of unit vectors, in order."""
        ...

    async def aclose(self) -> None: ...


@dataclass(frozen=True, slots=True)
class RerankOutcome:
    docs: list[Doc]
    applied: bool
    error: str | None


class Reranker(Protocol):
    """Reorders candidates and cuts them to top_k; its failures are recorded in the outcome
    (`error`), never raised. Its settings appear in the retrieval meta."""

    enabled: bool
    model: str | None
    endpoint: str
    timeout_seconds: float

    async def rerank(self, query: str, docs: list[Doc], top_k: int) -> RerankOutcome: ...


class PageLoader(Protocol):
    """Turns a document's bytes of a known file type into pages of text; bad content is
    `InvalidArgument(field, …)`."""

    def __call__(self, content: bytes, file_type: str, field: str, filename: str) -> list[Page]: ...
