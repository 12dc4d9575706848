"""The CLI's evaluation, run-history and feedback commands (supermew.v1.EvaluationService,
docs/api.md#evaluation), registered on `python -m orchestrator_service` by cli.py:

    eval sets list | create ID [--display-name N] [--kb KB]... [--filter F] | get ID | delete ID
    eval import SET (--beir FOLDER [--split train|test] | --jsonl FILE)
    eval run SET [--mode retrieval|run] [--top-k N] [--generate-answer] [--concurrency N]
        [--index NAME] [--no-wait]
    eval runs SET
    eval results SET/RUN [--worst N] [--metric ndcg@10]
    eval compare SET/RUN_A SET/RUN_B
    eval report SET/RUN [--against SET/RUN] --html FILE
    runs list [--filter F] [--limit N] | show RUN_ID
    feedback RUN_ID (--up|--down) [--reason R]... [--comment C] [--expected-doc ID]...
        [--corrected-answer TEXT] [--question Q --answer A]
    feedback list [--run RUN_ID] [--filter F] | to-set SET FEEDBACK...

A set is its id or `evaluation_sets/{id}`; an evaluation run `SET/RUN_ID` or its full name; a
recorded run its id or `runs/{id}`; feedback `RUN_ID/ID` or `runs/{run}/feedback/{id}`.
`--index knowledge_bases/{kb}/indexes/{id}` runs the set against that READY index of one of
its knowledge bases instead of the active one (RunConfig.index, docs/api.md#indexes), to
compare two indexes before a switch; `eval runs`, a finished run and `eval compare` show each
run's index ("active" when it read the active ones).

Address, key (SUPERMEW_API_KEY, else AUTH_TOKEN) and TLS flags are those of `ask`; a failed
call prints one line (`error: STATUS: details`) and exits 1, a bad argument or file exits 2."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO

import grpc
from google.longrunning import operations_pb2_grpc
from google.longrunning import operations_proto_pb2 as operations_pb2
from google.protobuf import duration_pb2, json_format
from google.rpc import code_pb2
from supermew.v1 import evaluation_pb2, evaluation_pb2_grpc
from tqdm import tqdm

from orchestrator_service.evaluation.report import (
    WORST_METRIC,
    ItemHistory,
    Report,
    fmt,
    item_id,
    ordered_metrics,
    render_html,
    worst_results,
)
from orchestrator_service.settings import OrchestratorSettings
from shared.codec import rag_trace_from_proto
from shared.tls import add_tls_arguments, credentials_from_arguments, mismatch_hint

E = evaluation_pb2
#: The top-level commands this module owns.
COMMANDS = frozenset({"eval", "runs", "feedback"})
_FEEDBACK_SUBCOMMANDS = frozenset({"list", "to-set", "-h", "--help"})
CALL_TIMEOUT_SECONDS = 60.0
#: How long one WaitOperation may hold before the progress bar is redrawn.
POLL_SECONDS = 0.5
#: The largest page the list RPCs serve: the fewest round trips.
PAGE = 1000
#: Where a run's items are worst first in the report.
REPORT_WORST = 10
_SET_PREFIX = "evaluation_sets/"
_RUNS_PREFIX = "runs/"
_MODES = {"retrieval": E.RunConfig.RETRIEVAL, "run": E.RunConfig.RUN}
_REASONS = [v.name.lower() for v in E.Feedback.Reason.DESCRIPTOR.values if v.number]
#: What GetRun / ListFeedback answer when there is no record to show: the report says so.
_NO_HISTORY = (grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.NOT_FOUND)

Metadata = tuple[tuple[str, str], ...]


class Clients:
    """The stubs one command calls, with the caller's key and deadline."""

    def __init__(self, channel: grpc.Channel, metadata: Metadata, timeout: float) -> None:
        self.evaluation = evaluation_pb2_grpc.EvaluationServiceStub(channel)
        self.operations = operations_pb2_grpc.OperationsStub(channel)
        self.metadata = metadata
        self.timeout = timeout

    def call(self, method: Callable[..., Any], request: Any, timeout: float | None = None) -> Any:
        return method(request, timeout=timeout or self.timeout, metadata=self.metadata)


# ---- names ---------------------------------------------------------------------------------


def set_name(text: str) -> str:
    """`evaluation_sets/{id}` from an id or the full name."""
    return text if text.startswith(_SET_PREFIX) else _SET_PREFIX + text


