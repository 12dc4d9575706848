"""Retrieval filters: the AIP-160 subset a caller writes in `RetrieveRequest.filter` (and
`RunRequest` / `ResumeRequest`), parsed into a typed tree, and what a tree means for one chunk
row. The Milvus adapter compiles the same tree to a Milvus expression
(`adapters/milvus/filters.py`); `matches` here is the reference meaning, which the in-memory
store uses and the integration table holds the compiled expression to.

Public API:

- `parse_filter(text) -> Filter | None` — `None` for an empty or blank filter; otherwise the
  tree, or `shared.errors.InvalidArgument("filter", "<what> at column <n>")` (columns count
  characters from 1 across the whole text).
- `matches(filter, row) -> bool` — whether a chunk row (a mapping with `document_id`,
  `filename`, `file_type`, `ingest_time` and `metadata`) passes.
- The tree: `Comparison(field, op, value)`, `And(operands)`, `Or(operands)`, `Not(operand)`;
  `field` is a `Column` (`document_id`, `filename`, `file_type`, `ingest_time`) or a
  `MetadataKey(key)`; `op` an `Op`; `value` a `str`, `int`, `float` or `bool`.

Grammar (LALR; AIP-160's precedence: NOT binds tightest, then OR, then AND, so
`a AND b OR c` is `a AND (b OR c)`)::

    filter      : expression
    expression  : factor ("AND" factor)*
    factor      : term ("OR" term)*
    term        : ["NOT" | "-"] simple
    simple      : comparison | "(" expression ")"
    comparison  : FIELD OPERATOR value
    OPERATOR    : "=" | "!=" | "<" | "<=" | ">" | ">=" | ":"
    value       : STRING | NUMBER | "true" | "false"
    FIELD       : document_id | filename | file_type | ingest_time | metadata.<key>
    STRING      : "..." | '...'   escapes \\" \\' \\\\ \\n \\r \\t \\uXXXX
    NUMBER      : -?digits[.digits][(e|E)[+-]digits]

Keywords are case-sensitive (`AND`, `OR`, `NOT`, `true`, `false`); a bare word is not a
value. Limits: 2,048 characters, 64 comparisons, parentheses nested 16 deep.

Types and meaning:

- `document_id`, `filename`, `file_type` take strings: `=` `!=` `:` (equality) and the
  orderings, which compare code points.
- `ingest_time` takes an RFC 3339 timestamp string with a `Z` or an offset
  (`"2024-01-01T00:00:00Z"`, `"2024-01-01T08:00:00+08:00"`), stored in the tree as
  milliseconds since the Unix epoch (sub-millisecond digits truncated); any other value is an
  error. `:` is equality.
- `metadata.<key>` (`[a-z_][a-z0-9_]{0,63}`) takes strings, numbers and booleans; a boolean
  only with `=`, `!=` or `:`. `:` is "has": true when the stored value is a list containing
  the literal, or a scalar equal to it. A comparison on a key the row lacks is false (so
  `NOT metadata.team = "a"` admits rows without a team, and `metadata.team != "a"` does not).
  Comparing values of different types: `=` is false and `!=` true (numbers compare with
  numbers, ints and floats alike; as in Python and Milvus Lite, `true` equals 1); an ordering
  between a string and a number, or against a list, is *unknown*: neither the comparison nor
  its NOT admits the row, and AND / OR / NOT follow three-valued (Kleene) logic, as Milvus's
  expressions do."""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Final, Literal, NoReturn, TypeAlias

from lark import Lark, Token, Tree
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from shared.errors import InvalidArgument

MAX_CHARACTERS: Final = 2048
MAX_COMPARISONS: Final = 64
MAX_DEPTH: Final = 16

FIELD_NAME: Final = "filter"
#: Metadata keys, as `SourceDocument.metadata` allows them.
METADATA_KEY = re.compile(r"[a-z_][a-z0-9_]{0,63}")
_INT64 = (-(2**63), 2**63 - 1)


class Op(StrEnum):
    EQ = "="
    NE = "!="
    LT = "<"
    LE = "<="
    GT = ">"
    GE = ">="
    HAS = ":"


ORDERINGS: Final = frozenset({Op.LT, Op.LE, Op.GT, Op.GE})

ColumnName: TypeAlias = Literal["document_id", "filename", "file_type", "ingest_time"]
COLUMNS: Final[tuple[ColumnName, ...]] = ("document_id", "filename", "file_type", "ingest_time")


