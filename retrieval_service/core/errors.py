"""The failures of the retrieval core's dependencies, as the core sees them. Adapters translate
their own errors (pymilvus, HTTP, the in-process model) into these once, where they happen; the
core catches only these. Each subclasses the shared domain error that fixes its gRPC status
(docs/api.md#domain-errors), so nothing else needs to know about them."""

from __future__ import annotations

from shared.errors import DependencyUnavailable, InternalFailure


class StoreUnavailable(DependencyUnavailable):
    """The vector store cannot be reached (the caller may retry): UNAVAILABLE. `dependency`
    names the store in the message: "milvus" (the chunks), or "database" (the control
    records: knowledge bases and the document registry)."""

    def __init__(
        self, message: str = "the vector store cannot be reached", *, dependency: str = "milvus"
    ) -> None:
        super().__init__(dependency, message)


class DatabaseUnavailable(StoreUnavailable):
    """The control-plane database (DATABASE_URL) cannot be reached or timed out: UNAVAILABLE
    naming the database; nothing of the call was committed."""

    def __init__(self, message: str = "the control-plane database cannot be reached") -> None:
        super().__init__(message, dependency="database")


class StoreFailed(InternalFailure):
    """The store answered but failed or refused a call (a bug or a broken store, not bad
    input): INTERNAL with a generic message; the cause is logged where it happened."""

    def __init__(self) -> None:
        super().__init__("internal store failure")


class EmbedderUnavailable(DependencyUnavailable):
    """The embedding model cannot embed: its endpoint is down or answered badly, or the
    in-process model failed: UNAVAILABLE. `dependency` names it in the message ("embedder",
    or "embedding endpoint" for a remote one)."""

    def __init__(
        self, message: str = "the embedding model failed", *, dependency: str = "embedder"
    ) -> None:
        super().__init__(dependency, message)


#: What any chunk-repository or registry call may raise.
STORE_FAILURES: tuple[type[Exception], ...] = (StoreUnavailable, StoreFailed)
