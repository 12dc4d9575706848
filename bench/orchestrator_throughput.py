"""Throughput and CPU per Run: 64 concurrent callers issuing Runs back to back
against the orchestrator as its own process(es), the scripted model server answering after
50 ms and the scripted retrieval service in this process. One run compares

- before: the model client on aiohttp directly (shared.http before it moved onto httpx's API;
  a copy in bench/_orchestrator_variant.py), the rest as shipped,
- after: `python -m orchestrator_service` as shipped (shared.http on httpx over
  httpx-aiohttp's transport, uvloop, `settle_heap`), 1 and 2 workers,
- the shipped client under asyncio's loop and CPython's garbage-collector defaults, and under
  uvloop with those defaults (what uvloop and `settle_heap` save),

on the fast path (1 model call per Run) and a model-classified question (2 calls). Ratio =
runs/s ÷ the ideal 64 ÷ per-run model time (≥ 0.8 wanted); CPU ms/run is the orchestrator's
(all its processes), "bench CPU" this process's (callers + fakes), which shares the machine.
Callers spread over 32 channels, each its own connection: SO_REUSEPORT balances connections.

`python -m bench.orchestrator_throughput --against COMMIT [--rounds N] [--seconds S]` compares
instead the shipped service of an older commit (`git archive` into a temp folder, its protos
generated there, run on this venv with cwd and PYTHONPATH at that tree) with this tree's, one
worker each, both running side by side: per case, N pairs of S-second windows (default 12 of
3 s) whose order alternates, and prints both trees' medians, their ratio and the median of the
pairs' ratios."""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from supermew.v1 import orchestrator_pb2, orchestrator_pb2_grpc

from bench._orchestrator_rig import ROOT, fakes, process_cpu_seconds
from tests.fakes.model_server import FakeModelServer, ModelScript, complexity, grade
from tests.fakes.retrieval_servicer import FakeRetrieval, RetrievalScript, chunk

CONCURRENCY, CHANNELS, LATENCY, SECONDS, TARGET = 64, 32, 0.050, 6.0, 0.8
DOCS = [chunk("roles.md", "1", "丹瑾：衍射属性。")]
# (label, question, model round trips per run)
CASES = [
    ("fast path (1 call)", "丹瑾是什么属性？", 1),
    ("model-classified (2 calls)", "请介绍一下公司年假制度里面关于新员工的具体规定内容", 2),
]
VARIANT = ["-m", "bench._orchestrator_variant"]
BEFORE, AFTER = "before: aiohttp client", "after: shipped (httpx)"
AS_IS, ASYNCIO, TWO = "after, uvloop, GC as is", "after, asyncio, GC as is", "after, 2 workers"
# (label, command after the interpreter, workers). Before and after run twice, in ABBA order,
# so that load from elsewhere on the machine drifting during the run weighs on both alike;
# their ratios below compare the means.
VARIANTS = [
    (BEFORE, [*VARIANT, "aiohttp", "uvloop", "settled"], 1),
    (AFTER, ["-m", "orchestrator_service"], 1),
    (AFTER, ["-m", "orchestrator_service"], 1),
    (BEFORE, [*VARIANT, "aiohttp", "uvloop", "settled"], 1),
    (AS_IS, [*VARIANT, "shared", "uvloop", "as-is"], 1),
    (ASYNCIO, [*VARIANT, "shared", "asyncio", "as-is"], 1),
    (TWO, ["-m", "orchestrator_service"], 2),
]


