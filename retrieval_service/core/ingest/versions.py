"""The crash-safe version protocol (retrieval_service/README.md "Crash safety"): every ingest
writes a new *version* of a document beside the current one — a PENDING registry record naming
all its rows (chunk ids are known once the document is parsed, before any vector is), the rows
of the three levels in pieces as they embed, then the COMMITTED record, which is the instant the
new version becomes current — and only then removes older versions. A delete commits a
TOMBSTONE version first. Readers see current versions only, so a crash at any instant leaves
the previous version intact or the new one complete; `reconcile` removes what a crash left
behind, an uncommitted version once its writer's lease (`leases.py`) expired. Each step is a
named checkpoint (`CRASH_POINTS`) where tests stop the writer."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import replace
from typing import Protocol

import numpy as np

from retrieval_service.core.chunking import ChunkRecord
from retrieval_service.core.documents import (
    COMMITTED,
    LEVELS,
    PENDING,
    TOMBSTONE,
    DocKey,
    DocumentEntry,
    IngestedDocument,
    current_of,
    new_version,
    record_key,
    version_time_ms,
)
from retrieval_service.core.embedding import normalise
from retrieval_service.core.errors import STORE_FAILURES, StoreUnavailable
from retrieval_service.core.identity import Metadata
from retrieval_service.core.indexes.model import IndexesBehind
from retrieval_service.core.indexes.texts import pack_pages
from retrieval_service.core.ingest.leases import (
    AFTER_EVERY_LEASE,
    Clock,
    Lease,
    orphans,
    wall_clock_ms,
)
from retrieval_service.core.ingest.preparation import Prepared
from retrieval_service.core.ports import (
    NO_TELEMETRY,
    ChunkRepository,
    DocumentRegistry,
    StoredChunk,
    Telemetry,
    Written,
)

log = logging.getLogger(__name__)

#: Called with the name of each step of a write as it is reached (`CRASH_POINTS`). The
#: service passes a no-op; the kill-anywhere test hook (`SUPERMEW_CRASH_AT`, read by
#: `__main__`) ends the process there, and in-process tests pause there.
Checkpoint = Callable[[str], Awaitable[None]]
#: The steps of a knowledge base's forced deletion (`KnowledgeBases.delete`): its DELETING
#: mark written, its first level's rows removed, all its rows and records removed.
KB_DELETE_CRASH_POINTS = (
    "kb_delete_after_mark",
    "kb_delete_during_cleanup",
    "kb_delete_after_cleanup",
)
#: Every named step of an ingest, a delete and a knowledge base's deletion
#: (`KB_DELETE_CRASH_POINTS`), in order of first arrival. `during_level_N` is
#: reached after each write of level-N rows while their document is not yet committed: for a
#: document spanning several embedding windows, the first one comes with rows of that level
#: still to write.
CRASH_POINTS = (
    "before_write",
    "after_intent",
    "during_level_3",
    "during_level_2",
    "during_level_1",
    "before_commit",
    "after_commit",
    "during_cleanup",
    "after_cleanup",
    "delete_before_commit",
    "delete_after_commit",
    "delete_during_cleanup",
    "delete_after_cleanup",
    *KB_DELETE_CRASH_POINTS,
)


async def no_checkpoint(name: str) -> None:
    return None


#: One embedding window as the writer receives it: each leaf with the parents it completes,
#: its vector and its version.
Window = list[tuple["Version", ChunkRecord, tuple[ChunkRecord, ...], np.ndarray]]


class Version:
    """The new version of one document while its rows are written piecewise: the vectors of
    the leaves of each parent not yet written (a parent's vector is the normalised mean of
    its leaves'), so at most one L1's leaf vectors are held per document. A version `copying`
    a stored one (a change of metadata alone) has no parsed document: its rows are the
    source's, copied (`VersionProtocol.copy`)."""

    def __init__(self, doc: Prepared | None, index: int = 0, *, entry: DocumentEntry) -> None:
        self._doc = doc
        self.index = index  # the document's place in the request
        self.entry = entry
        self.source: DocumentEntry | None = None
        self.replaced = False
        self.committed = False
        self.leaves_left = doc.leaf_count if doc is not None else 0
        self._held: dict[str, list[np.ndarray]] = {}

    @classmethod
    def of(cls, doc: Prepared, index: int = 0) -> Version:
        """A new version of a parsed document, to embed and write."""
        version = new_version()
        entry = DocumentEntry(
            doc.filename,
            doc.file_type,
            doc.pages,
            doc.counts,
            version,
            PENDING,
            knowledge_base=doc.knowledge_base,
            document_id=doc.document_id,
            metadata=doc.metadata,
            content_sha256=doc.content_sha256,
            size_bytes=doc.size_bytes,
            ingest_time=version_time_ms(version),
            fingerprint=doc.fingerprint,
            text=pack_pages(doc.loaded),
        )
        return cls(doc, index, entry=entry)

    @classmethod
    def copying(
        cls, source: DocumentEntry, metadata: Metadata, fingerprint: str, index: int = 0
    ) -> Version:
        """A new version of the committed `source` that differs in its metadata alone: the
        same chunks (so the same row keys but for the version) and vectors."""
        version = new_version()
        entry = replace(
            source,
            version=version,
            state=PENDING,
            metadata=metadata,
            fingerprint=fingerprint,
            ingest_time=version_time_ms(version),
            lease_expires_ms=0,
        )
        v = cls(None, index, entry=entry)
        v.source = source
        return v

    @property
    def doc(self) -> Prepared:
        """The parsed document (a version that copies a stored one has none)."""
        if self._doc is None:
            raise ValueError(f"version {self.entry.version} copies a stored one: no document")
        return self._doc

    def take(
        self, leaf: ChunkRecord, closes: Sequence[ChunkRecord], vector: np.ndarray
    ) -> list[tuple[ChunkRecord, np.ndarray]]:
        """Records one embedded leaf; returns the parents it completes (`closes`), with their
        vectors."""
        self._held.setdefault(leaf.parent_chunk_id, []).append(vector)
        self._held.setdefault(leaf.root_chunk_id, []).append(vector)
        self.leaves_left -= 1
        return [
            (parent, normalise(np.mean(np.stack(self._held.pop(parent.chunk_id)), axis=0)))
            for parent in closes
        ]

    @property
    def holding(self) -> int:
        """How many parents' leaf vectors are held (0 once every parent is written)."""
        return len(self._held)

    def report(self) -> IngestedDocument:
        return IngestedDocument(
            filename=self.entry.filename,
            file_type=self.entry.file_type,
            pages=self.entry.pages,
            l1_chunks=self.entry.level_count(1),
            l2_chunks=self.entry.level_count(2),
            l3_chunks=self.entry.level_count(3),
            replaced=self.replaced,
            document_id=self.entry.document_id,
            content_sha256=self.entry.content_sha256,
            knowledge_base=self.entry.knowledge_base,
            metadata_only=self.source is not None,
        )


def stage(
    windows: list[Window], bm25_levels: frozenset[int] = frozenset(LEVELS)
) -> tuple[dict[int, list[StoredChunk]], list[Version]]:
    """The chunks of embedded windows to write (their leaves and every parent they complete)
    per level, and the versions they complete. Cheap: the store builds its rows (and their
    BM25 text) off the event loop."""
    staged: dict[int, list[StoredChunk]] = {lvl: [] for lvl in LEVELS}
    completed: list[Version] = []
    for window in windows:
        for v, leaf, closes, vector in window:
            e = v.entry
            stamp = (e.knowledge_base, e.document_id, e.metadata, e.ingest_time)
            staged[3].append(StoredChunk(leaf, vector, e.version, 3 in bm25_levels, *stamp))
            for parent, mean in v.take(leaf, closes, vector):
                level = parent.chunk_level
                staged[level].append(
                    StoredChunk(parent, mean, e.version, level in bm25_levels, *stamp)
                )
            if v.leaves_left == 0:
                completed.append(v)
    return staged, completed


#: Rounds of IndexesBehind a commit goes through before it gives up (each one a build that
#: read past its documents, or an index created, while it wrote).
CATCH_UP_ROUNDS = 5


class WriteTarget(Protocol):
    """Where one ingest writes: the index whose chunking and embedder made its rows
    (`chunks`), and every other index of the knowledge base (a build's, or one kept to switch
    back to), which gets each completed version too, chunked and embedded its own way
    (`core/indexes/generations.py`)."""

    @property
    def chunks(self) -> ChunkRepository: ...

    async def mirror(self, versions: Sequence[Version]) -> Written | None:
        """Writes these versions (not yet committed) into every other index that needs them
        now; which documents each index holds then (None: there is no other index to check
        at the commit)."""
        ...

    async def catch_up(
        self, versions: Sequence[Version], behind: frozenset[str], written: Written
    ) -> Written:
        """After the commit found indexes `behind` (IndexesBehind): writes the versions there."""
        ...

    async def mirror_copy(self, source: DocumentEntry, target: DocumentEntry) -> Written | None:
        """Copies `source`'s rows into `target`'s version in every other index that needs them
        now; which indexes hold it then (None: there is no other index to check)."""
        ...


class _Copied:
    """The target of a copy's commit: its rows are in every index that needed them already
    (`written`). An index that came to need them since (it appeared, or turned READY) gets
    nothing: the copy is not committed and the caller retries (UNAVAILABLE)."""

    def __init__(self, chunks: ChunkRepository, written: Written | None) -> None:
        self.chunks = chunks
        self._written = written

    async def mirror(self, versions: Sequence[Version]) -> Written | None:
        return self._written

    async def catch_up(
        self, versions: Sequence[Version], behind: frozenset[str], written: Written
    ) -> Written:
        raise StoreUnavailable(
            "the knowledge base's indexes changed while metadata was copied; nothing was "
            "committed, retry",
            dependency="database",
        )

    async def mirror_copy(self, source: DocumentEntry, target: DocumentEntry) -> Written | None:
        return self._written


class VersionProtocol:
    """The protocol's steps on the two store ports, each passing its checkpoints. The caller
    runs one step at a time per process (the ingestor's lock); across processes, versions
    order the writers. Store failures arrive as `STORE_FAILURES`. A write holds a `lease`
    (INGEST_LEASE_SECONDS, `lease_seconds`) on its unfinished records while it runs."""

    def __init__(
        self,
        chunks: ChunkRepository,
        registry: DocumentRegistry,
        checkpoint: Checkpoint,
        *,
        lease_seconds: float = 30.0,
        clock: Clock = wall_clock_ms,
        telemetry: Telemetry = NO_TELEMETRY,
    ) -> None:
        self._telemetry = telemetry
        self._chunks = chunks
        self._registry = registry
        self._checkpoint = checkpoint
        self._lease_seconds = lease_seconds
        self._clock = clock

    def lease(self) -> Lease:
        """A new lease for one write (`Lease.stop` it when the write ends)."""
        return Lease(self._registry, self._lease_seconds, self._clock)

    async def begin(self, versions: list[Version], lease: Lease) -> None:
        """The PENDING records of every document of the request, in one upsert, before any of
        their rows: each names all rows its version will have, so reconciliation can always
        find (and remove) the rows of a version that died. `lease` holds them from then on."""
        records = await self._records_of([v.entry for v in versions])
        for v in versions:
            keys = (record_key(r) for r in records.get(v.entry.key, []))
            current = current_of(keys).get(v.entry.key)
            v.replaced = current is not None and current.state == COMMITTED
        await self._checkpoint("before_write")
        await lease.take(v.entry for v in versions)
        await self._checkpoint("after_intent")

    async def commit(
        self,
        staged: dict[int, list[StoredChunk]],
        completed: list[Version],
        lease: Lease,
        target: WriteTarget | None = None,
    ) -> None:
        """One write: the staged rows (several documents', one write per level) into
        `target`'s index (None: this protocol's store), the completed documents into every
        other index `target` names (`WriteTarget.mirror`), then the commit records of the
        documents they complete, in one upsert (each record commits its own document: a
        crash between two leaves each document whole, old or new). Nothing is written once
        `lease` has lapsed (`LeaseLapsed`): another replica may be removing the version."""
        chunks = target.chunks if target is not None else self._chunks
        try:
            lease.check()
            for lvl in (3, 2, 1):  # leaves first: they are what the writer holds vectors for
                if staged[lvl]:
                    await chunks.write_chunks(lvl, staged[lvl])
                    await self._checkpoint(f"during_level_{lvl}")
            if not completed:
                return
            written = await target.mirror(completed) if target is not None else None
            await self._checkpoint("before_commit")
            committed = [
                replace(v.entry, state=COMMITTED, lease_expires_ms=0, text=b"") for v in completed
            ]
            for round_ in range(CATCH_UP_ROUNDS + 1):
                try:
                    async with lease.lock:  # no renewal of these records after their commit
                        lease.check()
                        # The commit: these versions are current.
                        await self._registry.put(*committed, written=written)
                        lease.drop(committed)
                    break
                except IndexesBehind as behind:
                    # A build read past these documents (or an index appeared) since the
                    # mirror looked: nothing committed; write them there, then commit.
                    if target is None or written is None or round_ == CATCH_UP_ROUNDS:
                        log.error("the indexes kept changing under a commit: %s", behind)
                        raise StoreUnavailable(
                            "the knowledge base's indexes kept changing during the commit; "
                            "nothing was committed",
                            dependency="database",
                        ) from behind
                    written = await target.catch_up(completed, behind.collections, written)
        except STORE_FAILURES:
            names = _named(c.document_id or c.record.filename for c in staged[3])
            log.error(
                "writing %d rows of %s failed; their previous versions stay current",
                sum(map(len, staged.values())),
                names,
            )
            raise
        for v, entry in zip(completed, committed, strict=True):
            v.entry, v.committed = entry, True
            self._telemetry.ingested(*(entry.level_count(lvl) for lvl in LEVELS))
        await self._checkpoint("after_commit")
        await self.settle([v.entry for v in completed])
        await self._checkpoint("after_cleanup")

    async def copy(self, version: Version, lease: Lease, target: WriteTarget | None = None) -> None:
        """Writes a `copying` version — its source's rows of every level under the new version
        with the new metadata, in `target`'s index and every other one it names, under the
        PENDING record `begin` wrote — then commits it as `commit` does. The source is
        committed and current when the request read it; if another writer removed its rows
        meanwhile (it replaced the document), the copy is incomplete and is not committed:
        StoreUnavailable, the caller retries."""
        source = version.source
        assert source is not None, "only a copying version is copied"
        lease.check()
        chunks = target.chunks if target is not None else self._chunks
        for lvl in (3, 2, 1):
            copied = await chunks.copy_rows(lvl, source, version.entry)
            # The record counts the chunks of the index that wrote it: another index's
            # chunking has others, so only "none left" is sure to be a removal.
            expected = source.level_count(lvl)
            if copied != expected and (target is None or copied == 0):
                log.warning(
                    "%s changed while its metadata was copied; nothing committed",
                    version.entry.document_id,
                )
                raise StoreUnavailable(
                    f"documents[{version.index}] was replaced by another writer while its "
                    "metadata changed; retry"
                )
            await self._checkpoint(f"during_level_{lvl}")
        written = await target.mirror_copy(source, version.entry) if target is not None else None
        await self.commit({lvl: [] for lvl in LEVELS}, [version], lease, _Copied(chunks, written))

    async def seal(self) -> None:
        """The rows are written (and durable in Milvus's log) by now; sealing only makes them
        fast to search, so a failure is logged and the request still succeeds."""
        try:
            await self._chunks.seal()
        except STORE_FAILURES:
            log.warning("could not flush the written rows into indexed segments")

    async def discard_quietly(self, entries: list[DocumentEntry]) -> None:
        """Removes versions that will never commit (rows first, records last)."""
        try:
            await self.remove(entries, "discard")
        except STORE_FAILURES:
            # The write's own error is what the caller hears; reconciliation removes the rest.
            log.error(
                "removing the uncommitted versions of %s failed",
                _named(e.document_id for e in entries),
            )

    async def settle(self, entries: list[DocumentEntry]) -> None:
        """After a commit, per document: if a newer version was committed meanwhile (another
        replica won), this one is removed; otherwise the older committed versions are. One
        registry query and one delete per level for all of them. Failures are logged: the
        commits stand and reconciliation finishes the job."""
        try:
            records = await self._records_of(entries)
            doomed: list[DocumentEntry] = []
            for entry in entries:
                mine = records.get(entry.key, [])
                current = current_of(record_key(r) for r in mine)
                winner = current.get(entry.key)
                if winner is not None and winner.version != entry.version:
                    log.info("a newer version of %s was committed meanwhile", entry.document_id)
                    doomed.append(entry)
                    continue
                doomed += [r for r in mine if r.state != PENDING and r.version < entry.version]
            await self.remove(doomed, "during_cleanup")
        except STORE_FAILURES:
            log.error(
                "removing older versions of %s failed", _named(e.document_id for e in entries)
            )

    async def _records_of(
        self, entries: Sequence[DocumentEntry]
    ) -> dict[DocKey, list[DocumentEntry]]:
        """Every record of the documents of `entries`, by (knowledge base, document_id): one
        registry query per knowledge base."""
        by_kb: dict[str, list[str]] = {}
        for e in entries:
            by_kb.setdefault(e.knowledge_base, []).append(e.document_id)
        out: dict[DocKey, list[DocumentEntry]] = {}
        for kb, ids in by_kb.items():
            for document_id, records in (await self._registry.records_of(ids, kb)).items():
                out[(kb, document_id)] = records
        return out

    async def remove(self, entries: list[DocumentEntry], checkpoint: str) -> int:
        """Removes whole versions, rows first (one delete per level for all of them) and
        records last, so a record always names every row that may exist."""
        if not entries:
            return 0
        deleted = 0
        for lvl in LEVELS:
            # By version, not by the ids the record's counts name: every index's rows go.
            deleted += await self._chunks.delete_versions(lvl, entries)
            if lvl == 1:
                await self._checkpoint(checkpoint)
        await self._registry.remove(entries)
        return deleted

    async def delete(self, document_id: str, knowledge_base: str) -> int:
        """Deletes one document (a TOMBSTONE commit, then its older versions' rows and
        records); returns the rows deleted, 0 for an unknown one. The tombstone holds a lease
        while the delete runs."""
        current = await self._registry.get(document_id, knowledge_base)
        if current is None:
            return 0
        lease = self.lease()
        try:
            return await self._delete(current, lease)
        finally:
            await lease.stop()

    async def _delete(self, current: DocumentEntry, lease: Lease) -> int:
        document_id, knowledge_base = current.document_id, current.knowledge_base
        tombstone = DocumentEntry(
            current.filename,
            "",
            0,
            {},
            new_version(),
            TOMBSTONE,
            knowledge_base=knowledge_base,
            document_id=document_id,
        )
        await self._checkpoint("delete_before_commit")
        await lease.take([tombstone])  # the commit: from here on the document is gone
        await self._checkpoint("delete_after_commit")
        records = await self._registry.records(document_id, knowledge_base)
        older = [r for r in records if r.state != PENDING and r.version < tombstone.version]
        deleted = await self.remove(older, "delete_during_cleanup")
        # Rows of versions no committed record names (a crashed or superseded writer's):
        # older than the tombstone, so they can never become current.
        for lvl in LEVELS:
            deleted += await self._chunks.delete_older(
                lvl, document_id, tombstone.version, knowledge_base
            )
        await self._checkpoint("delete_after_cleanup")
        return deleted

    async def purge(self, knowledge_base: str) -> int:
        """Removes every row, then every record, of one knowledge base (its deletion, after
        it was marked DELETING): rows first, so a record always names rows that may exist.
        Returns the rows deleted."""
        deleted = 0
        for lvl in LEVELS:
            deleted += await self._chunks.delete_knowledge_base(lvl, knowledge_base)
            if lvl == 1:
                await self._checkpoint("kb_delete_during_cleanup")
        keys = await self._registry.scan(knowledge_base)
        await self._registry.remove(keys)
        await self.seal()
        await self._checkpoint("kb_delete_after_cleanup")
        return deleted

    async def reconcile(self, *, sole_writer: bool = False) -> int:
        """Removes what crashed or superseded writers left (`leases.orphaned`): records (and
        their rows) older than their document's current version, uncommitted versions whose
        lease expired, tombstones whose lease expired. `sole_writer`: this process is the
        store's only writer (embedded Milvus Lite at start-up), so every lease in the store is
        a dead process's. Returns the number of records removed; seals when it removed any."""
        keys = await self._registry.scan()
        stale = orphans(keys, AFTER_EVERY_LEASE if sole_writer else self._clock())
        if not stale:
            return 0
        entries = await self._registry.full(stale)
        await self.remove(entries, "reconcile")
        await self.seal()
        for state, name in _STATE_NAMES.items():
            self._telemetry.reclaimed(name, sum(e.state == state for e in entries))
        log.info("reconciliation removed %d stale document versions", len(entries))
        return len(entries)


_STATE_NAMES = {PENDING: "pending", COMMITTED: "committed", TOMBSTONE: "tombstone"}


def _named(document_ids: Iterable[str], most: int = 5) -> str:
    """Up to `most` document ids for a log line, and how many more there are."""
    names = sorted(set(document_ids))
    shown = ", ".join(names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")
