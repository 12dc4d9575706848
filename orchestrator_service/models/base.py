"""The `ModelClient` interface: one method per model task of docs/api.md#model-calls, each returning
its task's schema-valid output. Implementations: the OpenAI-compatible remote client and the
built-in local model. The workflow's own rules (sub-question limits, route resolution) are applied
by the nodes, not here."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from orchestrator_service.conversation import Turn
from shared.trace_fields import (
    MAX_SUB_QUESTIONS,
    Ambiguity,
    Answerability,
    Complexity,
    Relevance,
    RewriteMethod,
    Route,
)

# The fixed task names: the remote client sends them as response_format.json_schema.name,
# and test doubles and logs key on them (docs/api.md#model-calls).
TASK_COMPLEXITY = "complexity_classification"
TASK_GRADE = "evidence_grade"
TASK_REWRITE = "query_rewrite"
TASK_CONDENSE = "condense_question"
TASK_GROUNDING = "check_grounding"
#: The one free-text task: streamed, so it has no json_schema; the scripted test server
#: recognises it by `stream: true`.
TASK_ANSWER = "answer_generation"


class _TaskOutput(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ComplexityResult(_TaskOutput):
    """Output of `complexity_classification` (docs/api.md#model-calls)."""

    complexity: Complexity
    reason: str = ""
    sub_questions: list[str] = Field(default_factory=list, max_length=MAX_SUB_QUESTIONS)


class EvidenceGrade(_TaskOutput):
    """Output of `evidence_grade` (docs/api.md#model-calls). `route` is only a suggestion: the
    route resolver (docs/trace.md#the-route-resolver) decides the final route."""

    relevance: Relevance
    answerability: Answerability
    ambiguity: Ambiguity = Ambiguity.NONE
    route: Route
    confidence: float = Field(0.0, ge=0.0, le=1.0)
    missing_slots: list[str] = Field(default_factory=list)
    hitl_prompt: str = ""
    hitl_options: list[str] = Field(default_factory=list)
    reason: str = ""


class RewritePlan(_TaskOutput):
    """Output of `query_rewrite` (docs/trace.md#rewrite): exactly one helper text is non-empty."""

    method: RewriteMethod
    step_back_question: str = Field("", max_length=300)
    hyde_document: str = Field("", max_length=1200)


class CondensedQuestion(_TaskOutput):
    """Output of `condense_question` (docs/api.md#conversations): the follow-up rewritten to
    stand alone, or the question itself when it already does."""

    standalone_question: str = Field(min_length=1, max_length=4000)


class ClaimVerdict(_TaskOutput):
    """One claim's verdict in `check_grounding` (docs/api.md#grounding-check): `claim_index`
    is its 0-based position in the claims given; `citation_indices` the 0-based positions of
    the facts that support it, best first; `score` how well the best of them does (0–1).
    A claim that asserts nothing (a greeting, a note on what is missing) needs no support."""

    claim_index: int = Field(ge=0)
    grounding_check_required: bool
    score: float = Field(ge=0.0, le=1.0)
    citation_indices: list[int] = Field(default_factory=list)


class GroundingVerdicts(_TaskOutput):
    """Output of `check_grounding`: one verdict per claim, in any order."""

    claims: list[ClaimVerdict]


@dataclass(frozen=True, slots=True)
class ClaimToCheck:
    """A claim handed to `check_grounding`: its text without citation markers, and the 0-based
    facts it cites (empty: it cites none, so every fact may support it)."""

    text: str
    cited: tuple[int, ...] = ()


class ModelClient(Protocol):
    """One method per model task. `docs` are runtime evidence records (the Chunk keys of
    docs/trace.md#evidence-records: filename, page_number, text, score, rerank_score, …) in ranking
    order. `timeout` is the time left of the caller's deadline in seconds (None = the client's own).

    Errors: `shared.errors.ModelOutputInvalid(task, …)` when the reply violates the task schema
    after one retry, `DependencyUnavailable` when the endpoint cannot be reached,
    `DeadlineExceeded` when `timeout` runs out. Never a silent fallback to another model.
    """

    #: Which model serves, for the start-up log line: "local" or the remote base URL.
    name: str

    async def classify_complexity(
        self, question: str, *, timeout: float | None = None
    ) -> ComplexityResult: ...

    async def grade_evidence(
        self, question: str, docs: Sequence[Mapping[str, Any]], *, timeout: float | None = None
    ) -> EvidenceGrade: ...

    async def rewrite_query(
        self, question: str, docs: Sequence[Mapping[str, Any]], *, timeout: float | None = None
    ) -> RewritePlan: ...

    async def condense_question(
        self, question: str, history: Sequence[Turn], *, timeout: float | None = None
    ) -> CondensedQuestion:
        """`condense_question`: `question` read after `history` (the earlier turns, oldest
        first, never empty), rewritten to stand alone."""
        ...

    async def check_grounding(
        self,
        claims: Sequence[ClaimToCheck],
        facts: Sequence[str],
        *,
        threshold: float,
        timeout: float | None = None,
    ) -> GroundingVerdicts:
        """`check_grounding`: how well each claim is supported by the facts (its `cited`
        ones when it names any), one verdict per claim; a fact is cited for a claim when it
        supports it with at least `threshold`."""
        ...

    #: Which model writes answers (`Answer.model`): ANSWER_MODEL's name, or "local".
    answer_model: str

    def stream_answer(
        self,
        question: str,
        docs: Sequence[Mapping[str, Any]],
        *,
        missing_slots: Sequence[str] = (),
        timeout: float | None = None,
    ) -> AsyncIterator[str]:
        """`answer_generation`: the answer's text as it is written, pieces in order, citing
        the docs as "[n]" (1-based). Raw: markers are not checked here. A stream that ends
        before the model finished raises DependencyUnavailable, never returns short."""
        ...

    async def aclose(self) -> None: ...
