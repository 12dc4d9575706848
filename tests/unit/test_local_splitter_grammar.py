# ruff: noqa: E501  (one row a line: the table reads as a table)
"""The question splitter's grammar (LOCAL_MODEL.md §1): coordination inside a noun phrase stays
one question ("pros and cons", "small and medium businesses", "研究与开发部门"); a comparison
splits into one sub-question per compared item ("with", "to", "against" included), naming the
compared property; every sub-question ends with "?" or "？" in the question's script. [] = one
question (simple)."""

from __future__ import annotations

import pytest

from orchestrator_service.models.local.complexity import classify

CASES: list[tuple[str, list[str]]] = [
 # noun-phrase coordination: one question
 ("What are the pros and cons of remote work?", []),
 ("What tools help small and medium businesses with payroll?", []),
 ("Who leads the sales and marketing team?", []),
 ("What are the rules for research and development expenses?", []),
 ("Where are the terms and conditions of the Pro plan?", []),
 ("Who runs the health and safety training?", []),
 ("How do I make a bread and butter pudding?", []),
 ("What does the profit and loss statement show?", []),
 ("Which bank handles mergers and acquisitions in Asia?", []),
 ("What is the research and development budget?", []),
 ("研究与开发部门的负责人是谁？", []),
 ("研究和开发部门在几楼？", []),
 ("销售与市场部有多少人？", []),
 ("中小企业可以申请哪些补贴？", []),
 ("远程办公的优缺点是什么？", []),
 ("软硬件的保修期是多久？", []),
 # comparisons: one sub-question per item, naming the property
 ("Compare the Basic plan with the Premium plan", ["What is the Basic plan?", "What is the Premium plan?"]),
 ("Compare the Basic plan with the Premium plan in terms of price", ["What is the price of the Basic plan?", "What is the price of the Premium plan?"]),
 ("Compare the Orion Basic plan against the Orion Pro plan", ["What is the Orion Basic plan?", "What is the Orion Pro plan?"]),
 ("Compare the Basic plan to the Pro plan in terms of storage", ["What is the storage of the Basic plan?", "What is the storage of the Pro plan?"]),
 ("Compare Kestrel 2 and Kestrel 3 in terms of flight time", ["What is the flight time of Kestrel 2?", "What is the flight time of Kestrel 3?"]),
 ("What is the difference between TCP and UDP?", ["What is TCP?", "What is UDP?"]),
 ("Is the Kestrel 2 lighter than the Kestrel 3?", ["How light is the Kestrel 2?", "How light is the Kestrel 3?"]),
 ("Which is cheaper, the Basic plan or the Pro plan?", ["How cheap is the Basic plan?", "How cheap is the Pro plan?"]),
 ("比较A与B的价格", ["A的价格？", "B的价格？"]),
 ("比较标准版与专业版的价格", ["标准版的价格？", "专业版的价格？"]),
 ("比较绿茶和红茶的发酵程度", ["绿茶的发酵程度？", "红茶的发酵程度？"]),
 ("对比早班和晚班的时间", ["早班的时间？", "晚班的时间？"]),
 ("比较青岚茶园和白云茶园的门票价格", ["青岚茶园的门票价格？", "白云茶园的门票价格？"]),
 ("绿茶和红茶有什么区别？", ["绿茶的特点是什么？", "红茶的特点是什么？"]),
 # every sub-question ends with ? / ？
 ("介绍一下茶的历史以及它的冲泡方法", ["茶的历史？", "茶的冲泡方法？"]),
 ("丹瑾的属性是什么？武器是什么？", ["丹瑾的属性是什么？", "丹瑾的武器是什么？"]),
 ("KestrelDB是什么，它如何存储数据？", ["KestrelDB是什么？", "KestrelDB如何存储数据？"]),
 ("标准版套餐支持多少台设备同步，专业版呢？", ["标准版套餐支持多少台设备同步？", "专业版套餐支持多少台设备同步？"]),
 ("丹瑾、赤羽和墨言分别是什么定位？", ["丹瑾是什么定位？", "赤羽是什么定位？", "墨言是什么定位？"]),
 ("早班和晚班的负责人分别是谁？", ["早班的负责人是谁？", "晚班的负责人是谁？"]),
 ("What is asyncio? How does it handle timeouts?", ["What is asyncio?", "How does asyncio handle timeouts?"]),
 ("How do I install and configure KestrelDB?", ["How do I install KestrelDB?", "How do I configure KestrelDB?"]),
 ("How much water and light do succulents need?", ["How much water do succulents need?", "How much light do succulents need?"]),
 ("What are the benefits and risks of intermittent fasting?", ["What are the benefits of intermittent fasting?", "What are the risks of intermittent fasting?"]),
 ("What is the default port of KestrelDB and how do I change it?", ["What is the default port of KestrelDB?", "How do I change the default port of KestrelDB?"]),
 ("Tell me the price and storage of the Pro plan", ["Tell me the price of the Pro plan?", "Tell me the storage of the Pro plan?"]),
 ("What is the late fee, and how long is the loan period?", ["What is the late fee?", "How long is the loan period?"]),
 # still one question
 ("睡眠和咖啡因有什么关系？", []),
 ("How do sleep and caffeine interact?", []),
 ("Who leads the morning shift at Aurelia Bakery?", []),
 ("青岚茶园在哪里？", []),
]  # fmt: skip


def test_the_table_is_large_and_bilingual() -> None:
    chinese = [q for q, _ in CASES if any("\u4e00" <= c <= "\u9fff" for c in q)]
    assert len(CASES) >= 40 and len(chinese) >= 15 and len(CASES) - len(chinese) >= 15


@pytest.mark.parametrize(("question", "expected"), CASES, ids=[q for q, _ in CASES])
def test_splitter_grammar(question: str, expected: list[str]) -> None:
    result = classify(question)
    assert result.sub_questions == expected, result.reason
    assert (result.complexity == "complex") == bool(expected)
    for sub in result.sub_questions:
        assert sub.endswith("？" if any("\u4e00" <= c <= "\u9fff" for c in question) else "?")
