"""What a server records about each RPC: the request id (the caller's `x-request-id` or a new
one, echoed in the trailing metadata and stamped on every log line of the call), one
access-log line, and the go-grpc-prometheus families when METRICS_PORT is set
(docs/api.md#access-logs, #metrics). One interceptor does all three, so a call is timed once."""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeAlias

import grpc
from prometheus_client import CollectorRegistry

from shared.logs import REQUEST_ID, REQUEST_ID_HEADER, log_access, request_id_from
from shared.metrics import GRPC_TYPES, GrpcServerMetrics, MetricsEndpoint, grpc_server_metrics
from shared.settings import ServerSettings

#: What a server interceptor is handed: the next interceptor, or the server's own lookup.
Continuation: TypeAlias = (
    "Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any] | None]]"
)

# Kubernetes probes call Health every few seconds, and grpcurl / buf curl ask reflection before
# every call: their access lines go to DEBUG.
_QUIET_PREFIX = (
    "/grpc.health.v1.Health/",
    "/grpc.reflection.v1alpha.ServerReflection/",
    "/grpc.reflection.v1.ServerReflection/",
)


def _split(method: str) -> tuple[str, str]:
    """`/pkg.Service/Method` → (`pkg.Service`, `Method`)."""
    service, _, name = method.lstrip("/").rpartition("/")
    return service, name


def final_code(
    context: grpc.aio.ServicerContext, error: BaseException | None, expired: bool
) -> str:
    """The status the call ended with, as grpc-go spells it (`OK`, `INVALID_ARGUMENT`, …)."""
    if isinstance(error, asyncio.CancelledError | GeneratorExit):
        return "DEADLINE_EXCEEDED" if expired else "CANCELLED"
    code = context.code()
    if isinstance(code, grpc.StatusCode):
        return code.name
    if error is not None and not isinstance(error, grpc.aio.AbortError):
        return "UNKNOWN"  # what grpc answers for an exception no interceptor mapped
    return "OK"


class _Call:
    """One RPC in flight: started on construction, finished exactly once."""

    __slots__ = ("deadline", "labels", "level", "method", "metrics", "peer", "start")

    def __init__(
        self,
        method: str,
        grpc_type: str,
        metrics: GrpcServerMetrics | None,
        metadata: Any,
        context: grpc.aio.ServicerContext,
    ) -> None:
        self.method = method
        self.metrics = metrics
        self.level = logging.DEBUG if method.startswith(_QUIET_PREFIX) else logging.INFO
        service, name = _split(method)
        self.labels = (grpc_type, service, name)
        supplied = next((str(v) for k, v in metadata or () if k == REQUEST_ID_HEADER), None)
        request_id = request_id_from(supplied)
        REQUEST_ID.set(request_id)  # each RPC runs in its own task, so no reset is needed
        context.set_trailing_metadata(((REQUEST_ID_HEADER, request_id),))
        if metrics is not None:
            metrics.started.labels(*self.labels).inc()
        # Read while the call is live: grpc segfaults when peer() is asked of a call it has
        # already torn down (a cancelled stream whose generator is closed later).
        self.peer = context.peer() or ""
        self.start = time.perf_counter()
        left = context.time_remaining()
        self.deadline = None if left is None else self.start + left

    def finish(self, context: grpc.aio.ServicerContext, error: BaseException | None) -> None:
        now = time.perf_counter()
        elapsed = now - self.start
        code = final_code(context, error, self.deadline is not None and now >= self.deadline)
        if self.metrics is not None:
            self.metrics.handled.labels(*self.labels, code).inc()
            self.metrics.handling_seconds.labels(*self.labels).observe(elapsed)
        log_access(self.method, self.peer, code, elapsed, level=self.level)


