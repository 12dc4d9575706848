"""RetrievalMeta mirrors the catalogue: the 26 R fields in catalogue order, None = absent."""

from __future__ import annotations

from dataclasses import fields, replace

from retrieval_service.core.meta import RetrievalMeta
from shared.codec import retrieval_meta_from_proto, retrieval_meta_to_proto
from shared.trace_fields import RETRIEVAL_META_FIELD_NAMES

FULL = RetrievalMeta(
    retrieval_pipeline="recall_merge_rerank",
    retrieval_mode="hybrid",
    candidate_k=24,
    candidate_k_source="multiplier",
    candidate_k_config_error="invalid RETRIEVAL_CANDIDATE_K",
    retrieval_candidate_multiplier=3,
    retrieval_top_k=8,
    leaf_retrieve_level=3,
    recall_count=24,
    post_merge_candidate_count=20,
    candidate_count=20,
    auto_merge_enabled=True,
    auto_merge_applied=True,
    auto_merge_threshold=2,
    auto_merge_replaced_chunks=5,
    auto_merge_steps=1,
    rerank_enabled=True,
    rerank_applied=True,
    rerank_model="bge-reranker",
    rerank_endpoint="http://127.0.0.1:9/v1/rerank",
    rerank_error="HTTP 503: busy",
    rerank_timeout_seconds=5.0,
    rerank_min_score=0.0,
    post_rerank_count=8,
    post_threshold_count=7,
    retrieval_empty=False,
)


def test_fields_are_the_catalogue_in_order() -> None:
    assert tuple(f.name for f in fields(RetrievalMeta)) == RETRIEVAL_META_FIELD_NAMES


def test_to_dict_leaves_out_absent_fields_and_round_trips() -> None:
    assert list(FULL.to_dict()) == list(RETRIEVAL_META_FIELD_NAMES)
    sparse = replace(FULL, candidate_k_config_error=None, rerank_model=None, rerank_error=None)
    expected = set(RETRIEVAL_META_FIELD_NAMES) - {
        "candidate_k_config_error",
        "rerank_model",
        "rerank_error",
    }
    assert set(sparse.to_dict()) == expected
    assert retrieval_meta_from_proto(retrieval_meta_to_proto(sparse.to_dict())) == sparse.to_dict()
