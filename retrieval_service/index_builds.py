"""Index builds as long-running operations (docs/api.md#indexes): `IndexBuilds.start` checks a
CreateIndexRequest, writes the BUILDING index and stores its build as a QUEUED operation
(kind `create_index`, metadata CreateIndexMetadata, response the READY Index); the runner
claims queued builds — and running ones whose replica stopped renewing their lease — and runs
each (`Indexes.build`), saving where it is with the operation after every batch and at least
every 2 s, so a build killed midway resumes from its last save on any replica."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import grpc
from supermew.v1 import retrieval_pb2

from retrieval_service.adapters.sql.operations import (
    ClaimedOperation,
    LeaseLost,
    NewOperation,
    SqlOperationStore,
)
from retrieval_service.core.identity import kb_id_of
from retrieval_service.core.indexes.model import IndexConfig, IndexRecord
from retrieval_service.core.indexes.service import BuildProgress, Indexes, IndexGone
from shared.draining import Draining
from shared.errors import DomainError
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

KIND: Final = "create_index"
SAVE_EVERY_SECONDS: Final = 2.0


def _now_ms() -> int:
    return int(time.time() * 1000)


def index_to_proto(record: IndexRecord) -> retrieval_pb2.Index:
    c = record.config
    message = retrieval_pb2.Index(
        name=record.name,
        config=retrieval_pb2.IndexConfig(
            embedder=c.embedder,
            dimension=c.dimension,
            chunk_size=c.chunk_size,
            chunk_overlap=c.chunk_overlap,
            leaf_context_header=c.leaf_context_header,
            analyzer=c.analyzer,
        ),
        state=record.state,  # type: ignore[arg-type]
        documents_indexed=record.documents_indexed,
        documents_total=record.documents_total,
    )
    message.create_time.FromMilliseconds(record.create_time)
    return message


def config_of(message: retrieval_pb2.IndexConfig) -> IndexConfig:
    return IndexConfig(
        message.embedder,
        message.dimension,
        message.chunk_size,
        message.chunk_overlap,
        message.leaf_context_header,
        message.analyzer,
    )


def metadata_message(
    index: str, state: OperationState, progress: BuildProgress, created: int, now: int
) -> retrieval_pb2.CreateIndexMetadata:
    percent = 100 * progress.indexed // progress.total if progress.total else 0
    if state == OperationState.SUCCEEDED:
        percent = 100
    message = retrieval_pb2.CreateIndexMetadata(
        index=index,
        state=int(state),  # type: ignore[arg-type]
        progress_percent=min(100, percent),
        documents_total=progress.total,
        documents_indexed=progress.indexed,
        leaves_written=progress.leaves,
    )
    message.create_time.FromMilliseconds(created)
    message.update_time.FromMilliseconds(now)
    return message


def _progress_of(checkpoint: Any) -> BuildProgress:
    return BuildProgress(
        str(checkpoint.get("after", "")),
        int(checkpoint.get("indexed", 0)),
        int(checkpoint.get("total", 0)),
        int(checkpoint.get("leaves", 0)),
    )


def _stored(progress: BuildProgress) -> dict[str, Any]:
    return {
        "after": progress.after,
        "indexed": progress.indexed,
        "total": progress.total,
        "leaves": progress.leaves,
    }


@dataclass
class _Run:
    """One claimed build: its operation, the index and where it is."""

    record: OperationRecord
    index: str
    progress: BuildProgress
    cancel: bool = False


class IndexBuilds:
    """Starts builds and runs them, one at a time per replica (see the module docstring)."""

    def __init__(
        self,
        store: SqlOperationStore,
        indexes: Indexes,
        *,
        lease_seconds: float,
        draining: Draining | None = None,
        on_state: Callable[[], None] | None = None,
        poll_seconds: float = IDLE_LOOK_SECONDS,
    ) -> None:
        """`poll_seconds`: how often the idle runner looks for a build it was not told of
        (queued on another replica, or left by a dead one); one queued here wakes it at once."""
        self._store = store
        self._indexes = indexes
        self._lease_ms = int(lease_seconds * 1000)
        self._draining = draining or Draining()
        self._owner = secrets.token_hex(8)
        self._stopping = False
        self._runner: asyncio.Task[None] | None = None
        self._running: asyncio.Task[None] | None = None
        self._on_state = on_state
        self._poll = poll_seconds
        self._wakeup = Wakeup()

    @property
    def stopping(self) -> bool:
        return self._stopping or self._draining.begun

    def ensure_running(self) -> None:
        if not self.stopping and (self._runner is None or self._runner.done()):
            self._runner = asyncio.create_task(self._run_forever())

    async def start(self, request: retrieval_pb2.CreateIndexRequest) -> OperationRecord:
        """The BUILDING index and the QUEUED operation that builds it."""
        now = _now_ms()
        op_id = new_operation_id(now)
        record = await self._indexes.create(
            request.parent, request.index_id, config_of(request.index.config), "operations/" + op_id
        )
        normalized = retrieval_pb2.CreateIndexRequest(
            parent=record.knowledge_base, index_id=record.index_id, index=index_to_proto(record)
        )
        metadata = metadata_message(record.name, OperationState.QUEUED, BuildProgress(), now, now)
        try:
            created, _ = await self._store.create(
                NewOperation(
                    id=op_id,
                    kind=KIND,
                    knowledge_base=kb_id_of(record.knowledge_base),
                    request_id="",
                    request_sha256="",
                    request=normalized.SerializeToString(),
                    metadata=packed(metadata),
                    checkpoint={},
                    now_ms=now,
                )
            )
        except BaseException:
            await self._indexes.mark_failed(record)
            raise
        self.ensure_running()
        self._wakeup.ring()
        log.info("index %s: build %s queued", record.name, created.name)
        return created

    # ---- the runner -----------------------------------------------------------------------

    async def _run_forever(self) -> None:
        while not self.stopping:
            self._wakeup.arm()
            try:
                claimed = await self._store.claim(KIND, self._owner, _now_ms(), self._lease_ms)
            except DomainError as error:
                log.warning("index build runner: %s", error)
                claimed = None
            if claimed is None:
                await self._wakeup.wait(self._poll)
                continue
            if self.stopping:
                await self._store.release(claimed.record.id, self._owner)
                return
            self._running = asyncio.create_task(self._run_as_job(claimed))
            try:
                await asyncio.shield(self._running)
            finally:
                self._running = None

    async def _run_as_job(self, claimed: ClaimedOperation) -> None:
        async with self._draining.job("index build"):
            await self._run(claimed)

    async def _save(self, run: _Run, progress: BuildProgress) -> bool:
        run.progress = progress
        now = _now_ms()
        metadata = metadata_message(
            run.index, OperationState.RUNNING, progress, run.record.create_time_ms, now
        )
        run.cancel = await self._store.save(
            run.record.id,
            self._owner,
            now_ms=now,
            lease_ms=self._lease_ms,
            metadata=packed(metadata),
            checkpoint=_stored(progress),
        )
        return run.cancel or self.stopping

    async def _heartbeat(self, run: _Run) -> None:
        while True:
            await asyncio.sleep(min(SAVE_EVERY_SECONDS, self._lease_ms / 3000))
            try:
                await self._save(run, run.progress)
            except DomainError as error:
                log.warning("index build %s: progress not saved: %s", run.record.name, error)

    async def _run(self, claimed: ClaimedOperation) -> None:
        request = retrieval_pb2.CreateIndexRequest.FromString(claimed.request)
        run = _Run(
            claimed.record,
            request.index.name,
            _progress_of(claimed.checkpoint),
            claimed.record.cancel_requested,
        )
        log.info("index build %s: running %s", run.record.name, run.index)
        heartbeat = asyncio.create_task(self._heartbeat(run))
        try:
            ready = await self._indexes.build(run.index, run.progress, lambda p: self._save(run, p))
        except LeaseLost:
            log.warning("index build %s: taken over by another replica", run.record.name)
            return
        except IndexGone:
            await self._finish(
                run,
                OperationState.FAILED,
                error=(grpc.StatusCode.ABORTED, "the index was deleted or failed during its build"),
            )
            return
        except asyncio.CancelledError:
            with contextlib.suppress(DomainError):
                await self._store.release(run.record.id, self._owner)
            raise
        except DomainError as error:
            if self.stopping and not run.cancel:
                with contextlib.suppress(DomainError):
                    await self._store.release(run.record.id, self._owner)
                return
            await self._fail_index(run)
            code = status_code_for(type(error)) or grpc.StatusCode.INTERNAL
            await self._finish(run, OperationState.FAILED, error=(code, str(error)))
            return
        except Exception:
            log.exception("index build %s failed", run.record.name)
            await self._fail_index(run)
            await self._finish(
                run, OperationState.FAILED, error=(grpc.StatusCode.INTERNAL, "internal error")
            )
            return
        finally:
            heartbeat.cancel()
            await asyncio.gather(heartbeat, return_exceptions=True)
        if ready is None:  # stopped at a save
            if run.cancel:
                await self._fail_index(run)
                await self._finish(
                    run,
                    OperationState.CANCELLED,
                    error=(grpc.StatusCode.CANCELLED, "cancelled by CancelOperation"),
                )
            else:
                await self._store.release(run.record.id, self._owner)
            return
        await self._finish(run, OperationState.SUCCEEDED, response=index_to_proto(ready))

    async def _fail_index(self, run: _Run) -> None:
        with contextlib.suppress(DomainError):
            await self._indexes.mark_failed(await self._indexes.get(run.index))

    async def _finish(
        self,
        run: _Run,
        state: OperationState,
        *,
        response: retrieval_pb2.Index | None = None,
        error: tuple[grpc.StatusCode, str] | None = None,
    ) -> None:
        now = _now_ms()
        metadata = metadata_message(run.index, state, run.progress, run.record.create_time_ms, now)
        try:
            await self._store.finish(
                run.record.id,
                self._owner,
                state=state,
                now_ms=now,
                metadata=packed(metadata),
                checkpoint=_stored(run.progress),
                response=packed(response) if response is not None else b"",
                error=error_status_bytes(*error) if error is not None else b"",
            )
        except LeaseLost:
            log.warning("index build %s: taken over before it finished here", run.record.name)
            return
        log.info("index build %s: %s", run.record.name, state.name.lower())

    async def stop(self, grace: float) -> None:
        self._stopping = True
        if self._runner is not None:
            self._runner.cancel()
        if self._running is not None:
            _, late = await asyncio.wait({self._running}, timeout=grace)
            for task in late:
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)
        if self._runner is not None:
            await asyncio.gather(self._runner, return_exceptions=True)
