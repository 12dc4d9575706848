"""Long-running operations (AIP-151, docs/api.md#operations): the record a job keeps in its
service's database, the store port, the `google.longrunning.Operations` servicer both services
serve, and the pieces of ListOperations (its filter and page tokens).

A job (an import, an evaluation run) writes its own metadata and response messages, packed as
`google.protobuf.Any`; this module never looks inside them. Who may see an operation is the
service's decision (`Access`): the servicer asks it with the operation's knowledge base."""

from __future__ import annotations

import asyncio
import base64
import re
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, Final, Protocol

import grpc
from google.longrunning import operations_pb2_grpc
from google.longrunning import operations_proto_pb2 as operations_pb2
from google.protobuf import any_pb2, empty_pb2
from google.rpc import status_pb2

from shared.access import (
    ANY_KNOWLEDGE_BASE,
    DEFAULT_KB_ID,
    KB_PREFIX,
    Permission,
    current_principal,
)
from shared.errors import FailedPrecondition, InvalidArgument, NotFound
from shared.paging import page_size_of

#: An operation's name is OPERATION_PREFIX + its id.
OPERATION_PREFIX: Final = "operations/"
_ID = re.compile(r"[0-9a-f]{20}")
DEFAULT_PAGE_SIZE: Final = 50
MAX_PAGE_SIZE: Final = 500
#: How often WaitOperation reads the record again: progress is written at least every 2 s.
WAIT_POLL_SECONDS: Final = 0.2


class OperationState(IntEnum):
    """An operation's lifecycle; the numbers are those of every job's `State` enum
    (ImportDocumentsMetadata.State), so a job's metadata and its record agree."""

    QUEUED = 1
    RUNNING = 2
    SUCCEEDED = 3
    FAILED = 4
    CANCELLED = 5

    @property
    def done(self) -> bool:
        return self >= OperationState.SUCCEEDED


def new_operation_id(now_ms: int | None = None) -> str:
    """20 hex digits: the creation millisecond then randomness, so ids sort by creation."""
    ms = int(time.time() * 1000) if now_ms is None else now_ms
    return f"{ms:012x}{secrets.token_hex(4)}"


def operation_id(name: str, field: str = "name") -> str:
    """The id of `operations/{id}`; INVALID_ARGUMENT naming `field` for any other text."""
    op_id = name.removeprefix(OPERATION_PREFIX)
    if not name.startswith(OPERATION_PREFIX) or not _ID.fullmatch(op_id):
        raise InvalidArgument(field, f"{name!r} is not an operation name (operations/{{id}})")
    return op_id


@dataclass(frozen=True, slots=True)
class OperationRecord:
    """One operation as stored. `metadata`, `response` and `error` are serialized messages
    (Any, Any and google.rpc.Status); `response`/`error` are set once it is done."""

    id: str
    kind: str
    knowledge_base: str
    state: OperationState
    metadata: bytes
    create_time_ms: int
    update_time_ms: int
    request_id: str = ""
    response: bytes = b""
    error: bytes = b""
    cancel_requested: bool = False

    @property
    def name(self) -> str:
        return OPERATION_PREFIX + self.id

    @property
    def done(self) -> bool:
        return self.state.done


@dataclass(frozen=True, slots=True)
class OperationFilter:
    """What ListOperations' `filter` selects: conjunctions of `done = true|false`,
    `state = QUEUED|RUNNING|SUCCEEDED|FAILED|CANCELLED` and `knowledge_base = "<name or id>"`
    (docs/api.md#operations)."""

    done: bool | None = None
    states: frozenset[OperationState] = frozenset()
    knowledge_base: str | None = None


_TERM = re.compile(r'\s*(\w+)\s*=\s*("[^"]*"|[A-Za-z_0-9/-]+)\s*')


