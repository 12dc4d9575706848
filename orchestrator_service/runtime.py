"""The graph's runtime context (LangGraph `context_schema`): the clients and progress sink of
one request, handed to every node through `Runtime.context` instead of globals."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from orchestrator_service.models.base import ModelClient
from orchestrator_service.state import RagState
from orchestrator_service.steps import NULL_SINK, StepSink
from shared.errors import DeadlineExceeded


@dataclass(frozen=True, slots=True)
class Retrieval:
    """One retrieval's output: runtime chunk records (docs/trace.md#evidence-records) in ranking
    order and the R meta with None values already skipped."""

    docs: list[dict[str, Any]]
    meta: dict[str, Any]


@dataclass(frozen=True, slots=True)
class RetrievalScope:
    """What every Retrieve of one run searches (docs/api.md#knowledge-bases): the caller's
    `knowledge_bases` (empty = the default one), AIP-160 `filter` (docs/api.md#filters;
    "" admits every document) and `index` (docs/api.md#indexes; "" = each knowledge base's
    active index). Retrieval judges all three; the orchestrator passes them on."""

    knowledge_bases: tuple[str, ...] = ()
    filter: str = ""
    index: str = ""


#: A run that names no knowledge base and no filter: the default knowledge base, unfiltered.
UNSCOPED = RetrievalScope()


class Retriever(Protocol):
    """What the nodes need from the retrieval service."""

    async def retrieve(
        self,
        query: str,
        *,
        scope: RetrievalScope = UNSCOPED,
        top_k: int | None = None,
        timeout: float | None = None,
    ) -> Retrieval: ...


@dataclass(slots=True)
class RunContext:
    """Per-request context. `deadline` is a `time.monotonic()` instant (None = no deadline);
    every downstream call is given the time left of it. `scope` goes with every Retrieve of the
    run: the first recall, each sub-question, the rewrite and the resumed retrieval."""

    model: ModelClient
    retrieval: Retriever
    steps: StepSink = field(default=NULL_SINK)
    deadline: float | None = None
    scope: RetrievalScope = UNSCOPED

    def time_left(self) -> float | None:
        """Seconds left of the caller's deadline; DeadlineExceeded once it has passed."""
        if self.deadline is None:
            return None
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise DeadlineExceeded("deadline exceeded")
        return left

    def emit(self, state: Mapping[str, Any] | RagState, icon_label: tuple[str, str],
             detail: str = "", *, label: str | None = None) -> None:  # fmt: skip
        """Emit a catalogue step, grouped by the state's sub-question group when it has one."""
        if not self.steps.enabled:
            return
        icon, default_label = icon_label
        self.steps.emit(
            icon,
            label if label is not None else default_label,
            detail,
            state.get("rag_step_group"),
            state.get("rag_step_group_label"),
        )
