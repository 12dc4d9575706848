"""The document registry in the control-plane database (the `DocumentRegistry` port): one row
of `document_versions` per version, and `documents`, the current version of each live
document, rewritten in the same transaction as every write that can change it — so a commit
record and the document's current version change together or not at all, and counts,
listings and the readers' version filter are keyed reads, never scans.

Every write checks, in its transaction, that its knowledge base exists and is ACTIVE, holding
the knowledge base's row (PostgreSQL: FOR SHARE) until it commits: a forced deletion marks the
row DELETING under an exclusive lock, so a write either commits before the mark (and the
deletion's purge removes it) or fails NOT_FOUND after it (and its writer removes its rows)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import and_, delete, func, select, text, tuple_, update
from sqlalchemy.ext.asyncio import AsyncConnection

from retrieval_service.adapters.sql.database import Database, dialect_insert, upsert
from retrieval_service.adapters.sql.tables import (
    document_texts,
    document_versions,
    documents,
    index_build_backlog,
    indexes,
    knowledge_bases,
)
from retrieval_service.core.documents import (
    COMMITTED,
    LEVELS,
    PENDING,
    DocKey,
    DocumentEntry,
    DocumentPage,
    RecordKey,
    decode_page_token,
    encode_page_token,
)
from retrieval_service.core.identity import DEFAULT_KB
from retrieval_service.core.indexes.model import (
    BUILDING,
    READ_ALL,
    READY,
    IndexesBehind,
    build_takes_writes,
)
from retrieval_service.core.ports import Written
from shared.access import ACL_KEY, document_visible
from shared.errors import NotFound

#: Ids per statement: well under SQLite's 32,766 bound parameters and PostgreSQL's 65,535.
_BATCH = 500
_V = document_versions.c
_D = documents.c
_T = document_texts.c
_I = indexes.c
_B = index_build_backlog.c
#: The columns a scan reads (no chunk counts, metadata or fingerprint).
_KEY_COLUMNS = (_V.knowledge_base, _V.document_id, _V.version, _V.state, _V.lease_expires_ms)
#: ACTIVE (`core.knowledge_bases`); the only state that accepts writes.
_ACTIVE = 0


def _chunks(items: Sequence[Any], size: int = _BATCH) -> Iterable[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _version_row(entry: DocumentEntry) -> dict[str, Any]:
    return {
        "knowledge_base": entry.knowledge_base,
        "document_id": entry.document_id,
        "version": entry.version,
        "state": entry.state,
        "filename": entry.filename,
        "file_type": entry.file_type,
        "pages": entry.pages,
        "page_counts": entry.page_counts,
        "metadata": entry.metadata,
        "content_sha256": entry.content_sha256,
        "size_bytes": entry.size_bytes,
        "ingest_time": entry.ingest_time,
        "fingerprint": entry.fingerprint,
        "lease_expires_ms": 0 if entry.state == COMMITTED else entry.lease_expires_ms,
    }


def entry_of(row: Any) -> DocumentEntry:
    """The record a `document_versions` row holds."""
    return DocumentEntry(
        filename=row["filename"],
        file_type=row["file_type"],
        pages=int(row["pages"]),
        page_counts={page: list(counts) for page, counts in dict(row["page_counts"]).items()},
        version=row["version"],
        state=int(row["state"]),
        knowledge_base=row["knowledge_base"],
        document_id=row["document_id"],
        metadata=dict(row["metadata"] or {}),
        content_sha256=row["content_sha256"],
        size_bytes=int(row["size_bytes"]),
        ingest_time=int(row["ingest_time"]),
        fingerprint=row["fingerprint"],
        lease_expires_ms=int(row["lease_expires_ms"]),
    )


def _key_of(row: Any) -> RecordKey:
    state = int(row.state)
    lease = 0 if state == COMMITTED else int(row.lease_expires_ms)
    return RecordKey(row.document_id, row.version, state, row.knowledge_base, lease)


def _document_row(entry: DocumentEntry) -> dict[str, Any]:
    l1, l2, l3 = (entry.level_count(level) for level in LEVELS)
    return {
        "knowledge_base": entry.knowledge_base,
        "document_id": entry.document_id,
        "version": entry.version,
        "content_sha256": entry.content_sha256,
        "metadata": entry.metadata,
        "acl": entry.metadata.get(ACL_KEY),
        "size_bytes": entry.size_bytes,
        "ingest_time": entry.ingest_time,
        "l1_chunks": l1,
        "l2_chunks": l2,
        "l3_chunks": l3,
    }


async def require_active(db: Database, connection: AsyncConnection, knowledge_base: str) -> None:
    """NOT_FOUND unless the knowledge base exists and is ACTIVE; holds its row (PostgreSQL:
    FOR SHARE) until the transaction ends, so a deletion cannot mark it meanwhile."""
    query = select(knowledge_bases.c.state).where(knowledge_bases.c.name == knowledge_base)
    if db.dialect == "postgresql":
        query = query.with_for_update(read=True)
    state = (await connection.execute(query)).scalar()
    if state is None or int(state) != _ACTIVE:
        raise NotFound("knowledge_base", f"knowledge base {knowledge_base!r} does not exist")


async def check_indexes_hold(
    db: Database,
    connection: AsyncConnection,
    knowledge_base: str,
    entries: Sequence[DocumentEntry],
    written: Written,
) -> None:
    """That every live index of the knowledge base holds the versions `entries` commit
    (`written`: the documents written into each generation, by collection) or takes them in
    its build (`build_takes_writes`): one a build has read past goes into its backlog here.
    IndexesBehind otherwise. The caller holds the knowledge base's row (`require_active`),
    which a build's page read locks exclusively (`SqlDocumentRegistry.build_page`), so no
    build moves or finishes meanwhile."""
    rows = await connection.execute(
        select(_I.index_id, _I.collection, _I.state, _I.build_read_to).where(
            _I.knowledge_base == knowledge_base, _I.state.in_((BUILDING, READY))
        )
    )
    behind = set()
    for row in rows.all():
        held = written.get(row.collection, frozenset())
        missing = [e for e in entries if e.document_id not in held]
        if not missing:
            continue
        if not build_takes_writes(int(row.state), row.build_read_to):
            behind.add(row.collection)
            continue
        # Past the read position, the build's pass reads it; behind it, its backlog does.
        read = [e for e in missing if e.document_id <= row.build_read_to]
        if read:
            statement = upsert(
                db, index_build_backlog, ("knowledge_base", "index_id", "document_id")
            )
            await connection.execute(
                statement,
                [
                    {
                        "knowledge_base": knowledge_base,
                        "index_id": row.index_id,
                        "document_id": e.document_id,
                        "version": e.version,
                    }
                    for e in read
                ],
            )
    if behind:
        raise IndexesBehind(frozenset(behind))


async def write_versions(
    db: Database, connection: AsyncConnection, entries: Sequence[DocumentEntry]
) -> None:
    """Upserts version records and the current versions they change, in the caller's
    transaction (no knowledge-base check: `put` and the upgrade make their own)."""
    statement = upsert(db, document_versions, ("knowledge_base", "document_id", "version"))
    changed = {e.key for e in entries if e.state != PENDING}
    await lock_documents(db, connection, changed)
    rows = [_version_row(e) for e in entries]
    for batch in _chunks(rows):
        await connection.execute(statement, list(batch))
    await write_texts(db, connection, [e for e in entries if e.text])
    await refresh_documents(connection, changed)


async def write_texts(
    db: Database, connection: AsyncConnection, entries: Sequence[DocumentEntry]
) -> None:
    """Keeps each version's packed pages, once per (document, content digest)."""
    if not entries:
        return
    statement = dialect_insert(db, document_texts).on_conflict_do_nothing(
        index_elements=["knowledge_base", "document_id", "content_sha256"]
    )
    rows = {(e.knowledge_base, e.document_id, e.content_sha256): e.text for e in entries}
    for (knowledge_base, document_id, sha), text_blob in rows.items():
        await connection.execute(
            statement,
            {
                "knowledge_base": knowledge_base,
                "document_id": document_id,
                "content_sha256": sha,
                "pages": text_blob,
            },
        )


