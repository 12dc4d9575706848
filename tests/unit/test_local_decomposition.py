"""The built-in model's decomposition table, written before the splitter: compound
questions split at clause level into grammatical, self-contained sub-questions that carry the
shared subject; single asks and relation questions stay simple. Expected sub-questions are
verbatim."""

from __future__ import annotations

import pytest

from orchestrator_service.models.local.complexity import classify

SIMPLE: list[str] = []

TABLE: list[tuple[str, list[str]]] = [
    # --- English: coordinated wh-clauses ------------------------------------------------------
    ("What does asyncio.gather do and how does asyncio.wait_for handle timeouts?",
     ["What does asyncio.gather do?", "How does asyncio.wait_for handle timeouts?"]),
    ("What is KestrelDB and how does it store data?",
     ["What is KestrelDB?", "How does KestrelDB store data?"]),
    ("What is the default port of KestrelDB and how do I change it?",
     ["What is the default port of KestrelDB?",
      "How do I change the default port of KestrelDB?"]),
    ("Where is the Eiffel Tower and how tall is it?",
     ["Where is the Eiffel Tower?", "How tall is the Eiffel Tower?"]),
    ("How does the event loop work and why does CPU-bound work block it?",
     ["How does the event loop work?", "Why does CPU-bound work block the event loop?"]),
    ("Who is the Navigator and what is its skill?",
     ["Who is the Navigator?", "What is the Navigator's skill?"]),
    ("What is KestrelDB, and does it support transactions?",
     ["What is KestrelDB?", "Does KestrelDB support transactions?"]),
    ("What is asyncio? How does it handle timeouts?",
     ["What is asyncio?", "How does asyncio handle timeouts?"]),
    # --- English: two predicates on one subject ----------------------------------------------
    ("How do I install and configure KestrelDB?",
     ["How do I install KestrelDB?", "How do I configure KestrelDB?"]),
    ("How does KestrelDB store and index data?",
     ["How does KestrelDB store data?", "How does KestrelDB index data?"]),
    # --- English: coordinated items under one frame ------------------------------------------
    ("What is the price and the storage capacity of the Premium plan?",
     ["What is the price of the Premium plan?",
      "What is the storage capacity of the Premium plan?"]),
    ("What are the benefits and risks of intermittent fasting?",
     ["What are the benefits of intermittent fasting?",
      "What are the risks of intermittent fasting?"]),
    ("How much water and light do succulents need?",
     ["How much water do succulents need?", "How much light do succulents need?"]),
    ("Does the Premium plan include phone support and a dedicated manager?",
     ["Does the Premium plan include phone support?",
      "Does the Premium plan include a dedicated manager?"]),
    ("What time is it in Tokyo and London?",
     ["What time is it in Tokyo?", "What time is it in London?"]),
    ("Can I use asyncio with threads and processes?",
     ["Can I use asyncio with threads?", "Can I use asyncio with processes?"]),
    ("What are the moons of Jupiter and Saturn respectively?",
     ["What are the moons of Jupiter?", "What are the moons of Saturn?"]),
    # --- English: comparisons of two named things --------------------------------------------
    ("Compare the Basic plan and the Premium plan in terms of price",
     ["What is the price of the Basic plan?", "What is the price of the Premium plan?"]),
    ("What is the difference between TCP and UDP?", ["What is TCP?", "What is UDP?"]),
    ("How does Python differ from Java?", ["What is Python?", "What is Java?"]),
    ("Is TCP faster than UDP?", ["How fast is TCP?", "How fast is UDP?"]),
    ("Which is cheaper, the Basic plan or the Premium plan?",
     ["How cheap is the Basic plan?", "How cheap is the Premium plan?"]),
    # --- English: single asks and relations stay simple --------------------------------------
    ("What is the relationship between sleep and caffeine?", SIMPLE),
    ("How do sleep and caffeine interact?", SIMPLE),
    ("How are tea and sleep related?", SIMPLE),
    ("Is there a connection between tea and insomnia?", SIMPLE),
    ("What is an event loop?", SIMPLE),
    ("What is the response time for support tickets?", SIMPLE),
    ("How does caffeine affect sleep?", SIMPLE),
    ("Why is Venus so hot?", SIMPLE),
    # --- Chinese: comparisons (比较/对比/区别) --------------------------------------------------
    ("比较绿茶和红茶的发酵程度", ["绿茶的发酵程度？", "红茶的发酵程度？"]),
    ("比较标准版和专业版云存储套餐的价格和容量",
     ["标准版云存储套餐的价格和容量？", "专业版云存储套餐的价格和容量？"]),
    ("比较丹瑾与卡卡罗的战斗定位", ["丹瑾的战斗定位？", "卡卡罗的战斗定位？"]),
    ("绿茶和红茶有什么区别？", ["绿茶的特点是什么？", "红茶的特点是什么？"]),
    ("绿茶与红茶的发酵程度有何不同？", ["绿茶的发酵程度？", "红茶的发酵程度？"]),
    # --- Chinese: 分别 / 各自 -------------------------------------------------------------------
    ("丹瑾、赤羽和墨言分别是什么定位？",
     ["丹瑾是什么定位？", "赤羽是什么定位？", "墨言是什么定位？"]),
    ("丹瑾和赤羽的属性分别是什么？", ["丹瑾的属性是什么？", "赤羽的属性是什么？"]),
    ("专业版套餐的价格和容量分别是多少？",
     ["专业版套餐的价格是多少？", "专业版套餐的容量是多少？"]),
    # --- Chinese: 和 / 与 / 以及 between items or clauses --------------------------------------
    ("介绍一下茶的历史以及它的冲泡方法", ["茶的历史？", "茶的冲泡方法？"]),
    ("茶的历史和文化", ["茶的历史？", "茶的文化？"]),
    ("请介绍绿茶、红茶和乌龙茶的发酵程度",
     ["绿茶的发酵程度？", "红茶的发酵程度？", "乌龙茶的发酵程度？"]),
    ("多肉植物需要多少水和光照？", ["多肉植物需要多少水？", "多肉植物需要多少光照？"]),
    ("asyncio.gather 做什么以及 asyncio.wait_for 如何处理超时？",
     ["asyncio.gather 做什么？", "asyncio.wait_for 如何处理超时？"]),
    # --- Chinese: several asks, the later ones leaning on the first's subject ----------------
    ("丹瑾的属性是什么？武器是什么？", ["丹瑾的属性是什么？", "丹瑾的武器是什么？"]),
    ("KestrelDB是什么，它如何存储数据？", ["KestrelDB是什么？", "KestrelDB如何存储数据？"]),
    ("丹瑾是什么定位，擅长什么？", ["丹瑾是什么定位？", "丹瑾擅长什么？"]),
    ("标准版套餐支持多少台设备同步，专业版呢？",
     ["标准版套餐支持多少台设备同步？", "专业版套餐支持多少台设备同步？"]),
    # --- Chinese: single asks and relations stay simple --------------------------------------
    ("睡眠和咖啡因的关系是什么", SIMPLE),
    ("咖啡因与睡眠质量有关吗？", SIMPLE),
    ("丹瑾与赤羽之间有什么联系？", SIMPLE),
    ("咖啡因对睡眠有什么影响？", SIMPLE),
    ("如何改善睡眠质量？", SIMPLE),
    ("成年人每晚需要睡多久？", SIMPLE),
    ("专业版云存储套餐包含多少存储空间？", SIMPLE),
    ("为什么金星那么热？", SIMPLE),
]  # fmt: skip


def test_the_table_is_large_and_bilingual() -> None:
    chinese = [q for q, _ in TABLE if any("\u4e00" <= c <= "\u9fff" for c in q)]
    assert len(TABLE) >= 40 and len(chinese) >= 20 and len(TABLE) - len(chinese) >= 20
    assert sum(1 for _, subs in TABLE if not subs) >= 10


@pytest.mark.parametrize(("question", "expected"), TABLE, ids=[q for q, _ in TABLE])
def test_decomposition_table(question: str, expected: list[str]) -> None:
    result = classify(question)
    assert result.sub_questions == expected, result.reason
    assert result.complexity == ("complex" if expected else "simple")
