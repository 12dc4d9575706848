"""shared.files.collect_files: folders recursively and sorted, hidden and unsupported names
skipped inside folders but refused when named directly, duplicates once."""

from __future__ import annotations

import pytest

from shared.files import collect_files


def supported(name: str) -> bool:
    return name.endswith((".txt", ".md"))


def test_collects_folders_recursively_and_files_once(tmp_path) -> None:
    for rel in ("b.md", "a.txt", "sub/c.txt", "sub/.hidden.txt", "image.png"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x")
    found = collect_files([tmp_path, tmp_path / "a.txt"], supported)
    assert [p.relative_to(tmp_path).as_posix() for p in found] == ["a.txt", "b.md", "sub/c.txt"]


def test_a_missing_or_unsupported_named_file_is_an_error(tmp_path) -> None:
    (tmp_path / "image.png").write_text("x")
    (tmp_path / ".hidden.txt").write_text("x")
    with pytest.raises(FileNotFoundError, match="no such file or folder"):
        collect_files([tmp_path / "nope.txt"], supported)
    for name in ("image.png", ".hidden.txt"):
        with pytest.raises(ValueError, match="unsupported file type"):
            collect_files([tmp_path / name], supported)
