"""The orchestrator core: validates a request, runs the compiled graph with the request's
runtime context, and shapes the outcome (S.docs/context, the normalised trace and, on HITL,
the resume snapshot beside it — docs/trace.md#node-by-node). When asked, it then writes the grounded
answer from the final evidence (docs/api.md#grounded-answers), outside the graph and the trace.
The gRPC servicer is a thin adapter over it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

from orchestrator_service import metrics, steps
from orchestrator_service.answer import (
    Answer,
    MarkerFilter,
    build_citations,
    join_note,
    partial_note,
)
from orchestrator_service.conversation import Turn, check_history
from orchestrator_service.grounding import (
    DEFAULT_CITATION_THRESHOLD,
    ClaimGate,
    ClaimSpan,
    Grounding,
    Settled,
    check_request,
    citation_scores,
    claim_spans,
    grounding,
    support_score,
)
from orchestrator_service.history.model import HistoryEntry, uuid7
from orchestrator_service.models.base import TASK_ANSWER, ClaimVerdict, ModelClient
from orchestrator_service.resume import ResumeSnapshot, state_from_resume
from orchestrator_service.routing import is_hitl
from orchestrator_service.runtime import UNSCOPED, RetrievalScope, Retriever, RunContext
from orchestrator_service.state import RagState, initial_state, with_history
from orchestrator_service.steps import NULL_SINK, StepSink
from orchestrator_service.synthesis import MissingParts, missing_parts
from shared.access import kb_id_named
from shared.errors import DeadlineExceeded, InvalidArgument, ModelOutputInvalid
from shared.index_names import INDEX_NAME, NAME_RULE
from shared.lang import is_chinese
from shared.normalize import normalize_rag_trace
from shared.text_input import check_text
from shared.trace_fields import RetrievalStatus, Route
from shared.tracing import annotate, record_question

if TYPE_CHECKING:  # the graphs come built: the core never imports LangGraph or the nodes
    from orchestrator_service.graph import Graphs

#: Receives each piece of the answer as it is written (a stream's AnswerDelta events).
AnswerSink = Callable[[str], None]


def _now_ms() -> int:
    return int(time.time() * 1000)


def _discard(_text: str) -> None:
    return None


#: The score every claim of an answer must reach (docs/api.md#grounding-check).
ANSWER_SUPPORT_THRESHOLD = DEFAULT_CITATION_THRESHOLD
#: evidence_reason when the grounding check dropped every claim of the answer.
ANSWER_UNSUPPORTED = "answer_unsupported"

#: A run searches at most this many knowledge bases at once.
MAX_KNOWLEDGE_BASES = 16
#: The longest filter retrieval accepts (docs/api.md#filters).
MAX_FILTER_CHARS = 2048


def searched_kb_ids(scope: RetrievalScope) -> tuple[str, ...]:
    """The ids of the knowledge bases a run searches, each once: those it names, else the
    knowledge base of its `index` (a run naming only an index reads that index's knowledge
    base), else the default one."""
    names = scope.knowledge_bases
    if not names:
        match = INDEX_NAME.fullmatch(scope.index)
        names = (match["kb"] if match else "",)
    return tuple(dict.fromkeys(kb_id_named(name) for name in names))


def check_scope(scope: RetrievalScope) -> None:
    """The light checks of a run's knowledge bases, filter and index, naming the field;
    retrieval judges the rest (unknown names, the filter's grammar, an index that does not
    exist or is not READY) and its verdict is passed through
    (docs/api.md#what-the-orchestrator-answers-when-retrieval-fails). An index must be
    `knowledge_bases/{kb}/indexes/{id}` of one of the knowledge bases the run names (any,
    when it names none)."""
    count = len(scope.knowledge_bases)
    if count > MAX_KNOWLEDGE_BASES:
        raise InvalidArgument(
            "knowledge_bases", f"names {count} knowledge bases, at most {MAX_KNOWLEDGE_BASES}"
        )
    for index, name in enumerate(scope.knowledge_bases):
        if not name.strip():
            raise InvalidArgument(f"knowledge_bases[{index}]", "must not be blank")
    if len(scope.filter) > MAX_FILTER_CHARS:
        raise InvalidArgument(
            "filter", f"is {len(scope.filter)} characters, at most {MAX_FILTER_CHARS}"
        )
    if not scope.index:
        return
    match = INDEX_NAME.fullmatch(scope.index)
    if match is None:
        raise InvalidArgument("index", NAME_RULE)
    named = {kb_id_named(name) for name in scope.knowledge_bases}
    if named and match["kb"] not in named:
        raise InvalidArgument(
            "index", f"is an index of knowledge_bases/{match['kb']}, which this run does not name"
        )


@dataclass(frozen=True, slots=True)
class RunOutcome:
    """What Run/Resume answer (docs/api.md#orchestratorservice, RunResult) in dict form."""

    question: str
    route: str
    retrieval_status: str
    docs: list[dict[str, Any]]
    context: str
    rag_trace: dict[str, Any] | None
    hitl_resume_state: dict[str, Any] | None
    #: Set only when an answer was asked for and the route is answer.
    answer: Answer | None = None
    #: What was retrieved, graded and answered for when the request had a history; "" when
    #: it had none (then `question` was).
    standalone_question: str = ""
    #: This run's UUIDv7 (docs/api.md#run-history).
    run_id: str = ""
    #: Of the claims the model wrote for the answer, how many needed support and how many
    #: the grounding check found supported (0 and 0 when no answer was written).
    claims_checked: int = 0
    claims_supported: int = 0


class RunRecorder(Protocol):
    """Where finished runs go (the run history); with `enabled` false (RUN_HISTORY off) it
    records nothing, and the core does not build the entries it would drop."""

    enabled: bool

    async def record(self, entry: HistoryEntry) -> None: ...


class _NoHistory:
    enabled = False

    async def record(self, entry: HistoryEntry) -> None:
        return None


class Orchestrator:
    def __init__(
        self,
        model: ModelClient,
        retrieval: Retriever,
        graphs: Graphs,
        *,
        max_question_chars: int = 4000,
        history: RunRecorder | None = None,
    ) -> None:
        """`graphs`: the compiled workflows (`graph.build_graphs`), built once by the
        composition root and shared by every request; `history` records each finished run."""
        self.model = model
        self._history = history or _NoHistory()
        self.retrieval = retrieval
        self._max_chars = max_question_chars
        self._graphs = graphs

    def _check_text(self, field: str, text: str) -> None:
        check_text(field, text, self._max_chars)

    def _context(
        self, steps_sink: StepSink, timeout: float | None, scope: RetrievalScope
    ) -> RunContext:
        deadline = None if timeout is None else time.monotonic() + timeout
        return RunContext(self.model, self.retrieval, steps_sink, deadline, scope)

    async def run(
        self,
        question: str,
        *,
        generate_answer: bool = False,
        scope: RetrievalScope = UNSCOPED,
        history: Sequence[Turn] = (),
        timeout: float | None = None,
        steps_sink: StepSink = NULL_SINK,
        answer_sink: AnswerSink = _discard,
        key_id: str = "",
    ) -> RunOutcome:
        """The full graph for a new question. `timeout`: seconds left of the caller's deadline.
        With `generate_answer`, an answer route also gets its answer, each piece passed to
        `answer_sink` as it is written. Every retrieval of the run searches `scope`. With a
        `history` (earlier turns, oldest first) the question is first condensed to stand alone
        (docs/api.md#conversations)."""
        self._check_text("question", question)
        check_scope(scope)
        check_history(history, self._max_chars)
        record_question(question)
        started_ms = _now_ms()
        ctx = self._context(steps_sink, timeout, scope)
        final = await self._walk(initial_state(question), history, ctx, resume=False)
        outcome = await self._finish(final, ctx, generate_answer, answer_sink)
        return await self._recorded(outcome, "run", question, scope, key_id, started_ms)

    async def resume(
        self,
        resume_state: Mapping[str, Any],
        user_answer: str,
        *,
        generate_answer: bool = False,
        scope: RetrievalScope = UNSCOPED,
        history: Sequence[Turn] = (),
        timeout: float | None = None,
        steps_sink: StepSink = NULL_SINK,
        answer_sink: AnswerSink = _discard,
        key_id: str = "",
    ) -> RunOutcome:
        """H0–H2: validate the snapshot, build q*, targeted retrieval and one grading; then the
        answer as for `run`. `scope` is not in the snapshot: the caller sends the run's
        knowledge bases and filter again, as it sends `generate_answer` and `history` (with
        which q* is condensed before the retrieval, as in `run`). ResumeRequest has no
        `index`: a resumed retrieval reads the active indexes."""
        snapshot = ResumeSnapshot.from_mapping(resume_state)
        self._check_text("user_answer", user_answer)
        check_scope(scope)
        check_history(history, self._max_chars)
        state = state_from_resume(snapshot, user_answer)
        self._check_text("question", state["question"])
        record_question(state["question"])
        metrics.record_resume()
        started_ms = _now_ms()
        ctx = self._context(steps_sink, timeout, scope)
        ctx.emit(state, steps.RESUME, user_answer)
        final = await self._walk(state, history, ctx, resume=True)
        outcome = await self._finish(final, ctx, generate_answer, answer_sink)
        return await self._recorded(outcome, "resume", user_answer, scope, key_id, started_ms)

    async def _walk(
        self, state: RagState, history: Sequence[Turn], ctx: RunContext, *, resume: bool
    ) -> Mapping[str, Any]:
        """The final state of the run's workflow, its conversation twin with a `history`.
        version="v2" streams the state only: the default also streams each step's updates,
        to find interrupts, which these graphs never raise (CPU per Run,
        docs/benchmarks.md#orchestrator_throughput)."""
        if history:
            twin = self._graphs.resume_conversation if resume else self._graphs.rag_conversation
            done = await twin.ainvoke(with_history(state, history), context=ctx, version="v2")
            return done.value
        graph = self._graphs.resume if resume else self._graphs.rag
        return (await graph.ainvoke(state, context=ctx, version="v2")).value

    async def _recorded(
        self,
        outcome: RunOutcome,
        kind: str,
        asked: str,
        scope: RetrievalScope,
        key_id: str,
        started_ms: int,
    ) -> RunOutcome:
        """The outcome with its run id, recorded in the run history."""
        outcome = replace(outcome, run_id=uuid7(started_ms))
        if not self._history.enabled:
            return outcome
        answer = outcome.answer
        await self._history.record(
            HistoryEntry(
                run_id=outcome.run_id,
                kind=kind,
                question=asked,
                standalone_question=outcome.standalone_question,
                knowledge_bases=searched_kb_ids(scope),
                filter=scope.filter,
                route=outcome.route,
                retrieval_status=outcome.retrieval_status,
                answer=answer.text if answer is not None else "",
                cited_document_ids=tuple(
                    dict.fromkeys(c.document_id for c in answer.citations if c.document_id)
                )
                if answer is not None
                else (),
                rag_trace=outcome.rag_trace,
                key_id=key_id,
                create_time_ms=started_ms,
                end_time_ms=_now_ms(),
            )
        )
        return outcome

    async def check_grounding(
        self,
        answer: str,
        facts: Sequence[str],
        threshold: float | None,
        *,
        timeout: float | None = None,
    ) -> Grounding:
        """CheckGrounding (docs/api.md#grounding-check): `answer`'s claims scored against
        `facts` by `check_grounding`; `threshold` None means the default."""
        threshold = check_request(answer, facts, threshold)
        spans = claim_spans(answer)
        if not spans:
            return Grounding(0.0, ())
        result = await self.model.check_grounding(
            [span.to_check(answer, len(facts)) for span in spans],
            facts,
            threshold=threshold,
            timeout=timeout,
        )
        return grounding(answer, spans, result.claims, threshold)

    async def _finish(
        self,
        final: Mapping[str, Any],
        ctx: RunContext,
        generate_answer: bool,
        answer_sink: AnswerSink,
    ) -> RunOutcome:
        outcome = _outcome(final)
        if not generate_answer or outcome.route != Route.ANSWER or not outcome.docs:
            return outcome
        written = await self._write_answer(
            outcome,
            _missing_slots(final),
            missing_parts(final.get("sub_results") or ()),
            ctx,
            answer_sink,
        )
        if written.answer is not None:
            outcome = replace(outcome, answer=written.answer)
        else:
            outcome = _unsupported(outcome)
        return replace(outcome, claims_checked=written.checked, claims_supported=written.supported)

    async def _write_answer(
        self,
        outcome: RunOutcome,
        missing_slots: list[str],
        parts: MissingParts,
        ctx: RunContext,
        answer_sink: AnswerSink,
    ) -> _Written:
        """`answer_generation` over the final docs, bounded by the caller's deadline as a
        whole (not per piece), each claim grounded as soon as the next one begins
        (`check_grounding`, docs/api.md#grounding-check): a claim below the threshold is
        dropped before it reaches the sink, so the deltas concatenate to the final text. No
        supported claim left: no answer. Markers outside the docs never reach the sink. The
        answer is partial for a `partial` status and when sub-questions found no answer
        (`parts`); our note after the model's text names what is missing."""
        docs = outcome.docs
        facts = [str(doc.get("text") or "") for doc in docs]
        partial = outcome.retrieval_status == RetrievalStatus.PARTIAL or bool(parts)
        markers, gate = MarkerFilter(len(docs)), ClaimGate()
        written: list[str] = []
        held: list[Settled] = []  # claims needing no support, sent with the next kept one
        kept: list[tuple[ClaimSpan, ClaimVerdict]] = []
        dropped = 0

        def send(text: str) -> None:
            if text:
                written.append(text)
                answer_sink(text)

        async def settle(claims: list[Settled]) -> None:
            nonlocal dropped
            if not claims:
                return
            result = await self.model.check_grounding(
                [claim.to_check(len(facts)) for claim in claims],
                facts,
                threshold=ANSWER_SUPPORT_THRESHOLD,
                timeout=ctx.time_left(),
            )
            for claim, verdict in zip(claims, result.claims, strict=True):
                if not verdict.grounding_check_required:
                    held.append(claim)
                elif verdict.score >= ANSWER_SUPPORT_THRESHOLD:
                    for piece in [*held, claim]:
                        send(piece.text(first=not written))
                    held.clear()
                    kept.append((claim.span, verdict))
                else:
                    dropped += 1

        left = ctx.time_left()
        try:
            async with asyncio.timeout(left):
                async for piece in self.model.stream_answer(
                    outcome.standalone_question or outcome.question,
                    docs,
                    missing_slots=[*missing_slots, *parts.unanswered],
                    timeout=left,
                ):
                    await settle(gate.feed(markers.feed(piece)))
                await settle(gate.feed(markers.finish()) + gate.finish())
        except TimeoutError as exc:
            raise DeadlineExceeded("deadline exceeded while the answer was written") from exc
        if not gate.text.strip():
            raise ModelOutputInvalid(TASK_ANSWER, "the answer is empty")
        checked = len(kept) + dropped
        if not kept:
            return _Written(None, checked, 0)
        for claim in held:  # a closing line after the last supported claim
            send(claim.text(first=False))
        if partial:
            send(
                join_note(
                    "".join(written),
                    partial_note(
                        missing_slots,
                        chinese=is_chinese(outcome.question),
                        unanswered=parts.unanswered,
                        incomplete=parts.incomplete,
                    ),
                )
            )
        text = "".join(written)
        by_doc = citation_scores(kept)
        citations = tuple(
            replace(c, support_score=by_doc.get(c.index, 0.0)) for c in build_citations(text, docs)
        )
        answer = Answer(
            text,
            citations,
            self.model.answer_model,
            partial,
            support_score=support_score([verdict for _, verdict in kept]),
            dropped_claims=dropped,
        )
        return _Written(answer, checked, len(kept))


@dataclass(frozen=True, slots=True)
class _Written:
    """An answer with every claim grounded (None: no claim was supported), and how many of
    the model's claims needed support and how many of them had it."""

    answer: Answer | None
    checked: int
    supported: int


def _unsupported(outcome: RunOutcome) -> RunOutcome:
    """The run once the grounding check dropped every claim of its answer: no_knowledge, with
    no evidence to answer from (docs/trace.md#routes-and-statuses)."""
    trace = dict(outcome.rag_trace or {})
    trace.update(
        route=str(Route.NO_KNOWLEDGE),
        retrieval_status=str(RetrievalStatus.NO_KNOWLEDGE),
        evidence_reason=ANSWER_UNSUPPORTED,
    )
    return replace(
        outcome,
        route=str(Route.NO_KNOWLEDGE),
        retrieval_status=str(RetrievalStatus.NO_KNOWLEDGE),
        docs=[],
        context="",
        rag_trace=trace,
    )


def _missing_slots(state: Mapping[str, Any]) -> list[str]:
    """The grade's missing_slots; after synthesis, those of the children that were partial."""
    slots = list(state.get("missing_slots") or ())
    for child in state.get("sub_results") or ():
        if child.get("retrieval_status") == RetrievalStatus.PARTIAL:
            slots.extend((child.get("rag_trace") or {}).get("missing_slots") or ())
    return list(dict.fromkeys(slot for slot in slots if slot.strip()))


def _outcome(state: Mapping[str, Any]) -> RunOutcome:
    # str(): the state holds vocabulary StrEnums; the outcome carries their plain values.
    route, status = str(state.get("route") or ""), str(state.get("retrieval_status") or "")
    metrics.record_run(route, status)
    annotate(route=route, retrieval_status=status, docs=len(state.get("docs") or ()))
    history = state.get("history") or ()
    trace = state.get("rag_trace")
    if history and trace is not None:
        # Group J (docs/trace.md#conversations); a None condense_error is dropped as absent.
        trace = {
            **trace,
            "history_turns": len(history),
            "condense_error": state.get("condense_error"),
        }
    return RunOutcome(
        question=state.get("asked_question") or state["question"],
        route=route,
        retrieval_status=status,
        docs=state.get("docs") or [],
        context=state.get("context") or "",
        rag_trace=normalize_rag_trace(trace),
        hitl_resume_state=ResumeSnapshot.from_state(state).to_dict()
        if is_hitl(route, status)
        else None,
        standalone_question=state["question"] if history else "",
    )
