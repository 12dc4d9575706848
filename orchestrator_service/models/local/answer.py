"""`answer_generation` by extraction (LOCAL_MODEL.md §4): claims copied from the evidence,
each followed by the number of the chunk it comes from. Deterministic; nothing is paraphrased.

Candidates come only from on-topic chunks: those whose text covers at least half of the key
terms, or as many as the best chunk does (so "比较合适" in a sleep chunk cannot answer
"比较绿茶和红茶…" on the strength of 比较 alone). A candidate is a sentence with a predicate or
a table row: headings, a table's header row, a question (an FAQ's "Q"), and a short line with
no closing mark (a title such as "Inspection findings") are never claims. A table row is read
with its header as context ("Morning shift — Lead: Giulia Ferraro; Hours: 5:30 to 13:30") and
its cells count for coverage together with the header's.

The best candidate leads: the most key terms, then, when the built-in embedder is at hand, the
closest in meaning to the question (among the MEANING_CANDIDATES best by terms), then the
higher-ranked chunk and the earlier sentence. Further candidates follow only when each states
a key term no chosen claim states (a title word does not count; at most MAX_SENTENCES in
all); the leading claim comes first, so its sentence is its chunk's quote."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator_service.answer import MARKER
from orchestrator_service.models.local.complexity import classify
from orchestrator_service.models.local.grading import pick_option
from orchestrator_service.models.local.semantic import Meaning
from orchestrator_service.models.local.text import (
    Term,
    key_terms,
    prepare_evidence,
    sub_headings,
    term_counts,
)
from shared.lang import CJK_CHAR, is_chinese
from shared.lexical import stem
from shared.sentences import line_may_wrap, sentences, split_terminal, unwrap

MAX_SENTENCES = 3
#: Candidates compared by meaning: the best few by key terms (each is a forward pass).
MEANING_CANDIDATES = 3
#: … and only those within this share of the best: 0.3 × 0.5 = 0.15 of score.
MEANING_REACH = 0.5
#: The lead is the candidate with the highest cosine + TERMS_WEIGHT × its weighted share of
#: the key terms (e5 cosines of related sentences lie within ≈ 0.1 of each other).
TERMS_WEIGHT = 0.3
#: "How many…", "多少…": a candidate holding a number is closer to an answer.
NUMBER_BONUS = 0.05
#: A sentence that says the question back as a statement (`stated_as_asked`) is weighed as
#: if it held all the key terms a meaning comparison can make up for.
STATEMENT_BONUS = TERMS_WEIGHT * MEANING_REACH
#: A word of the documents' titles tells nothing about which of their sentences answers; a
#: light verb little.
NAME_WEIGHT = 0.0
LIGHT_WEIGHT = 0.3
_LIGHT_VERBS = frozenset(
    stem(word) for word in ("take", "go", "come", "put", "keep", "need", "want")
)
_TABLE_SEPARATOR = re.compile(r"^\s*\|?\s*:?-{2,}")
_CLOSING = re.compile(r"[。！；.!;:：)）\"”]\s*$")
_QUESTION = re.compile(r"[?？]\**\s*$")
_QUANTITY_QUESTION = re.compile(
    r"\b(?:how\s+(?:many|much|long|often|old|far)|when|what\s+time)\b|多少|几|多久|多长|多远|什么时候|哪天",
    re.IGNORECASE,
)
_NUMBER = re.compile(
    r"\d|\b(?:one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|twenty|thirty|"
    r"forty|fifty|hundred|thousand|half)\b|[一二两三四五六七八九十百千万半]",
    re.IGNORECASE,
)
_DEFINITION_QUESTION = re.compile(
    r"^what\s+(?:is|are)\s+(?:an?\s+|the\s+)?([^?]+?)\s*\?*$|^什么是(.+?)[？?]*$|^(.+?)是什么[？?]*$",
    re.IGNORECASE,
)
#: How far into a sentence (characters) a definition names its subject ("A single event loop").
DEFINITION_LEAD = 12
_ENUMERATION_HEAD = re.compile(r"^\s*(?:[一二三四五六七八九十]+、|\d{1,2}[.、])")


@dataclass(frozen=True, slots=True)
class _Candidate:
    rank: int
    position: int
    sentence: str
    covered: frozenset[str]  # key terms of the claim with its section heading
    said: frozenset[str]  # key terms the claim itself states
    claim: str = ""  # how the claim reads when it is not the sentence itself (a table row)


def _on_topic(docs: Sequence[Mapping[str, Any]], terms: list[Term]) -> list[bool]:
    evidence = prepare_evidence(list(docs))
    covered = [len(chunk.covered(terms)) for chunk in evidence]
    best = max(covered, default=0)
    return [2 * n >= len(terms) or n == best for n in covered]


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|") if cell.strip()]


def is_table_row(line: str) -> bool:
    return line.count("|") >= 2 or (" | " in line)


def is_title(sentence: str) -> bool:
    """A line that states nothing: a question, bold or enumerated caption, or a short line
    without a closing mark ("Inspection findings", "华东仓库值班安排")."""
    text = sentence.strip().strip("*").strip()
    if not text or _QUESTION.search(sentence) or sentence.strip().startswith("**"):
        return True
    if _CLOSING.search(text):
        return False
    if CJK_CHAR.search(text):
        return len(text) < 20 or bool(_ENUMERATION_HEAD.match(text))
    return len(text.split()) < 7


def _row_claim(header: list[str], cells: list[str], chinese: bool) -> str:
    if len(header) != len(cells):
        return " — ".join(cells)
    pairs = [
        f"{name}：{value}" if chinese else f"{name}: {value}"
        for name, value in zip(header[1:], cells[1:], strict=True)
    ]
    return f"{cells[0]} — {'；'.join(pairs) if chinese else '; '.join(pairs)}"


def table_rows_read(text: str) -> list[str]:
    """Each table row of `text` as the answerer states it, with its header's names
    ("Night baking — Lead: Ana Duarte; Hours: 22:00 to 6:00"): what the grounding check
    reads a row as, so an answer copied from a row is found in it."""
    return [claim for _, claim, _ in _claims(text) if claim]


def _claims(text: str) -> list[tuple[str, str, str]]:
    """(sentence, claim, coverage text) of every claim the chunk's text can make. Prose lines
    are read as paragraphs (`paragraph_spans`): a sentence wrapped over lines is one claim,
    read as one line (`unwrap`)."""
    found: list[tuple[str, str, str]] = []
    header: list[str] | None = None
    section = ""
    prose: list[str] = []
    continues = False  # whether the line before may have been wrapped into this one

    def flush() -> None:
        for sentence in sentences("\n".join(prose)):
            if not is_title(sentence) and not MARKER.search(sentence):
                one_line = unwrap(sentence)
                found.append((one_line, "", f"{section} {one_line}"))
        prose.clear()

    for line in text.splitlines():
        if not line.strip():
            flush()
            continues = False
            continue
        if is_table_row(line):
            flush()
            continues = False
            if _TABLE_SEPARATOR.match(line):
                continue
            cells = _cells(line)
            if header is None:
                header = cells  # a table's first row names its columns
                continue
            row = line.strip()
            chinese = bool(CJK_CHAR.search(row))
            found.append((row, _row_claim(header, cells, chinese), f"{' '.join(header)} {row}"))
            continue
        header = None
        stripped = line.strip()
        if stripped.startswith("#") or (not continues and is_title(stripped)):
            # The section's heading: context for the sentences under it ("## Warranty").
            flush()
            section = stripped.lstrip("#").strip("* ")
            continues = False
            continue
        prose.append(line)
        continues = line_may_wrap(stripped)
    flush()
    return found


def _candidates(docs: Sequence[Mapping[str, Any]], terms: list[Term]) -> list[_Candidate]:
    found = []
    titles = [e.title for e in prepare_evidence(list(docs))]
    for rank, (doc, on_topic) in enumerate(zip(docs, _on_topic(docs, terms), strict=True), 1):
        if not on_topic:
            continue
        for position, (sentence, claim, words) in enumerate(_claims(str(doc.get("text") or ""))):
            # The document's title is context too: a row of the Aurelia Bakery's table is about
            # Aurelia Bakery, a sentence of the Premium Support Plan's page about that plan.
            context, itself = prepare_evidence(
                [{"text": f"{titles[rank - 1]} {words}"}, {"text": claim or sentence}]
            )
            covered = frozenset(term.key for term in terms if context.covers(term))
            said = frozenset(term.key for term in terms if itself.covers(term))
            if covered:
                found.append(_Candidate(rank, position, sentence, covered, said, claim))
    return found


def rarity(holders: int, candidates: int) -> float:
    """BM25's inverse document frequency in its Lucene form (the 1 + keeps it positive when
    most candidates hold the word), the candidate sentences taken as the documents:
    ln(1 + (N − n + 0.5) / (n + 0.5)).

    It falls with the log of the holders, not as 1 / holders: a word a second or third
    sentence of the evidence also says ("removed" beside "root is never removed or changed")
    still tells which sentence answers, and halving or thirding its weight let a sentence
    holding only the question's one rare noun ("account") lead one holding three of its words.
    A word held by every candidate still weighs next to nothing."""
    return math.log(1.0 + (candidates - holders + 0.5) / (holders + 0.5))


def _weights(terms: list[Term], pool: list[_Candidate], titles: Sequence[str]) -> dict[str, float]:
    """A key term counts the less the more candidates hold it (`rarity`: the subject a whole
    section is about says nothing about which sentence answers), a word of the documents'
    titles ("Millbrook", "ferry") not at all. A term no candidate holds weighs as one held by
    a single candidate: it is part of the question all the same."""
    names = {term.key for term in key_terms(" ".join(titles))}
    weights = {}
    for term in terms:
        holders = max(1, sum(term.key in c.covered for c in pool))
        weight = LIGHT_WEIGHT if term.key in _LIGHT_VERBS else 1.0
        weights[term.key] = (NAME_WEIGHT if term.key in names else weight) * rarity(
            holders, len(pool)
        )
    return weights


def named_thing(
    terms: list[Term], pool: list[_Candidate], docs: Sequence[Mapping[str, Any]]
) -> list[_Candidate]:
    """The candidates about the thing the question names when the evidence describes several
    of a kind: sibling headings (titles and section headings of the on-topic chunks that share a
    word with another: "Basic Support Plan" / "Premium Support Plan", "Orion Basic plan" /
    "Orion Pro plan", 年假 / 产假) differ in the words that name each one, and a question word
    among those ("Premium") keeps only the candidates whose sentence, section or title holds
    the most of them. A manual's sections (Tickets, Winter service) share no word and name
    nothing. Every candidate when the question names none."""
    on_topic = {c.rank for c in pool}
    headings: dict[str, set[str]] = {}
    for evidence in prepare_evidence(list(docs)):
        if evidence.rank in on_topic:
            for heading in [evidence.title] + [h for h, _ in sub_headings(evidence.text)]:
                headings.setdefault(heading, {term.key for term in key_terms(heading)})
    siblings = [
        keys
        for heading, keys in headings.items()
        if any(keys & other for name, other in headings.items() if name != heading)
    ]
    if len(siblings) < 2:
        return pool
    every_name, shared = set().union(*siblings), siblings[0].intersection(*siblings[1:])
    naming = {term.key for term in terms} & (every_name - shared)
    if not naming:
        return pool
    most = max(len(c.covered & naming) for c in pool)
    return [c for c in pool if len(c.covered & naming) == most]


def asked_terms(question: str, missing: Sequence[str] = ()) -> list[Term]:
    """The question's key terms less those only its unanswerable parts ask about: a term stays
    when the question uses it more often than `missing` does ("leads" of "who leads the morning
    shift … and who leads the evening shift at Borealis?" stays, "evening" goes). All of them
    when that leaves none (a sub-question that restates the whole question)."""
    terms = key_terms(question)
    if not any(part.strip() for part in missing):
        return terms
    used, unanswerable = term_counts(question), term_counts(" ".join(missing))
    return [term for term in terms if used[term.key] > unanswerable[term.key]] or terms


def defined_subject(question: str) -> str:
    """X of "What is X?" / "什么是X？" / "X是什么？" (a short X), else ""."""
    match = _DEFINITION_QUESTION.match(question.strip())
    if not match:
        return ""
    subject = next(group for group in match.groups() if group)
    return subject if len(subject.split()) <= 4 and len(subject) <= 30 else ""


#: "What is OpenSSH based on?", "What is the fixed parameter of bc's …?": the subject, and a
#: participle with what follows it when the question ends in one.
_ATTRIBUTE_QUESTION = re.compile(
    r"^(?:what|who|which)\s+(?P<verb>is|are|was|were)\s+(?P<subject>.+?)"
    r"(?:\s+(?P<tail>\w+(?:ed|en)(?:\s+\w+)?))?\s*\?*$",
    re.IGNORECASE,
)


def stated_as_asked(question: str) -> tuple[str, ...]:
    """The words a sentence answering the question states it with, lower-cased: for an
    English "What is X …?", X (up to its "of") with the verb and a closing participle
    ("openssh is based on", "the fixed parameter is"); for "Why …?", the words that give a
    reason. A sentence that says the question back as a statement is its answer, where a
    neighbour only shares its words ("This version of OpenSSH is based upon code …")."""
    stripped = question.strip()
    if _WHY_QUESTION.match(stripped):
        return _REASON_WORDS
    match = _ATTRIBUTE_QUESTION.match(stripped)
    if not match:
        return ()
    subject = match["subject"].split(" of ", 1)[0].strip()
    if len(subject.split()) > 5:
        return ()
    words = (subject, match["verb"], match["tail"] or "")
    return (" ".join(part for part in words if part).lower(),)


_WHY_QUESTION = re.compile(r"^why\b", re.IGNORECASE)
_REASON_WORDS = ("the reason", "because", "due to", "so that", "in order to")


def opens_with(sentence: str, subject: str) -> bool:
    """Whether `subject` is named at the start of `sentence` (a definition states it first)."""
    where = sentence.lower().find(subject.lower())
    return 0 <= where <= DEFINITION_LEAD


def asks_quantity(question: str) -> bool:
    return _QUANTITY_QUESTION.search(question) is not None


def choose_sentences(
    question: str,
    docs: Sequence[Mapping[str, Any]],
    meaning: Meaning | None = None,
    missing: Sequence[str] = (),
) -> list[_Candidate]:
    """The claims of the answer, the leading one first. `missing`: what the evidence is known
    not to answer (the grade's missing slots, the sub-questions that found nothing); no further
    claim is added for a term only they hold, so a neighbour's sentence never stands in for
    them (team A's code for team B's)."""
    question = pick_option(question, docs)
    terms = asked_terms(question, missing)
    chinese = is_chinese(question)
    every = _candidates(docs, terms)
    if not every and any(part.strip() for part in missing):
        # What is left to ask is in no sentence: answer the question as a whole.
        return choose_sentences(question, docs, meaning)
    same_language = [c for c in every if is_chinese(c.sentence) == chinese]
    pool = named_thing(terms, same_language or every, docs)
    if not pool:
        return []
    on_topic = {c.rank for c in pool}
    titles = [e.title for e in prepare_evidence(list(docs)) if e.rank in on_topic]
    weights = _weights(terms, pool, titles)
    quantity = asks_quantity(question)
    defined = defined_subject(question)
    statement = stated_as_asked(question)
    total = sum(weights.values()) or 1.0

    def share(c: _Candidate) -> float:
        return sum(weights[key] for key in c.covered) / total

    def states(c: _Candidate) -> bool:
        lowered = c.sentence.lower()
        return any(phrase in lowered for phrase in statement)

    by_terms = sorted(pool, key=lambda c: (-share(c), c.rank, c.position))
    close: dict[int, float] = {}
    if meaning is not None:
        shortlist = by_terms[:MEANING_CANDIDATES]
        # Cosines of related sentences lie within ≈ 0.15 of each other: a candidate whose share
        # trails the best by more than MEANING_REACH cannot overtake it, so it is not encoded.
        best_share = share(by_terms[0])
        shortlist = [c for c in shortlist if share(c) >= best_share - MEANING_REACH]
        shortlist += [c for c in by_terms if states(c) and c not in shortlist]
        scores = (
            meaning.similarities(question, [c.claim or c.sentence for c in shortlist])
            if len(shortlist) > 1
            else [0.0]
        )
        close = {id(c): s for c, s in zip(shortlist, scores, strict=True)}
        by_terms = shortlist
    lead = max(
        by_terms,
        key=lambda c: (
            round(
                close.get(id(c), 0.0)
                + TERMS_WEIGHT * share(c)
                + (NUMBER_BONUS if quantity and _NUMBER.search(c.claim or c.sentence) else 0.0)
                + (NUMBER_BONUS if defined and opens_with(c.sentence, defined) else 0.0)
                + (STATEMENT_BONUS if states(c) else 0.0),
                6,
            ),
            -c.rank,
            -c.position,
        ),
    )
    chosen = [lead]
    # Further claims must state something new: a key term no chosen claim states itself
    # (a heading over them does not count), other than the documents' titles.
    title_words = {term.key for term in key_terms(" ".join(titles))}
    unanswerable = {term.key for term in key_terms(" ".join(missing))}
    uncovered = {term.key for term in terms} - lead.said - title_words - unanswerable
    rest = [c for c in pool if c is not lead]
    while rest and uncovered and len(chosen) < MAX_SENTENCES:
        best = max(
            rest,
            key=lambda c: (len(c.said & uncovered), len(c.covered), -c.rank, -c.position),
        )
        if not best.said & uncovered:
            break
        chosen.append(best)
        uncovered -= best.said
        rest = [c for c in rest if c is not best]
    return chosen


def choose_claims(
    question: str,
    docs: Sequence[Mapping[str, Any]],
    meaning: Meaning | None = None,
    missing: Sequence[str] = (),
) -> list[_Candidate]:
    """The claims of the answer. A compound question (one the local classifier splits, as it
    did for the run's plan) answers each of its parts that is not `missing` with that part's
    leading claim, in the parts' order ("青岚茶园在哪里？青岚茶园的门票多少钱？": the location and
    the ticket price, not the two best sentences of the whole); a part whose lead is already
    chosen adds nothing. Any other question: `choose_sentences`."""
    absent = {part.strip() for part in missing}
    parts = [part for part in classify(question).sub_questions if part.strip() not in absent]
    if len(parts) < 2:
        return choose_sentences(question, docs, meaning, missing)
    chosen: list[_Candidate] = []
    for part in parts:
        leads = choose_sentences(part, docs, meaning, missing)[:1]
        chosen.extend(c for c in leads if all(c.sentence != o.sentence for o in chosen))
    return chosen or choose_sentences(question, docs, meaning, missing)


def answer_pieces(
    question: str,
    docs: Sequence[Mapping[str, Any]],
    meaning: Meaning | None = None,
    missing: Sequence[str] = (),
) -> list[str]:
    """The answer as it is streamed: one piece per claim, "claim[n]" plus its closing
    marks (a full stop where the sentence had none or ended a clause with a semicolon),
    joined by a space in English; the leading claim first. `missing` as for
    `choose_sentences`; the orchestrator's note names it after the text."""
    chinese = is_chinese(question)
    pieces = []
    for index, candidate in enumerate(choose_claims(question, docs, meaning, missing)):
        claim, closing = split_terminal(candidate.claim or candidate.sentence)
        if not closing.strip("；;"):
            closing = "。" if chinese else "."
        lead = " " if index and not chinese else ""
        pieces.append(f"{lead}{claim}[{candidate.rank}]{closing}")
    return pieces
