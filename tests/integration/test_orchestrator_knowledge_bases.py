"""A run's `knowledge_bases` and `filter` (docs/api.md#knowledge-bases, #filters) through the real
Run / Resume RPCs and their streams: every Retrieve of the run carries them (the first recall,
each sub-question, the rewrite, the resumed retrieval), a resume searches what the Resume
request names, and retrieval's verdict on them (an unknown knowledge base, a malformed filter)
is the run's own status with the field named, never a trace
(docs/api.md#what-the-orchestrator-answers-when-retrieval-fails)."""

from __future__ import annotations

from collections.abc import Sequence

import grpc
import pytest
from supermew.v1 import orchestrator_pb2

from shared.codec import chunk_from_proto, hitl_state_to_proto
from shared.error_details import ErrorDetails, read_details
from tests.fakes.model_server import ModelScript, complexity, grade, rewrite
from tests.fakes.orchestrator_stack import Stack, start_stack
from tests.fakes.retrieval_servicer import Failure, RetrievalScript, chunk

Q = "丹瑾是什么属性？"  # fast path: no classification call
Q_CMP = "比较丹瑾与卡卡罗的战斗定位"
S1, S2 = "丹瑾的战斗定位？", "卡卡罗的战斗定位？"
SB = "角色的元素属性体系是怎样的？"
RQ_SB = f"{Q}\n\n退步问题：{SB}"
SNAP = {
    "question": "这个角色的属性是什么？",
    "route": "clarify",
    "retrieval_status": "needs_clarification",
    "rewrite_count": 0,
    "complexity": "simple",
    "complexity_reason": "r",
    "sub_questions": [],
}
QSTAR = "丹瑾：这个角色的属性是什么？"

KBS, FILTER = (
    ("hr", "knowledge_bases/eng"),
    'metadata.department = "sales" AND metadata.year >= 2023',
)
HR = chunk(
    "notes.md",
    "0",
    "丹瑾：衍射属性。",
    chunk_id="notes.md::p0::l3::0",
    document_id="hr/notes.md",
    knowledge_base="knowledge_bases/hr",
    metadata={"department": "sales", "year": 2024, "tags": ["roles"], "public": True},
)
ENG = chunk(
    "notes.md",
    "0",
    "卡卡罗：导电属性。",
    rrf_rank=2,
    chunk_id="notes.md::p0::l3::0",  # chunk ids are unique within a knowledge base only
    document_id="eng/notes.md",
    knowledge_base="knowledge_bases/eng",
    metadata={"department": "sales", "year": 2023},
)
ANSWER = grade("strong", "sufficient", "answer")
CLARIFY = grade("weak", "partial", "clarify", ambiguity="missing_slot", hitl_prompt="哪个角色？")

UNKNOWN_KB = (grpc.StatusCode.NOT_FOUND, "knowledge_bases[1]: knowledge_bases/eng does not exist")
BAD_FILTER = (grpc.StatusCode.INVALID_ARGUMENT, "filter: unexpected 'AND' at column 32")


def _sent(stack: Stack) -> list[tuple[str, tuple[str, ...], str]]:
    return [(s.query, s.knowledge_bases, s.filter) for s in stack.retrieval.sent]


def _run(question: str, kbs: Sequence[str] = KBS, flt: str = FILTER) -> orchestrator_pb2.RunRequest:
    return orchestrator_pb2.RunRequest(question=question, knowledge_bases=kbs, filter=flt)


def _resume(
    answer: str = "丹瑾", kbs: Sequence[str] = KBS, flt: str = FILTER
) -> orchestrator_pb2.ResumeRequest:
    return orchestrator_pb2.ResumeRequest(
        resume_state=hitl_state_to_proto(SNAP), user_answer=answer, knowledge_bases=kbs, filter=flt
    )


async def _stream_result(call) -> orchestrator_pb2.RunResult:
    events = [event async for event in call]
    assert events[-1].WhichOneof("event") == "result"
    return events[-1].result


async def _error_of(call) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call
    return err.value


async def _stream_error_of(call) -> grpc.aio.AioRpcError:
    kinds: list[str] = []
    with pytest.raises(grpc.aio.AioRpcError) as err:
        async for event in call:
            kinds.append(event.WhichOneof("event"))
    assert "result" not in kinds  # a failed stream ends in its status, never a result
    return err.value


async def _code_of(call) -> tuple[grpc.StatusCode, str]:
    error = await _error_of(call)
    return error.code(), error.details() or ""


async def _stream_code_of(call) -> tuple[grpc.StatusCode, str]:
    error = await _stream_error_of(call)
    return error.code(), error.details() or ""


# ---- every retrieval carries the scope ------------------------------------------------------


async def test_simple_run_retrieves_within_the_knowledge_bases_and_filter() -> None:
    s = await start_stack(
        ModelScript().add("evidence_grade", Q, ANSWER), RetrievalScript().add(Q, [HR, ENG])
    )
    try:
        result = await s.stub.Run(_run(Q))
        assert _sent(s) == [(Q, KBS, FILTER)]
        assert result.route == "answer"
        # The docs keep the chunks' document, knowledge base and metadata for the caller.
        assert [chunk_from_proto(c) for c in result.docs] == [HR, ENG]
    finally:
        await s.aclose()


