"""`shared.wakeup.Wakeup`: the idle wait of the job runners (imports, index builds, evaluation
runs) ends at a ring or at its timeout, and no ring between a worker's `arm` and its `wait` is
lost."""

from __future__ import annotations

import asyncio

from shared.wakeup import Wakeup

LONG = 600.0


async def test_without_a_ring_the_wait_ends_at_its_timeout() -> None:
    wakeup = Wakeup()
    wakeup.arm()
    loop = asyncio.get_running_loop()
    start = loop.time()
    await wakeup.wait(0.05)
    assert loop.time() - start >= 0.04


async def test_a_ring_after_arm_and_before_wait_is_not_lost() -> None:
    # A job queued while the worker was looking (after arm): the wait that follows ends at once.
    wakeup = Wakeup()
    wakeup.arm()
    wakeup.ring()
    await asyncio.wait_for(wakeup.wait(LONG), 1.0)


async def test_arm_forgets_a_ring_the_next_look_covers() -> None:
    wakeup = Wakeup()
    wakeup.ring()
    wakeup.arm()
    waiting = asyncio.create_task(wakeup.wait(LONG))
    await asyncio.sleep(0.05)
    assert not waiting.done()
    waiting.cancel()


async def test_a_ring_ends_every_wait_in_progress() -> None:
    # Shared by a runner's workers: each idle one looks again, and one of them claims the job.
    wakeup = Wakeup()
    wakeup.arm()
    waits = [asyncio.create_task(wakeup.wait(LONG)) for _ in range(3)]
    await asyncio.sleep(0.02)
    assert not any(w.done() for w in waits)
    wakeup.ring()
    await asyncio.wait_for(asyncio.gather(*waits), 1.0)
