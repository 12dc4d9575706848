"""Conversations over the real RPCs with the remote model path: the orchestrator wired as in
production against the scripted OpenAI-compatible model server and the scripted retrieval
service. The condense_question request carries the history; a malformed reply falls back to the
caller's question and the trace says so; an empty history is today's run; a history over the
limits is refused before any model or retrieval call; streams and resumes condense too."""

from __future__ import annotations

import grpc
import pytest
from supermew.v1 import orchestrator_pb2

from orchestrator_service.conversation import Turn
from orchestrator_service.models.base import TASK_CONDENSE
from orchestrator_service.models.prompts import condense_messages
from tests.fakes.model_server import ModelScript, complexity, condense, grade
from tests.fakes.orchestrator_stack import MODELS, start_stack
from tests.fakes.retrieval_servicer import RetrievalScript, chunk

EARLIER = ("What is the response time of the Premium support plan?", "Four hours[1].")
FOLLOW = "And the Basic one?"
STANDALONE = "What is the response time of the Basic support plan?"
DOCS = [chunk("support_plan_basic.en.md", "1", "The response time is two business days.")]
ZH_EARLIER = ("丹瑾的属性是什么？", "丹瑾的属性为水[1]。")
ZH_FOLLOW, ZH_STANDALONE = "她的武器呢？", "丹瑾的武器是什么？"
ZH_DOCS = [chunk("roles.md", "1", "丹瑾的武器是珊瑚法杖。")]
CLARIFY_Q = "What is the skill of this role?"
CLARIFY_STANDALONE = "What is the skill of this role in Harbor Quest?"
QSTAR = "Navigator：What is the skill of this role in Harbor Quest?"


def _turns(*pairs: tuple[str, str]) -> list[orchestrator_pb2.ConversationTurn]:
    return [orchestrator_pb2.ConversationTurn(question=q, answer=a) for q, a in pairs]


def _script() -> tuple[ModelScript, RetrievalScript]:
    ms = ModelScript()
    ms.add(TASK_CONDENSE, FOLLOW, condense(STANDALONE))
    # Longer than the fast path's 48 characters: the model classifies it.
    ms.add("complexity_classification", STANDALONE, complexity("simple", "one fact"))
    ms.add("evidence_grade", STANDALONE, grade("strong", "sufficient", "answer"))
    ms.add("evidence_grade", FOLLOW, grade("weak", "none", "no_knowledge"))
    ms.add(TASK_CONDENSE, ZH_FOLLOW, "{not json", '{"standalone_question": ""}')
    ms.add("evidence_grade", ZH_FOLLOW, grade("strong", "sufficient", "answer"))
    ms.add(TASK_CONDENSE, CLARIFY_Q, condense(CLARIFY_STANDALONE))
    ms.add(
        "evidence_grade",
        CLARIFY_STANDALONE,
        grade("weak", "partial", "clarify", ambiguity="missing_slot", hitl_prompt="Which role?"),
    )
    ms.add(TASK_CONDENSE, QSTAR, condense(QSTAR))
    ms.add("evidence_grade", QSTAR, grade("strong", "sufficient", "answer"))
    rs = RetrievalScript()
    for query in (STANDALONE, FOLLOW, CLARIFY_STANDALONE, QSTAR):
        rs.add(query, DOCS)
    rs.add(ZH_FOLLOW, ZH_DOCS)
    return ms, rs


@pytest.fixture
async def stack():
    s = await start_stack(*_script())
    yield s
    await s.aclose()


async def test_follow_up_is_condensed_and_the_request_carries_the_history(stack) -> None:
    result = await stack.stub.Run(
        orchestrator_pb2.RunRequest(question=FOLLOW, history=_turns(EARLIER))
    )
    assert (result.route, result.retrieval_status) == ("answer", "answerable")
    assert result.question == FOLLOW and result.standalone_question == STANDALONE
    assert result.rag_trace.query == STANDALONE and result.rag_trace.history_turns == 1
    assert not result.rag_trace.HasField("condense_error")
    assert stack.retrieval.queries == [STANDALONE]
    # One model call more than the standalone question alone: the condensation, first.
    assert stack.model.calls() == [
        (TASK_CONDENSE, FOLLOW),
        ("complexity_classification", STANDALONE),
        ("evidence_grade", STANDALONE),
    ]
    request = stack.model.requests[0]
    assert request.model == MODELS["fast_model"]
    assert request.body["messages"] == condense_messages(FOLLOW, [Turn(*EARLIER)])
    prompt = request.body["messages"][-1]["content"]
    assert EARLIER[0] in prompt and EARLIER[1] in prompt
    schema = request.body["response_format"]["json_schema"]
    assert schema["name"] == TASK_CONDENSE
    assert schema["schema"]["required"] == ["standalone_question"]


