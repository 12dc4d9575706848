"""The HTML report of an evaluation run: one self-contained page (inline CSS and SVG, no
scripts, no external assets) rendered by a pure function from the records the CLI fetched, so
the page can be tested without a server."""

from __future__ import annotations

import html
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from supermew.v1 import evaluation_pb2

from orchestrator_service.evaluation.metrics import LOWER_IS_BETTER, METRIC_NAMES
from shared.codec import rag_trace_from_proto

#: The per-item metric the worst items are ranked by (lowest first).
WORST_METRIC = "ndcg@10"

_CHART_WIDTH = 360
_BAR_HEIGHT = 12
_LABEL_WIDTH = 170
_COLOURS = ("#4c78a8", "#f58518")

_CSS = """
body{font-family:system-ui,sans-serif;margin:2rem auto;max-width:1100px;color:#222}
h1{font-size:1.4rem}h2{font-size:1.15rem;margin-top:2rem}
table{border-collapse:collapse;margin:.5rem 0}
th,td{border:1px solid #ccc;padding:.25rem .5rem;text-align:left;vertical-align:top}
td.num{text-align:right;font-variant-numeric:tabular-nums}
.better{color:#1a7f37}.worse{color:#cf222e}.muted{color:#777}
.item{border:1px solid #ddd;border-radius:4px;padding:.5rem 1rem;margin:1rem 0}
pre{background:#f6f8fa;padding:.5rem;overflow-x:auto;font-size:.8rem}
.legend span{display:inline-block;width:.8rem;height:.8rem;margin:0 .3rem 0 1rem}
"""


@dataclass(frozen=True, slots=True)
class ItemHistory:
    """What run history holds for one result's run_id; `record` None means no record (history
    off, expired, or the server does not serve history yet)."""

    record: evaluation_pb2.RunRecord | None
    feedback: tuple[evaluation_pb2.Feedback, ...] = ()


@dataclass(frozen=True, slots=True)
class Report:
    """Everything the page shows. `against` is the baseline `run` is compared with (the
    comparison's a), `worst` the results to list, `histories` keyed by result run_id."""

    run: evaluation_pb2.EvaluationRun
    worst: Sequence[evaluation_pb2.EvaluationResult]
    histories: Mapping[str, ItemHistory] = field(default_factory=dict)
    against: evaluation_pb2.EvaluationRun | None = None
    comparison: Sequence[evaluation_pb2.MetricComparison] = ()
    items_paired: int = 0


def ordered_metrics(names: Iterable[str]) -> list[str]:
    """METRIC_NAMES order, then any metric the server added that this client does not know,
    alphabetically: a newer server must not make a metric vanish from the output."""
    present = set(names)
    known = [name for name in METRIC_NAMES if name in present]
    return known + sorted(present - set(METRIC_NAMES))


def worst_results(
    results: Iterable[evaluation_pb2.EvaluationResult],
    count: int,
    metric: str = WORST_METRIC,
) -> list[evaluation_pb2.EvaluationResult]:
    """The `count` worst results: failed calls first, then a wrong route (RUN mode), then the
    lowest `metric`; results without the metric last, as nothing says they did badly. Stable,
    so ties keep the item order."""

    def key(result: evaluation_pb2.EvaluationResult) -> tuple[int, int, float]:
        route_wrong = result.metrics.get("route_correct", 1.0) < 1.0
        value = result.metrics.get(metric)
        return (
            0 if result.error else 1,
            0 if route_wrong else 1,
            value if value is not None else math.inf,
        )

    return sorted(results, key=key)[:count]


def item_id(name: str) -> str:
    """`evaluation_sets/{set}/items/{id}` → id."""
    return name.rsplit("/", 1)[-1]


def fmt(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.4f}"


