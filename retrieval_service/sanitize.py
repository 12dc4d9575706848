"""Text sanitising applied to the text of every loaded page (REFERENCE.md §1.2): NFC, then
zero-width, BOM, bidi and isolate controls, C0 controls but tab/LF/CR, DEL, private-use and
lone-surrogate characters removed. File names are not cleaned but validated: a name with
such characters is rejected (`ingest.validate_filename`)."""

from __future__ import annotations

import re
import unicodedata

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


def sanitize_text(text: str) -> str:
    """NFC-normalise and drop invisible, control and private-use characters."""
    return _STRIP.sub("", unicodedata.normalize("NFC", text))
