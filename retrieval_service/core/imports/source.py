"""What an import reads (docs/api.md#imports), as the job sees it: a `Source` lists `Entry`s
(document_id, file name, change hint) and reads one at a time; the adapters
(retrieval_service/adapters/sources.py) implement it for `file://` and `http(s)://`."""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from retrieval_service.core.file_types import FILE_TYPES_BY_EXTENSION, extension_of
from shared.errors import InvalidArgument

#: A file's metadata sidecar: `<file>.meta.json` beside it (as `sync` reads it).
SIDECAR_SUFFIX = ".meta.json"


@dataclass(frozen=True, slots=True)
class Entry:
    """One document a source holds."""

    uri: str
    document_id: str
    filename: str
    hint: str = ""
    sidecar: str = ""


@dataclass
class Listing:
    """What a source holds: its documents (sorted by document_id), the uris skipped as
    unsupported, and the documents refused while listing (a symlink leaving its root)."""

    entries: list[Entry] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    refused: list[tuple[Entry, str]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Read:
    """A document's bytes, the file name to parse them by, and its sidecar's metadata."""

    content: bytes
    filename: str
    sidecar: dict[str, Any] | None = None


class Source(Protocol):
    uri: str

    async def listing(self) -> Listing: ...

    async def read(self, entry: Entry) -> Read: ...


def supported(name: str) -> bool:
    return extension_of(name) in FILE_TYPES_BY_EXTENSION


def selected(path: str, include: Sequence[str], exclude: Sequence[str]) -> bool:
    """`path` (relative, `/`-separated) matches one include glob (none: every path) and no
    exclude glob. `**/` also matches no folder at all, as in `.gitignore`."""

    def matches(pattern: str) -> bool:
        return fnmatch.fnmatchcase(path, pattern) or (
            pattern.startswith("**/") and fnmatch.fnmatchcase(path, pattern[3:])
        )

    return (not include or any(matches(p) for p in include)) and not any(
        matches(p) for p in exclude
    )


def check_globs(globs: Sequence[str], field_name: str) -> None:
    for i, glob in enumerate(globs):
        if not glob.strip() or glob.startswith("/") or len(glob) > 512:
            raise InvalidArgument(
                f"{field_name}[{i}]", "must be a non-empty relative pattern of at most 512 chars"
            )


def parse_sidecar(raw: bytes, name: str) -> dict[str, Any]:
    try:
        loaded = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise InvalidArgument("metadata", f"{name} is not readable JSON ({exc})") from exc
    if not isinstance(loaded, dict):
        raise InvalidArgument("metadata", f"{name} is not a JSON object")
    return loaded
