"""The orchestrator core: validates a request, runs the compiled graph with the request's
runtime context, and shapes the outcome (S.docs/context, the normalised trace and, on HITL,
the resume snapshot beside it — SPEC.md §1, §7). The gRPC servicer is a thin adapter over it."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from orchestrator_service import steps
from orchestrator_service.graph import RagGraph, build_rag_graph, build_resume_graph
from orchestrator_service.models.base import ModelClient
from orchestrator_service.resume import ResumeSnapshot, state_from_resume
from orchestrator_service.routing import is_hitl
from orchestrator_service.runtime import Retriever, RunContext
from orchestrator_service.state import initial_state
from orchestrator_service.steps import NULL_SINK, StepSink
from shared.normalize import normalize_rag_trace
from shared.text_input import check_text

# One compilation per process: compiled graphs are stateless and shared by all requests.
_RAG_GRAPH: RagGraph | None = None
_RESUME_GRAPH: RagGraph | None = None


def compiled_graphs() -> tuple[RagGraph, RagGraph]:
    global _RAG_GRAPH, _RESUME_GRAPH
    if _RAG_GRAPH is None or _RESUME_GRAPH is None:
        _RAG_GRAPH, _RESUME_GRAPH = build_rag_graph(), build_resume_graph()
    return _RAG_GRAPH, _RESUME_GRAPH


@dataclass(frozen=True, slots=True)
class RunOutcome:
    """What Run/Resume answer (API.md RunResult) in dict form."""

    question: str
    route: str
    retrieval_status: str
    docs: list[dict[str, Any]]
    context: str
    rag_trace: dict[str, Any] | None
    hitl_resume_state: dict[str, Any] | None


class Orchestrator:
    def __init__(
        self,
        model: ModelClient,
        retrieval: Retriever,
        *,
        max_question_chars: int = 4000,
    ) -> None:
        self.model = model
        self.retrieval = retrieval
        self._max_chars = max_question_chars
        self._graph, self._resume_graph = compiled_graphs()

    def _check_text(self, field: str, text: str) -> None:
        check_text(field, text, self._max_chars)

    def _context(self, steps_sink: StepSink, timeout: float | None) -> RunContext:
        deadline = None if timeout is None else time.monotonic() + timeout
        return RunContext(self.model, self.retrieval, steps_sink, deadline)

    async def run(
        self, question: str, *, timeout: float | None = None, steps_sink: StepSink = NULL_SINK
    ) -> RunOutcome:
        """The full graph for a new question. `timeout`: seconds left of the caller's deadline."""
        self._check_text("question", question)
        ctx = self._context(steps_sink, timeout)
        final = await self._graph.ainvoke(initial_state(question), context=ctx)
        return _outcome(final)

    async def resume(
        self,
        resume_state: Mapping[str, Any],
        user_answer: str,
        *,
        timeout: float | None = None,
        steps_sink: StepSink = NULL_SINK,
    ) -> RunOutcome:
        """H0–H2: validate the snapshot, build q*, targeted retrieval and one grading."""
        snapshot = ResumeSnapshot.from_mapping(resume_state)
        self._check_text("user_answer", user_answer)
        state = state_from_resume(snapshot, user_answer)
        self._check_text("question", state["question"])
        ctx = self._context(steps_sink, timeout)
        ctx.emit(state, steps.RESUME, user_answer)
        final = await self._resume_graph.ainvoke(state, context=ctx)
        return _outcome(final)


def _outcome(state: Mapping[str, Any]) -> RunOutcome:
    # str(): the state holds vocabulary StrEnums; the outcome carries their plain values.
    route, status = str(state.get("route") or ""), str(state.get("retrieval_status") or "")
    return RunOutcome(
        question=state["question"],
        route=route,
        retrieval_status=status,
        docs=state.get("docs") or [],
        context=state.get("context") or "",
        rag_trace=normalize_rag_trace(state.get("rag_trace")),
        hitl_resume_state=ResumeSnapshot.from_state(state).to_dict()
        if is_hitl(route, status)
        else None,
    )
