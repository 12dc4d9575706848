"""What each RPC retrieval serves needs and records (docs/api.md#api-keys, #audit-log): the
permission a key's role needs, the request field naming its knowledge bases, and what its audit
line reads. Handed to its GrpcServer by the composition root (bootstrap.py).

Health and reflection are open and unaudited (shared.auth, shared.audit): they have no rows. A
new RPC, or a new service on this server, gets its rows here, merged into RETRIEVAL_POLICIES
(tests/unit/test_rpc_policies.py holds every RPC of a served service to exactly one row)."""

from __future__ import annotations

from typing import Final

from retrieval_service.settings import SERVICE_NAME
from shared.access import Permission
from shared.operation_policies import OPERATIONS_POLICIES
from shared.policy import AuditRow, RpcPolicies, RpcPolicy, service_policies

READ, WRITE, MANAGE = Permission.READ, Permission.WRITE, Permission.MANAGE

#: supermew.v1.RetrievalService, by method name.
_RETRIEVAL_SERVICE: Final = {
    "Retrieve": RpcPolicy(
        READ,
        ("knowledge_bases", "index"),
        AuditRow(filter="filter", question="query", returned="docs.document_id"),
    ),
    "ListDocuments": RpcPolicy(READ, "knowledge_base", AuditRow(returned="documents.document_id")),
    "GetKnowledgeBase": RpcPolicy(READ, "name"),
    # About no one knowledge base: it lists only the key's own.
    "ListKnowledgeBases": RpcPolicy(READ),
    "IngestDocuments": RpcPolicy(
        WRITE, "knowledge_base", AuditRow(written="documents.document_id")
    ),
    "StreamIngestDocuments": RpcPolicy(
        WRITE, "knowledge_base", AuditRow(written="result.documents.document_id")
    ),
    # The response counts chunks only: the ids are the ones the request named.
    "DeleteDocuments": RpcPolicy(
        WRITE, "knowledge_base", AuditRow(deleted=("document_ids", "filenames"))
    ),
    # The documents are read later, by the job: the call returns its operation's name.
    "ImportDocuments": RpcPolicy(WRITE, "knowledge_base"),
    "CreateKnowledgeBase": RpcPolicy(MANAGE, "knowledge_base_id"),
    "UpdateKnowledgeBase": RpcPolicy(MANAGE, "knowledge_base.name"),
    "DeleteKnowledgeBase": RpcPolicy(MANAGE, "name"),
    # Indexes (docs/api.md#indexes): building, switching and deleting one is managing its
    # knowledge base; the switch is UpdateKnowledgeBase's.
    "CreateIndex": RpcPolicy(MANAGE, "parent"),
    "GetIndex": RpcPolicy(READ, "name"),
    "ListIndexes": RpcPolicy(READ, "parent"),
    "DeleteIndex": RpcPolicy(MANAGE, "name"),
}

#: Every RPC of the retrieval server, by full method name.
RETRIEVAL_POLICIES: Final[RpcPolicies] = {
    **service_policies(SERVICE_NAME, _RETRIEVAL_SERVICE),
    **OPERATIONS_POLICIES,
}
