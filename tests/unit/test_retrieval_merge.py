"""Auto-merge passes (docs/api.md#auto-merge), candidate_k, threshold and the rerank
helpers as pure functions."""

from __future__ import annotations

import pytest

from retrieval_service.adapters.rerank import configured, endpoint_for
from retrieval_service.core.merge import merge_pass, parents_to_merge
from retrieval_service.core.recall import (
    passes_threshold,
    resolve_candidate_k,
    sort_by_effective_score,
)
from shared.scores import effective_score


def leaf(cid: str, parent: str, score: float, level: int = 3) -> dict:
    return {"chunk_id": cid, "parent_chunk_id": parent, "chunk_level": level, "score": score}


L2 = {
    "A": {"chunk_id": "A", "parent_chunk_id": "R", "chunk_level": 2, "text": "A", "id": 7},
    "B": {"chunk_id": "B", "parent_chunk_id": "R", "chunk_level": 2, "text": "B"},
    "C": {"chunk_id": "C", "parent_chunk_id": "S", "chunk_level": 2, "text": "C"},
}
L1 = {
    "R": {"chunk_id": "R", "parent_chunk_id": "", "chunk_level": 1, "text": "R"},
    "S": {"chunk_id": "S", "parent_chunk_id": "", "chunk_level": 1, "text": "S"},
}


def two_passes(docs: list[dict], threshold: int = 2) -> tuple[list[dict], int, int]:
    once, first = merge_pass(docs, threshold, L2)
    twice, second = merge_pass(once, threshold, L1)
    return twice, first, second


def test_zero_steps_when_no_siblings() -> None:
    docs = [leaf("a1", "A", 0.9), leaf("b1", "B", 0.8), leaf("c1", "C", 0.7)]
    out, first, second = two_passes(docs)
    assert (first, second) == (0, 0) and out == docs


def test_one_step_parent_at_first_child_with_best_score() -> None:
    docs = [leaf("x", "", 0.95), leaf("a1", "A", 0.5), leaf("c1", "C", 0.6), leaf("a2", "A", 0.9)]
    out, first, second = two_passes(docs)
    assert (first, second) == (2, 0)
    assert [d["chunk_id"] for d in out] == ["x", "A", "c1"]
    merged = out[1]
    assert merged["score"] == 0.9 and merged["merged_from_children"] is True
    assert merged["merged_child_count"] == 2 and "id" not in merged
    assert L2["A"].get("score") is None  # the store's record is not mutated


def test_two_steps_count_children_again_at_the_next_level() -> None:
    docs = [
        leaf("a1", "A", 0.4),
        leaf("b1", "B", 0.7),
        leaf("a2", "A", 0.3),
        leaf("b2", "B", 0.2),
        leaf("b3", "B", 0.6),
        leaf("c1", "C", 0.1),
    ]
    out, first, second = two_passes(docs)
    assert (first, second) == (5, 2)  # 2 + 3 leaves, then the two L2 parents
    assert [d["chunk_id"] for d in out] == ["R", "c1"]
    assert out[0]["score"] == 0.7 and out[0]["merged_child_count"] == 2


def test_unmerged_leaves_never_count_towards_a_grandparent() -> None:
    docs = [leaf("a1", "A", 0.4), leaf("a2", "A", 0.3), leaf("b1", "B", 0.9)]
    out, first, second = two_passes(docs)
    assert (first, second) == (2, 0)
    assert [d["chunk_id"] for d in out] == ["A", "b1"]


def test_threshold_edge_exactly_threshold_siblings_merge() -> None:
    docs = [leaf("b1", "B", 0.1), leaf("b2", "B", 0.2), leaf("b3", "B", 0.3)]
    assert merge_pass(docs, 3, L2)[1] == 3
    assert merge_pass(docs, 4, L2) == (docs, 0)
    assert parents_to_merge(docs, 3) == {"B": 3}


def test_threshold_one_merges_single_children_and_missing_parents_keep_children() -> None:
    docs = [leaf("a1", "A", 0.4), leaf("z1", "Z", 0.3)]
    out, count = merge_pass(docs, 1, L2)
    assert [d["chunk_id"] for d in out] == ["A", "z1"] and count == 1


def test_rerank_scores_fold_into_rerank_score() -> None:
    docs = [
        {**leaf("a1", "A", 0.1), "rerank_score": 0.2},
        {**leaf("a2", "A", 0.9), "rerank_score": 0.7},
    ]
    out, _ = merge_pass(docs, 2, L2)
    assert out[0]["rerank_score"] == 0.7 and "score" not in out[0]


@pytest.mark.parametrize(
    ("top_k", "mult", "raw", "expected"),
    [
        (8, 3, None, {"candidate_k": 24, "candidate_k_source": "multiplier"}),
        (8, 3, "30", {"candidate_k": 30, "candidate_k_source": "env"}),
        (8, 3, "5", {"candidate_k": 8, "candidate_k_source": "env"}),
        (8, 3, "0", {"candidate_k": 8, "candidate_k_source": "env"}),
        (8, 3, "  ", {"candidate_k": 24, "candidate_k_source": "multiplier"}),
        (
            8,
            3,
            "3.5",
            {
                "candidate_k": 24,
                "candidate_k_source": "multiplier",
                "candidate_k_config_error": "invalid RETRIEVAL_CANDIDATE_K",
            },
        ),
        (4, 1, None, {"candidate_k": 4, "candidate_k_source": "multiplier"}),
    ],
)
def test_resolve_candidate_k(top_k, mult, raw, expected) -> None:
    assert resolve_candidate_k(top_k, mult, raw).to_dict() == {
        "retrieval_candidate_multiplier": mult,
        **expected,
    }


def test_threshold_and_effective_score() -> None:
    assert effective_score({"score": 0.2, "rerank_score": 0.9}) == 0.9
    assert effective_score({"score": 0.2, "rerank_score": None}) == 0.2
    assert effective_score({}) is None
    assert passes_threshold({"score": 0.5}, 0.5) and not passes_threshold({"score": 0.49}, 0.5)
    assert passes_threshold({"score": -1.0, "rerank_score": 0.6}, 0.5)
    assert passes_threshold({}, 0.0) and not passes_threshold({}, 0.1)


def test_placeholders_and_endpoint() -> None:
    for value in ("", "  ", None, "your_key", "YOUR-host", "replace-with-x", "my-your-rerank-1"):
        assert configured(value) is None
    assert configured(" jina-reranker ") == "jina-reranker"
    assert endpoint_for("http://h:1/") == "http://h:1/v1/rerank"
    assert endpoint_for("http://h:1/v1/rerank") == "http://h:1/v1/rerank"
    assert endpoint_for(None) == ""


def test_sort_by_effective_score_is_stable_and_descending() -> None:
    docs = [{"n": 1, "score": 0.1}, {"n": 2, "score": 0.3}, {"n": 3, "score": 0.1}, {"n": 4}]
    assert [d["n"] for d in sort_by_effective_score(docs)] == [2, 1, 3, 4]
