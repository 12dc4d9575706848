"""A scripted OpenAI-compatible chat-completions server on 127.0.0.1 (HTTP/1.1, keep-alive),
for tests and benchmarks. Replies are keyed by task name (response_format.json_schema.name, or
`answer_generation` for a `stream: true` request) and the question the prompt carries; every
request is recorded (model, bearer key, task, question) so tests can assert which tasks ran and
with what. Streamed requests are answered with server-sent events (`Sse`), which can also be
cut midway."""

from __future__ import annotations

import asyncio
import json
import re
from collections import defaultdict, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from orchestrator_service.models.base import TASK_ANSWER, TASK_GROUNDING
from orchestrator_service.models.prompts import question_of


@dataclass(frozen=True)
class Sse:
    """A streamed reply: one `chat.completion.chunk` event per piece, then `data: [DONE]`.
    `cut_after=k` closes the connection after k pieces, in the middle of the chunked body (no
    [DONE]); `done=False` ends the body cleanly but without [DONE]; `piece_delay` is slept
    before each piece."""

    pieces: tuple[str, ...]
    cut_after: int | None = None
    done: bool = True
    piece_delay: float = 0.0


def sse(text: str, *, size: int = 3, **options: Any) -> Sse:
    """`text` streamed in pieces of `size` characters (so markers arrive split)."""
    return Sse(tuple(text[i : i + size] for i in range(0, len(text), size)), **options)


#: A scripted reply: a dict (sent as the JSON content), a str (sent verbatim as content, e.g.
#: invalid JSON; streamed by `sse` when the request streams), an `Sse` or an `HttpError`.
Reply = Mapping[str, Any] | str | Sse


@dataclass(frozen=True)
class HttpError:
    """An HTTP error reply: `{"error": {"message": body}}` (OpenAI's shape), with a
    `Retry-After` header when `retry_after` is set."""

    status: int
    body: str = "scripted failure"
    retry_after: float | None = None


@dataclass(frozen=True)
class ModelRequest:
    task: str
    question: str | None
    model: str
    authorization: str
    body: dict[str, Any]
    traceparent: str = ""  # the W3C trace context the client sent, if any


@dataclass
class ModelScript:
    """Replies per (task, question), consumed in order; the last one repeats. `fallback`
    answers requests without a scripted reply (None → HTTP 500 so the test sees it)."""

    replies: dict[tuple[str, str], deque[Reply | HttpError]] = field(
        default_factory=lambda: defaultdict(deque)
    )
    fallback: Callable[[str, str | None], Reply | HttpError] | None = None

    def add(self, task: str, question: str, *replies: Reply | HttpError) -> ModelScript:
        self.replies[(task, question)].extend(replies)
        return self

    def next_reply(self, task: str, question: str | None) -> Reply | HttpError:
        queue = self.replies.get((task, question or ""))
        if queue:
            return queue.popleft() if len(queue) > 1 else queue[0]
        if self.fallback is not None:
            return self.fallback(task, question)
        return HttpError(500, f"no scripted reply for {task} / {question!r}")


