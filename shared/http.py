"""The one HTTP client of the project's outbound JSON calls (model, rerank and embeddings
endpoints): the pooled client, timeouts, transport failures translated into library-neutral
exceptions, and the retry rule for statuses worth another attempt. The API is httpx's
(`httpx.AsyncClient` and its transports); its connections are aiohttp's, through httpx-aiohttp's
transport, since httpx's own pool polls every pooled socket on each request, which made the
orchestrator's CPU per Run ×1.7 on its two-model-call path. A request goes to the client's
transport directly, past the client's layers, unless the reply redirects. Swapping either
library touches this module only."""

from __future__ import annotations

import json
import logging
import random
from collections.abc import AsyncIterator, Callable, ItemsView, Mapping
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from typing import Any

import aiohttp
import httpx
from httpx_aiohttp import AiohttpTransport


class HttpTransportError(Exception):
    """No usable reply: the request failed below HTTP. The message names the kind of failure
    only (never the URL, the host or a library's wording), so callers may record it."""


class HttpConnectTimeout(HttpTransportError):
    """The connection was not established within the timeout."""


class HttpTimeout(HttpTransportError):
    """Connected, but no reply (or no next piece of a streamed reply) within the timeout."""


class HttpConnectionError(HttpTransportError):
    """The connection was refused, reset or cut (a body ended early included)."""


# httpx logs each request at INFO ("HTTP Request: POST <url> …"); the callers record their
# calls (spans, their own warnings), so its lines show from WARNING up, as before httpx.
logging.getLogger("httpx").setLevel(logging.WARNING)

# What a request can fail with below HTTP: httpx's errors (a bad URL included), and aiohttp's
# or a timeout where httpx-aiohttp passes them through unmapped.
_FAILURES = (httpx.RequestError, httpx.InvalidURL, aiohttp.ClientError, TimeoutError)


def _translate(exc: BaseException) -> HttpTransportError:
    # httpx-aiohttp maps aiohttp's errors onto httpx's coarsely (a refused connection comes out
    # as httpx.ConnectTimeout), so the aiohttp error it wraps decides when there is one.
    if isinstance(exc.__cause__, aiohttp.ClientError | TimeoutError):
        exc = exc.__cause__
    # aiohttp's ConnectionTimeoutError and SocketTimeoutError are also TimeoutErrors: order
    # matters.
    if isinstance(exc, aiohttp.ConnectionTimeoutError | httpx.ConnectTimeout):
        return HttpConnectTimeout("connect timeout")
    if isinstance(exc, TimeoutError | httpx.TimeoutException):
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

    def __init__(self, response: httpx.Response) -> None:
        self._response = response
        self.status = response.status_code
        self.headers: Mapping[str, str] = response.headers

    async def read(self) -> Reply:
        try:
            body = await self._response.aread()
        except _FAILURES as exc:
            raise _translate(exc) from exc
        return Reply(self.status, self.headers, body)

    async def lines(self) -> AsyncIterator[str]:
        """The body's lines without their line ends; each wait is bounded by the timeout.
        Lines end at LF only (httpx's `aiter_lines` also splits on other Unicode line
        boundaries, which a JSON string in an event may hold)."""
        chunks = self._response.aiter_bytes()
        pending = b""
        while True:
            try:
                chunk = await anext(chunks)
            except StopAsyncIteration:
                break
            except _FAILURES as exc:
                raise _translate(exc) from exc
            *complete, pending = (pending + chunk).split(b"\n")
            for raw in complete:
                yield _line(raw)
        if pending:
            yield _line(pending)


