"""A deterministic hashing "embedder" for synthetic load benchmarks only (100k rows in
seconds): signed feature hashing of word and character-bigram tokens, L2-normalised. It is NOT
a semantic model and the service never builds it; benches pass it to `create_app` directly."""

from __future__ import annotations

import hashlib
import itertools
import re
from collections.abc import Sequence

import numpy as np

from retrieval_service.core.embedding import normalise
from retrieval_service.core.ports import ProgressCallback

_TOKEN = re.compile(r"[\u4e00-\u9fff]|[^\W_]+", re.UNICODE)


class HashingEmbedder:
    def __init__(self, dim: int = 384) -> None:
        self.name = f"hashing-{dim}"
        self.dim = dim

    def _vector(self, text: str) -> np.ndarray:
        vec = np.zeros(self.dim, dtype=np.float32)
        tokens = _TOKEN.findall(text.lower())
        grams = tokens + [a + b for a, b in itertools.pairwise(tokens)]
        for gram in grams:
            digest = hashlib.blake2b(gram.encode(), digest_size=8).digest()
            h = int.from_bytes(digest, "little")
            vec[h % self.dim] += 1.0 if (h >> 63) & 1 else -1.0
        return vec

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return normalise(np.stack([self._vector(t) for t in texts]))

    async def embed_query(self, text: str, *, deadline: float | None = None) -> np.ndarray:
        return self.encode([text])[0]

    async def embed_passages(
        self,
        texts: Sequence[str],
        *,
        on_batch: ProgressCallback | None = None,
        deadline: float | None = None,
    ) -> np.ndarray:
        vectors = self.encode(list(texts))
        if on_batch is not None:
            on_batch(len(texts), len(texts))
        return vectors

    async def aclose(self) -> None:
        return None
