"""The command line of the orchestrator, calling its RPCs at localhost:ORCHESTRATOR_PORT:

    python -m orchestrator_service ask "问题" [--kb ID]... [--filter EXPR] [--index NAME]
        [--stream] [--json] [--no-answer] [--history FILE]
    python -m orchestrator_service ask --chat ["first question"] [--history FILE] [options]
    python -m orchestrator_service resume --snapshot FILE --answer "补充" [--kb ID]...
        [--filter EXPR] [--index NAME] [--stream] [--json] [--history FILE]

`--history FILE` sends a conversation's earlier turns (a JSON list of {"question", "answer"},
oldest first; docs/api.md#conversations), so a follow-up is condensed to stand alone. `ask
--chat` is a prompt loop that keeps the history itself across the questions of one terminal
session (the most recent turns within the server's limits); an empty line or Ctrl-D ends it.
In it a clarification (route clarify / scope_select) is answered on the next line, which
resumes that run (Resume with its snapshot, the same knowledge bases, filter and history);
`/new QUESTION` leaves it unanswered and asks QUESTION. One-shot `ask` prints the `resume`
command, flags included, that answers its clarification.

`--kb` (repeatable; an id or a full `knowledge_bases/{id}` name) and `--filter` (AIP-160,
docs/api.md#filters) limit every retrieval of the run; a resume is given the same ones again.
`ask --index knowledge_bases/{kb}/indexes/{id}` makes every retrieval of the run read that
READY index instead of its knowledge base's active one (RunRequest.index, docs/api.md#indexes);
`resume --index` sends it again with the reply (ResumeRequest.index), as `--kb` is.

TLS: `--tls-ca FILE` (or `--tls` for the system's roots), and `--tls-cert FILE --tls-key FILE`
when the server requires client certificates (mTLS).

It asks for a grounded answer (unless `--no-answer`) and prints the route, the answer with its
numbered sources, the HITL prompt and options, and a compact evidence list (one line per
chunk); `--stream` shows the progress steps and the answer live; `--json` prints the whole
result, trace included, as one JSON object (steps then go to stderr), which `resume --snapshot`
accepts back as is (or just its `hitl_resume_state`).

`eval …` (evaluation sets, runs, results, comparisons, HTML reports), `runs …` (run history)
and `feedback …` live in orchestrator_service.cli_evaluation."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import sys
from collections.abc import AsyncIterator, Sequence
from typing import Any, TextIO

import grpc
from supermew.v1 import orchestrator_pb2, orchestrator_pb2_grpc

from orchestrator_service import cli_evaluation
from orchestrator_service.conversation import (
    Turn,
    history_from_json,
    recent_history,
)
from orchestrator_service.resume import ResumeSnapshot
from orchestrator_service.settings import OrchestratorSettings
from shared.codec import (
    chunk_from_proto,
    hitl_state_from_proto,
    hitl_state_to_proto,
    rag_trace_from_proto,
)
from shared.errors import ConfigurationError, InvalidArgument
from shared.tls import add_tls_arguments, credentials_from_arguments, mismatch_hint

#: Characters of a chunk's text shown in the evidence list (`--json` has them all).
SNIPPET_CHARS = 90
#: The leading chunks the evidence grade reads; shown by default with the cited ones.
GRADED = 3
#: RRF with k=60 over two rankings: first in both scores 2/61, at most 2/60.
RRF_BEST = 2 / 61
RRF_MAX = 2 / 60


def answer_to_dict(answer: orchestrator_pb2.Answer) -> dict[str, Any]:
    return {
        "text": answer.text,
        "citations": [
            {
                "index": c.index,
                "filename": c.filename,
                "page_number": c.page_number,
                "quote": c.quote,
                "document_id": c.document_id,
            }
            for c in answer.citations
        ],
        "model": answer.model,
        "partial": answer.partial,
    }


def result_to_dict(result: orchestrator_pb2.RunResult) -> dict[str, Any]:
    return {
        "question": result.question,
        "route": result.route,
        "retrieval_status": result.retrieval_status,
        "docs": [chunk_from_proto(c) for c in result.docs],
        "context": result.context,
        "rag_trace": rag_trace_from_proto(result.rag_trace)
        if result.HasField("rag_trace")
        else None,
        "hitl_resume_state": hitl_state_from_proto(result.hitl_resume_state)
        if result.HasField("hitl_resume_state")
        else None,
        "answer": answer_to_dict(result.answer) if result.HasField("answer") else None,
        "standalone_question": result.standalone_question,
    }


def format_step(step: Any) -> str:
    group = f"  [{step.group}]" if step.group else ""
    detail = f" — {step.detail}" if step.detail else ""
    return f"{step.elapsed_ms:>6} ms  {step.icon} {step.label}{detail}{group}"


#: How `ask --chat` answers a clarification, printed under its options.
CHAT_REPLY_HINT = (
    "reply on the next line (an option or your own words) to resume this run; "
    "/new QUESTION asks another question instead"
)


def resume_hint(args: argparse.Namespace) -> str:
    """The `resume` command answering a one-shot `ask`'s clarification, with the flags the run
    was given again (knowledge bases, filter, index, history, address, --no-answer)."""
    flags = ["--snapshot", "FILE", "--answer", "REPLY"]
    for kb in args.kb:
        flags += ["--kb", kb]
    if args.filter:
        flags += ["--filter", args.filter]
    if args.index:
        flags += ["--index", args.index]
    if args.history:
        flags += ["--history", args.history]
    if args.addr:
        flags += ["--addr", args.addr]
    if args.no_answer:
        flags.append("--no-answer")
    command = " ".join(shlex.quote(f) if f not in {"FILE", "REPLY"} else f for f in flags)
    return (
        f"python -m orchestrator_service resume {command}\n"
        "          (FILE: this run's `ask --json` output or the snapshot line above, "
        "- = stdin; REPLY: an option or your own words)"
    )


def print_result(
    data: dict[str, Any],
    out: TextIO,
    *,
    all_evidence: bool = False,
    reply_hint: str = "save `ask --json` output and pass it to `resume --snapshot`",
    show_snapshot: bool = True,
) -> None:
    """`data` (a `result_to_dict`) for a terminal; `reply_hint` says how to answer an HITL
    result (the `resume` command, or the chat's next line, where the snapshot is not shown)."""
    trace = data["rag_trace"] or {}
    print(f"question: {data['question']}", file=out)
    standalone = data.get("standalone_question") or ""
    if standalone and standalone != data["question"]:
        print(f"searched: {standalone} (the question read with the conversation)", file=out)
    print(f"route:    {data['route']} ({data['retrieval_status']})", file=out)
    if trace.get("rewrite_method"):
        print(
            f"rewrite:  {trace['rewrite_method']}, graded again after a second retrieval", file=out
        )
    if data["hitl_resume_state"] is not None:
        print(f"HITL:     {trace.get('hitl_prompt', '')}", file=out)
        for option in trace.get("hitl_options") or ():
            print(f"          - {option}", file=out)
        if show_snapshot:
            print(
                "snapshot: " + json.dumps(data["hitl_resume_state"], ensure_ascii=False), file=out
            )
        print(f"resume:   {reply_hint}", file=out)
    answer = data.get("answer")
    if answer is not None:
        label = "answer:   " + ("(partial evidence) " if answer["partial"] else "")
        print(label + answer["text"].replace("\n", "\n          "), file=out)
        print(f"sources:  {len(answer['citations'])} cited, written by {answer['model']}", file=out)
        for c in answer["citations"]:
            print(f"  [{c['index']}] {c['filename']} (Page {c['page_number']})", file=out)
            print(f"      “{c['quote']}”", file=out)
    print(f"evidence: {len(data['docs'])} chunk(s)", file=out)
    # By default the chunks the grade read (the top GRADED) and those the answer cites.
    cited = {c["index"] for c in answer["citations"]} if answer is not None else set()
    hidden = 0
    for i, doc in enumerate(data["docs"], start=1):
        if not all_evidence and i > GRADED and i not in cited:
            hidden += 1
            continue
        score = doc.get("rerank_score", doc.get("score"))
        print(f"  [{i}] {doc['filename']} (Page {doc['page_number']}) score={score:.4f}", file=out)
        print(f"      {snippet(doc['text'])}", file=out)
        print(f"      ({score_note(doc)})", file=out)
    if hidden:
        print(f"  … {hidden} more, neither graded nor cited (--all-evidence shows them)", file=out)
    print(f"trace:    {trace_summary(trace)} (--json prints the whole trace)", file=out)


def score_note(doc: dict[str, Any]) -> str:
    """What a chunk's score says: which signal it is and how to read it."""
    if doc.get("rerank_score") is not None:
        return "reranker relevance, 0–1"
    score = float(doc.get("score") or 0.0)
    if 0 < score <= RRF_MAX:
        rank = f"fused rank {doc['rrf_rank']}, " if doc.get("rrf_rank") else ""
        return (
            f"{rank}RRF of the dense and keyword rankings: {score / RRF_BEST:.0%} of a chunk "
            "ranked first by both"
        )
    return "cosine similarity to the question, 0–1"


def snippet(text: str) -> str:
    """A chunk's text on one line, cut to SNIPPET_CHARS."""
    flat = " ".join(text.split())
    return flat if len(flat) <= SNIPPET_CHARS else flat[: SNIPPET_CHARS - 1] + "…"


def trace_summary(trace: dict[str, Any]) -> str:
    parts = [f"{key}={trace[key]}" for key in ("complexity", "retrieval_stage") if key in trace]
    if trace.get("evidence_confidence") is not None:
        parts.append(f"confidence={trace['evidence_confidence']:.2f}")
    return ", ".join(parts) or "empty"


def load_snapshot(path: str) -> ResumeSnapshot:
    """The snapshot of an `ask --json` result file (or of its bare `hitl_resume_state`),
    checked as the server will check it; InvalidArgument names the failing key."""
    text = sys.stdin.read() if path == "-" else open(path, encoding="utf-8").read()  # noqa: SIM115
    data = json.loads(text)
    if isinstance(data, dict) and "hitl_resume_state" in data:
        data = data["hitl_resume_state"]
    if not data or not isinstance(data, dict):
        raise ValueError("the file holds no resume snapshot (the result was not HITL)")
    return ResumeSnapshot.from_mapping(data)


def load_history(path: str) -> tuple[Turn, ...]:
    """The turns of a `--history` JSON file (- = stdin): a list of {question, answer}."""
    text = sys.stdin.read() if path == "-" else open(path, encoding="utf-8").read()  # noqa: SIM115
    return history_from_json(json.loads(text))


def _turns(history: Sequence[Turn]) -> list[orchestrator_pb2.ConversationTurn]:
    return [
        orchestrator_pb2.ConversationTurn(question=t.question, answer=t.answer) for t in history
    ]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m orchestrator_service")
    sub = parser.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--stream", action="store_true", help="show progress steps live")
    common.add_argument("--json", action="store_true", help="print the whole result as JSON")
    common.add_argument(
        "--all-evidence",
        action="store_true",
        help="list every retrieved chunk (default: the graded top 3 and the cited ones)",
    )
    common.add_argument(
        "--no-answer", action="store_true", help="return the evidence without writing an answer"
    )
    common.add_argument(
        "--kb",
        action="append",
        default=[],
        metavar="ID",
        help="search this knowledge base (repeatable; default: knowledge_bases/default)",
    )
    common.add_argument(
        "--filter",
        default="",
        metavar="EXPR",
        help="AIP-160 metadata filter, e.g. 'metadata.department = \"sales\"'",
    )
    common.add_argument("--addr", help="orchestrator address (default localhost:ORCHESTRATOR_PORT)")
    common.add_argument("--timeout", type=float, default=120.0, help="deadline in seconds")
    common.add_argument(
        "--history",
        metavar="FILE",
        help='earlier turns of the conversation: JSON [{"question": …, "answer": …}] (- = stdin)',
    )
    common.add_argument(
        "--index",
        default="",
        metavar="NAME",
        help="read this READY index (knowledge_bases/KB/indexes/ID) instead of the active one",
    )
    add_tls_arguments(common)
    ask = sub.add_parser("ask", parents=[common], help="run the workflow for a question")
    ask.add_argument("question", nargs="?", help="the question (with --chat: the first one)")
    ask.add_argument(
        "--chat",
        action="store_true",
        help="a prompt loop keeping the conversation's history across questions",
    )
    resume = sub.add_parser("resume", parents=[common], help="answer an HITL follow-up")
    resume.add_argument("--snapshot", required=True, help="JSON file from `ask --json` (- = stdin)")
    resume.add_argument("--answer", required=True, help="the user's reply")
    cli_evaluation.add_parsers(sub)
    return parser


def _metadata(settings: OrchestratorSettings) -> tuple[tuple[str, str], ...]:
    """The caller's API key (docs/api.md#api-keys): SUPERMEW_API_KEY, else AUTH_TOKEN."""
    key = os.environ.get("SUPERMEW_API_KEY") or settings.auth_token
    return (("authorization", f"Bearer {key}"),) if key else ()


async def _call(args: argparse.Namespace, settings: OrchestratorSettings) -> dict[str, Any] | None:
    addr = args.addr or f"localhost:{settings.orchestrator_port}"
    metadata = _metadata(settings) or None
    history = load_history(args.history) if args.history else ()
    credentials = credentials_from_arguments(args)
    channel = (
        grpc.aio.secure_channel(addr, credentials)
        if credentials is not None
        else grpc.aio.insecure_channel(addr)
    )
    async with channel:
        stub = orchestrator_pb2_grpc.OrchestratorServiceStub(channel)
        if args.command == "ask" and args.chat:
            await _chat(stub, args, metadata, list(history))
            return None
        if args.command == "ask":
            if not args.question:
                raise ValueError("ask needs a question (or --chat)")
            return await _ask(stub, args, metadata, args.question, history)
        return await _resume(
            stub, args, metadata, load_snapshot(args.snapshot), args.answer, history
        )


def run_request(
    args: argparse.Namespace, question: str, history: Sequence[Turn]
) -> orchestrator_pb2.RunRequest:
    """The RunRequest of `ask` for one question of the conversation `history`."""
    return orchestrator_pb2.RunRequest(
        question=question,
        generate_answer=not args.no_answer,
        knowledge_bases=args.kb,
        filter=args.filter,
        history=_turns(history),
        index=args.index,
    )


async def _ask(
    stub: orchestrator_pb2_grpc.OrchestratorServiceStub,
    args: argparse.Namespace,
    metadata: Any,
    question: str,
    history: tuple[Turn, ...] | list[Turn],
) -> dict[str, Any]:
    request = run_request(args, question, history)
    return await _send(args, metadata, request, stub.Run, stub.StreamRun)


async def _resume(
    stub: orchestrator_pb2_grpc.OrchestratorServiceStub,
    args: argparse.Namespace,
    metadata: Any,
    snapshot: ResumeSnapshot,
    reply: str,
    history: Sequence[Turn],
) -> dict[str, Any]:
    request = orchestrator_pb2.ResumeRequest(
        resume_state=hitl_state_to_proto(snapshot.to_dict()),
        user_answer=reply,
        generate_answer=not args.no_answer,
        knowledge_bases=args.kb,
        filter=args.filter,
        history=_turns(history),
        index=args.index,
    )
    return await _send(args, metadata, request, stub.Resume, stub.StreamResume)


async def _chat(
    stub: orchestrator_pb2_grpc.OrchestratorServiceStub,
    args: argparse.Namespace,
    metadata: Any,
    history: list[Turn],
) -> None:
    """One question per line until an empty line, `exit` or Ctrl-D; each answered question
    joins the history sent with the next (its answer text, "" without one). A clarification
    (an HITL result) is answered on the next line: the reply resumes that run, and the
    question joins the history once the run ends without asking again; `/new QUESTION`
    drops it. A refused or failed call is reported and the loop goes on (a clarification
    still waiting for its reply)."""
    print("chat: one question per line; an empty line or Ctrl-D ends", file=sys.stderr)
    line: str | None = args.question
    #: The question whose clarification waits for a reply, and its snapshot.
    pending: tuple[str, ResumeSnapshot] | None = None
    while True:
        if not line:
            try:
                line = (await asyncio.to_thread(input, "reply> " if pending else "you> ")).strip()
            except EOFError:
                return
            if not line or line in {"exit", "quit"}:
                return
        if pending is not None and (line == "/new" or line.startswith("/new ")):
            pending, line = None, line.removeprefix("/new").strip()
            if not line:
                continue
        try:
            if pending is not None:
                data = await _resume(stub, args, metadata, pending[1], line, history)
            else:
                data = await _ask(stub, args, metadata, line, history)
        except grpc.aio.AioRpcError as exc:
            print(f"error: {exc.code().name}: {exc.details() or ''}", file=sys.stderr)
            line = None
            continue
        _print(args, data, reply_hint=CHAT_REPLY_HINT)
        question = pending[0] if pending is not None else line
        if data["hitl_resume_state"] is not None:
            pending = (question, ResumeSnapshot.from_mapping(data["hitl_resume_state"]))
        else:
            pending = None
            history[:] = recent_history(
                [*history, Turn(question, (data["answer"] or {}).get("text", ""))]
            )
        line = None


async def _send(
    args: argparse.Namespace, metadata: Any, request: Any, unary: Any, stream: Any
) -> dict[str, Any]:
    """One unary call, or one stream whose steps and answer pieces are printed live."""
    steps_out = sys.stderr if args.json else sys.stdout
    if not args.stream:
        return result_to_dict(await unary(request, timeout=args.timeout, metadata=metadata))
    events: AsyncIterator[Any] = stream(request, timeout=args.timeout, metadata=metadata)
    answering = False
    async for event in events:
        kind = event.WhichOneof("event")
        if kind == "step":
            print(format_step(event.step), file=steps_out, flush=True)
        elif kind == "answer_delta":
            if not answering:
                print("  ✍️  ", end="", file=steps_out)
                answering = True
            print(event.answer_delta.text, end="", file=steps_out, flush=True)
        else:
            if answering:
                print(file=steps_out)
            return result_to_dict(event.result)
    raise RuntimeError("the stream ended without a result")


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except BrokenPipeError:
        # `… | head` closed the pipe: stop quietly, no traceback now or at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:  # Ctrl-C: one line, the shell's code for SIGINT, no traceback
        print("interrupted", file=sys.stderr)
        return 130


def _main(argv: list[str] | None) -> int:
    argv = cli_evaluation.normalise_argv(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    settings = OrchestratorSettings()
    if args.command in cli_evaluation.COMMANDS:
        return cli_evaluation.run(args, settings, _metadata(settings))
    try:
        data = asyncio.run(_call(args, settings))
    except grpc.aio.AioRpcError as exc:
        details = exc.details() or ""
        tls = bool(args.tls or args.tls_ca or args.tls_cert)
        hint = mismatch_hint(details, tls=tls)
        print(f"error: {exc.code().name}: {details}{hint}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        raise
    except (OSError, ValueError, InvalidArgument, ConfigurationError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if data is not None:
        _print(args, data)
    return 0


def _print(args: argparse.Namespace, data: dict[str, Any], *, reply_hint: str = "") -> None:
    if args.json:
        print(json.dumps(data, ensure_ascii=False, indent=2), flush=True)
    else:
        print_result(
            data,
            sys.stdout,
            all_evidence=args.all_evidence,
            reply_hint=reply_hint or resume_hint(args),
            show_snapshot=not reply_hint,
        )
        sys.stdout.flush()
