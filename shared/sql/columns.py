"""Column types both services' schemas use, the same on SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, String
from sqlalchemy.dialects import postgresql
from sqlalchemy.types import TypeEngine


def key_type(length: int = 1024) -> TypeEngine[str]:
    """A key column: byte order on PostgreSQL whatever the database's collation."""
    return String(length).with_variant(postgresql.VARCHAR(length, collation="C"), "postgresql")


def json_type(*, none_as_null: bool = False) -> TypeEngine[Any]:
    """JSON (JSONB on PostgreSQL); `none_as_null`: Python None is SQL NULL, not JSON null."""
    return JSON(none_as_null=none_as_null).with_variant(
        postgresql.JSONB(none_as_null=none_as_null), "postgresql"
    )
