"""Grounded answers through the real RPCs (docs/api.md#grounded-answers), with the scripted
model server streaming server-sent events: deltas concatenate to the final text, citations are
valid, markers outside the docs are dropped, a cut stream is UNAVAILABLE with no result, the
caller's deadline bounds the generation, and only the answer route carries an answer."""

from __future__ import annotations

import re

import grpc
import pytest
from supermew.v1 import orchestrator_pb2

from shared.codec import hitl_state_to_proto
from tests.fakes.model_server import HttpError, ModelScript, Sse, complexity, grade, sse
from tests.fakes.orchestrator_stack import API_KEY, start_stack
from tests.fakes.retrieval_servicer import RetrievalScript, chunk

Q = "丹瑾是什么属性？"
DOCS = [
    chunk("roles.md", "1", "# 角色\n丹瑾：衍射属性。她擅长近战。", rrf_rank=1),
    chunk(
        "lore.md", "3", "卡卡罗：导电属性。丹瑾来自今州。", rrf_rank=2, document_id="wiki/lore.md"
    ),
]
# [7] and [0] point outside the two docs; [2, 9] keeps only 2.
RAW = "丹瑾是衍射属性[1][7]，擅长近战[1]。她来自今州[2, 9]。不存在的来源[0]。"
CLEAN = "丹瑾是衍射属性[1]，擅长近战[1]。她来自今州[2]。不存在的来源。"
SNAP = {
    "question": "这个角色的属性是什么？",
    "route": "clarify",
    "retrieval_status": "needs_clarification",
    "rewrite_count": 0,
    "complexity": "simple",
    "complexity_reason": "r",
    "sub_questions": [],
}
ANSWER_GRADE = grade("strong", "sufficient", "answer")


def _script(*answer: object, question: str = Q) -> ModelScript:
    return (
        ModelScript()
        .add("evidence_grade", question, ANSWER_GRADE)
        .add("answer_generation", question, *answer)
    )


def _answer_request(s):
    return next(r for r in s.model.requests if r.task == "answer_generation")


async def _events(call) -> list[orchestrator_pb2.RunEvent]:
    return [event async for event in call]


async def _code_of(call) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call
    return err.value.code(), err.value.details() or ""


def _run(question: str = Q, *, generate: bool = True) -> orchestrator_pb2.RunRequest:
    return orchestrator_pb2.RunRequest(question=question, generate_answer=generate)


async def test_stream_run_emits_deltas_after_the_steps_and_before_the_one_result() -> None:
    s = await start_stack(_script(sse(RAW, size=2)), RetrievalScript().add(Q, DOCS))
    try:
        events = await _events(s.stub.StreamRun(_run()))
        kinds = [e.WhichOneof("event") for e in events]
        first_delta = kinds.index("answer_delta")
        assert set(kinds[:first_delta]) == {"step"}
        assert set(kinds[first_delta:-1]) == {"answer_delta"} and kinds[-1] == "result"
        deltas = "".join(e.answer_delta.text for e in events if e.answer_delta.text)
        result = events[-1].result
        assert result.HasField("answer")
        assert deltas == result.answer.text == CLEAN
        assert [(c.index, c.filename, c.page_number, c.quote) for c in result.answer.citations] == [
            (1, "roles.md", "1", "丹瑾：衍射属性。"),
            (2, "lore.md", "3", "丹瑾来自今州。"),
        ]
        for citation in result.answer.citations:
            assert citation.quote in result.docs[citation.index - 1].text
            assert citation.document_id == result.docs[citation.index - 1].document_id
        assert [c.document_id for c in result.answer.citations] == ["roles.md", "wiki/lore.md"]
        assert (result.answer.model, result.answer.partial) == ("main-model", False)
        # The trace is untouched by the answer: nothing of it is in the trace.
        assert CLEAN not in str(result.rag_trace)
    finally:
        await s.aclose()


async def test_the_request_is_a_streamed_completion_with_the_numbered_evidence() -> None:
    s = await start_stack(
        _script(sse(RAW)), RetrievalScript().add(Q, DOCS), answer_model="answer-model"
    )
    try:
        result = await s.stub.Run(_run())
        assert result.answer.text == CLEAN and result.answer.model == "answer-model"
        request = next(r for r in s.model.requests if r.task == "answer_generation")
        assert request.model == "answer-model"
        assert request.authorization == f"Bearer {API_KEY}"
        assert request.body["stream"] is True and request.body["temperature"] == 0
        assert "response_format" not in request.body
        prompt = request.body["messages"][-1]["content"]
        assert f"<question>\n{Q}\n</question>" in prompt
        for number, doc in enumerate(DOCS, start=1):
            assert f'<chunk index="{number}" source="{doc["filename"]}"' in prompt
            assert doc["text"] in prompt  # verbatim
        assert "[1]" in request.body["messages"][0]["content"]  # asks for markers
    finally:
        await s.aclose()


