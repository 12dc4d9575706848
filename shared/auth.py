"""The auth interceptor (docs/api.md#api-keys): every RPC but health and reflection presents
`authorization: Bearer <key>`; the key is looked up in the KeyRing (AUTH_KEYS_FILE, AUTH_TOKEN),
charged to its quota, and its role checked against the RPC, in that order:

- unknown or missing key → UNAUTHENTICATED;
- past the key's `rate_per_second` / `burst` → RESOURCE_EXHAUSTED carrying an ErrorInfo with
  reason QUOTA_SPENT and a `google.rpc.RetryInfo` (the rich error model: a
  `grpc-status-details-bin` trailer, shared.error_details), counted in
  `supermew_rate_limited_total{key_id}`;
- a role without the RPC's permission → PERMISSION_DENIED naming the permission and the
  knowledge bases the request names, with the ErrorInfo of a PermissionDenied. The permission
  and where the request names its knowledge bases are the RPC's row in the table the server
  was given (shared.policy); an RPC without a row is refused to every key.

Knowledge bases and documents are checked by the servicers, which know what a request names;
they read the caller from `shared.access.current_principal()`, set here inside the call's own
task (refused calls too, so the audit log names the key that was refused)."""

from __future__ import annotations

import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Final

import grpc
from google.protobuf import duration_pb2
from google.rpc import error_details_pb2
from prometheus_client import CollectorRegistry, Counter

from shared.access import Principal, set_current_principal
from shared.error_details import QUOTA_SPENT_REASON, abort_with, error_status, rich_status
from shared.errors import PermissionDenied
from shared.keys import KeyRing
from shared.observability import Continuation, rewrap
from shared.policy import RpcPolicies, require_rpc

#: Health and reflection: open, so probes and `grpcurl list` need no key.
OPEN_PREFIXES: Final = (
    "/grpc.health.v1.Health/",
    "/grpc.reflection.v1alpha.ServerReflection/",
    "/grpc.reflection.v1.ServerReflection/",
)
#: How a quota refusal's message begins. Clients (the orchestrator with retrieval's refusals)
#: tell one by its ErrorInfo reason QUOTA_SPENT, never by these words.
QUOTA_SPENT: Final = "this key's quota is spent"


def bearer_key(metadata: Any) -> str | None:
    """The key of an `authorization: Bearer <key>` header, None when there is none."""
    for name, value in metadata or ():
        if name == "authorization":
            scheme, _, key = str(value).partition(" ")
            if scheme.lower() == "bearer" and key.strip():
                return key.strip()
    return None


@dataclass(slots=True)
class TokenBucket:
    """`rate` tokens a second up to `burst`; a call takes one."""

    rate: float
    burst: int
    tokens: float
    updated: float

    def take(self, now: float) -> float:
        """0.0 when a token was taken; otherwise the seconds until one will be there."""
        self.tokens = min(self.burst, self.tokens + (now - self.updated) * self.rate)
        self.updated = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return 0.0
        return (1.0 - self.tokens) / self.rate


