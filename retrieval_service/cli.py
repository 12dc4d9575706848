"""The command line of the retrieval service, a client of its RPCs (the service owns the store;
Milvus Lite allows one process per data directory):

    python -m retrieval_service ingest PATH… [--kb ID] [--document-id ID] [--metadata K=V]…
    python -m retrieval_service list [--kb ID]
    python -m retrieval_service delete [NAME…] [--document-id ID]… [--kb ID]
    python -m retrieval_service search QUERY [--kb ID]… [--filter EXPR] [--top-k N]
    python -m retrieval_service sync DIR --kb ID [--metadata K=V]… [--dry-run]
    python -m retrieval_service kb create|get|update|delete ID … · kb list

each with [--addr A] [--timeout S] [--json].

`ingest` takes files or folders (recursively) and sends one document per
StreamIngestDocuments call, so a bad file fails alone and by name while the others land; a
bar per document counts its leaves as they embed (rate, ETA) under a bar over all the bytes,
and a summary of ingested, replaced, unchanged and failed files ends the run, which exits 1
when any failed. A document's metadata (docs/api.md#knowledge-bases) is its sidecar
`<file>.meta.json` (a JSON object), overridden key by key by `--metadata key=value`: a value
that reads as JSON — a number, `true`/`false`, a "quoted string" or a list `["a","b"]` — is
that value, anything else is the text as given (`year=2024` is a number, `year='"2024"'` a
string).

`sync DIR --kb ID` makes the knowledge base hold exactly DIR's supported files (hidden files
and folders skipped), each under its path relative to DIR (`/`-separated) as document_id: it
lists the knowledge base's documents, sends only the files whose SHA-256 or metadata differ
from the stored ones (an unchanged file is never sent, so never embedded), deletes the
documents whose files are gone, prints one line per file (added, changed, unchanged, deleted,
failed) and a summary, and with `--dry-run` only says what it would do.

Target: `--addr`, else RETRIEVAL_ADDR, else localhost:RETRIEVAL_PORT; `--json` prints the
outcome as one JSON object (progress stays on stderr). TLS as the orchestrator reaches
retrieval (RETRIEVAL_TLS_CA_FILE, and RETRIEVAL_TLS_CERT_FILE / RETRIEVAL_TLS_KEY_FILE for
mTLS), or the flags `--tls-ca`, `--tls-cert`, `--tls-key` (`--tls`: the system's roots). An
error the service answers prints its status and message and exits 1."""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import field_mask_pb2, json_format, struct_pb2
from pydantic_settings import BaseSettings, SettingsConfigDict
from supermew.v1 import retrieval_pb2, retrieval_pb2_grpc
from tqdm import tqdm

from retrieval_service.core.documents import IngestedDocument
from retrieval_service.core.file_types import FILE_TYPES_BY_EXTENSION, extension_of
from shared.errors import ConfigurationError
from shared.files import collect_files
from shared.tls import add_tls_arguments, credentials_from_arguments, mismatch_hint

# A document's deadline: long, because the built-in CPU model embeds a few leaves a second
# and one large document holds thousands.
INGEST_TIMEOUT_SECONDS = 3600.0
CALL_TIMEOUT_SECONDS = 60.0
# The largest page ListDocuments and ListKnowledgeBases serve: the fewest round trips.
_LIST_PAGE = 1000
# document_ids per DeleteDocuments call of `sync`.
_DELETE_BATCH = 500
KB_PREFIX = "knowledge_bases/"
SIDECAR_SUFFIX = ".meta.json"
# SourceDocument.document_id (docs/api.md#knowledge-bases), checked before sending so that
# `sync --dry-run` reports the same failures a real run would.
DOCUMENT_ID = re.compile(r"[A-Za-z0-9._/:-]{1,512}")

Metadata = list[tuple[str, str]]
Json = dict[str, Any]


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


def kb_name(value: str) -> str:
    """`knowledge_bases/{id}` from an id or a full name."""
    return value if value.startswith(KB_PREFIX) else KB_PREFIX + value


def _deadline(args: argparse.Namespace) -> float:
    return float(args.timeout or CALL_TIMEOUT_SECONDS)


def _to_dict(message: Any) -> Json:
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


def _struct_dict(message: Any, name: str) -> Json:
    """A Struct field as a dict; {} when absent."""
    return _to_dict(getattr(message, name)) if message.HasField(name) else {}