@pytest.mark.parametrize("streamed", [False, True], ids=["Run", "StreamRun"])
async def test_each_sub_question_of_a_complex_run_retrieves_within_them(streamed) -> None:
    ms = (
        ModelScript()
        .add("complexity_classification", Q_CMP, complexity("complex", "对比", [S1, S2]))
        .add("evidence_grade", S1, ANSWER)
        .add("evidence_grade", S2, ANSWER)
    )
    s = await start_stack(ms, RetrievalScript().add(S1, [HR]).add(S2, [ENG]))
    try:
        call = s.stub.StreamRun(_run(Q_CMP)) if streamed else s.stub.Run(_run(Q_CMP))
        result = await (_stream_result(call) if streamed else call)
        assert result.route == "answer"
        assert sorted(_sent(s)) == sorted([(S1, KBS, FILTER), (S2, KBS, FILTER)])
        # Synthesis keeps the two chunks apart: same chunk_id, different knowledge bases.
        assert [c.document_id for c in result.docs] == ["hr/notes.md", "eng/notes.md"]
    finally:
        await s.aclose()


async def test_the_rewrites_retrieval_is_within_them() -> None:
    ms = (
        ModelScript()
        .add("evidence_grade", Q, grade("weak", "partial", "rewrite", confidence=0.4), ANSWER)
        .add("query_rewrite", Q, rewrite("step_back", SB))
    )
    s = await start_stack(ms, RetrievalScript().add(Q, [ENG]).add(RQ_SB, [HR]))
    try:
        result = await s.stub.Run(_run(Q))
        assert result.route == "answer" and result.rag_trace.rewrite_method == "step_back"
        assert _sent(s) == [(Q, KBS, FILTER), (RQ_SB, KBS, FILTER)]
    finally:
        await s.aclose()


@pytest.mark.parametrize("streamed", [False, True], ids=["Resume", "StreamResume"])
async def test_clarify_then_resume_retrieves_within_what_the_resume_names(streamed) -> None:
    q_clarify = SNAP["question"]
    ms = (
        ModelScript()
        .add("complexity_classification", q_clarify, complexity("simple", "r"))
        .add("evidence_grade", q_clarify, CLARIFY)
        .add("evidence_grade", QSTAR, ANSWER)
    )
    s = await start_stack(ms, RetrievalScript().add(q_clarify, [HR]).add(QSTAR, [HR]))
    try:
        first = await s.stub.Run(_run(q_clarify))
        assert first.route == "clarify"
        # The snapshot holds no scope: the caller sends it again, here narrowed to one base.
        request = orchestrator_pb2.ResumeRequest(
            resume_state=first.hitl_resume_state,
            user_answer="丹瑾",
            knowledge_bases=["hr"],
            filter="metadata.public = true",
        )
        call = s.stub.StreamResume(request) if streamed else s.stub.Resume(request)
        result = await (_stream_result(call) if streamed else call)
        assert result.route == "answer"
        assert _sent(s) == [(q_clarify, KBS, FILTER), (QSTAR, ("hr",), "metadata.public = true")]
    finally:
        await s.aclose()


async def test_a_resume_that_names_none_searches_the_default_unfiltered() -> None:
    s = await start_stack(
        ModelScript().add("evidence_grade", QSTAR, ANSWER), RetrievalScript().add(QSTAR, [HR])
    )
    try:
        await s.stub.Resume(_resume(kbs=(), flt=""))
        assert _sent(s) == [(QSTAR, (), "")]
    finally:
        await s.aclose()


# ---- retrieval's verdict on them is the run's status ----------------------------------------


@pytest.mark.parametrize("failure", [UNKNOWN_KB, BAD_FILTER], ids=["not_found", "bad_filter"])
@pytest.mark.parametrize("rpc", ["Run", "StreamRun", "Resume", "StreamResume"])
async def test_retrievals_verdict_is_the_runs_status_with_the_field_named(rpc, failure) -> None:
    code, details = failure
    query = QSTAR if "Resume" in rpc else Q
    s = await start_stack(retrieval_script=RetrievalScript().fail(query, code, details))
    try:
        request = _resume() if "Resume" in rpc else _run(Q)
        call = getattr(s.stub, rpc)(request)
        error = await (_stream_error_of(call) if rpc.startswith("Stream") else _error_of(call))
        assert (error.code(), error.details()) == (code, details)
        # The orchestrator's own typed details name the caller's field, as retrieval's did.
        field, _, described = details.partition(": ")
        info = read_details(error)
        assert info is not None and (info.reason, info.field) == (code.name, field)
        assert info.description == (described if code == BAD_FILTER[0] else None)
        assert [t for t in s.model.tasks() if t == "evidence_grade"] == []  # nothing graded
    finally:
        await s.aclose()


