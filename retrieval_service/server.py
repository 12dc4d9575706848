"""The gRPC servicer: proto in → one call into the core → proto out. Conversion of evidence
and meta goes through the shared codec, Struct ↔ dict and Timestamp ↔ epoch milliseconds
happen here; errors are domain errors mapped by shared.serve. A call's deadline reaches the
embedder as a `time.monotonic()` instant."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

import grpc
from google.longrunning import operations_proto_pb2 as operations_pb2
from google.protobuf import empty_pb2, json_format, struct_pb2, timestamp_pb2
from supermew.v1 import retrieval_pb2, retrieval_pb2_grpc

from retrieval_service.core.documents import DocumentEntry
from retrieval_service.core.identity import kb_id_of, kb_name
from retrieval_service.core.indexes.model import index_name
from retrieval_service.core.indexes.service import Indexes
from retrieval_service.core.ingest import IngestedDocument, Ingestor, IngestProgress, SourceDocument
from retrieval_service.core.knowledge_bases import KnowledgeBase, KnowledgeBases
from retrieval_service.core.recall import RetrievalPipeline
from retrieval_service.imports import Imports
from retrieval_service.index_builds import IndexBuilds, index_to_proto
from shared.access import Permission, Principal, current_principal
from shared.codec import chunk_to_proto, retrieval_meta_to_proto
from shared.index_names import index_kb_name, is_index_name
from shared.operations import operation_to_proto


def authorize(permission: Permission, names: Sequence[str], field: str) -> Principal:
    """The caller, once it holds `permission` on every knowledge base `names` names (none: the
    default), checked before the store is asked whether they exist, so a key learns nothing
    of knowledge bases it may not use. A malformed name is INVALID_ARGUMENT naming `field`
    (`field[i]` for a list)."""
    principal = current_principal()
    listed = field.endswith("s")
    for i, text in enumerate(names or [""]):
        named = kb_name(text, f"{field}[{i}]" if listed else field)
        principal.require(permission, kb_id_of(named))
    return principal


def authorize_named(permission: Permission, text: str, field: str) -> Principal:
    """`authorize` for a knowledge-base RPC's one name; an empty one is left to the RPC
    (INVALID_ARGUMENT naming `field`)."""
    return authorize(permission, [text], field) if text else current_principal()


def deadline_of(context: grpc.aio.ServicerContext) -> float | None:
    """The call's deadline on the monotonic clock; None when the caller set none."""
    remaining = context.time_remaining()
    return None if remaining is None else time.monotonic() + remaining


def struct_to_dict(struct: struct_pb2.Struct) -> dict[str, Any]:
    return dict(json_format.MessageToDict(struct))


def dict_to_struct(values: dict[str, Any]) -> struct_pb2.Struct:
    struct = struct_pb2.Struct()
    struct.update(values)
    return struct


def timestamp(epoch_ms: int) -> timestamp_pb2.Timestamp:
    stamp = timestamp_pb2.Timestamp()
    stamp.FromMilliseconds(epoch_ms)
    return stamp


def documents_from_proto(request: retrieval_pb2.IngestDocumentsRequest) -> list[SourceDocument]:
    return [
        SourceDocument(
            filename=d.filename,
            content=d.content,
            file_type=d.file_type if d.HasField("file_type") else None,
            document_id=d.document_id if d.HasField("document_id") else None,
            metadata=struct_to_dict(d.metadata) if d.HasField("metadata") else None,
        )
        for d in request.documents
    ]


def ingest_response(reports: Sequence[IngestedDocument]) -> retrieval_pb2.IngestDocumentsResponse:
    return retrieval_pb2.IngestDocumentsResponse(
        documents=[
            retrieval_pb2.IngestedDocument(
                filename=r.filename,
                file_type=r.file_type,
                pages=r.pages,
                l1_chunks=r.l1_chunks,
                l2_chunks=r.l2_chunks,
                l3_chunks=r.l3_chunks,
                replaced=r.replaced,
                document_id=r.document_id,
                content_sha256=r.content_sha256,
                unchanged=r.unchanged,
                knowledge_base=r.knowledge_base,
                metadata_only=r.metadata_only,
            )
            for r in reports
        ]
    )


def progress_to_proto(progress: IngestProgress) -> retrieval_pb2.IngestProgress:
    return retrieval_pb2.IngestProgress(
        filename=progress.filename,
        leaves_done=progress.leaves_done,
        leaves_total=progress.leaves_total,
        elapsed_ms=progress.elapsed_ms,
        document_id=progress.document_id,
    )


def document_info(e: DocumentEntry) -> retrieval_pb2.DocumentInfo:
    info = retrieval_pb2.DocumentInfo(
        filename=e.filename,
        file_type=e.file_type,
        pages=e.pages,
        l1_chunks=e.level_count(1),
        l2_chunks=e.level_count(2),
        l3_chunks=e.level_count(3),
        document_id=e.document_id,
        knowledge_base=e.knowledge_base,
        content_sha256=e.content_sha256,
        ingest_time=timestamp(e.ingest_time),
        size_bytes=e.size_bytes,
    )
    if e.metadata:
        info.metadata.CopyFrom(dict_to_struct(e.metadata))
    return info


