"""The documents of the store as the domain sees them: chunk levels, versions and their commit
records, the rule that says which version is current, and the list-page token. Every ingest
writes a new *version* of a document; its record is PENDING while its rows are written,
COMMITTED once they all are, and a delete commits a TOMBSTONE version. The current version of
a document is its greatest committed version (a tombstone = deleted), so "newest wins" is
decidable without compare-and-set (retrieval_service/README.md "Crash safety")."""

from __future__ import annotations

import base64
import binascii
import secrets
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from retrieval_service.core.identity import DEFAULT_KB, Metadata
from shared.errors import InvalidArgument

#: The three chunk levels: L1 ⊃ L2 ⊃ L3 (the leaves).
LEVELS = (1, 2, 3)
#: Record states: an ingest in flight, its commit, and a delete's commit.
PENDING, COMMITTED, TOMBSTONE = 0, 1, 2
_TOKEN_PREFIX = "after:"


def version_pk(chunk_id: str, version: str) -> str:
    """The key of one version of a chunk."""
    return f"{chunk_id}#{version}"


def new_version() -> str:
    """A fresh version token: zero-padded wall-clock nanoseconds (so versions order by the time
    they were started, across processes) and a random suffix (so two are never equal)."""
    return f"{time.time_ns():020d}-{secrets.token_hex(4)}"


def version_time_ms(version: str) -> int:
    """The epoch milliseconds a version was started at (its timestamp prefix); 0 for an
    unreadable one."""
    try:
        return int(version.split("-", 1)[0]) // 1_000_000
    except ValueError:
        return 0


@dataclass(slots=True)
class DocumentEntry:
    """One registry record: one version of a document, keyed by (knowledge_base,
    document_id, version). `page_counts[page] = [l1, l2, l3]` counts chunks per page and
    level, from which every chunk id is derived. `document_id` "" means the filename;
    `ingest_time` is epoch milliseconds; `fingerprint` says what the version was built from
    (`unchanged` ingests compare it); a record of a store older than knowledge bases has no
    content_sha256, size or fingerprint. `lease_expires_ms` (epoch milliseconds) is the lease
    of the writer of a PENDING version or of a delete's TOMBSTONE while it runs (0: none
    recorded); a committed record has none (`core/ingest/leases.py`). `text`: the version's
    extracted pages, packed (`core/indexes/texts.py`), carried from its parse to the
    registry's `document_texts` (empty when read back: the registry keeps it apart)."""

    filename: str
    file_type: str
    pages: int
    page_counts: dict[str, list[int]] = field(default_factory=dict)
    version: str = ""
    state: int = COMMITTED
    knowledge_base: str = DEFAULT_KB
    document_id: str = ""
    metadata: Metadata = field(default_factory=dict)
    content_sha256: str = ""
    size_bytes: int = 0
    ingest_time: int = 0
    fingerprint: str = ""
    lease_expires_ms: int = 0
    text: bytes = field(default=b"", repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.document_id:
            self.document_id = self.filename

    @property
    def key(self) -> DocKey:
        return (self.knowledge_base, self.document_id)

    def level_count(self, level: int) -> int:
        return sum(counts[level - 1] for counts in self.page_counts.values())

    def ids(self, level: int) -> list[str]:
        """The public chunk ids of this version on one level."""
        return [
            f"{self.document_id}::p{page}::l{level}::{n}"
            for page, counts in self.page_counts.items()
            for n in range(counts[level - 1])
        ]

    def pks(self, level: int) -> list[str]:
        """The primary keys of this version's rows on one level."""
        return [version_pk(chunk_id, self.version) for chunk_id in self.ids(level)]


@dataclass(frozen=True, slots=True)
class IngestedDocument:
    """What an ingest reports of one document it committed (and the CLI of one file it sent):
    its stored type, pages, chunks per level, whether it replaced a current version, whether
    it was `unchanged` (nothing embedded or written: the counts are the stored version's), and
    whether only its metadata changed (`metadata_only`: a new version of the stored chunks,
    copied with their vectors, nothing embedded)."""

    filename: str
    file_type: str
    pages: int
    l1_chunks: int
    l2_chunks: int
    l3_chunks: int
    replaced: bool
    document_id: str = ""
    content_sha256: str = ""
    unchanged: bool = False
    knowledge_base: str = DEFAULT_KB
    metadata_only: bool = False


#: A document's identity: (knowledge base name, document_id).
DocKey = tuple[str, str]


@dataclass(frozen=True, slots=True)
class RecordKey:
    """What a registry scan reads of each record (no chunk counts): its key, state and the
    lease of an uncommitted one (`DocumentEntry.lease_expires_ms`)."""

    document_id: str
    version: str
    state: int
    knowledge_base: str = DEFAULT_KB
    lease_expires_ms: int = 0

    @property
    def key(self) -> DocKey:
        return (self.knowledge_base, self.document_id)


def record_key(entry: DocumentEntry) -> RecordKey:
    return RecordKey(
        entry.document_id,
        entry.version,
        entry.state,
        entry.knowledge_base,
        entry.lease_expires_ms,
    )


@dataclass(frozen=True, slots=True)
class DocumentPage:
    entries: list[DocumentEntry]
    next_page_token: str


def current_of(keys: Iterable[RecordKey]) -> dict[DocKey, RecordKey]:
    """Per document (knowledge base, document_id), its greatest committed record (a tombstone
    included): the current one."""
    out: dict[DocKey, RecordKey] = {}
    for key in keys:
        if key.state == PENDING:
            continue
        best = out.get(key.key)
        if best is None or key.version > best.version:
            out[key.key] = key
    return out


def encode_page_token(last: str) -> str:
    return base64.urlsafe_b64encode((_TOKEN_PREFIX + last).encode()).decode()


def decode_page_token(token: str) -> str:
    """The name (document_id or knowledge-base name) a page token continues after;
    INVALID_ARGUMENT for anything this service did not issue."""
    try:
        text = base64.urlsafe_b64decode(token.encode("ascii")).decode("utf-8")
    except (UnicodeError, binascii.Error, ValueError):
        raise InvalidArgument("page_token", "is not a token this service issued") from None
    if not text.startswith(_TOKEN_PREFIX) or len(text) == len(_TOKEN_PREFIX):
        raise InvalidArgument("page_token", "is not a token this service issued")
    return text[len(_TOKEN_PREFIX) :]
