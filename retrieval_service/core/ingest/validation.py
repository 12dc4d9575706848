"""The request checks of ingestion, listing and deletion (docs/api.md#documents-and-chunks):
every rule a caller's input must meet, each failure an `InvalidArgument` naming its field. They
run before anything is embedded or written, so bad input changes nothing."""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from retrieval_service.core.file_types import FILE_TYPES_BY_EXTENSION, extension_of
from retrieval_service.core.identity import check_document_id
from shared.errors import InvalidArgument
from shared.paging import page_size_of

MAX_FILENAME_CHARS = 255
DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000


@dataclass(frozen=True, slots=True)
class SourceDocument:
    filename: str
    content: bytes
    file_type: str | None = None
    #: None means the filename.
    document_id: str | None = None
    metadata: dict[str, Any] | None = None


def validate_filename(filename: str, field: str) -> None:
    """A plain file name: not blank, no path separators or "..", no control or format
    characters, at most 255 characters, with a supported extension."""
    if not filename or not filename.strip():
        raise InvalidArgument(field, "must not be empty")
    if len(filename) > MAX_FILENAME_CHARS:
        raise InvalidArgument(field, f"is longer than {MAX_FILENAME_CHARS} characters")
    if "/" in filename or "\\" in filename:
        raise InvalidArgument(field, "must not contain path separators")
    if ".." in filename:
        raise InvalidArgument(field, 'must not contain ".."')
    if filename != filename.strip():
        raise InvalidArgument(field, "must not start or end with whitespace")
    if any(unicodedata.category(ch) in ("Cc", "Cf", "Co", "Cs") for ch in filename):
        raise InvalidArgument(field, "must not contain control characters")
    if extension_of(filename) not in FILE_TYPES_BY_EXTENSION:
        supported = ", ".join(sorted(FILE_TYPES_BY_EXTENSION))
        raise InvalidArgument(field, f"unsupported file type (supported: {supported})")


def check_ingest_request(documents: Sequence[SourceDocument]) -> None:
    """At least one document, no document_id twice (a document without one is named by its
    file name, and the error then names `filename`)."""
    if not documents:
        raise InvalidArgument("documents", "must hold at least one document")
    seen: set[str] = set()
    for i, doc in enumerate(documents):
        if doc.document_id is not None:
            check_document_id(doc.document_id, f"documents[{i}].document_id")
        key = doc.document_id if doc.document_id is not None else doc.filename
        if key in seen:
            field = "document_id" if doc.document_id is not None else "filename"
            raise InvalidArgument(f"documents[{i}].{field}", "appears twice in the request")
        seen.add(key)


def check_content(doc: SourceDocument, field: str, max_bytes: int) -> None:
    """Some bytes, and at most `max_bytes` of them (`field` names the content)."""
    if not doc.content:
        raise InvalidArgument(field, "must not be empty")
    if len(doc.content) > max_bytes:
        raise InvalidArgument(field, f"is {len(doc.content)} bytes, at most {max_bytes}")


def check_delete_request(filenames: Sequence[str], document_ids: Sequence[str] = ()) -> None:
    """At least one document named, each name under the same rule as on ingest."""
    if not filenames and not document_ids:
        raise InvalidArgument("filenames", "must hold at least one file name or document_id")
    for i, name in enumerate(filenames):
        validate_filename(name, f"filenames[{i}]")
    for i, document_id in enumerate(document_ids):
        check_document_id(document_id, f"document_ids[{i}]")


def list_page_size(page_size: int) -> int:
    """AIP-158: page_size 0 → 100, above 1000 → 1000, negative → INVALID_ARGUMENT."""
    return page_size_of(page_size, default=DEFAULT_PAGE_SIZE, maximum=MAX_PAGE_SIZE)
