"""`evidence_grade` from the evidence itself (LOCAL_MODEL.md §2): the verdicts, the route and the
options offered; what of the question the evidence holds is measured in support.py.

Signals, all computed over the leading chunks (the window) in ranking order:
- coverage: which of the question's key terms each chunk contains;
- the best chunk: the one covering most terms (the higher-ranked on ties) and its rank;
- the score signal: the top chunk's rerank score when reranked, else its RRF score relative
  to the best possible (first in both lists), else its cosine score.

| verdict                 | rule                                                                  |
|-------------------------|-----------------------------------------------------------------------|
| answerability sufficient| one chunk covers every key term (all but one when there are ≥ 4)       |
| answerability partial   | the window together covers at least half of the key terms             |
| relevance strong        | the best chunk covers ≥ 2/3 of the terms, scores ≥ 0.9 × the top score |
|                         | and the score signal is ok                                            |
| relevance weak          | otherwise, when the window covers ≥ 1/3 of the terms                  |
| relevance none          | otherwise                                                             |
| missing_slot            | "这个角色" / "this role": the evidence has ≥ 2 sections that are each |
|                         | one thing of that kind (names_one_of_kind), none named by the question |
| multiple_candidates     | ≥ 2 documents in the window each cover every term (≥ 2 terms), under   |
|                         | different titles the question does not name                           |
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator_service.models.base import EvidenceGrade
from orchestrator_service.models.local.semantic import Meaning
from orchestrator_service.models.local.support import (
    Coverage,
    absent_kinds,
    absent_names,
    absent_nouns,
    measure_coverage,
    unnamed_terms,
)
from orchestrator_service.models.local.text import (
    Evidence,
    key_span,
    key_terms,
    prepare_evidence,
    segment,
    sub_headings,
)
from orchestrator_service.resume import CHOICE, already_asked
from shared.lang import is_chinese
from shared.sentences import sentences
from shared.trace_fields import Ambiguity, Answerability, Relevance, Route

WINDOW = 3
#: RRF with k=60 over the dense and BM25 lists: first in both = 2/61.
RRF_BEST = 2 / 61
RRF_MAX = 2 / 60
#: Below this the top chunk was not near the top of both recall lists, or the reranker
#: judged it off-topic.
SCORE_SIGNAL_FLOOR = 0.4
#: A chunk scoring at least this share of the top score counts as ranked at the top.
CLOSE_TO_TOP = 0.9

ZH_DEMONSTRATIVES = (
    "这个", "那个", "这位", "那位", "这款", "那款", "这种", "那种", "这项", "那项", "该",
)  # fmt: skip
#: "this role" is a reference; "the role" only when nothing closer is ("the skill of this role").
EN_REFERENCES = (
    re.compile(r"\b(?:this|that|these|those)\s+([a-z][a-z-]+)\b", re.IGNORECASE),
    re.compile(r"\bthe\s+([a-z][a-z-]+)\b", re.IGNORECASE),
)


#: Meaning compares the question with SEMANTIC_SENTENCES sentences of the window, those sharing
#: the most key terms with it, each cut to its SEMANTIC_SPAN units (words, or CJK characters)
#: holding the most key terms. The encoder is the grade's only real cost and it grows with
#: every token (≈ 1.2 ms a token on one core of the bench machine), so a cold grade encodes the
#: question and one span of ≤ 16 units: ≈ 60 tokens on SciFact claims instead of ≈ 117 for 2
#: whole sentences, with route = answer recall and precision kept or better on the calibration
#: subset and on held-out claims (spans of 20 and 24 lost held-out recall; LOCAL_MODEL.md
#: "Measured").
SEMANTIC_SENTENCES = 1
SEMANTIC_SPAN = 16
#: Meaning answers when the closest span's cosine plus SEMANTIC_SHARE_WEIGHT × the share of
#: key terms its chunk holds reaches SEMANTIC_ANSWER (e5 cosines are compressed: unrelated
#: text scores ≈ 0.80–0.85, a paraphrase ≈ 0.88–0.96), and the question has SEMANTIC_MIN_TERMS
#: key terms or more: in a shorter one each missing word is a third of the question ("Why is
#: Venus so hot?" against "the hottest planet" stays a rewrite). Calibrated on SciFact
#: training claims (LOCAL_MODEL.md "Calibration"): at 0.93 the answered claims' window holds a
#: judged abstract in ≥ 0.94 of cases (0.97 on the calibration subset).
SEMANTIC_ANSWER = 0.93
SEMANTIC_SHARE_WEIGHT = 0.1
SEMANTIC_MIN_TERMS = 4


@dataclass(frozen=True, slots=True)
class SemanticMatch:
    """The evidence sentence closest in meaning to the question: its cosine, the chunk it is
    in, and the share of the key terms that chunk holds."""

    similarity: float
    chunk: Evidence
    chunk_share: float


def grade(
    question: str, docs: Sequence[Mapping[str, Any]], meaning: Meaning | None = None
) -> EvidenceGrade:
    question = pick_option(question, docs)
    chinese = is_chinese(question)
    evidence = prepare_evidence(list(docs))
    coverage = measure_coverage(
        unnamed_terms(key_terms(question), evidence[:WINDOW]), evidence[:WINDOW]
    )
    signal = score_signal(evidence[0]) if evidence else 0.0
    answerability = answerability_of(coverage)
    relevance = relevance_of(coverage, signal)
    signals = describe(coverage, signal)
    absent = absent_names(question, coverage, chinese=chinese)
    kinds = absent_kinds(question, coverage, chinese=chinese)
    if absent or kinds:
        # The thing asked about is not where the answer would come from (team B beside team A,
        # Kestrel 3 beside Kestrel 2, paternity leave beside maternity leave): no sentence of
        # the evidence answers the question, however many of its other words it holds.
        missing = [f"names not in the evidence: {', '.join(absent)}"] if absent else []
        missing += [f"kinds not in the evidence: {', '.join(kinds)}"] if kinds else []
        return EvidenceGrade(
            relevance=Relevance.NONE,
            answerability=Answerability.NONE,
            ambiguity=Ambiguity.NONE,
            route=Route.NO_KNOWLEDGE,
            confidence=0.8,
            reason=f"none/none: {'; '.join(missing)}; " + signals,
        )
    lacking = absent_nouns(question, coverage, chinese=chinese)
    if lacking and answerability == Answerability.SUFFICIENT:
        answerability = Answerability.PARTIAL
        signals += f"; nouns in no chunk: {', '.join(lacking)}"
    # Meaning is measured only where it can change the verdict: the encoder is the grade's
    # only real cost, so words that already answer, words too few to support an answer (on
    # SciFact no claim without half its terms in the window was answered by meaning), and a
    # question too short for meaning to stand in for a missing word spend none of it.
    worded = relevance == Relevance.STRONG and answerability == Answerability.SUFFICIENT
    undecided = not worded and answerability != Answerability.NONE
    match = (
        semantic_match(question, coverage, meaning)
        if meaning is not None and undecided and len(coverage.terms) >= SEMANTIC_MIN_TERMS
        else None
    )
    if match is not None:
        signals += f"; meaning {match.similarity:.2f} in chunk {match.chunk.rank}"
        if answered_by_meaning(coverage, match, signal) and not lacking:
            # The words differ but a sentence says the same thing: strong / sufficient.
            relevance, answerability = Relevance.STRONG, Answerability.SUFFICIENT
            signals = "answered by meaning; " + signals

    if relevance != Relevance.NONE:
        slot = missing_slot(question, coverage.window, chinese=chinese)
        if slot:
            kind, options = slot
            prompt = (
                f"知识库里有多个{kind}：{'、'.join(options)}。你指的是哪一个？"
                if chinese
                else f"The knowledge base describes several {kind}s: {', '.join(options)}. "
                f"Which {kind} do you mean?"
            )
            return EvidenceGrade(
                relevance=relevance,
                answerability=answerability,
                ambiguity=Ambiguity.MISSING_SLOT,
                route=Route.CLARIFY,
                confidence=0.7,
                missing_slots=[kind],
                hitl_prompt=prompt,
                hitl_options=options,
                reason=f"missing_slot: '{kind}' is unresolved, evidence names {len(options)}; "
                + signals,
            )
        titles = competing_documents(question, coverage)
        if titles:
            prompt = (
                f"有多份文档都回答了这个问题：{'、'.join(titles)}。你想了解哪一份？"
                if chinese
                else f"Several documents answer this differently: {', '.join(titles)}. "
                "Which one do you mean?"
            )
            return EvidenceGrade(
                relevance=relevance,
                answerability=answerability,
                ambiguity=Ambiguity.MULTIPLE_CANDIDATES,
                route=Route.SCOPE_SELECT,
                confidence=0.7,
                hitl_prompt=prompt,
                hitl_options=titles,
                reason=f"multiple_candidates: {len(titles)} documents cover every key term; "
                + signals,
            )
    route = suggested_route(relevance, answerability)
    return EvidenceGrade(
        relevance=relevance,
        answerability=answerability,
        ambiguity=Ambiguity.NONE,
        route=route,
        confidence=confidence_of(route, coverage, signal),
        hitl_prompt=follow_up_prompt(coverage, chinese=chinese)
        if answerability == Answerability.PARTIAL
        else "",
        reason=f"{relevance}/{answerability}: " + signals,
    )


#: A resumed question "{answer}：{question}" whose answer picks an option by its place:
#: "2", "#2", "the second", "第二个", "B".
_CHOICE = re.compile(rf"^\s*{CHOICE}\s*[：:]\s*(?P<rest>.+)$", re.IGNORECASE | re.DOTALL)
_ORDINALS = {"first": 1, "second": 2, "third": 3, "fourth": 4, "fifth": 5, "last": -1}
_ZH_DIGITS = "一二三四五六七八"


def chosen_place(question: str) -> tuple[int, str] | None:
    """(1-based place, or -1 for the last; the question without the choice) when a resumed
    question picks an option by its place, else None."""
    match = _CHOICE.match(question)
    if not match:
        return None
    if match["number"]:
        place = int(match["number"])
    elif match["letter"]:
        place = ord(match["letter"].upper()) - ord("A") + 1
    elif match["ordinal"]:
        place = _ORDINALS[match["ordinal"].lower()]
    else:
        zh = match["zh"]
        place = int(zh) if zh.isdigit() else _ZH_DIGITS.index(zh) + 1
    return place, match["rest"].strip()


def options_for(question: str, docs: Sequence[Mapping[str, Any]]) -> list[str]:
    """The options a grade of `question` over `docs` offers the user (clarify or scope_select),
    the same way `grade` finds them; [] when it offers none."""
    evidence = prepare_evidence(list(docs))
    window = evidence[:WINDOW]
    coverage = measure_coverage(unnamed_terms(key_terms(question), window), window)
    slot = missing_slot(question, coverage.window, chinese=is_chinese(question))
    if slot:
        return slot[1]
    return competing_documents(question, coverage)


def pick_option(question: str, docs: Sequence[Mapping[str, Any]]) -> str:
    """A resume answer naming an option by its place ("2：What is the skill of this role?")
    becomes that option's name ("Navigator：What is the skill of this role?"), the options
    found again over the same evidence; a number that is part of exactly one option's name
    ("2" of "Kestrel 2") picks that option. Any other question is returned as it is."""
    chosen = chosen_place(question)
    if chosen is None:
        return question
    place, rest = chosen
    options = options_for(rest, docs)
    match = _CHOICE.match(question)
    number = match["number"] if match else None
    named = [option for option in options if number and already_asked(option, number)]
    if len(named) == 1:
        # "2" among "Kestrel 2" and "Kestrel 3" names an option rather than counts to one.
        return f"{named[0]}：{rest}"
    if not options or not (place == -1 or 1 <= place <= len(options)):
        return question
    return f"{options[place - 1] if place > 0 else options[-1]}：{rest}"


def follow_up_prompt(coverage: Coverage, *, chinese: bool) -> str:
    """What to ask the user if partial evidence survives the rewrite (the route resolver then
    clarifies), in the question's language and naming what the best chunk lacks."""
    lacking = [term.surface for term in coverage.terms if term not in coverage.best_covered]
    if chinese:
        named = "、".join(f"「{surface}」" for surface in lacking)
        return f"我找到了相关内容，但没有一段同时提到{named}。请补充一下你具体想问的条件。"
    named = ", ".join(f"“{surface}”" for surface in lacking)
    return (
        f"I found related passages, but none that also covers {named}. "
        "Could you say more precisely what you want to know?"
    )


