"""`RetrievalMeta`: the 26 retrieval-meta fields of one Retrieve (docs/trace.md#fields, groups G–I),
built once by the pipeline, in the catalogue's order (`trace_fields.RETRIEVAL_META_FIELD_NAMES`)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Literal

RetrievalMode = Literal["hybrid", "dense_fallback", "failed"]
CandidateKSource = Literal["multiplier", "env"]


@dataclass(frozen=True, slots=True, kw_only=True)
class RetrievalMeta:
    """None means "absent on the wire": `candidate_k_config_error` is set only on that error,
    `rerank_model` only when configured, `rerank_error` only when something failed."""

    # G · the candidate pool and the recall
    retrieval_pipeline: str
    retrieval_mode: RetrievalMode
    candidate_k: int
    candidate_k_source: CandidateKSource
    candidate_k_config_error: str | None
    retrieval_candidate_multiplier: int
    retrieval_top_k: int
    leaf_retrieve_level: int
    recall_count: int
    post_merge_candidate_count: int
    candidate_count: int
    # H · auto-merge
    auto_merge_enabled: bool
    auto_merge_applied: bool
    auto_merge_threshold: int
    auto_merge_replaced_chunks: int
    auto_merge_steps: int
    # I · rerank and threshold
    rerank_enabled: bool
    rerank_applied: bool
    rerank_model: str | None
    rerank_endpoint: str
    rerank_error: str | None
    rerank_timeout_seconds: float
    rerank_min_score: float
    post_rerank_count: int
    post_threshold_count: int
    retrieval_empty: bool

    def to_dict(self) -> dict[str, Any]:
        """The meta as the codec takes it: absent (None) fields are left out."""
        return {f.name: value for f in fields(self) if (value := getattr(self, f.name)) is not None}
