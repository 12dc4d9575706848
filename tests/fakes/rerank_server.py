"""A scripted rerank endpoint on 127.0.0.1 speaking the real wire protocol (Jina/Cohere style,
docs/api.md#rerank): `POST /v1/rerank` with `Authorization: Bearer …` and `{model, query,
documents, top_n, return_documents}` → `{"results": [{"index", "relevance_score"}]}`.

Each test scripts the next replies (`reply_json`, `reply_status`, `reply_raw`, `delay`); with
nothing scripted it scores documents by how many query words they contain. Every request is
recorded (`requests`) so tests can assert on what the service sent."""

from __future__ import annotations

import json
import re
import threading
import time
from collections import deque
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Recorded:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


@dataclass
class _Reply:
    status: int = 200
    body: bytes = b""
    delay: float = 0.0


def overlap_scores(query: str, documents: list[str]) -> list[float]:
    words = set(re.findall(r"\w+", query.lower()))
    return [len(words & set(re.findall(r"\w+", d.lower()))) / (1 + len(words)) for d in documents]


class RerankServer:
    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self._script: deque[_Reply] = deque()
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return None

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                raw = self.rfile.read(length)
                body = json.loads(raw or b"{}")
                server.requests.append(Recorded(self.path, dict(self.headers), body))
                with server._lock:
                    reply = server._script.popleft() if server._script else None
                if reply is None:
                    reply = _Reply(200, json.dumps(server.default_reply(body)).encode())
                if reply.delay:
                    time.sleep(reply.delay)
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(reply.body)))
                    self.end_headers()
                    self.wfile.write(reply.body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout tests)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def host(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @staticmethod
    def default_reply(body: dict[str, Any]) -> dict[str, Any]:
        scores = overlap_scores(body.get("query", ""), body.get("documents", []))
        order = sorted(range(len(scores)), key=lambda i: -scores[i])[: body.get("top_n")]
        return {"results": [{"index": i, "relevance_score": scores[i]} for i in order]}

    def reply_json(self, payload: Any, status: int = 200) -> None:
        self._script.append(_Reply(status, json.dumps(payload).encode()))

    def reply_raw(self, status: int, body: str) -> None:
        self._script.append(_Reply(status, body.encode()))

    def delay(self, seconds: float) -> None:
        """The next reply is the default one, sent after `seconds`."""
        self._script.append(_Reply(200, b'{"results": []}', seconds))

    def start(self) -> RerankServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
