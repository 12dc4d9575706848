"""`keys new` (docs/api.md#making-a-key): a fresh URL-safe key of 32 random bytes printed once,
an entry the keys file's own parser accepts whose sha256 is the printed key's, bad flags
refused with exit 2 and the flag named; and the CLIs' key from SUPERMEW_API_KEY."""

from __future__ import annotations

import hashlib
import json
import re

import pytest

from retrieval_service.cli import main
from retrieval_service.cli.common import CliSettings
from shared.keys import KeyEntry, parse_keys

URL_SAFE_32_BYTES = re.compile(r"[A-Za-z0-9_-]{43}")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[str, KeyEntry]:
    """The printed key and the printed entry, read back by the keys file's parser."""
    assert main(["keys", "new", *argv]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if not line.startswith("#")]
    key, entry = lines[0], "\n".join(lines[1:])
    (parsed,) = parse_keys("keys:\n" + "".join(f"  {line}\n" for line in entry.splitlines()))
    return key, parsed


def test_prints_a_key_and_the_entry_holding_its_sha256(capsys) -> None:
    key, entry = run(
        capsys, "--id", "team-a-reader", "--role", "reader", "--kb", "team-a", "--group", "a"
    )
    assert URL_SAFE_32_BYTES.fullmatch(key)
    assert entry.sha256 == hashlib.sha256(key.encode("utf-8")).hexdigest()
    assert (entry.id, entry.role, entry.knowledge_bases, entry.groups) == (
        "team-a-reader",
        "reader",
        ["team-a"],
        ["a"],
    )
    assert entry.rate_per_second is None and entry.burst is None


def test_every_key_is_new(capsys) -> None:
    keys = {run(capsys, "--id", "w", "--role", "writer", "--kb", "team-a")[0] for _ in range(5)}
    assert len(keys) == 5


def test_many_knowledge_bases_groups_any_kb_and_quotas(capsys) -> None:
    _, entry = run(
        capsys,
        "--id",
        "yes",  # a YAML boolean when unquoted
        "--role",
        "admin",
        "--kb",
        "*",
        "knowledge_bases/team-b",
        "--kb",
        "team-c",
        "--group",
        "a",
        "b: c",
        "--group",
        "#d",
        "--rate-per-second",
        "2.5",
        "--burst",
        "5",
    )
    assert entry.id == "yes"
    assert entry.knowledge_bases == ["*", "team-b", "team-c"]
    assert entry.groups == ["a", "b: c", "#d"]
    assert (entry.rate_per_second, entry.burst) == (2.5, 5)


def test_json_prints_key_and_entry(capsys) -> None:
    assert main(["keys", "new", "--id", "r", "--role", "reader", "--kb", "x", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["entry"]["sha256"] == hashlib.sha256(out["key"].encode()).hexdigest()
    assert out["entry"]["groups"] == []


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--id", "k", "--role", "owner", "--kb", "team-a"], "--role"),
        (["--id", "k", "--role", "reader", "--kb", "Team_A"], "--kb"),
        (["--id", "k", "--role", "reader", "--kb", "9lives"], "--kb"),
        (["--id", "k", "--role", "reader"], "--kb"),
    ],
)
def test_a_bad_role_or_kb_exits_2_naming_it(capsys, argv, named) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["keys", "new", *argv])
    assert exited.value.code == 2
    captured = capsys.readouterr()
    assert named in captured.err and captured.out == ""


def test_a_bad_id_or_quota_exits_2_naming_the_flag(capsys) -> None:
    for argv, named in [
        (["--id", "has space"], "--id"),
        (["--id", "k", "--burst", "0"], "--burst"),
    ]:
        assert main(["keys", "new", *argv, "--role", "reader", "--kb", "team-a"]) == 2
        captured = capsys.readouterr()
        assert captured.err.startswith(f"error: {named}:") and captured.out == ""


def test_the_cli_key_is_supermew_api_key_else_auth_token(monkeypatch) -> None:
    monkeypatch.delenv("SUPERMEW_API_KEY", raising=False)
    monkeypatch.setenv("AUTH_TOKEN", "old-token")
    assert CliSettings().metadata == [("authorization", "Bearer old-token")]
    monkeypatch.setenv("SUPERMEW_API_KEY", "new-key")
    assert CliSettings().metadata == [("authorization", "Bearer new-key")]
    monkeypatch.delenv("AUTH_TOKEN")
    monkeypatch.delenv("SUPERMEW_API_KEY")
    assert CliSettings().metadata == []
