"""Status codes through the retrieval service's real RPCs (Milvus Lite on a temp dir, the scripted
rerank endpoint on 127.0.0.1), and the orchestrator against it: filenames are validated the
same way on every RPC, a store failure reads as what it is without internals, rerank errors
are scrubbed of the key, a valid 4,000-character question survives the rewrite path, and a
verdict on the caller's fields carries typed details the orchestrator passes on."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import grpc
import pytest
from supermew.v1 import orchestrator_pb2, retrieval_pb2

from retrieval_service.adapters.sql.database import SQLITE_SUFFIX
from shared.codec import rag_trace_from_proto
from shared.error_details import ErrorDetails, read_details
from tests.fakes.model_server import ModelScript, complexity, grade, rewrite
from tests.fakes.orchestrator_stack import start_stack
from tests.fakes.rerank_server import RerankServer
from tests.integration.retrieval_harness import copy_corpus, running_service

RERANK_KEY = "rk-live-0123456789abcdef"
INTERNALS = ("Exception", "Traceback", "code=", "filename ==", "filename in", "chunk_id in", "/")


def _assert_no_internals(details: str) -> None:
    for marker in INTERNALS:
        assert marker not in details, (marker, details)


@pytest.fixture
def rerank_server():
    server = RerankServer().start()
    yield server
    server.stop()


@pytest.mark.parametrize(
    "filename",
    [
        "tea\n.txt",
        "tea.txt\r",
        "tea.txt\r\nfilename != ''",
        'tea.txt" || filename != "',
        "tea\x00.txt",
        "../tea.txt",
        "x" * 300 + ".txt",
    ],
    ids=["newline", "carriage_return", "crlf_filter", "quote_filter", "nul", "dotdot", "long"],
)
async def test_delete_rejects_a_filename_ingest_would_reject(tmp_path, filename) -> None:
    async with running_service(copy_corpus(tmp_path)) as svc:
        before = (await svc.counts(), await svc.listing())
        request = retrieval_pb2.DeleteDocumentsRequest(filenames=["sleep.md", filename])
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await svc.stub.DeleteDocuments(request)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert err.value.details().startswith("filenames[1]: ")
        _assert_no_internals(err.value.details().removeprefix("filenames[1]: "))
        assert (await svc.counts(), await svc.listing()) == before


async def test_a_store_failure_is_not_an_argument_error_and_shows_no_internals(tmp_path) -> None:
    db = copy_corpus(tmp_path)
    async with running_service(db) as svc:
        await svc.app.store.aclose()  # the store's connection is gone
        # and the control-plane database is broken (ListDocuments reads it alone)
        with sqlite3.connect(db.with_name("kb" + SQLITE_SUFFIX)) as connection:
            connection.execute("DROP TABLE documents")
        calls = {
            "list": svc.stub.ListDocuments(retrieval_pb2.ListDocumentsRequest()),
            "delete": svc.stub.DeleteDocuments(
                retrieval_pb2.DeleteDocumentsRequest(filenames=["tea.txt"])
            ),
            "ingest": svc.stub.IngestDocuments(
                retrieval_pb2.IngestDocumentsRequest(
                    documents=[retrieval_pb2.SourceDocument(filename="n.txt", content=b"hi there")]
                )
            ),
        }
        for name, call in calls.items():
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await call
            code = err.value.code()
            assert code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.INTERNAL), name
            _assert_no_internals(err.value.details())
        # Retrieve records a failed recall in its meta instead of failing (docs/api.md).
        _, meta = await svc.retrieve("tea")
        assert meta["retrieval_mode"] == "failed"
        _assert_no_internals(meta["rerank_error"])


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (401, f'{{"error": "invalid api key {RERANK_KEY}"}}'),
        (400, f"bad request for key={RERANK_KEY}\n" + "x" * 5000),
    ],
    ids=["quoted_key", "long_body"],
)
async def test_rerank_error_never_carries_the_key_and_is_capped(
    tmp_path, rerank_server, status, body
) -> None:
    settings = {
        "rerank_host": rerank_server.host,
        "rerank_model": "rerank-test",
        "rerank_api_key": RERANK_KEY,
    }
    async with running_service(copy_corpus(tmp_path), **settings) as svc:
        rerank_server.reply_raw(status, body)
        docs, meta = await svc.retrieve("tea kinds", top_k=3)
    error = meta["rerank_error"]
    assert error.startswith(f"HTTP {status}: ") and "[redacted]" in error
    assert RERANK_KEY not in error and "\n" not in error and len(error) <= 500
    assert docs  # the score-sort fallback still answers


async def test_a_4000_character_question_on_the_rewrite_path_answers(tmp_path) -> None:
    question = ("年假需要提前多久申请，" * 400)[:4000]
    helper = "员工年假申请的一般流程和提前量规定是什么？" * 10  # 210 of the 300 allowed
    script = ModelScript()
    script.add("complexity_classification", question, complexity("simple"))
    script.add(
        "evidence_grade",
        question,
        grade("weak", "partial", "rewrite", confidence=0.4),
        grade("strong", "sufficient", "answer"),
    )
    script.add("query_rewrite", question, rewrite("step_back", helper))
    async with running_service(copy_corpus(tmp_path)) as retrieval:
        stack = await start_stack(script, retrieval_addr=f"127.0.0.1:{retrieval.port}")
        try:
            result = await stack.run(question)
        finally:
            await stack.aclose()
    trace = rag_trace_from_proto(result.rag_trace)
    assert result.route == "answer" and trace["retrieval_stage"] == "rewritten"
    assert len(trace["rewritten_query"]) > 4000  # what the model produced, recorded whole
    assert trace["rewrite_method"] == "step_back"


async def test_a_domain_error_carries_typed_details(tmp_path) -> None:
    """NOT_FOUND for an unknown knowledge base and INVALID_ARGUMENT for a bad filter carry an
    ErrorInfo naming the field (and a BadRequest for the invalid one): what the orchestrator
    decides from (docs/api.md#error-details)."""
    async with running_service(copy_corpus(tmp_path)) as svc:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await svc.stub.Retrieve(
                retrieval_pb2.RetrieveRequest(query="tea", knowledge_bases=["default", "nope"])
            )
        assert err.value.code() == grpc.StatusCode.NOT_FOUND
        assert read_details(err.value) == ErrorDetails("NOT_FOUND", "knowledge_bases[1]")
        assert (err.value.details() or "").startswith("knowledge_bases[1]: ")

        with pytest.raises(grpc.aio.AioRpcError) as err:
            await svc.stub.Retrieve(
                retrieval_pb2.RetrieveRequest(query="tea", filter="metadata.x =")
            )
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        info = read_details(err.value)
        assert info is not None and (info.reason, info.field) == ("INVALID_ARGUMENT", "filter")
        assert info.description and err.value.details() == f"filter: {info.description}"


async def test_the_orchestrator_passes_an_unknown_knowledge_base_on_naming_the_field(
    tmp_path,
) -> None:
    """End to end: retrieval's NOT_FOUND (its ErrorInfo naming `knowledge_bases[0]`) is the
    run's NOT_FOUND with that field, in the orchestrator's details as in its own."""
    question = "丹瑾是什么属性？"  # fast path: no model call before the retrieval
    async with running_service(copy_corpus(tmp_path)) as retrieval:
        with pytest.raises(grpc.aio.AioRpcError) as direct:
            await retrieval.stub.Retrieve(
                retrieval_pb2.RetrieveRequest(query=question, knowledge_bases=["nope"])
            )
        stack = await start_stack(ModelScript(), retrieval_addr=f"127.0.0.1:{retrieval.port}")
        try:
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await stack.stub.Run(
                    orchestrator_pb2.RunRequest(question=question, knowledge_bases=["nope"])
                )
        finally:
            await stack.aclose()
    said = direct.value.details() or ""
    assert said.startswith("knowledge_bases[0]: ") and "nope" in said
    assert (err.value.code(), err.value.details()) == (grpc.StatusCode.NOT_FOUND, said)
    assert read_details(err.value) == ErrorDetails("NOT_FOUND", "knowledge_bases[0]")


async def test_a_refused_ingest_is_logged_naming_the_document(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The caller hears `documents[2].content`; the service's log line also names the
    document (its id, else its file name), so an operator finds it among many."""
    async with running_service(tmp_path / "kb.db") as svc:
        request = retrieval_pb2.IngestDocumentsRequest(
            documents=[
                retrieval_pb2.SourceDocument(filename="a.md", content=b"Fine text."),
                retrieval_pb2.SourceDocument(filename="b.md", content=b"Fine too."),
                retrieval_pb2.SourceDocument(
                    filename="c.md", content=b"", document_id="guides/empty.md"
                ),
            ]
        )
        with (
            caplog.at_level(logging.INFO, logger="shared.serve"),
            pytest.raises(grpc.aio.AioRpcError) as refused,
        ):
            await svc.stub.IngestDocuments(request)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert (refused.value.details() or "").startswith("documents[2].content")
        lines = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
        assert any("documents[2] (guides/empty.md).content" in line for line in lines), lines
