"""Trace normalisation (docs/trace.md#normalisation): the raw trace T becomes the
external Trace — protocol keys only, None dropped, evidence projected to the external shape.

Decisions: the source accepted `str | int` for a chunk's page_number; the proto carries it as
text, so an int is canonicalised to its decimal string, which keeps
`normalize(T) → to_proto → to_dict == normalize(T)` exact. A trace (or sub trace) left with no
key after normalisation is None, not {}, so normalisation is idempotent. Vocabulary values
(shared.trace_fields' StrEnums) come out as plain `str`.

Strict keys: production drops unknown raw keys silently (docs/trace.md#normalisation). The test
suite turns on `strict_keys()`, under which an unknown raw key raises, so a misspelt key fails a
test instead of vanishing from the trace.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from shared.trace_fields import (
    INT32_MAX,
    INT32_MIN,
    RAW_ONLY,
    RETRIEVED_CHUNK_FIELDS,
    SUB_TRACE_FIELDS,
    TRACE_FIELDS,
    FieldSpec,
    Kind,
    TraceFieldError,
)

__all__ = [
    "TraceFieldError",
    "normalize_rag_trace",
    "normalize_retrieved_chunk",
    "normalize_sub_trace",
    "strict_keys",
]

# A value normaliser takes (value, path) and returns the canonical value or raises
# TraceFieldError naming `path`; None never reaches it (None means "not written").
_Normalizer = Callable[[Any, str], Any]


def _type_name(value: object) -> str:
    return type(value).__name__


def _check_allowed(spec: FieldSpec, value: str, path: str) -> str:
    if spec.allowed is not None and value not in spec.allowed:
        raise TraceFieldError(path, f"{value!r} is not one of {sorted(spec.allowed)}")
    return value


def _scalar_normalizer(spec: FieldSpec) -> _Normalizer:
    kind = spec.kind
    if kind is Kind.BOOL:

        def norm_bool(value: Any, path: str) -> bool:
            if not isinstance(value, bool):
                raise TraceFieldError(path, f"expected bool, got {_type_name(value)}")
            return value

        return norm_bool
    if kind is Kind.STR:

        def norm_str(value: Any, path: str) -> str:
            if not isinstance(value, str):
                raise TraceFieldError(path, f"expected str, got {_type_name(value)}")
            # str() turns a vocabulary StrEnum member into its plain value.
            return _check_allowed(spec, str(value), path)

        return norm_str
    if kind is Kind.INT:
        return _norm_int32
    if kind is Kind.FLOAT:
        return _norm_float
    raise AssertionError(f"not a scalar kind: {kind}")


def _norm_int32(value: Any, path: str) -> int:
    # bool is an int subclass; True is not a count.
    if not isinstance(value, int) or isinstance(value, bool):
        raise TraceFieldError(path, f"expected int, got {_type_name(value)}")
    # Every trace int is an int32 on the wire: reject here rather than fail in the codec.
    if not INT32_MIN <= value <= INT32_MAX:
        raise TraceFieldError(path, f"{value} does not fit in int32")
    return int(value)


def _norm_float(value: Any, path: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TraceFieldError(path, f"expected float, got {_type_name(value)}")
    # An int is a valid float reading (e.g. confidence 1); store it as float so the proto
    # double comes back equal and typed the same.
    return float(value)


def _norm_str_list(value: Any, path: str) -> list[str]:
    if not isinstance(value, list | tuple):
        raise TraceFieldError(path, f"expected a list of str, got {_type_name(value)}")
    for index, item in enumerate(value):
        if not isinstance(item, str):
            raise TraceFieldError(f"{path}[{index}]", f"expected str, got {_type_name(item)}")
    return list(value)


def _norm_page_number(value: Any, path: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise TraceFieldError(path, f"expected str or int, got {_type_name(value)}")


def _chunk_key_normalizer(spec: FieldSpec) -> _Normalizer:
    return _norm_page_number if spec.name == "page_number" else _scalar_normalizer(spec)


_CHUNK_KEYS: tuple[tuple[str, _Normalizer], ...] = tuple(
    (spec.name, _chunk_key_normalizer(spec)) for spec in RETRIEVED_CHUNK_FIELDS
)


def normalize_retrieved_chunk(raw: Mapping[str, Any], path: str = "chunk") -> dict[str, Any]:
    """Project one evidence record onto the 6 external keys (docs/trace.md#evidence-records), None
    dropped and page_number as text. The caller has already checked that `filename` is truthy."""
    out: dict[str, Any] = {}
    for name, norm in _CHUNK_KEYS:
        value = raw.get(name)
        if value is not None:
            out[name] = norm(value, f"{path}.{name}")
    return out


def _norm_chunk_list(value: Any, path: str) -> list[dict[str, Any]]:
    # docs/trace.md#normalisation: anything that is not a list becomes [], and only dict elements
    # with a truthy filename survive — an element without a source is not evidence.
    if not isinstance(value, list):
        return []
    return [
        normalize_retrieved_chunk(item, f"{path}[{index}]")
        for index, item in enumerate(value)
        if isinstance(item, Mapping) and item.get("filename")
    ]


def _norm_sub_traces(value: Any, path: str) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        return []
    out: list[dict[str, Any]] = []
    for index, item in enumerate(value):
        if not isinstance(item, Mapping):
            continue
        sub = _normalize(item, _SUB_TRACE_NORMALIZERS, f"{path}[{index}].")
        if sub is not None:
            out.append(sub)
    return out


def _field_normalizer(spec: FieldSpec) -> _Normalizer:
    if spec.kind is Kind.STR_LIST:
        return _norm_str_list
    if spec.kind is Kind.CHUNK_LIST:
        return _norm_chunk_list
    if spec.kind is Kind.TRACE_LIST:
        return _norm_sub_traces
    return _scalar_normalizer(spec)


# Built once at import: normalisation runs on every request.
_TRACE_NORMALIZERS: tuple[tuple[str, _Normalizer], ...] = tuple(
    (spec.name, _field_normalizer(spec)) for spec in TRACE_FIELDS
)
_SUB_TRACE_NORMALIZERS: tuple[tuple[str, _Normalizer], ...] = tuple(
    (spec.name, _field_normalizer(spec)) for spec in SUB_TRACE_FIELDS
)
# A nested `sub_traces` is a catalogued key that a sub trace drops on purpose, not a typo.
_KNOWN_KEYS = frozenset(name for name, _ in _TRACE_NORMALIZERS) | RAW_ONLY


_strict = False


@contextmanager
def strict_keys(enabled: bool = True) -> Iterator[None]:
    """Within the block, an unknown key of a raw trace raises TraceFieldError instead of being
    dropped (raw-only keys such as rewrite_count stay allowed). For tests: production leaves
    it off."""
    global _strict
    previous, _strict = _strict, enabled
    try:
        yield
    finally:
        _strict = previous


def _reject_unknown(raw: Mapping[str, Any], prefix: str) -> None:
    unknown = sorted(str(k) for k in raw if k not in _KNOWN_KEYS)
    if unknown:
        raise TraceFieldError(prefix + unknown[0], "not a catalogued trace key")


def _normalize(
    raw: object,
    normalizers: tuple[tuple[str, _Normalizer], ...],
    prefix: str,
) -> dict[str, Any] | None:
    if not isinstance(raw, Mapping) or not raw:
        return None
    if _strict:
        _reject_unknown(raw, prefix)
    out: dict[str, Any] = {}
    # Iterating the catalogue (not the raw keys) drops unknown and raw-only keys such as
    # rewrite_count for free, and yields keys in one canonical order.
    for name, norm in normalizers:
        value = raw.get(name)
        if value is not None:
            out[name] = norm(value, prefix + name)
    # A trace that held only None, unknown or raw-only keys carries nothing: treat it like an
    # empty input so that normalisation is idempotent (an empty sub trace would otherwise
    # survive one pass and vanish on the next).
    return out or None


def normalize_rag_trace(raw: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """Normalise a raw trace T into the external Trace (docs/trace.md#normalisation).

    Returns None for a non-dict or empty input, and when nothing protocol-level remains.
    Keeps protocol keys only (unknown keys and the raw-only `rewrite_count` are dropped) and
    drops None values while keeping False, 0, "" and []. The four chunk lists keep only dict
    elements with a truthy `filename`, each projected to the 6 external keys; a non-list chunk
    list or `sub_traces` becomes []. Each sub trace is normalised with `normalize_sub_trace`
    (so never nested); empty ones are dropped. An int in a float field becomes a float;
    page_number becomes text.

    Raises TraceFieldError (a ValueError) naming the field on a type mismatch, an int outside
    int32 or a value outside the field's allowed values.
    """
    return _normalize(raw, _TRACE_NORMALIZERS, "")


def normalize_sub_trace(raw: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """Normalise one child trace: as `normalize_rag_trace` over the 58 sub-trace fields, so a
    nested `sub_traces` is dropped. Returns None for a non-dict or empty input, and when nothing
    protocol-level remains."""
    return _normalize(raw, _SUB_TRACE_NORMALIZERS, "")
