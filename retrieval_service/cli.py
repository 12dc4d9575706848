"""`python -m retrieval_service ingest PATH…` (files or folders, recursively), `list` and
`delete NAME…`: a client of the running service's RPCs (the service owns the store; Milvus
Lite allows one process per data directory). Target: RETRIEVAL_ADDR, else
localhost:RETRIEVAL_PORT; TLS as the orchestrator reaches retrieval (RETRIEVAL_TLS_CA_FILE, and
RETRIEVAL_TLS_CERT_FILE / RETRIEVAL_TLS_KEY_FILE for mTLS), or the flags `--tls-ca`,
`--tls-cert`, `--tls-key` (`--tls`: the system's roots)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import grpc
from pydantic_settings import BaseSettings, SettingsConfigDict
from supermew.v1 import retrieval_pb2, retrieval_pb2_grpc

from retrieval_service.loaders import FILE_TYPES_BY_EXTENSION, extension_of
from shared.errors import ConfigurationError
from shared.files import collect_files
from shared.tls import add_tls_arguments, credentials_from_arguments

# A batch stays well under the default 64 MiB gRPC message limit.
_BATCH_BYTES = 8 * 1024 * 1024
_BATCH_FILES = 16
# The largest page ListDocuments serves: the fewest round trips.
_LIST_PAGE = 1000


class CliSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="", case_sensitive=False, extra="ignore")

    retrieval_addr: str | None = None
    retrieval_port: int = 50051
    auth_token: str | None = None
    retrieval_tls_ca_file: str | None = None
    retrieval_tls_cert_file: str | None = None
    retrieval_tls_key_file: str | None = None

    @property
    def target(self) -> str:
        return self.retrieval_addr or f"localhost:{self.retrieval_port}"


class ProgressBar:
    """A one-line text progress bar on stderr (redrawn in place on a terminal)."""

    def __init__(self, total: int, label: str, width: int = 30) -> None:
        self.total, self.label, self.width = max(total, 1), label, width
        self.done = 0
        self.started = time.monotonic()
        self.tty = sys.stderr.isatty()

    def advance(self, n: int, note: str = "") -> None:
        self.done += n
        filled = int(self.width * self.done / self.total)
        rate = self.done / max(time.monotonic() - self.started, 1e-9)
        line = (
            f"{self.label} [{'#' * filled}{'.' * (self.width - filled)}] "
            f"{self.done}/{self.total} ({rate:.1f}/s) {note}"
        )
        sys.stderr.write(("\r" + line[:160].ljust(160)) if self.tty else line + "\n")
        sys.stderr.flush()

    def close(self) -> None:
        if self.tty:
            sys.stderr.write("\n")


def supported(name: str) -> bool:
    return extension_of(name) in FILE_TYPES_BY_EXTENSION


def collect(paths: list[str]) -> list[Path]:
    try:
        return collect_files(paths, supported)
    except (FileNotFoundError, ValueError) as exc:
        raise SystemExit(str(exc)) from exc


def batches(files: list[Path]) -> list[list[Path]]:
    out: list[list[Path]] = []
    current: list[Path] = []
    size = 0
    for f in files:
        n = f.stat().st_size
        if current and (size + n > _BATCH_BYTES or len(current) >= _BATCH_FILES):
            out.append(current)
            current, size = [], 0
        current.append(f)
        size += n
    if current:
        out.append(current)
    return out


def _metadata(settings: CliSettings) -> list[tuple[str, str]]:
    return [("authorization", f"Bearer {settings.auth_token}")] if settings.auth_token else []


def ingest(stub: retrieval_pb2_grpc.RetrievalServiceStub, paths: list[str], md: list) -> int:
    files = collect(paths)
    if not files:
        print("no supported files found (.txt .md .pdf .docx .html .htm)", file=sys.stderr)
        return 1
    names = [f.name for f in files]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        print(f"file names must be unique (they are the documents' ids): {dupes}", file=sys.stderr)
        return 1
    bar = ProgressBar(len(files), "ingest")
    totals = [0, 0, 0]
    for group in batches(files):
        request = retrieval_pb2.IngestDocumentsRequest(
            documents=[
                retrieval_pb2.SourceDocument(filename=f.name, content=f.read_bytes()) for f in group
            ]
        )
        try:
            reply = stub.IngestDocuments(request, metadata=md)
        except grpc.RpcError as exc:
            bar.close()
            print(f"ingest failed: {exc.code().name}: {exc.details()}", file=sys.stderr)
            return 1
        for d in reply.documents:
            totals[0] += d.l1_chunks
            totals[1] += d.l2_chunks
            totals[2] += d.l3_chunks
        bar.advance(len(group), group[-1].name)
    bar.close()
    print(f"ingested {len(files)} documents: {totals[0]} L1, {totals[1]} L2, {totals[2]} L3 chunks")
    return 0


def list_documents(stub: retrieval_pb2_grpc.RetrievalServiceStub, md: list) -> int:
    """Prints every document, following the pages to the last one."""
    token = ""
    while True:
        reply = stub.ListDocuments(
            retrieval_pb2.ListDocumentsRequest(page_size=_LIST_PAGE, page_token=token), metadata=md
        )
        for d in reply.documents:
            print(
                f"{d.filename}\t{d.file_type}\tpages={d.pages}\t"
                f"l1={d.l1_chunks} l2={d.l2_chunks} l3={d.l3_chunks}"
            )
        token = reply.next_page_token
        if not token:
            return 0


def main(argv: list[str]) -> int:
    settings = CliSettings()
    parser = argparse.ArgumentParser(prog="python -m retrieval_service")
    sub = parser.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    add_tls_arguments(common)
    common.set_defaults(
        tls_ca=settings.retrieval_tls_ca_file,
        tls_cert=settings.retrieval_tls_cert_file,
        tls_key=settings.retrieval_tls_key_file,
    )
    p_ingest = sub.add_parser(
        "ingest", parents=[common], help="ingest files or folders (recursively)"
    )
    p_ingest.add_argument("paths", nargs="+")
    sub.add_parser("list", parents=[common], help="list the knowledge base's documents")
    p_delete = sub.add_parser("delete", parents=[common], help="delete documents by file name")
    p_delete.add_argument("filenames", nargs="+")
    args = parser.parse_args(argv)

    md = _metadata(settings)
    try:
        credentials = credentials_from_arguments(args)
    except (ValueError, ConfigurationError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    channel = (
        grpc.secure_channel(settings.target, credentials)
        if credentials is not None
        else grpc.insecure_channel(settings.target)
    )
    with channel:
        stub = retrieval_pb2_grpc.RetrievalServiceStub(channel)
        try:
            if args.command == "ingest":
                return ingest(stub, args.paths, md)
            if args.command == "list":
                return list_documents(stub, md)
            reply = stub.DeleteDocuments(
                retrieval_pb2.DeleteDocumentsRequest(filenames=args.filenames), metadata=md
            )
            print(f"deleted {reply.deleted_chunks} chunks")
            return 0
        except grpc.RpcError as exc:
            print(f"{args.command} failed: {exc.code().name}: {exc.details()}", file=sys.stderr)
            return 1
