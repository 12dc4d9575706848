"""Rerank over HTTP (docs/api.md#rerank): the Jina/Cohere-style
`POST {host}/v1/rerank` with a Bearer key; its failures are recorded, never raised, and fall
back to the score sort. A recorded error reaches every caller's trace (`rerank_error`), so it
passes through `shared.redact` first: a provider that quotes the rejected key back must not
leak RERANK_API_KEY."""

from __future__ import annotations

import json

from retrieval_service.core.ports import Doc, RerankOutcome
from retrieval_service.core.recall import sort_by_effective_score
from retrieval_service.metrics import record_rerank
from shared.http import HttpClient, HttpTimeout, HttpTransportError
from shared.redact import Redactor
from shared.tracing import http_span, inject_headers

_PLACEHOLDER_PREFIXES = ("your_", "your-", "replace-with")
_PLACEHOLDER_PARTS = ("your-rerank", "your_rerank")


def configured(value: str | None) -> str | None:
    """The value, or None when it is empty or an example placeholder."""
    if value is None or not value.strip():
        return None
    lowered = value.strip().lower()
    if lowered.startswith(_PLACEHOLDER_PREFIXES) or any(p in lowered for p in _PLACEHOLDER_PARTS):
        return None
    return value.strip()


def endpoint_for(host: str | None) -> str:
    if not host:
        return ""
    base = host.rstrip("/")
    return base if base.endswith("/v1/rerank") else base + "/v1/rerank"


class Reranker:
    """The `Reranker` port over HTTP. Holds the settings after the placeholder filter and one
    pooled HTTP client."""

    def __init__(
        self,
        host: str | None,
        model: str | None,
        api_key: str | None,
        timeout_seconds: float = 5.0,
        client: HttpClient | None = None,
    ) -> None:
        self.host = configured(host)
        self.model = configured(model)
        self._api_key = configured(api_key)
        self.enabled = bool(self.host and self.model and self._api_key)
        self.endpoint = endpoint_for(self.host)
        self.timeout_seconds = max(0.1, float(timeout_seconds))
        self._client = client or HttpClient()
        # The raw setting too: a placeholder-looking key is still a key to scrub.
        self._redact = Redactor(self._api_key, api_key)

    async def rerank(self, query: str, docs: list[Doc], top_k: int) -> RerankOutcome:
        """Rerank `docs` (already carrying rrf_rank) and cut to top_k. Recorded errors: HTTP
        status, transport/timeout, bad JSON or items, no valid results. Anything else is a bug
        and escapes."""
        if not self.enabled or not docs:
            record_rerank("off")
            return RerankOutcome(sort_by_effective_score(docs)[:top_k], False, None)
        try:
            with http_span("rerank", documents=len(docs)) as traced:
                response = await self._client.post_json(
                    self.endpoint,
                    {
                        "model": self.model,
                        "query": query,
                        "documents": [str(d.get("text", "")) for d in docs],
                        "top_n": min(top_k, len(docs)),
                        "return_documents": False,
                    },
                    headers=inject_headers({"Authorization": f"Bearer {self._api_key}"}),
                    timeout=self.timeout_seconds,
                )
                traced.set_attribute("http.response.status_code", response.status)
            if response.status >= 400:
                record_rerank("http_error")
                error = self._redact(f"HTTP {response.status}: {response.text}")
                return RerankOutcome(sort_by_effective_score(docs)[:top_k], True, error)
            kept: list[Doc] = []
            for item in response.json()["results"]:
                index = item["index"]
                if not isinstance(index, int) or isinstance(index, bool):
                    continue
                if not 0 <= index < len(docs):
                    continue
                doc = dict(docs[index])
                if item.get("relevance_score") is not None:
                    doc["rerank_score"] = float(item["relevance_score"])
                kept.append(doc)
        except (HttpTransportError, json.JSONDecodeError, KeyError, ValueError, TypeError) as exc:
            error = self._redact(str(exc) or type(exc).__name__)
            record_rerank("timeout" if isinstance(exc, HttpTimeout) else "http_error")
            return RerankOutcome(sort_by_effective_score(docs)[:top_k], True, error)
        if not kept:
            record_rerank("empty")
            return RerankOutcome(
                sort_by_effective_score(docs)[:top_k], True, "empty_rerank_results"
            )
        record_rerank("applied")
        return RerankOutcome(kept[:top_k], True, None)

    async def aclose(self) -> None:
        await self._client.aclose()
