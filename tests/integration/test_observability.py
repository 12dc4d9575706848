"""Metrics and access logs of both real services: the orchestrator
(production wiring) over the real retrieval service on Milvus Lite, both with METRICS_PORT on a
free port. After ingests, Runs (simple, complex, rewritten, clarifying, failing) and a Resume,
each `/metrics` endpoint shows every family with the right labels, and counts that match what
the clients observed; label values stay within their bounded sets."""

from __future__ import annotations

import io
import json
import logging
import math
import re
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from supermew.v1 import orchestrator_pb2

from orchestrator_service import metrics as orchestrator_metrics
from retrieval_service import metrics as retrieval_metrics
from retrieval_service.core.errors import StoreFailed
from shared.keys import KEY_ID_PATTERN
from shared.logs import REQUEST_ID_HEADER, configure_logging
from shared.operations import OperationState
from tests.fakes.model_server import HttpError, ModelScript, complexity, grade, rewrite
from tests.fakes.orchestrator_stack import start_stack
from tests.integration.retrieval_harness import running_service

DOCS = {
    "leave.md": "# 年假制度\n\n新员工入职满一年后享有五天带薪年假。年假需提前一周申请。\n\n"
    "工作满十年的员工享有十五天年假。未休年假可顺延至次年三月。",
    "remote.md": "# 远程办公\n\n员工每周可远程办公两天，需要主管批准。远程办公期间须保持在线。",
    "travel.txt": "差旅报销标准：高铁二等座、经济舱机票。住宿每晚不超过五百元。",
}
Q_SIMPLE = "新员工年假有几天"
Q_COMPLEX = "请综合说明年假制度与远程办公制度的要求"
SUB1, SUB2 = "年假制度有哪些规定？", "远程办公有哪些要求？"
Q_REWRITE = "请详细说明新员工的年假申请流程以及注意事项"
STEP_BACK = "年假申请有哪些规则？"
Q_AMBIG = "这个制度的申请要求是什么"
Q_FAIL = "请比较远程办公制度和差旅报销制度的审批差异"
QUESTIONS = (Q_SIMPLE, Q_COMPLEX, SUB1, SUB2, Q_REWRITE, STEP_BACK, Q_AMBIG, Q_FAIL)

ORCH = "supermew.v1.OrchestratorService"
RETR = "supermew.v1.RetrievalService"
GRAPH_NODES = {
    "classify_complexity", "retrieve_initial", "grade_documents", "rewrite_question",
    "retrieve_rewritten", "prepare_sub_questions", "rag_sub_agent", "synthesis",
    "retrieve_resume_query", "condense_question",
}  # fmt: skip
#: Every label of every family of ours, and the values it may take.
BOUNDED: dict[str, set[str]] = {
    "grpc_type": {"unary", "server_stream", "client_stream", "bidi_stream"},
    "grpc_service": {
        ORCH,
        RETR,
        "grpc.health.v1.Health",
        "grpc.reflection.v1alpha.ServerReflection",
        "google.longrunning.Operations",
    },
    "grpc_method": {
        "Run",
        "Resume",
        "StreamRun",
        "StreamResume",
        "Retrieve",
        "IngestDocuments",
        "DeleteDocuments",
        "ListDocuments",
        "StreamIngestDocuments",
        # Imports (tests/integration/test_imports.py scrapes them in this process too).
        "ImportDocuments",
        "GetOperation",
        "ListOperations",
        "WaitOperation",
        "CancelOperation",
        "DeleteOperation",
        "Check",
        "Watch",
        "List",
        "ServerReflectionInfo",
    },
    "grpc_code": {code.name for code in grpc.StatusCode},
    "route": set(orchestrator_metrics.ROUTES) | {"other"},
    "retrieval_status": set(orchestrator_metrics.RETRIEVAL_STATUSES) | {"other"},
    "node": GRAPH_NODES,
    "task": {
        "complexity_classification",
        "evidence_grade",
        "query_rewrite",
        "answer_generation",
        "condense_question",
        "check_grounding",
    },
    "outcome": set(orchestrator_metrics.MODEL_OUTCOMES) | set(retrieval_metrics.RERANK_OUTCOMES),
    "method": set(orchestrator_metrics.REWRITE_METHODS) | {"other"},
    "retrieval_mode": set(retrieval_metrics.RETRIEVAL_MODES) | {"other"},
    "stage": set(retrieval_metrics.STAGES),
    "level": {"1", "2", "3"},
    "state": set(retrieval_metrics.RECLAIMED_STATES) | {s.name for s in OperationState},
    "result": set(retrieval_metrics.IMPORT_RESULTS)
    | set(retrieval_metrics.INDEX_BUILD_RESULTS)
    | set(orchestrator_metrics.EVALUATION_RESULTS),
    "rating": set(orchestrator_metrics.FEEDBACK_RATINGS),
}
OUR_PREFIXES = ("grpc_server_", "supermew_")

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(port: int | None) -> tuple[str, Samples]:
    assert port is not None and port > 0
    reply = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10)
    assert reply.status_code == 200
    samples: Samples = {}
    for family in text_string_to_metric_families(reply.text):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return reply.text, samples


