"""The index commands (docs/api.md#indexes): build another index of a knowledge base (another
embedder or chunking) as a server job and follow it, list and read indexes, switch a knowledge
base's active index, delete one. The request builders are pure: parsed arguments in, request
out."""

from __future__ import annotations

import argparse
import json
from typing import Any

from google.longrunning import operations_proto_pb2 as operations_pb2
from google.protobuf import field_mask_pb2
from supermew.v1 import retrieval_pb2, retrieval_pb2_grpc

from retrieval_service.cli.common import (
    KB_PREFIX,
    LIST_PAGE,
    Json,
    Metadata,
    deadline,
    follow_operation,
    kb_name,
    message_dict,
)
from shared.index_names import INDEXES_SEGMENT, index_kb_name, is_index_name

BuildState = retrieval_pb2.ImportDocumentsMetadata.State
IndexState = retrieval_pb2.Index.State


def index_name(text: str) -> str:
    """`knowledge_bases/{kb}/indexes/{id}` from that name or the short `KB/ID` (or
    `KB/indexes/ID`); ValueError (exit 2) for anything else, before any call."""
    name = text
    if not text.startswith(KB_PREFIX):
        kb, sep, index_id = text.partition("/")
        index_id = index_id.removeprefix(INDEXES_SEGMENT.lstrip("/"))
        name = f"{KB_PREFIX}{kb}{INDEXES_SEGMENT}{index_id}" if sep else text
    if not is_index_name(name):
        raise ValueError(
            f"{text!r} is not an index: name it knowledge_bases/KB/indexes/ID or KB/ID "
            "(each id [a-z][a-z0-9-]{0,62})"
        )
    return name


# ---- requests ------------------------------------------------------------------------------


def create_request(args: argparse.Namespace) -> retrieval_pb2.CreateIndexRequest:
    """CreateIndex for `index create KB ID [config flags]`; a flag not given leaves its field
    at zero, which takes the service's setting (IndexConfig)."""
    config = retrieval_pb2.IndexConfig(
        embedder=args.embedder or "",
        dimension=args.dimension or 0,
        chunk_size=args.chunk_size or 0,
        chunk_overlap=args.chunk_overlap or 0,
        leaf_context_header=args.leaf_context_header,
        analyzer=args.analyzer or "",
    )
    return retrieval_pb2.CreateIndexRequest(
        parent=kb_name(args.kb),
        index_id=args.id,
        index=retrieval_pb2.Index(config=config),
    )


def list_request(
    args: argparse.Namespace, page_token: str = ""
) -> retrieval_pb2.ListIndexesRequest:
    return retrieval_pb2.ListIndexesRequest(
        parent=kb_name(args.kb), page_size=LIST_PAGE, page_token=page_token
    )


def activate_request(args: argparse.Namespace) -> retrieval_pb2.UpdateKnowledgeBaseRequest:
    """The switch: UpdateKnowledgeBase of the index's knowledge base with `active_index` alone
    in the mask."""
    name = index_name(args.name)
    return retrieval_pb2.UpdateKnowledgeBaseRequest(
        knowledge_base=retrieval_pb2.KnowledgeBase(name=index_kb_name(name), active_index=name),
        update_mask=field_mask_pb2.FieldMask(paths=["active_index"]),
    )


# ---- output --------------------------------------------------------------------------------


def index_dict(index: retrieval_pb2.Index) -> Json:
    c = index.config
    return {
        "name": index.name,
        "state": IndexState.Name(index.state),
        "config": {
            "embedder": c.embedder,
            "dimension": c.dimension,
            "chunk_size": c.chunk_size,
            "chunk_overlap": c.chunk_overlap,
            "leaf_context_header": c.leaf_context_header,
            "analyzer": c.analyzer,
        },
        "documents_indexed": index.documents_indexed,
        "documents_total": index.documents_total,
        "create_time": index.create_time.ToJsonString() if index.HasField("create_time") else "",
    }


def index_line(index: retrieval_pb2.Index, *, active: bool = False) -> str:
    """One index on one line; a config field at zero shows as `-` (the service's setting)."""
    d = index_dict(index)
    c = d["config"]
    config = "  ".join(
        f"{key}={value if value not in ('', 0) else '-'}"
        for key, value in (
            ("embedder", c["embedder"]),
            ("dimension", c["dimension"]),
            ("chunk_size", c["chunk_size"]),
            ("chunk_overlap", c["chunk_overlap"]),
            ("analyzer", c["analyzer"]),
        )
    )
    header = "  leaf_context_header" if c["leaf_context_header"] else ""
    mark = "  (active)" if active else ""
    return (
        f"{d['name']}\t{d['state']}{mark}\t{config}{header}\t"
        f"documents={d['documents_indexed']}/{d['documents_total']}\tcreated={d['create_time']}"
    )


def build_progress(op: operations_pb2.Operation) -> retrieval_pb2.CreateIndexMetadata:
    metadata = retrieval_pb2.CreateIndexMetadata()
    if op.HasField("metadata"):
        op.metadata.Unpack(metadata)
    return metadata


def build_position(op: operations_pb2.Operation) -> tuple[int, int, str]:
    """Where a build is: documents it reads, documents written, its state."""
    meta = build_progress(op)
    return meta.documents_total, meta.documents_indexed, BuildState.Name(meta.state)


def build_summary(op: operations_pb2.Operation) -> str:
    meta = build_progress(op)
    line = (
        f"{op.name}  {meta.index}  {BuildState.Name(meta.state)}  {meta.progress_percent}%  "
        f"{meta.documents_indexed}/{meta.documents_total} document(s), "
        f"{meta.leaves_written} leaves written"
    )
    if op.done and op.WhichOneof("result") == "error":
        line += f"\n  error: {op.error.message}"
    return line