# ---- metadata ------------------------------------------------------------------------------


def metadata_value(text: str) -> Any:
    """A `--metadata` value: a JSON number, boolean, "string" or list of strings when the text
    is one, else the text itself."""
    try:
        value = json.loads(text)
    except ValueError:
        return text
    if isinstance(value, bool | str):
        return value
    if isinstance(value, int | float) and math.isfinite(value):
        return value
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return value
    return text


def parse_metadata_flags(pairs: list[str] | None) -> Json:
    """`--metadata key=value` flags as a dict; a later flag for the same key wins."""
    out: Json = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--metadata {pair!r}: expected key=value")
        out[key.strip()] = metadata_value(value)
    return out


def sidecar_of(path: Path) -> Path:
    return path.with_name(path.name + SIDECAR_SUFFIX)


def document_metadata(path: Path, flags: Json) -> Json:
    """The file's sidecar `<file>.meta.json` (a JSON object), then the flags over it. Raises
    ValueError naming the sidecar when it is unreadable or not an object."""
    sidecar = sidecar_of(path)
    base: Json = {}
    if sidecar.is_file():
        try:
            loaded = json.loads(sidecar.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ValueError(f"{sidecar.name}: not a readable JSON file ({exc})") from exc
        if not isinstance(loaded, dict):
            raise ValueError(f"{sidecar.name}: not a JSON object")
        base = loaded
    return {**base, **flags}


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


def _rpc_reason(exc: grpc.RpcError) -> str:
    code = exc.code() if isinstance(exc, grpc.Call) else grpc.StatusCode.UNKNOWN
    details = exc.details() if isinstance(exc, grpc.Call) else ""
    return f"{code.name}: {details}"


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
                ),
            )
    except grpc.RpcError as exc:
        return Failed(str(path), path.name, _rpc_reason(exc))
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
    bars = _Bars(todo)
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


# ---- list, delete, search ------------------------------------------------------------------


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
                page_size=_LIST_PAGE, page_token=token, knowledge_base=knowledge_base
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
        "metadata": _struct_dict(d, "metadata"),
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
        for d in document_infos(stub, args.kb or "", timeout=_deadline(args), metadata=metadata)
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
        timeout=_deadline(args),
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


def _excerpt(text: str, limit: int = 160) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def search(
    stub: retrieval_pb2_grpc.RetrievalServiceStub, args: argparse.Namespace, metadata: Metadata
) -> int:
    """One Retrieve: the ranked chunks with their document and metadata."""
    request = retrieval_pb2.RetrieveRequest(
        query=args.query, knowledge_bases=args.kb or [], filter=args.filter or ""
    )
    if args.top_k is not None:
        request.top_k = args.top_k
    reply = stub.Retrieve(request, timeout=_deadline(args), metadata=metadata)
    if args.json:
        print(json.dumps(_to_dict(reply), ensure_ascii=False, indent=2))
        return 0
    for rank, chunk in enumerate(reply.docs, start=1):
        score = chunk.rerank_score if chunk.HasField("rerank_score") else chunk.score
        values = _struct_dict(chunk, "metadata")
        where = f"{chunk.knowledge_base}, page {chunk.page_number}"
        line = f"{rank}. {score:.4f}  {chunk.document_id or chunk.filename}  ({where})"
        if values:
            line += f"  {json.dumps(values, ensure_ascii=False)}"
        print(line)
        print(f"   {_excerpt(chunk.text)}")
    mode = reply.meta.retrieval_mode if reply.meta.HasField("retrieval_mode") else ""
    print(f"{len(reply.docs)} chunk(s), retrieval_mode={mode}")
    return 0


# ---- sync ----------------------------------------------------------------------------------


@dataclass
class SyncLine:
    """What sync did (or, with --dry-run, would do) with one document."""

    action: str  # added | changed | unchanged | deleted | failed
    document_id: str
    path: str = ""
    reason: str = ""
    leaves: int = 0

    def text(self) -> str:
        if self.action == "failed":
            return f"failed {self.document_id}: {self.reason}"
        if self.action == "deleted":
            return f"deleted {self.document_id}: {self.leaves} leaves"
        if self.action == "unchanged":
            return f"unchanged {self.document_id}"
        return f"{self.action} {self.document_id}: {self.leaves} leaves"


