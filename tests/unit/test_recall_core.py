"""`RetrievalPipeline` on the in-memory store (docs/api.md#retrieve-step-by-step): hybrid
recall and its 26 meta fields, the dense fallback and the failed modes driven by the fake's
own failures, auto-merge, current versions only, the score threshold and the candidate pool.
No model, no Milvus, no socket: a hashing embedder and a score-sort reranker."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from retrieval_service.core.chunking import ChunkRecord
from retrieval_service.core.documents import COMMITTED, PENDING, TOMBSTONE, DocumentEntry
from retrieval_service.core.errors import StoreFailed, StoreUnavailable
from retrieval_service.core.meta import RetrievalMeta
from retrieval_service.core.ports import CHUNK_FIELDS, Doc, RerankOutcome, StoredChunk
from retrieval_service.core.recall import RetrievalConfig, RetrievalPipeline
from shared.errors import InvalidArgument
from shared.scores import effective_score
from shared.trace_fields import RETRIEVAL_META_FIELD_NAMES
from tests.fakes.hashing_embedder import HashingEmbedder
from tests.fakes.in_memory_store import (
    InMemoryChunkRepository,
    InMemoryDocumentRegistry,
)

DIM = 64
LIGHTHOUSE = "the lighthouse keeper counts seagulls"


class ScoreSortReranker:
    """The `Reranker` port switched off, as the service runs without RERANK_*: candidates by
    effective score, cut to top_k, nothing applied."""

    enabled = False
    model: str | None = None
    endpoint = ""
    timeout_seconds = 5.0

    async def rerank(self, query: str, docs: list[Doc], top_k: int) -> RerankOutcome:
        def key(doc: Doc) -> float:
            score = effective_score(doc)
            return -score if score is not None else float("inf")

        ranked = sorted(docs, key=key)
        return RerankOutcome(ranked[:top_k], False, None)


@dataclass
class World:
    chunks: InMemoryChunkRepository
    registry: InMemoryDocumentRegistry
    embedder: HashingEmbedder

    def pipeline(self, **config: Any) -> RetrievalPipeline:
        return RetrievalPipeline(
            self.chunks,
            self.embedder,
            ScoreSortReranker(),
            RetrievalConfig(**config),
            self.registry,
        )

    async def document(
        self,
        filename: str,
        groups: list[list[str]],
        *,
        version: str = "v1",
        state: int | None = COMMITTED,
    ) -> DocumentEntry:
        """One page: an L1 over everything, an L2 per group, a leaf per text, written with
        the hashing embedder's vectors; its registry record in `state` (None = rows only)."""
        l1_id = f"{filename}::p1::l1::0"
        idx = iter(range(1000))

        def rec(level: int, n: int, text: str, parent: str) -> StoredChunk:
            chunk_id = f"{filename}::p1::l{level}::{n}"
            record = ChunkRecord(
                chunk_id=chunk_id,
                parent_chunk_id=parent,
                root_chunk_id=l1_id if level > 1 else chunk_id,
                chunk_level=level,
                chunk_idx=next(idx),
                text=text,
                filename=filename,
                file_type="txt",
                file_path=filename,
                page_number="1",
            )
            return StoredChunk(record, self.embedder.vector(text), version)

        rows: dict[int, list[StoredChunk]] = {1: [], 2: [], 3: []}
        rows[1].append(rec(1, 0, " ".join(" ".join(g) for g in groups), ""))
        leaf = 0
        for n, group in enumerate(groups):
            rows[2].append(rec(2, n, " ".join(group), l1_id))
            for text in group:
                rows[3].append(rec(3, leaf, text, f"{filename}::p1::l2::{n}"))
                leaf += 1
        for level, chunks in rows.items():
            await self.chunks.write_chunks(level, chunks)
        entry = DocumentEntry(
            filename, "txt", 1, {"1": [1, len(groups), leaf]}, version, state or PENDING
        )
        if state is not None:
            await self.registry.put(entry)
        return entry


@pytest.fixture
def world() -> World:
    return World(InMemoryChunkRepository(DIM), InMemoryDocumentRegistry(), HashingEmbedder(DIM))


async def singles(world: World) -> None:
    """Four documents of one leaf each (no siblings: nothing merges)."""
    await world.document("lighthouse.txt", [[LIGHTHOUSE]])
    await world.document("glacier.txt", [["a glacier researcher measures icebergs"]])
    await world.document("bees.txt", [["bees dance to tell the hive about flowers"]])
    await world.document("volcano.txt", [["volcanic ash covers the village"]])


