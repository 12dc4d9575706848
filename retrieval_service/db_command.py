"""`python -m retrieval_service db upgrade|current`: the control-plane database's schema on
demand, with the service's own settings (DATABASE_URL, or the SQLite file beside MILVUS_URI).
`upgrade` is what a Kubernetes Job runs before the replicas start with MIGRATE_ON_START=false;
`current` prints the database's revision and the one this code needs. Exit status 0 on
success, 1 with one line on stderr otherwise (the password never printed)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

from pydantic import ValidationError

from retrieval_service.adapters.sql.database import Database
from retrieval_service.adapters.sql.migrate import current_revision, head, upgrade
from retrieval_service.bootstrap import database_config
from retrieval_service.settings import RetrievalSettings
from shared.errors import DomainError


async def _run(command: str, settings: RetrievalSettings) -> str:
    db = Database(database_config(settings, settings.milvus_uri))
    try:
        await db.check_reachable()
        if command == "upgrade":
            before, after = await upgrade(db)
            if before == after:
                return f"{db.shown_url}: schema already at {after}"
            return f"{db.shown_url}: schema migrated from {before or 'empty'} to {after}"
        current = await current_revision(db)
        return f"{db.shown_url}: schema at {current or 'no revision'}; this code needs {head()}"
    finally:
        await db.aclose()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m retrieval_service db",
        description="Migrate or inspect the control-plane database (DATABASE_URL).",
    )
    parser.add_argument("command", choices=("upgrade", "current"))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    try:
        settings = RetrievalSettings()
        print(asyncio.run(_run(args.command, settings)))
    except ValidationError as error:
        first = error.errors()[0]
        name = str(first["loc"][0]).upper() if first["loc"] else "settings"
        print(f"db {args.command}: {name}: {first['msg']}", file=sys.stderr)
        return 1
    except DomainError as error:
        print(f"db {args.command}: {error}", file=sys.stderr)
        return 1
    return 0
