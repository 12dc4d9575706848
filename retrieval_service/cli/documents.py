"""The document commands ingest, list and delete, and the per-file ingest and bars of sync."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import struct_pb2
from supermew.v1 import retrieval_pb2, retrieval_pb2_grpc
from tqdm import tqdm

from retrieval_service.cli.common import (
    INGEST_TIMEOUT_SECONDS,
    LIST_PAGE,
    Json,
    Metadata,
    deadline,
    document_metadata,
    parse_metadata_flags,
    rpc_reason,
    struct_dict,
)
from retrieval_service.core.documents import IngestedDocument
from retrieval_service.core.file_types import FILE_TYPES_BY_EXTENSION, extension_of
from shared.files import collect_files


def _struct(values: Json) -> struct_pb2.Struct | None:
    if not values:
        return None
    out = struct_pb2.Struct()
    out.update(values)
    return out


# ---- ingest --------------------------------------------------------------------------------


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

    def _counts(self) -> tuple[int, int, int]:
        unchanged = sum(d.document.unchanged for d in self.ingested)
        replaced = sum(d.document.replaced and not d.document.unchanged for d in self.ingested)
        return len(self.ingested) - unchanged - replaced, replaced, unchanged

    def to_dict(self) -> dict[str, Any]:
        new, replaced, unchanged = self._counts()
        return {
            "ingested": [d.to_dict() for d in self.ingested],
            "failed": [asdict(f) for f in self.failed],
            "summary": {
                "ingested": len(self.ingested),
                "new": new,
                "replaced": replaced,
                "unchanged": unchanged,
                "failed": len(self.failed),
            },
        }

    def summary(self) -> str:
        new, replaced, unchanged = self._counts()
        leaves = sum(d.document.l3_chunks for d in self.ingested if not d.document.unchanged)
        line = (
            f"ingested {len(self.ingested)} file(s) ({new} new, {replaced} replaced, "
            f"{unchanged} unchanged, {leaves} leaves), failed {len(self.failed)}"
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
    knowledge_base: str = "",
    document_id: str | None = None,
    document_metadata: Json | None = None,
    content: bytes | None = None,
) -> Ingested | Failed:
    """One file through StreamIngestDocuments; any failure is this file's alone. `content`:
    the bytes already read (sync hashes them first)."""
    if content is None:
        try:
            content = path.read_bytes()
        except OSError as exc:
            return Failed(str(path), path.name, f"cannot read the file ({exc.strerror})")
    source = retrieval_pb2.SourceDocument(
        filename=path.name, content=content, metadata=_struct(document_metadata or {})
    )
    if document_id is not None:
        source.document_id = document_id
    request = retrieval_pb2.IngestDocumentsRequest(
        documents=[source], knowledge_base=knowledge_base
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
                    d.document_id,
                    d.content_sha256,
                    d.unchanged,
                    d.knowledge_base,
                    d.metadata_only,
                ),
            )
    except grpc.RpcError as exc:
        return Failed(str(path), path.name, rpc_reason(exc))
    return Failed(str(path), path.name, "the service ended the call without a result")


class Bars:
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
    """A document's name is its identity (unless --document-id names it), so a second file of
    the same name would replace the first: it fails instead, naming the first."""
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


def _ingested_line(verb: str, path: Path | str, done: Ingested) -> str:
    if done.document.unchanged:
        return f"unchanged {path}: nothing embedded"
    if done.document.metadata_only:
        return f"{verb} {path}: metadata only, nothing embedded"
    leaves = "1 leaf" if done.document.l3_chunks == 1 else f"{done.document.l3_chunks} leaves"
    return f"{verb} {path}: {leaves}, {done.document.pages} page(s)"


def ingest(
    stub: retrieval_pb2_grpc.RetrievalServiceStub, args: argparse.Namespace, metadata: Metadata
) -> int:
    flags = parse_metadata_flags(args.metadata)
    files = collect_files(args.paths, supported)
    if not files:
        print("no supported files found (.txt .md .pdf .docx .html .htm)", file=sys.stderr)
        return 2
    if args.document_id is not None and len(files) != 1:
        print(f"--document-id names one file; {len(files)} were given", file=sys.stderr)
        return 2
    outcome = IngestOutcome()
    todo = files if args.document_id is not None else unique_names(files, outcome)
    lines = None if args.json else sys.stdout
    bars = Bars(todo)
    try:
        for i, path in enumerate(todo, start=1):
            bars.start(i, len(todo), path)
            result: Ingested | Failed
            try:
                values = document_metadata(path, flags)
            except ValueError as exc:
                result = Failed(str(path), path.name, str(exc))
            else:
                result = ingest_one(
                    stub,
                    path,
                    timeout=args.timeout or INGEST_TIMEOUT_SECONDS,
                    metadata=metadata,
                    on_progress=bars.progress,
                    knowledge_base=args.kb or "",
                    document_id=args.document_id,
                    document_metadata=values,
                )
            if isinstance(result, Ingested):
                outcome.ingested.append(result)
                verb = "replaced" if result.document.replaced else "ingested"
                line = _ingested_line(verb, path, result)
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


def document_infos(
    stub: retrieval_pb2_grpc.RetrievalServiceStub,
    knowledge_base: str,
    *,
    timeout: float,
    metadata: Metadata,
) -> Iterator[retrieval_pb2.DocumentInfo]:
    """Every document of a knowledge base, following the pages to the last one."""
    token = ""
    while True:
        reply = stub.ListDocuments(
            retrieval_pb2.ListDocumentsRequest(
                page_size=LIST_PAGE, page_token=token, knowledge_base=knowledge_base
            ),
            timeout=timeout,
            metadata=metadata,
        )
        yield from reply.documents
        token = reply.next_page_token
        if not token:
            return


def _document_dict(d: retrieval_pb2.DocumentInfo) -> Json:
    return {
        "filename": d.filename,
        "file_type": d.file_type,
        "pages": d.pages,
        "l1_chunks": d.l1_chunks,
        "l2_chunks": d.l2_chunks,
        "l3_chunks": d.l3_chunks,
        "document_id": d.document_id,
        "knowledge_base": d.knowledge_base,
        "metadata": struct_dict(d, "metadata"),
        "content_sha256": d.content_sha256,
        "ingest_time": d.ingest_time.ToJsonString() if d.HasField("ingest_time") else "",
        "size_bytes": d.size_bytes,
    }


def list_documents(
    stub: retrieval_pb2_grpc.RetrievalServiceStub, args: argparse.Namespace, metadata: Metadata
) -> int:
    """Every document of the knowledge base (--kb, else the default)."""
    docs = [
        _document_dict(d)
        for d in document_infos(stub, args.kb or "", timeout=deadline(args), metadata=metadata)
    ]
    if args.json:
        print(json.dumps(docs, ensure_ascii=False, indent=2))
    for d in [] if args.json else docs:
        line = (
            f"{d['filename']}\t{d['file_type']}\tpages={d['pages']}\t"
            f"l1={d['l1_chunks']} l2={d['l2_chunks']} l3={d['l3_chunks']}"
        )
        if d["document_id"] and d["document_id"] != d["filename"]:
            line += f"\tid={d['document_id']}"
        if d["metadata"]:
            line += f"\tmetadata={json.dumps(d['metadata'], ensure_ascii=False)}"
        print(line)
    return 0


def delete(
    stub: retrieval_pb2_grpc.RetrievalServiceStub, args: argparse.Namespace, metadata: Metadata
) -> int:
    if not args.filenames and not args.document_id:
        print("delete: name at least one file name or --document-id", file=sys.stderr)
        return 2
    reply = stub.DeleteDocuments(
        retrieval_pb2.DeleteDocumentsRequest(
            filenames=args.filenames,
            document_ids=args.document_id or [],
            knowledge_base=args.kb or "",
        ),
        timeout=deadline(args),
        metadata=metadata,
    )
    if args.json:
        print(json.dumps({"deleted_chunks": reply.deleted_chunks}))
    elif reply.deleted_chunks:
        print(f"deleted {reply.deleted_chunks} chunks")
    if not reply.deleted_chunks:
        # Nothing matched: a typo'd name must not look like a successful delete.
        names = ", ".join([*args.filenames, *(args.document_id or [])])
        where = f" in knowledge base {args.kb}" if args.kb else ""
        print(f"delete: no such document{where}: {names}; nothing deleted", file=sys.stderr)
        return 1
    return 0
