"""The grounding check through the real RPCs (docs/api.md#grounding-check): CheckGrounding on
the scripted model endpoint and on the built-in model, its limits, and every generated answer
keeping only its supported claims — streamed deltas included — or ending at no_knowledge."""

from __future__ import annotations

import grpc
import pytest
from supermew.v1 import orchestrator_pb2

from tests.fakes.model_server import ModelScript, complexity, grade, grounding, sse
from tests.fakes.orchestrator_stack import start_stack
from tests.fakes.retrieval_servicer import RetrievalScript, chunk
from tests.integration.retrieval_harness import local_orchestrator

Q = "How fast does support answer?"
DOCS = [
    chunk("plans.md", "1", "The Basic plan answers within 24 hours.", rrf_rank=1),
    chunk("plans.md", "2", "The Premium plan answers within 4 hours.", rrf_rank=2),
]
ANSWER = (
    "The Basic plan answers within 24 hours[1]. The Gold plan answers at once[2]. "
    "Premium takes 4 hours[2]."
)
KEPT = "The Basic plan answers within 24 hours[1]. Premium takes 4 hours[2]."


def _script(*verdicts: dict) -> ModelScript:
    script = (
        ModelScript()
        .add("complexity_classification", Q, complexity("simple"))
        .add("evidence_grade", Q, grade("strong", "sufficient", "answer"))
        .add("answer_generation", Q, sse(ANSWER, size=4))
    )
    return script.add("check_grounding", "", *verdicts) if verdicts else script


def _check(answer: str, *facts: str, threshold: float | None = None):
    request = orchestrator_pb2.CheckGroundingRequest(
        answer_candidate=answer, facts=[orchestrator_pb2.GroundingFact(text=f) for f in facts]
    )
    if threshold is not None:
        request.citation_threshold = threshold
    return request


async def test_an_unsupported_claim_is_dropped_from_the_answer_and_its_stream() -> None:
    # The claims settle one at a time: each is checked alone, as the next one begins.
    s = await start_stack(
        _script(grounding([(0, 1.0, [0])]), grounding([(0, 0.2, [])]), grounding([(0, 0.9, [1])])),
        RetrievalScript().add(Q, DOCS),
    )
    try:
        events = [
            e
            async for e in s.stub.StreamRun(
                orchestrator_pb2.RunRequest(question=Q, generate_answer=True)
            )
        ]
        result = events[-1].result
        deltas = "".join(
            e.answer_delta.text for e in events if e.WhichOneof("event") == "answer_delta"
        )
        assert result.route == "answer"
        assert deltas == result.answer.text == KEPT
        assert result.answer.dropped_claims == 1
        assert result.answer.support_score == pytest.approx(0.95)
        assert [(c.index, c.support_score) for c in result.answer.citations] == [
            (1, pytest.approx(1.0)),
            (2, pytest.approx(0.9)),
        ]
        checks = [r for r in s.model.requests if r.task == "check_grounding"]
        prompts = [r.body["messages"][-1]["content"] for r in checks]
        assert '<claim index="0" cites="1">\nThe Gold plan answers at once.\n</claim>' in prompts[1]
        assert all(
            '<fact index="1">\nThe Premium plan answers within 4 hours.\n</fact>' in p
            for p in prompts
        )
        assert checks[0].body["response_format"]["json_schema"]["name"] == "check_grounding"
    finally:
        await s.aclose()


async def test_an_answer_with_no_supported_claim_ends_at_no_knowledge() -> None:
    s = await start_stack(_script(grounding([(0, 0.1, [])])), RetrievalScript().add(Q, DOCS))
    try:
        events = [
            e
            async for e in s.stub.StreamRun(
                orchestrator_pb2.RunRequest(question=Q, generate_answer=True)
            )
        ]
        result = events[-1].result
        assert "answer_delta" not in [e.WhichOneof("event") for e in events]
        assert (result.route, result.retrieval_status) == ("no_knowledge", "no_knowledge")
        assert not result.HasField("answer") and not result.docs and not result.context
        assert result.rag_trace.route == "no_knowledge"
        assert result.rag_trace.evidence_reason == "answer_unsupported"
    finally:
        await s.aclose()


