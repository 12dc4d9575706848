"""Auto-merging (docs/api.md#auto-merge): two passes, leaves → parents, then the
result → grandparents. Pure functions; the caller fetches the parents a pass asks for."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from shared.scores import fold_score

Doc = dict[str, Any]


def merge_key(chunk_id: str, doc: Mapping[str, Any]) -> str:
    """What identifies `doc`'s parent `chunk_id` among the candidates: the id in the version
    of the child that names it (`{chunk_id}#{version}`), since one chunk id names a chunk in
    each knowledge base (every version is unique); the plain id for a doc without a version."""
    version = doc.get("version")
    return f"{chunk_id}#{version}" if version else chunk_id


def _parent_of(doc: Mapping[str, Any]) -> str:
    parent = str(doc.get("parent_chunk_id") or "").strip()
    return merge_key(parent, doc) if parent else ""


def parents_to_merge(docs: list[Doc], threshold: int) -> dict[str, int]:
    """Parents (by `merge_key`) whose children currently in `docs` number at least
    `threshold`, mapped to the level of those children (the parent lives one level up)."""
    counts = Counter(p for p in map(_parent_of, docs) if p)
    levels: dict[str, int] = {}
    for doc in docs:
        parent = _parent_of(doc)
        if parent and counts[parent] >= threshold:
            levels.setdefault(parent, int(doc.get("chunk_level") or 0))
    return levels


def merge_pass(
    docs: list[Doc], threshold: int, parents: Mapping[str, Mapping[str, Any]]
) -> tuple[list[Doc], int]:
    """Replace each qualifying group of siblings by its parent, placed at the first child's
    position, scored with the best child score; returns (docs, children replaced). `parents`
    is keyed by `merge_key`; a parent it does not hold leaves its children as they are."""
    qualifying = parents_to_merge(docs, threshold)
    if not qualifying:
        return list(docs), 0
    group_size = Counter(p for p in map(_parent_of, docs) if p in qualifying)
    placed: dict[str, Doc] = {}
    out: list[Doc] = []
    replaced = 0
    for doc in docs:
        parent_id = _parent_of(doc)
        if parent_id not in qualifying or parent_id not in parents:
            out.append(doc)
            continue
        replaced += 1
        if parent_id in placed:
            fold_score(placed[parent_id], doc)
            continue
        parent = dict(parents[parent_id])
        parent.pop("score", None)
        parent.pop("id", None)
        fold_score(parent, doc)
        parent["merged_from_children"] = True
        parent["merged_child_count"] = group_size[parent_id]
        placed[parent_id] = parent
        out.append(parent)
    return out, replaced


@dataclass(frozen=True, slots=True)
class MergeOutcome:
    """What auto-merge did to one candidate list (the H fields of the retrieval meta)."""

    docs: list[Doc]
    enabled: bool
    threshold: int
    replaced: int
    steps: int

    @property
    def applied(self) -> bool:
        return self.replaced > 0
