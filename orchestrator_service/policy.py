"""What each RPC the orchestrator serves needs and records (docs/api.md#api-keys,
#audit-log): the permission a key's role needs, the request field naming its knowledge bases,
and what its audit line reads. Handed to its GrpcServer by the composition root (bootstrap.py).

Health and reflection are open and unaudited (shared.auth, shared.audit): they have no rows. A
new RPC gets its row here (tests/unit/test_rpc_policies.py holds every RPC of a served service
to exactly one row)."""

from __future__ import annotations

from typing import Final

from orchestrator_service.settings import EVALUATION_SERVICE, SERVICE_NAME
from shared.access import Permission
from shared.operation_policies import OPERATIONS_POLICIES
from shared.policy import AuditRow, RpcPolicies, RpcPolicy, service_policies

#: supermew.v1.OrchestratorService, by method name. A streamed call's documents are its
#: result event's.
_ORCHESTRATOR_SERVICE: Final = {
    "Run": RpcPolicy(
        Permission.READ,
        ("knowledge_bases", "index"),
        AuditRow(filter="filter", question="question", returned="docs.document_id"),
    ),
    "StreamRun": RpcPolicy(
        Permission.READ,
        ("knowledge_bases", "index"),
        AuditRow(filter="filter", question="question", returned="result.docs.document_id"),
    ),
    "Resume": RpcPolicy(
        Permission.READ,
        "knowledge_bases",
        AuditRow(filter="filter", question="user_answer", returned="docs.document_id"),
    ),
    "StreamResume": RpcPolicy(
        Permission.READ,
        "knowledge_bases",
        AuditRow(filter="filter", question="user_answer", returned="result.docs.document_id"),
    ),
    # Reads no knowledge base: the caller sends the facts.
    "CheckGrounding": RpcPolicy(Permission.READ),
}

#: supermew.v1.EvaluationService: the key's role needs the permission; the core then checks
#: it on every knowledge base of the set (a set names them, a request does not).
_EVALUATION_SERVICE: Final = {
    "CreateEvaluationSet": RpcPolicy(Permission.WRITE, "evaluation_set.knowledge_bases"),
    "GetEvaluationSet": RpcPolicy(Permission.READ),
    "ListEvaluationSets": RpcPolicy(Permission.READ),
    "UpdateEvaluationSet": RpcPolicy(Permission.WRITE),
    "DeleteEvaluationSet": RpcPolicy(Permission.WRITE),
    "CreateEvaluationItem": RpcPolicy(Permission.WRITE),
    "BatchCreateEvaluationItems": RpcPolicy(Permission.WRITE),
    "GetEvaluationItem": RpcPolicy(Permission.READ),
    "ListEvaluationItems": RpcPolicy(Permission.READ),
    "DeleteEvaluationItem": RpcPolicy(Permission.WRITE),
    "ImportEvaluationItems": RpcPolicy(Permission.WRITE),
    "RunEvaluation": RpcPolicy(Permission.WRITE),
    "GetEvaluationRun": RpcPolicy(Permission.READ),
    "ListEvaluationRuns": RpcPolicy(Permission.READ),
    "ListEvaluationResults": RpcPolicy(Permission.READ),
    "CompareEvaluationRuns": RpcPolicy(Permission.READ),
    # Run history: the core shows a key only the runs on its knowledge bases.
    "GetRun": RpcPolicy(Permission.READ),
    "ListRuns": RpcPolicy(Permission.READ),
    "CreateFeedback": RpcPolicy(Permission.READ),
    "ListFeedback": RpcPolicy(Permission.READ),
    "AddFeedbackToEvaluationSet": RpcPolicy(Permission.WRITE),
}

#: Every RPC of the orchestrator server, by full method name.
ORCHESTRATOR_POLICIES: Final[RpcPolicies] = {
    **service_policies(SERVICE_NAME, _ORCHESTRATOR_SERVICE),
    **service_policies(EVALUATION_SERVICE, _EVALUATION_SERVICE),
    **OPERATIONS_POLICIES,
}
