"""Domain errors that carry their meaning; `shared.serve`'s interceptor maps them to the gRPC
status codes of API.md, so servicers and the core never pick status codes themselves."""

from __future__ import annotations

import grpc


class DomainError(Exception):
    """Base of every error the services raise on purpose. `code` is the gRPC status it maps to."""

    code: grpc.StatusCode = grpc.StatusCode.INTERNAL

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class InvalidArgument(DomainError):
    """Bad caller input. The message always starts with the offending field's name."""

    code = grpc.StatusCode.INVALID_ARGUMENT

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class DependencyUnavailable(DomainError):
    """A downstream dependency (retrieval service, Milvus, model or embedding endpoint) cannot
    be reached."""

    code = grpc.StatusCode.UNAVAILABLE

    def __init__(self, dependency: str, message: str) -> None:
        super().__init__(f"{dependency} unavailable: {message}")
        self.dependency = dependency


class DeadlineExceeded(DomainError):
    """The caller's deadline passed while a downstream call was still running."""

    code = grpc.StatusCode.DEADLINE_EXCEEDED


class ModelOutputInvalid(DomainError):
    """A model's reply violated its task schema after the retry. The message names the task."""

    code = grpc.StatusCode.INTERNAL

    def __init__(self, task: str, message: str) -> None:
        super().__init__(f"model task {task}: {message}")
        self.task = task


class Unauthenticated(DomainError):
    """Authentication is enabled and the bearer token is missing or wrong."""

    code = grpc.StatusCode.UNAUTHENTICATED


class ConfigurationError(DomainError):
    """The service's configuration or its store does not fit (raised at start-up)."""

    code = grpc.StatusCode.FAILED_PRECONDITION


class InternalFailure(DomainError):
    """A dependency or bug failed in a way the caller cannot fix; INTERNAL with a generic
    message (the details go to the log, never to the caller)."""
