"""The HTML report is one self-contained page rendered from records: every metric, SVG charts,
the worst items worst first with their trace and feedback (or "no history record"), all text
escaped, no script and no external asset."""

from __future__ import annotations

import re

from supermew.v1 import evaluation_pb2 as E
from supermew.v1 import trace_pb2

from orchestrator_service.evaluation.metrics import METRIC_NAMES
from orchestrator_service.evaluation.report import (
    ItemHistory,
    Report,
    ordered_metrics,
    render_html,
    worst_results,
)

RUN = "evaluation_sets/hr/runs/0123456789abcdef0123"
BASE = "evaluation_sets/hr/runs/0123456789abcdef0000"
EVIL = '<script>alert("x")</script> & <img src=x>'


def _run(name: str, scale: float) -> E.EvaluationRun:
    return E.EvaluationRun(
        name=name,
        config=E.RunConfig(mode=E.RunConfig.RUN),
        state=E.EvaluationRun.SUCCEEDED,
        metrics={n: 0.5 * scale for n in METRIC_NAMES},
        items_total=3,
        items_done=3,
    )


def _result(item: str, ndcg: float, *, route_ok: float = 1.0, run_id: str = "", **kw):
    return E.EvaluationResult(
        item=f"evaluation_sets/hr/items/{item}",
        question=kw.pop("question", f"question {item}"),
        route=kw.pop("route", "answer"),
        metrics={"ndcg@10": ndcg, "route_correct": route_ok},
        latency_seconds=0.25,
        run_id=run_id,
        **kw,
    )


def _report(**overrides) -> Report:
    traced = _result("traced", 0.2, run_id="r-traced", answer=EVIL)
    bare = _result("bare", 0.1, run_id="r-bare", question=EVIL)
    record = E.RunRecord(
        name="runs/r-traced",
        rag_trace=trace_pb2.RagTrace(query="trace <query>", complexity="simple"),
    )
    feedback = E.Feedback(
        rating=E.Feedback.THUMBS_DOWN,
        reasons=[E.Feedback.WRONG_ANSWER],
        comment="cites <the wrong> page",
    )
    fields = {
        "run": _run(RUN, 1.0),
        "worst": [bare, traced],
        "histories": {
            "r-traced": ItemHistory(record, (feedback,)),
            "r-bare": ItemHistory(None),
        },
    }
    return Report(**{**fields, **overrides})


def test_every_metric_svg_charts_and_no_script_or_external_asset() -> None:
    page = render_html(_report())
    assert page.startswith("<!DOCTYPE html>")
    for name in METRIC_NAMES:
        assert f"<td>{name}</td>" in page
    assert page.count("<svg") == 2  # quality (0–1) and latency (seconds)
    assert "<rect" in page
    assert "<script" not in page and "<link" not in page
    assert not re.search(r"<[^>]*\b(src|href)\s*=", page)  # no attribute loads anything
    assert "http://" not in page and "https://" not in page and "url(" not in page


def test_text_from_the_records_is_escaped() -> None:
    page = render_html(_report())
    assert EVIL not in page and "<img" not in page
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &lt;img src=x&gt;" in page
    assert "cites &lt;the wrong&gt; page" in page
    assert "trace &lt;query&gt;" in page


def test_worst_items_in_order_with_trace_feedback_or_no_history_record() -> None:
    page = render_html(_report())
    assert page.index("<h3>bare</h3>") < page.index("<h3>traced</h3>")
    bare, traced = page.split("<h3>traced</h3>")
    assert "no history record" in bare and "<details>" not in bare
    assert "no history record" not in traced
    assert "<details><summary>trace of runs/r-traced</summary>" in traced
    assert "&quot;complexity&quot;: &quot;simple&quot;" in traced  # the trace as JSON
    assert "THUMBS_DOWN — WRONG_ANSWER — “cites &lt;the wrong&gt; page”" in traced


def test_an_item_without_a_run_id_has_no_history_record() -> None:
    page = render_html(_report(worst=[_result("retrieval-only", 0.0)], histories={}))
    assert "no history record" in page


def test_against_shows_the_comparison_with_its_interval() -> None:
    rows = [
        E.MetricComparison(
            metric="ndcg@10", mean_a=0.5, mean_b=0.6, difference=0.1, ci_low=0.02, ci_high=0.2,
            won=2, lost=0, tied=1,
        ),
        E.MetricComparison(
            metric="latency_p95", mean_a=1.0, mean_b=1.5, difference=0.5, ci_low=0.1,
            ci_high=0.9, won=0, lost=3, tied=0,
        ),
    ]  # fmt: skip
    page = render_html(_report(against=_run(BASE, 0.5), comparison=rows, items_paired=3))
    assert BASE in page and "3 items paired." in page
    assert '<td class="num better">+0.1000</td>' in page
    assert '<td class="num worse">+0.5000</td>' in page  # slower is worse
    assert "[0.0200, 0.2000]" in page and "2 / 0 / 1" in page
    assert page.index("<td>ndcg@10</td>") < page.index("<td>latency_p95</td>")
    assert page.count('fill="#f58518"') > 0  # the baseline's bars beside the run's


def test_worst_results_puts_failures_then_wrong_routes_then_lowest_metric() -> None:
    results = [
        _result("good", 0.9),
        _result("unjudged", 0.0),
        _result("low", 0.1),
        _result("wrong-route", 0.8, route_ok=0.0),
        _result("failed", 0.95, error="UNAVAILABLE: retrieval is down"),
    ]
    del results[1].metrics["ndcg@10"]
    ranked = [r.item.rsplit("/", 1)[1] for r in worst_results(results, 10)]
    assert ranked == ["failed", "wrong-route", "low", "good", "unjudged"]
    assert len(worst_results(results, 2)) == 2


def test_unknown_metrics_follow_the_known_ones() -> None:
    assert ordered_metrics(["zeta", "latency_p50", "recall@1", "alpha"]) == [
        "recall@1",
        "latency_p50",
        "alpha",
        "zeta",
    ]


def test_the_summary_shows_each_runs_index() -> None:
    against = _run(BASE, 0.5)
    against.config.index = "knowledge_bases/hr/indexes/v2"
    page = render_html(_report(against=against))
    assert "<th>index</th>" in page
    assert f"<td>{RUN}</td><td>RUN</td><td>active</td>" in page
    assert f"<td>{BASE}</td><td>RUN</td><td>knowledge_bases/hr/indexes/v2</td>" in page
