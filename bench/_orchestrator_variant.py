"""The orchestrator as it was before the aiohttp client and settled heap, kept for
bench/orchestrator_throughput.py only: `python -m bench._orchestrator_variant CLIENT LOOP` serves
one process with the model client on httpx (CLIENT=httpx: the replaced transport, its request path
as before minus retries, which the bench's model never needs) or on shared.http (CLIENT=aiohttp),
under asyncio's default loop or uvloop (LOOP), and without the shipped service's garbage-collector
settings (shared.heap.settle_heap). Production code has no switch for any of these; the settings
come from the environment as for the real service."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from typing import Any

import httpx
import uvloop

from orchestrator_service.bootstrap import build_app
from orchestrator_service.models import build_model_client
from orchestrator_service.models.base import ModelClient
from orchestrator_service.models.remote import DEPENDENCY, RemoteModelClient
from orchestrator_service.settings import OrchestratorSettings
from shared.errors import DeadlineExceeded, DependencyUnavailable
from shared.http import Reply
from shared.serve import serve
from shared.startup import run_service


class HttpxModelClient(RemoteModelClient):
    """RemoteModelClient whose structured-output calls go through httpx.AsyncClient as before
    (pool of 256, 64 kept alive). Only what the throughput bench exercises: one attempt per
    call and the 2xx path; failures map as before, without retries."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._httpx = httpx.AsyncClient(
            limits=httpx.Limits(max_connections=256, max_keepalive_connections=64)
        )

    async def _post(self, task: str, body: dict[str, Any], timeout: float | None) -> str:
        seconds = self._timeout if timeout is None else min(timeout, self._timeout)
        try:
            response = await self._httpx.post(
                self._url, json=body, headers=self._headers, timeout=seconds
            )
        except httpx.TimeoutException as exc:
            raise DeadlineExceeded(f"model task {task}: no reply") from exc
        except httpx.TransportError as exc:
            raise DependencyUnavailable(DEPENDENCY, f"task {task}: the connection failed") from exc
        if response.status_code >= 400:
            raise self._http_error(task, Reply(response.status_code, response.headers, b""))
        try:
            content = response.json()["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError):
            return ""
        return content if isinstance(content, str) else json.dumps(content)

    async def aclose(self) -> None:
        await self._httpx.aclose()
        await super().aclose()


def _model(settings: OrchestratorSettings, client: str) -> ModelClient:
    if client == "aiohttp":
        return build_model_client(settings)
    assert settings.llm_base_url
    return HttpxModelClient(
        base_url=settings.llm_base_url,
        api_key=settings.llm_api_key,
        model=settings.model or "",
        timeout=settings.llm_timeout_seconds,
    )


def main(argv: list[str]) -> int:
    client, loop = argv
    factory: Callable[[], asyncio.AbstractEventLoop] | None = (
        uvloop.new_event_loop if loop == "uvloop" else None
    )

    async def serve_variant(settings: OrchestratorSettings, on_started: Callable[[], None]) -> None:
        app = build_app(settings, model=_model(settings, client))
        await serve(app.server, on_stop=app.aclose, on_started=on_started)

    return run_service("orchestrator (bench variant)", OrchestratorSettings, serve_variant,
                       loop_factory=factory)  # fmt: skip


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
