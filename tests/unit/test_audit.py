"""The audit log's lines (docs/api.md#audit-log), built from real request and response messages
and each service's own policy table: the fields each RPC's row reads, the default knowledge
base, ids each once, `deleted` only on success, the question only when asked for, and the sink
(a file that cannot be opened fails naming AUDIT_LOG)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from supermew.v1 import orchestrator_pb2, retrieval_pb2, trace_pb2

from orchestrator_service.policy import ORCHESTRATOR_POLICIES
from retrieval_service.policy import RETRIEVAL_POLICIES
from shared.audit import AuditLog, CallAudit, audit_line, rfc3339
from shared.errors import ConfigurationError

RETRIEVAL = "/supermew.v1.RetrievalService/"
ORCHESTRATOR = "/supermew.v1.OrchestratorService/"
FIELDS = [
    "time",
    "request_id",
    "key_id",
    "peer",
    "rpc",
    "knowledge_bases",
    "filter",
    "code",
    "written",
    "deleted",
    "returned",
]
ENDED = 1_796_437_343.25  # 2026-12-05T02:22:23.250Z
POLICIES = {**RETRIEVAL_POLICIES, **ORCHESTRATOR_POLICIES}


def audit_of(method: str, request: object, peer: str = "") -> CallAudit:
    """The audit of a call to `method`, with its row in its service's table (if any)."""
    return CallAudit(method, request, peer, POLICIES.get(method))


def entry(audit: CallAudit, code: str = "OK", **kw: object) -> dict[str, object]:
    return audit.entry(code=code, key_id="team-a-reader", request_id="r1", ended=ENDED, **kw)


def chunks(*document_ids: str) -> list[trace_pb2.Chunk]:
    return [trace_pb2.Chunk(document_id=d, chunk_id=f"{d}::p1::l3::0") for d in document_ids]


def test_retrieve_line_has_every_field_and_no_query_text() -> None:
    request = retrieval_pb2.RetrieveRequest(
        query="what is the secret plan",
        knowledge_bases=["knowledge_bases/team-a", "team-b", "team-a"],
        filter='metadata.year >= 2023 AND file_type = "pdf"',
    )
    audit = audit_of(RETRIEVAL + "Retrieve", request, "ipv4:127.0.0.1:5555")
    audit.add(retrieval_pb2.RetrieveResponse(docs=chunks("a.pdf", "b.pdf", "a.pdf")))
    got = entry(audit)
    assert got == {
        "time": "2026-12-05T02:22:23.250Z",
        "request_id": "r1",
        "key_id": "team-a-reader",
        "peer": "ipv4:127.0.0.1:5555",
        "rpc": RETRIEVAL + "Retrieve",
        "knowledge_bases": ["team-a", "team-b"],
        "filter": 'metadata.year >= 2023 AND file_type = "pdf"',
        "code": "OK",
        "written": [],
        "deleted": [],
        "returned": ["a.pdf", "b.pdf"],
    }
    assert list(got) == FIELDS
    assert "secret plan" not in audit_line(got)


def test_question_only_when_asked_for() -> None:
    run = orchestrator_pb2.RunRequest(question="who signed the lease?")
    audit = audit_of(ORCHESTRATOR + "Run", run, "")
    assert "question" not in entry(audit)
    assert entry(audit, with_question=True)["question"] == "who signed the lease?"
    resume = orchestrator_pb2.ResumeRequest(user_answer="the 2024 one")
    assert (
        entry(audit_of(ORCHESTRATOR + "Resume", resume, ""), with_question=True)["question"]
        == "the 2024 one"
    )
    query = retrieval_pb2.RetrieveRequest(query="lease terms")
    got = entry(audit_of(RETRIEVAL + "Retrieve", query, ""), with_question=True)
    assert got["question"] == "lease terms"
    listing = audit_of(RETRIEVAL + "ListDocuments", retrieval_pb2.ListDocumentsRequest(), "")
    assert "question" not in entry(listing, with_question=True)


def test_a_request_naming_no_knowledge_base_means_the_default_one() -> None:
    for method, request in [
        ("Retrieve", retrieval_pb2.RetrieveRequest(query="q")),
        ("ListDocuments", retrieval_pb2.ListDocumentsRequest()),
        ("IngestDocuments", retrieval_pb2.IngestDocumentsRequest()),
    ]:
        assert entry(audit_of(RETRIEVAL + method, request, ""))["knowledge_bases"] == ["default"]
    kb_list = audit_of(
        RETRIEVAL + "ListKnowledgeBases", retrieval_pb2.ListKnowledgeBasesRequest(), ""
    )
    assert entry(kb_list)["knowledge_bases"] == []


