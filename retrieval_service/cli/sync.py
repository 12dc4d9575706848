"""The sync command: make a knowledge base hold exactly a folder's supported files."""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import grpc
from supermew.v1 import retrieval_pb2, retrieval_pb2_grpc
from tqdm import tqdm

from retrieval_service.cli.common import (
    INGEST_TIMEOUT_SECONDS,
    SIDECAR_SUFFIX,
    Json,
    Metadata,
    deadline,
    document_metadata,
    kb_name,
    parse_metadata_flags,
    rpc_reason,
    struct_dict,
)
from retrieval_service.cli.documents import Bars, Ingested, document_infos, ingest_one, supported

# document_ids per DeleteDocuments call of `sync`.
_DELETE_BATCH = 500
# SourceDocument.document_id (docs/api.md#knowledge-bases), checked before sending so that
# `sync --dry-run` reports the same failures a real run would.
DOCUMENT_ID = re.compile(r"[A-Za-z0-9._/:-]{1,512}")


@dataclass
class SyncLine:
    """What sync did (or, with --dry-run, would do) with one document."""

    action: str  # added | changed | unchanged | deleted | failed
    document_id: str
    path: str = ""
    reason: str = ""
    leaves: int = 0
    #: A `changed` document whose bytes are the stored ones: only its metadata (the flags or
    #: sidecar) changed, so the service keeps its chunks and vectors and embeds nothing.
    metadata_only: bool = False

    def text(self) -> str:
        if self.action == "failed":
            return f"failed {self.document_id}: {self.reason}"
        if self.action == "deleted":
            return f"deleted {self.document_id}: {self.leaves} leaves"
        if self.action == "unchanged":
            return f"unchanged {self.document_id}"
        if self.metadata_only:
            return f"{self.action} {self.document_id}: metadata only, {self.leaves} leaves kept"
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


def unsupported_files(root: Path) -> list[str]:
    """The paths (relative to `root`, `/`-separated) of the files `sync` leaves out because
    their type is not ingested: every one is named, so none goes missing without a word.
    Hidden files and folders and `<file>.meta.json` sidecars are not counted."""
    out = []
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root)
        if any(part.startswith(".") for part in relative.parts) or not path.is_file():
            continue
        if not supported(path.name) and not path.name.endswith(SIDECAR_SUFFIX):
            out.append(relative.as_posix())
    return out


def deletion_refused(gone: int, stored: int, args: argparse.Namespace) -> str | None:
    """Why `sync` refuses to delete `gone` of the knowledge base's `stored` documents (more
    than --max-deletion-percent of them, without --allow-deletions); None when it may."""
    limit = args.max_deletion_percent
    if args.allow_deletions or not gone or gone * 100 <= limit * stored:
        return None
    return (
        f"sync refused: it would delete {gone} of the {stored} documents of the knowledge base "
        f"(more than {limit}%); nothing was sent or deleted. Pass --allow-deletions (or a "
        "higher --max-deletion-percent) if the folder is right"
    )


def _sync_summary(lines: list[SyncLine]) -> dict[str, int]:
    return {
        action: sum(line.action == action for line in lines)
        for action in ("added", "changed", "unchanged", "deleted", "failed")
    }


def sync(
    stub: retrieval_pb2_grpc.RetrievalServiceStub, args: argparse.Namespace, metadata: Metadata
) -> int:
    """Makes the knowledge base hold exactly the folder's files (see the package docstring)."""
    if not 0 <= args.max_deletion_percent <= 100:
        raise ValueError(f"--max-deletion-percent must be 0..100, got {args.max_deletion_percent}")
    root = Path(args.dir)
    if not root.is_dir():
        raise FileNotFoundError(f"no such folder: {args.dir}")
    flags = parse_metadata_flags(args.metadata)
    knowledge_base = kb_name(args.kb)
    stored = {
        d.document_id: d
        for d in document_infos(stub, knowledge_base, timeout=deadline(args), metadata=metadata)
    }
    out = None if args.json else sys.stdout
    lines: list[SyncLine] = []

    def report(line: SyncLine) -> None:
        lines.append(line)
        if out is not None:
            tqdm.write(line.text(), file=out)

    present: set[str] = set()
    # (action, document_id, file, metadata, whether the bytes are the stored ones)
    to_send: list[tuple[str, str, Path, Json, bool]] = []
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
            to_send.append(("added", document_id, path, values, False))
        elif old.content_sha256 != digest or struct_dict(old, "metadata") != values:
            same_bytes = old.content_sha256 == digest
            to_send.append(("changed", document_id, path, values, same_bytes))
        else:
            report(SyncLine("unchanged", document_id, str(path), leaves=old.l3_chunks))
    skipped = unsupported_files(root)
    if out is not None:
        for relative in skipped:
            kind = Path(relative).suffix or "(no extension)"
            tqdm.write(f"skipped {relative}: unsupported file type {kind}", file=out)

    # Before anything is sent: an empty or wrong folder must not empty the knowledge base.
    refusal = deletion_refused(len(set(stored) - present), len(stored), args)
    if refusal is not None:
        print(refusal, file=sys.stderr)
        return 1

    bars = Bars([] if args.dry_run else [p for _, _, p, _, _ in to_send])
    try:
        for i, (action, document_id, path, values, same_bytes) in enumerate(to_send, start=1):
            if args.dry_run:
                # The service copies the stored chunks when only the metadata changed (and
                # the chunking settings did not): what a real run would most likely report.
                old = stored[document_id] if same_bytes else None
                leaves = old.l3_chunks if old is not None else 0
                report(
                    SyncLine(
                        action, document_id, str(path), leaves=leaves, metadata_only=same_bytes
                    )
                )
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
                d = result.document
                done = "unchanged" if d.unchanged else action
                line = SyncLine(
                    done, document_id, str(path), leaves=d.l3_chunks, metadata_only=d.metadata_only
                )
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
                    timeout=deadline(args),
                    metadata=metadata,
                )
            except grpc.RpcError as exc:
                reason = rpc_reason(exc)
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
            "skipped": skipped,
            "summary": summary,
        }
        print(json.dumps(outcome, ensure_ascii=False, indent=2))
    else:
        counts = ", ".join(f"{n} {action}" for action, n in summary.items())
        note = " (dry run: nothing was changed)" if args.dry_run else ""
        print(f"sync {knowledge_base}: {counts}{note}")
    return 1 if summary["failed"] else 0
