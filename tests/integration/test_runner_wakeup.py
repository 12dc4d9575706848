"""The retrieval service's job runners (imports, index builds) look for work they were not told
of only every few seconds while idle; a job queued through their own `Imports` / `IndexBuilds`
wakes them at once. Real parts: the in-process service on Milvus Lite and its SQLite control
plane; each test runs a second runner beside the service's own (stopped), with a look far
longer than the test, over the same database — as a second replica would."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from supermew.v1 import retrieval_pb2

from retrieval_service.adapters.sources import ImportPolicy
from retrieval_service.adapters.sql.operations import SqlOperationStore
from retrieval_service.imports import Imports
from retrieval_service.index_builds import IndexBuilds
from shared.operations import OperationState
from tests.fakes.hashing_embedder import HashingEmbedder
from tests.integration.retrieval_harness import Service, running_service

pytestmark = pytest.mark.integration

# Far longer than the test waits: only the wake-up can start the job in time.
LOOK = 600.0


async def _state_after(operations: SqlOperationStore, op_id: str, seconds: float) -> OperationState:
    """The operation's state once it is done, or after `seconds`."""
    for _ in range(int(seconds / 0.05)):
        record = await operations.get(op_id)
        assert record is not None
        if record.state.done:
            return record.state
        await asyncio.sleep(0.05)
    record = await operations.get(op_id)
    assert record is not None
    return record.state


def _imports(svc: Service, roots: str) -> Imports:
    settings = svc.app.settings
    policy = ImportPolicy.of(
        roots,
        settings.import_url_prefixes,
        settings.max_document_bytes,
        settings.import_url_timeout_seconds,
        settings.s3_endpoint_url,
    )
    return Imports(
        SqlOperationStore(svc.app.database),
        svc.app.knowledge_bases,
        svc.app.ingestor,
        policy,
        workers=1,
        lease_seconds=30,
        poll_seconds=LOOK,
    )


@pytest.mark.parametrize("through", ["this-runner", "another-replica"])
async def test_an_import_queued_here_starts_without_waiting_for_the_look(
    tmp_path: Path, through: str
) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "note.md").write_text("Imports wake their runner. " * 20)
    async with running_service(
        tmp_path / "kb.db", import_roots=str(tmp_path), embedder=HashingEmbedder()
    ) as svc:
        await svc.app.imports.stop(0)  # the service's own runner: it would look too
        imports = _imports(svc, str(tmp_path))
        other = _imports(svc, str(tmp_path))
        await other.stop(0)  # never runs: it only queues, as another replica would
        imports.ensure_running()
        try:
            await asyncio.sleep(0.3)  # the runner's first look found nothing: it is idle now
            queuing = imports if through == "this-runner" else other
            record = await queuing.start(
                retrieval_pb2.ImportDocumentsRequest(uris=[folder.as_uri()]), None
            )
            waited = 30 if through == "this-runner" else 2
            state = await _state_after(SqlOperationStore(svc.app.database), record.id, waited)
            # Queued elsewhere, the import waits for the runner's next look, LOOK seconds away.
            expected = (
                OperationState.SUCCEEDED if through == "this-runner" else OperationState.QUEUED
            )
            assert state == expected
        finally:
            await imports.stop(5)


@pytest.mark.parametrize("through", ["this-runner", "another-replica"])
async def test_an_index_build_queued_here_starts_without_waiting_for_the_look(
    tmp_path: Path, through: str
) -> None:
    async with running_service(tmp_path / "kb.db", embedder=HashingEmbedder()) as svc:
        await svc.app.builds.stop(0)  # the service's own runner: it would look too
        operations = SqlOperationStore(svc.app.database)
        builds = IndexBuilds(operations, svc.app.indexes, lease_seconds=30, poll_seconds=LOOK)
        other = IndexBuilds(operations, svc.app.indexes, lease_seconds=30, poll_seconds=LOOK)
        await other.stop(0)  # never runs: it only queues, as another replica would
        builds.ensure_running()
        try:
            await asyncio.sleep(0.3)
            queuing = builds if through == "this-runner" else other
            record = await queuing.start(
                retrieval_pb2.CreateIndexRequest(
                    parent="knowledge_bases/default",
                    index_id="wide",
                    index=retrieval_pb2.Index(config=retrieval_pb2.IndexConfig(chunk_size=1200)),
                )
            )
            state = await _state_after(operations, record.id, 30 if through == "this-runner" else 2)
            expected = (
                OperationState.SUCCEEDED if through == "this-runner" else OperationState.QUEUED
            )
            assert state == expected
        finally:
            await builds.stop(5)