def _script() -> tuple[ModelScript, RetrievalScript]:
    ms = ModelScript()
    ms.fallback = lambda task, q: (
        complexity("simple", "单一")
        if task == "complexity_classification"
        else grade("strong", "sufficient", "answer")
    )
    rs = RetrievalScript()
    for _, question, _ in CASES:
        rs.add(question, DOCS)
    return ms, rs


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _family(pid: int) -> list[int]:
    """`pid` and its descendants (the workers a supervisor spawned)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(children.get(current, []))
    return found


def _listeners(port: int) -> int:
    """Sockets listening on `port` (Linux /proc/net/tcp and tcp6, state 0A): gRPC binds
    127.0.0.1 as the IPv4-mapped IPv6 address."""
    count = 0
    for table in ("tcp", "tcp6"):
        for row in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            fields = row.split()
            count += int(fields[1].endswith(f":{port:04X}") and fields[3] == "0A")
    return count


@dataclass
class Target:
    stubs: list[orchestrator_pb2_grpc.OrchestratorServiceStub]
    pids: list[int]

    def cpu_seconds(self) -> float:
        total = 0.0
        for pid in self.pids:
            try:
                total += process_cpu_seconds(pid)
            except OSError:
                continue
        return total


@asynccontextmanager
async def _service(
    command: list[str],
    workers: int,
    model: FakeModelServer,
    retrieval: FakeRetrieval,
    root: Path = ROOT,
) -> AsyncIterator[Target]:
    """The orchestrator of the tree at `root` (this one by default) as its own process(es)."""
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AUTH_", "LLM_", "TLS_"))}
    env.update(
        ORCHESTRATOR_PORT=str(port),
        ORCHESTRATOR_WORKERS=str(workers),
        RETRIEVAL_ADDR=retrieval.address,
        LLM_BASE_URL=model.base_url,
        LLM_API_KEY="bench-key",
        MODEL="bench-model",
        LOG_LEVEL="WARNING",
        BIND_HOST="127.0.0.1",
        PYTHONPATH=os.pathsep.join([str(root), str(root / "gen"), env.get("PYTHONPATH", "")]),
    )
    proc = await asyncio.create_subprocess_exec(sys.executable, *command, cwd=root, env=env)
    channels = [
        grpc.aio.insecure_channel(
            f"127.0.0.1:{port}", options=[("grpc.use_local_subchannel_pool", 1)]
        )
        for _ in range(CHANNELS)
    ]
    try:
        health = health_pb2_grpc.HealthStub(channels[0])
        for _ in range(1200):
            if proc.returncode is not None:
                raise RuntimeError(f"orchestrator exited with {proc.returncode}")
            # Every worker listening before any caller connects, or the kernel would hand
            # every connection to the first one up.
            if _listeners(port) == workers:
                try:
                    reply = await health.Check(  # type: ignore[attr-defined]  # sync-only stubs
                        health_pb2.HealthCheckRequest(), timeout=0.5
                    )
                    if reply.status == health_pb2.HealthCheckResponse.SERVING:
                        break
                except grpc.aio.AioRpcError:
                    pass
            await asyncio.sleep(0.1)
        else:
            raise RuntimeError("the orchestrator did not start serving")
        stubs = [orchestrator_pb2_grpc.OrchestratorServiceStub(c) for c in channels]
        yield Target(stubs, _family(proc.pid))
    finally:
        for channel in channels:
            await channel.close()
        if proc.returncode is None:
            proc.terminate()
            await proc.wait()


async def _closed_loop(target: Target, question: str, seconds: float) -> tuple[int, float]:
    """CONCURRENCY callers over the channels, each issuing Runs back to back for `seconds`."""
    done = 0
    stop_at = time.perf_counter() + seconds

    async def caller(index: int) -> None:
        nonlocal done
        stub = target.stubs[index % len(target.stubs)]
        request = orchestrator_pb2.RunRequest(question=question)
        while time.perf_counter() < stop_at:
            result = await stub.Run(request, timeout=30)
            assert result.route == "answer", result.route
            done += 1

    started = time.perf_counter()
    await asyncio.gather(*(caller(i) for i in range(CONCURRENCY)))
    return done, time.perf_counter() - started


Row = tuple[str, str, float, float, float, float]


async def _window(
    target: Target, name: str, label: str, question: str, trips: int, seconds: float
) -> Row:
    """One measured window of one case on one running service."""
    server_cpu, own_cpu = target.cpu_seconds(), process_cpu_seconds(os.getpid())
    done, wall = await _closed_loop(target, question, seconds)
    server_ms = (target.cpu_seconds() - server_cpu) * 1000 / done
    own_ms = (process_cpu_seconds(os.getpid()) - own_cpu) * 1000 / done
    return (name, label, done / wall, CONCURRENCY / (trips * LATENCY), server_ms, own_ms)


async def _measure(target: Target, variant: str) -> list[Row]:
    """One row per case: runs/s, the ideal, and the orchestrator's and this process's CPU."""
    rows: list[Row] = []
    for label, question, trips in CASES:
        # Warm-up: every channel connected, every worker past its first Runs.
        await _closed_loop(target, question, 1.5)
        rows.append(await _window(target, variant, label, question, trips, SECONDS))
    return rows


async def _run() -> list[Row]:
    rows: list[Row] = []
    ms, rs = _script()
    async with fakes(ms, rs, model_delay=LATENCY) as (model, retrieval):
        for variant, command, workers in VARIANTS:
            async with _service(command, workers, model, retrieval) as target:
                rows.extend(await _measure(target, variant))
    return rows


# ---- an older commit against this tree ------------------------------------------------------


_IMPORT_PROBE = (
    "import orchestrator_service, shared, supermew.v1.orchestrator_pb2 as o; "
    "print(orchestrator_service.__file__, shared.__file__, o.__file__)"
)


@contextmanager
def _commit_tree(commit: str) -> Iterator[Path]:
    """`git archive <commit>` unpacked into a temp folder with its protos generated into
    `gen/` (no worktree metadata to clean up); checks that a process there imports that
    tree's code, not this checkout's (the venv's editable install points here)."""
    with tempfile.TemporaryDirectory(prefix="bench-orch-baseline-") as folder:
        tree = Path(folder)
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", "--format=tar", commit],
            check=True,
            capture_output=True,
        ).stdout
        subprocess.run(["tar", "-x", "-C", folder], input=archive, check=True)
        (tree / "gen").mkdir()
        # The project's own protos, as `make proto` compiles them: the vendored google ones
        # are googleapis-common-protos' to import, and a second copy in `gen/` clashes with it.
        protos = sorted(
            str(p.relative_to(tree / "protos")) for p in tree.glob("protos/supermew/v1/*.proto")
        )
        subprocess.run(
            [sys.executable, "-m", "grpc_tools.protoc", "-Iprotos", "--python_out=gen",
             "--grpc_python_out=gen", *protos],
            cwd=tree,
            check=True,
        )  # fmt: skip
        probe = subprocess.run(
            [sys.executable, "-c", _IMPORT_PROBE],
            cwd=tree,
            env={**os.environ, "PYTHONPATH": os.pathsep.join([folder, str(tree / "gen")])},
            check=True,
            capture_output=True,
            text=True,
        ).stdout.split()
        outside = [f for f in probe if not Path(f).resolve().is_relative_to(tree.resolve())]
        assert not outside, f"{commit}: imported {outside}, outside {tree}"
        yield tree