def _line(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace").rstrip("\r")


_READ = httpx.ByteStream(b"")


def _unlink(response: httpx.Response) -> None:
    """Drops a read or closed reply's link to its stream, which links back to the reply: left
    in place, that cycle keeps the reply and its aiohttp objects (~40 per request) alive until
    the garbage collector finds them, instead of freeing them at once."""
    response.stream = _READ


async def _read(response: httpx.Response) -> bytes:
    """The whole body, decoded as `aread` would (Content-Encoding), then the reply closed. The
    transport's stream is read in one loop: `aread`'s chain of async generators (decoding,
    chunking, raw reading) costs a reply ≈ 20 µs more, for a body that is rarely encoded."""
    stream = response.stream
    assert isinstance(stream, httpx.AsyncByteStream)
    try:
        body = b"".join([chunk async for chunk in stream])
    finally:
        await response.aclose()
    if "content-encoding" in response.headers:
        # httpx decodes a reply built from bytes as it builds it.
        body = httpx.Response(response.status_code, headers=response.headers, content=body).content
    return body


class _Cookies(httpx.Cookies):
    """httpx's cookie store, skipping the replies that set no cookie: httpx hands every reply
    to urllib's cookie machinery, ~15 % of a request's CPU on loopback."""

    def extract_cookies(self, response: httpx.Response) -> None:
        if "set-cookie" in response.headers or "set-cookie2" in response.headers:
            super().extract_cookies(response)


class _NamesAsGiven(httpx.Headers):
    """Request headers whose names reach the wire as written (`Authorization`): httpx-aiohttp
    hands aiohttp `items()`, whose names httpx lower-cases."""

    def items(self) -> ItemsView[str, str]:
        values: dict[str, str] = {}
        spelled: dict[str, str] = {}  # lower-case name → its first spelling
        encoding = self.encoding  # a property: looked up once, not twice per header
        for raw_name, raw_value in self.raw:
            name, value = raw_name.decode(encoding), raw_value.decode(encoding)
            first = spelled.setdefault(name.lower(), name)
            values[first] = f"{values[first]}, {value}" if first in values else value
        return values.items()


async def _names_as_given(request: httpx.Request) -> None:
    request.headers = _NamesAsGiven(request.headers)


class _AiohttpClient(httpx.AsyncClient):
    """httpx's client whose transports, direct and through each proxy the environment names,
    are httpx-aiohttp's over one aiohttp session (`session`: called on a transport's first
    request, inside the event loop that uses it, since aiohttp binds a session to its loop)."""

    def __init__(self, session: Callable[[], aiohttp.ClientSession], **kwargs: Any) -> None:
        self._session = session
        super().__init__(**kwargs)
        self._cookies = _Cookies()

    def _init_transport(self, *args: Any, **kwargs: Any) -> httpx.AsyncBaseTransport:
        return AiohttpTransport(client=self._session)

    def _init_proxy_transport(
        self, proxy: httpx.Proxy, *args: Any, **kwargs: Any
    ) -> httpx.AsyncBaseTransport:
        return AiohttpTransport(proxy=proxy, client=self._session)

    def transport_for(self, url: httpx.URL) -> httpx.AsyncBaseTransport:
        """The transport the client sends a request for `url` through: direct, or the proxy
        the environment names for it."""
        return self._transport_for_url(url)


@dataclass(frozen=True, slots=True)
class _Route:
    """A URL parsed once (httpx parses a string on every request) with the transport its
    requests go through."""

    url: httpx.URL
    transport: httpx.AsyncBaseTransport


# Statuses whose Location the client follows; see HttpClient._send.
_REDIRECTS = frozenset({301, 302, 303, 307, 308})


class HttpClient:
    """A pool of keep-alive connections (`max_connections` at most) for JSON POSTs. The
    client is opened on first use, inside the event loop that uses it (aiohttp binds its
    session to its loop), so the owner may be built anywhere; each worker process has its own.
    HTTP(S)_PROXY / NO_PROXY from the environment apply, read when the client opens.

    `timeout` bounds connecting and each wait for data separately, not the whole exchange (the
    caller's deadline does that), like the per-phase timeouts of the client it replaced.

    A request is built here and handed to the client's transport for its URL: of the client's
    layers it needs only the cookie store, which it uses as the client does (no auth is
    configured, no hook but the header names'). Through the client, its send, auth, redirect,
    hook and timer layers, its request building and its reading chain took ≈ 80 µs of CPU per
    loopback request, 30 % of the whole; a reply that redirects is followed by the client."""

    def __init__(
        self, *, headers: Mapping[str, str] | None = None, max_connections: int = 256
    ) -> None:
        self._headers = {"Content-Type": "application/json", **(headers or {})}
        self._max_connections = max_connections
        self._client: _AiohttpClient | None = None
        self._session: aiohttp.ClientSession | None = None
        self._routes: dict[str, _Route] = {}
        # The client's headers by lower-case name, each as written: what a request starts from.
        self._defaults: dict[str, tuple[str, str]] = {}

    def _aiohttp_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._max_connections, limit_per_host=0),
                cookie_jar=aiohttp.DummyCookieJar(),  # httpx's client keeps the cookies
            )
        return self._session

    def _open(self) -> _AiohttpClient:
        if self._client is None:
            self._client = _AiohttpClient(
                self._aiohttp_session,
                headers=self._headers,
                event_hooks={"request": [_names_as_given]},
                timeout=None,
                # aiohttp's rule, which the callers were written against.
                follow_redirects=True,
                max_redirects=10,
            )
            # aiohttp adds these as it did before httpx (Accept, its User-Agent; keep-alive is
            # HTTP/1.1's default): fewer headers for httpx to carry per request. Accept-Encoding
            # stays httpx's, since httpx decodes the body.
            for name in ("Accept", "Connection", "User-Agent"):
                del self._client.headers[name]
            encoding = self._client.headers.encoding
            self._defaults = {
                name.decode(encoding).lower(): (name.decode(encoding), value.decode(encoding))
                for name, value in self._client.headers.raw
            }
        return self._client

    def _route(self, url: str) -> _Route:
        route = self._routes.get(url)
        if route is None:
            parsed = httpx.URL(url)
            route = self._routes[url] = _Route(parsed, self._open().transport_for(parsed))
        return route

    @staticmethod
    def _timeout(seconds: float | None) -> dict[str, float | None]:
        # httpx's timeout extension (`httpx.Timeout(seconds, pool=None).as_dict()`): no bound
        # on waiting for a free connection of the pool, as before.
        return {"connect": seconds, "read": seconds, "write": seconds, "pool": None}

    @staticmethod
    def _encode(body: Any) -> bytes:
        return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()

    def _request(
        self,
        client: httpx.AsyncClient,
        route: _Route,
        content: bytes,
        timeout: float | None,
        headers: Mapping[str, str] | None,
    ) -> httpx.Request:
        """The request `client.build_request` would build, with its header names as written:
        Host, the client's headers, those of `headers` replacing any of the same name,
        Content-Length, then the cookies stored for the URL."""
        names = {"host": ("Host", route.url.netloc.decode("ascii")), **self._defaults}
        if headers:
            for name, value in headers.items():
                names[name.lower()] = (name, value)
        names.setdefault("content-length", ("Content-Length", str(len(content))))
        # With `stream` (not `content`) httpx adds no headers of its own: they are all above.
        request = httpx.Request(
            "POST",
            route.url,
            stream=httpx.ByteStream(content),
            extensions={"timeout": self._timeout(timeout)},
        )
        request.read()  # the transport sends `content`, known once read
        request.headers = _NamesAsGiven(list(names.values()))
        if client.cookies:
            client.cookies.set_cookie_header(request)
        return request

    async def _send(
        self, url: str, content: bytes, timeout: float | None, headers: Mapping[str, str] | None
    ) -> httpx.Response:
        """The reply to POSTing `content`, its body not read yet. A redirect is sent again
        through the client, which follows it as httpx does (method, headers and cookies per
        hop): one more round trip, for a reply a model endpoint does not give."""
        client = self._open()
        route = self._route(url)
        request = self._request(client, route, content, timeout, headers)
        response = await route.transport.handle_async_request(request)
        client.cookies.extract_cookies(response)
        if response.status_code not in _REDIRECTS or not response.has_redirect_location:
            return response
        await response.aclose()
        request = client.build_request(
            "POST",
            route.url,
            content=content,
            headers=headers,
            extensions={"timeout": self._timeout(timeout)},
        )
        return await client.send(request, stream=True)

    async def post_json(
        self,
        url: str,
        body: Any,
        *,
        timeout: float | None,
        headers: Mapping[str, str] | None = None,
    ) -> Reply:
        """POST `body` as JSON and read the whole reply, whatever its status."""
        try:
            response = await self._send(url, self._encode(body), timeout, headers)
            content = await _read(response)
        except _FAILURES as exc:
            raise _translate(exc) from exc
        _unlink(response)
        return Reply(response.status_code, response.headers, content)

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
        try:
            response = await self._send(url, self._encode(body), timeout, headers)
        except _FAILURES as exc:
            raise _translate(exc) from exc
        try:
            yield StreamReply(response)
        finally:
            with suppress(*_FAILURES):  # the connection is dropped, not reused
                await response.aclose()
            _unlink(response)

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()  # its transports close the session
            self._client = None
        self._session = None
        self._routes.clear()  # their transports were the closed client's


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
