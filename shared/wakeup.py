"""The idle wait of a job runner (imports, index builds, evaluation runs): until work is queued
through the same process, or until the next look at the database for work queued elsewhere or
left by a dead replica. Looking often costs an idle process CPU for nothing
(docs/benchmarks.md#orchestrator_throughput: a look per second was a third of an idle
orchestrator's CPU), so the looks are seconds apart and a job queued here is not kept waiting
for one."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Final

#: Seconds between an idle runner's looks at the database.
IDLE_LOOK_SECONDS: Final = 5.0


class Wakeup:
    """Shared by a runner's workers. A worker calls `arm` before each look at the database and
    `wait` when the look found nothing; `ring` ends every wait in progress and the next one.
    A job queued after a worker's `arm` therefore either is seen by that worker's look or
    rings before its `wait`: none is left for the next look."""

    def __init__(self) -> None:
        self._rung = asyncio.Event()

    def ring(self) -> None:
        """Work was queued through this process."""
        self._rung.set()

    def arm(self) -> None:
        self._rung.clear()

    async def wait(self, seconds: float) -> None:
        """Until `ring` or `seconds`, whichever is first."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._rung.wait(), seconds)
