"""Start-up of a service process (`python -m retrieval_service` / `orchestrator_service`):
settings read once, logging configured, the service run until it is stopped. A start-up
failure the operator can fix (a bad setting, a port in use, a locked or unreachable store)
ends the process with one line on stderr naming the variable or resource and a non-zero exit;
its traceback is logged at DEBUG only."""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from pydantic import ValidationError

from shared.errors import ConfigurationError
from shared.logs import configure_logging
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


def _fail(service: str, message: str) -> int:
    # One line even when a message (e.g. a validator's) spans several.
    sys.stderr.write(f"{service}: cannot start: {' '.join(message.split())}\n")
    sys.stderr.flush()
    return EXIT_STARTUP_FAILURE


def run_service(
    service: str,
    load_settings: Callable[[], S],
    serve: Callable[[S, Callable[[], None]], Coroutine[Any, Any, None]],
) -> int:
    """Read the settings, configure logging and run `serve(settings, on_started)` until it
    returns; the exit status. `serve` calls `on_started` once its server listens."""
    try:
        settings = load_settings()
    except ValidationError as exc:
        return _fail(service, describe_invalid_settings(exc))
    configure_logging(settings.log_level, settings.log_format)
    quiet = StartupTracebacks()
    for handler in logging.getLogger().handlers:
        handler.addFilter(quiet)

    def started() -> None:
        quiet.active = False

    try:
        configure_tracing(service, record_questions=settings.otel_record_questions)
        asyncio.run(serve(settings, started))
    except ConfigurationError as exc:
        log.debug("start-up failed", exc_info=True)
        return _fail(service, exc.message)
    finally:
        shutdown_tracing()  # exports the spans still buffered
    return 0
