"""Routing after a grade (docs/trace.md#routes-and-statuses): the route resolver, the route → status
mapping and the default HITL follow-up prompts. Pure functions; the grading node applies them."""

from __future__ import annotations

from orchestrator_service.models.base import EvidenceGrade
from shared.trace_fields import (
    HITL_ROUTES,
    HITL_STATUS_FOR_ROUTE,
    HITL_STATUSES,
    Ambiguity,
    Answerability,
    Relevance,
    RetrievalStatus,
    Route,
)

#: Routes after which S.docs / S.context are cleared
#: (docs/trace.md#follow-up-prompt-and-cleared-evidence).
CLEARING_ROUTES: frozenset[Route] = HITL_ROUTES | {Route.NO_KNOWLEDGE}

#: The one rewrite the main question may spend (docs/trace.md#rewrite).
REWRITE_BUDGET = 1

DEFAULT_SCOPE_PROMPT = "我在知识库中找到了多个可能相关的方向。你想问的是哪一个？"
DEFAULT_MISSING_SLOTS_PROMPT = "我找到了相关内容，但还缺少关键信息："
DEFAULT_CLARIFY_PROMPT = "我找到了相关内容，但证据不足以确定答案。请补充一下你具体想问的条件。"


def resolve_route(
    grade: EvidenceGrade, *, has_docs: bool, rewrite_count: int, is_sub_agent: bool
) -> Route:
    """The final route of one grading (docs/trace.md#the-route-resolver). First match wins:

    | #  | condition (NK = no_knowledge)                             | route                    |
    |----|-----------------------------------------------------------|--------------------------|
    | 1  | no docs, or relevance none                                | no_knowledge             |
    | 2  | ambiguity missing_slot                                    | clarify                  |
    | 3  | ambiguity multiple_candidates                             | scope_select             |
    | 4  | model says answer, relevance strong, answerability suff.  | answer                   |
    | 5  | sub-question, answerability partial or sufficient         | answer                   |
    | 5b | sub-question otherwise (sub-questions never rewrite)      | no_knowledge             |
    | 6  | model says rewrite, budget unused                         | rewrite                  |
    | 7  | model says rewrite, budget used                           | partial→clarify, else NK |
    | 8  | answerability partial                                     | left→rewrite, else clar. |
    | 9  | relevance strong and answerability sufficient             | answer                   |
    | 10 | otherwise                                                 | no_knowledge             |

    The model's suggested route is therefore not necessarily the final route.
    """
    budget_left = rewrite_count < REWRITE_BUDGET
    strong_sufficient = (
        grade.relevance == Relevance.STRONG and grade.answerability == Answerability.SUFFICIENT
    )
    if not has_docs or grade.relevance == Relevance.NONE:
        return Route.NO_KNOWLEDGE
    if grade.ambiguity == Ambiguity.MISSING_SLOT:
        return Route.CLARIFY
    if grade.ambiguity == Ambiguity.MULTIPLE_CANDIDATES:
        return Route.SCOPE_SELECT
    if grade.route == Route.ANSWER and strong_sufficient:
        return Route.ANSWER
    if is_sub_agent:
        usable = grade.answerability in (Answerability.PARTIAL, Answerability.SUFFICIENT)
        return Route.ANSWER if usable else Route.NO_KNOWLEDGE
    if grade.route == Route.REWRITE:
        if budget_left:
            return Route.REWRITE
        return Route.CLARIFY if grade.answerability == Answerability.PARTIAL else Route.NO_KNOWLEDGE
    if grade.answerability == Answerability.PARTIAL:
        return Route.REWRITE if budget_left else Route.CLARIFY
    return Route.ANSWER if strong_sufficient else Route.NO_KNOWLEDGE


def retrieval_status_for(route: str, answerability: str) -> RetrievalStatus:
    """`retrieval_status` read with the final route (docs/trace.md#the-route-resolver)."""
    if route == Route.ANSWER:
        if answerability == Answerability.PARTIAL:
            return RetrievalStatus.PARTIAL
        return RetrievalStatus.ANSWERABLE
    if route == Route.REWRITE:
        return RetrievalStatus.NEEDS_REWRITE
    if route in HITL_ROUTES:
        return HITL_STATUS_FOR_ROUTE[Route(route)]
    return RetrievalStatus.NO_KNOWLEDGE


def hitl_prompt_for(route: str, grade: EvidenceGrade) -> str:
    """The follow-up question (docs/trace.md#follow-up-prompt-and-cleared-evidence): "" unless the
    route is clarify or scope_select; then the model's prompt, else the default for scope_select,
    for named missing slots, or the generic clarification."""
    if route not in HITL_ROUTES:
        return ""
    if grade.hitl_prompt.strip():
        return grade.hitl_prompt
    if route == Route.SCOPE_SELECT:
        return DEFAULT_SCOPE_PROMPT
    slots = [slot for slot in grade.missing_slots if slot.strip()]
    if slots:
        return DEFAULT_MISSING_SLOTS_PROMPT + "、".join(slots)
    return DEFAULT_CLARIFY_PROMPT


def is_hitl(route: str | None, retrieval_status: str | None) -> bool:
    """Whether a result needs the user (and so carries a resume snapshot)."""
    return route in HITL_ROUTES or retrieval_status in HITL_STATUSES
