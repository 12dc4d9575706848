"""The import and operations commands (docs/api.md#imports): start an ImportDocuments job and
follow it (`--wait`: a progress bar until it is done), and list, get, wait for or cancel
operations — imports and index builds (CreateIndex, shown as `index create` shows them). The
job runs on the server, so a closed terminal does not stop it."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from google.longrunning import operations_proto_pb2 as operations_pb2
from supermew.v1 import retrieval_pb2, retrieval_pb2_grpc

from retrieval_service.cli.common import (
    Metadata,
    deadline,
    follow_operation,
    kb_name,
    message_dict,
    parse_metadata_flags,
)
from retrieval_service.cli.indexes import build_position, build_summary, operation_dict

State = retrieval_pb2.ImportDocumentsMetadata.State
COUNTS = ("new", "replaced", "unchanged", "deleted", "failed", "skipped")


def as_uri(text: str) -> str:
    """A uri as given; a bare path becomes the `file://` uri of its absolute path (the server
    reads it: the same machine or a shared volume)."""
    if urlsplit(text).scheme:
        return text
    return Path(text).resolve().as_uri()


def progress_of(op: operations_pb2.Operation) -> retrieval_pb2.ImportDocumentsMetadata:
    metadata = retrieval_pb2.ImportDocumentsMetadata()
    if op.HasField("metadata"):
        op.metadata.Unpack(metadata)
    return metadata


def is_build(op: operations_pb2.Operation) -> bool:
    """Whether the operation is an index build (its metadata a CreateIndexMetadata)."""
    return op.metadata.Is(retrieval_pb2.CreateIndexMetadata.DESCRIPTOR)


def summary(op: operations_pb2.Operation) -> str:
    if is_build(op):
        return build_summary(op)
    meta = progress_of(op)
    counts = ", ".join(f"{name} {getattr(meta, 'documents_' + name)}" for name in COUNTS)
    line = (
        f"{op.name}  {State.Name(meta.state)}  {meta.progress_percent}%  "
        f"{meta.documents_total} document(s): {counts}; {meta.leaves_written} leaves written"
    )
    if op.done and op.WhichOneof("result") == "error":
        line += f"\n  error: {op.error.message}"
    return line


def failures(op: operations_pb2.Operation) -> list[str]:
    if not op.done or op.WhichOneof("result") != "response" or is_build(op):
        return []
    response = retrieval_pb2.ImportDocumentsResponse()
    op.response.Unpack(response)
    return [f"  failed {f.document_id}: {f.status.message}" for f in response.failures]


def _as_json(op: operations_pb2.Operation) -> dict[str, Any]:
    if is_build(op):
        return operation_dict(op)
    out: dict[str, Any] = {"name": op.name, "done": op.done}
    out["metadata"] = message_dict(progress_of(op))
    if op.done and op.WhichOneof("result") == "error":
        out["error"] = {"code": op.error.code, "message": op.error.message}
    elif op.done:
        response = retrieval_pb2.ImportDocumentsResponse()
        op.response.Unpack(response)
        out["response"] = message_dict(response)
    return out


def _print(op: operations_pb2.Operation, args: argparse.Namespace) -> None:
    if args.json:
        print(json.dumps(_as_json(op), ensure_ascii=False, indent=2))
        return
    print(summary(op))
    for line in failures(op):
        print(line)


def _exit_code(op: operations_pb2.Operation) -> int:
    """0 for a finished import with no failed document, 1 otherwise (failed, cancelled, or
    some documents failed), 3 while it still runs."""
    if not op.done:
        return 3
    if op.WhichOneof("result") == "error":
        return 1
    return 1 if progress_of(op).documents_failed else 0


def position(op: operations_pb2.Operation) -> tuple[int, int, str]:
    """Where an import (or an index build) is: documents in all, done, and its state."""
    if is_build(op):
        return build_position(op)
    meta = progress_of(op)
    done = meta.documents_new + meta.documents_replaced + meta.documents_unchanged
    return meta.documents_total, done + meta.documents_failed, State.Name(meta.state)


def follow(
    ops: Any, name: str, metadata: Metadata, timeout: float | None, args: argparse.Namespace
) -> operations_pb2.Operation:
    """Reads the operation until it is done (or `timeout` seconds), a bar over its documents
    on stderr (those imported, or those an index build wrote)."""
    return follow_operation(ops, name, metadata, args, position, timeout)


def import_documents(
    stub: retrieval_pb2_grpc.RetrievalServiceStub, args: argparse.Namespace, metadata: Metadata
) -> int:
    """Starts one ImportDocuments; with --wait follows it to the end."""
    request = retrieval_pb2.ImportDocumentsRequest(
        knowledge_base=kb_name(args.kb) if args.kb else "",
        uris=[as_uri(u) for u in args.uris],
        include_globs=args.include or [],
        exclude_globs=args.exclude or [],
        delete_missing=args.delete_missing,
        max_deletion_percent=args.max_deletion_percent or 0,
        request_id=args.request_id or "",
    )
    request.metadata.update(parse_metadata_flags(args.metadata))
    op = stub.ImportDocuments(request, timeout=deadline(args), metadata=metadata)
    if not args.wait:
        if not args.json:
            print(f"started {op.name}; follow it with: operations wait {op.name}")
        else:
            _print(op, args)
        return 0
    op = follow(args.operations, op.name, metadata, None, args)
    _print(op, args)
    return _exit_code(op)


def operations_list(
    stub: retrieval_pb2_grpc.RetrievalServiceStub, args: argparse.Namespace, metadata: Metadata
) -> int:
    terms = [args.filter] if args.filter else []
    if args.kb:
        terms.append(f'knowledge_base = "{kb_name(args.kb)}"')
    request = operations_pb2.ListOperationsRequest(filter=" AND ".join(terms), page_size=500)
    listed: list[operations_pb2.Operation] = []
    while True:
        reply = args.operations.ListOperations(request, timeout=deadline(args), metadata=metadata)
        listed.extend(reply.operations)
        if not reply.next_page_token:
            break
        request.page_token = reply.next_page_token
    if args.json:
        print(json.dumps([_as_json(op) for op in listed], ensure_ascii=False, indent=2))
    else:
        for op in listed:
            print(summary(op))
        print(f"{len(listed)} operation(s)")
    return 0


def operations_get(
    stub: retrieval_pb2_grpc.RetrievalServiceStub, args: argparse.Namespace, metadata: Metadata
) -> int:
    request = operations_pb2.GetOperationRequest(name=args.name)
    op = args.operations.GetOperation(request, timeout=deadline(args), metadata=metadata)
    _print(op, args)
    return 0


def operations_wait(
    stub: retrieval_pb2_grpc.RetrievalServiceStub, args: argparse.Namespace, metadata: Metadata
) -> int:
    """Follows an operation until it is done, or `--for` seconds."""
    op = follow(args.operations, args.name, metadata, args.wait_for, args)
    _print(op, args)
    return _exit_code(op)


def operations_cancel(
    stub: retrieval_pb2_grpc.RetrievalServiceStub, args: argparse.Namespace, metadata: Metadata
) -> int:
    request = operations_pb2.CancelOperationRequest(name=args.name)
    args.operations.CancelOperation(request, timeout=deadline(args), metadata=metadata)
    print(f"cancel requested for {args.name}; it stops after its current batch")
    return 0


def add_import_parsers(sub: Any, command: Any, kb_flag: str, meta_help: str) -> None:
    p = command("import", import_documents, "import files, folders or URLs as a server job")
    p.add_argument("uris", nargs="+", help="file:///…, http(s)://…, or a path (made file://)")
    p.add_argument("--kb", help=kb_flag)
    p.add_argument("--include", action="append", metavar="GLOB", help="import only matches")
    p.add_argument("--exclude", action="append", metavar="GLOB", help="skip matches")
    p.add_argument("--metadata", action="append", metavar="KEY=VALUE", help=meta_help)
    p.add_argument(
        "--delete-missing",
        action="store_true",
        help="delete documents this source brought in earlier that it no longer holds",
    )
    p.add_argument(
        "--max-deletion-percent",
        type=int,
        metavar="N",
        help="refuse --delete-missing above N%% of the source's documents (default 50)",
    )
    p.add_argument("--request-id", help="idempotency key: the same id answers the same job")
    p.add_argument("--wait", action="store_true", help="follow the job to its end")

    ops = sub.add_parser("operations", help="list, get, wait for or cancel operations")
    ops_sub = ops.add_subparsers(dest="operations_command", required=True)
    p = command("list", operations_list, "operations, newest first", ops_sub)
    p.add_argument("--filter", help='e.g. "done = false" or "state = FAILED"')
    p.add_argument("--kb", help="only this knowledge base's")
    p = command("get", operations_get, "one operation", ops_sub)
    p.add_argument("name", help="operations/{id}")
    p = command("wait", operations_wait, "follow an operation to its end", ops_sub)
    p.add_argument("name", help="operations/{id}")
    p.add_argument("--for", dest="wait_for", type=float, metavar="S", help="at most S seconds")
    p = command("cancel", operations_cancel, "stop an operation after its current batch", ops_sub)
    p.add_argument("name", help="operations/{id}")
