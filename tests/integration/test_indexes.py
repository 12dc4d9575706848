"""Index generations (docs/api.md#indexes) through the real service on 127.0.0.1 (Milvus Lite
and its SQLite control plane): every knowledge base starts on `initial`; CreateIndex builds
another chunking or embedder beside it as an operation while ingests and deletes reach both;
Retrieve reads a named index; the switch and the switch back; DeleteIndex; a build killed
midway resumes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.longrunning import operations_pb2_grpc
from google.longrunning import operations_proto_pb2 as operations_pb2
from google.protobuf import duration_pb2, field_mask_pb2
from supermew.v1 import retrieval_pb2

from retrieval_service.adapters.milvus.chunk_store import ChunkStore
from retrieval_service.core.identity import DEFAULT_KB
from retrieval_service.core.indexes.model import parse_index_name
from tests.integration.retrieval_harness import Service, copy_corpus, running_service

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


async def wait(ops: Any, name: str, seconds: float = 300) -> operations_pb2.Operation:
    op = await ops.WaitOperation(
        operations_pb2.WaitOperationRequest(
            name=name, timeout=duration_pb2.Duration(seconds=int(seconds))
        ),
        timeout=seconds + 5,
    )
    assert op.done, op
    return op


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


async def test_build_read_switch_back_and_delete(tmp_path: Path) -> None:
    async with service(copy_corpus(tmp_path)) as (svc, ops):
        kb = await svc.stub.GetKnowledgeBase(retrieval_pb2.GetKnowledgeBaseRequest(name=DEFAULT_KB))
        assert kb.active_index == INITIAL
        listed = await svc.stub.ListIndexes(retrieval_pb2.ListIndexesRequest(parent=DEFAULT_KB))
        assert [(i.name, i.state) for i in listed.indexes] == [(INITIAL, State.READY)]

        op = await create_index(svc, "big", chunk_size=1200, chunk_overlap=150)
        index = built(await wait(ops, op.name))
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

        await svc.stub.DeleteIndex(retrieval_pb2.DeleteIndexRequest(name=BIG))
        listed = await svc.stub.ListIndexes(retrieval_pb2.ListIndexesRequest(parent=DEFAULT_KB))
        assert [i.name for i in listed.indexes] == [INITIAL]
        with pytest.raises(grpc.aio.AioRpcError) as gone:
            await svc.stub.Retrieve(retrieval_pb2.RetrieveRequest(query="sleep", index=BIG))
        assert gone.value.code() == grpc.StatusCode.NOT_FOUND
        await asyncio.sleep(0)
