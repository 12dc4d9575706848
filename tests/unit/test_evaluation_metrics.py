"""The evaluation metrics: hand-worked items and runs, and the ranking metrics checked against
trec_eval itself (pytrec_eval) on random graded queries."""

from __future__ import annotations

import math
import random

import numpy
import pytest
import pytrec_eval
from hypothesis import given
from hypothesis import strategies as st

from orchestrator_service.evaluation.metrics import (
    CUTOFFS,
    ITEM_METRIC_OF,
    LOWER_IS_BETTER,
    METRIC_NAMES,
    RunTable,
    answer_f1,
    item_metrics,
    percentile,
    run_metrics,
    tokens,
)
from orchestrator_service.evaluation.model import Judgement, Outcome


def test_ranking_metrics_of_a_hand_worked_item() -> None:
    judgement = Judgement(qrels={"d1": 2, "d2": 0, "d3": 1})
    outcome = Outcome(ranked_documents=("x", "d3", "d2", "d1"))

    values = item_metrics(judgement, outcome)

    assert values["recall@1"] == 0.0
    assert values["recall@3"] == 0.5
    assert values["recall@5"] == 1.0
    assert values["precision@1"] == 0.0
    assert values["precision@3"] == pytest.approx(1 / 3)
    # Over k even though only four documents came back.
    assert values["precision@5"] == pytest.approx(2 / 5)
    assert values["precision@10"] == pytest.approx(2 / 10)
    ideal = 2 + 1 / math.log2(3)
    assert values["ndcg@1"] == 0.0
    assert values["ndcg@3"] == pytest.approx((1 / math.log2(3)) / ideal)
    assert values["ndcg@5"] == pytest.approx((1 / math.log2(3) + 2 / math.log2(5)) / ideal)
    assert values["mrr@1"] == 0.0
    assert values["mrr@3"] == 0.5
    assert values["mrr@10"] == 0.5


def test_a_perfect_ranking_scores_one() -> None:
    values = item_metrics(
        Judgement(qrels={"a": 3, "b": 1}), Outcome(ranked_documents=("a", "b", "c"))
    )
    for k in CUTOFFS:
        assert values[f"ndcg@{k}"] == pytest.approx(1.0)
        assert values[f"mrr@{k}"] == 1.0
    assert values["recall@3"] == 1.0


def test_negative_grades_count_as_no_gain() -> None:
    values = item_metrics(
        Judgement(qrels={"bad": -2, "good": 1}), Outcome(ranked_documents=("bad", "good"))
    )
    assert values["ndcg@3"] == pytest.approx(1 / math.log2(3))
    assert values["precision@1"] == 0.0


def test_metrics_that_do_not_apply_are_absent() -> None:
    # Judged, but nothing relevant: no ranking metrics and no citation precision.
    judgement = Judgement(qrels={"d1": 0})
    outcome = Outcome(ranked_documents=("d1",), cited_documents=("d1",), latency_seconds=1.5)

    assert item_metrics(judgement, outcome) == {"latency_seconds": 1.5}


def test_route_citations_answer_and_groundedness() -> None:
    judgement = Judgement(
        qrels={"kb/a": 1, "kb/b": 1},
        expected_route="answer",
        reference_answer="The cat sat on the mat",
    )
    outcome = Outcome(
        ranked_documents=("kb/a",),
        route="answer",
        answer="a cat sat",
        cited_documents=("kb/a", "kb/c"),
        latency_seconds=0.25,
        answer_cosine=0.8,
        support_score=0.9,
    )

    values = item_metrics(judgement, outcome)

    assert values["route_correct"] == 1.0
    assert values["citation_precision"] == 0.5
    # Tokens: [cat, sat] vs [cat, sat, on, mat] → precision 1, recall 0.5.
    assert values["answer_f1"] == pytest.approx(2 / 3)
    assert values["answer_similarity"] == 0.8
    assert values["groundedness"] == 0.9
    assert values["latency_seconds"] == 0.25

    wrong = item_metrics(judgement, Outcome(route="no_knowledge"))
    assert wrong["route_correct"] == 0.0
    assert "citation_precision" not in wrong  # nothing cited
    assert "answer_f1" not in wrong  # no answer
    assert "answer_similarity" not in wrong
    assert "groundedness" not in wrong


def test_answer_metrics_need_a_reference() -> None:
    values = item_metrics(Judgement(), Outcome(answer="yes", answer_cosine=0.7))
    assert "answer_f1" not in values
    assert "answer_similarity" not in values


def test_tokens_split_chinese_by_character_and_drop_articles() -> None:
    assert tokens("The Cat, an 猫在 a-mat_2!") == ["cat", "猫", "在", "mat_2"]
    assert answer_f1("猫在垫子上", "猫在桌子上") == pytest.approx(0.8)
    assert answer_f1("the", "a") == 1.0  # both empty once the articles go
    assert answer_f1("the", "cat") == 0.0
    assert answer_f1("dog", "cat") == 0.0


@given(st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=40), st.floats(0, 100))
def test_percentile_matches_numpy(values: list[float], q: float) -> None:
    assert percentile(values, q) == pytest.approx(float(numpy.percentile(values, q)), abs=1e-6)


