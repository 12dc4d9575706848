"""The retrieval CLI's `index` commands, `search --index` and `kb get`'s active index as a
subprocess against a scripted RetrievalService and Operations server on 127.0.0.1 (real gRPC,
scripted replies): what each command sends, what it prints (text and `--json`), how
`index create --wait` follows the build's operation to its end and its exit code, a name that
is no index refused before any call, and a refusal printed as its status."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest
from google.longrunning import operations_pb2_grpc
from google.longrunning import operations_proto_pb2 as operations_pb2
from google.protobuf import empty_pb2, field_mask_pb2
from google.rpc import status_pb2
from supermew.v1 import retrieval_pb2 as R
from supermew.v1 import retrieval_pb2_grpc

from tests.integration.test_retrieval_cli import _cli

pytestmark = pytest.mark.integration

INDEX = "knowledge_bases/hr/indexes/e5-large"
INITIAL = "knowledge_bases/hr/indexes/initial"
BuildState = R.ImportDocumentsMetadata.State


def _index(name: str, state: int = R.Index.READY, **config: Any) -> R.Index:
    return R.Index(
        name=name,
        config=R.IndexConfig(**config),
        state=state,
        documents_indexed=4,
        documents_total=4,
    )


def _build(done: bool, *, error: str = "") -> operations_pb2.Operation:
    op = operations_pb2.Operation(name="operations/b1", done=done)
    op.metadata.Pack(
        R.CreateIndexMetadata(
            index=INDEX,
            state=(BuildState.FAILED if error else BuildState.SUCCEEDED)
            if done
            else BuildState.RUNNING,
            progress_percent=100 if done else 50,
            documents_total=4,
            documents_indexed=4 if done else 2,
            leaves_written=40 if done else 20,
        )
    )
    if error:
        op.error.CopyFrom(status_pb2.Status(code=13, message=error))
    elif done:
        op.response.Pack(_index(INDEX, embedder="e5-large", chunk_size=512))
    return op


@dataclass
class Script:
    """The requests the server got, and the build's states GetOperation answers in turn."""

    received: list[Any] = field(default_factory=list)
    build: list[operations_pb2.Operation] = field(default_factory=list)
    active: str = INITIAL


class _Retrieval(retrieval_pb2_grpc.RetrievalServiceServicer):
    def __init__(self, script: Script) -> None:
        self.s = script

    async def CreateIndex(self, request, context):
        self.s.received.append(request)
        return _build(False)

    async def ListIndexes(self, request, context):
        self.s.received.append(request)
        if not request.page_token:  # two pages: the CLI reads every one
            return R.ListIndexesResponse(indexes=[_index(INDEX)], next_page_token="p2")
        return R.ListIndexesResponse(indexes=[_index(INITIAL)])

    async def GetIndex(self, request, context):
        self.s.received.append(request)
        return _index(request.name, R.Index.BUILDING, embedder="e5-large")

    async def DeleteIndex(self, request, context):
        self.s.received.append(request)
        if request.name == self.s.active:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "name: the active index")
        return empty_pb2.Empty()

    async def GetKnowledgeBase(self, request, context):
        self.s.received.append(request)
        return R.KnowledgeBase(name=request.name, display_name="HR", active_index=self.s.active)

    async def UpdateKnowledgeBase(self, request, context):
        self.s.received.append(request)
        self.s.active = request.knowledge_base.active_index
        return R.KnowledgeBase(name=request.knowledge_base.name, active_index=self.s.active)

    async def Retrieve(self, request, context):
        self.s.received.append(request)
        return R.RetrieveResponse()


class _Operations(operations_pb2_grpc.OperationsServicer):
    def __init__(self, script: Script) -> None:
        self.s = script

    async def GetOperation(self, request, context):
        self.s.received.append(request)
        return self.s.build.pop(0) if len(self.s.build) > 1 else self.s.build[0]


