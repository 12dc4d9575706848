"""The local `condense_question` (LOCAL_MODEL.md §5) as tables: the earlier questions (oldest
first), the follow-up, and the standalone question it becomes — pronouns and demonstratives,
ellipsis and new topics, in zh and en, over conversations on the bundled samples."""

from __future__ import annotations

import pytest

from orchestrator_service.conversation import Turn
from orchestrator_service.models.local import LocalModel
from orchestrator_service.models.local.condense import condense, en_entity, zh_entity

PRONOUNS = [
    (["What is the Premium support plan?"], "How much does it cost?",
     "How much does the Premium support plan cost?"),
    (["Which skill does the Lookout have?"], "What is its weapon?",
     "What is the Lookout's weapon?"),
    (["Which skill does the Navigator have?", "What about the Quartermaster?"],
     "What is his weapon?", "What is the Quartermaster's weapon?"),
    (["How much water do succulents need?"], "How much light do they need?",
     "How much light do succulents need?"),
    (["What does asyncio.wait_for do?"], "What does it raise when the timeout expires?",
     "What does asyncio.wait_for raise when the timeout expires?"),
    (["What does the Basic support plan include?"], "When is support available for this plan?",
     "When is support available for the Basic support plan?"),
    (["Which weapon does the Lookout use?"], "Which skill does this role have?",
     "Which skill does the Lookout have?"),
    (["How much does the Premium support plan cost?"],
     "And how many tickets can their customers open?",
     "How many tickets can the Premium support plan's customers open?"),
    (["专业版云存储套餐每月多少钱？"], "它包含多少存储空间？",
     "专业版云存储套餐包含多少存储空间？"),
    (["丹瑾的武器是什么？"], "这个角色的技能是什么？", "丹瑾的技能是什么？"),
    (["墨言的属性是什么？"], "他的技能是什么？", "墨言的技能是什么？"),
    (["专业版云存储套餐支持几台设备同步？"], "那家的团队共享文件夹最多几人？",
     "专业版云存储套餐的团队共享文件夹最多几人？"),
    (["乌龙茶的代表品种有哪些？"], "它属于什么茶？", "乌龙茶属于什么茶？"),
    (["标准版云存储套餐的回收站保留多久？"], "这个套餐每月多少钱？",
     "标准版云存储套餐每月多少钱？"),
]  # fmt: skip

ELLIPSIS = [
    (["What is the response time of the Premium support plan?"], "And the Basic one?",
     "What is the response time of the Basic support plan?"),
    (["What is the Navigator's weapon?"], "What about the Quartermaster?",
     "What is the Quartermaster's weapon?"),
    (["How often should a succulent be watered?"], "What about in winter?",
     "How often should a succulent be watered in winter?"),
    (["How often should a succulent be watered in summer?"], "And in winter?",
     "How often should a succulent be watered in winter?"),
    (["专业版云存储套餐包含多少存储空间？"], "那标准版呢？", "标准版云存储套餐包含多少存储空间？"),
    (["丹瑾的武器是什么？"], "赤羽呢？", "赤羽的武器是什么？"),
    (["多肉要浇多少水？"], "冬天呢？", "冬天多肉要浇多少水？"),
    (["夏天多肉要浇多少水？"], "那冬天呢？", "冬天多肉要浇多少水？"),
    (["绿茶适合用多少度的水泡？"], "那红茶呢？", "红茶适合用多少度的水泡？"),
    (["标准版云存储套餐的回收站保留多久？"], "那专业版的呢？",
     "专业版云存储套餐的回收站保留多久？"),
]  # fmt: skip

NEW_TOPICS = [
    (["What is an event loop?"], "How do I bake sourdough bread?"),
    (["What is the hottest planet?"], "What is the largest planet?"),
    (["What is the hottest planet?"], "What is asyncio and how is it used?"),
    (["How many days per week can employees work remotely?"], "What are the core hours?"),
    (["成年人每晚需要睡多久？"], "卧室温度多少合适？"),
    (["成年人每晚需要睡多久？"], "睡前应该避免什么？"),
    (["丹瑾的武器是什么？"], "KestrelDB是什么，它如何存储数据？"),
    (["丹瑾的武器是什么？"], "量子计算机的工作原理是什么？"),
]  # fmt: skip

