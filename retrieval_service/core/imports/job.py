"""One import (docs/api.md#imports): list the sources, refuse a `delete_missing` that would
delete more than `max_deletion_percent` before anything changes, then read and ingest the
documents batch by batch through the `Ingestor` (so every document ends old or new, never
mixed, and unchanged ones are not embedded), then delete what the sources no longer hold.

The job keeps its place in an `ImportCheckpoint` that the runner stores with the operation
after every batch: a runner that takes a job over after a kill starts at the first batch not
yet committed, so only the batch in flight is done again."""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Final, Protocol

from retrieval_service.core.identity import canonical_json, check_document_id
from retrieval_service.core.imports.source import Entry, Source, selected
from retrieval_service.core.ingest import IngestedDocument, Ingestor, SourceDocument
from shared.errors import (
    DependencyUnavailable,
    DomainError,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
)

log = logging.getLogger(__name__)

#: Documents per ingest call of an import.
IMPORT_CALL_DOCUMENTS: Final = 48
#: Ingest calls one import keeps in flight: the next call parses and embeds while the one
#: before it commits (one call at a time left the embedder idle at each call's ends).
IMPORT_CALLS_IN_FLIGHT: Final = 3
#: The documents one import has in flight: at most what a takeover after a kill does again.
IMPORT_BATCH_DOCUMENTS: Final = IMPORT_CALL_DOCUMENTS * IMPORT_CALLS_IN_FLIGHT
#: ImportDocumentsResponse.failures holds at most this many (the counts hold them all).
MAX_FAILURES: Final = 1000
DEFAULT_MAX_DELETION_PERCENT: Final = 50


@dataclass(frozen=True, slots=True)
class ImportSpec:
    """An ImportDocumentsRequest once checked: the knowledge base's full name, the sources, the
    globs, the metadata over every sidecar, and the deletion guard (0 resolved to 50)."""

    knowledge_base: str
    uris: tuple[str, ...]
    include_globs: tuple[str, ...] = ()
    exclude_globs: tuple[str, ...] = ()
    metadata: Mapping[str, Any] = field(default_factory=dict)
    delete_missing: bool = False
    max_deletion_percent: int = DEFAULT_MAX_DELETION_PERCENT
    #: The access groups of the key that started it (None: sees every document): an import
    #: may not replace a document its key cannot see.
    groups: frozenset[str] | None = None


