"""shared.http: transport failures come out library-neutral and name no address; the retry rule
(statuses, attempts, Retry-After, the caller's deadline); proxies from the environment; what
reaches the wire (header names, cookies, redirects, encoded replies, credentials in the URL)."""

from __future__ import annotations

import asyncio
import base64
import gzip
import json
import socket

import pytest
from multidict import CIMultiDict

from shared.http import (
    HttpClient,
    HttpConnectionError,
    HttpTimeout,
    Reply,
    RetryPolicy,
)
from tests.fakes.model_server import FakeModelServer, ModelScript, grade

BODY = {"messages": [{"role": "user", "content": "<question>\nq\n</question>"}]}


def _reply(status: int, **headers: str) -> Reply:
    return Reply(status, CIMultiDict(headers), b"")


@pytest.mark.integration  # a loopback HTTP server
async def test_a_refused_connection_names_no_address() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    client = HttpClient()
    try:
        with pytest.raises(HttpConnectionError) as err:
            await client.post_json(f"http://127.0.0.1:{port}/v1/x", BODY, timeout=5)
    finally:
        await client.aclose()
    assert str(port) not in str(err.value) and "127.0.0.1" not in str(err.value)


@pytest.mark.integration  # a loopback HTTP server
async def test_a_reply_slower_than_the_timeout_is_http_timeout_and_a_fast_one_reads() -> None:
    script = ModelScript()
    script.fallback = lambda task, q: grade("strong", "sufficient", "answer")
    async with FakeModelServer(script, delay=0.5) as server:
        client = HttpClient()
        try:
            with pytest.raises(HttpTimeout):
                await client.post_json(server.base_url + "/chat/completions", BODY, timeout=0.1)
            reply = await client.post_json(
                server.base_url + "/chat/completions", BODY, timeout=5, headers={"X-A": "b"}
            )
        finally:
            await client.aclose()
    assert reply.status == 200 and reply.json()["choices"][0]["message"]["content"]
    assert server.requests[-1].body == BODY


def test_retry_rule() -> None:
    policy = RetryPolicy(frozenset({429, 503}), max_attempts=3, backoff_seconds=0.1)
    assert policy.delay(_reply(400), 1, None) is None  # not a retryable status
    assert policy.delay(_reply(503), 3, None) is None  # attempts used up
    assert 0 <= (policy.delay(_reply(503), 2, None) or 0) <= 0.2  # full jitter, 0.1 × 2
    assert policy.delay(_reply(429, **{"Retry-After": "1.5"}), 1, None) == 1.5
    assert policy.delay(_reply(429, **{"Retry-After": "60"}), 1, None) == 5.0  # capped
    assert policy.delay(_reply(429, **{"Retry-After": "1.5"}), 1, 1.0) is None  # deadline
    # A wait must leave the attempt some of the deadline: 5 s capped wait, 5.004 s left (the
    # server's view of a caller's 5 s, rounded up by gRPC) is no retry.
    assert policy.delay(_reply(429, **{"Retry-After": "30"}), 1, 5.004) is None
    assert policy.delay(_reply(429, **{"Retry-After": "1.5"}), 1, 1.7) is None
    assert policy.delay(_reply(429, **{"Retry-After": "1.5"}), 1, 1.8) == 1.5
    uncapped = RetryPolicy(frozenset({429}), max_attempts=2, retry_after_cap=None)
    assert uncapped.delay(_reply(429, **{"Retry-After": "60"}), 1, None) == 60.0