def score_signal(top: Evidence) -> float:
    """The top chunk's score on a 0–1 scale: rerank scores as they are; an RRF score (≤ 2/60)
    relative to first-in-both-lists; otherwise a cosine score."""
    if top.score is None:
        return 0.0
    if not top.reranked and 0 < top.score <= RRF_MAX:
        return min(1.0, top.score / RRF_BEST)
    return max(0.0, min(1.0, top.score))


def answerability_of(coverage: Coverage) -> Answerability:
    terms = len(coverage.terms)
    if terms == 0:
        return Answerability.NONE
    missing = terms - len(coverage.best_covered)
    if missing == 0 or (terms >= 4 and missing == 1):
        return Answerability.SUFFICIENT
    return Answerability.PARTIAL if coverage.union_share >= 0.5 else Answerability.NONE


def relevance_of(coverage: Coverage, signal: float) -> Relevance:
    best, top = coverage.best, coverage.window[0] if coverage.window else None
    if (
        best is not None
        and top is not None
        and coverage.best_share >= 2 / 3
        and close_to_top(best, top)
        and signal >= SCORE_SIGNAL_FLOOR
    ):
        return Relevance.STRONG
    return Relevance.WEAK if coverage.union_share >= 1 / 3 else Relevance.NONE


def close_to_top(chunk: Evidence, top: Evidence) -> bool:
    """Whether `chunk` scores within CLOSE_TO_TOP of the top chunk (itself, or a chunk the
    ranking barely put behind it)."""
    if chunk is top:
        return True
    if chunk.score is None or top.score is None or top.score <= 0:
        return False
    return chunk.score >= CLOSE_TO_TOP * top.score


