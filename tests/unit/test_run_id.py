"""Run ids are UUIDv7 (RFC 9562) in the canonical text form."""

from __future__ import annotations

import uuid

from orchestrator_service.history.model import uuid7


def test_a_run_id_is_a_canonical_uuid7_carrying_its_millisecond() -> None:
    now_ms = 1_764_979_200_123
    ids = [uuid7(now_ms) for _ in range(200)]
    for text in ids:
        parsed = uuid.UUID(text)
        assert str(parsed) == text  # lower-case hex, hyphens at 8-4-4-4-12
        assert parsed.version == 7 and parsed.variant == uuid.RFC_4122
        assert parsed.int >> 80 == now_ms
    assert len(set(ids)) == len(ids)


def test_run_ids_sort_by_time() -> None:
    assert uuid7(1_000) < uuid7(1_001) < uuid7(2**40)
