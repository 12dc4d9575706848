"""The CLI's `eval` commands as subprocesses against the real retrieval service (Milvus Lite
holding the SciFact slice) and the real orchestrator on its own SQLite database: a set made,
listed and read, the BEIR files imported from a local folder, two retrieval runs followed to
the end with a progress bar, their results, comparison and HTML report; a bad name is one
line naming the field."""

from __future__ import annotations

import asyncio
import os
import re
import sys
from pathlib import Path

import pytest

from orchestrator_service.evaluation.metrics import METRIC_NAMES
from tests.integration.retrieval_harness import running_service
from tests.integration.test_evaluation import SCIFACT, ingest_scifact, orchestrator, scifact

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
RUN_LINE = re.compile(r"^run:\s+(evaluation_sets/scifact/runs/[0-9a-f]+) \(SUCCEEDED\)$", re.M)


async def _cli(port: int, *args: str) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTH_")}
    env.pop("SUPERMEW_API_KEY", None)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "gen"), env.get("PYTHONPATH", "")])
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "orchestrator_service", *args, "--addr", f"127.0.0.1:{port}",
        cwd=ROOT, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await proc.communicate()
    return proc.returncode or 0, out.decode(), err.decode()


def _metric_rows(out: str) -> list[str]:
    """The metric names of a printed metrics table, in the printed order."""
    names = []
    for line in out.splitlines():
        first = line.split(" ", 1)[0]
        if first in METRIC_NAMES:
            names.append(first)
    return names


async def test_eval_commands_make_import_run_compare_and_report(tmp_path: Path) -> None:
    _, _, qrels = scifact()
    async with running_service(tmp_path / "kb.db") as svc:
        await ingest_scifact(svc)
        async with orchestrator(svc.port, tmp_path / "orchestrator.sqlite3") as stack:
            port = stack.app.server.port
            rc, out, err = await _cli(
                port, "eval", "sets", "create", "scifact", "--display-name", "SciFact <slice>"
            )
            assert rc == 0, err
            assert "scifact" in out and "SciFact <slice>" in out
            rc, out, err = await _cli(port, "eval", "sets", "list")
            assert rc == 0, err
            assert out.splitlines()[0].split() == ["id", "display", "name", "items", "knowledge",
                                                   "bases", "filter"]  # fmt: skip
            assert out.splitlines()[1].startswith("scifact ")

            rc, out, err = await _cli(
                port, "eval", "import", "scifact", "--beir", str(SCIFACT), "--split", "train"
            )
            assert rc == 0, err
            assert out.strip() == f"imported {len(qrels)} item(s), 0 query(ies) skipped"
            rc, out, err = await _cli(port, "eval", "sets", "get", "evaluation_sets/scifact")
            assert rc == 0, err
            assert re.search(rf"^scifact\s+SciFact <slice>\s+{len(qrels)}\s+default\s", out, re.M)

            rc, out, err = await _cli(port, "eval", "run", "scifact", "--top-k", "100")
            assert rc == 0, err
            # The bar ended full, on stderr; the metrics on stdout in METRIC_NAMES order.
            assert f"{len(qrels)}/{len(qrels)}" in err and "succeeded" in err
            deep = RUN_LINE.search(out)
            assert deep is not None, out
            printed = _metric_rows(out)
            assert printed == [n for n in METRIC_NAMES if n in printed]
            assert {"recall@1", "ndcg@10", "mrr@10", "latency_p50", "latency_p95"} <= set(printed)
            assert "route_accuracy" not in printed  # no item judged a route
            assert f"items:  {len(qrels)}/{len(qrels)} done, 0 failed" in out

            rc, out, err = await _cli(port, "eval", "run", "scifact", "--top-k", "1", "--json")
            assert rc == 0, err
            shallow_name = re.search(r'"name": "(evaluation_sets/scifact/runs/[0-9a-f]+)"', out)
            assert shallow_name is not None, out
            deep_ref = "scifact/" + deep.group(1).rsplit("/", 1)[1]  # the SET/RUN_ID form
            shallow = shallow_name.group(1)

            rc, out, err = await _cli(port, "eval", "results", deep_ref, "--worst", "3")
            assert rc == 0, err
            lines = out.splitlines()
            assert lines[0].split() == ["item", "route", "ndcg@10", "latency_s", "error"]
            assert len(lines) == 4
            values = [float(line.split()[2]) for line in lines[1:]]
            assert values == sorted(values)
            rc, out, _ = await _cli(port, "eval", "results", deep_ref)
            assert rc == 0 and len(out.splitlines()) == 1 + len(qrels)
            # The worst three are the lowest of them all.
            every = sorted(float(line.split()[2]) for line in out.splitlines()[1:])
            assert values == every[:3]

            rc, out, err = await _cli(port, "eval", "compare", deep.group(1), shallow)
            assert rc == 0, err
            assert f"items paired: {len(qrels)}" in out
            header = next(line for line in out.splitlines() if line.startswith("metric"))
            assert header.split() == ["metric", "a", "b", "diff", "95%", "CI", "won/lost/tied"]
            recall = next(line for line in out.splitlines() if line.startswith("recall@10 "))
            diff, won_lost_tied = recall.split()[3], recall.split()[-1]
            assert diff.startswith("-")  # one chunk finds at most one document
            won, lost, tied = map(int, won_lost_tied.split("/"))
            assert won == 0 and lost > 0 and won + lost + tied == len(qrels)

            page = tmp_path / "report.html"
            rc, out, err = await _cli(
                port, "eval", "report", shallow, "--against", deep_ref, "--html", str(page)
            )
            assert rc == 0, err
            html = page.read_text(encoding="utf-8")
            assert "<svg" in html and out.strip() == f"wrote {page} (10 worst item(s))"
            for name in printed:
                assert f"<td>{name}</td>" in html
            assert "<script" not in html and "http://" not in html and "https://" not in html
            # RETRIEVAL mode records no history: every worst item says so.
            assert "no history record" in html