class ObservabilityInterceptor(grpc.aio.ServerInterceptor):
    """Outermost interceptor: it sees the final status of every call, auth refusals too."""

    def __init__(self, metrics: GrpcServerMetrics | None) -> None:
        self._metrics = metrics

    async def intercept_service(
        self, continuation: Continuation, handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        handler = await continuation(handler_call_details)
        if handler is None:  # unknown method: grpc answers UNIMPLEMENTED, no label is minted
            return None
        method = handler_call_details.method or ""
        metadata = handler_call_details.invocation_metadata
        grpc_type = GRPC_TYPES[(handler.request_streaming, handler.response_streaming)]
        metrics = self._metrics

        def begin(context: grpc.aio.ServicerContext) -> _Call:
            return _Call(method, grpc_type, metrics, metadata, context)

        return rewrap(
            handler,
            lambda behavior: _single(behavior, begin),
            lambda behavior: _streaming(behavior, begin),
        )


Wrap = Callable[[Callable[..., Any]], Callable[..., Any]]


def rewrap(
    handler: grpc.RpcMethodHandler[Any, Any], single: Wrap, streaming: Wrap
) -> grpc.RpcMethodHandler[Any, Any]:
    """`handler` rebuilt as the same kind of handler, with the same (de)serializers, its
    behaviour wrapped by `single` (one response) or `streaming` (a streamed response): how the
    interceptors here and in shared.serve put themselves around a call."""
    behavior: Callable[..., Any] | None
    if handler.response_streaming:
        behavior, wrap = handler.unary_stream or handler.stream_stream, streaming
        make = (
            grpc.stream_stream_rpc_method_handler
            if handler.request_streaming
            else grpc.unary_stream_rpc_method_handler
        )
    else:
        behavior, wrap = handler.unary_unary or handler.stream_unary, single
        make = (
            grpc.stream_unary_rpc_method_handler
            if handler.request_streaming
            else grpc.unary_unary_rpc_method_handler
        )
    assert behavior is not None
    return make(
        wrap(behavior),
        request_deserializer=handler.request_deserializer,
        response_serializer=handler.response_serializer,
    )


async def produced_items(
    behavior: Callable[..., Any], request: Any, context: grpc.aio.ServicerContext
) -> AsyncIterator[Any]:
    """The messages a response-streaming behaviour yields; none when it writes them itself
    through `context.write()` (it is then a coroutine)."""
    produced = behavior(request, context)
    if inspect.isawaitable(produced):
        await produced
        return
    async for item in produced:
        yield item


def _single(
    behavior: Callable[..., Any], begin: Callable[[grpc.aio.ServicerContext], _Call]
) -> Callable[..., Any]:
    async def wrapper(request: Any, context: grpc.aio.ServicerContext) -> Any:
        call = begin(context)
        try:
            response = await behavior(request, context)
        except BaseException as exc:
            call.finish(context, exc)
            raise
        call.finish(context, None)
        return response

    return wrapper


def _streaming(
    behavior: Callable[..., Any], begin: Callable[[grpc.aio.ServicerContext], _Call]
) -> Callable[..., Any]:
    async def wrapper(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        call = begin(context)
        try:
            async for item in produced_items(behavior, request, context):
                yield item
        except BaseException as exc:
            call.finish(context, exc)
            raise
        call.finish(context, None)

    return wrapper


class ServerObservability:
    """A server's request ids, access logs and (with METRICS_PORT) Prometheus families and
    `/metrics` endpoint. `shared.serve.GrpcServer` owns one."""

    def __init__(self, settings: ServerSettings, registry: CollectorRegistry) -> None:
        port = settings.metrics_port
        self._metrics = grpc_server_metrics(registry) if port is not None else None
        self._endpoint = (
            MetricsEndpoint(registry, settings.bind_host, port) if port is not None else None
        )

    @property
    def metrics_port(self) -> int | None:
        """The bound `/metrics` port once started; None when metrics are off."""
        return self._endpoint.port if self._endpoint is not None else None

    def interceptors(self) -> list[grpc.aio.ServerInterceptor]:
        return [ObservabilityInterceptor(self._metrics)]

    def start(self) -> None:
        if self._endpoint is not None:
            self._endpoint.start()

    def stop(self) -> None:
        if self._endpoint is not None:
            self._endpoint.stop()