def render_html(report: Report) -> str:
    """The whole page as one string; every piece of text from the records is escaped."""
    run = report.run
    title = f"Evaluation report — {run.name}"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{_e(title)}</h1>",
        _run_summary(run, report.against),
        "<h2>Metrics</h2>",
        _metric_table(report.run),
        *(
            [f"<h2>Compared with {_e(report.against.name)}</h2>", _comparison_table(report)]
            if report.against is not None and report.comparison
            else []
        ),
        "<h2>Metrics per run</h2>",
        _charts(report),
        f"<h2>Worst items ({len(report.worst)})</h2>",
        *(_worst_item(r, report.histories) for r in report.worst),
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _run_summary(
    run: evaluation_pb2.EvaluationRun, against: evaluation_pb2.EvaluationRun | None
) -> str:
    rows = [("run", run)] + ([("against (baseline)", against)] if against is not None else [])
    body = "".join(
        f"<tr><th>{_e(label)}</th><td>{_e(r.name)}</td>"
        f"<td>{_e(evaluation_pb2.RunConfig.Mode.Name(r.config.mode))}</td>"
        f"<td>{_e(r.config.index or 'active')}</td>"
        f"<td>{_e(evaluation_pb2.EvaluationRun.State.Name(r.state))}</td>"
        f'<td class="num">{r.items_done}/{r.items_total}</td>'
        f'<td class="num">{r.items_failed}</td></tr>'
        for label, r in rows
    )
    head = (
        "<tr><th></th><th>name</th><th>mode</th><th>index</th><th>state</th><th>items</th>"
        "<th>failed</th></tr>"
    )
    return f"<table>{head}{body}</table>"


def _metric_table(run: evaluation_pb2.EvaluationRun) -> str:
    rows = "".join(
        f'<tr><td>{_e(name)}</td><td class="num">{fmt(run.metrics[name])}</td></tr>'
        for name in ordered_metrics(run.metrics)
    )
    return f"<table><tr><th>metric</th><th>value</th></tr>{rows}</table>"


def _comparison_table(report: Report) -> str:
    head = (
        "<tr><th>metric</th><th>against (a)</th><th>run (b)</th><th>b − a</th>"
        "<th>95% CI</th><th>won / lost / tied</th></tr>"
    )
    by_name = {row.metric: row for row in report.comparison}
    rows_html = []
    for name in ordered_metrics(by_name):
        row = by_name[name]
        rows_html.append(
            f"<tr><td>{_e(name)}</td>"
            f'<td class="num">{fmt(row.mean_a)}</td><td class="num">{fmt(row.mean_b)}</td>'
            f'<td class="{f"num {_verdict(row)}".strip()}">{row.difference:+.4f}</td>'
            f'<td class="num">[{fmt(row.ci_low)}, {fmt(row.ci_high)}]</td>'
            f'<td class="num">{row.won} / {row.lost} / {row.tied}</td></tr>'
        )
    note = f'<p class="muted">{report.items_paired} items paired.</p>'
    return f"<table>{head}{''.join(rows_html)}</table>{note}"


def _verdict(row: evaluation_pb2.MetricComparison) -> str:
    """`better` / `worse` only when the whole interval is on one side of 0."""
    if math.isnan(row.ci_low) or math.isnan(row.ci_high):
        return ""
    sign = -1 if row.metric in LOWER_IS_BETTER else 1
    low, high = sorted((sign * row.ci_low, sign * row.ci_high))
    return "better" if low > 0 else "worse" if high < 0 else ""


def _charts(report: Report) -> str:
    runs = [report.run] + ([report.against] if report.against is not None else [])
    names = ordered_metrics(name for r in runs for name in r.metrics)
    legend = "".join(
        f'<span style="background:{_COLOURS[i]}"></span>{_e(r.name)}' for i, r in enumerate(runs)
    )
    quality = [n for n in names if n not in LOWER_IS_BETTER]
    latency = [n for n in names if n in LOWER_IS_BETTER]
    charts = [_bar_chart("quality (0–1)", quality, runs, 1.0)]
    if latency:
        top = max((r.metrics.get(n, 0.0) for r in runs for n in latency), default=0.0)
        charts.append(_bar_chart("latency (seconds)", latency, runs, top or 1.0))
    return f'<p class="legend">{legend}</p>' + "".join(charts)


