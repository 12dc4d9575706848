"""A bounded, deterministic fuzz of bad requests at every RPC through the real
services (retrieval on Milvus Lite with the ingested test corpus; the orchestrator in its
production wiring with the scripted model and retrieval). Control characters, NUL, over-long
strings, quotes and filter syntax, out-of-range numbers and resume-snapshot violations must
answer INVALID_ARGUMENT naming the field, change nothing stored and show no internals.

Text that is odd but allowed (quotes or filter syntax in a question, a well-formed file name
nobody ingested) may also answer OK; then it must still change nothing and leak nothing.
Examples come from hypothesis with a fixed derandomised seed: tens per RPC."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import grpc
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from supermew.v1 import orchestrator_pb2, retrieval_pb2, trace_pb2

from shared.trace_fields import HITL_RESUME_STATE_FIELDS
from tests.fakes.model_server import ModelScript, complexity, grade
from tests.fakes.orchestrator_stack import Stack, start_stack
from tests.fakes.retrieval_servicer import RetrievalScript, chunk
from tests.integration.retrieval_harness import Service, copy_corpus, running_service

T = TypeVar("T")
EXAMPLES = 25
MAX_CHARS = 4000
# What a status message must never show: tracebacks, exception reprs, Milvus expressions,
# paths of this machine.
INTERNALS = ("Traceback", "Exception", "Error(", "code=", " == ", "chunk_id in", "/tmp", "/work")

CONTROL = st.sampled_from(["\x00", "\n", "\r", "\r\n", "\t", "\x1b", "\x7f", "\u200b", "\u202e"])
FILTER_SYNTAX = st.sampled_from(
    ['" || filename != "', "' or 1=1 --", '"] or chunk_level in [1,2,3', "\\", '""', "${x}"]
)
WORDS = st.text(alphabet="abcxyz茶年假 -_", min_size=1, max_size=12).map(str.strip).filter(bool)


def examples(strategy: st.SearchStrategy[T], count: int = EXAMPLES) -> list[T]:
    """`count` deterministic examples of `strategy` (generation only, no database)."""
    drawn: list[T] = []

    @settings(
        max_examples=count,
        derandomize=True,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(strategy)
    def collect(value: T) -> None:
        drawn.append(value)

    collect()
    return drawn


def _assert_clean(details: str) -> None:
    for marker in INTERNALS:
        assert marker not in details, (marker, details)


async def _expect_invalid(call: Any, field: str) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, (field, err.value.details())
    assert err.value.details().startswith(field), (field, err.value.details())
    _assert_clean(err.value.details())


async def _ok_or_invalid(call: Any, field: str) -> Any:
    """The reply, or None after an INVALID_ARGUMENT naming `field`."""
    try:
        return await call
    except grpc.aio.AioRpcError as err:
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, (field, err.details())
        assert err.details().startswith(field), (field, err.details())
        _assert_clean(err.details())
        return None


# ---- strategies -------------------------------------------------------------------------------

BAD_FILENAMES = st.one_of(
    st.builds(lambda a, c, b: f"{a}{c}{b}.txt", WORDS, CONTROL, WORDS),
    st.builds(lambda a, f, c: f"{a}{f}{c}.md", WORDS, FILTER_SYNTAX, CONTROL),
    st.builds(lambda a, b: f"{a}/{b}.txt", WORDS, WORDS),
    st.builds(lambda a: f"../{a}.txt", WORDS),
    st.integers(252, 2000).map(lambda n: "n" * n + ".txt"),
    st.sampled_from(["", " ", "\t", "tea.exe", "tea", " tea.txt", "tea.txt "]),
)
ODD_BUT_WELL_FORMED_FILENAMES = st.builds(lambda a, f: f"{a}{f}.txt", WORDS, FILTER_SYNTAX).filter(
    lambda name: "/" not in name and "\\" not in name and ".." not in name
)
BLANK = st.text(alphabet=" \t\n\r\u3000", max_size=8)
OVER_LONG = st.integers(MAX_CHARS + 1, MAX_CHARS + 3000).map(lambda n: "问" * n)
# Control characters no question contains: NUL, ESC, other C0 (not tab/LF/CR), DEL, C1.
FORBIDDEN_CONTROL = st.sampled_from(["\x00", "\x01", "\x08", "\x0b", "\x1b", "\x7f", "\x85"])
WITH_CONTROL = st.builds(lambda a, c, b: f"{a}{c}{b}", WORDS, FORBIDDEN_CONTROL, WORDS)
ODD_TEXT = st.builds(lambda a, x, b: f"{a}{x}{b}", WORDS, st.one_of(CONTROL, FILTER_SYNTAX), WORDS)


# ---- retrieval --------------------------------------------------------------------------------


async def _stored(svc: Service) -> tuple[Any, Any]:
    return await svc.counts(), await svc.listing()


async def test_retrieval_rpcs_reject_bad_requests_and_change_nothing(tmp_path) -> None:
    async with running_service(copy_corpus(tmp_path)) as svc:
        before = await _stored(svc)
        stub = svc.stub

        for name in examples(BAD_FILENAMES):
            doc = retrieval_pb2.SourceDocument(filename=name, content=b"some text to keep")
            await _expect_invalid(
                stub.IngestDocuments(retrieval_pb2.IngestDocumentsRequest(documents=[doc])),
                "documents[0].filename",
            )
            await _expect_invalid(
                stub.DeleteDocuments(retrieval_pb2.DeleteDocumentsRequest(filenames=[name])),
                "filenames[0]",
            )

        for name in examples(ODD_BUT_WELL_FORMED_FILENAMES):
            reply = await _ok_or_invalid(
                stub.DeleteDocuments(retrieval_pb2.DeleteDocumentsRequest(filenames=[name])),
                "filenames[0]",
            )
            assert reply is None or reply.deleted_chunks == 0, name  # no filter injection

        for file_type in examples(st.one_of(ODD_TEXT, st.sampled_from(["exe", "PDF;", "*"]))):
            doc = retrieval_pb2.SourceDocument(filename="x.txt", content=b"t", file_type=file_type)
            await _expect_invalid(
                stub.IngestDocuments(retrieval_pb2.IngestDocumentsRequest(documents=[doc])),
                "documents[0].file_type",
            )
        await _expect_invalid(
            stub.IngestDocuments(
                retrieval_pb2.IngestDocumentsRequest(
                    documents=[retrieval_pb2.SourceDocument(filename="x.txt", content=b"")]
                )
            ),
            "documents[0].content",
        )

        for query in examples(st.one_of(BLANK, OVER_LONG, WITH_CONTROL)):
            await _expect_invalid(
                stub.Retrieve(retrieval_pb2.RetrieveRequest(query=query)), "query"
            )
        for top_k in examples(st.one_of(st.integers(-(2**31), 0), st.integers(101, 2**31 - 1))):
            await _expect_invalid(
                stub.Retrieve(retrieval_pb2.RetrieveRequest(query="tea", top_k=top_k)), "top_k"
            )
        for query in examples(ODD_TEXT, 10):
            reply = await _ok_or_invalid(
                stub.Retrieve(retrieval_pb2.RetrieveRequest(query=query, top_k=2)), "query"
            )
            if reply is not None:
                _assert_clean(reply.meta.rerank_error)

        assert await _stored(svc) == before


# ---- orchestrator -----------------------------------------------------------------------------


def _model_fallback(task: str, question: str | None) -> Any:
    if task == "complexity_classification":
        return complexity("simple")
    return grade("strong", "sufficient", "answer")


async def _stack() -> Stack:
    script = ModelScript()
    script.fallback = _model_fallback
    return await start_stack(script, RetrievalScript().add("tea", [chunk("t.md", "1", "tea")]))


async def _stream(stack: Stack, call: Callable[..., Any], request: Any) -> Any:
    async def drain() -> list[Any]:
        return [event async for event in call(request)]

    return drain()


async def test_run_rpcs_reject_bad_questions() -> None:
    stack = await _stack()
    try:
        for question in examples(st.one_of(BLANK, OVER_LONG, WITH_CONTROL)):
            request = orchestrator_pb2.RunRequest(question=question)
            await _expect_invalid(stack.stub.Run(request), "question")
            await _expect_invalid(await _stream(stack, stack.stub.StreamRun, request), "question")
        for question in examples(ODD_TEXT, 10):
            await _ok_or_invalid(
                stack.stub.Run(orchestrator_pb2.RunRequest(question=question)), "question"
            )
    finally:
        await stack.aclose()


def _snapshot(**changes: Any) -> trace_pb2.HitlResumeState:
    base: dict[str, Any] = {
        "question": "这个制度的申请要求是什么",
        "route": "clarify",
        "retrieval_status": "needs_clarification",
        "rewrite_count": 0,
        "sub_questions": [],
    }
    base.update(changes)
    return trace_pb2.HitlResumeState(**{k: v for k, v in base.items() if v is not None})


SNAPSHOT_VIOLATIONS = st.one_of(
    st.builds(lambda q: ("question", _snapshot(question=q)), BLANK),
    st.builds(
        lambda r: ("route", _snapshot(route=r)),
        st.one_of(ODD_TEXT, st.sampled_from(["answer", "no_knowledge", "", "CLARIFY"])),
    ),
    st.builds(
        lambda s: ("retrieval_status", _snapshot(retrieval_status=s)),
        st.one_of(ODD_TEXT, st.sampled_from(["answerable", "needs_scope_selection", ""])),
    ),
    st.builds(lambda n: ("rewrite_count", _snapshot(rewrite_count=n)), st.integers(-(2**31), -1)),
    st.builds(
        lambda c: ("complexity", _snapshot(complexity=c)),
        st.one_of(ODD_TEXT, st.sampled_from(["", "medium", "SIMPLE"])),
    ),
    st.builds(
        lambda qs: ("sub_questions", _snapshot(sub_questions=qs)),
        st.lists(WORDS, min_size=5, max_size=9),
    ),
)


async def test_resume_rpcs_reject_snapshot_violations_and_bad_answers() -> None:
    assert {s.name for s in HITL_RESUME_STATE_FIELDS} >= {"question", "route", "sub_questions"}
    stack = await _stack()
    try:
        for key, snapshot in examples(SNAPSHOT_VIOLATIONS, 40):
            request = orchestrator_pb2.ResumeRequest(resume_state=snapshot, user_answer="年假")
            await _expect_invalid(stack.stub.Resume(request), f"resume_state.{key}")
            await _expect_invalid(
                await _stream(stack, stack.stub.StreamResume, request), f"resume_state.{key}"
            )
        for answer in examples(st.one_of(BLANK, OVER_LONG)):
            request = orchestrator_pb2.ResumeRequest(resume_state=_snapshot(), user_answer=answer)
            await _expect_invalid(stack.stub.Resume(request), "user_answer")
            await _expect_invalid(
                await _stream(stack, stack.stub.StreamResume, request), "user_answer"
            )
        assert stack.retrieval.queries == []  # nothing bad reached retrieval
    finally:
        await stack.aclose()
