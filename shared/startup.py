"""Start-up of a service process (`python -m retrieval_service` / `orchestrator_service`):
settings read once, logging configured, the service run until it is stopped. A start-up
failure the operator can fix (a bad setting, a port in use, a locked or unreachable store)
ends the process with one line on stderr naming the variable or resource and a non-zero exit;
its traceback is logged at DEBUG only.

With several workers the process is a supervisor: it starts that many server processes (each
with its own event loop, clients and health, sharing the port through SO_REUSEPORT), forwards
SIGTERM/SIGINT to them so they drain together, and ends when they have all ended. A worker that
ends on its own (a failed start included) stops the others, and its exit status is passed on,
so the orchestrator (kubelet, `make run`) restarts the whole set."""

from __future__ import annotations

import asyncio
import importlib
import logging
import multiprocessing
import multiprocessing.connection
import signal
import socket
import sys
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar, cast

from pydantic import ValidationError

from shared.errors import ConfigurationError
from shared.logs import adopt_library_loggers, configure_logging
from shared.settings import ServerSettings
from shared.tracing import configure_tracing, shutdown_tracing

log = logging.getLogger(__name__)

S = TypeVar("S", bound=ServerSettings)

#: Exit status of a process whose settings or resources do not allow it to start.
EXIT_STARTUP_FAILURE = 2


def describe_invalid_settings(exc: ValidationError) -> str:
    """One line naming every rejected variable and why (never its value: it may be a key)."""
    problems = []
    for error in exc.errors():
        variable = str(error["loc"][0]).upper() if error["loc"] else "settings"
        problems.append(f"{variable}: {error['msg']}")
    return "invalid setting " + "; ".join(problems)


class StartupTracebacks(logging.Filter):
    """Until the server listens, drops the traceback of any record logged with one (e.g. a
    store adapter logging the failed open it then raises): the failure is reported once, as
    the start-up line. At DEBUG every traceback stays."""

    def __init__(self) -> None:
        super().__init__()
        self.active = True

    def filter(self, record: logging.LogRecord) -> bool:
        if self.active and logging.getLogger().level > logging.DEBUG:
            record.exc_info, record.exc_text = None, None
        return True


def check_ports_free(host: str, ports: dict[str, int]) -> None:
    """Raise ConfigurationError naming the variable of the first port in `ports` that cannot
    be bound on `host`. Run before the service opens anything slow (the store), so a busy
    port fails at once, and before gRPC tries it (its core logs its own line on a failed
    bind). Port 0 (any free one) is never busy."""
    bare = host.strip("[]")
    for variable, port in ports.items():
        if not port:
            continue
        address = f"{host}:{port}"
        try:
            family, kind, proto, _, sockaddr = socket.getaddrinfo(
                bare or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
            )[0]
            with socket.socket(family, kind, proto) as probe:
                # As gRPC and the metrics server bind: a port left in TIME_WAIT is free.
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                probe.bind(sockaddr)
        except OSError as exc:  # socket.gaierror included
            raise ConfigurationError(
                f"{variable}: cannot listen on {address} (the port is in use, or BIND_HOST "
                "is not an address of this machine)"
            ) from exc


def _fail(service: str, message: str) -> int:
    # One line even when a message (e.g. a validator's) spans several.
    sys.stderr.write(f"{service}: cannot start: {' '.join(message.split())}\n")
    sys.stderr.flush()
    return EXIT_STARTUP_FAILURE


Serve = Callable[[S, Callable[[], None]], Coroutine[Any, Any, None]]
LoopFactory = Callable[[], asyncio.AbstractEventLoop]
#: `serve` itself, or its "module:name", imported only once the settings are read and the
#: ports checked free, so that a bad setting or a busy port fails before the slow imports.
ServeRef = Serve[S] | str


def _resolve(serve: ServeRef[S]) -> Serve[S]:
    if not isinstance(serve, str):
        return serve
    module, _, name = serve.partition(":")
    return cast(Serve[S], getattr(importlib.import_module(module), name))


def run_service(
    service: str,
    load_settings: Callable[[], S],
    serve: ServeRef[S],
    *,
    workers: Callable[[S], int] | None = None,
    loop_factory: LoopFactory | None = None,
) -> int:
    """Read the settings, configure logging and run `serve(settings, on_started)` until it
    returns; the exit status. `serve` calls `on_started` once its server listens. `workers`
    gives the number of server processes from the settings (1 when absent); with more, `serve`
    (or its "module:name") and `loop_factory` must be importable module-level names (workers
    are spawned, not forked: gRPC's core does not survive a fork)."""
    try:
        settings = load_settings()
        count = 1 if workers is None else workers(settings)
    except ValidationError as exc:
        return _fail(service, describe_invalid_settings(exc))
    try:
        check_ports_free(settings.bind_host, settings.listen_ports())
    except ConfigurationError as exc:
        return _fail(service, exc.message)
    if count > 1:
        return _supervise(service, settings, serve, loop_factory, count)
    return _run(service, settings, serve, loop_factory)


def _run(service: str, settings: S, serve: ServeRef[S], loop_factory: LoopFactory | None) -> int:
    configure_logging(settings.log_level, settings.log_format)
    quiet = StartupTracebacks()
    for handler in logging.getLogger().handlers:
        handler.addFilter(quiet)

    def started() -> None:
        quiet.active = False

    try:
        configure_tracing(service, record_questions=settings.otel_record_questions)
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            body = _resolve(serve)
            adopt_library_loggers()  # those the import brought, with handlers of their own
            runner.run(body(settings, started))
    except ConfigurationError as exc:
        log.debug("start-up failed", exc_info=True)
        return _fail(service, exc.message)
    finally:
        shutdown_tracing()  # exports the spans still buffered
    return 0


def _worker(
    service: str, settings: S, serve: ServeRef[S], loop_factory: LoopFactory | None, index: int
) -> None:
    if index > 0:
        # One /metrics endpoint per pod: worker 0's (the port cannot be shared; see
        # docs/api.md#workers for what its figures cover).
        settings = settings.model_copy(update={"metrics_port": None})
    sys.exit(_run(service, settings, serve, loop_factory))


def _supervise(
    service: str, settings: S, serve: ServeRef[S], loop_factory: LoopFactory | None, count: int
) -> int:
    configure_logging(settings.log_level, settings.log_format)
    context = multiprocessing.get_context("spawn")
    procs = [
        context.Process(
            target=_worker,
            args=(service, settings, serve, loop_factory, index),
            name=f"{service}-worker-{index}",
        )
        for index in range(count)
    ]
    requested = False

    def forward(signum: int, _frame: object) -> None:
        nonlocal requested
        requested = True
        for proc in procs:
            if proc.pid is not None and proc.exitcode is None:
                proc.terminate()  # SIGTERM: each worker drains its own calls

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        for proc in procs:
            proc.start()
        if requested:  # a signal came while workers were starting
            forward(signal.SIGTERM, None)
        log.info("%s: %d worker processes", service, count)
        multiprocessing.connection.wait([proc.sentinel for proc in procs])
        ended_alone = not requested
        forward(signal.SIGTERM, None)
        for proc in procs:
            proc.join()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    # A worker killed by the forwarded signal before it could drain has a negative status.
    failed = next((proc.exitcode for proc in procs if proc.exitcode and proc.exitcode > 0), 0)
    return failed or (1 if ended_alone else 0)
