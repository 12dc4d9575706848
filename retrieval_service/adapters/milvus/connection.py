"""The connection to Milvus (pymilvus `MilvusClient`; a `.db` path = embedded Milvus Lite, an
`http(s)://` URI = Milvus standalone/cluster, one code path): start-up creation and checks
of the collections, sealing, and the one place pymilvus errors become domain errors. The
document registry (`registry.py`) and the chunk store (`chunk_store.py`) run their calls
through `MilvusStore.run`.

pymilvus is imported lazily: it reads MILVUS_URI at import time (the composition root clears
that variable first)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import grpc

from retrieval_service.adapters.milvus import schema
from retrieval_service.adapters.milvus.lite_process import LiteProcess
from retrieval_service.core.documents import LEVELS
from retrieval_service.core.errors import StoreFailed, StoreUnavailable
from retrieval_service.metrics import record_milvus_error
from shared.errors import ConfigurationError
from shared.tracing import span

log = logging.getLogger(__name__)
T = TypeVar("T")

#: URI schemes that name a Milvus server; anything else is a Milvus Lite file path.
SERVER_SCHEMES = ("http://", "https://", "tcp://", "unix:")
# pymilvus's Status.CONNECT_FAILED: what every call raises while the server is unreachable.
_CONNECT_FAILED = 2
_UNREACHABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
# pymilvus pings every 10 s, even with no call in flight: Milvus servers allow that, but Milvus
# Lite's gRPC server keeps grpc's defaults (no pings without calls, at most one per 5 min),
# answers the third early ping with GOAWAY `too_many_pings` and grpc logs it at ERROR. The Lite
# channel is loopback to this service's own child process, whose death its supervisor sees
# (lite_process.py): no keepalive pings on it at all (INT_MAX is grpc's "disabled").
LITE_CHANNEL_OPTIONS = {
    "grpc.keepalive_time_ms": 2**31 - 1,
    "grpc.keepalive_permit_without_calls": False,
}


def is_embedded_uri(uri: str) -> bool:
    """A file path means Milvus Lite, served by this service's own child process; a URL means a
    Milvus server."""
    return not uri.startswith(SERVER_SCHEMES)


def quote(value: str) -> str:
    """A Milvus expression string literal (double quotes, backslash escapes)."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def in_filter(field: str, values: Iterable[str]) -> str:
    return f"{field} in [" + ", ".join(quote(v) for v in values) + "]"


@dataclass(frozen=True, slots=True)
class StoreConfig:
    uri: str
    token: str | None
    collection: str
    dim: int
    hnsw_ef: int = 256
    bm25_k1: float = 1.2
    bm25_b: float = 0.75
    # Milvus Lite supports only 0; real Milvus may prune low-weight query terms with > 0.
    bm25_drop_ratio_search: float = 0.0
    #: Hybrid recall: each side asks `recall_depth × candidate_k` leaves, fused by RRF(rrf_k)
    #: down to candidate_k (docs/benchmarks.md#retrieval_fusion has the evidence for both).
    rrf_k: int = 60
    recall_depth: int = 2
    timeout_seconds: float = 10.0

    @property
    def embedded(self) -> bool:
        return is_embedded_uri(self.uri)

    @property
    def bm25_params(self) -> dict[str, float]:
        return {"bm25_k1": self.bm25_k1, "bm25_b": self.bm25_b}


def _unreachable(exc: Exception) -> bool:
    from pymilvus.exceptions import ConnectError, ConnectionNotExistException

    if isinstance(exc, ConnectError | ConnectionNotExistException):
        return True
    code = exc.code() if isinstance(exc, grpc.RpcError) else getattr(exc, "code", None)
    return code == _CONNECT_FAILED or code in _UNREACHABLE


def _not_loaded(exc: Exception) -> bool:
    code = getattr(exc, "code", None)
    return code == 101 or "call load()" in str(exc) or "not loaded" in str(exc)


def translate(exc: Exception) -> StoreUnavailable | StoreFailed:
    """The core's error for a pymilvus failure, logged here once: an unreachable server is
    `StoreUnavailable` (the caller may retry), anything else `StoreFailed`."""
    record_milvus_error(exc)
    if _unreachable(exc):
        log.warning("Milvus is unreachable: %s", exc)
        return StoreUnavailable()
    log.error("Milvus call failed", exc_info=exc)
    return StoreFailed()


def operation_of(fn: Callable[..., Any]) -> str:
    """The store method a Milvus call comes from (`ChunkStore.hybrid_search`,
    `DocumentRegistry._upsert`): a lambda is named after the method that wrote it."""
    qualname = getattr(fn, "__qualname__", "") or type(fn).__name__
    return qualname.split(".<locals>", 1)[0]


