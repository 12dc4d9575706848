"""OpenTelemetry traces, received by a local OTLP/HTTP receiver and decoded
with opentelemetry-proto: the retrieval service runs as its own process (`python -m
retrieval_service`, traces configured from the standard OTEL_* variables, embedding through
the embeddings double), the orchestrator in this process with production wiring. One Run is
one connected trace: the Run span, its node, model and HTTP spans, the Retrieve client span,
retrieval's server span continued from the `traceparent` metadata, its stage spans, Milvus
calls and the embedding request, whose `traceparent` header names the same trace."""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from supermew.v1 import retrieval_pb2, retrieval_pb2_grpc

from shared.logs import ACCESS_LOGGER
from shared.tracing import QUESTION_ATTRIBUTE, configure_tracing, shutdown_tracing
from tests.fakes.embeddings_server import EmbeddingsServer
from tests.fakes.model_server import ModelScript, complexity, grade
from tests.fakes.orchestrator_stack import API_KEY, start_stack
from tests.fakes.otlp_receiver import (
    KIND_CLIENT,
    KIND_INTERNAL,
    KIND_SERVER,
    OtlpReceiver,
    ReceivedSpan,
)
from tests.fakes.retrieval_servicer import RetrievalScript, chunk
from tests.integration.retrieval_harness import spawn_retrieval_service

DIM = 64
QUESTION = "How many days of annual leave does a new employee get?"
DOCS = {
    "leave.md": "# Annual leave\n\nNew employees get five days of paid annual leave after one "
    "year. Leave must be requested a week in advance.",
    "remote.md": "# Remote work\n\nEmployees may work remotely two days a week with approval.",
}
RUN = "/supermew.v1.OrchestratorService/Run"
RETRIEVE = "/supermew.v1.RetrievalService/Retrieve"


def otel_env(receiver: OtlpReceiver, service: str) -> dict[str, str]:
    return {
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_SERVICE_NAME": service,
        "OTEL_BSP_SCHEDULE_DELAY": "100",  # ms: batches leave quickly in a test
    }


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    server = OtlpReceiver().start()
    yield server
    server.stop()


@pytest.fixture
def embeddings() -> Iterator[EmbeddingsServer]:
    server = EmbeddingsServer(DIM).start()
    yield server
    server.stop()


