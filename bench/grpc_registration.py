"""What registering a server's methods with gRPC's core costs each call: one grpc.aio server
in this process serving a unary echo among 30 methods, either all 30 registered with the core
(what the generated `add_*_to_server` functions do) or only the echo's service registered and
the rest found by name (what `shared.serve` does for every service but the server's own), and
64 callers over 8 channels in the same process. CPU µs per call (client and server), rounds
alternating, and the ratio of the medians.

The aio server keeps one call request pending per registered method and, after each call
arrives, waits on all of them again; the figure is that wait's share of a call."""

from __future__ import annotations

import argparse
import asyncio
import resource
import statistics
import sys
from typing import Any

import grpc
import uvloop

METHODS, CHANNELS, CALLERS = 30, 8, 64


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _echo(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
    return request


async def _server(register_all: bool) -> tuple[grpc.aio.Server, int]:
    handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {
        f"Method{i}": grpc.unary_unary_rpc_method_handler(_echo) for i in range(METHODS - 1)
    } | {"Echo": grpc.unary_unary_rpc_method_handler(_echo)}
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("b.Bench", handlers),))
    registered = handlers if register_all else {"Echo": handlers["Echo"]}
    server.add_registered_method_handlers("b.Bench", registered)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, port


async def _round(register_all: bool, calls: int) -> float:
    """CPU µs per call over `calls` echo calls, after a warm-up."""
    server, port = await _server(register_all)
    channels = [
        grpc.aio.insecure_channel(
            f"127.0.0.1:{port}", options=[("grpc.use_local_subchannel_pool", 1)]
        )
        for _ in range(CHANNELS)
    ]
    echo: list[grpc.aio.UnaryUnaryMultiCallable[bytes, bytes]] = [
        channel.unary_unary("/b.Bench/Echo") for channel in channels
    ]

    async def caller(index: int, count: int) -> None:
        for _ in range(count):
            await echo[index % CHANNELS](b"x" * 100)

    try:
        await asyncio.gather(*(caller(i, 20) for i in range(CALLERS)))
        each = calls // CALLERS
        started = _cpu_seconds()
        await asyncio.gather(*(caller(i, each) for i in range(CALLERS)))
        return (_cpu_seconds() - started) / (each * CALLERS) * 1e6
    finally:
        for channel in channels:
            await channel.close()
        await server.stop(None)


async def _run(rounds: int, calls: int) -> dict[bool, list[float]]:
    measured: dict[bool, list[float]] = {True: [], False: []}
    for index in range(rounds):
        for register_all in (True, False) if index % 2 == 0 else (False, True):
            measured[register_all].append(await _round(register_all, calls))
    return measured


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.grpc_registration")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--calls", type=int, default=6000, help="calls per round")
    args = parser.parse_args(argv or [])
    measured = uvloop.run(_run(args.rounds, args.calls))
    every, own = measured[True], measured[False]
    print(f"{CALLERS} callers, {CHANNELS} channels, {args.rounds} rounds of {args.calls} calls")
    print(f"  all {METHODS} methods registered: {statistics.median(every):.1f} µs of CPU per call")
    print(f"  the echo's only (the rest by name): {statistics.median(own):.1f} µs per call")
    ratios = ", ".join(f"×{a / b:.2f}" for a, b in zip(every, own, strict=True))
    print(
        f"  ratio of the medians ×{statistics.median(every) / statistics.median(own):.3f} "
        f"(per round {ratios})"
    )


if __name__ == "__main__":
    main(sys.argv[1:])
