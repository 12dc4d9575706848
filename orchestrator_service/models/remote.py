"""The OpenAI-compatible remote model client (docs/api.md#model-calls): POST
{LLM_BASE_URL}/chat/completions with a strict json_schema response format named after the task,
temperature 0, pydantic validation and one retry on invalid output. HTTP failures are
translated once here (docs/api.md#status-codes): a permanent refusal (400/401/403/404) is
DependencyRejected naming the task and the provider's redacted message, 429 ResourceExhausted,
5xx and connection failures DependencyUnavailable; 429/502/503/504 are retried with jittered
backoff while the caller's deadline allows. `answer_generation` is one streamed completion
(server-sent events) under the same mapping, retried only before its first piece. The transport
(pool, timeouts, retry rule) is shared.http's."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from orchestrator_service.conversation import Turn
from orchestrator_service.grounding import in_claim_order
from orchestrator_service.models import prompts
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
    RewritePlan,
)
from shared.errors import (
    DeadlineExceeded,
    DependencyRejected,
    DependencyUnavailable,
    DomainError,
    ModelOutputInvalid,
    ResourceExhausted,
)
from shared.http import (
    HttpClient,
    HttpConnectTimeout,
    HttpTimeout,
    HttpTransportError,
    Reply,
    RetryPolicy,
)
from shared.redact import Redactor
from shared.trace_fields import Complexity, RewriteMethod
from shared.tracing import http_span, inject_headers

log = logging.getLogger(__name__)

T = TypeVar("T", bound=BaseModel)

DEPENDENCY = "model endpoint"
#: Statuses a later attempt may succeed on: rate limiting and a gateway's passing trouble.
RETRYABLE_STATUSES = frozenset({429, 502, 503, 504})
MAX_ATTEMPTS = 4
BACKOFF_BASE_SECONDS = 0.2
BACKOFF_MAX_SECONDS = 5.0
RETRY = RetryPolicy(RETRYABLE_STATUSES, MAX_ATTEMPTS, BACKOFF_BASE_SECONDS, BACKOFF_MAX_SECONDS)

# Keywords strict structured outputs reject or ignore; the pydantic model still enforces them.
_UNSUPPORTED_KEYWORDS = frozenset(
    {"default", "title", "maxLength", "minLength", "maxItems", "minItems", "minimum", "maximum"}
)


def strict_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The model's JSON schema made strict-compatible: every property required, no
    additional properties, no defaults or range keywords, and the vocabulary enums inlined
    where pydantic puts them under `$defs`, so each property reads on its own."""
    schema = model.model_json_schema()
    defs: dict[str, Any] = schema.pop("$defs", {})

    def tidy(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref", "")
            if ref.startswith("#/$defs/"):
                rest = {k: v for k, v in node.items() if k != "$ref"}
                # An enum's docstring is for readers of this code, not part of the task.
                shared = defs[ref.removeprefix("#/$defs/")]
                node = {**{k: v for k, v in shared.items() if k != "description"}, **rest}
            out = {k: tidy(v) for k, v in node.items() if k not in _UNSUPPORTED_KEYWORDS}
            if out.get("type") == "object" and "properties" in out:
                out["required"] = list(out["properties"])
                out["additionalProperties"] = False
            return out
        if isinstance(node, list):
            return [tidy(v) for v in node]
        return node

    return tidy(schema)


def _check_complexity(result: ComplexityResult) -> None:
    if result.complexity == Complexity.COMPLEX and not any(
        sq.strip() for sq in result.sub_questions
    ):
        raise ValueError("complex verdict without a valid sub-question")


def _check_rewrite(plan: RewritePlan) -> None:
    own, other = (
        (plan.step_back_question, plan.hyde_document)
        if plan.method == RewriteMethod.STEP_BACK
        else (plan.hyde_document, plan.step_back_question)
    )
    if not own.strip() or other.strip():
        raise ValueError(f"{plan.method} needs exactly its own helper text")


def _check_condensed(result: CondensedQuestion) -> None:
    if not result.standalone_question.strip():
        raise ValueError("the standalone question is blank")


def _grounding_check(claim_count: int, fact_count: int) -> Callable[[GroundingVerdicts], None]:
    """One verdict per claim, citations among the facts, none for a claim needing no support."""

    def check(result: GroundingVerdicts) -> None:
        in_claim_order(result.claims, claim_count)
        for verdict in result.claims:
            if any(not 0 <= f < fact_count for f in verdict.citation_indices):
                raise ValueError(
                    f"claim {verdict.claim_index} cites a fact outside 0..{fact_count - 1}"
                )

    return check


class RemoteModelClient:
    """`ModelClient` over an OpenAI-compatible endpoint. FAST_MODEL serves classification,
    condensation and rewrite, GRADE_MODEL grading and the grounding check, ANSWER_MODEL answers;
    all default to MODEL."""

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str | None,
        model: str,
        grade_model: str | None = None,
        fast_model: str | None = None,
        answer_model: str | None = None,
        timeout: float = 60.0,
        http: HttpClient | None = None,
    ) -> None:
        self.name = base_url
        self._url = base_url.rstrip("/") + "/chat/completions"
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.model, self.grade_model = model, grade_model or model
        self.fast_model = fast_model or model
        self.answer_model = answer_model or model
        self._timeout = timeout
        self._http = http or HttpClient(max_connections=256)
        self._redact = Redactor(api_key)
        self._schemas = {
            TASK_COMPLEXITY: strict_schema(ComplexityResult),
            TASK_GRADE: strict_schema(EvidenceGrade),
            TASK_REWRITE: strict_schema(RewritePlan),
            TASK_CONDENSE: strict_schema(CondensedQuestion),
            TASK_GROUNDING: strict_schema(GroundingVerdicts),
        }

    async def classify_complexity(
        self, question: str, *, timeout: float | None = None
    ) -> ComplexityResult:
        return await self._call(
            TASK_COMPLEXITY,
            self.fast_model,
            prompts.complexity_messages(question),
            ComplexityResult,
            _check_complexity,
            timeout,
        )

    async def grade_evidence(
        self, question: str, docs: Sequence[Mapping[str, Any]], *, timeout: float | None = None
    ) -> EvidenceGrade:
        return await self._call(
            TASK_GRADE,
            self.grade_model,
            prompts.grade_messages(question, docs),
            EvidenceGrade,
            None,
            timeout,
        )

    async def rewrite_query(
        self, question: str, docs: Sequence[Mapping[str, Any]], *, timeout: float | None = None
    ) -> RewritePlan:
        return await self._call(
            TASK_REWRITE,
            self.fast_model,
            prompts.rewrite_messages(question, docs),
            RewritePlan,
            _check_rewrite,
            timeout,
        )

    async def condense_question(
        self, question: str, history: Sequence[Turn], *, timeout: float | None = None
    ) -> CondensedQuestion:
        return await self._call(
            TASK_CONDENSE,
            self.fast_model,
            prompts.condense_messages(question, history),
            CondensedQuestion,
            _check_condensed,
            timeout,
        )

    async def check_grounding(
        self,
        claims: Sequence[ClaimToCheck],
        facts: Sequence[str],
        *,
        threshold: float,
        timeout: float | None = None,
    ) -> GroundingVerdicts:
        """The model's verdicts; a citation below `threshold` is the caller's to drop (the
        model's scores are per claim, not per fact)."""
        result = await self._call(
            TASK_GROUNDING,
            self.grade_model,
            prompts.grounding_messages(claims, facts),
            GroundingVerdicts,
            _grounding_check(len(claims), len(facts)),
            timeout,
        )
        return GroundingVerdicts(claims=in_claim_order(result.claims, len(claims)))

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _call(
        self,
        task: str,
        model: str,
        messages: list[dict[str, str]],
        schema: type[T],
        check: Callable[[T], None] | None,
        timeout: float | None,
    ) -> T:
        body = {
            "model": model,
            "messages": messages,
            "temperature": 0,
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": task, "strict": True, "schema": self._schemas[task]},
            },
        }
        problem = ""
        for attempt in (1, 2):  # one retry on invalid output
            content = await self._post(task, body, timeout)
            try:
                result = schema.model_validate_json(content)
                if check is not None:
                    check(result)
                return result
            except (ValidationError, ValueError) as exc:
                problem = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                log.warning(
                    "model task %s: invalid output (attempt %d): %s", task, attempt, problem
                )
        raise ModelOutputInvalid(task, f"output violates the task schema after a retry: {problem}")

    async def _post(self, task: str, body: dict[str, Any], timeout: float | None) -> str:
        """The reply's `choices[0].message.content` ("" when the reply has none: invalid).
        `timeout` is what is left of the caller's deadline (None: the caller set none); each
        attempt also stops at LLM_TIMEOUT_SECONDS."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        attempt = 0
        while True:
            attempt += 1
            left = None if deadline is None else deadline - loop.time()
            if left is not None and left <= 0:
                raise DeadlineExceeded(f"model task {task}: the caller's deadline passed")
            own_limit = left is None or self._timeout <= left
            seconds = self._timeout if left is None else min(left, self._timeout)
            try:
                with http_span("model", task=task, attempt=attempt) as traced:
                    response = await self._http.post_json(
                        self._url, body, timeout=seconds, headers=inject_headers(self._headers)
                    )
                    traced.set_attribute("http.response.status_code", response.status)
            except (HttpConnectTimeout, HttpTimeout, HttpTransportError) as exc:
                raise self._transport_failure(
                    task,
                    exc,
                    seconds,
                    own_limit,
                    waiting="no reply",
                    failed="the connection failed",
                ) from exc
            if response.status < 400:
                return _content(response)
            error = self._http_error(task, response)
            log.warning("model task %s: attempt %d: %s", task, attempt, error.message)
            delay = _retry_delay(response, attempt, deadline, loop.time())
            if delay is None:
                raise error
            await asyncio.sleep(delay)

    def _transport_failure(
        self,
        task: str,
        exc: Exception,
        seconds: float,
        own_limit: bool,
        *,
        waiting: str,
        failed: str,
    ) -> DependencyUnavailable | DeadlineExceeded:
        """The domain error for a request that got no (complete) reply, logged once. A timeout
        names the limit that fired: LLM_TIMEOUT_SECONDS or the caller's deadline."""
        if isinstance(exc, HttpConnectTimeout):
            log.warning("model task %s: connect timeout after %.3fs", task, seconds)
            return DependencyUnavailable(DEPENDENCY, f"task {task}: connect timeout")
        if isinstance(exc, HttpTimeout):
            log.warning("model task %s: %s within %.3fs", task, waiting, seconds)
            return DeadlineExceeded(
                f"model task {task}: no reply within LLM_TIMEOUT_SECONDS ({self._timeout:g}s)"
                if own_limit
                else f"model task {task}: the caller's deadline passed while waiting for the model"
            )
        log.warning("model task %s: %s: %s", task, type(exc).__name__, self._redact(str(exc)))
        return DependencyUnavailable(DEPENDENCY, f"task {task}: {failed}")

    def _http_error(self, task: str, response: Reply) -> DomainError:
        """The domain error for a failed HTTP reply: permanent refusals name the provider's
        (redacted) message, since only the operator can fix them."""
        status = response.status
        if status == 429:
            return ResourceExhausted(f"model task {task}: the model endpoint is rate limiting")
        if status >= 500 or status == 408:
            return DependencyUnavailable(DEPENDENCY, f"task {task}: HTTP {status}")
        reason = self._redact(_provider_message(response))
        return DependencyRejected(
            DEPENDENCY, f"task {task}: HTTP {status}" + (f": {reason}" if reason else "")
        )

    # ---- answer_generation: one streamed chat completion (server-sent events) ----------------

    async def stream_answer(
        self,
        question: str,
        docs: Sequence[Mapping[str, Any]],
        *,
        missing_slots: Sequence[str] = (),
        timeout: float | None = None,
    ) -> AsyncIterator[str]:
        """ANSWER_MODEL's `choices[0].delta.content` pieces as they arrive. HTTP statuses map
        as for the other tasks, and a refused request is retried like theirs; once pieces
        flow there is no retry (they may already be with the caller). The stream must end with
        `data: [DONE]`: a cut before it is DependencyUnavailable, never a short answer."""
        task = TASK_ANSWER
        body = {
            "model": self.answer_model,
            "messages": prompts.answer_messages(question, docs, missing_slots),
            "temperature": 0,
            "stream": True,
        }
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        attempt = 0
        while True:
            attempt += 1
            left = None if deadline is None else deadline - loop.time()
            if left is not None and left <= 0:
                raise DeadlineExceeded(f"model task {task}: the caller's deadline passed")
            own_limit = left is None or self._timeout <= left
            # It bounds each wait for data; the orchestrator bounds the whole stream.
            seconds = self._timeout if left is None else min(left, self._timeout)
            error: DomainError | None = None
            delay: float | None = None
            try:
                # No span of its own: one made current here would stay current in the consumer
                # between pieces (the model-call span covers the stream).
                async with self._http.stream_json(
                    self._url, body, timeout=seconds, headers=inject_headers(self._headers)
                ) as stream:
                    if stream.status >= 400:
                        reply = await stream.read()
                        error = self._http_error(task, reply)
                        delay = _retry_delay(reply, attempt, deadline, loop.time())
                    else:
                        async for line in stream.lines():
                            data = sse_data(line)
                            if data == "[DONE]":
                                return
                            piece = delta_content(data) if data is not None else ""
                            if piece:
                                yield piece
                        raise DependencyUnavailable(
                            DEPENDENCY, f"task {task}: the answer stream ended before [DONE]"
                        )
            except (HttpConnectTimeout, HttpTimeout, HttpTransportError) as exc:
                raise self._transport_failure(
                    task,
                    exc,
                    seconds,
                    own_limit,
                    waiting="no piece",
                    failed="the answer stream was cut",
                ) from exc
            assert error is not None
            log.warning("model task %s: attempt %d: %s", task, attempt, error.message)
            if delay is None:
                raise error
            await asyncio.sleep(delay)


