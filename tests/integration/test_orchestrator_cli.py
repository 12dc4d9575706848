"""The CLI (`python -m orchestrator_service ask|resume`) as a subprocess against the service
wired to the scripted model and retrieval servers: it reaches every route, prints the answer
with its numbered sources, the HITL prompt, options and a compact evidence list (`--json` the
whole result), streams steps and the answer, and round-trips the snapshot file; the `resume`
command it prints for a clarification works as printed, and `ask --chat` answers a
clarification on the next line by resuming the run."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import sys
from pathlib import Path

import grpc
import pytest

from tests.fakes.model_server import ModelScript, grade, sse
from tests.fakes.orchestrator_stack import start_stack
from tests.fakes.retrieval_servicer import RetrievalScript, chunk

ROOT = Path(__file__).resolve().parents[2]
D = [chunk("roles.md", "1", "丹瑾：衍射属性。")]
Q_ANSWER, Q_CLARIFY, Q_SCOPE, Q_NONE = (
    "丹瑾是什么属性？",
    "他的属性是什么？",
    "哪个角色？",
    "退款？",
)
QSTAR = "卡卡罗：他的属性是什么？"


def _script() -> tuple[ModelScript, RetrievalScript]:
    ms = ModelScript()
    ms.add("evidence_grade", Q_ANSWER, grade("strong", "sufficient", "answer"))
    ms.add("answer_generation", Q_ANSWER, sse("丹瑾是衍射属性[1]。"))
    ms.add(
        "evidence_grade",
        Q_CLARIFY,
        grade(
            "weak",
            "partial",
            "clarify",
            ambiguity="missing_slot",
            hitl_prompt="你指哪个角色？",
            hitl_options=["丹瑾", "卡卡罗"],
        ),
    )
    ms.add(
        "evidence_grade",
        Q_SCOPE,
        grade("strong", "partial", "answer", ambiguity="multiple_candidates"),
    )
    ms.add("evidence_grade", QSTAR, grade("weak", "partial", "rewrite"))
    rs = RetrievalScript()
    for q in (Q_ANSWER, Q_CLARIFY, Q_SCOPE, QSTAR):
        rs.add(q, D)
    return ms, rs


@pytest.fixture
async def stack():
    s = await start_stack(*_script())
    yield s
    await s.aclose()


async def _cli(port: int | None, *args: str, stdin: str = "") -> tuple[int, str, str]:
    """The CLI with `args` (and `--addr` of `port` unless None), `stdin` as its input."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AUTH_", "SUPERMEW_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "gen"), env.get("PYTHONPATH", "")])
    addr = ("--addr", f"127.0.0.1:{port}") if port is not None else ()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "orchestrator_service", *args, *addr,
        cwd=ROOT, env=env, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await proc.communicate(stdin.encode())
    return proc.returncode or 0, out.decode(), err.decode()


async def test_cli_reaches_every_route_and_resumes(stack, tmp_path: Path) -> None:
    port = stack.app.server.port
    rc, out, _ = await _cli(port, "ask", Q_ANSWER)
    assert rc == 0 and "route:    answer (answerable)" in out
    assert "[1] roles.md (Page 1)" in out and "丹瑾：衍射属性。" in out
    rc, out, _ = await _cli(port, "ask", Q_ANSWER, "--json")
    assert rc == 0 and json.loads(out)["rag_trace"]["tool_used"] is True  # --json keeps all

    rc, out, _ = await _cli(port, "ask", Q_NONE)
    assert rc == 0 and "route:    no_knowledge (no_knowledge)" in out

    rc, out, _ = await _cli(port, "ask", Q_SCOPE)
    assert rc == 0 and "route:    scope_select (needs_scope_selection)" in out
    assert "我在知识库中找到了多个可能相关的方向" in out

    rc, out, err = await _cli(port, "ask", Q_CLARIFY, "--json", "--stream")
    assert rc == 0, err
    result = json.loads(out)
    assert result["route"] == "clarify" and result["docs"] == []
    assert result["rag_trace"]["hitl_options"] == ["丹瑾", "卡卡罗"]
    assert "请求已接收，正在准备回答" in err and "需要用户补充信息" in err  # steps on stderr
    snapshot = tmp_path / "pending.json"
    snapshot.write_text(out, encoding="utf-8")

    rc, out, _ = await _cli(
        port, "resume", "--snapshot", str(snapshot), "--answer", "卡卡罗", "--stream"
    )
    assert rc == 0
    assert "收到 HITL 补充，继续原 RAG 流程 — 卡卡罗" in out
    assert "route:    rewrite (needs_rewrite)" in out and "evidence: 1 chunk(s)" in out
    assert "rewrite:  " not in out  # resume reports the verdict, it does not rewrite
    assert [r.task for r in stack.model.requests].count("query_rewrite") == 0


async def test_cli_errors_exit_non_zero(stack) -> None:
    rc, _, err = await _cli(stack.app.server.port, "ask", "   ")
    assert rc == 1 and "INVALID_ARGUMENT" in err and "question" in err


