"""Scoped API keys end to end (docs/api.md#api-keys, #document-access): the real retrieval service
on Milvus Lite and the real orchestrator on the built-in model, both reading one AUTH_KEYS_FILE
with a reader, a writer and an admin on different knowledge bases, and documents with and
without `acl`. Every RPC × key × knowledge base gives its code; a reader of group `a` never
receives anything of a group-`b` document, nor a count that includes it; the file is re-read
without a restart; a quota refuses burst + 1 calls once, with RetryInfo."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
import pytest_asyncio
from google.protobuf import field_mask_pb2, json_format
from google.rpc import error_details_pb2, status_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from supermew.v1 import orchestrator_pb2, orchestrator_pb2_grpc, retrieval_pb2, retrieval_pb2_grpc

from retrieval_service.settings import SERVICE_NAME
from shared.codec import retrieval_meta_from_proto
from shared.error_details import ErrorDetails, read_details
from shared.metrics import registry_for
from tests.integration.retrieval_harness import local_orchestrator, running_service

pytestmark = pytest.mark.asyncio(loop_scope="module")

LEGACY = "legacy-admin-token"
KEYS = {
    "reader-a": ("key-reader-a", "reader", ["team-a"], ["a"]),
    "reader-b": ("key-reader-b", "reader", ["team-a"], ["b"]),
    "writer": ("key-writer", "writer", ["team-a"], ["a"]),
    "admin": ("key-admin", "admin", ["team-a", "team-b", "team-c"], ["a"]),
}
QUOTA_KEY = "key-quota"

HANDBOOK = "The cafeteria opens at 8:00 and closes at 15:00. Visitors sign in at the front desk."
FALCON = (
    "Project Falcon ships the mobile app in March. The Falcon budget is 40,000 euros. "
    "Falcon is led by Maria Keller from the Berlin office."
)
OBSIDIAN = (
    "Project Obsidian acquires the Kestrel robotics company in May. The Obsidian budget is "
    "2 million euros. Obsidian is led by Tomas Varga from the Lisbon office."
)
# Words only the group-b document holds: none may reach a reader of group a.
HIDDEN_WORDS = ("Obsidian", "Kestrel", "Varga", "Lisbon", "plan-b")


def sha(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def entry(key_id: str) -> dict[str, Any]:
    key, role, kbs, groups = KEYS[key_id]
    return {
        "id": key_id,
        "sha256": sha(key),
        "role": role,
        "knowledge_bases": kbs,
        "groups": groups,
    }


def write_keys(path: Path, entries: list[dict[str, Any]]) -> None:
    path.write_text(json.dumps({"keys": entries}))
    stat = path.stat()  # a modification time the ring sees as new, whatever the clock's grain
    os.utime(path, ns=(stat.st_atime_ns, time.time_ns() + 1_000_000_000))


def quota_entry() -> dict[str, Any]:
    return {
        "id": "quota",
        "sha256": sha(QUOTA_KEY),
        "role": "reader",
        "knowledge_bases": ["*"],
        "rate_per_second": 0.01,
        "burst": 3,
    }


def auth(key: str | None) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {key}"),) if key else ()


@dataclass
class Deployment:
    retrieval: retrieval_pb2_grpc.RetrievalServiceStub
    orchestrator: orchestrator_pb2_grpc.OrchestratorServiceStub
    keys_file: Path
    retrieval_port: int


def doc(filename: str, text: str, acl: list[str] | None = None) -> retrieval_pb2.SourceDocument:
    source = retrieval_pb2.SourceDocument(filename=filename, content=text.encode())
    if acl is not None:
        source.metadata.update({"acl": acl})
    return source


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def deployment(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Deployment]:
    home = tmp_path_factory.mktemp("keys")
    keys_file = home / "keys.json"
    write_keys(keys_file, [*(entry(k) for k in KEYS), quota_entry()])
    async with running_service(
        home / "kb.db", auth_keys_file=str(keys_file), auth_token=LEGACY
    ) as kb:
        admin = auth(LEGACY)
        for kb_id in ("team-a", "team-b"):
            await kb.stub.CreateKnowledgeBase(
                retrieval_pb2.CreateKnowledgeBaseRequest(knowledge_base_id=kb_id), metadata=admin
            )
        await kb.stub.IngestDocuments(
            retrieval_pb2.IngestDocumentsRequest(
                knowledge_base="team-a",
                documents=[
                    doc("handbook.md", HANDBOOK),
                    doc("plan-a.md", FALCON, ["a"]),
                    doc("plan-b.md", OBSIDIAN, ["b"]),
                ],
            ),
            metadata=admin,
        )
        async with local_orchestrator(kb.port, auth_keys_file=str(keys_file)) as orchestrator:
            yield Deployment(kb.stub, orchestrator, keys_file, kb.port)


async def code_of(call: Awaitable[Any]) -> grpc.StatusCode:
    try:
        await call
    except grpc.aio.AioRpcError as error:
        return error.code()
    return grpc.StatusCode.OK


async def stream_code(stream: Any) -> grpc.StatusCode:
    try:
        async for _ in stream:
            pass
    except grpc.aio.AioRpcError as error:
        return error.code()
    return grpc.StatusCode.OK


OK, DENIED, UNAUTH = (
    grpc.StatusCode.OK,
    grpc.StatusCode.PERMISSION_DENIED,
    grpc.StatusCode.UNAUTHENTICATED,
)

Call = Callable[[Deployment, str, tuple[tuple[str, str], ...]], Awaitable[grpc.StatusCode]]


def retrieve(d: Deployment, kb: str, md: Any) -> Awaitable[grpc.StatusCode]:
    request = retrieval_pb2.RetrieveRequest(query="cafeteria", knowledge_bases=[kb])
    return code_of(d.retrieval.Retrieve(request, metadata=md))


def list_documents(d: Deployment, kb: str, md: Any) -> Awaitable[grpc.StatusCode]:
    request = retrieval_pb2.ListDocumentsRequest(knowledge_base=kb)
    return code_of(d.retrieval.ListDocuments(request, metadata=md))


def get_kb(d: Deployment, kb: str, md: Any) -> Awaitable[grpc.StatusCode]:
    request = retrieval_pb2.GetKnowledgeBaseRequest(name=f"knowledge_bases/{kb}")
    return code_of(d.retrieval.GetKnowledgeBase(request, metadata=md))


def list_kbs(d: Deployment, kb: str, md: Any) -> Awaitable[grpc.StatusCode]:
    return code_of(
        d.retrieval.ListKnowledgeBases(retrieval_pb2.ListKnowledgeBasesRequest(), metadata=md)
    )


def ingest(d: Deployment, kb: str, md: Any) -> Awaitable[grpc.StatusCode]:
    request = retrieval_pb2.IngestDocumentsRequest(
        knowledge_base=kb, documents=[doc("probe.md", "A probe document about parking.")]
    )
    return code_of(d.retrieval.IngestDocuments(request, metadata=md))


def stream_ingest(d: Deployment, kb: str, md: Any) -> Awaitable[grpc.StatusCode]:
    request = retrieval_pb2.IngestDocumentsRequest(
        knowledge_base=kb, documents=[doc("probe.md", "A probe document about parking.")]
    )
    return stream_code(d.retrieval.StreamIngestDocuments(request, metadata=md))


def delete(d: Deployment, kb: str, md: Any) -> Awaitable[grpc.StatusCode]:
    request = retrieval_pb2.DeleteDocumentsRequest(knowledge_base=kb, filenames=["absent.md"])
    return code_of(d.retrieval.DeleteDocuments(request, metadata=md))


def update_kb(d: Deployment, kb: str, md: Any) -> Awaitable[grpc.StatusCode]:
    request = retrieval_pb2.UpdateKnowledgeBaseRequest(
        knowledge_base=retrieval_pb2.KnowledgeBase(name=f"knowledge_bases/{kb}", description="d"),
        update_mask=field_mask_pb2.FieldMask(paths=["description"]),
    )
    return code_of(d.retrieval.UpdateKnowledgeBase(request, metadata=md))


async def create_and_delete_kb(d: Deployment, kb: str, md: Any) -> grpc.StatusCode:
    """Create then delete `kb`-probe… as the key; the code of the first refused step, or OK."""
    kb_id = {"team-a": "team-c", "team-b": "team-d"}[kb]  # team-c is the admin's, team-d no one's
    create = retrieval_pb2.CreateKnowledgeBaseRequest(knowledge_base_id=kb_id)
    code = await code_of(d.retrieval.CreateKnowledgeBase(create, metadata=md))
    if code != OK:
        return code
    remove = retrieval_pb2.DeleteKnowledgeBaseRequest(name=f"knowledge_bases/{kb_id}")
    return await code_of(d.retrieval.DeleteKnowledgeBase(remove, metadata=md))


def run(d: Deployment, kb: str, md: Any) -> Awaitable[grpc.StatusCode]:
    request = orchestrator_pb2.RunRequest(
        question="When does the cafeteria open?", knowledge_bases=[kb]
    )
    return code_of(d.orchestrator.Run(request, metadata=md))


def stream_run(d: Deployment, kb: str, md: Any) -> Awaitable[grpc.StatusCode]:
    request = orchestrator_pb2.RunRequest(
        question="When does the cafeteria open?", knowledge_bases=[kb]
    )
    return stream_code(d.orchestrator.StreamRun(request, metadata=md))


READ: dict[tuple[str, str], grpc.StatusCode] = {
    ("reader-a", "team-a"): OK,
    ("reader-a", "team-b"): DENIED,
    ("writer", "team-a"): OK,
    ("writer", "team-b"): DENIED,
    ("admin", "team-a"): OK,
    ("admin", "team-b"): OK,
}
WRITE = READ | {("reader-a", "team-a"): DENIED}
MANAGE = WRITE | {("writer", "team-a"): DENIED}
CREATE = MANAGE | {("admin", "team-b"): DENIED}  # team-d, which the admin's key does not list
EVERYONE = dict.fromkeys(READ, OK)  # ListKnowledgeBases: each key sees its own

MATRIX: list[tuple[str, Call, dict[tuple[str, str], grpc.StatusCode]]] = [
    ("Retrieve", retrieve, READ),
    ("ListDocuments", list_documents, READ),
    ("GetKnowledgeBase", get_kb, READ),
    ("ListKnowledgeBases", list_kbs, EVERYONE),
    ("IngestDocuments", ingest, WRITE),
    ("StreamIngestDocuments", stream_ingest, WRITE),
    ("DeleteDocuments", delete, WRITE),
    ("UpdateKnowledgeBase", update_kb, MANAGE),
    ("Create+DeleteKnowledgeBase", create_and_delete_kb, CREATE),
    ("Run", run, READ),
    ("StreamRun", stream_run, READ),
]


@pytest.mark.parametrize(("rpc", "call", "expected"), MATRIX, ids=[m[0] for m in MATRIX])
async def test_every_rpc_role_and_knowledge_base_gives_its_code(
    deployment: Deployment, rpc: str, call: Call, expected: dict[tuple[str, str], grpc.StatusCode]
) -> None:
    got = {}
    for key_id, kb in expected:
        got[(key_id, kb)] = await call(deployment, kb, auth(KEYS[key_id][0]))
    got[("none", "team-a")] = await call(deployment, "team-a", ())
    got[("unknown", "team-a")] = await call(deployment, "team-a", auth("not-a-key"))
    assert got == expected | {("none", "team-a"): UNAUTH, ("unknown", "team-a"): UNAUTH}


async def test_permission_denied_names_the_permission_and_knowledge_base_never_the_key(
    deployment: Deployment,
) -> None:
    request = retrieval_pb2.IngestDocumentsRequest(
        knowledge_base="team-b", documents=[doc("x.md", "x")]
    )
    with pytest.raises(grpc.aio.AioRpcError) as denied:
        await deployment.retrieval.IngestDocuments(request, metadata=auth("key-writer"))
    assert denied.value.details() == (
        'permission "write" on knowledge base "team-b" is not granted to this key'
    )
    with pytest.raises(grpc.aio.AioRpcError) as role:
        await deployment.retrieval.DeleteKnowledgeBase(
            retrieval_pb2.DeleteKnowledgeBaseRequest(name="knowledge_bases/team-a"),
            metadata=auth("key-reader-a"),
        )
    assert role.value.code() == DENIED
    assert role.value.details() == (
        'permission "manage" on knowledge base "team-a" is not granted to this key'
    )
    # Both carry the typed details of a PermissionDenied (docs/api.md#error-details).
    for refusal in (denied.value, role.value):
        assert read_details(refusal) == ErrorDetails("PERMISSION_DENIED")


async def test_health_and_reflection_stay_open(deployment: Deployment) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{deployment.retrieval_port}") as channel:
        health = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
        assert health.status == health_pb2.HealthCheckResponse.SERVING
        reflection = reflection_pb2_grpc.ServerReflectionStub(channel).ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(list_services="")])
        )
        async for reply in reflection:
            names = {s.name for s in reply.list_services_response.service}
            assert "supermew.v1.RetrievalService" in names


def hidden_free(message: Any, asked: str = "") -> None:
    """No word only the hidden document holds is in `message`, but those the caller asked."""
    text = json.dumps(json_format.MessageToDict(message), ensure_ascii=False)
    leaked = [word for word in HIDDEN_WORDS if word in text and word not in asked]
    assert not leaked, leaked


RETRIEVE_QUERIES = [
    "What does Project Obsidian acquire?",  # the hidden document is the only match
    "Kestrel robotics",  # the hidden document holds the best BM25 hit
    "What is the project budget?",  # visible and hidden documents both match
    "Who leads the project and from which office?",  # hidden siblings that auto-merge would pull
]


@pytest.mark.parametrize("query", RETRIEVE_QUERIES)
async def test_a_group_a_reader_gets_what_a_store_without_the_hidden_document_gives(
    deployment: Deployment, query: str
) -> None:
    mine = await deployment.retrieval.Retrieve(
        retrieval_pb2.RetrieveRequest(query=query, knowledge_bases=["team-a"], top_k=10),
        metadata=auth("key-reader-a"),
    )
    hidden_free(mine, query)
    # The same search by an unrestricted key with the hidden document filtered out: the same
    # chunks, merged parents and every count of the meta.
    without = await deployment.retrieval.Retrieve(
        retrieval_pb2.RetrieveRequest(
            query=query,
            knowledge_bases=["team-a"],
            top_k=10,
            filter='NOT document_id = "plan-b.md"',
        ),
        metadata=auth(LEGACY),
    )
    assert [c.chunk_id for c in mine.docs] == [c.chunk_id for c in without.docs]
    assert retrieval_meta_from_proto(mine.meta) == retrieval_meta_from_proto(without.meta)
    # …and the hidden document is there for its own group.
    theirs = await deployment.retrieval.Retrieve(
        retrieval_pb2.RetrieveRequest(query="Obsidian Kestrel", knowledge_bases=["team-a"]),
        metadata=auth("key-reader-b"),
    )
    assert "plan-b.md" in {c.document_id for c in theirs.docs}


async def test_listings_and_counts_leave_the_hidden_document_out(deployment: Deployment) -> None:
    listing = await deployment.retrieval.ListDocuments(
        retrieval_pb2.ListDocumentsRequest(knowledge_base="team-a"), metadata=auth("key-reader-a")
    )
    names = {d.filename for d in listing.documents}
    assert "plan-b.md" not in names and {"handbook.md", "plan-a.md"} <= names
    hidden_free(listing)
    mine = await deployment.retrieval.GetKnowledgeBase(
        retrieval_pb2.GetKnowledgeBaseRequest(name="knowledge_bases/team-a"),
        metadata=auth("key-reader-a"),
    )
    everyone = await deployment.retrieval.GetKnowledgeBase(
        retrieval_pb2.GetKnowledgeBaseRequest(name="knowledge_bases/team-a"), metadata=auth(LEGACY)
    )
    assert mine.document_count == everyone.document_count - 1
    assert mine.chunk_count < everyone.chunk_count
    listed = await deployment.retrieval.ListKnowledgeBases(
        retrieval_pb2.ListKnowledgeBasesRequest(), metadata=auth("key-reader-a")
    )
    assert [kb.name for kb in listed.knowledge_bases] == ["knowledge_bases/team-a"]
    assert listed.knowledge_bases[0].document_count == mine.document_count


async def test_a_writer_can_neither_replace_nor_delete_a_document_it_cannot_see(
    deployment: Deployment,
) -> None:
    replace = retrieval_pb2.IngestDocumentsRequest(
        knowledge_base="team-a", documents=[doc("plan-b.md", "Overwritten.")]
    )
    with pytest.raises(grpc.aio.AioRpcError) as denied:
        await deployment.retrieval.IngestDocuments(replace, metadata=auth("key-writer"))
    assert denied.value.code() == DENIED
    assert denied.value.details().startswith("documents[0]: ")
    deleted = await deployment.retrieval.DeleteDocuments(
        retrieval_pb2.DeleteDocumentsRequest(knowledge_base="team-a", filenames=["plan-b.md"]),
        metadata=auth("key-writer"),
    )
    assert deleted.deleted_chunks == 0
    theirs = await deployment.retrieval.ListDocuments(
        retrieval_pb2.ListDocumentsRequest(knowledge_base="team-a"), metadata=auth("key-reader-b")
    )
    assert "plan-b.md" in {d.filename for d in theirs.documents}


RUN_QUESTIONS = [
    ("What does Project Obsidian acquire?", "no_knowledge"),  # the only match is hidden
    ("Who leads Project Obsidian?", "no_knowledge"),
    ("What is the project budget?", None),
    ("Who leads the project?", None),  # two projects for its group-b peer: one here
]


@pytest.mark.parametrize(("question", "route"), RUN_QUESTIONS)
async def test_a_group_a_reader_never_sees_a_group_b_document_through_a_run(
    deployment: Deployment, question: str, route: str | None
) -> None:
    request = orchestrator_pb2.RunRequest(
        question=question, knowledge_bases=["team-a"], generate_answer=True
    )
    result = await deployment.orchestrator.Run(request, metadata=auth("key-reader-a"))
    hidden_free(result, question)  # docs, answer, quotes, citations, options, trace
    if route is not None:
        assert result.route == route
    events = deployment.orchestrator.StreamRun(request, metadata=auth("key-reader-a"))
    async for event in events:
        hidden_free(event, question)


async def test_the_run_sees_what_the_callers_key_sees(deployment: Deployment) -> None:
    request = orchestrator_pb2.RunRequest(
        question="What does Project Obsidian acquire?", knowledge_bases=["team-a"]
    )
    theirs = await deployment.orchestrator.Run(request, metadata=auth("key-reader-b"))
    assert any(d.document_id == "plan-b.md" for d in theirs.docs)


async def test_a_key_added_works_within_5_s_and_a_removed_one_stops(deployment: Deployment) -> None:
    newcomer = {
        "id": "newcomer",
        "sha256": sha("key-new"),
        "role": "reader",
        "knowledge_bases": ["team-a"],
    }
    everyone = [*(entry(k) for k in KEYS), quota_entry()]

    async def settles(key: str, wanted: grpc.StatusCode) -> float:
        start = time.monotonic()
        while time.monotonic() - start < 5.0:
            if await list_documents(deployment, "team-a", auth(key)) == wanted:
                return time.monotonic() - start
            await asyncio.sleep(0.1)
        raise AssertionError(f"{key} did not become {wanted.name} within 5 s")

    try:
        write_keys(deployment.keys_file, [*everyone, newcomer])
        await settles("key-new", OK)
        write_keys(deployment.keys_file, everyone)
        await settles("key-new", UNAUTH)
        # A broken file keeps the last good keys.
        deployment.keys_file.write_text("keys: [")
        await asyncio.sleep(1.2)
        assert await list_documents(deployment, "team-a", auth("key-reader-a")) == OK
    finally:
        write_keys(deployment.keys_file, everyone)


async def test_burst_plus_one_calls_give_one_resource_exhausted_with_retry_info(
    deployment: Deployment,
) -> None:
    codes, errors = [], []
    for _ in range(4):  # burst 3, then a refill of 0.01 a second
        try:
            await deployment.retrieval.ListKnowledgeBases(
                retrieval_pb2.ListKnowledgeBasesRequest(),
                metadata=(*auth(QUOTA_KEY), ("x-request-id", "quota-4")),
            )
            codes.append(OK)
        except grpc.aio.AioRpcError as error:
            codes.append(error.code())
            errors.append(error)
    assert codes == [OK, OK, OK, grpc.StatusCode.RESOURCE_EXHAUSTED]
    trailers = dict(errors[0].trailing_metadata() or ())
    status = status_pb2.Status.FromString(trailers["grpc-status-details-bin"])
    assert status.code == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
    info_detail, retry_detail = status.details
    info = error_details_pb2.ErrorInfo()
    assert info_detail.Unpack(info)
    assert (info.reason, info.domain) == ("QUOTA_SPENT", "supermew.v1")
    retry = error_details_pb2.RetryInfo()
    assert retry_detail.Unpack(retry)
    assert 90 <= retry.retry_delay.seconds <= 100  # one token at 0.01 a second
    assert read_details(errors[0]) == ErrorDetails("QUOTA_SPENT")
    assert trailers["x-request-id"] == "quota-4"  # the details trailer does not replace it
    refused = registry_for(SERVICE_NAME).get_sample_value(
        "supermew_rate_limited_total", {"key_id": "quota"}
    )
    assert refused == 1.0