@dataclass(frozen=True, slots=True)
class Column:
    """A row column: `document_id`, `filename`, `file_type` (strings) or `ingest_time`."""

    name: ColumnName


@dataclass(frozen=True, slots=True)
class MetadataKey:
    """One key of the document's metadata object."""

    key: str


FieldRef: TypeAlias = Column | MetadataKey
Value: TypeAlias = str | int | float | bool


@dataclass(frozen=True, slots=True)
class Comparison:
    field: FieldRef
    op: Op
    value: Value


@dataclass(frozen=True, slots=True)
class And:
    operands: tuple[Filter, ...]


@dataclass(frozen=True, slots=True)
class Or:
    operands: tuple[Filter, ...]


@dataclass(frozen=True, slots=True)
class Not:
    operand: Filter


Filter: TypeAlias = Comparison | And | Or | Not


# --- parsing ---------------------------------------------------------------------------------

_GRAMMAR = r"""
start: expression
expression: factor (AND factor)*
factor: term (OR term)*
term: (NOT | MINUS)? (comparison | group)
group: LPAR expression RPAR
comparison: FIELD OPERATOR value
value: STRING | NUMBER | TRUE | FALSE

AND: "AND"
OR: "OR"
NOT: "NOT"
TRUE: "true"
FALSE: "false"
MINUS: "-"
LPAR: "("
RPAR: ")"
OPERATOR: "<=" | ">=" | "!=" | "=" | "<" | ">" | ":"
FIELD: /[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)*/
STRING: /"(?:[^"\\]|\\.)*"/s | /'(?:[^'\\]|\\.)*'/s
NUMBER: /-?[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?/

%ignore /\s+/
"""

_PARSER = Lark(_GRAMMAR, parser="lalr", lexer="basic")

# What each terminal is called in an error message.
_NAMES = {
    "AND": "AND",
    "OR": "OR",
    "NOT": "NOT",
    "MINUS": "'-'",
    "LPAR": "'('",
    "RPAR": "')'",
    "OPERATOR": "an operator",
    "FIELD": "a field",
    "STRING": "a string",
    "NUMBER": "a number",
    "TRUE": "true",
    "FALSE": "false",
    "$END": "the end of the filter",
}
_VALUE_TERMINALS = frozenset({"STRING", "NUMBER", "TRUE", "FALSE"})
_ESCAPES = {'"': '"', "'": "'", "\\": "\\", "n": "\n", "r": "\r", "t": "\t"}
_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?([Zz]|[+-]\d{2}:\d{2})"
)


def parse_filter(text: str) -> Filter | None:
    """The tree of a filter (see the module docstring), `None` when it is empty or blank.
    Raises `InvalidArgument("filter", "<what> at column <n>")`."""
    if not text.strip():
        return None
    if len(text) > MAX_CHARACTERS:
        _fail(f"longer than {MAX_CHARACTERS} characters", MAX_CHARACTERS + 1)
    try:
        tree = _PARSER.parse(text)
    except UnexpectedInput as exc:
        _fail_syntax(exc, text)
    expression = tree.children[0]
    assert isinstance(expression, Tree)
    return _Builder().expression(expression, depth=0)


def _fail(what: str, column: int) -> NoReturn:
    raise InvalidArgument(FIELD_NAME, f"{what} at column {column}")


def _fail_syntax(exc: UnexpectedInput, text: str) -> NoReturn:
    if isinstance(exc, UnexpectedCharacters):
        offset = exc.pos_in_stream or 0
        column = offset + 1
        char = text[offset]
        if char in "\"'":
            _fail("unterminated string", column)
        if char == "\\":
            _fail("a backslash outside a string", column)
        _fail(f"unexpected character {char!r}", column)
    if isinstance(exc, UnexpectedToken):
        token = exc.token
        found = _NAMES.get(token.type, token.type)
        if token.type == "$END":
            column = len(text) + 1
        else:
            column = (token.start_pos or 0) + 1
            if token.type in ("FIELD", "NUMBER"):
                found = f"{found} {_excerpt(token)}"
        expected = {name for name in exc.expected if not name.startswith("__")}
        _fail(f"expected {_expected(expected)}, found {found}", column)
    if isinstance(exc, UnexpectedEOF):  # LALR reports the end as a token; kept for safety
        _fail("unexpected end of the filter", len(text) + 1)
    _fail("syntax error", 1)  # pragma: no cover - lark raises only the three above