def evaluation_run_name(text: str) -> str:
    """`evaluation_sets/{set}/runs/{id}` from `SET/RUN_ID` or the full name; a bare run id
    names no set, so it is refused (ValueError) rather than guessed."""
    if text.startswith(_SET_PREFIX):
        return text
    set_id, sep, run_id = text.partition("/")
    run_id = run_id.removeprefix("runs/")  # SET/runs/RUN_ID: the name without its prefix
    if not sep or not set_id or not run_id or "/" in run_id:
        raise ValueError(f"{text!r}: name the run as SET/RUN_ID or evaluation_sets/SET/runs/RUN_ID")
    return f"{_SET_PREFIX}{set_id}/runs/{run_id}"


def history_run_name(text: str) -> str:
    """`runs/{id}` from a RunResult.run_id or the full name."""
    return text if text.startswith(_RUNS_PREFIX) else _RUNS_PREFIX + text


def feedback_name(text: str) -> str:
    """`runs/{run}/feedback/{id}` from `RUN_ID/ID` or the full name."""
    if text.startswith(_RUNS_PREFIX):
        return text
    run_id, sep, feedback_id = text.partition("/")
    if not sep or not run_id or not feedback_id or "/" in feedback_id:
        raise ValueError(f"{text!r}: name feedback as RUN_ID/ID or runs/RUN_ID/feedback/ID")
    return f"{_RUNS_PREFIX}{run_id}/feedback/{feedback_id}"


def normalise_argv(argv: Sequence[str]) -> list[str]:
    """`feedback RUN_ID …` is `feedback give RUN_ID …`: argparse cannot have a positional
    beside subcommands, and a run id is never `list` or `to-set`."""
    args = list(argv)
    if len(args) >= 2 and args[0] == "feedback" and args[1] not in _FEEDBACK_SUBCOMMANDS:
        args.insert(1, "give")
    return args


# ---- requests (pure: parsed arguments in, request out) --------------------------------------


def create_set_request(args: argparse.Namespace) -> E.CreateEvaluationSetRequest:
    return E.CreateEvaluationSetRequest(
        evaluation_set_id=args.id.removeprefix(_SET_PREFIX),
        evaluation_set=E.EvaluationSet(
            display_name=args.display_name or "", knowledge_bases=args.kb, filter=args.filter
        ),
    )


def import_request(args: argparse.Namespace) -> E.ImportEvaluationItemsRequest:
    """The files read here and sent inline: the server reads `uri`s only under its own
    IMPORT_ROOTS, which a laptop's folder is not."""
    request = E.ImportEvaluationItemsRequest(evaluation_set=set_name(args.set))
    if args.beir:
        folder = Path(args.beir)
        request.format = E.ImportEvaluationItemsRequest.BEIR
        request.queries = _read(folder / "queries.jsonl")
        request.qrels = _read(folder / "qrels" / f"{args.split}.tsv")
    else:
        request.format = E.ImportEvaluationItemsRequest.JSONL
        request.content = _read(Path(args.jsonl))
    return request


def _read(path: Path) -> bytes:
    if not path.is_file():
        raise ValueError(f"{path}: no such file")
    return path.read_bytes()


def run_request(args: argparse.Namespace) -> E.RunEvaluationRequest:
    config = E.RunConfig(mode=_MODES[args.mode], generate_answer=args.generate_answer)
    if args.top_k is not None:
        config.top_k = args.top_k
    if args.concurrency is not None:
        config.concurrency = args.concurrency
    if args.index:
        config.index = args.index
    return E.RunEvaluationRequest(evaluation_set=set_name(args.set), config=config)


def feedback_request(args: argparse.Namespace) -> E.CreateFeedbackRequest:
    if (args.question is None) != (args.answer is None):
        raise ValueError("--question and --answer go together")
    feedback = E.Feedback(
        rating=E.Feedback.THUMBS_UP if args.up else E.Feedback.THUMBS_DOWN,
        reasons=[r.upper() for r in args.reason],
        comment=args.comment or "",
        expected_document_ids=args.expected_doc,
        corrected_answer=args.corrected_answer or "",
        question=args.question or "",
        answer=args.answer or "",
    )
    return E.CreateFeedbackRequest(parent=history_run_name(args.run_id), feedback=feedback)


