"""A scripted OpenAI-compatible embeddings endpoint on 127.0.0.1 speaking the real wire
protocol: `POST /embeddings` with `Authorization: Bearer …` and `{model, input: [text…],
encoding_format?}` → `{"object": "list", "data": [{"object": "embedding", "index",
"embedding"}], "model"}`, each embedding a list of floats or, for `encoding_format: "base64"`,
base64 of little-endian float32 as OpenAI sends it.

`python -m tests.fakes.embeddings_server --dim D --batch-delay S` runs one in its own process
(as a real endpoint is: its JSON and vector work then takes no time from the process under
measurement), prints `port N` once it listens, serves `GET /stats` (`max_in_flight`,
`texts_embedded`) and exits when its standard input closes.

Vectors are deterministic per text (a seeded random unit vector of `dim` floats), so the same
text always embeds the same. `batch_delay` holds every reply that long (a fixed cost per
batch, as a remote model has); `fail_next(status, …)` scripts the next replies' errors, e.g.
429 with Retry-After. Every request is recorded, and `max_in_flight` is the most requests the
server was handling at once."""

from __future__ import annotations

import base64
import hashlib
import json
import threading
import time
from collections import deque
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np


@dataclass
class _Failure:
    status: int
    retry_after: float | None


def text_vector(text: str, dim: int) -> list[float]:
    seed = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")
    vector = np.random.default_rng(seed).standard_normal(dim)
    return (vector / np.linalg.norm(vector)).astype(np.float32).tolist()


def _base64(vector: list[float]) -> str:
    """`encoding_format: "base64"` as OpenAI answers it: little-endian float32 bytes."""
    return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")


class EmbeddingsServer:
    def __init__(self, dim: int = 64, *, batch_delay: float = 0.0, base64: bool = True) -> None:
        """`base64=False`: a server that ignores `encoding_format` and always sends floats."""
        self.dim = dim
        self.batch_delay = batch_delay
        self.base64 = base64
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.max_in_flight = 0
        self._in_flight = 0
        self._failures: deque[_Failure] = deque()
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as real endpoints do
            # Headers and body go out in two writes: without TCP_NODELAY (which real servers
            # set) a small body waits ≈ 40 ms for the client's delayed ACK of the headers.
            disable_nagle_algorithm = True

            def log_message(self, *args: Any) -> None:
                return None

            def do_GET(self) -> None:
                if self.path.rstrip("/") != "/stats":
                    self._send(404, {"error": {"message": "not found"}})
                    return
                with server._lock:
                    stats = {
                        "max_in_flight": server.max_in_flight,
                        "texts_embedded": server.texts_embedded,
                    }
                self._send(200, stats)

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                body = json.loads(raw or b"{}")
                with server._lock:
                    server.requests.append(body)
                    server.headers.append(dict(self.headers))
                    server._in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server._in_flight)
                    failure = server._failures.popleft() if server._failures else None
                try:
                    if server.batch_delay:
                        time.sleep(server.batch_delay)
                    if self.path.rstrip("/") != "/embeddings":
                        self._send(404, {"error": {"message": "not found"}})
                    elif failure is not None:
                        extra = {}
                        if failure.retry_after is not None:
                            extra["Retry-After"] = f"{failure.retry_after:g}"
                        self._send(failure.status, {"error": {"message": "scripted"}}, extra)
                    else:
                        self._send(200, server.reply(body))
                finally:
                    with server._lock:
                        server._in_flight -= 1

            def _send(
                self, status: int, payload: dict[str, Any], extra: dict[str, str] | None = None
            ) -> None:
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for key, value in (extra or {}).items():
                        self.send_header(key, value)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def reply(self, body: dict[str, Any]) -> dict[str, Any]:
        texts = body.get("input", [])
        texts = [texts] if isinstance(texts, str) else texts
        wants = self.base64 and body.get("encoding_format") == "base64"
        encode = _base64 if wants else (lambda v: v)
        return {
            "object": "list",
            "model": body.get("model", ""),
            "data": [
                {"object": "embedding", "index": i, "embedding": encode(text_vector(t, self.dim))}
                for i, t in enumerate(texts)
            ],
        }

    def fail_next(self, status: int, times: int = 1, *, retry_after: float | None = None) -> None:
        with self._lock:
            self._failures.extend(_Failure(status, retry_after) for _ in range(times))

    @property
    def texts_embedded(self) -> int:
        return sum(len(r.get("input", [])) for r in self.requests)

    def start(self) -> EmbeddingsServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


def main() -> None:
    import argparse
    import sys

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--batch-delay", type=float, default=0.0)
    args = parser.parse_args()
    server = EmbeddingsServer(args.dim, batch_delay=args.batch_delay).start()
    print(f"port {server.port}", flush=True)
    sys.stdin.read()  # until the parent closes the pipe (or exits)
    server.stop()


if __name__ == "__main__":
    main()
