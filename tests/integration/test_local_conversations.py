"""Conversations on `make run`'s configuration: the real retrieval service on Milvus Lite with
the bundled samples, the orchestrator on the built-in local model, through the real RPCs. Each
follow-up (two and three turns, zh and en) is condensed to the standalone question that
retrieves the intended document first, on the right route; a new topic stays as asked; a
history over the limits is refused."""

from __future__ import annotations

import grpc
import pytest
from supermew.v1 import orchestrator_pb2

# The stack of the local-model end-to-end tests (one per module: retrieval on the samples,
# the orchestrator with no model endpoint).
from tests.integration.test_local_model_e2e import stub  # noqa: F401

pytestmark = pytest.mark.asyncio(loop_scope="module")

#: (earlier questions and answers, follow-up, standalone question, first doc, route)
CONVERSATIONS = [
    # en, two turns
    ([("What is the response time of the Premium support plan?", "Four hours[1].")],
     "And the Basic one?", "What is the response time of the Basic support plan?",
     "support_plan_basic.en.md", "answer"),
    ([("How much does the Premium support plan cost?", "49 euros per month[1].")],
     "How many support tickets can its customers open?",
     "How many support tickets can the Premium support plan's customers open?",
     "support_plan_premium.en.md", "answer"),
    ([("What does the Basic support plan include?", "")],
     "When is support available for this plan?",
     "When is support available for the Basic support plan?",
     "support_plan_basic.en.md", "answer"),
    ([("What is the Navigator's weapon?", "A brass sextant[1].")],
     "What about the Quartermaster?", "What is the Quartermaster's weapon?",
     "harbor_quest_roles.en.md", "answer"),
    ([("Which skill does the Lookout have?", "Eagle Eye[1].")], "What is its weapon?",
     "What is the Lookout's weapon?", "harbor_quest_roles.en.md", "answer"),
    ([("How often should a succulent be watered?", "Every two to three weeks in summer[1].")],
     "What about in winter?", "How often should a succulent be watered in winter?",
     "houseplant_care.en.html", "answer"),
    ([("How much water do succulents need?", "")], "How much light do they need?",
     "How much light do succulents need?", "houseplant_care.en.html", "answer"),
    ([("Where should succulents be placed?", "")], "What soil do they need?",
     "What soil do succulents need?", "houseplant_care.en.html", "answer"),
    ([("What does asyncio.wait_for do?", "It adds a timeout to any awaitable[1].")],
     "What does it raise when the timeout expires?",
     "What does asyncio.wait_for raise when the timeout expires?",
     "python_asyncio.en.md", "answer"),
    ([("Which plan answers tickets within four hours?", "The Premium support plan[1].")],
     "How much does it cost?", "How much does the Premium support plan cost?",
     "support_plan_premium.en.md", "answer"),
    # en, three turns
    ([("What is the Premium support plan?", ""), ("How much does it cost?", "49 euros[1].")],
     "And the Basic one?", "How much does the Basic support plan cost?",
     "support_plan_basic.en.md", "answer"),
    ([("What does the Basic support plan include?", ""),
      ("How many tickets can its customers open per month?", "Five[1].")],
     "And the Premium one?",
     "How many tickets can the Premium support plan's customers open per month?",
     "support_plan_premium.en.md", "answer"),
    ([("Which skill does the Navigator have?", "Star Chart[1]."),
      ("What is its weapon?", "A brass sextant[1].")],
     "What about the Lookout?", "What is the Lookout's weapon?",
     "harbor_quest_roles.en.md", "answer"),
    # zh, two turns
    ([("专业版云存储套餐每月多少钱？", "专业版云存储套餐每月 45 元[1]。")],
     "它包含多少存储空间？", "专业版云存储套餐包含多少存储空间？",
     "cloud_storage_pro.zh.md", "answer"),
    ([("丹瑾的武器是什么？", "珊瑚法杖[1]。")], "这个角色的技能是什么？", "丹瑾的技能是什么？",
     "star_guardians_roles.zh.md", "answer"),
    ([("丹瑾的武器是什么？", "珊瑚法杖[1]。")], "赤羽呢？", "赤羽的武器是什么？",
     "star_guardians_roles.zh.md", "answer"),
    ([("墨言的属性是什么？", "风[1]。")], "他的技能是什么？", "墨言的技能是什么？",
     "star_guardians_roles.zh.md", "answer"),
    ([("多肉要浇多少水？", "")], "冬天呢？", "冬天多肉要浇多少水？",
     "houseplant_care.zh.html", "answer"),
    ([("标准版云存储套餐的回收站保留多久？", "15 天[1]。")], "那专业版呢？",
     "专业版云存储套餐的回收站保留多久？", "cloud_storage_pro.zh.md", "answer"),
    ([("专业版云存储套餐支持几台设备同步？", "不限制[1]。")], "那家的团队共享文件夹最多几人？",
     "专业版云存储套餐的团队共享文件夹最多几人？", "cloud_storage_pro.zh.md", "answer"),
    ([("乌龙茶的代表品种有哪些？", "铁观音和大红袍[1]。")], "它属于什么茶？",
     "乌龙茶属于什么茶？", "tea_culture.zh.txt", "answer"),
    ([("绿茶属于什么茶？", "")], "那红茶呢？", "红茶属于什么茶？",
     "tea_culture.zh.txt", "answer"),
    ([("标准版云存储套餐每月多少钱？", "15 元[1]。")], "这个套餐支持几台设备同步？",
     "标准版云存储套餐支持几台设备同步？", "cloud_storage_standard.zh.md", "answer"),
    ([("哪个套餐提供团队共享文件夹？", "专业版云存储套餐提供最多 10 人的团队共享文件夹[1]。")],
     "它每月多少钱？", "专业版云存储套餐每月多少钱？", "cloud_storage_pro.zh.md", "answer"),
    # zh, three turns
    ([("专业版云存储套餐每月多少钱？", "45 元[1]。"), ("它包含多少存储空间？", "2 TB[1]。")],
     "那标准版呢？", "标准版云存储套餐包含多少存储空间？",
     "cloud_storage_standard.zh.md", "answer"),
    ([("丹瑾的武器是什么？", "珊瑚法杖[1]。"), ("赤羽呢？", "一对弯刀[1]。")],
     "他的技能是什么？", "赤羽的技能是什么？", "star_guardians_roles.zh.md", "answer"),
]  # fmt: skip

