"""In-memory doubles of the orchestrator's two clients (no sockets): a scripted `ModelClient`
with an optional latency and a scripted `Retriever`. For unit tests and the benchmarks."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

from orchestrator_service.conversation import Turn
from orchestrator_service.models.base import (
    TASK_COMPLEXITY,
    TASK_CONDENSE,
    TASK_GRADE,
    TASK_GROUNDING,
    TASK_REWRITE,
    ClaimToCheck,
    ClaimVerdict,
    ComplexityResult,
    CondensedQuestion,
    EvidenceGrade,
    GroundingVerdicts,
    RewritePlan,
)
from orchestrator_service.runtime import UNSCOPED, Retrieval, RetrievalScope
from tests.fakes.retrieval_servicer import meta

Decide = Callable[[str, str], Mapping[str, Any]]


class InMemoryModel:
    """Replies come from `decide(task, question)`; each call sleeps `latency` seconds and is
    recorded as (task, question)."""

    name = "in-memory"

    def __init__(self, decide: Decide, *, latency: float = 0.0) -> None:
        self._decide = decide
        self.latency = latency
        self.calls: list[tuple[str, str]] = []
        self.in_flight = 0
        self.max_in_flight = 0  # the most calls awaiting a reply at one time

    async def _reply(self, task: str, question: str) -> Mapping[str, Any]:
        self.calls.append((task, question))
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.latency:
                await asyncio.sleep(self.latency)
        finally:
            self.in_flight -= 1
        return self._decide(task, question)

    async def classify_complexity(self, question: str, *, timeout: float | None = None):
        return ComplexityResult(**await self._reply(TASK_COMPLEXITY, question))

    async def grade_evidence(self, question: str, docs: Sequence[Any], *, timeout=None):
        return EvidenceGrade(**await self._reply(TASK_GRADE, question))

    async def rewrite_query(self, question: str, docs: Sequence[Any], *, timeout=None):
        return RewritePlan(**await self._reply(TASK_REWRITE, question))

    async def condense_question(self, question: str, history: Sequence[Turn], *, timeout=None):
        return CondensedQuestion(**await self._reply(TASK_CONDENSE, question))

    async def check_grounding(
        self,
        claims: Sequence[ClaimToCheck],
        facts: Sequence[str],
        *,
        threshold: float,
        timeout: float | None = None,
    ) -> GroundingVerdicts:
        """Every claim fully supported by the facts it cites (the first fact when none): the
        scripted answers are the tests' own, the built-in rules have their own tests."""
        self.calls.append((TASK_GROUNDING, ""))
        return GroundingVerdicts(
            claims=[
                ClaimVerdict(
                    claim_index=i,
                    grounding_check_required=True,
                    score=1.0,
                    citation_indices=list(claim.cited or (0,))[: len(facts)],
                )
                for i, claim in enumerate(claims)
            ]
        )

    #: The answer comes from `decide("answer_generation", question)["text"]`, in one piece.
    answer_model = "in-memory"

    async def stream_answer(
        self,
        question: str,
        docs: Sequence[Mapping[str, Any]],
        *,
        missing_slots: Sequence[str] = (),
        timeout: float | None = None,
    ) -> AsyncIterator[str]:
        yield str((await self._reply("answer_generation", question)).get("text", ""))

    async def aclose(self) -> None:
        return None


class InMemoryRetriever:
    """Docs from `docs_for(query)`; every query is recorded with the scope it was sent with."""

    def __init__(self, docs_for: Callable[[str], list[dict[str, Any]]], *, latency: float = 0.0):
        self._docs_for = docs_for
        self.latency = latency
        self.queries: list[str] = []
        self.scopes: list[RetrievalScope] = []

    async def retrieve(
        self, query: str, *, scope: RetrievalScope = UNSCOPED, top_k=None, timeout=None
    ) -> Retrieval:
        self.queries.append(query)
        self.scopes.append(scope)
        if self.latency:
            await asyncio.sleep(self.latency)
        docs = self._docs_for(query)
        return Retrieval(docs=docs, meta=meta(len(docs)))