def _retry_delay(response: Reply, attempt: int, deadline: float | None, now: float) -> float | None:
    """Seconds to wait before retrying a failed reply, or None when it must not be retried:
    a permanent status, the attempts used up, or a backoff the caller's deadline cannot fit."""
    return RETRY.delay(response, attempt, None if deadline is None else deadline - now)


def sse_data(line: str) -> str | None:
    """The payload of an SSE `data:` line; None for comments, other fields and blank lines."""
    if not line.startswith("data:"):
        return None
    return line[len("data:") :].strip()


def delta_content(data: str) -> str:
    """The text of one chat.completion.chunk ("" for chunks without any, e.g. usage)."""
    try:
        choices = json.loads(data)["choices"]
        content = choices[0].get("delta", {}).get("content") if choices else None
    except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
        raise ModelOutputInvalid(TASK_ANSWER, "a stream event is not a completion chunk") from exc
    return content if isinstance(content, str) else ""


def _content(response: Reply) -> str:
    try:
        content = response.json()["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError):
        return ""
    return content if isinstance(content, str) else json.dumps(content)


def _provider_message(response: Reply) -> str:
    """The OpenAI-style `error.message` (or `error` / `message`), else the raw body."""
    try:
        payload = response.json()
    except ValueError:
        return response.text
    if isinstance(payload, dict):
        error = payload.get("error", payload.get("message"))
        if isinstance(error, dict):
            error = error.get("message")
        if isinstance(error, str):
            return error
    return response.text
