"""Prometheus metrics both services share: a registry per service (with the process, platform
and GC collectors), the per-RPC families of the go-grpc-prometheus convention, and the
`/metrics` HTTP endpoint on METRICS_PORT (docs/api.md#metrics).

Each service keeps its own registry so that one process hosting both (the tests, `make run`)
still exposes each service's families on its own port. Families are module-level objects, as
prometheus-client intends; recording into them is a lock and an add, so it stays on whether
or not an endpoint serves them."""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Iterable
from wsgiref.simple_server import WSGIServer

from prometheus_client import (
    CollectorRegistry,
    Counter,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    start_http_server,
)

log = logging.getLogger(__name__)

#: Seconds buckets for RPCs, graph nodes and model calls: a Run is milliseconds on the fast
#: path and up to a minute or two with a slow model.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)

#: `operation` labels of the operations store's calls (shared/sql/operations.py), in each
#: service's `supermew_db_errors_total` that keeps long-running operations.
OPERATION_STORE_CALLS = (
    "operations_create",
    "operations_get",
    "operations_page",
    "operations_cancel",
    "operations_delete",
    "operations_claimable",
    "operations_claim",
    "operations_save",
    "operations_finish",
    "operations_release",
    "operations_counts",
)

#: The label value used when a value falls outside a family's bounded set.
OTHER = "other"

#: grpc_type values of the convention, by (request_streaming, response_streaming).
GRPC_TYPES = {
    (False, False): "unary",
    (False, True): "server_stream",
    (True, False): "client_stream",
    (True, True): "bidi_stream",
}


def bounded(value: object, allowed: Iterable[str]) -> str:
    """`value` as a label if it is one of `allowed`, else OTHER: a label never carries
    free text (a question, a file name, an error message)."""
    text = str(value)
    return text if text in allowed else OTHER


def new_registry() -> CollectorRegistry:
    """A service's registry, with the process/platform/GC collectors a dashboard expects."""
    registry = CollectorRegistry(auto_describe=True)
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return registry


_REGISTRIES: dict[str, CollectorRegistry] = {}
_REGISTRIES_LOCK = threading.Lock()


def registry_for(service: str = "", *_more: str) -> CollectorRegistry:
    """The registry of the service whose full name is `service` (`supermew.v1.…Service`),
    created on first use. A service's metrics module and its GrpcServer both ask by name, so
    neither has to hand the registry to the other."""
    with _REGISTRIES_LOCK:
        registry = _REGISTRIES.get(service)
        if registry is None:
            registry = _REGISTRIES[service] = new_registry()
        return registry


class GrpcServerMetrics:
    """The per-RPC families of go-grpc-prometheus, on one registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        labels = ("grpc_type", "grpc_service", "grpc_method")
        self.started = Counter(
            "grpc_server_started_total",
            "RPCs started on the server.",
            labels,
            registry=registry,
        )
        self.handled = Counter(
            "grpc_server_handled_total",
            "RPCs completed on the server, whatever their status code.",
            (*labels, "grpc_code"),
            registry=registry,
        )
        self.handling_seconds = Histogram(
            "grpc_server_handling_seconds",
            "Time from receiving an RPC to its status being decided, in seconds.",
            labels,
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )


_GRPC_METRICS: weakref.WeakKeyDictionary[CollectorRegistry, GrpcServerMetrics] = (
    weakref.WeakKeyDictionary()
)
_GRPC_LOCK = threading.Lock()


def grpc_server_metrics(registry: CollectorRegistry) -> GrpcServerMetrics:
    """The registry's gRPC families, created on first use: several servers of one service in
    a process (tests) share them, since a registry refuses a family registered twice."""
    with _GRPC_LOCK:
        metrics = _GRPC_METRICS.get(registry)
        if metrics is None:
            metrics = _GRPC_METRICS[registry] = GrpcServerMetrics(registry)
        return metrics


class MetricsEndpoint:
    """`GET /metrics` of one registry on its own HTTP port (prometheus-client's server, in a
    daemon thread), beside the gRPC port so that scrapes never queue behind RPCs."""

    def __init__(self, registry: CollectorRegistry, host: str, port: int) -> None:
        self._registry = registry
        self._host = host
        self._requested_port = port
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    def start(self) -> int:
        """Bind and serve; returns the bound port (an ephemeral one when asked for port 0)."""
        self._server, self._thread = start_http_server(
            self._requested_port, addr=self._host, registry=self._registry
        )
        self.port = int(self._server.server_address[1])
        log.debug("serving metrics on http://%s:%d/metrics", self._host, self.port)
        return self.port

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
