"""The OpenAI-compatible remote model client (API.md "Model calls"): POST
{LLM_BASE_URL}/chat/completions with a strict json_schema response format named after the task,
temperature 0, pydantic validation and one retry on invalid output."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel, ValidationError

from orchestrator_service.models import prompts
from orchestrator_service.models.base import (
    TASK_ANSWER,
    TASK_COMPLEXITY,
    TASK_GRADE,
    TASK_REWRITE,
    ComplexityResult,
    EvidenceGrade,
    RewritePlan,
)
from shared.errors import DeadlineExceeded, DependencyUnavailable, ModelOutputInvalid
from shared.trace_fields import Complexity, RewriteMethod

log = logging.getLogger(__name__)

T = TypeVar("T", bound=BaseModel)

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


class RemoteModelClient:
    """`ModelClient` over an OpenAI-compatible endpoint. FAST_MODEL serves classification and
    rewrite, GRADE_MODEL grading; both default to MODEL."""

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
        http: httpx.AsyncClient | None = None,
    ) -> None:
        self.name = base_url
        self._url = base_url.rstrip("/") + "/chat/completions"
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.model, self.grade_model = model, grade_model or model
        self.fast_model = fast_model or model
        self.answer_model = answer_model or model
        self._timeout = timeout
        self._http = http or httpx.AsyncClient(
            limits=httpx.Limits(max_connections=256, max_keepalive_connections=64)
        )
        self._schemas = {
            TASK_COMPLEXITY: strict_schema(ComplexityResult),
            TASK_GRADE: strict_schema(EvidenceGrade),
            TASK_REWRITE: strict_schema(RewritePlan),
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
        """The reply's `choices[0].message.content` ("" when the reply has none: invalid)."""
        seconds = self._timeout if timeout is None else min(timeout, self._timeout)
        try:
            response = await self._http.post(
                self._url, json=body, headers=self._headers, timeout=seconds
            )
        except httpx.ConnectTimeout as exc:
            raise DependencyUnavailable("model endpoint", f"connect timeout: {exc}") from exc
        except httpx.TimeoutException as exc:
            raise DeadlineExceeded(f"model task {task}: no reply within {seconds:.3f}s") from exc
        except httpx.TransportError as exc:
            raise DependencyUnavailable("model endpoint", f"{type(exc).__name__}: {exc}") from exc
        if response.status_code >= 400:
            raise DependencyUnavailable(
                "model endpoint", f"task {task}: HTTP {response.status_code}"
            )
        try:
            content = response.json()["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError):
            return ""
        return content if isinstance(content, str) else json.dumps(content)

    # ---- answer_generation: one streamed chat completion (server-sent events) ----------------

    async def stream_answer(
        self,
        question: str,
        docs: Sequence[Mapping[str, Any]],
        *,
        missing_slots: Sequence[str] = (),
        timeout: float | None = None,
    ) -> AsyncIterator[str]:
        """ANSWER_MODEL's `choices[0].delta.content` pieces as they arrive. The stream must end
        with `data: [DONE]`: one cut before it raises DependencyUnavailable, so a caller never
        mistakes half an answer for a whole one. No retry: pieces may already be out."""
        body = {
            "model": self.answer_model,
            "messages": prompts.answer_messages(question, docs, missing_slots),
            "temperature": 0,
            "stream": True,
        }
        seconds = self._timeout if timeout is None else min(timeout, self._timeout)
        try:
            async with self._http.stream(
                "POST", self._url, json=body, headers=self._headers, timeout=seconds
            ) as response:
                if response.status_code >= 400:
                    await response.aread()
                    raise DependencyUnavailable(
                        "model endpoint", f"task {TASK_ANSWER}: HTTP {response.status_code}"
                    )
                async for line in response.aiter_lines():
                    data = _sse_data(line)
                    if data is None:
                        continue
                    if data == "[DONE]":
                        return
                    piece = _delta_content(data)
                    if piece:
                        yield piece
        except httpx.ConnectTimeout as exc:
            raise DependencyUnavailable("model endpoint", "connect timeout") from exc
        except httpx.TimeoutException as exc:
            raise DeadlineExceeded(
                f"model task {TASK_ANSWER}: no reply within {seconds:.3f}s"
            ) from exc
        except httpx.TransportError as exc:
            raise DependencyUnavailable(
                "model endpoint", f"task {TASK_ANSWER}: the answer stream was cut"
            ) from exc
        raise DependencyUnavailable(
            "model endpoint", f"task {TASK_ANSWER}: the answer stream ended before [DONE]"
        )


def _sse_data(line: str) -> str | None:
    """The payload of an SSE `data:` line; None for comments, other fields and blank lines."""
    if not line.startswith("data:"):
        return None
    return line[len("data:") :].strip()


def _delta_content(data: str) -> str:
    """The text of one chat.completion.chunk ("" for chunks without any, e.g. usage)."""
    try:
        choices = json.loads(data)["choices"]
        content = choices[0].get("delta", {}).get("content") if choices else None
    except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
        raise ModelOutputInvalid(TASK_ANSWER, "a stream event is not a completion chunk") from exc
    return content if isinstance(content, str) else ""
