"""OpenTelemetry traces (docs/api.md#traces): one span per RPC (the gRPC instrumentation's
interceptors), child spans per graph node, model call, retrieval stage and Milvus, embedding
and rerank call, with the W3C trace context carried over gRPC and HTTP.

Export is by OTLP/HTTP (protobuf) and only when the standard OTEL_EXPORTER_OTLP_ENDPOINT (or
OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set; the SDK reads its other standard variables itself
(OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES, OTEL_TRACES_SAMPLER, OTEL_BSP_*,
OTEL_EXPORTER_OTLP_HEADERS …). Unset, nothing is imported or installed and every helper here
returns at its first test, so tracing costs nothing.

The state is per process, like logging's, because a span must reach code far from any
composition root (a Milvus call, an HTTP request) without threading a tracer through every
constructor. The helpers open a span only under a recording one, so a server built without
the interceptors (or a call outside any RPC) produces no orphan root spans.

Span attributes are ours under `supermew.*` (route, statuses, modes, counts) plus the
instrumentation's `rpc.*`: never a question (unless OTEL_RECORD_QUESTIONS opts in), a key,
an exception message or a traceback; the exporter strips the last two should a library record
them."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from shared.errors import ConfigurationError

if TYPE_CHECKING:
    import grpc
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
    from opentelemetry.trace import Span, SpanKind, Tracer

AttributeValue = str | bool | int | float
#: The attribute holding a question or query, set only with OTEL_RECORD_QUESTIONS=true.
QUESTION_ATTRIBUTE = "supermew.question"
PREFIX = "supermew."
#: The only protocol of the exporter this project ships (opentelemetry-exporter-otlp-proto-http).
PROTOCOL = "http/protobuf"
#: Calls that would flood a trace store with probe noise: never traced.
UNTRACED_SERVICES = ("grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection")
_KEPT_EVENT_ATTRIBUTES = frozenset({"exception.type"})


class SpanHandle(Protocol):
    """What a caller may do with the span a helper yields (the real span or the no-op)."""

    def set_attribute(self, key: str, value: AttributeValue) -> None: ...
    def is_recording(self) -> bool: ...


class _NoSpan:
    __slots__ = ()

    def set_attribute(self, key: str, value: AttributeValue) -> None:
        return None

    def is_recording(self) -> bool:
        return False


_NO_SPAN = _NoSpan()
_OFF: contextlib.nullcontext[SpanHandle] = contextlib.nullcontext(_NO_SPAN)

_tracer: Tracer | None = None
_provider: TracerProvider | None = None
_record_questions = False
_otel_trace: Any = None


def export_endpoint(environ: Mapping[str, str]) -> str | None:
    """The OTLP endpoint traces go to, or None when export is off (no endpoint, the SDK
    disabled, or OTEL_TRACES_EXPORTER=none)."""
    endpoint = (
        environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
        or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
    )
    if not endpoint:
        return None
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    if environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() == "none":
        return None
    return endpoint


def _check_protocol(environ: Mapping[str, str]) -> None:
    for name in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        value = environ.get(name, "").strip()
        if value:
            if value != PROTOCOL:
                raise ConfigurationError(f"{name}: only {PROTOCOL} is supported, got {value!r}")
            return


def configure_tracing(service_name: str, *, record_questions: bool = False) -> bool:
    """Install the tracer of this process when OTLP export is configured; returns whether
    tracing is on. `service_name` is the default `service.name` (OTEL_SERVICE_NAME wins).
    ConfigurationError names a variable the exporter cannot honour."""
    global _tracer, _provider, _record_questions, _otel_trace
    environ = os.environ
    if export_endpoint(environ) is None:
        return False
    _check_protocol(environ)
    # Imported only now: a process without export never loads the SDK.
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    shutdown_tracing()
    resource = Resource.create()
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: service_name}))
    provider = TracerProvider(resource=resource)  # the sampler comes from OTEL_TRACES_SAMPLER
    provider.add_span_processor(BatchSpanProcessor(scrubbing_exporter(OTLPSpanExporter())))
    _otel_trace = trace
    _provider = provider
    _tracer = provider.get_tracer("supermew")
    _record_questions = record_questions
    return True


def shutdown_tracing() -> None:
    """Export what is buffered and turn tracing off (process exit; tests)."""
    global _tracer, _provider, _record_questions
    provider, _provider, _tracer, _record_questions = _provider, None, None, False
    if provider is not None:
        provider.shutdown()


def enabled() -> bool:
    return _tracer is not None


# ---- gRPC ------------------------------------------------------------------------------------


def _traced_call(details: Any) -> bool:
    method = details.method.decode() if isinstance(details.method, bytes) else details.method
    return not str(method or "").lstrip("/").startswith(UNTRACED_SERVICES)


def server_interceptors() -> list[grpc.aio.ServerInterceptor]:
    """The server-span interceptor, to run outside (before) every other interceptor so that
    its span is current in theirs; none when tracing is off."""
    if _provider is None:
        return []
    from opentelemetry.instrumentation.grpc import aio_server_interceptor

    return [aio_server_interceptor(tracer_provider=_provider, filter_=_traced_call)]


def client_interceptors() -> list[grpc.aio.ClientInterceptor]:
    """Client-span interceptors that also put `traceparent` into the call's metadata."""
    if _provider is None:
        return []
    from opentelemetry.instrumentation.grpc import aio_client_interceptors

    interceptors: list[grpc.aio.ClientInterceptor] = aio_client_interceptors(
        tracer_provider=_provider, filter_=_traced_call
    )
    return interceptors


