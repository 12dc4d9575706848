"""The `eval`, `runs` and `feedback` commands' arguments and names, without a server: what
the parsed command line puts in each request, and which names are accepted or refused."""

from __future__ import annotations

import argparse
import sys

import grpc
import pytest
from supermew.v1 import evaluation_pb2 as E

from orchestrator_service import cli_evaluation as ce
from orchestrator_service.cli import _parser


def parse(*argv: str) -> argparse.Namespace:
    return _parser().parse_args(ce.normalise_argv(argv))


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("scifact", "evaluation_sets/scifact"),
        ("evaluation_sets/scifact", "evaluation_sets/scifact"),
    ],
)
def test_set_names(given: str, expected: str) -> None:
    assert ce.set_name(given) == expected


@pytest.mark.parametrize(
    "given",
    [
        "scifact/0123456789abcdef0123",
        "scifact/runs/0123456789abcdef0123",
        "evaluation_sets/scifact/runs/0123456789abcdef0123",
    ],
)
def test_evaluation_run_names(given: str) -> None:
    assert ce.evaluation_run_name(given) == "evaluation_sets/scifact/runs/0123456789abcdef0123"


@pytest.mark.parametrize("given", ["0123456789abcdef0123", "scifact/", "/x", "a/b/c"])
def test_a_run_without_its_set_is_refused(given: str) -> None:
    with pytest.raises(ValueError, match="SET/RUN_ID"):
        ce.evaluation_run_name(given)


def test_history_and_feedback_names() -> None:
    run_id = "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"
    assert ce.history_run_name(run_id) == f"runs/{run_id}"
    assert ce.history_run_name(f"runs/{run_id}") == f"runs/{run_id}"
    assert ce.feedback_name(f"{run_id}/f1") == f"runs/{run_id}/feedback/f1"
    assert ce.feedback_name(f"runs/{run_id}/feedback/f1") == f"runs/{run_id}/feedback/f1"
    with pytest.raises(ValueError, match="RUN_ID/ID"):
        ce.feedback_name(run_id)


def test_feedback_with_a_run_id_is_the_give_command() -> None:
    assert ce.normalise_argv(["feedback", "r1", "--up"]) == ["feedback", "give", "r1", "--up"]
    for kept in (["feedback", "list"], ["feedback", "to-set", "s", "f"], ["feedback", "--help"]):
        assert ce.normalise_argv(kept) == kept
    assert ce.normalise_argv(["ask", "feedback"]) == ["ask", "feedback"]


def test_feedback_request_carries_every_flag() -> None:
    args = parse(
        "feedback", "r1", "--down", "--reason", "wrong_answer", "--reason", "BAD_CITATION",
        "--comment", "no", "--expected-doc", "d1", "--expected-doc", "d2",
        "--corrected-answer", "Sixteen weeks.", "--question", "Q?", "--answer", "A.",
    )  # fmt: skip
    assert ce.feedback_request(args) == E.CreateFeedbackRequest(
        parent="runs/r1",
        feedback=E.Feedback(
            rating=E.Feedback.THUMBS_DOWN,
            reasons=[E.Feedback.WRONG_ANSWER, E.Feedback.BAD_CITATION],
            comment="no",
            expected_document_ids=["d1", "d2"],
            corrected_answer="Sixteen weeks.",
            question="Q?",
            answer="A.",
        ),
    )
    up = ce.feedback_request(parse("feedback", "runs/r2", "--up"))
    assert up == E.CreateFeedbackRequest(
        parent="runs/r2", feedback=E.Feedback(rating=E.Feedback.THUMBS_UP)
    )


def test_feedback_refuses_a_question_without_its_answer() -> None:
    with pytest.raises(ValueError, match="--question and --answer go together"):
        ce.feedback_request(parse("feedback", "r1", "--up", "--question", "Q?"))


