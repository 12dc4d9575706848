"""The field catalogue and trace.proto describe the same protocol: same names, same kinds, and
presence on every RagTrace / RetrievalMeta scalar with lists as wrapper messages
(docs/trace.md#presence)."""

from __future__ import annotations

import pytest
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from supermew.v1 import trace_pb2

from shared.trace_fields import (
    CHUNK_FIELDS,
    GRADE_FIELD_NAMES,
    HITL_RESUME_STATE_FIELDS,
    RAW_ONLY,
    RETRIEVAL_META_FIELD_NAMES,
    RETRIEVAL_META_FIELDS,
    RETRIEVED_CHUNK_FIELDS,
    SUB_TRACE_FIELD_NAMES,
    TRACE_FIELD_NAMES,
    TRACE_FIELDS,
    FieldSpec,
    Kind,
)

SCALAR_TYPES = {
    Kind.BOOL: {FieldDescriptor.TYPE_BOOL},
    Kind.STR: {FieldDescriptor.TYPE_STRING},
    Kind.INT: {FieldDescriptor.TYPE_INT32, FieldDescriptor.TYPE_INT64},
    Kind.FLOAT: {FieldDescriptor.TYPE_DOUBLE},
}
MESSAGES = {Kind.STRUCT: "google.protobuf.Struct"}
WRAPPERS = {
    Kind.STR_LIST: "supermew.v1.StringList",
    Kind.CHUNK_LIST: "supermew.v1.RetrievedChunkList",
    Kind.TRACE_LIST: "supermew.v1.RagTraceList",
}


def test_catalogue_counts() -> None:
    assert len(TRACE_FIELDS) == len(set(TRACE_FIELD_NAMES)) == 61
    assert len(SUB_TRACE_FIELD_NAMES) == 60 and "sub_traces" not in SUB_TRACE_FIELD_NAMES
    assert len(set(RETRIEVAL_META_FIELD_NAMES)) == 26
    assert {s.name for s in TRACE_FIELDS if s.group in "GHI"} == set(RETRIEVAL_META_FIELD_NAMES)
    assert len(set(GRADE_FIELD_NAMES)) == 10 and set(GRADE_FIELD_NAMES) <= set(TRACE_FIELD_NAMES)
    assert (len(CHUNK_FIELDS), len(RETRIEVED_CHUNK_FIELDS), len(HITL_RESUME_STATE_FIELDS)) == (
        19,
        6,
        7,
    )
    assert {"rewrite_count"} == RAW_ONLY and not RAW_ONLY & set(TRACE_FIELD_NAMES)
    assert {s.name for s in RETRIEVED_CHUNK_FIELDS} <= {s.name for s in CHUNK_FIELDS}


@pytest.mark.parametrize(
    ("descriptor", "fields"),
    [
        (trace_pb2.RagTrace.DESCRIPTOR, TRACE_FIELDS),
        (trace_pb2.RetrievalMeta.DESCRIPTOR, RETRIEVAL_META_FIELDS),
        (trace_pb2.Chunk.DESCRIPTOR, CHUNK_FIELDS),
        (trace_pb2.RetrievedChunk.DESCRIPTOR, RETRIEVED_CHUNK_FIELDS),
        (trace_pb2.HitlResumeState.DESCRIPTOR, HITL_RESUME_STATE_FIELDS),
    ],
    ids=lambda v: getattr(v, "name", ""),
)
def test_proto_field_names_and_kinds_equal_the_catalogue(
    descriptor: Descriptor, fields: tuple[FieldSpec, ...]
) -> None:
    assert set(descriptor.fields_by_name) == {s.name for s in fields}
    for spec in fields:
        field = descriptor.fields_by_name[spec.name]
        if spec.kind in WRAPPERS and descriptor.name != "HitlResumeState":
            assert field.message_type.full_name == WRAPPERS[spec.kind], spec.name
        elif spec.kind in MESSAGES:
            assert field.message_type.full_name == MESSAGES[spec.kind], spec.name
            assert not field.is_repeated, spec.name
        elif spec.kind is Kind.STR_LIST:  # the snapshot's plan is a plain repeated string
            assert field.type == FieldDescriptor.TYPE_STRING
        else:
            assert field.type in SCALAR_TYPES[spec.kind], spec.name


@pytest.mark.parametrize(
    "descriptor", [trace_pb2.RagTrace.DESCRIPTOR, trace_pb2.RetrievalMeta.DESCRIPTOR]
)
def test_every_trace_and_meta_field_has_presence(descriptor: Descriptor) -> None:
    for field in descriptor.fields:
        assert field.has_presence, field.name
        if field.message_type is None:
            assert field.containing_oneof is not None  # proto3 `optional` is a synthetic oneof
        else:
            assert not field.is_repeated, field.name


@pytest.mark.parametrize(
    ("descriptor", "fields"),
    [
        (trace_pb2.Chunk.DESCRIPTOR, CHUNK_FIELDS),
        (trace_pb2.RetrievedChunk.DESCRIPTOR, RETRIEVED_CHUNK_FIELDS),
        (trace_pb2.HitlResumeState.DESCRIPTOR, HITL_RESUME_STATE_FIELDS),
    ],
    ids=lambda v: getattr(v, "name", ""),
)
def test_optional_catalogue_keys_are_exactly_the_proto_fields_with_presence(
    descriptor: Descriptor, fields: tuple[FieldSpec, ...]
) -> None:
    with_presence = {f.name for f in descriptor.fields if f.has_presence}
    assert with_presence == {s.name for s in fields if s.optional}


def test_rag_trace_list_items_are_rag_traces() -> None:
    items = trace_pb2.RagTraceList.DESCRIPTOR.fields_by_name["items"]
    assert items.is_repeated and items.message_type is trace_pb2.RagTrace.DESCRIPTOR
