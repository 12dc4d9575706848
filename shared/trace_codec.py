"""One import point for the trace family: normalisation (shared.normalize), the dict ⇄ proto
codec (shared.codec) and context formatting (shared.context) re-exported together."""

from __future__ import annotations

from shared.codec import (
    chunk_from_proto,
    chunk_to_proto,
    hitl_state_from_proto,
    hitl_state_to_proto,
    rag_trace_from_proto,
    rag_trace_to_proto,
    retrieval_meta_from_proto,
    retrieval_meta_to_proto,
    retrieved_chunk_from_proto,
    retrieved_chunk_to_proto,
)
from shared.context import format_context
from shared.normalize import (
    TraceFieldError,
    normalize_rag_trace,
    normalize_retrieved_chunk,
    normalize_sub_trace,
)

__all__ = [
    "TraceFieldError",
    "chunk_from_proto",
    "chunk_to_proto",
    "format_context",
    "hitl_state_from_proto",
    "hitl_state_to_proto",
    "normalize_rag_trace",
    "normalize_retrieved_chunk",
    "normalize_sub_trace",
    "rag_trace_from_proto",
    "rag_trace_to_proto",
    "retrieval_meta_from_proto",
    "retrieval_meta_to_proto",
    "retrieved_chunk_from_proto",
    "retrieved_chunk_to_proto",
]
