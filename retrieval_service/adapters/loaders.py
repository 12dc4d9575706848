"""Loaders: raw bytes of a `.txt`, `.md`, `.pdf`, `.docx` or `.html` file → sanitised pages.
Plain text comes in the encodings people have (UTF-8, UTF-16/32 with a BOM, GBK/GB18030, Latin-1
and their neighbours), detected with charset-normalizer when it is not UTF-8. A parse failure or
undecodable bytes are the caller's bad input (InvalidArgument on the document's content, naming
the file)."""

from __future__ import annotations

import codecs
import io
import re
from collections.abc import Callable

import charset_normalizer

from retrieval_service.core.chunking import Page
from retrieval_service.core.sanitize import sanitize_text
from shared.errors import InvalidArgument


class UndecodableText(ValueError):
    """The bytes are not text in any encoding the loaders recognise."""


def load_pages(content: bytes, file_type: str, field: str, filename: str = "") -> list[Page]:
    """Parse `content` as `file_type`; every page's text is sanitised and stripped. `filename`
    (already validated: a plain name, no path) is named in the error of an undecodable file."""
    loader = _LOADERS[file_type]
    try:
        pages = loader(content)
    except InvalidArgument:
        raise
    except UndecodableText as exc:
        name = f"{filename!r} " if filename else ""
        raise InvalidArgument(field, f"{name}{exc}") from exc
    except Exception as exc:  # a corrupt file is bad input, whatever the parser raises
        raise InvalidArgument(field, f"cannot parse as {file_type}: {exc}") from exc
    return [Page(p.number, sanitize_text(p.text).strip()) for p in pages]


# Byte-order marks, longest first (the UTF-32 LE mark starts with the UTF-16 LE one).
_BOMS: tuple[tuple[bytes, str], ...] = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
# What charset-normalizer may choose from when the bytes are not UTF-8: the legacy encodings of
# the languages this service is used with. Left unrestricted it reads short Western text as
# Central European (cp1250: "crème" → "crčme") and short Chinese as Big5 or Korean.
_LEGACY_ENCODINGS = [
    "gb18030",
    "big5",
    "shift_jis",
    "euc_jp",
    "euc_kr",
    "cp1252",
    "latin_1",
    "cp1251",
    "koi8_r",
]
# Short CJK text decodes under several East Asian codecs at once; GB18030 (a superset of GBK
# and GB2312) is the one Chinese users' files are in, so it wins whenever it fits at all.
_EAST_ASIAN = {"big5", "big5hkscs", "cp950", "shift_jis", "cp932", "euc_jp", "euc_kr", "cp949"}
_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1f\x7f]")
_MAX_CONTROL_SHARE = 0.01  # more control characters than this: a binary file, not text


def _decode(content: bytes) -> str:
    """UTF-8 first (most files, and cheap to confirm), then a byte-order mark, then detection."""
    for bom, encoding in _BOMS:
        if content.startswith(bom):
            try:
                return _checked(content.decode(encoding))
            except UnicodeDecodeError as exc:
                raise UndecodableText(
                    f"is not UTF-8 text, nor {encoding} despite its byte-order mark "
                    f"(byte {exc.start})"
                ) from exc
    try:
        return _checked(content.decode("utf-8"))
    except UnicodeDecodeError:
        pass
    if b"\x00" in content:  # no legacy 8-bit or CJK text holds NUL bytes
        raise UndecodableText("is not UTF-8 text, nor text in another encoding (binary)")
    results = charset_normalizer.from_bytes(content, cp_isolation=_LEGACY_ENCODINGS)
    best = results.best()
    if best is None:
        raise UndecodableText("is not UTF-8 text, nor UTF-16 or a detectable legacy encoding")
    encoding = best.encoding
    if encoding in _EAST_ASIAN and any(r.encoding == "gb18030" for r in results):
        encoding = "gb18030"
    return _checked(content.decode(encoding))


def _checked(text: str) -> str:
    if text and len(_CONTROL.findall(text)) > _MAX_CONTROL_SHARE * len(text):
        raise UndecodableText("is not text (binary content)")
    return text


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
