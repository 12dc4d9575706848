"""The policy rows of google.longrunning.Operations (docs/api.md#operations), the same in every
service that serves it (retrieval: imports; orchestrator: evaluation runs). Pure, so a
service's policy table imports no transport: an operation's knowledge bases are read from the
operation, so `shared.operations.Operations` checks them; the role is checked by these rows."""

from __future__ import annotations

from typing import Final

from shared.access import Permission
from shared.policy import RpcPolicy, service_policies

#: The service's full name (`shared.operations.OPERATIONS_SERVICE` reads the same from its
#: descriptor; a unit test holds them equal).
OPERATIONS_SERVICE_NAME: Final = "google.longrunning.Operations"

OPERATIONS_POLICIES: Final[dict[str, RpcPolicy]] = service_policies(
    OPERATIONS_SERVICE_NAME,
    {
        "GetOperation": RpcPolicy(Permission.READ),
        "ListOperations": RpcPolicy(Permission.READ),
        "WaitOperation": RpcPolicy(Permission.READ),
        "CancelOperation": RpcPolicy(Permission.WRITE),
        "DeleteOperation": RpcPolicy(Permission.WRITE),
    },
)
