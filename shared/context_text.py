"""The context text handed to the answering model: evidence records laid out as in
docs/api.md#the-context-text."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["CONTEXT_SEPARATOR", "format_context"]

CONTEXT_SEPARATOR = "\n\n---\n\n"


def format_context(docs: Sequence[Mapping[str, Any]]) -> str:
    """Render evidence records as `[i] {filename} (Page {page_number}):\\n{text}`, i 1-based in
    list order, joined with "\\n\\n---\\n\\n"; an empty list gives "".

    A falsy filename reads "Unknown" and a falsy page_number "N/A", as the source's `or`
    fallbacks did (a text page "0" is truthy and printed; an int 0 is not).
    """
    return CONTEXT_SEPARATOR.join(
        f"[{i}] {doc.get('filename') or 'Unknown'} (Page {doc.get('page_number') or 'N/A'}):\n"
        f"{doc.get('text') or ''}"
        for i, doc in enumerate(docs, start=1)
    )
