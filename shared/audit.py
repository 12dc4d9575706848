"""The audit log (docs/api.md#audit-log): one JSON line per RPC saying who called (key id, peer),
what the call named (RPC, knowledge bases, filter), how it ended (status code) and which
documents it wrote, deleted or returned, on its own stream (AUDIT_LOG), apart from the
service log. Never a key, a token or an authorization header; the question or query text only
with AUDIT_LOG_QUERIES=true. Health and reflection calls are not audited.

What a line reads from each RPC's request and responses is the `audit` part of that RPC's row in
the server's policy table (shared.policy; the rows live with each service). An RPC without a row
is still audited, with its key, peer, RPC and code only."""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import IO, Any, Final

import grpc

from shared.access import current_principal
from shared.errors import ConfigurationError
from shared.logs import REQUEST_ID
from shared.observability import Continuation, final_code, produced_items, rewrap
from shared.policy import AuditRow, RpcPolicies, RpcPolicy, knowledge_bases_named
from shared.settings import ServerSettings

log = logging.getLogger(__name__)

#: AUDIT_LOG's value that writes the lines to the process's standard output.
STDOUT: Final = "stdout"
#: Health and reflection (every `grpc.*` service) are not audited.
UNAUDITED_PREFIX: Final = "/grpc."
#: What the line of an RPC without a row reads: the common fields only.
_NO_FIELDS: Final = AuditRow()


def field_values(message: Any, path: str) -> list[Any]:
    """The values at dotted `path` in `message`, every element of a repeated field on the
    way; an unset sub-message reads as its (empty) default."""
    values = [message]
    for step in path.split("."):
        found: list[Any] = []
        for value in values:
            child = getattr(value, step, None)
            if child is None:
                continue
            if isinstance(child, str | bytes) or not isinstance(child, Iterable):
                found.append(child)
            else:
                found.extend(child)
        values = found
    return values


def _distinct(values: Iterable[Any]) -> list[str]:
    """The non-empty values as text, each once, in first-seen order."""
    return list(dict.fromkeys(str(v) for v in values if v))


def _text(message: Any, path: str | None) -> str:
    """The text at `path` ("" when there is none)."""
    values = field_values(message, path) if path else []
    return str(values[0]) if values else ""