def local_documents(root: Path) -> list[tuple[str, Path]]:
    """(document_id, file) for every supported file under `root`, the id being its path
    relative to `root` with `/` separators; hidden files and folders are skipped."""
    out = []
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root)
        if any(part.startswith(".") for part in relative.parts):
            continue
        if path.is_file() and supported(path.name):
            out.append((relative.as_posix(), path))
    return out


def _sync_summary(lines: list[SyncLine]) -> dict[str, int]:
    return {
        action: sum(line.action == action for line in lines)
        for action in ("added", "changed", "unchanged", "deleted", "failed")
    }


def sync(
    stub: retrieval_pb2_grpc.RetrievalServiceStub, args: argparse.Namespace, metadata: Metadata
) -> int:
    """Makes the knowledge base hold exactly the folder's files (see the module docstring)."""
    root = Path(args.dir)
    if not root.is_dir():
        raise FileNotFoundError(f"no such folder: {args.dir}")
    flags = parse_metadata_flags(args.metadata)
    knowledge_base = kb_name(args.kb)
    stored = {
        d.document_id: d
        for d in document_infos(stub, knowledge_base, timeout=_deadline(args), metadata=metadata)
    }
    out = None if args.json else sys.stdout
    lines: list[SyncLine] = []

    def report(line: SyncLine) -> None:
        lines.append(line)
        if out is not None:
            tqdm.write(line.text(), file=out)

    present: set[str] = set()
    to_send: list[tuple[str, str, Path, Json]] = []  # (action, document_id, file, metadata)
    for document_id, path in local_documents(root):
        present.add(document_id)
        if not DOCUMENT_ID.fullmatch(document_id):
            reason = "its relative path is not a document_id ([A-Za-z0-9._/:-]{1,512})"
            report(SyncLine("failed", document_id, str(path), reason))
            continue
        try:
            values = document_metadata(path, flags)
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
        except OSError as exc:
            report(SyncLine("failed", document_id, str(path), f"cannot read ({exc.strerror})"))
            continue
        except ValueError as exc:
            report(SyncLine("failed", document_id, str(path), str(exc)))
            continue
        old = stored.get(document_id)
        if old is None:
            to_send.append(("added", document_id, path, values))
        elif old.content_sha256 != digest or _struct_dict(old, "metadata") != values:
            to_send.append(("changed", document_id, path, values))
        else:
            report(SyncLine("unchanged", document_id, str(path), leaves=old.l3_chunks))

    bars = _Bars([] if args.dry_run else [p for _, _, p, _ in to_send])
    try:
        for i, (action, document_id, path, values) in enumerate(to_send, start=1):
            if args.dry_run:
                report(SyncLine(action, document_id, str(path)))
                continue
            bars.start(i, len(to_send), path)
            result = ingest_one(
                stub,
                path,
                timeout=args.timeout or INGEST_TIMEOUT_SECONDS,
                metadata=metadata,
                on_progress=bars.progress,
                knowledge_base=knowledge_base,
                document_id=document_id,
                document_metadata=values,
            )
            if isinstance(result, Ingested):
                done = "unchanged" if result.document.unchanged else action
                line = SyncLine(done, document_id, str(path), leaves=result.document.l3_chunks)
            else:
                line = SyncLine("failed", document_id, str(path), result.reason)
            bars.finish(path, "", None)
            report(line)
    finally:
        bars.close()

    gone = sorted(set(stored) - present)
    for start in range(0, len(gone), _DELETE_BATCH):
        batch = gone[start : start + _DELETE_BATCH]
        reason = ""
        if not args.dry_run:
            try:
                stub.DeleteDocuments(
                    retrieval_pb2.DeleteDocumentsRequest(
                        document_ids=batch, knowledge_base=knowledge_base
                    ),
                    timeout=_deadline(args),
                    metadata=metadata,
                )
            except grpc.RpcError as exc:
                reason = _rpc_reason(exc)
        for document_id in batch:
            if reason:
                report(SyncLine("failed", document_id, reason=f"delete: {reason}"))
            else:
                report(SyncLine("deleted", document_id, leaves=stored[document_id].l3_chunks))

    summary = _sync_summary(lines)
    if args.json:
        outcome = {
            "knowledge_base": knowledge_base,
            "dry_run": args.dry_run,
            "files": [asdict(line) for line in lines],
            "summary": summary,
        }
        print(json.dumps(outcome, ensure_ascii=False, indent=2))
    else:
        counts = ", ".join(f"{n} {action}" for action, n in summary.items())
        note = " (dry run: nothing was changed)" if args.dry_run else ""
        print(f"sync {knowledge_base}: {counts}{note}")
    return 1 if summary["failed"] else 0