def test_knowledge_base_rpcs_name_the_one_they_touch() -> None:
    update = retrieval_pb2.UpdateKnowledgeBaseRequest(
        knowledge_base=retrieval_pb2.KnowledgeBase(name="knowledge_bases/team-c")
    )
    cases = [
        ("CreateKnowledgeBase", retrieval_pb2.CreateKnowledgeBaseRequest(knowledge_base_id="x")),
        ("GetKnowledgeBase", retrieval_pb2.GetKnowledgeBaseRequest(name="knowledge_bases/y")),
        ("DeleteKnowledgeBase", retrieval_pb2.DeleteKnowledgeBaseRequest(name="z")),
        ("UpdateKnowledgeBase", update),
    ]
    got = [entry(audit_of(RETRIEVAL + m, r, ""))["knowledge_bases"] for m, r in cases]
    assert got == [["x"], ["y"], ["z"], ["team-c"]]


def test_ingest_lists_the_documents_written_unary_and_streamed() -> None:
    request = retrieval_pb2.IngestDocumentsRequest(knowledge_base="team-a")
    result = retrieval_pb2.IngestDocumentsResponse(
        documents=[
            retrieval_pb2.IngestedDocument(filename="a.txt", document_id="docs/a"),
            retrieval_pb2.IngestedDocument(filename="b.txt", document_id="docs/b"),
        ]
    )
    unary = audit_of(RETRIEVAL + "IngestDocuments", request, "")
    unary.add(result)
    stream = audit_of(RETRIEVAL + "StreamIngestDocuments", request, "")
    progress = retrieval_pb2.IngestProgress(filename="a.txt", document_id="docs/a")
    stream.add(retrieval_pb2.IngestEvent(progress=progress))
    stream.add(retrieval_pb2.IngestEvent(result=result))
    for audit in (unary, stream):
        got = entry(audit)
        assert got["written"] == ["docs/a", "docs/b"]
        assert got["knowledge_bases"] == ["team-a"]
        assert got["returned"] == got["deleted"] == []


def test_delete_lists_what_the_request_named_only_when_it_succeeded() -> None:
    request = retrieval_pb2.DeleteDocumentsRequest(
        knowledge_base="team-a", document_ids=["docs/a", "x.pdf"], filenames=["x.pdf", "y.txt"]
    )
    audit = audit_of(RETRIEVAL + "DeleteDocuments", request, "")
    audit.add(retrieval_pb2.DeleteDocumentsResponse(deleted_chunks=12))
    assert entry(audit)["deleted"] == ["docs/a", "x.pdf", "y.txt"]
    assert entry(audit, code="PERMISSION_DENIED")["deleted"] == []


def test_runs_and_listings_list_the_documents_returned() -> None:
    result = orchestrator_pb2.RunResult(docs=chunks("a.pdf", "b.pdf"))
    run = audit_of(ORCHESTRATOR + "Run", orchestrator_pb2.RunRequest(question="q"), "")
    run.add(result)
    stream = audit_of(ORCHESTRATOR + "StreamRun", orchestrator_pb2.RunRequest(question="q"), "")
    stream.add(orchestrator_pb2.RunEvent(step=trace_pb2.RagStep()))
    stream.add(orchestrator_pb2.RunEvent(result=result))
    resume = audit_of(ORCHESTRATOR + "StreamResume", orchestrator_pb2.ResumeRequest(), "")
    resume.add(orchestrator_pb2.RunEvent(result=result))
    for audit in (run, stream, resume):
        assert entry(audit)["returned"] == ["a.pdf", "b.pdf"]
    listing = audit_of(RETRIEVAL + "ListDocuments", retrieval_pb2.ListDocumentsRequest(), "")
    listing.add(
        retrieval_pb2.ListDocumentsResponse(
            documents=[retrieval_pb2.DocumentInfo(document_id=d) for d in ("m", "n")]
        )
    )
    assert entry(listing)["returned"] == ["m", "n"]


def test_an_rpc_without_a_row_keeps_the_common_fields() -> None:
    audit = CallAudit(RETRIEVAL + "Future", retrieval_pb2.RetrieveRequest(), "p", None)
    got = entry(audit, code="UNIMPLEMENTED")
    assert list(got) == FIELDS
    assert got["knowledge_bases"] == [] and got["code"] == "UNIMPLEMENTED"


def test_a_line_is_one_json_object_ending_in_a_newline() -> None:
    request = retrieval_pb2.RetrieveRequest(query="q", filter='title = "a\nb" AND x = "é"')
    line = audit_line(entry(audit_of(RETRIEVAL + "Retrieve", request, "")))
    assert line.endswith("\n") and line.count("\n") == 1
    assert json.loads(line)["filter"] == 'title = "a\nb" AND x = "é"'


def test_time_is_rfc3339_utc_with_milliseconds() -> None:
    assert rfc3339(0) == "1970-01-01T00:00:00.000Z"
    assert rfc3339(ENDED) == "2026-12-05T02:22:23.250Z"


def test_a_file_sink_appends_lines(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    path.write_text('{"earlier":1}\n')
    sink = AuditLog(str(path))
    sink.write('{"a":1}\n')
    sink.write('{"b":2}\n')
    sink.close()
    assert path.read_text().splitlines() == ['{"earlier":1}', '{"a":1}', '{"b":2}']


def test_a_file_that_cannot_be_opened_fails_naming_the_setting(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="AUDIT_LOG"):
        AuditLog(str(tmp_path / "missing-dir" / "audit.jsonl"))
