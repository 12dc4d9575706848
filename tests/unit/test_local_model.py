"""The built-in local model's three tasks on Chinese and English inputs (LOCAL_MODEL rules)."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator_service.models.local import LocalModel
from orchestrator_service.models.local.complexity import classify
from orchestrator_service.models.local.grading import grade
from orchestrator_service.models.local.rewrite import rewrite

ROLES_ZH = (
    "# 《星海守望者》的角色\n\n## 丹瑾\n丹瑾是治疗角色，属性为水。\n\n"
    "## 赤羽\n赤羽是近战输出角色，属性为火。\n\n## 墨言\n墨言是远程辅助角色，属性为风。"
)
ROLES_EN = (
    "# Roles in Harbor Quest\n\n## Navigator\nThe Navigator is a support role. Its skill is Star "
    "Chart.\n\n## Lookout\nThe Lookout is a ranged role. Its skill is Eagle Eye."
)
SLEEP_ZH = "# 睡眠与健康\n\n成年人每晚通常需要七到九小时的睡眠。咖啡因的半衰期大约是五到六小时。"
BASIC = "# Basic Support Plan\n\nThe response time for support tickets is two business days."
PREMIUM = "# Premium Support Plan\n\nThe response time for support tickets is four hours."
ASYNCIO = "# asyncio\n\nA single event loop runs many coroutines. asyncio.wait_for adds a timeout."


def doc(text: str, filename: str, rank: int = 1) -> dict[str, Any]:
    return {"text": text, "filename": filename, "score": 2 / (60 + rank), "rrf_rank": rank}


@pytest.mark.parametrize(
    ("question", "reason", "subs"),
    [
        ("比较绿茶和红茶的发酵程度", "comparison", ["绿茶的发酵程度？", "红茶的发酵程度？"]),
        ("绿茶和红茶有什么区别？", "comparison", ["绿茶的特点是什么？", "红茶的特点是什么？"]),
        ("丹瑾、赤羽和墨言分别是什么定位？", "distribution",
         ["丹瑾是什么定位？", "赤羽是什么定位？", "墨言是什么定位？"]),
        ("丹瑾的属性是什么？武器是什么？", "multiple_questions",
         ["丹瑾的属性是什么？", "丹瑾的武器是什么？"]),
        ("介绍一下茶的历史以及它的冲泡方法", "enumeration", ["茶的历史？", "茶的冲泡方法？"]),
        ("Compare the Basic plan and the Premium plan in terms of price", "comparison",
         ["What is the price of the Basic plan?", "What is the price of the Premium plan?"]),
        ("What is asyncio? How does it handle timeouts?", "multiple_questions",
         ["What is asyncio?", "How does asyncio handle timeouts?"]),
        ("What are the moons of Jupiter and Saturn respectively?", "distribution",
         ["What are the moons of Jupiter?", "What are the moons of Saturn?"]),
    ],
)  # fmt: skip
def test_complex_questions_split_on_their_cue(question: str, reason: str, subs: list[str]) -> None:
    result = classify(question)
    assert (result.complexity, result.sub_questions) == ("complex", subs)
    assert result.reason.startswith(reason)


@pytest.mark.parametrize(
    "question",
    ["如何改善睡眠质量？", "睡眠和咖啡因的关系是什么", "How do sleep and caffeine interact?"],
)
def test_single_asks_and_relations_are_simple(question: str) -> None:
    result = classify(question)
    assert (result.complexity, result.sub_questions) == ("simple", [])


def test_at_most_four_sub_questions() -> None:
    result = classify("A、B、C、D和E分别是什么？")
    assert len(result.sub_questions) == 4 and "of 5 kept" in result.reason


def test_grade_answer_zh_and_en() -> None:
    zh = grade("成年人每晚需要睡多久？", [doc(SLEEP_ZH, "sleep.zh.md")])
    en = grade("What is an event loop?", [doc(ASYNCIO, "asyncio.en.md")])
    for verdict in (zh, en):
        assert (verdict.relevance, verdict.answerability, verdict.route) == (
            "strong",
            "sufficient",
            "answer",
        )


def test_grade_no_knowledge_names_the_missing_terms() -> None:
    verdict = grade("How do I bake sourdough bread?", [doc(ASYNCIO, "asyncio.en.md")])
    assert (verdict.relevance, verdict.route) == ("none", "no_knowledge")
    assert "sourdough" in verdict.reason


def test_grade_missing_slot_zh_then_resolved_by_the_answer() -> None:
    verdict = grade("这个角色的属性是什么？", [doc(ROLES_ZH, "roles.zh.md")])
    assert (verdict.ambiguity, verdict.route) == ("missing_slot", "clarify")
    assert verdict.missing_slots == ["角色"] and verdict.hitl_options == ["丹瑾", "赤羽", "墨言"]
    resumed = grade("丹瑾：这个角色的属性是什么？", [doc(ROLES_ZH, "roles.zh.md")])
    assert (resumed.ambiguity, resumed.route) == ("none", "answer")


def test_grade_missing_slot_en() -> None:
    verdict = grade("What is the skill of this role?", [doc(ROLES_EN, "roles.en.md")])
    assert verdict.missing_slots == ["role"] and verdict.hitl_options == ["Navigator", "Lookout"]
    assert verdict.hitl_prompt.startswith("The knowledge base describes several roles")


def test_grade_multiple_candidates_offers_document_titles() -> None:
    docs = [doc(BASIC, "basic.en.md", 1), doc(PREMIUM, "premium.en.md", 2)]
    verdict = grade("What is the response time for support tickets?", docs)
    assert (verdict.ambiguity, verdict.route) == ("multiple_candidates", "scope_select")
    assert verdict.hitl_options == ["Basic Support Plan", "Premium Support Plan"]
    named = grade("What is the response time for Premium support tickets?", docs)
    assert named.ambiguity == "none"


def test_grade_partial_when_no_chunk_covers_every_term_suggests_rewrite() -> None:
    docs = [doc(SLEEP_ZH, "sleep.zh.md"), doc("# 茶\n\n绿茶不经过发酵。", "tea.zh.txt", 2)]
    verdict = grade("咖啡因和绿茶发酵的半衰期", docs)
    assert verdict.answerability == "partial" and verdict.route == "rewrite"
    # Asked only if the rewrite does not help: names what the best chunk lacks.
    assert (
        verdict.hitl_prompt
        == "我找到了相关内容，但没有一段同时提到「绿茶」、「发酵」。请补充一下你具体想问的条件。"
    )
    english = grade("Do coroutines run on threads?", [doc(ASYNCIO, "a.md")])
    assert english.answerability == "partial" and "“threads”" in english.hitl_prompt


def test_rewrite_step_back_for_specific_questions() -> None:
    plan = rewrite("Does Python 3.12 asyncio.wait_for raise TimeoutError?", [doc(ASYNCIO, "a.md")])
    assert plan.method == "step_back" and plan.hyde_document == ""
    assert plan.step_back_question.startswith("What are the general rules and principles of")
    zh = rewrite("如果晚上十点喝了咖啡，多久能睡着？", [doc(SLEEP_ZH, "sleep.zh.md")])
    assert zh.method == "step_back" and "睡眠与健康" in zh.step_back_question


def test_rewrite_hyde_uses_the_evidence_vocabulary_and_is_marked() -> None:
    zh = rewrite("睡眠时长", [doc(SLEEP_ZH, "sleep.zh.md")])
    assert zh.method == "hyde" and zh.step_back_question == ""
    assert zh.hyde_document.startswith("假设性回答") and "七到九小时" in zh.hyde_document
    en = rewrite("event loop", [doc(ASYNCIO, "a.md")])
    assert en.hyde_document.startswith("Hypothetical answer") and "coroutines" in en.hyde_document


def test_rewrite_hyde_quotes_the_chunk_that_words_the_answer_below_the_window() -> None:
    """The best-covering chunk ranked 5th (BM25 missed it): HyDE reads every retrieved chunk
    and leads with that chunk's sentence, which covers the most terms."""
    partial = [
        doc("# Light\n\nSucculents need full sun.", "plants.html", 1),
        doc("# Problems\n\nYellow leaves mean too much water.", "plants.html", 2),
        doc("# Soil\n\nSucculents need a gritty soil.", "plants.html", 3),
        doc("# Care\n\nGroup plants with similar needs.", "plants.html", 4),
    ]
    sentence = "A succulent needs watering once its soil is dry."
    answer = doc(sentence, "plants.html", 5)
    plan = rewrite("How much water do succulents need?", [*partial, answer])
    assert plan.method == "hyde"
    assert plan.hyde_document.index(sentence) < plan.hyde_document.index("Succulents need")
    assert grade("How much water do succulents need?", partial).answerability == "partial"


async def test_local_model_serves_the_model_client_interface() -> None:
    model = LocalModel()
    assert model.name == "local"
    assert (await model.classify_complexity("比较绿茶和红茶的发酵程度")).complexity == "complex"
    graded = await model.grade_evidence("What is an event loop?", [doc(ASYNCIO, "a.md")])
    assert graded.route == "answer"
    assert (await model.rewrite_query("event loop", [doc(ASYNCIO, "a.md")])).method == "hyde"
    await model.aclose()
