"""Evaluation metrics: what one item scored and what a run of items scored. Pure: the ranking
metrics follow trec_eval's definitions (P_k, ndcg_cut_k, recip_rank) so figures compare with
published ones."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from orchestrator_service.evaluation.model import Judgement, Outcome
from shared.lang import CJK_RANGE

CUTOFFS = (1, 3, 5, 10)
NO_KNOWLEDGE = "no_knowledge"

_RANKING = ("recall", "precision", "ndcg", "mrr")
#: Per-item metrics whose run-level value is their mean, under the same name except where
#: renamed here.
_MEAN_NAMES: dict[str, str] = {
    **{f"{m}@{k}": f"{m}@{k}" for m in _RANKING for k in CUTOFFS},
    "route_correct": "route_accuracy",
    "citation_precision": "citation_precision",
    "answer_f1": "answer_f1",
    "answer_similarity": "answer_similarity",
    "groundedness": "groundedness",
}

#: Every run-level metric, in display order.
METRIC_NAMES: tuple[str, ...] = (
    *(f"{m}@{k}" for m in _RANKING for k in CUTOFFS),
    "route_accuracy",
    "no_knowledge_precision",
    "no_knowledge_recall",
    "citation_precision",
    "answer_f1",
    "answer_similarity",
    "groundedness",
    "latency_p50",
    "latency_p95",
)
LOWER_IS_BETTER = frozenset({"latency_p50", "latency_p95"})

#: Run-level metric → the per-item metric that decides whether one item won or lost; run-level
#: metrics missing here (no_knowledge_*) have no per-item counterpart.
ITEM_METRIC_OF: dict[str, str] = {
    **{run: item for item, run in _MEAN_NAMES.items()},
    "latency_p50": "latency_seconds",
    "latency_p95": "latency_seconds",
}

# Each CJK character is a word of its own (Chinese is not written with spaces); the rest of
# \w is grouped into words as SQuAD does.
_TOKEN = re.compile(f"[{CJK_RANGE}]|[^\\W{CJK_RANGE}]+")
_ARTICLES = frozenset({"a", "an", "the"})


def item_metrics(judgement: Judgement, outcome: Outcome) -> dict[str, float]:
    """One item's metrics by name. A metric that does not apply to the item (ranking metrics
    without a relevant document, route without an expected route, …) is absent, not 0, so a
    run's mean is over the items it applies to."""
    values: dict[str, float] = {}
    relevant = {key for key, grade in judgement.qrels.items() if grade > 0}
    if relevant:
        values.update(_ranking_metrics(judgement, outcome.ranked_documents, relevant))
        if outcome.cited_documents:
            cited = set(outcome.cited_documents)
            values["citation_precision"] = len(cited & relevant) / len(cited)
    if judgement.expected_route:
        values["route_correct"] = float(outcome.route == judgement.expected_route)
    if judgement.reference_answer:
        if outcome.answer:
            values["answer_f1"] = answer_f1(outcome.answer, judgement.reference_answer)
        if outcome.answer_cosine is not None:
            values["answer_similarity"] = outcome.answer_cosine
    if outcome.support_score is not None:
        values["groundedness"] = outcome.support_score
    values["latency_seconds"] = outcome.latency_seconds
    return values


def _ranking_metrics(
    judgement: Judgement, ranked: Sequence[str], relevant: set[str]
) -> dict[str, float]:
    # trec_eval counts a negative grade as no gain, like an unjudged document.
    gains = [max(judgement.qrels.get(key, 0), 0) for key in ranked[: max(CUTOFFS)]]
    ideal = sorted((g for g in judgement.qrels.values() if g > 0), reverse=True)
    first_hit = next((rank for rank, key in enumerate(ranked, 1) if key in relevant), None)
    values: dict[str, float] = {}
    for k in CUTOFFS:
        hits = sum(1 for key in ranked[:k] if key in relevant)
        values[f"recall@{k}"] = hits / len(relevant)
        # Over k, not over what came back: trec_eval's P_k.
        values[f"precision@{k}"] = hits / k
        values[f"ndcg@{k}"] = _dcg(gains[:k]) / _dcg(ideal[:k])
        values[f"mrr@{k}"] = 1 / first_hit if first_hit is not None and first_hit <= k else 0.0
    return values