def _expected(names: set[str]) -> str:
    if names <= _VALUE_TERMINALS:
        return "a value (a quoted string, a number, true or false)"
    if names == {"OPERATOR"}:
        return "an operator (= != < <= > >= :)"
    if "FIELD" in names:
        return "a comparison (field, operator, value) or '('"
    words = sorted(_NAMES.get(n, n) for n in names)
    if len(words) == 1:
        return words[0]
    return ", ".join(words[:-1]) + " or " + words[-1]


def _excerpt(token: Token, limit: int = 40) -> str:
    text = str(token)
    return repr(text if len(text) <= limit else text[:limit] + "…")


def _column(token: Token) -> int:
    return (token.start_pos or 0) + 1


class _Builder:
    """The lark parse tree → the typed tree, checking the limits and the types on the way (the
    nesting limit is checked before recursing, so a hostile depth never reaches Python's)."""

    def __init__(self) -> None:
        self.comparisons = 0

    def expression(self, node: Tree[Token], depth: int) -> Filter:
        factors = [self.factor(child, depth) for child in _subtrees(node)]
        return factors[0] if len(factors) == 1 else And(tuple(factors))

    def factor(self, node: Tree[Token], depth: int) -> Filter:
        terms = [self.term(child, depth) for child in _subtrees(node)]
        return terms[0] if len(terms) == 1 else Or(tuple(terms))

    def term(self, node: Tree[Token], depth: int) -> Filter:
        negated = isinstance(node.children[0], Token)  # NOT or MINUS
        simple = node.children[-1]
        assert isinstance(simple, Tree)
        if simple.data == "comparison":
            inner: Filter = self.comparison(simple)
        else:  # group: LPAR expression RPAR
            lpar, expression, _ = simple.children
            assert isinstance(lpar, Token) and isinstance(expression, Tree)
            if depth + 1 > MAX_DEPTH:
                _fail(f"parentheses nested deeper than {MAX_DEPTH}", _column(lpar))
            inner = self.expression(expression, depth + 1)
        return Not(inner) if negated else inner

    def comparison(self, node: Tree[Token]) -> Comparison:
        field_token, op_token, value_node = node.children
        assert isinstance(field_token, Token) and isinstance(op_token, Token)
        assert isinstance(value_node, Tree)
        value_token = value_node.children[0]
        assert isinstance(value_token, Token)
        self.comparisons += 1
        if self.comparisons > MAX_COMPARISONS:
            _fail(f"more than {MAX_COMPARISONS} comparisons", _column(field_token))
        field = _field(field_token)
        op = Op(str(op_token))
        value = _value(value_token)
        return Comparison(field, op, _typed(field, op, value, op_token, value_token))


def _subtrees(node: Tree[Token]) -> list[Tree[Token]]:
    return [child for child in node.children if isinstance(child, Tree)]


def _field(token: Token) -> FieldRef:
    name = str(token)
    head, dot, key = name.partition(".")
    if head == "metadata" and dot:
        if not METADATA_KEY.fullmatch(key):
            _fail(
                f"metadata key {_excerpt(token)} is not a valid key ([a-z_][a-z0-9_]{{0,63}})",
                _column(token),
            )
        return MetadataKey(key)
    if not dot:
        for column in COLUMNS:
            if name == column:
                return Column(column)
    if name == "metadata":
        _fail("metadata needs a key (metadata.<key>)", _column(token))
    _fail(
        f"unknown field {_excerpt(token)} (document_id, filename, file_type, ingest_time or "
        "metadata.<key>)",
        _column(token),
    )


def _value(token: Token) -> Value:
    if token.type == "TRUE":
        return True
    if token.type == "FALSE":
        return False
    if token.type == "STRING":
        return _unquote(str(token), token.start_pos or 0)
    text = str(token)
    if re.fullmatch(r"-?[0-9]+", text):
        number = int(text)
        if not _INT64[0] <= number <= _INT64[1]:
            _fail("integer out of the 64-bit range", _column(token))
        return number
    decimal = float(text)
    if not math.isfinite(decimal):
        _fail("number out of range", _column(token))
    return decimal


