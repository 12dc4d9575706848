"""Which characters are Chinese and when a text is, decided once for the whole orchestrator:
the classification fast path, the local model's language and key terms, and the grounded
answer's quotes and partial note all read these definitions. Pure: `re` only."""

from __future__ import annotations

import re

#: The CJK Unified Ideographs block, U+4E00–U+9FFF, as the body of a regex character class.
#: The fast path's rule is defined on this block; the rarely used Extension A (U+3400–U+4DBF)
#: is left out everywhere, so one text never counts as Chinese in one place and not in another.
CJK_RANGE = r"\u4e00-\u9fff"
#: One CJK character.
CJK_CHAR = re.compile(f"[{CJK_RANGE}]")
#: A run of CJK characters.
CJK_RUN = re.compile(f"[{CJK_RANGE}]+")
#: An English word in lower-cased text; "asyncio.gather" and "don't" stay whole.
ENGLISH_WORD = re.compile(r"[a-z0-9]+(?:[.'][a-z0-9]+)*")


def is_chinese(text: str) -> bool:
    """Whether `text` is mainly Chinese: it has at least as many CJK characters as English
    words, so a Chinese question that names `asyncio` is still answered in Chinese."""
    return len(CJK_CHAR.findall(text)) >= len(ENGLISH_WORD.findall(text.lower()))
