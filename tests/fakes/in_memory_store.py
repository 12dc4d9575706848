"""In-memory implementations of the retrieval core's two store ports (`core.ports`): a chunk
repository and a document registry that behave as the Milvus adapters do (rows keyed by
`version_pk`, hits carrying the stored fields and `score`, dense recall by inner product,
hybrid recall fusing dense and BM25 rankings with RRF, registry pages in filename order with
the service's page tokens, searches within a `SearchScope` whose filter means what
`core.filters.matches` says) and the knowledge-base records.
`tests/integration/test_store_contract.py` runs one suite against
these and against Milvus Lite, so they cannot drift apart.

Failures are a behaviour of the fakes, not a patch: `faults.fail_next("hybrid_search")` makes
the next call of that method raise `StoreUnavailable` (or the error given), as an unreachable
or broken store would, so tests drive the core's fallback and cleanup paths."""

from __future__ import annotations

import asyncio
import copy
import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from retrieval_service.core.documents import (
    COMMITTED,
    PENDING,
    TOMBSTONE,
    DocumentEntry,
    DocumentPage,
    RecordKey,
    current_of,
    decode_page_token,
    encode_page_token,
    record_key,
    version_pk,
)
from retrieval_service.core.errors import StoreFailed, StoreUnavailable
from retrieval_service.core.filters import matches
from retrieval_service.core.identity import DEFAULT_KB
from retrieval_service.core.knowledge_bases import ACTIVE, DELETING, KnowledgeBaseRecord
from retrieval_service.core.ports import DEFAULT_SCOPE, Doc, SearchScope, StoredChunk, Written
from shared.access import document_visible
from shared.errors import NotFound
from shared.lexical import bm25_text

# What the BM25 analyser reads as one term: a CJK character or a run of letters and digits.
_TERM = re.compile(r"[\u4e00-\u9fff]|[^\W_]+", re.UNICODE)

ErrorSpec = Exception | type[Exception]


@dataclass(slots=True)
class _Plan:
    error: ErrorSpec
    after: int  # calls still to succeed first
    times: int | None  # failures left; None = until healed


