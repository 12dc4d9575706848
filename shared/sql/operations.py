"""Long-running operations in a service's database (docs/api.md#operations): the `operations`
table, the `OperationStore` port of the Operations API, and what a job runner needs besides —
an idempotent create (request_id unique), a claim by compare-and-set of the lease (one replica
runs a job; another takes it over only once that lease expired), progress saved under the
lease. Each service declares the table in its own schema (`operations_table`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    LargeBinary,
    MetaData,
    SmallInteger,
    String,
    Table,
    and_,
    delete,
    func,
    or_,
    select,
    update,
)

from shared.errors import AlreadyExists
from shared.operations import (
    OperationFilter,
    OperationPage,
    OperationRecord,
    OperationState,
    page_token,
)
from shared.sql.columns import json_type, key_type
from shared.sql.database import Database, dialect_insert


def operations_table(metadata: MetaData) -> Table:
    """The `operations` table in a service's schema: one row per long-running operation, its
    progress, outcome and the lease of the replica running it; `request_id` unique
    (AIP-155). `knowledge_base` is the resource whose permissions guard the operation."""
    return Table(
        "operations",
        metadata,
        Column("id", String(32), primary_key=True),
        Column("kind", String(64), nullable=False),
        Column("knowledge_base", key_type(255), nullable=False),
        Column("request_id", String(128), nullable=True, unique=True),
        Column("request_sha256", String(64), nullable=False),
        Column("request", LargeBinary, nullable=False),
        Column("state", SmallInteger, nullable=False),
        Column("cancel_requested", Boolean, nullable=False, default=False),
        Column("metadata", LargeBinary, nullable=False),
        Column("response", LargeBinary, nullable=False, default=b""),
        Column("error", LargeBinary, nullable=False, default=b""),
        # The job's own resume state (an import: its cursor, counts and failures so far).
        Column("checkpoint", json_type(), nullable=False),
        Column("owner", String(64), nullable=False, default=""),
        Column("lease_expires_ms", BigInteger, nullable=False, default=0),
        Column("create_time", BigInteger, nullable=False),
        Column("update_time", BigInteger, nullable=False),
    )


#: Columns of a record (the request and checkpoint are read only by the runner).
_RECORD_COLUMNS = (
    "id",
    "kind",
    "knowledge_base",
    "state",
    "metadata",
    "create_time",
    "update_time",
    "request_id",
    "response",
    "error",
    "cancel_requested",
)


def _record(row: Any) -> OperationRecord:
    return OperationRecord(
        id=row.id,
        kind=row.kind,
        knowledge_base=row.knowledge_base,
        state=OperationState(row.state),
        metadata=bytes(row.metadata),
        create_time_ms=int(row.create_time),
        update_time_ms=int(row.update_time),
        request_id=row.request_id or "",
        response=bytes(row.response),
        error=bytes(row.error),
        cancel_requested=bool(row.cancel_requested),
    )


@dataclass(frozen=True, slots=True)
class NewOperation:
    """What starting a job stores."""

    id: str
    kind: str
    knowledge_base: str
    request_id: str
    request_sha256: str
    request: bytes
    metadata: bytes
    checkpoint: Mapping[str, Any]
    now_ms: int


@dataclass(frozen=True, slots=True)
class ClaimedOperation:
    """An operation a runner holds the lease of: its record, request and checkpoint."""

    record: OperationRecord
    request: bytes
    checkpoint: Mapping[str, Any]


class LeaseLost(Exception):
    """The operation is no longer this runner's (done, or taken over after a stall)."""


