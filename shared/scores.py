"""Chunk score arithmetic both services share (docs/api.md#threshold-and-effective-score): a chunk's
effective score and the max rule that folds a duplicate's or child's score into the chunk kept."""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from typing import Any

__all__ = ["effective_score", "fold_score"]


def effective_score(doc: Mapping[str, Any]) -> float | None:
    """rerank_score when present, else score, else None
    (docs/api.md#threshold-and-effective-score)."""
    if doc.get("rerank_score") is not None:
        return float(doc["rerank_score"])
    if doc.get("score") is not None:
        return float(doc["score"])
    return None


def fold_score(target: MutableMapping[str, Any], incoming: Mapping[str, Any]) -> None:
    """The max rule (docs/api.md#auto-merge): `incoming`'s effective score raises the target's
    rerank_score when either of them has one, else its score. A score-less `incoming` leaves
    the target as it is."""
    value = effective_score(incoming)
    if value is None:
        return
    key = (
        "rerank_score"
        if target.get("rerank_score") is not None or incoming.get("rerank_score") is not None
        else "score"
    )
    current = target.get(key)
    target[key] = value if current is None else max(float(current), value)