async def test_malformed_condense_reply_falls_back_to_the_question(stack) -> None:
    result = await stack.stub.Run(
        orchestrator_pb2.RunRequest(question=ZH_FOLLOW, history=_turns(ZH_EARLIER))
    )
    assert result.route == "answer"
    assert result.question == result.standalone_question == ZH_FOLLOW
    assert result.rag_trace.query == ZH_FOLLOW and result.rag_trace.history_turns == 1
    assert result.rag_trace.condense_error.startswith(
        f"invalid_output: model task {TASK_CONDENSE}: output violates the task schema"
    )
    # The client's one retry, then the run goes on with the caller's words.
    assert stack.model.tasks() == [TASK_CONDENSE, TASK_CONDENSE, "evidence_grade"]
    assert stack.retrieval.queries == [ZH_FOLLOW]


async def test_empty_history_is_todays_run(stack) -> None:
    with_field = await stack.stub.Run(orchestrator_pb2.RunRequest(question=FOLLOW, history=[]))
    without = await stack.stub.Run(orchestrator_pb2.RunRequest(question=FOLLOW))
    assert with_field.run_id != without.run_id  # each run its own id, all else the same
    with_field.ClearField("run_id")
    without.ClearField("run_id")
    assert with_field == without
    assert with_field.standalone_question == "" and with_field.question == FOLLOW
    assert not with_field.rag_trace.HasField("history_turns")
    assert TASK_CONDENSE not in stack.model.tasks()


@pytest.mark.parametrize(
    ("history", "message"),
    [
        ([("q", "a")] * 21, "history: holds 21 turns, at most 20"),
        ([("q" * 4000, "a" * 4100), ("q" * 4000, "a" * 4300)], "history: is 16400 bytes"),
        ([("问" * 2000, "答" * 2000), ("问", "答" * 1500)], "history: is 16503 bytes"),
        ([("  ", "an answer")], "history[0].question: must not be blank"),
    ],
)
async def test_history_over_the_limits_is_refused_before_any_work(
    stack, history: list[tuple[str, str]], message: str
) -> None:
    for call, request in (
        (stack.stub.Run, orchestrator_pb2.RunRequest(question=FOLLOW, history=_turns(*history))),
        (
            stack.stub.StreamRun,
            orchestrator_pb2.RunRequest(question=FOLLOW, history=_turns(*history)),
        ),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            reply = call(request)
            if call is stack.stub.StreamRun:
                async for _ in reply:
                    pass
            else:
                await reply
        assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert raised.value.details().startswith(message)
    assert stack.model.requests == [] and stack.retrieval.queries == []


async def test_the_limits_themselves_are_accepted(stack) -> None:
    turns = [("q" * 400, "a" * 419)] * 20  # 20 turns, 16,380 bytes
    result = await stack.stub.Run(
        orchestrator_pb2.RunRequest(question=FOLLOW, history=_turns(*turns))
    )
    assert result.rag_trace.history_turns == 20


async def test_stream_emits_the_condensation_step_in_the_questions_language(stack) -> None:
    request = orchestrator_pb2.RunRequest(question=FOLLOW, history=_turns(EARLIER))
    events = [e async for e in stack.stub.StreamRun(request)]
    steps = [e.step for e in events if e.WhichOneof("event") == "step"]
    labels = [s.label for s in steps]
    assert labels[1:3] == [
        "Reading the question with the conversation so far...",
        "Rewritten as a standalone question",
    ]
    assert steps[1].detail == "1 earlier turns" and steps[2].detail == STANDALONE
    assert events[-1].result.standalone_question == STANDALONE

    zh = orchestrator_pb2.RunRequest(question=ZH_FOLLOW, history=_turns(ZH_EARLIER))
    zh_steps = [e.step for e in [e async for e in stack.stub.StreamRun(zh)] if e.HasField("step")]
    assert [(s.icon, s.label) for s in zh_steps[1:3]] == [
        ("💬", "正在结合对话历史理解问题..."),
        ("⚠️", "改写结果无效，沿用原问题"),
    ]


async def test_resume_with_history_condenses_the_merged_question(stack) -> None:
    history = _turns(("Which roles does Harbor Quest have?", "Navigator, Quartermaster, Lookout."))
    first = await stack.stub.Run(orchestrator_pb2.RunRequest(question=CLARIFY_Q, history=history))
    assert first.route == "clarify" and first.question == CLARIFY_Q
    # The snapshot holds what was graded: the standalone question.
    assert first.hitl_resume_state.question == CLARIFY_STANDALONE
    resumed = await stack.stub.Resume(
        orchestrator_pb2.ResumeRequest(
            resume_state=first.hitl_resume_state, user_answer="Navigator", history=history
        )
    )
    assert resumed.route == "answer"
    assert resumed.question == resumed.standalone_question == QSTAR
    assert resumed.rag_trace.history_turns == 1 and resumed.rag_trace.hitl_resumed
    assert stack.model.calls()[-2:] == [(TASK_CONDENSE, QSTAR), ("evidence_grade", QSTAR)]

    over = _turns(*[("q", "a")] * 21)
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await stack.stub.Resume(
            orchestrator_pb2.ResumeRequest(
                resume_state=first.hitl_resume_state, user_answer="Navigator", history=over
            )
        )
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert raised.value.details().startswith("history")
