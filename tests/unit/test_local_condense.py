"""The local `condense_question` (LOCAL_MODEL.md §5) as tables: the earlier questions (oldest
first), the follow-up, and the standalone question it becomes — pronouns and demonstratives,
ellipsis, changed attributes, "the other" and new topics, in zh and en, over conversations on
the bundled samples and a few products of their own."""

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
    (["What is the response time of the Premium support plan?"], "And the basic plan?",
     "What is the response time of the basic plan?"),
    (["What is the response time of the Premium support plan?"], "And the price?",
     "What is the price of the Premium support plan?"),
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


#: Follow-ups keeping the subject and changing the attribute, or naming "the other" of two things
#: named earlier (LOCAL_MODEL.md §5): (earlier turns as (question, answer), oldest first, the
#: follow-up, the standalone question) — zh and en, after one earlier turn (a two-turn
#: conversation) or two (three-turn; the subject may come from the first).
FOLLOW_UP_FORMS = [
    # attribute, en
    ([("What is the battery life of the Aurora X2 laptop?", "Twelve hours[1].")],
     "what about its weight?", "What is the weight of the Aurora X2 laptop?"),
    ([("What is the response time of the Premium support plan?", "Four hours[1].")],
     "And its price?", "What is the price of the Premium support plan?"),
    ([("What is the Quartermaster's weapon?", "A heavy boarding axe[1].")], "Its skill?",
     "What is the skill of the Quartermaster?"),
    ([("Why is Venus the hottest planet?", "Its atmosphere traps heat[1].")],
     "And its surface temperature?", "What is the surface temperature of Venus?"),
    ([("What is the Lookout's weapon?", "A longbow[1].")], "And his skill?",
     "What is the skill of the Lookout?"),
    ([("What is the Premium support plan?", "A plan with a named contact[1]."),
      ("Who can buy it?", "Any account[1].")],
     "And its response time?", "What is the response time of the Premium support plan?"),
    ([("What is the Quartermaster?", "A defensive role[1]."),
      ("What is its skill?", "Iron Stores[1].")],
     "And its weapon?", "What is the weapon of the Quartermaster?"),
    ([("How much does the Premium support plan cost?", "49 euros per month[1]."),
      ("What about its response time?", "Four hours[1].")],
     "And the Basic one?", "What is the response time of the Basic support plan?"),
    ([("What is the Navigator's skill?", "Star Chart[1].")],
     "What about the Quartermaster's weapon?", "What is the weapon of the Quartermaster?"),
    ([("What is the response time of the Premium support plan?", "Four hours[1].")],
     "And the Basic plan's price?", "What is the price of the Basic support plan?"),
    # attribute, zh
    ([("云途X5手机的电池容量是多少？", "5000 毫安时[1]。")], "那它的价格呢？",
     "云途X5手机的价格是多少？"),
    ([("云途X5手机的电池容量是多少？", "5000 毫安时[1]。")], "它的保修期多久？",
     "云途X5手机的保修期多久？"),
    ([("丹瑾的武器是什么？", "珊瑚法杖[1]。")], "那她的技能呢？", "丹瑾的技能是什么？"),
    ([("赤羽的属性是什么？", "火[1]。")], "武器呢？", "赤羽的武器是什么？"),
    ([("云途X5手机的屏幕有多大？", "6.7 英寸[1]。"), ("它支持快充吗？", "支持[1]。")],
     "那它的重量呢？", "云途X5手机的重量是多少？"),
    ([("墨言是什么角色？", "远程辅助角色[1]。"), ("他的武器是什么？", "竹制长弓[1]。")],
     "那技能呢？", "墨言的技能是什么？"),
    ([("乌龙茶属于什么茶？", "半发酵茶[1]。"), ("它的代表品种有哪些？", "铁观音[1]。")],
     "那它的冲泡水温呢？", "乌龙茶的冲泡水温是多少？"),
    ([("丹瑾的武器是什么？", "珊瑚法杖[1]。"), ("谁的属性是火？", "")],
     "那她的技能呢？", "丹瑾的技能是什么？"),
    ([("专业版云存储套餐包含多少存储空间？", "2 TB[1]。")], "那标准版的价格呢？",
     "标准版云存储套餐的价格是多少？"),
    ([("丹瑾的武器是什么？", "珊瑚法杖[1]。")], "赤羽的技能呢？", "赤羽的技能是什么？"),
    # the other, en
    ([("What is the response time of the Basic support plan?", "Two business days[1].")],
     "And the Premium one?", "What is the response time of the Premium support plan?"),
    ([("What is the price of the Aurora X2 laptop?", "899 euros[1]."),
      ("And the Aurora X3?", "1,199 euros[1].")],
     "what about the other one?", "What is the price of the Aurora X2 laptop?"),
    ([("What is the price of the Aurora X2 laptop?", "899 euros[1]."),
      ("And the Aurora X3?", "1,199 euros[1].")],
     "And the weight of the other one?", "What is the weight of the Aurora X2 laptop?"),
    ([("Does the Basic support plan include phone support?",
       "No, phone support comes with the Premium support plan[1].")],
     "How much does the other one cost?", "How much does the Premium support plan cost?"),
    ([("Does the Basic support plan include phone support?",
       "No, phone support comes with the Premium support plan[1].")],
     "And the other plan's price?", "What is the price of the Premium support plan?"),
    ([("What is the Navigator's skill?", "Star Chart[1]."),
      ("What about the Quartermaster?", "Iron Stores[1].")],
     "What is the other one's weapon?", "What is the Navigator's weapon?"),
    ([("How much does the Premium support plan cost?", "49 euros per month[1]."),
      ("And the Basic one?", "No extra cost[1].")],
     "What is the response time of the other one?",
     "What is the response time of the Premium support plan?"),
    # the other, zh
    ([("丹瑾的武器是什么？", "珊瑚法杖[1]。"), ("赤羽呢？", "一对弯刀[1]。")], "另一个呢？",
     "丹瑾的武器是什么？"),
    ([("标准版云存储套餐每月多少钱？", "15 元[1]。"), ("那专业版呢？", "45 元[1]。")],
     "另外那个套餐呢？", "标准版云存储套餐每月多少钱？"),
    ([("云途X5手机多少钱？", "2999 元[1]。"), ("那云途X6呢？", "3999 元[1]。")],
     "另一个的保修期多久？", "云途X5手机的保修期多久？"),
    ([("墨言的属性是什么？", "风[1]。"), ("赤羽呢？", "火[1]。")], "那另一个角色的武器呢？",
     "墨言的武器是什么？"),
    ([("绿茶适合用多少度的水泡？", "八十度左右[1]。"), ("那红茶呢？", "接近沸腾的水[1]。")],
     "另一种的代表品种有哪些？", "绿茶的代表品种有哪些？"),
    ([("标准版云存储套餐提供团队共享文件夹吗？",
       "不提供，专业版云存储套餐提供最多 10 人的团队共享文件夹[1]。")],
     "另一个每月多少钱？", "专业版云存储套餐每月多少钱？"),
]  # fmt: skip


@pytest.mark.parametrize(("earlier", "question", "standalone"), FOLLOW_UP_FORMS)
def test_attribute_change_and_the_other(
    earlier: list[tuple[str, str]], question: str, standalone: str
) -> None:
    assert condense(question, [Turn(q, a) for q, a in earlier]) == standalone


def test_the_other_needs_two_things_named() -> None:
    """With one thing named and no sibling in the answers, "the other" is left as asked."""
    history = [Turn("What is the price of the Aurora X2 laptop?", "899 euros[1].")]
    assert condense("What about the other one?", history) == "What about the other one?"
    assert condense("另一个呢？", [Turn("丹瑾的武器是什么？", "珊瑚法杖[1]。")]) == "另一个呢？"


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