class Delta:
    """Sample values after minus before (the registries live as long as the process)."""

    def __init__(self, before: Samples, after: Samples) -> None:
        self.before, self.after = before, after

    def __call__(self, name: str, **labels: str) -> float:
        key = (name, tuple(sorted(labels.items())))
        return self.after.get(key, 0.0) - self.before.get(key, 0.0)

    def total(self, name: str, **fixed: str) -> float:
        """Sum over every label combination matching `fixed`."""
        out = 0.0
        for (sample, labels), value in self.after.items():
            if sample == name and fixed.items() <= dict(labels).items():
                out += value - self.before.get((sample, labels), 0.0)
        return out

    def names(self) -> set[str]:
        return {name for name, _ in self.after}


def _label_problems(samples: Samples) -> list[str]:
    problems = []
    for name, labels in samples:
        if not name.startswith(OUR_PREFIXES):
            continue
        for key, value in labels:
            if key == "le":
                continue
            if key == "operation":
                ok = value.isidentifier()
            elif key == "key_id":  # the ids of the keys file, which the operator bounds
                ok = re.fullmatch(KEY_ID_PATTERN, value) is not None
            else:
                ok = value in BOUNDED.get(key, set())
            if not ok:
                problems.append(f"{name}{{{key}={value!r}}}")
    return problems


