"""The search command: one Retrieve, its ranked chunks printed or as JSON."""

from __future__ import annotations

import argparse
import json

from supermew.v1 import retrieval_pb2, retrieval_pb2_grpc

from retrieval_service.cli.common import Metadata, deadline, message_dict, struct_dict


def _excerpt(text: str, limit: int = 160) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def search_request(args: argparse.Namespace) -> retrieval_pb2.RetrieveRequest:
    """The Retrieve of `search QUERY [--kb ID]… [--filter F] [--top-k N] [--index NAME]`."""
    request = retrieval_pb2.RetrieveRequest(
        query=args.query,
        knowledge_bases=args.kb or [],
        filter=args.filter or "",
        index=args.index or "",
    )
    if args.top_k is not None:
        request.top_k = args.top_k
    return request


def search(
    stub: retrieval_pb2_grpc.RetrievalServiceStub, args: argparse.Namespace, metadata: Metadata
) -> int:
    """One Retrieve: the ranked chunks with their document and metadata."""
    request = search_request(args)
    reply = stub.Retrieve(request, timeout=deadline(args), metadata=metadata)
    if args.json:
        print(json.dumps(message_dict(reply), ensure_ascii=False, indent=2))
        return 0
    for rank, chunk in enumerate(reply.docs, start=1):
        score = chunk.rerank_score if chunk.HasField("rerank_score") else chunk.score
        values = struct_dict(chunk, "metadata")
        where = f"{chunk.knowledge_base}, page {chunk.page_number}"
        line = f"{rank}. {score:.4f}  {chunk.document_id or chunk.filename}  ({where})"
        if values:
            line += f"  {json.dumps(values, ensure_ascii=False)}"
        print(line)
        print(f"   {_excerpt(chunk.text)}")
    mode = reply.meta.retrieval_mode if reply.meta.HasField("retrieval_mode") else ""
    print(f"{len(reply.docs)} chunk(s), retrieval_mode={mode}")
    return 0
