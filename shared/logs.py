"""Logging configured once per process by the entry points: plain text for a terminal, JSON
lines (one object per record) for containers and log shippers. Every record of an RPC carries
that call's request id (a contextvar the server sets, a filter that stamps it), and each RPC
ends with one access-log line (docs/api.md#access-logs)."""

from __future__ import annotations

import contextvars
import importlib
import json
import logging
import re
import sys
import threading
import time
import traceback
import types
import uuid
from typing import Any

_STANDARD_ATTRS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None)).keys()) | {
    "message",
    "asctime",
}
#: Stamped on every record by RequestContextFilter; left out of a JSON line when empty.
_CONTEXT_ATTRS = ("request_id", "trace_id")

#: The caller's `x-request-id` of the RPC being served ("" outside one). Set per call by the
#: server's observability interceptor; asyncio tasks and `asyncio.to_thread` inherit it.
REQUEST_ID: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="")
REQUEST_ID_HEADER = "x-request-id"
# A caller's id is echoed into logs and metadata, so only a short token is taken as is;
# anything else (newlines, JSON, kilobytes) is replaced by a generated id.
_REQUEST_ID_SHAPE = re.compile(r"[A-Za-z0-9._:/+=-]{1,128}")

ACCESS_LOGGER = "supermew.access"

try:  # OpenTelemetry is optional: traces are another module's concern.
    _otel_trace: Any = importlib.import_module("opentelemetry.trace")
except ImportError:  # pragma: no cover - depends on the installed extras
    _otel_trace = None


def request_id_from(supplied: str | None) -> str:
    """The caller's request id when it is a plain token, else a new random one."""
    if supplied and _REQUEST_ID_SHAPE.fullmatch(supplied):
        return supplied
    return uuid.uuid4().hex


def current_trace_id() -> str:
    """The W3C trace id (32 hex digits) of the current OpenTelemetry span, or "" when
    opentelemetry is not installed or no span is recording."""
    if _otel_trace is None:
        return ""
    context = _otel_trace.get_current_span().get_span_context()
    return format(context.trace_id, "032x") if context.is_valid else ""


class RequestContextFilter(logging.Filter):
    """Stamps `request_id` and `trace_id` on every record (empty outside an RPC)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not getattr(record, "request_id", ""):
            record.request_id = REQUEST_ID.get()
        if not getattr(record, "trace_id", ""):
            record.trace_id = current_trace_id()
        return True


class TextFormatter(logging.Formatter):
    """`HH:MM:SS LEVEL logger [request id]: message`, the bracket only inside an RPC."""

    def __init__(self) -> None:
        super().__init__(
            "%(asctime)s %(levelname)s %(name)s%(request_tag)s: %(message)s", "%H:%M:%S"
        )

    def format(self, record: logging.LogRecord) -> str:
        request_id = getattr(record, "request_id", "")
        record.request_tag = f" [{request_id}]" if request_id else ""
        return super().format(record)


def log_access(
    method: str, peer: str, status: str, duration_seconds: float, *, level: int = logging.INFO
) -> None:
    """The one access-log line of an RPC, in logfmt so that the text format is structured too;
    the JSON format carries the same fields as keys."""
    logger = logging.getLogger(ACCESS_LOGGER)
    if not logger.isEnabledFor(level):
        return
    duration_ms = round(duration_seconds * 1000, 3)
    request_id, trace_id = REQUEST_ID.get(), current_trace_id()
    logger.log(
        level,
        "method=%s status=%s duration_ms=%.3f peer=%s request_id=%s trace_id=%s",
        method, status, duration_ms, peer, request_id, trace_id,
        extra={
            "method": method,
            "status": status,
            "duration_ms": duration_ms,
            "peer": peer,
            "request_id": request_id,
            "trace_id": trace_id,
        },
    )  # fmt: skip


class JsonLineFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, extras and any traceback."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD_ATTRS and not key.startswith("_"):
                entry[key] = value
        if record.name != ACCESS_LOGGER:  # the access line keeps its (empty) slots
            for key in _CONTEXT_ATTRS:
                if not entry.get(key):
                    entry.pop(key, None)
        entry.pop("request_tag", None)
        if record.exc_info:
            entry["exc_info"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack_info"] = self.formatStack(record.stack_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


CHATTY_LOGGERS = (
    "faiss.loader",
    "milvus_lite.engine.collection",
    # Alembic announces each plugin and its context at every start-up; the migration itself
    # is logged by shared.sql.migrate ("database schema migrated from … to …").
    "alembic.runtime.plugins",
    "alembic.runtime.migration",
)
# Loggers that log a failure with its traceback and then raise it to us, where it is reported
# once (e.g. a Milvus Lite data directory locked by another process): shown only at DEBUG.
RERAISING_LOGGERS = ("milvus_lite.server_manager",)


class MilvusLiteUnimplementedFilter(logging.Filter):
    """Drops the traceback Milvus Lite's in-process gRPC adapter logs each time pymilvus asks it
    for AllocTimestamp (while waiting for an index): the adapter does not implement the method,
    pymilvus ignores UNIMPLEMENTED by design and carries on, so the traceback reports nothing
    wrong. Any other NotImplementedError still gets through."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.exc_info or not isinstance(record.exc_info[1], NotImplementedError):
            return True
        frames = traceback.extract_tb(record.exc_info[2])
        return not (frames and frames[-1].name == "AllocTimestamp")


