"""The OpenAI-compatible remote model client against the scripted HTTP model server: wire
format, strict schemas, one retry on invalid output, and the error mapping."""

from __future__ import annotations

import socket

import pytest

from orchestrator_service.models import build_model_client
from orchestrator_service.models.base import ComplexityResult, EvidenceGrade, RewritePlan
from orchestrator_service.models.remote import RemoteModelClient, strict_schema
from orchestrator_service.settings import OrchestratorSettings
from shared.errors import DeadlineExceeded, DependencyUnavailable, ModelOutputInvalid
from tests.fakes.model_server import (
    FakeModelServer,
    HttpError,
    ModelScript,
    complexity,
    grade,
    rewrite,
)

Q = "丹瑾的武器是什么？"
DOCS = [{"filename": "roles.md", "page_number": "1", "text": "丹瑾使用迅刀。"}]


def _client(server: FakeModelServer, **kw) -> RemoteModelClient:
    return RemoteModelClient(
        base_url=server.base_url, api_key="k1", model="m", grade_model="g", fast_model="f", **kw
    )


@pytest.mark.parametrize("schema", [ComplexityResult, EvidenceGrade, RewritePlan])
def test_strict_schema_requires_every_property_and_forbids_extras(schema) -> None:
    s = strict_schema(schema)
    assert s["type"] == "object" and s["additionalProperties"] is False
    assert s["required"] == list(schema.model_fields)
    text = str(s)
    for keyword in ("'default'", "maxLength", "maxItems", "'title'"):
        assert keyword not in text


@pytest.mark.integration  # a loopback HTTP server
async def test_wire_format_per_task() -> None:
    script = (
        ModelScript()
        .add("complexity_classification", Q, complexity("simple", "one fact"))
        .add("evidence_grade", Q, grade("strong", "sufficient", "answer", confidence=0.7))
        .add("query_rewrite", Q, rewrite("hyde", "丹瑾的武器是迅刀。"))
    )
    async with FakeModelServer(script) as server:
        client = _client(server)
        try:
            assert (await client.classify_complexity(Q)).reason == "one fact"
            assert (await client.grade_evidence(Q, DOCS)).confidence == 0.7
            assert (await client.rewrite_query(Q, DOCS)).method == "hyde"
        finally:
            await client.aclose()
    assert [(r.task, r.model, r.authorization) for r in server.requests] == [
        ("complexity_classification", "f", "Bearer k1"),
        ("evidence_grade", "g", "Bearer k1"),
        ("query_rewrite", "f", "Bearer k1"),
    ]
    for r in server.requests:
        assert r.body["temperature"] == 0 and r.question == Q
        fmt = r.body["response_format"]
        assert fmt == {
            "type": "json_schema",
            "json_schema": {"name": r.task, "strict": True, "schema": fmt["json_schema"]["schema"]},
        }
    assert "丹瑾使用迅刀。" in server.requests[1].body["messages"][-1]["content"]


@pytest.mark.integration  # a loopback HTTP server
async def test_one_retry_on_invalid_output_then_success() -> None:
    script = ModelScript().add("evidence_grade", Q, "{not json", grade("weak", "none", "rewrite"))
    async with FakeModelServer(script) as server:
        client = _client(server)
        try:
            assert (await client.grade_evidence(Q, DOCS)).route == "rewrite"
        finally:
            await client.aclose()
    assert server.tasks() == ["evidence_grade", "evidence_grade"]


@pytest.mark.parametrize(
    ("task", "reply"),
    [
        ("complexity_classification", complexity("complex", "x", [])),
        ("complexity_classification", complexity("complex", "x", list("abcde"))),
        ("query_rewrite", {"method": "step_back", "step_back_question": "a", "hyde_document": "b"}),
        ("query_rewrite", {"method": "hyde", "step_back_question": "", "hyde_document": " "}),
        ("evidence_grade", {**grade("strong", "sufficient", "answer"), "confidence": 1.5}),
        ("evidence_grade", {**grade("strong", "sufficient", "answer"), "extra": 1}),
    ],
)
@pytest.mark.integration  # a loopback HTTP server
async def test_invalid_twice_raises_model_output_invalid_naming_the_task(task, reply) -> None:
    async with FakeModelServer(ModelScript().add(task, Q, reply)) as server:
        client = _client(server)
        try:
            with pytest.raises(ModelOutputInvalid) as err:
                if task == "complexity_classification":
                    await client.classify_complexity(Q)
                elif task == "query_rewrite":
                    await client.rewrite_query(Q, DOCS)
                else:
                    await client.grade_evidence(Q, DOCS)
        finally:
            await client.aclose()
    assert err.value.task == task and task in str(err.value)
    assert server.tasks() == [task, task]


@pytest.mark.integration  # a loopback HTTP server
async def test_timeout_is_deadline_exceeded() -> None:
    script = ModelScript().add("evidence_grade", Q, grade("strong", "sufficient", "answer"))
    async with FakeModelServer(script, delay=0.5) as server:
        client = _client(server)
        try:
            with pytest.raises(DeadlineExceeded):
                await client.grade_evidence(Q, DOCS, timeout=0.1)
        finally:
            await client.aclose()


@pytest.mark.integration  # a loopback HTTP server
async def test_http_error_and_refused_connection_are_unavailable() -> None:
    async with FakeModelServer(ModelScript().add("evidence_grade", Q, HttpError(502))) as server:
        client = _client(server)
        try:
            with pytest.raises(DependencyUnavailable):
                await client.grade_evidence(Q, DOCS)
        finally:
            await client.aclose()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    client = RemoteModelClient(base_url=f"http://127.0.0.1:{port}/v1", api_key=None, model="m")
    try:
        with pytest.raises(DependencyUnavailable):
            await client.classify_complexity(Q)
    finally:
        await client.aclose()


async def test_factory_selects_remote_when_base_url_is_set() -> None:
    settings = OrchestratorSettings(
        _env_file=None, llm_base_url="http://127.0.0.1:1/v1", llm_api_key="k", model="m"
    )
    client = build_model_client(settings)
    try:
        assert isinstance(client, RemoteModelClient)
        assert (client.grade_model, client.fast_model) == ("m", "m")
    finally:
        await client.aclose()


def test_factory_selects_the_local_model_without_base_url() -> None:
    from orchestrator_service.models.local import LocalModel

    client = build_model_client(OrchestratorSettings(_env_file=None, llm_base_url=None))
    assert isinstance(client, LocalModel) and client.name == "local"
