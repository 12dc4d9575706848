"""Domain errors that carry their meaning and nothing about transport. `shared.serve` owns the
one table that maps them to gRPC status codes (docs/api.md#status-codes), so servicers and the
core never pick status codes themselves."""

from __future__ import annotations


class DomainError(Exception):
    """Base of every error the services raise on purpose. Its message leaves the process as the
    status details, so it never holds a secret, traceback, exception repr, filter expression
    or path."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class InvalidArgument(DomainError):
    """Bad caller input. The message always starts with the offending field's name."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class NotFound(DomainError):
    """The caller named a resource that does not exist (a knowledge base). The message starts
    with the field that named it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class AlreadyExists(DomainError):
    """The caller asked to create a resource that exists already. The message starts with the
    field that named it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class FailedPrecondition(DomainError):
    """The resource is not in a state the request can act on (a knowledge base that still holds
    documents, the default knowledge base); the caller must change it first. The message starts
    with the field that named it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class PermissionDenied(DomainError):
    """The caller's key is valid but lacks a permission for what it asked. The message names
    the permission and the knowledge base, never the key (docs/api.md#api-keys)."""


class DependencyUnavailable(DomainError):
    """A downstream dependency (retrieval service, Milvus, model or embedding endpoint) cannot
    be reached."""

    def __init__(self, dependency: str, message: str) -> None:
        super().__init__(f"{dependency} unavailable: {message}")
        self.dependency = dependency


class ShuttingDown(DependencyUnavailable):
    """The server is shutting down and stopped the call's work at a safe point, after its
    grace period (shared.draining): UNAVAILABLE, so the caller retries, on another replica.
    What the call had committed stays; the rest was left as it was."""

    def __init__(
        self, message: str = "the server is shutting down; retry the call on another replica"
    ) -> None:
        super().__init__("server", message)


class DeadlineExceeded(DomainError):
    """A time limit passed while a downstream call was still running: the caller's deadline or
    a configured per-call timeout. The message says which."""


class ResourceExhausted(DomainError):
    """A dependency refused the work for lack of a resource (quota, load shedding, a message
    over its size limit); retrying later or with less may succeed."""


class DependencyRejected(DomainError):
    """A dependency refused the request permanently (HTTP 400/401/403/404 from a model
    endpoint: a wrong key, model name or URL). Retrying cannot help; its configuration must
    change. The message names the dependency, the task and the provider's (redacted) reason."""

    def __init__(self, dependency: str, message: str) -> None:
        super().__init__(f"{dependency} rejected the request: {message}")
        self.dependency = dependency


class ModelOutputInvalid(DomainError):
    """A model's reply violated its task schema after the retry. The message names the task."""

    def __init__(self, task: str, message: str) -> None:
        super().__init__(f"model task {task}: {message}")
        self.task = task


class ConfigurationError(DomainError):
    """The service's configuration or its store does not fit (raised at start-up)."""


class InternalFailure(DomainError):
    """A dependency or a bug failed in a way the caller cannot fix (e.g. retrieval rejected a
    query the system generated). The message is generic; details go to the log only."""
