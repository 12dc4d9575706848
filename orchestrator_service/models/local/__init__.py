"""The built-in local model: the embedded default for every model task when no
`LLM_BASE_URL` is configured. Deterministic rules over the question and the evidence, written
down in LOCAL_MODEL.md; a baseline that runs with no API key, not an imitation of an LLM."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import jieba

from orchestrator_service.models.base import ComplexityResult, EvidenceGrade, RewritePlan
from orchestrator_service.models.local.answer import answer_pieces
from orchestrator_service.models.local.complexity import classify
from orchestrator_service.models.local.grading import grade
from orchestrator_service.models.local.rewrite import rewrite

__all__ = ["LocalModel"]


class LocalModel:
    """`ModelClient` over the local rules. Each task is pure Python taking well under a
    millisecond, so it runs on the event loop and `timeout` never comes into play."""

    name = "local"
    answer_model = "local"

    def __init__(self) -> None:
        # Load jieba's dictionary now (≈ 1 s) rather than inside the first request.
        jieba.initialize()

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
        return grade(question, docs)

    async def rewrite_query(
        self, question: str, docs: Sequence[Mapping[str, Any]], *, timeout: float | None = None
    ) -> RewritePlan:
        return rewrite(question, docs)

    async def stream_answer(
        self,
        question: str,
        docs: Sequence[Mapping[str, Any]],
        *,
        missing_slots: Sequence[str] = (),
        timeout: float | None = None,
    ) -> AsyncIterator[str]:
        # missing_slots: the orchestrator's partial note already names them; extraction
        # only ever states what the evidence holds.
        for piece in answer_pieces(question, docs):
            yield piece

    async def aclose(self) -> None:
        return None
