"""How one evaluation item runs against the live system (RunConfig.mode): RETRIEVAL asks
retrieval's Retrieve with the question; RUN asks this service's own workflow (the same core a
Run call reaches), so a run measures exactly what callers get."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from orchestrator_service.conversation import Turn
from orchestrator_service.evaluation.model import (
    DEFAULT_TOP_K,
    Item,
    Outcome,
    RunConfig,
    document_key,
    ranked_unique,
)
from orchestrator_service.orchestrator import Orchestrator
from orchestrator_service.retrieval_client import RetrievalClient
from orchestrator_service.runtime import RetrievalScope
from shared.access import kb_id_named


def _keys(item: Item, docs: Sequence[Mapping[str, Any]]) -> list[str]:
    """Each chunk's document key, by knowledge base and id when the item's judgements name
    knowledge bases, else by id alone."""
    by_kb = any(r.knowledge_base for r in item.relevant)
    return [
        document_key(
            kb_id_named(str(d.get("knowledge_base", ""))) if by_kb else "", str(d["document_id"])
        )
        for d in docs
        if d.get("document_id")
    ]


#: The embedder's cosine of an answer and its reference answer (`answer_similarity`).
Similarity = Callable[[str, str], float]


class ItemRunner:
    """The ItemExecutor of both modes. `similarity` (loaded on first use: only RUN items with
    an answer and a reference need it) gives `answer_similarity`."""

    def __init__(
        self,
        retrieval: RetrievalClient,
        core: Orchestrator,
        similarity: Callable[[], Similarity] | None = None,
    ) -> None:
        self._retrieval = retrieval
        self._core = core
        self._load_similarity = similarity
        self._similarity: Similarity | None = None
        self._loading = asyncio.Lock()

    async def _answer_cosine(self, answer: str, reference: str) -> float | None:
        if not (answer.strip() and reference.strip()) or self._load_similarity is None:
            return None
        async with self._loading:  # items run concurrently: the model loads once
            if self._similarity is None:
                self._similarity = await asyncio.to_thread(self._load_similarity)
        return await asyncio.to_thread(self._similarity, answer, reference)

    async def __call__(self, item: Item, scope: RetrievalScope, config: RunConfig) -> Outcome:
        if config.mode == "RUN":
            return await self._workflow(item, scope, config)
        started = time.perf_counter()
        retrieval = await self._retrieval.retrieve(
            item.question, scope=scope, top_k=config.top_k or DEFAULT_TOP_K
        )
        return Outcome(
            ranked_documents=ranked_unique(_keys(item, retrieval.docs)),
            latency_seconds=time.perf_counter() - started,
        )

    async def _workflow(self, item: Item, scope: RetrievalScope, config: RunConfig) -> Outcome:
        started = time.perf_counter()
        outcome = await self._core.run(
            item.question,
            generate_answer=config.generate_answer,
            scope=scope,
            history=[Turn(t.question, t.answer) for t in item.history],
        )
        latency = time.perf_counter() - started
        answer = outcome.answer
        citations = answer.citations if answer is not None else ()
        docs = outcome.docs
        # A citation's index points into the docs: its document keyed as the ranking is.
        cited = _keys(item, [docs[c.index - 1] for c in citations if 1 <= c.index <= len(docs)])
        text = answer.text if answer is not None else ""
        return Outcome(
            ranked_documents=ranked_unique(_keys(item, docs)),
            route=outcome.route,
            answer=text,
            answer_cosine=await self._answer_cosine(text, item.reference_answer),
            cited_documents=tuple(dict.fromkeys(cited)),
            latency_seconds=latency,
            # The share of the model's claims the grounding check found supported, dropped
            # ones included (the answer itself keeps only supported claims).
            support_score=outcome.claims_supported / outcome.claims_checked
            if outcome.claims_checked
            else None,
            run_id=outcome.run_id,
            citations=tuple(
                {
                    "index": c.index,
                    "filename": c.filename,
                    "page_number": c.page_number,
                    "quote": c.quote,
                    "document_id": c.document_id,
                    "support_score": c.support_score,
                }
                for c in citations
            ),
        )