async def test_without_generate_answer_nothing_is_written() -> None:
    s = await start_stack(_script(sse(RAW)), RetrievalScript().add(Q, DOCS))
    try:
        result = await s.stub.Run(_run(generate=False))
        events = await _events(s.stub.StreamRun(_run(generate=False)))
        assert result.route == "answer" and not result.HasField("answer")
        assert "answer_delta" not in [e.WhichOneof("event") for e in events]
        assert not events[-1].result.HasField("answer")
        assert "answer_generation" not in s.model.tasks()
    finally:
        await s.aclose()


@pytest.mark.parametrize(
    "reply",
    [
        Sse(("丹瑾是", "衍射属性[1]", "。"), cut_after=2),  # connection dropped mid-body
        Sse(("丹瑾是", "衍射属性[1]", "。"), done=False),  # body ends without [DONE]
    ],
    ids=["cut", "no-done"],
)
async def test_a_stream_that_stops_early_is_unavailable_and_never_a_result(reply: Sse) -> None:
    s = await start_stack(_script(reply), RetrievalScript().add(Q, DOCS))
    try:
        code, details = await _code_of(s.stub.Run(_run()))
        assert code == grpc.StatusCode.UNAVAILABLE and details.startswith("model endpoint")
        assert "Traceback" not in details and "127.0.0.1" not in details
        events: list[orchestrator_pb2.RunEvent] = []
        with pytest.raises(grpc.aio.AioRpcError) as err:
            async for event in s.stub.StreamRun(_run()):
                events.append(event)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "result" not in [e.WhichOneof("event") for e in events]
    finally:
        await s.aclose()


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (503, grpc.StatusCode.UNAVAILABLE),
        (429, grpc.StatusCode.RESOURCE_EXHAUSTED),
        (401, grpc.StatusCode.FAILED_PRECONDITION),
    ],
)
async def test_endpoint_statuses_on_the_answer_map_like_the_other_tasks(
    status: int, code: grpc.StatusCode
) -> None:
    failure = HttpError(status, f"refused, key {API_KEY}", retry_after=0)
    s = await start_stack(_script(failure), RetrievalScript().add(Q, DOCS))
    try:
        got, details = await _code_of(s.stub.Run(_run()))
        assert got == code and "answer_generation" in details
        assert API_KEY not in details
    finally:
        await s.aclose()


async def test_a_refused_answer_request_is_retried_before_any_piece() -> None:
    s = await start_stack(
        _script(HttpError(503, retry_after=0), sse(RAW)), RetrievalScript().add(Q, DOCS)
    )
    try:
        result = await s.stub.Run(_run())
        assert result.answer.text == CLEAN
        assert s.model.tasks().count("answer_generation") == 2
    finally:
        await s.aclose()


async def test_the_callers_deadline_bounds_the_generation() -> None:
    # 40 pieces 0.25 s apart would take 10 s; the caller allows 1 s.
    slow = Sse(tuple("丹瑾是衍射属性[1]。" * 4), piece_delay=0.25)
    s = await start_stack(_script(slow), RetrievalScript().add(Q, DOCS))
    try:
        code, _ = await _code_of(s.stub.Run(_run(), timeout=1.0))
        assert code == grpc.StatusCode.DEADLINE_EXCEEDED
        assert s.model.tasks()[-1] == "answer_generation"
    finally:
        await s.aclose()


async def test_hitl_and_no_knowledge_routes_carry_no_answer() -> None:
    q_none, q_hitl = "退款？", "他的属性是什么？"
    ms = ModelScript().add(
        "evidence_grade",
        q_hitl,
        grade("weak", "partial", "clarify", ambiguity="missing_slot", hitl_prompt="哪个角色？"),
    )
    s = await start_stack(ms, RetrievalScript().add(q_hitl, DOCS))
    try:
        for question, route in ((q_none, "no_knowledge"), (q_hitl, "clarify")):
            events = await _events(s.stub.StreamRun(_run(question)))
            result = events[-1].result
            assert result.route == route and not result.HasField("answer")
            assert "answer_delta" not in [e.WhichOneof("event") for e in events]
        assert "answer_generation" not in s.model.tasks()
    finally:
        await s.aclose()


