"""An OTLP/HTTP trace receiver on 127.0.0.1, as an OpenTelemetry collector listens on 4318:
`POST /v1/traces` with a protobuf `ExportTraceServiceRequest` (gzip or not), answered with an
empty `ExportTraceServiceResponse`. Received spans are kept flattened with the `service.name`
of their resource, decoded with opentelemetry-proto."""

from __future__ import annotations

import gzip
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

KIND_INTERNAL, KIND_SERVER, KIND_CLIENT = (
    Span.SPAN_KIND_INTERNAL,
    Span.SPAN_KIND_SERVER,
    Span.SPAN_KIND_CLIENT,
)


def plain(value: AnyValue) -> Any:
    which = value.WhichOneof("value")
    return None if which is None else getattr(value, which)


@dataclass(frozen=True)
class ReceivedSpan:
    service: str
    span: Span

    @property
    def name(self) -> str:
        return self.span.name

    @property
    def trace_id(self) -> str:
        return self.span.trace_id.hex()

    @property
    def span_id(self) -> str:
        return self.span.span_id.hex()

    @property
    def parent_id(self) -> str:
        return self.span.parent_span_id.hex()

    @property
    def attributes(self) -> dict[str, Any]:
        return {kv.key: plain(kv.value) for kv in self.span.attributes}


class OtlpReceiver:
    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.content_types: set[str] = set()
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                return None

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.headers.get("Content-Encoding") == "gzip":
                    raw = gzip.decompress(raw)
                if self.path != "/v1/traces":
                    self._reply(404, b"")
                    return
                request = ExportTraceServiceRequest.FromString(raw)
                with receiver._lock:
                    receiver.content_types.add(self.headers.get("Content-Type", ""))
                    for resource_spans in request.resource_spans:
                        attributes = {
                            kv.key: plain(kv.value) for kv in resource_spans.resource.attributes
                        }
                        service = str(attributes.get("service.name", ""))
                        for scope_spans in resource_spans.scope_spans:
                            for span in scope_spans.spans:
                                receiver.spans.append(ReceivedSpan(service, span))
                self._reply(200, ExportTraceServiceResponse().SerializeToString())

            def _reply(self, status: int, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> OtlpReceiver:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def received(self) -> list[ReceivedSpan]:
        with self._lock:
            return list(self.spans)

    def wait_for(self, found: Callable[[list[ReceivedSpan]], bool], timeout: float = 30) -> None:
        """Until `found(spans)` holds (exporters send in batches, from their own threads)."""
        deadline = time.monotonic() + timeout
        while not found(self.received()):
            if time.monotonic() > deadline:
                names = sorted({(s.service, s.name) for s in self.received()})
                raise AssertionError(f"spans not received in {timeout}s; have {names}")
            time.sleep(0.05)


def main() -> None:
    """`python -m tests.fakes.otlp_receiver`: serve on a free port (printed first), and print
    how many spans arrived when stdin closes. Benchmarks run it as a separate process, as a
    collector is, so that decoding the exports costs the measured process nothing."""
    receiver = OtlpReceiver().start()
    print(receiver.port, flush=True)
    sys.stdin.read()
    print(len(receiver.received()), flush=True)
    receiver.stop()


if __name__ == "__main__":
    main()
