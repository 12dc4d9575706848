"""The orchestrator's Prometheus families (docs/api.md#metrics), each recorded where its value
is decided: route and status when a Run or Resume ends (orchestrator.py), node durations by
the graph wiring (`timed_node`), model calls by `InstrumentedModelClient`, the rewrite method
by the rewrite node, the fan-out width by the planning node. Label values come from the
vocabularies of shared.trace_fields and the node and task names, never from request text."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any, ParamSpec, TypeVar

from prometheus_client import Counter, Gauge, Histogram

from orchestrator_service.conversation import Turn
from orchestrator_service.models.base import (
    TASK_ANSWER,
    TASK_COMPLEXITY,
    TASK_CONDENSE,
    TASK_GRADE,
    TASK_GROUNDING,
    TASK_REWRITE,
    ClaimToCheck,
    ComplexityResult,
    CondensedQuestion,
    EvidenceGrade,
    GroundingVerdicts,
    ModelClient,
    RewritePlan,
)
from orchestrator_service.settings import SERVICE_NAME
from shared.errors import DeadlineExceeded, DependencyUnavailable, ModelOutputInvalid
from shared.metrics import LATENCY_BUCKETS, OPERATION_STORE_CALLS, bounded, registry_for
from shared.trace_fields import MAX_SUB_QUESTIONS, RetrievalStatus, RewriteMethod, Route
from shared.tracing import StreamSpan, span

REGISTRY = registry_for(SERVICE_NAME)

ROUTES = frozenset(r.value for r in Route)
RETRIEVAL_STATUSES = frozenset(s.value for s in RetrievalStatus)
REWRITE_METHODS = frozenset(m.value for m in RewriteMethod)
#: `outcome` of a model call: the reply was schema-valid, or why not.
MODEL_OUTCOMES = (
    "ok", "invalid_output", "unavailable", "deadline_exceeded", "cancelled", "error",
)  # fmt: skip

RUNS = Counter(
    "supermew_runs_total",
    "Runs and resumes answered, by final route and retrieval_status.",
    ("route", "retrieval_status"),
    registry=REGISTRY,
)
NODE_DURATION = Histogram(
    "supermew_node_duration_seconds",
    "Time spent in one execution of a graph node, in seconds.",
    ("node",),
    buckets=LATENCY_BUCKETS,
    registry=REGISTRY,
)
MODEL_CALLS = Counter(
    "supermew_model_calls_total",
    "Model task calls, by task and outcome.",
    ("task", "outcome"),
    registry=REGISTRY,
)
MODEL_CALL_DURATION = Histogram(
    "supermew_model_call_duration_seconds",
    "Duration of one model task call (retries included), in seconds.",
    ("task",),
    buckets=LATENCY_BUCKETS,
    registry=REGISTRY,
)
REWRITES = Counter(
    "supermew_rewrites_total",
    "Query rewrites performed, by method.",
    ("method",),
    registry=REGISTRY,
)
RESUMES = Counter(
    "supermew_resumes_total",
    "Resume calls accepted (a valid snapshot and user answer).",
    registry=REGISTRY,
)
SUB_QUESTIONS = Histogram(
    "supermew_sub_questions",
    "Fan-out width of a complex question: sub-questions sent to sub-agents.",
    buckets=tuple(range(1, MAX_SUB_QUESTIONS + 1)),
    registry=REGISTRY,
)


#: `operation` of a failed orchestrator database call: the store method it came from.
DB_OPERATIONS = (
    "connect",
    "migrate",
    "evaluation_sets_write",
    "evaluation_sets_read",
    "evaluation_items_write",
    "evaluation_items_read",
    "evaluation_runs_write",
    "evaluation_runs_read",
    "evaluation_results_write",
    "evaluation_results_read",
    *OPERATION_STORE_CALLS,
    "runs_write",
    "runs_read",
    "runs_expire",
    "feedback_write",
    "feedback_read",
)
DB_ERRORS = Counter(
    "supermew_db_errors_total",
    "Failed orchestrator database calls (ORCHESTRATOR_DATABASE_URL), by store operation.",
    ("operation",),
    registry=REGISTRY,
)
DB_POOL_IN_USE = Gauge(
    "supermew_db_pool_in_use",
    "Orchestrator database connections checked out of the pool right now.",
    registry=REGISTRY,
)
#: Items an evaluation run finished, by outcome.
EVALUATION_RESULTS = ("ok", "failed")
EVALUATION_ITEMS = Counter(
    "supermew_evaluation_items_total",
    "Evaluation items run, by outcome (ok, failed).",
    ("result",),
    registry=REGISTRY,
)


#: Feedback given (CreateFeedback), by rating.
FEEDBACK_RATINGS = ("THUMBS_UP", "THUMBS_DOWN")
FEEDBACK = Counter(
    "supermew_feedback_total",
    "Feedback given on answers, by rating (THUMBS_UP, THUMBS_DOWN).",
    ("rating",),
    registry=REGISTRY,
)


def record_evaluation_item(result: str) -> None:
    EVALUATION_ITEMS.labels(bounded(result, EVALUATION_RESULTS)).inc()


def record_feedback(rating: str) -> None:
    FEEDBACK.labels(bounded(rating, FEEDBACK_RATINGS)).inc()


def record_db_error(operation: str) -> None:
    DB_ERRORS.labels(bounded(operation, DB_OPERATIONS)).inc()


def record_run(route: str, retrieval_status: str) -> None:
    RUNS.labels(bounded(route, ROUTES), bounded(retrieval_status, RETRIEVAL_STATUSES)).inc()


def record_rewrite(method: str) -> None:
    REWRITES.labels(bounded(method, REWRITE_METHODS)).inc()


def record_resume() -> None:
    RESUMES.inc()


def record_fan_out(width: int) -> None:
    SUB_QUESTIONS.observe(width)


P = ParamSpec("P")
R = TypeVar("R")


def timed_node(name: str, node: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """`node` observed into supermew_node_duration_seconds{node=name} and traced as a span
    `node <name>` (docs/api.md#traces). functools.wraps keeps its signature, from which
    LangGraph decides to pass the runtime."""
    child = NODE_DURATION.labels(name)
    span_name = f"node {name}"

    @functools.wraps(node)
    async def observed(*args: P.args, **kwargs: P.kwargs) -> R:
        start = time.perf_counter()
        try:
            with span(span_name, node=name):
                return await node(*args, **kwargs)
        finally:
            child.observe(time.perf_counter() - start)

    return observed


def _outcome(error: BaseException | None) -> str:
    if error is None:
        return "ok"
    if isinstance(error, asyncio.CancelledError | GeneratorExit):
        return "cancelled"  # the caller went away (or stopped reading an answer stream)
    if isinstance(error, ModelOutputInvalid):
        return "invalid_output"
    if isinstance(error, DeadlineExceeded):
        return "deadline_exceeded"
    if isinstance(error, DependencyUnavailable):
        return "unavailable"
    return "error"


class InstrumentedModelClient:
    """A ModelClient that records each task call's outcome and duration around another one
    (the remote or the local model alike) and otherwise passes everything through."""

    def __init__(self, inner: ModelClient) -> None:
        self.inner = inner
        self.name = inner.name
        self.answer_model = inner.answer_model

    async def _observe(self, task: str, call: Awaitable[R]) -> R:
        start = time.perf_counter()
        error: BaseException | None = None
        with span(f"model {task}", task=task) as traced:
            try:
                return await call
            except BaseException as exc:
                error = exc
                raise
            finally:
                MODEL_CALL_DURATION.labels(task).observe(time.perf_counter() - start)
                outcome = _outcome(error)
                MODEL_CALLS.labels(task, outcome).inc()
                traced.set_attribute("supermew.outcome", outcome)

    async def classify_complexity(
        self, question: str, *, timeout: float | None = None
    ) -> ComplexityResult:
        return await self._observe(
            TASK_COMPLEXITY, self.inner.classify_complexity(question, timeout=timeout)
        )

    async def grade_evidence(
        self, question: str, docs: Sequence[Mapping[str, Any]], *, timeout: float | None = None
    ) -> EvidenceGrade:
        return await self._observe(
            TASK_GRADE, self.inner.grade_evidence(question, docs, timeout=timeout)
        )

    async def rewrite_query(
        self, question: str, docs: Sequence[Mapping[str, Any]], *, timeout: float | None = None
    ) -> RewritePlan:
        return await self._observe(
            TASK_REWRITE, self.inner.rewrite_query(question, docs, timeout=timeout)
        )

    async def condense_question(
        self, question: str, history: Sequence[Turn], *, timeout: float | None = None
    ) -> CondensedQuestion:
        return await self._observe(
            TASK_CONDENSE, self.inner.condense_question(question, history, timeout=timeout)
        )

    async def check_grounding(
        self,
        claims: Sequence[ClaimToCheck],
        facts: Sequence[str],
        *,
        threshold: float,
        timeout: float | None = None,
    ) -> GroundingVerdicts:
        return await self._observe(
            TASK_GROUNDING,
            self.inner.check_grounding(claims, facts, threshold=threshold, timeout=timeout),
        )

    async def stream_answer(
        self,
        question: str,
        docs: Sequence[Mapping[str, Any]],
        *,
        missing_slots: Sequence[str] = (),
        timeout: float | None = None,
    ) -> AsyncIterator[str]:
        """The answer stream, observed from the request until its last piece."""
        start = time.perf_counter()
        error: BaseException | None = None
        traced = StreamSpan(f"model {TASK_ANSWER}", task=TASK_ANSWER)
        pieces = 0
        try:
            async for piece in self.inner.stream_answer(
                question, docs, missing_slots=missing_slots, timeout=timeout
            ):
                pieces += 1
                yield piece
        except BaseException as exc:
            error = exc
            raise
        finally:
            MODEL_CALL_DURATION.labels(TASK_ANSWER).observe(time.perf_counter() - start)
            outcome = _outcome(error)
            MODEL_CALLS.labels(TASK_ANSWER, outcome).inc()
            traced.end(error, outcome=outcome, pieces=pieces)

    async def aclose(self) -> None:
        await self.inner.aclose()

    def __getattr__(self, name: str) -> Any:
        # Anything beyond the protocol (e.g. a local model's diagnostics) is the inner one's.
        return getattr(self.inner, name)
