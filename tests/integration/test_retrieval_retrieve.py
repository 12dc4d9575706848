"""Retrieve through the real RPC on real Milvus Lite: the candidate pool, leaf levels,
auto-merging against the raw recall, rerank against a scripted HTTP server on 127.0.0.1,
the threshold, the failure paths through real code, and the meta's presence rules."""

from __future__ import annotations

from dataclasses import replace

import pytest

from retrieval_service.adapters.milvus.connection import StoreConfig
from retrieval_service.core.merge import merge_pass
from tests.fakes.rerank_server import RerankServer
from tests.fakes.retrieval_doubles import FailingEmbedder, WrongDimensionQueryEmbedder
from tests.integration.retrieval_harness import copy_corpus, model, running_service

META_KEYS = {
    "retrieval_pipeline", "retrieval_mode", "candidate_k", "candidate_k_source",
    "candidate_k_config_error", "retrieval_candidate_multiplier", "retrieval_top_k",
    "leaf_retrieve_level", "recall_count", "post_merge_candidate_count", "candidate_count",
    "auto_merge_enabled", "auto_merge_applied", "auto_merge_threshold",
    "auto_merge_replaced_chunks", "auto_merge_steps", "rerank_enabled", "rerank_applied",
    "rerank_model", "rerank_endpoint", "rerank_error", "rerank_timeout_seconds",
    "rerank_min_score", "post_rerank_count", "post_threshold_count", "retrieval_empty",
}  # fmt: skip
# Keys absent on a plain successful retrieval without rerank (their value is None).
NONE_WHEN_UNSET = {"candidate_k_config_error", "rerank_model", "rerank_error"}

RERANK = {"rerank_host": None, "rerank_model": "jina-reranker-v2", "rerank_api_key": "sk-test"}


@pytest.fixture
def rerank_server():
    server = RerankServer().start()
    yield server
    server.stop()


def _rerank(server: RerankServer, **extra):
    return {**RERANK, "rerank_host": server.host, **extra}


async def test_default_meta_has_exactly_the_present_keys(tmp_path) -> None:
    async with running_service(copy_corpus(tmp_path)) as svc:
        docs, meta = await svc.retrieve("which planet is the hottest")
    assert set(meta) == META_KEYS - NONE_WHEN_UNSET
    assert meta["retrieval_pipeline"] == "recall_merge_rerank"
    assert meta["retrieval_mode"] == "hybrid"
    assert (meta["candidate_k"], meta["candidate_k_source"]) == (24, "multiplier")
    assert (meta["retrieval_top_k"], meta["retrieval_candidate_multiplier"]) == (8, 3)
    assert meta["leaf_retrieve_level"] == 3
    assert meta["recall_count"] == 24  # the corpus has 25 leaves
    assert meta["candidate_count"] == meta["post_merge_candidate_count"]
    assert (meta["rerank_enabled"], meta["rerank_applied"], meta["rerank_endpoint"]) == (
        False,
        False,
        "",
    )
    assert meta["rerank_timeout_seconds"] == 5.0 and meta["rerank_min_score"] == 0.0
    assert meta["post_rerank_count"] == meta["post_threshold_count"] == len(docs) <= 8
    assert meta["retrieval_empty"] is False
    assert [d["rrf_rank"] for d in docs] != []
    scores = [d["score"] for d in docs]
    assert scores == sorted(scores, reverse=True)  # no rerank: sorted by score


@pytest.mark.parametrize(
    ("settings", "top_k", "expected"),
    [
        ({}, 4, (12, "multiplier", None)),
        ({"retrieval_candidate_multiplier": 5}, 2, (10, "multiplier", None)),
        ({"retrieval_candidate_k": " 7 "}, 4, (7, "env", None)),
        ({"retrieval_candidate_k": "2"}, 4, (4, "env", None)),  # floored at top_k
        ({"retrieval_candidate_k": "-5"}, 3, (3, "env", None)),
        ({"retrieval_candidate_k": "lots"}, 4, (12, "multiplier", "invalid RETRIEVAL_CANDIDATE_K")),
        ({"retrieval_candidate_k": ""}, 4, (12, "multiplier", None)),
    ],
)
async def test_candidate_k(tmp_path, settings, top_k, expected) -> None:
    async with running_service(copy_corpus(tmp_path), **settings) as svc:
        _, meta = await svc.retrieve("tea", top_k=top_k)
    assert (
        meta["candidate_k"],
        meta["candidate_k_source"],
        meta.get("candidate_k_config_error"),
    ) == expected
    assert meta["recall_count"] == min(expected[0], 25)


