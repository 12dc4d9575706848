"""A scripted RetrievalService as a real in-process `grpc.aio` server on 127.0.0.1: replies
keyed by query (docs as runtime chunk dicts plus a meta dict, or a failure status with or
without retrieval's typed details), every query recorded with the knowledge bases, filter and
index it was sent with."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
from supermew.v1 import retrieval_pb2, retrieval_pb2_grpc

from shared.codec import chunk_to_proto, retrieval_meta_to_proto
from shared.error_details import ERROR_REASONS, abort_with, rich_status
from shared.serve import STATUS_FOR_ERROR


@dataclass(frozen=True)
class Scripted:
    docs: Sequence[Mapping[str, Any]]
    meta: Mapping[str, Any]


@dataclass(frozen=True)
class Failure:
    """A scripted reply that ends the call with `code` and `details`, as retrieval's error
    table would (e.g. NOT_FOUND "knowledge_bases[0]: ..."), with the typed details retrieval
    attaches (shared/error_details.py): an ErrorInfo whose reason is `reason` (None: the one
    retrieval gives `code`) and whose field is `field` (a BadRequest too for INVALID_ARGUMENT,
    describing it with `details` after "field: "). `field` None: no field, as for retrieval's
    errors about no request field. `typed` False: no details at all, as an older retrieval or
    a proxy would answer."""

    code: grpc.StatusCode
    details: str
    field: str | None = None
    reason: str | None = None
    typed: bool = True

    def status(self) -> grpc.Status:
        # Retrieval's reason for `code`: the one named after it (INTERNAL, not
        # MODEL_OUTPUT_INVALID), else that of the first domain error it is the status of.
        reasons = [ERROR_REASONS[e] for e, code in STATUS_FOR_ERROR.items() if code == self.code]
        reason = self.reason or (
            self.code.name if self.code.name in reasons or not reasons else reasons[0]
        )
        described = self.field and self.code == grpc.StatusCode.INVALID_ARGUMENT
        return rich_status(
            self.code,
            self.details,
            reason=reason,
            field=self.field,
            description=self.details.removeprefix(f"{self.field}: ") if described else None,
        )


def field_of(details: str) -> str | None:
    """The field a domain error's message starts with ("knowledge_bases[1]: …"), as
    retrieval's errors name it; None for a message that names none."""
    head, sep, _ = details.partition(": ")
    return head if sep and head and " " not in head else None


@dataclass(frozen=True)
class Sent:
    """What one RetrieveRequest asked for."""

    query: str
    knowledge_bases: tuple[str, ...]
    filter: str
    index: str = ""


def meta(n: int, **overrides: Any) -> dict[str, Any]:
    """A plausible retrieval meta for `n` results (None values are skipped on the wire)."""
    base: dict[str, Any] = {
        "retrieval_pipeline": "recall_merge_rerank",
        "retrieval_mode": "hybrid",
        "candidate_k": 24,
        "candidate_k_source": "multiplier",
        "retrieval_candidate_multiplier": 3,
        "retrieval_top_k": 8,
        "leaf_retrieve_level": 3,
        "recall_count": n,
        "post_merge_candidate_count": n,
        "candidate_count": n,
        "auto_merge_enabled": True,
        "auto_merge_applied": False,
        "auto_merge_threshold": 2,
        "auto_merge_replaced_chunks": 0,
        "auto_merge_steps": 0,
        "rerank_enabled": False,
        "rerank_applied": False,
        "rerank_endpoint": "",
        "rerank_timeout_seconds": 5.0,
        "rerank_min_score": 0.0,
        "post_rerank_count": n,
        "post_threshold_count": n,
        "retrieval_empty": n == 0,
    }
    base.update(overrides)
    return {k: v for k, v in base.items() if v is not None}


