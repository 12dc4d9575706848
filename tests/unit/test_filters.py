"""Retrieval filters (`core.filters`, `adapters.milvus.filters`): what a filter parses to, the
errors (each saying where), the limits, what a parsed filter admits (`matches`), and that the
compiled Milvus expression carries every literal as a literal.

`ROWS` and `CASES` are the meaning table: `matches` runs it here, and
tests/integration/test_filters_milvus.py runs the same table through `to_milvus_expr` on Milvus
Lite, so the compiler and the evaluator cannot drift apart."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from retrieval_service.adapters.milvus.filters import literal, quote, to_milvus_expr
from retrieval_service.core.filters import (
    MAX_CHARACTERS,
    And,
    Column,
    Comparison,
    Filter,
    MetadataKey,
    Not,
    Op,
    Or,
    matches,
    parse_filter,
)
from shared.errors import InvalidArgument


def ms(rfc3339: str) -> int:
    """Milliseconds since the epoch, computed independently of the parser."""
    return round(datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp() * 1000)


def meta(key: str, op: str, value: Any) -> Comparison:
    return Comparison(MetadataKey(key), Op(op), value)


def col(name: Any, op: str, value: Any) -> Comparison:
    return Comparison(Column(name), Op(op), value)


A = meta("a", "=", 1)
B = meta("b", "=", 2)
C = meta("c", "=", 3)

# --- parsing ---------------------------------------------------------------------------------

PARSES: list[tuple[str, Filter]] = [
    # every operator
    ('metadata.department = "sales"', meta("department", "=", "sales")),
    ('metadata.department != "sales"', meta("department", "!=", "sales")),
    ("metadata.year < 2024", meta("year", "<", 2024)),
    ("metadata.year <= 2024", meta("year", "<=", 2024)),
    ("metadata.year > 2024", meta("year", ">", 2024)),
    ("metadata.year >= 2024", meta("year", ">=", 2024)),
    ('metadata.tags : "red"', meta("tags", ":", "red")),
    ('metadata.tags:"red"', meta("tags", ":", "red")),
    # fields
    ('document_id = "a/notes.md"', col("document_id", "=", "a/notes.md")),
    ('filename != "notes.md"', col("filename", "!=", "notes.md")),
    ('file_type : "pdf"', col("file_type", ":", "pdf")),
    ('document_id < "b"', col("document_id", "<", "b")),
    ("metadata._x9 = 1", meta("_x9", "=", 1)),
    ("metadata." + "k" * 64 + " = 1", meta("k" * 64, "=", 1)),
    # literals
    ("metadata.n = -3", meta("n", "=", -3)),
    ("metadata.n = 0", meta("n", "=", 0)),
    ("metadata.n = 4.5", meta("n", "=", 4.5)),
    ("metadata.n = -1.5e-3", meta("n", "=", -0.0015)),
    ("metadata.n = 2E3", meta("n", "=", 2000.0)),
    ("metadata.n = 9223372036854775807", meta("n", "=", 2**63 - 1)),
    ("metadata.n = -9223372036854775808", meta("n", "=", -(2**63))),
    ("metadata.b = true", meta("b", "=", True)),
    ("metadata.b != false", meta("b", "!=", False)),
    ("metadata.b : true", meta("b", ":", True)),
    ("metadata.s = 'single'", meta("s", "=", "single")),
    ('metadata.s = ""', meta("s", "=", "")),
    # hostile and escaped literals: each is one value, whatever it looks like
    (r'filename = "x\" or 1==1"', col("filename", "=", 'x" or 1==1')),
    (r"filename = 'x\' or 1==1'", col("filename", "=", "x' or 1==1")),
    ("""filename = 'say "hi"'""", col("filename", "=", 'say "hi"')),
    ("""filename = "it's" """, col("filename", "=", "it's")),
    (r'filename = "back\\slash"', col("filename", "=", "back\\slash")),
    (r'filename = "\\"', col("filename", "=", "\\")),
    (r'filename = "\\\""', col("filename", "=", '\\"')),
    (r'filename = "a\nb\tc\rd"', col("filename", "=", "a\nb\tc\rd")),
    ('filename = "raw\nnewline"', col("filename", "=", "raw\nnewline")),
    (r'filename = "\u00e9\u7814\u53D1"', col("filename", "=", "é研发")),
    (r'filename = "\ud83d\ude00"', col("filename", "=", "😀")),
    ('filename = "日本語 😀"', col("filename", "=", "日本語 😀")),
    (r'filename = "\u0001"', col("filename", "=", "\x01")),
    ('filename = "nul\x00"', col("filename", "=", "nul\x00")),
    ('filename = ") OR (1 = 1"', col("filename", "=", ") OR (1 = 1")),
    (
        'metadata.s = "AND OR NOT ( ) metadata.x = 1"',
        meta("s", "=", "AND OR NOT ( ) metadata.x = 1"),
    ),
    # timestamps: RFC 3339 → epoch milliseconds, offsets applied, sub-millisecond truncated
    ('ingest_time >= "2024-01-01T00:00:00Z"', col("ingest_time", ">=", 1704067200000)),
    ('ingest_time < "2024-01-01T08:00:00+08:00"', col("ingest_time", "<", 1704067200000)),
    ('ingest_time = "2023-12-31T19:00:00-05:00"', col("ingest_time", "=", 1704067200000)),
    ('ingest_time != "2024-01-01t00:00:00.5z"', col("ingest_time", "!=", 1704067200500)),
    ('ingest_time > "2024-01-01T00:00:00.123456789Z"', col("ingest_time", ">", 1704067200123)),
    ('ingest_time <= "1969-12-31T23:59:59.999Z"', col("ingest_time", "<=", -1)),
    ('ingest_time : "2024-06-01T12:00:00Z"', col("ingest_time", ":", ms("2024-06-01T12:00:00Z"))),
    # AND, OR, NOT and AIP-160's precedence: NOT, then OR, then AND
    ("metadata.a = 1 AND metadata.b = 2", And((A, B))),
    ("metadata.a = 1 OR metadata.b = 2", Or((A, B))),
    ("metadata.a = 1 AND metadata.b = 2 AND metadata.c = 3", And((A, B, C))),
    ("metadata.a = 1 AND metadata.b = 2 OR metadata.c = 3", And((A, Or((B, C))))),
    ("metadata.a = 1 OR metadata.b = 2 AND metadata.c = 3", And((Or((A, B)), C))),
    ("(metadata.a = 1 AND metadata.b = 2) OR metadata.c = 3", Or((And((A, B)), C))),
    ("NOT metadata.a = 1", Not(A)),
    ("-metadata.a = 1", Not(A)),
    ("NOT metadata.a = 1 OR metadata.b = 2", Or((Not(A), B))),
    ("NOT metadata.a = 1 AND metadata.b = 2", And((Not(A), B))),
    ("NOT (metadata.a = 1 OR metadata.b = 2)", Not(Or((A, B)))),
    ("-(metadata.a = 1 AND metadata.b = 2)", Not(And((A, B)))),
    ("NOT (NOT metadata.a = 1)", Not(Not(A))),
    ("((metadata.a = 1))", A),
    ("(metadata.a = 1) AND ((metadata.b = 2) OR metadata.c = 3)", And((A, Or((B, C))))),
    # whitespace is free, keywords are whole words
    ("  metadata.a=1\n\tAND\r\nmetadata.b=2  ", And((A, B))),
]


@pytest.mark.parametrize(("text", "tree"), PARSES, ids=[t for t, _ in PARSES])
def test_a_filter_parses_to_its_tree(text: str, tree: Filter) -> None:
    assert parse_filter(text) == tree


@pytest.mark.parametrize("text", ["", " ", "\n\t "])
def test_an_empty_filter_is_none(text: str) -> None:
    assert parse_filter(text) is None


VALUE = "expected a value (a quoted string, a number, true or false)"
OPERATOR = "expected an operator (= != < <= > >= :)"
COMPARISON = "expected a comparison (field, operator, value) or '('"
FIELDS = "(document_id, filename, file_type, ingest_time or metadata.<key>)"
KEY = "is not a valid key ([a-z_][a-z0-9_]{0,63})"
END = "found the end of the filter"
AFTER = "expected ')', AND, OR or the end of the filter"
RFC3339 = 'ingest_time takes an RFC 3339 timestamp (e.g. "2024-01-01T00:00:00Z")'

ERRORS: list[tuple[str, str]] = [
    # syntax
    ("metadata.a", f"{OPERATOR}, {END} at column 11"),
    ("metadata.a =", f"{VALUE}, {END} at column 13"),
    ("metadata.a = sales", f"{VALUE}, found a field 'sales' at column 14"),
    ("metadata.a = TRUE", f"{VALUE}, found a field 'TRUE' at column 14"),
    ("metadata.a == 1", f"{VALUE}, found an operator at column 13"),
    ('metadata.a = "open', "unterminated string at column 14"),
    ("metadata.a = 'open", "unterminated string at column 14"),
    ('metadata.a = "x\\"', "unterminated string at column 14"),
    ("metadata.a # 1", "unexpected character '#' at column 12"),
    ("metadata.a = 1 \\", "a backslash outside a string at column 16"),
    ("metadata.a = 1 AND", f"{COMPARISON}, {END} at column 19"),
    ("AND metadata.a = 1", f"{COMPARISON}, found AND at column 1"),
    (
        "metadata.a = 1 metadata.b = 2",
        f"{AFTER}, found a field 'metadata.b' at column 16",
    ),
    (
        "metadata.a = 1 and metadata.b = 2",
        f"{AFTER}, found a field 'and' at column 16",
    ),
    ("(metadata.a = 1", f"expected ')', {END} at column 16"),
    ("metadata.a = 1)", "expected the end of the filter, found ')' at column 15"),
    ("()", f"{COMPARISON}, found ')' at column 2"),
    ("NOT NOT metadata.a = 1", f"{COMPARISON}, found NOT at column 5"),
    ("metadata.a = 1 2", f"{AFTER}, found a number '2' at column 16"),
    # literals
    (r'metadata.a = "\x41"', "unknown escape \\x at column 15"),
    (r'metadata.a = "ok\q"', "unknown escape \\q at column 17"),
    ('filename = "a\\\nb"', "unknown escape \\U+000A at column 14"),
    (r'metadata.a = "\u12"', "\\u needs four hex digits at column 15"),
    (r'metadata.a = "\ud83d"', "unpaired surrogate escape at column 15"),
    (r'metadata.a = "\ude00"', "unpaired surrogate escape at column 15"),
    ("metadata.a = 9223372036854775808", "integer out of the 64-bit range at column 14"),
    ("metadata.a = 1e400", "number out of range at column 14"),
    # fields
    ('team = "a"', f"unknown field 'team' {FIELDS} at column 1"),
    ('metadata = "a"', "metadata needs a key (metadata.<key>) at column 1"),
    ('metadata.Team = "a"', f"metadata key 'metadata.Team' {KEY} at column 1"),
    ('NOTE = "a"', f"unknown field 'NOTE' {FIELDS} at column 1"),
    (r'filename = "back\slash"', "unknown escape \\s at column 17"),
    ('metadata.9a = "a"', f"metadata key 'metadata.9a' {KEY} at column 1"),
    ('metadata.a.b = "a"', f"metadata key 'metadata.a.b' {KEY} at column 1"),
    (
        "metadata." + "k" * 65 + " = 1",
        f"metadata key 'metadata.kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk…' {KEY} at column 1",
    ),
    ('filename.x = "a"', f"unknown field 'filename.x' {FIELDS} at column 1"),
    # types
    ("metadata.a = 1 AND metadata.b < true", "< does not apply to a boolean at column 31"),
    ("metadata.b >= false", ">= does not apply to a boolean at column 12"),
    ("filename = 3", "filename takes a string at column 12"),
    ("document_id != true", "document_id takes a string at column 16"),
    ("file_type : 1.5", "file_type takes a string at column 13"),
    ("ingest_time > 1704067200000", "ingest_time takes an RFC 3339 timestamp string at column 15"),
    ('ingest_time > "2024-01-01"', f"{RFC3339} at column 15"),
    ('ingest_time > "2024-01-01T00:00:00"', f"{RFC3339} at column 15"),
    ('ingest_time > "2024-01-01 00:00:00Z"', f"{RFC3339} at column 15"),
    ('ingest_time > "yesterday"', f"{RFC3339} at column 15"),
    ('ingest_time > "2024-02-30T00:00:00Z"', "ingest_time: no such date or time at column 15"),
    ('ingest_time > "2024-01-01T24:00:00Z"', "ingest_time: no such date or time at column 15"),
    ("ingest_time > true", "ingest_time takes an RFC 3339 timestamp string at column 15"),
]


@pytest.mark.parametrize(("text", "message"), ERRORS, ids=[t[:60] for t, _ in ERRORS])
def test_a_bad_filter_says_what_and_where(text: str, message: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        parse_filter(text)
    assert caught.value.field == "filter"
    assert str(caught.value) == f"filter: {message}"
    assert "Token(" not in message and "Expected one of" not in message


# --- limits ----------------------------------------------------------------------------------


def test_a_filter_of_2048_characters_parses_and_one_more_does_not() -> None:
    text = 'filename = "' + "x" * (MAX_CHARACTERS - 13) + '"'
    assert len(text) == MAX_CHARACTERS
    assert parse_filter(text) == col("filename", "=", "x" * (MAX_CHARACTERS - 13))
    with pytest.raises(
        InvalidArgument, match=r"^filter: longer than 2048 characters at column 2049$"
    ):
        parse_filter(text + " ")


def test_64_comparisons_parse_and_the_65th_is_refused_where_it_starts() -> None:
    terms = [f"metadata.k = {n}" for n in range(65)]
    tree = parse_filter(" OR ".join(terms[:64]))
    assert isinstance(tree, Or) and len(tree.operands) == 64
    text = " OR ".join(terms)
    column = text.index("metadata.k = 64") + 1
    with pytest.raises(
        InvalidArgument, match=rf"^filter: more than 64 comparisons at column {column}$"
    ):
        parse_filter(text)


def test_parentheses_nest_16_deep_and_the_17th_is_refused_where_it_opens() -> None:
    assert parse_filter("(" * 16 + "metadata.a = 1" + ")" * 16) == A
    assert parse_filter("NOT (" * 16 + "metadata.a = 1" + ")" * 16) is not None
    with pytest.raises(
        InvalidArgument, match=r"^filter: parentheses nested deeper than 16 at column 17$"
    ):
        parse_filter("(" * 17 + "metadata.a = 1" + ")" * 17)


def test_a_hostile_depth_is_refused_not_recursed_into() -> None:
    with pytest.raises(InvalidArgument, match="nested deeper than 16 at column 17"):
        parse_filter("(" * 1000 + "metadata.a = 1" + ")" * 1000)


# --- meaning: the table Milvus runs too ------------------------------------------------------

ROWS: list[dict[str, Any]] = [
    {
        "document_id": "a/notes.md",
        "filename": "notes.md",
        "file_type": "md",
        "ingest_time": ms("2024-01-01T00:00:00Z"),
        "metadata": {
            "department": "sales",
            "year": 2023,
            "tags": ["red", "blue"],
            "public": True,
            "score": 4.5,
        },
    },
    {
        "document_id": "b/notes.md",
        "filename": "notes.md",
        "file_type": "md",
        "ingest_time": ms("2024-06-01T12:00:00Z"),
        "metadata": {
            "department": "it",
            "year": 2024,
            "tags": ["green"],
            "public": False,
            "score": 3,
        },
    },
    {
        "document_id": "report.pdf",
        "filename": "report.pdf",
        "file_type": "pdf",
        "ingest_time": ms("2023-12-31T23:59:59.999Z"),
        # a year stored as a string and tags as a single string: other types, same keys
        "metadata": {"department": "sales", "year": "2023", "tags": "red"},
    },
    {
        "document_id": "hostile-1",
        "filename": 'x" or 1==1',
        "file_type": "txt",
        "ingest_time": ms("2024-02-01T00:00:00Z"),
        "metadata": {"department": 'x" or 1==1', "note": "it's"},
    },
    {
        "document_id": "hostile-2",
        "filename": "back\\slash",
        "file_type": "txt",
        "ingest_time": ms("2024-03-01T00:00:00Z"),
        "metadata": {"note": "a\\b\"c'd"},
    },
    {
        "document_id": "newline",
        "filename": "line1\nline2",
        "file_type": "txt",
        "ingest_time": ms("2024-04-01T00:00:00Z"),
        "metadata": {"note": "tab\there\r\nand", "department": "研发"},
    },
    {
        "document_id": "unicode",
        "filename": "日本語.md",
        "file_type": "md",
        "ingest_time": ms("2024-05-01T00:00:00Z"),
        "metadata": {"department": "研发", "emoji": "😀", "tags": ["é", "😀"]},
    },
    {
        "document_id": "empty",
        "filename": "empty.txt",
        "file_type": "txt",
        "ingest_time": ms("2024-07-01T00:00:00Z"),
        "metadata": {},
    },
    {
        "document_id": "numbers",
        "filename": "n.csv",
        "file_type": "csv",
        "ingest_time": ms("2024-08-01T00:00:00Z"),
        "metadata": {"year": 2025, "score": -1.5, "public": True, "count": 0},
    },
    {
        "document_id": "ctl",
        "filename": "ctl\x01.txt",
        "file_type": "txt",
        "ingest_time": ms("2024-09-01T00:00:00Z"),
        "metadata": {"note": "\x01bell"},
    },
]
ALL = {row["document_id"] for row in ROWS}


def but(*ids: str) -> set[str]:
    return ALL - set(ids)


#: (filter, the document ids it admits).
CASES: list[tuple[str, set[str]]] = [
    # equality and inequality on metadata; a missing key is false, so NOT admits it
    ('metadata.department = "sales"', {"a/notes.md", "report.pdf"}),
    ('metadata.department != "sales"', {"b/notes.md", "hostile-1", "newline", "unicode"}),
    ('NOT metadata.department = "sales"', but("a/notes.md", "report.pdf")),
    ('-metadata.department = "sales"', but("a/notes.md", "report.pdf")),
    ('metadata.missing = "x"', set()),
    ('metadata.missing != "x"', set()),
    ('NOT metadata.missing = "x"', ALL),
    # numbers: ints and floats compare alike; a string "2023" is not the number 2023
    ("metadata.year = 2023", {"a/notes.md"}),
    ('metadata.year = "2023"', {"report.pdf"}),
    ("metadata.year != 2023", {"b/notes.md", "report.pdf", "numbers"}),
    ("metadata.year < 2024", {"a/notes.md"}),
    ("metadata.year <= 2024", {"a/notes.md", "b/notes.md"}),
    ("metadata.year > 2023", {"b/notes.md", "numbers"}),
    ("metadata.year >= 2024", {"b/notes.md", "numbers"}),
    ("metadata.score > 4", {"a/notes.md"}),
    ("metadata.score = 3.0", {"b/notes.md"}),
    ("metadata.score < 0", {"numbers"}),
    ("metadata.score >= -1.5", {"a/notes.md", "b/notes.md", "numbers"}),
    ("metadata.count = 0", {"numbers"}),
    # an ordering across types is unknown: neither it nor its NOT admits the row
    ("NOT metadata.year >= 2024", but("b/notes.md", "numbers", "report.pdf")),
    ('metadata.department < "t"', {"a/notes.md", "report.pdf", "b/notes.md"}),
    ('metadata.tags > "a"', {"report.pdf"}),
    ('NOT metadata.tags > "a"', but("report.pdf", "a/notes.md", "b/notes.md", "unicode")),
    # booleans (`true` equals 1, as in Python and Milvus Lite)
    ("metadata.public = true", {"a/notes.md", "numbers"}),
    ("metadata.public != true", {"b/notes.md"}),
    ("metadata.public : false", {"b/notes.md"}),
    ("metadata.public = 1", {"a/notes.md", "numbers"}),
    # has: a list containing it, or a scalar equal to it
    ('metadata.tags : "red"', {"a/notes.md", "report.pdf"}),
    ('metadata.tags : "green"', {"b/notes.md"}),
    ('metadata.tags = "red"', {"report.pdf"}),
    ('NOT metadata.tags : "red"', but("a/notes.md", "report.pdf")),
    ('metadata.tags : "😀"', {"unicode"}),
    (r'metadata.tags : "\u00e9"', {"unicode"}),
    ('metadata.department : "sales"', {"a/notes.md", "report.pdf"}),
    ('metadata.tags : "re"', set()),
    # the row's own columns
    ('document_id = "a/notes.md"', {"a/notes.md"}),
    ('document_id : "a/notes.md"', {"a/notes.md"}),
    ('filename = "notes.md"', {"a/notes.md", "b/notes.md"}),
    ('filename != "notes.md"', but("a/notes.md", "b/notes.md")),
    ('file_type != "md"', but("a/notes.md", "b/notes.md", "unicode")),
    ('document_id < "b"', {"a/notes.md"}),
    ('document_id >= "n"', {"newline", "numbers", "report.pdf", "unicode"}),
    ('document_id > "hostile-1" AND document_id <= "newline"', {"hostile-2", "newline"}),
    # timestamps
    ('ingest_time >= "2024-06-01T12:00:00Z"', {"b/notes.md", "empty", "numbers", "ctl"}),
    ('ingest_time > "2024-06-01T12:00:00Z"', {"empty", "numbers", "ctl"}),
    ('ingest_time < "2024-01-01T00:00:00Z"', {"report.pdf"}),
    ('ingest_time <= "2023-12-31T23:59:59.999Z"', {"report.pdf"}),
    ('ingest_time = "2024-01-01T08:00:00+08:00"', {"a/notes.md"}),
    ('ingest_time != "2024-01-01T00:00:00Z"', but("a/notes.md")),
    (
        'ingest_time >= "2024-02-01T00:00:00Z" AND ingest_time < "2024-04-01T00:00:00Z"',
        {"hostile-1", "hostile-2"},
    ),
    # precedence: `a AND b OR c` is `a AND (b OR c)`
    (
        'filename = "notes.md" AND metadata.year = 2024 OR metadata.department = "研发"',
        {"b/notes.md"},
    ),
    (
        '(filename = "notes.md" AND metadata.year = 2024) OR metadata.department = "研发"',
        {"b/notes.md", "newline", "unicode"},
    ),
    (
        'metadata.department = "研发" OR metadata.public = true AND file_type = "md"',
        {"a/notes.md", "unicode"},
    ),
    ('NOT file_type = "md" AND metadata.department = "sales"', {"report.pdf"}),
    ('NOT (file_type = "md" OR file_type = "txt")', {"report.pdf", "numbers"}),
    ('-(file_type = "md" OR file_type = "txt")', {"report.pdf", "numbers"}),
    ('NOT (NOT metadata.department = "sales")', {"a/notes.md", "report.pdf"}),
    # three-valued logic: unknown OR true is true, unknown AND false is false
    ('NOT (metadata.year > 2023 OR file_type = "pdf")', but("b/notes.md", "report.pdf", "numbers")),
    ('NOT (metadata.year > 2023 AND file_type = "pdf")', but("report.pdf")),
    ('metadata.year > 2023 OR file_type = "pdf"', {"b/notes.md", "report.pdf", "numbers"}),
    # hostile literals match exactly the row holding them, and nothing else
    (r'filename = "x\" or 1==1"', {"hostile-1"}),
    (r"filename = 'x\" or 1==1'", {"hostile-1"}),
    ("""metadata.department = 'x" or 1==1'""", {"hostile-1"}),
    (r'filename = "x\" or 1==1" OR filename = "nothing"', {"hostile-1"}),
    (r'filename = "x\") or (1==1"', set()),
    (r'document_id = "\" or document_id != \""', set()),
    (r'metadata.note = "\" or exists metadata[\"note\"] or \""', set()),
    ("""metadata.note = "it's" """, {"hostile-1"}),
    (r"metadata.note = 'it\'s'", {"hostile-1"}),
    (r'filename = "back\\slash"', {"hostile-2"}),
    (r'metadata.note = "a\\b\"c\'d"', {"hostile-2"}),
    (r'filename = "line1\nline2"', {"newline"}),
    ('filename = "line1\nline2"', {"newline"}),
    (r'metadata.note = "tab\there\r\nand"', {"newline"}),
    (r'metadata.note = "tab\there\nand"', set()),
    (r'metadata.department = "\u7814\u53d1"', {"newline", "unicode"}),
    ('metadata.department = "研发"', {"newline", "unicode"}),
    (r'metadata.emoji = "\ud83d\ude00"', {"unicode"}),
    ('filename = "日本語.md"', {"unicode"}),
    (r'metadata.note = "\u0001bell"', {"ctl"}),
    (r'filename = "ctl\u0001.txt"', {"ctl"}),
    (r'metadata.note = "\u0000bell"', set()),
    (r'metadata.department = "sales\\"', set()),
]


def admitted(f: Filter, rows: list[dict[str, Any]]) -> set[str]:
    return {row["document_id"] for row in rows if matches(f, row)}


@pytest.mark.parametrize(("text", "expected"), CASES, ids=[t for t, _ in CASES])
def test_a_filter_admits_the_expected_rows(text: str, expected: set[str]) -> None:
    f = parse_filter(text)
    assert f is not None
    assert admitted(f, ROWS) == expected


def test_a_row_without_metadata_has_no_keys() -> None:
    row = {"document_id": "d", "filename": "f", "file_type": "txt", "ingest_time": 0}
    f = parse_filter('NOT metadata.x = "y"')
    assert f is not None and matches(f, row)
    assert matches(f, {**row, "metadata": None})


# --- the compiled expression -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ('x" or 1==1', r'"x\" or 1==1"'),
        ("back\\slash", r'"back\\slash"'),
        ("\\", r'"\\"'),
        ("it's", '"it\'s"'),
        ("a\nb\r\tc", r'"a\nb\r\tc"'),
        ("日本語 😀", '"日本語 😀"'),
        ("\x01", '"\x01"'),
    ],
)
def test_a_string_is_quoted_with_the_escapes_milvus_reads(value: str, expected: str) -> None:
    assert quote(value) == expected


def test_literals_are_printed_from_their_values() -> None:
    assert [literal(v) for v in (True, False, 0, -3, 4.5, -1.5e-07, 1e16)] == [
        "true",
        "false",
        "0",
        "-3",
        "4.5",
        "-1.5e-07",
        "1e+16",
    ]


def test_a_filter_compiles_with_exists_guards_only_under_not() -> None:
    f = parse_filter(
        'metadata.tags : "red" AND '
        'NOT (metadata.year > 2023 OR ingest_time < "1970-01-01T00:00:01Z")'
    )
    assert f is not None
    assert to_milvus_expr(f) == (
        '((json_contains(metadata["tags"], "red") or (metadata["tags"] == "red")) and '
        '(not ((exists metadata["year"] and metadata["year"] > 2023) or (ingest_time < 1000))))'
    )
    g = parse_filter('NOT (NOT metadata.a = 1) AND NOT metadata.t : "x"')
    assert g is not None
    assert to_milvus_expr(g) == (
        '((not (not (metadata["a"] == 1))) and (not (json_contains(metadata["t"], "x") or '
        '(exists metadata["t"] and metadata["t"] == "x"))))'
    )


def aip_quote(value: str) -> str:
    """A filter string literal for any text, escaping what the filter syntax needs."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + escaped + '"'


@settings(max_examples=300, derandomize=True, deadline=None)
@given(st.text(st.characters(exclude_categories=["Cs"]), max_size=40))
def test_any_text_stays_one_literal_in_milvus_expression(value: str) -> None:
    """Milvus Lite's own expression parser (pure Python, no server) reads the compiled
    expression back: one comparison whose literal is the text, whatever the text holds."""
    from milvus_lite.search.filter import parse_expr
    from milvus_lite.search.filter.ast import CmpOp, StringLit

    f = parse_filter(f"filename = {aip_quote(value)}")
    assert f == col("filename", "=", value)
    parsed = parse_expr(to_milvus_expr(f))
    assert isinstance(parsed, CmpOp) and parsed.op == "=="
    assert isinstance(parsed.right, StringLit) and parsed.right.value == value
