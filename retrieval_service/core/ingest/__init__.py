"""Ingestion, split by job: request checks (`validation`), parsing into three chunk levels
(`preparation`), flow control of the embed → write pipeline (`flow`), the crash-safe version
protocol (`versions`, retrieval_service/README.md "Crash safety"), writers' leases and the
reconciliation rule (`leases`) and the `Ingestor` that runs them (`ingestor`)."""

from retrieval_service.core.documents import IngestedDocument
from retrieval_service.core.ingest.flow import IngestEvent, IngestProgress, IngestResult
from retrieval_service.core.ingest.ingestor import Ingestor
from retrieval_service.core.ingest.validation import SourceDocument, validate_filename
from retrieval_service.core.ingest.versions import (
    CRASH_POINTS,
    KB_DELETE_CRASH_POINTS,
    Checkpoint,
    no_checkpoint,
)

__all__ = [
    "CRASH_POINTS",
    "KB_DELETE_CRASH_POINTS",
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
