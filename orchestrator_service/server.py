"""The OrchestratorService servicer: proto in → one call into the `Orchestrator` core → proto
out. Streams run the core as a task and forward its progress steps and answer pieces in the
order the core produced them, then the one result."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

import grpc
from supermew.v1 import orchestrator_pb2, orchestrator_pb2_grpc, trace_pb2

from orchestrator_service.answer import Answer
from orchestrator_service.conversation import Turn
from orchestrator_service.grounding import Grounding
from orchestrator_service.orchestrator import Orchestrator, RunOutcome, searched_kb_ids
from orchestrator_service.runtime import RetrievalScope
from orchestrator_service.steps import RECEIVED, QueueStepSink, Step, in_english
from shared.access import Permission, current_principal
from shared.codec import (
    chunk_to_proto,
    hitl_state_from_proto,
    hitl_state_to_proto,
    rag_trace_to_proto,
)


def result_to_proto(outcome: RunOutcome) -> orchestrator_pb2.RunResult:
    result = orchestrator_pb2.RunResult(
        question=outcome.question,
        route=outcome.route,
        retrieval_status=outcome.retrieval_status,
        docs=[chunk_to_proto(d) for d in outcome.docs],
        context=outcome.context,
        standalone_question=outcome.standalone_question,
        run_id=outcome.run_id,
    )
    if outcome.rag_trace is not None:
        result.rag_trace.CopyFrom(rag_trace_to_proto(outcome.rag_trace))
    if outcome.hitl_resume_state is not None:
        result.hitl_resume_state.CopyFrom(hitl_state_to_proto(outcome.hitl_resume_state))
    if outcome.answer is not None:
        result.answer.CopyFrom(answer_to_proto(outcome.answer))
    return result


def answer_to_proto(answer: Answer) -> orchestrator_pb2.Answer:
    return orchestrator_pb2.Answer(
        text=answer.text,
        citations=[
            orchestrator_pb2.Citation(
                index=c.index,
                filename=c.filename,
                page_number=c.page_number,
                quote=c.quote,
                document_id=c.document_id,
                support_score=c.support_score,
            )
            for c in answer.citations
        ],
        model=answer.model,
        partial=answer.partial,
        support_score=answer.support_score,
        dropped_claims=answer.dropped_claims,
    )


def grounding_to_proto(result: Grounding) -> orchestrator_pb2.CheckGroundingResponse:
    return orchestrator_pb2.CheckGroundingResponse(
        support_score=result.support_score,
        claims=[
            orchestrator_pb2.Claim(
                start_pos=claim.start_pos,
                end_pos=claim.end_pos,
                claim_text=claim.claim_text,
                citation_indices=claim.citation_indices,
                grounding_check_required=claim.grounding_check_required,
                score=claim.score,
            )
            for claim in result.claims
        ],
    )


def step_to_proto(step: Step) -> trace_pb2.RagStep:
    return trace_pb2.RagStep(
        icon=step.icon,
        label=step.label,
        detail=step.detail,
        elapsed_ms=step.elapsed_ms,
        stage_elapsed_ms=step.stage_elapsed_ms,
        group=step.group,
        group_label=step.group_label,
    )


def _time_left(context: grpc.aio.ServicerContext) -> float | None:
    return context.time_remaining()


def _scope(request: orchestrator_pb2.RunRequest | orchestrator_pb2.ResumeRequest) -> RetrievalScope:
    """The run's knowledge bases, filter and index, once the caller may read every knowledge
    base the run searches (docs/api.md#api-keys); retrieval checks them again with the
    caller's own key."""
    scope = RetrievalScope(tuple(request.knowledge_bases), request.filter, request.index)
    caller = current_principal()
    for kb_id in searched_kb_ids(scope):
        caller.require(Permission.READ, kb_id)
    return scope


def _history(
    request: orchestrator_pb2.RunRequest | orchestrator_pb2.ResumeRequest,
) -> tuple[Turn, ...]:
    return tuple(Turn(turn.question, turn.answer) for turn in request.history)


class OrchestratorServicer(orchestrator_pb2_grpc.OrchestratorServiceServicer):
    def __init__(self, core: Orchestrator) -> None:
        self._core = core

    async def Run(
        self, request: orchestrator_pb2.RunRequest, context: grpc.aio.ServicerContext
    ) -> orchestrator_pb2.RunResult:
        outcome = await self._core.run(
            request.question,
            generate_answer=request.generate_answer,
            scope=_scope(request),
            history=_history(request),
            timeout=_time_left(context),
            key_id=current_principal().key_id,
        )
        return result_to_proto(outcome)

    async def Resume(
        self, request: orchestrator_pb2.ResumeRequest, context: grpc.aio.ServicerContext
    ) -> orchestrator_pb2.RunResult:
        outcome = await self._core.resume(
            hitl_state_from_proto(request.resume_state),
            request.user_answer,
            generate_answer=request.generate_answer,
            scope=_scope(request),
            history=_history(request),
            timeout=_time_left(context),
            key_id=current_principal().key_id,
        )
        return result_to_proto(outcome)

    async def CheckGrounding(
        self, request: orchestrator_pb2.CheckGroundingRequest, context: grpc.aio.ServicerContext
    ) -> orchestrator_pb2.CheckGroundingResponse:
        result = await self._core.check_grounding(
            request.answer_candidate,
            [fact.text for fact in request.facts],
            request.citation_threshold if request.HasField("citation_threshold") else None,
            timeout=_time_left(context),
        )
        return grounding_to_proto(result)

    async def StreamRun(
        self, request: orchestrator_pb2.RunRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[orchestrator_pb2.RunEvent]:
        timeout, scope = _time_left(context), _scope(request)
        key_id = current_principal().key_id
        async for event in _stream(
            lambda sink: self._core.run(
                request.question,
                generate_answer=request.generate_answer,
                scope=scope,
                history=_history(request),
                timeout=timeout,
                steps_sink=sink,
                answer_sink=sink.answer,
                key_id=key_id,
            ),
            request.question,
        ):
            yield event

    async def StreamResume(
        self, request: orchestrator_pb2.ResumeRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[orchestrator_pb2.RunEvent]:
        timeout, scope = _time_left(context), _scope(request)
        key_id = current_principal().key_id
        snapshot = hitl_state_from_proto(request.resume_state)
        async for event in _stream(
            lambda sink: self._core.resume(
                snapshot,
                request.user_answer,
                generate_answer=request.generate_answer,
                scope=scope,
                history=_history(request),
                timeout=timeout,
                steps_sink=sink,
                answer_sink=sink.answer,
                key_id=key_id,
            ),
            str(snapshot.get("question") or request.user_answer),
        ):
            yield event


class _EventSink(QueueStepSink):
    """The steps and the answer pieces of one stream, in one queue so their order is the order
    the core produced them (every step before the first piece)."""

    def answer(self, text: str) -> None:
        self._queue.put_nowait(_AnswerPiece(text))

    async def events(self) -> AsyncIterator[orchestrator_pb2.RunEvent]:
        while True:
            item = await self._queue.get()
            if item is self._CLOSED:
                return
            if isinstance(item, _AnswerPiece):
                yield orchestrator_pb2.RunEvent(
                    answer_delta=orchestrator_pb2.AnswerDelta(text=item.text)
                )
            else:
                assert isinstance(item, Step)
                yield orchestrator_pb2.RunEvent(step=step_to_proto(item))


@dataclass(frozen=True, slots=True)
class _AnswerPiece:
    text: str


async def _stream(
    start: Callable[[_EventSink], Awaitable[RunOutcome]], question: str
) -> AsyncIterator[orchestrator_pb2.RunEvent]:
    """ "📨 request received" first, then each step as the nodes emit it, then the answer's
    pieces when one is written, then exactly one result, every step in `question`'s language
    (docs/trace.md#progress-steps). An error of the run propagates after the events emitted
    before it (a cut answer stream ends in an error, never a result)."""
    sink = _EventSink()
    sink.for_question(question)
    received = replace(RECEIVED, label=in_english(RECEIVED.label)) if sink.english else RECEIVED
    yield orchestrator_pb2.RunEvent(step=step_to_proto(received))
    task: asyncio.Task[Any] = asyncio.ensure_future(start(sink))
    task.add_done_callback(lambda _t: sink.close())
    try:
        async for event in sink.events():
            yield event
        outcome = await task
    finally:
        if not task.done():
            task.cancel()
    yield orchestrator_pb2.RunEvent(result=result_to_proto(outcome))


def add_servicer(core: Orchestrator) -> Callable[[grpc.aio.Server], None]:
    def add(server: grpc.aio.Server) -> None:
        orchestrator_pb2_grpc.add_OrchestratorServiceServicer_to_server(
            OrchestratorServicer(core), server
        )

    return add