async def test_both_services_expose_every_family_with_matching_counts(tmp_path: Path) -> None:
    ms = ModelScript()
    ms.add("complexity_classification", Q_COMPLEX, complexity("complex", "两项", [SUB1, SUB2]))
    ms.add("complexity_classification", Q_REWRITE, complexity("simple", "一个问题"))
    ms.add(
        "evidence_grade",
        Q_REWRITE,
        grade("weak", "partial", "rewrite"),
        grade("strong", "sufficient", "answer", confidence=0.9),
    )
    ms.add("query_rewrite", Q_REWRITE, rewrite("step_back", STEP_BACK))
    ms.add(
        "evidence_grade",
        Q_AMBIG,
        grade("weak", "partial", "clarify", ambiguity="missing_slot", missing_slots=["制度"]),
    )
    ms.add("complexity_classification", Q_FAIL, HttpError(400, "bad request"))
    ms.fallback = lambda task, q: grade("strong", "sufficient", "answer", confidence=0.9)

    async with running_service(tmp_path / "kb.db", metrics_port=0) as retrieval:
        stack = await start_stack(ms, retrieval_addr=f"127.0.0.1:{retrieval.port}", metrics_port=0)
        try:
            orch_port = stack.app.server.observability.metrics_port
            _, orch_before = scrape(orch_port)
            _, retr_before = scrape(retrieval.metrics_port)

            ingested = await retrieval.ingest(*((n, t.encode()) for n, t in DOCS.items()))
            results = [await stack.run(q) for q in (Q_SIMPLE, Q_COMPLEX, Q_REWRITE, Q_AMBIG)]
            ambiguous = results[-1]
            assert ambiguous.route == "clarify"
            results.append(await stack.resume(ambiguous.hitl_resume_state, "年假"))
            with pytest.raises(grpc.aio.AioRpcError) as failed:
                await stack.run(Q_FAIL)
            # A Milvus call that fails: the operation label comes from the MilvusClient method.
            with pytest.raises(StoreFailed):
                await retrieval.app.store.run(lambda c: c.describe_collection("no_such_one"))

            orch_text, orch_after = scrape(orch_port)
            retr_text, retr_after = scrape(retrieval.metrics_port)
        finally:
            await stack.aclose()

    o, r = Delta(orch_before, orch_after), Delta(retr_before, retr_after)
    runs = Counter((x.route, x.retrieval_status) for x in results)
    code = failed.value.code().name

    # ---- orchestrator: per-RPC families --------------------------------------------------
    unary = {"grpc_type": "unary", "grpc_service": ORCH}
    assert o("grpc_server_started_total", **unary, grpc_method="Run") == 5
    assert o("grpc_server_handled_total", **unary, grpc_method="Run", grpc_code="OK") == 4
    assert o("grpc_server_handled_total", **unary, grpc_method="Run", grpc_code=code) == 1
    assert o("grpc_server_handled_total", **unary, grpc_method="Resume", grpc_code="OK") == 1
    assert o("grpc_server_handling_seconds_count", **unary, grpc_method="Run") == 5
    assert o("grpc_server_handling_seconds_bucket", **unary, grpc_method="Run", le="+Inf") == 5

    # ---- orchestrator: domain families ----------------------------------------------------
    for (route, status), count in runs.items():
        assert o("supermew_runs_total", route=route, retrieval_status=status) == count
    assert o.total("supermew_runs_total") == len(results)
    assert o("supermew_resumes_total") == 1
    assert o("supermew_rewrites_total", method="step_back") == 1
    assert o("supermew_sub_questions_count") == 1 and o("supermew_sub_questions_sum") == 2
    assert o("supermew_node_duration_seconds_count", node="classify_complexity") == 5
    assert o("supermew_node_duration_seconds_count", node="rag_sub_agent") == 2
    assert o("supermew_node_duration_seconds_count", node="rewrite_question") == 1
    assert o("supermew_node_duration_seconds_count", node="retrieve_resume_query") == 1
    assert o("supermew_node_duration_seconds_count", node="synthesis") == 1
    calls = Counter(req.task for req in stack.model.requests)
    for task in (
        "complexity_classification",
        "evidence_grade",
        "query_rewrite",
        "answer_generation",
    ):
        ok = o("supermew_model_calls_total", task=task, outcome="ok")
        failed_calls = 1 if task == "complexity_classification" else 0
        assert ok == calls[task] - failed_calls, task
        assert o.total("supermew_model_calls_total", task=task) == ok + failed_calls
        assert o("supermew_model_call_duration_seconds_count", task=task) == ok + failed_calls
    assert o("supermew_model_calls_total", task="complexity_classification", outcome="ok") >= 1

    # ---- retrieval ----------------------------------------------------------------------
    retrieves = r("grpc_server_handled_total", grpc_type="unary", grpc_service=RETR,
                  grpc_method="Retrieve", grpc_code="OK")  # fmt: skip
    # simple 1, complex 2 sub-agents, rewrite 2, clarify 1, resume 1
    assert retrieves == 7
    assert r("grpc_server_started_total", grpc_type="unary", grpc_service=RETR,
             grpc_method="IngestDocuments") == 1  # fmt: skip
    assert r.total("supermew_retrieve_total") == retrieves
    assert r("supermew_retrieve_total", retrieval_mode="hybrid") == retrieves
    for stage in ("embed", "recall", "merge", "rerank"):
        assert r("supermew_retrieval_stage_duration_seconds_count", stage=stage) == retrieves
    assert r("supermew_rerank_total", outcome="off") == retrieves
    assert r("supermew_threshold_dropped_total") == 0
    assert r("supermew_ingested_documents_total") == len(DOCS)
    by_level = [sum(getattr(d, f"l{lvl}_chunks") for d in ingested.documents) for lvl in (1, 2, 3)]
    for level, count in zip(("1", "2", "3"), by_level, strict=True):
        assert r("supermew_ingested_chunks_total", level=level) == count
    # Leaves go to the embedder 32 at a time, and the built-in model takes 8 per batch.
    leaves = by_level[2]
    batches = sum(math.ceil(min(32, leaves - s) / 8) for s in range(0, leaves, 32))
    assert r("supermew_embedding_duration_seconds_count") == batches
    assert r("supermew_milvus_errors_total", operation="describe_collection") == 1

    # ---- every family is there, and every label value is bounded -------------------------
    expected_orch = {
        "grpc_server_started_total", "grpc_server_handled_total",
        "grpc_server_handling_seconds_bucket", "supermew_runs_total",
        "supermew_node_duration_seconds_bucket", "supermew_model_calls_total",
        "supermew_model_call_duration_seconds_bucket", "supermew_rewrites_total",
        "supermew_resumes_total", "supermew_sub_questions_bucket",
    }  # fmt: skip
    expected_retr = {
        "grpc_server_started_total", "grpc_server_handled_total",
        "grpc_server_handling_seconds_bucket", "supermew_retrieve_total",
        "supermew_retrieval_stage_duration_seconds_bucket", "supermew_rerank_total",
        "supermew_threshold_dropped_total", "supermew_ingested_documents_total",
        "supermew_ingested_chunks_total", "supermew_embedding_duration_seconds_bucket",
        "supermew_milvus_errors_total", "process_cpu_seconds_total",
    }  # fmt: skip
    assert expected_orch <= o.names() and expected_retr <= r.names()
    # Each service's endpoint shows its own domain families only.
    assert not any(n.startswith("supermew_retrieve") for n in o.names())
    assert not any(n.startswith("supermew_runs") for n in r.names())
    assert _label_problems(orch_after) == [] and _label_problems(retr_after) == []
    for text in (orch_text, retr_text):
        for secret in (*QUESTIONS, *DOCS, "bad request", "no_such_one"):
            assert secret not in text