async def test_eval_unknown_set_is_one_line_naming_the_field(tmp_path: Path) -> None:
    async with (
        running_service(tmp_path / "kb.db") as svc,
        orchestrator(svc.port, tmp_path / "orchestrator.sqlite3") as stack,
    ):
        port = stack.app.server.port
        rc, out, err = await _cli(port, "eval", "run", "nope")
        assert rc == 1 and out == ""
        assert len(err.strip().splitlines()) == 1
        assert err.startswith("error: NOT_FOUND: evaluation_set"), err
        rc, _, err = await _cli(port, "eval", "results", "0123456789abcdef0123")
        assert rc == 2 and err.strip().startswith("error: '0123456789abcdef0123': name the run")
        rc, _, err = await _cli(port, "eval", "import", "nope", "--beir", str(tmp_path))
        assert rc == 2 and "queries.jsonl: no such file" in err


async def test_runs_and_feedback_commands_read_the_history(tmp_path: Path) -> None:
    from supermew.v1 import orchestrator_pb2

    async with running_service(tmp_path / "kb.db") as svc:
        await svc.ingest(("note.md", b"The office opens at nine and closes at five.\n"))
        async with orchestrator(
            svc.port, tmp_path / "orchestrator.sqlite3", run_history=True
        ) as stack:
            port = stack.app.server.port
            result = await stack.orchestrator.Run(
                orchestrator_pb2.RunRequest(
                    question="When does the office open?", generate_answer=True
                )
            )
            rc, out, err = await _cli(port, "runs", "list", "--filter", 'route = "answer"')
            assert rc == 0, err
            assert result.run_id in out and "When does the office open?" in out
            rc, out, err = await _cli(port, "runs", "show", result.run_id)
            assert rc == 0, err
            assert f'"runs/{result.run_id}"' in out and '"rag_trace"' in out

            rc, out, err = await _cli(
                port, "feedback", result.run_id, "--down", "--reason", "missing_information",
                "--expected-doc", "note.md", "--corrected-answer", "At nine, on weekdays.",
            )  # fmt: skip
            assert rc == 0, err
            given = out.strip().removeprefix("recorded ")
            assert given.startswith(f"runs/{result.run_id}/feedback/")
            rc, out, err = await _cli(port, "feedback", "list", "--filter", "rating = THUMBS_DOWN")
            assert rc == 0, err
            assert given in out and "missing_information" in out
            rc, out, err = await _cli(port, "eval", "sets", "create", "fixes")
            assert rc == 0, err
            rc, out, err = await _cli(port, "feedback", "to-set", "fixes", given)
            assert rc == 0, err
            assert out.startswith("added evaluation_sets/fixes/items/")

            rc, out, err = await _cli(port, "runs", "show", "0" * 8 + "-0000-7000-8000-" + "0" * 12)
            assert rc == 1 and "NOT_FOUND" in err and len(err.strip().splitlines()) == 1
