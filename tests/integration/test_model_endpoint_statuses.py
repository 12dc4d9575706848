"""Status codes through the orchestrator's real RPCs (production wiring, scripted model and
retrieval on 127.0.0.1): the model endpoint's HTTP failures map to honest status codes
(permanent → FAILED_PRECONDITION, 429 → RESOURCE_EXHAUSTED, 5xx → UNAVAILABLE), retryable ones
are retried only while the deadline allows, secrets never leave, own timeouts say which limit
fired, and MAX_CONCURRENT_RPCS refuses the call beyond it while health keeps answering."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from supermew.v1 import orchestrator_pb2

from shared.error_details import ErrorDetails, read_details
from tests.fakes.model_server import HttpError, ModelScript, grade
from tests.fakes.orchestrator_stack import API_KEY, Stack, start_stack
from tests.fakes.retrieval_servicer import RetrievalScript, chunk

GR = "evidence_grade"
Q = "年假需要提前多久申请"
A1 = chunk("leave.md", "1", "年假需提前一周申请。")
ANSWER = grade("strong", "sufficient", "answer")
# A provider that quotes the rejected key back, as some do in their 401 bodies.
QUOTING = f"Incorrect API key provided: {API_KEY}. You can find your key in the dashboard."


def _retrieval() -> RetrievalScript:
    return RetrievalScript().add(Q, [A1])


async def _failure(stack: Stack, **kw: object) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stack.run(Q, **kw)
    return err.value


def _assert_nothing_leaked(details: str) -> None:
    assert API_KEY not in details and "Traceback" not in details and "Error(" not in details
    assert "127.0.0.1" not in details and "/v1" not in details


@pytest.mark.parametrize("status", [400, 401, 403, 404])
async def test_a_permanent_refusal_is_failed_precondition_naming_task_and_reason(status) -> None:
    stack = await start_stack(ModelScript().add(GR, Q, HttpError(status, QUOTING)), _retrieval())
    try:
        error = await _failure(stack)
        assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert GR in error.details() and f"HTTP {status}" in error.details()
        assert "Incorrect API key provided: [redacted]" in error.details()
        _assert_nothing_leaked(error.details())
        details = read_details(error)
        assert details == ErrorDetails("DEPENDENCY_REJECTED", dependency="model endpoint")
        assert stack.model.tasks() == [GR]  # a permanent error is not retried
    finally:
        await stack.aclose()


async def test_rate_limiting_is_resource_exhausted_after_the_retries() -> None:
    script = ModelScript().add(GR, Q, HttpError(429, QUOTING, retry_after=0))
    stack = await start_stack(script, _retrieval())
    try:
        error = await _failure(stack)
        assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert GR in error.details()
        _assert_nothing_leaked(error.details())
        assert stack.model.tasks() == [GR] * 4  # MAX_ATTEMPTS
    finally:
        await stack.aclose()


async def test_a_retry_is_not_attempted_beyond_the_callers_deadline() -> None:
    # The endpoint asks for 30 s of patience; the caller allows 5: no second attempt.
    script = ModelScript().add(GR, Q, HttpError(503, "overloaded", retry_after=30))
    stack = await start_stack(script, _retrieval())
    try:
        error = await _failure(stack, timeout=5)
        assert error.code() == grpc.StatusCode.UNAVAILABLE
        assert "model endpoint" in error.details() and GR in error.details()
        assert stack.model.tasks() == [GR]
    finally:
        await stack.aclose()


@pytest.mark.parametrize("status", [502, 503, 504, 429])
async def test_a_passing_failure_is_retried_and_the_run_answers(status) -> None:
    script = ModelScript().add(GR, Q, HttpError(status, retry_after=0), ANSWER)
    stack = await start_stack(script, _retrieval())
    try:
        result = await stack.run(Q)
        assert (result.route, result.retrieval_status) == ("answer", "answerable")
        assert stack.model.tasks() == [GR, GR]
    finally:
        await stack.aclose()


async def test_a_server_error_is_unavailable_and_not_retried() -> None:
    stack = await start_stack(ModelScript().add(GR, Q, HttpError(500, QUOTING)), _retrieval())
    try:
        error = await _failure(stack)
        assert error.code() == grpc.StatusCode.UNAVAILABLE
        assert error.details() == f"model endpoint unavailable: task {GR}: HTTP 500"
        details = read_details(error)
        assert details == ErrorDetails("DEPENDENCY_UNAVAILABLE", dependency="model endpoint")
        assert stack.model.tasks() == [GR]
    finally:
        await stack.aclose()


async def test_own_model_timeout_names_llm_timeout_seconds() -> None:
    script = ModelScript().add(GR, Q, ANSWER)
    stack = await start_stack(script, _retrieval(), model_delay=2.0, llm_timeout_seconds=0.2)
    try:
        error = await _failure(stack)
        assert error.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert "LLM_TIMEOUT_SECONDS (0.2s)" in error.details() and GR in error.details()
    finally:
        await stack.aclose()


async def test_the_callers_deadline_is_reported_as_the_callers() -> None:
    script = ModelScript().add(GR, Q, ANSWER)
    stack = await start_stack(script, _retrieval(), model_delay=2.0)
    try:
        error = await _failure(stack, timeout=0.5)
        assert error.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert "LLM_TIMEOUT_SECONDS" not in error.details()
    finally:
        await stack.aclose()


async def test_own_retrieval_timeout_names_retrieval_timeout_seconds() -> None:
    script = _retrieval()
    script.delay = 2.0
    stack = await start_stack(ModelScript(), script, retrieval_timeout_seconds=0.2)
    try:
        error = await _failure(stack)
        assert error.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert "RETRIEVAL_TIMEOUT_SECONDS (0.2s)" in error.details()
    finally:
        await stack.aclose()


async def _wait_for_in_flight(stack: Stack, count: int) -> None:
    while stack.app.server.limiter.in_flight < count:
        await asyncio.sleep(0.01)


async def test_calls_beyond_max_concurrent_rpcs_are_refused_and_health_still_answers() -> None:
    script = ModelScript().add(GR, Q, ANSWER)
    stack = await start_stack(script, _retrieval(), model_delay=1.0, max_concurrent_rpcs=2)
    try:
        held = [asyncio.ensure_future(stack.run(Q)) for _ in range(2)]
        await asyncio.wait_for(_wait_for_in_flight(stack, 2), 10)

        refused = await _failure(stack)
        assert refused.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "MAX_CONCURRENT_RPCS" in refused.details()
        assert read_details(refused) == ErrorDetails("RESOURCE_EXHAUSTED")
        with pytest.raises(grpc.aio.AioRpcError) as err:
            async for _ in stack.stub.StreamRun(orchestrator_pb2.RunRequest(question=Q)):
                pass
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert read_details(err.value) == ErrorDetails("RESOURCE_EXHAUSTED")

        health = health_pb2_grpc.HealthStub(stack.channel)
        reply = await health.Check(health_pb2.HealthCheckRequest(service=""))
        assert reply.status == health_pb2.HealthCheckResponse.SERVING

        results = await asyncio.gather(*held)
        assert [r.route for r in results] == ["answer", "answer"]
        assert stack.app.server.limiter.in_flight == 0
        assert (await stack.run(Q)).route == "answer"  # the slots are free again
    finally:
        await stack.aclose()
