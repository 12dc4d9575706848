"""The gRPC runtime both services share: a `grpc.aio` server with health and reflection, one
interceptor mapping domain errors to status codes and their typed details
(docs/api.md#status-codes, #error-details), optional API-key auth (shared.auth) and audit log
(shared.audit) reading the service's own policy table (shared.policy), TLS or mTLS
with certificates reloaded on change (shared.tls), and graceful shutdown (SIGTERM/SIGINT →
NOT_SERVING → drain, which waits for the calls and the jobs of `shared.draining` → stop)."""

from __future__ import annotations

import asyncio
import logging
import re
import signal
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, cast

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2, reflection_pb2_grpc

from shared.audit import audit_interceptors
from shared.auth import OPEN_PREFIXES, AuthInterceptor
from shared.draining import STOP_MARGIN_SECONDS, Draining
from shared.error_details import INTERNAL_REASON, abort_with, error_status, rich_status
from shared.errors import (
    AlreadyExists,
    ConfigurationError,
    DeadlineExceeded,
    DependencyRejected,
    DependencyUnavailable,
    DomainError,
    FailedPrecondition,
    InternalFailure,
    InvalidArgument,
    ModelOutputInvalid,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
)
from shared.keys import KeyRing
from shared.metrics import registry_for
from shared.observability import (
    Continuation,
    ServerObservability,
    Wrap,
    produced_items,
    rewrap,
)
from shared.policy import RpcPolicies
from shared.settings import ServerSettings
from shared.tls import server_credentials
from shared.tracing import server_interceptors

log = logging.getLogger(__name__)

HEALTH_SERVICE = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name
REFLECTION_SERVICE = reflection.SERVICE_NAME
# grpc.reflection.v1 is v1alpha under another package name (same messages, same wire form);
# grpcio-reflection serves v1alpha only, so v1 is added here: buf curl and newer grpcurl ask
# v1 first (docs/api.md#servers).
REFLECTION_V1_SERVICE = "grpc.reflection.v1.ServerReflection"
# Health and reflection pass every interceptor but observability untouched.
_OPEN_PREFIXES = OPEN_PREFIXES

# The one place a domain error becomes a status code (docs/api.md#status-codes). Keyed by the
# exact classes of shared.errors; a subclass takes its nearest listed base's code. DomainError
# itself is deliberately absent: an error raised without a meaning is treated as a bug. Each
# class has its ErrorInfo reason in shared.error_details.ERROR_REASONS (docs/api.md#error-details).
STATUS_FOR_ERROR: dict[type[DomainError], grpc.StatusCode] = {
    InvalidArgument: grpc.StatusCode.INVALID_ARGUMENT,
    NotFound: grpc.StatusCode.NOT_FOUND,
    AlreadyExists: grpc.StatusCode.ALREADY_EXISTS,
    PermissionDenied: grpc.StatusCode.PERMISSION_DENIED,
    FailedPrecondition: grpc.StatusCode.FAILED_PRECONDITION,
    DependencyUnavailable: grpc.StatusCode.UNAVAILABLE,
    DeadlineExceeded: grpc.StatusCode.DEADLINE_EXCEEDED,
    ResourceExhausted: grpc.StatusCode.RESOURCE_EXHAUSTED,
    DependencyRejected: grpc.StatusCode.FAILED_PRECONDITION,
    ModelOutputInvalid: grpc.StatusCode.INTERNAL,
    ConfigurationError: grpc.StatusCode.FAILED_PRECONDITION,
    InternalFailure: grpc.StatusCode.INTERNAL,
}


def status_code_for(error_type: type[DomainError]) -> grpc.StatusCode | None:
    """The status of the nearest class in `error_type`'s MRO listed in STATUS_FOR_ERROR, or
    None when there is none (then the error is treated as unexpected)."""
    for cls in error_type.__mro__:
        if issubclass(cls, DomainError) and cls in STATUS_FOR_ERROR:
            return STATUS_FOR_ERROR[cls]
    return None


def status_for(exc: BaseException) -> tuple[grpc.StatusCode, str] | None:
    """The (code, details) an exception maps to, or None for an unexpected exception. Only a
    domain error's own message leaves the process; anything else stays in the log."""
    if isinstance(exc, DomainError):
        code = status_code_for(type(exc))
        if code is not None:
            return code, exc.message
    return None


_NAMED_AT_MOST = 5


