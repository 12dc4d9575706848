"""`python -m <service> db upgrade|current`: a service's database schema on demand, with the
service's own settings. `upgrade` is what a Kubernetes Job runs before the replicas start with
MIGRATE_ON_START=false; `current` prints the database's revision and the one this code needs.
Exit status 0 on success, 1 with one line on stderr otherwise (the password never printed)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Callable

from pydantic import ValidationError

from shared.errors import DomainError
from shared.sql.database import Database
from shared.sql.migrate import Migrations


async def _run(command: str, db: Database, migrations: Migrations) -> str:
    try:
        await db.check_reachable()
        if command == "upgrade":
            before, after = await migrations.upgrade(db)
            if before == after:
                return f"{db.shown_url}: schema already at {after}"
            return f"{db.shown_url}: schema migrated from {before or 'empty'} to {after}"
        current = await migrations.current_revision(db)
        return (
            f"{db.shown_url}: schema at {current or 'no revision'}; "
            f"this code needs {migrations.head()}"
        )
    finally:
        await db.aclose()


def db_main(
    argv: list[str],
    *,
    service: str,
    setting: str,
    database: Callable[[], Database],
    migrations: Migrations,
) -> int:
    """`database()` reads the service's settings and builds its Database (a bad setting
    raises pydantic's ValidationError, reported in one line naming it)."""
    parser = argparse.ArgumentParser(
        prog=f"python -m {service} db",
        description=f"Migrate or inspect the service's database ({setting}).",
    )
    parser.add_argument("command", choices=("upgrade", "current"))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    try:
        print(asyncio.run(_run(args.command, database(), migrations)))
    except ValidationError as error:
        first = error.errors()[0]
        name = str(first["loc"][0]).upper() if first["loc"] else "settings"
        print(f"db {args.command}: {name}: {first['msg']}", file=sys.stderr)
        return 1
    except DomainError as error:
        print(f"db {args.command}: {error}", file=sys.stderr)
        return 1
    return 0
