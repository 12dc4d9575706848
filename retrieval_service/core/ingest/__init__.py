"""Ingestion: request checks, parsing into three chunk levels, the embed → write pipeline and the
crash-safe version protocol (retrieval_service/README.md "Crash safety")."""

from retrieval_service.core.ingest.ingestor import (
    CRASH_POINTS,
    Checkpoint,
    IngestedDocument,
    IngestEvent,
    Ingestor,
    IngestProgress,
    IngestResult,
    SourceDocument,
    no_checkpoint,
    validate_filename,
)

__all__ = [
    "CRASH_POINTS",
    "Checkpoint",
    "IngestEvent",
    "IngestProgress",
    "IngestResult",
    "IngestedDocument",
    "Ingestor",
    "SourceDocument",
    "no_checkpoint",
    "validate_filename",
]