class FakeModelServer:
    def __init__(self, script: ModelScript | None = None, *, delay: float = 0.0) -> None:
        self.script = script or ModelScript()
        self.delay = delay
        self.requests: list[ModelRequest] = []
        self._server: asyncio.AbstractServer | None = None
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def tasks(self) -> list[str]:
        return [r.task for r in self.requests]

    def calls(self) -> list[tuple[str, str | None]]:
        return [(r.task, r.question) for r in self.requests]

    async def start(self) -> FakeModelServer:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def __aenter__(self) -> FakeModelServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                headers = {
                    k.strip().lower(): v.strip()
                    for k, _, v in (line.partition(":") for line in lines[1:] if line)
                }
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                request = json.loads(body or b"{}")
                if request.get("stream"):
                    if not await self._stream(request, headers, writer):
                        return
                    continue
                status, payload, extra = await self._respond(request, headers)
                data = payload.encode()
                reason = "OK" if status == 200 else "Error"
                head_out = (
                    f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
                    f"{extra}Content-Length: {len(data)}\r\n\r\n"
                )
                writer.write(head_out.encode() + data)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def _next_reply(
        self, task: str, body: dict[str, Any], headers: Mapping[str, str]
    ) -> Reply | HttpError:
        """Records the request, then waits `delay` and gives the scripted reply for it."""
        question = question_of(body.get("messages") or [])
        self.requests.append(
            ModelRequest(
                task,
                question,
                body.get("model", ""),
                headers.get("authorization", ""),
                body,
                headers.get("traceparent", ""),
            )
        )
        if task == TASK_GROUNDING and not self.script.replies.get((task, question or "")):
            reply: Reply | HttpError = all_supported(body)
        else:
            reply = self.script.next_reply(task, question)
        if self.delay:
            await asyncio.sleep(self.delay)
        return reply

    async def _respond(
        self, body: dict[str, Any], headers: Mapping[str, str]
    ) -> tuple[int, str, str]:
        """(status, JSON body, extra header lines)."""
        task = body.get("response_format", {}).get("json_schema", {}).get("name", "")
        reply = await self._next_reply(task, body, headers)
        if isinstance(reply, HttpError):
            return reply.status, json.dumps({"error": {"message": reply.body}}), _extra(reply)
        content = reply if isinstance(reply, str) else json.dumps(reply, ensure_ascii=False)
        reply_body = json.dumps(
            {
                "id": "chatcmpl-fake",
                "object": "chat.completion",
                "model": body.get("model", ""),
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": content},
                        "finish_reason": "stop",
                    }
                ],
            },
            ensure_ascii=False,
        )
        return 200, reply_body, ""

    async def _stream(
        self, body: dict[str, Any], headers: Mapping[str, str], writer: asyncio.StreamWriter
    ) -> bool:
        """Answers a `stream: true` request; False when the connection was cut on purpose."""
        reply = await self._next_reply(TASK_ANSWER, body, headers)
        if isinstance(reply, HttpError):
            data = json.dumps({"error": {"message": reply.body}}).encode()
            writer.write(
                f"HTTP/1.1 {reply.status} Error\r\nContent-Type: application/json\r\n"
                f"{_extra(reply)}Content-Length: {len(data)}\r\n\r\n".encode()
                + data
            )
            await writer.drain()
            return True
        if not isinstance(reply, Sse):
            text = reply if isinstance(reply, str) else json.dumps(reply, ensure_ascii=False)
            reply = sse(text)
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )

        def event(data: str) -> bytes:
            line = f"data: {data}\n\n".encode()
            return f"{len(line):x}\r\n".encode() + line + b"\r\n"

        def chunk(delta: dict[str, str]) -> str:
            return json.dumps(
                {
                    "id": "chatcmpl-fake",
                    "object": "chat.completion.chunk",
                    "model": body.get("model", ""),
                    "choices": [{"index": 0, "delta": delta, "finish_reason": None}],
                },
                ensure_ascii=False,
            )

        writer.write(event(chunk({"role": "assistant"})))
        for sent, piece in enumerate(reply.pieces):
            if reply.cut_after is not None and sent >= reply.cut_after:
                await writer.drain()
                return False
            if reply.piece_delay:
                await asyncio.sleep(reply.piece_delay)
            writer.write(event(chunk({"content": piece})))
            await writer.drain()
        if reply.done:
            writer.write(event("[DONE]"))
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        return True


# ---- reply builders ---------------------------------------------------------------------------

_CLAIM_TAG = re.compile(r'<claim index="(\d+)"(?: cites="([\d,]*)")?>')


def all_supported(body: Mapping[str, Any]) -> dict[str, Any]:
    """`check_grounding`'s reply when a test scripted none: every claim of the prompt fully
    supported by the facts it cites (the first fact when it cites none) — scripted answers are
    the tests' own; tests of the check script their verdicts."""
    prompt = "".join(str(m.get("content") or "") for m in body.get("messages") or [])
    return grounding(
        [
            (int(index), 1.0, [int(n) for n in cites.split(",")] if cites else [0])
            for index, cites in _CLAIM_TAG.findall(prompt)
        ]
    )


def grounding(verdicts: Iterable[tuple[int, float, list[int]]]) -> dict[str, Any]:
    """A `check_grounding` reply: (claim index, score, citation indices) per claim, each
    needing support."""
    return {
        "claims": [
            {
                "claim_index": index,
                "grounding_check_required": True,
                "score": score,
                "citation_indices": cited,
            }
            for index, score, cited in verdicts
        ]
    }


def complexity(kind: str, reason: str = "", sub_questions: Iterable[str] = ()) -> dict[str, Any]:
    return {"complexity": kind, "reason": reason, "sub_questions": list(sub_questions)}


def grade(
    relevance: str,
    answerability: str,
    route: str,
    *,
    ambiguity: str = "none",
    confidence: float = 0.9,
    missing_slots: Iterable[str] = (),
    hitl_prompt: str = "",
    hitl_options: Iterable[str] = (),
    reason: str = "",
) -> dict[str, Any]:
    return {
        "relevance": relevance,
        "answerability": answerability,
        "ambiguity": ambiguity,
        "route": route,
        "confidence": confidence,
        "missing_slots": list(missing_slots),
        "hitl_prompt": hitl_prompt,
        "hitl_options": list(hitl_options),
        "reason": reason,
    }


def rewrite(method: str, text: str) -> dict[str, Any]:
    return {
        "method": method,
        "step_back_question": text if method == "step_back" else "",
        "hyde_document": text if method == "hyde" else "",
    }


def condense(standalone_question: str) -> dict[str, Any]:
    return {"standalone_question": standalone_question}


def _extra(reply: HttpError) -> str:
    """The extra header lines of an error reply."""
    return "" if reply.retry_after is None else f"Retry-After: {reply.retry_after:g}\r\n"
