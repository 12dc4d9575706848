"""shared.heap: a served process's garbage-collector settings."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from shared.heap import GEN0_THRESHOLD, settle_heap


@pytest.fixture
def restored_gc() -> Iterator[None]:
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


def test_settle_heap_freezes_what_exists_and_raises_only_the_young_threshold(restored_gc):
    _, older, oldest = gc.get_threshold()
    survivor: list[object] = [[]]  # a container the collector tracks
    assert any(obj is survivor for obj in gc.get_objects())

    settle_heap()

    # Frozen: in the permanent generation, which no collection walks.
    assert gc.get_freeze_count() > 0
    assert not any(obj is survivor for obj in gc.get_objects())
    assert gc.get_threshold() == (GEN0_THRESHOLD, older, oldest)
