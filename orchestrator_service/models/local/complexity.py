"""`complexity_classification` by structural cues (LOCAL_MODEL.md §1).

A question is complex when it carries one of these cues and splits into 2–4 parts:

| cue                | Chinese                           | English                              |
|--------------------|-----------------------------------|--------------------------------------|
| multiple_questions | several ？ / ；                    | several ? / ;                        |
| clauses            | two asks joined by ， 以及 并且    | "…, and how …", "… and does it …"    |
| predicates         |                                   | "How do I install and configure X"   |
| comparison         | 比较 对比 区别 差异 异同 不同…      | compare, difference, differ, than    |
| distribution       | 分别 各自 每个 各个                 | each, respectively                   |
| enumeration        | 、 和 与 及 以及 跟 或 还是          | "," "and" "or"                       |

A question about a relation between its items ("A和B的关系", "how do A and B interact") is
one question. How a question with a cue is cut into its parts lives in `decomposition.py`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from orchestrator_service.models.local.decomposition import (
    EN_DISTRIBUTION,
    ZH_DISTRIBUTION,
    comparative_items_en,
    complete_subjects,
    split_asks,
    split_clauses_en,
    split_clauses_zh,
    split_items_en,
    split_items_zh,
    split_predicates_en,
)
from shared.lang import is_chinese
from shared.trace_fields import MAX_SUB_QUESTIONS, Complexity

ZH_COMPARISON = ("比较", "对比", "区别", "差异", "异同", "不同", "优缺点", "谁更", "哪个更", "相比")
ZH_RELATION = ("关系", "联系", "相互", "关联", "互相", "有关", "相关")
EN_COMPARISON = re.compile(r"\b(?:compare|contrast|difference|differences|differ|versus|vs)\b")
EN_RELATION = re.compile(
    r"\b(?:relationship|relation|interact|interacts|related|affect|affects|connection|"
    r"connected|link|linked|correlation|association|between)\b"
)


@dataclass(frozen=True, slots=True)
class Classification:
    complexity: Complexity
    reason: str
    sub_questions: list[str]


#: Coordinations that name one thing ("pros and cons", "研究与开发部门"): never split.
EN_BINOMIALS = re.compile(
    r"\b(?:pros and cons|research and development|sales and marketing|small and medium|"
    r"terms and conditions|health and safety|profit and loss|mergers and acquisitions|"
    r"bread and butter|salt and pepper|trial and error|questions and answers|q and a)\b",
    re.IGNORECASE,
)
ZH_BINOMIALS = re.compile(
    r"研究(?:与|和)开发|销售(?:与|和)市场|中小(?:型)?企业|软硬件|优缺点|利与弊"
)
#: Private-use stand-ins for a binomial's space and conjunctions while the question is split.
_MASKS = {" ": "\ue000", "与": "\ue001", "和": "\ue002"}


def _mask(text: str) -> str:
    def hide(match: re.Match[str]) -> str:
        return "".join(_MASKS.get(char, char) for char in match.group(0))

    return ZH_BINOMIALS.sub(hide, EN_BINOMIALS.sub(hide, text))


def _unmask(text: str) -> str:
    for char, mask in _MASKS.items():
        text = text.replace(mask, char)
    return text


def classify(question: str) -> Classification:
    """simple, or complex with 2–4 sub-questions; the reason names the cue that decided.
    Every sub-question ends with "?" or "？" in the question's script."""
    chinese = is_chinese(question)
    result = _classify(_mask(question))
    subs = [_as_question(_unmask(sub), chinese=chinese) for sub in result.sub_questions]
    return Classification(result.complexity, result.reason, subs)


def _as_question(sub: str, *, chinese: bool) -> str:
    core = sub.rstrip("？?。.！! ")
    return core + ("？" if chinese else "?")


def _classify(question: str) -> Classification:
    text = re.sub(r"\s+", " ", question.strip())
    chinese = is_chinese(text)
    asks = split_asks(text)
    if len(asks) >= 2:
        return _complex("multiple_questions", complete_subjects(asks, chinese=chinese))
    clauses = split_clauses_zh(text) if chinese else split_clauses_en(text)
    if len(clauses) >= 2:
        return _complex("clauses", complete_subjects(clauses, chinese=chinese))
    lowered = text.lower()
    if chinese:
        relation = any(word in text for word in ZH_RELATION)
        cue = _first_cue(text, (("comparison", ZH_COMPARISON), ("distribution", ZH_DISTRIBUTION)))
        parts = split_items_zh(text, comparison=cue == "comparison")
    else:
        comparative = comparative_items_en(text)
        if comparative:
            return _complex("comparison", comparative)
        relation = bool(EN_RELATION.search(lowered))
        cue = (
            "comparison"
            if EN_COMPARISON.search(lowered)
            else "distribution"
            if EN_DISTRIBUTION.search(lowered)
            else None
        )
        predicates = [] if relation else split_predicates_en(text)
        if predicates:
            return _complex("predicates", predicates)
        parts = split_items_en(text, comparison=cue == "comparison")
    if relation and cue != "comparison":
        return Classification(
            Complexity.SIMPLE, "relation_between_items: one question about a relation", []
        )
    if len(parts) >= 2:
        return _complex(cue or "enumeration", parts)
    if cue:
        return Classification(Complexity.SIMPLE, f"{cue}_cue_without_items: nothing to split", [])
    return Classification(Complexity.SIMPLE, "no_split_cue: a single ask", [])


def _complex(cue: str, parts: list[str]) -> Classification:
    kept = parts[:MAX_SUB_QUESTIONS]
    note = f", first {MAX_SUB_QUESTIONS} of {len(parts)} kept" if len(parts) > len(kept) else ""
    return Classification(Complexity.COMPLEX, f"{cue}: {len(kept)} sub-questions{note}", kept)


def _first_cue(text: str, cues: tuple[tuple[str, tuple[str, ...]], ...]) -> str | None:
    return next((name for name, words in cues if any(word in text for word in words)), None)
