"""The command line of the retrieval service, a client of its RPCs (the service owns the store;
Milvus Lite allows one process per data directory):

    python -m retrieval_service ingest PATH… [--addr A] [--timeout S] [--json]
    python -m retrieval_service list [--addr A] [--timeout S] [--json]
    python -m retrieval_service delete NAME… [--addr A] [--timeout S] [--json]

`ingest` takes files or folders (recursively) and sends one document per
StreamIngestDocuments call, so a bad file fails alone and by name while the others land; a
bar per document counts its leaves as they embed (rate, ETA) under a bar over all the bytes,
and a summary of ingested, replaced and failed files ends the run, which exits 1 when any
failed. Target: `--addr`, else RETRIEVAL_ADDR, else localhost:RETRIEVAL_PORT; `--json` prints
the outcome as one JSON object (progress stays on stderr). TLS as the orchestrator reaches
retrieval (RETRIEVAL_TLS_CA_FILE, and RETRIEVAL_TLS_CERT_FILE / RETRIEVAL_TLS_KEY_FILE for
mTLS), or the flags `--tls-ca`, `--tls-cert`, `--tls-key` (`--tls`: the system's roots)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import grpc
from pydantic_settings import BaseSettings, SettingsConfigDict
from supermew.v1 import retrieval_pb2, retrieval_pb2_grpc
from tqdm import tqdm

from retrieval_service.core.documents import IngestedDocument
from retrieval_service.core.file_types import FILE_TYPES_BY_EXTENSION, extension_of
from shared.errors import ConfigurationError
from shared.files import collect_files
from shared.tls import add_tls_arguments, credentials_from_arguments

# A document's deadline: long, because the built-in CPU model embeds a few leaves a second
# and one large document holds thousands.
INGEST_TIMEOUT_SECONDS = 3600.0
CALL_TIMEOUT_SECONDS = 60.0
# The largest page ListDocuments serves: the fewest round trips.
_LIST_PAGE = 1000

Metadata = list[tuple[str, str]]


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

    @property
    def metadata(self) -> Metadata:
        return [("authorization", f"Bearer {self.auth_token}")] if self.auth_token else []


@dataclass
class Ingested:
    """One file the service ingested: where it was read, and what the service reported."""

    path: str
    document: IngestedDocument

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, **asdict(self.document)}


@dataclass
class Failed:
    path: str
    filename: str
    reason: str


@dataclass
class IngestOutcome:
    ingested: list[Ingested] = field(default_factory=list)
    failed: list[Failed] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ingested": [d.to_dict() for d in self.ingested],
            "failed": [asdict(f) for f in self.failed],
            "summary": {
                "ingested": len(self.ingested),
                "new": sum(not d.document.replaced for d in self.ingested),
                "replaced": sum(d.document.replaced for d in self.ingested),
                "failed": len(self.failed),
            },
        }

    def summary(self) -> str:
        new = sum(not d.document.replaced for d in self.ingested)
        leaves = sum(d.document.l3_chunks for d in self.ingested)
        line = (
            f"ingested {len(self.ingested)} file(s) ({new} new, {len(self.ingested) - new} "
            f"replaced, {leaves} leaves), failed {len(self.failed)}"
        )
        return "\n".join([line, *(f"  failed: {f.path}: {f.reason}" for f in self.failed)])


def supported(name: str) -> bool:
    return extension_of(name) in FILE_TYPES_BY_EXTENSION


def ingest_one(
    stub: retrieval_pb2_grpc.RetrievalServiceStub,
    path: Path,
    *,
    timeout: float,
    metadata: Metadata,
    on_progress: Callable[[retrieval_pb2.IngestProgress], None],
) -> Ingested | Failed:
    """One file through StreamIngestDocuments; any failure is this file's alone."""
    try:
        content = path.read_bytes()
    except OSError as exc:
        return Failed(str(path), path.name, f"cannot read the file ({exc.strerror})")
    request = retrieval_pb2.IngestDocumentsRequest(
        documents=[retrieval_pb2.SourceDocument(filename=path.name, content=content)]
    )
    try:
        events: Iterable[retrieval_pb2.IngestEvent] = stub.StreamIngestDocuments(
            request, timeout=timeout, metadata=metadata
        )
        for event in events:
            if event.WhichOneof("event") == "progress":
                on_progress(event.progress)
                continue
            d = event.result.documents[0]
            return Ingested(
                str(path),
                IngestedDocument(
                    d.filename,
                    d.file_type,
                    d.pages,
                    d.l1_chunks,
                    d.l2_chunks,
                    d.l3_chunks,
                    d.replaced,
                ),
            )
    except grpc.RpcError as exc:
        code = exc.code() if isinstance(exc, grpc.Call) else grpc.StatusCode.UNKNOWN
        details = exc.details() if isinstance(exc, grpc.Call) else ""
        return Failed(str(path), path.name, f"{code.name}: {details}")
    return Failed(str(path), path.name, "the service ended the call without a result")


