"""The garbage collector's settings for a long-running server process: what start-up
built is never collected, and the young generation is collected less often."""

from __future__ import annotations

import gc

#: Net container allocations between two young-generation collections (CPython's default 700).
#: A Run allocates and frees thousands of short-lived dicts and channel objects; at 700 the
#: collector ran every few Runs, and each older-generation pass walked the whole start-up heap.
GEN0_THRESHOLD = 10_000


def settle_heap() -> None:
    """Call once the server is built and listening: collects what start-up left behind, moves
    every surviving object (modules, compiled graphs, clients) to the permanent generation
    (`gc.freeze`), so no later collection walks them, and raises the young generation's
    threshold. Garbage cycles are still collected, only in larger batches."""
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(GEN0_THRESHOLD, older, oldest)