class Faults:
    """Per-method failure plans and call counts of one fake. A planned error is raised at the
    start of the call, before it changes anything (a store call fails whole)."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self._plans: dict[str, _Plan] = {}
        self._down: ErrorSpec | None = None

    def fail_next(
        self, method: str, error: ErrorSpec = StoreUnavailable, *, after: int = 0, times: int = 1
    ) -> None:
        """The next `times` calls of `method` after `after` successful ones raise `error` (a
        type is instantiated per call)."""
        self._plans[method] = _Plan(error, after, times)

    def fail_always(self, method: str, error: ErrorSpec = StoreUnavailable) -> None:
        self._plans[method] = _Plan(error, 0, None)

    def fail_all(self, error: ErrorSpec = StoreUnavailable) -> None:
        """Every call of every method fails until `heal()`: the store is down (or the process
        calling it has died, and nothing it would still do reaches the store)."""
        self._down = error

    def heal(self, method: str | None = None) -> None:
        if method is None:
            self._plans.clear()
            self._down = None
        else:
            self._plans.pop(method, None)

    def enter(self, method: str) -> None:
        self.calls[method] += 1
        if self._down is not None:
            raise self._down() if isinstance(self._down, type) else self._down
        plan = self._plans.get(method)
        if plan is None:
            return
        if plan.after > 0:
            plan.after -= 1
            return
        if plan.times is not None:
            plan.times -= 1
            if plan.times <= 0:
                del self._plans[method]
        raise plan.error() if isinstance(plan.error, type) else plan.error


def terms(text: str) -> list[str]:
    return _TERM.findall(text.lower())


@dataclass(slots=True)
class _Row:
    fields: dict[str, Any]
    vector: np.ndarray
    terms: Counter[str]


class InMemoryChunkRepository:
    """`core.ports.ChunkRepository` in memory: one dict of rows per level, keyed by
    `version_pk`. `dim` (when given) is enforced on writes and searches, as the store's
    schema does; a mismatch is `StoreFailed`. `hybrid_search` asks each side for
    `recall_depth × candidate_k` hits and fuses them with RRF(`rrf_k`), as the adapter's
    StoreConfig defaults do; BM25 scores with k1/b over the rows' analysed text."""

    def __init__(
        self,
        dim: int | None = None,
        *,
        rrf_k: int = 60,
        recall_depth: int = 2,
        bm25_k1: float = 1.2,
        bm25_b: float = 0.75,
    ) -> None:
        self.dim = dim
        self.rrf_k = rrf_k
        self.recall_depth = recall_depth
        self.bm25_k1 = bm25_k1
        self.bm25_b = bm25_b
        self.faults = Faults()
        self.seals = 0
        self._levels: dict[int, dict[str, _Row]] = {}

    async def _enter(self, method: str) -> None:
        # Every store call yields to the loop, as the adapter's calls in worker threads do.
        await asyncio.sleep(0)
        self.faults.enter(method)

    def _rows(self, level: int) -> dict[str, _Row]:
        return self._levels.setdefault(level, {})

    def _query(self, vector: Sequence[float]) -> np.ndarray:
        query = np.asarray(vector, dtype=np.float32).reshape(-1)
        if self.dim is not None and query.shape != (self.dim,):
            raise StoreFailed()
        return query

    # ---- recall --------------------------------------------------------------------------

    def _scoped(self, level: int, scope: SearchScope) -> dict[str, _Row]:
        return {
            pk: row
            for pk, row in self._rows(level).items()
            if row.fields["knowledge_base"] in scope.knowledge_bases
            and (scope.filter is None or matches(scope.filter, row.fields))
            and document_visible(row.fields.get("metadata"), scope.groups)
        }

    def _dense(
        self, level: int, query: np.ndarray, limit: int, scope: SearchScope
    ) -> list[tuple[str, float]]:
        scored = [
            (pk, float(np.dot(row.vector, query)))
            for pk, row in self._scoped(level, scope).items()
            if row.vector.shape == query.shape
        ]
        scored.sort(key=lambda item: -item[1])
        return scored[:limit]

    def _bm25(
        self, level: int, text: str, limit: int, scope: SearchScope
    ) -> list[tuple[str, float]]:
        # BM25 statistics over the scanned rows: Milvus scores within the partitions and
        # rows a search reads.
        rows = self._scoped(level, scope)
        query = set(terms(bm25_text(text)))
        if not rows or not query:
            return []
        n = len(rows)
        average = sum(sum(r.terms.values()) for r in rows.values()) / n or 1.0
        df = Counter(t for r in rows.values() for t in query if t in r.terms)
        k1, b = self.bm25_k1, self.bm25_b
        scored = []
        for pk, row in rows.items():
            length = sum(row.terms.values())
            score = 0.0
            for t in query:
                tf = row.terms.get(t, 0)
                if tf:
                    idf = math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5))
                    score += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * length / average))
            if score > 0:
                scored.append((pk, score))
        scored.sort(key=lambda item: -item[1])
        return scored[:limit]

    def _hit(self, level: int, pk: str, score: float) -> Doc:
        return {**self._rows(level)[pk].fields, "score": score}

    async def hybrid_search(
        self,
        level: int,
        text: str,
        vector: Sequence[float],
        candidate_k: int,
        scope: SearchScope = DEFAULT_SCOPE,
    ) -> list[Doc]:
        await self._enter("hybrid_search")
        query = self._query(vector)
        depth = self.recall_depth * candidate_k
        fused: dict[str, float] = {}
        rankings = (
            self._dense(level, query, depth, scope),
            self._bm25(level, text, depth, scope),
        )
        for ranking in rankings:
            for rank, (pk, _) in enumerate(ranking, start=1):
                fused[pk] = fused.get(pk, 0.0) + 1.0 / (self.rrf_k + rank)
        best = sorted(fused.items(), key=lambda item: -item[1])[:candidate_k]
        return [self._hit(level, pk, score) for pk, score in best]

    async def dense_search(
        self, level: int, vector: Sequence[float], limit: int, scope: SearchScope = DEFAULT_SCOPE
    ) -> list[Doc]:
        await self._enter("dense_search")
        found = self._dense(level, self._query(vector), limit, scope)
        return [self._hit(level, pk, score) for pk, score in found]

    async def get_versioned(self, level: int, keys: Sequence[tuple[str, str]]) -> dict[str, Doc]:
        await self._enter("get_versioned")
        rows = self._rows(level)
        out: dict[str, Doc] = {}
        for chunk_id, version in keys:
            row = rows.get(version_pk(chunk_id, version))
            if row is not None:
                out[chunk_id] = {"pk": version_pk(chunk_id, version), **row.fields}
        return out

    # ---- writes ----------------------------------------------------------------------------

    async def write_chunks(self, level: int, chunks: Sequence[StoredChunk]) -> None:
        """A row per chunk; a row of the same key is replaced (a retried write duplicates
        nothing)."""
        await self._enter("write_chunks")
        staged: dict[str, _Row] = {}
        for chunk in chunks:
            c = chunk.record
            vector = np.asarray(chunk.vector, dtype=np.float32).reshape(-1)
            if self.dim is not None and vector.shape != (self.dim,):
                raise StoreFailed()
            fields = {
                "chunk_id": c.chunk_id,
                "version": chunk.version,
                "text": c.text,
                "filename": c.filename,
                "file_type": c.file_type,
                "file_path": c.file_path,
                "page_number": c.page_number,
                "parent_chunk_id": c.parent_chunk_id,
                "root_chunk_id": c.root_chunk_id,
                "chunk_level": c.chunk_level,
                "chunk_idx": c.chunk_idx,
                "knowledge_base": chunk.knowledge_base,
                "document_id": chunk.document_id or c.filename,
                "metadata": copy.deepcopy(chunk.metadata or {}),
                "ingest_time": chunk.ingest_time,
            }
            analysed = Counter(terms(bm25_text(c.embedded_text))) if chunk.analysed else Counter()
            staged[version_pk(c.chunk_id, chunk.version)] = _Row(fields, vector.copy(), analysed)
        self._rows(level).update(staged)

    async def copy_rows(self, level: int, source: DocumentEntry, target: DocumentEntry) -> int:
        await self._enter("copy_rows")
        rows = self._rows(level)
        copied = 0
        sources = [
            (row.fields["chunk_id"], row)
            for row in list(rows.values())
            if row.fields["version"] == source.version
            and row.fields["knowledge_base"] == source.knowledge_base
        ]
        for chunk_id, row in sources:
            fields = {
                **row.fields,
                "version": target.version,
                "metadata": copy.deepcopy(target.metadata or {}),
                "ingest_time": target.ingest_time,
            }
            rows[version_pk(chunk_id, target.version)] = _Row(
                fields, row.vector.copy(), Counter(row.terms)
            )
            copied += 1
        return copied

    async def delete_rows(self, level: int, pks: Sequence[str]) -> int:
        """Returns what Milvus reports for a delete by primary key: every distinct key asked
        for, whether a row had it or not."""
        await self._enter("delete_rows")
        rows = self._rows(level)
        keys = set(pks)
        for pk in keys:
            rows.pop(pk, None)
        return len(keys)

    async def delete_versions(self, level: int, entries: Sequence[DocumentEntry]) -> int:
        await self._enter("delete_versions")
        rows = self._rows(level)
        versions = {(e.knowledge_base, e.version) for e in entries}
        doomed = [
            pk
            for pk, row in rows.items()
            if (row.fields["knowledge_base"], row.fields["version"]) in versions
        ]
        for pk in doomed:
            del rows[pk]
        return len(doomed)

    async def delete_older(
        self, level: int, document_id: str, version: str, knowledge_base: str = DEFAULT_KB
    ) -> int:
        await self._enter("delete_older")
        rows = self._rows(level)
        doomed = [
            pk
            for pk, row in rows.items()
            if row.fields["document_id"] == document_id
            and row.fields["knowledge_base"] == knowledge_base
            and row.fields["version"] < version
        ]
        for pk in doomed:
            del rows[pk]
        return len(doomed)

    async def delete_knowledge_base(self, level: int, knowledge_base: str) -> int:
        await self._enter("delete_knowledge_base")
        rows = self._rows(level)
        doomed = [pk for pk, row in rows.items() if row.fields["knowledge_base"] == knowledge_base]
        for pk in doomed:
            del rows[pk]
        return len(doomed)

    async def seal(self) -> None:
        await self._enter("seal")
        self.seals += 1

    # ---- inspection (tests only) -----------------------------------------------------------

    def rows(self, level: int) -> list[Doc]:
        """Every row of one level: its stored fields and `pk`, in key order."""
        return [{"pk": pk, **row.fields} for pk, row in sorted(self._rows(level).items())]

    def versions(self, filename: str) -> dict[int, Counter[str]]:
        """Per level, how many rows of `filename` each version has."""
        return {
            level: Counter(r["version"] for r in self.rows(level) if r["filename"] == filename)
            for level in sorted(self._levels)
        }


