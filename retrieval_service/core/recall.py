"""Retrieve (docs/api.md#retrieve-step-by-step): candidate pool → embed the query once →
hybrid recall on the leaf level (dense fallback when hybrid recall or a later store call
fails) → two-pass auto-merge → rrf_rank → rerank or score sort → top-k → threshold, with the
26 retrieval-meta fields. A failed recall is a result (`retrieval_mode = failed`), not an
error; only bad input raises (and bugs, which surface as INTERNAL)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, cast

import numpy as np

from retrieval_service.core.errors import STORE_FAILURES, EmbedderUnavailable
from retrieval_service.core.filters import parse_filter
from retrieval_service.core.identity import DEFAULT_KB, kb_name
from retrieval_service.core.indexes.model import parse_index_name
from retrieval_service.core.indexes.service import ReadGroup
from retrieval_service.core.ingest.ingestor import Require, any_well_formed
from retrieval_service.core.merge import (
    Doc,
    MergeOutcome,
    merge_key,
    merge_pass,
    parents_to_merge,
)
from retrieval_service.core.meta import CandidateKSource, RetrievalMeta, RetrievalMode
from retrieval_service.core.ports import (
    NO_TELEMETRY,
    ChunkRepository,
    DocumentRegistry,
    Embedder,
    Reranker,
    RerankOutcome,
    SearchScope,
    Telemetry,
)
from shared.errors import FailedPrecondition, InvalidArgument
from shared.scores import effective_score
from shared.text_input import check_text
from shared.tracing import annotate, record_question, span

log = logging.getLogger(__name__)

PIPELINE = "recall_merge_rerank"
CANDIDATE_K_CONFIG_ERROR = "invalid RETRIEVAL_CANDIDATE_K"


@dataclass(frozen=True, slots=True)
class RetrievalConfig:
    """Query-time knobs, read once from RetrievalSettings by the composition root."""

    top_k: int = 8
    candidate_multiplier: int = 3
    candidate_k_raw: str | None = None
    leaf_level: int = 3
    auto_merge_enabled: bool = True
    auto_merge_threshold: int = 2
    min_score: float = 0.0
    max_query_chars: int = 4000


@dataclass(frozen=True, slots=True)
class CandidatePool:
    """The candidate pool's four meta fields (docs/api.md#candidate-pool)."""

    candidate_k: int
    candidate_k_source: CandidateKSource
    retrieval_candidate_multiplier: int
    candidate_k_config_error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "retrieval_candidate_multiplier": self.retrieval_candidate_multiplier,
            "candidate_k": self.candidate_k,
            "candidate_k_source": self.candidate_k_source,
        }
        if self.candidate_k_config_error is not None:
            out["candidate_k_config_error"] = self.candidate_k_config_error
        return out


def resolve_candidate_k(top_k: int, multiplier: int, raw: str | None) -> CandidatePool:
    """The candidate pool (docs/api.md#candidate-pool): an explicit RETRIEVAL_CANDIDATE_K floored at
    top_k; otherwise top_k × multiplier; an unparsable explicit value falls back to the
    multiplier and is reported."""
    by_multiplier = max(top_k * multiplier, top_k)
    text = (raw or "").strip()
    if not text:
        return CandidatePool(by_multiplier, "multiplier", multiplier)
    try:
        explicit = int(text)
    except ValueError:
        return CandidatePool(by_multiplier, "multiplier", multiplier, CANDIDATE_K_CONFIG_ERROR)
    return CandidatePool(max(explicit, top_k), "env", multiplier)


def _kb(hit: Doc) -> str:
    return str(hit.get("knowledge_base") or DEFAULT_KB)


def _document_id(hit: Doc) -> str:
    return str(hit.get("document_id") or hit.get("filename", ""))


def passes_threshold(doc: Doc, min_score: float) -> bool:
    score = effective_score(doc)
    return min_score <= 0 if score is None else score >= min_score


def sort_by_effective_score(docs: list[Doc]) -> list[Doc]:
    """The score sort (rerank off or failed): stable, descending; a doc without any score
    sorts last."""
    return sorted(
        docs, key=lambda d: -(s if (s := effective_score(d)) is not None else float("-inf"))
    )


@dataclass(slots=True)
class RetrievalResult:
    docs: list[Doc]
    meta: RetrievalMeta


@dataclass(frozen=True, slots=True)
class Source:
    """Knowledge bases read from one store with one embedder (one index generation)."""

    knowledge_bases: tuple[str, ...]
    store: ChunkRepository
    embedder: Embedder

    def within(self, scope: SearchScope) -> SearchScope:
        return replace(scope, knowledge_bases=self.knowledge_bases)


