"""`answer_generation` by extraction (LOCAL_MODEL.md §4): sentences copied from the evidence
that together cover the question's key terms best, in the question's language, each followed by
the number of the chunk it comes from. Deterministic; nothing is paraphrased.

Sentences come only from on-topic chunks: those whose text covers at least half of the key
terms, or as many as the best chunk does (so "比较合适" in a sleep chunk cannot answer
"比较绿茶和红茶…" on the strength of 比较 alone). Greedy cover: repeatedly take the sentence adding
the most key terms not yet covered (then the most terms, then the higher-ranked chunk, then the
earlier sentence), at most MAX_SENTENCES, stopping when a sentence adds nothing. The chosen
sentences are read in chunk order."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator_service.answer import MARKER, sentences, split_terminal
from orchestrator_service.models.local.text import Term, key_terms, prepare_evidence
from shared.lang import is_chinese

MAX_SENTENCES = 3


@dataclass(frozen=True, slots=True)
class _Candidate:
    rank: int
    position: int
    sentence: str
    covered: frozenset[str]


def _on_topic(docs: Sequence[Mapping[str, Any]], terms: list[Term]) -> list[bool]:
    evidence = prepare_evidence(list(docs))
    covered = [len(chunk.covered(terms)) for chunk in evidence]
    best = max(covered, default=0)
    return [2 * n >= len(terms) or n == best for n in covered]


def _candidates(docs: Sequence[Mapping[str, Any]], terms: list[Term]) -> list[_Candidate]:
    found = []
    for rank, (doc, on_topic) in enumerate(zip(docs, _on_topic(docs, terms), strict=True), 1):
        if not on_topic:
            continue
        for position, sentence in enumerate(sentences(str(doc.get("text") or ""))):
            # A sentence that already holds "[n]" would read as a citation.
            if MARKER.search(sentence):
                continue
            evidence = prepare_evidence([{"text": sentence}])[0]
            covered = frozenset(term.key for term in terms if evidence.covers(term))
            found.append(_Candidate(rank, position, sentence, covered))
    return found


def choose_sentences(question: str, docs: Sequence[Mapping[str, Any]]) -> list[_Candidate]:
    terms = key_terms(question)
    chinese = is_chinese(question)
    every = _candidates(docs, terms)
    same_language = [c for c in every if is_chinese(c.sentence) == chinese]
    pool = same_language or every
    chosen: list[_Candidate] = []
    uncovered = {term.key for term in terms}
    while pool and len(chosen) < MAX_SENTENCES:
        best = max(
            pool,
            key=lambda c: (len(c.covered & uncovered), len(c.covered), -c.rank, -c.position),
        )
        if chosen and not best.covered & uncovered:
            break
        chosen.append(best)
        uncovered -= best.covered
        pool = [c for c in pool if c is not best]
        if not uncovered:
            break
    return sorted(chosen, key=lambda c: (c.rank, c.position))


def answer_pieces(question: str, docs: Sequence[Mapping[str, Any]]) -> list[str]:
    """The answer as it is streamed: one piece per sentence, "claim[n]" plus its closing
    marks (a full stop where the sentence had none or ended a clause with a semicolon),
    joined by a space in English."""
    chinese = is_chinese(question)
    pieces = []
    for index, candidate in enumerate(choose_sentences(question, docs)):
        claim, closing = split_terminal(candidate.sentence)
        if not closing.strip("；;"):
            closing = "。" if chinese else "."
        lead = " " if index and not chinese else ""
        pieces.append(f"{lead}{claim}[{candidate.rank}]{closing}")
    return pieces