def meta(**overrides: Any) -> RetrievalMeta:
    """The meta of a hybrid Retrieve over `singles` with the default config and top_k 2."""
    fields: dict[str, Any] = {
        "retrieval_pipeline": "recall_merge_rerank",
        "retrieval_mode": "hybrid",
        "candidate_k": 6,
        "candidate_k_source": "multiplier",
        "candidate_k_config_error": None,
        "retrieval_candidate_multiplier": 3,
        "retrieval_top_k": 2,
        "leaf_retrieve_level": 3,
        "recall_count": 4,
        "post_merge_candidate_count": 4,
        "candidate_count": 4,
        "auto_merge_enabled": True,
        "auto_merge_applied": False,
        "auto_merge_threshold": 2,
        "auto_merge_replaced_chunks": 0,
        "auto_merge_steps": 0,
        "rerank_enabled": False,
        "rerank_applied": False,
        "rerank_model": None,
        "rerank_endpoint": "",
        "rerank_error": None,
        "rerank_timeout_seconds": 5.0,
        "rerank_min_score": 0.0,
        "post_rerank_count": 2,
        "post_threshold_count": 2,
        "retrieval_empty": False,
    }
    fields.update(overrides)
    return RetrievalMeta(**fields)


def failed(error: str, **overrides: Any) -> RetrievalMeta:
    return meta(
        retrieval_mode="failed",
        recall_count=0,
        post_merge_candidate_count=0,
        candidate_count=0,
        rerank_error=error,
        post_rerank_count=0,
        post_threshold_count=0,
        retrieval_empty=True,
        **overrides,
    )


# ---- recall and its meta -----------------------------------------------------------------------


async def test_hybrid_recall_and_the_whole_meta(world: World) -> None:
    await singles(world)
    result = await world.pipeline().retrieve("lighthouse keeper", top_k=2)
    assert result.meta == meta()
    assert tuple(result.meta.to_dict()) == tuple(
        n
        for n in RETRIEVAL_META_FIELD_NAMES
        if n not in {"candidate_k_config_error", "rerank_model", "rerank_error"}
    )
    top = result.docs[0]
    assert top["chunk_id"] == "lighthouse.txt::p1::l3::0"
    assert set(top) == {*CHUNK_FIELDS, "score", "rrf_rank"}
    assert top["rrf_rank"] == 1
    assert top["score"] == pytest.approx(2 / 61)  # first on the dense and the BM25 side
    assert world.embedder.queries == ["lighthouse keeper"]  # embedded once


async def test_bm25_finds_a_word_the_vectors_rank_low(world: World) -> None:
    await singles(world)
    result = await world.pipeline().retrieve("icebergs", top_k=1)
    assert [d["filename"] for d in result.docs] == ["glacier.txt"]


@pytest.mark.parametrize("error", [StoreUnavailable, StoreFailed])
async def test_dense_fallback_when_hybrid_recall_fails(world: World, error: type) -> None:
    await singles(world)
    world.chunks.faults.fail_next("hybrid_search", error)
    result = await world.pipeline().retrieve("lighthouse keeper", top_k=2)
    assert result.meta == meta(retrieval_mode="dense_fallback")
    assert result.docs[0]["chunk_id"] == "lighthouse.txt::p1::l3::0"
    # The inner product, not an RRF score.
    inner = world.embedder.vector("lighthouse keeper") @ world.embedder.vector(LIGHTHOUSE)
    assert result.docs[0]["score"] == pytest.approx(float(inner))
    assert world.chunks.faults.calls["dense_search"] == 1


@pytest.mark.parametrize(
    ("fake", "method"),
    [("registry", "current_versions"), ("chunks", "get_versioned")],
)
async def test_dense_fallback_when_a_later_store_call_fails(
    world: World, fake: str, method: str
) -> None:
    await world.document("pair.txt", [["the lighthouse keeper", "the lighthouse lamp"]])
    getattr(world, fake).faults.fail_next(method)
    result = await world.pipeline().retrieve("lighthouse", top_k=2)
    assert result.meta.retrieval_mode == "dense_fallback"
    assert result.meta.auto_merge_applied  # the fallback merges like hybrid does
    assert [d["chunk_id"] for d in result.docs] == ["pair.txt::p1::l2::0"]


async def test_failed_when_dense_recall_fails_too(world: World) -> None:
    await singles(world)
    world.chunks.faults.fail_always("hybrid_search")
    world.chunks.faults.fail_always("dense_search", StoreFailed)
    result = await world.pipeline().retrieve("lighthouse keeper", top_k=2)
    assert result.docs == []
    assert result.meta == failed("retrieve_failed")