async def test_a_verdict_without_typed_details_stays_internal() -> None:
    """The caller's field is read from retrieval's ErrorInfo, never from its message: the same
    NOT_FOUND without details (an older retrieval, a proxy) is the orchestrator's failure."""
    s = await start_stack(retrieval_script=RetrievalScript().fail(Q, *UNKNOWN_KB, typed=False))
    try:
        error = await _error_of(s.stub.Run(_run(Q)))
        assert (error.code(), error.details()) == (grpc.StatusCode.INTERNAL, "retrieval failed")
        assert read_details(error) == ErrorDetails("INTERNAL")
    finally:
        await s.aclose()


@pytest.mark.parametrize(
    "failure",
    [
        # Retrieval judged our own query, in words that happen to start with "filter: ".
        Failure(*BAD_FILTER, field="query"),
        # A knowledge base named by no field, and a reason that is not NOT_FOUND's.
        Failure(*UNKNOWN_KB),
        Failure(*UNKNOWN_KB, field="knowledge_bases[1]", reason="FAILED_PRECONDITION"),
    ],
    ids=["query", "no_field", "other_reason"],
)
async def test_a_verdict_whose_details_name_no_field_of_the_callers_stays_internal(
    failure,
) -> None:
    s = await start_stack(retrieval_script=RetrievalScript().fail_with(Q, failure))
    try:
        assert await _code_of(s.stub.Run(_run(Q))) == (
            grpc.StatusCode.INTERNAL,
            "retrieval failed",
        )
    finally:
        await s.aclose()


async def test_a_sub_questions_verdict_fails_the_complex_run() -> None:
    ms = (
        ModelScript()
        .add("complexity_classification", Q_CMP, complexity("complex", "对比", [S1, S2]))
        .add("evidence_grade", S1, ANSWER)
    )
    rs = RetrievalScript().add(S1, [HR]).fail(S2, *UNKNOWN_KB)
    s = await start_stack(ms, rs)
    try:
        assert await _code_of(s.stub.Run(_run(Q_CMP))) == UNKNOWN_KB
    finally:
        await s.aclose()


async def test_a_knowledge_base_gone_before_the_rewrites_retrieval_fails_the_run() -> None:
    ms = (
        ModelScript()
        .add("evidence_grade", Q, grade("weak", "partial", "rewrite", confidence=0.4))
        .add("query_rewrite", Q, rewrite("step_back", SB))
    )
    s = await start_stack(ms, RetrievalScript().add(Q, [ENG]).fail(RQ_SB, *UNKNOWN_KB))
    try:
        assert await _code_of(s.stub.Run(_run(Q))) == UNKNOWN_KB
        assert [q for q, _, _ in _sent(s)] == [Q, RQ_SB]
    finally:
        await s.aclose()


@pytest.mark.parametrize(
    ("code", "details"),
    [
        (grpc.StatusCode.INVALID_ARGUMENT, "query: is 5000 characters, at most 4000"),
        (grpc.StatusCode.NOT_FOUND, "collection supermew_chunks does not exist"),
    ],
)
async def test_any_other_verdict_stays_internal(code, details) -> None:
    s = await start_stack(retrieval_script=RetrievalScript().fail(Q, code, details))
    try:
        got = await _code_of(s.stub.Run(_run(Q)))
        assert got == (grpc.StatusCode.INTERNAL, "retrieval failed")
    finally:
        await s.aclose()


# ---- the orchestrator's own light checks ----------------------------------------------------


@pytest.mark.parametrize(
    ("kbs", "flt", "field"),
    [
        ([f"kb-{i}" for i in range(17)], "", "knowledge_bases: names 17 knowledge bases"),
        (["hr", "  "], "", "knowledge_bases[1]: must not be blank"),
        (["hr"], "x" * 2049, "filter: is 2049 characters, at most 2048"),
    ],
    ids=["too_many", "blank", "filter_too_long"],
)
@pytest.mark.parametrize("rpc", ["Run", "StreamRun", "Resume", "StreamResume"])
async def test_light_checks_name_the_field_before_any_retrieval(rpc, kbs, flt, field) -> None:
    s = await start_stack()
    try:
        request = _resume(kbs=kbs, flt=flt) if "Resume" in rpc else _run(Q, kbs, flt)
        call = getattr(s.stub, rpc)(request)
        code, details = await (
            _stream_code_of(call) if rpc.startswith("Stream") else _code_of(call)
        )
        assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith(field)
        assert s.retrieval.sent == [] and s.model.requests == []
    finally:
        await s.aclose()


async def test_sixteen_knowledge_bases_and_a_2048_character_filter_are_passed_on() -> None:
    kbs, flt = [f"kb-{i}" for i in range(16)], "x" * 2048
    s = await start_stack()
    try:
        await s.stub.Run(_run(Q, kbs, flt))
        assert _sent(s) == [(Q, tuple(kbs), flt)]
    finally:
        await s.aclose()