def test_run_metrics_of_a_hand_worked_run() -> None:
    judgements = [
        Judgement(qrels={"a": 1}, expected_route="answer"),
        Judgement(qrels={"b": 1}, expected_route="no_knowledge"),
        Judgement(expected_route="no_knowledge"),
        Judgement(),
    ]
    outcomes = [
        Outcome(ranked_documents=("a",), route="answer", latency_seconds=1.0),
        Outcome(ranked_documents=("x", "b"), route="no_knowledge", latency_seconds=2.0),
        Outcome(route="answer", latency_seconds=3.0, support_score=0.5),
        # Not judged on route: its no_knowledge counts for neither precision nor recall.
        Outcome(route="no_knowledge", latency_seconds=4.0),
    ]

    metrics = run_metrics(judgements, outcomes)

    assert metrics["recall@1"] == 0.5
    assert metrics["mrr@10"] == 0.75
    assert metrics["route_accuracy"] == pytest.approx(2 / 3)
    assert metrics["no_knowledge_precision"] == 1.0
    assert metrics["no_knowledge_recall"] == 0.5
    assert metrics["groundedness"] == 0.5
    assert metrics["latency_p50"] == 2.5
    assert metrics["latency_p95"] == pytest.approx(3.85)
    assert "citation_precision" not in metrics
    assert "answer_f1" not in metrics
    assert "latency_seconds" not in metrics
    assert list(metrics) == [name for name in METRIC_NAMES if name in metrics]


def test_no_knowledge_metrics_are_absent_when_their_denominator_is_zero() -> None:
    metrics = run_metrics(
        [Judgement(expected_route="answer")], [Outcome(route="answer", latency_seconds=1.0)]
    )
    assert "no_knowledge_precision" not in metrics
    assert "no_knowledge_recall" not in metrics
    assert metrics == {"route_accuracy": 1.0, "latency_p50": 1.0, "latency_p95": 1.0}


def test_an_empty_run_has_no_metrics() -> None:
    assert run_metrics([], []) == {}


def test_unpaired_lists_are_refused() -> None:
    with pytest.raises(ValueError):
        run_metrics([Judgement()], [])


def test_the_metric_tables_agree() -> None:
    assert len(set(METRIC_NAMES)) == len(METRIC_NAMES)
    assert set(METRIC_NAMES) >= LOWER_IS_BETTER
    assert set(ITEM_METRIC_OF) <= set(METRIC_NAMES)


def test_a_selection_of_items_scores_as_the_run_of_those_items() -> None:
    rng = random.Random(7)
    judgements, outcomes = _random_run(rng, 50)
    table = RunTable.of(judgements, outcomes)
    indices = [rng.randrange(50) for _ in range(50)]

    expected = run_metrics([judgements[i] for i in indices], [outcomes[i] for i in indices])

    assert table.metrics(indices) == pytest.approx(expected)


def _random_run(rng: random.Random, n: int) -> tuple[list[Judgement], list[Outcome]]:
    routes = ("answer", "clarify", "no_knowledge", "")
    judgements, outcomes = [], []
    for _ in range(n):
        qrels = {f"d{d}": rng.randint(0, 3) for d in rng.sample(range(20), rng.randint(0, 4))}
        judgements.append(Judgement(qrels=qrels, expected_route=rng.choice(routes)))
        outcomes.append(
            Outcome(
                ranked_documents=tuple(f"d{d}" for d in rng.sample(range(20), rng.randint(0, 8))),
                route=rng.choice(routes[:3]),
                latency_seconds=rng.uniform(0.1, 5),
            )
        )
    return judgements, outcomes


def test_ranking_metrics_match_trec_eval() -> None:
    rng = random.Random(20240611)
    qrels: dict[str, dict[str, int]] = {}
    runs: dict[str, dict[str, float]] = {}
    ours: dict[str, dict[str, float]] = {}
    for q in range(300):
        qid = f"q{q}"
        # A pool of 20 documents: some judged (0–3), the rest unjudged.
        judged = rng.sample(range(20), rng.randint(1, 8))
        qrels[qid] = {f"d{d}": rng.randint(0, 3) for d in judged}
        ranked = [f"d{d}" for d in rng.sample(range(20), rng.randint(0, 15))]
        # Strictly decreasing scores, so trec_eval keeps our order (it breaks ties by docid).
        runs[qid] = {doc: float(len(ranked) - rank) for rank, doc in enumerate(ranked)}
        ours[qid] = item_metrics(
            Judgement(qrels=qrels[qid]), Outcome(ranked_documents=tuple(ranked))
        )
    cuts = ",".join(map(str, CUTOFFS))
    evaluator = pytrec_eval.RelevanceEvaluator(
        qrels, {f"P.{cuts}", f"recall.{cuts}", f"ndcg_cut.{cuts}"}
    )
    theirs = evaluator.evaluate(runs)
    # trec_eval has no reciprocal rank at a cut-off: run it on each run truncated to k.
    reciprocal = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"})
    truncated = {
        k: reciprocal.evaluate({qid: dict(list(run.items())[:k]) for qid, run in runs.items()})
        for k in CUTOFFS
    }

    # trec_eval scores a query without a relevant document too; the metrics leave it out.
    compared = [qid for qid in qrels if any(g > 0 for g in qrels[qid].values())]
    assert len(compared) >= 200
    for qid in compared:
        for k in CUTOFFS:
            expected = {
                f"precision@{k}": theirs[qid][f"P_{k}"],
                f"recall@{k}": theirs[qid][f"recall_{k}"],
                f"ndcg@{k}": theirs[qid][f"ndcg_cut_{k}"],
                f"mrr@{k}": truncated[k][qid]["recip_rank"],
            }
            for name, value in expected.items():
                assert ours[qid][name] == pytest.approx(value, abs=1e-6), (qid, name)
    for qid in set(qrels) - set(compared):
        assert not any(name.endswith(f"@{k}") for k in CUTOFFS for name in ours[qid])