@pytest.mark.parametrize(
    "argv",
    [
        ("feedback", "r1"),  # neither --up nor --down
        ("feedback", "r1", "--up", "--down"),
        ("feedback", "r1", "--up", "--reason", "because"),
        ("eval", "import", "s"),  # neither --beir nor --jsonl
        ("eval", "import", "s", "--beir", "d", "--jsonl", "f"),
        ("eval", "run", "s", "--top-k", "0"),
        ("eval", "run", "s", "--mode", "fast"),
        ("eval", "report", "s/r"),  # --html is required
        ("runs", "list", "--limit", "-1"),
    ],
)
def test_bad_arguments_exit_2(argv: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        parse(*argv)
    assert exited.value.code == 2
    assert "error:" in capsys.readouterr().err


def test_feedback_list_and_to_set_requests() -> None:
    assert ce.list_feedback_request(parse("feedback", "list")) == E.ListFeedbackRequest(
        parent="runs/-", page_size=ce.PAGE
    )
    args = parse("feedback", "list", "--run", "r1", "--filter", "rating = THUMBS_DOWN")
    assert ce.list_feedback_request(args, "tok") == E.ListFeedbackRequest(
        parent="runs/r1", filter="rating = THUMBS_DOWN", page_size=ce.PAGE, page_token="tok"
    )
    args = parse("feedback", "to-set", "hr", "r1/f1", "runs/r2/feedback/f2")
    assert ce.to_set_request(args) == E.AddFeedbackToEvaluationSetRequest(
        evaluation_set="evaluation_sets/hr",
        feedback=["runs/r1/feedback/f1", "runs/r2/feedback/f2"],
    )


def test_runs_requests() -> None:
    args = parse("runs", "list", "--filter", "route = answer", "--limit", "5000")
    assert ce.list_runs_request(args) == E.ListRunsRequest(
        filter="route = answer", page_size=ce.PAGE
    )
    assert parse("runs", "list").limit == 50
    assert parse("runs", "show", "r1").run_id == "r1"


def test_set_run_and_import_requests(tmp_path) -> None:
    args = parse(
        "eval", "sets", "create", "hr", "--display-name", "HR", "--kb", "hr", "--kb",
        "knowledge_bases/eng", "--filter", "metadata.year >= 2023",
    )  # fmt: skip
    assert ce.create_set_request(args) == E.CreateEvaluationSetRequest(
        evaluation_set_id="hr",
        evaluation_set=E.EvaluationSet(
            display_name="HR",
            knowledge_bases=["hr", "knowledge_bases/eng"],
            filter="metadata.year >= 2023",
        ),
    )
    assert ce.run_request(parse("eval", "run", "hr")) == E.RunEvaluationRequest(
        evaluation_set="evaluation_sets/hr", config=E.RunConfig(mode=E.RunConfig.RETRIEVAL)
    )
    args = parse(
        "eval", "run", "hr", "--mode", "run", "--top-k", "5", "--generate-answer",
        "--concurrency", "2",
    )  # fmt: skip
    assert ce.run_request(args).config == E.RunConfig(
        mode=E.RunConfig.RUN, top_k=5, generate_answer=True, concurrency=2
    )
    (tmp_path / "qrels").mkdir()
    (tmp_path / "queries.jsonl").write_bytes(b"Q")
    (tmp_path / "qrels" / "train.tsv").write_bytes(b"T")
    beir = ce.import_request(
        parse("eval", "import", "hr", "--beir", str(tmp_path), "--split", "train")
    )
    assert beir.format == E.ImportEvaluationItemsRequest.BEIR
    assert (beir.queries, beir.qrels) == (b"Q", b"T")
    with pytest.raises(ValueError, match=r"test\.tsv: no such file"):
        ce.import_request(parse("eval", "import", "hr", "--beir", str(tmp_path)))
    jsonl = ce.import_request(
        parse("eval", "import", "hr", "--jsonl", str(tmp_path / "queries.jsonl"))
    )
    assert (jsonl.format, jsonl.content) == (E.ImportEvaluationItemsRequest.JSONL, b"Q")


def test_table_aligns_numbers_right_and_prints_nan_as_na(capsys) -> None:
    ce.table(("metric", "value"), [("ndcg@10", 0.5), ("x", float("nan"))], sys.stdout)
    assert capsys.readouterr().out.splitlines() == [
        "metric    value",
        "ndcg@10  0.5000",
        "x           n/a",
    ]


class _Refused(grpc.RpcError, grpc.Call):
    """What a stub raises for a refused call."""

    def __init__(self, code: grpc.StatusCode) -> None:
        self._code = code

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return "refused"

    def initial_metadata(self) -> None: ...
    def trailing_metadata(self) -> None: ...
    def is_active(self) -> bool:
        return False

    def time_remaining(self) -> None: ...
    def cancel(self) -> bool:
        return False

    def add_callback(self, callback: object) -> bool:
        return False


class _History:
    """GetRun and ListFeedback answering, or refusing with `code`."""

    def __init__(self, code: grpc.StatusCode | None = None) -> None:
        self.code = code
        self.asked: list[str] = []

    def GetRun(self, request: E.GetRunRequest, **_: object) -> E.RunRecord:
        self.asked.append(request.name)
        if self.code is not None:
            raise _Refused(self.code)
        return E.RunRecord(name=request.name, question="Q?")

    def ListFeedback(self, request: E.ListFeedbackRequest, **_: object) -> E.ListFeedbackResponse:
        self.asked.append(request.parent)
        return E.ListFeedbackResponse(feedback=[E.Feedback(rating=E.Feedback.THUMBS_UP)])


def _clients(history: _History) -> ce.Clients:
    clients = ce.Clients(grpc.insecure_channel("127.0.0.1:1"), (), 1.0)
    clients.evaluation = history  # type: ignore[assignment]
    return clients


def test_report_history_reads_the_record_and_its_feedback() -> None:
    history = _History()
    got = ce.item_history(_clients(history), "r1")
    assert got.record == E.RunRecord(name="runs/r1", question="Q?")
    assert [f.rating for f in got.feedback] == [E.Feedback.THUMBS_UP]
    assert history.asked == ["runs/r1", "runs/r1"]


@pytest.mark.parametrize("code", [grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.NOT_FOUND])
def test_report_history_without_a_record_is_none(code: grpc.StatusCode) -> None:
    assert ce.item_history(_clients(_History(code)), "r1") == ce.ItemHistory(None)


def test_report_history_other_failures_fail_the_report() -> None:
    with pytest.raises(grpc.RpcError):
        ce.item_history(_clients(_History(grpc.StatusCode.UNAVAILABLE)), "r1")


INDEX = "knowledge_bases/hr/indexes/e5-large-v2"


def test_run_with_an_index_sends_it_in_the_config() -> None:
    args = parse("eval", "run", "hr", "--index", INDEX, "--top-k", "10")
    assert ce.run_request(args) == E.RunEvaluationRequest(
        evaluation_set="evaluation_sets/hr",
        config=E.RunConfig(mode=E.RunConfig.RETRIEVAL, top_k=10, index=INDEX),
    )
    args = parse("eval", "run", "hr", "--mode", "run", "--index", INDEX)
    assert ce.run_request(args).config == E.RunConfig(mode=E.RunConfig.RUN, index=INDEX)
    # Without --index: the active indexes (the field left empty).
    assert ce.run_request(parse("eval", "run", "hr")).config.index == ""


def test_a_run_shows_its_index(capsys) -> None:
    run = E.EvaluationRun(
        name="evaluation_sets/hr/runs/r1",
        config=E.RunConfig(mode=E.RunConfig.RUN, top_k=5, index=INDEX),
        state=E.EvaluationRun.SUCCEEDED,
        items_total=4,
        items_done=4,
        metrics={"ndcg@10": 0.5},
    )
    ce.print_run(run, sys.stdout)
    assert capsys.readouterr().out.splitlines()[:3] == [
        "run:    evaluation_sets/hr/runs/r1 (SUCCEEDED)",
        f"index:  {INDEX}",
        "items:  4/4 done, 0 failed",
    ]
    assert ce.index_shown(E.RunConfig()) == "active"
    active = E.EvaluationRun(name="x/runs/r0", config=E.RunConfig(mode=E.RunConfig.RETRIEVAL))
    ce.table(ce._RUN_HEADERS, [ce._run_row(run), ce._run_row(active)], sys.stdout)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["run", "state", "mode", "top_k", "index", "items", "failed",
                                "created"]  # fmt: skip
    assert lines[1].split() == ["r1", "succeeded", "run", "5", INDEX, "4/4", "0", "—"]
    assert lines[2].split() == ["r0", "state_unspecified", "retrieval", "—", "active", "0/0",
                                "0", "—"]  # fmt: skip


def test_eval_runs_takes_a_set() -> None:
    args = parse("eval", "runs", "hr", "--json")
    assert (args.handler, args.set, args.json) == (ce.runs_of_set, "hr", True)
