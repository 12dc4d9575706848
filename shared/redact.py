"""Scrubbing of error text that leaves the process: a provider's error body or an exception
message may quote a configured secret back (a rejected API key), carry control characters or
run to kilobytes. Every client of an outside endpoint (model, rerank, embedding) passes such
text through `redact` before it reaches a status message, a trace or a log line."""

from __future__ import annotations

import re
from collections.abc import Iterable

#: The longest error text that leaves the process (the embedding path's historical cap).
MAX_ERROR_CHARS = 500
REDACTED = "[redacted]"
# Shorter "secrets" are left alone: scrubbing a 2-character value would shred ordinary words.
_MIN_SECRET_CHARS = 4
_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")


def redact(text: str, secrets: Iterable[str | None], *, limit: int = MAX_ERROR_CHARS) -> str:
    """`text` with every configured secret replaced by "[redacted]", control characters (line
    breaks included) collapsed to one space, and cut to `limit` characters ("…" marks a cut).
    Secrets are scrubbed before the cut, so a cut can never leave a secret's prefix behind."""
    for secret in sorted({s for s in secrets if s and len(s) >= _MIN_SECRET_CHARS}, key=len)[
        ::-1
    ]:  # longest first: a secret that contains another is scrubbed whole
        text = text.replace(secret, REDACTED)
    text = _CONTROL.sub(" ", text).strip()
    return text if len(text) <= limit else text[: max(0, limit - 1)] + "…"


class Redactor:
    """`redact` bound to one client's configured secrets."""

    def __init__(self, *secrets: str | None, limit: int = MAX_ERROR_CHARS) -> None:
        self._secrets = tuple(s for s in secrets if s)
        self._limit = limit

    def __call__(self, text: str) -> str:
        return redact(text, self._secrets, limit=self._limit)