def _built(op: operations_pb2.Operation) -> retrieval_pb2.Index | None:
    if not op.done or op.WhichOneof("result") != "response":
        return None
    index = retrieval_pb2.Index()
    op.response.Unpack(index)
    return index


def operation_dict(op: operations_pb2.Operation) -> Json:
    out: dict[str, Any] = {
        "name": op.name,
        "done": op.done,
        "metadata": message_dict(build_progress(op)),
    }
    if op.done and op.WhichOneof("result") == "error":
        out["error"] = {"code": op.error.code, "message": op.error.message}
    elif (index := _built(op)) is not None:
        out["response"] = index_dict(index)
    return out


def _print_json(value: Any) -> None:
    print(json.dumps(value, ensure_ascii=False, indent=2))


# ---- commands ------------------------------------------------------------------------------


def index_create(
    stub: retrieval_pb2_grpc.RetrievalServiceStub, args: argparse.Namespace, metadata: Metadata
) -> int:
    """Starts the build and prints its operation's name; with --wait follows it to the end:
    0 once the index is READY, 1 when the build failed or was cancelled."""
    op = stub.CreateIndex(create_request(args), timeout=deadline(args), metadata=metadata)
    if not args.wait:
        if args.json:
            _print_json(operation_dict(op))
        else:
            print(f"started {op.name}; follow it with: operations wait {op.name}")
        return 0
    op = follow_operation(args.operations, op.name, metadata, args, build_position)
    if args.json:
        _print_json(operation_dict(op))
    else:
        print(build_summary(op))
        if (index := _built(op)) is not None:
            print(index_line(index))
    return 0 if _built(op) is not None else 1


def index_list(
    stub: retrieval_pb2_grpc.RetrievalServiceStub, args: argparse.Namespace, metadata: Metadata
) -> int:
    """Every index of a knowledge base, the active one marked."""
    indexes: list[retrieval_pb2.Index] = []
    token = ""
    while True:
        reply = stub.ListIndexes(
            list_request(args, token), timeout=deadline(args), metadata=metadata
        )
        indexes += reply.indexes
        token = reply.next_page_token
        if not token:
            break
    kb = stub.GetKnowledgeBase(
        retrieval_pb2.GetKnowledgeBaseRequest(name=kb_name(args.kb)),
        timeout=deadline(args),
        metadata=metadata,
    )
    if args.json:
        _print_json([{**index_dict(i), "active": i.name == kb.active_index} for i in indexes])
        return 0
    for index in indexes:
        print(index_line(index, active=index.name == kb.active_index))
    return 0


def index_get(
    stub: retrieval_pb2_grpc.RetrievalServiceStub, args: argparse.Namespace, metadata: Metadata
) -> int:
    request = retrieval_pb2.GetIndexRequest(name=index_name(args.name))
    index = stub.GetIndex(request, timeout=deadline(args), metadata=metadata)
    if args.json:
        _print_json(index_dict(index))
    else:
        print(index_line(index))
    return 0


def index_activate(
    stub: retrieval_pb2_grpc.RetrievalServiceStub, args: argparse.Namespace, metadata: Metadata
) -> int:
    request = activate_request(args)
    kb = stub.UpdateKnowledgeBase(request, timeout=deadline(args), metadata=metadata)
    if args.json:
        _print_json({"knowledge_base": kb.name, "active_index": kb.active_index})
    else:
        print(f"{kb.name} now reads {kb.active_index}")
    return 0


def index_delete(
    stub: retrieval_pb2_grpc.RetrievalServiceStub, args: argparse.Namespace, metadata: Metadata
) -> int:
    name = index_name(args.name)
    stub.DeleteIndex(
        retrieval_pb2.DeleteIndexRequest(name=name), timeout=deadline(args), metadata=metadata
    )
    print(json.dumps({"deleted": name}) if args.json else f"deleted {name}")
    return 0


def add_index_parsers(sub: Any, command: Any) -> None:
    """Registers `index create|list|get|activate|delete` on the CLI's subparsers."""
    ix = sub.add_parser("index", help="build, list, read, switch to or delete indexes")
    ix_sub = ix.add_subparsers(dest="index_command", required=True)
    name_help = "knowledge_bases/KB/indexes/ID (or KB/ID)"
    p = command("create", index_create, "build another index of a knowledge base", ix_sub)
    p.add_argument("kb", help="the knowledge base id or name")
    p.add_argument("id", help="the new index's id, [a-z][a-z0-9-]{0,62}")
    p.add_argument("--embedder", metavar="NAME", help="a name EMBEDDERS declares (builtin)")
    p.add_argument("--dimension", type=int, metavar="N", help="the embedder's vector size")
    p.add_argument("--chunk-size", type=int, metavar="N", help="leaf size, 64..8192 characters")
    p.add_argument("--chunk-overlap", type=int, metavar="N", help="characters leaves share")
    p.add_argument(
        "--leaf-context-header",
        action="store_true",
        help="embed each leaf with its document's title and section path",
    )
    p.add_argument("--analyzer", metavar="NAME", help="BM25 analyzer of the leaf text (standard)")
    p.add_argument("--wait", action="store_true", help="follow the build to its end")
    p = command("list", index_list, "a knowledge base's indexes, the active one marked", ix_sub)
    p.add_argument("kb", help="the knowledge base id or name")
    p = command("get", index_get, "one index with its build progress", ix_sub)
    p.add_argument("name", help=name_help)
    p = command("activate", index_activate, "make a READY index the one reads use", ix_sub)
    p.add_argument("name", help=name_help)
    p = command("delete", index_delete, "delete an index that is not the active one", ix_sub)
    p.add_argument("name", help=name_help)
