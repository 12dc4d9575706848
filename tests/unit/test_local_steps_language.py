"""Progress texts in the question's language: an English question's steps are written in
English, a Chinese one keeps the catalogue's Chinese (docs/trace.md#progress-steps)."""

from __future__ import annotations

import re

import pytest

from orchestrator_service import steps
from orchestrator_service.steps import EN_TEXTS, QueueStepSink, in_english

CJK = re.compile(r"[\u3400-\u9fff]")
CATALOGUE = [
    value[1]
    for name, value in vars(steps).items()
    if name.isupper() and isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], str)
]


def test_every_catalogue_text_has_an_english_text() -> None:
    assert len(CATALOGUE) >= 20
    for label in [*CATALOGUE, steps.RECEIVED.label]:
        assert label in EN_TEXTS and not CJK.search(EN_TEXTS[label])


@pytest.mark.parametrize(
    ("chinese", "english"),
    [
        ("检索完成，找到 8 个片段", "Retrieval done, 8 chunks found"),
        ("重写检索完成，共 5 个片段", "Rewrite retrieval done, 5 chunks"),
        ("使用 HyDE 查询重新检索...", "Retrieving again with the HyDE query..."),
        ("已选择 Step-back 重写", "Step-back rewrite chosen"),
        ("正在合成 2 个子问题的检索结果...", "Synthesising the results of 2 sub-questions..."),
        ("合成完成，共 6 个去重片段", "Synthesis done, 6 distinct chunks"),
        ("子问题 1", "Sub-question 1"),
        ("What is TCP? 已加入并行检索", "What is TCP? added to the parallel retrieval"),
        ("置信度: 0.82", "confidence: 0.82"),
        ("理由: comparison: 2 sub-questions", "reason: comparison: 2 sub-questions"),
        ("叶子层 L3 召回，候选 20", "leaf level L3 recall, 20 candidates"),
        (
            "启用: True，应用: False，替换片段: 0",
            "enabled: True, applied: False, chunks replaced: 0",
        ),
        ("L3 召回，候选 20，合并替换 1", "L3 recall, 20 candidates, 1 merged"),
        ("模式: hybrid", "mode: hybrid"),
    ],
)
def test_texts_with_values_in_english(chinese: str, english: str) -> None:
    assert in_english(chinese) == english


def test_text_that_is_not_the_catalogue_stays_as_written() -> None:
    assert in_english("The knowledge base describes several roles.") == (
        "The knowledge base describes several roles."
    )
    assert in_english("知识库里有多个角色") == "知识库里有多个角色"


@pytest.mark.parametrize(
    ("question", "label"),
    [
        ("What is an event loop?", "Analysing the question's complexity..."),
        ("成年人每晚需要睡多久？", "正在分析问题复杂度..."),
        ("KestrelDB是什么？", "正在分析问题复杂度..."),
    ],
)
def test_the_sink_writes_steps_in_the_question_language(question: str, label: str) -> None:
    sink = QueueStepSink(clock=lambda: 0.0)
    sink.for_question(question)
    sink.emit(*steps.CLASSIFY)
    sink.emit(*steps.GRADE_REWRITE, steps.confidence_detail(0.5))
    assert sink.steps[0].label == label
    english = not CJK.search(question)
    assert (sink.steps[1].detail == "confidence: 0.50") is english
