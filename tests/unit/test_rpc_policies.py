"""Each service's policy table (shared.policy; retrieval_service/policy.py,
orchestrator_service/policy.py) against the generated descriptors: every RPC of every service a
server serves has exactly one row and there is no row for an RPC it does not serve, so a new RPC
cannot ship without its permission, knowledge-base field and audit fields."""

from __future__ import annotations

import pytest
from google.protobuf import descriptor_pool
from google.protobuf.descriptor import Descriptor, MethodDescriptor
from google.protobuf.message_factory import GetMessageClass
from supermew.v1 import evaluation_pb2, orchestrator_pb2, retrieval_pb2

from orchestrator_service.policy import ORCHESTRATOR_POLICIES
from orchestrator_service.settings import SERVICE_NAME as ORCHESTRATOR
from retrieval_service.policy import RETRIEVAL_POLICIES
from retrieval_service.settings import SERVICE_NAME as RETRIEVAL
from shared.operation_policies import OPERATIONS_POLICIES, OPERATIONS_SERVICE_NAME
from shared.operations import OPERATIONS_SERVICE
from shared.policy import RpcPolicies, knowledge_bases_named

assert retrieval_pb2.DESCRIPTOR and orchestrator_pb2.DESCRIPTOR and evaluation_pb2.DESCRIPTOR

#: Each server's table and the service its composition root serves. A service the table names
#: (e.g. google.longrunning.Operations, once served) is checked the same way.
TABLES = [
    pytest.param(RETRIEVAL_POLICIES, RETRIEVAL, id="retrieval"),
    pytest.param(ORCHESTRATOR_POLICIES, ORCHESTRATOR, id="orchestrator"),
]


def _methods(service: str) -> list[str]:
    """The full method names of `service` as its generated descriptor declares them."""
    found = descriptor_pool.Default().FindServiceByName(service)
    return [f"/{service}/{method.name}" for method in found.methods]


@pytest.mark.parametrize(("table", "service"), TABLES)
def test_every_rpc_served_has_exactly_one_row_and_no_row_is_extra(
    table: RpcPolicies, service: str
) -> None:
    services = {service} | {method.split("/")[1] for method in table}
    declared = [m for s in sorted(services) for m in _methods(s)]
    assert sorted(table) == sorted(declared)


def test_each_service_holds_only_its_own_rows() -> None:
    # google.longrunning.Operations is served by both (imports; evaluation runs), same rows.
    shared = set(RETRIEVAL_POLICIES) & set(ORCHESTRATOR_POLICIES)
    assert shared == set(OPERATIONS_POLICIES)
    assert all(RETRIEVAL_POLICIES[m] == ORCHESTRATOR_POLICIES[m] for m in shared)


def _method(full_name: str) -> MethodDescriptor:
    service, name = full_name.strip("/").split("/")
    return descriptor_pool.Default().FindServiceByName(service).FindMethodByName(name)


def _has_path(message: Descriptor, path: str) -> bool:
    """Whether dotted `path` names a field of `message` (a step may cross a repeated field)."""
    current: Descriptor | None = message
    for step in path.split("."):
        if current is None or step not in current.fields_by_name:
            return False
        current = current.fields_by_name[step].message_type
    return True


@pytest.mark.parametrize(("table", "service"), TABLES)
def test_every_path_a_row_names_is_a_field_of_its_messages(
    table: RpcPolicies, service: str
) -> None:
    """A misspelt path would read as empty: the default knowledge base, no documents."""
    for full_name, policy in table.items():
        method = _method(full_name)
        request, response = method.input_type, method.output_type
        audit = policy.audit
        field = policy.knowledge_base_field
        fields = (field,) if isinstance(field, str) or field is None else field
        in_request = [*fields, audit.filter, audit.question, *audit.deleted]
        in_response = [audit.written, audit.returned]
        for path in filter(None, in_request):
            assert _has_path(request, path), (full_name, path)
        for path in filter(None, in_response):
            assert _has_path(response, path), (full_name, path)


@pytest.mark.parametrize(("table", "service"), TABLES)
def test_a_request_naming_no_knowledge_base_means_the_default_one(
    table: RpcPolicies, service: str
) -> None:
    for full_name, policy in table.items():
        empty = GetMessageClass(_method(full_name).input_type)()
        expected = [] if policy.knowledge_base_field is None else ["default"]
        assert knowledge_bases_named(policy, empty) == expected, full_name


def test_the_operations_rows_name_the_served_service() -> None:
    assert OPERATIONS_SERVICE_NAME == OPERATIONS_SERVICE
