"""Implementations of the core's `Embedder` port that misbehave on purpose, wrapping the real
model: they fail as a real embedder does (`EmbedderUnavailable`, what the adapters raise for a
crashed model or a broken endpoint) and drive the failure paths through the service's real code
(no monkeypatching)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from retrieval_service.core.errors import EmbedderUnavailable
from retrieval_service.core.ports import Embedder


class FailingEmbedder:
    """Delegates to `inner`; raises on the `fail_on_batch`-th passage batch (1-based) and/or on
    every query."""

    def __init__(
        self, inner: Embedder, *, fail_on_batch: int | None = None, fail_queries: bool = False
    ) -> None:
        self.inner = inner
        self.name = f"failing({inner.name})"
        self.dim = inner.dim
        self.fail_on_batch = fail_on_batch
        self.fail_queries = fail_queries
        self.passage_batches = 0
        self.queries = 0

    async def embed_query(self, text: str, **options: Any) -> np.ndarray:
        self.queries += 1
        if self.fail_queries:
            raise EmbedderUnavailable()
        return await self.inner.embed_query(text, **options)

    async def embed_passages(self, texts: Sequence[str], **options: Any) -> np.ndarray:
        self.passage_batches += 1
        if self.fail_on_batch is not None and self.passage_batches == self.fail_on_batch:
            raise EmbedderUnavailable()
        return await self.inner.embed_passages(texts, **options)

    async def aclose(self) -> None:
        return None


class WrongDimensionQueryEmbedder(FailingEmbedder):
    """Passages are fine, but query vectors have the wrong dimension, so the store rejects
    both the hybrid and the dense search (→ retrieve_failed)."""

    async def embed_query(self, text: str, **options: Any) -> np.ndarray:
        self.queries += 1
        return np.ones(8, dtype=np.float32) / np.sqrt(8)