def suggested_route(relevance: Relevance, answerability: Answerability) -> Route:
    if relevance == Relevance.NONE or answerability == Answerability.NONE:
        return Route.NO_KNOWLEDGE
    if relevance == Relevance.STRONG and answerability == Answerability.SUFFICIENT:
        return Route.ANSWER
    return Route.REWRITE


def confidence_of(route: Route, coverage: Coverage, signal: float) -> float:
    if route == Route.ANSWER:
        value = 0.6 * coverage.best_share + 0.4 * signal
    elif route == Route.NO_KNOWLEDGE:
        value = 1.0 - 0.5 * coverage.union_share
    else:
        value = 0.3 + 0.4 * coverage.union_share
    return round(max(0.0, min(1.0, value)), 2)


def describe(coverage: Coverage, signal: float) -> str:
    terms = len(coverage.terms)
    if not terms:
        return "the question has no key terms"
    best = coverage.best
    where = f" in chunk {best.rank} ({best.filename})" if best and coverage.best_covered else ""
    missing = [term.surface for term in coverage.terms if term not in coverage.union_covered]
    text = (
        f"key terms {len(coverage.best_covered)}/{terms} in one chunk{where}, "
        f"{len(coverage.union_covered)}/{terms} in the top {len(coverage.window)}; "
        f"score signal {signal:.2f}"
    )
    return text + (f"; not found: {', '.join(missing)}" if missing else "")