class _Bars:
    """Two tqdm bars on stderr: all bytes (files done), and the current document's leaves."""

    def __init__(self, files: list[Path]) -> None:
        self.total = tqdm(
            total=sum(f.stat().st_size for f in files),
            desc=f"{len(files)} file(s)",
            unit="B",
            unit_scale=True,
            position=0,
            disable=None,  # no bars when stderr is not a terminal
        )
        self.leaves: tqdm[Any] | None = None

    def start(self, index: int, count: int, path: Path) -> None:
        self.leaves = tqdm(
            desc=f"[{index}/{count}] {path.name}",
            unit="leaf",
            position=1,
            leave=False,
            disable=self.total.disable,
        )

    def progress(self, event: retrieval_pb2.IngestProgress) -> None:
        bar = self.leaves
        if bar is None:
            return
        if bar.total != event.leaves_total:
            bar.reset(total=event.leaves_total)
        bar.update(event.leaves_done - bar.n)

    def finish(self, path: Path, line: str, out: Any) -> None:
        if self.leaves is not None:
            self.leaves.close()
            self.leaves = None
        self.total.update(path.stat().st_size if path.exists() else 0)
        if out is not None:
            tqdm.write(line, file=out)

    def close(self) -> None:
        self.total.close()


def unique_names(files: list[Path], outcome: IngestOutcome) -> list[Path]:
    """A document's name is its identity, so a second file of the same name would replace
    the first: it fails instead, naming the first."""
    first: dict[str, Path] = {}
    keep: list[Path] = []
    for f in files:
        if f.name in first:
            reason = f"same file name as {first[f.name]} (a name identifies a document)"
            outcome.failed.append(Failed(str(f), f.name, reason))
        else:
            first[f.name] = f
            keep.append(f)
    return keep


def ingest(
    stub: retrieval_pb2_grpc.RetrievalServiceStub, args: argparse.Namespace, metadata: Metadata
) -> int:
    files = collect_files(args.paths, supported)
    if not files:
        print("no supported files found (.txt .md .pdf .docx .html .htm)", file=sys.stderr)
        return 2
    outcome = IngestOutcome()
    todo = unique_names(files, outcome)
    lines = None if args.json else sys.stdout
    bars = _Bars(todo)
    try:
        for i, path in enumerate(todo, start=1):
            bars.start(i, len(todo), path)
            result = ingest_one(
                stub,
                path,
                timeout=args.timeout or INGEST_TIMEOUT_SECONDS,
                metadata=metadata,
                on_progress=bars.progress,
            )
            if isinstance(result, Ingested):
                outcome.ingested.append(result)
                done = result.document
                verb = "replaced" if done.replaced else "ingested"
                leaves = "1 leaf" if done.l3_chunks == 1 else f"{done.l3_chunks} leaves"
                line = f"{verb} {path}: {leaves}, {done.pages} page(s)"
            else:
                outcome.failed.append(result)
                line = f"FAILED {path}: {result.reason}"
            bars.finish(path, line, lines)
    finally:
        bars.close()
    if args.json:
        print(json.dumps(outcome.to_dict(), ensure_ascii=False, indent=2))
    else:
        print(outcome.summary())
    return 1 if outcome.failed else 0


