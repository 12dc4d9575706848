"""The `ask` command's RunRequest without a server: its question, history, knowledge bases,
filter and `--index` (RunRequest.index) as parsed; `resume --index` (ResumeRequest.index), and
the `resume` command an HITL result's hint prints names the index again."""

from __future__ import annotations

from supermew.v1 import orchestrator_pb2 as O

from orchestrator_service.cli import _parser, resume_hint, run_request
from orchestrator_service.conversation import Turn

INDEX = "knowledge_bases/hr/indexes/v2"


def test_ask_sends_the_index_with_the_scope() -> None:
    args = _parser().parse_args(
        ["ask", "How long is leave?", "--kb", "hr", "--filter", "metadata.year >= 2024",
         "--index", INDEX, "--no-answer"]
    )  # fmt: skip
    history = [Turn("Who approves leave?", "The manager.")]
    assert run_request(args, args.question, history) == O.RunRequest(
        question="How long is leave?",
        generate_answer=False,
        knowledge_bases=["hr"],
        filter="metadata.year >= 2024",
        history=[O.ConversationTurn(question="Who approves leave?", answer="The manager.")],
        index=INDEX,
    )


def test_ask_without_index_reads_the_active_indexes() -> None:
    args = _parser().parse_args(["ask", "How long is leave?"])
    request = run_request(args, "How long is leave?", ())
    assert request.index == "" and request.generate_answer
    assert _parser().parse_args(["ask", "--chat", "--index", INDEX]).index == INDEX


def test_resume_sends_the_index_again_and_the_hint_names_it() -> None:
    args = _parser().parse_args(["ask", "Leave?", "--kb", "hr", "--index", INDEX])
    assert f"--kb hr --index {INDEX}" in resume_hint(args)
    assert "--index" not in resume_hint(_parser().parse_args(["ask", "Leave?"]))
    resumed = _parser().parse_args(["resume", "--snapshot", "-", "--answer", "a", "--index", INDEX])
    assert resumed.index == INDEX
