"""Comparing two runs of the same items: differences, paired-bootstrap intervals, wins."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from orchestrator_service.evaluation.compare import MetricComparison, compare_runs
from orchestrator_service.evaluation.metrics import METRIC_NAMES, run_metrics
from orchestrator_service.evaluation.model import Judgement, Outcome


def _run(rng: random.Random, n: int) -> tuple[list[Judgement], list[Outcome]]:
    routes = ("answer", "clarify", "no_knowledge")
    judgements, outcomes = [], []
    for i in range(n):
        relevant = rng.sample(range(30), rng.randint(1, 3))
        judgements.append(
            Judgement(
                qrels={f"d{d}": rng.randint(1, 3) for d in relevant},
                expected_route=rng.choice(routes),
                reference_answer="the answer is forty two",
            )
        )
        outcomes.append(
            Outcome(
                ranked_documents=tuple(f"d{d}" for d in rng.sample(range(30), 10)),
                route=rng.choice(routes),
                answer=rng.choice(("forty two", "the answer", "no idea")),
                cited_documents=(f"d{relevant[0]}", "d99"),
                latency_seconds=1.0 + i % 7,
                support_score=rng.random(),
            )
        )
    return judgements, outcomes


def _by_metric(comparisons: list[MetricComparison]) -> dict[str, MetricComparison]:
    return {c.metric: c for c in comparisons}


def test_identical_runs_differ_by_nothing() -> None:
    judgements, outcomes = _run(random.Random(1), 60)

    comparisons = compare_runs(judgements, outcomes, outcomes, resamples=200)

    assert [c.metric for c in comparisons] == list(run_metrics(judgements, outcomes))
    for c in comparisons:
        assert c.difference == 0.0
        assert (c.ci_low, c.ci_high) == (0.0, 0.0)
        assert c.lost == c.won == 0
        if c.metric.startswith("no_knowledge"):
            assert c.tied == 0
        else:
            assert c.tied > 0, c.metric


def test_a_known_shift_is_measured_and_its_interval_excludes_zero() -> None:
    judgements, outcomes_a = _run(random.Random(2), 100)
    # B grounds every answer 0.1 better and answers 0.5 s sooner.
    outcomes_b = [
        replace(
            o, support_score=(o.support_score or 0) + 0.1, latency_seconds=o.latency_seconds - 0.5
        )
        for o in outcomes_a
    ]

    compared = _by_metric(compare_runs(judgements, outcomes_a, outcomes_b, resamples=300))

    grounded = compared["groundedness"]
    assert grounded.difference == pytest.approx(0.1)
    assert grounded.mean_b - grounded.mean_a == pytest.approx(0.1)
    assert grounded.ci_low == pytest.approx(0.1)
    assert grounded.ci_high == pytest.approx(0.1)
    assert (grounded.won, grounded.lost, grounded.tied) == (100, 0, 0)
    for name in ("latency_p50", "latency_p95"):
        latency = compared[name]
        assert latency.difference == pytest.approx(-0.5)
        assert latency.ci_high < 0
        # Lower latency is better: every item is a win for B.
        assert (latency.won, latency.lost, latency.tied) == (100, 0, 0)
    assert compared["ndcg@10"].difference == 0.0


def test_a_noisy_improvement_gets_an_interval_around_it() -> None:
    rng = random.Random(3)
    judgements, outcomes_a = _run(rng, 200)
    outcomes_b = [
        replace(o, support_score=(o.support_score or 0) + rng.uniform(0.0, 0.4)) for o in outcomes_a
    ]

    grounded = _by_metric(compare_runs(judgements, outcomes_a, outcomes_b))["groundedness"]

    assert 0 < grounded.ci_low < grounded.difference < grounded.ci_high
    assert grounded.difference == pytest.approx(0.2, abs=0.05)


def test_route_accuracy_counts_items_by_route_correct() -> None:
    judgements = [Judgement(expected_route="answer"), Judgement(expected_route="no_knowledge")]
    outcomes_a = [Outcome(route="clarify"), Outcome(route="no_knowledge")]
    outcomes_b = [Outcome(route="answer"), Outcome(route="answer")]

    compared = _by_metric(compare_runs(judgements, outcomes_a, outcomes_b, resamples=50))

    route = compared["route_accuracy"]
    assert (route.mean_a, route.mean_b, route.difference) == (0.5, 0.5, 0.0)
    assert (route.won, route.lost, route.tied) == (1, 1, 0)
    # B never predicts no_knowledge: its precision is undefined, so the metric is not compared.
    assert "no_knowledge_precision" not in compared
    recall = compared["no_knowledge_recall"]
    assert (recall.difference, recall.won, recall.lost, recall.tied) == (-1.0, 0, 0, 0)


def test_the_bootstrap_repeats_with_its_seed() -> None:
    rng = random.Random(4)
    judgements, outcomes_a = _run(rng, 80)
    _, outcomes_b = _run(rng, 80)

    first = compare_runs(judgements, outcomes_a, outcomes_b, resamples=100, seed=11)
    again = compare_runs(judgements, outcomes_a, outcomes_b, resamples=100, seed=11)
    other = compare_runs(judgements, outcomes_a, outcomes_b, resamples=100, seed=12)

    assert first == again
    assert [(c.ci_low, c.ci_high) for c in first] != [(c.ci_low, c.ci_high) for c in other]
    assert [c.difference for c in first] == [c.difference for c in other]


def test_no_items_compare_to_nothing() -> None:
    assert compare_runs([], [], []) == []


def test_three_hundred_items_and_a_thousand_resamples_run() -> None:
    rng = random.Random(5)
    judgements, outcomes_a = _run(rng, 300)
    _, outcomes_b = _run(rng, 300)

    comparisons = compare_runs(judgements, outcomes_a, outcomes_b, resamples=1000)

    assert [c.metric for c in comparisons] == [
        name for name in METRIC_NAMES if name in {c.metric for c in comparisons}
    ]
    assert {"ndcg@10", "latency_p95", "no_knowledge_recall"} <= {c.metric for c in comparisons}
