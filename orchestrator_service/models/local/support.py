"""What of the question the evidence holds (LOCAL_MODEL.md §2): the key terms each chunk of the
window covers, and the names, kinds, quantities and nouns the question asks about that no chunk
holds."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from orchestrator_service.models.local.text import (
    EN_STOP_WORDS,
    ZH_STOP_WORDS,
    Evidence,
    Term,
    evidence_stems,
    words,
)
from shared.lang import is_chinese
from shared.lexical import stem


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


def unnamed_terms(terms: list[Term], window: list[Evidence]) -> list[Term]:
    """The key terms less those that name the documents rather than ask about them: a term no
    chunk of the window says that a chunk's filename or title holds ("README" of "the README of
    bc" over bc-README.txt, "手册" over 员工手册.md). The evidence is about the thing asked; the
    distinctive-term rules decide whether it is the right thing. All of them when that would
    leave fewer than two."""
    named = " ".join(f"{chunk.filename} {chunk.title}".lower() for chunk in window)
    stems = evidence_stems(named.replace("_", " ").replace("-", " "))

    def names_a_document(term: Term) -> bool:
        if any(chunk.covers(term) for chunk in window):
            return False
        return term.key in named if term.chinese else term.key in stems

    kept = [term for term in terms if not names_a_document(term)]
    return kept if len(kept) >= 2 else terms


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
#: A name of several words after the first word: "Lumen 5 Pro", "Orion Team", "Gull Island".
_EN_NAME_RUN = re.compile(r"(?<=[\s\"'])[A-Z][a-z]{2,}(?:\s+(?:[A-Z][a-z]+|[A-Z]\b|\d{1,4}\b))+")
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
    for run in _EN_NAME_RUN.finditer(question):
        parts = re.findall(r"[A-Za-z]+|\d+", run.group(0))
        phrase = r"\W+".join(re.escape(part.lower()) for part in parts)
        if not any(part in absent for part in parts) and not re.search(
            rf"\b{phrase}(?![a-z0-9])", window
        ):
            absent.append(run.group(0))  # "Lumen 5 Pro" beside Lumen 5 and "Orion Pro plan"
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


#: What opens an English noun phrase, so that the word after it qualifies a noun rather than
#: acting on it: "the paternity leave", "of study leave", "a single child ticket".
_EN_PHRASE_OPENERS = words(
    "the a an of for on in at to from with about per my your our their its his her this that "
    "these those much many any some each every which what whose"
)
#: "Which asyncio function runs …": after a question word, a name and a noun are the subject,
#: and the word after them its verb.
_EN_QUESTION_WORDS = words("which what whose")
#: A question rather than a statement: a closing "?" or a leading question word or auxiliary.
_EN_QUESTION = re.compile(
    r"\?\s*$|^\s*(?:what|which|who|whom|whose|when|where|why|how|is|are|was|were|do|does|did|"
    r"can|could|should|would|will|may|must|has|have)\b",
    re.IGNORECASE,
)
#: Words that qualify any noun without naming a kind of it ("the usual loan period").
_EN_GENERIC_MODIFIERS = words(
    "usual normal typical standard regular general default current exact overall total main "
    "average full whole actual real right best good new approximate official"
)
#: The question's words as written between spaces, less the punctuation around them: a path or
#: a dotted name ("/etc/passwd", "asyncio.run") stays one word, and no word of it a kind.
_EN_EDGES = "\"'“”‘’()[]{},.;:!?"
#: A quantity: a number and the unit after it ("a 500 g bag", "2 kg", "3 TB").
_EN_QUANTITY = re.compile(r"(?<![\w.,:-])(\d+(?:[.,]\d+)?)\s?([A-Za-z]{1,12})\b")
#: Part-of-speech tags of a Chinese word that can name a kind of a thing (陪 of 陪产假, 团队 of
#: 团队套餐): nouns, verbs, adjectives and distinguishing words, not numbers or pronouns.
_ZH_KIND_FLAGS = ("n", "v", "a", "b", "j", "l")


def absent_kinds(question: str, coverage: Coverage, *, chinese: bool) -> list[str]:
    """A specific kind of a thing, or a quantity, the evidence holds only siblings of: the
    question's "paternity leave" where the window says "maternity leave" and "annual leave" (a
    word opening a noun phrase before a noun the best chunk holds, the pair said nowhere in the
    window, which puts other words before that noun), "a 500 g bag" where it sells 250 g and
    1 kg bags (a number before a unit the window uses with other numbers only); 陪产假 beside
    产假 (a word the best chunk lacks before a noun it holds), 丧假 beside 产假 and 婚假 (a noun
    the best chunk lacks whose last character ends other words there). Inflected forms are one
    word (stems); a synonym of the kind itself is not recognised."""
    best = coverage.best
    if best is None or not coverage.window:
        return []
    if chinese:
        return _zh_absent_kinds(question, coverage, best)
    if not _EN_QUESTION.search(question):
        # A statement ("Bariatric surgery leads to positive outcomes …", a SciFact claim) is
        # prose searched for support, not a question about one thing of a kind: its modifiers
        # paraphrase the evidence's (0.13 of SciFact's answer recall when they counted).
        return []
    # "master-files" says "master files": a hyphen joins the words of a phrase.
    window = " ".join(chunk.lowered for chunk in coverage.window).replace("-", " ")
    held = frozenset().union(*(chunk.stems for chunk in coverage.window))
    pairs = _word_pairs(window)
    found = []
    tokens = [token.strip(_EN_EDGES) for token in question.split()]
    for index in range(1, len(tokens) - 1):
        word, noun = tokens[index], tokens[index + 1]
        lowered = word.lower()
        if (
            not word.isalpha()
            or not word.islower()
            or len(word) < 3
            or lowered in EN_STOP_WORDS
            or lowered in _EN_GENERIC_MODIFIERS
            or (stem(lowered), stem(noun.lower())) in {(a, b) for a, b, _ in pairs}
            or not noun.isalpha()
            or noun.lower() in EN_STOP_WORDS
            or stem(noun.lower()) not in best.stems
            or not _opens_phrase(tokens, index, held)
        ):
            continue
        # A word the window uses elsewhere ("in the evening") names a kind only beside a family
        # of them ("Morning shift", "Afternoon shift"), not beside one other phrase.
        asked = {t.lower() for t in tokens}
        kinds = len({a for a, b, word in pairs if b == stem(noun.lower()) and word not in asked})
        if kinds >= (2 if stem(lowered) in held else 1):
            found.append(f"{word} {noun}")
    for match in _EN_QUANTITY.finditer(question):
        number, unit = match.group(1), match.group(2).lower()
        if unit in EN_STOP_WORDS or not unit.isalpha():
            continue
        with_unit = rf"(\d+(?:[.,]\d+)?)\s?{re.escape(unit)}\b"
        numbers = {m.group(1) for m in re.finditer(with_unit, window)}
        if numbers and number not in numbers:
            found.append(match.group(0))
    return found


def _word_pairs(window: str) -> set[tuple[str, str, str]]:
    """(stem, stem of the next word, the word) of each two words in a row in the window, the
    first not a stop word: "maternity leave", "Morning shift"."""
    pairs = re.findall(r"(?=\b([a-z][a-z'-]+)\s+([a-z][a-z'-]+)\b)", window)
    return {(stem(a), stem(b), a) for a, b in pairs if a not in EN_STOP_WORDS}


def _opens_phrase(tokens: list[str], index: int, held: frozenset[str]) -> bool:
    """Whether tokens[index] stands in a noun phrase: right after an opener ("the", "of"), or
    after a word the evidence holds that itself follows one ("a single child ticket", "the
    Orion family plan")."""
    before = tokens[index - 1].lower()
    if before in _EN_PHRASE_OPENERS:
        return True
    return (
        index >= 2
        and tokens[index - 2].lower() in _EN_PHRASE_OPENERS - _EN_QUESTION_WORDS
        and before not in EN_STOP_WORDS
        and stem(before) in held
    )


def _zh_absent_kinds(question: str, coverage: Coverage, best: Evidence) -> list[str]:
    tagged = _joined_characters(
        [(word.strip(), flag) for word, flag in parts_of_speech(question) if word.strip()]
    )
    found = []
    for index, (word, flag) in enumerate(tagged):
        if word in best.lowered or word in ZH_STOP_WORDS or word in ZH_FRAMING_NOUNS:
            continue
        model = word.endswith(_ZH_MODEL_SUFFIXES) and len(word) >= 2  # 二代, 三型
        if not (CJK_ONLY.fullmatch(word) and (flag.startswith(_ZH_KIND_FLAGS) or model)):
            continue
        after = tagged[index + 1] if index + 1 < len(tagged) else ("", "")
        if after[1].startswith("n") and len(after[0]) >= 2 and after[0] in best.lowered:
            found.append(word + after[0])  # 陪 + 产假: a kind of what the evidence holds
        elif flag.startswith(("n", "v")) and len(word) >= 2:
            # 丧假 beside 产假 and 婚假 (a family of kinds); 产假 beside 年假 when another chunk of
            # the window has 产假 (another owner's). 程度 beside one 十度 is an attribute.
            elsewhere = any(word in chunk.lowered for chunk in coverage.window)
            if _other_kinds_zh(word, best.lowered) >= (1 if elsewhere else 2):
                found.append(word)
    return found


def _joined_characters(tagged: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Two adjacent single Chinese characters as one noun: after 的 jieba cuts 年假 into 年 / 假,
    and the kind asked about is the pair."""
    joined: list[tuple[str, str]] = []
    for word, flag in tagged:
        if _lone_character(word) and joined and _lone_character(joined[-1][0]):
            joined[-1] = (joined[-1][0] + word, "n")
        else:
            joined.append((word, flag))
    return joined


def _lone_character(word: str) -> bool:
    return len(word) == 1 and CJK_ONLY.fullmatch(word) is not None and word not in ZH_STOP_WORDS


CJK_ONLY = re.compile(r"[\u4e00-\u9fff]+")
#: A word that names a model or generation of a thing (云雀二代手环, 三型).
_ZH_MODEL_SUFFIXES = ("代", "型", "款", "号")


def _other_kinds_zh(word: str, text: str) -> int:
    """How many other words of `text` end with `word`'s last character, its kind (假 of 丧假:
    产假, 婚假), not counting a verb (失眠 is not a kind of 睡眠) or a quantity (十度)."""
    head = word[-1]
    pairs = set(re.findall(rf"(?=([\u4e00-\u9fff]{re.escape(head)}))", text)) - {word[-2:]}
    return sum(
        1
        for pair in pairs
        if pair[0] not in _ZH_NUMERALS
        and not (len(tags := parts_of_speech(pair)) == 1 and tags[0][1].startswith("v"))
    )


_ZH_NUMERALS = frozenset("零一二两三四五六七八九十百千万几")


@lru_cache(maxsize=1024)
def parts_of_speech(question: str) -> tuple[tuple[str, str], ...]:
    """jieba's (word, part-of-speech tag) pairs of a Chinese question, cached: the grade, its
    rewrite's second grade and the answerer read the same question."""
    import jieba.posseg

    return tuple((pair.word, pair.flag) for pair in jieba.posseg.lcut(question))
