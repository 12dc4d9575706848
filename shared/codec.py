"""The one dict ⇄ proto codec of the trace family (docs/trace.md#presence):
RagTrace, RetrievalMeta, Chunk, RetrievedChunk and HitlResumeState, driven by shared.trace_fields.

Presence round-trips exactly: a key is in the dict iff its proto field is set, and a list key
maps to a wrapper message that is set even when empty. `rag_trace_from_proto(
rag_trace_to_proto(t)) == t` for every normalised trace t. A Chunk's `metadata` (a Struct) is
the one key where an empty value and absence are the same thing: `{}` is sent unset and decodes
to no key. Converters are built once at import
because the codec runs on every request.

Unknown keys: the presence-shaped dicts (trace, retrieval meta, retrieved chunk) reject them with
TraceFieldError — an unknown key there means a raw, un-normalised dict slipped through. The
fixed-shape records (Chunk, HitlResumeState) read their catalogued keys and ignore the rest,
because runtime records legitimately carry store-internal extras.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from google.protobuf import struct_pb2
from google.protobuf.message import Message
from supermew.v1 import trace_pb2

from shared.trace_fields import (
    CHUNK_FIELDS,
    HITL_RESUME_STATE_FIELDS,
    RETRIEVAL_META_FIELDS,
    RETRIEVED_CHUNK_FIELDS,
    TRACE_FIELDS,
    FieldSpec,
    Kind,
    TraceFieldError,
)

__all__ = [
    "TraceFieldError",
    "chunk_from_proto",
    "chunk_to_proto",
    "hitl_state_from_proto",
    "hitl_state_to_proto",
    "rag_trace_from_proto",
    "rag_trace_to_proto",
    "retrieval_meta_from_proto",
    "retrieval_meta_to_proto",
    "retrieved_chunk_from_proto",
    "retrieved_chunk_to_proto",
]

_Setter = Callable[[Any, Any], None]
_Getter = Callable[[Any], Any]


def _page_text(value: Any) -> Any:
    # page_number is text on the wire; runtime records may still hold the source's int.
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


# ---- dict → proto ---------------------------------------------------------------------------


def _scalar_setter(name: str) -> _Setter:
    if name == "page_number":

        def set_page(pb: Any, value: Any) -> None:
            setattr(pb, name, _page_text(value))

        return set_page

    def set_scalar(pb: Any, value: Any) -> None:
        setattr(pb, name, value)

    return set_scalar


def _trace_setter(spec: FieldSpec) -> _Setter:
    name = spec.name
    if spec.kind is Kind.STR_LIST:

        def set_str_list(pb: Any, value: Any) -> None:
            wrapper = getattr(pb, name)
            wrapper.SetInParent()  # an explicit [] must stay distinguishable from "absent"
            wrapper.items.extend(value)

        return set_str_list
    if spec.kind is Kind.CHUNK_LIST:

        def set_chunk_list(pb: Any, value: Any) -> None:
            wrapper = getattr(pb, name)
            wrapper.SetInParent()
            items = wrapper.items
            for index, chunk in enumerate(value):
                try:
                    _fill(items.add(), chunk, _RETRIEVED_CHUNK_SETTERS, "RetrievedChunk")
                except TraceFieldError as exc:
                    raise exc.within(f"[{index}]") from exc

        return set_chunk_list
    if spec.kind is Kind.TRACE_LIST:

        def set_trace_list(pb: Any, value: Any) -> None:
            wrapper = getattr(pb, name)
            wrapper.SetInParent()
            items = wrapper.items
            for index, sub in enumerate(value):
                try:
                    _fill(items.add(), sub, _TRACE_SETTERS, "RagTrace")
                except TraceFieldError as exc:
                    raise exc.within(f"[{index}]") from exc

        return set_trace_list
    return _scalar_setter(name)


def _fill(pb: Message, data: Mapping[str, Any], setters: Mapping[str, _Setter], what: str) -> None:
    """Write a presence-shaped dict into `pb`: each non-None key sets its field."""
    for key, value in data.items():
        setter = setters.get(key)
        if setter is None:
            raise TraceFieldError(key, f"not a {what} field (normalise the dict first)")
        if value is None:
            continue  # None means "not written" (docs/trace.md#presence): the field stays unset.
        try:
            setter(pb, value)
        except TraceFieldError as exc:
            raise exc.within(key) from exc
        except (TypeError, ValueError) as exc:
            raise TraceFieldError(key, f"cannot encode {value!r} as {what}.{key}: {exc}") from exc


_TRACE_SETTERS: dict[str, _Setter] = {spec.name: _trace_setter(spec) for spec in TRACE_FIELDS}
_META_SETTERS: dict[str, _Setter] = {
    spec.name: _scalar_setter(spec.name) for spec in RETRIEVAL_META_FIELDS
}
_RETRIEVED_CHUNK_SETTERS: dict[str, _Setter] = {
    spec.name: _scalar_setter(spec.name) for spec in RETRIEVED_CHUNK_FIELDS
}


def rag_trace_to_proto(trace: Mapping[str, Any]) -> trace_pb2.RagTrace:
    """Encode a normalised trace. Every key present becomes a set field (lists as set wrappers,
    even when empty); a None value is treated as absent. Raises TraceFieldError on a key that is
    not one of the 61 protocol fields or on a value the field cannot hold."""
    pb = trace_pb2.RagTrace()
    _fill(pb, trace, _TRACE_SETTERS, "RagTrace")
    return pb


def retrieval_meta_to_proto(meta: Mapping[str, Any]) -> trace_pb2.RetrievalMeta:
    """Encode a retrieval meta dict (the 26 R fields); None values stay unset."""
    pb = trace_pb2.RetrievalMeta()
    _fill(pb, meta, _META_SETTERS, "RetrievalMeta")
    return pb


def retrieved_chunk_to_proto(chunk: Mapping[str, Any]) -> trace_pb2.RetrievedChunk:
    """Encode an external evidence record (6 keys); an int page_number is sent as text."""
    pb = trace_pb2.RetrievedChunk()
    _fill(pb, chunk, _RETRIEVED_CHUNK_SETTERS, "RetrievedChunk")
    return pb


def _fill_fixed(
    pb: Message, data: Mapping[str, Any], setters: tuple[tuple[str, _Setter], ...], what: str
) -> None:
    """Write a fixed-shape record: catalogued keys only; a missing or None key keeps the proto
    default (or stays unset where the field has presence)."""
    for key, setter in setters:
        value = data.get(key)
        if value is None:
            continue
        try:
            setter(pb, value)
        except (TypeError, ValueError) as exc:
            raise TraceFieldError(key, f"cannot encode {value!r} as {what}.{key}: {exc}") from exc


def _set_struct(pb: Any, name: str, value: Any) -> None:
    # An empty mapping is "none" (docs/trace.md#evidence-records): the field stays unset.
    if not isinstance(value, Mapping):
        raise TypeError(f"expected a JSON object, got {type(value).__name__}")
    if value:
        getattr(pb, name).update(value)


def _plain(value: struct_pb2.Value) -> Any:
    """A Struct value as plain JSON data. Struct numbers are doubles: a whole one comes back as
    an int (a year stays 2023, not 2023.0) while it is exact."""
    kind = value.WhichOneof("kind")
    if kind == "number_value":
        number = value.number_value
        return int(number) if number.is_integer() and abs(number) <= 2**53 else number
    if kind == "string_value":
        return value.string_value
    if kind == "bool_value":
        return value.bool_value
    if kind == "list_value":
        return [_plain(item) for item in value.list_value.values]
    if kind == "struct_value":
        return _struct_dict(value.struct_value)
    return None


def _struct_dict(struct: struct_pb2.Struct) -> dict[str, Any]:
    return {key: _plain(item) for key, item in struct.fields.items()}


def _fixed_setter(spec: FieldSpec) -> _Setter:
    if spec.kind is Kind.STRUCT:
        name = spec.name
        return lambda pb, value: _set_struct(pb, name, value)
    if spec.kind is Kind.STR_LIST:
        name = spec.name

        def set_repeated(pb: Any, value: Any) -> None:
            getattr(pb, name).extend(value)

        return set_repeated
    return _scalar_setter(spec.name)


_CHUNK_SETTERS: tuple[tuple[str, _Setter], ...] = tuple(
    (spec.name, _fixed_setter(spec)) for spec in CHUNK_FIELDS
)
_HITL_SETTERS: tuple[tuple[str, _Setter], ...] = tuple(
    (spec.name, _fixed_setter(spec)) for spec in HITL_RESUME_STATE_FIELDS
)


def chunk_to_proto(chunk: Mapping[str, Any]) -> trace_pb2.Chunk:
    """Encode a 19-key runtime evidence record (docs/trace.md#evidence-records). page_number may be
    int or str; missing keys take the proto default; `id` / `rerank_score` stay unset when missing
    or None, `metadata` also when empty; keys outside the 19 are ignored."""
    pb = trace_pb2.Chunk()
    _fill_fixed(pb, chunk, _CHUNK_SETTERS, "Chunk")
    return pb


def hitl_state_to_proto(state: Mapping[str, Any]) -> trace_pb2.HitlResumeState:
    """Encode the 7-key resume snapshot (docs/trace.md#the-resume-snapshot); complexity /
    complexity_reason stay unset when None. Validation of the snapshot's values is the resume path's
    job, not the codec's."""
    pb = trace_pb2.HitlResumeState()
    _fill_fixed(pb, state, _HITL_SETTERS, "HitlResumeState")
    return pb


# ---- proto → dict ---------------------------------------------------------------------------


def _trace_getter(spec: FieldSpec) -> _Getter:
    name = spec.name
    if spec.kind is Kind.STR_LIST:
        return lambda pb: list(getattr(pb, name).items)
    if spec.kind is Kind.CHUNK_LIST:
        return lambda pb: [retrieved_chunk_from_proto(c) for c in getattr(pb, name).items]
    if spec.kind is Kind.TRACE_LIST:
        return lambda pb: [rag_trace_from_proto(t) for t in getattr(pb, name).items]
    return lambda pb: getattr(pb, name)


def _present(pb: Message, getters: tuple[tuple[str, _Getter], ...]) -> dict[str, Any]:
    return {name: get(pb) for name, get in getters if pb.HasField(name)}


_TRACE_GETTERS: tuple[tuple[str, _Getter], ...] = tuple(
    (spec.name, _trace_getter(spec)) for spec in TRACE_FIELDS
)
_META_GETTERS: tuple[tuple[str, _Getter], ...] = tuple(
    (spec.name, _trace_getter(spec)) for spec in RETRIEVAL_META_FIELDS
)
# RetrievedChunk.filename has no presence (it is never empty after normalisation).
_RETRIEVED_CHUNK_OPTIONAL: tuple[tuple[str, _Getter], ...] = tuple(
    (spec.name, _trace_getter(spec)) for spec in RETRIEVED_CHUNK_FIELDS if spec.optional
)


def rag_trace_from_proto(pb: trace_pb2.RagTrace) -> dict[str, Any]:
    """Decode a RagTrace: exactly the set fields appear (a set list wrapper gives a list, maybe
    empty); sub_traces items are decoded with this same function."""
    return _present(pb, _TRACE_GETTERS)


def retrieval_meta_from_proto(pb: trace_pb2.RetrievalMeta) -> dict[str, Any]:
    """Decode a RetrievalMeta: exactly the set fields of the 26 appear."""
    return _present(pb, _META_GETTERS)


def retrieved_chunk_from_proto(pb: trace_pb2.RetrievedChunk) -> dict[str, Any]:
    """Decode an external evidence record: `filename` always, the other 5 keys when set."""
    out: dict[str, Any] = {"filename": pb.filename}
    for name, get in _RETRIEVED_CHUNK_OPTIONAL:
        if pb.HasField(name):
            out[name] = get(pb)
    return out


def _fixed_getters(fields: tuple[FieldSpec, ...]) -> tuple[tuple[str, bool, _Getter], ...]:
    def getter(spec: FieldSpec) -> _Getter:
        name = spec.name
        if spec.kind is Kind.STR_LIST:
            return lambda pb: list(getattr(pb, name))
        if spec.kind is Kind.STRUCT:
            return lambda pb: _struct_dict(getattr(pb, name))
        return lambda pb: getattr(pb, name)

    return tuple((spec.name, spec.optional, getter(spec)) for spec in fields)


_CHUNK_GETTERS = _fixed_getters(CHUNK_FIELDS)
_HITL_GETTERS = _fixed_getters(HITL_RESUME_STATE_FIELDS)


def chunk_from_proto(pb: trace_pb2.Chunk) -> dict[str, Any]:
    """Decode a runtime Chunk: the 16 plain keys always; `id`, `rerank_score` and `metadata` only
    when set (a parent fetched by business id has no `id`; an unreranked chunk has no
    rerank_score; a document without metadata has none). `metadata` comes back as plain JSON
    data, whole numbers as ints."""
    return {
        name: get(pb) for name, optional, get in _CHUNK_GETTERS if not optional or pb.HasField(name)
    }


def hitl_state_from_proto(pb: trace_pb2.HitlResumeState) -> dict[str, Any]:
    """Decode the resume snapshot: always exactly the 7 keys, complexity / complexity_reason
    None when unset (docs/trace.md#the-resume-snapshot)."""
    return {
        name: get(pb) if not optional or pb.HasField(name) else None
        for name, optional, get in _HITL_GETTERS
    }
