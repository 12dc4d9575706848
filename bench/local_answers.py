"""Answers a newcomer can trust: the built-in local model on a small evaluation set of its own
(`bench/sets/local_answers/`), through the real `Run` RPC on Milvus Lite with the built-in
embedder, as `make run` serves it.

The set: 21 documents of different shapes — Markdown handbooks and manuals with headings, two
FAQs, an HTML page, a GBK-encoded Chinese text file, two .docx files whose facts sit in a table
(built here from `*.docx.json`), a two-page PDF report (built here from `*.pdf.json`), zh and
en — and `questions.json`: each question with its expected route (`a|b` accepts either) and,
for answers, the sentence (or table row, as the loader joins its cells) that supports it.
About a third ask about an entity the corpus does not hold, or only a neighbour of it: a
sibling (team B beside team A, Orion Enterprise beside Basic and Pro), another kind (paternity
leave beside maternity and annual leave, 陪产假 beside 产假), another number or model (a 500 g
bag beside 250 g and 1 kg, Kestrel 3 beside Kestrel 2), each with answerable questions about
what is there beside it.
Compound questions carry `partial` (the expected `Answer.partial`) and `names` (the
sub-question the answer must say it could not answer); questions about "this plan" or "the
widget" carry `options`, the expected `hitl_options` (`[]`: a manual's sections are never
options).

The same questions then run through the API as an evaluation set (`RunEvaluation` in RUN mode,
`ListEvaluationResults`), and the route and answer figures are computed again from those
results, side by side with the direct ones: they must agree (docs/api.md#evaluation-runs).

Printed: route accuracy; answer accuracy (route `answer` and a citation's quote contains the
supporting sentence); `no_knowledge` precision (of the questions routed `no_knowledge`, the share
whose expected route allows it); honest partials (of the compound questions, those whose answer
is partial as expected and names the unanswered part); clarify options (of the questions with
`options`, those offered exactly these); and every miss."""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
from google.longrunning import operations_proto_pb2 as operations_pb2
from google.protobuf import duration_pb2
from supermew.v1 import evaluation_pb2, orchestrator_pb2

from bench._local_stack import LocalStack, local_stack
from bench._retrieval_rig import quiet
from retrieval_service.bootstrap import RetrievalApp
from retrieval_service.core.ingest.validation import SourceDocument
from shared.codec import rag_trace_from_proto
from tests.integration.retrieval_harness import make_pdf

SETS = Path(__file__).resolve().parent / "sets"
#: The set a run reads (`--set`): `local_answers` (default) or `wrapped_docs` (hard-wrapped
#: plain-text documentation as Debian ships it; bench/sets/wrapped_docs/README.md).
DATA = SETS / "local_answers"


def make_docx(spec: dict[str, list]) -> bytes:
    import docx

    document = docx.Document()
    for paragraph in spec.get("paragraphs", []):
        document.add_paragraph(paragraph)
    for rows in spec.get("tables", []):
        table = document.add_table(rows=len(rows), cols=len(rows[0]))
        for row, cells in zip(table.rows, rows, strict=True):
            for cell, text in zip(row.cells, cells, strict=True):
                cell.text = text
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


def documents() -> list[SourceDocument]:
    found = []
    for path in sorted((DATA / "docs").iterdir()):
        if path.name.endswith(".docx.json"):
            spec = json.loads(path.read_text(encoding="utf-8"))
            found.append(SourceDocument(path.name[: -len(".json")], make_docx(spec)))
        elif path.name.endswith(".pdf.json"):
            spec = json.loads(path.read_text(encoding="utf-8"))
            found.append(SourceDocument(path.name[: -len(".json")], make_pdf(spec["pages"])))
        else:
            found.append(SourceDocument(path.name, path.read_bytes()))
    return found


def questions() -> list[dict[str, Any]]:
    return json.loads((DATA / "questions.json").read_text(encoding="utf-8"))


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def supported(result: orchestrator_pb2.RunResult, support: str) -> bool:
    want = _norm(support)
    return any(want in _norm(c.quote) for c in result.answer.citations)


async def run() -> tuple[list[dict[str, Any]], list[dict[str, Any]] | str]:
    """(outcomes of direct Run calls, outcomes of the same questions as one RunEvaluation, or
    why that evaluation failed)."""
    quiet()
    outcomes: list[dict[str, Any]] = []

    async def fill(app: RetrievalApp) -> None:
        await app.ingestor.ingest(documents())

    async with local_stack("bench-local-answers-", fill) as stack:
        for item in questions():
            try:
                result = await stack.orchestrator.Run(
                    orchestrator_pb2.RunRequest(question=item["question"], generate_answer=True)
                )
            except grpc.aio.AioRpcError as error:
                # A failed Run is a miss of its question, not the end of the measurement.
                result = orchestrator_pb2.RunResult(route=f"error {error.code().name}")
            outcomes.append({**item, "result": result})
        through_api = await evaluate(stack)
    return outcomes, through_api