def list_feedback_request(args: argparse.Namespace, page_token: str = "") -> E.ListFeedbackRequest:
    parent = history_run_name(args.run) if args.run else "runs/-"
    return E.ListFeedbackRequest(
        parent=parent, filter=args.filter, page_size=PAGE, page_token=page_token
    )


def to_set_request(args: argparse.Namespace) -> E.AddFeedbackToEvaluationSetRequest:
    return E.AddFeedbackToEvaluationSetRequest(
        evaluation_set=set_name(args.set), feedback=[feedback_name(n) for n in args.feedback]
    )


def list_runs_request(args: argparse.Namespace, page_token: str = "") -> E.ListRunsRequest:
    return E.ListRunsRequest(
        filter=args.filter, page_size=min(args.limit, PAGE), page_token=page_token
    )


# ---- parser --------------------------------------------------------------------------------


def _reason(text: str) -> str:
    if text.lower() not in _REASONS:
        raise argparse.ArgumentTypeError(f"{text!r} is not one of {', '.join(_REASONS)}")
    return text.lower()


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer")
    return value


def add_parsers(sub: Any) -> None:
    """Registers `eval`, `runs` and `feedback` on the CLI's subparsers."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--addr", help="orchestrator address (default localhost:ORCHESTRATOR_PORT)")
    common.add_argument(
        "--timeout", type=float, default=CALL_TIMEOUT_SECONDS, help="deadline of each call, s"
    )
    common.add_argument("--json", action="store_true", help="print the outcome as JSON")
    add_tls_arguments(common)

    def command(into: Any, name: str, handler: Callable[..., int], helptext: str) -> Any:
        p = into.add_parser(name, parents=[common], help=helptext, description=helptext)
        p.set_defaults(handler=handler)
        return p

    ev = sub.add_parser("eval", help="evaluation sets, runs, results and reports")
    ev_sub = ev.add_subparsers(dest="eval_command", required=True)
    sets = ev_sub.add_parser("sets", help="list, create, get or delete evaluation sets")
    sets_sub = sets.add_subparsers(dest="sets_command", required=True)
    command(sets_sub, "list", sets_list, "every evaluation set, newest first")
    p = command(sets_sub, "create", sets_create, "create an evaluation set")
    p.add_argument("id", help="[a-z][a-z0-9-]{0,62}")
    p.add_argument("--display-name")
    p.add_argument(
        "--kb", action="append", default=[], metavar="KB", help="knowledge base (repeatable)"
    )
    p.add_argument("--filter", default="", metavar="F", help="AIP-160 filter every run applies")
    p = command(sets_sub, "get", sets_get, "one evaluation set")
    p.add_argument("id")
    p = command(sets_sub, "delete", sets_delete, "delete a set with its items, runs, results")
    p.add_argument("id")

    p = command(ev_sub, "import", import_items, "add items from BEIR or JSONL files")
    p.add_argument("set")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--beir", metavar="FOLDER", help="queries.jsonl + qrels/{split}.tsv")
    source.add_argument("--jsonl", metavar="FILE", help="one EvaluationItem per line")
    p.add_argument("--split", default="test", choices=("train", "test", "dev"))

    p = command(ev_sub, "run", run_evaluation, "run a set against the live system")
    p.add_argument("set")
    p.add_argument("--mode", choices=tuple(_MODES), default="retrieval")
    p.add_argument("--top-k", type=_positive)
    p.add_argument("--generate-answer", action="store_true")
    p.add_argument("--concurrency", type=_positive)
    p.add_argument(
        "--index",
        metavar="NAME",
        help="read this READY index (knowledge_bases/KB/indexes/ID) instead of the active one",
    )
    p.add_argument("--no-wait", action="store_true", help="print the run's name and return")

    p = command(ev_sub, "runs", runs_of_set, "a set's runs with their config, newest first")
    p.add_argument("set")

    p = command(ev_sub, "results", results, "a run's per-item results")
    p.add_argument("run", help="SET/RUN_ID or evaluation_sets/SET/runs/RUN_ID")
    p.add_argument("--worst", type=_positive, metavar="N", help="only the N worst, worst first")
    p.add_argument(
        "--metric", default=WORST_METRIC, help=f"per-item metric (default {WORST_METRIC})"
    )

    p = command(ev_sub, "compare", compare, "two runs of a set, metric by metric")
    p.add_argument("a", help="the baseline run")
    p.add_argument("b", help="the candidate run")

    p = command(ev_sub, "report", report, "one self-contained HTML page on a run")
    p.add_argument("run")
    p.add_argument("--against", metavar="RUN", help="the baseline run to compare with")
    p.add_argument("--html", required=True, metavar="FILE")
    p.add_argument("--worst", type=_positive, default=REPORT_WORST, metavar="N")

    runs = sub.add_parser("runs", help="recorded runs (RUN_HISTORY)")
    runs_sub = runs.add_subparsers(dest="runs_command", required=True)
    p = command(runs_sub, "list", runs_list, "recorded runs, newest first")
    p.add_argument("--filter", default="", metavar="F")
    p.add_argument("--limit", type=_positive, default=50, metavar="N")
    p = command(runs_sub, "show", runs_show, "one recorded run with its trace, as JSON")
    p.add_argument("run_id")

    fb = sub.add_parser(
        "feedback",
        help="give feedback on a run (feedback RUN_ID --up|--down …), list it, turn it into items",
    )
    fb_sub = fb.add_subparsers(dest="feedback_command", required=True)
    p = command(fb_sub, "give", feedback_give, "feedback on one answered run")
    p.add_argument("run_id")
    rating = p.add_mutually_exclusive_group(required=True)
    rating.add_argument("--up", action="store_true")
    rating.add_argument("--down", action="store_true")
    p.add_argument("--reason", action="append", default=[], type=_reason, help="/".join(_REASONS))
    p.add_argument("--comment")
    p.add_argument("--expected-doc", action="append", default=[], metavar="ID")
    p.add_argument("--corrected-answer", metavar="TEXT")
    p.add_argument("--question", metavar="Q", help="with --answer: for a run without history")
    p.add_argument("--answer", metavar="A")
    p = command(fb_sub, "list", feedback_list, "feedback, newest first")
    p.add_argument("--run", metavar="RUN_ID")
    p.add_argument("--filter", default="", metavar="F")
    p = command(fb_sub, "to-set", feedback_to_set, "turn feedback into items of a set")
    p.add_argument("set")
    p.add_argument("feedback", nargs="+", metavar="FEEDBACK_NAME")


# ---- running -------------------------------------------------------------------------------


def run(args: argparse.Namespace, settings: OrchestratorSettings, metadata: Metadata) -> int:
    """One command over one channel; errors as the `ask` command prints them."""
    try:
        credentials = credentials_from_arguments(args)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    addr = args.addr or f"localhost:{settings.orchestrator_port}"
    channel = (
        grpc.secure_channel(addr, credentials)
        if credentials is not None
        else grpc.insecure_channel(addr)
    )
    try:
        with channel:
            handler: Callable[[Clients, argparse.Namespace], int] = args.handler
            return handler(Clients(channel, metadata, args.timeout), args)
    except grpc.RpcError as exc:
        code = exc.code() if isinstance(exc, grpc.Call) else grpc.StatusCode.UNKNOWN
        details = (exc.details() if isinstance(exc, grpc.Call) else "") or ""
        hint = mismatch_hint(details, tls=credentials is not None)
        print(f"error: {code.name}: {details}{hint}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        raise
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _dict(message: Any) -> dict[str, Any]:
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


def _print_json(value: Any) -> None:
    print(json.dumps(value, ensure_ascii=False, indent=2), flush=True)


def table(headers: Sequence[str], rows: Sequence[Sequence[object]], out: TextIO) -> None:
    """Columns padded to their widest cell; numbers right-aligned."""
    cells = [[str(c) for c in headers]] + [[_cell(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    numeric = [
        bool(rows) and all(isinstance(row[i], int | float) for row in rows)
        for i in range(len(headers))
    ]
    for r in cells:
        # Headers too: a number column's title sits over the numbers' right edge.
        line = "  ".join(
            c.rjust(w) if num else c.ljust(w) for c, w, num in zip(r, widths, numeric, strict=True)
        )
        print(line.rstrip(), file=out)


def _cell(value: object) -> str:
    if isinstance(value, float):
        return fmt(value)
    return " ".join(str(value).split())


def _pages(
    fetch: Callable[[str], tuple[list[Any], str]], limit: int | None = None
) -> Iterator[Any]:
    token, seen = "", 0
    while True:
        rows, token = fetch(token)
        for row in rows:
            if limit is not None and seen >= limit:
                return
            seen += 1
            yield row
        if not token:
            return


def _set_row(s: E.EvaluationSet) -> list[object]:
    return [
        s.name.removeprefix(_SET_PREFIX),
        s.display_name or "—",
        s.item_count,
        ",".join(kb.removeprefix("knowledge_bases/") for kb in s.knowledge_bases),
        s.filter or "—",
    ]


_SET_HEADERS = ("id", "display name", "items", "knowledge bases", "filter")


def sets_list(c: Clients, args: argparse.Namespace) -> int:
    def fetch(token: str) -> tuple[list[E.EvaluationSet], str]:
        page = c.call(
            c.evaluation.ListEvaluationSets,
            E.ListEvaluationSetsRequest(page_size=PAGE, page_token=token),
        )
        return list(page.evaluation_sets), page.next_page_token

    found = list(_pages(fetch))
    if args.json:
        _print_json([_dict(s) for s in found])
    else:
        table(_SET_HEADERS, [_set_row(s) for s in found], sys.stdout)
    return 0


def _print_set(s: E.EvaluationSet, args: argparse.Namespace) -> None:
    if args.json:
        _print_json(_dict(s))
    else:
        table(_SET_HEADERS, [_set_row(s)], sys.stdout)


def sets_create(c: Clients, args: argparse.Namespace) -> int:
    _print_set(c.call(c.evaluation.CreateEvaluationSet, create_set_request(args)), args)
    return 0


def sets_get(c: Clients, args: argparse.Namespace) -> int:
    request = E.GetEvaluationSetRequest(name=set_name(args.id))
    _print_set(c.call(c.evaluation.GetEvaluationSet, request), args)
    return 0


def sets_delete(c: Clients, args: argparse.Namespace) -> int:
    name = set_name(args.id)
    c.call(c.evaluation.DeleteEvaluationSet, E.DeleteEvaluationSetRequest(name=name))
    print(f"deleted {name}")
    return 0


def import_items(c: Clients, args: argparse.Namespace) -> int:
    done = c.call(c.evaluation.ImportEvaluationItems, import_request(args))
    if args.json:
        _print_json(_dict(done))
    else:
        print(f"imported {done.items_imported} item(s), {done.queries_skipped} query(ies) skipped")
    return 0


def run_evaluation(c: Clients, args: argparse.Namespace) -> int:
    operation = c.call(c.evaluation.RunEvaluation, run_request(args))
    meta = E.RunEvaluationMetadata()
    operation.metadata.Unpack(meta)
    if args.no_wait:
        if args.json:
            _print_json({"operation": operation.name, "run": meta.run})
        else:
            print(f"started {meta.run} ({operation.name})")
        return 0
    operation = follow(c, operation, quiet=args.json)
    if operation.HasField("error"):
        code = code_pb2.Code.Name(operation.error.code)
        print(f"error: {code}: {operation.error.message}", file=sys.stderr)
        return 1
    finished = E.EvaluationRun()
    operation.response.Unpack(finished)
    if args.json:
        _print_json(_dict(finished))
    else:
        print_run(finished, sys.stdout)
    if finished.state != E.EvaluationRun.SUCCEEDED:
        state = E.EvaluationRun.State.Name(finished.state)
        print(f"error: {finished.name} ended {state}", file=sys.stderr)
        return 1
    return 0


def follow(
    c: Clients, operation: operations_pb2.Operation, *, quiet: bool = False
) -> operations_pb2.Operation:
    """Waits for the operation, a bar over its items on stderr: WaitOperation returns when the
    run ends or after POLL_SECONDS, whichever is first, so the bar moves while it runs."""
    wait = operations_pb2.WaitOperationRequest(
        name=operation.name, timeout=duration_pb2.Duration(nanos=int(POLL_SECONDS * 1e9))
    )
    meta = E.RunEvaluationMetadata()
    operation.metadata.Unpack(meta)
    with tqdm(
        total=meta.items_total, unit="item", file=sys.stderr, disable=quiet, dynamic_ncols=True
    ) as bar:
        while True:
            if not operation.metadata.Unpack(meta) and not operation.done:
                # A server that stores the metadata unpacked: read the progress off the run.
                run = c.call(
                    c.evaluation.GetEvaluationRun, E.GetEvaluationRunRequest(name=meta.run)
                )
                meta.state, meta.items_done = run.state, run.items_done
            bar.total = meta.items_total
            bar.n = meta.items_done
            bar.set_description(E.EvaluationRun.State.Name(meta.state).lower(), refresh=False)
            bar.refresh()
            if operation.done:
                return operation
            operation = c.call(c.operations.WaitOperation, wait, c.timeout + POLL_SECONDS)


def index_shown(config: E.RunConfig) -> str:
    """The index a run read: its name, or "active" for each knowledge base's active index."""
    return config.index or "active"


