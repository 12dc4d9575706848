"""The pure parts of long-running operations and imports (docs/api.md#operations,
docs/api.md#imports): ListOperations' filter and page tokens, operation names, the import's
globs and its checkpoint, kept with the operation as JSON."""

from __future__ import annotations

import pytest

from retrieval_service.core.imports.job import (
    MAX_FAILURES,
    ImportCheckpoint,
    ImportCounts,
    ImportFailed,
)
from retrieval_service.core.imports.source import check_globs, selected
from shared.errors import InvalidArgument
from shared.operations import (
    OperationFilter,
    OperationState,
    after_id,
    new_operation_id,
    operation_id,
    page_token,
    parse_filter,
)


def test_operation_ids_sort_by_creation_and_names_round_trip() -> None:
    first, second = new_operation_id(1_000), new_operation_id(2_000)
    assert first < second and len(first) == 20
    assert operation_id(f"operations/{first}") == first


@pytest.mark.parametrize(
    "name", ["", "operations/", "ops/0123", "operations/../x", "x/" + "0" * 20]
)
def test_a_name_that_is_not_an_operation_is_invalid_naming_name(name: str) -> None:
    with pytest.raises(InvalidArgument) as refused:
        operation_id(name)
    assert refused.value.field == "name"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", OperationFilter()),
        ("done = true", OperationFilter(done=True)),
        ("done=false", OperationFilter(done=False)),
        ("state = RUNNING", OperationFilter(states=frozenset({OperationState.RUNNING}))),
        (
            'done = true AND knowledge_base = "knowledge_bases/hr"',
            OperationFilter(done=True, knowledge_base="hr"),
        ),
        ("knowledge_base = ops", OperationFilter(knowledge_base="ops")),
    ],
)
def test_the_filter_subset(text: str, expected: OperationFilter) -> None:
    assert parse_filter(text) == expected


@pytest.mark.parametrize(
    "text",
    ["done = maybe", "color = red", "state = DONE", "done", "done = true OR done = false",
     "state = QUEUED AND state = RUNNING"],
)  # fmt: skip
def test_anything_else_is_invalid_naming_filter(text: str) -> None:
    with pytest.raises(InvalidArgument) as refused:
        parse_filter(text)
    assert refused.value.field == "filter"


def test_page_tokens_round_trip_and_foreign_ones_are_refused() -> None:
    op = new_operation_id()
    assert after_id(page_token(op)) == op
    assert after_id("") is None
    for foreign in ("abc", "b3A6eA==", page_token("0" * 19)):
        with pytest.raises(InvalidArgument) as refused:
            after_id(foreign)
        assert refused.value.field == "page_token"


@pytest.mark.parametrize(
    ("path", "include", "exclude", "chosen"),
    [
        ("a.md", [], [], True),
        ("docs/a.md", ["*.md"], [], True),  # fnmatch's * crosses folders
        ("a.md", ["**/*.md"], [], True),  # **/ also matches no folder
        ("docs/a.txt", ["**/*.md"], [], False),
        ("drafts/a.md", [], ["drafts/*"], False),
        ("docs/a.md", ["docs/*"], ["*.txt"], True),
    ],
)
def test_globs(path: str, include: list[str], exclude: list[str], chosen: bool) -> None:
    assert selected(path, include, exclude) is chosen


@pytest.mark.parametrize("glob", ["", "  ", "/abs/*", "x" * 513])
def test_a_bad_glob_is_invalid_naming_its_index(glob: str) -> None:
    with pytest.raises(InvalidArgument) as refused:
        check_globs(["*.md", glob], "include_globs")
    assert refused.value.field == "include_globs[1]"


def test_a_checkpoint_round_trips_as_json_and_keeps_at_most_1000_failures() -> None:
    checkpoint = ImportCheckpoint(
        counts=ImportCounts(total=5, new=2, failed=0), cursor=16, listed=True
    )
    for i in range(MAX_FAILURES + 5):
        checkpoint.fail(ImportFailed(f"file:///x/{i}", f"{i}.md", "INVALID_ARGUMENT", "bad"))
    assert checkpoint.counts.failed == MAX_FAILURES + 5  # the counts are whole
    assert len(checkpoint.failures) == MAX_FAILURES
    assert ImportCheckpoint.from_json(checkpoint.to_json()) == checkpoint
    assert ImportCheckpoint.from_json({}) == ImportCheckpoint()


def test_progress_percent() -> None:
    assert ImportCounts().percent() == 0
    assert ImportCounts(total=4, new=1, unchanged=1, failed=1).percent() == 75
    assert ImportCounts(total=3, new=3).percent() == 100


def test_a_batch_joins_the_checkpoint_with_its_counts_and_failures_capped() -> None:
    checkpoint = ImportCheckpoint(counts=ImportCounts(total=10, new=2, skipped=1))
    for index in range(MAX_FAILURES - 1):
        checkpoint.fail(ImportFailed(f"file:///{index}", str(index), "INVALID_ARGUMENT", "bad"))
    batch = ImportCheckpoint(counts=ImportCounts(new=1, replaced=2, unchanged=3, leaves_written=7))
    batch.fail(ImportFailed("file:///a", "a", "NOT_FOUND", "gone"))
    batch.fail(ImportFailed("file:///b", "b", "NOT_FOUND", "gone"))
    checkpoint.absorb(batch)
    counts = checkpoint.counts
    assert (counts.total, counts.skipped) == (10, 1)  # the job's own, not a batch's
    assert (counts.new, counts.replaced, counts.unchanged) == (3, 2, 3)
    assert (counts.failed, counts.leaves_written) == (MAX_FAILURES + 1, 7)
    assert len(checkpoint.failures) == MAX_FAILURES
    assert checkpoint.failures[-1].document_id == "a"