async def evaluate(stack: LocalStack) -> list[dict[str, Any]] | str:
    """The questions as an evaluation set run in RUN mode; each result as a RunResult with what
    the figures read (route, answer text, citations); the error message when the run failed (an
    item's Run failing fails the whole evaluation run)."""
    E = evaluation_pb2
    items = questions()
    made = await stack.evaluation.CreateEvaluationSet(
        E.CreateEvaluationSetRequest(evaluation_set_id="local-answers")
    )
    await stack.evaluation.BatchCreateEvaluationItems(
        E.BatchCreateEvaluationItemsRequest(
            parent=made.name,
            requests=[
                E.CreateEvaluationItemRequest(
                    evaluation_item_id=f"q{i:03d}",
                    evaluation_item=E.EvaluationItem(
                        question=item["question"],
                        # `a|b` accepts either: the figures below judge routes themselves.
                        expected_route=str(item["route"]).split("|")[0],
                    ),
                )
                for i, item in enumerate(items)
            ],
        )
    )
    operation = await stack.evaluation.RunEvaluation(
        E.RunEvaluationRequest(
            evaluation_set=made.name,
            config=E.RunConfig(mode=E.RunConfig.RUN, generate_answer=True, concurrency=1),
        )
    )
    while not operation.done:
        operation = await stack.operations.WaitOperation(
            operations_pb2.WaitOperationRequest(
                name=operation.name, timeout=duration_pb2.Duration(seconds=10)
            )
        )
    run = E.EvaluationRun()
    if not operation.response.Unpack(run):
        return operation.error.message
    results = await stack.evaluation.ListEvaluationResults(
        E.ListEvaluationResultsRequest(run=run.name, page_size=1000)
    )
    return [
        {
            **item,
            "result": orchestrator_pb2.RunResult(
                route=r.route,
                answer=orchestrator_pb2.Answer(text=r.answer, citations=r.citations),
            ),
        }
        for item, r in zip(items, results.results, strict=True)
    ]


def partial_ok(o: dict[str, object]) -> bool:
    """The answer is partial as expected and, when it must, names the unanswered part."""
    result = o["result"]
    if not result.HasField("answer"):  # type: ignore[attr-defined]
        return False
    answer = result.answer  # type: ignore[attr-defined]
    return answer.partial == o["partial"] and str(o.get("names") or "") in answer.text


def options_ok(o: dict[str, object]) -> bool:
    return offered(o["result"]) == o["options"]  # type: ignore[arg-type]


def offered(result: orchestrator_pb2.RunResult) -> list[str]:
    return list(rag_trace_from_proto(result.rag_trace).get("hitl_options") or [])


#: The figures an evaluation result carries what they need for (no trace, no partial flag).
API_FIGURES = ("route accuracy", "answer accuracy", "no_knowledge precision")


def score(outcomes: list[dict[str, Any]]) -> dict[str, float]:
    def route_ok(o: dict[str, Any]) -> bool:
        return o["result"].route in str(o["route"]).split("|")

    answers = [o for o in outcomes if o["route"] == "answer"]
    nk = [o for o in outcomes if o["result"].route == "no_knowledge"]
    return {
        "route accuracy": sum(map(route_ok, outcomes)) / len(outcomes),
        "answer accuracy": sum(
            o["result"].route == "answer" and supported(o["result"], str(o["support"]))
            for o in answers
        )
        / len(answers),
        "no_knowledge precision": (
            sum("no_knowledge" in str(o["route"]) for o in nk) / len(nk) if nk else 0.0
        ),
        "honest partials": _share(partial_ok, [o for o in outcomes if "partial" in o]),
        "clarify options": _share(options_ok, [o for o in outcomes if "options" in o]),
    }


def _share(ok: Callable[[dict[str, object]], bool], items: list[dict[str, object]]) -> float:
    return sum(map(ok, items)) / len(items) if items else 0.0


def main(argv: list[str] | None = None) -> None:
    global DATA
    parser = argparse.ArgumentParser(prog="bench.local_answers")
    parser.add_argument("--set", default="local_answers", choices=("local_answers", "wrapped_docs"))
    DATA = SETS / parser.parse_args(argv).set
    outcomes, through_api = asyncio.run(run())
    items = questions()
    answers = sum(q["route"] == "answer" for q in items)
    zh = sum(bool(re.search(r"[\u4e00-\u9fff]", q["question"])) for q in items)
    print(
        f"{len(documents())} documents, {len(items)} questions ({answers} answerable, "
        f"{len(items) - answers} absent, near-miss or to clarify; {zh} zh, {len(items) - zh} "
        f"en; {sum('partial' in q for q in items)} compound, "
        f"{sum('options' in q for q in items)} with options), one Run each with generate_answer"
    )
    api = score(through_api) if isinstance(through_api, list) else {}
    print(f"{'':<26}{'Run':>7}{'RunEvaluation':>15}")
    for name, value in score(outcomes).items():
        again = f"{api[name]:>15.3f}" if name in api and name in API_FIGURES else f"{'—':>15}"
        print(f"{name:<26}{value:>7.3f}{again}")
    if isinstance(through_api, str):
        print(f"RunEvaluation failed: {through_api}")
    routed = [str(o["result"].route) for o in outcomes]
    absent = [o for o in outcomes if o["route"] != "answer"]
    print(
        f"routed no_knowledge: {routed.count('no_knowledge')}, clarify: {routed.count('clarify')}, "
        f"scope_select: {routed.count('scope_select')}; absent or near-miss questions not "
        f"answered: {sum(o['result'].route != 'answer' for o in absent)} of {len(absent)}"
    )
    print("misses:")
    for o in outcomes:
        result = o["result"]
        ok_route = result.route in str(o["route"]).split("|")
        ok_answer = o["route"] != "answer" or supported(result, str(o["support"]))
        ok_partial = "partial" not in o or partial_ok(o)
        ok_options = "options" not in o or options_ok(o)
        if ok_route and ok_answer and ok_partial and ok_options:
            continue
        text = _norm(result.answer.text)[:110] if result.HasField("answer") else ""
        why = "" if ok_route else f"  ({result.rag_trace.evidence_reason})"
        if not ok_options:
            why += f"  options {offered(result)}"
        if not ok_partial:
            why += "  (partial: not as expected)"
        print(f"  [{o['route']} → {result.route}] {o['question']}  {text}{why}")


if __name__ == "__main__":
    main(sys.argv[1:])