THREE_TURNS = [
    (["What is the Premium support plan?", "How much does it cost?"], "And the Basic one?",
     "How much does the Basic support plan cost?"),
    (["专业版云存储套餐每月多少钱？", "它包含多少存储空间？"], "那标准版呢？",
     "标准版云存储套餐包含多少存储空间？"),
    (["丹瑾的武器是什么？", "赤羽呢？"], "他的技能是什么？", "赤羽的技能是什么？"),
    (["How much water do succulents need?", "What about in winter?"],
     "How much light do they need?", "How much light do succulents need?"),
]  # fmt: skip


#: A previous question that names no entity ("Which plan …?"): the answer's opening names it.
FROM_ANSWERS = [
    ([("Which plan answers tickets within four hours?", "The Premium support plan[1]. It …")],
     "How much does it cost?", "How much does the Premium support plan cost?"),
    ([("哪个套餐提供团队共享文件夹？", "专业版云存储套餐提供最多 10 人的团队共享文件夹[1]。")],
     "它每月多少钱？", "专业版云存储套餐每月多少钱？"),
    ([("Who may work remotely?", "Employees after their probation period[1].")],
     "How many days can they work remotely?", "How many days can they work remotely?"),
    # The question's own entity comes first.
    ([("What is the Navigator's weapon?", "The brass sextant of the Quartermaster[1].")],
     "What is its skill?", "What is the Navigator's skill?"),
]  # fmt: skip


@pytest.mark.parametrize(("earlier", "question", "standalone"), FROM_ANSWERS)
def test_entity_from_the_answer(
    earlier: list[tuple[str, str]], question: str, standalone: str
) -> None:
    assert condense(question, [Turn(q, a) for q, a in earlier]) == standalone


def _turns(questions: list[str]) -> list[Turn]:
    return [Turn(q, "") for q in questions]


@pytest.mark.parametrize(("earlier", "question", "standalone"), PRONOUNS + ELLIPSIS + THREE_TURNS)
def test_follow_up_becomes_standalone(earlier: list[str], question: str, standalone: str) -> None:
    assert condense(question, _turns(earlier)) == standalone


@pytest.mark.parametrize(("earlier", "question"), NEW_TOPICS)
def test_new_topic_is_returned_unchanged(earlier: list[str], question: str) -> None:
    assert condense(question, _turns(earlier)) == question


@pytest.mark.parametrize(
    ("question", "entity"),
    [
        ("What is the response time of the Premium support plan?", "the Premium support plan"),
        ("How much does the Premium support plan cost?", "the Premium support plan"),
        ("What is the Navigator's weapon?", "the Navigator"),
        ("How much water do succulents need?", "succulents"),
        ("What is an event loop?", "an event loop"),
        ("What does asyncio.gather do?", "asyncio.gather"),
        ("Who may work remotely?", None),
    ],
)
def test_english_entity(question: str, entity: str | None) -> None:
    assert en_entity(question) == entity


@pytest.mark.parametrize(
    ("question", "entity"),
    [
        ("专业版云存储套餐每月多少钱？", "专业版云存储套餐"),
        ("丹瑾的武器是什么？", "丹瑾"),
        ("成年人每晚需要睡多久？", "成年人"),
        ("那标准版呢？", "标准版"),
        ("它包含多少存储空间？", None),
        ("这个角色的属性是什么？", None),
    ],
)
def test_chinese_entity(question: str, entity: str | None) -> None:
    assert zh_entity(question) == entity


def test_without_history_or_without_an_entity_the_question_is_kept() -> None:
    assert condense("How much does it cost?", []) == "How much does it cost?"
    assert condense("How much does it cost?", [Turn("Who may work remotely?")]) == (
        "How much does it cost?"
    )
    assert condense("它多少钱？", [Turn("   ")]) == "它多少钱？"


async def test_local_model_task_output() -> None:
    model = LocalModel(semantic=False)
    history = [Turn("专业版云存储套餐每月多少钱？", "45 元")]
    result = await model.condense_question("那标准版呢？", history)
    assert result.standalone_question == "标准版云存储套餐每月多少钱？"
