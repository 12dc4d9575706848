"""Text analysis shared by the local model's tasks: language, key terms and their coverage in
evidence. Chinese is segmented with jieba, English is lower-cased and Snowball-stemmed; stop
words and question framing ("what", "是什么", …) are not key terms."""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any

import jieba

from shared.lang import CJK_CHAR, CJK_RANGE, ENGLISH_WORD
from shared.lexical import stem

jieba.setLogLevel(logging.WARNING)

_MARKDOWN_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*$")


def words(text: str) -> frozenset[str]:
    """A word list written as one space-separated string."""
    return frozenset(text.split())


ZH_STOP_WORDS = words(
    "的 了 是 在 有 和 与 及 或 而 且 就 都 也 还 又 很 最 更 吗 呢 吧 啊 么 呀 哦 嘛 着 "
    "过 把 被 给 从 向 到 为 以 对 于 让 使 这 那 些 个 该 此 其 之 我 你 您 他 她 它 "
    "我们 你们 他们 什么 怎么 怎样 怎么样 如何 为什么 为何 哪 哪个 哪些 哪里 哪儿 谁 几 "
    "多少 多久 是否 能否 可以 能 会 要 想 请 请问 一下 一些 一个 告诉 介绍 说明 解释 讲讲 "
    "谈谈 描述 列出 知道 有没有 是不是 以及 还是 或者 并且 同时 这个 那个 这些 那些 这种 "
    "那种 这位 那位 这款 那款 应该 应当 需要 通常 一般 主要 关于 方面 情况 问题 "
    "怎么办 多大 多长 多高 多快 多远 多重"
)
EN_STOP_WORDS = words(
    "a an the this that these those it its they them their there here of in on at to for "
    "from by with without about into onto over under between among through during before "
    "after above below and or but nor so if then than as is are was were be been being am "
    "do does did doing done have has had having can could should would will shall may "
    "might must not no yes what which who whom whose when where why how i me my we us our "
    "you your he him his she her one ones any some all each every both either neither "
    "other others such same own more most much many very just also only too again please "
    "tell explain describe list give show know vs versus kind sort type way thing things say "
    "says said according "
    "get got make made use used using"
)


@dataclass(frozen=True, slots=True)
class Term:
    """A key term of a question: `surface` as written, `key` the form matched in evidence
    (the Chinese word itself, or an English stem)."""

    surface: str
    key: str
    chinese: bool


def segment(text: str) -> list[str]:
    """jieba tokens of `text`, whitespace dropped (English words come out whole)."""
    return [token for token in jieba.lcut(text) if token.strip()]


def key_terms(text: str) -> list[Term]:
    """The question's key terms in order of first appearance, deduplicated by `key`."""
    terms: dict[str, Term] = {}
    for term in _terms_in(text):
        terms.setdefault(term.key, term)
    return list(terms.values())


def term_counts(text: str) -> Counter[str]:
    """How often each key term occurs in `text`, by `key`."""
    return Counter(term.key for term in _terms_in(text))


def _terms_in(text: str) -> list[Term]:
    found = []
    for token in segment(text):
        word = token.strip().lower()
        if CJK_CHAR.search(word):
            if word not in ZH_STOP_WORDS:
                found.append(Term(token, word, chinese=True))
            continue
        for english in ENGLISH_WORD.findall(word):
            if english in EN_STOP_WORDS or (len(english) == 1 and not english.isdigit()):
                continue
            found.append(Term(english, stem(english), chinese=False))
    return found


@dataclass(frozen=True, slots=True)
class Evidence:
    """One retrieved chunk prepared for matching: lower-cased text and its English stems."""

    rank: int
    filename: str
    title: str
    text: str
    lowered: str
    stems: frozenset[str]
    score: float | None
    reranked: bool

    def covers(self, term: Term) -> bool:
        return term.key in self.lowered if term.chinese else term.key in self.stems

    def covered(self, terms: list[Term]) -> list[Term]:
        return [term for term in terms if self.covers(term)]