def _log_uncaught(
    exc_type: type[BaseException], exc: BaseException, tb: types.TracebackType | None
) -> None:
    logging.getLogger("uncaught").critical("uncaught exception", exc_info=(exc_type, exc, tb))


def _log_uncaught_in_thread(args: threading.ExceptHookArgs) -> None:
    if args.exc_type is SystemExit or args.exc_value is None:
        return
    name = args.thread.name if args.thread is not None else "?"
    logging.getLogger("uncaught").error(
        "uncaught exception in thread %s",
        name,
        exc_info=(args.exc_type, args.exc_value, args.exc_traceback),
    )


def adopt_library_loggers() -> None:
    """Route every logger that brought its own handler (pymilvus installs one printing its own
    format) through the root's, so that under LOG_FORMAT=json every line on stderr is JSON.
    Called by configure_logging and again once a library that configures itself at import
    (pymilvus) has been imported."""
    for logger in list(logging.Logger.manager.loggerDict.values()):
        if isinstance(logger, logging.Logger) and logger.handlers:
            logger.handlers.clear()
            logger.propagate = True


def configure_logging(level: str = "INFO", fmt: str = "text") -> None:
    """Install one stderr handler on the root logger (replacing any earlier one)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonLineFormatter() if fmt == "json" else TextFormatter())
    handler.addFilter(MilvusLiteUnimplementedFilter())
    handler.addFilter(RequestContextFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    adopt_library_loggers()
    # What would otherwise reach stderr as bare text (warnings, uncaught exceptions in the main
    # thread or a worker thread) goes through the handler too, so JSON mode stays JSON.
    logging.captureWarnings(True)
    sys.excepthook = _log_uncaught
    threading.excepthook = _log_uncaught_in_thread
    root.setLevel(level.upper())
    # Dependency chatter shown only at DEBUG: faiss reports each AVX512/AVX2 build it fails to
    # load ("Could not load library …") before loading the generic one it ships, and Milvus
    # Lite logs every background segment-index build, i.e. after each flush of an ingest.
    quiet_level = logging.NOTSET if root.level <= logging.DEBUG else logging.WARNING
    for name in CHATTY_LOGGERS:
        logging.getLogger(name).setLevel(quiet_level)
    for name in RERAISING_LOGGERS:
        logging.getLogger(name).setLevel(
            logging.NOTSET if root.level <= logging.DEBUG else logging.CRITICAL + 1
        )
