"""The dict ⇄ proto codec is lossless (docs/trace.md#presence): property tests
over arbitrary normalised traces, retrieval metas, chunks and resume snapshots, plus the proto3
JSON view of presence. Strategies are built from the field catalogue."""

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf import json_format
from hypothesis import given, settings
from hypothesis import strategies as st
from supermew.v1 import trace_pb2

from shared.codec import (
    TraceFieldError,
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
from shared.normalize import normalize_rag_trace
from shared.trace_fields import (
    CHUNK_FIELDS,
    HITL_RESUME_STATE_FIELDS,
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    INT64_MIN,
    RETRIEVAL_META_FIELDS,
    RETRIEVED_CHUNK_FIELDS,
    SUB_TRACE_FIELDS,
    TRACE_FIELD_BY_NAME,
    FieldSpec,
    Kind,
)

INT32 = st.integers(INT32_MIN, INT32_MAX)
FLOATS = st.floats(allow_nan=False, allow_infinity=False)
TEXT = st.text(max_size=12)


def scalar(spec: FieldSpec) -> st.SearchStrategy[Any]:
    if spec.allowed is not None:
        return st.sampled_from(sorted(spec.allowed))
    return {Kind.BOOL: st.booleans(), Kind.STR: TEXT, Kind.INT: INT32, Kind.FLOAT: FLOATS}[
        spec.kind
    ]


RETRIEVED_CHUNKS = st.fixed_dictionaries(
    {"filename": st.text(min_size=1, max_size=12)},
    optional={s.name: scalar(s) for s in RETRIEVED_CHUNK_FIELDS if s.optional},
)
CHUNK_LISTS = st.lists(RETRIEVED_CHUNKS, max_size=3)
STR_LISTS = st.lists(TEXT, max_size=3)


def trace_value(spec: FieldSpec) -> st.SearchStrategy[Any]:
    if spec.kind is Kind.STR_LIST:
        return STR_LISTS
    if spec.kind is Kind.CHUNK_LIST:
        return CHUNK_LISTS
    return scalar(spec)


# A normalised sub trace is never empty (an empty one normalises to None and is dropped).
SUB_TRACES = st.fixed_dictionaries(
    {}, optional={s.name: trace_value(s) for s in SUB_TRACE_FIELDS}
).filter(bool)
TRACES = st.fixed_dictionaries(
    {},
    optional={
        **{s.name: trace_value(s) for s in SUB_TRACE_FIELDS},
        "sub_traces": st.lists(SUB_TRACES, max_size=3),
    },
)
assert set(TRACE_FIELD_BY_NAME) == {s.name for s in SUB_TRACE_FIELDS} | {"sub_traces"}

METAS = st.fixed_dictionaries({}, optional={s.name: scalar(s) for s in RETRIEVAL_META_FIELDS})


# A document's metadata (docs/api.md#knowledge-bases): strings, numbers, booleans, lists of
# strings. Never empty here: an empty one is no metadata, and decodes to no key.
METADATA_VALUES = (
    TEXT | st.integers(-(2**53), 2**53) | FLOATS | st.booleans() | st.lists(TEXT, max_size=3)
)
METADATA = st.dictionaries(st.text(min_size=1, max_size=8), METADATA_VALUES, min_size=1, max_size=4)


def chunk_value(spec: FieldSpec) -> st.SearchStrategy[Any]:
    if spec.name == "id":
        return st.integers(INT64_MIN, INT64_MAX)
    if spec.kind is Kind.STRUCT:
        return METADATA
    return scalar(spec)


CHUNKS = st.fixed_dictionaries(
    {s.name: chunk_value(s) for s in CHUNK_FIELDS if not s.optional},
    optional={s.name: chunk_value(s) for s in CHUNK_FIELDS if s.optional},
)


def hitl_value(spec: FieldSpec) -> st.SearchStrategy[Any]:
    value = STR_LISTS if spec.kind is Kind.STR_LIST else scalar(spec)
    return st.none() | value if spec.optional else value


HITL_STATES = st.fixed_dictionaries({s.name: hitl_value(s) for s in HITL_RESUME_STATE_FIELDS})


@settings(max_examples=300)
@given(TRACES)
def test_rag_trace_round_trip_is_lossless(trace: dict[str, Any]) -> None:
    assert rag_trace_from_proto(rag_trace_to_proto(trace)) == trace


@settings(max_examples=300)
@given(TRACES.filter(bool))
def test_a_normalised_trace_is_a_fixed_point_of_normalisation(trace: dict[str, Any]) -> None:
    assert normalize_rag_trace(trace) == trace


@given(TRACES.filter(bool))
def test_wire_bytes_round_trip(trace: dict[str, Any]) -> None:
    wire = rag_trace_to_proto(trace).SerializeToString()
    assert rag_trace_from_proto(trace_pb2.RagTrace.FromString(wire)) == trace


@given(METAS)
def test_retrieval_meta_round_trip_is_lossless(meta: dict[str, Any]) -> None:
    assert retrieval_meta_from_proto(retrieval_meta_to_proto(meta)) == meta


@given(RETRIEVED_CHUNKS)
def test_retrieved_chunk_round_trip_is_lossless(chunk: dict[str, Any]) -> None:
    assert retrieved_chunk_from_proto(retrieved_chunk_to_proto(chunk)) == chunk


@given(CHUNKS)
def test_chunk_round_trip_is_lossless(chunk: dict[str, Any]) -> None:
    assert chunk_from_proto(chunk_to_proto(chunk)) == chunk


@given(HITL_STATES)
def test_hitl_state_round_trip_is_lossless(state: dict[str, Any]) -> None:
    assert hitl_state_from_proto(hitl_state_to_proto(state)) == state


def test_chunk_to_proto_accepts_an_int_page_and_defaults_missing_keys() -> None:
    out = chunk_from_proto(chunk_to_proto({"filename": "a.pdf", "page_number": 0, "text": "t"}))

    assert out == {
        "filename": "a.pdf",
        "file_type": "",
        "file_path": "",
        "page_number": "0",
        "text": "t",
        "score": 0.0,
        "rrf_rank": 0,
        "chunk_idx": 0,
        "chunk_id": "",
        "parent_chunk_id": "",
        "root_chunk_id": "",
        "chunk_level": 0,
        "merged_from_children": False,
        "merged_child_count": 0,
        "document_id": "",
        "knowledge_base": "",
    }  # a parent fetched by business id: no `id`; not reranked: no `rerank_score`; no metadata


def test_chunk_metadata_is_absent_when_empty_and_plain_json_otherwise() -> None:
    base = {"filename": "a.md", "document_id": "hr/a.md", "knowledge_base": "knowledge_bases/hr"}

    for empty in ({}, None):
        pb = chunk_to_proto({**base, "metadata": empty})
        assert not pb.HasField("metadata")
        assert "metadata" not in chunk_from_proto(pb)

    metadata = {"department": "sales", "year": 2023, "score": 0.5, "draft": False, "tags": ["a"]}
    out = chunk_from_proto(chunk_to_proto({**base, "metadata": metadata}))
    assert out["metadata"] == metadata
    assert type(out["metadata"]["year"]) is int  # a Struct number is a double: 2023, not 2023.0
    assert (out["document_id"], out["knowledge_base"]) == ("hr/a.md", "knowledge_bases/hr")


def test_chunk_metadata_that_is_not_a_json_object_is_named() -> None:
    for bad in (["a"], "x", {"k": {1, 2}}):
        with pytest.raises(TraceFieldError) as info:
            chunk_to_proto({"filename": "a.md", "metadata": bad})
        assert info.value.field == "metadata"


def test_hitl_state_from_proto_always_has_seven_keys() -> None:
    state = hitl_state_from_proto(hitl_state_to_proto({"question": "q", "route": "clarify"}))

    assert state == {
        "question": "q",
        "route": "clarify",
        "retrieval_status": "",
        "rewrite_count": 0,
        "complexity": None,
        "complexity_reason": None,
        "sub_questions": [],
    }


def test_empty_list_and_zero_values_keep_presence_in_proto3_json() -> None:
    trace = {"retrieved_chunks": [], "tool_used": False, "candidate_k": 0, "hitl_prompt": ""}

    as_json = json_format.MessageToDict(rag_trace_to_proto(trace), preserving_proto_field_name=True)

    assert as_json == {
        "retrieved_chunks": {},
        "tool_used": False,
        "candidate_k": 0,
        "hitl_prompt": "",
    }
    assert "initial_retrieved_chunks" not in as_json  # absent stays absent


def test_encoding_rejects_keys_outside_the_protocol() -> None:
    with pytest.raises(TraceFieldError) as info:
        rag_trace_to_proto({"query": "q", "rewrite_count": 1})
    assert info.value.field == "rewrite_count"

    with pytest.raises(TraceFieldError) as info:
        rag_trace_to_proto({"sub_traces": [{"retrieved_chunks": [{"filename": "a", "id": 1}]}]})
    assert info.value.field == "sub_traces[0].retrieved_chunks[0].id"


def test_encoding_names_the_field_of_a_value_it_cannot_hold() -> None:
    with pytest.raises(TraceFieldError) as info:
        rag_trace_to_proto({"candidate_k": "24"})
    assert info.value.field == "candidate_k"
