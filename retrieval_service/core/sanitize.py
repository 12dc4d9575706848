"""Text sanitising applied to the text of every loaded page (docs/api.md#documents-and-chunks): NFC,
then zero-width, BOM, bidi and isolate controls, C0 controls but tab/LF/CR, DEL, private-use and
lone-surrogate characters removed. File names are not cleaned but validated: a name with such
characters is rejected (`ingest.validate_filename`)."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator

# Zero-width space/non-joiner/joiner, BOM, RLM and the bidi embedding/override controls, plus
# the LRM and the isolate controls that the reference missed but that are just as invisible.
_INVISIBLE = (
    "\u200b\u200c\u200d\u200e\u200f\ufeff\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
)
_STRIP = re.compile(
    "["
    + _INVISIBLE
    + "\x00-\x08\x0b\x0c\x0e-\x1f\x7f"  # C0 controls except tab, LF, CR; DEL
    + "\ue000-\uf8ff"  # Private Use Area
    + "\ud800-\udfff"  # lone surrogates
    + "]"
)


#: A long text is sanitised this many characters at a time (cut after a line feed): NFC works
#: in a buffer of 4 bytes per character, which for a whole 20 MiB document peaked at 8× its
#: size (README "Ingestion").
SEGMENT_CHARS = 1 << 20


def sanitize_text(text: str, *, segment_chars: int = SEGMENT_CHARS) -> str:
    """NFC-normalise and drop invisible, control and private-use characters. A long text goes
    segment by segment, each ending after a line feed: no character composes with a line feed
    or reorders across it, so the result is the same as for the whole text at once; and a
    text with nothing to change is returned as it is, without a copy."""
    if len(text) <= segment_chars:
        return _sanitize(text)
    # One pass; the segments before the first change are not kept (the text holds them), so a
    # text with nothing to change is never copied.
    first_change: int | None = None
    cleaned: list[str] = []
    for start, end in _segments(text, segment_chars):
        segment = text[start:end]
        clean = _sanitize(segment)
        if first_change is None:
            if clean is segment:  # both steps return their argument when they change nothing
                continue
            first_change = start
        cleaned.append(clean)
    if first_change is None:
        return text
    return "".join([text[:first_change], *cleaned])


def _sanitize(text: str) -> str:
    return _STRIP.sub("", unicodedata.normalize("NFC", text))


def _segments(text: str, size: int) -> Iterator[tuple[int, int]]:
    start = 0
    while start < len(text):
        cut = text.find("\n", start + size - 1)
        end = len(text) if cut < 0 else cut + 1
        yield start, end
        start = end
