"""An OpenAI-compatible embeddings endpoint on 127.0.0.1 (`POST /embeddings` with `{model,
input}` → `{"data": [{"index", "embedding"}]}`) answering with the deterministic
`HashingEmbedder`: service processes started by a test embed through it in milliseconds
instead of loading the real model in every process."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from retrieval_service.embedding import HashingEmbedder


class EmbeddingServer:
    def __init__(self, dim: int = 64) -> None:
        self.dim = dim
        encoder = HashingEmbedder(dim)

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                return None

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
                vectors = encoder.encode(list(body["input"]))
                data = [{"index": i, "embedding": v.tolist()} for i, v in enumerate(vectors)]
                raw = json.dumps({"data": data}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        """The settings that point a retrieval service at this endpoint."""
        return {
            "EMBEDDING_BASE_URL": self.base_url,
            "EMBEDDING_MODEL": "hashing",
            "EMBEDDING_DIM": str(self.dim),
        }

    def start(self) -> EmbeddingServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