def missing_slot(
    question: str, window: list[Evidence], *, chinese: bool
) -> tuple[str, list[str]] | None:
    """(kind, candidates) when the question refers to "this/that <kind>" and the evidence
    has ≥ 2 sections of that kind, none of which the question names."""
    kind = referenced_kind(question, chinese=chinese)
    if not kind:
        return None
    candidates: list[str] = []
    for chunk in window:
        for heading, body in sub_headings(chunk.text):
            if heading not in candidates and names_one_of_kind(heading, body, kind):
                candidates.append(heading)
    if len(candidates) < 2:
        return None
    lowered_question = question.lower()
    if any(candidate.lower() in lowered_question for candidate in candidates):
        return None
    return kind, candidates


#: What says a section is one thing of a kind: "The Navigator is a support role",
#: "丹瑾是治疗角色" (the heading, a copula, then the kind, in one sentence).
_EN_COPULA = r"[^.!?;\n]*?\b(?:is|are|was|were)\s+(?:a|an|one|the)\b[^.!?;\n]*?"
_ZH_COPULA = r"[^。！？；\n]*?(?:是|为|属于)[^。！？；\n]*?"
#: "Plan A", "Team 2", "方案一": the kind followed by an identifier.
_IDENTIFIER = r"(?:\s+(?-i:[A-Z])|\s*\d{1,4}|\s*[一二三四五六七八九十]{1,2})"


