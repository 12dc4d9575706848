"""End to end on `make run`'s configuration: the real retrieval service on Milvus Lite with the
built-in embedder and the bundled samples, the orchestrator with NO model endpoint (so the
built-in local model serves), driven through the real Run / Resume RPCs."""

from __future__ import annotations

import io
import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from supermew.v1 import orchestrator_pb2

from orchestrator_service.cli import print_result, result_to_dict
from retrieval_service.bootstrap import seed_samples
from shared.codec import rag_trace_from_proto
from tests.integration.retrieval_harness import local_orchestrator, running_service

pytestmark = pytest.mark.asyncio(loop_scope="module")
SAMPLES = Path(__file__).resolve().parents[2] / "samples"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stub(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[object]:
    async with running_service(tmp_path_factory.mktemp("kb") / "kb.db", chunking=None) as kb:
        assert await seed_samples(kb.app, str(SAMPLES)) == len(list(SAMPLES.iterdir()))
        async with local_orchestrator(kb.port) as orchestrator:
            yield orchestrator


async def run(
    stub: object, question: str, *, generate_answer: bool = False
) -> orchestrator_pb2.RunResult:
    request = orchestrator_pb2.RunRequest(question=question, generate_answer=generate_answer)
    return await stub.Run(request)  # type: ignore[attr-defined]


#: One claim: text up to its markers, then the sentence's closing marks.
CLAIM = re.compile(r"(?P<claim>[^\[\]]+?)(?P<markers>(?:\[\d+\])+)(?P<close>[。！？.!?]?)\s*")
CJK = re.compile(r"[\u3400-\u9fff]")


def assert_grounded(result: orchestrator_pb2.RunResult, *, chinese: bool) -> None:
    """Every sentence of the answer carries a citation and is copied from the doc it cites;
    every quote is verbatim in its doc; the answer is in the question's language."""
    answer = result.answer
    assert answer.text and answer.model == "local"
    assert answer.partial == (result.retrieval_status == "partial")
    text = answer.text
    if answer.partial:  # then a closing note says what is missing, without a citation
        text, note = text.rsplit("\n\n", 1)
        assert note.startswith("注意：" if chinese else "Note:")
    claims = list(CLAIM.finditer(text))
    assert "".join(m.group(0) for m in claims) == text  # nothing uncited in between
    for match in claims:
        for number in map(int, re.findall(r"\d+", match.group("markers"))):
            assert 1 <= number <= len(result.docs)
            assert match.group("claim").strip() in result.docs[number - 1].text
        assert bool(CJK.search(match.group("claim"))) == chinese
    assert answer.citations
    for citation in answer.citations:
        doc = result.docs[citation.index - 1]
        assert (citation.filename, citation.page_number) == (doc.filename, doc.page_number)
        assert citation.quote and citation.quote in doc.text


@pytest.mark.parametrize(
    ("question", "filename"),
    [
        ("成年人每晚需要睡多久？", "sleep_health.zh.md"),
        ("What is an event loop?", "python_asyncio.en.md"),
        ("喝茶会影响睡眠吗？", "tea_culture.zh.txt"),
        # BM25 and the grader both stem, so "water" finds "watered" at once.
        ("How much water do succulents need?", "houseplant_care.en.html"),
    ],
)
async def test_answer(stub: object, question: str, filename: str) -> None:
    result = await run(stub, question)
    assert (result.route, result.retrieval_status) == ("answer", "answerable")
    assert filename in {doc.filename for doc in result.docs}
    assert not result.HasField("answer")  # only when asked for


@pytest.mark.parametrize(
    ("question", "chinese", "expected"),
    [
        ("成年人每晚需要睡多久？", True, "成年人每晚通常需要七到九小时的睡眠[1]。"),
        ("What is an event loop?", False, "A single event loop runs many coroutines"),
        ("喝茶会影响睡眠吗？", True, "茶"),
        ("How much water do succulents need?", False, "water"),
        ("多肉要浇多少水？", True, "多肉类植物等盆土完全干透后才浇水"),
        ("比较绿茶和红茶的发酵程度", True, "发酵"),
    ],
)
async def test_local_model_answers_grounded_in_the_samples(
    stub: object, question: str, chinese: bool, expected: str
) -> None:
    result = await run(stub, question, generate_answer=True)
    assert result.route == "answer" and result.HasField("answer")
    assert expected in result.answer.text
    assert_grounded(result, chinese=chinese)
    # Deterministic: the stream writes the same answer, piece by piece.
    request = orchestrator_pb2.RunRequest(question=question, generate_answer=True)
    events = [event async for event in stub.StreamRun(request)]  # type: ignore[attr-defined]
    deltas = [e.answer_delta.text for e in events if e.WhichOneof("event") == "answer_delta"]
    assert "".join(deltas) == events[-1].result.answer.text == result.answer.text


@pytest.mark.parametrize(
    "question",
    [
        "这个角色的属性是什么？",
        "What is the response time for support tickets?",
        "量子计算机的工作原理是什么？",
        "How do I bake sourdough bread?",
    ],
)
async def test_hitl_and_no_knowledge_carry_no_answer(stub: object, question: str) -> None:
    result = await run(stub, question, generate_answer=True)
    assert result.route in {"clarify", "scope_select", "no_knowledge"}
    assert not result.HasField("answer")


@pytest.mark.parametrize(
    ("question", "options", "answer"),
    [
        ("这个角色的属性是什么？", ["丹瑾", "赤羽", "墨言"], "丹瑾"),
        ("What is the skill of this role?", ["Navigator", "Quartermaster", "Lookout"], "Navigator"),
    ],
)
async def test_clarify_then_resume_answers(
    stub: object, question: str, options: list[str], answer: str
) -> None:
    asked = await run(stub, question)
    trace = rag_trace_from_proto(asked.rag_trace)
    assert (asked.route, trace["evidence_ambiguity"]) == ("clarify", "missing_slot")
    assert list(trace["hitl_options"]) == options and trace["hitl_prompt"]
    request = orchestrator_pb2.ResumeRequest(
        resume_state=asked.hitl_resume_state, user_answer=answer, generate_answer=True
    )
    resumed = await stub.Resume(request)  # type: ignore[attr-defined]
    assert (resumed.route, resumed.retrieval_status) == ("answer", "answerable")
    assert rag_trace_from_proto(resumed.rag_trace)["query"] == f"{answer}：{question}"
    assert answer in resumed.answer.text
    assert_grounded(resumed, chinese=question.endswith("？"))


@pytest.mark.parametrize(
    ("question", "options"),
    [
        ("云存储套餐包含多少存储空间？", ["标准版云存储套餐", "专业版云存储套餐"]),
        ("What is the response time for support tickets?",
         ["Basic Support Plan", "Premium Support Plan"]),
    ],
)  # fmt: skip
async def test_scope_select(stub: object, question: str, options: list[str]) -> None:
    result = await run(stub, question)
    assert (result.route, result.retrieval_status) == ("scope_select", "needs_scope_selection")
    assert list(rag_trace_from_proto(result.rag_trace)["hitl_options"]) == options


@pytest.mark.parametrize(
    "question", ["量子计算机的工作原理是什么？", "How do I bake sourdough bread?"]
)
async def test_no_knowledge(stub: object, question: str) -> None:
    result = await run(stub, question)
    assert (result.route, result.retrieval_status) == ("no_knowledge", "no_knowledge")


@pytest.mark.parametrize(
    ("question", "method", "lacking"),
    [("晚上喝茶会失眠吗？", "hyde", "「失眠」"), ("Why is Venus so hot?", "step_back", "“hot”")],
)
async def test_partial_evidence_is_rewritten_once(
    stub: object, question: str, method: str, lacking: str
) -> None:
    result = await run(stub, question)
    trace = rag_trace_from_proto(result.rag_trace)
    assert trace["rewrite_method"] == method and trace["retrieval_stage"] == "rewritten"
    assert trace["rewritten_query"].startswith(question)
    # The base never pairs these terms in one chunk, so the second grade still finds them
    # apart and asks the user rather than answering.
    assert result.route == "clarify" and trace["rewrite_retrieved_chunks"]
    assert lacking in trace["hitl_prompt"]


async def test_rewrite_then_answers(stub: object) -> None:
    """The Watering section holds 多肉 and 浇 / 水 only inside longer words (多肉类, 浇水, 水分):
    the substring-matching grader credits all three terms there, but BM25 shares no token
    with the question, so fusion ranks the section 4th, below a window that covers part of the
    question. HyDE quotes the section's own sentence, the second retrieval lifts it into the
    window, and the second grade answers."""
    result = await run(stub, "多肉要浇多少水？")
    trace = rag_trace_from_proto(result.rag_trace)
    assert trace["rewrite_method"] == "hyde" and trace["retrieval_stage"] == "rewritten"
    answer = "多肉类植物等盆土完全干透后才浇水"
    window = [chunk["text"] for chunk in trace["initial_retrieved_chunks"][:3]]
    assert not any(answer in text for text in window)
    assert answer in trace["hyde_document"]
    assert (result.route, result.retrieval_status) == ("answer", "answerable")
    assert any(answer in doc.text for doc in result.docs[:3])
    shown = io.StringIO()
    print_result(result_to_dict(result), shown)
    assert "route:    answer (answerable)\nrewrite:  hyde," in shown.getvalue()


async def test_complex_question_fans_out_and_synthesises(stub: object) -> None:
    result = await run(stub, "比较绿茶和红茶的发酵程度")
    trace = rag_trace_from_proto(result.rag_trace)
    assert trace["complexity"] == "complex"
    assert list(trace["sub_questions"]) == ["绿茶的发酵程度？", "红茶的发酵程度？"]
    assert len(trace["sub_traces"]) == 2 and result.route == "answer"
    assert "tea_culture.zh.txt" in {doc.filename for doc in result.docs}


async def test_compound_question_answers_both_halves(stub: object) -> None:
    """Two coordinated asks become two grammatical sub-questions, and the samples
    answer each one, so the synthesis is answerable rather than partial."""
    question = "What does asyncio.gather do and how does asyncio.wait_for handle timeouts?"
    result = await run(stub, question, generate_answer=True)
    trace = rag_trace_from_proto(result.rag_trace)
    assert list(trace["sub_questions"]) == [
        "What does asyncio.gather do?",
        "How does asyncio.wait_for handle timeouts?",
    ]
    assert [sub["route"] for sub in trace["sub_traces"]] == ["answer", "answer"]
    assert (result.route, result.retrieval_status) == ("answer", "answerable")
    assert "python_asyncio.en.md" in {doc.filename for doc in result.docs}
    assert "asyncio.gather" in result.answer.text and "asyncio.wait_for" in result.answer.text
    assert_grounded(result, chinese=False)