def prepare_evidence(docs: list[Mapping[str, Any]]) -> list[Evidence]:
    evidence = []
    for rank, doc in enumerate(docs, start=1):
        text = str(doc.get("text") or "")
        lowered = text.lower()
        rerank_score = doc.get("rerank_score")
        score = rerank_score if rerank_score is not None else doc.get("score")
        evidence.append(
            Evidence(
                rank=rank,
                filename=str(doc.get("filename") or ""),
                title=document_title(doc),
                text=text,
                lowered=lowered,
                stems=evidence_stems(lowered),
                score=float(score) if score is not None else None,
                reranked=rerank_score is not None,
            )
        )
    return evidence


def evidence_stems(lowered: str) -> frozenset[str]:
    """The stems of the words of `lowered`, and of each part of a dotted name: the question's
    `asyncio.gather` reaches the key terms as `asyncio` and `gather` (jieba splits at the dot)
    while the chunk's regex keeps the name whole."""
    found: set[str] = set()
    for word in ENGLISH_WORD.findall(lowered):
        found.add(stem(word))
        if "." in word:
            found.update(stem(part) for part in word.split(".") if part)
    return frozenset(found)


def document_title(doc: Mapping[str, Any]) -> str:
    """The chunk's document title: its first line when that is a Markdown heading or a short
    line without sentence punctuation, else the filename without its extensions."""
    text = str(doc.get("text") or "").strip()
    first_line = text.splitlines()[0].strip() if text else ""
    heading = _MARKDOWN_HEADING.match(first_line)
    if heading:
        return heading.group(2)
    if first_line and len(first_line) <= 40 and not re.search(r"[。！？.!?，,;；:：]", first_line):
        return first_line
    name = PurePath(str(doc.get("filename") or "")).name
    return name.split(".", 1)[0] or name


def sub_headings(text: str) -> list[tuple[str, str]]:
    """(heading, section body) for every Markdown heading of level 2 or deeper in `text`: the
    named parts of a document (roles, plans, modules), in order."""
    sections: list[tuple[str, list[str]]] = []
    body: list[str] | None = None
    for line in text.splitlines():
        heading = _MARKDOWN_HEADING.match(line.strip())
        if heading and len(heading.group(1)) >= 2:
            body = []
            sections.append((heading.group(2), body))
        elif heading:
            body = None  # a document title closes the section before it
        elif body is not None:
            body.append(line)
    return [(name, "\n".join(lines)) for name, lines in sections]


#: A unit of length for cropping evidence: one CJK character, or one run of other non-space
#: characters (an English word with its punctuation).
_UNIT = re.compile(f"[{CJK_RANGE}]|[^\\s{CJK_RANGE}]+")


def key_span(sentence: str, terms: list[Term], width: int) -> str:
    """The part of `sentence` that is at most `width` units long (CJK characters or other
    words) and holds the most key terms, the earliest such part on ties; the whole sentence
    when it is no longer than that. The grader encodes this rather than the sentence because
    the encoder's cost grows with every token while the clause that shares the question's
    words is where a paraphrase of the question would be."""
    units = [(m.start(), m.end()) for m in _UNIT.finditer(sentence)]
    if len(units) <= width:
        return sentence.strip()
    occurrences = _term_occurrences(sentence, units, terms)
    best_start, best_count = 0, -1
    for start in range(len(units) - width + 1):
        end = start + width
        count = sum(any(start <= a and b < end for a, b in spans) for spans in occurrences)
        if count > best_count:
            best_start, best_count = start, count
    return sentence[units[best_start][0] : units[best_start + width - 1][1]]


def _term_occurrences(
    sentence: str, units: list[tuple[int, int]], terms: list[Term]
) -> list[list[tuple[int, int]]]:
    """Per term, the (first, last) unit index of each of its occurrences in `sentence`."""
    lowered = sentence.lower()
    unit_at = [0] * (len(sentence) + 1)
    for index, (a, b) in enumerate(units):
        for offset in range(a, b):
            unit_at[offset] = index
    unit_stems = [evidence_stems(lowered[a:b]) for a, b in units]
    found: list[list[tuple[int, int]]] = []
    for term in terms:
        spans: list[tuple[int, int]] = []
        if term.chinese:
            at = lowered.find(term.key)
            while at >= 0:
                spans.append((unit_at[at], unit_at[at + len(term.key) - 1]))
                at = lowered.find(term.key, at + 1)
        else:
            spans = [(i, i) for i, stems in enumerate(unit_stems) if term.key in stems]
        found.append(spans)
    return found
