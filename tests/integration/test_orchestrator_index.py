"""A run's `index` (RunRequest.index, docs/api.md#indexes) through the real Run RPCs and their
streams, against the scripted retrieval server: every Retrieve of the run carries it (the first
recall, each sub-question, the rewrite) and a Resume's, sent again; retrieval's NOT_FOUND,
INVALID_ARGUMENT and FAILED_PRECONDITION about `index` are the run's own status naming `index`
(docs/api.md#what-the-orchestrator-answers-when-retrieval-fails); a malformed index is refused
before any retrieval; and `ask --index` sends it from the CLI."""

from __future__ import annotations

import hashlib
import json

import grpc
import pytest
from supermew.v1 import orchestrator_pb2

from shared.codec import hitl_state_to_proto
from shared.error_details import read_details
from tests.fakes.model_server import ModelScript, complexity, grade, rewrite
from tests.fakes.orchestrator_stack import Stack, start_stack
from tests.fakes.retrieval_servicer import Failure, RetrievalScript, chunk
from tests.integration.test_orchestrator_cli import _cli
from tests.integration.test_orchestrator_knowledge_bases import (
    ANSWER,
    Q_CMP,
    QSTAR,
    RQ_SB,
    S1,
    S2,
    SB,
    SNAP,
    Q,
    _code_of,
    _error_of,
    _stream_error_of,
    _stream_result,
)

pytestmark = pytest.mark.integration

INDEX = "knowledge_bases/hr/indexes/e5-large"
DOC = chunk("notes.md", "0", "丹瑾：衍射属性。", knowledge_base="knowledge_bases/hr")


def _sent(stack: Stack) -> list[tuple[str, tuple[str, ...], str]]:
    return [(s.query, s.knowledge_bases, s.index) for s in stack.retrieval.sent]


def _run(question: str, index: str = INDEX, kbs: tuple[str, ...] = ("hr",)):
    return orchestrator_pb2.RunRequest(question=question, knowledge_bases=kbs, index=index)


async def test_a_simple_run_reads_the_index() -> None:
    s = await start_stack(
        ModelScript().add("evidence_grade", Q, ANSWER), RetrievalScript().add(Q, [DOC])
    )
    try:
        assert (await s.stub.Run(_run(Q))).route == "answer"
        # Naming only the index: the run searches its knowledge base, the index passed on.
        await s.stub.Run(_run(Q, kbs=()))
        assert _sent(s) == [(Q, ("hr",), INDEX), (Q, (), INDEX)]
    finally:
        await s.aclose()


@pytest.mark.parametrize("streamed", [False, True], ids=["Run", "StreamRun"])
async def test_each_sub_question_reads_the_index(streamed) -> None:
    ms = (
        ModelScript()
        .add("complexity_classification", Q_CMP, complexity("complex", "对比", [S1, S2]))
        .add("evidence_grade", S1, ANSWER)
        .add("evidence_grade", S2, ANSWER)
    )
    s = await start_stack(ms, RetrievalScript().add(S1, [DOC]).add(S2, [DOC]))
    try:
        call = s.stub.StreamRun(_run(Q_CMP)) if streamed else s.stub.Run(_run(Q_CMP))
        result = await (_stream_result(call) if streamed else call)
        assert result.route == "answer"
        assert sorted(_sent(s)) == sorted([(S1, ("hr",), INDEX), (S2, ("hr",), INDEX)])
    finally:
        await s.aclose()


async def test_the_rewrites_retrieval_reads_the_index() -> None:
    ms = (
        ModelScript()
        .add("evidence_grade", Q, grade("weak", "partial", "rewrite", confidence=0.4), ANSWER)
        .add("query_rewrite", Q, rewrite("step_back", SB))
    )
    s = await start_stack(ms, RetrievalScript().add(Q, [DOC]).add(RQ_SB, [DOC]))
    try:
        result = await s.stub.Run(_run(Q))
        assert result.route == "answer" and result.rag_trace.rewrite_method == "step_back"
        assert _sent(s) == [(Q, ("hr",), INDEX), (RQ_SB, ("hr",), INDEX)]
    finally:
        await s.aclose()


async def test_a_resume_reads_the_index_it_is_sent_again() -> None:
    s = await start_stack(
        ModelScript().add("evidence_grade", QSTAR, ANSWER), RetrievalScript().add(QSTAR, [DOC])
    )
    try:
        request = orchestrator_pb2.ResumeRequest(
            resume_state=hitl_state_to_proto(SNAP), user_answer="丹瑾", knowledge_bases=["hr"]
        )
        await s.stub.Resume(request)
        request.index = INDEX
        await s.stub.Resume(request)
        assert _sent(s) == [(QSTAR, ("hr",), ""), (QSTAR, ("hr",), INDEX)]
        # Checked as RunRequest.index is, before any retrieval.
        request.index = "knowledge_bases/sales/indexes/v2"
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await s.stub.Resume(request)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert refused.value.details().startswith("index: is an index of knowledge_bases/sales")
        assert len(s.retrieval.sent) == 2
    finally:
        await s.aclose()


