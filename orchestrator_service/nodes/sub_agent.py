"""C2–C4 rag_sub_agent (docs/trace.md#node-by-node): initial retrieval and one grading for one
sub-question, never a rewrite; returns only its `sub_results` entry."""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from orchestrator_service.nodes.grade import grade_documents
from orchestrator_service.nodes.retrieve import retrieve_initial
from orchestrator_service.runtime import RunContext
from orchestrator_service.state import RagState


async def rag_sub_agent(state: RagState, runtime: Runtime[RunContext]) -> dict[str, Any]:
    local: dict[str, Any] = dict(state)
    local.update(await retrieve_initial(local, runtime))  # type: ignore[arg-type]
    local.update(await grade_documents(local, runtime))  # type: ignore[arg-type]
    return {
        "sub_results": [
            {
                "index": local.get("sub_index"),
                "question": local["question"],
                "docs": local.get("docs") or [],
                "retrieval_status": local.get("retrieval_status"),
                "route": local.get("route"),
                "rag_trace": local.get("rag_trace"),
            }
        ]
    }