def _unquote(literal: str, start: int) -> str:
    """A string literal's value; `start` is its opening quote's offset, for error columns."""
    out: list[str] = []
    body = literal[1:-1]
    i = 0
    while i < len(body):
        char = body[i]
        if char != "\\":
            out.append(char)
            i += 1
            continue
        escape = body[i + 1]  # the token's regex guarantees a character after a backslash
        column = start + 1 + i + 1
        if escape in _ESCAPES:
            out.append(_ESCAPES[escape])
            i += 2
            continue
        if escape != "u":
            shown = escape if escape.isprintable() else f"U+{ord(escape):04X}"
            _fail(f"unknown escape \\{shown}", column)
        code, i = _hex4(body, i, column)
        if 0xD800 <= code <= 0xDBFF:  # a high surrogate must pair with a low one
            if body[i : i + 2] == "\\u":
                low, after = _hex4(body, i, start + 1 + i + 1)
                if 0xDC00 <= low <= 0xDFFF:
                    out.append(chr(0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)))
                    i = after
                    continue
            _fail("unpaired surrogate escape", column)
        if 0xDC00 <= code <= 0xDFFF:
            _fail("unpaired surrogate escape", column)
        out.append(chr(code))
    return "".join(out)


def _hex4(body: str, i: int, column: int) -> tuple[int, int]:
    digits = body[i + 2 : i + 6]
    if not re.fullmatch(r"[0-9A-Fa-f]{4}", digits):
        _fail("\\u needs four hex digits", column)
    return int(digits, 16), i + 6


def _typed(field: FieldRef, op: Op, value: Value, op_token: Token, value_token: Token) -> Value:
    """The literal as the field stores it, or an error saying why it cannot be compared."""
    if isinstance(field, MetadataKey):
        if isinstance(value, bool) and op in ORDERINGS:
            _fail(f"{op.value} does not apply to a boolean", _column(op_token))
        return value
    if field.name == "ingest_time":
        if not isinstance(value, str):
            _fail("ingest_time takes an RFC 3339 timestamp string", _column(value_token))
        return _epoch_ms(value, value_token)
    if not isinstance(value, str):
        _fail(f"{field.name} takes a string", _column(value_token))
    return value


def _epoch_ms(text: str, token: Token) -> int:
    match = _RFC3339.fullmatch(text)
    if match is None:
        _fail(
            'ingest_time takes an RFC 3339 timestamp (e.g. "2024-01-01T00:00:00Z")',
            _column(token),
        )
    year, month, day, hour, minute, second, fraction, offset = match.groups()
    micros = (fraction or "").ljust(6, "0")[:6]
    iso = f"{year}-{month}-{day}T{hour}:{minute}:{second}.{micros}"
    iso += "+00:00" if offset in ("Z", "z") else offset
    try:
        moment = datetime.fromisoformat(iso)
    except ValueError:
        _fail("ingest_time: no such date or time", _column(token))
    delta = moment - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


# --- meaning ---------------------------------------------------------------------------------

_COMPARE: Final[dict[Op, Callable[[Any, Any], bool]]] = {
    Op.EQ: operator.eq,
    Op.NE: operator.ne,
    Op.LT: operator.lt,
    Op.LE: operator.le,
    Op.GT: operator.gt,
    Op.GE: operator.ge,
    Op.HAS: operator.eq,
}


def matches(f: Filter, row: Mapping[str, Any]) -> bool:
    """Whether `row` passes `f`: a row is admitted only when the filter is true, not unknown
    (see the module docstring). `row["metadata"]` may be missing or `None` (no metadata)."""
    return _truth(f, row) is True


def _truth(f: Filter, row: Mapping[str, Any]) -> bool | None:
    """Three-valued (Kleene) truth: `None` is unknown."""
    if isinstance(f, Comparison):
        return _compare(f, row)
    if isinstance(f, Not):
        inner = _truth(f.operand, row)
        return None if inner is None else not inner
    unknown = False
    decisive = isinstance(f, Or)  # OR stops at True, AND at False
    for operand in f.operands:
        result = _truth(operand, row)
        if result is decisive:
            return decisive
        unknown = unknown or result is None
    return None if unknown else not decisive


def _compare(c: Comparison, row: Mapping[str, Any]) -> bool | None:
    if isinstance(c.field, Column):
        stored = row[c.field.name]
    else:
        metadata = row.get("metadata") or {}
        stored = metadata.get(c.field.key)
        if stored is None:
            return False
        if c.op is Op.HAS and isinstance(stored, list):
            return c.value in stored
    try:
        return bool(_COMPARE[c.op](stored, c.value))
    except TypeError:  # an ordering across types
        return None