def print_run(r: E.EvaluationRun, out: TextIO) -> None:
    state = E.EvaluationRun.State.Name(r.state)
    print(f"run:    {r.name} ({state})", file=out)
    print(f"index:  {index_shown(r.config)}", file=out)
    print(f"items:  {r.items_done}/{r.items_total} done, {r.items_failed} failed", file=out)
    table(("metric", "value"), [(n, r.metrics[n]) for n in ordered_metrics(r.metrics)], out)


_RUN_HEADERS = ("run", "state", "mode", "top_k", "index", "items", "failed", "created")


def _run_row(r: E.EvaluationRun) -> list[object]:
    return [
        r.name.rsplit("/", 1)[-1],
        E.EvaluationRun.State.Name(r.state).lower(),
        E.RunConfig.Mode.Name(r.config.mode).lower(),
        r.config.top_k if r.config.HasField("top_k") else "—",
        index_shown(r.config),
        f"{r.items_done}/{r.items_total}",
        r.items_failed,
        r.create_time.ToJsonString() if r.HasField("create_time") else "—",
    ]


def runs_of_set(c: Clients, args: argparse.Namespace) -> int:
    def fetch(token: str) -> tuple[list[E.EvaluationRun], str]:
        page = c.call(
            c.evaluation.ListEvaluationRuns,
            E.ListEvaluationRunsRequest(
                parent=set_name(args.set), page_size=PAGE, page_token=token
            ),
        )
        return list(page.evaluation_runs), page.next_page_token

    found = list(_pages(fetch))
    if args.json:
        _print_json([_dict(r) for r in found])
    else:
        table(_RUN_HEADERS, [_run_row(r) for r in found], sys.stdout)
    return 0