async def _compare(commit: str, rounds: int, seconds: float) -> dict[str, list[Row]]:
    """Both trees' shipped service running side by side, one worker each, warmed once; per
    case, `rounds` pairs of measured windows, the order alternating pair by pair (ABBA…), so
    that load drifting on the machine weighs on both alike and no round pays a start-up."""
    ms, rs = _script()
    before, after = f"before: {commit}", "after: this tree"
    rows: dict[str, list[Row]] = {before: [], after: []}
    command = ["-m", "orchestrator_service"]
    with _commit_tree(commit) as old:
        async with (
            fakes(ms, rs, model_delay=LATENCY) as (model, retrieval),
            _service(command, 1, model, retrieval, old) as old_target,
            _service(command, 1, model, retrieval, ROOT) as new_target,
        ):
            targets = {before: old_target, after: new_target}
            for label, question, trips in CASES:
                for target in targets.values():  # every channel connected, past first Runs
                    await _closed_loop(target, question, 1.5)
                for index in range(rounds):
                    for name in (before, after) if index % 2 == 0 else (after, before):
                        row = await _window(targets[name], name, label, question, trips, seconds)
                        rows[name].append(row)
                        print(f"pair {index + 1:>2} {name:<22} {label:<27} {row[4]:6.2f} "
                              f"ms/run {row[2]:6.1f} runs/s", flush=True)  # fmt: skip
    return rows


