"""Collecting input files for the command-line clients: files named directly, and folders
walked recursively."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path


def collect_files(paths: Iterable[str | Path], supported: Callable[[str], bool]) -> list[Path]:
    """The files under `paths` whose name `supported` accepts, resolved and deduplicated in
    first-seen order; a folder contributes its files recursively in sorted order, hidden
    names (a leading ".") skipped. A path that does not exist raises FileNotFoundError; a file
    named directly that is hidden or unsupported raises ValueError (in a folder it is
    skipped), so a typo is reported rather than silently ignored."""
    found: dict[Path, None] = {}
    for raw in paths:
        path = Path(raw)
        if not path.exists():
            raise FileNotFoundError(f"no such file or folder: {raw}")
        if not path.is_dir():
            if path.name.startswith(".") or not supported(path.name):
                raise ValueError(f"unsupported file type: {raw}")
            found.setdefault(path.resolve(), None)
            continue
        for p in sorted(q for q in path.rglob("*") if q.is_file()):
            if supported(p.name) and not p.name.startswith("."):
                found.setdefault(p.resolve(), None)
    return list(found)