class InMemoryDocumentRegistry:
    """`core.ports.DocumentRegistry` in memory: one record per (knowledge base, document_id,
    version). Reads return copies, as a round trip through the store would. Given the
    `knowledge_bases` store, it behaves as the database does: a write into a knowledge base
    that is missing or not ACTIVE is refused (NOT_FOUND), and removing a knowledge base
    removes its records."""

    def __init__(self, knowledge_bases: InMemoryKnowledgeBaseStore | None = None) -> None:
        self.faults = Faults()
        self._records: dict[tuple[str, str, str], DocumentEntry] = {}
        self._texts: dict[tuple[str, str, str], bytes] = {}
        self._knowledge_bases = knowledge_bases
        if knowledge_bases is not None:
            knowledge_bases.on_remove.append(self._drop_knowledge_base)

    def _drop_knowledge_base(self, name: str) -> None:
        for pk in [pk for pk in self._records if pk[0] == name]:
            del self._records[pk]

    async def _enter(self, method: str) -> None:
        await asyncio.sleep(0)
        self.faults.enter(method)

    @staticmethod
    def _copy(entry: DocumentEntry) -> DocumentEntry:
        return replace(
            entry,
            page_counts=copy.deepcopy(entry.page_counts),
            metadata=copy.deepcopy(entry.metadata),
            text=b"",
        )

    @staticmethod
    def _pk(entry: DocumentEntry | RecordKey) -> tuple[str, str, str]:
        return (entry.knowledge_base, entry.document_id, entry.version)

    def _keys(self, knowledge_base: str | None = None) -> list[RecordKey]:
        # Key order of the Milvus registry: knowledge base, document_id (UTF-8 byte order),
        # then version.
        return [
            record_key(e)
            for pk, e in sorted(self._records.items(), key=lambda item: item[0])
            if knowledge_base is None or pk[0] == knowledge_base
        ]

    # ---- writes ----------------------------------------------------------------------------

    async def put(self, *entries: DocumentEntry, written: Written | None = None) -> None:
        # No index records here: the store an ingest writes is the only index, so `written`
        # has nothing to check.
        await self._enter("put")
        if self._knowledge_bases is not None:
            for name in sorted({e.knowledge_base for e in entries}):
                record = self._knowledge_bases.peek(name)
                if record is None or record.state != ACTIVE:
                    raise NotFound("knowledge_base", f"knowledge base {name!r} does not exist")
        for entry in entries:
            self._records[self._pk(entry)] = self._copy(entry)
            if entry.text:
                key = (entry.knowledge_base, entry.document_id, entry.content_sha256)
                self._texts.setdefault(key, entry.text)

    async def build_page(
        self, knowledge_base: str, index_id: str, after: str, page_size: int
    ) -> DocumentPage | None:
        return None  # no index records: none is BUILDING

    async def build_written(
        self, knowledge_base: str, index_id: str, versions: Sequence[tuple[str, str]]
    ) -> None:
        return None  # no index records: no build, no backlog

    async def remove(self, entries: Iterable[DocumentEntry | RecordKey]) -> None:
        await self._enter("remove")
        for entry in list(entries):
            self._records.pop(self._pk(entry), None)
        used = {(e.knowledge_base, e.document_id, e.content_sha256) for e in self._records.values()}
        self._texts = {k: v for k, v in self._texts.items() if k in used}

    async def texts(
        self, knowledge_base: str, keys: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], bytes]:
        await self._enter("texts")
        return {
            (doc, sha): self._texts[(knowledge_base, doc, sha)]
            for doc, sha in keys
            if (knowledge_base, doc, sha) in self._texts
        }

    # ---- reads -----------------------------------------------------------------------------

    def _of(self, document_id: str, knowledge_base: str) -> list[DocumentEntry]:
        found = [
            e
            for (kb, doc, _), e in self._records.items()
            if kb == knowledge_base and doc == document_id
        ]
        return [self._copy(e) for e in sorted(found, key=lambda e: e.version)]

    async def records(
        self, document_id: str, knowledge_base: str = DEFAULT_KB
    ) -> list[DocumentEntry]:
        """Every record of one document (pending ones included), oldest first."""
        await self._enter("records")
        return self._of(document_id, knowledge_base)

    async def records_of(
        self, document_ids: Iterable[str], knowledge_base: str = DEFAULT_KB
    ) -> dict[str, list[DocumentEntry]]:
        await self._enter("records_of")
        out: dict[str, list[DocumentEntry]] = {}
        for name in sorted(set(document_ids)):
            if found := self._of(name, knowledge_base):
                out[name] = found
        return out

    async def get(self, document_id: str, knowledge_base: str = DEFAULT_KB) -> DocumentEntry | None:
        await self._enter("get")
        records = self._of(document_id, knowledge_base)
        key = current_of(record_key(e) for e in records).get((knowledge_base, document_id))
        if key is None or key.state == TOMBSTONE:
            return None
        return next(e for e in records if e.version == key.version)

    async def current_versions(
        self, document_ids: Iterable[str], knowledge_base: str = DEFAULT_KB
    ) -> dict[str, str]:
        await self._enter("current_versions")
        names = set(document_ids)
        current = current_of(k for k in self._keys(knowledge_base) if k.document_id in names)
        return {doc: k.version for (_, doc), k in current.items() if k.state == COMMITTED}

    async def scan(self, knowledge_base: str | None = None) -> list[RecordKey]:
        await self._enter("scan")
        return self._keys(knowledge_base)

    async def full(self, keys: Iterable[RecordKey]) -> list[DocumentEntry]:
        await self._enter("full")
        found = (self._records.get(self._pk(k)) for k in keys)
        return [self._copy(e) for e in found if e is not None]

    async def page(
        self, page_size: int, page_token: str = "", knowledge_base: str = DEFAULT_KB
    ) -> DocumentPage:
        await self._enter("page")
        after = decode_page_token(page_token) if page_token else ""
        current = current_of(k for k in self._keys(knowledge_base) if k.state != PENDING)
        live = sorted(
            (k for k in current.values() if k.state == COMMITTED and k.document_id > after),
            key=lambda k: k.document_id.encode(),
        )
        entries = [self._copy(self._records[self._pk(k)]) for k in live[:page_size]]
        more = len(live) > page_size
        token = encode_page_token(entries[-1].document_id) if more and entries else ""
        return DocumentPage(entries, token)

    async def counts(
        self, knowledge_bases: Sequence[str], groups: frozenset[str] | None = None
    ) -> dict[str, tuple[int, int]]:
        await self._enter("counts")
        out: dict[str, tuple[int, int]] = {}
        for name in knowledge_bases:
            current = current_of(k for k in self._keys(name) if k.state != PENDING)
            live = [self._records[self._pk(k)] for k in current.values() if k.state == COMMITTED]
            seen = [e for e in live if document_visible(e.metadata, groups)]
            out[name] = (len(seen), sum(e.level_count(lvl) for e in seen for lvl in (1, 2, 3)))
        return out

    # ---- inspection (tests only) -----------------------------------------------------------

    def entries(self) -> list[DocumentEntry]:
        """Every record, any state, in key order."""
        return [self._copy(self._records[self._pk(k)]) for k in self._keys()]


