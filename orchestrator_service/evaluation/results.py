"""One item's result as stored (a JSON body): what the item expected and what its run produced,
so metrics and comparisons are computed again from the stored row alone, even after the item
was deleted."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from orchestrator_service.evaluation.metrics import item_metrics
from orchestrator_service.evaluation.model import Item, Judgement, Outcome, judgement_of


def result_body(
    item: Item, outcome: Outcome | None, *, run_id: str = "", error: str = ""
) -> dict[str, Any]:
    judgement = judgement_of(item)
    body: dict[str, Any] = {
        "question": item.question,
        "qrels": dict(judgement.qrels),
        "expected_route": judgement.expected_route,
        "reference_answer": judgement.reference_answer,
        "run_id": run_id,
        "error": error,
    }
    if outcome is not None:
        body |= {
            "ranked": list(outcome.ranked_documents),
            "route": outcome.route,
            "answer": outcome.answer,
            "cited": list(outcome.cited_documents),
            "citations": [dict(c) for c in outcome.citations],
            "latency": outcome.latency_seconds,
            "answer_cosine": outcome.answer_cosine,
            "support_score": outcome.support_score,
            "metrics": item_metrics(judgement, outcome) if not error else {},
        }
    return body


def judgement_and_outcome(body: Mapping[str, Any]) -> tuple[Judgement, Outcome]:
    judgement = Judgement(
        qrels={k: int(v) for k, v in body.get("qrels", {}).items()},
        expected_route=body.get("expected_route", ""),
        reference_answer=body.get("reference_answer", ""),
    )
    outcome = Outcome(
        ranked_documents=tuple(body.get("ranked", ())),
        route=body.get("route", ""),
        answer=body.get("answer", ""),
        cited_documents=tuple(body.get("cited", ())),
        latency_seconds=float(body.get("latency", 0.0)),
        answer_cosine=body.get("answer_cosine"),
        support_score=body.get("support_score"),
    )
    return judgement, outcome