def rfc3339(epoch_seconds: float) -> str:
    """`2026-12-05T01:22:23.123Z`: UTC, milliseconds."""
    moment = datetime.fromtimestamp(epoch_seconds, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class CallAudit:
    """The audit of one RPC, pure: made from the request, fed every message the call answers,
    and turned into one line's fields by `entry` when the call has ended."""

    __slots__ = ("_returned", "_written", "method", "peer", "policy", "request", "row")

    def __init__(self, method: str, request: Any, peer: str, policy: RpcPolicy | None) -> None:
        """`policy`: the RPC's row in the server's table; None when it has none."""
        self.method = method
        self.request = request
        self.peer = peer
        self.policy = policy
        self.row = policy.audit if policy is not None else _NO_FIELDS
        self._written: list[Any] = []
        self._returned: list[Any] = []

    def add(self, response: Any) -> None:
        """One message the call answered (the response, or one streamed event)."""
        if self.row.written:
            self._written += field_values(response, self.row.written)
        if self.row.returned:
            self._returned += field_values(response, self.row.returned)

    def knowledge_bases(self) -> list[str]:
        """Bare ids of what the request names (`knowledge_bases/x` → `x`); the default one
        when it names none; none for an RPC without a knowledge-base field."""
        return knowledge_bases_named(self.policy, self.request)

    def entry(
        self,
        *,
        code: str,
        key_id: str,
        request_id: str,
        ended: float,
        with_question: bool = False,
    ) -> dict[str, Any]:
        """The line's fields, in the order docs/api.md#audit-log lists them. `deleted` lists
        what a DeleteDocuments request named, only when it succeeded."""
        row = self.row
        deleted = (
            _distinct(v for path in row.deleted for v in field_values(self.request, path))
            if code == "OK"
            else []
        )
        entry: dict[str, Any] = {
            "time": rfc3339(ended),
            "request_id": request_id,
            "key_id": key_id,
            "peer": self.peer,
            "rpc": self.method,
            "knowledge_bases": self.knowledge_bases(),
            "filter": _text(self.request, row.filter),
            "code": code,
            "written": _distinct(self._written),
            "deleted": deleted,
            "returned": _distinct(self._returned),
        }
        if with_question and row.question:
            entry["question"] = _text(self.request, row.question)
        return entry


def audit_line(entry: Mapping[str, Any]) -> str:
    """One JSON object on one line (non-ASCII kept as UTF-8), newline included."""
    return json.dumps(entry, ensure_ascii=False, separators=(",", ":")) + "\n"


class AuditLog:
    """Where the lines go: standard output, or a file opened for appending, unbuffered.

    Each line is ONE write(2) on the event loop. To a file opened O_APPEND that copies the line
    into the page cache and returns (no fsync), a few microseconds, so there is no thread hop:
    a thread pool would cost more than the write and could reorder lines. O_APPEND also keeps
    the lines of worker processes sharing the file whole, never interleaved. On standard output
    the line is written and flushed at once; a reader that stops draining the pipe would stall
    the server, as it would the service log. A failed write is logged (once until writes
    succeed again) and never fails the call."""

    def __init__(self, target: str) -> None:
        self.target = target
        self._failing = False
        self._file: IO[bytes] | None = None
        if target != STDOUT:
            try:
                self._file = open(target, "ab", buffering=0)  # noqa: SIM115 - lives with the server
            except OSError as exc:
                raise ConfigurationError(
                    f"AUDIT_LOG: cannot open {target} for appending ({exc.strerror or exc})"
                ) from exc

    def write(self, line: str) -> None:
        try:
            if self._file is not None:
                self._file.write(line.encode("utf-8"))
            else:
                sys.stdout.write(line)
                sys.stdout.flush()
        except (OSError, ValueError) as exc:  # disk full, a closed stream
            if not self._failing:
                log.error("audit log: cannot write to %s (%s)", self.target, exc)
            self._failing = True
            return
        self._failing = False

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


class AuditInterceptor(grpc.aio.ServerInterceptor):
    """Writes each call's audit line when it ends. It sits inside the observability
    interceptor (the request id is set) and outside auth (it sees refused calls too, and the
    principal auth set in the call's task once the inner behaviour has returned). Each line
    reads what the call's row in `policies` says."""

    def __init__(
        self, sink: AuditLog, policies: RpcPolicies, *, with_question: bool = False
    ) -> None:
        self.sink = sink
        self.policies = policies
        self.with_question = with_question

    def _finish(
        self,
        audit: CallAudit,
        context: grpc.aio.ServicerContext,
        error: BaseException | None,
        deadline: float | None,
    ) -> None:
        expired = deadline is not None and time.monotonic() >= deadline
        entry = audit.entry(
            code=final_code(context, error, expired),
            key_id=current_principal().key_id,
            request_id=REQUEST_ID.get(),
            ended=time.time(),
            with_question=self.with_question,
        )
        self.sink.write(audit_line(entry))

    def _begin(
        self, method: str, request: Any, context: grpc.aio.ServicerContext
    ) -> tuple[CallAudit, float | None]:
        # The peer is read while the call is live (see shared.observability._Call).
        left = context.time_remaining()
        deadline = None if left is None else time.monotonic() + left
        audit = CallAudit(method, request, context.peer() or "", self.policies.get(method))
        return audit, deadline

    def _single(self, method: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        def wrap(behavior: Callable[..., Any]) -> Callable[..., Any]:
            async def wrapper(request: Any, context: grpc.aio.ServicerContext) -> Any:
                audit, deadline = self._begin(method, request, context)
                try:
                    response = await behavior(request, context)
                except BaseException as exc:
                    self._finish(audit, context, exc, deadline)
                    raise
                audit.add(response)
                self._finish(audit, context, None, deadline)
                return response

            return wrapper

        return wrap

    def _streaming(self, method: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        def wrap(behavior: Callable[..., Any]) -> Callable[..., Any]:
            async def wrapper(
                request: Any, context: grpc.aio.ServicerContext
            ) -> AsyncIterator[Any]:
                audit, deadline = self._begin(method, request, context)
                try:
                    async for item in produced_items(behavior, request, context):
                        audit.add(item)
                        yield item
                except BaseException as exc:
                    self._finish(audit, context, exc, deadline)
                    raise
                self._finish(audit, context, None, deadline)

            return wrapper

        return wrap

    async def intercept_service(
        self, continuation: Continuation, handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        handler = await continuation(handler_call_details)
        method = handler_call_details.method or ""
        if handler is None or handler.request_streaming or method.startswith(UNAUDITED_PREFIX):
            return handler
        return rewrap(handler, self._single(method), self._streaming(method))


def audit_interceptors(
    settings: ServerSettings, policies: RpcPolicies
) -> list[grpc.aio.ServerInterceptor]:
    """The audit interceptor reading `policies` when AUDIT_LOG is set, else none.
    ConfigurationError naming AUDIT_LOG when its file cannot be opened."""
    if not settings.audit_log:
        return []
    sink = AuditLog(settings.audit_log)
    return [AuditInterceptor(sink, policies, with_question=settings.audit_log_queries)]
