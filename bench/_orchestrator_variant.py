"""The orchestrator as shipped but for the parts one row of bench/orchestrator_throughput.py
varies, kept for that bench only: `python -m bench._orchestrator_variant CLIENT LOOP HEAP`
serves one process with

- CLIENT `aiohttp`: the model client on aiohttp directly (`AiohttpClient` below: shared.http
  as it was before it moved onto httpx's API over httpx-aiohttp's transport), or `shared`:
  shared.http as shipped;
- LOOP `uvloop` (as shipped) or `asyncio` (asyncio's default loop);
- HEAP `settled` (as shipped: shared.heap.settle_heap once serving) or `as-is` (CPython's
  garbage-collector defaults).

Production code has no switch for any of these; the settings come from the environment as
for the real service."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable, Mapping
from typing import Any

import aiohttp
import uvloop
from aiohttp.helpers import get_env_proxy_for_url
from yarl import URL

from orchestrator_service.bootstrap import build_app
from orchestrator_service.models.base import ModelClient
from orchestrator_service.models.remote import RemoteModelClient
from orchestrator_service.settings import OrchestratorSettings
from shared.heap import settle_heap
from shared.http import (
    HttpConnectionError,
    HttpConnectTimeout,
    HttpTimeout,
    HttpTransportError,
    Reply,
)
from shared.serve import serve
from shared.startup import run_service

# ---- the model client on aiohttp directly (shared.http before httpx) ------------------------


def _translate(exc: BaseException) -> HttpTransportError:
    # ConnectionTimeoutError and SocketTimeoutError are also TimeoutErrors: order matters.
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return HttpConnectTimeout("connect timeout")
    if isinstance(exc, TimeoutError):
        return HttpTimeout("timed out waiting for the reply")
    return HttpConnectionError("the connection failed")


class AiohttpClient:
    """shared.http's HttpClient as it was, on an aiohttp session of its own: pool, timeouts,
    failures, environment proxies looked up once per URL. Only what a Run uses (`post_json`;
    streamed answers are not part of this bench)."""

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

    async def post_json(self, url: str, body: Any, *, timeout: float | None, headers: Any) -> Reply:
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

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


# ---- the variant service ----------------------------------------------------------------------


def _model(settings: OrchestratorSettings, client: str) -> ModelClient | None:
    if client == "shared":
        return None  # the configured one, as shipped
    assert settings.llm_base_url
    return RemoteModelClient(
        base_url=settings.llm_base_url,
        api_key=settings.llm_api_key,
        model=settings.model or "",
        timeout=settings.llm_timeout_seconds,
        http=AiohttpClient(max_connections=256),  # type: ignore[arg-type]
    )


def main(argv: list[str]) -> int:
    client, loop, heap = argv
    assert client in ("aiohttp", "shared") and loop in ("uvloop", "asyncio")
    assert heap in ("settled", "as-is")
    factory: Callable[[], asyncio.AbstractEventLoop] | None = (
        uvloop.new_event_loop if loop == "uvloop" else None
    )

    async def serve_variant(settings: OrchestratorSettings, on_started: Callable[[], None]) -> None:
        app = build_app(settings, model=_model(settings, client))

        def started() -> None:
            if heap == "settled":
                settle_heap()
            on_started()

        await serve(app.server, on_stop=app.aclose, on_started=started)

    return run_service("orchestrator (bench variant)", OrchestratorSettings, serve_variant,
                       loop_factory=factory)  # fmt: skip


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