#: `reading(knowledge_bases, index)`: the index generation each knowledge base is read in.
Reading = Callable[[tuple[str, ...], str], Awaitable[list[ReadGroup]]]


class RetrievalPipeline:
    def __init__(
        self,
        store: ChunkRepository,
        embedder: Embedder,
        reranker: Reranker,
        config: RetrievalConfig,
        versions: DocumentRegistry,
        require: Require = any_well_formed,
        telemetry: Telemetry = NO_TELEMETRY,
        reading: Reading | None = None,
    ) -> None:
        """`versions`: the registry, asked for the current version of each recalled
        document; `require`: resolves the knowledge bases a request names
        (`KnowledgeBases.require`); `telemetry`: where stage times and outcomes go;
        `reading`: the index each knowledge base is read in (`Indexes.reading`; default:
        `store` and `embedder` for all)."""
        self._reading = reading
        self._telemetry = telemetry
        self._store = store
        self._require = require
        self._versions = versions
        self._embedder = embedder
        self._reranker = reranker
        self.config = config

    def _validate(self, query: str, top_k: int | None) -> int:
        check_text("query", query, self.config.max_query_chars)
        if top_k is None:
            return self.config.top_k
        if not 1 <= top_k <= 100:
            raise InvalidArgument("top_k", f"must be within 1..100, got {top_k}")
        return top_k

    async def scope(
        self, knowledge_bases: Sequence[str], filter_text: str, index: str = ""
    ) -> SearchScope:
        """The knowledge bases (each `knowledge_bases[i]`: INVALID_ARGUMENT or NOT_FOUND;
        none = the default, or the knowledge base of `index`) and the parsed filter
        (INVALID_ARGUMENT naming `filter`)."""
        parsed = parse_filter(filter_text)
        if not knowledge_bases and index:
            kb, _ = parse_index_name(index, "index")
            return SearchScope((await self._require(kb, "index"),), parsed)
        if not knowledge_bases:
            return SearchScope((await self._require("", "knowledge_bases"),), parsed)
        fields = [f"knowledge_bases[{i}]" for i in range(len(knowledge_bases))]
        for text, field in zip(knowledge_bases, fields, strict=True):
            kb_name(text, field)  # every name's form, before the store is asked
        names = [
            await self._require(text, field)
            for text, field in zip(knowledge_bases, fields, strict=True)
        ]
        return SearchScope(tuple(dict.fromkeys(names)), parsed)

    async def retrieve(
        self,
        query: str,
        top_k: int | None = None,
        *,
        knowledge_bases: Sequence[str] = (),
        filter_text: str = "",
        deadline: float | None = None,
        groups: frozenset[str] | None = None,
        index: str = "",
    ) -> RetrievalResult:
        """Recall within the named knowledge bases (none: the default) among the documents
        `filter_text` admits and `groups` may see (None: all; `SearchScope.groups`) — inside
        the search itself, so every count of the meta is of visible chunks. `deadline` (a
        `time.monotonic()` instant) bounds the query embedding; past it, DeadlineExceeded is
        raised rather than a `failed` answer nobody waits for. `index`: read this READY index
        of its knowledge base instead of the active one (docs/api.md#indexes)."""
        top_k = self._validate(query, top_k)
        try:
            scope = replace(await self.scope(knowledge_bases, filter_text, index), groups=groups)
            sources = await self._sources(scope.knowledge_bases, index)
        except STORE_FAILURES:
            # The knowledge bases cannot be looked up: a failed recall, as when the store
            # fails later (bad names and filters were refused before the store was asked).
            log.warning("knowledge-base look-up failed: retrieval_mode = failed")
            cfg = self.config
            pool = resolve_candidate_k(top_k, cfg.candidate_multiplier, cfg.candidate_k_raw)
            result = self._failure("retrieve_failed", top_k, pool)
        else:
            result = await self._retrieve(query, top_k, scope, deadline, sources)
        meta = result.meta
        self._telemetry.retrieved(meta.retrieval_mode)
        annotate(
            retrieval_mode=meta.retrieval_mode,
            recall_count=meta.recall_count,
            candidate_count=meta.candidate_count,
            post_threshold_count=meta.post_threshold_count,
            rerank_applied=meta.rerank_applied,
        )
        return result

    async def _sources(self, knowledge_bases: tuple[str, ...], index: str) -> list[Source]:
        """The store and embedder each group of knowledge bases is read with."""
        if self._reading is None:
            if index:
                raise FailedPrecondition("index", "this service has no indexes to choose from")
            return [Source(knowledge_bases, self._store, self._embedder)]
        return [
            Source(g.knowledge_bases, g.generation.chunks, g.generation.embedder)
            for g in await self._reading(knowledge_bases, index)
        ]

    async def _retrieve(
        self,
        query: str,
        top_k: int,
        scope: SearchScope,
        deadline: float | None,
        sources: list[Source],
    ) -> RetrievalResult:
        record_question(query)
        cfg = self.config
        pool = resolve_candidate_k(top_k, cfg.candidate_multiplier, cfg.candidate_k_raw)
        try:
            with self._telemetry.stage("embed"), span("retrieval embed", stage="embed"):
                vectors: dict[int, Sequence[float]] = {}
                for source in sources:
                    if id(source.embedder) not in vectors:
                        embedded = await source.embedder.embed_query(query, deadline=deadline)
                        # The array itself goes to the store (a sequence of floats to it).
                        vectors[id(source.embedder)] = cast(
                            "Sequence[float]", np.asarray(embedded, dtype=np.float32)
                        )
        except EmbedderUnavailable:
            log.exception("query embedding failed")
            return self._failure("embedding_failed", top_k, pool)

        try:
            with (
                self._telemetry.stage("recall"),
                span("retrieval recall", stage="recall", mode="hybrid"),
            ):
                hits = await self._recall_all(
                    sources,
                    lambda s, k: s.store.hybrid_search(
                        cfg.leaf_level, query, vectors[id(s.embedder)], k, s.within(scope)
                    ),
                    pool.candidate_k,
                )
            return await self._finalize(query, hits, top_k, "hybrid", pool, sources)
        except STORE_FAILURES:
            log.warning("hybrid recall failed, trying dense only")

        try:
            with (
                self._telemetry.stage("recall"),
                span("retrieval recall", stage="recall", mode="dense"),
            ):
                hits = await self._recall_all(
                    sources,
                    lambda s, k: s.store.dense_search(
                        cfg.leaf_level, vectors[id(s.embedder)], k, s.within(scope)
                    ),
                    pool.candidate_k,
                )
            return await self._finalize(query, hits, top_k, "dense_fallback", pool, sources)
        except STORE_FAILURES:
            log.warning("dense fallback failed: retrieval_mode = failed")
            return self._failure("retrieve_failed", top_k, pool)

    async def _recall_all(
        self,
        sources: list[Source],
        recall: Callable[[Source, int], Awaitable[list[Doc]]],
        candidate_k: int,
    ) -> list[Doc]:
        """`_current_only` in each source; hits of several generations (knowledge bases read
        in indexes of different embedders or chunkings) are ranked together by score."""
        if len(sources) == 1:
            return await self._current_only(partial(recall, sources[0]), candidate_k)
        hits: list[Doc] = []
        for source in sources:
            hits += await self._current_only(partial(recall, source), candidate_k)
        hits.sort(key=lambda h: -float(h.get("score") or 0.0))
        return hits[:candidate_k]

    async def _current_only(
        self, recall: Callable[[int], Awaitable[list[Doc]]], candidate_k: int
    ) -> list[Doc]:
        """The recalled leaves of current document versions only: rows of a version being
        written, superseded or deleted are never evidence. Only while such rows exist (an
        ingest in flight) does a recall come back short; it is then asked once for twice as
        many, so the pool stays full."""
        hits = await recall(candidate_k)
        kept = await self._current(hits)
        if len(kept) < len(hits) and len(hits) >= candidate_k:
            hits = await recall(2 * candidate_k)
            kept = await self._current(hits)
        return kept[:candidate_k]

    async def _current(self, hits: list[Doc]) -> list[Doc]:
        """The hits of current versions, keyed by (knowledge base, document_id): one registry
        query per knowledge base among them."""
        by_kb: dict[str, set[str]] = {}
        for h in hits:
            by_kb.setdefault(_kb(h), set()).add(_document_id(h))
        current: dict[tuple[str, str], str] = {}
        for kb, ids in by_kb.items():
            for document_id, version in (await self._versions.current_versions(ids, kb)).items():
                current[(kb, document_id)] = version
        return [h for h in hits if current.get((_kb(h), _document_id(h))) == h.get("version")]

    async def _merge(self, docs: list[Doc], sources: list[Source]) -> MergeOutcome:
        cfg = self.config
        if not cfg.auto_merge_enabled or not docs:
            return MergeOutcome(list(docs), cfg.auto_merge_enabled, cfg.auto_merge_threshold, 0, 0)
        current, replaced, steps = list(docs), 0, 0
        for _ in range(2):  # L3 → L2, then L2 → L1
            wanted = parents_to_merge(current, cfg.auto_merge_threshold)
            # A parent is read in the version of the child that names it, never another one;
            # one read per level and knowledge base (a chunk id is unique within one).
            reads: dict[tuple[int, str], dict[str, tuple[str, str]]] = {}
            for d in current:
                parent_id = str(d.get("parent_chunk_id") or "").strip()
                key = merge_key(parent_id, d) if parent_id else ""
                if wanted.get(key, 0) > 1:
                    read = reads.setdefault((wanted[key] - 1, _kb(d)), {})
                    read[key] = (parent_id, str(d.get("version") or ""))
            parents: dict[str, Doc] = {}
            stores = {kb: s.store for s in sources for kb in s.knowledge_bases}
            for (level, kb), keys in sorted(reads.items()):
                store = stores.get(kb, self._store)
                got = await store.get_versioned(level, list(keys.values()))
                parents.update({k: got[pid] for k, (pid, _) in keys.items() if pid in got})
            current, count = merge_pass(current, cfg.auto_merge_threshold, parents)
            replaced += count
            steps += count > 0
        return MergeOutcome(current, True, cfg.auto_merge_threshold, replaced, steps)

    async def _finalize(
        self,
        query: str,
        hits: list[Doc],
        top_k: int,
        mode: RetrievalMode,
        pool: CandidatePool,
        sources: list[Source],
    ) -> RetrievalResult:
        with self._telemetry.stage("merge"), span("retrieval merge", stage="merge") as traced:
            merged = await self._merge(hits, sources)
            traced.set_attribute("supermew.replaced_chunks", merged.replaced)
        ranked = [{**doc, "rrf_rank": i} for i, doc in enumerate(merged.docs, start=1)]
        with self._telemetry.stage("rerank"), span("retrieval rerank", stage="rerank") as traced:
            outcome = await self._reranker.rerank(query, ranked, top_k)
            traced.set_attribute("supermew.rerank_applied", outcome.applied)
        final = [d for d in outcome.docs if passes_threshold(d, self.config.min_score)]
        self._telemetry.threshold_dropped(len(outcome.docs) - len(final))
        meta = self._meta(mode, pool, top_k, len(hits), merged, outcome, len(ranked), len(final))
        return RetrievalResult(final, meta)

    def _failure(self, error: str, top_k: int, pool: CandidatePool) -> RetrievalResult:
        cfg = self.config
        merged = MergeOutcome([], cfg.auto_merge_enabled, cfg.auto_merge_threshold, 0, 0)
        outcome = RerankOutcome([], False, error)
        return RetrievalResult([], self._meta("failed", pool, top_k, 0, merged, outcome, 0, 0))

    def _meta(
        self,
        mode: RetrievalMode,
        pool: CandidatePool,
        top_k: int,
        recall_count: int,
        merged: MergeOutcome,
        rerank: RerankOutcome,
        candidate_count: int,
        kept: int,
    ) -> RetrievalMeta:
        """The one place the 26 fields are assembled, for results and failures alike."""
        reranker = self._reranker
        return RetrievalMeta(
            retrieval_pipeline=PIPELINE,
            retrieval_mode=mode,
            candidate_k=pool.candidate_k,
            candidate_k_source=pool.candidate_k_source,
            candidate_k_config_error=pool.candidate_k_config_error,
            retrieval_candidate_multiplier=pool.retrieval_candidate_multiplier,
            retrieval_top_k=top_k,
            leaf_retrieve_level=self.config.leaf_level,
            recall_count=recall_count,
            post_merge_candidate_count=len(merged.docs),
            candidate_count=candidate_count,
            auto_merge_enabled=merged.enabled,
            auto_merge_applied=merged.applied,
            auto_merge_threshold=merged.threshold,
            auto_merge_replaced_chunks=merged.replaced,
            auto_merge_steps=merged.steps,
            rerank_enabled=reranker.enabled,
            rerank_applied=rerank.applied,
            rerank_model=reranker.model,
            rerank_endpoint=reranker.endpoint,
            rerank_error=rerank.error,
            rerank_timeout_seconds=reranker.timeout_seconds,
            rerank_min_score=self.config.min_score,
            post_rerank_count=len(rerank.docs),
            post_threshold_count=kept,
            retrieval_empty=kept == 0,
        )
