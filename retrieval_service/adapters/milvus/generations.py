"""Index generations on Milvus (`core.indexes.service.GenerationSource`): each config's three
chunk collections (`{MILVUS_COLLECTION}_g{digest}`, the knowledge base the partition key inside
them, as in the service's own), opened over the service's client, with the embedder its config
names (EMBEDDERS; `builtin` is the built-in model) and its chunking. The service's own
collections are the generation of its settings: every knowledge base's `initial` index."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping

from retrieval_service.adapters.milvus.chunk_store import ChunkStore
from retrieval_service.adapters.milvus.connection import MilvusStore
from retrieval_service.core.chunking import ChunkingConfig
from retrieval_service.core.indexes.generations import Generation
from retrieval_service.core.indexes.model import IndexRecord
from retrieval_service.core.ingest.flow import embedding_window
from retrieval_service.core.ports import ChunkRepository, Embedder

#: Embedders by name, each made at its first use.
EmbedderFactories = Mapping[str, Callable[[], Embedder]]


class MilvusGenerations:
    """See the module docstring. Generations are cached by collection: opening one creates
    (or checks) its collections once per process."""

    def __init__(
        self,
        milvus: MilvusStore,
        own: ChunkStore,
        own_chunking: ChunkingConfig,
        embedders: EmbedderFactories,
        *,
        bm25_levels: frozenset[int],
        window: int | None = None,
        borrowed: frozenset[str] = frozenset(),
        background: EmbedderFactories | None = None,
    ) -> None:
        """`embedders`: how to make each named embedder; `borrowed`: the names whose embedder
        is the service's own (closed by the service, not here); `background`: the embedders
        builds use instead, by name (the others build with the same one)."""
        self._milvus = milvus
        self._own = own
        self._own_chunking = own_chunking
        self._factories = embedders
        self._bm25_levels = bm25_levels
        self._window = window
        self._borrowed = borrowed
        self._background = background or {}
        self._embedders: dict[str, Embedder] = {}
        self._stores: dict[str, tuple[ChunkRepository, ChunkingConfig]] = {}
        self._open: dict[tuple[str, bool], Generation] = {}
        self._opening = asyncio.Lock()

    @property
    def own_collection(self) -> str:
        return self._milvus.config.collection

    def embedder(self, name: str, background: bool = False) -> Embedder:
        key = f"{name}/background" if background and name in self._background else name
        if key not in self._embedders:
            make = self._background[name] if key != name else self._factories[name]
            self._embedders[key] = make()
        return self._embedders[key]

    async def _chunks(self, record: IndexRecord) -> tuple[ChunkRepository, ChunkingConfig]:
        if record.collection == self.own_collection:
            return self._own, self._own_chunking
        found = self._stores.get(record.collection)
        if found is None:
            view = self._milvus.view(record.collection, record.config.dimension)
            await view.ensure_collections()
            found = self._stores[record.collection] = (ChunkStore(view), record.config.chunking())
        return found

    async def open(self, record: IndexRecord, *, background: bool = False) -> Generation:
        """`background`: for a build, whose embedding must leave the callers' reads and writes
        their share of the cores (the built-in model on half of them)."""
        key = (record.collection, background)
        found = self._open.get(key)
        if found is not None:
            return found
        async with self._opening:
            found = self._open.get(key)
            if found is not None:
                return found
            embedder = self.embedder(record.config.embedder, background)
            chunks, chunking = await self._chunks(record)
            generation = Generation(
                record.collection,
                chunks,
                embedder,
                chunking,
                self._window or embedding_window(embedder),
                self._bm25_levels,
            )
            self._open[key] = generation
            return generation

    async def drop(self, collection: str) -> None:
        if collection == self.own_collection:
            return
        self._open = {k: g for k, g in self._open.items() if k[0] != collection}
        self._stores.pop(collection, None)
        view = self._milvus.view(collection, 1)
        await self._milvus.run(view.drop_collections)

    async def drop_unused(self, used: set[str]) -> list[str]:
        prefix = self.own_collection + "_g"
        names = await self._milvus.run(self._milvus.list_collections)
        suffix = self._milvus.level_collection(1)[len(self.own_collection) :]
        bases = {n[: -len(suffix)] for n in names if n.startswith(prefix) and n.endswith(suffix)}
        doomed = sorted(b for b in bases if b not in used)
        for base in doomed:
            await self.drop(base)
        return doomed

    async def aclose(self) -> None:
        """Closes the embedders it made (not the service's own, which it was handed)."""
        for name, embedder in self._embedders.items():
            if name not in self._borrowed:
                await embedder.aclose()
