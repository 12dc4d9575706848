"""The evaluation runner looks for runs queued elsewhere only every few seconds while it is idle;
a run queued through its own process wakes it at once. Real parts on SQLite: the database, the
operation and evaluation stores, `Evaluations` wired to the runner as the composition root wires
them. The item executor is the runner's seam (retrieval and the workflow are not under test)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from orchestrator_service.database.database import Database
from orchestrator_service.database.migrate import MIGRATIONS
from orchestrator_service.database.tables import operations as operations_table
from orchestrator_service.evaluation.model import Item, Outcome, RunConfig
from orchestrator_service.evaluation.runner import EvaluationRunner
from orchestrator_service.evaluation.service import Evaluations
from orchestrator_service.evaluation.store import EvaluationStore
from orchestrator_service.runtime import RetrievalScope
from shared.access import Permission
from shared.operations import OperationState
from shared.sql.database import DatabaseConfig
from shared.sql.operations import SqlOperationStore

pytestmark = pytest.mark.integration

# Far longer than the test waits: only the wake-up can start the run in time.
POLL = 600.0


def _anyone(permission: Permission, kb: str) -> None:
    return None


async def _answered(item: Item, scope: RetrievalScope, config: RunConfig) -> Outcome:
    return Outcome(ranked_documents=("default/note.md",))


async def _state(operations: SqlOperationStore, op_id: str) -> OperationState:
    record = await operations.get(op_id)
    assert record is not None
    return record.state


@pytest.mark.parametrize("wired", [True, False], ids=["woken", "not-woken"])
async def test_a_run_queued_here_starts_without_waiting_for_the_poll(
    tmp_path: Path, wired: bool
) -> None:
    database = Database(DatabaseConfig(f"sqlite+aiosqlite:///{tmp_path / 'orch.sqlite3'}"))
    await MIGRATIONS.ensure_schema(database, migrate=True)
    operations = SqlOperationStore(database, operations_table)
    store = EvaluationStore(database)
    runner = EvaluationRunner(store, operations, _answered, poll_seconds=POLL)
    evaluations = Evaluations(store, operations, on_queued=runner.wake if wired else lambda: None)
    runner.start()
    try:
        await asyncio.sleep(0.2)  # the runner's first look found nothing: it is idle now
        made = await evaluations.create_set("wake", "", (), "", _anyone)
        await evaluations.add_items(f"evaluation_sets/{made.id}", [("", Item("When?"))], _anyone)
        op_id, _ = await evaluations.start_run(
            f"evaluation_sets/{made.id}", RunConfig(), b"request", _anyone
        )
        for _ in range(200 if wired else 40):
            if await _state(operations, op_id) == OperationState.SUCCEEDED:
                break
            await asyncio.sleep(0.05)
        state = await _state(operations, op_id)
        # Not woken, the run waits for the next look, POLL seconds away.
        assert state == (OperationState.SUCCEEDED if wired else OperationState.QUEUED)
    finally:
        await runner.stop()
        await database.aclose()
