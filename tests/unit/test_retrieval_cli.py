"""The retrieval CLI's pure parts: `--metadata` values, sidecars under the flags, the folder
walk of `sync` (relative POSIX paths as document_ids, hidden names skipped), and the parser's
commands (`kb update` sends a mask of what was given)."""

from __future__ import annotations

from pathlib import Path

import pytest

from retrieval_service.cli import build_parser
from retrieval_service.cli.common import (
    CliSettings,
    document_metadata,
    kb_name,
    metadata_value,
    parse_metadata_flags,
)
from retrieval_service.cli.sync import local_documents


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("2024", 2024),
        ("-1.5", -1.5),
        ("true", True),
        ("false", False),
        ('"2024"', "2024"),
        ('["hr","policy"]', ["hr", "policy"]),
        ("sales", "sales"),
        ("", ""),
        ("null", "null"),
        ("NaN", "NaN"),
        ("Infinity", "Infinity"),
        ("[1,2]", "[1,2]"),
        ('{"a":1}', '{"a":1}'),
        ("a=b", "a=b"),
    ],
)
def test_a_metadata_value_is_json_only_when_it_is_a_scalar_or_a_list_of_strings(
    text: str, value: object
) -> None:
    assert metadata_value(text) == value
    assert type(metadata_value(text)) is type(value)


def test_metadata_flags_split_at_the_first_equals_and_the_last_flag_wins() -> None:
    flags = ["department=sales", "year=2023", "note=a=b", "year=2024"]
    assert parse_metadata_flags(flags) == {"department": "sales", "year": 2024, "note": "a=b"}
    assert parse_metadata_flags(None) == {}
    with pytest.raises(ValueError, match="key=value"):
        parse_metadata_flags(["department"])


def test_the_sidecar_is_read_and_the_flags_override_it_key_by_key(tmp_path: Path) -> None:
    doc = tmp_path / "notes.md"
    doc.write_text("x")
    assert document_metadata(doc, {"a": 1}) == {"a": 1}
    (tmp_path / "notes.md.meta.json").write_text('{"a": 0, "tags": ["x"]}')
    assert document_metadata(doc, {"a": 1}) == {"a": 1, "tags": ["x"]}
    (tmp_path / "notes.md.meta.json").write_text("[1]")
    with pytest.raises(ValueError, match=r"notes\.md\.meta\.json: not a JSON object"):
        document_metadata(doc, {})
    (tmp_path / "notes.md.meta.json").write_text("{oops")
    with pytest.raises(ValueError, match=r"notes\.md\.meta\.json: not a readable JSON file"):
        document_metadata(doc, {})


def test_sync_walks_supported_files_under_relative_posix_ids(tmp_path: Path) -> None:
    for name in [
        "a.md",
        "hr/leave.md",
        "hr/leave.md.meta.json",
        "hr/deep/pay.txt",
        "image.png",
        ".hidden.md",
        ".git/config.md",
    ]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x")
    found = local_documents(tmp_path)
    assert [doc_id for doc_id, _ in found] == ["a.md", "hr/deep/pay.txt", "hr/leave.md"]
    assert found[2][1] == tmp_path / "hr" / "leave.md"


def test_a_knowledge_base_is_named_from_an_id_or_a_full_name() -> None:
    assert kb_name("hr") == "knowledge_bases/hr"
    assert kb_name("knowledge_bases/hr") == "knowledge_bases/hr"


def test_the_commands_parse() -> None:
    parser = build_parser(CliSettings())
    args = parser.parse_args(["kb", "update", "hr", "--description", "d"])
    assert (args.command, args.kb_command, args.display_name, args.description) == (
        "kb",
        "update",
        None,
        "d",
    )
    args = parser.parse_args(["search", "q", "--kb", "a", "--kb", "b", "--filter", "x = 1"])
    assert (args.kb, args.filter, args.top_k) == (["a", "b"], "x = 1", None)
    args = parser.parse_args(
        ["delete", "--document-id", "a/b.md", "--document-id", "c", "--kb", "x"]
    )
    assert (args.filenames, args.document_id, args.kb) == ([], ["a/b.md", "c"], "x")
    args = parser.parse_args(["sync", "docs", "--kb", "hr", "--dry-run"])
    assert (args.dir, args.kb, args.dry_run) == ("docs", "hr", True)
    with pytest.raises(SystemExit):
        parser.parse_args(["sync", "docs"])  # --kb is required: a sync deletes what is gone
