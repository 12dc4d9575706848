"""The lease rule of reconciliation (`core/ingest/leases.py`, retrieval_service/README.md
"Crash safety") as a table, with time injected; and a `Lease` on the in-memory registry:
renewal, its failure reported, a lapsed lease refusing the commit. No sleeping but the
renewal task's own period."""

from __future__ import annotations

import asyncio
import logging

import pytest
from pydantic import ValidationError

from retrieval_service.core.documents import COMMITTED, PENDING, TOMBSTONE, DocumentEntry, RecordKey
from retrieval_service.core.ingest.leases import (
    AFTER_EVERY_LEASE,
    UNLEASED_LIFETIME_MS,
    Lease,
    LeaseLapsed,
    lease_expiry_ms,
    orphaned,
    orphans,
)
from retrieval_service.settings import RetrievalSettings
from shared.startup import describe_invalid_settings
from tests.fakes.in_memory_store import InMemoryDocumentRegistry

NOW = 1_800_000_000_000  # epoch ms
DOC = "kb.md"


def version(started_ms: int, suffix: str = "aaaa") -> str:
    """A version token started at `started_ms` (documents.new_version's form)."""
    return f"{started_ms * 1_000_000:020d}-{suffix}"


def key(state: int, started_ms: int, lease_ms: int = 0, suffix: str = "aaaa") -> RecordKey:
    return RecordKey(DOC, version(started_ms, suffix), state, lease_expires_ms=lease_ms)


# A writer that started 10 minutes ago and renews a 30 s lease.
STARTED = NOW - 600_000
LIVE = NOW + 20_000
EXPIRED = NOW - 1

# (what, the record, the other records of its document, removed?)
CASES = [
    ("pending, lease live, however old", key(PENDING, STARTED, LIVE), [], False),
    ("pending, lease expired", key(PENDING, STARTED, EXPIRED), [], True),
    ("pending, lease expires right now", key(PENDING, STARTED, NOW), [], True),
    (
        "pending older than the current version, lease live: its writer settles it",
        key(PENDING, STARTED, LIVE),
        [key(COMMITTED, STARTED + 1)],
        False,
    ),
    (
        "pending older than the current version, lease expired",
        key(PENDING, STARTED, EXPIRED),
        [key(COMMITTED, STARTED + 1)],
        True,
    ),
    (
        "pending newer than the current version, lease live",
        key(PENDING, STARTED, LIVE),
        [key(COMMITTED, STARTED - 1)],
        False,
    ),
    (
        "pending without a lease (written before leases), 10 min old",
        key(PENDING, STARTED, STARTED),
        [],
        False,
    ),
    (
        "pending without a lease, older than the former grace",
        key(PENDING, NOW - UNLEASED_LIFETIME_MS, 0),
        [],
        True,
    ),
    ("committed, current", key(COMMITTED, STARTED), [key(COMMITTED, STARTED - 1)], False),
    ("committed, superseded", key(COMMITTED, STARTED), [key(COMMITTED, STARTED + 1)], True),
    (
        "committed, superseded by a tombstone",
        key(COMMITTED, STARTED),
        [key(TOMBSTONE, STARTED + 1, LIVE)],
        True,
    ),
    (
        "committed, a newer pending version only",
        key(COMMITTED, STARTED),
        [key(PENDING, STARTED + 1, EXPIRED)],
        False,
    ),
    ("tombstone, its delete's lease live", key(TOMBSTONE, STARTED, LIVE), [], False),
    ("tombstone, lease expired", key(TOMBSTONE, STARTED, EXPIRED), [], True),
    (
        "tombstone, lease expired, an older pending version with a live lease",
        key(TOMBSTONE, STARTED, EXPIRED),
        [key(PENDING, STARTED - 1, LIVE)],
        False,
    ),
    (
        "tombstone, lease expired, an older pending version's lease expired too",
        key(TOMBSTONE, STARTED, EXPIRED),
        [key(PENDING, STARTED - 1, EXPIRED)],
        True,
    ),
    (
        "tombstone, lease expired, a newer pending version with a live lease",
        key(TOMBSTONE, STARTED, EXPIRED),
        [key(PENDING, STARTED + 1, LIVE)],
        True,
    ),
    (
        "tombstone superseded by a newer commit, lease live",
        key(TOMBSTONE, STARTED, LIVE),
        [key(COMMITTED, STARTED + 1)],
        True,
    ),
    ("tombstone without a lease, 10 min old", key(TOMBSTONE, STARTED, 0), [], False),
]