@pytest.mark.integration  # a loopback HTTP server
async def test_proxies_come_from_the_environment(monkeypatch) -> None:
    # The environment is the input under test (no component is replaced): a proxy on
    # 127.0.0.1 records what reaches it, and NO_PROXY sends 127.0.0.1 past it.
    seen: list[bytes] = []

    async def proxy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        seen.append(head)
        if head.startswith(b"CONNECT "):
            writer.write(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
        else:
            await reader.readexactly(int(head.lower().split(b"content-length: ")[1].split()[0]))
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(proxy, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    for name in ("http_proxy", "https_proxy", "all_proxy", "no_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", f"http://user:pw@127.0.0.1:{port}")
    monkeypatch.setenv("HTTPS_PROXY", f"http://user:pw@127.0.0.1:{port}")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    script = ModelScript()
    script.fallback = lambda task, q: grade("strong", "sufficient", "answer")
    auth = b"proxy-authorization: basic " + base64.b64encode(b"user:pw").lower()
    client = HttpClient()
    try:
        reply = await client.post_json("http://api.example.com/v1/x", BODY, timeout=5)
        assert reply.status == 200 and reply.json() == {}
        assert seen[0].startswith(b"POST http://api.example.com/v1/x HTTP/1.1\r\n")
        assert auth in seen[0].lower()
        with pytest.raises(HttpConnectionError):  # the proxy refuses the tunnel
            await client.post_json("https://api.example.com/v1/x", BODY, timeout=5)
        assert seen[1].startswith(b"CONNECT api.example.com:443 HTTP/1.1\r\n")
        assert auth in seen[1].lower()
        async with FakeModelServer(script) as direct:  # on 127.0.0.1: NO_PROXY
            reply = await client.post_json(direct.base_url + "/chat/completions", BODY, timeout=5)
        assert reply.status == 200 and direct.requests[-1].body == BODY and len(seen) == 2
    finally:
        await client.aclose()
        server.close()
        await server.wait_closed()


class _Recorder:
    """A loopback HTTP/1.1 server (keep-alive) that records each request's head as it came
    over the wire and its body, and answers by path: `/set-cookie` sets a cookie, `/moved`
    redirects (307) to `/target`, `/gzip` sends a gzip-encoded body, any other path `{}`."""

    def __init__(self) -> None:
        self.requests: list[tuple[bytes, bytes]] = []
        self.port = 0

    async def __aenter__(self) -> _Recorder:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._server.close()
        await self._server.wait_closed()

    def url(self, path: str, userinfo: str = "") -> str:
        return f"http://{userinfo}127.0.0.1:{self.port}{path}"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                self.requests.append((head, await reader.readexactly(length)))
                path = head.split(b" ")[1]
                extra, body = b"", b'{"path":"%s"}' % path
                if path == b"/set-cookie":
                    extra = b"Set-Cookie: session=s1; Path=/\r\n"
                elif path == b"/moved":
                    extra = b"Location: /target\r\n"
                elif path == b"/gzip":
                    extra, body = b"Content-Encoding: gzip\r\n", gzip.compress(body)
                status = b"307 Temporary Redirect" if path == b"/moved" else b"200 OK"
                writer.write(
                    b"HTTP/1.1 %s\r\n%sContent-Length: %d\r\n\r\n%s"
                    % (status, extra, len(body), body)
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@pytest.mark.integration  # a loopback HTTP server
async def test_what_reaches_the_wire(monkeypatch) -> None:
    # Header names as written, the client's cookies kept and sent back, a redirect followed
    # with its method and body, an encoded reply decoded: what httpx's client layers did before
    # requests went to its transport directly. Credentials in the URL are sent as basic auth.
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    client = HttpClient(headers={"X-Api-Version": "2"})
    try:
        async with _Recorder() as server:
            reply = await client.post_json(
                server.url("/plain"), BODY, timeout=5, headers={"Authorization": "Bearer k"}
            )
            assert reply.status == 200 and reply.json() == {"path": "/plain"}
            head, body = server.requests[-1]
            assert head.startswith(b"POST /plain HTTP/1.1\r\n") and json.loads(body) == BODY
            for line in (b"Authorization: Bearer k", b"Content-Type: application/json",
                         b"X-Api-Version: 2", b"Content-Length: %d" % len(body),
                         b"Host: 127.0.0.1:%d" % server.port):  # fmt: skip
                assert b"\r\n" + line + b"\r\n" in head, line
            assert b"cookie" not in head.lower()

            await client.post_json(server.url("/set-cookie"), BODY, timeout=5)
            await client.post_json(server.url("/plain"), BODY, timeout=5)
            assert b"\r\nCookie: session=s1\r\n" in server.requests[-1][0]

            reply = await client.post_json(server.url("/moved"), BODY, timeout=5)
            assert reply.status == 200 and reply.json() == {"path": "/target"}
            head, body = server.requests[-1]
            assert head.startswith(b"POST /target HTTP/1.1\r\n") and json.loads(body) == BODY

            reply = await client.post_json(server.url("/gzip"), BODY, timeout=5)
            assert reply.status == 200 and reply.json() == {"path": "/gzip"}

            reply = await client.post_json(server.url("/plain", "user:pw@"), BODY, timeout=5)
            basic = base64.b64encode(b"user:pw")
            assert reply.status == 200
            assert b"\r\nAuthorization: Basic " + basic + b"\r\n" in server.requests[-1][0]

            async with client.stream_json(
                server.url("/plain"), BODY, timeout=5, headers={"Authorization": "Bearer k"}
            ) as stream:
                assert stream.status == 200
                assert [line async for line in stream.lines()] == ['{"path":"/plain"}']
            assert b"\r\nAuthorization: Bearer k\r\n" in server.requests[-1][0]
    finally:
        await client.aclose()
