"""English word stems, shared by the two places that match words: the local model's grader
and the retrieval service's BM25 field. Both must see "watered" and "water" as one word, or
the grader credits evidence that BM25 cannot find (and the reverse)."""

from __future__ import annotations

import re
from functools import lru_cache

import snowballstemmer

_EN_STEMMER = snowballstemmer.stemmer("english")
#: A run of ASCII letters and digits: what the Snowball English stemmer applies to. CJK text
#: is left as it is, for jieba to segment.
_ASCII_WORD = re.compile(r"[A-Za-z0-9]+")


@lru_cache(maxsize=65536)
def stem(word: str) -> str:
    return _EN_STEMMER.stemWord(word)


def bm25_text(text: str) -> str:
    """`text` as the BM25 analyser should read it: English words lower-cased and stemmed in
    place, everything else unchanged. Milvus's analysers cannot stem (Milvus Lite 3.2 ignores
    every filter but stop words), so documents and queries pass through this before the
    analyser sees them."""
    return _ASCII_WORD.sub(lambda match: stem(match.group(0).lower()), text)