class RetrievalProcess:
    """`python -m retrieval_service` on 127.0.0.1 with its settings and OTEL_* variables."""

    def __init__(self, tmp: Path, env: dict[str, str]) -> None:
        self.log = tmp / "retrieval.log"
        self.proc, self.port = spawn_retrieval_service(
            {**env, "MILVUS_URI": str(tmp / "kb.db")},
            self.log,
            scrub=("MILVUS_", "SUPERMEW_", "OTEL_", "EMBEDDING_", "RERANK_"),
        )

    def ingest(self, docs: dict[str, str]) -> None:
        with grpc.insecure_channel(f"127.0.0.1:{self.port}") as channel:
            retrieval_pb2_grpc.RetrievalServiceStub(channel).IngestDocuments(
                retrieval_pb2.IngestDocumentsRequest(
                    documents=[
                        retrieval_pb2.SourceDocument(filename=name, content=text.encode())
                        for name, text in docs.items()
                    ]
                ),
                timeout=60,
            )

    def stop(self) -> int:
        """SIGTERM: the service drains and exports its buffered spans before it exits."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def by_name(spans: list[ReceivedSpan], name: str, service: str) -> list[ReceivedSpan]:
    return [s for s in spans if s.name == name and s.service == service]


def one(spans: list[ReceivedSpan], name: str, service: str) -> ReceivedSpan:
    found = by_name(spans, name, service)
    assert len(found) == 1, (name, service, [(s.service, s.name) for s in spans])
    return found[0]


def descends_from(span: ReceivedSpan, ancestor: ReceivedSpan, index: dict[str, ReceivedSpan]):
    current: ReceivedSpan | None = span
    while current is not None:
        if current.parent_id == ancestor.span_id:
            return True
        current = index.get(current.parent_id)
    return False


def all_strings(spans: list[ReceivedSpan]) -> list[str]:
    """Every text a span carries out of the process: names, attribute values, event
    attributes, status messages."""
    out: list[str] = []
    for s in spans:
        out.append(s.name)
        out.append(s.span.status.message)
        out.extend(str(v) for v in s.attributes.values())
        for event in s.span.events:
            out.append(event.name)
            out.extend(str(kv.value) for kv in event.attributes)
    return out


async def test_one_run_is_one_trace_across_both_services_milvus_and_embedding(
    tmp_path: Path,
    receiver: OtlpReceiver,
    embeddings: EmbeddingsServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    retrieval = RetrievalProcess(
        tmp_path,
        {
            **otel_env(receiver, "retrieval"),
            "EMBEDDING_BASE_URL": embeddings.base_url,
            "EMBEDDING_MODEL": "fake",
            "EMBEDDING_DIM": str(DIM),
        },
    )
    try:
        retrieval.ingest(DOCS)
        ms = ModelScript()
        ms.add("complexity_classification", QUESTION, complexity("simple", "one question"))
        ms.fallback = lambda task, q: grade("strong", "sufficient", "answer", confidence=0.9)
        for key, value in otel_env(receiver, "orchestrator").items():
            monkeypatch.setenv(key, value)
        assert configure_tracing("orchestrator_service")
        embedded_before = len(embeddings.headers)
        try:
            stack = await start_stack(ms, retrieval_addr=f"127.0.0.1:{retrieval.port}")
            try:
                result = await stack.run(QUESTION)
                health = health_pb2_grpc.HealthStub(stack.channel)
                await health.Check(health_pb2.HealthCheckRequest())
            finally:
                await stack.aclose()
        finally:
            shutdown_tracing()  # exports what the orchestrator buffered
    finally:
        code = retrieval.stop()
    assert code == 0, retrieval.log.read_text()[-3000:]
    assert result.route == "answer"

    receiver.wait_for(
        lambda got: bool(by_name(got, RUN, "orchestrator") and by_name(got, RETRIEVE, "retrieval"))
    )
    spans = receiver.received()
    assert receiver.content_types == {"application/x-protobuf"}
    run = one(spans, RUN, "orchestrator")
    trace = [s for s in spans if s.trace_id == run.trace_id]
    index = {s.span_id: s for s in trace}

    # One connected trace: the Run span is its root, every other span has its parent in it.
    assert run.parent_id == "" and run.span.kind == KIND_SERVER
    assert [s for s in trace if s is not run and s.parent_id not in index] == []
    assert run.attributes["rpc.grpc.status_code"] == 0
    assert run.attributes["supermew.route"] == result.route
    assert run.attributes["supermew.retrieval_status"] == result.retrieval_status
    assert run.attributes["supermew.docs"] == len(result.docs) > 0

    # Orchestrator: node spans under the Run span, model calls under their node, HTTP under those.
    nodes = {s.attributes["supermew.node"]: s for s in trace if s.name.startswith("node ")}
    assert set(nodes) == {"classify_complexity", "retrieve_initial", "grade_documents"}
    assert all(s.parent_id == run.span_id and s.span.kind == KIND_INTERNAL for s in nodes.values())
    for task, node in (
        ("complexity_classification", "classify_complexity"),
        ("evidence_grade", "grade_documents"),
    ):
        model = one(trace, f"model {task}", "orchestrator")
        assert model.parent_id == nodes[node].span_id
        assert model.attributes["supermew.outcome"] == "ok"
        http = [s for s in trace if s.parent_id == model.span_id]
        assert [s.name for s in http] == ["POST model"]
        assert http[0].span.kind == KIND_CLIENT
        assert http[0].attributes["http.response.status_code"] == 200
    # The model endpoint received the trace context of the HTTP span.
    assert [r.traceparent.split("-")[1] for r in stack.model.requests] == [run.trace_id] * 2

    # orchestrator → retrieval over gRPC: the server span continues the client span.
    client = one(trace, RETRIEVE, "orchestrator")
    assert client.span.kind == KIND_CLIENT
    assert client.parent_id == nodes["retrieve_initial"].span_id
    server = one(trace, RETRIEVE, "retrieval")
    assert server.span.kind == KIND_SERVER and server.parent_id == client.span_id
    assert server.attributes["supermew.retrieval_mode"] == "hybrid"
    assert server.attributes["supermew.recall_count"] > 0
    assert server.attributes["supermew.post_threshold_count"] == len(result.docs)

    # Retrieval: stage spans under the server span; embedding and Milvus calls under stages.
    stages = {s.attributes["supermew.stage"]: s for s in trace if s.name.startswith("retrieval ")}
    assert set(stages) == {"embed", "recall", "merge", "rerank"}
    assert all(s.parent_id == server.span_id for s in stages.values())
    embed_http = one(trace, "POST embeddings", "retrieval")
    assert embed_http.parent_id == stages["embed"].span_id
    assert embed_http.attributes["http.response.status_code"] == 200
    milvus = [s for s in trace if s.name == "milvus"]
    operations = {s.attributes["db.operation.name"] for s in milvus}
    assert "ChunkStore.hybrid_search" in operations
    assert all(descends_from(s, server, index) for s in milvus)
    hybrid = next(s for s in milvus if s.attributes["db.operation.name"].endswith("hybrid_search"))
    assert descends_from(hybrid, stages["recall"], index)
    # The embeddings endpoint received the query's trace context over HTTP.
    query_headers = embeddings.headers[embedded_before:]
    assert [h.get("traceparent", "").split("-")[1] for h in query_headers] == [run.trace_id]

    # Ingest is traced too (its own trace); health checks are not traced at all.
    ingest = one(spans, "/supermew.v1.RetrievalService/IngestDocuments", "retrieval")
    assert any(s.name == "milvus" and s.trace_id == ingest.trace_id for s in spans)
    assert not [s for s in spans if s.name.startswith("/grpc.health")]

    # Nothing a span carries quotes the question, a document or a key; no stack traces.
    texts = all_strings(spans)
    for secret in (QUESTION, API_KEY, "annual leave", "Traceback"):
        assert not [t for t in texts if secret in t], secret
    assert not [s for s in spans if QUESTION_ATTRIBUTE in s.attributes]


async def test_questions_reach_spans_only_with_the_opt_in(
    receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """…and the access-log line of a Run names its trace: the tracing interceptor runs outside
    the observability one, so the RPC span is current when the line is written."""
    caplog.set_level(logging.INFO, logger=ACCESS_LOGGER)
    for key, value in otel_env(receiver, "orchestrator").items():
        monkeypatch.setenv(key, value)
    script = RetrievalScript()
    script.add(QUESTION, [chunk("leave.md", "1", "Five days of paid leave.")])
    ms = ModelScript()
    ms.add("complexity_classification", QUESTION, complexity("simple", "one question"))
    ms.fallback = lambda task, q: grade("strong", "sufficient", "answer", confidence=0.9)
    recorded: list[object] = []
    for opt_in in (False, True):
        assert configure_tracing("orchestrator_service", record_questions=opt_in)
        try:
            stack = await start_stack(ms, script)
            try:
                await stack.run(QUESTION)
            finally:
                await stack.aclose()
        finally:
            shutdown_tracing()  # exports synchronously: the Run span has arrived on return
        (run,) = by_name(receiver.received(), RUN, "orchestrator")[len(recorded) :]
        recorded.append(run.attributes.get(QUESTION_ATTRIBUTE))
    assert recorded == [None, QUESTION]
    runs = by_name(receiver.received(), RUN, "orchestrator")
    logged = [getattr(r, "trace_id", "") for r in caplog.records if getattr(r, "method", "") == RUN]
    assert logged == [run.trace_id for run in runs]
