"""The control-plane database (docs/api.md#database): the shared engine (`shared/sql/`) bound to
DATABASE_URL, this service's metric families and the core's store errors. SQLite in a file
beside the Milvus Lite file by default, PostgreSQL at scale. Control records (knowledge bases,
documents, their versions and leases, operations) live here; the chunk rows stay in Milvus."""

from __future__ import annotations

from pathlib import Path

from retrieval_service.core.errors import DatabaseUnavailable, StoreFailed
from retrieval_service.metrics import DB_POOL_IN_USE, record_db_error
from shared.errors import DomainError
from shared.sql import database as shared_database
from shared.sql.database import DatabaseConfig, dialect_insert, redacted, upsert

__all__ = [
    "SQLITE_SUFFIX",
    "Database",
    "DatabaseConfig",
    "default_database_url",
    "dialect_insert",
    "redacted",
    "upsert",
]

#: The SQLite file beside a Milvus Lite file `x.db`: `x.control.sqlite3`.
SQLITE_SUFFIX = ".control.sqlite3"


def default_database_url(milvus_uri: str) -> str:
    """DATABASE_URL unset: a SQLite file beside the Milvus Lite file (embedded), or under
    ./data for a Milvus server (one replica; several need PostgreSQL)."""
    if milvus_uri.endswith(".db") and "://" not in milvus_uri:
        lite = Path(milvus_uri).expanduser().resolve()
        path = lite.with_name(lite.name.removesuffix(".db") + SQLITE_SUFFIX)
    else:
        path = Path("data", "supermew" + SQLITE_SUFFIX).resolve()
    return f"sqlite+aiosqlite:///{path}"


class _ControlPlane(shared_database.DatabaseBinding):
    setting = "DATABASE_URL"

    def pool_checked_out(self, delta: int) -> None:
        DB_POOL_IN_USE.inc(delta)

    def failed(self, operation: str) -> None:
        record_db_error(operation)

    def unavailable(self) -> DomainError:
        return DatabaseUnavailable()

    def broken(self) -> DomainError:
        return StoreFailed()


class Database(shared_database.Database):
    """The control-plane database on DATABASE_URL."""

    def __init__(self, config: DatabaseConfig) -> None:
        super().__init__(config, _ControlPlane())