def _results(c: Clients, run_name: str) -> list[E.EvaluationResult]:
    def fetch(token: str) -> tuple[list[E.EvaluationResult], str]:
        page = c.call(
            c.evaluation.ListEvaluationResults,
            E.ListEvaluationResultsRequest(run=run_name, page_size=PAGE, page_token=token),
        )
        return list(page.results), page.next_page_token

    return list(_pages(fetch))


def results(c: Clients, args: argparse.Namespace) -> int:
    rows = _results(c, evaluation_run_name(args.run))
    if args.worst:
        rows = worst_results(rows, args.worst, args.metric)
    if args.json:
        _print_json([_dict(r) for r in rows])
        return 0
    table(
        ("item", "route", args.metric, "latency_s", "error"),
        [
            (
                item_id(r.item),
                r.route or "—",
                r.metrics.get(args.metric, "—"),
                r.latency_seconds,
                r.error or "",
            )
            for r in rows
        ],
        sys.stdout,
    )
    return 0


def compare(c: Clients, args: argparse.Namespace) -> int:
    request = E.CompareEvaluationRunsRequest(
        a=evaluation_run_name(args.a), b=evaluation_run_name(args.b)
    )
    done = c.call(c.evaluation.CompareEvaluationRuns, request)
    if args.json:
        _print_json(_dict(done))
        return 0
    for label, name in (("a", request.a), ("b", request.b)):
        run = c.call(c.evaluation.GetEvaluationRun, E.GetEvaluationRunRequest(name=name))
        print(f"{label}: {name} (index: {index_shown(run.config)})")
    print(f"items paired: {done.items_paired}")
    by_name = {row.metric: row for row in done.metrics}
    table(
        ("metric", "a", "b", "diff", "95% CI", "won/lost/tied"),
        [
            (
                name,
                row.mean_a,
                row.mean_b,
                f"{row.difference:+.4f}",
                f"[{fmt(row.ci_low)}, {fmt(row.ci_high)}]",
                f"{row.won}/{row.lost}/{row.tied}",
            )
            for name in ordered_metrics(by_name)
            for row in (by_name[name],)
        ],
        sys.stdout,
    )
    return 0