class SqlOperationStore:
    """The operations table (the `OperationStore` port and the runner's side of it)."""

    def __init__(self, db: Database, table: Table) -> None:
        self._db = db
        self._table = table
        self._c = table.c
        self._record_columns = tuple(table.c[name] for name in _RECORD_COLUMNS)

    # ---- the Operations API ---------------------------------------------------------------

    async def get(self, op_id: str) -> OperationRecord | None:
        async with self._db.read("operations_get") as connection:
            row = (
                await connection.execute(select(*self._record_columns).where(self._c.id == op_id))
            ).first()
        return _record(row) if row is not None else None

    async def page(
        self, where: OperationFilter, size: int, after: str | None, kb_ids: frozenset[str] | None
    ) -> OperationPage:
        query = select(*self._record_columns).order_by(self._c.id.desc()).limit(size + 1)
        if after is not None:
            query = query.where(self._c.id < after)
        if where.done is True:
            query = query.where(self._c.state >= OperationState.SUCCEEDED)
        elif where.done is False:
            query = query.where(self._c.state < OperationState.SUCCEEDED)
        if where.states:
            query = query.where(self._c.state.in_([int(s) for s in where.states]))
        if where.knowledge_base is not None:
            query = query.where(self._c.knowledge_base == where.knowledge_base)
        if kb_ids is not None:
            query = query.where(self._c.knowledge_base.in_(sorted(kb_ids)))
        async with self._db.read("operations_page") as connection:
            rows = [_record(r) for r in await connection.execute(query)]
        more = len(rows) > size
        rows = rows[:size]
        return OperationPage(rows, page_token(rows[-1].id) if more and rows else "")

    async def request_cancel(self, op_id: str, now_ms: int) -> OperationRecord | None:
        # A queued job is cancelled by the runner that claims it (at once, before it reads
        # anything), so its metadata and error are written by the job's own code.
        async with self._db.write("operations_cancel") as connection:
            await connection.execute(
                update(self._table)
                .where(self._c.id == op_id, self._c.state < OperationState.SUCCEEDED)
                .values(cancel_requested=True)
            )
            row = (
                await connection.execute(select(*self._record_columns).where(self._c.id == op_id))
            ).first()
        return _record(row) if row is not None else None

    async def delete(self, op_id: str) -> bool:
        async with self._db.write("operations_delete") as connection:
            result = await connection.execute(
                delete(self._table).where(
                    self._c.id == op_id, self._c.state >= OperationState.SUCCEEDED
                )
            )
        return bool(result.rowcount == 1)

    # ---- the runner's side ----------------------------------------------------------------

    async def create(self, new: NewOperation) -> tuple[OperationRecord, bool]:
        """Stores a QUEUED operation; with a request_id already used, the operation stored then
        (same request: (it, False)) or ALREADY_EXISTS naming `request_id` (another request)."""
        values = {
            "id": new.id,
            "kind": new.kind,
            "knowledge_base": new.knowledge_base,
            "request_id": new.request_id or None,
            "request_sha256": new.request_sha256,
            "request": new.request,
            "state": int(OperationState.QUEUED),
            "cancel_requested": False,
            "metadata": new.metadata,
            "response": b"",
            "error": b"",
            "checkpoint": dict(new.checkpoint),
            "owner": "",
            "lease_expires_ms": 0,
            "create_time": new.now_ms,
            "update_time": new.now_ms,
        }
        statement = dialect_insert(self._db, self._table).on_conflict_do_nothing()
        async with self._db.write("operations_create") as connection:
            result = await connection.execute(statement, values)
            if result.rowcount == 1:
                row = (
                    await connection.execute(
                        select(*self._record_columns).where(self._c.id == new.id)
                    )
                ).one()
                return _record(row), True
            earlier = (
                await connection.execute(
                    select(*self._record_columns, self._c.request_sha256).where(
                        self._c.request_id == new.request_id
                    )
                )
            ).first()
        if earlier is None:  # an id collision: 32 random bits in one millisecond
            raise AlreadyExists("request_id", "try again")
        if earlier.request_sha256 != new.request_sha256:
            raise AlreadyExists(
                "request_id",
                f"{new.request_id!r} was used by another request (operations/{earlier.id})",
            )
        return _record(earlier), False

    async def claim(
        self, kind: str, owner: str, now_ms: int, lease_ms: int
    ) -> ClaimedOperation | None:
        """The oldest QUEUED operation of `kind`, or a RUNNING one whose lease expired (its
        runner died), now this `owner`'s until `now_ms + lease_ms`; None when there is none."""
        claimable = and_(
            self._c.kind == kind,
            or_(
                self._c.state == OperationState.QUEUED,
                and_(self._c.state == OperationState.RUNNING, self._c.lease_expires_ms < now_ms),
            ),
        )
        async with self._db.read("operations_claimable") as connection:
            candidates = [
                (r.id, r.owner, r.lease_expires_ms)
                for r in await connection.execute(
                    select(self._c.id, self._c.owner, self._c.lease_expires_ms)
                    .where(claimable)
                    .order_by(self._c.id)
                    .limit(8)
                )
            ]
        for op_id, old_owner, old_lease in candidates:
            async with self._db.write("operations_claim") as connection:
                result = await connection.execute(
                    update(self._table)
                    .where(
                        self._c.id == op_id,
                        claimable,
                        self._c.owner == old_owner,
                        self._c.lease_expires_ms == old_lease,
                    )
                    .values(
                        state=OperationState.RUNNING,
                        owner=owner,
                        lease_expires_ms=now_ms + lease_ms,
                        update_time=now_ms,
                    )
                )
                if result.rowcount != 1:
                    continue  # another replica claimed it first
                row = (
                    await connection.execute(
                        select(*self._record_columns, self._c.request, self._c.checkpoint).where(
                            self._c.id == op_id
                        )
                    )
                ).one()
            return ClaimedOperation(_record(row), bytes(row.request), dict(row.checkpoint))
        return None

    async def save(
        self,
        op_id: str,
        owner: str,
        *,
        now_ms: int,
        lease_ms: int,
        metadata: bytes,
        checkpoint: Mapping[str, Any],
    ) -> bool:
        """Progress under the lease, renewed; returns whether a cancel was requested. Raises
        LeaseLost when the operation is no longer this owner's."""
        async with self._db.write("operations_save") as connection:
            result = await connection.execute(
                update(self._table)
                .where(
                    self._c.id == op_id,
                    self._c.owner == owner,
                    self._c.state == OperationState.RUNNING,
                )
                .values(
                    metadata=metadata,
                    checkpoint=dict(checkpoint),
                    lease_expires_ms=now_ms + lease_ms,
                    update_time=now_ms,
                )
            )
            if result.rowcount != 1:
                raise LeaseLost(op_id)
            cancel = (
                await connection.execute(
                    select(self._c.cancel_requested).where(self._c.id == op_id)
                )
            ).scalar_one()
        return bool(cancel)

    async def finish(
        self,
        op_id: str,
        owner: str,
        *,
        state: OperationState,
        now_ms: int,
        metadata: bytes,
        checkpoint: Mapping[str, Any],
        response: bytes = b"",
        error: bytes = b"",
    ) -> None:
        """The operation done (SUCCEEDED, FAILED or CANCELLED); LeaseLost when it is no longer
        this owner's."""
        async with self._db.write("operations_finish") as connection:
            result = await connection.execute(
                update(self._table)
                .where(
                    self._c.id == op_id,
                    self._c.owner == owner,
                    self._c.state == OperationState.RUNNING,
                )
                .values(
                    state=state,
                    metadata=metadata,
                    checkpoint=dict(checkpoint),
                    response=response,
                    error=error,
                    lease_expires_ms=0,
                    update_time=now_ms,
                )
            )
        if result.rowcount != 1:
            raise LeaseLost(op_id)

    async def release(self, op_id: str, owner: str) -> None:
        """Gives a running operation up at once (this replica is stopping), so another replica
        (or this one after its restart) takes it over without waiting for the lease."""
        async with self._db.write("operations_release") as connection:
            await connection.execute(
                update(self._table)
                .where(
                    self._c.id == op_id,
                    self._c.owner == owner,
                    self._c.state == OperationState.RUNNING,
                )
                .values(lease_expires_ms=0)
            )

    async def release_all(self) -> int:
        """Gives every running operation's lease up: at the start of the only process that
        can run them (embedded Milvus Lite), they are a dead process's; returns how many."""
        async with self._db.write("operations_release") as connection:
            result = await connection.execute(
                update(self._table)
                .where(self._c.state == OperationState.RUNNING)
                .values(lease_expires_ms=0)
            )
        return int(result.rowcount or 0)

    async def counts(self) -> dict[OperationState, int]:
        """How many operations are in each state (the `supermew_operations` gauge)."""
        async with self._db.read("operations_counts") as connection:
            rows = await connection.execute(
                select(self._c.state, func.count()).group_by(self._c.state)
            )
            return {OperationState(state): int(n) for state, n in rows}