def names_one_of_kind(heading: str, body: str, kind: str) -> bool:
    """Whether a section is one thing of `kind` ("role", "角色") rather than a part of the
    document (Overview, Battery, 充电, which every manual's sections are): its heading ends
    with the kind ("Orion Basic plan", "基础套餐") or is the kind and an identifier ("Plan A",
    "方案一"), or its text puts the kind after the heading ("the Kestrel 3 drone") or says the
    heading is one ("The Navigator is a support role", "丹瑾是治疗角色"). The options of a
    clarify are things, never a document's sections."""
    name, noun = heading.strip().strip("*").strip(), re.escape(kind)
    if is_chinese(kind):
        if (name.endswith(kind) and len(name) > len(kind)) or re.fullmatch(
            noun + _IDENTIFIER, name
        ):
            return True
        named = re.escape(name)
        return re.search(f"{named}{noun}|{named}{_ZH_COPULA}{noun}", body) is not None
    plural = rf"{noun}(?:s|es)?"
    if re.search(rf"\S\s+{plural}$", name, re.IGNORECASE) or re.fullmatch(
        plural + _IDENTIFIER, name, re.IGNORECASE
    ):
        return True
    named = rf"\b{re.escape(name)}\b"
    said = rf"{named}\s+{plural}\b|{named}{_EN_COPULA}\b{plural}\b"
    return re.search(said, body, re.IGNORECASE) is not None


def referenced_kind(question: str, *, chinese: bool) -> str:
    """The noun after a demonstrative ("这个角色" → 角色, "this role" → role), or ""."""
    if chinese:
        tokens = segment(question)
        for index, token in enumerate(tokens[:-1]):
            if token in ZH_DEMONSTRATIVES:
                return tokens[index + 1]
            for demonstrative in ZH_DEMONSTRATIVES:
                if token.startswith(demonstrative) and len(token) > len(demonstrative):
                    return token[len(demonstrative) :]
        return ""
    for pattern in EN_REFERENCES:
        # "the Zephyr Widget" names one thing: its sections are not several of a kind.
        for match in pattern.finditer(question):
            if not match.group(1)[0].isupper():
                return match.group(1).lower()
    return ""


def competing_documents(question: str, coverage: Coverage) -> list[str]:
    """Titles of the documents in the window that each cover every key term, when there are
    ≥ 2 of them, the top chunk is one, and the question names none of their titles."""
    if len(coverage.terms) < 2:
        return []
    titles: list[str] = []
    files: set[str] = set()
    for chunk in coverage.window:
        if len(chunk.covered(coverage.terms)) < len(coverage.terms) or chunk.filename in files:
            continue
        if chunk.rank == 1 or titles:
            files.add(chunk.filename)
            if chunk.title not in titles:
                titles.append(chunk.title)
    if len(titles) < 2:
        return []
    question_terms = {term.key for term in key_terms(question)}
    distinct = [{term.key for term in key_terms(title)} - question_terms for title in titles]
    if any(not words for words in distinct):
        return []  # a title the question already names (all its words are in the question)
    return titles


def answered_by_meaning(coverage: Coverage, match: SemanticMatch, signal: float) -> bool:
    return (
        len(coverage.terms) >= SEMANTIC_MIN_TERMS
        and match.similarity + SEMANTIC_SHARE_WEIGHT * match.chunk_share >= SEMANTIC_ANSWER
        and signal >= SCORE_SIGNAL_FLOOR
    )


def semantic_match(question: str, coverage: Coverage, meaning: Meaning) -> SemanticMatch | None:
    """Compare the question by meaning with the window's SEMANTIC_SENTENCES sentences that
    share the most key terms with it (the higher-ranked chunk, the earlier sentence on ties),
    each cut to its key span; the closest one, or None when the window has no sentence."""
    keys = coverage.terms
    candidates: list[tuple[int, int, int, str, Evidence]] = []
    for chunk in coverage.window:
        for position, sentence in enumerate(sentences(chunk.text)):
            shared = len(prepare_evidence([{"text": sentence}])[0].covered(keys)) if keys else 0
            candidates.append((-shared, chunk.rank, position, sentence, chunk))
    if not candidates:
        return None
    chosen = sorted(candidates, key=lambda c: c[:3])[:SEMANTIC_SENTENCES]
    scores = meaning.similarities(question, [key_span(c[3], keys, SEMANTIC_SPAN) for c in chosen])
    best = max(range(len(chosen)), key=lambda i: (scores[i], -i))
    chunk = chosen[best][4]
    share = len(chunk.covered(keys)) / len(keys) if keys else 0.0
    return SemanticMatch(scores[best], chunk, share)
