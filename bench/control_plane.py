"""Control plane before and after, in one run: the retrieval service of commit 6c61147, whose
knowledge bases and document registry were Milvus collections, against the working tree's, where
they are SQL tables (SQLite beside the Milvus Lite file by default; PostgreSQL as a third column
when tests/postgres.py can start a throwaway server here).

Each variant is a real `python -m retrieval_service` process on its own scratch Milvus Lite
store, measured through gRPC only, so both trees are measured alike. The baseline tree is
`git archive 6c61147` unpacked into a temp folder (removed at the end); every tree runs on this
venv's interpreter with cwd and PYTHONPATH at the tree, and the bench checks first that
`retrieval_service` and `shared` then import from that tree (the venv's editable install points
at this checkout) and that only the working tree has `retrieval_service.adapters.sql`. One
OpenAI-compatible embeddings fake (tests/fakes/embeddings_server.py, dim 64, in its own process)
serves every variant; no rerank, no auth. Before each measurement the bench waits until every
service process and its Milvus Lite child are idle (their CPU from /proc), since Lite builds
indexes in the background after each flush.

Measures, sizes as run by `make bench BENCH=control_plane` (the flags below change them):
(a) IngestDocuments of 200 distinct text documents (1–3 leaves each, 400 leaves in all) as 4
    requests of 50 into a new knowledge base, wall time; 5 repetitions per variant, each on a
    new knowledge base, variants interleaved (order rotated each repetition); the median.
(b) ListKnowledgeBases, page_size 1000: the 201 knowledge bases of the store of (c) (its 200
    and the default one) with their document and chunk counts, in one page; p50 over 50 calls
    per variant after 2 warm-up ones, interleaved. A variant stops being called once it has 5
    timings and has spent 60 s: the baseline takes 10–16 s a call there.
(c) Retrieve in a 100-document knowledge base (300 leaves) of a store of 200 knowledge bases
    and ≈ 20,000 leaves (kb-001…kb-199 hold 33 three-leaf documents each), built through
    IngestDocuments, one request per knowledge base (the build time is printed: ≈ 100 s per
    variant here, so the full size is kept); 100 queries after 5 warm-up ones, the variants
    interleaved query by query; p50.
(d) `python -m retrieval_service sync` of a 1,000-file folder (one short Markdown note each)
    whose files the knowledge base already holds, the CLI as a process of the variant's own
    tree; the embeddings fake's count of texts embedded must not move during it, and the sync
    must find all 1,000 unchanged. 3 syncs per variant, interleaved; the median. The knowledge
    base is filled first with the requests a first sync sends, in IngestDocuments calls of 50
    (`--first-sync-cli`: by a first sync itself, one file a call, ≈ 100 s more per variant).

Wanted: (a) after ÷ before ≤ 1.05; (b) after p50 ≤ 50 ms; (c) after ÷ before ≤ 1.1; (d) ≤ 10 s
and nothing embedded. (a) and (d) run on one set of fresh stores, (b) and (c) on another.
About 10 minutes on 2 cores with the PostgreSQL column (`--no-postgres` leaves it out).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import grpc
import numpy as np
from google.protobuf.struct_pb2 import Struct
from supermew.v1 import retrieval_pb2, retrieval_pb2_grpc

from bench._retrieval_rig import p50_p95, table
from bench.retrieval_latency import zipf_words

ROOT = Path(__file__).resolve().parents[1]
BASELINE = "6c61147"
DIM = 64
SERVING_LINE = re.compile(rb"serving \S*RetrievalService[^\n]*? on 127\.0\.0\.1:(\d+)")
START_SECONDS = 120.0
# The environment a service gets from this process; everything else it is given explicitly
# (the service reads its settings from the environment, so nothing of the caller's may leak).
KEPT_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "TZ")
CHARS_PER_LEAF = 700  # the service's leaves are ≤ 800 characters (CHUNK_SIZE)
TARGET = "kb-000"
# (b): a variant stops being called once it has LIST_MIN_CALLS timings and spent this long
# (the baseline takes 10–16 s a call on the 200-knowledge-base store).
LIST_MIN_CALLS = 5
LIST_BUDGET_MS = 60_000.0


# ---- trees and processes ---------------------------------------------------------------------


@dataclass(frozen=True)
class Tree:
    name: str  # "before" | "after"
    path: Path


@contextmanager
def baseline_tree(commit: str) -> Iterator[Tree]:
    """`git archive <commit>` unpacked into a temp folder: no worktree metadata to clean up."""
    folder = Path(tempfile.mkdtemp(prefix="bench-cp-baseline-"))
    try:
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", "--format=tar", commit],
            check=True,
            capture_output=True,
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
        yield Tree("before", folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def tree_env(tree: Tree, **values: str) -> dict[str, str]:
    env = {k: os.environ[k] for k in KEPT_ENV if k in os.environ}
    env.update(PYTHONPATH=str(tree.path), PYTHONDONTWRITEBYTECODE="1", **values)
    return env


def check_imports(tree: Tree) -> str:
    """Asserts that a process of `tree`'s environment imports the tree's own code (the venv's
    editable install would otherwise hand it this checkout's) and that only the working tree
    has the SQL control plane; returns where `retrieval_service` came from."""
    probe = (
        "import importlib.util, json, retrieval_service, shared; print(json.dumps(["
        "retrieval_service.__file__, shared.__file__, "
        "importlib.util.find_spec('retrieval_service.adapters.sql') is not None]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=tree.path,
        env=tree_env(tree),
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    service_file, shared_file, has_sql = json.loads(out.strip().splitlines()[-1])
    for imported in (service_file, shared_file):
        assert Path(imported).resolve().is_relative_to(tree.path.resolve()), (
            f"{tree.name}: imported {imported}, outside {tree.path}"
        )
    assert has_sql == (tree.name == "after"), f"{tree.name}: SQL control plane {has_sql}"
    return str(Path(service_file).parent)


def process_tree(root: int) -> list[int]:
    """`root` and its descendants (from /proc)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += children.get(pid, [])
    return out


def cpu_seconds(pids: Sequence[int]) -> float:
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime + stime
    return total / tick


@dataclass
class Service:
    label: str
    tree: Tree
    proc: subprocess.Popen[bytes]
    port: int
    log: Path
    channel: grpc.aio.Channel
    stub: retrieval_pb2_grpc.RetrievalServiceStub

    def pids(self) -> list[int]:
        return process_tree(self.proc.pid)


@dataclass
class Variant:
    label: str
    tree: Tree
    database: Callable[[str], str] | None = None  # store name → DATABASE_URL; None = default


@asynccontextmanager
async def spawned(
    variant: Variant, scratch: Path, embeddings_url: str, store: str
) -> AsyncIterator[Service]:
    """`python -m retrieval_service` of `variant`'s tree on a fresh Milvus Lite file in
    `scratch`, on 127.0.0.1 port 0 (read from its log, as tests/integration/retrieval_harness
    does); stopped with SIGTERM on exit."""
    folder = scratch / f"{store}-{re.sub(r'[^a-z]+', '-', variant.label.lower()).strip('-')}"
    folder.mkdir(parents=True)
    log = folder / "service.log"
    values = {
        "MILVUS_URI": str(folder / "kb.db"),
        "EMBEDDING_BASE_URL": embeddings_url,
        "EMBEDDING_MODEL": "fake",
        "EMBEDDING_DIM": str(DIM),
        "EMBEDDING_API_KEY": "bench",
        "SAMPLES_DIR": "",
        "RETRIEVAL_PORT": "0",
        "BIND_HOST": "127.0.0.1",
        "LOG_LEVEL": "INFO",
    }
    if variant.database is not None:
        values["DATABASE_URL"] = variant.database(store)
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "retrieval_service"],
            cwd=variant.tree.path,
            env=tree_env(variant.tree, **values),
            stdout=out,
            stderr=out,
        )
    try:
        deadline = time.monotonic() + START_SECONDS
        while not (found := SERVING_LINE.search(log.read_bytes())):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{variant.label} did not start:\n{log.read_text()[-3000:]}")
            await asyncio.sleep(0.1)
        port = int(found[1])
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
        try:
            stub = retrieval_pb2_grpc.RetrievalServiceStub(channel)
            yield Service(variant.label, variant.tree, proc, port, log, channel, stub)
        finally:
            await channel.close()
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                await asyncio.to_thread(proc.wait, 60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


async def wait_idle(services: Sequence[Service], max_seconds: float = 180.0) -> float:
    """Waits until every service and its Lite child together use < 0.1 core over a second
    (Milvus Lite indexes and compacts in the background after a flush); returns the wait."""
    started = time.monotonic()
    while time.monotonic() - started < max_seconds:
        pids = [pid for s in services for pid in s.pids()]
        cpu, wall = cpu_seconds(pids), time.monotonic()
        await asyncio.sleep(1.0)
        if (cpu_seconds(pids) - cpu) / (time.monotonic() - wall) < 0.1:
            break
    return time.monotonic() - started


# ---- the embeddings fake ---------------------------------------------------------------------


@dataclass
class Embeddings:
    proc: subprocess.Popen[str]
    port: int

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def texts_embedded(self) -> int:
        with urllib.request.urlopen(f"{self.base_url}/stats", timeout=10) as reply:
            return int(json.load(reply)["texts_embedded"])


@contextmanager
def embeddings_fake() -> Iterator[Embeddings]:
    """tests/fakes/embeddings_server.py in its own process (its JSON and vector work then takes
    no CPU from this process's timing); it exits when its stdin closes."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.fakes.embeddings_server", "--dim", str(DIM)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line.startswith("port "):
            raise RuntimeError(f"embeddings fake: {line!r}")
        yield Embeddings(proc, int(line.split()[1]))
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# ---- documents -------------------------------------------------------------------------------


def paragraphs(rng: np.random.Generator, leaves: int, head: str) -> str:
    """A text of `leaves` paragraphs of ≈ CHARS_PER_LEAF characters of Zipf-distributed words,
    each paragraph starting with `head` (a document's own words, for queries to find)."""
    out = []
    for _ in range(leaves):
        words = [f"w{w}" for w in zipf_words(rng, CHARS_PER_LEAF // 6)]
        out.append(f"{head} " + " ".join(words))
    return "\n\n".join(out)


def text_document(name: str, text: str) -> retrieval_pb2.SourceDocument:
    return retrieval_pb2.SourceDocument(filename=f"{name}.txt", content=text.encode())


def ingest_set(count: int) -> list[retrieval_pb2.SourceDocument]:
    """(a)'s documents: `count` distinct texts of 1–3 paragraphs."""
    rng = np.random.default_rng(5)
    return [
        text_document(f"note{i:04d}", paragraphs(rng, 1 + i % 3, f"note{i}")) for i in range(count)
    ]


def kb_documents(
    rng: np.random.Generator, kb: str, count: int, leaves: int
) -> list[retrieval_pb2.SourceDocument]:
    """`count` documents of `leaves` paragraphs each; document i of kb-000 repeats the words
    kb000d{i}a and kb000d{i}b in each paragraph."""
    tag = kb.replace("-", "")
    return [
        text_document(f"d{i:05d}", paragraphs(rng, leaves, f"{tag}d{i}a {tag}d{i}b"))
        for i in range(count)
    ]


async def ingest(
    svc: Service, documents: Sequence[retrieval_pb2.SourceDocument], kb: str, per_call: int
) -> int:
    """IngestDocuments in calls of `per_call` documents; returns the leaves written."""
    leaves = 0
    for start in range(0, len(documents), per_call):
        reply = await svc.stub.IngestDocuments(
            retrieval_pb2.IngestDocumentsRequest(
                documents=documents[start : start + per_call],
                knowledge_base=f"knowledge_bases/{kb}",
            ),
            timeout=600,
        )
        leaves += sum(d.l3_chunks for d in reply.documents)
    return leaves


async def create_kb(svc: Service, kb: str) -> None:
    await svc.stub.CreateKnowledgeBase(
        retrieval_pb2.CreateKnowledgeBaseRequest(knowledge_base_id=kb), timeout=60
    )


def rotated(items: Sequence[Any], by: int) -> list[Any]:
    by %= len(items)
    return [*items[by:], *items[:by]]


# ---- the measures ----------------------------------------------------------------------------


@dataclass
class Results:
    """label → value per measure (ms or s), and notes printed under the table."""

    ingest_s: dict[str, float] = field(default_factory=dict)
    list_ms: dict[str, float] = field(default_factory=dict)
    retrieve_ms: dict[str, float] = field(default_factory=dict)
    sync_s: dict[str, float] = field(default_factory=dict)
    sync_ok: dict[str, bool] = field(default_factory=dict)


async def measure_ingest(
    services: Sequence[Service], args: argparse.Namespace, results: Results
) -> None:
    """(a): the same documents into a new knowledge base per repetition, variants rotated."""
    documents = ingest_set(args.ingest_documents)
    per_call = math.ceil(len(documents) / args.ingest_calls)
    seconds: dict[str, list[float]] = {s.label: [] for s in services}
    leaves = 0
    for rep in range(args.repeats):
        for svc in rotated(services, rep):
            await create_kb(svc, f"ingest-{rep}")
            await wait_idle(services)
            started = time.perf_counter()
            leaves = await ingest(svc, documents, f"ingest-{rep}", per_call)
            seconds[svc.label].append(time.perf_counter() - started)
    print(
        f"(a) {len(documents)} documents, {leaves} leaves, {args.ingest_calls} calls of "
        f"{per_call}, s per repetition: "
        + "; ".join(f"{k} {', '.join(f'{v:.2f}' for v in vs)}" for k, vs in seconds.items()),
        flush=True,
    )
    results.ingest_s = {k: statistics.median(v) for k, v in seconds.items()}


def sync_folder(root: Path, count: int) -> None:
    for i in range(count):
        path = root / f"team{i % 10}" / f"note{i:04d}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"# Note {i}\n\nSynthetic note number {i} for the sync bench.\n")


async def run_sync(svc: Service, folder: Path, kb: str) -> tuple[float, int, str]:
    """`python -m retrieval_service sync` of the service's own tree; (seconds, exit, summary)."""
    env = tree_env(svc.tree, RETRIEVAL_ADDR=f"127.0.0.1:{svc.port}")
    started = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        *[sys.executable, "-m", "retrieval_service", "sync", str(folder), "--kb", kb],
        cwd=svc.tree.path,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    seconds = time.perf_counter() - started
    text = out.decode().strip()
    summary = text.splitlines()[-1] if text else err.decode()[-500:]
    return seconds, proc.returncode or 0, summary


def sync_documents(folder: Path) -> list[retrieval_pb2.SourceDocument]:
    """The folder's files as `sync` sends them (retrieval_service/cli/documents.ingest_one):
    filename the file's name, document_id its path relative to the folder, metadata an empty
    Struct (no sidecar), file type inferred."""
    return [
        retrieval_pb2.SourceDocument(
            filename=path.name,
            content=path.read_bytes(),
            document_id=path.relative_to(folder).as_posix(),
            metadata=Struct(),
        )
        for path in sorted(folder.rglob("*.md"))
    ]


async def measure_sync(
    services: Sequence[Service],
    embeddings: Embeddings,
    folder: Path,
    args: argparse.Namespace,
    results: Results,
) -> None:
    """(d): per variant, the folder into the knowledge base (the same requests as a first
    sync's, in IngestDocuments calls of 50; with --first-sync-cli the first sync itself),
    then the measured sync of the unchanged folder."""
    documents = sync_documents(folder)
    for svc in services:
        await create_kb(svc, "synced")
        await wait_idle(services)
        if not args.first_sync_cli:
            started = time.perf_counter()
            await ingest(svc, documents, "synced", 50)
            first = f"IngestDocuments of the folder's {len(documents)} files in calls of 50"
            print(f"(d) {svc.label}: {first}, {time.perf_counter() - started:.1f} s", flush=True)
        else:
            seconds, code, summary = await run_sync(svc, folder, "synced")
            print(
                f"(d) {svc.label}: first sync {seconds:.1f} s (exit {code}): {summary}",
                flush=True,
            )
    seconds_by: dict[str, list[float]] = {s.label: [] for s in services}
    ok = {s.label: True for s in services}
    for rep in range(args.sync_repeats):
        for svc in rotated(services, rep):
            await wait_idle(services)
            before = embeddings.texts_embedded()
            seconds, code, summary = await run_sync(svc, folder, "synced")
            embedded = embeddings.texts_embedded() - before
            seconds_by[svc.label].append(seconds)
            ok[svc.label] &= (
                code == 0 and f"{args.sync_documents} unchanged" in summary and embedded == 0
            )
            if rep == 0 or not ok[svc.label]:
                print(
                    f"(d) {svc.label}: unchanged sync (exit {code}), texts embedded {embedded}: "
                    f"{summary}",
                    flush=True,
                )
    print(
        "(d) unchanged sync, s per repetition: "
        + "; ".join(f"{k} {', '.join(f'{v:.2f}' for v in vs)}" for k, vs in seconds_by.items()),
        flush=True,
    )
    results.sync_s = {k: statistics.median(v) for k, v in seconds_by.items()}
    results.sync_ok = ok


async def build_big_store(
    svc: Service, others: Sequence[retrieval_pb2.SourceDocument], args: argparse.Namespace
) -> tuple[float, int]:
    """(b)/(c)'s store: kb-000 with the target documents, kb-001… with `others` each (the
    same texts in every other knowledge base: they are ranked, never returned); one
    IngestDocuments per knowledge base. Returns (seconds, leaves)."""
    rng = np.random.default_rng(11)
    target = kb_documents(rng, TARGET, args.target_documents, 3)
    started = time.perf_counter()
    await create_kb(svc, TARGET)
    leaves = await ingest(svc, target, TARGET, len(target))
    for k in range(1, args.knowledge_bases):
        kb = f"kb-{k:03d}"
        await create_kb(svc, kb)
        leaves += await ingest(svc, others, kb, len(others))
    return time.perf_counter() - started, leaves


async def timed(call: Callable[[], Awaitable[Any]]) -> float:
    started = time.perf_counter()
    await call()
    return (time.perf_counter() - started) * 1000


async def measure_big(
    services: Sequence[Service], args: argparse.Namespace, results: Results
) -> None:
    """(b) and (c) on the big store."""
    per_kb = max(
        1,
        round(
            (args.leaves - 3 * args.target_documents)
            / ((args.knowledge_bases - 1) * args.other_leaves)
        ),
    )
    rng = np.random.default_rng(12)
    others = [
        text_document(f"o{i:04d}", paragraphs(rng, args.other_leaves, f"other{i}a other{i}b"))
        for i in range(per_kb)
    ]
    for svc in services:
        seconds, leaves = await build_big_store(svc, others, args)
        waited = await wait_idle([svc])
        print(
            f"(c) {svc.label}: store of {args.knowledge_bases} knowledge bases, {leaves} leaves "
            f"({args.target_documents} documents in {TARGET}, {per_kb} in each other) built "
            f"through IngestDocuments in {seconds:.0f} s, then {waited:.0f} s of Lite "
            "background work",
            flush=True,
        )
    # (b): every knowledge base with its counts, in one page.
    listing = retrieval_pb2.ListKnowledgeBasesRequest(page_size=1000)
    for svc in services:
        reply = await svc.stub.ListKnowledgeBases(listing, timeout=120)
        assert len(reply.knowledge_bases) == args.knowledge_bases + 1, len(reply.knowledge_bases)
        target = next(k for k in reply.knowledge_bases if k.name.endswith(TARGET))
        assert target.document_count == args.target_documents, target
    await wait_idle(services)
    list_ms: dict[str, list[float]] = {s.label: [] for s in services}
    for i in range(args.list_calls + 2):
        for svc in rotated(services, i):
            values = list_ms[svc.label]
            if len(values) >= LIST_MIN_CALLS and sum(values) > LIST_BUDGET_MS:
                continue  # a variant taking seconds a call: enough to place its p50
            ms = await timed(partial(svc.stub.ListKnowledgeBases, listing, timeout=120))
            if i >= 2:  # the first two warm up
                values.append(ms)
    for label, values in list_ms.items():
        p50, p95 = p50_p95(values)
        print(
            f"(b) {label}: ListKnowledgeBases p50 {p50:.1f} ms, p95 {p95:.1f} ms "
            f"({len(values)} calls)",
            flush=True,
        )
    results.list_ms = {k: p50_p95(v)[0] for k, v in list_ms.items()}
    # (c): queries naming one document's words plus common words, in kb-000 only.
    picks = rng.integers(0, args.target_documents, size=args.queries + 5)
    common = zipf_words(rng, 3 * len(picks)).reshape(len(picks), 3)
    queries = [
        f"kb000d{p}a kb000d{p}b " + " ".join(f"w{w}" for w in common[i])
        for i, p in enumerate(picks)
    ]
    retrieve_ms: dict[str, list[float]] = {s.label: [] for s in services}
    hits: dict[str, int] = {s.label: 0 for s in services}
    for i, query in enumerate(queries):
        request = retrieval_pb2.RetrieveRequest(
            query=query, knowledge_bases=[f"knowledge_bases/{TARGET}"]
        )
        for svc in rotated(services, i):
            started = time.perf_counter()
            reply = await svc.stub.Retrieve(request, timeout=60)
            ms = (time.perf_counter() - started) * 1000
            assert all(d.knowledge_base.endswith(TARGET) for d in reply.docs)
            if i >= 5:
                retrieve_ms[svc.label].append(ms)
                wanted = f"d{picks[i]:05d}.txt"
                hits[svc.label] += bool(reply.docs) and reply.docs[0].filename == wanted
    for label, values in retrieve_ms.items():
        p50, p95 = p50_p95(values)
        print(
            f"(c) {label}: Retrieve p50 {p50:.1f} ms, p95 {p95:.1f} ms, the named document "
            f"first in {hits[label]}/{len(values)}",
            flush=True,
        )
    results.retrieve_ms = {k: p50_p95(v)[0] for k, v in retrieve_ms.items()}


# ---- the run ---------------------------------------------------------------------------------


@asynccontextmanager
async def all_spawned(
    variants: Sequence[Variant], scratch: Path, embeddings: Embeddings, store: str
) -> AsyncIterator[list[Service]]:
    async with AsyncExitStack() as stack:
        services = []
        for variant in variants:
            services.append(
                await stack.enter_async_context(
                    spawned(variant, scratch, embeddings.base_url, store)
                )
            )
        yield services


def ratio(value: float) -> str:
    return f"{value:.2f}" if value >= 0.1 else f"{value:.2g}"


def summary(results: Results, variants: Sequence[Variant], args: argparse.Namespace) -> str:
    before = variants[0].label
    afters = [v.label for v in variants[1:]]
    header = ["measure", before]
    for label in afters:
        header += [label, "÷ before"]
    header.append("wanted")

    def row(name: str, values: dict[str, float], digits: int, wanted: str) -> list[Any]:
        cells: list[Any] = [name, f"{values[before]:.{digits}f}"]
        for label in afters:
            cells += [f"{values[label]:.{digits}f}", ratio(values[label] / values[before])]
        return [*cells, wanted]

    sync_met = all(results.sync_ok.values()) and all(s <= 10 for s in results.sync_s.values())
    rows = [
        row(
            f"(a) ingest {args.ingest_documents} docs, median s",
            results.ingest_s,
            2,
            "÷ ≤ 1.05",
        ),
        row(
            f"(b) ListKnowledgeBases, {args.knowledge_bases + 1} kbs, p50 ms",
            results.list_ms,
            1,
            "after ≤ 50 ms",
        ),
        row(
            f"(c) Retrieve, {args.knowledge_bases}-kb store, p50 ms",
            results.retrieve_ms,
            1,
            "÷ ≤ 1.1",
        ),
        row(
            f"(d) sync {args.sync_documents} unchanged, median s",
            results.sync_s,
            2,
            "≤ 10 s, 0 embedded" + ("" if sync_met else " — NOT MET, see above"),
        ),
    ]
    return table(rows, header)


async def run(args: argparse.Namespace) -> None:
    started = time.perf_counter()
    print(
        f"control plane, before ({BASELINE}) and after (working tree), {os.cpu_count()} cores, "
        "Milvus Lite (embedded)",
        flush=True,
    )
    with (
        baseline_tree(args.baseline) as before,
        embeddings_fake() as embeddings,
        tempfile.TemporaryDirectory(prefix="bench-cp-") as scratch_name,
        postgres(args) as pg_url,
    ):
        scratch = Path(scratch_name)
        after = Tree("after", ROOT)
        for tree in (before, after):
            print(f"{tree.name}: imports {check_imports(tree)}", flush=True)
        variants = [Variant("before", before), Variant("after (SQLite)", after)]
        if pg_url is not None:
            variants.append(Variant("after (PostgreSQL)", after, pg_url))
        results = Results()
        folder = scratch / "sync-folder"
        sync_folder(folder, args.sync_documents)
        async with all_spawned(variants, scratch, embeddings, "small") as services:
            await measure_ingest(services, args, results)
            await measure_sync(services, embeddings, folder, args, results)
        print(f"(a), (d) done at {time.perf_counter() - started:.0f} s", flush=True)
        async with all_spawned(variants, scratch, embeddings, "big") as services:
            await measure_big(services, args, results)
    print("\nsummary (÷ before = that column ÷ before):")
    print(summary(results, variants, args))


@contextmanager
def postgres(args: argparse.Namespace) -> Iterator[Callable[[str], str] | None]:
    """A throwaway PostgreSQL server (tests/postgres.py) whose `(store)` gives a new database's
    URL; None, with a note, when it cannot run here or `--no-postgres`."""
    if args.no_postgres:
        yield None
        return
    from tests.postgres import PostgresServer, skip_reason

    reason = skip_reason()
    if reason is not None:
        print(f"no PostgreSQL column: {reason}", flush=True)
        yield None
        return
    with PostgresServer() as server:
        yield lambda store: server.create_database(f"bench_{store}")


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.control_plane")
    p.add_argument("--baseline", default=BASELINE, help="the commit measured as before")
    p.add_argument("--ingest-documents", type=int, default=200)
    p.add_argument("--ingest-calls", type=int, default=4)
    p.add_argument("--repeats", type=int, default=5, help="(a)'s repetitions per variant")
    p.add_argument("--knowledge-bases", type=int, default=200)
    p.add_argument("--target-documents", type=int, default=100)
    p.add_argument("--leaves", type=int, default=20_000, help="leaves in the big store (≈)")
    p.add_argument("--other-leaves", type=int, default=3, help="leaves per other document")
    p.add_argument("--list-calls", type=int, default=50)
    p.add_argument("--queries", type=int, default=100)
    p.add_argument("--sync-documents", type=int, default=1000)
    p.add_argument("--sync-repeats", type=int, default=3, help="(d)'s measured syncs per variant")
    p.add_argument(
        "--first-sync-cli",
        action="store_true",
        help="(d): fill the knowledge base with a first `sync` (one file a call: ≈ 100 s per "
        "variant here) instead of IngestDocuments in calls of 50",
    )
    p.add_argument("--no-postgres", action="store_true")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    asyncio.run(run(parse([] if argv is None else argv)))


if __name__ == "__main__":
    main(sys.argv[1:])
