"""The CLI's conversations as a subprocess against the service wired to the scripted model and
retrieval servers: `ask --chat` keeps the history across the questions of one session (the
next question's condense_question request carries the earlier question and its answer), and
`ask --history FILE` sends the turns a JSON file holds."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest

from orchestrator_service.models.base import TASK_CONDENSE
from tests.fakes.model_server import ModelScript, condense, grade, sse
from tests.fakes.orchestrator_stack import start_stack
from tests.fakes.retrieval_servicer import RetrievalScript, chunk

ROOT = Path(__file__).resolve().parents[2]
Q1, A1 = "What is the Premium support plan?", "A plan at 49 euros per month[1]."
Q2, S2 = "What is its price?", "What is the Premium support plan's price?"
DOCS = [chunk("support_plan_premium.en.md", "1", "The Premium support plan costs 49 euros.")]


def _script() -> tuple[ModelScript, RetrievalScript]:
    ms = ModelScript()
    ms.add(TASK_CONDENSE, Q1, condense(Q1))
    ms.add(TASK_CONDENSE, Q2, condense(S2))
    for q in (Q1, S2):
        ms.add("evidence_grade", q, grade("strong", "sufficient", "answer"))
    ms.add("answer_generation", Q1, sse(A1))
    ms.add("answer_generation", S2, sse("49 euros per month[1]."))
    rs = RetrievalScript()
    for q in (Q1, S2):
        rs.add(q, DOCS)
    return ms, rs


@pytest.fixture
async def stack():
    s = await start_stack(*_script())
    yield s
    await s.aclose()


async def _cli(port: int, *args: str, stdin: str = "") -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AUTH_", "SUPERMEW_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "gen"), env.get("PYTHONPATH", "")])
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "orchestrator_service", *args, "--addr", f"127.0.0.1:{port}",
        cwd=ROOT, env=env, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await proc.communicate(stdin.encode())
    return proc.returncode or 0, out.decode(), err.decode()


async def test_chat_keeps_the_history_across_questions(stack) -> None:
    rc, out, err = await _cli(stack.app.server.port, "ask", "--chat", stdin=f"{Q1}\n{Q2}\n\n")
    assert rc == 0, err
    assert f"question: {Q2}" in out and f"searched: {S2}" in out
    assert "answer:   49 euros per month[1]." in out
    # The first question had no history (no condensation); the second carried the first turn.
    assert [t for t, _ in stack.model.calls()].count(TASK_CONDENSE) == 1
    request = next(r for r in stack.model.requests if r.task == TASK_CONDENSE)
    prompt = request.body["messages"][-1]["content"]
    assert Q1 in prompt and A1 in prompt and request.question == Q2


async def test_history_file(stack, tmp_path: Path) -> None:
    history = tmp_path / "history.json"
    history.write_text(json.dumps([{"question": Q1, "answer": A1}]), encoding="utf-8")
    rc, out, err = await _cli(stack.app.server.port, "ask", Q2, "--history", str(history), "--json")
    assert rc == 0, err
    data = json.loads(out)
    assert (data["question"], data["standalone_question"]) == (Q2, S2)
    assert data["rag_trace"]["history_turns"] == 1
    assert stack.model.calls()[0] == (TASK_CONDENSE, Q2)

    history.write_text(json.dumps({"question": Q1}), encoding="utf-8")
    rc, _, err = await _cli(stack.app.server.port, "ask", Q2, "--history", str(history))
    assert rc == 2 and "history must be a JSON list" in err
