"""The one rule for free text a caller sends (a question, a query, a HITL answer): not blank,
not longer than the service's limit, and no control characters. Tab, LF and CR stay allowed
because multi-line questions are ordinary; NUL, escape sequences, DEL and C1 controls are never
part of a question and would reach prompts, logs and Milvus expressions."""

from __future__ import annotations

import re

from shared.errors import InvalidArgument

# C0 controls except tab/LF/CR, DEL, and the C1 block.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def check_text(field: str, text: str, max_chars: int) -> None:
    """Raises InvalidArgument naming `field` when `text` breaks the rule above."""
    if not text or not text.strip():
        raise InvalidArgument(field, "must not be blank")
    if len(text) > max_chars:
        raise InvalidArgument(field, f"is {len(text)} characters, at most {max_chars}")
    found = _CONTROL.search(text)
    if found:
        raise InvalidArgument(
            field, f"must not contain control character U+{ord(found.group()):04X}"
        )