def chunk(
    filename: str, page: str, text: str, *, score: float = 0.5, rrf_rank: int = 1,
    chunk_id: str | None = None, rerank_score: float | None = None, **extra: Any,
) -> dict[str, Any]:  # fmt: skip
    """A runtime chunk record, as `shared.codec.chunk_from_proto` decodes it: the 18 keys that
    are always there, plus `rerank_score` / `metadata` when given. The document is the file in
    the default knowledge base unless `document_id=` / `knowledge_base=` say otherwise."""
    record: dict[str, Any] = {
        "id": extra.pop("id", 1000 + rrf_rank),
        "filename": filename,
        "file_type": "Text",
        "file_path": "",
        "page_number": page,
        "text": text,
        "score": score,
        "rrf_rank": rrf_rank,
        "chunk_idx": rrf_rank,
        "chunk_id": f"{filename}::p{page}::l3::{rrf_rank}" if chunk_id is None else chunk_id,
        "parent_chunk_id": "",
        "root_chunk_id": "",
        "chunk_level": 3,
        "merged_from_children": False,
        "merged_child_count": 0,
        "document_id": filename,
        "knowledge_base": "knowledge_bases/default",
    }
    if rerank_score is not None:
        record["rerank_score"] = rerank_score
    record.update(extra)
    return record


@dataclass
class RetrievalScript:
    """Replies per query; a list is consumed in order (the last repeats). Unknown queries get
    an empty hybrid result."""

    replies: dict[str, list[Scripted | Failure]] = field(default_factory=dict)
    delay: float = 0.0

    def add(
        self, query: str, docs: Sequence[Mapping[str, Any]], meta_: Mapping[str, Any] | None = None
    ) -> RetrievalScript:
        self.replies.setdefault(query, []).append(
            Scripted(list(docs), dict(meta_) if meta_ is not None else meta(len(docs)))
        )
        return self

    def fail(
        self, query: str, code: grpc.StatusCode, details: str, *, typed: bool = True
    ) -> RetrievalScript:
        """The next Retrieve of `query` ends with `code` and `details`, and the typed details
        retrieval would attach (the field its message starts with); `typed` False: none,
        as an older retrieval or a proxy would answer."""
        return self.fail_with(query, Failure(code, details, field_of(details), typed=typed))

    def fail_with(self, query: str, failure: Failure) -> RetrievalScript:
        """The next Retrieve of `query` ends with `failure`, whatever its details say (a
        field or reason its message does not suggest)."""
        self.replies.setdefault(query, []).append(failure)
        return self

    def next_reply(self, query: str) -> Scripted | Failure:
        queue = self.replies.get(query)
        if not queue:
            return Scripted([], meta(0))
        return queue.pop(0) if len(queue) > 1 else queue[0]


class _Servicer(retrieval_pb2_grpc.RetrievalServiceServicer):
    def __init__(self, owner: FakeRetrieval) -> None:
        self._owner = owner

    async def Retrieve(self, request, context):
        owner = self._owner
        owner.queries.append(request.query)
        owner.top_ks.append(request.top_k if request.HasField("top_k") else None)
        owner.sent.append(
            Sent(request.query, tuple(request.knowledge_bases), request.filter, request.index)
        )
        if owner.script.delay:
            await asyncio.sleep(owner.script.delay)
        reply = owner.script.next_reply(request.query)
        if isinstance(reply, Failure):
            if reply.typed:
                await abort_with(context, reply.status())
            await context.abort(reply.code, reply.details)
            raise AssertionError("abort raises")  # for the type checker: never reached
        return retrieval_pb2.RetrieveResponse(
            docs=[chunk_to_proto(d) for d in reply.docs], meta=retrieval_meta_to_proto(reply.meta)
        )


class FakeRetrieval:
    def __init__(self, script: RetrievalScript | None = None) -> None:
        self.script = script or RetrievalScript()
        self.queries: list[str] = []
        self.top_ks: list[int | None] = []
        self.sent: list[Sent] = []  # every RetrieveRequest, in arrival order
        self._server: grpc.aio.Server | None = None
        self.port = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def start(self) -> FakeRetrieval:
        self._server = grpc.aio.server()
        retrieval_pb2_grpc.add_RetrievalServiceServicer_to_server(_Servicer(self), self._server)
        self.port = self._server.add_insecure_port("127.0.0.1:0")
        await self._server.start()
        return self

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.stop(0)

    async def __aenter__(self) -> FakeRetrieval:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