def subject_of(request: Any) -> str:
    """What a failed call was about, for its log line: the knowledge base and the documents
    (file names or ids) or resource name its request names; never its text or content.
    "" when it names none (a question, a query)."""
    parts: list[str] = []
    knowledge_base = getattr(request, "knowledge_base", "")
    if isinstance(knowledge_base, str) and knowledge_base:
        parts.append(f"knowledge base {knowledge_base}")
    name = getattr(request, "name", "")
    if isinstance(name, str) and name:
        parts.append(name)
    documents = [str(d.document_id or d.filename) for d in getattr(request, "documents", ()) or ()]
    documents += [str(f) for f in getattr(request, "filenames", ()) or ()]
    documents += [str(i) for i in getattr(request, "document_ids", ()) or ()]
    if documents:
        more = len(documents) - _NAMED_AT_MOST
        named = ", ".join(documents[:_NAMED_AT_MOST]) + (f" and {more} more" if more > 0 else "")
        parts.append(f"documents {named}")
    return f" ({'; '.join(parts)})" if parts else ""


# What any exception without a meaning is answered with: nothing of it leaves the process.
_UNEXPECTED = rich_status(grpc.StatusCode.INTERNAL, "internal error", reason=INTERNAL_REASON)


async def _abort_for(
    exc: BaseException, context: grpc.aio.ServicerContext, method: str, request: Any = None
) -> None:
    """Ends the call with the status `exc` maps to and its typed details
    (docs/api.md#error-details): callers decide from those, never from the text."""
    if isinstance(exc, grpc.aio.AbortError):
        raise exc  # the handler already chose its status
    if isinstance(exc, NotImplementedError):
        # The generated base servicer's answer for an RPC a service does not implement yet.
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "method not implemented")
    mapped = status_for(exc)
    if mapped is None:
        log.error("unhandled error in %s%s", method, subject_of(request), exc_info=exc)
        await abort_with(context, _UNEXPECTED)
    assert isinstance(exc, DomainError) and mapped is not None
    if mapped[0] == grpc.StatusCode.INTERNAL:
        log.error("%s failed%s: %s", method, subject_of(request), mapped[1])
    elif _DOCUMENT_INDEX.search(mapped[1]):
        # A refused write names its document by position; the log line names it by id too,
        # so an operator finds the file among a request's many (the caller has the index).
        log.info(
            "%s refused%s: %s", method, subject_of(request), named_documents(mapped[1], request)
        )
    await abort_with(context, error_status(exc, mapped[0]))


_DOCUMENT_INDEX = re.compile(r"documents\[(\d+)\]")


def named_documents(message: str, request: Any) -> str:
    """`message` with each `documents[i]` followed by that document's id (or file name)."""
    documents = list(getattr(request, "documents", ()) or ())

    def name(match: re.Match[str]) -> str:
        index = int(match.group(1))
        if index >= len(documents):
            return match.group(0)
        doc = documents[index]
        return f"{match.group(0)} ({doc.document_id or doc.filename})"

    return _DOCUMENT_INDEX.sub(name, message)


def _wrap_unary(behavior: Callable[..., Awaitable[Any]], method: str) -> Callable[..., Any]:
    async def wrapper(request: Any, context: grpc.aio.ServicerContext) -> Any:
        try:
            return await behavior(request, context)
        except Exception as exc:  # the one place errors become status codes
            await _abort_for(exc, context, method, request)

    return wrapper


