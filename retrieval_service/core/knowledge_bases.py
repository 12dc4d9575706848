"""Knowledge bases (docs/api.md#knowledge-bases): their records, and Create, Get, List, Update
and Delete over the knowledge-base store and the document registry. `knowledge_bases/default`
is created on the first start and never deleted. A deletion with `force` first marks the
knowledge base DELETING (from that instant it is NOT_FOUND everywhere), then removes its rows
and records (`VersionProtocol.purge`), then its own record; `reconcile` finishes a deletion a
crash interrupted, so after a restart a knowledge base is whole or gone.

The DELETING mark carries the deleter's lease (INGEST_LEASE_SECONDS), renewed while its purge
runs: every replica reconciles, and one that finished a deletion still under way elsewhere
could remove the record — or the rows — of a knowledge base created again under the same name
right after the first deletion returned. So reconciliation claims a DELETING record only once
its lease expired (compare-and-set), and the record is removed only by its current deleter."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace

from retrieval_service.core.documents import (
    decode_page_token,
    encode_page_token,
)
from retrieval_service.core.errors import STORE_FAILURES
from retrieval_service.core.identity import DEFAULT_KB, check_kb_id, kb_id_of, kb_name
from retrieval_service.core.ingest.leases import Clock, wall_clock_ms
from retrieval_service.core.ingest.validation import list_page_size
from retrieval_service.core.ports import DocumentRegistry, KnowledgeBaseStore
from shared.errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound

log = logging.getLogger(__name__)

ACTIVE, DELETING = 0, 1
#: Later than any lease: what a sole writer's reconciliation compares leases with.
_FOREVER_MS = 2**62
UPDATABLE = ("display_name", "description")
#: The longest display_name and description, in characters (the store keeps 4 bytes each).
MAX_DISPLAY_NAME_CHARS = 256
MAX_DESCRIPTION_CHARS = 4096


def _check_texts(display_name: str, description: str, prefix: str) -> None:
    if len(display_name) > MAX_DISPLAY_NAME_CHARS:
        raise InvalidArgument(
            f"{prefix}display_name", f"is longer than {MAX_DISPLAY_NAME_CHARS} characters"
        )
    if len(description) > MAX_DESCRIPTION_CHARS:
        raise InvalidArgument(
            f"{prefix}description", f"is longer than {MAX_DESCRIPTION_CHARS} characters"
        )


def _named(text: str, field: str) -> str:
    """Get, Update and Delete name their knowledge base explicitly (AIP-131/134/135): an empty
    name is the caller's mistake, not the default."""
    if not text.strip():
        raise InvalidArgument(field, "must name a knowledge base (knowledge_bases/{id})")
    return text


@dataclass(frozen=True, slots=True)
class KnowledgeBaseRecord:
    """One knowledge base as stored: its full name, texts, creation instant (epoch ms) and
    state (ACTIVE, or DELETING once a forced deletion has begun)."""

    name: str
    display_name: str = ""
    description: str = ""
    create_time: int = 0
    state: int = ACTIVE
    #: The id of the index every read uses (docs/api.md#indexes).
    active_index: str = "initial"


@dataclass(frozen=True, slots=True)
class KnowledgeBase:
    """A knowledge base as Get and List answer: its record and current counts."""

    record: KnowledgeBaseRecord
    document_count: int
    chunk_count: int


@dataclass(frozen=True, slots=True)
class KnowledgeBasePage:
    knowledge_bases: list[KnowledgeBase]
    next_page_token: str


#: Removes every row and record of a knowledge base (the ingestor's `purge`, under its lock).
Purge = Callable[[str], Awaitable[int]]
#: Called at each named step of a deletion (`versions.CRASH_POINTS`).
Checkpoint = Callable[[str], Awaitable[None]]
#: `activate(knowledge_base, index_name)`: the switch of its active index (`Indexes.activate`).
Activate = Callable[[str, str], Awaitable[None]]
#: Called with the full name of each knowledge base created (its `initial` index).
Created = Callable[[str], Awaitable[None]]


async def _no_checkpoint(name: str) -> None:
    return None


