"""Retrieve (SPEC.md §5 G/H/I, REFERENCE.md §1.4–1.7): candidate pool → embed the query once →
hybrid recall on the leaf level (dense fallback when hybrid recall or its post-processing
fails) → two-pass auto-merge → rrf_rank → rerank or score sort → top-k → threshold, with the
26 retrieval-meta fields. A failed recall is a result (`retrieval_mode = failed`), not an
error; only bad input raises."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import numpy as np

from retrieval_service.embedding import Embedder
from retrieval_service.merge import (
    Doc,
    MergeOutcome,
    effective_score,
    empty_merge_meta,
    merge_pass,
    parents_to_merge,
)
from retrieval_service.rerank import Reranker
from shared.errors import InvalidArgument

log = logging.getLogger(__name__)

PIPELINE = "recall_merge_rerank"
CANDIDATE_K_CONFIG_ERROR = "invalid RETRIEVAL_CANDIDATE_K"
RecallMode = Literal["hybrid", "dense", "bm25"]


class RecallStore(Protocol):
    """The part of the chunk store retrieval uses (see store.ChunkStore)."""

    async def hybrid_search(
        self, level: int, text: str, vector: Any, candidate_k: int
    ) -> list[Doc]: ...
    async def dense_search(self, level: int, vector: Any, limit: int) -> list[Doc]: ...
    async def bm25_search(self, level: int, text: str, limit: int) -> list[Doc]: ...
    async def get_chunks(self, level: int, ids: list[str]) -> dict[str, Doc]: ...


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
    # Evaluation knob (benchmarks): recall with one side only. "dense" reports
    # retrieval_mode dense_fallback, "bm25" reports hybrid; production uses "hybrid".
    recall: RecallMode = "hybrid"


def resolve_candidate_k(top_k: int, multiplier: int, raw: str | None) -> dict[str, Any]:
    """The candidate pool (REFERENCE.md §1.4.1): an explicit RETRIEVAL_CANDIDATE_K floored at
    top_k; otherwise top_k × multiplier; an unparsable explicit value falls back to the
    multiplier and is reported."""
    by_multiplier = max(top_k * multiplier, top_k)
    meta: dict[str, Any] = {"retrieval_candidate_multiplier": multiplier}
    text = (raw or "").strip()
    if not text:
        meta.update(candidate_k=by_multiplier, candidate_k_source="multiplier")
        return meta
    try:
        explicit = int(text)
    except ValueError:
        meta.update(
            candidate_k=by_multiplier,
            candidate_k_source="multiplier",
            candidate_k_config_error=CANDIDATE_K_CONFIG_ERROR,
        )
        return meta
    meta.update(candidate_k=max(explicit, top_k), candidate_k_source="env")
    return meta


def passes_threshold(doc: Doc, min_score: float) -> bool:
    score = effective_score(doc)
    return min_score <= 0 if score is None else score >= min_score


@dataclass(slots=True)
class RetrievalResult:
    docs: list[Doc]
    meta: dict[str, Any] = field(default_factory=dict)


class RetrievalPipeline:
    def __init__(
        self,
        store: RecallStore,
        embedder: Embedder,
        reranker: Reranker,
        config: RetrievalConfig,
    ) -> None:
        self._store = store
        self._embedder = embedder
        self._reranker = reranker
        self.config = config

    def _validate(self, query: str, top_k: int | None) -> int:
        if not query or not query.strip():
            raise InvalidArgument("query", "must not be blank")
        if len(query) > self.config.max_query_chars:
            raise InvalidArgument(
                "query", f"is {len(query)} characters, at most {self.config.max_query_chars}"
            )
        if top_k is None:
            return self.config.top_k
        if not 1 <= top_k <= 100:
            raise InvalidArgument("top_k", f"must be within 1..100, got {top_k}")
        return top_k

    async def retrieve(self, query: str, top_k: int | None = None) -> RetrievalResult:
        top_k = self._validate(query, top_k)
        cfg = self.config
        candidates = resolve_candidate_k(top_k, cfg.candidate_multiplier, cfg.candidate_k_raw)
        candidate_k = candidates["candidate_k"]
        try:
            vector = np.asarray(await self._embedder.embed_query(query), dtype=np.float32)
        except Exception:
            log.exception("query embedding failed")
            return self._failure("embedding_failed", top_k, candidates)

        try:
            if cfg.recall == "dense":
                hits = await self._store.dense_search(cfg.leaf_level, vector, candidate_k)
                return await self._finalize(query, hits, top_k, "dense_fallback", candidates)
            if cfg.recall == "bm25":
                hits = await self._store.bm25_search(cfg.leaf_level, query, candidate_k)
            else:
                hits = await self._store.hybrid_search(cfg.leaf_level, query, vector, candidate_k)
            return await self._finalize(query, hits, top_k, "hybrid", candidates)
        except Exception as exc:
            log.warning("hybrid recall failed, trying dense only: %s", exc)

        try:
            hits = await self._store.dense_search(cfg.leaf_level, vector, candidate_k)
            return await self._finalize(query, hits, top_k, "dense_fallback", candidates)
        except Exception:
            log.exception("dense fallback failed")
            return self._failure("retrieve_failed", top_k, candidates)

    async def _merge(self, docs: list[Doc]) -> MergeOutcome:
        cfg = self.config
        if not cfg.auto_merge_enabled or not docs:
            return MergeOutcome(list(docs), cfg.auto_merge_enabled, cfg.auto_merge_threshold, 0, 0)
        current, replaced, steps = list(docs), 0, 0
        for _ in range(2):  # L3 → L2, then L2 → L1
            wanted = parents_to_merge(current, cfg.auto_merge_threshold)
            parents: dict[str, Doc] = {}
            by_level: dict[int, list[str]] = {}
            for parent_id, child_level in wanted.items():
                if child_level > 1:
                    by_level.setdefault(child_level - 1, []).append(parent_id)
            for level, ids in sorted(by_level.items()):
                parents.update(await self._store.get_chunks(level, ids))
            current, count = merge_pass(current, cfg.auto_merge_threshold, parents)
            replaced += count
            steps += count > 0
        return MergeOutcome(current, True, cfg.auto_merge_threshold, replaced, steps)

    async def _finalize(
        self,
        query: str,
        hits: list[Doc],
        top_k: int,
        mode: str,
        candidates: dict[str, Any],
    ) -> RetrievalResult:
        merged = await self._merge(hits)
        ranked = [{**doc, "rrf_rank": i} for i, doc in enumerate(merged.docs, start=1)]
        outcome = await self._reranker.rerank(query, ranked, top_k)
        final = [d for d in outcome.docs if passes_threshold(d, self.config.min_score)]
        meta = self._reranker.base_meta(len(ranked))
        meta.update(rerank_applied=outcome.applied, rerank_error=outcome.error)
        meta.update(merged.meta())
        meta.update(candidates)
        meta.update(
            retrieval_mode=mode,
            retrieval_pipeline=PIPELINE,
            retrieval_top_k=top_k,
            leaf_retrieve_level=self.config.leaf_level,
            recall_count=len(hits),
            rerank_min_score=self.config.min_score,
            post_rerank_count=len(outcome.docs),
            post_threshold_count=len(final),
            retrieval_empty=not final,
        )
        return RetrievalResult(final, meta)

    def _failure(self, error: str, top_k: int, candidates: dict[str, Any]) -> RetrievalResult:
        cfg = self.config
        meta = self._reranker.base_meta(0)
        meta.update(rerank_error=error)
        meta.update(empty_merge_meta(cfg.auto_merge_enabled, cfg.auto_merge_threshold))
        meta.update(candidates)
        meta.update(
            retrieval_mode="failed",
            retrieval_pipeline=PIPELINE,
            retrieval_top_k=top_k,
            leaf_retrieve_level=cfg.leaf_level,
            recall_count=0,
            rerank_min_score=cfg.min_score,
            post_rerank_count=0,
            post_threshold_count=0,
            retrieval_empty=True,
        )
        return RetrievalResult([], meta)