async def test_candidate_k_from_the_environment(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("RETRIEVAL_CANDIDATE_K", "not-a-number")
    monkeypatch.setenv("RETRIEVAL_TOP_K", "3")
    async with running_service(copy_corpus(tmp_path)) as svc:
        _, meta = await svc.retrieve("tea")
    assert (meta["retrieval_top_k"], meta["candidate_k"], meta["candidate_k_source"]) == (
        3,
        9,
        "multiplier",
    )
    assert meta["candidate_k_config_error"] == "invalid RETRIEVAL_CANDIDATE_K"


@pytest.mark.parametrize("level", [1, 2])
async def test_upper_leaf_levels(tmp_path, level) -> None:
    async with running_service(copy_corpus(tmp_path), leaf_retrieve_level=level) as svc:
        docs, meta = await svc.retrieve("which planet is the hottest", top_k=3)
    assert meta["leaf_retrieve_level"] == level and meta["retrieval_mode"] == "hybrid"
    assert docs and all(d["chunk_level"] <= level for d in docs)
    assert docs[0]["filename"] == "solar.html" and "Venus" in docs[0]["text"]
    if level == 1:
        assert meta["auto_merge_steps"] == 0 and meta["auto_merge_applied"] is False


async def test_auto_merge_matches_the_two_passes_over_the_raw_recall(tmp_path) -> None:
    db = copy_corpus(tmp_path)
    query = "Venus hottest planet Jupiter largest Saturn rings"
    async with running_service(db, auto_merge_enabled=False) as svc:
        raw, raw_meta = await svc.retrieve(query, top_k=100)
        store = svc.app.chunks
        l2 = await store.get_chunks(2, list({d["parent_chunk_id"] for d in raw}))
        l1 = await store.get_chunks(1, list({p["parent_chunk_id"] for p in l2.values()}))
    assert raw_meta["auto_merge_enabled"] is False and raw_meta["auto_merge_steps"] == 0
    raw_by_recall = sorted(raw, key=lambda d: d["rrf_rank"])
    for d in raw_by_recall:
        d.pop("rrf_rank")
    # The answer's chunks carry no version, so merge_pass keys their parents by plain chunk id;
    # the store's rows do carry one: the mirror drops it so both passes key the same way.
    l2 = {cid: {k: v for k, v in row.items() if k != "version"} for cid, row in l2.items()}
    once, first = merge_pass(raw_by_recall, 2, l2)
    twice, second = merge_pass(once, 2, l1)
    assert first > 0 and second > 0  # this query exercises both passes

    async with running_service(db) as svc:
        merged, meta = await svc.retrieve(query, top_k=100)
    assert meta["auto_merge_applied"] is True and meta["auto_merge_steps"] == 2
    assert meta["auto_merge_replaced_chunks"] == first + second
    assert meta["post_merge_candidate_count"] == len(twice)
    by_rank = sorted(merged, key=lambda d: d["rrf_rank"])
    assert [d["chunk_id"] for d in by_rank] == [d["chunk_id"] for d in twice]
    for got, want in zip(by_rank, twice, strict=True):
        assert got["score"] == pytest.approx(want["score"])
        assert got["merged_from_children"] == bool(want.get("merged_from_children"))
        assert got["merged_child_count"] == want.get("merged_child_count", 0)


async def test_auto_merge_threshold_above_every_group_merges_nothing(tmp_path) -> None:
    async with running_service(copy_corpus(tmp_path), auto_merge_threshold=99) as svc:
        docs, meta = await svc.retrieve("Venus hottest planet", top_k=5)
    assert meta["auto_merge_enabled"] is True and meta["auto_merge_applied"] is False
    assert (meta["auto_merge_steps"], meta["auto_merge_replaced_chunks"]) == (0, 0)
    assert all(d["chunk_level"] == 3 for d in docs)


# ---- rerank -------------------------------------------------------------------------------


async def test_rerank_success_keeps_the_provider_order(tmp_path, rerank_server) -> None:
    async with running_service(copy_corpus(tmp_path), **_rerank(rerank_server)) as svc:
        rerank_server.reply_json(
            {
                "results": [
                    {"index": 2, "relevance_score": 0.9},
                    {"index": 0, "relevance_score": 0.4},
                ]
            }
        )
        docs, meta = await svc.retrieve("tea kinds", top_k=5)
    sent = rerank_server.requests[-1]
    assert sent.path == "/v1/rerank"
    assert sent.headers["Authorization"] == "Bearer sk-test"
    assert sent.body["model"] == "jina-reranker-v2" and sent.body["query"] == "tea kinds"
    assert sent.body["top_n"] == 5 and sent.body["return_documents"] is False
    assert len(sent.body["documents"]) == meta["candidate_count"]
    assert [d["rrf_rank"] for d in docs] == [3, 1]
    assert [d["rerank_score"] for d in docs] == [0.9, 0.4]
    assert docs[0]["text"] == sent.body["documents"][2]
    assert meta["rerank_enabled"] is True and meta["rerank_applied"] is True
    assert "rerank_error" not in meta
    assert meta["rerank_model"] == "jina-reranker-v2"
    assert meta["rerank_endpoint"] == rerank_server.host + "/v1/rerank"
    assert (meta["post_rerank_count"], meta["post_threshold_count"]) == (2, 2)


@pytest.mark.parametrize(
    "values",
    [
        {"rerank_host": "https://your-rerank-host"},
        {"rerank_model": "your_rerank_model"},
        {"rerank_api_key": "your_rerank_api_key"},
        {"rerank_api_key": "replace-with-key"},
        {"rerank_api_key": "  "},
        {"rerank_model": None},
    ],
)
async def test_placeholders_count_as_unset(tmp_path, rerank_server, values) -> None:
    settings = {**_rerank(rerank_server), **values}
    async with running_service(copy_corpus(tmp_path), **settings) as svc:
        docs, meta = await svc.retrieve("tea kinds", top_k=3)
    assert rerank_server.requests == []
    assert meta["rerank_enabled"] is False and meta["rerank_applied"] is False
    assert docs and all("rerank_score" not in d for d in docs)


async def test_rerank_disabled_makes_no_call(tmp_path, rerank_server) -> None:
    async with running_service(copy_corpus(tmp_path)) as svc:
        _, meta = await svc.retrieve("tea kinds", top_k=3)
    assert rerank_server.requests == [] and meta["rerank_enabled"] is False
    assert "rerank_model" not in meta and meta["rerank_endpoint"] == ""


# Generous enough that a loaded CI machine answers the non-timeout cases in time.
RERANK_TIMEOUT = 1.5


@pytest.mark.parametrize(
    ("script", "error"),
    [
        (lambda s: s.reply_raw(500, "upstream exploded"), "HTTP 500: upstream exploded"),
        (lambda s: s.reply_json({"results": []}), "empty_rerank_results"),
        (
            lambda s: s.reply_json({"results": [{"index": 99, "relevance_score": 1.0}]}),
            "empty_rerank_results",
        ),
        (
            lambda s: s.reply_json({"results": [{"index": "0", "relevance_score": 1.0}]}),
            "empty_rerank_results",
        ),
        (lambda s: s.reply_raw(200, "not json"), None),
        (lambda s: s.reply_json({"unexpected": []}), "'results'"),
        (lambda s: s.delay(RERANK_TIMEOUT * 3), None),
    ],
    ids=["http500", "empty", "out_of_range", "non_int_index", "bad_json", "no_results", "timeout"],
)
async def test_rerank_failures_fall_back_to_the_score_sort(
    tmp_path, rerank_server, script, error
) -> None:
    settings = _rerank(rerank_server, rerank_timeout_seconds=RERANK_TIMEOUT)
    async with running_service(copy_corpus(tmp_path), **settings) as svc:
        script(rerank_server)
        docs, meta = await svc.retrieve("tea kinds", top_k=3)
    assert meta["retrieval_mode"] == "hybrid"
    assert meta["rerank_applied"] is True and meta["rerank_timeout_seconds"] == RERANK_TIMEOUT
    assert meta["rerank_error"]
    if error is not None:
        assert meta["rerank_error"] == error
    assert len(docs) == 3 and all("rerank_score" not in d for d in docs)
    scores = [d["score"] for d in docs]
    assert scores == sorted(scores, reverse=True)


async def test_rerank_partial_results_with_an_out_of_range_index(tmp_path, rerank_server) -> None:
    async with running_service(copy_corpus(tmp_path), **_rerank(rerank_server)) as svc:
        rerank_server.reply_json(
            {
                "results": [
                    {"index": 42, "relevance_score": 0.99},
                    {"index": 1, "relevance_score": 0.5},
                ]
            }
        )
        docs, meta = await svc.retrieve("tea kinds", top_k=3)
    assert [(d["rrf_rank"], d["rerank_score"]) for d in docs] == [(2, 0.5)]
    assert "rerank_error" not in meta and meta["post_rerank_count"] == 1


async def test_threshold_with_rerank(tmp_path, rerank_server) -> None:
    settings = _rerank(rerank_server, rerank_min_score=0.5)
    async with running_service(copy_corpus(tmp_path), **settings) as svc:
        rerank_server.reply_json(
            {
                "results": [
                    {"index": 0, "relevance_score": 0.8},
                    {"index": 1, "relevance_score": 0.5},
                    {"index": 2, "relevance_score": 0.2},
                ]
            }
        )
        docs, meta = await svc.retrieve("tea kinds", top_k=3)
    assert [d["rerank_score"] for d in docs] == [0.8, 0.5]  # >= threshold passes
    assert (meta["post_rerank_count"], meta["post_threshold_count"]) == (3, 2)
    assert meta["rerank_min_score"] == 0.5 and meta["retrieval_empty"] is False


async def test_threshold_without_rerank_compares_fusion_scores(tmp_path) -> None:
    db = copy_corpus(tmp_path)
    async with running_service(db, auto_merge_enabled=False) as svc:
        everything, _ = await svc.retrieve("tea kinds", top_k=10)
    cut = everything[3]["score"]
    async with running_service(db, auto_merge_enabled=False, rerank_min_score=cut) as svc:
        docs, meta = await svc.retrieve("tea kinds", top_k=10)
    assert [d["chunk_id"] for d in docs] == [d["chunk_id"] for d in everything if d["score"] >= cut]
    assert meta["post_rerank_count"] == 10 and meta["post_threshold_count"] == len(docs) >= 4
    async with running_service(db, rerank_min_score=1.0) as svc:
        docs, meta = await svc.retrieve("tea kinds", top_k=10)
    assert docs == [] and meta["retrieval_empty"] is True and meta["retrieval_mode"] == "hybrid"
    assert meta["post_threshold_count"] == 0 and meta["post_rerank_count"] > 0


# ---- failure paths through the real code ----------------------------------------------------


def _failure_meta_checks(meta: dict, error: str) -> None:
    assert meta["retrieval_mode"] == "failed" and meta["rerank_error"] == error
    assert meta["recall_count"] == meta["candidate_count"] == 0
    assert meta["post_merge_candidate_count"] == 0
    assert meta["post_rerank_count"] == meta["post_threshold_count"] == 0
    assert meta["retrieval_empty"] is True and meta["rerank_applied"] is False
    assert meta["auto_merge_applied"] is False and meta["auto_merge_steps"] == 0
    assert meta["auto_merge_replaced_chunks"] == 0
    assert set(meta) == META_KEYS - NONE_WHEN_UNSET | {"rerank_error"}


async def test_embedder_that_raises_gives_embedding_failed(tmp_path) -> None:
    failing = FailingEmbedder(model(), fail_queries=True)
    async with running_service(copy_corpus(tmp_path), embedder=failing) as svc:
        docs, meta = await svc.retrieve("tea kinds", top_k=3)
    assert docs == []
    _failure_meta_checks(meta, "embedding_failed")
    assert meta["candidate_k"] == 9


async def test_broken_sparse_side_falls_back_to_dense(tmp_path, rerank_server) -> None:
    db = copy_corpus(tmp_path)
    counting = FailingEmbedder(model())
    # Milvus Lite rejects any BM25 drop_ratio_search other than 0: the sparse request fails.
    broken = replace(_store(db), bm25_drop_ratio_search=0.2)
    async with running_service(
        db, embedder=counting, store=broken, **_rerank(rerank_server)
    ) as svc:
        docs, meta = await svc.retrieve("which planet is the hottest", top_k=3)
    assert meta["retrieval_mode"] == "dense_fallback"
    assert counting.queries == 1  # the query is embedded once, reused by the fallback
    assert docs and docs[0]["filename"] == "solar.html"
    assert all(d["rrf_rank"] >= 1 for d in docs)
    assert meta["rerank_applied"] is True and "rerank_error" not in meta
    assert len(rerank_server.requests) == 1


async def test_both_sides_failing_gives_retrieve_failed(tmp_path) -> None:
    db = copy_corpus(tmp_path)
    wrong = WrongDimensionQueryEmbedder(model())
    async with running_service(db, embedder=wrong) as svc:
        docs, meta = await svc.retrieve("tea kinds", top_k=3)
    assert docs == [] and wrong.queries == 1
    _failure_meta_checks(meta, "retrieve_failed")


def _store(db) -> StoreConfig:
    return StoreConfig(uri=str(db), token=None, collection="supermew_chunks", dim=384)


async def test_bm25_matches_english_inflections_both_ways(tmp_path) -> None:
    """Documents and queries reach the BM25 analyser stemmed (shared.lexical.bm25_text):
    "water" finds "watered", "Succulents" finds "succulent", and Chinese is untouched."""
    async with running_service(tmp_path / "stems.db", chunking=None) as svc:
        await svc.ingest(
            ("plants.txt", b"A succulent is watered only after its soil has dried out."),
            ("other.txt", b"Ferns like a peaty compost that stays moist."),
            ("zh.txt", "多肉类植物等盆土完全干透后才浇水。".encode()),
        )
        hits = await svc.app.chunks.bm25_search(3, "How much water do Succulents need?", 10)
        assert hits[0]["filename"] == "plants.txt"
        zh_hits = await svc.app.chunks.bm25_search(3, "浇水", 10)
        assert {h["filename"] for h in zh_hits} == {"zh.txt"}
