"""A filter tree (`core.filters`) as a Milvus boolean expression over the chunk rows' fields.

`to_milvus_expr(f) -> str` builds the expression from the tree alone: field names come from a
fixed table, metadata keys and string literals are re-quoted from their parsed values, numbers
are printed from Python numbers, so no text of the caller's filter reaches Milvus as written.
Its meaning is `core.filters.matches` (tests/integration/test_filters_milvus.py runs one table
through both).

What Milvus's expression language gives (measured on Milvus Lite 3.2, whose filter parser is
its own Python; the server's grammar, Plan.g4, reads the same literals): strings in double
quotes take the escapes `\\" \\' \\\\ \\n \\r \\t`; a raw CR or LF ends the literal with an
error and Milvus Lite rejects `\\uXXXX`, so `quote` escapes those five characters and writes
every other character (unicode, other control characters) as itself. A JSON key the row lacks
makes a comparison null, which `not` keeps null, where `matches` says false. Outside any NOT
the two admit the same rows (AND and OR are monotone, and a row is admitted only when the
whole is true), so a comparison is compiled as it is there, and guarded as
`exists metadata["k"] and …` only under a NOT, where the guard costs Milvus Lite about a third
more time per JSON comparison (20,000 rows, measured) but only there.
`json_contains(metadata["k"], v)` is true only for a list holding `v` (false for a scalar or a
missing key), so "has" is `json_contains(...) or` the guarded scalar equality. Numbers are
printed as Python prints them (`3`, `-1.5`, `1e-07`, `1e+16`), which both grammars read."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from retrieval_service.core.filters import (
    And,
    Column,
    Comparison,
    Filter,
    MetadataKey,
    Not,
    Op,
    Value,
)
from shared.access import ACL_KEY

#: The chunk row field each filter column reads.
COLUMN_FIELDS = {
    "document_id": "document_id",
    "filename": "filename",
    "file_type": "file_type",
    "ingest_time": "ingest_time",
}
#: The JSON field holding a chunk's document metadata.
METADATA_FIELD = "metadata"

_OPERATORS = {
    Op.EQ: "==",
    Op.NE: "!=",
    Op.LT: "<",
    Op.LE: "<=",
    Op.GT: ">",
    Op.GE: ">=",
    Op.HAS: "==",
}
_ESCAPES = str.maketrans({"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"})


def to_milvus_expr(f: Filter) -> str:
    """The Milvus expression admitting exactly the rows `core.filters.matches` admits. Every
    part is parenthesised, so the result can be joined with other conditions as it is."""
    return _compile(f, negated=False)


def _compile(f: Filter, negated: bool) -> str:
    if isinstance(f, Comparison):
        return _comparison(f, negated)
    if isinstance(f, Not):
        return f"(not {_compile(f.operand, not negated)})"
    joiner = " and " if isinstance(f, And) else " or "
    return "(" + joiner.join(_compile(operand, negated) for operand in f.operands) + ")"


def quote(value: str) -> str:
    """A double-quoted Milvus string literal whose value is exactly `value`."""
    return '"' + value.translate(_ESCAPES) + '"'


def literal(value: Value) -> str:
    """A Milvus literal for a filter value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return quote(value)
    if isinstance(value, int):
        return str(value)
    if not math.isfinite(value):  # the parser never makes one; an expression must not carry it
        raise ValueError("a filter number must be finite")
    return repr(value)


def _comparison(c: Comparison, negated: bool) -> str:
    op = _OPERATORS[c.op]
    value = literal(c.value)
    if isinstance(c.field, Column):
        return f"({COLUMN_FIELDS[c.field.name]} {op} {value})"
    path = _path(c.field)
    compared = f"{path} {op} {value}"
    if negated:  # under NOT a missing key must be false, not null (see the module docstring)
        compared = f"exists {path} and {compared}"
    if c.op is Op.HAS:
        return f"(json_contains({path}, {value}) or ({compared}))"
    return f"({compared})"


def acl_group_token(group: str) -> str:
    """A group as the `acl` column holds it: its UTF-8 bytes in hex between `|`s, so no
    character of a group name is a LIKE wildcard or a quote in an expression."""
    return f"|{group.encode().hex()}|"


def acl_column(metadata: Mapping[str, Any] | None) -> str:
    """The `acl` column of a document's chunk rows: "" when its metadata has no `acl` (every
    key sees it), else the tokens of its groups, sorted (`acl_group_token`); an empty `acl`
    is "||", which no key's groups match."""
    acl = (metadata or {}).get(ACL_KEY)
    if acl is None:
        return ""
    groups = sorted(set(acl if isinstance(acl, list) else [acl]))
    return "|" + "".join(acl_group_token(g)[1:] for g in groups) if groups else "||"


#: The chunk rows' column holding `acl_column`.
ACL_FIELD = "acl"


def acl_expr(groups: frozenset[str] | None) -> str | None:
    """The rows of documents visible to `groups` (`shared.access.document_visible`): an empty
    `acl` column (the document has no `acl`) or one holding a token of the groups; None when
    every row is visible. Part of the search's own expression, so hidden documents are never
    candidates of either side of a hybrid search."""
    if groups is None:
        return None
    tests = [f'{ACL_FIELD} == ""']
    tests += [f'{ACL_FIELD} like "%{acl_group_token(g)}%"' for g in sorted(groups)]
    return " or ".join(tests)


def _path(key: MetadataKey) -> str:
    return f"{METADATA_FIELD}[{quote(key.key)}]"