def knowledge_base_to_proto(kb: KnowledgeBase) -> retrieval_pb2.KnowledgeBase:
    return retrieval_pb2.KnowledgeBase(
        name=kb.record.name,
        display_name=kb.record.display_name,
        description=kb.record.description,
        create_time=timestamp(kb.record.create_time),
        document_count=kb.document_count,
        chunk_count=kb.chunk_count,
        active_index=index_name(kb.record.name, kb.record.active_index),
    )


class RetrievalServicer(retrieval_pb2_grpc.RetrievalServiceServicer):
    def __init__(
        self,
        pipeline: RetrievalPipeline,
        ingestor: Ingestor,
        knowledge_bases: KnowledgeBases | None = None,
        imports: Imports | None = None,
        indexes: Indexes | None = None,
        builds: IndexBuilds | None = None,
    ) -> None:
        """`knowledge_bases`, `imports`, `indexes` and `builds`: the knowledge-base RPCs,
        ImportDocuments and the index RPCs (None: they answer UNIMPLEMENTED, for rigs that
        serve recall and ingest only)."""
        self._pipeline = pipeline
        self._ingestor = ingestor
        self._kbs = knowledge_bases
        self._imports = imports
        self._indexes = indexes
        self._builds = builds

    async def ImportDocuments(
        self, request: retrieval_pb2.ImportDocumentsRequest, context: grpc.aio.ServicerContext
    ) -> operations_pb2.Operation:
        if self._imports is None:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "imports are not served")
        assert self._imports is not None
        caller = authorize(Permission.WRITE, [request.knowledge_base], "knowledge_base")
        return operation_to_proto(await self._imports.start(request, caller.groups))

    async def _knowledge_bases(self, context: grpc.aio.ServicerContext) -> KnowledgeBases:
        if self._kbs is None:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "knowledge bases are not served")
        assert self._kbs is not None
        return self._kbs

    async def Retrieve(
        self, request: retrieval_pb2.RetrieveRequest, context: grpc.aio.ServicerContext
    ) -> retrieval_pb2.RetrieveResponse:
        caller = authorize(Permission.READ, request.knowledge_bases, "knowledge_bases")
        if request.index:
            authorize_named(Permission.READ, kb_of_index(request.index), "index")
        top_k = request.top_k if request.HasField("top_k") else None
        result = await self._pipeline.retrieve(
            request.query,
            top_k,
            knowledge_bases=list(request.knowledge_bases),
            filter_text=request.filter,
            deadline=deadline_of(context),
            groups=caller.groups,
            index=request.index,
        )
        return retrieval_pb2.RetrieveResponse(
            docs=[chunk_to_proto(doc) for doc in result.docs],
            meta=retrieval_meta_to_proto(result.meta.to_dict()),
        )

    async def IngestDocuments(
        self, request: retrieval_pb2.IngestDocumentsRequest, context: grpc.aio.ServicerContext
    ) -> retrieval_pb2.IngestDocumentsResponse:
        caller = authorize(Permission.WRITE, [request.knowledge_base], "knowledge_base")
        reports = await self._ingestor.ingest(
            documents_from_proto(request),
            knowledge_base=request.knowledge_base,
            deadline=deadline_of(context),
            groups=caller.groups,
        )
        return ingest_response(reports)

    async def StreamIngestDocuments(
        self, request: retrieval_pb2.IngestDocumentsRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[retrieval_pb2.IngestEvent]:
        caller = authorize(Permission.WRITE, [request.knowledge_base], "knowledge_base")
        events = self._ingestor.ingest_events(
            documents_from_proto(request),
            knowledge_base=request.knowledge_base,
            deadline=deadline_of(context),
            groups=caller.groups,
        )
        async for event in events:
            if isinstance(event, IngestProgress):
                yield retrieval_pb2.IngestEvent(progress=progress_to_proto(event))
            else:
                yield retrieval_pb2.IngestEvent(result=ingest_response(event.documents))

    async def DeleteDocuments(
        self, request: retrieval_pb2.DeleteDocumentsRequest, context: grpc.aio.ServicerContext
    ) -> retrieval_pb2.DeleteDocumentsResponse:
        caller = authorize(Permission.WRITE, [request.knowledge_base], "knowledge_base")
        deleted = await self._ingestor.delete(
            list(request.filenames),
            list(request.document_ids),
            knowledge_base=request.knowledge_base,
            groups=caller.groups,
        )
        return retrieval_pb2.DeleteDocumentsResponse(deleted_chunks=deleted)

    async def ListDocuments(
        self, request: retrieval_pb2.ListDocumentsRequest, context: grpc.aio.ServicerContext
    ) -> retrieval_pb2.ListDocumentsResponse:
        caller = authorize(Permission.READ, [request.knowledge_base], "knowledge_base")
        page = await self._ingestor.list_page(
            request.page_size,
            request.page_token,
            knowledge_base=request.knowledge_base,
            groups=caller.groups,
        )
        return retrieval_pb2.ListDocumentsResponse(
            next_page_token=page.next_page_token,
            documents=[document_info(e) for e in page.entries],
        )

    async def CreateKnowledgeBase(
        self, request: retrieval_pb2.CreateKnowledgeBaseRequest, context: grpc.aio.ServicerContext
    ) -> retrieval_pb2.KnowledgeBase:
        kbs = await self._knowledge_bases(context)
        authorize_named(Permission.MANAGE, request.knowledge_base_id, "knowledge_base_id")
        kb = request.knowledge_base
        created = await kbs.create(request.knowledge_base_id, kb.display_name, kb.description)
        return knowledge_base_to_proto(created)

    async def GetKnowledgeBase(
        self, request: retrieval_pb2.GetKnowledgeBaseRequest, context: grpc.aio.ServicerContext
    ) -> retrieval_pb2.KnowledgeBase:
        kbs = await self._knowledge_bases(context)
        caller = authorize_named(Permission.READ, request.name, "name")
        return knowledge_base_to_proto(await kbs.get(request.name, groups=caller.groups))

    async def ListKnowledgeBases(
        self, request: retrieval_pb2.ListKnowledgeBasesRequest, context: grpc.aio.ServicerContext
    ) -> retrieval_pb2.ListKnowledgeBasesResponse:
        kbs = await self._knowledge_bases(context)
        caller = current_principal()
        page = await kbs.list_page(
            request.page_size, request.page_token, usable=caller.may_use, groups=caller.groups
        )
        return retrieval_pb2.ListKnowledgeBasesResponse(
            knowledge_bases=[knowledge_base_to_proto(kb) for kb in page.knowledge_bases],
            next_page_token=page.next_page_token,
        )

    async def UpdateKnowledgeBase(
        self, request: retrieval_pb2.UpdateKnowledgeBaseRequest, context: grpc.aio.ServicerContext
    ) -> retrieval_pb2.KnowledgeBase:
        kbs = await self._knowledge_bases(context)
        kb = request.knowledge_base
        caller = authorize_named(Permission.MANAGE, kb.name, "knowledge_base.name")
        updated = await kbs.update(
            kb.name,
            kb.display_name,
            kb.description,
            list(request.update_mask.paths),
            groups=caller.groups,
            active_index=kb.active_index,
        )
        return knowledge_base_to_proto(updated)

    async def DeleteKnowledgeBase(
        self, request: retrieval_pb2.DeleteKnowledgeBaseRequest, context: grpc.aio.ServicerContext
    ) -> empty_pb2.Empty:
        kbs = await self._knowledge_bases(context)
        authorize_named(Permission.MANAGE, request.name, "name")
        await kbs.delete(request.name, request.force)
        return empty_pb2.Empty()

    # ---- indexes (docs/api.md#indexes) ----------------------------------------------------

    async def _served_indexes(self, context: grpc.aio.ServicerContext) -> Indexes:
        if self._indexes is None:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "indexes are not served")
        assert self._indexes is not None
        return self._indexes

    async def CreateIndex(
        self, request: retrieval_pb2.CreateIndexRequest, context: grpc.aio.ServicerContext
    ) -> operations_pb2.Operation:
        await self._served_indexes(context)
        if self._builds is None:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "index builds are not served")
        assert self._builds is not None
        authorize_named(Permission.MANAGE, request.parent, "parent")
        return operation_to_proto(await self._builds.start(request))

    async def GetIndex(
        self, request: retrieval_pb2.GetIndexRequest, context: grpc.aio.ServicerContext
    ) -> retrieval_pb2.Index:
        indexes = await self._served_indexes(context)
        authorize_named(Permission.READ, kb_of_index(request.name), "name")
        return index_to_proto(await indexes.get(request.name))

    async def ListIndexes(
        self, request: retrieval_pb2.ListIndexesRequest, context: grpc.aio.ServicerContext
    ) -> retrieval_pb2.ListIndexesResponse:
        indexes = await self._served_indexes(context)
        authorize_named(Permission.READ, request.parent, "parent")
        page = await indexes.list_page(request.parent, request.page_size, request.page_token)
        return retrieval_pb2.ListIndexesResponse(
            indexes=[index_to_proto(r) for r in page.indexes],
            next_page_token=page.next_page_token,
        )

    async def DeleteIndex(
        self, request: retrieval_pb2.DeleteIndexRequest, context: grpc.aio.ServicerContext
    ) -> empty_pb2.Empty:
        indexes = await self._served_indexes(context)
        authorize_named(Permission.MANAGE, kb_of_index(request.name), "name")
        await indexes.delete(request.name)
        return empty_pb2.Empty()


def kb_of_index(text: str) -> str:
    """The knowledge base a well-formed index name is inside, for the access check before
    the RPC (a malformed name passes as it is: the RPC answers INVALID_ARGUMENT for it)."""
    return index_kb_name(text) if is_index_name(text) else text