NEW_TOPICS = [
    ([("What is an event loop?", "")], "How do I bake sourdough bread?", None, "no_knowledge"),
    ([("成年人每晚需要睡多久？", "七到九小时[1]。")], "卧室温度多少合适？",
     "sleep_health.zh.md", "answer"),
]  # fmt: skip


def _request(earlier: list[tuple[str, str]], question: str) -> orchestrator_pb2.RunRequest:
    history = [orchestrator_pb2.ConversationTurn(question=q, answer=a) for q, a in earlier]
    return orchestrator_pb2.RunRequest(question=question, history=history)


async def test_the_table_holds_enough_conversations() -> None:
    assert len(CONVERSATIONS) >= 20
    assert {len(earlier) for earlier, *_ in CONVERSATIONS} == {1, 2}


@pytest.mark.parametrize(
    ("earlier", "question", "standalone", "filename", "route"),
    CONVERSATIONS,
    ids=[f"{len(earlier) + 1} turns: {question}" for earlier, question, *_ in CONVERSATIONS],
)
async def test_follow_up_retrieves_the_intended_document(
    stub: object,  # noqa: F811
    earlier: list[tuple[str, str]],
    question: str,
    standalone: str,
    filename: str,
    route: str,
) -> None:
    result = await stub.Run(_request(earlier, question))  # type: ignore[attr-defined]
    assert result.question == question
    assert result.standalone_question == result.rag_trace.query == standalone
    assert result.rag_trace.history_turns == len(earlier)
    assert not result.rag_trace.HasField("condense_error")
    assert result.route == route
    assert result.docs[0].filename == filename


@pytest.mark.parametrize(("earlier", "question", "filename", "route"), NEW_TOPICS)
async def test_new_topic_is_left_unchanged(
    stub: object,  # noqa: F811
    earlier: list[tuple[str, str]],
    question: str,
    filename: str | None,
    route: str,
) -> None:
    result = await stub.Run(_request(earlier, question))  # type: ignore[attr-defined]
    assert result.standalone_question == result.rag_trace.query == question
    assert result.route == route
    if filename is not None:
        assert result.docs[0].filename == filename
    # The same run as the question asked on its own, but for the conversation keys.
    alone = await stub.Run(orchestrator_pb2.RunRequest(question=question))  # type: ignore[attr-defined]
    assert (alone.route, [d.filename for d in alone.docs]) == (
        result.route,
        [d.filename for d in result.docs],
    )


async def test_history_over_the_limits_is_refused(stub: object) -> None:  # noqa: F811
    earlier = [("What is an event loop?", "x" * 900)] * 20 + [("And the Basic one?", "")]
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await stub.Run(_request(earlier, "How much does it cost?"))  # type: ignore[attr-defined]
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert raised.value.details() == "history: holds 21 turns, at most 20"
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await stub.Run(_request(earlier[:19], "How much does it cost?"))  # type: ignore[attr-defined]
    assert raised.value.details().startswith("history: is 17")


async def test_streamed_follow_up_shows_the_condensation(stub: object) -> None:  # noqa: F811
    request = _request([("专业版云存储套餐每月多少钱？", "")], "那标准版呢？")
    events = [e async for e in stub.StreamRun(request)]  # type: ignore[attr-defined]
    steps = [e.step for e in events if e.HasField("step")]
    assert [(s.label, s.detail) for s in steps[1:3]] == [
        ("正在结合对话历史理解问题...", "对话历史 1 轮"),
        ("已改写为独立问题", "标准版云存储套餐每月多少钱？"),
    ]
    assert events[-1].result.docs[0].filename == "cloud_storage_standard.zh.md"
