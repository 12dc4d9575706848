"""The indexes of the knowledge bases (docs/api.md#indexes): CreateIndex's checks, GetIndex,
ListIndexes, DeleteIndex and the switch of UpdateKnowledgeBase; which index a read uses
(`reading`) and which indexes a write reaches (`plan`); the build of a new index from the
documents a knowledge base holds (`build`, run as a long-running operation by
`retrieval_service/index_builds.py`); and the upkeep of both (`reconcile`).

While an index builds, reads use the active index and every ingest, replace, delete and
import reaches both (`generations.WritePlan`), so it is complete when it turns READY. Its
build takes the new versions itself (`model.build_takes_writes`): a write embeds for the
active index only; a version committed past where the build has read is read in its pass
(documents come in id order), one behind it is put in the build's backlog by the commit's own
transaction. The pass's last page sets the read position to None: from then on every commit
writes the index itself (IndexesBehind sends back one that did not), and the build reads its
backlog, which only shrinks — so a build ends however steadily callers write. The build reads
each batch of current documents' stored text, embeds it outside the write lock and writes it
under the lock only for the versions still current then: a version committed meanwhile is in
its backlog or written by its ingest, and a deleted document's rows went with its versions.
So no write is lost, whatever runs alongside."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Protocol

from retrieval_service.core.documents import (
    LEVELS,
    DocumentEntry,
    decode_page_token,
    encode_page_token,
)
from retrieval_service.core.indexes.generations import (
    Generation,
    OtherIndex,
    WritePlan,
    embed_documents,
    write_staged,
)
from retrieval_service.core.indexes.model import (
    BUILDING,
    DELETING,
    FAILED,
    READ_ALL,
    READY,
    STATE_NAMES,
    IndexConfig,
    IndexRecord,
    check_index_id,
    checked_config,
    generation_collection,
    index_name,
    parse_index_name,
)
from retrieval_service.core.indexes.texts import unpack_pages
from retrieval_service.core.ingest.flow import SEAL_EVERY_ROWS
from retrieval_service.core.ingest.validation import list_page_size
from retrieval_service.core.ports import DocumentRegistry
from shared.errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound

log = logging.getLogger(__name__)

#: Documents a build embeds, then writes under the lock, at a time.
BUILD_BATCH = 8
#: How long a build waits for the ingests in flight before its next embedder batch, at most:
#: it gives way to the callers' writes (an ingest of 16 abstracts takes ≈ 10 s), but a steady
#: stream of them never stops it (docs/benchmarks.md#index_generations).
YIELD_SECONDS = 10.0
#: `require(text, field)`: the full name of an existing knowledge base (KnowledgeBases.require).
Require = Callable[[str, str], Awaitable[str]]


class IndexStore(Protocol):
    """The index records (`adapters/sql/indexes.py`)."""

    async def create(self, record: IndexRecord) -> bool: ...

    async def get(self, knowledge_base: str, index_id: str) -> IndexRecord | None: ...

    async def of(self, knowledge_base: str) -> list[IndexRecord]: ...

    async def all(self) -> list[IndexRecord]: ...

    async def active(self, knowledge_bases: Sequence[str]) -> dict[str, IndexRecord]: ...

    async def update(self, record: IndexRecord, *, states: Sequence[int]) -> bool:
        """Writes `record`'s state and counts while its stored state is one of `states`."""
        ...

    async def set_state(
        self, knowledge_base: str, index_id: str, state: int, *, states: Sequence[int]
    ) -> bool:
        """Writes the state alone while the stored state is one of `states`."""
        ...

    async def activate(self, knowledge_base: str, index_id: str) -> bool: ...

    async def mark_deleting(self, knowledge_base: str, index_id: str) -> bool: ...

    async def remove(self, knowledge_base: str, index_id: str) -> None: ...

    async def ensure_initial(self, template: IndexRecord) -> int: ...


class GenerationSource(Protocol):
    """Opens generations (`adapters/milvus/generations.py`): each config's collections, created
    when missing, with its embedder (EMBEDDERS) and chunking; cached by collection."""

    async def open(self, record: IndexRecord, *, background: bool = False) -> Generation:
        """`background`: the generation as a build writes it (an embedder that leaves the
        callers their share of the cores)."""
        ...

    async def drop(self, collection: str) -> None:
        """Drops a generation's collections (none of them the service's own)."""
        ...

    async def drop_unused(self, used: set[str]) -> list[str]:
        """Drops every generation's collections whose base name is not in `used`."""
        ...


@dataclass(frozen=True, slots=True)
class ReadGroup:
    """Knowledge bases one recall searches together: those whose read index is in the same
    generation."""

    knowledge_bases: tuple[str, ...]
    generation: Generation


