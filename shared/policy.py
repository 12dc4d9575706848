"""The shape of an RPC's policy (docs/api.md#api-keys, #audit-log): the permission a key's role
needs to call it, where its request names its knowledge bases, and what its audit line reads.
Pure. Each service declares the rows of the RPCs it serves next to its servicer
(retrieval_service/policy.py, orchestrator_service/policy.py) and hands the table to its
GrpcServer; the auth interceptor (shared.auth) and the audit log (shared.audit) read only the
table they are given, so shared/ names no service's RPCs.

An RPC missing from a server's table is refused to every key (auth on) and audited with its
key, peer, RPC and code only: a new RPC is closed until it is given a row."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias

from shared.access import DEFAULT_KB_ID, Permission, Principal, kb_id_named


@dataclass(frozen=True, slots=True)
class AuditRow:
    """Where one RPC's audited fields are, as dotted paths into its request (`filter`,
    `question`, `deleted`) or into each message it answers (`written`, `returned`); its
    knowledge bases are where its RpcPolicy's `knowledge_base_field` says.
    A path step over a repeated field reads every element. None: the RPC has no such field."""

    filter: str | None = None
    question: str | None = None
    deleted: tuple[str, ...] = ()
    written: str | None = None
    returned: str | None = None


@dataclass(frozen=True, slots=True)
class RpcPolicy:
    """One RPC's row. `knowledge_base_field` is the dotted path of the request field naming
    its knowledge bases (one name or a repeated field; a name inside one, such as an index's
    `knowledge_bases/{kb}/indexes/{id}`, names its knowledge base), or several such paths;
    None for an RPC about no one knowledge base (ListKnowledgeBases). `audit` says what its
    audit line reads beyond the common fields."""

    permission: Permission
    knowledge_base_field: str | tuple[str, ...] | None = None
    audit: AuditRow = AuditRow()


#: A server's policies by full gRPC method name (`/supermew.v1.RetrievalService/Retrieve`).
RpcPolicies: TypeAlias = Mapping[str, RpcPolicy]


def service_policies(service: str, rows: Mapping[str, RpcPolicy]) -> dict[str, RpcPolicy]:
    """The rows of `service` (`supermew.v1.RetrievalService`), given by method name, keyed by
    full method name; a server serving several services merges the results."""
    return {f"/{service}/{name}": policy for name, policy in rows.items()}


def knowledge_bases_named(policy: RpcPolicy | None, request: Any) -> list[str]:
    """The ids of the knowledge bases `request` names where `policy` says (the default when it
    names none); [] for an RPC about no one knowledge base or without a row."""
    field = policy.knowledge_base_field if policy is not None else None
    if field is None:
        return []
    names: list[str] = []
    for path in (field,) if isinstance(field, str) else field:
        value = request
        for part in path.split("."):
            value = getattr(value, part, "")
        names += [value] if isinstance(value, str) else [str(v) for v in value]
    return list(dict.fromkeys(kb_id_named(n) for n in names if n)) or [DEFAULT_KB_ID]


def require_rpc(principal: Principal, policies: RpcPolicies, method: str, request: Any) -> None:
    """PERMISSION_DENIED unless `principal`'s role holds the permission `policies` gives RPC
    `method`, naming the permission and the knowledge bases `request` names; a method without
    a row is refused to every role."""
    policy = policies.get(method)
    permission = policy.permission if policy is not None else None
    principal.require_method(method, permission, knowledge_bases_named(policy, request))