async def drop_unused_texts(connection: AsyncConnection, changed: set[DocKey]) -> None:
    """Removes the texts of `changed` documents that no version of theirs names any more."""
    for knowledge_base, document_id in sorted(changed):
        used = (
            select(_V.content_sha256)
            .where(_V.knowledge_base == knowledge_base, _V.document_id == document_id)
            .scalar_subquery()
        )
        await connection.execute(
            delete(document_texts).where(
                _T.knowledge_base == knowledge_base,
                _T.document_id == document_id,
                _T.content_sha256.not_in(used),
            )
        )


def _lock_key(key: DocKey) -> int:
    """A document's advisory-lock key: 64 bits of a hash of its (knowledge base, id)."""
    digest = hashlib.blake2b(f"{key[0]}\x00{key[1]}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


async def lock_documents(db: Database, connection: AsyncConnection, keys: set[DocKey]) -> None:
    """Serialises the transactions that change the same documents' current versions until
    they end. PostgreSQL: one advisory lock per document, taken in key order (so two writers
    of overlapping documents never deadlock); without it, two replicas committing versions of
    one document at once would each compute its current version without the other's and
    the later commit could install the older one. SQLite: every write transaction holds the
    database's write lock already (BEGIN IMMEDIATE)."""
    if db.dialect != "postgresql" or not keys:
        return
    await connection.execute(
        text(
            "SELECT pg_advisory_xact_lock(k) FROM unnest(CAST(:keys AS bigint[])) AS k ORDER BY k"
        ),
        {"keys": sorted({_lock_key(k) for k in keys})},
    )


async def refresh_documents(connection: AsyncConnection, changed: set[DocKey]) -> None:
    """Rewrites the `documents` rows of `changed` from their versions: each document's
    greatest committed record, a tombstone or none meaning no row."""
    by_kb: dict[str, list[str]] = {}
    for knowledge_base, document_id in changed:
        by_kb.setdefault(knowledge_base, []).append(document_id)
    for knowledge_base, ids in sorted(by_kb.items()):
        for batch in _chunks(sorted(ids)):
            await connection.execute(
                delete(documents).where(
                    _D.knowledge_base == knowledge_base, _D.document_id.in_(batch)
                )
            )
            rows = await connection.execute(
                select(document_versions)
                .where(
                    _V.knowledge_base == knowledge_base,
                    _V.document_id.in_(batch),
                    _V.state != PENDING,
                )
                .order_by(_V.document_id, _V.version)
            )
            current: dict[str, DocumentEntry] = {}
            for row in rows.mappings():
                current[row["document_id"]] = entry_of(row)  # the greatest version last
            live = [_document_row(e) for e in current.values() if e.state == COMMITTED]
            if live:
                await connection.execute(documents.insert(), live)


def _moved(read_to: str | None, last: str | None) -> str | None:
    """A build's read position after a page of its pass ending at `last` (None: its last
    page): never back, and None stays."""
    return None if read_to is None or last is None else max(read_to, last)


class SqlDocumentRegistry:
    """The `DocumentRegistry` port on the control-plane database."""

    def __init__(self, db: Database) -> None:
        self._db = db

    # ---- writes ----------------------------------------------------------------------------

    async def put(self, *entries: DocumentEntry, written: Written | None = None) -> None:
        """Writes the records in one transaction (all or none), with the current version of
        every document whose committed records they change. `written` (a commit's): which
        documents each index holds already, checked by `check_indexes_hold`."""
        if not entries:
            return
        async with self._db.write("registry_put") as connection:
            for knowledge_base in sorted({e.knowledge_base for e in entries}):
                await require_active(self._db, connection, knowledge_base)
                if written is not None:
                    mine = [e for e in entries if e.knowledge_base == knowledge_base]
                    await check_indexes_hold(self._db, connection, knowledge_base, mine, written)
            await write_versions(self._db, connection, entries)

    async def remove(self, entries: Iterable[DocumentEntry | RecordKey]) -> None:
        keys = [(e.knowledge_base, e.document_id, e.version) for e in entries]
        if not keys:
            return
        changed = {(kb, doc) for kb, doc, _ in keys}
        async with self._db.write("registry_remove") as connection:
            await lock_documents(self._db, connection, changed)
            for batch in _chunks(keys):
                await connection.execute(
                    delete(document_versions).where(
                        tuple_(_V.knowledge_base, _V.document_id, _V.version).in_(batch)
                    )
                )
            await refresh_documents(connection, changed)
            await drop_unused_texts(connection, changed)

    # ---- reads -----------------------------------------------------------------------------

    async def texts(
        self, knowledge_base: str, keys: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], bytes]:
        """The packed pages of each (document_id, content_sha256) that has them."""
        out: dict[tuple[str, str], bytes] = {}
        async with self._db.read("registry_texts") as connection:
            for batch in _chunks(list(dict.fromkeys(keys))):
                rows = await connection.execute(
                    select(_T.document_id, _T.content_sha256, _T.pages).where(
                        _T.knowledge_base == knowledge_base,
                        tuple_(_T.document_id, _T.content_sha256).in_(batch),
                    )
                )
                for row in rows:
                    out[(row.document_id, row.content_sha256)] = bytes(row.pages)
        return out

    async def records(
        self, document_id: str, knowledge_base: str = DEFAULT_KB
    ) -> list[DocumentEntry]:
        return (await self.records_of([document_id], knowledge_base)).get(document_id, [])

    async def records_of(
        self, document_ids: Iterable[str], knowledge_base: str = DEFAULT_KB
    ) -> dict[str, list[DocumentEntry]]:
        ids = sorted(set(document_ids))
        out: dict[str, list[DocumentEntry]] = {}
        async with self._db.read("registry_read") as connection:
            for batch in _chunks(ids):
                rows = await connection.execute(
                    select(document_versions)
                    .where(_V.knowledge_base == knowledge_base, _V.document_id.in_(batch))
                    .order_by(_V.document_id, _V.version)
                )
                for row in rows.mappings():
                    out.setdefault(row["document_id"], []).append(entry_of(row))
        return out

    def _current_query(self) -> Any:
        return select(document_versions).join(
            documents,
            and_(
                _D.knowledge_base == _V.knowledge_base,
                _D.document_id == _V.document_id,
                _D.version == _V.version,
            ),
        )

    async def get(self, document_id: str, knowledge_base: str = DEFAULT_KB) -> DocumentEntry | None:
        async with self._db.read("registry_read") as connection:
            row = (
                (
                    await connection.execute(
                        self._current_query().where(
                            _D.knowledge_base == knowledge_base, _D.document_id == document_id
                        )
                    )
                )
                .mappings()
                .first()
            )
        return entry_of(row) if row is not None else None

    async def current_versions(
        self, document_ids: Iterable[str], knowledge_base: str = DEFAULT_KB
    ) -> dict[str, str]:
        ids = sorted(set(document_ids))
        out: dict[str, str] = {}
        if not ids:
            return out
        async with self._db.read("registry_read") as connection:
            for batch in _chunks(ids):
                rows = await connection.execute(
                    select(_D.document_id, _D.version).where(
                        _D.knowledge_base == knowledge_base, _D.document_id.in_(batch)
                    )
                )
                out.update((row.document_id, row.version) for row in rows)
        return out

    async def scan(self, knowledge_base: str | None = None) -> list[RecordKey]:
        query = select(*_KEY_COLUMNS).order_by(_V.knowledge_base, _V.document_id, _V.version)
        if knowledge_base is not None:
            query = query.where(_V.knowledge_base == knowledge_base)
        async with self._db.read("registry_read") as connection:
            return [_key_of(row) for row in await connection.execute(query)]

    async def full(self, keys: Iterable[RecordKey]) -> list[DocumentEntry]:
        wanted = [(k.knowledge_base, k.document_id, k.version) for k in keys]
        out: list[DocumentEntry] = []
        async with self._db.read("registry_read") as connection:
            for batch in _chunks(wanted):
                rows = await connection.execute(
                    select(document_versions).where(
                        tuple_(_V.knowledge_base, _V.document_id, _V.version).in_(batch)
                    )
                )
                out.extend(entry_of(row) for row in rows.mappings())
        return out

    async def page(
        self, page_size: int, page_token: str = "", knowledge_base: str = DEFAULT_KB
    ) -> DocumentPage:
        after = decode_page_token(page_token) if page_token else ""
        query = (
            self._current_query()
            .where(_D.knowledge_base == knowledge_base, _D.document_id > after)
            .order_by(_D.document_id)
            .limit(page_size + 1)
        )
        async with self._db.read("registry_read") as connection:
            entries = [entry_of(row) for row in (await connection.execute(query)).mappings()]
        more = len(entries) > page_size
        entries = entries[:page_size]
        token = encode_page_token(entries[-1].document_id) if more and entries else ""
        return DocumentPage(entries, token)

    async def build_page(
        self, knowledge_base: str, index_id: str, after: str, page_size: int
    ) -> DocumentPage | None:
        """What the build of a BUILDING index reads next, its read position moved in the same
        transaction. Its pass (`after` a document id, or ""): the current documents after
        `after` in id order, the position moved past them and never back — a build resumed
        from an earlier save, or a replica's stale runner, only re-reads — and set to None on
        the last page: every write reaches the index itself from then on, so the backlog only
        shrinks and the build ends however steadily callers write. Its backlog (`after`
        READ_ALL): the current versions of documents committed behind the position during the
        pass, a page at a time (each stays in the backlog until `build_written` says its
        version is in), then an empty page. None when the index is not BUILDING. The
        knowledge base's row is held exclusively (PostgreSQL: FOR NO KEY UPDATE; SQLite: every
        write transaction is serial), so no commit checks the position meanwhile
        (`check_indexes_hold`)."""
        lock = select(knowledge_bases.c.name).where(knowledge_bases.c.name == knowledge_base)
        if self._db.dialect == "postgresql":
            lock = lock.with_for_update(key_share=True)
        where = (_I.knowledge_base == knowledge_base, _I.index_id == index_id)
        async with self._db.write("registry_build_page") as connection:
            await connection.execute(lock)
            index = (
                await connection.execute(select(_I.state, _I.build_read_to).where(*where))
            ).first()
            if index is None or int(index.state) != BUILDING:
                return None
            read_to = index.build_read_to
            if after != READ_ALL:
                query = self._current_query().where(
                    _D.knowledge_base == knowledge_base, _D.document_id > after
                )
                rows = await connection.execute(query.order_by(_D.document_id).limit(page_size + 1))
                entries = [entry_of(row) for row in rows.mappings()]
                more = len(entries) > page_size
                entries = entries[:page_size]
                token = encode_page_token(entries[-1].document_id) if more else ""
                moved = _moved(read_to, entries[-1].document_id if more else None)
            else:
                entries = await self._backlog(connection, knowledge_base, index_id, page_size)
                token = ""
                moved = None
            if moved != read_to:
                await connection.execute(update(indexes).where(*where).values(build_read_to=moved))
        return DocumentPage(entries, token)

    async def _backlog(
        self, connection: AsyncConnection, knowledge_base: str, index_id: str, size: int
    ) -> list[DocumentEntry]:
        """The current versions of up to `size` documents of a build's backlog; backlog rows
        of documents deleted since go."""
        mine = (_B.knowledge_base == knowledge_base, _B.index_id == index_id)
        while True:
            ids = [
                row.document_id
                for row in await connection.execute(
                    select(_B.document_id).where(*mine).order_by(_B.document_id).limit(size)
                )
            ]
            if not ids:
                return []
            rows = await connection.execute(
                self._current_query().where(
                    _D.knowledge_base == knowledge_base, _D.document_id.in_(ids)
                )
            )
            entries = [entry_of(row) for row in rows.mappings()]
            gone = set(ids) - {e.document_id for e in entries}
            if gone:
                await connection.execute(
                    delete(index_build_backlog).where(*mine, _B.document_id.in_(sorted(gone)))
                )
            if entries:
                return sorted(entries, key=lambda e: e.document_id)

    async def build_written(
        self, knowledge_base: str, index_id: str, versions: Sequence[tuple[str, str]]
    ) -> None:
        """Takes the documents whose (document_id, version) a build wrote out of its backlog,
        unless a later version came into it meanwhile."""
        if not versions:
            return
        mine = (_B.knowledge_base == knowledge_base, _B.index_id == index_id)
        async with self._db.write("registry_build_written") as connection:
            for document_id, version in versions:
                await connection.execute(
                    delete(index_build_backlog).where(
                        *mine, _B.document_id == document_id, _B.version <= version
                    )
                )

    async def counts(
        self, knowledge_bases: Sequence[str], groups: frozenset[str] | None = None
    ) -> dict[str, tuple[int, int]]:
        """(documents, chunks over all levels) of each knowledge base, counting only the
        documents visible to `groups` (None: all): an aggregate over `documents`, plus a read
        of the documents that carry an `acl` when `groups` is set."""
        out = {name: (0, 0) for name in knowledge_bases}
        chunks = _D.l1_chunks + _D.l2_chunks + _D.l3_chunks
        async with self._db.read("registry_counts") as connection:
            for batch in _chunks(list(knowledge_bases)):
                query = (
                    select(_D.knowledge_base, func.count(), func.coalesce(func.sum(chunks), 0))
                    .where(_D.knowledge_base.in_(batch))
                    .group_by(_D.knowledge_base)
                )
                if groups is not None:
                    query = query.where(_D.acl.is_(None))
                for row in await connection.execute(query):
                    out[row[0]] = (int(row[1]), int(row[2]))
                if groups is None:
                    continue
                guarded = select(_D.knowledge_base, _D.acl, chunks).where(
                    _D.knowledge_base.in_(batch), _D.acl.is_not(None)
                )
                for kb, acl, n in await connection.execute(guarded):
                    if document_visible({ACL_KEY: acl}, groups):
                        docs, total = out[kb]
                        out[kb] = (docs + 1, total + int(n))
        return out
