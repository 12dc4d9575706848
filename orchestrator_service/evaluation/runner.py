"""Evaluation runs as long-running operations (docs/api.md#evaluation-runs): each replica's
runner claims a QUEUED run — or a RUNNING one whose replica stopped renewing its lease — and
runs the set's items, `concurrency` at once, each through an `ItemExecutor` (Retrieve or the
whole workflow). Each item's result is stored as it finishes, so a run taken over after a
restart skips what is done; progress and the lease are saved at least every 2 s.

An item whose call fails for a passing reason (UNAVAILABLE, DEADLINE_EXCEEDED) keeps its error
and the run goes on; a failure that every item would meet (a bad filter, an unknown knowledge
base, a refused key) ends the run FAILED with that status."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Final, Protocol

import grpc
from google.protobuf import any_pb2

from orchestrator_service.evaluation.messages import packed_run_metadata, run_to_proto
from orchestrator_service.evaluation.metrics import run_metrics
from orchestrator_service.evaluation.model import DEFAULT_CONCURRENCY, Item, Outcome, RunConfig
from orchestrator_service.evaluation.results import judgement_and_outcome, result_body
from orchestrator_service.evaluation.service import KIND
from orchestrator_service.evaluation.store import EvaluationStore, RunRecord, StoredItem
from orchestrator_service.runtime import RetrievalScope
from shared.errors import (
    DeadlineExceeded,
    DependencyUnavailable,
    DomainError,
)
from shared.operations import OperationState, error_status_bytes
from shared.serve import status_code_for
from shared.sql.operations import ClaimedOperation, LeaseLost, SqlOperationStore
from shared.wakeup import IDLE_LOOK_SECONDS, Wakeup

log = logging.getLogger(__name__)

SAVE_EVERY_SECONDS: Final = 2.0
#: Failures of one item that do not say anything about the others.
PASSING: Final = (DependencyUnavailable, DeadlineExceeded)


class ItemExecutor(Protocol):
    async def __call__(self, item: Item, scope: RetrievalScope, config: RunConfig) -> Outcome: ...


def _now_ms() -> int:
    return int(time.time() * 1000)


class RunFailed(Exception):
    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass
class _Progress:
    done: int
    failed: int
    cancel: bool = False
    lost: bool = False


class EvaluationRunner:
    def __init__(
        self,
        store: EvaluationStore,
        operations: SqlOperationStore,
        execute: ItemExecutor,
        *,
        lease_seconds: float = 30.0,
        poll_seconds: float = IDLE_LOOK_SECONDS,
        on_item: Callable[[str], None] = lambda result: None,
        now_ms: Callable[[], int] = _now_ms,
    ) -> None:
        self._store = store
        self._operations = operations
        self._execute = execute
        self._lease_ms = int(lease_seconds * 1000)
        self._poll = poll_seconds
        self._on_item = on_item
        self._now_ms = now_ms
        self.owner = f"evaluation-{secrets.token_hex(6)}"
        self._task: asyncio.Task[None] | None = None
        self._current: str | None = None
        self._wakeup = Wakeup()

    def start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._loop(), name="evaluation-runner")

    def wake(self) -> None:
        """A run was queued in this process: look for it now rather than at the next poll
        (runs queued on another replica, or left by a dead one, wait for that)."""
        self._wakeup.ring()

    async def stop(self) -> None:
        """Stops at once; the run in hand is given up (its lease released), so another
        replica, or this one after its restart, resumes it where its results end."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._current is not None:
            with contextlib.suppress(DomainError):
                await self._operations.release(self._current, self.owner)

    async def _loop(self) -> None:
        while True:
            self._wakeup.arm()
            try:
                claimed = await self._operations.claim(
                    KIND, self.owner, self._now_ms(), self._lease_ms
                )
            except DomainError as exc:
                log.warning("evaluation runner cannot claim: %s", exc)
                claimed = None
            if claimed is None:
                await self._wakeup.wait(self._poll)
                continue
            self._current = claimed.record.id
            try:
                await self.run(claimed)
            except LeaseLost:
                log.info("evaluation run %s was taken over", claimed.record.id)
            except DomainError as exc:
                log.warning("evaluation run %s stopped: %s", claimed.record.id, exc)
            except Exception:
                # A bug must not stop the runner nor leave the run RUNNING until a restart.
                log.exception("evaluation run %s failed", claimed.record.id)
                with contextlib.suppress(DomainError, LeaseLost):
                    await self._fail_operation(
                        claimed, grpc.StatusCode.INTERNAL, "internal error while running"
                    )
            finally:
                self._current = None

    async def run(self, claimed: ClaimedOperation) -> None:
        op_id = claimed.record.id
        set_id = str(claimed.checkpoint["set_id"])
        run = await self._store.get_run(set_id, str(claimed.checkpoint["run_id"]))
        evaluation_set = await self._store.get_set(set_id)
        if run is None or evaluation_set is None:
            await self._fail_operation(claimed, grpc.StatusCode.NOT_FOUND, "the set was deleted")
            return
        if claimed.record.cancel_requested:
            await self._end(claimed, run, OperationState.CANCELLED)
            return
        items = await self._all_items(set_id)
        done = {item_id for item_id, _ in await self._store.results(set_id, run.id)}
        pending = [s for s in items if s.id not in done]
        progress = _Progress(done=len(done), failed=run.items_failed)
        run = replace(run, state=OperationState.RUNNING, items_total=len(items))
        await self._store.update_run(set_id, run.id, state=run.state, items_total=len(items))
        config = RunConfig.of(run.config)
        scope = RetrievalScope(
            tuple(f"knowledge_bases/{kb}" for kb in evaluation_set.knowledge_bases),
            evaluation_set.filter,
            config.index,
        )
        try:
            await self._run_items(claimed, run, pending, scope, config, progress)
        except RunFailed as failure:
            await self._end(claimed, run, OperationState.FAILED, failure)
            return
        if progress.lost:
            raise LeaseLost(op_id)
        state = OperationState.CANCELLED if progress.cancel else OperationState.SUCCEEDED
        await self._end(claimed, run, state)

    async def _all_items(self, set_id: str) -> list[StoredItem]:
        items: list[StoredItem] = []
        after: str | None = None
        while True:
            page = await self._store.page_items(set_id, 1000, after)
            items.extend(page)
            if len(page) < 1000:
                return items
            after = page[-1].id

    async def _run_items(
        self,
        claimed: ClaimedOperation,
        run: RunRecord,
        pending: list[StoredItem],
        scope: RetrievalScope,
        config: RunConfig,
        progress: _Progress,
    ) -> None:
        queue: asyncio.Queue[StoredItem] = asyncio.Queue()
        for stored in pending:
            queue.put_nowait(stored)
        fatal: list[RunFailed] = []

        async def worker() -> None:
            while not (queue.empty() or progress.cancel or progress.lost or fatal):
                stored = queue.get_nowait()
                try:
                    body = await self._one(stored.item, scope, config)
                except RunFailed as failure:
                    fatal.append(failure)
                    return
                await self._store.put_result(run.set_id, run.id, stored.id, body)
                progress.done += 1
                failed = bool(body["error"])
                progress.failed += failed
                self._on_item("failed" if failed else "ok")

        async def heartbeat() -> None:
            while True:
                await asyncio.sleep(SAVE_EVERY_SECONDS)
                await self._save(claimed, run, progress)

        beat = asyncio.create_task(heartbeat())
        try:
            workers = config.concurrency or DEFAULT_CONCURRENCY
            await asyncio.gather(*(worker() for _ in range(workers)))
        finally:
            beat.cancel()
            with contextlib.suppress(asyncio.CancelledError, LeaseLost, DomainError):
                await beat
        if fatal:
            raise fatal[0]

    async def _one(self, item: Item, scope: RetrievalScope, config: RunConfig) -> dict[str, object]:
        try:
            outcome = await self._execute(item, scope, config)
        except PASSING as exc:
            code = status_code_for(type(exc))
            return result_body(item, None, error=f"{code.name if code else 'UNAVAILABLE'}: {exc}")
        except DomainError as exc:
            code = status_code_for(type(exc)) or grpc.StatusCode.INTERNAL
            raise RunFailed(code, str(exc)) from exc
        if config.mode != "RUN":
            item = replace(item, expected_route="")  # Retrieve takes no route to judge
        return result_body(item, outcome, run_id=outcome.run_id)

    async def _save(self, claimed: ClaimedOperation, run: RunRecord, progress: _Progress) -> None:
        now = self._now_ms()
        current = replace(run, items_done=progress.done, items_failed=progress.failed)
        await self._store.update_run(
            run.set_id, run.id, items_done=progress.done, items_failed=progress.failed
        )
        try:
            progress.cancel = await self._operations.save(
                claimed.record.id,
                self.owner,
                now_ms=now,
                lease_ms=self._lease_ms,
                metadata=packed_run_metadata(current, now),
                checkpoint=claimed.checkpoint,
            )
        except LeaseLost:
            progress.lost = True
            raise

    async def _end(
        self,
        claimed: ClaimedOperation,
        run: RunRecord,
        state: OperationState,
        failure: RunFailed | None = None,
    ) -> None:
        now = self._now_ms()
        rows = await self._store.results(run.set_id, run.id)
        pairs = [judgement_and_outcome(body) for _, body in rows if not body.get("error")]
        metrics = run_metrics([j for j, _ in pairs], [o for _, o in pairs]) if pairs else {}
        done = len(rows)
        failed = sum(1 for _, body in rows if body.get("error"))
        await self._store.update_run(
            run.set_id,
            run.id,
            state=state,
            metrics=metrics,
            items_done=done,
            items_failed=failed,
            end_time=now,
        )
        final = replace(
            run,
            state=state,
            metrics=metrics,
            items_done=done,
            items_failed=failed,
            end_time_ms=now,
        )
        response = any_pb2.Any()
        response.Pack(run_to_proto(final))
        error = b""
        if failure is not None:
            error = error_status_bytes(failure.code, failure.message)
        elif state == OperationState.CANCELLED:
            error = error_status_bytes(grpc.StatusCode.CANCELLED, "the run was cancelled")
        await self._operations.finish(
            claimed.record.id,
            self.owner,
            state=state,
            now_ms=now,
            metadata=packed_run_metadata(final, now),
            checkpoint=claimed.checkpoint,
            response=b"" if error else response.SerializeToString(),
            error=error,
        )

    async def _fail_operation(
        self, claimed: ClaimedOperation, code: grpc.StatusCode, message: str
    ) -> None:
        """The operation (and its run, when the set still holds it) FAILED with `code`."""
        now = self._now_ms()
        await self._store.update_run(
            str(claimed.checkpoint["set_id"]),
            str(claimed.checkpoint["run_id"]),
            state=OperationState.FAILED,
            end_time=now,
        )
        await self._operations.finish(
            claimed.record.id,
            self.owner,
            state=OperationState.FAILED,
            now_ms=now,
            metadata=claimed.record.metadata,
            checkpoint=claimed.checkpoint,
            error=error_status_bytes(code, message),
        )
