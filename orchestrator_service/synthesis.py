"""Synthesis of a complex question (docs/trace.md#synthesis-of-a-complex-question): accepted
children's evidence merged by order-preserving dedupe, and the parent trace with one of the four
terminal states. Pure: no model call, no I/O."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from shared.scores import fold_score
from shared.trace_fields import (
    HITL_STATUS_FOR_ROUTE,
    HITL_STATUSES,
    TOOL_NAME,
    Answerability,
    Complexity,
    Relevance,
    RetrievalStatus,
    Route,
    Stage,
)

#: The children whose evidence synthesis merges (docs/trace.md#synthesis-of-a-complex-question).
ACCEPTED_STATUSES: frozenset[RetrievalStatus] = frozenset(
    {RetrievalStatus.ANSWERABLE, RetrievalStatus.PARTIAL}
)
_ROUTE_FOR_HITL_STATUS: dict[RetrievalStatus, Route] = {
    status: route for route, status in HITL_STATUS_FOR_ROUTE.items()
}


def dedupe_key(doc: Mapping[str, Any]) -> str:
    """Two chunks are the same chunk when they come from the same knowledge base and their
    `chunk_id` matches; without one, when filename, page and text all match
    (docs/trace.md#synthesis-of-a-complex-question). Chunk ids are unique within a knowledge
    base only: `notes.md` in two of them is two documents."""
    chunk_id = str(doc.get("chunk_id") or "").strip()
    key = chunk_id or (
        f"{doc.get('filename') or ''}|{doc.get('page_number') or ''}|{doc.get('text') or ''}"
    )
    knowledge_base = str(doc.get("knowledge_base") or "")
    return f"{knowledge_base}#{key}" if knowledge_base else key


def dedupe_documents(docs: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Order-preserving dedupe: the first occurrence keeps its place and takes the higher of
    the duplicates' scores; nothing is re-sorted; `rrf_rank` is renumbered 1..n. The input
    records are not modified (children's traces still reference them)."""
    merged: dict[str, dict[str, Any]] = {}
    for doc in docs:
        key = dedupe_key(doc)
        kept = merged.get(key)
        if kept is None:
            merged[key] = dict(doc)
        else:
            fold_score(kept, doc)
    result = list(merged.values())
    for rank, doc in enumerate(result, start=1):
        doc["rrf_rank"] = rank
    return result


@dataclass(frozen=True, slots=True)
class MissingParts:
    """What of a compound question its answer cannot give, in plan order: `unanswered`, the
    sub-questions whose child was not accepted (`no_knowledge`, an HITL status) or brought no
    evidence; `incomplete`, those whose child was `partial` with no missing slot to name.

    The parent's trace still follows the synthesis table (an `answerable` parent may have
    unanswered children); the answer written from it is partial and names them
    (docs/api.md#grounded-answers)."""

    unanswered: tuple[str, ...] = ()
    incomplete: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.unanswered or self.incomplete)


def missing_parts(sub_results: Sequence[Mapping[str, Any]]) -> MissingParts:
    """The `MissingParts` of a run's children (none for a simple question or a resume)."""
    ordered = sorted(sub_results, key=lambda r: r.get("index") or 0)
    unanswered = _unique(
        str(r.get("question") or "").strip()
        for r in ordered
        if r.get("retrieval_status") not in ACCEPTED_STATUSES or not r.get("docs")
    )
    incomplete = _unique(
        str(r.get("question") or "").strip()
        for r in ordered
        if r.get("retrieval_status") == RetrievalStatus.PARTIAL
        and r.get("docs")
        and not any(str(s).strip() for s in (r.get("rag_trace") or {}).get("missing_slots") or ())
    )
    return MissingParts(tuple(unanswered), tuple(q for q in incomplete if q not in unanswered))


def _unique(values: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(v for v in values if v))


def synthesize(
    *,
    question: str,
    complexity_reason: str | None,
    sub_questions: Sequence[str],
    sub_results: Sequence[Mapping[str, Any]],
    normalize_sub_trace: Callable[[Any], dict[str, Any] | None],
) -> dict[str, Any]:
    """The parent's state update and NEW raw trace (docs/trace.md#synthesis-of-a-complex-question).

    | DΣ        | children               | route / status                | relevance / answerab. |
    |-----------|------------------------|-------------------------------|-----------------------|
    | non-empty | any accepted `partial` | answer / partial              | strong / partial      |
    | non-empty | no `partial`           | answer / answerable           | strong / sufficient   |
    | empty     | some child HITL        | scope_select wins, or clarify | none / none           |
    | empty     | no child HITL          | no_knowledge / no_knowledge   | none / none           |

    HITL prompts are first-seen de-duplicated and joined with "；", options merged likewise;
    `evidence_confidence` is an explicit None; ambiguity, reason and missing slots are not
    written; R and the stage snapshots are not aggregated.
    """
    accepted = [r for r in sub_results if r.get("retrieval_status") in ACCEPTED_STATUSES]
    merged_docs = [doc for r in accepted for doc in (r.get("docs") or ())]
    docs = dedupe_documents(merged_docs)
    sub_traces = [t for t in (normalize_sub_trace(r.get("rag_trace")) for r in sub_results) if t]
    hitl_prompt = ""
    hitl_options: list[str] = []
    status: RetrievalStatus
    route: Route
    if docs:
        any_partial = any(r.get("retrieval_status") == RetrievalStatus.PARTIAL for r in accepted)
        status = RetrievalStatus.PARTIAL if any_partial else RetrievalStatus.ANSWERABLE
        route = Route.ANSWER
        relevance = Relevance.STRONG
        answerability = Answerability.PARTIAL if any_partial else Answerability.SUFFICIENT
    else:
        relevance, answerability = Relevance.NONE, Answerability.NONE
        hitl = [t for t in sub_traces if t.get("retrieval_status") in HITL_STATUSES]
        if hitl:
            scope = [
                t for t in hitl if t["retrieval_status"] == RetrievalStatus.NEEDS_SCOPE_SELECTION
            ]
            status = RetrievalStatus((scope or hitl)[0]["retrieval_status"])
            route = _ROUTE_FOR_HITL_STATUS[status]
            hitl_prompt = "；".join(_unique(t.get("hitl_prompt") or "" for t in hitl))
            hitl_options = _unique(o for t in hitl for o in t.get("hitl_options") or ())
        else:
            status, route = RetrievalStatus.NO_KNOWLEDGE, Route.NO_KNOWLEDGE
    trace: dict[str, Any] = {
        "tool_used": True,
        "tool_name": TOOL_NAME,
        "query": question,
        "retrieved_chunks": docs,
        "retrieval_stage": Stage.SYNTHESIS,
        "complexity": Complexity.COMPLEX,
        "complexity_reason": complexity_reason,
        "sub_questions": list(sub_questions),
        "sub_agent_count": len(sub_results),
        "synthesis_merged_count": len(merged_docs),
        "sub_traces": sub_traces,
        "retrieval_status": status,
        "evidence_relevance": relevance,
        "evidence_answerability": answerability,
        "evidence_confidence": None,
        "route": route,
        "hitl_prompt": hitl_prompt,
        "hitl_options": hitl_options,
    }
    return {
        "docs": docs,
        "route": route,
        "retrieval_status": status,
        "hitl_prompt": hitl_prompt,
        "hitl_options": hitl_options,
        "rag_trace": trace,
    }
