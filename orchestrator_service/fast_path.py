"""The local fast path of classification (docs/trace.md#classification): obviously simple
questions are classified without a model call."""

from __future__ import annotations

import re

from shared.lang import CJK_CHAR

REASON_SINGLE_FACT = "obvious_simple_fast_path:single_fact_marker"
REASON_SHORT_SINGLE_INTENT = "obvious_simple_fast_path:short_single_intent"

MAX_FAST_PATH_CHARS = 48
MAX_SHORT_INTENT_CHARS = 18

COMPLEX_MARKERS: tuple[str, ...] = (
    "比较", "对比", "区别", "差异", "优缺点", "优势", "劣势", "分析", "总结", "综合", "原因",
    "成因", "影响", "方案", "步骤", "如何", "为什么", "以及", "同时", "并且", "和", "与", "谁更",
    "compare", "versus", "difference", "different", "analyze", "summarize", "trade-off",
    "pros and cons", "why ", "how ", "complex",
)  # fmt: skip
DIMENSION_MARKERS: tuple[str, ...] = (
    "属性", "武器", "定位", "技能", "机制", "参数", "规格", "性能", "价格", "优点", "缺点", "作用",
)  # fmt: skip
SIMPLE_MARKERS: tuple[str, ...] = (
    "是什么", "是谁", "哪里", "何时", "多少", "是否", "哪个", "哪种", "属性", "参数", "规格",
    "定义", "含义", "what is", "who is", "where is", "when is", "how many", "which",
)  # fmt: skip

_WHITESPACE = re.compile(r"\s+")
_TRAILING_PUNCTUATION = "?？。.!！"


def fast_path_reason(question: str) -> str | None:
    """The fast-path reason when `question` is obviously simple, else None (ask the model).

    The rules apply in order to the stripped, whitespace-collapsed, lower-cased question:
    too long (> 48) → model; a complex marker → model; "、" → model; CJK with ≥ 2 spaces →
    model; ≥ 2 distinct dimension markers → model; more than one of ?？;； → model; a simple
    marker → `single_fact_marker`; ≤ 18 characters without trailing punctuation →
    `short_single_intent`; otherwise → model.
    """
    text = _WHITESPACE.sub(" ", question.strip()).lower()
    if not text or len(text) > MAX_FAST_PATH_CHARS:
        return None
    if any(marker in text for marker in COMPLEX_MARKERS):
        return None
    if "、" in text:
        return None
    if CJK_CHAR.search(text) and text.count(" ") >= 2:
        return None
    if sum(marker in text for marker in DIMENSION_MARKERS) >= 2:
        return None
    if sum(text.count(mark) for mark in "?？;；") > 1:
        return None
    if any(marker in text for marker in SIMPLE_MARKERS):
        return REASON_SINGLE_FACT
    if len(text.rstrip(_TRAILING_PUNCTUATION)) <= MAX_SHORT_INTENT_CHARS:
        return REASON_SHORT_SINGLE_INTENT
    return None