# ---- spans -----------------------------------------------------------------------------------


class _Traced:
    """A span made current for a `with` block; an exception marks it ERROR with the class
    name only (its message may quote input)."""

    __slots__ = ("_manager", "_span")

    def __init__(
        self, tracer: Tracer, name: str, attributes: dict[str, AttributeValue], kind: SpanKind
    ) -> None:
        self._manager = tracer.start_as_current_span(
            name,
            kind=kind,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        )

    def __enter__(self) -> Span:
        self._span: Span = self._manager.__enter__()
        return self._span

    def __exit__(self, exc_type: type[BaseException] | None, exc: Any, tb: Any) -> None:
        if exc_type is not None:
            _mark_failed(self._span, exc_type)
        self._manager.__exit__(exc_type, exc, tb)


def _mark_failed(span: Span, exc_type: type[BaseException]) -> None:
    from opentelemetry.trace import Status, StatusCode

    span.set_status(Status(StatusCode.ERROR, exc_type.__name__))


def _recording_parent() -> bool:
    return bool(_otel_trace.get_current_span().is_recording())


def _attributes(attrs: Mapping[str, AttributeValue]) -> dict[str, AttributeValue]:
    return {PREFIX + key: value for key, value in attrs.items()}


def span(name: str, **attrs: AttributeValue) -> contextlib.AbstractContextManager[SpanHandle]:
    """A child span of the current one for a `with` block, its keyword attributes under
    `supermew.`; a no-op (yielding a span that records nothing) when tracing is off or no
    span is recording."""
    tracer = _tracer
    if tracer is None or not _recording_parent():
        return _OFF
    return _Traced(tracer, name, _attributes(attrs), _otel_trace.SpanKind.INTERNAL)


def http_span(peer: str, **attrs: AttributeValue) -> contextlib.AbstractContextManager[SpanHandle]:
    """A CLIENT span `POST <peer>` around one HTTP request (inject its context with
    `inject_headers` inside the block); set `http.response.status_code` on it."""
    tracer = _tracer
    if tracer is None or not _recording_parent():
        return _OFF
    attributes = _attributes(attrs)
    attributes["http.request.method"] = "POST"
    return _Traced(tracer, f"POST {peer}", attributes, _otel_trace.SpanKind.CLIENT)


class StreamSpan:
    """A span over an async generator's life that is never made current: a context attached
    inside a generator would stay current in its consumer between items, and a generator
    closed from another task could not detach it."""

    __slots__ = ("_span",)

    def __init__(self, name: str, **attrs: AttributeValue) -> None:
        tracer = _tracer
        self._span: Span | None = (
            tracer.start_span(name, attributes=_attributes(attrs))
            if tracer is not None and _recording_parent()
            else None
        )

    def end(self, error: BaseException | None = None, **attrs: AttributeValue) -> None:
        if self._span is None:
            return
        self._span.set_attributes(_attributes(attrs))
        if error is not None:
            _mark_failed(self._span, type(error))
        self._span.end()


def annotate(**attrs: AttributeValue) -> None:
    """Attributes (under `supermew.`) on the current span, e.g. a Run's route on its RPC
    span."""
    if _tracer is not None:
        _otel_trace.get_current_span().set_attributes(_attributes(attrs))


def record_question(text: str) -> None:
    """The question (or query) on the current span, only with OTEL_RECORD_QUESTIONS=true."""
    if _tracer is not None and _record_questions:
        _otel_trace.get_current_span().set_attribute(QUESTION_ATTRIBUTE, text)


def inject_headers(headers: dict[str, str]) -> dict[str, str]:
    """`headers` plus the W3C `traceparent` (and `tracestate`) of the current span, as a new
    dict; `headers` itself, untouched, when tracing is off."""
    if _tracer is None:
        return headers
    from opentelemetry.propagate import inject

    carrier = dict(headers)
    inject(carrier)
    return carrier


# ---- export ----------------------------------------------------------------------------------


def _scrub(span: ReadableSpan) -> ReadableSpan:
    """The span without exception messages, stack traces or status descriptions (a
    library's `record_exception` or an error repr): only exception types leave."""
    from opentelemetry.sdk.trace import Event
    from opentelemetry.sdk.trace import ReadableSpan as Readable
    from opentelemetry.trace import Status

    status = span.status
    risky_events = any(
        event.name == "exception" and set(event.attributes or ()) - _KEPT_EVENT_ATTRIBUTES
        for event in span.events
    )
    if not risky_events and not status.description:
        return span
    events = [
        Event(
            event.name,
            {k: v for k, v in (event.attributes or {}).items() if k in _KEPT_EVENT_ATTRIBUTES},
            event.timestamp,
        )
        if event.name == "exception"
        else event
        for event in span.events
    ]
    return Readable(
        name=span.name,
        context=span.context,
        parent=span.parent,
        resource=span.resource,
        attributes=span.attributes,
        events=events,
        links=span.links,
        kind=span.kind,
        status=Status(status.status_code),
        start_time=span.start_time,
        end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope,
    )


def scrubbing_exporter(inner: SpanExporter) -> SpanExporter:
    """An exporter passing `_scrub`bed spans on to `inner` (defined here so that the SDK is
    imported only when tracing is configured)."""
    from opentelemetry.sdk.trace.export import SpanExporter as Base

    class ScrubbingExporter(Base):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            return inner.export([_scrub(s) for s in spans])

        def shutdown(self) -> None:
            inner.shutdown()

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            return inner.force_flush(timeout_millis)

    return ScrubbingExporter()
