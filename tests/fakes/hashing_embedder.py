"""A deterministic `core.ports.Embedder` for unit tests: signed feature hashing of a text's
words, L2-normalised (no model, no network). Texts sharing words point the same way, so a
query finds the chunks that use its words. It can fail as a real embedder does
(`EmbedderUnavailable`), on queries or from a given passage on."""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import Sequence

import numpy as np

from retrieval_service.core.errors import EmbedderUnavailable
from retrieval_service.core.ports import ProgressCallback

_WORD = re.compile(r"[\u4e00-\u9fff]|[^\W_]+", re.UNICODE)


class HashingEmbedder:
    def __init__(
        self,
        dim: int = 64,
        *,
        fail_queries: bool = False,
        fail_from_passage: int | None = None,
    ) -> None:
        """`fail_from_passage`: a passage call whose texts reach past this many passages
        embedded in all (0-based index of the first failing passage) raises."""
        self.name = f"hashing-{dim}"
        self.dim = dim
        self.batch_size = 8
        self.concurrency = 1
        self.fail_queries = fail_queries
        self.fail_from_passage = fail_from_passage
        self.queries: list[str] = []
        self.passages = 0

    def vector(self, text: str) -> np.ndarray:
        vec = np.zeros(self.dim, dtype=np.float32)
        for word in _WORD.findall(text.lower()):
            h = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "little")
            vec[h % self.dim] += 1.0 if (h >> 63) & 1 else -1.0
        norm = float(np.linalg.norm(vec))
        if norm == 0:
            vec[0], norm = 1.0, 1.0
        return vec / norm

    async def embed_query(self, text: str, *, deadline: float | None = None) -> np.ndarray:
        await asyncio.sleep(0)
        self.queries.append(text)
        if self.fail_queries:
            raise EmbedderUnavailable()
        return self.vector(text)

    async def embed_passages(
        self,
        texts: Sequence[str],
        *,
        on_batch: ProgressCallback | None = None,
        deadline: float | None = None,
    ) -> np.ndarray:
        await asyncio.sleep(0)
        if self.fail_from_passage is not None and (
            self.passages + len(texts) > self.fail_from_passage
        ):
            raise EmbedderUnavailable()
        self.passages += len(texts)
        out = np.stack([self.vector(t) for t in texts]) if texts else np.zeros((0, self.dim))
        if on_batch is not None:
            on_batch(len(texts), len(texts))
        return out.astype(np.float32)

    async def aclose(self) -> None:
        return None
