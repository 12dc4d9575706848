"""The gRPC servicer: proto in → one call into the core → proto out. Conversion of evidence
and meta goes through the shared codec; errors are domain errors mapped by shared.serve."""

from __future__ import annotations

import grpc
from supermew.v1 import retrieval_pb2, retrieval_pb2_grpc

from retrieval_service.ingest import Ingestor, SourceDocument
from retrieval_service.pipeline import RetrievalPipeline
from shared.codec import chunk_to_proto, retrieval_meta_to_proto


class RetrievalServicer(retrieval_pb2_grpc.RetrievalServiceServicer):
    def __init__(self, pipeline: RetrievalPipeline, ingestor: Ingestor) -> None:
        self._pipeline = pipeline
        self._ingestor = ingestor

    async def Retrieve(
        self, request: retrieval_pb2.RetrieveRequest, context: grpc.aio.ServicerContext
    ) -> retrieval_pb2.RetrieveResponse:
        top_k = request.top_k if request.HasField("top_k") else None
        result = await self._pipeline.retrieve(request.query, top_k)
        return retrieval_pb2.RetrieveResponse(
            docs=[chunk_to_proto(doc) for doc in result.docs],
            meta=retrieval_meta_to_proto(result.meta.to_dict()),
        )

    async def IngestDocuments(
        self, request: retrieval_pb2.IngestDocumentsRequest, context: grpc.aio.ServicerContext
    ) -> retrieval_pb2.IngestDocumentsResponse:
        documents = [
            SourceDocument(
                filename=d.filename,
                content=d.content,
                file_type=d.file_type if d.HasField("file_type") else None,
            )
            for d in request.documents
        ]
        reports = await self._ingestor.ingest(documents)
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
