"""The drain of a server's shutdown as the work it waits for sees it (docs/api.md#servers):
background work — an ingest, an import job — runs as a `job`, which the drain waits for during
the grace period; when the grace ends, `stop_requested` turns true and each job stops at its
next safe point (between documents or write batches) with `ShuttingDown`. The serve helper
drives it (`GrpcServer.stop`); the composition root passes the same object to the ingestor and
to background workers."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import AsyncIterator

from shared.errors import ShuttingDown

log = logging.getLogger(__name__)

#: After the grace, how long jobs told to stop have to reach their next safe point and end
#: (one write batch and the removal of what they had not committed); the server cancels what
#: is still running after it. Deployments give terminationGracePeriodSeconds above the
#: preStop sleep + SHUTDOWN_GRACE_SECONDS + this.
STOP_MARGIN_SECONDS = 5.0


class Draining:
    """Jobs in flight and the shutdown's two instants: the drain has `begun` (SIGTERM: finish
    what runs, start nothing new that outlives the grace) and the stop is requested (the grace
    is over: stop at the next safe point). One per process, on its event loop."""

    def __init__(self) -> None:
        self._jobs: Counter[str] = Counter()
        self._idle = asyncio.Event()
        self._idle.set()
        self._stop = asyncio.Event()
        self.begun = False

    @property
    def stop_requested(self) -> bool:
        return self._stop.is_set()

    @property
    def in_flight(self) -> dict[str, int]:
        """Jobs running, by name."""
        return {name: n for name, n in self._jobs.items() if n}

    @contextlib.asynccontextmanager
    async def job(self, name: str) -> AsyncIterator[None]:
        """Runs the block as a job the drain waits for; `name` says what it is in the log."""
        self._jobs[name] += 1
        self._idle.clear()
        try:
            yield
        finally:
            self._jobs[name] -= 1
            if not any(self._jobs.values()):
                self._idle.set()

    def check(self) -> None:
        """Raises ShuttingDown once the stop is requested: a job calls it at each safe point."""
        if self._stop.is_set():
            raise ShuttingDown()

    def request_stop(self) -> None:
        """Asks every job to stop at its next safe point (the grace is over)."""
        self._stop.set()

    async def stopped(self) -> None:
        """Returns when the stop is requested (to wait on beside the job's own work)."""
        await self._stop.wait()

    async def drain(self, grace: float, margin: float = STOP_MARGIN_SECONDS) -> bool:
        """Waits up to `grace` seconds for every job to end, then requests the stop and waits
        up to `margin` more for the jobs to reach their safe points. Returns whether every job
        ended."""
        self.begun = True
        if await self._idle_within(grace):
            return True
        log.warning("the grace ended with %s still running; stopping them", self.in_flight)
        self.request_stop()
        if await self._idle_within(margin):
            return True
        log.error("%s did not stop within %.1fs after the grace", self.in_flight, margin)
        return False

    async def _idle_within(self, seconds: float) -> bool:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._idle.wait(), timeout=seconds)
        return self._idle.is_set()