VERDICTS = [
    (grpc.StatusCode.NOT_FOUND, f"index: {INDEX} does not exist"),
    (
        grpc.StatusCode.INVALID_ARGUMENT,
        "index: is an index of knowledge_bases/hr, not of the run's",
    ),
    (grpc.StatusCode.FAILED_PRECONDITION, f"index: {INDEX} is BUILDING, not READY"),
]


@pytest.mark.parametrize("verdict", VERDICTS, ids=["not_found", "invalid", "not_ready"])
@pytest.mark.parametrize("rpc", ["Run", "StreamRun"])
async def test_retrievals_verdict_on_the_index_is_the_runs_status_naming_index(
    rpc, verdict
) -> None:
    code, details = verdict
    s = await start_stack(retrieval_script=RetrievalScript().fail(Q, code, details))
    try:
        call = getattr(s.stub, rpc)(_run(Q))
        error = await (_stream_error_of(call) if rpc.startswith("Stream") else _error_of(call))
        assert (error.code(), error.details()) == (code, details)
        info = read_details(error)
        assert info is not None and (info.reason, info.field) == (code.name, "index")
        assert [t for t in s.model.tasks() if t == "evidence_grade"] == []
    finally:
        await s.aclose()


async def test_a_failed_precondition_about_another_field_stays_internal() -> None:
    failure = Failure(grpc.StatusCode.FAILED_PRECONDITION, "filter: no metadata", field="filter")
    s = await start_stack(retrieval_script=RetrievalScript().fail_with(Q, failure))
    try:
        assert await _code_of(s.stub.Run(_run(Q))) == (
            grpc.StatusCode.INTERNAL,
            "retrieval failed",
        )
    finally:
        await s.aclose()


@pytest.mark.parametrize(
    ("index", "kbs", "details"),
    [
        ("e5-large", ("hr",), "index: must be knowledge_bases/{kb}/indexes/{id}"),
        ("knowledge_bases/hr/indexes/E5", (), "index: must be knowledge_bases/{kb}/indexes/{id}"),
        (INDEX, ("sales",), "index: is an index of knowledge_bases/hr, which this run does not"),
    ],
    ids=["bare_id", "upper_case", "other_kb"],
)
@pytest.mark.parametrize("rpc", ["Run", "StreamRun"])
async def test_a_bad_index_is_refused_before_any_retrieval(rpc, index, kbs, details) -> None:
    s = await start_stack()
    try:
        call = getattr(s.stub, rpc)(_run(Q, index, kbs))
        error = await (_stream_error_of(call) if rpc.startswith("Stream") else _error_of(call))
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert (error.details() or "").startswith(details)
        info = read_details(error)
        assert info is not None and info.field == "index"
        assert s.retrieval.sent == [] and s.model.requests == []
    finally:
        await s.aclose()


async def test_ask_index_reaches_every_retrieval_and_its_verdict_the_terminal() -> None:
    ms = ModelScript().add("evidence_grade", Q, ANSWER)
    code, details = VERDICTS[2]
    s = await start_stack(ms, RetrievalScript().add(Q, [DOC]).fail("退款？", code, details))
    try:
        port = s.app.server.port
        rc, out, err = await _cli(port, "ask", Q, "--kb", "hr", "--index", INDEX, "--no-answer")
        assert rc == 0, err
        assert "route:    answer" in out
        rc, _, err = await _cli(port, "ask", "退款？", "--index", INDEX)
        assert rc == 1 and f"FAILED_PRECONDITION: {details}" in err
        rc, _, err = await _cli(port, "ask", Q, "--index", "hr/e5-large")
        assert rc == 1 and "INVALID_ARGUMENT: index: must be" in err
        assert _sent(s) == [(Q, ("hr",), INDEX), ("退款？", (), INDEX)]
    finally:
        await s.aclose()


async def test_a_run_naming_only_an_index_needs_read_on_the_indexs_knowledge_base(
    tmp_path,
) -> None:
    keys = tmp_path / "keys.json"
    entry = {"id": "reader", "role": "reader", "knowledge_bases": ["default"]}
    keys.write_text(json.dumps({"keys": [{**entry, "sha256": hashlib.sha256(b"k").hexdigest()}]}))
    s = await start_stack(
        ModelScript().add("evidence_grade", Q, ANSWER),
        RetrievalScript().add(Q, [DOC]),
        auth_keys_file=str(keys),
    )
    try:
        metadata = (("authorization", "Bearer k"),)
        with pytest.raises(grpc.aio.AioRpcError) as denied:
            await s.stub.Run(_run(Q, kbs=()), metadata=metadata)
        assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert denied.value.details() == (
            'permission "read" on knowledge base "hr" is not granted to this key'
        )
        assert s.retrieval.sent == []
        # The default knowledge base's own index is the key's to read.
        await s.stub.Run(_run(Q, "knowledge_bases/default/indexes/v2", kbs=()), metadata=metadata)
        assert _sent(s) == [(Q, (), "knowledge_bases/default/indexes/v2")]
    finally:
        await s.aclose()