class KnowledgeBases:
    """The knowledge-base RPCs, and the check every other request makes of the knowledge
    bases it names (`require`)."""

    def __init__(
        self,
        store: KnowledgeBaseStore,
        registry: DocumentRegistry,
        purge: Purge,
        checkpoint: Checkpoint = _no_checkpoint,
        *,
        lease_seconds: float = 30.0,
        clock: Clock = wall_clock_ms,
        activate: Activate | None = None,
        on_created: Created | None = None,
    ) -> None:
        """`activate`: switches a knowledge base's active index (None: `active_index` is not
        updatable); `on_created`: gives a new knowledge base its initial index."""
        self._activate = activate
        self._on_created = on_created
        self._store = store
        self._registry = registry
        self._purge = purge
        self._checkpoint = checkpoint
        self._lease_ms = max(1, round(lease_seconds * 1000))
        self._clock = clock
        #: This process as a deleter: the owner of the DELETING marks it holds.
        self._owner = secrets.token_hex(8)

    async def require(self, text: str, field: str) -> str:
        """The full name of an existing (ACTIVE) knowledge base a request names ("" = the
        default); INVALID_ARGUMENT for a malformed name, NOT_FOUND for an unknown one."""
        name = kb_name(text, field)
        record = await self._store.get(name)
        if record is None or record.state != ACTIVE:
            raise NotFound(field, f"knowledge base {name!r} does not exist")
        return name

    async def _active(self, name: str, field: str) -> KnowledgeBaseRecord:
        """The ACTIVE record of `name`; NOT_FOUND when another call deleted it meanwhile."""
        record = await self._store.get(name)
        if record is None or record.state != ACTIVE:
            raise NotFound(field, f"knowledge base {name!r} does not exist")
        return record

    async def require_all(self, texts: Sequence[str], field: str) -> tuple[str, ...]:
        """`require` for each of a repeated field (`field[i]`); empty = the default."""
        if not texts:
            return (await self.require("", field),)
        names = [await self.require(t, f"{field}[{i}]") for i, t in enumerate(texts)]
        return tuple(dict.fromkeys(names))

    async def ensure_default(self) -> None:
        """Creates `knowledge_bases/default` when the store has none (the first start)."""
        record = KnowledgeBaseRecord(DEFAULT_KB, "Default", "", int(time.time() * 1000))
        if await self._store.create(record):
            log.info("created %s", DEFAULT_KB)

    # ---- the RPCs --------------------------------------------------------------------------

    async def create(
        self, kb_id: str, display_name: str = "", description: str = ""
    ) -> KnowledgeBase:
        name = "knowledge_bases/" + check_kb_id(kb_id, "knowledge_base_id")
        _check_texts(display_name, description, "knowledge_base.")
        record = KnowledgeBaseRecord(name, display_name, description, int(time.time() * 1000))
        if not await self._store.create(record):  # atomic: one of concurrent creates wins
            raise AlreadyExists("knowledge_base_id", f"{name!r} already exists")
        if self._on_created is not None:
            await self._on_created(name)
        return KnowledgeBase(record, 0, 0)

    async def get(
        self, text: str, field: str = "name", *, groups: frozenset[str] | None = None
    ) -> KnowledgeBase:
        """The knowledge base with the counts of the documents visible to `groups` (None:
        all)."""
        name = await self.require(_named(text, field), field)
        return (await self._counted([await self._active(name, field)], groups))[0]

    async def list_page(
        self,
        page_size: int,
        page_token: str,
        *,
        usable: Callable[[str], bool] = lambda _kb_id: True,
        groups: frozenset[str] | None = None,
    ) -> KnowledgeBasePage:
        """One page of the knowledge bases whose id `usable` admits (a key's own), each with
        the counts of the documents visible to `groups`."""
        size = list_page_size(page_size)
        after = decode_page_token(page_token) if page_token else ""
        live = sorted(
            (
                r
                for r in await self._store.all()
                if r.state == ACTIVE and r.name > after and usable(kb_id_of(r.name))
            ),
            key=lambda r: r.name,
        )
        page = live[:size]
        token = encode_page_token(page[-1].name) if len(live) > size and page else ""
        return KnowledgeBasePage(await self._counted(page, groups), token)

    async def update(
        self,
        name_text: str,
        display_name: str,
        description: str,
        paths: Sequence[str],
        *,
        groups: frozenset[str] | None = None,
        active_index: str = "",
    ) -> KnowledgeBase:
        """Changes the texts `paths` name (none: both), and with "active_index" switches the
        active index to `active_index` first (`Indexes.activate`)."""
        updatable = (*UPDATABLE, "active_index") if self._activate is not None else UPDATABLE
        for i, path in enumerate(paths):
            if path not in updatable:
                raise InvalidArgument(
                    "update_mask", f"paths[{i}] {path!r} is not one of {', '.join(updatable)}"
                )
        name = await self.require(_named(name_text, "knowledge_base.name"), "knowledge_base.name")
        if "active_index" in paths and self._activate is not None:
            await self._activate(name, active_index)
            paths = [p for p in paths if p != "active_index"]
            if not paths:
                return (
                    await self._counted([await self._active(name, "knowledge_base.name")], groups)
                )[0]
        _check_texts(
            display_name if "display_name" in set(paths or UPDATABLE) else "",
            description if "description" in set(paths or UPDATABLE) else "",
            "knowledge_base.",
        )
        record = await self._active(name, "knowledge_base.name")
        wanted = set(paths or UPDATABLE)
        if "display_name" in wanted:
            record = replace(record, display_name=display_name)
        if "description" in wanted:
            record = replace(record, description=description)
        if not await self._store.update(record):  # deleted meanwhile (on any replica)
            raise NotFound("knowledge_base.name", f"knowledge base {name!r} does not exist")
        return (await self._counted([record], groups))[0]

    async def delete(self, text: str, force: bool) -> None:
        name = await self.require(_named(text, "name"), "name")
        if name == DEFAULT_KB:
            raise FailedPrecondition("name", f"{DEFAULT_KB} cannot be deleted")
        record = await self._active(name, "name")
        if not force and (await self._counted([record]))[0].document_count:
            raise FailedPrecondition(
                "name", f"{name!r} still holds documents; delete them or pass force"
            )
        marked = await self._store.mark_deleting(name, self._owner, self._until())
        if not marked:  # from here on: NOT_FOUND
            raise NotFound("name", f"knowledge base {name!r} does not exist")
        await self._checkpoint("kb_delete_after_mark")
        await self._finish_delete(name)

    def _until(self) -> int:
        return self._clock() + self._lease_ms

    async def _finish_delete(self, name: str) -> None:
        """Purges the knowledge base's rows and records, renewing the DELETING lease every
        third of it meanwhile, then removes the record if it is still this deleter's."""
        renewer = asyncio.ensure_future(self._renew(name))
        try:
            await self._purge(name)
        finally:
            renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewer
        if await self._store.remove_deleted(name, self._owner):
            log.info("deleted %s", name)
        else:
            log.warning("the deletion of %s was taken over by another replica", name)

    async def _renew(self, name: str) -> None:
        while True:
            await asyncio.sleep(self._lease_ms / 3000)
            try:
                if not await self._store.renew_deleting(name, self._owner, self._until()):
                    log.warning("lost the deletion lease of %s", name)
                    return
            except STORE_FAILURES:  # a failed renewal is retried at the next period
                log.warning("could not renew the deletion lease of %s", name, exc_info=True)

    async def reconcile(self, *, sole_writer: bool = False) -> int:
        """Finishes every deletion a crash interrupted: knowledge bases left DELETING whose
        deleter's lease expired, each claimed first; returns how many. `sole_writer` (embedded
        Lite at start-up: no other process can be deleting) claims them whatever their lease."""
        now = self._clock()
        expired_before = _FOREVER_MS if sole_writer else now
        doomed = await self._store.claim_deleting(self._owner, expired_before, now + self._lease_ms)
        for name in doomed:
            log.info("finishing the interrupted deletion of %s", name)
            await self._finish_delete(name)
        return len(doomed)

    # ---- counts ----------------------------------------------------------------------------

    async def _counted(
        self, records: Sequence[KnowledgeBaseRecord], groups: frozenset[str] | None = None
    ) -> list[KnowledgeBase]:
        """Each record with its current documents visible to `groups` (None: all) and their
        chunks over all levels (the registry's counts: no chunk is scanned)."""
        if not records:
            return []
        counts = await self._registry.counts([r.name for r in records], groups)
        return [KnowledgeBase(r, *counts.get(r.name, (0, 0))) for r in records]
