"""What of the question the evidence holds (LOCAL_MODEL.md §2): the key terms each chunk of the
window covers, and the names and nouns the question asks about that no chunk holds."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from orchestrator_service.models.local.text import EN_STOP_WORDS, Evidence, Term
from shared.lang import is_chinese


@dataclass(frozen=True, slots=True)
class Coverage:
    terms: list[Term]
    window: list[Evidence]
    best: Evidence | None
    best_covered: list[Term]
    union_covered: list[Term]

    @property
    def best_share(self) -> float:
        return len(self.best_covered) / len(self.terms) if self.terms else 0.0

    @property
    def union_share(self) -> float:
        return len(self.union_covered) / len(self.terms) if self.terms else 0.0


def measure_coverage(terms: list[Term], window: list[Evidence]) -> Coverage:
    best: Evidence | None = None
    best_covered: list[Term] = []
    union: set[str] = set()
    for chunk in window:
        covered = chunk.covered(terms)
        union.update(term.key for term in covered)
        if best is None or len(covered) > len(best_covered):
            best, best_covered = chunk, covered
    union_covered = [term for term in terms if term.key in union]
    return Coverage(terms, window, best, best_covered, union_covered)


#: A proper name: a capitalised word after the first ("Borealis", "Heron"), not an acronym.
_EN_PROPER = re.compile(r"(?<=[\s\"'])[A-Z][a-z]{2,}(?=[\s?!,;:'\")]|$)")
#: An identifier: a lone capital letter or a number right after a word ("team B", "Kestrel 3").
_EN_IDENTIFIER = re.compile(
    r"\b([A-Za-z][a-z]+) ([A-Z]|\d{1,4})(?!,\d)(?=[\s?!,;:'\")]|$)(?P<noun> [a-z]+)?"
)
#: Nouns that frame a Chinese question rather than name what it asks about ("什么时候").
ZH_FRAMING_NOUNS = frozenset(["时候", "时间", "多长时间", "地方", "东西", "办法", "方法", "原因"])
#: jieba's part-of-speech tags of names: place, person, organisation, other proper noun.
_ZH_NAME_FLAGS = ("ns", "nr", "nt", "nz", "eng")


def question_names(question: str, *, chinese: bool | None = None) -> list[str]:
    """The names the question asks about: in English a capitalised word other than the first
    and an identifier with the word it follows ("team B", "Kestrel 3"); in Chinese a word jieba
    tags as a name, a Latin word or a number."""
    if chinese is None:
        chinese = is_chinese(question)
    if not chinese:
        proper = [m.group(0) for m in _EN_PROPER.finditer(question)]
        return proper + [f"{m.group(1)} {m.group(2)}" for m in _identifiers(question)]
    names = []
    for word, flag in parts_of_speech(question):
        word = word.strip()
        if word and (flag in _ZH_NAME_FLAGS or (flag == "m" and word.isdigit())):
            names.append(word)
    return names


def _identifiers(question: str) -> list[re.Match[str]]:
    """ "team B", "Kestrel 3": not a quantity ("in 2001", "than 6 months", "1 in 5")."""
    found = []
    for match in _EN_IDENTIFIER.finditer(question):
        before = match.group(1).lower()
        if before in EN_STOP_WORDS or before in _QUANTITY_WORDS:
            continue
        if match["noun"] and not match.group(1)[0].isupper():
            continue  # "T cells", "type 1 diabetes": a modifier, not a name ("Kestrel 3 drone" is)
        found.append(match)
    return found


_QUANTITY_WORDS = frozenset(["about", "around", "least", "nearly", "over", "under", "top", "page"])


def absent_names(question: str, coverage: Coverage, *, chinese: bool) -> list[str]:
    """The question's names the evidence does not hold: a proper name or an identifier ("team
    B", "Kestrel 3") no chunk of the window mentions, a Chinese name the best-covering chunk
    does not contain."""
    best = coverage.best
    if best is None:
        return []
    if chinese:
        return [name for name in question_names(question, chinese=True) if name not in best.text]
    window = " ".join(chunk.text for chunk in coverage.window).lower()
    absent = [
        name
        for name in (m.group(0) for m in _EN_PROPER.finditer(question))
        if not re.search(rf"\b{re.escape(name.lower())}", window)
    ]
    for match in _identifiers(question):
        word, ident = match.group(1).lower(), match.group(2)
        phrase = rf"\b{re.escape(word)}\w*\W+{re.escape(ident.lower())}(?![a-z0-9])"
        if not re.search(phrase, window):
            absent.append(f"{match.group(1)} {ident}")
    return absent


def absent_nouns(question: str, coverage: Coverage, *, chinese: bool) -> list[str]:
    """Chinese nouns of the question that no chunk of the window holds: the one term the
    "all but one" rule may leave out must not be the thing asked about (产假 beside 年假)."""
    if not chinese:
        return []
    keys = {term.key for term in coverage.terms} - {term.key for term in coverage.union_covered}
    if not keys:
        return []
    return [
        word
        for word, flag in parts_of_speech(question)
        if word in keys and flag.startswith("n") and len(word) >= 2 and word not in ZH_FRAMING_NOUNS
    ]


@lru_cache(maxsize=1024)
def parts_of_speech(question: str) -> tuple[tuple[str, str], ...]:
    """jieba's (word, part-of-speech tag) pairs of a Chinese question, cached: the grade, its
    rewrite's second grade and the answerer read the same question."""
    import jieba.posseg

    return tuple((pair.word, pair.flag) for pair in jieba.posseg.lcut(question))
