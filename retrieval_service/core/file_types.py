"""The file types the service stores: which extensions it accepts, the names a caller may
declare, and the stored type of a document."""

from __future__ import annotations

from shared.errors import InvalidArgument

# Stored file types (the reference's names, plus Text/Markdown for the plain formats).
FILE_TYPES_BY_EXTENSION: dict[str, str] = {
    ".txt": "Text",
    ".md": "Markdown",
    ".pdf": "PDF",
    ".docx": "Word",
    ".html": "HTML",
    ".htm": "HTML",
}
# What a caller may put in SourceDocument.file_type (case-insensitive) → stored type.
_FILE_TYPE_ALIASES: dict[str, str] = {
    "txt": "Text",
    "text": "Text",
    "md": "Markdown",
    "markdown": "Markdown",
    "pdf": "PDF",
    "docx": "Word",
    "word": "Word",
    "html": "HTML",
    "htm": "HTML",
}


def extension_of(filename: str) -> str:
    dot = filename.rfind(".")
    return filename[dot:].lower() if dot > 0 else ""


def resolve_file_type(filename: str, declared: str | None, field: str) -> str:
    """The stored file type: the declared one when given, else inferred from the extension."""
    if declared is not None and declared.strip():
        key = declared.strip().lower().lstrip(".")
        if key not in _FILE_TYPE_ALIASES:
            raise InvalidArgument(field, f"unsupported file type {declared!r}")
        return _FILE_TYPE_ALIASES[key]
    return FILE_TYPES_BY_EXTENSION[extension_of(filename)]