def list_documents(
    stub: retrieval_pb2_grpc.RetrievalServiceStub, args: argparse.Namespace, metadata: Metadata
) -> int:
    """Every document, following the pages to the last one."""
    docs: list[dict[str, Any]] = []
    token = ""
    while True:
        reply = stub.ListDocuments(
            retrieval_pb2.ListDocumentsRequest(page_size=_LIST_PAGE, page_token=token),
            timeout=args.timeout or CALL_TIMEOUT_SECONDS,
            metadata=metadata,
        )
        docs += [
            {
                "filename": d.filename,
                "file_type": d.file_type,
                "pages": d.pages,
                "l1_chunks": d.l1_chunks,
                "l2_chunks": d.l2_chunks,
                "l3_chunks": d.l3_chunks,
            }
            for d in reply.documents
        ]
        token = reply.next_page_token
        if not token:
            break
    if args.json:
        print(json.dumps(docs, ensure_ascii=False, indent=2))
    for d in [] if args.json else docs:
        print(
            f"{d['filename']}\t{d['file_type']}\tpages={d['pages']}\t"
            f"l1={d['l1_chunks']} l2={d['l2_chunks']} l3={d['l3_chunks']}"
        )
    return 0


def delete(
    stub: retrieval_pb2_grpc.RetrievalServiceStub, args: argparse.Namespace, metadata: Metadata
) -> int:
    reply = stub.DeleteDocuments(
        retrieval_pb2.DeleteDocumentsRequest(filenames=args.filenames),
        timeout=args.timeout or CALL_TIMEOUT_SECONDS,
        metadata=metadata,
    )
    if args.json:
        print(json.dumps({"deleted_chunks": reply.deleted_chunks}))
    else:
        print(f"deleted {reply.deleted_chunks} chunks")
    return 0


def _parser(settings: CliSettings) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m retrieval_service")
    sub = parser.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    add_tls_arguments(common)
    common.set_defaults(
        tls_ca=settings.retrieval_tls_ca_file,
        tls_cert=settings.retrieval_tls_cert_file,
        tls_key=settings.retrieval_tls_key_file,
    )
    common.add_argument("--json", action="store_true", help="print the outcome as JSON")
    common.add_argument(
        "--addr", help="retrieval address (default RETRIEVAL_ADDR, else localhost:RETRIEVAL_PORT)"
    )
    common.add_argument(
        "--timeout",
        type=float,
        help=f"deadline in seconds per call (default: {INGEST_TIMEOUT_SECONDS:g} per document "
        f"for ingest, {CALL_TIMEOUT_SECONDS:g} otherwise)",
    )
    p_ingest = sub.add_parser(
        "ingest", parents=[common], help="ingest files or folders (recursively)"
    )
    p_ingest.add_argument("paths", nargs="+")
    sub.add_parser("list", parents=[common], help="list the knowledge base's documents")
    p_delete = sub.add_parser("delete", parents=[common], help="delete documents by file name")
    p_delete.add_argument("filenames", nargs="+")
    return parser


COMMANDS = {"ingest": ingest, "list": list_documents, "delete": delete}


def main(argv: list[str]) -> int:
    settings = CliSettings()
    args = _parser(settings).parse_args(argv)
    target = args.addr or settings.target
    try:
        credentials = credentials_from_arguments(args)
    except (ValueError, ConfigurationError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    channel = (
        grpc.secure_channel(target, credentials)
        if credentials is not None
        else grpc.insecure_channel(target)
    )
    try:
        with channel:
            stub = retrieval_pb2_grpc.RetrievalServiceStub(channel)
            return COMMANDS[args.command](stub, args, settings.metadata)
    except grpc.RpcError as exc:
        code = exc.code().name if isinstance(exc, grpc.Call) else "UNKNOWN"
        details = exc.details() if isinstance(exc, grpc.Call) else ""
        print(f"{args.command} failed: {code}: {details}", file=sys.stderr)
        return 1
    except (OSError, ValueError) as exc:  # a path that does not exist or is unsupported
        print(f"error: {exc}", file=sys.stderr)
        return 2