@dataclass
class ImportCounts:
    """ImportDocumentsMetadata's counts."""

    total: int = 0
    new: int = 0
    replaced: int = 0
    unchanged: int = 0
    deleted: int = 0
    failed: int = 0
    skipped: int = 0
    leaves_written: int = 0

    @property
    def done(self) -> int:
        return self.new + self.replaced + self.unchanged + self.failed

    def percent(self) -> int:
        return min(100, self.done * 100 // self.total) if self.total else 0


@dataclass(frozen=True, slots=True)
class ImportFailed:
    """One document the import could not bring in: its uri, document_id and why (the status
    code's name and message an ingest of it would have answered)."""

    uri: str
    document_id: str
    code: str
    message: str


#: The status code name of each domain error a document can fail with; anything else stops
#: the whole import (a store or embedder that is down).
_DOCUMENT_ERRORS: Final[Mapping[type[DomainError], str]] = {
    InvalidArgument: "INVALID_ARGUMENT",
    PermissionDenied: "PERMISSION_DENIED",
    NotFound: "NOT_FOUND",
}


def document_error_code(error: DomainError) -> str | None:
    for kind, code in _DOCUMENT_ERRORS.items():
        if isinstance(error, kind):
            return code
    return None


@dataclass
class ImportCheckpoint:
    """Where a job is: its counts, the documents finished in listing order (`cursor`), the
    failures kept, and whether it was listed; stored with the operation (JSON)."""

    counts: ImportCounts = field(default_factory=ImportCounts)
    cursor: int = 0
    listed: bool = False
    failures: list[ImportFailed] = field(default_factory=list)
    cancelled: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "counts": asdict(self.counts),
            "cursor": self.cursor,
            "listed": self.listed,
            "failures": [asdict(f) for f in self.failures],
            "cancelled": self.cancelled,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ImportCheckpoint:
        return cls(
            counts=ImportCounts(**data.get("counts", {})),
            cursor=int(data.get("cursor", 0)),
            listed=bool(data.get("listed", False)),
            failures=[ImportFailed(**f) for f in data.get("failures", [])],
            cancelled=bool(data.get("cancelled", False)),
        )

    def fail(self, failure: ImportFailed) -> None:
        self.counts.failed += 1
        if len(self.failures) < MAX_FAILURES:
            self.failures.append(failure)

    def absorb(self, batch: ImportCheckpoint) -> None:
        """Adds a finished batch's document counts and failures (its own checkpoint)."""
        self.counts.new += batch.counts.new
        self.counts.replaced += batch.counts.replaced
        self.counts.unchanged += batch.counts.unchanged
        self.counts.failed += batch.counts.failed
        self.counts.leaves_written += batch.counts.leaves_written
        self.failures.extend(batch.failures[: max(0, MAX_FAILURES - len(self.failures))])


class SourceRecords(Protocol):
    """Which source brought each document in (the `import_sources` table)."""

    async def imported_from(self, knowledge_base: str, source: str) -> dict[str, str]: ...

    async def remember(
        self, knowledge_base: str, source: str, hints: Sequence[tuple[str, str]]
    ) -> None: ...

    async def forget(self, knowledge_base: str, document_ids: Sequence[str]) -> None: ...


class Progress(Protocol):
    """The runner's side: `save` stores the checkpoint with the operation (renewing its
    lease) and says whether a cancel was requested; `cancel_requested` is what the last save
    or heartbeat heard."""

    async def save(self, checkpoint: ImportCheckpoint) -> bool: ...

    @property
    def cancel_requested(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class _Work:
    source: str
    entry: Entry
    hint: str


def _digest(metadata: Mapping[str, Any]) -> str:
    return hashlib.sha256(canonical_json(dict(metadata)).encode()).hexdigest()[:16]


class ImportJob:
    """Runs one import spec against the ingestor; `open_source` gives the Source of a uri (the
    settings were checked when the import was requested)."""

    def __init__(
        self,
        spec: ImportSpec,
        *,
        open_source: Callable[[str], Source],
        ingestor: Ingestor,
        records: SourceRecords,
        progress: Progress,
        batch: int = IMPORT_CALL_DOCUMENTS,
        in_flight: int = IMPORT_CALLS_IN_FLIGHT,
        on_document: Callable[[str], None] | None = None,
    ) -> None:
        self._spec = spec
        self._open = open_source
        self._ingestor = ingestor
        self._records = records
        self._progress = progress
        self._batch = batch
        self._in_flight = in_flight
        self._on_document = on_document
        self._metadata_digest = _digest(spec.metadata)

    async def run(self, checkpoint: ImportCheckpoint) -> ImportCheckpoint:
        """The finished checkpoint (`cancelled` when a cancel stopped it between two batches).
        Raises the DomainError that failed the whole import (FAILED_PRECONDITION for the
        deletion guard, UNAVAILABLE for a store or embedder that is down)."""
        spec = self._spec
        if self._progress.cancel_requested:  # cancelled while queued: read nothing
            checkpoint.cancelled = True
            return checkpoint
        sources = {uri: self._open(uri) for uri in spec.uris}
        work, refused, skipped, previous = await self._list(sources)
        missing = self._guard_deletions(work, previous)
        if not checkpoint.listed:
            checkpoint = replace(
                checkpoint,
                counts=replace(checkpoint.counts, total=len(work) + len(refused), skipped=skipped),
                listed=True,
            )
            for failure in refused:
                checkpoint.fail(failure)
            await self._progress.save(checkpoint)
        running: deque[tuple[int, ImportCheckpoint, asyncio.Task[None]]] = deque()
        start = checkpoint.cursor
        try:
            while start < len(work) or running:
                while (
                    len(running) < self._in_flight
                    and start < len(work)
                    and not self._progress.cancel_requested
                ):
                    batch = work[start : start + self._batch]
                    tally = ImportCheckpoint()
                    task = asyncio.ensure_future(
                        self._import_batch(batch, sources, previous, tally)
                    )
                    start += len(batch)
                    running.append((start, tally, task))
                if not running:
                    break  # cancelled: nothing more started
                end, tally, oldest = running.popleft()
                await oldest
                # The cursor moves over whole batches in listing order only, so a takeover
                # starts at the first document that may not be committed; a batch's counts
                # join the checkpoint with it, never before (a batch done again after a
                # takeover is counted once).
                checkpoint.absorb(tally)
                checkpoint.cursor = end
                await self._progress.save(checkpoint)
        finally:
            for _, _, task in running:
                task.cancel()
            await asyncio.gather(*(task for _, _, task in running), return_exceptions=True)
            await self._ingestor.seal()
        if self._progress.cancel_requested and checkpoint.cursor < len(work):
            checkpoint.cancelled = True
            return checkpoint
        if missing:
            checkpoint.counts.deleted += await self._delete(missing)
            await self._progress.save(checkpoint)
        return checkpoint

    # ---- listing and the deletion guard ---------------------------------------------------

    async def _list(
        self, sources: Mapping[str, Source]
    ) -> tuple[list[_Work], list[ImportFailed], int, dict[str, dict[str, str]]]:
        spec = self._spec
        work: list[_Work] = []
        refused: list[ImportFailed] = []
        skipped = 0
        seen: set[str] = set()
        previous: dict[str, dict[str, str]] = {}
        for uri, source in sources.items():
            listing = await source.listing()
            previous[uri] = await self._records.imported_from(spec.knowledge_base, uri)
            skipped += len(listing.skipped)
            for entry, why in listing.refused:
                if selected(entry.document_id, spec.include_globs, spec.exclude_globs):
                    refused.append(
                        ImportFailed(entry.uri, entry.document_id, "PERMISSION_DENIED", why)
                    )
            for entry in listing.entries:
                if not selected(entry.document_id, spec.include_globs, spec.exclude_globs):
                    continue
                if entry.document_id in seen:
                    refused.append(
                        ImportFailed(
                            entry.uri,
                            entry.document_id,
                            "INVALID_ARGUMENT",
                            "document_id: appears in two of the import's sources",
                        )
                    )
                    continue
                seen.add(entry.document_id)
                hint = f"{entry.hint}|{self._metadata_digest}" if entry.hint else ""
                work.append(_Work(uri, entry, hint))
        return work, refused, skipped, previous

    def _guard_deletions(
        self, work: Sequence[_Work], previous: Mapping[str, Mapping[str, str]]
    ) -> dict[str, list[str]]:
        """The documents delete_missing would delete, per source; FAILED_PRECONDITION naming
        `max_deletion_percent` when they are too many of what that source brought in."""
        spec = self._spec
        if not spec.delete_missing:
            return {}
        listed: dict[str, set[str]] = {}
        for item in work:
            listed.setdefault(item.source, set()).add(item.entry.document_id)
        missing: dict[str, list[str]] = {}
        for uri, earlier in previous.items():
            gone = sorted(d for d in earlier if d not in listed.get(uri, set()))
            if gone and len(gone) * 100 > spec.max_deletion_percent * len(earlier):
                raise FailedPrecondition(
                    "max_deletion_percent",
                    f"{uri}: delete_missing would delete {len(gone)} of the {len(earlier)} "
                    f"documents imported from it, more than {spec.max_deletion_percent}%; "
                    "nothing was deleted (raise max_deletion_percent to allow it)",
                )
            if gone:
                missing[uri] = gone
        return missing

    # ---- one batch ------------------------------------------------------------------------

    async def _import_batch(
        self,
        batch: Sequence[_Work],
        sources: Mapping[str, Source],
        previous: Mapping[str, Mapping[str, str]],
        checkpoint: ImportCheckpoint,
    ) -> None:
        counts = checkpoint.counts
        documents: list[tuple[_Work, SourceDocument]] = []
        for item in batch:
            if item.hint and previous[item.source].get(item.entry.document_id) == item.hint:
                counts.unchanged += 1  # the same bytes and metadata: not even read
                self._tell("unchanged")
                continue
            try:
                check_document_id(item.entry.document_id, "document_id")
                read = await sources[item.source].read(item.entry)
            except DependencyUnavailable as error:  # this document's source, not the store
                self._record_failure(item, error, checkpoint, code="UNAVAILABLE")
                continue
            except DomainError as error:
                self._record_failure(item, error, checkpoint)
                continue
            documents.append(
                (
                    item,
                    SourceDocument(
                        filename=read.filename,
                        content=read.content,
                        document_id=item.entry.document_id,
                        metadata={**(read.sidecar or {}), **self._spec.metadata} or None,
                    ),
                )
            )
        if not documents:
            return
        ingested = await self._ingest(documents, checkpoint)
        by_source: dict[str, list[tuple[str, str]]] = {}
        for item, report in ingested:
            if report.unchanged:
                counts.unchanged += 1
            elif report.replaced:
                counts.replaced += 1
            else:
                counts.new += 1
            if not (report.unchanged or report.metadata_only):  # those embed nothing
                counts.leaves_written += report.l3_chunks
            by_source.setdefault(item.source, []).append((item.entry.document_id, item.hint))
            self._tell(
                "unchanged" if report.unchanged else "replaced" if report.replaced else "new"
            )
        for source, hints in by_source.items():
            await self._records.remember(self._spec.knowledge_base, source, hints)

    async def _ingest(
        self, documents: Sequence[tuple[_Work, SourceDocument]], checkpoint: ImportCheckpoint
    ) -> list[tuple[_Work, IngestedDocument]]:
        """The batch in one ingest; when one document's input fails it (the ingest checks all
        before writing any), each document alone, so only the bad one fails."""
        try:
            reports = await self._ingestor.ingest(
                [doc for _, doc in documents],
                knowledge_base=self._spec.knowledge_base,
                groups=self._spec.groups,
                seal=False,  # once, when the import's last batch is in (`run`)
            )
            return [(item, report) for (item, _), report in zip(documents, reports, strict=True)]
        except DomainError as error:
            if document_error_code(error) is None:
                raise
            if len(documents) == 1:
                self._record_failure(documents[0][0], error, checkpoint)
                return []
        out: list[tuple[_Work, IngestedDocument]] = []
        for one in documents:
            out.extend(await self._ingest([one], checkpoint))
        return out

    def _record_failure(
        self,
        item: _Work,
        error: DomainError,
        checkpoint: ImportCheckpoint,
        code: str | None = None,
    ) -> None:
        code = code or document_error_code(error)
        if code is None:
            raise error
        message = str(error).replace("documents[0].", "")
        log.info("import: %s failed: %s", item.entry.uri, message)
        self._tell("failed")
        checkpoint.fail(ImportFailed(item.entry.uri, item.entry.document_id, code, message))

    def _tell(self, result: str) -> None:
        """Reports one document's result (new, replaced, unchanged, failed, deleted) to the
        `supermew_import_documents_total` counter."""
        if self._on_document is not None:
            self._on_document(result)

    async def _delete(self, missing: Mapping[str, Sequence[str]]) -> int:
        deleted = 0
        for ids in missing.values():
            # `delete` answers rows; the ids are live documents (imported_from reads them).
            await self._ingestor.delete(
                [], list(ids), knowledge_base=self._spec.knowledge_base, groups=self._spec.groups
            )
            await self._records.forget(self._spec.knowledge_base, list(ids))
            deleted += len(ids)
        for _ in range(deleted):
            self._tell("deleted")
        return deleted
