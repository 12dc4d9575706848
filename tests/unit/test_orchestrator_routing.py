"""The pure decision tables of the orchestrator: fast path (docs/trace.md#classification), route
resolver, status mapping and default HITL prompts (docs/trace.md#the-route-resolver,
#follow-up-prompt-and-cleared-evidence)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator_service.fast_path import (
    REASON_SHORT_SINGLE_INTENT,
    REASON_SINGLE_FACT,
    fast_path_reason,
)
from orchestrator_service.models.base import EvidenceGrade
from orchestrator_service.routing import (
    DEFAULT_CLARIFY_PROMPT,
    DEFAULT_SCOPE_PROMPT,
    hitl_prompt_for,
    is_hitl,
    resolve_route,
    retrieval_status_for,
)


@pytest.mark.parametrize(
    ("question", "reason"),
    [
        ("丹瑾是什么属性？", REASON_SINGLE_FACT),
        ("What is RRF?", REASON_SINGLE_FACT),
        ("  年假   天数  ", REASON_SHORT_SINGLE_INTENT),
        ("退款期限？", REASON_SHORT_SINGLE_INTENT),
        ("比较丹瑾与卡卡罗的战斗定位", None),  # complex marker
        ("丹瑾 卡卡罗 属性 武器类型 战斗定位", None),  # CJK + spaces
        ("丹瑾、卡卡罗", None),  # 、
        ("这个角色的武器和技能", None),  # 和
        ("角色的武器技能介绍一下吧", None),  # two dimension markers
        ("是什么？是谁？", None),  # two question marks
        ("why is the sky blue", None),
        ("", None),
        ("x" * 49, None),  # too long
        ("请详细介绍一下这个产品线里面最新版本的完整发布说明内容", None),  # long, no marker
    ],
)
def test_fast_path(question: str, reason: str | None) -> None:
    assert fast_path_reason(question) == reason


def _grade(
    relevance: str, answerability: str, route: str, ambiguity: str = "none"
) -> EvidenceGrade:
    return EvidenceGrade(
        relevance=relevance, answerability=answerability, route=route, ambiguity=ambiguity
    )


# (relevance, answerability, ambiguity, model route, has_docs, rewrite_count, sub) -> final
ROUTE_TABLE = [
    ("strong", "sufficient", "none", "answer", False, 0, False, "no_knowledge"),  # rule 1
    ("none", "sufficient", "none", "answer", True, 0, False, "no_knowledge"),  # rule 1
    ("none", "none", "missing_slot", "clarify", True, 0, False, "no_knowledge"),  # 1 before 2
    ("weak", "partial", "missing_slot", "answer", True, 0, False, "clarify"),  # rule 2
    ("strong", "sufficient", "missing_slot", "answer", True, 0, False, "clarify"),  # 2 before 4
    ("weak", "partial", "multiple_candidates", "rewrite", True, 1, False, "scope_select"),  # 3
    ("strong", "sufficient", "none", "answer", True, 1, False, "answer"),  # rule 4
    ("weak", "partial", "none", "rewrite", True, 0, True, "answer"),  # rule 5: sub partial
    ("weak", "sufficient", "none", "no_knowledge", True, 0, True, "answer"),  # rule 5
    ("weak", "none", "none", "rewrite", True, 0, True, "no_knowledge"),  # rule 5b
    ("weak", "none", "none", "rewrite", True, 0, False, "rewrite"),  # rule 6
    ("weak", "partial", "none", "rewrite", True, 1, False, "clarify"),  # rule 7 partial
    ("weak", "none", "none", "rewrite", True, 1, False, "no_knowledge"),  # rule 7 other
    ("strong", "partial", "none", "answer", True, 0, False, "rewrite"),  # rule 8
    ("strong", "partial", "none", "answer", True, 1, False, "clarify"),  # rule 8 budget used
    ("weak", "partial", "none", "clarify", True, 0, False, "rewrite"),  # clarify not honoured
    ("strong", "sufficient", "none", "clarify", True, 0, False, "answer"),  # rule 9
    ("weak", "sufficient", "none", "answer", True, 0, False, "no_knowledge"),  # rule 10
    ("weak", "none", "none", "scope_select", True, 0, False, "no_knowledge"),  # rule 10
]


@pytest.mark.parametrize(
    ("relevance", "answerability", "ambiguity", "proposed", "has_docs", "count", "sub", "final"),
    ROUTE_TABLE,
)
def test_resolve_route_priority_table(
    relevance, answerability, ambiguity, proposed, has_docs, count, sub, final
) -> None:
    grade = _grade(relevance, answerability, proposed, ambiguity)
    assert resolve_route(grade, has_docs=has_docs, rewrite_count=count, is_sub_agent=sub) == final


@given(
    st.sampled_from(["none", "weak", "strong"]),
    st.sampled_from(["none", "partial", "sufficient"]),
    st.sampled_from(["none", "missing_slot", "multiple_candidates"]),
    st.sampled_from(["answer", "rewrite", "clarify", "scope_select", "no_knowledge"]),
    st.booleans(),
    st.integers(0, 3),
    st.booleans(),
)
def test_resolver_invariants(relevance, answerability, ambiguity, proposed, docs, count, sub):
    grade = _grade(relevance, answerability, proposed, ambiguity)
    route = resolve_route(grade, has_docs=docs, rewrite_count=count, is_sub_agent=sub)
    if sub or count >= 1:
        assert route != "rewrite"  # sub-questions never rewrite; one rewrite at most
    if not docs:
        assert route == "no_knowledge"  # empty recall never rewrites
    if route == "answer" and not sub:
        assert (relevance, answerability) == ("strong", "sufficient")


def test_status_mapping() -> None:
    assert retrieval_status_for("answer", "sufficient") == "answerable"
    assert retrieval_status_for("answer", "partial") == "partial"
    assert retrieval_status_for("rewrite", "partial") == "needs_rewrite"
    assert retrieval_status_for("clarify", "partial") == "needs_clarification"
    assert retrieval_status_for("scope_select", "none") == "needs_scope_selection"
    assert retrieval_status_for("no_knowledge", "sufficient") == "no_knowledge"


def test_default_hitl_prompts() -> None:
    plain = _grade("weak", "partial", "clarify")
    assert hitl_prompt_for("answer", plain.model_copy(update={"hitl_prompt": "x"})) == ""
    assert hitl_prompt_for("clarify", plain.model_copy(update={"hitl_prompt": "哪个?"})) == "哪个?"
    assert hitl_prompt_for("scope_select", plain) == DEFAULT_SCOPE_PROMPT
    slots = plain.model_copy(update={"missing_slots": ["角色名", "版本"]})
    assert hitl_prompt_for("clarify", slots) == "我找到了相关内容，但还缺少关键信息：角色名、版本"
    assert hitl_prompt_for("clarify", plain) == DEFAULT_CLARIFY_PROMPT
    assert is_hitl("clarify", None) and is_hitl(None, "needs_scope_selection")
    assert not is_hitl("rewrite", "needs_rewrite")