async def test_failed_when_the_query_cannot_be_embedded(world: World) -> None:
    await singles(world)
    world.embedder.fail_queries = True
    result = await world.pipeline().retrieve("lighthouse keeper", top_k=2)
    assert result.docs == []
    assert result.meta == failed("embedding_failed")
    assert not world.chunks.faults.calls["hybrid_search"]
    assert not world.chunks.faults.calls["dense_search"]


@pytest.mark.parametrize(
    ("query", "top_k", "field"),
    [("", None, "query"), ("   ", None, "query"), ("x" * 4001, None, "query"), ("ok", 0, "top_k")],
)
async def test_bad_input_raises_before_any_call(
    world: World, query: str, top_k: int | None, field: str
) -> None:
    with pytest.raises(InvalidArgument) as raised:
        await world.pipeline().retrieve(query, top_k=top_k)
    assert raised.value.field == field
    assert not world.embedder.queries
    assert not world.chunks.faults.calls


# ---- auto-merge ------------------------------------------------------------------------------


async def test_siblings_merge_into_their_parent(world: World) -> None:
    await world.document(
        "tree.txt",
        [["the lighthouse keeper", "the lighthouse lamp", "the lighthouse stairs"], ["a dog"]],
    )
    result = await world.pipeline().retrieve("lighthouse", top_k=10)
    m = result.meta
    assert (m.recall_count, m.post_merge_candidate_count) == (4, 2)
    assert (m.auto_merge_applied, m.auto_merge_replaced_chunks, m.auto_merge_steps) == (True, 3, 1)
    parent = next(d for d in result.docs if d["chunk_level"] == 2)
    assert parent["chunk_id"] == "tree.txt::p1::l2::0"
    assert parent["text"] == "the lighthouse keeper the lighthouse lamp the lighthouse stairs"
    assert parent["merged_from_children"] is True
    assert parent["merged_child_count"] == 3
    assert parent["version"] == "v1"
    # The parent carries its best child's score.
    leaves = await world.chunks.hybrid_search(
        3, "lighthouse", world.embedder.vector("lighthouse"), 6
    )
    best = max(h["score"] for h in leaves if h["parent_chunk_id"] == "tree.txt::p1::l2::0")
    assert parent["score"] == pytest.approx(best)
    assert [d["chunk_id"] for d in result.docs if d["chunk_level"] == 3] == ["tree.txt::p1::l3::3"]


async def test_merged_parents_merge_again_into_the_root(world: World) -> None:
    await world.document("tree.txt", [["lighthouse one", "lighthouse two"], ["lamp a", "lamp b"]])
    result = await world.pipeline().retrieve("lighthouse", top_k=10)
    m = result.meta
    assert (m.recall_count, m.post_merge_candidate_count, m.candidate_count) == (4, 1, 1)
    assert (m.auto_merge_replaced_chunks, m.auto_merge_steps) == (6, 2)  # 4 leaves, then 2 L2s
    assert [(d["chunk_id"], d["merged_child_count"]) for d in result.docs] == [
        ("tree.txt::p1::l1::0", 2)
    ]


async def test_merge_can_be_switched_off_or_need_more_siblings(world: World) -> None:
    await world.document("tree.txt", [["lighthouse one", "lighthouse two"], ["lamp a"]])
    off = await world.pipeline(auto_merge_enabled=False).retrieve("lighthouse", top_k=10)
    assert (off.meta.auto_merge_enabled, off.meta.auto_merge_applied) == (False, False)
    assert {d["chunk_level"] for d in off.docs} == {3}
    high = await world.pipeline(auto_merge_threshold=3).retrieve("lighthouse", top_k=10)
    assert high.meta.auto_merge_threshold == 3
    assert (high.meta.auto_merge_enabled, high.meta.auto_merge_replaced_chunks) == (True, 0)
    assert len(high.docs) == 3


# ---- current versions only ---------------------------------------------------------------------