# ---- access logs and request ids -------------------------------------------------------------


@pytest.fixture
def json_logs(capsys: pytest.CaptureFixture[str]) -> Iterator[io.StringIO]:
    """configure_logging("INFO", "json") as a service's __main__ does, writing to a buffer;
    the previous logging set-up and exception hooks are restored afterwards."""
    root = logging.getLogger()
    saved = (root.handlers[:], root.level, sys.excepthook, threading.excepthook, sys.stderr)
    buffer = io.StringIO()
    sys.stderr = buffer
    try:
        configure_logging("INFO", "json")
        yield buffer
    finally:
        root.handlers[:], root.level = saved[0], saved[1]
        sys.excepthook, threading.excepthook, sys.stderr = saved[2], saved[3], saved[4]
        logging.captureWarnings(False)


def _lines(buffer: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in buffer.getvalue().splitlines() if line.strip()]


async def test_request_id_is_echoed_and_stamped_on_every_line_of_the_call(
    json_logs: io.StringIO,
) -> None:
    ms = ModelScript().add("complexity_classification", Q_FAIL, HttpError(400, "bad request"))
    ms.add("evidence_grade", Q_SIMPLE, grade("strong", "sufficient", "answer"))
    stack = await start_stack(ms)
    try:
        call = stack.stub.Run(
            orchestrator_pb2.RunRequest(question=Q_SIMPLE),
            metadata=((REQUEST_ID_HEADER, "req-abc.123"),),
        )
        await call
        assert (REQUEST_ID_HEADER, "req-abc.123") in tuple(await call.trailing_metadata())

        # No id from the caller (and one that is not a plain token): a fresh one is echoed.
        failing = stack.stub.Run(
            orchestrator_pb2.RunRequest(question=Q_FAIL),
            metadata=((REQUEST_ID_HEADER, 'x" injected="' + "y" * 200),),
        )
        with pytest.raises(grpc.aio.AioRpcError) as failed:
            await failing
        echoed = dict(failed.value.trailing_metadata() or ())[REQUEST_ID_HEADER]
        assert echoed and "injected" not in echoed
    finally:
        await stack.aclose()

    lines = _lines(json_logs)  # every line parses as JSON
    access = [x for x in lines if x["logger"] == "supermew.access"]
    run_lines = [x for x in access if x["method"] == f"/{ORCH}/Run"]
    assert [(x["status"], x["request_id"]) for x in run_lines] == [
        ("OK", "req-abc.123"),
        (failed.value.code().name, echoed),
    ]
    for line in run_lines:
        assert line["peer"].startswith("ipv4:127.0.0.1:") and line["duration_ms"] >= 0
        assert line["trace_id"] == "" or len(line["trace_id"]) == 32
    # The failing call logged from inside the handler too; those lines carry its id.
    inside = [x for x in lines if x.get("request_id") == echoed and x not in run_lines]
    assert inside and all(Q_FAIL not in json.dumps(x, ensure_ascii=False) for x in inside)


def test_json_mode_keeps_uncaught_thread_tracebacks_json(json_logs: io.StringIO) -> None:
    def boom() -> None:
        raise RuntimeError("worker failed")

    worker = threading.Thread(target=boom, name="worker-1")
    worker.start()
    worker.join()
    (line,) = [x for x in _lines(json_logs) if x["logger"] == "uncaught"]
    assert line["level"] == "ERROR" and "worker-1" in line["message"]
    assert "RuntimeError: worker failed" in line["exc_info"] and "in boom" in line["exc_info"]