class SealGate:
    """While Milvus Lite flushes a collection, its searches miss the rows being flushed: a
    reader searching while a document was replaced missed it in 4 of 599 searches, during the
    replacement's seal, with neither version found. So a seal waits for the calls in flight and
    holds new ones back until it ends (≈ 0.1 s); calls do not wait for each other. The counts
    change without an `await`, so a cancelled call cannot leave the gate shut."""

    def __init__(self) -> None:
        self._open = asyncio.Event()
        self._open.set()
        self._idle = asyncio.Event()
        self._idle.set()
        self._calls = 0
        self._one_seal = asyncio.Lock()

    @contextlib.asynccontextmanager
    async def call(self) -> AsyncIterator[None]:
        while not self._open.is_set():
            await self._open.wait()
        self._calls += 1
        self._idle.clear()
        try:
            yield
        finally:
            self._calls -= 1
            if self._calls == 0:
                self._idle.set()

    @contextlib.asynccontextmanager
    async def seal(self) -> AsyncIterator[None]:
        async with self._one_seal:
            self._open.clear()
            try:
                await self._idle.wait()
                yield
            finally:
                self._open.set()


class MilvusStore:
    """One MilvusClient and the collection names of one `StoreConfig`. Calls are synchronous
    in pymilvus; `run` moves each into a worker thread."""

    def __init__(self, config: StoreConfig, lite: LiteProcess | None = None) -> None:
        """`lite`: the Milvus Lite child serving `config.uri` (a `.db` path); the client then
        connects to it, and while it is down calls fail UNAVAILABLE without waiting."""
        from pymilvus import MilvusClient
        from pymilvus.exceptions import MilvusException

        self.config = config
        self.lite = lite
        uri = config.uri if lite is None else lite.uri
        kwargs: dict[str, Any] = {"uri": uri, "timeout": config.timeout_seconds}
        if config.token:
            kwargs["token"] = config.token
        if config.embedded:
            kwargs["grpc_options"] = LITE_CHANNEL_OPTIONS
        try:
            self._client = MilvusClient(**kwargs)
        except (MilvusException, grpc.RpcError) as exc:
            raise translate(exc) from exc
        self._gate = SealGate()

    def view(self, collection: str, dim: int) -> MilvusStore:
        """The same client and seal gate over another set of chunk collections (an index
        generation's, `collection` their base name, `dim` their vector size). Closing the
        view closes nothing: the store it came from owns the client."""
        view = object.__new__(MilvusStore)
        view.config = replace(self.config, collection=collection, dim=dim)
        view.lite = self.lite
        view._client = self._client
        view._gate = self._gate
        return view

    def drop_collections(self, client: Any) -> None:
        """Drops this store's chunk collections (a generation no index uses any more)."""
        for name in self.all_collections():
            if client.has_collection(name):
                log.info("dropping Milvus collection %s", name)
                client.drop_collection(name)

    def list_collections(self, client: Any) -> list[str]:
        return list(client.list_collections())

    # ---- names -------------------------------------------------------------------------

    @property
    def _prefix(self) -> str:
        return self.config.collection + schema.LAYOUT_SUFFIX

    def level_collection(self, level: int) -> str:
        return f"{self._prefix}_l{level}"

    @property
    def registry_collection(self) -> str:
        return f"{self._prefix}_documents"

    @property
    def knowledge_base_collection(self) -> str:
        return f"{self._prefix}_knowledge_bases"

    def all_collections(self) -> list[str]:
        """The chunk collections, one per level: all that Milvus holds now."""
        return [self.level_collection(lvl) for lvl in LEVELS]

    def control_collections(self) -> list[str]:
        """The registry and knowledge-base collections of the layout before the control
        plane moved into the database (`adapters/sql/upgrade.py` moves and drops them)."""
        return [self.registry_collection, self.knowledge_base_collection]

    def v2_collections(self) -> list[str]:
        """The collections of the layout before knowledge bases (`upgrade.py`): the three
        levels, then the registry."""
        prefix = self.config.collection + schema.V2_SUFFIX
        return [*(f"{prefix}_l{lvl}" for lvl in LEVELS), f"{prefix}_documents"]

    def v3_collections(self) -> list[str]:
        """The collections of the knowledge-base layout, before document access (`upgrade.py`):
        the three levels, the registry, then the knowledge bases."""
        prefix = self.config.collection + schema.V3_SUFFIX
        levels = [f"{prefix}_l{lvl}" for lvl in LEVELS]
        return [*levels, f"{prefix}_documents", f"{prefix}_knowledge_bases"]

    # ---- calls -------------------------------------------------------------------------

    def _retrying(self, fn: Callable[..., T], *args: Any) -> T:
        from pymilvus.exceptions import MilvusException

        try:
            return fn(self._client, *args)
        except MilvusException as exc:
            if not _not_loaded(exc):
                raise
        # A restarted Milvus (or a released collection) answers "not loaded": load, retry once.
        log.warning("Milvus collections are not loaded (server restarted?); loading them")
        for name in self.all_collections():
            self._client.load_collection(name)
        return fn(self._client, *args)

    def _call(self, fn: Callable[..., T], *args: Any) -> T:
        from pymilvus.exceptions import MilvusException

        try:
            return self._retrying(fn, *args)
        except (MilvusException, grpc.RpcError) as exc:
            raise translate(exc) from exc

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(client, *args)` in a worker thread; pymilvus errors arrive translated
        (`StoreUnavailable` or `StoreFailed`). On Lite, not during a seal."""
        if not self.config.embedded:
            return await self._run(fn, *args)
        async with self._gate.call():
            return await self._run(fn, *args)

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        if self.lite is not None and not self.lite.alive:
            raise StoreUnavailable()
        with span("milvus") as traced:
            if traced.is_recording():
                traced.set_attribute("db.system.name", "milvus")
                traced.set_attribute("db.operation.name", operation_of(fn))
            return await asyncio.to_thread(self._call, fn, *args)

    # ---- start-up ----------------------------------------------------------------------

    def _check_existing(self, client: Any, name: str, expected_schema: Any) -> None:
        problems = schema.schema_problems(client.describe_collection(name), expected_schema)
        if problems:
            raise ConfigurationError(
                f"Milvus collection {name!r} at {self.config.uri} does not match this service: "
                + "; ".join(problems)
                + ". Remedy: point MILVUS_COLLECTION at a new name (or drop the collection / "
                "delete the Milvus Lite data directory) and re-ingest the documents, or "
                "configure the embedder that built it (EMBEDDING_* / EMBEDDING_DIM)."
            )

    def _ensure(self, client: Any) -> None:
        wanted: list[tuple[str, Any, Callable[[], Any]]] = [
            (
                self.level_collection(level),
                schema.chunk_schema(self.config.dim),
                lambda: schema.chunk_index_params(client, self.config.bm25_params),
            )
            for level in LEVELS
        ]
        # The control collections of an older store: kept for the upgrades that read them (an
        # older layout's upgrade writes into them first), never created for a new store.
        older = any(client.has_collection(n) for n in self.v2_collections() + self.v3_collections())
        for name, expected in (
            (self.registry_collection, schema.registry_schema()),
            (self.knowledge_base_collection, schema.knowledge_base_schema()),
        ):
            if older or client.has_collection(name):
                wanted.append((name, expected, lambda: schema.registry_index_params(client)))
        for name, expected, index_params in wanted:
            if client.has_collection(name):
                self._check_existing(client, name, expected)
            else:
                log.info("creating Milvus collection %s", name)
                client.create_collection(name, schema=expected, index_params=index_params())
            client.load_collection(name)
        # A Lite store written before writes were sealed replays its whole log into the
        # memtable on every start; seal it once here.
        self._seal(client)

    async def ensure_collections(self) -> None:
        """Create missing collections, validate existing ones, load all (start-up)."""
        await self.run(self._ensure)

    # ---- sealing -----------------------------------------------------------------------

    def _seal(self, client: Any) -> None:
        """Milvus Lite keeps writes in its memtable until 128 MB have accumulated, and every
        search walks the memtable row by row and rebuilds its BM25 index: at 19k SciFact leaves
        a Retrieve took 4 s before a flush and 0.2–0.3 s after it, with the same hits (99.6 %
        of the top 100). So on Lite each write is flushed into indexed segments (a no-op when
        nothing is pending). A Milvus server seals and indexes segments itself.

        The price: Lite scores BM25 with each segment's own IDF (its source says so). Its
        size-tiered compaction merges small segments as they pile up, so the skew is confined
        to the few newest, smallest ones; RRF uses ranks, which softens it further."""
        if not self.config.embedded:
            return
        for name in self.all_collections():
            client.flush(name)

    async def seal(self) -> None:
        """Make the rows written so far searchable through the indexes (see `_seal`). The
        collections are flushed at once: Milvus Lite writes each one's segment in its own
        request thread, and pyarrow releases the GIL while it writes."""
        if not self.config.embedded:
            return
        async with self._gate.seal():
            await asyncio.gather(
                *(self._run(lambda c, n=name: c.flush(n)) for name in self.all_collections())
            )

    async def aclose(self) -> None:
        await asyncio.to_thread(self._client.close)
        if self.lite is not None:
            await self.lite.aclose()