@pytest.mark.parametrize(
    ("record", "others", "removed"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_orphaned(record: RecordKey, others: list[RecordKey], removed: bool) -> None:
    assert orphaned(record, [record, *others], NOW) is removed


def test_a_sole_writer_finds_every_uncommitted_version_dead() -> None:
    records = [
        key(PENDING, NOW, NOW + 3_600_000, "a"),
        key(TOMBSTONE, NOW + 1, NOW + 3_600_000, "b"),
        RecordKey("other.md", version(NOW - 5), COMMITTED),
    ]
    assert orphans(records, AFTER_EVERY_LEASE) == records[:2]


def test_orphans_judges_each_document_by_its_own_records() -> None:
    mine = key(COMMITTED, STARTED)
    other = RecordKey("other.md", version(STARTED + 1), COMMITTED)
    theirs = RecordKey(DOC, version(STARTED + 1), COMMITTED, "knowledge_bases/other")
    assert orphans([mine, other, theirs], NOW) == []


def test_lease_expiry_of_a_record_without_one() -> None:
    assert lease_expiry_ms(key(PENDING, STARTED, 0)) == STARTED + UNLEASED_LIFETIME_MS
    assert lease_expiry_ms(key(PENDING, STARTED, LIVE)) == LIVE


# ---- the lease of one writer ----------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> int:
        return self.now


def pending(name: str) -> DocumentEntry:
    return DocumentEntry(name, "Text", 1, {"0": [1, 1, 1]}, version(NOW, name[:4]), PENDING)


async def test_a_lease_is_written_renewed_and_dropped() -> None:
    registry, clock = InMemoryDocumentRegistry(), Clock()
    lease = Lease(registry, 30, clock)
    try:
        await lease.take([pending("a.md"), pending("b.md")])
        assert {e.lease_expires_ms for e in registry.entries()} == {NOW + 30_000}
        clock.now += 10_000
        await lease.renew()
        assert {e.lease_expires_ms for e in registry.entries()} == {NOW + 40_000}
        lease.drop([pending("a.md")])
        clock.now += 10_000
        await lease.renew()
        leases = {e.filename: e.lease_expires_ms for e in registry.entries()}
        assert leases == {"a.md": NOW + 40_000, "b.md": NOW + 50_000}
    finally:
        await lease.stop()


async def test_a_failed_renewal_is_reported_and_a_lapsed_lease_refuses_to_commit(
    caplog: pytest.LogCaptureFixture,
) -> None:
    registry = InMemoryDocumentRegistry()
    clock = Clock()
    lease = Lease(registry, 0.06, clock)  # renewed every 20 ms
    try:
        await lease.take([pending("a.md")])
        registry.faults.fail_always("put")
        with caplog.at_level(logging.ERROR):
            await asyncio.sleep(0.05)  # a renewal or two, failing
        assert any("renewing the lease of a.md failed" in r.getMessage() for r in caplog.records)
        lease.check()  # still live: the clock has not moved
        clock.now += 60 - 60 // 6 + 1  # less than a sixth of the lease left
        with pytest.raises(LeaseLapsed):
            lease.check()
        registry.faults.heal()
        with pytest.raises(LeaseLapsed):  # lost for good: never renewed again
            await lease.renew()
    finally:
        await lease.stop()


# ---- settings -------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["0", "0.5", "-3", "soon"])
def test_a_lease_below_one_second_fails_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("INGEST_LEASE_SECONDS", value)
    with pytest.raises(ValidationError) as err:
        RetrievalSettings()
    assert describe_invalid_settings(err.value).startswith("invalid setting INGEST_LEASE_SECONDS:")


def test_the_lease_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("INGEST_LEASE_SECONDS", raising=False)
    monkeypatch.delenv("RECONCILE_GRACE_SECONDS", raising=False)
    assert RetrievalSettings().ingest_lease_seconds == 30
    assert RetrievalSettings().reconcile_grace_seconds is None
    monkeypatch.setenv("INGEST_LEASE_SECONDS", "1")
    # The former grace is accepted whatever it holds (bootstrap warns about it once).
    monkeypatch.setenv("RECONCILE_GRACE_SECONDS", "3600")
    settings = RetrievalSettings()
    assert (settings.ingest_lease_seconds, settings.reconcile_grace_seconds) == (1, "3600")