# ---- knowledge bases -----------------------------------------------------------------------


def _kb_dict(kb: retrieval_pb2.KnowledgeBase) -> Json:
    return {
        "name": kb.name,
        "display_name": kb.display_name,
        "description": kb.description,
        "create_time": kb.create_time.ToJsonString() if kb.HasField("create_time") else "",
        "document_count": kb.document_count,
        "chunk_count": kb.chunk_count,
    }


def _print_kbs(args: argparse.Namespace, kbs: list[retrieval_pb2.KnowledgeBase]) -> None:
    if args.json:
        dicts = [_kb_dict(kb) for kb in kbs]
        print(json.dumps(dicts if args.kb_command == "list" else dicts[0], ensure_ascii=False))
        return
    for kb in kbs:
        d = _kb_dict(kb)
        print(
            f"{d['name']}\t{d['display_name'] or '-'}\tdocuments={d['document_count']}\t"
            f"chunks={d['chunk_count']}\tcreated={d['create_time']}"
        )
        if d["description"]:
            print(f"  {d['description']}")


def kb_create(
    stub: retrieval_pb2_grpc.RetrievalServiceStub, args: argparse.Namespace, metadata: Metadata
) -> int:
    reply = stub.CreateKnowledgeBase(
        retrieval_pb2.CreateKnowledgeBaseRequest(
            knowledge_base_id=args.id.removeprefix(KB_PREFIX),
            knowledge_base=retrieval_pb2.KnowledgeBase(
                display_name=args.display_name or "", description=args.description or ""
            ),
        ),
        timeout=_deadline(args),
        metadata=metadata,
    )
    _print_kbs(args, [reply])
    return 0


def kb_get(
    stub: retrieval_pb2_grpc.RetrievalServiceStub, args: argparse.Namespace, metadata: Metadata
) -> int:
    reply = stub.GetKnowledgeBase(
        retrieval_pb2.GetKnowledgeBaseRequest(name=kb_name(args.id)),
        timeout=_deadline(args),
        metadata=metadata,
    )
    _print_kbs(args, [reply])
    return 0


def kb_list(
    stub: retrieval_pb2_grpc.RetrievalServiceStub, args: argparse.Namespace, metadata: Metadata
) -> int:
    kbs: list[retrieval_pb2.KnowledgeBase] = []
    token = ""
    while True:
        reply = stub.ListKnowledgeBases(
            retrieval_pb2.ListKnowledgeBasesRequest(page_size=_LIST_PAGE, page_token=token),
            timeout=_deadline(args),
            metadata=metadata,
        )
        kbs += reply.knowledge_bases
        token = reply.next_page_token
        if not token:
            break
    _print_kbs(args, kbs)
    return 0


def kb_update(
    stub: retrieval_pb2_grpc.RetrievalServiceStub, args: argparse.Namespace, metadata: Metadata
) -> int:
    """Changes only what was given: the update_mask names exactly those fields."""
    paths = [name for name in ("display_name", "description") if getattr(args, name) is not None]
    if not paths:
        print("kb update: give --display-name and/or --description", file=sys.stderr)
        return 2
    reply = stub.UpdateKnowledgeBase(
        retrieval_pb2.UpdateKnowledgeBaseRequest(
            knowledge_base=retrieval_pb2.KnowledgeBase(
                name=kb_name(args.id),
                display_name=args.display_name or "",
                description=args.description or "",
            ),
            update_mask=field_mask_pb2.FieldMask(paths=paths),
        ),
        timeout=_deadline(args),
        metadata=metadata,
    )
    _print_kbs(args, [reply])
    return 0


def kb_delete(
    stub: retrieval_pb2_grpc.RetrievalServiceStub, args: argparse.Namespace, metadata: Metadata
) -> int:
    name = kb_name(args.id)
    stub.DeleteKnowledgeBase(
        retrieval_pb2.DeleteKnowledgeBaseRequest(name=name, force=args.force),
        timeout=_deadline(args),
        metadata=metadata,
    )
    print(json.dumps({"deleted": name}) if args.json else f"deleted {name}")
    return 0