def _bar_chart(
    caption: str, names: Sequence[str], runs: Sequence[evaluation_pb2.EvaluationRun], top: float
) -> str:
    """Horizontal bars, one group per metric, one bar per run, scaled to `top`."""
    group = _BAR_HEIGHT * len(runs) + 8
    height = group * len(names) + 24
    width = _LABEL_WIDTH + _CHART_WIDTH + 80
    shapes = [f'<text x="0" y="14" font-weight="bold">{_e(caption)}</text>']
    for row, name in enumerate(names):
        y0 = 24 + row * group
        shapes.append(
            f'<text x="{_LABEL_WIDTH - 6}" y="{y0 + _BAR_HEIGHT * len(runs) / 2 + 4:.0f}" '
            f'text-anchor="end">{_e(name)}</text>'
        )
        for i, run in enumerate(runs):
            value = run.metrics.get(name)
            if value is None:
                continue
            bar = max(0.0, min(value / top, 1.0)) * _CHART_WIDTH
            y = y0 + i * _BAR_HEIGHT
            shapes.append(
                f'<rect x="{_LABEL_WIDTH}" y="{y}" width="{bar:.1f}" '
                f'height="{_BAR_HEIGHT - 2}" fill="{_COLOURS[i]}"/>'
                f'<text x="{_LABEL_WIDTH + bar + 4:.1f}" y="{y + _BAR_HEIGHT - 3}">'
                f"{value:.3f}</text>"
            )
    return (
        f'<svg role="img" aria-label="{_e(caption)}" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-size="11">{"".join(shapes)}</svg>'
    )


def _worst_item(
    result: evaluation_pb2.EvaluationResult, histories: Mapping[str, ItemHistory]
) -> str:
    metrics = ", ".join(
        f"{name}={result.metrics[name]:.3f}"
        for name in ordered_metrics(result.metrics)
        if name in (WORST_METRIC, "route_correct", "answer_f1", "citation_precision")
    )
    rows = [
        ("question", result.question),
        ("route", result.route or "—"),
        ("answer", result.answer or "—"),
        ("metrics", metrics or "—"),
        ("latency", f"{result.latency_seconds:.3f} s"),
    ]
    if result.error:
        rows.append(("error", result.error))
    table = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in rows)
    return (
        f'<div class="item"><h3>{_e(item_id(result.item))}</h3><table>{table}</table>'
        f"{_history(result.run_id, histories)}</div>"
    )


def _history(run_id: str, histories: Mapping[str, ItemHistory]) -> str:
    entry = histories.get(run_id) if run_id else None
    if entry is None or entry.record is None:
        return '<p class="muted">no history record</p>'
    record = entry.record
    trace = rag_trace_from_proto(record.rag_trace) if record.HasField("rag_trace") else {}
    trace_json = json.dumps(trace, ensure_ascii=False, indent=2, sort_keys=True)
    return (
        f"<details><summary>trace of {_e(record.name)}</summary>"
        f"<pre>{_e(trace_json)}</pre></details>{_feedback(entry.feedback)}"
    )


def _feedback(feedback: Sequence[evaluation_pb2.Feedback]) -> str:
    if not feedback:
        return '<p class="muted">no feedback</p>'
    reason = evaluation_pb2.Feedback.Reason.Name
    items = []
    for f in feedback:
        bits = [evaluation_pb2.Feedback.Rating.Name(f.rating)]
        if f.reasons:
            bits.append(", ".join(reason(r) for r in f.reasons))
        if f.comment:
            bits.append(f"“{f.comment}”")
        if f.expected_document_ids:
            bits.append("expected: " + ", ".join(f.expected_document_ids))
        if f.corrected_answer:
            bits.append("corrected: " + f.corrected_answer)
        items.append(f"<li>{_e(' — '.join(bits))}</li>")
    return f"<p>feedback:</p><ul>{''.join(items)}</ul>"