async def test_cli_prints_the_answer_with_numbered_sources_and_a_compact_list(stack) -> None:
    port = stack.app.server.port
    rc, out, err = await _cli(port, "ask", Q_ANSWER)
    assert rc == 0, err
    assert "answer:   丹瑾是衍射属性[1]。" in out
    assert "sources:  1 cited, written by main-model\n  [1] roles.md (Page 1)\n" in out
    assert "      “丹瑾：衍射属性。”" in out
    assert (
        "evidence: 1 chunk(s)\n  [1] roles.md (Page 1) score=0.5000\n      丹瑾：衍射属性。" in out
    )
    assert '"tool_used"' not in out and out.count("丹瑾：衍射属性。") == 2  # quote + snippet

    rc, out, err = await _cli(port, "ask", Q_ANSWER, "--stream")
    assert rc == 0, err
    assert "  ✍️  丹瑾是衍射属性[1]。\n" in out  # streamed live, then the result
    assert out.index("证据足够，返回检索片段") < out.index("✍️") < out.index("answer:   ")

    rc, out, _ = await _cli(port, "ask", Q_ANSWER, "--json", "--no-answer")
    assert rc == 0 and json.loads(out)["answer"] is None
    answered = [r for r in stack.model.requests if r.task == "answer_generation"]
    assert len(answered) == 2  # the plain and the streamed ask; not --no-answer


async def test_cli_kb_and_filter_reach_every_retrieval_of_ask_and_resume(stack, tmp_path) -> None:
    port = stack.app.server.port
    scope = ("--kb", "hr", "--kb", "knowledge_bases/eng", "--filter", "metadata.year >= 2023")
    sent = ("hr", "knowledge_bases/eng")
    rc, out, err = await _cli(port, "ask", Q_CLARIFY, "--json", *scope)
    assert rc == 0, err
    snapshot = tmp_path / "pending.json"
    snapshot.write_text(out, encoding="utf-8")
    rc, out, err = await _cli(
        port, "resume", "--snapshot", str(snapshot), "--answer", "卡卡罗", "--json", *scope
    )
    assert rc == 0, err
    assert json.loads(out)["docs"][0]["document_id"] == "roles.md"  # the whole Chunk in --json
    assert [(s.query, s.knowledge_bases, s.filter) for s in stack.retrieval.sent] == [
        (Q_CLARIFY, sent, "metadata.year >= 2023"),
        (QSTAR, sent, "metadata.year >= 2023"),
    ]


async def test_cli_unknown_knowledge_base_is_not_found(stack) -> None:
    stack.retrieval.script.fail(
        Q_NONE, grpc.StatusCode.NOT_FOUND, "knowledge_bases[0]: knowledge_bases/nope does not exist"
    )
    rc, _, err = await _cli(stack.app.server.port, "ask", Q_NONE, "--kb", "nope")
    assert rc == 1
    assert "NOT_FOUND: knowledge_bases[0]: knowledge_bases/nope does not exist" in err


async def test_cli_prints_the_resume_command_and_it_works_as_printed(stack, tmp_path) -> None:
    port = stack.app.server.port
    scope = ("--kb", "hr", "--filter", "metadata.year >= 2023")
    rc, out, err = await _cli(None, "ask", Q_CLARIFY, *scope, "--addr", f"127.0.0.1:{port}")
    assert rc == 0, err
    assert "route:    clarify" in out and "          - 卡卡罗" in out
    command = next(line for line in out.splitlines() if line.startswith("resume:   "))
    assert command == (
        "resume:   python -m orchestrator_service resume --snapshot FILE --answer REPLY "
        f"--kb hr --filter 'metadata.year >= 2023' --addr 127.0.0.1:{port}"
    )
    snapshot = tmp_path / "snapshot.json"
    snapshot.write_text(
        next(line for line in out.splitlines() if line.startswith("snapshot: "))[10:],
        encoding="utf-8",
    )
    argv = shlex.split(command.removeprefix("resume:   python -m orchestrator_service "))
    argv = [str(snapshot) if a == "FILE" else "卡卡罗" if a == "REPLY" else a for a in argv]
    rc, out, err = await _cli(None, *argv)
    assert rc == 0, err
    assert "route:    rewrite (needs_rewrite)" in out
    assert [(s.query, s.knowledge_bases, s.filter) for s in stack.retrieval.sent] == [
        (Q_CLARIFY, ("hr",), "metadata.year >= 2023"),
        (QSTAR, ("hr",), "metadata.year >= 2023"),
    ]


async def test_chat_answers_a_clarification_on_the_next_line(stack) -> None:
    port = stack.app.server.port
    scope = ("--kb", "hr", "--filter", "metadata.year >= 2023")
    rc, out, err = await _cli(port, "ask", "--chat", *scope, stdin=f"{Q_CLARIFY}\n卡卡罗\n\n")
    assert rc == 0, err
    assert "route:    clarify" in out and "reply on the next line" in out
    assert "python -m orchestrator_service resume" not in out and "snapshot: " not in out
    assert "reply> " in out  # the prompt waiting for the reply
    assert "route:    rewrite (needs_rewrite)" in out  # the resumed run's verdict
    # The reply resumed the run (q* = "卡卡罗：…", the same scope) instead of a new question.
    assert [(s.query, s.knowledge_bases, s.filter) for s in stack.retrieval.sent] == [
        (Q_CLARIFY, ("hr",), "metadata.year >= 2023"),
        (QSTAR, ("hr",), "metadata.year >= 2023"),
    ]
    assert [q for t, q in stack.model.calls() if t == "evidence_grade"] == [Q_CLARIFY, QSTAR]


async def test_chat_new_drops_the_clarification(stack) -> None:
    port = stack.app.server.port
    rc, out, err = await _cli(port, "ask", "--chat", stdin=f"{Q_CLARIFY}\n/new {Q_ANSWER}\n\n")
    assert rc == 0, err
    assert "answer:   丹瑾是衍射属性[1]。" in out
    # A new question, asked without history (the unanswered clarification is not a turn).
    assert [s.query for s in stack.retrieval.sent] == [Q_CLARIFY, Q_ANSWER]
    assert "condense_question" not in [t for t, _ in stack.model.calls()]