def report(c: Clients, args: argparse.Namespace) -> int:
    name = evaluation_run_name(args.run)
    current = c.call(c.evaluation.GetEvaluationRun, E.GetEvaluationRunRequest(name=name))
    worst = worst_results(_results(c, name), args.worst)
    against, comparison, paired = None, [], 0
    if args.against:
        baseline = evaluation_run_name(args.against)
        against = c.call(c.evaluation.GetEvaluationRun, E.GetEvaluationRunRequest(name=baseline))
        done = c.call(
            c.evaluation.CompareEvaluationRuns, E.CompareEvaluationRunsRequest(a=baseline, b=name)
        )
        comparison, paired = list(done.metrics), done.items_paired
    histories = {r.run_id: item_history(c, r.run_id) for r in worst if r.run_id}
    page = render_html(Report(current, worst, histories, against, comparison, paired))
    Path(args.html).write_text(page, encoding="utf-8")
    print(f"wrote {args.html} ({len(worst)} worst item(s))")
    return 0


def item_history(c: Clients, run_id: str) -> ItemHistory:
    """The run's history record and feedback; no record when the server has none (or serves
    no history at all) — a report is still worth writing without it."""
    parent = history_run_name(run_id)
    try:
        record = c.call(c.evaluation.GetRun, E.GetRunRequest(name=parent))
        feedback = c.call(
            c.evaluation.ListFeedback, E.ListFeedbackRequest(parent=parent, page_size=PAGE)
        ).feedback
    except grpc.RpcError as exc:
        if isinstance(exc, grpc.Call) and exc.code() in _NO_HISTORY:
            return ItemHistory(None)
        raise
    return ItemHistory(record, tuple(feedback))