async def test_a_partial_synthesis_says_what_the_evidence_lacks() -> None:
    q = "比较丹瑾与卡卡罗的战斗定位"
    s1, s2 = "丹瑾的战斗定位？", "卡卡罗的战斗定位？"
    ms = ModelScript().add("complexity_classification", q, complexity("complex", "对比", [s1, s2]))
    ms.add("evidence_grade", s1, grade("strong", "sufficient", "answer"))
    ms.add("evidence_grade", s2, grade("weak", "partial", "rewrite", missing_slots=["版本"]))
    ms.add("answer_generation", q, sse("丹瑾擅长近战[1]。"))
    rs = RetrievalScript().add(s1, DOCS[:1]).add(s2, DOCS[1:])
    s = await start_stack(ms, rs)
    try:
        result = await s.stub.Run(_run(q))
        assert (result.route, result.retrieval_status) == ("answer", "partial")
        assert result.answer.partial
        assert result.answer.text == (
            "丹瑾擅长近战[1]。\n\n注意：现有资料只能部分回答这个问题，缺少关于版本的信息。"
        )
        system = _answer_request(s).body["messages"][0]["content"]
        assert "lacks: 版本" in system
    finally:
        await s.aclose()


async def test_a_compound_question_with_an_unanswered_part_is_partial_and_names_it() -> None:
    """The trace keeps the synthesis table (answerable: the other child brought evidence);
    the answer is partial and our note names the sub-question, whatever the model wrote."""
    q = "丹瑾是什么属性？今州的首领是谁？"
    s1, s2 = "丹瑾是什么属性？", "今州的首领是谁？"
    ms = ModelScript().add("complexity_classification", q, complexity("complex", "两问", [s1, s2]))
    ms.add("evidence_grade", s1, grade("strong", "sufficient", "answer"))
    ms.add("evidence_grade", s2, grade("none", "none", "no_knowledge"))
    ms.add("answer_generation", q, sse("丹瑾是衍射属性[1]。"))
    rs = RetrievalScript().add(s1, DOCS[:1]).add(s2, DOCS[1:])
    s = await start_stack(ms, rs)
    try:
        events = await _events(s.stub.StreamRun(_run(q)))
        result = events[-1].result
        assert (result.route, result.retrieval_status) == ("answer", "answerable")
        trace = result.rag_trace
        assert (trace.evidence_relevance, trace.evidence_answerability) == ("strong", "sufficient")
        assert [t.retrieval_status for t in trace.sub_traces.items] == [
            "answerable",
            "no_knowledge",
        ]
        assert result.answer.partial
        assert result.answer.text == (
            "丹瑾是衍射属性[1]。\n\n"
            "注意：现有资料只能部分回答这个问题，无法回答其中的“今州的首领是谁？”。"
        )
        deltas = [e.answer_delta.text for e in events if e.WhichOneof("event") == "answer_delta"]
        assert "".join(deltas) == result.answer.text
        system = _answer_request(s).body["messages"][0]["content"]
        assert "lacks: 今州的首领是谁？" in system
    finally:
        await s.aclose()


async def test_stream_resume_answers_the_merged_question() -> None:
    qstar = "丹瑾：这个角色的属性是什么？"
    s = await start_stack(
        _script(sse("丹瑾：衍射属性[1]。"), question=qstar), RetrievalScript().add(qstar, DOCS)
    )
    try:
        request = orchestrator_pb2.ResumeRequest(
            resume_state=hitl_state_to_proto(SNAP), user_answer="丹瑾", generate_answer=True
        )
        events = await _events(s.stub.StreamResume(request))
        result = events[-1].result
        assert result.route == "answer" and result.answer.text == "丹瑾：衍射属性[1]。"
        deltas = [e.answer_delta.text for e in events if e.WhichOneof("event") == "answer_delta"]
        assert "".join(deltas) == result.answer.text
        assert [c.quote for c in result.answer.citations] == ["丹瑾：衍射属性。"]
        unary = await s.stub.Resume(request)
        assert unary.answer == result.answer
    finally:
        await s.aclose()


def test_clean_text_matches_the_scripted_raw_text() -> None:
    """The expectation above, derived: out-of-range numbers removed, nothing else changed."""
    assert re.sub(r"\[(?:7|0)\]|, 9", "", RAW) == CLEAN