async def test_only_current_versions_are_evidence(world: World) -> None:
    text = [["the lighthouse keeper", "the lighthouse lamp"]]
    # Replaced: v1's rows remain beside the current v2 (its cleanup has not run yet).
    await world.document("replaced.txt", text, version="v1")
    await world.document("replaced.txt", [["lighthouse rebuilt", "lighthouse relit"]], version="v2")
    # Being written: rows and a PENDING record only.
    await world.document("pending.txt", text, state=PENDING)
    # A crashed writer's rows, named by no record.
    await world.document("orphan.txt", text, state=None)
    # Deleted: a tombstone commits after v1.
    await world.document("deleted.txt", text, version="v1")
    await world.registry.put(DocumentEntry("deleted.txt", "", 0, {}, "v2", TOMBSTONE))
    # A newer version still pending: v1 stays current.
    await world.document("current.txt", text, version="v1")
    await world.document(
        "current.txt", [["lighthouse draft", "lighthouse notes"]], version="v2", state=PENDING
    )

    result = await world.pipeline(auto_merge_enabled=False).retrieve("lighthouse", top_k=20)
    found = sorted({(d["filename"], d["version"]) for d in result.docs})
    assert found == [("current.txt", "v1"), ("replaced.txt", "v2")]
    assert result.meta.recall_count == 4
    # The recalled pool was short of stale rows: recall was asked once more, for twice as many.
    assert world.chunks.faults.calls["hybrid_search"] == 1  # 14 leaves < candidate_k 60

    merged = await world.pipeline().retrieve("lighthouse", top_k=20)
    texts = {d["filename"]: d["text"] for d in merged.docs}
    # A parent is read in its children's version, not the superseded one beside it.
    assert texts == {
        "current.txt": "the lighthouse keeper the lighthouse lamp",
        "replaced.txt": "lighthouse rebuilt lighthouse relit",
    }


async def test_a_pool_short_of_stale_rows_is_asked_again(world: World) -> None:
    for n in range(3):
        await world.document(f"stale{n}.txt", [[f"lighthouse keeper {n}"]], state=PENDING)
    await world.document("live.txt", [["lighthouse lamp"]])
    result = await world.pipeline(top_k=1, candidate_multiplier=2).retrieve("lighthouse keeper")
    # candidate_k 2: the first recall held only stale rows, the second (4) reached live.txt.
    assert world.chunks.faults.calls["hybrid_search"] == 2
    assert [d["filename"] for d in result.docs] == ["live.txt"]
    assert result.meta.recall_count == 1


# ---- threshold and candidate pool ----------------------------------------------------------------


async def test_the_score_threshold_drops_weak_candidates(world: World) -> None:
    await singles(world)
    world.chunks.faults.fail_always("hybrid_search")  # dense scores: inner products
    result = await world.pipeline(min_score=0.9).retrieve(LIGHTHOUSE)
    assert [d["filename"] for d in result.docs] == ["lighthouse.txt"]
    assert (result.meta.post_rerank_count, result.meta.post_threshold_count) == (4, 1)
    assert result.meta.rerank_min_score == 0.9
    assert not result.meta.retrieval_empty


async def test_a_threshold_above_every_score_leaves_nothing(world: World) -> None:
    await singles(world)
    result = await world.pipeline(min_score=0.5).retrieve("lighthouse keeper", top_k=2)
    assert result.docs == []
    assert result.meta == meta(rerank_min_score=0.5, post_threshold_count=0, retrieval_empty=True)


@pytest.mark.parametrize(
    ("top_k", "multiplier", "raw", "pool"),
    [
        (2, 3, None, (6, "multiplier", None)),
        (2, 3, " ", (6, "multiplier", None)),
        (2, 3, "10", (10, "env", None)),
        (5, 3, "2", (5, "env", None)),
        (2, 1, "many", (2, "multiplier", "invalid RETRIEVAL_CANDIDATE_K")),
    ],
)
async def test_the_candidate_pool(
    world: World, top_k: int, multiplier: int, raw: str | None, pool: tuple[Any, ...]
) -> None:
    for n in range(12):
        await world.document(f"doc{n:02}.txt", [[f"lighthouse number {n}"]])
    pipeline = world.pipeline(candidate_multiplier=multiplier, candidate_k_raw=raw)
    result = await pipeline.retrieve("lighthouse", top_k=top_k)
    m = result.meta
    assert (m.candidate_k, m.candidate_k_source, m.candidate_k_config_error) == pool
    assert (m.retrieval_candidate_multiplier, m.retrieval_top_k) == (multiplier, top_k)
    assert m.recall_count == pool[0]  # the store was asked for candidate_k
    assert len(result.docs) == top_k


async def test_top_k_defaults_to_the_config(world: World) -> None:
    await singles(world)
    result = await world.pipeline(top_k=3).retrieve("lighthouse keeper")
    assert (result.meta.retrieval_top_k, result.meta.candidate_k, len(result.docs)) == (3, 9, 3)


async def test_an_empty_store_is_an_empty_hybrid_result(world: World) -> None:
    result = await world.pipeline().retrieve("lighthouse", top_k=2)
    assert result.docs == []
    expected = meta(
        recall_count=0,
        post_merge_candidate_count=0,
        candidate_count=0,
        post_rerank_count=0,
        post_threshold_count=0,
        retrieval_empty=True,
    )
    assert result.meta == expected