def record_dict(record: E.RunRecord) -> dict[str, Any]:
    """A history record as JSON, its trace decoded as `ask --json` prints one."""
    data = _dict(record)
    data["rag_trace"] = (
        rag_trace_from_proto(record.rag_trace) if record.HasField("rag_trace") else None
    )
    return data


def runs_list(c: Clients, args: argparse.Namespace) -> int:
    def fetch(token: str) -> tuple[list[E.RunRecord], str]:
        page = c.call(c.evaluation.ListRuns, list_runs_request(args, token))
        return list(page.runs), page.next_page_token

    found = list(_pages(fetch, args.limit))
    if args.json:
        _print_json([record_dict(r) for r in found])
        return 0
    rating = E.Feedback.Rating.Name
    table(
        ("run", "kind", "route", "status", "created", "feedback", "question"),
        [
            (
                r.name.removeprefix(_RUNS_PREFIX),
                r.kind,
                r.route,
                r.retrieval_status,
                r.create_time.ToJsonString() if r.HasField("create_time") else "—",
                "—" if not r.feedback_rating else rating(r.feedback_rating).lower(),
                _snippet(r.question),
            )
            for r in found
        ],
        sys.stdout,
    )
    return 0


def _snippet(text: str, limit: int = 60) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def runs_show(c: Clients, args: argparse.Namespace) -> int:
    record = c.call(c.evaluation.GetRun, E.GetRunRequest(name=history_run_name(args.run_id)))
    _print_json(record_dict(record))
    return 0


def feedback_give(c: Clients, args: argparse.Namespace) -> int:
    made = c.call(c.evaluation.CreateFeedback, feedback_request(args))
    if args.json:
        _print_json(_dict(made))
    else:
        print(f"recorded {made.name}")
    return 0


def feedback_list(c: Clients, args: argparse.Namespace) -> int:
    def fetch(token: str) -> tuple[list[E.Feedback], str]:
        page = c.call(c.evaluation.ListFeedback, list_feedback_request(args, token))
        return list(page.feedback), page.next_page_token

    found = list(_pages(fetch))
    if args.json:
        _print_json([_dict(f) for f in found])
        return 0
    table(
        ("feedback", "rating", "reasons", "comment"),
        [
            (
                f.name,
                E.Feedback.Rating.Name(f.rating).lower(),
                ",".join(E.Feedback.Reason.Name(r).lower() for r in f.reasons) or "—",
                _snippet(f.comment) or "—",
            )
            for f in found
        ],
        sys.stdout,
    )
    return 0


def feedback_to_set(c: Clients, args: argparse.Namespace) -> int:
    done = c.call(c.evaluation.AddFeedbackToEvaluationSet, to_set_request(args))
    if args.json:
        _print_json([_dict(i) for i in done.evaluation_items])
    else:
        for item in done.evaluation_items:
            print(f"added {item.name}")
    return 0


__all__ = ["COMMANDS", "add_parsers", "normalise_argv", "run"]