async def test_check_grounding_on_the_model_endpoint() -> None:
    answer = "Hi! The Basic plan answers within 24 hours [1]. 白金计划一小时内回复。"
    script = ModelScript().add(
        "check_grounding",
        "",
        {
            "claims": [
                {
                    "claim_index": 2,
                    "grounding_check_required": True,
                    "score": 0.3,
                    "citation_indices": [1],
                },
                {
                    "claim_index": 0,
                    "grounding_check_required": False,
                    "score": 0.0,
                    "citation_indices": [],
                },
                {
                    "claim_index": 1,
                    "grounding_check_required": True,
                    "score": 0.9,
                    "citation_indices": [0],
                },
            ]
        },
    )
    s = await start_stack(script, RetrievalScript())
    try:
        result = await s.stub.CheckGrounding(_check(answer, DOCS[0]["text"], DOCS[1]["text"]))
        encoded = answer.encode()
        assert [c.claim_text for c in result.claims] == [
            "Hi!",
            "The Basic plan answers within 24 hours [1].",
            "白金计划一小时内回复。",
        ]
        for claim in result.claims:
            assert encoded[claim.start_pos : claim.end_pos].decode() == claim.claim_text
        assert [list(c.citation_indices) for c in result.claims] == [[], [0], []]  # 0.3 < 0.6
        assert [c.grounding_check_required for c in result.claims] == [False, True, True]
        assert result.support_score == pytest.approx(0.6)
        prompt = s.model.requests[-1].body["messages"][-1]["content"]
        assert (
            '<claim index="1" cites="0">\nThe Basic plan answers within 24 hours.\n</claim>'
            in prompt
        )
    finally:
        await s.aclose()


async def test_a_verdict_for_the_wrong_claims_is_internal_after_one_retry() -> None:
    bad = grounding([(5, 1.0, [0])])
    s = await start_stack(ModelScript().add("check_grounding", "", bad), RetrievalScript())
    try:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await s.stub.CheckGrounding(_check("One claim.", "A fact."))
        assert err.value.code() == grpc.StatusCode.INTERNAL
        assert "check_grounding" in (err.value.details() or "")
        assert s.model.tasks() == ["check_grounding", "check_grounding"]
    finally:
        await s.aclose()


@pytest.mark.parametrize(
    ("request_", "field"),
    [
        (_check("", "a"), "answer_candidate"),
        (_check("x" * 32769, "a"), "answer_candidate"),
        (_check("ok", *["a"] * 201), "facts"),
        (_check("ok", "a", " "), "facts[1].text"),
        (_check("ok", "a", threshold=2.0), "citation_threshold"),
    ],
)
async def test_bad_requests_are_invalid_argument_naming_the_field(request_, field: str) -> None:
    s = await start_stack(ModelScript(), RetrievalScript())
    try:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await s.stub.CheckGrounding(request_)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert (err.value.details() or "").startswith(f"{field}:")
        assert s.model.tasks() == []
    finally:
        await s.aclose()


async def test_check_grounding_on_the_built_in_model() -> None:
    facts = [
        "Basic Support Plan: we respond to tickets within 24 hours on business days.",
        "The Premium Support Plan guarantees a response within 4 hours, around the clock.",
    ]
    answer = (
        "Sure, here is what I found. The Premium Support Plan guarantees a response within 4 "
        "hours. The Premium Support Plan guarantees a response within 24 hours. Basic Support "
        "Plan does not respond to tickets within 24 hours."
    )
    async with local_orchestrator(1) as stub:  # no retrieval is called
        result = await stub.CheckGrounding(_check(answer, *facts))
    verdicts = [
        (c.grounding_check_required, c.score >= 0.6, list(c.citation_indices))
        for c in result.claims
    ]
    assert verdicts == [(False, False, []), (True, True, [1]), (True, False, []), (True, False, [])]
