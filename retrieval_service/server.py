"""The gRPC servicer: proto in → one call into the core → proto out. Conversion of evidence
and meta goes through the shared codec; errors are domain errors mapped by shared.serve. A
call's deadline reaches the embedder as a `time.monotonic()` instant."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Sequence

import grpc
from supermew.v1 import retrieval_pb2, retrieval_pb2_grpc

from retrieval_service.core.ingest import IngestedDocument, Ingestor, IngestProgress, SourceDocument
from retrieval_service.core.recall import RetrievalPipeline
from shared.codec import chunk_to_proto, retrieval_meta_to_proto


def deadline_of(context: grpc.aio.ServicerContext) -> float | None:
    """The call's deadline on the monotonic clock; None when the caller set none."""
    remaining = context.time_remaining()
    return None if remaining is None else time.monotonic() + remaining


def documents_from_proto(request: retrieval_pb2.IngestDocumentsRequest) -> list[SourceDocument]:
    return [
        SourceDocument(
            filename=d.filename,
            content=d.content,
            file_type=d.file_type if d.HasField("file_type") else None,
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
    )


class RetrievalServicer(retrieval_pb2_grpc.RetrievalServiceServicer):
    def __init__(self, pipeline: RetrievalPipeline, ingestor: Ingestor) -> None:
        self._pipeline = pipeline
        self._ingestor = ingestor

    async def Retrieve(
        self, request: retrieval_pb2.RetrieveRequest, context: grpc.aio.ServicerContext
    ) -> retrieval_pb2.RetrieveResponse:
        top_k = request.top_k if request.HasField("top_k") else None
        result = await self._pipeline.retrieve(request.query, top_k, deadline=deadline_of(context))
        return retrieval_pb2.RetrieveResponse(
            docs=[chunk_to_proto(doc) for doc in result.docs],
            meta=retrieval_meta_to_proto(result.meta.to_dict()),
        )

    async def IngestDocuments(
        self, request: retrieval_pb2.IngestDocumentsRequest, context: grpc.aio.ServicerContext
    ) -> retrieval_pb2.IngestDocumentsResponse:
        reports = await self._ingestor.ingest(
            documents_from_proto(request), deadline=deadline_of(context)
        )
        return ingest_response(reports)

    async def StreamIngestDocuments(
        self, request: retrieval_pb2.IngestDocumentsRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[retrieval_pb2.IngestEvent]:
        events = self._ingestor.ingest_events(
            documents_from_proto(request), deadline=deadline_of(context)
        )
        async for event in events:
            if isinstance(event, IngestProgress):
                yield retrieval_pb2.IngestEvent(progress=progress_to_proto(event))
            else:
                yield retrieval_pb2.IngestEvent(result=ingest_response(event.documents))

    async def DeleteDocuments(
        self, request: retrieval_pb2.DeleteDocumentsRequest, context: grpc.aio.ServicerContext
    ) -> retrieval_pb2.DeleteDocumentsResponse:
        deleted = await self._ingestor.delete(list(request.filenames))
        return retrieval_pb2.DeleteDocumentsResponse(deleted_chunks=deleted)

    async def ListDocuments(
        self, request: retrieval_pb2.ListDocumentsRequest, context: grpc.aio.ServicerContext
    ) -> retrieval_pb2.ListDocumentsResponse:
        page = await self._ingestor.list_page(request.page_size, request.page_token)
        return retrieval_pb2.ListDocumentsResponse(
            next_page_token=page.next_page_token,
            documents=[
                retrieval_pb2.DocumentInfo(
                    filename=e.filename,
                    file_type=e.file_type,
                    pages=e.pages,
                    l1_chunks=e.level_count(1),
                    l2_chunks=e.level_count(2),
                    l3_chunks=e.level_count(3),
                )
                for e in page.entries
            ],
        )
