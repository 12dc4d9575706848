"""The move of a store whose control records live in Milvus (the `_v4` registry and
knowledge-base collections, docs/api.md#database "Upgrade in place") into the control-plane
database, at the first start; no chunk row is touched and nothing is embedded again.

Crash-safe: every knowledge base and registry record is written in ONE database transaction,
together with the row of `control_plane_upgrades` that says the move completed; the Milvus
collections are dropped only after that commit. A kill before the commit leaves the database
as it was (the next start moves everything again); a kill after it leaves collections that
the next start, finding the row, drops without reading."""

from __future__ import annotations

import logging
import time
from typing import Any

from sqlalchemy import select

from retrieval_service.adapters.milvus.connection import MilvusStore
from retrieval_service.adapters.milvus.knowledge_bases import KnowledgeBaseStore
from retrieval_service.adapters.milvus.registry import DocumentRegistry
from retrieval_service.adapters.sql.database import Database, upsert
from retrieval_service.adapters.sql.registry import write_versions
from retrieval_service.adapters.sql.tables import control_plane_upgrades, knowledge_bases
from retrieval_service.core.identity import DEFAULT_KB
from retrieval_service.core.knowledge_bases import ACTIVE, DELETING

log = logging.getLogger(__name__)

#: The `control_plane_upgrades` row of this move.
MOVE = "milvus_control_plane"


async def _completed(db: Database) -> bool:
    async with db.read("upgrade") as connection:
        query = select(control_plane_upgrades.c.name).where(control_plane_upgrades.c.name == MOVE)
        return (await connection.execute(query)).first() is not None


def _existing(client: Any, names: list[str]) -> list[str]:
    """The collections of `names` that exist, loaded (a query needs it)."""
    found = [name for name in names if client.has_collection(name)]
    for name in found:
        client.load_collection(name)
    return found


async def move_control_plane(milvus: MilvusStore, db: Database) -> bool:
    """Moves the Milvus control collections of `milvus` into `db` (unless done before), then
    drops them; returns whether there were any."""
    old = await milvus.run(_existing, milvus.control_collections())
    if not old:
        return False
    if not await _completed(db):
        started = time.monotonic()
        log.info("moving the control records of %s into the database", ", ".join(old))
        records = (
            await KnowledgeBaseStore(milvus).all()
            if milvus.knowledge_base_collection in old
            else []
        )
        registry = DocumentRegistry(milvus)
        entries = (
            await registry.full(await registry.scan()) if milvus.registry_collection in old else []
        )
        rows = [
            {
                "name": r.name,
                "display_name": r.display_name,
                "description": r.description,
                "create_time": r.create_time,
                "state": r.state,
            }
            for r in records
        ]
        # The default knowledge base of a store upgraded from before knowledge bases has no
        # record (it was created at the next start); any other one without its own record (a
        # deletion interrupted between its last two steps) gets one DELETING, so
        # reconciliation finishes that deletion.
        known = {r.name for r in records}
        for name in sorted({e.knowledge_base for e in entries} - known):
            rows.append(
                {
                    "name": name,
                    "display_name": "Default" if name == DEFAULT_KB else "",
                    "description": "",
                    "create_time": int(time.time() * 1000),
                    "state": ACTIVE if name == DEFAULT_KB else DELETING,
                }
            )
        async with db.write("upgrade") as connection:
            if rows:
                await connection.execute(upsert(db, knowledge_bases, ("name",)), rows)
            await write_versions(db, connection, entries)
            await connection.execute(
                control_plane_upgrades.insert(),
                {
                    "name": MOVE,
                    "completed_time": int(time.time() * 1000),
                    "note": f"{len(records)} knowledge bases, {len(entries)} document versions "
                    f"from {', '.join(old)}",
                },
            )
        log.info(
            "moved %d knowledge bases and %d document versions into the database in %.1f s",
            len(records),
            len(entries),
            time.monotonic() - started,
        )
    for name in old:
        await milvus.run(lambda client, name=name: client.drop_collection(name))
        log.info("dropped the moved collection %s", name)
    return True
