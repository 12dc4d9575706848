"""The kb commands: create, get, list, update and delete knowledge bases."""

from __future__ import annotations

import argparse
import json
import sys

from google.protobuf import field_mask_pb2
from supermew.v1 import retrieval_pb2, retrieval_pb2_grpc

from retrieval_service.cli.common import (
    KB_PREFIX,
    LIST_PAGE,
    Json,
    Metadata,
    deadline,
    kb_name,
)


def _kb_dict(kb: retrieval_pb2.KnowledgeBase) -> Json:
    return {
        "name": kb.name,
        "display_name": kb.display_name,
        "description": kb.description,
        "create_time": kb.create_time.ToJsonString() if kb.HasField("create_time") else "",
        "document_count": kb.document_count,
        "chunk_count": kb.chunk_count,
        "active_index": kb.active_index,
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
            f"chunks={d['chunk_count']}\tcreated={d['create_time']}\t"
            f"active_index={d['active_index'] or '-'}"
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
        timeout=deadline(args),
        metadata=metadata,
    )
    _print_kbs(args, [reply])
    return 0


def kb_get(
    stub: retrieval_pb2_grpc.RetrievalServiceStub, args: argparse.Namespace, metadata: Metadata
) -> int:
    reply = stub.GetKnowledgeBase(
        retrieval_pb2.GetKnowledgeBaseRequest(name=kb_name(args.id)),
        timeout=deadline(args),
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
            retrieval_pb2.ListKnowledgeBasesRequest(page_size=LIST_PAGE, page_token=token),
            timeout=deadline(args),
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
        timeout=deadline(args),
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
        timeout=deadline(args),
        metadata=metadata,
    )
    print(json.dumps({"deleted": name}) if args.json else f"deleted {name}")
    return 0
