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


class Retriever(Protocol):
    """What the nodes need from the retrieval service."""

    async def retrieve(
        self, query: str, *, top_k: int | None = None, timeout: float | None = None
    ) -> Retrieval: ...


@dataclass(slots=True)
class RunContext:
    """Per-request context. `deadline` is a `time.monotonic()` instant (None = no deadline);
    every downstream call is given the time left of it."""

    model: ModelClient
    retrieval: Retriever
    steps: StepSink = field(default=NULL_SINK)
    deadline: float | None = None

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
