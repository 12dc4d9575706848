"""`query_rewrite` (LOCAL_MODEL.md §3): step-back for specific questions, HyDE for the rest.

- specific = the question names something particular: a number, a version, a Latin-script or
  quoted name inside Chinese, a capitalised or code-like name inside English, or a condition
  ("如果 / 当…时 / if / when / for …"). Step-back asks the general question instead: the
  concept left once the specifics are removed, placed in the topic (document title) of the
  evidence that covers the question best.
- otherwise (short or vague): HyDE writes a short answer-shaped passage from the evidence's
  own sentences that mention the question's terms, marked as hypothetical.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from orchestrator_service.models.base import RewritePlan
from orchestrator_service.models.local.grading import WINDOW
from orchestrator_service.models.local.support import measure_coverage
from orchestrator_service.models.local.text import (
    Evidence,
    Term,
    key_terms,
    prepare_evidence,
)
from shared.lang import is_chinese
from shared.trace_fields import RewriteMethod

MAX_STEP_BACK_CHARS = 300
MAX_HYDE_CHARS = 1200
HYDE_SENTENCES = 3

_NUMBER = re.compile(r"\d")
_ZH_QUOTED = re.compile(r"[《“「『\"]([^》”」』\"]+)[》”」』\"]")
_ZH_LATIN = re.compile(r"[A-Za-z][A-Za-z0-9_.+-]*")
_ZH_CONDITION = re.compile(r"(如果|假如|假设|若是|倘若|当.{1,12}时|.{1,12}的情况下|对于|针对)")
_EN_CONDITION = re.compile(r"\b(if|when|unless|while|during|under|after|before|for)\b\s+(.+)$")
_EN_NAME = re.compile(r"(?<!^)(?<![.?!]\s)\b([A-Z][\w-]*|\w+[._]\w+|\w*\d\w*)")
_SENTENCE = re.compile(r"(?<=[。！？.!?])\s+|(?<=[。！？])|\n+")


def rewrite(question: str, docs: Sequence[Mapping[str, Any]]) -> RewritePlan:
    chinese = is_chinese(question)
    evidence = prepare_evidence(list(docs))
    terms = key_terms(question)
    specifics = specific_terms(question, chinese=chinese)
    if specifics:
        return RewritePlan(
            method=RewriteMethod.STEP_BACK,
            step_back_question=step_back_question(question, terms, specifics, evidence, chinese),
        )
    hyde = hyde_document(question, terms, evidence, chinese)
    return RewritePlan(method=RewriteMethod.HYDE, hyde_document=hyde)


def specific_terms(question: str, *, chinese: bool) -> list[str]:
    """What makes the question specific: numbers, names, versions and condition clauses."""
    found: list[str] = []
    if chinese:
        found += _ZH_QUOTED.findall(question)
        found += _ZH_LATIN.findall(question)
        found += [match.group(0) for match in _ZH_CONDITION.finditer(question)]
        found += re.findall(r"\d+(?:\.\d+)*", question)
    else:
        body = question.strip()
        condition = _EN_CONDITION.search(body)
        if condition:
            found.append(condition.group(0).rstrip("?.! "))
        found += [name for name in _EN_NAME.findall(body) if name.lower() != "i"]
    return list(dict.fromkeys(item.strip() for item in found if item.strip()))


def step_back_question(
    question: str,
    terms: list[Term],
    specifics: list[str],
    evidence: list[Evidence],
    chinese: bool,
) -> str:
    """The general question about the concept left once the specifics are removed."""
    specific_text = " ".join(specifics).lower()
    concept = [term.surface for term in terms if term.surface.lower() not in specific_text]
    coverage = measure_coverage(terms, evidence[:WINDOW])
    topic = coverage.best.title if coverage.best and coverage.best_covered else ""
    if chinese:
        subject = "".join(concept) or topic or question.rstrip("？?。")
        scope = f"在「{topic}」中，" if topic else ""
        text = f"{scope}{subject}的一般规则和基本原理是什么？"
    else:
        subject = " ".join(concept) or topic or question.rstrip("?.! ")
        scope = f" in {topic}" if topic else ""
        text = f"What are the general rules and principles of {subject}{scope}?"
    return text[:MAX_STEP_BACK_CHARS]


def hyde_document(question: str, terms: list[Term], evidence: list[Evidence], chinese: bool) -> str:
    """A short hypothetical answer built from the evidence's own sentences that mention the
    question's terms (most terms first), so the second retrieval speaks the base's language.

    It reads every retrieved chunk, not only the graded window: a chunk that holds the
    question's words only inside longer ones (多肉 in 多肉类, 水 in 浇水) is one BM25 missed
    and fusion ranked below the window, and quoting its sentences is what lets the second
    retrieval find it."""
    scored: list[tuple[int, int, str]] = []
    for chunk in evidence:
        for position, sentence in enumerate(_sentences(chunk.text)):
            hits = sum(chunk_sentence_covers(sentence, term) for term in terms)
            if hits:
                scored.append((-hits, chunk.rank * 1000 + position, sentence))
    chosen = [sentence for _, _, sentence in sorted(scored)[:HYDE_SENTENCES]]
    topic = "".join(t.surface for t in terms) if chinese else " ".join(t.surface for t in terms)
    if chinese:
        opening = f"假设性回答（依据检索到的资料推测，未经证实）：关于{topic or question}，"
        body = "".join(chosen) or "知识库中可能有相关的说明。"
    else:
        opening = (
            "Hypothetical answer (inferred from the retrieved passages, unverified): "
            f"on {topic or question}, "
        )
        body = " ".join(chosen) or "the knowledge base may describe this."
    return (opening + body)[:MAX_HYDE_CHARS]


def chunk_sentence_covers(sentence: str, term: Term) -> bool:
    lowered = sentence.lower()
    if term.chinese:
        return term.key in lowered
    return term.surface in lowered or term.key in lowered


def _sentences(text: str) -> list[str]:
    lines = (re.sub(r"^#+\s*", "", part).strip() for part in _SENTENCE.split(text))
    return [line for line in lines if len(line) >= 4]
