"""Imports as long-running operations (docs/api.md#imports): `Imports.start` checks an
ImportDocumentsRequest and stores it as a QUEUED operation (once per request_id); the runner
(`Imports.run`, IMPORT_WORKERS jobs at once per replica) claims queued operations — and
running ones whose replica stopped renewing their lease — and runs each as an `ImportJob`,
saving its progress with the operation at least every 2 s and after every batch.

A replica that stops (SIGTERM) lets its jobs reach their next checkpoint, then gives their
leases up, so another replica, or this one after its restart, takes them over at once."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import grpc
import httpx
from google.protobuf import json_format
from google.rpc import status_pb2
from supermew.v1 import retrieval_pb2

from retrieval_service.adapters.sources import ImportPolicy, open_source
from retrieval_service.adapters.sql.operations import (
    ClaimedOperation,
    LeaseLost,
    NewOperation,
    SqlOperationStore,
)
from retrieval_service.core.identity import check_metadata, kb_id_of, kb_name
from retrieval_service.core.imports.job import (
    DEFAULT_MAX_DELETION_PERCENT,
    ImportCheckpoint,
    ImportCounts,
    ImportJob,
    ImportSpec,
)
from retrieval_service.core.imports.source import check_globs
from retrieval_service.core.ingest import Ingestor
from retrieval_service.core.knowledge_bases import KnowledgeBases
from shared.draining import Draining
from shared.errors import DomainError, InvalidArgument
from shared.operations import (
    OperationRecord,
    OperationState,
    error_status_bytes,
    new_operation_id,
    packed,
)
from shared.serve import status_code_for
from shared.wakeup import IDLE_LOOK_SECONDS, Wakeup

log = logging.getLogger(__name__)

KIND: Final = "import_documents"
#: Progress reaches the database at least this often while a job runs.
SAVE_EVERY_SECONDS: Final = 2.0
MAX_REQUEST_ID_CHARS: Final = 128
MAX_URIS: Final = 1000
State = retrieval_pb2.ImportDocumentsMetadata.State


def _now_ms() -> int:
    return int(time.time() * 1000)


def metadata_message(
    knowledge_base: str,
    state: OperationState,
    checkpoint: ImportCheckpoint,
    create_ms: int,
    update_ms: int,
) -> retrieval_pb2.ImportDocumentsMetadata:
    counts = checkpoint.counts
    message = retrieval_pb2.ImportDocumentsMetadata(
        knowledge_base=knowledge_base,
        state=State.Name(int(state)),
        progress_percent=100 if state == OperationState.SUCCEEDED else counts.percent(),
    )
    for name, value in _count_fields(counts).items():
        setattr(message, name, value)
    message.create_time.FromMilliseconds(create_ms)
    message.update_time.FromMilliseconds(update_ms)
    return message


def _count_fields(counts: ImportCounts) -> dict[str, int]:
    return {
        "documents_total": counts.total,
        "documents_new": counts.new,
        "documents_replaced": counts.replaced,
        "documents_unchanged": counts.unchanged,
        "documents_deleted": counts.deleted,
        "documents_failed": counts.failed,
        "documents_skipped": counts.skipped,
        "leaves_written": counts.leaves_written,
    }


def response_message(checkpoint: ImportCheckpoint) -> retrieval_pb2.ImportDocumentsResponse:
    return retrieval_pb2.ImportDocumentsResponse(
        **_count_fields(checkpoint.counts),
        failures=[
            retrieval_pb2.ImportFailure(
                uri=f.uri,
                document_id=f.document_id,
                status=status_pb2.Status(code=grpc.StatusCode[f.code].value[0], message=f.message),
            )
            for f in checkpoint.failures
        ],
    )


def request_digest(request: retrieval_pb2.ImportDocumentsRequest) -> str:
    """What makes two requests "the same" for request_id (AIP-155): every field but
    request_id, serialized deterministically."""
    copy = retrieval_pb2.ImportDocumentsRequest()
    copy.CopyFrom(request)
    copy.request_id = ""
    return hashlib.sha256(copy.SerializeToString(deterministic=True)).hexdigest()


def _spec_of(
    request: retrieval_pb2.ImportDocumentsRequest, groups: frozenset[str] | None
) -> ImportSpec:
    return ImportSpec(
        knowledge_base=kb_name(request.knowledge_base, "knowledge_base"),
        uris=tuple(request.uris),
        include_globs=tuple(request.include_globs),
        exclude_globs=tuple(request.exclude_globs),
        metadata=json_format.MessageToDict(request.metadata),
        delete_missing=request.delete_missing,
        max_deletion_percent=request.max_deletion_percent or DEFAULT_MAX_DELETION_PERCENT,
        groups=groups,
    )


@dataclass
class _Progress:
    """The job's `Progress`: saves its checkpoint with the operation under the lease."""

    store: SqlOperationStore
    record: OperationRecord
    owner: str
    lease_ms: int
    groups: list[str] | None
    stopping: Callable[[], bool]
    checkpoint: ImportCheckpoint
    cancel: bool = False

    @property
    def cancel_requested(self) -> bool:
        return self.cancel or self.stopping()

    def metadata(self, state: OperationState, now_ms: int) -> bytes:
        message = metadata_message(
            self.record.knowledge_base and kb_name(self.record.knowledge_base, "knowledge_base"),
            state,
            self.checkpoint,
            self.record.create_time_ms,
            now_ms,
        )
        return packed(message)

    def stored(self) -> dict[str, Any]:
        return self.checkpoint.to_json() | {"groups": self.groups}

    async def save(self, checkpoint: ImportCheckpoint) -> bool:
        self.checkpoint = checkpoint
        now = _now_ms()
        self.cancel = await self.store.save(
            self.record.id,
            self.owner,
            now_ms=now,
            lease_ms=self.lease_ms,
            metadata=self.metadata(OperationState.RUNNING, now),
            checkpoint=self.stored(),
        )
        return self.cancel_requested