# ---- arguments and entry point -------------------------------------------------------------

Handler = Callable[[retrieval_pb2_grpc.RetrievalServiceStub, argparse.Namespace, Metadata], int]


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
        f"for ingest and sync, {CALL_TIMEOUT_SECONDS:g} otherwise)",
    )
    kb_flag = "knowledge base id or name (default: knowledge_bases/default)"
    meta_help = (
        "document metadata, repeatable; over the file's sidecar <file>.meta.json; a JSON "
        'number, true/false, "string" or ["list"] is that value, anything else text'
    )

    def command(name: str, handler: Handler, helptext: str, into: Any = sub) -> Any:
        p = into.add_parser(name, parents=[common], help=helptext)
        p.set_defaults(handler=handler)
        return p

    p = command("ingest", ingest, "ingest files or folders (recursively)")
    p.add_argument("paths", nargs="+")
    p.add_argument("--kb", help=kb_flag)
    p.add_argument("--document-id", help="the document_id of the one file given")
    p.add_argument("--metadata", action="append", metavar="KEY=VALUE", help=meta_help)
    p = command("list", list_documents, "list a knowledge base's documents")
    p.add_argument("--kb", help=kb_flag)
    p = command("delete", delete, "delete documents by file name or document_id")
    p.add_argument("filenames", nargs="*")
    p.add_argument("--document-id", action="append", help="a document_id (repeatable)")
    p.add_argument("--kb", help=kb_flag)
    p = command("search", search, "retrieve the chunks that answer a query")
    p.add_argument("query")
    p.add_argument("--kb", action="append", help="a knowledge base to search (repeatable)")
    p.add_argument("--filter", help="AIP-160 filter, e.g. metadata.year >= 2023 (docs/api.md)")
    p.add_argument("--top-k", type=int)
    p = command("sync", sync, "make a knowledge base hold exactly a folder's files")
    p.add_argument("dir")
    p.add_argument("--kb", required=True, help="the knowledge base id or name")
    p.add_argument("--metadata", action="append", metavar="KEY=VALUE", help=meta_help)
    p.add_argument("--dry-run", action="store_true", help="print what would change, change nothing")

    kb = sub.add_parser("kb", help="create, get, list, update or delete knowledge bases")
    kb_sub = kb.add_subparsers(dest="kb_command", required=True)
    p = command("create", kb_create, "create a knowledge base", kb_sub)
    p.add_argument("id", help="[a-z][a-z0-9-]{0,62}")
    p.add_argument("--display-name")
    p.add_argument("--description")
    p = command("get", kb_get, "one knowledge base with its counts", kb_sub)
    p.add_argument("id")
    command("list", kb_list, "every knowledge base", kb_sub)
    p = command("update", kb_update, "change the display name and/or description", kb_sub)
    p.add_argument("id")
    p.add_argument("--display-name")
    p.add_argument("--description")
    p = command("delete", kb_delete, "delete a knowledge base", kb_sub)
    p.add_argument("id")
    p.add_argument("--force", action="store_true", help="also delete every document it holds")
    return parser


def main(argv: list[str]) -> int:
    try:
        return _main(argv)
    except BrokenPipeError:
        return closed_pipe()


def closed_pipe() -> int:
    """`… | head` closed the pipe: stop quietly (no traceback, and none at exit when Python
    flushes stdout again) with status 0, as the reader asked for no more."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return 0


def _main(argv: list[str]) -> int:
    settings = CliSettings()
    args = _parser(settings).parse_args(argv)
    label = " ".join(filter(None, [args.command, getattr(args, "kb_command", None)]))
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
            handler: Handler = args.handler
            return handler(stub, args, settings.metadata)
    except grpc.RpcError as exc:
        reason = _rpc_reason(exc)
        hint = mismatch_hint(
            reason,
            tls=credentials is not None,
            setting="--tls-ca <ca.pem> or RETRIEVAL_TLS_CA_FILE",
        )
        print(f"{label} failed: {reason}{hint}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        raise  # main's: not a path problem
    except (OSError, ValueError) as exc:  # a path that does not exist or is unsupported
        print(f"error: {exc}", file=sys.stderr)
        return 2
