"""Leases of writers in flight (retrieval_service/README.md "Crash safety"): an ingest, replace
or delete holds a lease in the registry records it has not finished — a PENDING version's, a
delete's TOMBSTONE while it cleans up — an expiry instant renewed every third of
INGEST_LEASE_SECONDS while it runs. Reconciliation, on any replica, removes an uncommitted
version only once its lease has expired (`orphaned`), so an ingest however long is never
removed while its writer lives, and a killed writer's rows go within about two lease periods.
Lease instants are wall-clock epoch milliseconds, as versions are: the replicas' clocks must
agree to well within a lease."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace

from retrieval_service.core.documents import (
    COMMITTED,
    PENDING,
    DocKey,
    DocumentEntry,
    RecordKey,
    current_of,
    version_time_ms,
)
from retrieval_service.core.errors import STORE_FAILURES, StoreUnavailable
from retrieval_service.core.ports import DocumentRegistry
from shared.errors import NotFound

log = logging.getLogger(__name__)

#: Epoch milliseconds now; injected so the lease rule is tested without sleeping.
Clock = Callable[[], int]
#: How long a record that carries no lease (written before leases existed: its lease field is
#: not after its version's start) is presumed to be in flight, from its version's start: the
#: grace reconciliation used to give every uncommitted version.
UNLEASED_LIFETIME_MS = 3_600_000
#: A time after every lease: reconciliation by a process that is the store's only writer
#: (embedded Milvus Lite at start-up), for which every uncommitted version is dead.
AFTER_EVERY_LEASE = 2**62


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def lease_expiry_ms(key: RecordKey) -> int:
    """When the lease of a PENDING or TOMBSTONE record expires (epoch ms)."""
    started = version_time_ms(key.version)
    if key.lease_expires_ms > started:
        return key.lease_expires_ms
    return started + UNLEASED_LIFETIME_MS


def orphaned(key: RecordKey, document: Sequence[RecordKey], now_ms: int) -> bool:
    """Whether reconciliation removes `key`, one of `document` (every record of its
    document), at `now_ms`:

    - PENDING: once its lease expired (older or newer than the current version alike);
    - COMMITTED: once older than the current version;
    - TOMBSTONE: once older than the current version, or once its lease expired while no
      older PENDING version of the document holds a live lease (one that could still commit
      and bring the document back).
    """
    if key.state == PENDING:
        return lease_expiry_ms(key) <= now_ms
    current = current_of(document).get(key.key)
    if current is not None and key.version < current.version:
        return True
    if key.state == COMMITTED or lease_expiry_ms(key) > now_ms:
        return False
    return not any(
        r.state == PENDING and r.version < key.version and lease_expiry_ms(r) > now_ms
        for r in document
    )


def orphans(keys: Iterable[RecordKey], now_ms: int) -> list[RecordKey]:
    """The records of a registry scan that reconciliation removes at `now_ms` (`orphaned`)."""
    documents: dict[DocKey, list[RecordKey]] = {}
    for key in keys:
        documents.setdefault(key.key, []).append(key)
    return [k for doc in documents.values() for k in doc if orphaned(k, doc, now_ms)]


class LeaseLapsed(StoreUnavailable):
    """The writer could not renew its lease in time: another replica may already be removing
    its version, so it commits nothing (UNAVAILABLE; the caller may retry)."""

    def __init__(self) -> None:
        super().__init__(
            "the write's lease in the document registry could not be renewed in time; "
            "nothing was committed"
        )


def _pk(entry: DocumentEntry) -> tuple[str, str, str]:
    return (entry.knowledge_base, entry.document_id, entry.version)


class Lease:
    """One writer's lease on the records it holds (`take`), renewed every third of the lease
    by a task that lives from the first `take` to `stop`. A renewal rewrites the held records
    with a later expiry; the writer's own writes of those records (its commit) go under
    `lock` after `check`, and `drop` them, so a renewal never turns a committed record back
    into a PENDING one. A renewal that fails is logged and tried again at the next period;
    once less than a sixth of the lease is left, the lease is lost for good and `check`
    raises `LeaseLapsed`."""

    def __init__(self, registry: DocumentRegistry, seconds: float, clock: Clock) -> None:
        self._registry = registry
        self._ms = max(1, round(seconds * 1000))
        self._clock = clock
        self._held: dict[tuple[str, str, str], DocumentEntry] = {}
        self._expires_ms = 0
        self._lost = False
        self._gone: NotFound | None = None
        self._stopped = False
        self._task: asyncio.Task[None] | None = None
        self.lock = asyncio.Lock()

    @property
    def _margin_ms(self) -> int:
        return self._ms // 6

    def _usable(self) -> bool:
        if not self._lost and self._clock() > self._expires_ms - self._margin_ms:
            self._lost = True
        return not self._lost

    def check(self) -> None:
        """Raises `LeaseLapsed` unless the lease is safely live (call under `lock`); the
        renewal's NOT_FOUND when the knowledge base was deleted meanwhile."""
        if self._gone is not None:
            raise self._gone
        if not self._usable():
            raise LeaseLapsed()

    async def take(self, entries: Iterable[DocumentEntry]) -> list[DocumentEntry]:
        """Writes `entries` (PENDING versions, or a delete's tombstone: the write is theirs)
        with a fresh lease in one upsert, holds them, and starts renewing; returns them as
        written."""
        async with self.lock:
            expires = self._clock() + self._ms
            records = [replace(e, lease_expires_ms=expires) for e in entries]
            await self._registry.put(*records)
            # The text went in with the intent; a renewal need not send it again.
            self._held.update((_pk(r), replace(r, text=b"")) for r in records)
            self._expires_ms = expires
        if self._task is None and not self._stopped:
            self._task = asyncio.ensure_future(self._keep())
        return records

    def drop(self, entries: Iterable[DocumentEntry]) -> None:
        """Stops renewing these records (their writer committed or removed them)."""
        for entry in entries:
            self._held.pop(_pk(entry), None)

    async def renew(self) -> None:
        """Rewrites the held records with a lease from now (one upsert)."""
        async with self.lock:
            if self._stopped or not self._held:
                return
            self.check()
            expires = self._clock() + self._ms
            records = [replace(e, lease_expires_ms=expires) for e in self._held.values()]
            await self._registry.put(*records)
            self._held = {_pk(r): r for r in records}
            self._expires_ms = expires

    async def _keep(self) -> None:
        while True:
            await asyncio.sleep(self._ms / 3000)
            try:
                await self.renew()
            except LeaseLapsed:
                log.error("the lease of %s lapsed; the write will commit nothing", self._named())
                return
            except NotFound as gone:
                # The knowledge base was deleted meanwhile: the write can never commit.
                self._lost, self._gone = True, gone
                log.error(
                    "the knowledge base of %s is gone; the write will commit nothing", self._named()
                )
                return
            except STORE_FAILURES:
                left = max(0, self._expires_ms - self._clock()) / 1000
                log.error(
                    "renewing the lease of %s failed (%.1f s left); retrying in %.1f s",
                    self._named(),
                    left,
                    self._ms / 3000,
                )

    def _named(self) -> str:
        names = sorted({doc for _, doc, _ in self._held})
        return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")

    async def stop(self) -> None:
        """Ends renewal once no renewal is being written (the held records' leases then run
        out on their own)."""
        async with self.lock:
            self._stopped = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
