"""The orchestrator's RPC contract beyond the matrix: status-code mapping
(docs/api.md#status-codes), deadline propagation, model names and bearer key per task, and the
progress streams of StreamRun / StreamResume (docs/trace.md#progress-steps)."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from supermew.v1 import orchestrator_pb2

from shared.codec import hitl_state_to_proto, rag_trace_from_proto
from tests.fakes.model_server import ModelScript, complexity, grade, rewrite
from tests.fakes.orchestrator_stack import API_KEY, start_stack
from tests.fakes.retrieval_servicer import FakeRetrieval, RetrievalScript, chunk

Q = "丹瑾是什么属性？"
Q_LONG = "请介绍一下公司年假制度里面关于新员工的具体规定内容"
Q_CMP = "比较丹瑾与卡卡罗的战斗定位"
S1, S2 = "丹瑾的战斗定位？", "卡卡罗的战斗定位？"
D = [chunk("roles.md", "1", "丹瑾：衍射属性。")]
SNAP = {
    "question": "这个角色的属性是什么？",
    "route": "clarify",
    "retrieval_status": "needs_clarification",
    "rewrite_count": 0,
    "complexity": "simple",
    "complexity_reason": "r",
    "sub_questions": [],
}


async def _code_of(call) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call
    return err.value.code(), err.value.details() or ""


@pytest.fixture
async def stack():
    s = await start_stack()
    yield s
    await s.aclose()


@pytest.mark.parametrize("question", ["", "   \n\t"])
async def test_blank_question_is_invalid_argument(stack, question) -> None:
    code, details = await _code_of(stack.run(question))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith("question")
    assert stack.model.requests == [] and stack.retrieval.queries == []


async def test_over_long_question_is_invalid_argument() -> None:
    s = await start_stack(max_question_chars=10)
    try:
        code, details = await _code_of(s.run("x" * 11))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith("question")
    finally:
        await s.aclose()


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"question": ""}, "resume_state.question"),
        ({"route": "answer"}, "resume_state.route"),
        ({"route": "scope_select"}, "resume_state.retrieval_status"),
        ({"rewrite_count": -1}, "resume_state.rewrite_count"),
        ({"sub_questions": ["a", "b", "c", "d", "e"]}, "resume_state.sub_questions"),
        ({"complexity": "medium"}, "resume_state.complexity"),
    ],
)
async def test_snapshot_validation_failures_name_the_field(stack, change, field) -> None:
    code, details = await _code_of(stack.resume(hitl_state_to_proto({**SNAP, **change}), "丹瑾"))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert details.startswith(field)
    assert stack.retrieval.queries == []


async def test_blank_user_answer_is_invalid_argument(stack) -> None:
    code, details = await _code_of(stack.resume(hitl_state_to_proto(SNAP), "  "))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith("user_answer")


async def test_retrieval_service_stopped_is_unavailable(stack) -> None:
    await stack.retrieval.stop()
    code, details = await _code_of(stack.run(Q))
    assert code == grpc.StatusCode.UNAVAILABLE and "retrieval" in details


async def test_model_endpoint_unreachable_is_unavailable() -> None:
    s = await start_stack(ModelScript(), RetrievalScript().add(Q, D))
    try:
        await s.model.stop()
        code, details = await _code_of(s.run(Q))
        assert code == grpc.StatusCode.UNAVAILABLE and "model endpoint" in details
    finally:
        await s.aclose()


async def test_deadline_shorter_than_a_slow_model_reply_is_deadline_exceeded() -> None:
    ms = ModelScript().add("evidence_grade", Q, grade("strong", "sufficient", "answer"))
    s = await start_stack(ms, RetrievalScript().add(Q, D), model_delay=1.0)
    try:
        loop = asyncio.get_running_loop()
        started = loop.time()
        code, _ = await _code_of(s.run(Q, timeout=0.3))
        assert code == grpc.StatusCode.DEADLINE_EXCEEDED
        assert loop.time() - started < 0.9
        # The model call itself was bounded by the caller's deadline, not its own 60 s.
        assert s.model.tasks() == ["evidence_grade"]
    finally:
        await s.aclose()


async def test_deadline_propagates_to_retrieval() -> None:
    rs = RetrievalScript(delay=1.0).add(Q, D)
    s = await start_stack(ModelScript(), rs)
    try:
        code, _ = await _code_of(s.run(Q, timeout=0.3))
        assert code == grpc.StatusCode.DEADLINE_EXCEEDED
    finally:
        await s.aclose()


async def test_each_task_uses_its_configured_model_with_the_bearer_key() -> None:
    q = "请讲讲丹瑾在队伍里一般担任的职责以及配队思路"
    sb = "角色职责如何划分？"
    ms = (
        ModelScript()
        .add("complexity_classification", q, complexity("simple", "one role"))
        .add(
            "evidence_grade",
            q,
            grade("weak", "partial", "rewrite"),
            grade("strong", "sufficient", "answer"),
        )
        .add("query_rewrite", q, rewrite("step_back", sb))
    )
    rs = RetrievalScript().add(q, D).add(f"{q}\n\n退步问题：{sb}", D)
    s = await start_stack(ms, rs, model="m-main", grade_model="m-grade", fast_model="m-fast")
    try:
        result = await s.run(q)
        assert result.route == "answer"
        assert [(r.task, r.model) for r in s.model.requests] == [
            ("complexity_classification", "m-fast"),
            ("evidence_grade", "m-grade"),
            ("query_rewrite", "m-fast"),
            ("evidence_grade", "m-grade"),
        ]
        assert {r.authorization for r in s.model.requests} == {f"Bearer {API_KEY}"}
        for r in s.model.requests:
            fmt = r.body["response_format"]
            assert fmt["type"] == "json_schema" and fmt["json_schema"]["strict"] is True
            assert fmt["json_schema"]["name"] == r.task and r.body["temperature"] == 0
            assert q in r.body["messages"][-1]["content"]  # the question verbatim
        grade_prompt = s.model.requests[1].body["messages"][-1]["content"]
        assert D[0]["text"] in grade_prompt  # chunk texts verbatim
    finally:
        await s.aclose()


async def test_grade_and_fast_models_default_to_model() -> None:
    ms = ModelScript().add("evidence_grade", Q, grade("strong", "sufficient", "answer"))
    s = await start_stack(ms, RetrievalScript().add(Q, D), grade_model=None, fast_model=None)
    try:
        await s.run(Q)
        assert [r.model for r in s.model.requests] == ["main-model"]
    finally:
        await s.aclose()


# ---- streams ---------------------------------------------------------------------------------


async def _events(call) -> list[orchestrator_pb2.RunEvent]:
    return [event async for event in call]


def _steps(events) -> list[tuple[str, str, str, str, str]]:
    return [
        (e.step.icon, e.step.label, e.step.detail, e.step.group, e.step.group_label)
        for e in events
        if e.WhichOneof("event") == "step"
    ]


def _check_stream_shape(events) -> None:
    kinds = [e.WhichOneof("event") for e in events]
    assert kinds[-1] == "result" and kinds.count("result") == 1
    first = events[0].step
    assert (first.icon, first.label, first.elapsed_ms, first.stage_elapsed_ms) == (
        "📨",
        "请求已接收，正在准备回答",
        0,
        0,
    )
    elapsed = [e.step.elapsed_ms for e in events[1:-1]]
    assert elapsed == sorted(elapsed) and all(e.step.stage_elapsed_ms >= 0 for e in events[1:-1])


LEVELS = ("🧱", "三级分块检索", "叶子层 L3 召回，候选 24", "", "")
MERGE = ("🧩", "Auto-merging 合并", "启用: True，应用: False，替换片段: 0", "", "")


async def test_stream_run_simple_with_rewrite_emits_the_catalogue_in_order() -> None:
    sb = "角色属性体系？"
    rq = f"{Q}\n\n退步问题：{sb}"
    ms = (
        ModelScript()
        .add(
            "evidence_grade",
            Q,
            grade("weak", "partial", "rewrite", confidence=0.4),
            grade("strong", "sufficient", "answer", confidence=0.93),
        )
        .add("query_rewrite", Q, rewrite("step_back", sb))
    )
    s = await start_stack(ms, RetrievalScript().add(Q, D).add(rq, D + D))
    try:
        events = await _events(s.stub.StreamRun(orchestrator_pb2.RunRequest(question=Q)))
        _check_stream_shape(events)
        assert _steps(events) == [
            ("📨", "请求已接收，正在准备回答", "", "", ""),
            ("🧭", "正在分析问题复杂度...", "", "", ""),
            ("⚡", "快速判断为简单问题 → 走标准 RAG 流程", "", "", ""),
            ("🔍", "正在检索知识库...", "初始检索", "", ""),
            LEVELS,
            MERGE,
            ("✅", "检索完成，找到 1 个片段", "模式: hybrid", "", ""),
            ("📊", "正在评估证据质量...", "", "", ""),
            ("⚠️", "证据不足，将改写查询一次", "置信度: 0.40", "", ""),
            ("✏️", "正在重写查询...", "", "", ""),
            ("🧠", "选择 Step-back / HyDE 重写方式", "", "", ""),
            ("✅", "已选择 Step-back 重写", "本轮只执行这一种重写检索", "", ""),
            ("🔄", "使用 Step-back 查询重新检索...", "", "", ""),
            ("🧱", "Step-back 三级检索", "L3 召回，候选 24，合并替换 0", "", ""),
            ("✅", "重写检索完成，共 2 个片段", "", "", ""),
            ("📊", "正在评估证据质量...", "", "", ""),
            ("✅", "证据足够，返回检索片段", "置信度: 0.93", "", ""),
        ]
        result = events[-1].result
        unary = await s.run(Q)  # the same run unary gives the same result
        assert result.route == unary.route == "answer"
        assert rag_trace_from_proto(result.rag_trace)["retrieval_stage"] == "rewritten"
    finally:
        await s.aclose()


async def test_stream_run_complex_groups_sub_question_steps() -> None:
    ms = ModelScript().add(
        "complexity_classification", Q_CMP, complexity("complex", "两个角色对比", [S1, S2])
    )
    ms.add("evidence_grade", S1, grade("strong", "sufficient", "answer", confidence=0.9))
    rs = RetrievalScript().add(S1, D)  # S2 recalls nothing
    s = await start_stack(ms, rs)
    try:
        events = await _events(s.stub.StreamRun(orchestrator_pb2.RunRequest(question=Q_CMP)))
        _check_stream_shape(events)
        steps = _steps(events)
        assert steps[:6] == [
            ("📨", "请求已接收，正在准备回答", "", "", ""),
            ("🧭", "正在分析问题复杂度...", "", "", ""),
            ("🔀", "复杂问题 → 将分解为子问题并行检索", "理由: 两个角色对比", "", ""),
            ("📌", "子问题 1", f"{S1} 已加入并行检索", "", ""),
            ("📌", "子问题 2", f"{S2} 已加入并行检索", "", ""),
            ("🔍", "正在检索知识库...", "初始检索", "子问题 1", S1)
            if steps[5][3] == "子问题 1"
            else ("🔍", "正在检索知识库...", "初始检索", "子问题 2", S2),
        ]
        g1 = [st[:3] for st in steps if st[3] == "子问题 1"]
        g2 = [st[:3] for st in steps if st[3] == "子问题 2"]
        assert all(st[4] == S1 for st in steps if st[3] == "子问题 1")
        assert all(st[4] == S2 for st in steps if st[3] == "子问题 2")
        assert g1 == [
            ("🔍", "正在检索知识库...", "初始检索"),
            LEVELS[:3],
            MERGE[:3],
            ("✅", "检索完成，找到 1 个片段", "模式: hybrid"),
            ("📊", "正在评估证据质量...", ""),
            ("✅", "证据足够，返回检索片段", "置信度: 0.90"),
        ]
        assert g2 == [
            ("🔍", "正在检索知识库...", "初始检索"),
            LEVELS[:3],
            MERGE[:3],
            ("✅", "检索完成，找到 0 个片段", "模式: hybrid"),
            ("⚠️", "无可用片段，将进入证据评分短路判断", ""),
            ("📊", "正在评估证据质量...", ""),
            ("⛔", "知识库中未找到可用证据", "no_retrieved_documents"),
        ]
        assert steps[-2:] == [
            ("🔬", "正在合成 2 个子问题的检索结果...", "", "", ""),
            ("✅", "合成完成，共 1 个去重片段", "", "", ""),
        ]
        assert len(steps) == 5 + len(g1) + len(g2) + 2
        assert events[-1].result.retrieval_status == "answerable"
    finally:
        await s.aclose()


async def test_stream_resume_steps_and_result() -> None:
    qstar = "丹瑾：这个角色的属性是什么？"
    ms = ModelScript().add(
        "evidence_grade",
        qstar,
        grade("weak", "partial", "clarify", ambiguity="missing_slot", hitl_prompt="哪个版本？"),
    )
    s = await start_stack(ms, RetrievalScript().add(qstar, D))
    try:
        request = orchestrator_pb2.ResumeRequest(
            resume_state=hitl_state_to_proto(SNAP), user_answer="丹瑾"
        )
        events = await _events(s.stub.StreamResume(request))
        _check_stream_shape(events)
        assert _steps(events) == [
            ("📨", "请求已接收，正在准备回答", "", "", ""),
            ("▶️", "收到 HITL 补充，继续原 RAG 流程", "丹瑾", "", ""),
            ("🔎", "使用 HITL 补充进行针对性检索", "跳过复杂度判断与子问题分解", "", ""),
            ("🧱", "HITL 三级分块检索", "叶子层 L3 召回，候选 24", "", ""),
            MERGE,
            ("✅", "HITL 针对性检索完成，找到 1 个片段", "模式: hybrid", "", ""),
            ("📊", "正在评估证据质量...", "", "", ""),
            ("❓", "需要用户补充信息", "哪个版本？", "", ""),
        ]
        result = events[-1].result
        assert result.route == "clarify" and result.hitl_resume_state.question == qstar
    finally:
        await s.aclose()


async def test_stream_error_after_steps_maps_status(stack) -> None:
    stack.retrieval.script.add(Q, D)  # grade has no scripted reply → HTTP 500 → UNAVAILABLE
    events = []
    with pytest.raises(grpc.aio.AioRpcError) as err:
        async for event in stack.stub.StreamRun(orchestrator_pb2.RunRequest(question=Q)):
            events.append(event)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    assert events and all(e.WhichOneof("event") == "step" for e in events)


async def test_stream_blank_question_is_invalid_argument(stack) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await _events(stack.stub.StreamRun(orchestrator_pb2.RunRequest(question=" ")))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_retrieval_calls_are_balanced_round_robin_over_the_target_addresses() -> None:
    script = RetrievalScript().add(Q, D)
    replicas = [await FakeRetrieval(script).start() for _ in range(2)]
    target = "ipv4:" + ",".join(r.address for r in replicas)
    ms = ModelScript().add("evidence_grade", Q, grade("strong", "sufficient", "answer"))
    s = await start_stack(ms, script, retrieval_addr=target)
    try:
        for _ in range(8):
            assert (await s.run(Q)).route == "answer"
        # pick_first would send all 8 to one replica; round_robin spreads them once both
        # subchannels are READY (the first calls may all land on the one that connected first)
        assert min(len(r.queries) for r in replicas) >= 2, [len(r.queries) for r in replicas]
    finally:
        await s.aclose()
        for r in replicas:
            await r.stop()


async def test_an_english_question_streams_its_steps_in_english() -> None:
    en = "What element is Danjin?"
    ms = (
        ModelScript()
        .add("complexity_classification", en, complexity("simple", "one entity"))
        .add("evidence_grade", en, grade("strong", "sufficient", "answer", confidence=0.9))
    )
    s = await start_stack(ms, RetrievalScript().add(en, D))
    try:
        events = await _events(s.stub.StreamRun(orchestrator_pb2.RunRequest(question=en)))
    finally:
        await s.aclose()
    steps = _steps(events)
    assert steps[0] == ("📨", "Request received, preparing the answer", "", "", "")
    # Only what the question, the evidence or a reason says may hold CJK; no catalogue text does.
    assert not [label for _, label, *_ in steps if any("\u4e00" <= c <= "\u9fff" for c in label)]