class Imports:
    """Starts imports and runs them (see the module docstring)."""

    def __init__(
        self,
        store: SqlOperationStore,
        knowledge_bases: KnowledgeBases,
        ingestor: Ingestor,
        policy: ImportPolicy,
        *,
        workers: int,
        lease_seconds: float,
        on_document: Callable[[str], None] | None = None,
        on_states: Callable[[Mapping[OperationState, int]], None] | None = None,
        http: httpx.AsyncClient | None = None,
        draining: Draining | None = None,
        poll_seconds: float = IDLE_LOOK_SECONDS,
    ) -> None:
        """`poll_seconds`: how often an idle worker looks for an import it was not told of
        (queued on another replica, or left by a dead one); one queued here wakes it at once."""
        self._store = store
        self._knowledge_bases = knowledge_bases
        self._ingestor = ingestor
        self._policy = policy
        self._workers = workers
        self._lease_ms = int(lease_seconds * 1000)
        self._on_document = on_document
        self._on_states = on_states
        self._http = http or httpx.AsyncClient(follow_redirects=False)
        # SIGTERM's drain waits for each running job to reach its next checkpoint.
        self._draining = draining or Draining()
        self._owner = secrets.token_hex(8)
        self._stopping = False
        self._running: set[asyncio.Task[None]] = set()
        self._runner: asyncio.Task[None] | None = None
        self._poll = poll_seconds
        self._wakeup = Wakeup()

    @property
    def stopping(self) -> bool:
        """This replica is shutting down: no job is claimed, running ones stop at their next
        checkpoint and give their lease up."""
        return self._stopping or self._draining.begun

    async def resume_abandoned(self) -> None:
        """At the start of the only process that can run imports (embedded Milvus Lite): the
        running ones are a dead process's, resumed at once instead of after their lease."""
        if released := await self._store.release_all():
            log.info("resuming %d import(s) a stopped process left", released)

    def ensure_running(self) -> None:
        """Starts the runner unless it runs (at start-up, to resume what a stopped replica
        left, and at the first import)."""
        if not self.stopping and (self._runner is None or self._runner.done()):
            self._runner = asyncio.create_task(self.run())

    # ---- ImportDocuments ------------------------------------------------------------------

    async def start(
        self, request: retrieval_pb2.ImportDocumentsRequest, groups: frozenset[str] | None
    ) -> OperationRecord:
        """The operation of this request: a new QUEUED one, or the one an earlier request with
        the same request_id started (ALREADY_EXISTS when that request differed)."""
        self._check(request)
        kb = await self._knowledge_bases.require(
            kb_name(request.knowledge_base, "knowledge_base"), "knowledge_base"
        )
        normalized = retrieval_pb2.ImportDocumentsRequest()
        normalized.CopyFrom(request)
        normalized.knowledge_base = kb
        now = _now_ms()
        op_id = new_operation_id(now)
        checkpoint = ImportCheckpoint()
        record, created = await self._store.create(
            NewOperation(
                id=op_id,
                kind=KIND,
                knowledge_base=kb_id_of(kb),
                request_id=request.request_id,
                request_sha256=request_digest(normalized),
                request=normalized.SerializeToString(),
                metadata=packed(metadata_message(kb, OperationState.QUEUED, checkpoint, now, now)),
                checkpoint=checkpoint.to_json()
                | {"groups": None if groups is None else sorted(groups)},
                now_ms=now,
            )
        )
        self.ensure_running()
        self._wakeup.ring()
        log.info(
            "import %s %s into %s: %d uri(s)",
            record.name,
            "queued" if created else "replayed (request_id)",
            kb,
            len(request.uris),
        )
        return record

    def _check(self, request: retrieval_pb2.ImportDocumentsRequest) -> None:
        if not request.uris:
            raise InvalidArgument("uris", "must hold at least one uri")
        if len(request.uris) > MAX_URIS:
            raise InvalidArgument("uris", f"holds {len(request.uris)} uris, at most {MAX_URIS}")
        if len(set(request.uris)) != len(request.uris):
            raise InvalidArgument("uris", "names a uri twice")
        for i, uri in enumerate(request.uris):
            open_source(uri, f"uris[{i}]", self._policy, self._http)
        check_globs(request.include_globs, "include_globs")
        check_globs(request.exclude_globs, "exclude_globs")
        if not 0 <= request.max_deletion_percent <= 100:
            raise InvalidArgument(
                "max_deletion_percent",
                f"must be 0 (the default, 50) to 100, got {request.max_deletion_percent}",
            )
        if len(request.request_id) > MAX_REQUEST_ID_CHARS:
            raise InvalidArgument("request_id", f"is longer than {MAX_REQUEST_ID_CHARS} characters")
        check_metadata(json_format.MessageToDict(request.metadata), "metadata")

    # ---- the runner -----------------------------------------------------------------------

    async def run(self) -> None:
        """IMPORT_WORKERS workers until cancelled."""
        workers = [asyncio.create_task(self._worker(i)) for i in range(self._workers)]
        try:
            await asyncio.gather(*workers)
        finally:
            for worker in workers:
                worker.cancel()
            await asyncio.gather(*workers, return_exceptions=True)

    async def _worker(self, index: int) -> None:
        while not self.stopping:
            self._wakeup.arm()
            try:
                claimed = await self._store.claim(KIND, self._owner, _now_ms(), self._lease_ms)
            except DomainError as error:  # the database is down: try again later
                log.warning("import runner: %s", error)
                claimed = None
            if claimed is not None and self.stopping:  # SIGTERM came while claiming
                await self._store.release(claimed.record.id, self._owner)
                return
            if claimed is None:
                if index == 0:  # one count per replica, not per worker
                    await self._report_states()
                await self._wakeup.wait(self._poll)
                continue
            task = asyncio.create_task(self._run_as_job(claimed))
            self._running.add(task)
            try:
                await asyncio.shield(task)
            finally:
                self._running.discard(task)

    async def _report_states(self) -> None:
        if self._on_states is None:
            return
        with contextlib.suppress(DomainError):
            self._on_states(await self._store.counts())

    async def _run_as_job(self, claimed: ClaimedOperation) -> None:
        async with self._draining.job("import"):
            await self._run(claimed)

    async def _run(self, claimed: ClaimedOperation) -> None:
        record = claimed.record
        request = retrieval_pb2.ImportDocumentsRequest.FromString(claimed.request)
        stored_groups = claimed.checkpoint.get("groups")
        groups = None if stored_groups is None else frozenset(stored_groups)
        spec = _spec_of(request, groups)
        progress = _Progress(
            store=self._store,
            record=record,
            owner=self._owner,
            lease_ms=self._lease_ms,
            groups=stored_groups,
            stopping=lambda: self.stopping,
            checkpoint=ImportCheckpoint.from_json(claimed.checkpoint),
            cancel=record.cancel_requested,
        )
        log.info(
            "import %s: running%s",
            record.name,
            " (taken over)" if progress.checkpoint.listed else "",
        )
        job = ImportJob(
            spec,
            open_source=lambda uri: open_source(uri, "uris", self._policy, self._http),
            ingestor=self._ingestor,
            records=self._store,
            progress=progress,
            on_document=self._on_document,
        )
        heartbeat = asyncio.create_task(self._heartbeat(progress))
        try:
            final = await job.run(progress.checkpoint)
        except LeaseLost:
            log.warning("import %s: taken over by another replica; stopped here", record.name)
            return
        except asyncio.CancelledError:
            # Stopped mid-batch (the grace ran out): the batch's documents stay old; the job
            # resumes from its last checkpoint elsewhere, at once.
            with contextlib.suppress(DomainError):
                await self._store.release(record.id, self._owner)
            raise
        except DomainError as error:
            if self.stopping and not progress.cancel:
                # The drain's grace ran out mid-batch (ShuttingDown) or the stop broke a call:
                # not the job's failure; it resumes from its checkpoint.
                log.info("import %s: stopped by the shutdown; it resumes elsewhere", record.name)
                with contextlib.suppress(DomainError):
                    await self._store.release(record.id, self._owner)
                return
            await self._finish(progress, OperationState.FAILED, error=error)
            return
        except Exception:
            log.exception("import %s failed", record.name)
            await self._finish(progress, OperationState.FAILED, error=DomainError("internal error"))
            return
        finally:
            heartbeat.cancel()
            await asyncio.gather(heartbeat, return_exceptions=True)
        progress.checkpoint = final
        if final.cancelled and self.stopping and not progress.cancel:
            log.info(
                "import %s: stopping at its checkpoint; another replica resumes it", record.name
            )
            await self._store.release(record.id, self._owner)
            return
        await self._finish(
            progress, OperationState.CANCELLED if final.cancelled else OperationState.SUCCEEDED
        )

    async def _heartbeat(self, progress: _Progress) -> None:
        while True:
            await asyncio.sleep(min(SAVE_EVERY_SECONDS, self._lease_ms / 3000))
            try:
                await progress.save(progress.checkpoint)
            except DomainError as error:
                log.warning("import %s: progress not saved: %s", progress.record.name, error)

    async def _finish(
        self, progress: _Progress, state: OperationState, error: DomainError | None = None
    ) -> None:
        now = _now_ms()
        response = b""
        status = b""
        if state == OperationState.SUCCEEDED:
            response = packed(response_message(progress.checkpoint))
        elif state == OperationState.CANCELLED:
            status = error_status_bytes(grpc.StatusCode.CANCELLED, "cancelled by CancelOperation")
        elif error is not None:
            code = status_code_for(type(error)) or grpc.StatusCode.INTERNAL
            status = error_status_bytes(code, str(error))
        try:
            await self._store.finish(
                progress.record.id,
                self._owner,
                state=state,
                now_ms=now,
                metadata=progress.metadata(state, now),
                checkpoint=progress.stored(),
                response=response,
                error=status,
            )
        except LeaseLost:
            log.warning("import %s: taken over before it finished here", progress.record.name)
            return
        log.info(
            "import %s: %s (%s)",
            progress.record.name,
            state.name.lower(),
            ", ".join(f"{k} {v}" for k, v in _count_fields(progress.checkpoint.counts).items()),
        )

    async def stop(self, grace: float) -> None:
        """Stops claiming; running jobs stop at their next checkpoint (within `grace`
        seconds, else they are cancelled mid-batch: the batch's documents stay old) and give
        their leases up."""
        self._stopping = True
        if self._runner is not None:
            self._runner.cancel()
        running = list(self._running)
        if running:
            _, late = await asyncio.wait(running, timeout=grace)
            for task in late:
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)
        if self._runner is not None:
            await asyncio.gather(self._runner, return_exceptions=True)
        await self._http.aclose()
