"""The store's seal gate (`retrieval_service.adapters.milvus.connection.SealGate`): a seal
waits for the calls in flight, holds new calls back until it ends, and calls never wait for
each other."""

from __future__ import annotations

import asyncio

from retrieval_service.adapters.milvus.connection import SealGate


async def test_a_seal_waits_for_calls_in_flight_and_holds_new_ones_back() -> None:
    gate = SealGate()
    events: list[str] = []
    release_call = asyncio.Event()
    release_seal = asyncio.Event()

    async def call(name: str, release: asyncio.Event | None = None) -> None:
        async with gate.call():
            events.append(f"{name} in")
            if release is not None:
                await release.wait()
            events.append(f"{name} out")

    async def seal() -> None:
        async with gate.seal():
            events.append("seal in")
            await release_seal.wait()
            events.append("seal out")

    first = asyncio.ensure_future(call("first", release_call))
    other = asyncio.ensure_future(call("other"))  # calls do not wait for each other
    await asyncio.sleep(0)
    sealing = asyncio.ensure_future(seal())
    await asyncio.sleep(0)
    late = asyncio.ensure_future(call("late"))
    await asyncio.sleep(0.01)
    assert events == ["first in", "other in", "other out"]  # the seal waits for `first`
    release_call.set()
    await asyncio.sleep(0.01)
    assert events[3:] == ["first out", "seal in"]  # and `late` waits for the seal
    release_seal.set()
    await asyncio.gather(first, other, sealing, late)
    assert events[5:] == ["seal out", "late in", "late out"]


async def test_a_cancelled_call_does_not_leave_the_gate_shut() -> None:
    gate = SealGate()
    stuck = asyncio.Event()

    async def call() -> None:
        async with gate.call():
            await stuck.wait()

    task = asyncio.ensure_future(call())
    await asyncio.sleep(0)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    async with asyncio.timeout(1), gate.seal():
        pass
    async with asyncio.timeout(1), gate.call():
        pass
