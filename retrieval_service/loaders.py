"""Loaders: raw bytes of a `.txt`, `.md`, `.pdf`, `.docx` or `.html` file → sanitised pages.
A parse failure is the caller's bad input (InvalidArgument on the document's content)."""

from __future__ import annotations

import io
import re
from collections.abc import Callable

from retrieval_service.chunking import Page
from retrieval_service.sanitize import sanitize_text
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


def load_pages(content: bytes, file_type: str, field: str) -> list[Page]:
    """Parse `content` as `file_type`; every page's text is sanitised and stripped."""
    loader = _LOADERS[file_type]
    try:
        pages = loader(content)
    except InvalidArgument:
        raise
    except Exception as exc:  # a corrupt file is bad input, whatever the parser raises
        raise InvalidArgument(field, f"cannot parse as {file_type}: {exc}") from exc
    return [Page(p.number, sanitize_text(p.text).strip()) for p in pages]


def _decode(content: bytes) -> str:
    try:
        return content.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8 text ({exc.reason} at byte {exc.start})") from exc


def _load_text(content: bytes) -> list[Page]:
    return [Page(0, _decode(content))]


def _load_pdf(content: bytes) -> list[Page]:
    from pypdf import PdfReader

    reader = PdfReader(io.BytesIO(content))
    # pypdf pages are 0-based, like the reference's PyPDFLoader.
    return [Page(i, page.extract_text() or "") for i, page in enumerate(reader.pages)]


def _load_docx(content: bytes) -> list[Page]:
    import docx

    document = docx.Document(io.BytesIO(content))
    blocks = [p.text for p in document.paragraphs if p.text.strip()]
    for table in document.tables:
        for row in table.rows:
            cells = [c.text.strip() for c in row.cells if c.text.strip()]
            if cells:
                blocks.append(" | ".join(cells))
    return [Page(0, "\n\n".join(blocks))]


_BLOCK_TAGS = ("p", "li", "pre", "blockquote", "td", "th", "h1", "h3", "h4", "h5", "h6", "div")


def _load_html(content: bytes) -> list[Page]:
    """One pseudo-page per `<h2>` section (page 0 = what precedes the first h2), like the
    reference's html processor; block elements become paragraphs."""
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(_decode(content), "html.parser")
    for tag in soup(["script", "style", "noscript", "template", "head"]):
        tag.decompose()
    body = soup.body or soup
    sections: list[list[str]] = [[]]
    for element in body.find_all(["h2", *_BLOCK_TAGS]):
        if element.name == "div" and element.find(["h2", *_BLOCK_TAGS]):
            continue  # a wrapper: its blocks are visited themselves
        if element.find_parent(["p", "li", "pre", "blockquote", "td", "th"]):
            continue  # nested inside a block already taken whole
        text = re.sub(r"[ \t\r\f\v]+", " ", element.get_text(" ", strip=True))
        if element.name == "h2":
            sections.append([text] if text else [])
        elif text:
            sections[-1].append(text)
    if not any(sections):  # no block structure at all: take the whole text
        return [Page(0, body.get_text("\n", strip=True))]
    pages = [Page(i, "\n\n".join(s)) for i, s in enumerate(sections) if s]
    return pages


_LOADERS: dict[str, Callable[[bytes], list[Page]]] = {
    "Text": _load_text,
    "Markdown": _load_text,
    "PDF": _load_pdf,
    "Word": _load_docx,
    "HTML": _load_html,
}