@pytest.fixture
async def scripted() -> AsyncIterator[tuple[Script, int]]:
    script = Script()
    server = grpc.aio.server()
    retrieval_pb2_grpc.add_RetrievalServiceServicer_to_server(_Retrieval(script), server)
    operations_pb2_grpc.add_OperationsServicer_to_server(_Operations(script), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield script, port
    finally:
        await server.stop(0)


async def test_create_waits_for_the_build_and_prints_the_ready_index(scripted) -> None:
    script, port = scripted
    script.build = [_build(False), _build(False), _build(True)]
    rc, out, err = await _cli(
        port, "index", "create", "hr", "e5-large", "--embedder", "e5-large", "--chunk-size",
        "512", "--leaf-context-header", "--wait",
    )  # fmt: skip
    assert rc == 0, err
    assert script.received[0] == R.CreateIndexRequest(
        parent="knowledge_bases/hr",
        index_id="e5-large",
        index=R.Index(
            config=R.IndexConfig(embedder="e5-large", chunk_size=512, leaf_context_header=True)
        ),
    )
    polls = script.received[1:]
    assert polls == [operations_pb2.GetOperationRequest(name="operations/b1")] * 3
    lines = out.splitlines()
    assert lines[0] == (
        f"operations/b1  {INDEX}  SUCCEEDED  100%  4/4 document(s), 40 leaves written"
    )
    assert lines[1].startswith(f"{INDEX}\tREADY\tembedder=e5-large  dimension=-  chunk_size=512")
    assert "Traceback" not in err


async def test_create_without_wait_prints_the_operation_and_json_follows_it(scripted) -> None:
    script, port = scripted
    rc, out, err = await _cli(port, "index", "create", "hr", "v2")
    assert rc == 0, err
    assert out.strip() == "started operations/b1; follow it with: operations wait operations/b1"
    assert len(script.received) == 1  # no GetOperation
    script.build = [_build(True)]
    rc, out, err = await _cli(port, "index", "create", "hr", "v2", "--wait", "--json")
    assert rc == 0, err
    done = json.loads(out)
    assert done["done"] is True and done["response"]["state"] == "READY"
    assert done["metadata"]["state"] == "SUCCEEDED" and done["response"]["name"] == INDEX


async def test_operations_wait_and_get_show_a_build(scripted) -> None:
    script, port = scripted
    script.build = [_build(False), _build(True)]
    rc, out, err = await _cli(port, "operations", "wait", "operations/b1")
    assert rc == 0, err
    assert out.splitlines()[0] == (
        f"operations/b1  {INDEX}  SUCCEEDED  100%  4/4 document(s), 40 leaves written"
    )
    rc, out, err = await _cli(port, "operations", "get", "operations/b1", "--json")
    assert rc == 0, err
    assert json.loads(out)["response"]["name"] == INDEX


async def test_a_failed_build_exits_one_with_its_error(scripted) -> None:
    script, port = scripted
    script.build = [_build(True, error="embedder e5-large did not answer")]
    rc, out, _ = await _cli(port, "index", "create", "hr", "e5-large", "--wait")
    assert rc == 1
    assert "FAILED" in out and "\n  error: embedder e5-large did not answer" in out


async def test_list_reads_every_page_and_marks_the_active_index(scripted) -> None:
    script, port = scripted
    rc, out, err = await _cli(port, "index", "list", "knowledge_bases/hr")
    assert rc == 0, err
    assert script.received == [
        R.ListIndexesRequest(parent="knowledge_bases/hr", page_size=1000),
        R.ListIndexesRequest(parent="knowledge_bases/hr", page_size=1000, page_token="p2"),
        R.GetKnowledgeBaseRequest(name="knowledge_bases/hr"),
    ]
    lines = out.splitlines()
    assert [line.split("\t")[:2] for line in lines] == [
        [INDEX, "READY"],
        [INITIAL, "READY  (active)"],
    ]
    rc, out, _ = await _cli(port, "index", "list", "hr", "--json")
    assert [(i["name"], i["active"]) for i in json.loads(out)] == [(INDEX, False), (INITIAL, True)]


async def test_get_activate_and_delete(scripted) -> None:
    script, port = scripted
    rc, out, err = await _cli(port, "index", "get", "hr/e5-large", "--json")
    assert rc == 0, err
    assert json.loads(out)["state"] == "BUILDING"
    rc, out, err = await _cli(port, "index", "activate", INDEX)
    assert rc == 0, err
    assert out.strip() == f"knowledge_bases/hr now reads {INDEX}"
    rc, out, err = await _cli(port, "kb", "get", "hr")
    assert rc == 0 and f"active_index={INDEX}" in out
    rc, out, _ = await _cli(port, "kb", "get", "hr", "--json")
    assert json.loads(out)["active_index"] == INDEX
    rc, out, err = await _cli(port, "index", "delete", "hr/initial")
    assert rc == 0 and out.strip() == f"deleted {INITIAL}"
    rc, _, err = await _cli(port, "index", "delete", INDEX)  # now the active one
    assert rc == 1 and "index delete failed: FAILED_PRECONDITION: name: the active index" in err
    assert script.received[:2] == [
        R.GetIndexRequest(name=INDEX),
        R.UpdateKnowledgeBaseRequest(
            knowledge_base=R.KnowledgeBase(name="knowledge_bases/hr", active_index=INDEX),
            update_mask=field_mask_pb2.FieldMask(paths=["active_index"]),
        ),
    ]
    assert script.received[-2:] == [
        R.DeleteIndexRequest(name=INITIAL),
        R.DeleteIndexRequest(name=INDEX),
    ]


async def test_a_name_that_is_no_index_exits_two_before_any_call(scripted) -> None:
    script, port = scripted
    for command in ("get", "activate", "delete"):
        rc, out, err = await _cli(port, "index", command, "e5-large")
        assert rc == 2 and out == ""
        assert err.startswith("error: 'e5-large' is not an index: name it knowledge_bases/KB")
    assert script.received == []


async def test_search_sends_the_index(scripted) -> None:
    script, port = scripted
    rc, out, err = await _cli(port, "search", "leave", "--kb", "hr", "--index", INDEX)
    assert rc == 0, err
    assert out.strip() == "0 chunk(s), retrieval_mode="
    assert script.received == [
        R.RetrieveRequest(query="leave", knowledge_bases=["hr"], index=INDEX)
    ]