class InMemoryKnowledgeBaseStore:
    """`core.ports.KnowledgeBaseStore` in memory."""

    def __init__(self) -> None:
        self.faults = Faults()
        self._records: dict[str, KnowledgeBaseRecord] = {}
        #: A DELETING record's deleter and the end of its lease (epoch ms).
        self._deleting: dict[str, tuple[str, int]] = {}
        #: Called with the name of each removed record (a linked registry's cascade).
        self.on_remove: list[Callable[[str], None]] = []

    def peek(self, name: str) -> KnowledgeBaseRecord | None:
        """The record, without a store call (what the registry's own check reads)."""
        return self._records.get(name)

    async def create(self, record: KnowledgeBaseRecord) -> bool:
        await self._enter("create")
        if record.name in self._records:
            return False
        self._records[record.name] = record
        return True

    async def _enter(self, method: str) -> None:
        await asyncio.sleep(0)
        self.faults.enter(method)

    async def update(self, record: KnowledgeBaseRecord) -> bool:
        await self._enter("update")
        current = self._records.get(record.name)
        if current is None or current.state != ACTIVE:
            return False
        self._records[record.name] = replace(
            current, display_name=record.display_name, description=record.description
        )
        return True

    async def mark_deleting(self, name: str, owner: str, until_ms: int) -> bool:
        await self._enter("mark_deleting")
        current = self._records.get(name)
        if current is None or current.state != ACTIVE:
            return False
        self._records[name] = replace(current, state=DELETING)
        self._deleting[name] = (owner, until_ms)
        return True

    async def renew_deleting(self, name: str, owner: str, until_ms: int) -> bool:
        await self._enter("renew_deleting")
        if self._deleter(name) != owner:
            return False
        self._deleting[name] = (owner, until_ms)
        return True

    async def claim_deleting(self, owner: str, now_ms: int, until_ms: int) -> list[str]:
        await self._enter("claim_deleting")
        claimed = []
        for name in sorted(self._records):
            if (
                self._records[name].state == DELETING
                and self._deleting.get(name, ("", 0))[1] < now_ms
            ):
                self._deleting[name] = (owner, until_ms)
                claimed.append(name)
        return claimed

    async def remove_deleted(self, name: str, owner: str) -> bool:
        await self._enter("remove_deleted")
        if self._deleter(name) != owner:
            return False
        await self.remove(name)
        return True

    def _deleter(self, name: str) -> str | None:
        current = self._records.get(name)
        if current is None or current.state != DELETING:
            return None
        return self._deleting.get(name, ("", 0))[0]

    async def get(self, name: str) -> KnowledgeBaseRecord | None:
        await self._enter("get")
        return self._records.get(name)

    async def remove(self, name: str) -> None:
        await self._enter("remove")
        self._records.pop(name, None)
        self._deleting.pop(name, None)
        for hook in self.on_remove:
            hook(name)

    async def all(self) -> list[KnowledgeBaseRecord]:
        await self._enter("all")
        return [self._records[name] for name in sorted(self._records)]
