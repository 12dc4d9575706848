"""Index generations (docs/api.md#indexes) through the real service on 127.0.0.1 (Milvus Lite
and its SQLite control plane): every knowledge base starts on `initial`; CreateIndex builds
another chunking or embedder beside it as an operation while ingests and deletes reach both;
Retrieve reads a named index; the switch and the switch back; DeleteIndex; a build killed
midway resumes."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.longrunning import operations_pb2_grpc
from google.longrunning import operations_proto_pb2 as operations_pb2
from google.protobuf import duration_pb2, field_mask_pb2
from supermew.v1 import evaluation_pb2, retrieval_pb2

from retrieval_service.adapters.milvus.chunk_store import ChunkStore
from retrieval_service.core.identity import DEFAULT_KB
from retrieval_service.core.indexes.model import parse_index_name
from tests.fakes.embeddings_server import EmbeddingsServer
from tests.integration.retrieval_harness import Service, corpus_documents, running_service
from tests.integration.test_evaluation import SCIFACT, ingest_scifact, orchestrator, run_evaluation
from tests.integration.test_imports import wait
from tests.integration.test_retrieval_crash_safety import DIM, ServiceProcess, embedding_env

pytestmark = pytest.mark.integration

INITIAL = DEFAULT_KB + "/indexes/initial"
BIG = DEFAULT_KB + "/indexes/big"
State = retrieval_pb2.Index.State


@asynccontextmanager
async def service(db: Path, **settings: Any) -> AsyncIterator[tuple[Service, Any]]:
    async with running_service(db, **settings) as svc:
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{svc.port}")
        try:
            yield svc, operations_pb2_grpc.OperationsStub(channel)
        finally:
            await channel.close()


async def create_index(svc: Service, index_id: str, **config: Any) -> operations_pb2.Operation:
    return await svc.stub.CreateIndex(
        retrieval_pb2.CreateIndexRequest(
            parent=DEFAULT_KB,
            index_id=index_id,
            index=retrieval_pb2.Index(config=retrieval_pb2.IndexConfig(**config)),
        )
    )


def built(op: operations_pb2.Operation) -> retrieval_pb2.Index:
    assert op.WhichOneof("result") == "response", op.error
    out = retrieval_pb2.Index()
    assert op.response.Unpack(out)
    return out


async def activate(svc: Service, index: str) -> retrieval_pb2.KnowledgeBase:
    return await svc.stub.UpdateKnowledgeBase(
        retrieval_pb2.UpdateKnowledgeBaseRequest(
            knowledge_base=retrieval_pb2.KnowledgeBase(name=DEFAULT_KB, active_index=index),
            update_mask=field_mask_pb2.FieldMask(paths=["active_index"]),
        )
    )


async def held(svc: Service, index: str) -> set[tuple[str, str]]:
    """The (document_id, version) of every leaf row the index holds."""
    kb, _ = parse_index_name(index, "index")
    record = await svc.app.indexes.get(index)
    chunks = (await svc.app.generations.open(record)).chunks
    assert isinstance(chunks, ChunkStore)
    return await chunks.document_versions(3, kb)


async def current(svc: Service) -> set[tuple[str, str]]:
    page = await svc.app.registry.page(1000, "", DEFAULT_KB)
    return {(e.document_id, e.version) for e in page.entries}


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request: pytest.FixtureRequest) -> dict[str, str]:
    """The control plane: the SQLite file beside the Lite store, or a PostgreSQL database."""
    if request.param == "sqlite":
        return {}
    return {"database_url": str(request.getfixturevalue("postgres_url"))}


async def test_build_read_switch_back_and_delete(tmp_path: Path, database: dict[str, str]) -> None:
    async with service(tmp_path / "kb.db", **database) as (svc, ops):
        await svc.app.ingestor.ingest(corpus_documents())
        kb = await svc.stub.GetKnowledgeBase(retrieval_pb2.GetKnowledgeBaseRequest(name=DEFAULT_KB))
        assert kb.active_index == INITIAL
        listed = await svc.stub.ListIndexes(retrieval_pb2.ListIndexesRequest(parent=DEFAULT_KB))
        assert [(i.name, i.state) for i in listed.indexes] == [(INITIAL, State.READY)]
        assert listed.indexes[0].create_time == kb.create_time

        op = await create_index(svc, "big", chunk_size=1200, chunk_overlap=150)
        index = built(await wait(ops, op.name, 600))
        assert (index.name, index.state, index.config.chunk_size) == (BIG, State.READY, 1200)
        assert index.documents_indexed == index.documents_total == len(await current(svc))
        assert await held(svc, BIG) == await held(svc, INITIAL) == await current(svc)

        query = retrieval_pb2.RetrieveRequest(query="How long should adults sleep?", top_k=3)
        on_initial = await svc.stub.Retrieve(query)
        query.index = BIG
        on_big = await svc.stub.Retrieve(query)
        assert on_big.docs and on_initial.docs
        # Bigger leaves: the same question is answered from other, longer chunks.
        assert {d.chunk_id for d in on_big.docs} != {d.chunk_id for d in on_initial.docs}

        assert (await activate(svc, BIG)).active_index == BIG
        query.ClearField("index")
        switched = await svc.stub.Retrieve(query)
        assert [d.chunk_id for d in switched.docs] == [d.chunk_id for d in on_big.docs]

        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await svc.stub.DeleteIndex(retrieval_pb2.DeleteIndexRequest(name=BIG))
        assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION

        assert (await activate(svc, INITIAL)).active_index == INITIAL
        back = await svc.stub.Retrieve(query)
        assert [d.chunk_id for d in back.docs] == [d.chunk_id for d in on_initial.docs]

        # On the new index for good: the old one goes, its rows with it.
        await activate(svc, BIG)
        await svc.stub.DeleteIndex(retrieval_pb2.DeleteIndexRequest(name=INITIAL))
        listed = await svc.stub.ListIndexes(retrieval_pb2.ListIndexesRequest(parent=DEFAULT_KB))
        assert [i.name for i in listed.indexes] == [BIG]
        assert not await svc.app.chunks.document_versions(3, DEFAULT_KB)
        with pytest.raises(grpc.aio.AioRpcError) as gone:
            await svc.stub.Retrieve(retrieval_pb2.RetrieveRequest(query="sleep", index=INITIAL))
        assert gone.value.code() == grpc.StatusCode.NOT_FOUND
        after = await svc.stub.Retrieve(query)
        assert [d.chunk_id for d in after.docs] == [d.chunk_id for d in on_big.docs]
        # Writes now reach the one index left, and a deletion takes them from it.
        await svc.ingest(("late.md", b"Late notes: adults should sleep seven to nine hours."))
        assert ("late.md", (await svc.app.registry.get("late.md")).version) in await held(svc, BIG)
        await svc.stub.DeleteDocuments(retrieval_pb2.DeleteDocumentsRequest(filenames=["late.md"]))
        assert "late.md" not in {d for d, _ in await held(svc, BIG)}


TOPICS = ["harbour", "orchard", "glacier", "library", "railway", "vineyard", "observatory"]


def document(n: int, edition: int = 0) -> tuple[str, bytes]:
    """A document of about 1,500 characters: long enough that 80- and 1,000-character leaves
    cut it differently."""
    topic = TOPICS[n % len(TOPICS)]
    sentences = [
        f"Note {n} edition {edition}: the {topic} keeper records entry {i} of the season, "
        f"when the {topic} opened at {6 + i % 5} in the morning and closed at dusk."
        for i in range(14)
    ]
    return f"note-{n:03}.md", " ".join(sentences).encode()


async def rows(svc: Service, index: str) -> set[tuple[str, str]]:
    """(chunk_id, text) of every row of every level the index holds for the default
    knowledge base: what tells one index's chunks from the other's."""
    record = await svc.app.indexes.get(index)
    chunks = (await svc.app.generations.open(record)).chunks
    assert isinstance(chunks, ChunkStore)
    out: set[tuple[str, str]] = set()
    for level in (1, 2, 3):
        out |= await chunks.chunk_texts(level, DEFAULT_KB)
    return out


async def test_a_build_beside_live_writes_then_a_switch_under_load(tmp_path: Path) -> None:
    second = EmbeddingsServer(32, batch_delay=0.01).start()
    embedders = {"second": {"base_url": second.base_url, "model": "fake", "dimension": 32}}
    try:
        async with service(tmp_path / "kb.db", embedders=embedders) as (svc, ops):
            await svc.ingest(*(document(n) for n in range(24)))
            op = await create_index(svc, "second", embedder="second", chunk_size=1000)

            # A client keeps ingesting, replacing and deleting while the build runs.
            async def writer() -> int:
                n = 24
                while not (
                    await ops.GetOperation(operations_pb2.GetOperationRequest(name=op.name))
                ).done:
                    await svc.ingest(document(n), document(n % 24, edition=n))
                    await svc.stub.DeleteDocuments(
                        retrieval_pb2.DeleteDocumentsRequest(document_ids=[document(n - 20)[0]])
                    )
                    n += 1
                return n - 24

            writes = await writer()
            index = built(await wait(ops, op.name, 600))
            assert writes >= 1  # the build ran beside live writes
            assert index.config.embedder == "second" and index.config.dimension == 32
            name = DEFAULT_KB + "/indexes/second"
            assert await held(svc, name) == await held(svc, INITIAL) == await current(svc)

            # A steady Retrieve load through two switches: no call fails, and every answer
            # comes from one index or the other, never both.
            initial_rows, second_rows = await rows(svc, INITIAL), await rows(svc, name)
            answers: list[set[tuple[str, str]]] = []
            stop = asyncio.Event()

            async def reader(question: str) -> None:
                while not stop.is_set():
                    reply = await svc.stub.Retrieve(
                        retrieval_pb2.RetrieveRequest(query=question, top_k=5)
                    )
                    answers.append({(d.chunk_id, d.text) for d in reply.docs})

            readers = [
                asyncio.create_task(reader(f"When does the {topic} open?")) for topic in TOPICS[:3]
            ]
            await asyncio.sleep(0.3)
            await activate(svc, name)
            await asyncio.sleep(0.3)
            await activate(svc, INITIAL)
            await asyncio.sleep(0.3)
            stop.set()
            await asyncio.gather(*readers)  # any failed call raises here
            assert answers
            assert all(a <= initial_rows or a <= second_rows for a in answers)
            assert any(a and a <= second_rows and not a <= initial_rows for a in answers)
            assert any(a and a <= initial_rows and not a <= second_rows for a in answers)
    finally:
        second.stop()


def test_a_build_killed_midway_resumes_where_it_was(tmp_path: Path) -> None:
    """SIGKILL mid-build: the restarted service resumes the build from its last save (the
    second embedder is not asked again for what was written before the kill)."""
    first = EmbeddingsServer(DIM).start()
    second = EmbeddingsServer(32, batch_delay=0.1).start()
    env = {
        **embedding_env(first),
        "MILVUS_URI": str(tmp_path / "kb.db"),
        "EMBEDDERS": json.dumps(
            {"second": {"base_url": second.base_url, "model": "fake", "dimension": 32}}
        ),
    }
    log = tmp_path / "service.log"
    service = ServiceProcess(log, env)
    try:
        service.stub.IngestDocuments(
            retrieval_pb2.IngestDocumentsRequest(
                documents=[
                    retrieval_pb2.SourceDocument(filename=f, content=c)
                    for f, c in (document(n) for n in range(40))
                ]
            ),
            timeout=120,
        )
        op = service.stub.CreateIndex(
            retrieval_pb2.CreateIndexRequest(
                parent=DEFAULT_KB,
                index_id="second",
                index=retrieval_pb2.Index(
                    config=retrieval_pb2.IndexConfig(embedder="second", chunk_size=1000)
                ),
            ),
            timeout=30,
        )
        ops = operations_pb2_grpc.OperationsStub(service.channel)
        deadline = time.monotonic() + 120
        while (
            build_progress(
                ops.GetOperation(operations_pb2.GetOperationRequest(name=op.name))
            ).documents_indexed
            < 8
        ):
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.05)
        service.proc.kill()
        assert service.wait_crashed() == -9
        service.stop()
        before = second.texts_embedded

        service = ServiceProcess(log, env)
        ops = operations_pb2_grpc.OperationsStub(service.channel)
        done = ops.WaitOperation(
            operations_pb2.WaitOperationRequest(
                name=op.name, timeout=duration_pb2.Duration(seconds=120)
            ),
            timeout=130,
        )
        assert done.done and built(done).state == State.READY, log.read_text()[-3000:]
        final = build_progress(done)
        assert final.documents_indexed == final.documents_total == 40
        assert second.texts_embedded - before < final.leaves_written
        reply = service.stub.Retrieve(
            retrieval_pb2.RetrieveRequest(
                query="When does the harbour open?", index=DEFAULT_KB + "/indexes/second"
            ),
            timeout=30,
        )
        assert reply.docs
    finally:
        service.stop()
        first.stop()
        second.stop()


def build_progress(op: operations_pb2.Operation) -> retrieval_pb2.CreateIndexMetadata:
    out = retrieval_pb2.CreateIndexMetadata()
    assert op.metadata.Unpack(out)
    return out


async def test_run_evaluation_against_each_index_gives_each_its_figures(tmp_path: Path) -> None:
    """Two indexes measured on the same questions before a switch: RunConfig.index reads each,
    and CompareEvaluationRuns pairs them."""
    async with service(tmp_path / "kb.db") as (svc, ops):
        await ingest_scifact(svc)
        index = built(await wait(ops, (await create_index(svc, "big", chunk_size=1200)).name, 600))
        async with orchestrator(svc.port, tmp_path / "orchestrator.sqlite3") as stack:
            created = await stack.evaluation.CreateEvaluationSet(
                evaluation_pb2.CreateEvaluationSetRequest(evaluation_set_id="scifact")
            )
            await stack.evaluation.ImportEvaluationItems(
                evaluation_pb2.ImportEvaluationItemsRequest(
                    evaluation_set=created.name,
                    format=evaluation_pb2.ImportEvaluationItemsRequest.BEIR,
                    queries=(SCIFACT / "queries.jsonl").read_bytes(),
                    qrels=(SCIFACT / "qrels" / "train.tsv").read_bytes(),
                )
            )
            runs = [
                await run_evaluation(
                    stack,
                    created.name,
                    evaluation_pb2.RunConfig(
                        mode=evaluation_pb2.RunConfig.RETRIEVAL, top_k=10, index=name
                    ),
                )
                for name in (INITIAL, index.name)
            ]
            assert [r.config.index for r in runs] == [INITIAL, index.name]
            figures = [dict(r.metrics) for r in runs]
            assert figures[0]["ndcg@10"] != figures[1]["ndcg@10"]
            compared = await stack.evaluation.CompareEvaluationRuns(
                evaluation_pb2.CompareEvaluationRunsRequest(a=runs[0].name, b=runs[1].name)
            )
            rows = {row.metric: row for row in compared.metrics}
            assert rows["ndcg@10"].difference == pytest.approx(
                figures[1]["ndcg@10"] - figures[0]["ndcg@10"]
            )
            assert compared.items_paired == runs[0].items_done == runs[1].items_done