@dataclass(frozen=True, slots=True)
class IndexPage:
    indexes: list[IndexRecord]
    next_page_token: str


@dataclass(frozen=True, slots=True)
class BuildProgress:
    """Where a build is: the last document_id written (documents come in id order; READ_ALL
    once its pass is done and it reads its backlog), the documents done (those of the backlog
    count again) and in all, and the leaves written."""

    after: str = ""
    indexed: int = 0
    total: int = 0
    leaves: int = 0


class IndexGone(Exception):
    """The index being built was deleted (or failed) meanwhile: the build stops."""


#: Saves a build's progress; returns whether it should stop (CancelOperation, shutdown).
SaveProgress = Callable[[BuildProgress], Awaitable[bool]]


class Indexes:
    """See the module docstring."""

    def __init__(
        self,
        store: IndexStore,
        require: Require,
        registry: DocumentRegistry,
        generations: GenerationSource,
        *,
        own: IndexRecord,
        dimensions: Mapping[str, int],
        lock: asyncio.Lock,
        on_build_document: Callable[[str], None] | None = None,
        writing: Callable[[], bool] = lambda: False,
    ) -> None:
        """`own`: the template of every knowledge base's `initial` index (the service's
        settings and collections); `dimensions`: each embedder EMBEDDERS declares, with its
        vector size; `lock`: the ingestor's write lock; `writing`: whether an ingest runs
        in this process now (`Ingestor.busy`: a build gives way to it)."""
        self._writing = writing
        self._store = store
        self._require = require
        self._registry = registry
        self._generations = generations
        self._own = own
        self._dimensions = dict(dimensions)
        self._lock = lock
        self._on_build_document = on_build_document or (lambda _result: None)
        self._unsealed = 0

    async def ensure_initial(self) -> None:
        """Every knowledge base without an index gets `initial` from the settings (the
        upgrade to index generations; and a knowledge base created by an older replica)."""
        if created := await self._store.ensure_initial(self._own):
            log.info("gave %d knowledge base(s) their initial index", created)

    async def create_initial(self, knowledge_base: str) -> None:
        record = replace(self._own, knowledge_base=knowledge_base, create_time=_now_ms())
        await self._store.create(record)

    # ---- reads and writes -----------------------------------------------------------------

    async def _generation(self, record: IndexRecord | None) -> Generation:
        return await self._generations.open(record or self._own)

    async def reading(
        self, knowledge_bases: Sequence[str], index_text: str = ""
    ) -> list[ReadGroup]:
        """The generation each knowledge base is read in — its active index, or the READY
        index `index_text` names for its own knowledge base — grouped."""
        chosen: dict[str, IndexRecord] = {}
        if index_text:
            record = await self.readable(index_text, "index")
            if record.knowledge_base not in knowledge_bases:
                raise InvalidArgument(
                    "index",
                    f"is an index of {record.knowledge_base!r}, not a knowledge base searched",
                )
            chosen[record.knowledge_base] = record
        missing = [kb for kb in knowledge_bases if kb not in chosen]
        if missing:
            chosen |= await self._store.active(missing)
        groups: dict[str, tuple[list[str], Generation]] = {}
        for kb in knowledge_bases:
            generation = await self._generation(chosen.get(kb))
            groups.setdefault(generation.collection, ([], generation))[0].append(kb)
        return [ReadGroup(tuple(kbs), generation) for kbs, generation in groups.values()]

    async def readable(self, text: str, field: str) -> IndexRecord:
        """The READY index `text` names: INVALID_ARGUMENT when malformed, NOT_FOUND when
        unknown, FAILED_PRECONDITION when not READY."""
        kb, index_id = parse_index_name(text, field)
        record = await self._store.get(kb, index_id)
        if record is None:
            raise NotFound(field, f"index {text!r} does not exist")
        if record.state != READY:
            raise FailedPrecondition(
                field, f"index {text!r} is {STATE_NAMES[record.state]}, not READY"
            )
        return record

    async def plan(self, knowledge_base: str) -> WritePlan:
        """Where an ingest into `knowledge_base` writes: its active index, then the others."""
        active = (await self._store.active([knowledge_base])).get(knowledge_base)
        return WritePlan(knowledge_base, await self._generation(active), self._others)

    async def _others(self, knowledge_base: str, primary: str) -> list[OtherIndex]:
        records = [
            r
            for r in await self._store.of(knowledge_base)
            if r.state in (BUILDING, READY) and r.collection != primary
        ]
        return [
            OtherIndex(await self._generation(r), r.state, r.build_read_to, partial(self._fail, r))
            for r in records
        ]

    async def _fail(self, record: IndexRecord) -> None:
        kb, index_id = record.knowledge_base, record.index_id
        if await self._store.set_state(kb, index_id, FAILED, states=(BUILDING, READY)):
            log.error("index %s is FAILED: it missed a write", record.name)

    async def mark_failed(self, record: IndexRecord) -> None:
        """A build that stopped with an error (or was cancelled) leaves its index FAILED."""
        kb, index_id = record.knowledge_base, record.index_id
        await self._store.set_state(kb, index_id, FAILED, states=(BUILDING,))

    # ---- the RPCs --------------------------------------------------------------------------

    async def create(
        self, parent: str, index_id: str, config: IndexConfig, operation: str
    ) -> IndexRecord:
        """A new BUILDING index (its build is `operation`'s): checked, its collections
        created, its record written under the write lock, so every ingest committed after
        it reaches it and every one before is among the documents its build reads."""
        kb = await self._require(parent, "parent")
        check_index_id(index_id, "index_id")
        config = checked_config(
            config,
            self._dimensions,
            default_size=self._own.config.chunk_size,
            default_overlap=self._own.config.chunk_overlap,
            default_header=self._own.config.leaf_context_header,
        )
        for other in await self._store.of(kb):
            if other.config.key == config.key and other.state != DELETING:
                raise FailedPrecondition(
                    "index.config", f"index {other.name!r} already has this config"
                )
        collection = (
            self._own.collection
            if config.key == self._own.config.key
            else generation_collection(self._own.collection, config)
        )
        # Read to "": its build has read nothing yet, so no write needs to reach it until then.
        record = IndexRecord(
            kb,
            index_id,
            config,
            collection,
            BUILDING,
            create_time=_now_ms(),
            operation=operation,
            build_read_to="",
        )
        await self._generation(record)  # its collections and embedder, before any write
        async with self._lock:
            if not await self._store.create(record):
                raise AlreadyExists("index_id", f"{record.name!r} already exists")
        log.info("index %s: building (%s)", record.name, collection)
        return record

    async def get(self, text: str, field: str = "name") -> IndexRecord:
        kb, index_id = parse_index_name(text, field)
        await self._require(kb, field)
        record = await self._store.get(kb, index_id)
        if record is None:
            raise NotFound(field, f"index {text!r} does not exist")
        return record

    async def list_page(self, parent: str, page_size: int, page_token: str) -> IndexPage:
        kb = await self._require(parent, "parent")
        size = list_page_size(page_size)
        after = decode_page_token(page_token) if page_token else ""
        records = [r for r in await self._store.of(kb) if r.index_id > after]
        page = records[:size]
        token = encode_page_token(page[-1].index_id) if len(records) > size and page else ""
        return IndexPage(page, token)

    async def activate(self, kb_text: str, index_text: str) -> None:
        """The switch: `index_text` becomes the knowledge base's active index, in one
        statement, if it is READY. Reads already running finish on the index they began on."""
        kb = await self._require(kb_text, "knowledge_base.name")
        field = "knowledge_base.active_index"
        index_kb, index_id = parse_index_name(index_text, field)
        if index_kb != kb:
            raise InvalidArgument(field, f"is an index of {index_kb!r}, not of {kb!r}")
        await self.readable(index_text, field)
        if not await self._store.activate(kb, index_id):
            raise FailedPrecondition(field, f"index {index_text!r} is no longer READY")
        log.info("knowledge base %s now reads index %s", kb, index_id)

    async def delete(self, text: str) -> None:
        """Removes an index that is not the active one: its rows of the knowledge base, its
        record, and its collections once no index uses them."""
        record = await self.get(text, "name")
        if not await self._store.mark_deleting(record.knowledge_base, record.index_id):
            raise FailedPrecondition(
                "name",
                f"{text!r} is the active index of {record.knowledge_base!r}; switch first",
            )
        await self._finish_delete(record)

    async def _finish_delete(self, record: IndexRecord) -> None:
        generation = await self._generation(record)
        async with self._lock:  # no ingest writes into it meanwhile
            for level in LEVELS:
                await generation.chunks.delete_knowledge_base(level, record.knowledge_base)
            await self._store.remove(record.knowledge_base, record.index_id)
            used = {r.collection for r in await self._store.all()} | {self._own.collection}
            if record.collection not in used:
                await self._generations.drop(record.collection)
        log.info("index %s deleted", record.name)

    async def reconcile(self, *, drop_unused: bool = False) -> None:
        """Finishes the deletions a crash interrupted; with `drop_unused` (the store's only
        writer: another replica may be opening a new generation's collections before its
        record exists) drops the collections no index uses."""
        for record in await self._store.all():
            if record.state == DELETING:
                log.info("finishing the interrupted deletion of index %s", record.name)
                await self._finish_delete(record)
        if not drop_unused:
            return
        used = {r.collection for r in await self._store.all()} | {self._own.collection}
        for dropped in await self._generations.drop_unused(used):
            log.info("dropped the collections of %s: no index uses them", dropped)

    # ---- the build -------------------------------------------------------------------------

    async def build(
        self, name: str, progress: BuildProgress, save: SaveProgress
    ) -> IndexRecord | None:
        """Writes every current document of the knowledge base into the BUILDING index
        `name`, from `progress` on (a build resumed after a kill goes on where its last
        save was), then marks it READY and returns it; None when `save` asked it to stop.
        IndexGone when it was deleted meanwhile; FAILED_PRECONDITION when a document has
        no stored text (ingested before texts were kept: it must be ingested again)."""
        kb, index_id = parse_index_name(name, "index")
        record = await self._store.get(kb, index_id)
        if record is None or record.state != BUILDING:
            raise IndexGone(name)
        generation = await self._generations.open(record, background=True)
        if not progress.total:
            total = (await self._registry.counts([kb])).get(kb, (0, 0))[0]
            progress = replace(progress, total=total)
            await self._save(record, progress, save)
        while True:
            page = await self._registry.build_page(kb, index_id, progress.after, BUILD_BATCH)
            if page is None:
                raise IndexGone(name)
            if not page.entries:
                if progress.after == READ_ALL:
                    break  # pass and backlog read
                progress = replace(progress, after=READ_ALL)
                continue
            leaves = await self._build_batch(generation, kb, index_id, page.entries)
            done = progress.indexed + len(page.entries)
            progress = BuildProgress(
                page.entries[-1].document_id if page.next_page_token else READ_ALL,
                done,
                max(progress.total, done),
                progress.leaves + leaves,
            )
            if await self._save(record, progress, save):
                return None
        await generation.chunks.seal()  # fast to search from the first read
        ready = replace(
            record, state=READY, documents_indexed=progress.indexed, documents_total=progress.total
        )
        if not await self._store.update(ready, states=(BUILDING,)):
            raise IndexGone(name)
        log.info(
            "index %s: READY, %d documents, %d leaves", name, progress.indexed, progress.leaves
        )
        return ready

    async def _save(self, record: IndexRecord, progress: BuildProgress, save: SaveProgress) -> bool:
        counted = replace(
            record, documents_indexed=progress.indexed, documents_total=progress.total
        )
        if not await self._store.update(counted, states=(BUILDING,)):
            raise IndexGone(record.name)
        return await save(progress)

    async def _give_way(self) -> None:
        """Waits (at most YIELD_SECONDS) while an ingest runs: the build's batch would take
        the cores from it."""
        waited = 0.0
        while self._writing() and waited < YIELD_SECONDS:
            await asyncio.sleep(0.05)
            waited += 0.05

    async def _build_batch(
        self, generation: Generation, kb: str, index_id: str, entries: Sequence[DocumentEntry]
    ) -> int:
        texts = await self._registry.texts(kb, [(e.document_id, e.content_sha256) for e in entries])
        lacking = [e.document_id for e in entries if (e.document_id, e.content_sha256) not in texts]
        if lacking:
            for _ in lacking:
                self._on_build_document("no_text")
            raise FailedPrecondition(
                "index",
                f"{len(lacking)} document(s), first {lacking[0]!r}, were ingested before their "
                "text was kept; ingest them again, then build",
            )
        documents = [(e, unpack_pages(texts[(e.document_id, e.content_sha256)])) for e in entries]
        staged = await embed_documents(generation, documents, pause=self._give_way)
        async with self._lock:
            # Deleted (or failed) while this batch embedded: nothing more goes into it.
            still = await self._store.get(kb, index_id)
            if still is None or still.state != BUILDING:
                raise IndexGone(index_name(kb, index_id))
            current = await self._registry.current_versions([e.document_id for e in entries], kb)
            live = {
                (e.document_id, e.version)
                for e in entries
                if current.get(e.document_id) == e.version
            }
            kept = {
                level: [c for c in chunks if (c.document_id, c.version) in live]
                for level, chunks in staged.items()
            }
            await write_staged(generation, kept)
            await self._registry.build_written(kb, index_id, sorted(live))
            self._unsealed += sum(map(len, kept.values()))
            if self._unsealed >= SEAL_EVERY_ROWS:
                await generation.chunks.seal()
                self._unsealed = 0
        for e in entries:
            self._on_build_document(
                "written" if (e.document_id, e.version) in live else "superseded"
            )
        return len(kept[3])


def _now_ms() -> int:
    return int(time.time() * 1000)
