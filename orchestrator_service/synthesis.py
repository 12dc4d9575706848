"""Synthesis of a complex question (SPEC.md §4, REFERENCE.md §2.10): accepted children's
evidence merged by order-preserving dedupe, and the parent trace with one of the four terminal
states. Pure: no model call, no I/O."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from orchestrator_service.routing import ANSWER, CLARIFY, NO_KNOWLEDGE, SCOPE_SELECT

TOOL_NAME = "search_knowledge_base"
ACCEPTED_STATUSES = frozenset({"answerable", "partial"})
_HITL_CHILD_STATUSES = ("needs_clarification", "needs_scope_selection")


def dedupe_key(doc: Mapping[str, Any]) -> str:
    """Two chunks are the same chunk when their `chunk_id` matches; without one, when filename,
    page and text all match (SPEC.md §4)."""
    chunk_id = str(doc.get("chunk_id") or "").strip()
    if chunk_id:
        return chunk_id
    return f"{doc.get('filename') or ''}|{doc.get('page_number') or ''}|{doc.get('text') or ''}"


def _fold_score(target: dict[str, Any], incoming: Mapping[str, Any]) -> None:
    """Max rule of REFERENCE.md §1.5: the incoming chunk's effective score (rerank_score, else
    score) raises the target's rerank_score when either has one, else its score."""
    value = incoming.get("rerank_score")
    if value is None:
        value = incoming.get("score")
    if value is None:
        return
    if target.get("rerank_score") is not None or incoming.get("rerank_score") is not None:
        current = target.get("rerank_score")
        target["rerank_score"] = value if current is None else max(current, value)
    else:
        current = target.get("score")
        target["score"] = value if current is None else max(current, value)


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
            _fold_score(kept, doc)
    result = list(merged.values())
    for rank, doc in enumerate(result, start=1):
        doc["rrf_rank"] = rank
    return result


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
    """The parent's state update and NEW raw trace (SPEC.md §2 C5, §4).

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
    if docs:
        any_partial = any(r.get("retrieval_status") == "partial" for r in accepted)
        status = "partial" if any_partial else "answerable"
        route = ANSWER
        relevance, answerability = "strong", ("partial" if any_partial else "sufficient")
    else:
        relevance = answerability = "none"
        hitl = [t for t in sub_traces if t.get("retrieval_status") in _HITL_CHILD_STATUSES]
        if hitl:
            scope = [t for t in hitl if t["retrieval_status"] == "needs_scope_selection"]
            status = (scope or hitl)[0]["retrieval_status"]
            route = SCOPE_SELECT if status == "needs_scope_selection" else CLARIFY
            hitl_prompt = "；".join(_unique(t.get("hitl_prompt") or "" for t in hitl))
            hitl_options = _unique(o for t in hitl for o in t.get("hitl_options") or ())
        else:
            status, route = "no_knowledge", NO_KNOWLEDGE
    trace: dict[str, Any] = {
        "tool_used": True,
        "tool_name": TOOL_NAME,
        "query": question,
        "retrieved_chunks": docs,
        "retrieval_stage": "synthesis",
        "complexity": "complex",
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
