"""The one HTTP client of the project's outbound JSON calls (model, rerank and embeddings
endpoints): the pooled session, timeouts, transport failures translated into library-neutral
exceptions, and the retry rule for statuses worth another attempt. It is built on aiohttp, which
measured the least CPU per request under concurrency (ENVIRONMENT.md §6: ×0.44 on the
orchestrator's two-model-call path against httpx, whose pool polls every socket per request);
swapping the library touches this module only."""

from __future__ import annotations

import json
import random
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp.helpers import get_env_proxy_for_url
from yarl import URL


class HttpTransportError(Exception):
    """No usable reply: the request failed below HTTP. The message names the kind of failure
    only (never the URL, the host or a library's wording), so callers may record it."""


class HttpConnectTimeout(HttpTransportError):
    """The connection was not established within the timeout."""


class HttpTimeout(HttpTransportError):
    """Connected, but no reply (or no next piece of a streamed reply) within the timeout."""


class HttpConnectionError(HttpTransportError):
    """The connection was refused, reset or cut (a body ended early included)."""


def _translate(exc: BaseException) -> HttpTransportError:
    # ConnectionTimeoutError and SocketTimeoutError are also TimeoutErrors: order matters.
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return HttpConnectTimeout("connect timeout")
    if isinstance(exc, TimeoutError):
        return HttpTimeout("timed out waiting for the reply")
    return HttpConnectionError("the connection failed")


@dataclass(frozen=True, slots=True)
class Reply:
    """A complete HTTP reply. `headers` are case-insensitive."""

    status: int
    headers: Mapping[str, str]
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")

    def json(self) -> Any:
        """The body parsed as JSON; ValueError when it is not JSON."""
        return json.loads(self.body)


class StreamReply:
    """A reply whose body is read as it arrives (server-sent events)."""

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response
        self.status = response.status
        self.headers: Mapping[str, str] = response.headers

    async def read(self) -> Reply:
        try:
            body = await self._response.read()
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise _translate(exc) from exc
        return Reply(self.status, self.headers, body)

    async def lines(self) -> AsyncIterator[str]:
        """The body's lines without their line ends; each wait is bounded by the timeout."""
        content = self._response.content
        while True:
            try:
                raw = await content.readline()
            except (aiohttp.ClientError, TimeoutError) as exc:
                raise _translate(exc) from exc
            if not raw:
                return
            yield raw.decode("utf-8", errors="replace").rstrip("\r\n")


class HttpClient:
    """A pool of keep-alive connections (`max_connections` at most) for JSON POSTs. The
    session is opened on first use, inside the event loop that uses it (aiohttp binds a session
    to its loop), so the owner may be built anywhere; each worker process has its own.

    `timeout` bounds connecting and each wait for data separately, not the whole exchange (the
    caller's deadline does that), like the per-phase timeouts of the client it replaced."""

    def __init__(
        self, *, headers: Mapping[str, str] | None = None, max_connections: int = 256
    ) -> None:
        self._headers = {"Content-Type": "application/json", **(headers or {})}
        self._max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None
        self._proxies: dict[str, tuple[URL | None, aiohttp.BasicAuth | None]] = {}

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._max_connections, limit_per_host=0),
                headers=self._headers,
            )
        return self._session

    def _proxy(self, url: str) -> tuple[URL | None, aiohttp.BasicAuth | None]:
        """HTTP(S)_PROXY / NO_PROXY for `url`, like the client this replaced, looked up once
        per URL: aiohttp's own `trust_env` redoes it (and reads ~/.netrc) on every request,
        which doubled its CPU per request."""
        found = self._proxies.get(url)
        if found is None:
            try:
                found = get_env_proxy_for_url(URL(url))
            except LookupError:
                found = (None, None)
            self._proxies[url] = found
        return found

    @staticmethod
    def _timeout(seconds: float | None) -> aiohttp.ClientTimeout:
        return aiohttp.ClientTimeout(total=None, sock_connect=seconds, sock_read=seconds)

    @staticmethod
    def _encode(body: Any) -> bytes:
        return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()

    async def post_json(
        self,
        url: str,
        body: Any,
        *,
        timeout: float | None,
        headers: Mapping[str, str] | None = None,
    ) -> Reply:
        """POST `body` as JSON and read the whole reply, whatever its status."""
        proxy, proxy_auth = self._proxy(url)
        try:
            async with self._open().post(
                url,
                data=self._encode(body),
                headers=headers,
                timeout=self._timeout(timeout),
                proxy=proxy,
                proxy_auth=proxy_auth,
            ) as response:
                return Reply(response.status, response.headers, await response.read())
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise _translate(exc) from exc

    @asynccontextmanager
    async def stream_json(
        self,
        url: str,
        body: Any,
        *,
        timeout: float | None,
        headers: Mapping[str, str] | None = None,
    ) -> AsyncIterator[StreamReply]:
        """POST `body` as JSON; the reply is open (status and headers read) inside the block."""
        proxy, proxy_auth = self._proxy(url)
        try:
            response = await self._open().post(
                url,
                data=self._encode(body),
                headers=headers,
                timeout=self._timeout(timeout),
                proxy=proxy,
                proxy_auth=proxy_auth,
            )
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise _translate(exc) from exc
        try:
            yield StreamReply(response)
        finally:
            response.release()

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


# ---- retries --------------------------------------------------------------------------------


def retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    """A `Retry-After` given in seconds; None when absent or an HTTP date."""
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Which failed replies get another attempt, and after how long: full-jitter exponential
    backoff so many callers retrying together do not hit the endpoint in lockstep, or the
    server's Retry-After (capped at `retry_after_cap` when set) when it gives one. A retry is
    worth its wait only when the caller's deadline still leaves `min_attempt_seconds` for the
    attempt itself: a wait that ends at the deadline only turns the endpoint's answer into the
    caller's DEADLINE_EXCEEDED (and a server may see a few ms more of the deadline than the
    caller set, since gRPC rounds the timeout it sends up)."""

    statuses: frozenset[int]
    max_attempts: int
    backoff_seconds: float = 0.2
    max_backoff_seconds: float = 5.0
    retry_after_cap: float | None = 5.0
    min_attempt_seconds: float = 0.25

    def backoff(self, attempt: int, retry_after: float | None) -> float:
        """The wait after failed attempt number `attempt` (1-based)."""
        if retry_after is not None:
            cap = self.retry_after_cap
            return retry_after if cap is None else min(retry_after, cap)
        ceiling = min(self.max_backoff_seconds, self.backoff_seconds * 2 ** (attempt - 1))
        return random.uniform(0, ceiling)

    def delay(self, reply: Reply | StreamReply, attempt: int, left: float | None) -> float | None:
        """Seconds to wait before the next attempt, or None when there must be none: a status
        not worth retrying, the attempts used up, or a wait that the `left` seconds of the
        caller's deadline cannot fit together with an attempt (None = no deadline)."""
        if reply.status not in self.statuses or attempt >= self.max_attempts:
            return None
        wait = self.backoff(attempt, retry_after_seconds(reply.headers))
        return None if left is not None and wait + self.min_attempt_seconds > left else wait