def _dcg(gains: Sequence[int]) -> float:
    return sum(gain / math.log2(rank + 1) for rank, gain in enumerate(gains, 1) if gain)


def tokens(text: str) -> list[str]:
    """SQuAD-style answer tokens: lower-cased words without English articles, each CJK
    character a token of its own."""
    return [t for t in _TOKEN.findall(text.lower()) if t not in _ARTICLES]


def answer_f1(answer: str, reference: str) -> float:
    """SQuAD's token F1 of an answer against the reference answer."""
    predicted, gold = tokens(answer), tokens(reference)
    if not predicted or not gold:
        # SQuAD's rule: nothing left on either side scores 1 only when both are empty.
        return float(predicted == gold)
    common = sum((Counter(predicted) & Counter(gold)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(predicted), common / len(gold)
    return 2 * precision * recall / (precision + recall)


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0–100) with linear interpolation between closest ranks, as
    numpy.percentile's default method."""
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


@dataclass(frozen=True, slots=True)
class RunTable:
    """A run's per-item metrics laid out by column, so that the run-level metrics of any
    selection of its items (a bootstrap resample) cost a few sums instead of recomputing
    every item."""

    #: Per-item metric dicts, as `item_metrics` returned them.
    items: tuple[dict[str, float], ...]
    #: Per-item metric → (value or 0.0 per item, 1 where the item has it else 0).
    columns: dict[str, tuple[list[float], list[int]]]
    #: Per item, 1 when it counts in no_knowledge precision / recall / both.
    predicted_no_knowledge: list[int]
    expected_no_knowledge: list[int]
    correct_no_knowledge: list[int]
    latencies: list[float]

    @classmethod
    def of(cls, judgements: Sequence[Judgement], outcomes: Sequence[Outcome]) -> RunTable:
        if len(judgements) != len(outcomes):
            raise ValueError(f"{len(judgements)} judgements but {len(outcomes)} outcomes")
        items = tuple(item_metrics(j, o) for j, o in zip(judgements, outcomes, strict=True))
        columns = {
            name: (
                [values.get(name, 0.0) for values in items],
                [int(name in values) for values in items],
            )
            for name in _MEAN_NAMES
        }
        judged = [(j.expected_route, o.route) for j, o in zip(judgements, outcomes, strict=True)]
        predicted = [int(bool(e) and r == NO_KNOWLEDGE) for e, r in judged]
        expected = [int(e == NO_KNOWLEDGE) for e, _ in judged]
        return cls(
            items=items,
            columns=columns,
            predicted_no_knowledge=predicted,
            expected_no_knowledge=expected,
            correct_no_knowledge=[p * e for p, e in zip(predicted, expected, strict=True)],
            latencies=[o.latency_seconds for o in outcomes],
        )

    def metrics(self, indices: Sequence[int] | None = None) -> dict[str, float]:
        """The run-level metrics over the items at `indices` (repeats count again; default:
        every item once), in METRIC_NAMES order; a metric no selected item has is absent."""
        if indices is None:
            indices = range(len(self.items))
        if not indices:
            return {}
        found: dict[str, float] = {}
        for item_name, run_name in _MEAN_NAMES.items():
            values, present = self.columns[item_name]
            count = sum(map(present.__getitem__, indices))
            if count:
                found[run_name] = sum(map(values.__getitem__, indices)) / count
        correct = sum(map(self.correct_no_knowledge.__getitem__, indices))
        predicted = sum(map(self.predicted_no_knowledge.__getitem__, indices))
        expected = sum(map(self.expected_no_knowledge.__getitem__, indices))
        if predicted:
            found["no_knowledge_precision"] = correct / predicted
        if expected:
            found["no_knowledge_recall"] = correct / expected
        latencies = [self.latencies[i] for i in indices]
        found["latency_p50"] = percentile(latencies, 50)
        found["latency_p95"] = percentile(latencies, 95)
        return {name: found[name] for name in METRIC_NAMES if name in found}


def run_metrics(judgements: Sequence[Judgement], outcomes: Sequence[Outcome]) -> dict[str, float]:
    """A run's metrics over paired judgements and outcomes: each per-item metric's mean over
    the items it applies to (`route_correct` as `route_accuracy`), no_knowledge precision and
    recall over the items with an expected route (absent when their denominator is 0), and the
    latency's p50 and p95 in seconds. No items → {}."""
    return RunTable.of(judgements, outcomes).metrics()