def parse_filter(text: str) -> OperationFilter:
    """The AIP-160 subset above; INVALID_ARGUMENT naming `filter` for anything else."""
    if not text.strip():
        return OperationFilter()
    done: bool | None = None
    states: set[OperationState] = set()
    knowledge_base: str | None = None
    for i, term in enumerate(re.split(r"\s+AND\s+", text.strip())):
        match = _TERM.fullmatch(term)
        if match is None:
            raise InvalidArgument(
                "filter",
                f"term {i + 1} is not `field = value` (fields: done, state, knowledge_base; "
                "terms joined by AND)",
            )
        key, value = match.group(1), match.group(2).strip('"')
        if key == "done" and value in ("true", "false"):
            done = value == "true"
        elif key == "state" and value in OperationState.__members__:
            states.add(OperationState[value])
        elif key == "knowledge_base" and value:
            knowledge_base = value.removeprefix(KB_PREFIX) or DEFAULT_KB_ID
        else:
            allowed = {
                "done": "true or false",
                "state": ", ".join(OperationState.__members__),
                "knowledge_base": "a knowledge base name",
            }.get(key)
            raise InvalidArgument(
                "filter",
                f"{key} = {value!r} is not allowed"
                + (
                    f" ({key} takes {allowed})"
                    if allowed
                    else " (fields: done, state, knowledge_base)"
                ),
            )
    if len(states) > 1:
        raise InvalidArgument("filter", "names state twice")
    return OperationFilter(done=done, states=frozenset(states), knowledge_base=knowledge_base)


def operations_page_size(page_size: int) -> int:
    return page_size_of(page_size, default=DEFAULT_PAGE_SIZE, maximum=MAX_PAGE_SIZE)


def page_token(last_id: str) -> str:
    return base64.urlsafe_b64encode(f"op:{last_id}".encode()).decode()


def after_id(token: str) -> str | None:
    """The id a page token continues after; None for "" (the first page)."""
    if not token:
        return None
    try:
        text = base64.urlsafe_b64decode(token.encode()).decode()
    except (ValueError, UnicodeDecodeError):
        text = ""
    if not text.startswith("op:") or not _ID.fullmatch(text[3:]):
        raise InvalidArgument("page_token", "was not issued by this service")
    return text[3:]


@dataclass(frozen=True, slots=True)
class OperationPage:
    records: Sequence[OperationRecord]
    next_page_token: str = ""


class OperationStore(Protocol):
    """The operations of one service, in its database; every replica sees the same ones."""

    async def get(self, op_id: str) -> OperationRecord | None: ...

    async def page(
        self, where: OperationFilter, size: int, after: str | None, kb_ids: frozenset[str] | None
    ) -> OperationPage:
        """Newest first; `kb_ids` None: every knowledge base, else only those."""
        ...

    async def request_cancel(self, op_id: str, now_ms: int) -> OperationRecord | None:
        """Asks the job to stop (a queued one stops as soon as a runner claims it); None
        when unknown."""
        ...

    async def delete(self, op_id: str) -> bool:
        """Removes a done operation; False when there is none with this id."""
        ...


#: `check(permission, kb_id)`: PERMISSION_DENIED unless the caller may act on that knowledge
#: base (shared.access.Principal.require of the call's principal).
Access = Callable[[Permission, str], None]
#: The knowledge bases the caller may see, None for all (for ListOperations).
Visible = Callable[[], frozenset[str] | None]


def principal_access(permission: Permission, kb_id: str) -> None:
    """`Access` by the call's principal (shared.access)."""
    current_principal().require(permission, kb_id)


def principal_visible() -> frozenset[str] | None:
    """`Visible` by the call's principal: its knowledge bases, None for every one."""
    principal = current_principal()
    if ANY_KNOWLEDGE_BASE in principal.knowledge_bases:
        return None
    return principal.knowledge_bases


@dataclass
class Operations:
    """The operations API over one store: what the servicer calls."""

    store: OperationStore
    clock: Callable[[], float] = time.monotonic
    now_ms: Callable[[], int] = field(default=lambda: int(time.time() * 1000))

    async def get(self, name: str, access: Access, permission: Permission) -> OperationRecord:
        record = await self.store.get(operation_id(name))
        if record is None:
            raise NotFound("name", f"operation {name!r} does not exist")
        # An operation over several knowledge bases (an evaluation run) names them all,
        # comma-separated: the caller needs the permission on each.
        for kb_id in record.knowledge_base.split(","):
            access(permission, kb_id)
        return record

    async def page(
        self, where_text: str, page_size: int, token: str, kb_ids: frozenset[str] | None
    ) -> OperationPage:
        where = parse_filter(where_text)
        return await self.store.page(
            where, operations_page_size(page_size), after_id(token), kb_ids
        )

    async def cancel(self, name: str, access: Access) -> OperationRecord:
        record = await self.get(name, access, Permission.WRITE)
        if record.done:
            return record
        cancelled = await self.store.request_cancel(record.id, self.now_ms())
        if cancelled is None:
            raise NotFound("name", f"operation {name!r} does not exist")
        return cancelled

    async def delete(self, name: str, access: Access) -> None:
        record = await self.get(name, access, Permission.WRITE)
        if not record.done:
            raise FailedPrecondition(
                "name", f"operation {name!r} is still running; cancel it first"
            )
        if not await self.store.delete(record.id):
            raise NotFound("name", f"operation {name!r} does not exist")

    async def wait(
        self, name: str, access: Access, timeout: float | None, deadline: float | None
    ) -> OperationRecord:
        """The operation once done, or as it is when `timeout` seconds (None: no limit of its
        own) or the call's `deadline` (a monotonic instant) come first."""
        record = await self.get(name, access, Permission.READ)
        limits = [t for t in (deadline, None if timeout is None else self.clock() + timeout) if t]
        end = min(limits) if limits else None
        while not record.done:
            left = None if end is None else end - self.clock()
            if left is not None and left <= 0:
                break
            await asyncio.sleep(WAIT_POLL_SECONDS if left is None else min(WAIT_POLL_SECONDS, left))
            record = await self.get(name, access, Permission.READ)
        return record


