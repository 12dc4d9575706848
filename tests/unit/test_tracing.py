"""shared.tracing without a collector: off unless an OTLP endpoint is configured (and then
nothing is installed: no interceptors, no spans, headers untouched), a protocol the exporter
cannot speak stops the start-up naming its variable, and the exporter strips exception
messages, stack traces and status descriptions before spans leave the process."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode

from shared import tracing
from shared.errors import ConfigurationError

OTEL_VARIABLES = (
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_SDK_DISABLED",
    "OTEL_TRACES_EXPORTER",
)


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in OTEL_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    yield
    tracing.shutdown_tracing()


def test_without_an_endpoint_tracing_is_off_and_every_helper_is_a_no_op() -> None:
    assert tracing.configure_tracing("svc", record_questions=True) is False
    assert not tracing.enabled()
    assert tracing.server_interceptors() == [] and tracing.client_interceptors() == []
    with tracing.span("node x", node="x") as span, tracing.http_span("model") as http:
        assert not span.is_recording() and not http.is_recording()
        span.set_attribute("supermew.k", 1)
    headers = {"Authorization": "Bearer k"}
    assert tracing.inject_headers(headers) is headers and headers == {"Authorization": "Bearer k"}
    tracing.annotate(route="answer")
    tracing.record_question("q")
    tracing.StreamSpan("model answer_generation").end(None, pieces=1)


@pytest.mark.parametrize(
    "environment",
    [
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_SDK_DISABLED": "true"},
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_TRACES_EXPORTER": "none"},
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "  "},
    ],
)
def test_the_standard_switches_keep_export_off(environment: dict[str, str]) -> None:
    assert tracing.export_endpoint(environment) is None


def test_the_traces_endpoint_alone_turns_export_on() -> None:
    environment = {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}
    assert tracing.export_endpoint(environment) == "http://c:4318/v1/traces"


@pytest.mark.parametrize(
    "variable", ["OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"]
)
def test_a_protocol_the_exporter_cannot_speak_stops_the_start_up(
    monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    monkeypatch.setenv(variable, "grpc")
    with pytest.raises(ConfigurationError) as refused:
        tracing.configure_tracing("svc")
    assert refused.value.message.startswith(f"{variable}: only http/protobuf")
    assert not tracing.enabled()


def test_with_an_endpoint_the_server_and_client_interceptors_are_installed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    assert tracing.configure_tracing("svc")
    assert len(tracing.server_interceptors()) == 1
    assert len(tracing.client_interceptors()) == 4  # one per call shape
    # Outside any recording span nothing is opened (no orphan roots) and no context is sent.
    with tracing.span("milvus") as span:
        assert not span.is_recording()
    assert "traceparent" not in tracing.inject_headers({})


def test_exported_spans_carry_exception_types_only() -> None:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(tracing.scrubbing_exporter(memory)))
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("call", record_exception=False) as span:
        span.record_exception(ValueError("the question text and sk-secret"))
        span.set_status(Status(StatusCode.ERROR, "AioRpcError: debug_error_string /tmp/x"))
        span.set_attribute("supermew.route", "answer")
    with tracer.start_as_current_span("clean") as clean:
        clean.add_event("marker", {"supermew.count": 1})
    scrubbed, untouched = memory.get_finished_spans()
    (event,) = scrubbed.events
    assert event.name == "exception" and dict(event.attributes or {}) == {
        "exception.type": "ValueError"
    }
    assert scrubbed.status.status_code == StatusCode.ERROR and scrubbed.status.description is None
    assert dict(scrubbed.attributes or {}) == {"supermew.route": "answer"}
    assert scrubbed.context == span.get_span_context()
    assert dict(untouched.events[0].attributes or {}) == {"supermew.count": 1}