class Quotas:
    """One token bucket per key (by id), over all of its RPCs. A key without
    `rate_per_second` is not limited; `burst` defaults to the rate rounded up (at least 1). A
    changed rate or burst in the keys file starts a full bucket."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._buckets: dict[str, tuple[tuple[float, int], TokenBucket]] = {}

    def wait(self, principal: Principal) -> float:
        """0.0 when the call may go ahead, else the seconds until the key may call again."""
        rate = principal.rate_per_second
        if rate is None:
            return 0.0
        burst = principal.burst or max(1, math.ceil(rate))
        now = self._clock()
        held = self._buckets.get(principal.key_id)
        if held is None or held[0] != (rate, burst):
            held = self._buckets[principal.key_id] = (
                (rate, burst),
                TokenBucket(rate, burst, burst, now),
            )
        return held[1].take(now)


def quota_spent_status(delay: float) -> grpc.Status:
    """RESOURCE_EXHAUSTED saying when to retry, with the `grpc-status-details-bin` trailer of
    a google.rpc.Status holding an ErrorInfo (reason QUOTA_SPENT) and a RetryInfo (when the
    next token is there)."""
    seconds = max(delay, 0.001)
    retry = error_details_pb2.RetryInfo(
        retry_delay=duration_pb2.Duration(
            seconds=int(seconds), nanos=int((seconds - int(seconds)) * 1e9)
        )
    )
    return rich_status(
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        f"{QUOTA_SPENT}; retry in {delay:.2f} s",
        reason=QUOTA_SPENT_REASON,
        extra=[retry],
    )


def rate_limited_counter(registry: CollectorRegistry) -> Counter:
    return Counter(
        "supermew_rate_limited_total",
        "Calls refused with RESOURCE_EXHAUSTED because the key's quota was spent.",
        ["key_id"],
        registry=registry,
    )


_COUNTERS: dict[int, Counter] = {}


def _counter_for(registry: CollectorRegistry) -> Counter:
    # Several servers of one service in a process (tests) share a registry, which refuses a
    # family registered twice.
    counter = _COUNTERS.get(id(registry))
    if counter is None:
        counter = _COUNTERS[id(registry)] = rate_limited_counter(registry)
    return counter


@dataclass(frozen=True, slots=True)
class _Refusal:
    code: grpc.StatusCode
    message: str
    principal: Principal | None = None
    status: grpc.Status | None = None  # with typed details; None: `code` and `message` alone

    async def abort(self, context: grpc.aio.ServicerContext) -> None:
        if self.principal is not None:
            set_current_principal(self.principal)
        if self.status is not None:
            await abort_with(context, self.status)
        await context.abort(self.code, self.message)


def _refusing(handler: grpc.RpcMethodHandler[Any, Any], refusal: _Refusal) -> Any:
    async def deny(request: Any, context: grpc.aio.ServicerContext) -> Any:
        await refusal.abort(context)

    async def deny_stream(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        await refusal.abort(context)
        yield  # pragma: no cover - makes this an async generator

    return rewrap(handler, lambda _behavior: deny, lambda _behavior: deny_stream)


_CALLER_KEY: ContextVar[str | None] = ContextVar("supermew_caller_key", default=None)


def caller_key() -> str | None:
    """The key the call being served presented (None without auth): the orchestrator forwards
    it to retrieval, so retrieval decides with the caller's own key."""
    return _CALLER_KEY.get()


@dataclass(frozen=True, slots=True)
class _Caller:
    """An authenticated call: who, with which key, calling what, under which table."""

    principal: Principal
    key: str
    method: str
    policies: RpcPolicies

    async def admit(self, request: Any, context: grpc.aio.ServicerContext) -> None:
        """Makes the principal the call's, then refuses the call unless its role allows the
        method (PERMISSION_DENIED naming the permission and the request's knowledge bases)."""
        set_current_principal(self.principal)
        _CALLER_KEY.set(self.key)
        try:
            require_rpc(self.principal, self.policies, self.method, request)
        except PermissionDenied as exc:
            await abort_with(context, error_status(exc, grpc.StatusCode.PERMISSION_DENIED))


def _as(caller: _Caller, behavior: Callable[..., Awaitable[Any]]) -> Callable[..., Any]:
    async def call(request: Any, context: grpc.aio.ServicerContext) -> Any:
        await caller.admit(request, context)
        return await behavior(request, context)

    return call


def _as_stream(caller: _Caller, behavior: Callable[..., Any]) -> Callable[..., Any]:
    async def call(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        await caller.admit(request, context)
        async for item in behavior(request, context):
            yield item

    return call


class AuthInterceptor(grpc.aio.ServerInterceptor):
    """Authentication, quota and role (the module docstring), one decision per call; the
    role is checked against the RPC's row in `policies`."""

    def __init__(
        self,
        ring: KeyRing,
        registry: CollectorRegistry,
        policies: RpcPolicies,
        quotas: Quotas | None = None,
    ):
        self.ring = ring
        self.policies = policies
        self.quotas = quotas or Quotas()
        self._rate_limited = _counter_for(registry)

    def decide(self, method: str, key: str | None) -> Principal | _Refusal:
        """Authentication and quota; the role is checked with the request (`_admitted`)."""
        principal = self.ring.authenticate(key) if key else None
        if principal is None:
            return _Refusal(grpc.StatusCode.UNAUTHENTICATED, "missing or unknown API key")
        wait = self.quotas.wait(principal)
        if wait > 0:
            self._rate_limited.labels(principal.key_id).inc()
            status = quota_spent_status(wait)
            return _Refusal(status.code, status.details, principal, status)
        return principal

    async def intercept_service(
        self, continuation: Continuation, handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        method = handler_call_details.method or ""
        handler = await continuation(handler_call_details)
        if handler is None or method.startswith(OPEN_PREFIXES):
            return handler
        key = bearer_key(handler_call_details.invocation_metadata)
        decision = self.decide(method, key)
        if isinstance(decision, _Refusal):
            return _refusing(handler, decision)
        assert key is not None  # a principal comes only from a key
        caller = _Caller(decision, key, method, self.policies)
        return rewrap(
            handler,
            lambda behavior: _as(caller, behavior),
            lambda behavior: _as_stream(caller, behavior),
        )