def operation_to_proto(record: OperationRecord) -> operations_pb2.Operation:
    op = operations_pb2.Operation(name=record.name, done=record.done)
    if record.metadata:
        op.metadata.ParseFromString(record.metadata)
    if record.done and record.error:
        op.error.ParseFromString(record.error)
    elif record.done:
        op.response.ParseFromString(record.response or any_pb2.Any().SerializeToString())
    return op


def packed(message: Any) -> bytes:
    """`message` in a google.protobuf.Any, serialized: an operation's metadata or response."""
    wrapper = any_pb2.Any()
    wrapper.Pack(message)
    return wrapper.SerializeToString()


def error_status_bytes(code: grpc.StatusCode, message: str) -> bytes:
    """A google.rpc.Status for an operation's `error`, serialized."""
    return status_pb2.Status(code=code.value[0], message=message).SerializeToString()


def _duration_seconds(request: operations_pb2.WaitOperationRequest) -> float | None:
    if not request.HasField("timeout"):
        return None
    return max(0.0, request.timeout.ToTimedelta().total_seconds())


class OperationsServicer(operations_pb2_grpc.OperationsServicer):
    """`google.longrunning.Operations` as an adapter: proto in → `Operations` → proto out.
    `access` and `visible` come from the service (its principal of the call)."""

    def __init__(
        self,
        operations: Operations,
        access: Access = principal_access,
        visible: Visible = principal_visible,
    ) -> None:
        self._operations = operations
        self._access = access
        self._visible = visible

    async def GetOperation(
        self, request: operations_pb2.GetOperationRequest, context: grpc.aio.ServicerContext
    ) -> operations_pb2.Operation:
        record = await self._operations.get(request.name, self._access, Permission.READ)
        return operation_to_proto(record)

    async def ListOperations(
        self, request: operations_pb2.ListOperationsRequest, context: grpc.aio.ServicerContext
    ) -> operations_pb2.ListOperationsResponse:
        if request.name not in ("", "operations"):
            raise InvalidArgument("name", 'must be "operations" or empty')
        page = await self._operations.page(
            request.filter, request.page_size, request.page_token, self._visible()
        )
        return operations_pb2.ListOperationsResponse(
            operations=[operation_to_proto(r) for r in page.records],
            next_page_token=page.next_page_token,
        )

    async def CancelOperation(
        self, request: operations_pb2.CancelOperationRequest, context: grpc.aio.ServicerContext
    ) -> empty_pb2.Empty:
        await self._operations.cancel(request.name, self._access)
        return empty_pb2.Empty()

    async def DeleteOperation(
        self, request: operations_pb2.DeleteOperationRequest, context: grpc.aio.ServicerContext
    ) -> empty_pb2.Empty:
        await self._operations.delete(request.name, self._access)
        return empty_pb2.Empty()

    async def WaitOperation(
        self, request: operations_pb2.WaitOperationRequest, context: grpc.aio.ServicerContext
    ) -> operations_pb2.Operation:
        remaining = context.time_remaining()
        deadline = None if remaining is None else self._operations.clock() + remaining - 0.05
        record = await self._operations.wait(
            request.name, self._access, _duration_seconds(request), deadline
        )
        return operation_to_proto(record)


#: The full name of the service, for reflection.
OPERATIONS_SERVICE: Final = operations_pb2.DESCRIPTOR.services_by_name["Operations"].full_name
