"""Two runs of the same items compared metric by metric: the difference, its paired-bootstrap
95 % interval, and how many items each run won. Pure and seeded, so a comparison repeats."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from orchestrator_service.evaluation.metrics import (
    ITEM_METRIC_OF,
    LOWER_IS_BETTER,
    RunTable,
    percentile,
)
from orchestrator_service.evaluation.model import Judgement, Outcome

#: Per-item differences this small are ties (floating-point noise, not a win).
TIE_TOLERANCE = 1e-12


@dataclass(frozen=True, slots=True)
class MetricComparison:
    """One metric of run A against run B over the same items."""

    metric: str
    mean_a: float
    mean_b: float
    #: mean_b − mean_a.
    difference: float
    #: The 2.5th and 97.5th percentiles of the bootstrap's differences; NaN when no resample
    #: had the metric in both runs.
    ci_low: float
    ci_high: float
    #: Items where B did better / worse / the same on the metric's per-item value, counted
    #: over items that have it in both runs; all 0 for a metric without one (no_knowledge_*).
    won: int
    lost: int
    tied: int


def compare_runs(
    judgements: Sequence[Judgement],
    outcomes_a: Sequence[Outcome],
    outcomes_b: Sequence[Outcome],
    *,
    resamples: int = 1000,
    seed: int = 0,
) -> list[MetricComparison]:
    """Every metric both runs have, in METRIC_NAMES order. The interval is a paired bootstrap:
    each resample draws len(items) indices with replacement, the same for both runs, and
    recomputes the run-level metric on them (so percentiles and ratios resample as such); a
    resample where either run lacks the metric is skipped."""
    table_a, table_b = RunTable.of(judgements, outcomes_a), RunTable.of(judgements, outcomes_b)
    full_a, full_b = table_a.metrics(), table_b.metrics()
    names = [name for name in full_a if name in full_b]
    if not names:
        return []
    n = len(judgements)
    population = range(n)
    rng = random.Random(seed)
    differences: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(resamples):
        indices = rng.choices(population, k=n)
        sample_a, sample_b = table_a.metrics(indices), table_b.metrics(indices)
        for name in names:
            if name in sample_a and name in sample_b:
                differences[name].append(sample_b[name] - sample_a[name])
    comparisons = []
    for name in names:
        won, lost, tied = _wins(name, table_a, table_b)
        spread = differences[name]
        comparisons.append(
            MetricComparison(
                metric=name,
                mean_a=full_a[name],
                mean_b=full_b[name],
                difference=full_b[name] - full_a[name],
                ci_low=percentile(spread, 2.5) if spread else math.nan,
                ci_high=percentile(spread, 97.5) if spread else math.nan,
                won=won,
                lost=lost,
                tied=tied,
            )
        )
    return comparisons


def _wins(metric: str, table_a: RunTable, table_b: RunTable) -> tuple[int, int, int]:
    """(won, lost, tied): items where B's per-item value is better, worse, the same."""
    won = lost = tied = 0
    item_metric = ITEM_METRIC_OF.get(metric)
    if item_metric is None:
        return won, lost, tied
    sign = -1.0 if metric in LOWER_IS_BETTER else 1.0
    for values_a, values_b in zip(table_a.items, table_b.items, strict=True):
        if item_metric in values_a and item_metric in values_b:
            gain = sign * (values_b[item_metric] - values_a[item_metric])
            if gain > TIE_TOLERANCE:
                won += 1
            elif gain < -TIE_TOLERANCE:
                lost += 1
            else:
                tied += 1
    return won, lost, tied