def _report_comparison(commit: str, rows: dict[str, list[Row]], seconds: float) -> None:
    before, after = rows
    print(
        f"\n{CONCURRENCY} concurrent callers over {CHANNELS} channels, model latency "
        f"{LATENCY * 1000:.0f} ms, {seconds:.0f} s windows, {os.cpu_count()} cores, load average "
        f"{os.getloadavg()[0]:.1f} at the end; medians over the windows"
    )
    for label, _, _ in CASES:

        def median(name: str, column: int, label: str = label) -> float:
            return statistics.median(float(r[column]) for r in rows[name] if r[1] == label)

        old_ms, new_ms = median(before, 4), median(after, 4)
        pairs = [
            b[4] / a[4]
            for a, b in zip(
                (r for r in rows[before] if r[1] == label),
                (r for r in rows[after] if r[1] == label),
                strict=True,
            )
        ]
        low, high = _median_interval(pairs)
        print(
            f"  {label}: orchestrator CPU/run {old_ms:.2f} ({commit}) → {new_ms:.2f} ms (this "
            f"tree), ×{new_ms / old_ms:.3f}; median of the pairs' ratios "
            f"×{statistics.median(pairs):.3f}, 95 % interval ×{low:.3f}–×{high:.3f} (pairs "
            f"×{min(pairs):.2f}–×{max(pairs):.2f}); runs/s {median(before, 2):.0f} → "
            f"{median(after, 2):.0f}"
        )


def _median_interval(values: list[float], resamples: int = 2000) -> tuple[float, float]:
    """A 95 % percentile-bootstrap interval of the median (seeded, so a report repeats)."""
    draw = random.Random(0)
    medians = sorted(
        statistics.median(draw.choices(values, k=len(values))) for _ in range(resamples)
    )
    return medians[int(0.025 * resamples)], medians[int(0.975 * resamples) - 1]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.orchestrator_throughput")
    parser.add_argument("--against", metavar="COMMIT", help="compare with this older commit")
    parser.add_argument(
        "--rounds", type=int, default=12, help="--against: window pairs per case (default 12)"
    )
    parser.add_argument(
        "--seconds", type=float, default=3.0, help="--against: seconds per window (default 3)"
    )
    args = parser.parse_args(argv or [])
    if args.against:
        compared = asyncio.run(_compare(args.against, args.rounds, args.seconds))
        _report_comparison(args.against, compared, args.seconds)
        return
    rows = asyncio.run(_run())
    load = os.getloadavg()[0]
    print(
        f"{CONCURRENCY} concurrent callers over {CHANNELS} channels, model latency "
        f"{LATENCY * 1000:.0f} ms, {SECONDS:.0f} s per case, {os.cpu_count()} cores, "
        f"load average {load:.1f} at the end"
    )
    head = ("variant", "case", "runs/s", "ideal", "ratio", "orch CPU ms/run", "bench CPU ms")
    print(f"{head[0]:<26} {head[1]:<27} {head[2]:>7} {head[3]:>6} {head[4]:>5} {head[5]:>15} "
          f"{head[6]:>12}")  # fmt: skip
    for variant, label, achieved, ideal, server_ms, own_ms in rows:
        print(
            f"{variant:<26} {label:<27} {achieved:>7.1f} {ideal:>6.0f} {achieved / ideal:>5.2f} "
            f"{server_ms:>15.2f} {own_ms:>12.2f}"
        )

    def mean(variant: str, case: str, column: int) -> float:
        values = [float(row[column]) for row in rows if row[0] == variant and row[1] == case]
        return sum(values) / len(values)

    rate, cpu = 2, 4  # columns of a Row
    print("\nratios (of the means where a variant ran twice):")
    for case, _, _ in CASES:
        before, after = mean(BEFORE, case, cpu), mean(AFTER, case, cpu)
        speed = mean(AFTER, case, rate) / mean(BEFORE, case, rate)
        print(
            f"  after ÷ before, {case}: CPU/run {before:.2f} → {after:.2f} ms, "
            f"×{after / before:.2f} (target ≤ ×1.10); runs/s ×{speed:.2f}"
        )
    for case, _, _ in CASES:
        gc = mean(AFTER, case, cpu) / mean(AS_IS, case, cpu)
        loop = mean(AS_IS, case, cpu) / mean(ASYNCIO, case, cpu)
        workers = mean(TWO, case, rate) / mean(AFTER, case, rate)
        print(
            f"  {case}: GC settings (after ÷ GC as is) CPU/run ×{gc:.2f}; uvloop ÷ asyncio "
            f"CPU/run ×{loop:.2f}; 2 workers ÷ 1 runs/s ×{workers:.2f}"
        )
    print(
        f"targets: fast path ≤ 2.5 ms and 2 calls ≤ 3.5 ms of orchestrator CPU per Run; ratio "
        f"≥ {TARGET}; 2 workers ≥ ×1.7 the runs/s of one on 2 idle cores (this process's "
        "callers and fakes use a core too: see 'bench CPU')."
    )


if __name__ == "__main__":
    main(sys.argv[1:])
