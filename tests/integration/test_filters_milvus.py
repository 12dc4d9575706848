"""The filter meaning table (`tests/unit/test_filters.py`: ROWS, CASES) on Milvus Lite: each
filter compiled by `to_milvus_expr` and run by `client.query` admits exactly the documents that
`core.filters.matches` admits and the table expects, so the compiler and the evaluator cannot
drift apart. The collection is a scratch one with the chunk rows' filterable fields."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from retrieval_service.adapters.milvus.filters import to_milvus_expr
from retrieval_service.bootstrap import clear_milvus_env
from retrieval_service.core.filters import (
    ORDERINGS,
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
from tests.unit.test_filters import CASES, ROWS

pytestmark = pytest.mark.integration

COLLECTION = "filters"


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    clear_milvus_env()
    from pymilvus import DataType, MilvusClient

    path: Path = tmp_path_factory.mktemp("filters") / "filters.db"
    client = MilvusClient(str(path))
    try:
        schema = client.create_schema(auto_id=False)
        schema.add_field("pk", DataType.INT64, is_primary=True)
        schema.add_field("vector", DataType.FLOAT_VECTOR, dim=2)
        schema.add_field("document_id", DataType.VARCHAR, max_length=512)
        schema.add_field("filename", DataType.VARCHAR, max_length=512)
        schema.add_field("file_type", DataType.VARCHAR, max_length=32)
        schema.add_field("ingest_time", DataType.INT64)
        schema.add_field("metadata", DataType.JSON)
        index = client.prepare_index_params()
        index.add_index("vector", index_type="FLAT", metric_type="IP")
        client.create_collection(COLLECTION, schema=schema, index_params=index)
        rows = [{"pk": n, "vector": [1.0, 0.0], **row} for n, row in enumerate(ROWS)]
        client.insert(COLLECTION, rows)
        client.load_collection(COLLECTION)
        yield client
    finally:
        client.close()


def test_the_rows_round_trip(client: Any) -> None:
    """The hostile values are stored as written, so the table below tests the filters."""
    stored = client.query(COLLECTION, filter="pk >= 0", output_fields=list(ROWS[0]))
    by_id = {row["document_id"]: {k: row[k] for k in ROWS[0]} for row in stored}
    assert by_id == {row["document_id"]: row for row in ROWS}


@pytest.mark.parametrize(("text", "expected"), CASES, ids=[t for t, _ in CASES])
def test_milvus_and_matches_admit_the_expected_documents(
    client: Any, text: str, expected: set[str]
) -> None:
    f = parse_filter(text)
    assert f is not None
    hits = client.query(COLLECTION, filter=to_milvus_expr(f), output_fields=["document_id"])
    assert {hit["document_id"] for hit in hits} == expected
    assert {row["document_id"] for row in ROWS if matches(f, row)} == expected


def test_a_compiled_filter_joins_other_conditions(client: Any) -> None:
    f = parse_filter('metadata.department = "sales" OR file_type = "csv"')
    assert f is not None
    hits = client.query(
        COLLECTION,
        filter=f'document_id != "report.pdf" and {to_milvus_expr(f)}',
        output_fields=["document_id"],
    )
    assert {hit["document_id"] for hit in hits} == {"a/notes.md", "numbers"}


# Random trees over the table's own keys and values (and some it lacks), nested under NOT, AND
# and OR: where the table's cases are chosen by hand, these find a combination nobody wrote.
_VALUES = st.sampled_from(
    [
        "sales",
        "研发",
        "red",
        "2023",
        "it's",
        'x" or 1==1',
        "",
        2023,
        2024,
        0,
        3,
        4.5,
        -1.5,
        True,
        False,
    ]
)
_KEYS = st.sampled_from(["department", "year", "tags", "public", "score", "count", "note", "nope"])


@st.composite
def _comparisons(draw: st.DrawFn) -> Comparison:
    if draw(st.booleans()):
        key = MetadataKey(draw(_KEYS))
        value = draw(_VALUES)
        ops = [op for op in Op if not (isinstance(value, bool) and op in ORDERINGS)]
        return Comparison(key, draw(st.sampled_from(ops)), value)
    column = draw(st.sampled_from(["document_id", "filename", "file_type", "ingest_time"]))
    if column == "ingest_time":
        value = draw(st.sampled_from([row["ingest_time"] for row in ROWS]))
    else:
        value = draw(st.sampled_from([row[column] for row in ROWS] + ["m", "txt"]))
    return Comparison(Column(column), draw(st.sampled_from(list(Op))), value)


_TREES: st.SearchStrategy[Filter] = st.recursive(
    _comparisons(),
    lambda inner: st.one_of(
        inner.map(Not),
        st.lists(inner, min_size=2, max_size=3).map(lambda fs: And(tuple(fs))),
        st.lists(inner, min_size=2, max_size=3).map(lambda fs: Or(tuple(fs))),
    ),
    max_leaves=8,
)


@settings(max_examples=200, derandomize=True, deadline=None)
@given(_TREES)
def test_random_filters_admit_the_same_rows_in_milvus_and_matches(client: Any, f: Filter) -> None:
    hits = client.query(COLLECTION, filter=to_milvus_expr(f), output_fields=["document_id"])
    assert {hit["document_id"] for hit in hits} == {
        row["document_id"] for row in ROWS if matches(f, row)
    }
