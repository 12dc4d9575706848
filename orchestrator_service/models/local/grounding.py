"""`check_grounding` for the built-in model (LOCAL_MODEL.md §7). Pure, words only.

A claim is cut into clauses, and a fact into its sentences and pairs of neighbours. Each clause
rests on the sentence that holds the most of its key terms; that sentence contradicts it when a
name, a number or its unit, a universal word ("all", "所有") or the polarity of a word differs,
or a word is swapped for its opposite. Otherwise the clause scores the share of its terms the
sentence holds, and the claim the share over its clauses, or less when a clause adds what no
sentence says."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import pairwise

from orchestrator_service.models.base import ClaimToCheck, ClaimVerdict
from orchestrator_service.models.local.answer import table_rows_read
from orchestrator_service.models.local.support import parts_of_speech
from orchestrator_service.models.local.text import (
    EN_STOP_WORDS,
    ZH_STOP_WORDS,
    Term,
    evidence_stems,
    key_terms,
    segment,
    words,
)
from shared.lang import CJK_CHAR, ENGLISH_WORD
from shared.lexical import stem
from shared.sentences import sentences, unwrap

#: How much a missing name, a changed number, unit or polarity leaves of a clause's score.
CONTRADICTED_SCORE = 0.1

# ---- what asserts nothing ----------------------------------------------------------------------

#: Text that asserts nothing to support: the answer's own note on what the evidence lacks
#: (answer.partial_note), greetings, lead-ins and closing lines.
_NO_CLAIM = re.compile(
    r"^\s*(?:note: the evidence answers|注意：现有资料|"
    r"(?:hi|hello|sure|certainly|of course|thanks|thank you)\b[\s,.!]*$|"
    r"(?:(?:sure|certainly|of course|ok|okay)\b[\s,.!]*)?here (?:is|are) (?:what|an? |the )|"
    r"hope this helps|let me know|i hope|"
    r"你好|您好|好的[，,。！!]?$|(?:好的[，,]?\s*)?以下是|希望(?:这|以上|对)|如有其他问题)",
    re.IGNORECASE,
)
_SENTENCE_END = re.compile(r"[.。!！?？；;]\s*$")
#: Words that start a condition: a claim copied up to one drops it.
_QUALIFIER = re.compile(
    r"\s*(?:(?:above|over|under|below|within|if|unless|except|only|when|where|provided|until)\b"
    r"|以上|以下|以内|除外|如果|若|仅|只)"
)
#: A lead-in ("Here is a short summary of the documentation:") introduces, it states nothing.
_LEAD_IN = re.compile(r"[:：]\s*$")

# ---- clauses -----------------------------------------------------------------------------------

#: Where a claim splits into clauses judged one by one: an added "and also …" / "并新增了…"
#: the facts lack must sink the claim even when the rest is copied word for word.
_EN_CLAUSE_BREAK = re.compile(
    r"\s*[;:]\s*|,\s*(?:and|but|while|whereas|so)\s+|\s+(?:and|but|while|whereas)\s+|,\s+"
    r"|\s+(?=(?:since|until|because|which)\s)"
)
_ZH_CLAUSE_BREAK = re.compile(r"\s*[，,；;：:]\s*(?:并且|而且|并|且|同时|还|但)?|并且|而且")
#: A clause needs this many key terms to stand alone; a shorter one ("On the Basic plan")
#: joins its neighbour.
_CLAUSE_TERMS = 2
#: A clause missing this many key terms adds something: it is judged on its own share.
_ADDED_TERMS = 2
#: The weight of a clause's last key term (`_weights`).
_END_WEIGHT = 2

# ---- numbers and units -------------------------------------------------------------------------

#: A number as the text states it: "4", "1,000", "2.5", "24/7"'s parts.
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_SPELLED_VALUES = (
    {
        word: str(value)
        for value, word in enumerate(
            [
                "zero",
                "one",
                "two",
                "three",
                "four",
                "five",
                "six",
                "seven",
                "eight",
                "nine",
                "ten",
                "eleven",
                "twelve",
            ]
        )
    }
    | {"twenty": "20", "thirty": "30", "fifty": "50", "hundred": "100", "两": "2"}
    | {char: str(value) for value, char in enumerate("零一二三四五六七八九十")}
)
#: A spelled-out number: an English word on its own, a Chinese numeral before a measure word
#: or unit (三天, 两个) — not one inside a word (一线, 统一).
_SPELLED = re.compile(
    r"\b(?:" + "|".join(w for w in _SPELLED_VALUES if w.isascii()) + r")\b"
    r"|[零一二三四五六七八九十两](?=[个天周月年次台份名位小分秒倍元块层])",
    re.IGNORECASE,
)
#: Units, as the canonical name a number's unit is compared by.
_EN_UNITS = {
    **dict.fromkeys(["second", "seconds", "sec", "secs", "s"], "second"),
    **dict.fromkeys(["minute", "minutes", "min", "mins"], "minute"),
    **dict.fromkeys(["hour", "hours", "h", "hr", "hrs"], "hour"),
    **dict.fromkeys(["day", "days"], "day"),
    **dict.fromkeys(["week", "weeks"], "week"),
    **dict.fromkeys(["month", "months"], "month"),
    **dict.fromkeys(["year", "years"], "year"),
    **dict.fromkeys(["percent", "%"], "%"),
    **dict.fromkeys(["m²", "m2", "sqm"], "m²"),
    **dict.fromkeys(["ft²", "ft2", "sqft"], "ft²"),
    **dict.fromkeys(["ms", "millisecond", "milliseconds"], "ms"),
    **{unit: unit for unit in ["kb", "mb", "gb", "tb", "mah", "kg", "g", "km", "m", "cm", "mm"]},
    **dict.fromkeys(["l", "litre", "litres", "liter", "liters"], "l"),
    **dict.fromkeys(["ml", "millilitre", "millilitres", "milliliter", "milliliters"], "ml"),
}
_ZH_UNITS = {
    "秒": "second", "秒钟": "second", "分钟": "minute", "小时": "hour", "天": "day",
    "日": "day", "工作日": "day", "个工作日": "day", "周": "week", "星期": "week",
    "个月": "month", "月": "month", "年": "year", "%": "%", "毫秒": "ms", "升": "l",
    "毫升": "ml", "元": "元", "美元": "usd", "欧元": "eur", "倍": "倍", "次": "次",
}  # fmt: skip
#: The same quantity in another unit (0.5 升 is 500 毫升): a fact's number also counts as its
#: value in the smaller unit.
_SMALLER_UNIT = {"l": ("ml", 1000), "kg": ("g", 1000), "km": ("m", 1000), "m": ("cm", 100)}
_AREA_WORDS = (
    (re.compile(r"square\s+met(?:er|re)s?", re.IGNORECASE), "m²"),
    (re.compile(r"square\s+f(?:ee|oo)t", re.IGNORECASE), "ft²"),
)
#: A number and the words after it where its unit is written: "600 requests per minute",
#: "20 working days per calendar year", "300 秒", "150分钟".
_EN_QUANTITY = re.compile(r"(\d+(?:[.,]\d+)*)(?=\s*((?:%|m²|ft²)?(?:\s*[^\W\d][\w'-]*){0,4}))")
#: A number and the unit right after it, whose words are judged as a quantity, not as terms
#: (1.5升 and 1500毫升 are one quantity).
_NUMBER_UNIT = re.compile(
    r"(\d+(?:[.,]\d+)*)\s*(?:"
    + "|".join(sorted(_ZH_UNITS, key=len, reverse=True))
    + r"|(?:"
    + "|".join(re.escape(u) for u in sorted(_EN_UNITS, key=len, reverse=True))
    + r")(?![a-z]))",
    re.IGNORECASE,
)
#: Words that bound a number from below (≥) or above (≤): in English before it ("over $500"),
#: in Chinese before it ("超过 300 秒") or after it and its unit ("500元以上").
_BOUND_WORDS = {
    "≥": (
        "over|above|more than|greater than|exceeding|at least|beyond",
        "(?<!不)超过|高于|多于|大于|至少|不少于|不低于",
        "以上",
    ),
    "≤": (
        "under|below|less than|fewer than|up to|at most|within",
        "不超过|低于|少于|小于|最多|不足|以内",
        "以下|以内",
    ),
}
_BOUND_PATTERNS = tuple(
    (
        re.compile(
            rf"(?:\b(?:{en})\b|{zh})\s*[$€£¥]?\s*(?P<n>{_NUMBER.pattern})"
            rf"|(?P<m>{_NUMBER.pattern})\s*[^\d\s，。；]{{0,3}}?(?:{after})",
            re.IGNORECASE,
        ),
        bound,
    )
    for bound, (en, zh, after) in _BOUND_WORDS.items()
)
_ZH_QUANTITY = re.compile(
    r"(\d+(?:[.,]\d+)*)\s*(" + "|".join(sorted(_ZH_UNITS, key=len, reverse=True)) + ")?"
)

# ---- polarity ----------------------------------------------------------------------------------

#: Words that deny the next key terms of their clause ("does not affect the warranty").
_EN_NEGATORS = words("not no non never none nothing cannot neither nor without unless")
#: Verbs that take away what they touch, before or after it ("Dropped support for Python 3.8",
#: "support was removed", "移除对 Windows 7 的支持").
_EN_NEGATIVE_VERBS = words(
    "drop drops dropped remove removes removed deprecate deprecates deprecated discontinue "
    "discontinues discontinued lack lacks lacked prohibit prohibits prohibited suppress "
    "suppresses suppressed"
)
#: Before a negative verb, these make its subject the thing taken away ("was dropped").
_EN_PASSIVE = words("is are was were be been being get gets got")
#: Negators that set a condition rather than deny a fact.
_CONDITIONS = words("unless without")
#: "instead of X", "rather than X", "no longer": X is denied.
_MULTIWORD_NEGATORS = re.compile(r"\b(?:instead of|rather than|no longer)\b", re.IGNORECASE)
#: "does not take effect until you click it" says when it does: "only after you click it".
_NOT_UNTIL = re.compile(r"\b(?:not|\w+n't)\b(?=[^,.;]*\buntil\b)", re.IGNORECASE)
#: Bounds that read like negations: "no more than five" is "at most five".
_BOUNDS = (
    (re.compile(r"\b(?:no|not) (?:more|later|longer|greater|higher|larger) than\b"), "at most"),
    (re.compile(r"\b(?:no|not) (?:less|fewer|earlier|shorter|lower|smaller) than\b"), "at least"),
)
_ZH_NEGATIVE_VERBS = frozenset(["移除", "删除", "取消", "停止", "禁止", "缺少", "废弃"])
_ZH_NEGATIVE_VERB = re.compile("(" + "|".join(_ZH_NEGATIVE_VERBS) + ")")
_ZH_NEGATION = re.compile(r"[不没无未非勿别]")
#: Words that start with a negation character without negating anything.
_ZH_NOT_NEGATION = words(
    "不同 不仅 不断 不过 不管 不少 无论 非常 未来 别的 别人 区别 分别 特别 类别 级别"
)
_EN_TOKEN = re.compile(r"[a-z0-9]+(?:[.'][a-z0-9]+)*|[,;:]")
_SCOPE_BREAK = frozenset(",;:，；：、。")

# ---- scope words and names ---------------------------------------------------------------------

#: Words that widen a claim to every case: a fact that does not say them supports less.
_EN_UNIVERSAL = re.compile(
    r"\b(?:always|all|every(?!\s+(?:day|week|month|year|hour|minute|quarter)\b)|everyone|"
    r"everything|both|entire|whole|any|anyone|anything)\b",
    re.IGNORECASE,
)
_ZH_UNIVERSAL = re.compile(r"所有|任何|全部|一切|总是|始终|永远|一律")
#: By language (is it Chinese?): one universal word answers another ("always requires" and
#: "is mandatory for all").
_UNIVERSAL_IN = {False: _EN_UNIVERSAL, True: _ZH_UNIVERSAL}
#: Words that only join others ("per key", "via email", "up to", "until you click").
_EN_GLUE = words("per via up until since because which")
#: Words that frame when a statement holds ("从 v2.4.0 开始", "starting with 3.2.0"): the
#: version or date is the claim, checked as a number.
_FRAMING = re.compile(r"开始|起|starting|beginning", re.IGNORECASE)
#: A word that names something in English: "Premium", "HEPA", "PostgreSQL", "H13".
_EN_WORD = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:[-_.][A-Za-z0-9]+)*")
#: jieba's part-of-speech tags of names: place, person, organisation, other proper noun, Latin.
_ZH_NAME_FLAGS = ("nr", "ns", "nt", "nz", "eng")


@dataclass(frozen=True, slots=True)
class _Polarity:
    """The key terms a text denies (in a negator's scope) and those it states plainly."""

    denied: frozenset[str]
    stated: frozenset[str]
    #: Every key term, those of a negative verb's object that it neither denies nor states too.
    mentioned: frozenset[str]
    #: Denied by a condition ("unless --strict is given"): a sentence need not mention it.
    conditional: frozenset[str]
    #: Its numbers, which tell which sentence a clause speaks of (`_closest`).
    numbers: frozenset[str]


@dataclass(frozen=True, slots=True)
class _Window:
    """One sentence of a fact, or two side by side, prepared for matching."""

    text: str
    flat: str
    lowered: str
    stems: frozenset[str]
    numbers: frozenset[str]
    quantities: frozenset[tuple[str, str]]
    bounds: frozenset[tuple[str, str]]
    #: One per sentence, or part of one between semicolons: each may say a word either way
    #: ("Dropped support for Python 3.8; the minimum supported version is now 3.9").
    polarities: tuple[_Polarity, ...]
    #: The whole fact it is part of, lower-cased.
    fact: str


@dataclass(frozen=True, slots=True)
class _Fact:
    windows: tuple[_Window, ...]
    #: Its words written with a capital: a claim's first word is a name if the fact writes it so.
    capitalised: frozenset[str]
    #: Its words, for the sibling check (企业版 where the sentence says 基础版).
    lowered: str


@dataclass(frozen=True, slots=True)
class _Clause:
    """A clause of a claim with what each rule compares."""

    text: str
    chinese: bool
    terms: tuple[Term, ...]
    names: tuple[str, ...]
    numbers: frozenset[str]
    quantities: frozenset[tuple[str, str]]
    bounds: frozenset[tuple[str, str]]
    universals: tuple[str, ...]
    polarity: _Polarity
    #: Chinese nouns and verbs, which the sibling check judges (`_sibling`).
    siblings: tuple[Term, ...]
    #: Its Chinese words in order, with jieba's tags: a missing modifier may be a substitution.
    sequence: tuple[tuple[str, str], ...]
    #: The key words of the whole claim, lower-cased.
    claim_words: frozenset[str]


def check(
    claims: Sequence[ClaimToCheck], facts: Sequence[str], threshold: float
) -> list[ClaimVerdict]:
    """One verdict per claim, in order."""
    prepared = [_fact(fact) for fact in facts]
    return [_verdict(index, claim, prepared, threshold) for index, claim in enumerate(claims)]


def _verdict(
    index: int, claim: ClaimToCheck, facts: Sequence[_Fact], threshold: float
) -> ClaimVerdict:
    text = claim.text.strip()
    if not _content_terms(text) or _NO_CLAIM.match(text) or _LEAD_IN.search(text):
        return ClaimVerdict(claim_index=index, grounding_check_required=False, score=0.0)
    allowed = [f for f in (claim.cited or range(len(facts))) if 0 <= f < len(facts)]
    clauses = _clauses(text, facts)
    copied = {f for f in allowed if any(_copied(text, window) for window in facts[f].windows)}
    # Each clause's best sentence in each fact: its match decides the fact's score, and the best
    # of all decides whether the claim is contradicted where it is said.
    best = {
        f: [max(_match(clause, window, facts) for window in facts[f].windows) for clause in clauses]
        for f in allowed
    }
    if not copied and _contradicted_where_said(list(best.values())):
        scored = [(CONTRADICTED_SCORE, f) for f in allowed]
    else:
        scored = sorted(
            ((1.0 if f in copied else claim_score(best[f]), f) for f in allowed),
            key=lambda pair: -pair[0],
        )
    return ClaimVerdict(
        claim_index=index,
        grounding_check_required=True,
        score=round(scored[0][0], 4) if scored else 0.0,
        citation_indices=[f for score, f in scored if score >= threshold],
    )


def _contradicted_where_said(per_fact: Sequence[Sequence[_Match]]) -> bool:
    """Whether a clause is contradicted by the sentence, of all the facts it may rest on, that
    holds the most of it: "tidepool exits with status 0 on the first malformed record" speaks
    of the fact on malformed records (status 2), not of the one that exits with status 0."""
    return bool(per_fact) and any(
        max(matches[clause] for matches in per_fact).contradicted
        for clause in range(len(per_fact[0]))
    )


def claim_score(matches: Sequence[_Match]) -> float:
    """How well one fact supports the claim, given each clause's match with the fact's sentence
    that suits it best: the share of all the clauses' key terms those sentences hold; a clause
    that lacks `_ADDED_TERMS` or more is judged alone (an added "and also …" the fact does not
    say), and a contradicted clause sinks the claim. (A claim the fact holds verbatim: 1.)"""
    if any(match.contradicted for match in matches):
        return CONTRADICTED_SCORE
    terms = sum(match.terms for match in matches)
    if not terms:
        return 1.0
    shares = [match.share for match in matches if match.lacking >= _ADDED_TERMS]
    return min([1.0 - sum(match.missing for match in matches) / terms, *shares])


def _copied(text: str, window: _Window) -> bool:
    """Whether the claim is copied from the sentence, and not cut short before a condition."""
    flat = _flat(text)
    return bool(flat) and flat in window.flat and not _cut_before_condition(text, window)


def _cut_before_condition(text: str, window: _Window) -> bool:
    """Whether the text is the sentence's words up to a condition it leaves out ("Receipts are
    required for all expenses" of "… for all expenses above $25")."""
    said = re.sub(r"\s+", " ", text.lower()).strip(" ,，。.!！?？")
    at = window.lowered.find(said) if said else -1
    return at >= 0 and _QUALIFIER.match(window.lowered, at + len(said)) is not None


@dataclass(frozen=True, slots=True, order=True)
class _Match:
    """How one sentence matches one clause, ordered best last: by the share of the clause's
    terms it holds, then supported before contradicted. The sentence holding the most of the
    clause is the one the clause speaks of, so its contradiction stands even where a sentence
    that holds less would not object (定制类商品支持无理由退货 speaks of the sentence that says
    定制类商品不支持无理由退货, not of another that only says 可申请无理由退货)."""

    share: float
    supported: bool
    #: Weighted (`_weights`), as the share.
    missing: float
    terms: float
    #: How many key terms it lacks.
    lacking: int

    @property
    def contradicted(self) -> bool:
        return not self.supported


def _match(clause: _Clause, window: _Window, facts: Sequence[_Fact]) -> _Match:
    """The share of the clause's key terms the sentence holds, unless the sentence says
    something else (`_contradiction`)."""
    weights = _weights(clause.terms)
    lacking = [
        w for term, w in zip(clause.terms, weights, strict=True) if not _covers(window, term)
    ]
    terms = sum(weights)
    share = 1.0 - sum(lacking) / terms if terms else 1.0
    supported = _contradiction(clause, window, facts) is None
    return _Match(share, supported, sum(lacking), terms, len(lacking))


def _weights(terms: Sequence[Term]) -> list[int]:
    """How much each key term counts: the clause's last one twice, as a clause ends on what it
    brings ("… approval from the finance director", "… reach support by phone")."""
    return [1] * (len(terms) - 1) + [_END_WEIGHT] if terms else []


def _contradiction(clause: _Clause, window: _Window, facts: Sequence[_Fact]) -> str | None:
    """Why the sentence cannot support the clause, or None. Each reason is one kind of
    unsupported claim: another entity, another number, unit or bound, a wider scope, a dropped
    condition, the opposite."""
    if any(not _holds_name(window, name) for name in clause.names):
        return "name"
    if any(_sibling(window, term, facts) for term in clause.siblings):
        return "sibling"
    if _substituted(clause, window):
        return "substitution"
    if not clause.numbers <= window.numbers:
        return "number"
    if _bound_reversed(clause.bounds, window.bounds):
        return "bound"
    if _unit_changed(clause.quantities, window.quantities):
        return "unit"
    if clause.universals and not _UNIVERSAL_IN[clause.chinese].search(window.text):
        return "scope"
    if _cut_before_condition(clause.text, window):
        return "condition"
    if _opposite(clause, window):
        return "polarity"
    return None


# ---- preparing facts and claims ----------------------------------------------------------------


@lru_cache(maxsize=256)
def _fact(fact: str) -> _Fact:
    """Each sentence of the fact, and each pair of neighbours (a claim may join two); a
    heading ("v2.4.0（2025年6月10日发布）", "GREP(1) - OPTIONS") goes with every sentence under
    it, as it names what they are about."""
    parts = [unwrap(sentence) for sentence in sentences(fact)] or [fact]
    heading: list[str] = []
    if len(parts) > 1 and not _SENTENCE_END.search(parts[0]):
        heading, parts = parts[:1], parts[1:]
    groups = [[part] for part in parts] + [[a, b] for a, b in pairwise(parts)]
    groups += [[row] for row in table_rows_read(fact)]
    capitalised = frozenset(
        word for word in _EN_WORD.findall(fact) if word[0].isupper() or word.isupper()
    )
    windows = tuple(_window(heading, group, fact.lower()) for group in groups)
    return _Fact(windows, capitalised, fact.lower())


def _window(heading: list[str], group: list[str], fact: str) -> _Window:
    """The sentences with their heading; the heading names, it takes no side (`_polarity`).
    What a sentence states in numbers is read once per sentence, not once per window."""
    text = " ".join(heading + group)
    lowered = re.sub(r"\s+", " ", text.lower())
    stated = [_stated(part) for part in heading + group]
    return _Window(
        text,
        _flat(text),
        lowered,
        _with_synonyms(evidence_stems(lowered)),
        frozenset().union(*(numbers for numbers, _, _ in stated)),
        frozenset().union(*(quantities for _, quantities, _ in stated)),
        frozenset().union(*(bounds for _, _, bounds in stated)),
        tuple(_polarity(piece) for part in group for piece in re.split(r"[;；]", part)),
        fact,
    )


@lru_cache(maxsize=4096)
def _stated(
    sentence: str,
) -> tuple[frozenset[str], frozenset[tuple[str, str]], frozenset[tuple[str, str]]]:
    """A sentence's numbers, (number, unit) quantities and bounds (none without a number)."""
    if not _ANY_DIGIT.search(sentence) and not _SPELLED.search(sentence):
        return frozenset(), frozenset(), frozenset()
    quantities = frozenset(_quantities(sentence, smaller=True))
    numbers = frozenset(_numbers(sentence)) | {number for number, _ in quantities}
    return numbers, quantities, frozenset(_bounds(sentence))


_ANY_DIGIT = re.compile(r"\d")


def _with_synonyms(stems: frozenset[str]) -> frozenset[str]:
    return stems | {_EN_SYNONYMS[one] for one in stems if one in _EN_SYNONYMS}


def _clauses(text: str, facts: Sequence[_Fact]) -> list[_Clause]:
    """The claim's clauses; one too short to stand alone joins its neighbour. "Not … until"
    goes first: the clauses it joins say together when something happens, not that it
    does not."""
    text = _NOT_UNTIL.sub("", text)
    chinese = bool(CJK_CHAR.search(text))
    pieces = [p for p in (_ZH_CLAUSE_BREAK if chinese else _EN_CLAUSE_BREAK).split(text) if p]
    joined: list[str] = []
    for piece in pieces:
        if (
            joined
            and min(len(_content_terms(joined[-1])), len(_content_terms(piece))) < _CLAUSE_TERMS
        ):
            joined[-1] = f"{joined[-1]} {piece}"
        else:
            joined.append(piece)
    capitalised = frozenset().union(*(fact.capitalised for fact in facts))
    first_word = _EN_WORD.match(text.strip())
    claim_words = (
        frozenset(word.lower() for word, _ in _zh_sequence(text)) if chinese else frozenset()
    )
    return [
        _clause(piece, chinese, capitalised, first_word[0] if first_word else "", claim_words)
        for piece in joined or [text]
    ]


def _clause(
    text: str,
    chinese: bool,
    capitalised: frozenset[str],
    first_word: str,
    claim_words: frozenset[str],
) -> _Clause:
    universals = (_ZH_UNIVERSAL if chinese else _EN_UNIVERSAL).findall(text)
    return _Clause(
        text=text,
        chinese=chinese,
        terms=tuple(_content_terms(text)),
        names=tuple(_zh_names(text) if chinese else _en_names(text, capitalised, first_word)),
        numbers=frozenset(_numbers(text)),
        quantities=frozenset(_quantities(text, smaller=False)),
        bounds=frozenset(_bounds(text)),
        universals=tuple(word.lower() for word in universals),
        polarity=_polarity(text),
        siblings=_zh_content_words(text) if chinese else (),
        sequence=_zh_sequence(text) if chinese else (),
        claim_words=claim_words,
    )


@lru_cache(maxsize=4096)
def _content_terms(text: str) -> tuple[Term, ...]:
    """The key terms that words can match: numbers with their units, negators, universal
    words ("all", "所有"), framing and connectors are judged by their own rules, and a lone
    Chinese character (时, 多) is too common to tell anything."""
    return tuple(
        term
        for term in key_terms(_plain(text))
        if not any(char.isdigit() for char in term.key)
        and term.surface.lower() not in _EN_GLUE
        and not (term.chinese and len(term.key) == 1)
        and not _FRAMING.fullmatch(term.surface)
        and not _negator(term.surface.lower(), term.chinese)
        and not (_ZH_UNIVERSAL if term.chinese else _EN_UNIVERSAL).fullmatch(term.surface)
    )


def _plain(text: str) -> str:
    """The text as its key terms are read: a number's unit, a multi-word negator ("no
    longer") and a spelled number are judged by their own rules."""
    text = _MULTIWORD_NEGATORS.sub(" not ", _spelled_as_digits(_zh_spaced(_areas(text))))
    return _NUMBER_UNIT.sub(r"\1", text)


def _covers(window: _Window, term: Term) -> bool:
    """Whether the sentence holds the term, or a common synonym of it (`_EN_SYNONYMS`)."""
    if term.chinese:
        return term.key in window.lowered or any(
            other in window.lowered for other in _ZH_SYNONYMS.get(term.key, ())
        )
    return term.key in window.stems or _EN_SYNONYMS.get(term.key, term.key) in window.stems


def _synonyms(groups: Sequence[str]) -> dict[str, frozenset[str]]:
    """Each Chinese word's synonyms: the other words of its group."""
    table: dict[str, frozenset[str]] = {}
    for group in groups:
        members = group.split()
        for word in members:
            table[word] = frozenset(members) - {word}
    return table


def _stem_synonyms(groups: Sequence[str]) -> dict[str, str]:
    """Each English stem's group, named by the group's first stem: a sentence's stems include
    the names of their groups, so a claim's stem is found by its group's name."""
    table: dict[str, str] = {}
    for group in groups:
        stems = [stem(word) for word in group.split()]
        for one in stems:
            table[one] = stems[0]
    return table


#: Everyday synonyms of documentation — words, not names or numbers, which must match as they
#: are. The built-in embedder would find more, at ≈ 55 ms a text against a budget of 5 ms a
#: claim.
_EN_SYNONYMS = _stem_synonyms(
    [
        "get got gotten receive obtain",
        "need require",
        "fix repair resolve",
        "start begin began begun",
        "finish complete end",
        "let allow permit",
        "choose chose chosen select pick",
        "change modify alter",
        "keep kept retain",
        "big large",
        "fast quick",
        "help assist",
        "make made create",
        "delete erase",
        "enough sufficient",
        "often frequently",
        "usually typically normally generally",
        "sooner earlier",
        "prior advance beforehand",
        "immediately instantly",
        "notify inform tell told",
        "answer response reply",
        "error mistake",
        "split divide",
        "abroad overseas",
        "exceed surpass",
        "maximum most",
        "minimum least",
        "approximately about roughly",
        # irregular forms the stemmer leaves apart
        "send sent",
        "take took taken",
        "give gave given",
        "write wrote written",
        "run ran",
        "find found",
        "hold held",
        "lose lost",
        "say said",
        "bring brought",
        "buy bought purchase",
        "build built",
        "spend spent",
        "sell sold",
        "show shown display",
        "know known",
        "break broke broken",
    ]
)
_ZH_SYNONYMS = _synonyms(
    [
        "回到 返回",
        "得到 获得 收到 获取",
        "需要 须 需 必须",
        "修复 修正 解决",
        "开始 启动",
        "结束 完成",
        "显示 展示",
        "购买 购入",
        "选择 挑选",
        "更改 修改 变更",
        "保留 保存",
        "大约 约 左右",
        "帮助 协助",
        "足够 充足",
        "通常 一般",
        "立即 马上 立刻",
        "通知 告知",
        "错误 出错",
        "提前 预先",
        "超过 超出",
        "低于 少于",
        "增至 增加到 增加 提高到",
    ]
)


# ---- names -------------------------------------------------------------------------------------


def _en_names(text: str, capitalised: frozenset[str], first_word: str) -> list[str]:
    """The words of an English clause that name something: written with a capital inside the
    claim (Premium, HEPA, PostgreSQL), holding a digit (H13), or the claim's first word when
    the facts too write it with a capital ("Premium plan customers …" against "Basic plan")."""
    names = []
    for match in _EN_WORD.finditer(text):
        word = match[0]
        if word == "I" or word.lower() in EN_STOP_WORDS:
            continue
        if not (word[0].isupper() or any(c.isdigit() for c in word)):
            continue
        starts = word == first_word and match.start() == len(text) - len(text.lstrip())
        if starts and word not in capitalised:
            continue  # capitalised only because it starts the sentence
        if _NUMBER.fullmatch(word) or word.lower() in _EN_UNITS:
            continue  # units are judged with their numbers
        # As the facts write it when they write it with a capital ("Business plan" is not the
        # "business days" of the Starter plan); else in any case.
        names.append(word if word in capitalised else word.lower())
    return names


def _zh_names(text: str) -> list[str]:
    """Names in a Chinese clause as jieba tags them, and its Latin words (Windows)."""
    return [
        word.strip().lower()
        for word, flag in parts_of_speech(text)
        if word.strip()
        and flag in _ZH_NAME_FLAGS
        and not _NUMBER.fullmatch(word.strip())
        and word.strip().lower() not in _EN_UNITS
    ]


def _zh_content_words(text: str) -> tuple[Term, ...]:
    """The clause's key terms jieba tags as nouns or verbs: 最多 or 已 recur anywhere."""
    tagged = dict(parts_of_speech(text))
    return tuple(term for term in _content_terms(text) if tagged.get(term.surface, "n")[0] in "nv")


def _holds_name(window: _Window, name: str) -> bool:
    """Whether the sentence names it: with the capital when the name has one (`_en_names`)."""
    if name.islower() or CJK_CHAR.search(name):
        return re.search(rf"(?<![a-z0-9]){re.escape(name)}", window.lowered) is not None
    return re.search(rf"(?<![A-Za-z0-9]){re.escape(name)}", window.text) is not None


def _zh_sequence(text: str) -> tuple[tuple[str, str], ...]:
    """The key words of a Chinese text in order, with their tags."""
    return tuple(
        (word, flag) for word, flag in parts_of_speech(text) if _token_keys(word.strip().lower())
    )


@lru_cache(maxsize=1024)
def _zh_words(lowered: str) -> tuple[str, ...]:
    """The key words of a sentence in order."""
    return tuple(word for word in segment(_zh_spaced(lowered)) if _token_keys(word.strip()))


def _substituted(clause: _Clause, window: _Window) -> bool:
    """A Chinese noun or modifier the sentence lacks where, beside the same neighbour, it says
    another word the claim never uses: 二线城市 for 一线城市, 强力模式 for 标准模式, 已拆封的化妆品
    for 已拆封的食品 — the claim speaks of something else."""
    said = _zh_words(window.lowered)
    for place, (word, flag) in enumerate(clause.sequence):
        if flag[0] not in "nmab" or word in window.lowered:
            continue
        neighbours = (
            [(clause.sequence[place + 1][0], -1)] if place + 1 < len(clause.sequence) else []
        )
        if place:
            neighbours.append((clause.sequence[place - 1][0], 1))
        for neighbour, side in neighbours:
            for at, other in enumerate(said):
                beside = at + side
                if (
                    other == neighbour.lower()
                    and 0 <= beside < len(said)
                    and said[beside] not in clause.claim_words
                ):
                    return True
    return False


def _sibling(window: _Window, term: Term, facts: Sequence[_Fact]) -> bool:
    """A Chinese key term the sentence's fact lacks but another fact holds: the claim moved it
    from where the facts say it (企业版 takes the 基础版's availability commitment). Within one
    fact a missing word is more often one the fact says once for all its sentences (员工)."""
    if not term.chinese or _covers(window, term) or term.key in window.fact:
        return False  # English names are `_en_names`; its other words recur too freely
    return any(term.key in fact.lowered for fact in facts)


def _numbers(text: str) -> list[str]:
    """The numbers the text states, as digits: "1,000" is 1000, "six" and "六" are 6, "09" is 9."""
    return [_digits(n) for n in _NUMBER.findall(_spelled_as_digits(text))]


def _digits(number: str) -> str:
    number = number.replace(",", "")
    return number.lstrip("0") or "0" if number.isdigit() else number


def _spelled_as_digits(text: str) -> str:
    return _SPELLED.sub(lambda m: f" {_SPELLED_VALUES[m[0].lower()]} ", text)


def _quantities(text: str, *, smaller: bool) -> list[tuple[str, str]]:
    """(number, unit) pairs: the units among the words right after each number, so "600
    requests per minute" is (600, minute) and "20 working days per calendar year" is
    (20, day) and (20, year). `smaller`: also each in the next smaller unit (0.5 l = 500 ml)."""
    text = _areas(_spelled_as_digits(text))
    found: list[tuple[str, str]] = []
    for match in _ZH_QUANTITY.finditer(text):
        number = _digits(match[1])
        if match[2]:
            found.append((number, _ZH_UNITS[match[2]]))
    for match in _EN_QUANTITY.finditer(text):
        number = _digits(match[1])
        following = re.findall(r"%|m²|ft²|[a-z]+(?:'[a-z]+)?", match[2].lower())
        units = [
            (number, _EN_UNITS[word])
            for place, word in enumerate(following)
            if word in _EN_UNITS and (len(word) > 1 or place == 0)  # "5 s", not "head's"
        ]
        if "per" in following[:-1]:  # "25 MB per file": what a rate counts by is a unit too
            rate = following[following.index("per") + 1 :]
            if not any(word in _EN_UNITS for word in rate):
                units.append((number, "per " + stem(rate[0])))
        found += units
    if smaller:
        found += [
            (_scaled(number, _SMALLER_UNIT[unit][1]), _SMALLER_UNIT[unit][0])
            for number, unit in found
            if unit in _SMALLER_UNIT
        ]
    return found


def _areas(text: str) -> str:
    """ "40 square metres" as "40 m²", one unit."""
    for pattern, unit in _AREA_WORDS:
        text = pattern.sub(unit, text)
    return text


def _all_numbers(text: str) -> frozenset[str]:
    """The numbers the text states, each also in the next smaller unit (0.5 升 is 500 毫升)."""
    return frozenset(_numbers(text)) | {n for n, _ in _quantities(text, smaller=True)}


def _bounds(text: str) -> list[tuple[str, str]]:
    """(number, "≥" or "≤") where a comparison bounds the number: "over $500", "up to 600",
    "超过 300 秒", "不超过600元", "500元以下"."""
    text = _unbounded(text.lower())
    found = []
    for pattern, bound in _BOUND_PATTERNS:
        found += [(_digits(match["n"] or match["m"]), bound) for match in pattern.finditer(text)]
    return found


def _bound_reversed(claimed: Iterable[tuple[str, str]], stated: frozenset[tuple[str, str]]) -> bool:
    """A number the claim bounds the other way from the sentence ("under $500" for "over")."""
    other = {"≥": "≤", "≤": "≥"}
    return any(
        (number, other[bound]) in stated and (number, bound) not in stated
        for number, bound in claimed
    )


def _scaled(number: str, factor: int) -> str:
    value = float(number) * factor
    return str(int(value)) if value.is_integer() else str(value)


def _unit_changed(claimed: Iterable[tuple[str, str]], stated: frozenset[tuple[str, str]]) -> bool:
    """A number the claim gives a unit that the sentence never gives it (per second where the
    sentence says per minute, 分钟 where it says 秒)."""
    return any(pair not in stated for pair in claimed)


# ---- polarity ----------------------------------------------------------------------------------


def _negator(word: str, chinese: bool) -> bool:
    if chinese:
        return word in _ZH_NEGATIVE_VERBS or bool(
            _ZH_NEGATION.search(word) and len(word) <= 2 and word not in _ZH_NOT_NEGATION
        )
    return word in _EN_NEGATORS or word in _EN_NEGATIVE_VERBS or word.endswith("n't")


@lru_cache(maxsize=1024)
def _polarity(text: str) -> _Polarity:
    """Which key terms the text denies: the head of each negation, the word right after the
    negator in its clause ("not per IP address": ip), for a negative verb ("support was
    removed") the one before when none follows, and in Chinese the noun of "对 … 的 X"
    ("移除对 Windows 7 的支持": 支持). Judging the words rather than the sentence lets
    "Without --strict, records are logged and skipped" and "Without --strict, records are not
    skipped" differ, and keeps 无理由退货 from making every sentence around it negative."""
    chinese = bool(CJK_CHAR.search(text))
    lowered = _MULTIWORD_NEGATORS.sub(" not ", _unbounded(text.lower()))
    tokens = segment(_zh_spaced(lowered)) if chinese else _EN_TOKEN.findall(lowered)
    denied: set[str] = set()
    stated: set[str] = set()
    conditional: set[str] = set()
    mentioned: set[str] = set()
    pending = ""  # the negator waiting for its head
    before: list[str] = []  # key terms of the clause so far (a negative verb's object)
    previous = ""
    for token in [*tokens, ","]:
        word = token.strip()
        if not word:
            continue
        if word in _SCOPE_BREAK:
            if pending and pending != _OBJECT and before:  # nothing followed: "is not used"
                denied.add(before.pop())
            stated.update(before)
            pending, before = "", []
            continue
        if word in _EN_NEGATIVE_VERBS and previous in _EN_PASSIVE and before:
            # "support for Python 3.8 was dropped": the head of its subject
            denied.add(before[0])
            before, previous = [], word
            continue
        previous = word
        if _negator(word, chinese):
            pending = word
            continue
        if chinese and pending and word == "对":
            pending = "对"  # 移除对 X 的 Y: the head is Y
            continue
        if pending == "对" and word != "的":
            continue
        if pending == "对":
            pending = "的"
            continue
        keys = _token_keys(word)
        mentioned.update(keys)
        if pending == _OBJECT and keys:
            pending = ""  # the rest of a verb's object: neither denied nor stated
            continue
        if pending and pending != _OBJECT and (keys or _consumes_scope(word, chinese)):
            denied.update(keys)
            if pending in _CONDITIONS:
                conditional.update(keys)
            pending = _OBJECT if pending in _EN_NEGATIVE_VERBS and keys else ""
        else:
            before += keys
    return _Polarity(
        frozenset(denied),
        frozenset(stated),
        frozenset(mentioned),
        frozenset(conditional),
        _all_numbers(text),
    )


#: The state after a negative verb's head: the next key term ("Python" of "dropped support for
#: Python 3.8") belongs to what it takes away, so the sentence states it no more than it denies
#: it ("Python 3.8 is no longer supported" says the same).
_OBJECT = "<object>"


def _unbounded(lowered: str) -> str:
    for pattern, bound in _BOUNDS:
        lowered = pattern.sub(bound, lowered)
    return _NOT_UNTIL.sub("", lowered)


def _zh_spaced(text: str) -> str:
    """Negative verbs set apart: jieba would cut 移除了 into 移 / 除了."""
    return _ZH_NEGATIVE_VERB.sub(r" \1 ", text)


@lru_cache(maxsize=8192)
def _token_keys(word: str) -> tuple[str, ...]:
    """The key terms of one token of a segmented text, as `_content_terms` reads them, without
    segmenting it again."""
    if CJK_CHAR.search(word):
        return () if _not_a_term(word, chinese=True) else (word,)
    return tuple(
        stem(english)
        for english in ENGLISH_WORD.findall(_spelled_as_digits(word.lower()))
        if english not in EN_STOP_WORDS and len(english) > 1 and not _not_a_term(english)
    )


def _not_a_term(word: str, *, chinese: bool = False) -> bool:
    """A word the rules judge on their own, or too short to tell anything."""
    return (
        (chinese and (word in ZH_STOP_WORDS or len(word) == 1))
        or any(char.isdigit() for char in word)
        or word in _EN_GLUE
        or bool(_FRAMING.fullmatch(word))
        or _negator(word, chinese)
        or bool((_ZH_UNIVERSAL if chinese else _EN_UNIVERSAL).fullmatch(word))
    )


def _consumes_scope(word: str, chinese: bool) -> bool:
    """A word that is not a key term but still takes a negator's place (未休年假: 年, 假)."""
    return chinese and bool(CJK_CHAR.search(word)) and word not in ZH_STOP_WORDS


def _opposite(clause: _Clause, window: _Window) -> bool:
    """Whether the sentence says the opposite: it only denies a term the clause states, or
    only states one the clause denies ("unpaid" where it says "paid"); or the clause denies
    something the sentence neither mentions nor denies anything of ("is not supported" against
    "is available"). Each sentence, and each part between semicolons, is judged alone."""
    mine = clause.polarity
    if any(_antonym(term, window) for term in clause.terms):
        return True
    for theirs in _closest(clause, window.polarities):
        if any(_only_in(key, theirs.denied, theirs.stated, clause.chinese) for key in mine.stated):
            return True
        # Where both deny a word of the statement, the negation may fall on another word of the
        # same thing ("no fixed expiry schedule"): only its conditions must then agree.
        denied = mine.conditional if _aligned(clause, theirs) else mine.denied
        if any(_only_in(key, theirs.stated, theirs.denied, clause.chinese) for key in denied):
            return True
    denials = mine.denied - mine.conditional
    if not denials or any(theirs.denied for theirs in window.polarities):
        return False
    mentioned = frozenset().union(*(p.denied | p.stated for p in window.polarities))
    return not any(_in_keys(key, mentioned, clause.chinese) for key in denials)


def _aligned(clause: _Clause, theirs: _Polarity) -> bool:
    """Whether the sentence, too, denies (not as a mere condition) a word of the clause: the
    negation then falls on another word of the same statement ("There is no fixed expiry
    schedule" and "Passwords do not expire on a fixed schedule")."""
    if not clause.polarity.denied:
        return False
    denied = theirs.denied - theirs.conditional
    return any(_related(term.key, key, clause.chinese) for term in clause.terms for key in denied)


def _related(one: str, other: str, chinese: bool) -> bool:
    """The same word, or one derived from the other (expiry / expire: expiri, expir)."""
    if chinese:
        return len(other) >= 2 and (one in other or other in one)
    short, long = sorted((one, other), key=len)
    return short == long or (len(short) >= 4 and long.startswith(short))


def _closest(clause: _Clause, pieces: Sequence[_Polarity]) -> list[_Polarity]:
    """The sentences (or parts between semicolons) holding the most of the clause's key terms:
    the ones that speak of what it says ("Dropped support for Python 3.8" does not gainsay
    "the minimum supported version is Python 3.9")."""
    keys = [term.key for term in clause.terms]
    held = [
        sum(_in_keys(key, p.mentioned, clause.chinese) for key in keys)
        + 2 * len(clause.numbers & p.numbers)  # a number tells the most (Python 3.8)
        for p in pieces
    ]
    return [piece for piece, count in zip(pieces, held, strict=True) if count == max(held)]


def _only_in(key: str, one: frozenset[str], other: frozenset[str], chinese: bool) -> bool:
    return _in_keys(key, one, chinese) and not _in_keys(key, other, chinese)


def _in_keys(key: str, keys: frozenset[str], chinese: bool) -> bool:
    """Whether a key term is among the keys; a Chinese one may be segmented otherwise there
    (结转 inside 结转到)."""
    if not chinese:
        return key in keys
    return any(key in other or other in key for other in keys if len(other) >= 2)


def _antonym(term: Term, window: _Window) -> bool:
    """The clause says the opposite word: it is missing from the sentence and its opposite is
    there ("unpaid" where the sentence says "paid", "optional" where it says "mandatory")."""
    if not _covers(window, term):
        if term.chinese:
            return any(other in window.lowered for other in _ZH_OPPOSITES.get(term.key, ()))
        word = term.surface.lower()
        if word.startswith("un") and len(word) > 5 and stem(word[2:]) in window.stems:
            return True
        return any(other in window.stems for other in _EN_OPPOSITES.get(term.key, ()))
    return False


def _opposites(groups: Sequence[str], key: Callable[[str], str]) -> dict[str, set[str]]:
    """Each word's alternatives: the other members of its group, where members are separated
    by spaces and a member's synonyms by "|" ("optional mandatory|required")."""
    table: dict[str, set[str]] = {}
    for group in groups:
        members = [member.split("|") for member in group.split()]
        for member in members:
            others = {key(word) for other in members if other is not member for word in other}
            for word in member:
                table.setdefault(key(word), set()).update(others)
    return table


#: Words that exclude each other and no negator marks: a claim that swaps one for another says
#: something else ("optional" where the sentence says "mandatory", "weekly" for "daily").
_EN_OPPOSITES = _opposites(
    [
        "optional mandatory|required|compulsory",
        "enabled disabled",
        "allowed|permitted prohibited|forbidden",
        "increase|increases|increased|raised decrease|decreases|decreased|lowered|reduced",
        "minimum maximum",
        "include|includes|included exclude|excludes|excluded",
        "public private",
        "first last",
        "input output",
        "upload download",
        "buyer seller",
        "hourly daily weekly monthly quarterly yearly|annually",
        "red green blue yellow orange white black grey|gray purple",
    ],
    stem,
)
_ZH_OPPOSITES = _opposites(
    [
        "可选 必须|强制|必选",
        "允许 禁止",
        "启用|开启 禁用|关闭",
        "增加|提高|提升 减少|降低",
        "最多|上限|最大 最少|下限|最小",
        "包括|包含 不包括|不包含|除外",
        "买家|买方 卖家|卖方",
        "首次 最后",
        "红色 绿色 蓝色 黄色 白色 黑色 灰色",
        "每天|每日 每周 每月 每年",
        "今年|当年 次年|明年 去年",
        "当天|当日 次日",
    ],
    str,
)


def _flat(text: str) -> str:
    """Lower-cased, spaces and closing marks dropped: a claim copied from a sentence matches."""
    return re.sub(r"[\s。！？；.!?;，,]+", "", text.lower())


def forget_facts() -> None:
    """Drops the prepared facts, so a benchmark times a check that meets its facts afresh."""
    _fact.cache_clear()
    _stated.cache_clear()