def _wrap_stream(behavior: Callable[..., Any], method: str) -> Callable[..., Any]:
    async def wrapper(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        try:
            async for item in produced_items(behavior, request, context):
                yield item
        except Exception as exc:  # the one place errors become status codes
            await _abort_for(exc, context, method, request)

    return wrapper


def _rewrapped(
    handler: grpc.RpcMethodHandler[Any, Any] | None, method: str, unary: Wrap, stream: Wrap
) -> grpc.RpcMethodHandler[Any, Any] | None:
    """`handler` with its behaviour wrapped by `unary` (unary-unary) or `stream`
    (unary-stream). Request-streaming handlers and the open services (health, reflection)
    pass through untouched."""
    if handler is None or handler.request_streaming or method.startswith(_OPEN_PREFIXES):
        return handler
    return rewrap(handler, unary, stream)


class ErrorMappingInterceptor(grpc.aio.ServerInterceptor):
    """Maps `DomainError`s to status codes through STATUS_FOR_ERROR, with their typed details
    (shared.error_details); anything else becomes INTERNAL with a generic message and a logged
    traceback."""

    async def intercept_service(
        self, continuation: Continuation, handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        handler = await continuation(handler_call_details)
        method = handler_call_details.method or ""
        return _rewrapped(
            handler,
            method,
            lambda behavior: _wrap_unary(behavior, method),
            lambda behavior: _wrap_stream(behavior, method),
        )


class ConcurrencyLimitInterceptor(grpc.aio.ServerInterceptor):
    """At most `limit` calls in flight (MAX_CONCURRENT_RPCS); one more is refused at once with
    RESOURCE_EXHAUSTED instead of queueing behind the others, so a client under overload gets
    a fast, retryable answer and the calls already admitted keep their latency. grpc's own
    `maximum_concurrent_rpcs` would count health checks too and fail probes under load, so the
    limit is a counter here and health and reflection are exempt. A stream counts until it
    ends. The event loop is single-threaded, so the counter needs no lock."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.in_flight = 0
        self._refusal = ResourceExhausted(
            f"the server is serving its limit of {limit} concurrent calls "
            "(MAX_CONCURRENT_RPCS); retry later"
        )

    async def _refuse(self, context: grpc.aio.ServicerContext) -> None:
        mapped = status_for(self._refusal)
        assert mapped is not None
        await abort_with(context, error_status(self._refusal, mapped[0]))

    def _wrap_unary(self, behavior: Callable[..., Awaitable[Any]]) -> Callable[..., Any]:
        async def wrapper(request: Any, context: grpc.aio.ServicerContext) -> Any:
            if self.in_flight >= self.limit:
                await self._refuse(context)
            self.in_flight += 1
            try:
                return await behavior(request, context)
            finally:
                self.in_flight -= 1

        return wrapper

    def _wrap_stream(self, behavior: Callable[..., Any]) -> Callable[..., Any]:
        async def wrapper(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            if self.in_flight >= self.limit:
                await self._refuse(context)
            self.in_flight += 1
            try:
                async for item in behavior(request, context):
                    yield item
            finally:
                self.in_flight -= 1

        return wrapper

    async def intercept_service(
        self, continuation: Continuation, handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        handler = await continuation(handler_call_details)
        method = handler_call_details.method or ""
        return _rewrapped(handler, method, self._wrap_unary, self._wrap_stream)


def _add_reflection(service_names: Sequence[str], server: grpc.aio.Server) -> None:
    """Reflection v1alpha and v1, one servicer behind both. v1 is served but not listed: its
    descriptors are not in the pool, and `buf curl --list-methods` describes every listed
    service."""
    servicer = reflection.aio.ReflectionServicer(service_names)
    reflection_pb2_grpc.add_ServerReflectionServicer_to_server(servicer, server)
    v1 = grpc.stream_stream_rpc_method_handler(
        servicer.ServerReflectionInfo,
        request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
        response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString,
    )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(REFLECTION_V1_SERVICE, {"ServerReflectionInfo": v1}),)
    )


class _RegisteringOnly:
    """The server as the generated `add_*_to_server` functions see it: the methods of
    `service` registered with gRPC's core, every other service's found by name through its
    generic handler. The aio server keeps one call request pending per registered method and
    waits on all of them again after each call arrives: with every service registered (about
    30 methods) that wait cost each Run ≈ 220 Python calls
    (docs/benchmarks.md#orchestrator_throughput)."""

    def __init__(self, server: grpc.aio.Server, service: str) -> None:
        self._server = server
        self._service = service

    def add_generic_rpc_handlers(
        self, generic_rpc_handlers: Sequence[grpc.GenericRpcHandler]
    ) -> None:
        self._server.add_generic_rpc_handlers(generic_rpc_handlers)

    def add_registered_method_handlers(
        self, service_name: str, method_handlers: dict[str, grpc.RpcMethodHandler[Any, Any]]
    ) -> None:
        if service_name == self._service:
            self._server.add_registered_method_handlers(service_name, method_handlers)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._server, name)


class GrpcServer:
    """One service's server: its servicers plus health (`""` and the service's full name) and
    reflection, behind the error-mapping and (optional) auth interceptors. `policies` is the
    service's own table of what each RPC it serves needs and audits (shared.policy): required,
    so a server cannot be built without one; an RPC it lacks is refused to every key.
    `reuse_port` lets worker processes listen on the same port (and HEALTH_PORT), the kernel
    spreading connections among them; each reports its own health. `draining`: the jobs the
    drain waits for besides the calls (the composition root passes the same object to the work
    it starts: the ingestor, background workers); default: a drain of its own."""

    def __init__(
        self,
        settings: ServerSettings,
        *,
        port: int,
        service_names: Sequence[str],
        add_servicers: Callable[[grpc.aio.Server], None],
        policies: RpcPolicies,
        port_setting: str = "the port",
        reuse_port: bool = False,
        draining: Draining | None = None,
        details: Sequence[str] = (),
    ) -> None:
        self._settings = settings
        self._policies = policies
        self.draining = draining or Draining()
        #: What the service adds to its start-up line (retrieval: its embedder).
        self._details = tuple(details)
        self._reuse_port = reuse_port
        self._requested_port = port
        self._port_setting = port_setting
        self._service_names = tuple(service_names)
        self._add_servicers = add_servicers
        self._server: grpc.aio.Server | None = None
        self._health_server: grpc.aio.Server | None = None
        self.health = health.aio.HealthServicer()
        registry = registry_for(*self._service_names)
        self.observability = ServerObservability(settings, registry)
        self.limiter = ConcurrencyLimitInterceptor(settings.max_concurrent_rpcs)
        # Built here, not in start(): a broken AUTH_KEYS_FILE fails before anything listens.
        self.auth = (
            AuthInterceptor(
                KeyRing(settings.auth_keys_file, settings.auth_token), registry, policies
            )
            if settings.auth_on
            else None
        )
        self.port = 0
        self.health_port: int | None = None
        self._stopping = False

    @property
    def address(self) -> str:
        return f"{self._settings.bind_host}:{self.port}"

    def _build(self) -> grpc.aio.Server:
        # grpc.aio binds a server to the running event loop, so it is built in start().
        # The tracing interceptor goes first: its server span is then current in the others,
        # so access-log lines carry the trace id.
        interceptors: list[grpc.aio.ServerInterceptor] = [
            *server_interceptors(),
            *self.observability.interceptors(),
            *audit_interceptors(self._settings, self._policies),
        ]
        if self.auth is not None:
            interceptors.append(self.auth)
        interceptors.append(self.limiter)
        interceptors.append(ErrorMappingInterceptor())
        size = self._settings.grpc_max_message_bytes
        server = grpc.aio.server(
            interceptors=interceptors,
            options=[
                ("grpc.max_send_message_length", size),
                ("grpc.max_receive_message_length", size),
                # Off unless worker processes share the port: otherwise a second server
                # on a busy port would start silently instead of failing.
                ("grpc.so_reuseport", int(self._reuse_port)),
            ],
        )
        # Only the service's own methods are registered with gRPC's core; the others (its
        # other services, health, reflection) are found by name, see _RegisteringOnly.
        registering = cast(grpc.aio.Server, _RegisteringOnly(server, self._service_names[0]))
        health_pb2_grpc.add_HealthServicer_to_server(self.health, registering)
        self._add_servicers(registering)
        _add_reflection((*self._service_names, HEALTH_SERVICE, REFLECTION_SERVICE), registering)
        return server

    async def start(self) -> int:
        """Bind and start; returns the bound port (an ephemeral one when asked for port 0)."""
        self._server = server = self._build()
        s = self._settings
        address = f"{s.bind_host}:{self._requested_port}"
        credentials = server_credentials(s.tls_cert_file, s.tls_key_file, s.tls_client_ca_file)
        try:
            if credentials is None:
                self.port = server.add_insecure_port(address)
            else:
                self.port = server.add_secure_port(address, credentials)
        except RuntimeError:  # grpc's "Failed to bind to address"
            self.port = 0
        if self.port == 0:
            raise ConfigurationError(
                f"{self._port_setting}: cannot listen on {address} (the port is in use, or "
                "BIND_HOST is not an address of this machine)"
            )
        if s.health_port is not None:
            await self._start_health_server(s.health_port)
        try:
            self.observability.start()
        except OSError as exc:  # bound by another process since the start-up check
            raise ConfigurationError(
                f"{s.metrics_port_setting}: cannot listen on {s.bind_host}:{s.metrics_port} "
                "(the port is in use)"
            ) from exc
        await server.start()
        await self._set_health(health_pb2.HealthCheckResponse.SERVING)
        log.info("%s", self.describe())
        return self.port

    def describe(self) -> str:
        """The start-up line: the service, the address it bound, TLS and auth, and where its
        metrics and health-only port are (so two services of one host can be told apart)."""
        s = self._settings
        metrics = self.observability.metrics_port
        parts = [
            f"serving {', '.join(self._service_names)} on {self.address}",
            f"TLS {'on' if s.tls_cert_file else 'off'}"
            + (" (mTLS)" if s.tls_client_ca_file else ""),
            f"auth {self._auth_description()}",
            f"metrics http://{s.bind_host}:{metrics}/metrics" if metrics else "metrics off",
        ]
        if self.health_port:
            parts.append(f"health {s.bind_host}:{self.health_port}")
        parts += self._details
        return "; ".join(parts)

    def _auth_description(self) -> str:
        if self.auth is None:
            return "off"
        sources = (
            [f"AUTH_KEYS_FILE ({self.auth.ring.key_count} keys)"]
            if self._settings.auth_keys_file
            else []
        )
        if self._settings.auth_token:
            sources.append("AUTH_TOKEN")
        return "on: " + " + ".join(sources)

    async def stop(self, grace: float | None = None) -> None:
        """NOT_SERVING first (so balancers stop sending), then let in-flight calls and jobs
        (`draining`) finish for up to `grace` seconds. Jobs still running then are asked to
        stop at their next safe point and get up to STOP_MARGIN_SECONDS more, so that their
        calls end with a status (UNAVAILABLE, ShuttingDown) rather than being cut off
        mid-write; then what is left is cancelled."""
        grace = self._settings.shutdown_grace_seconds if grace is None else grace
        self._stopping = True
        await self._set_health(health_pb2.HealthCheckResponse.NOT_SERVING)
        log.info("draining %s (grace %.1fs)", self.address, grace)
        if self._server is not None:
            # grpc refuses new calls at once and waits for those in flight; the margin only
            # when jobs run, so a stop without any stays as quick as asked.
            margin = STOP_MARGIN_SECONDS if self.draining.in_flight else 0.0
            stopping = asyncio.ensure_future(self._server.stop(grace + margin))
            try:
                await self.draining.drain(grace, margin)
            finally:
                await stopping
        self.observability.stop()
        if self._health_server is not None:
            await self._health_server.stop(None)

    async def _start_health_server(self, port: int) -> None:
        # Plaintext and health only: kubelet's gRPC probes cannot speak TLS. It shares the
        # HealthServicer, so it reports NOT_SERVING during the drain like the main port.
        self._health_server = server = grpc.aio.server(
            options=[("grpc.so_reuseport", int(self._reuse_port))]
        )
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        address = f"{self._settings.bind_host}:{port}"
        try:
            self.health_port = server.add_insecure_port(address)
        except RuntimeError:  # grpc's "Failed to bind to address"
            self.health_port = 0
        if self.health_port == 0:
            raise ConfigurationError(f"HEALTH_PORT: cannot listen on {address}")
        await server.start()

    async def wait_for_termination(self) -> None:
        if self._server is not None:
            await self._server.wait_for_termination()

    async def set_serving(self, serving: bool) -> None:
        """Report a dependency lost (NOT_SERVING) or back (SERVING) on both health names; once
        the drain has begun the server stays NOT_SERVING."""
        if self._stopping:
            return
        await self._set_health(
            health_pb2.HealthCheckResponse.SERVING
            if serving
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )

    async def _set_health(self, status: int) -> None:
        for name in ("", *self._service_names):
            await self.health.set(name, status)


async def serve(
    server: GrpcServer,
    *,
    on_stop: Callable[[], Awaitable[None]] | None = None,
    on_started: Callable[[], None] | None = None,
) -> None:
    """Start `server` (`on_started` runs once it listens) and run it until SIGTERM or SIGINT,
    then drain it; `on_stop` (closing clients) runs in every case, a failed start included."""
    loop = asyncio.get_running_loop()
    stop_requested = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop_requested.set)
    try:
        await server.start()
        if on_started is not None:
            on_started()
        await stop_requested.wait()
        log.info("shutdown requested")
        await server.stop()
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        if on_stop is not None:
            await on_stop()
