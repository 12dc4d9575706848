"""Index generations from the command lines against the real retrieval service on Milvus Lite
(docs/api.md#indexes): `index create --wait` builds a second index of a knowledge base, `index
list` marks the active one, `search --index` and the orchestrator's `ask --index` read the new
index before any switch, an evaluation run with RunConfig.index reads it through Retrieve, an
unknown index is NOT_FOUND naming `index` from both services, and `index activate` switches
the knowledge base (kb get shows it) so that the old index can be deleted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from supermew.v1 import evaluation_pb2 as E
from supermew.v1 import retrieval_pb2

from tests.integration.retrieval_harness import running_service
from tests.integration.test_evaluation import orchestrator, run_evaluation
from tests.integration.test_orchestrator_cli_evaluation import _cli as _orchestrator_cli
from tests.integration.test_retrieval_cli import _cli

pytestmark = pytest.mark.integration

LEAVE = (
    "Employees get twenty-five days of paid leave a year. Unused leave days carry over until "
    "the end of March. Parental leave is sixteen weeks, paid in full."
)
PAY = "Salaries are paid on the last working day of each month by bank transfer."
NEW = "knowledge_bases/hr/indexes/wide"
INITIAL = "knowledge_bases/hr/indexes/initial"
QUESTION = "How many days of paid leave do employees get?"


async def test_a_second_index_is_built_read_before_the_switch_then_activated(
    tmp_path: Path,
) -> None:
    async with running_service(tmp_path / "kb.db") as svc:
        port = svc.port
        await svc.stub.CreateKnowledgeBase(
            retrieval_pb2.CreateKnowledgeBaseRequest(knowledge_base_id="hr")
        )
        await svc.stub.IngestDocuments(
            retrieval_pb2.IngestDocumentsRequest(
                knowledge_base="hr",
                documents=[
                    retrieval_pb2.SourceDocument(
                        filename="leave.md", document_id="leave.md", content=LEAVE.encode()
                    ),
                    retrieval_pb2.SourceDocument(
                        filename="pay.md", document_id="pay.md", content=PAY.encode()
                    ),
                ],
            )
        )
        rc, out, err = await _cli(port, "kb", "get", "hr", "--json")
        assert rc == 0, err
        assert json.loads(out)["active_index"] == INITIAL

        rc, out, err = await _cli(
            port, "index", "create", "hr", "wide", "--chunk-size", "400", "--chunk-overlap",
            "40", "--wait",
        )  # fmt: skip
        assert rc == 0, err
        assert "SUCCEEDED" in out.splitlines()[0]
        assert out.splitlines()[1].startswith(f"{NEW}\tREADY\t")
        rc, out, err = await _cli(port, "index", "list", "hr", "--json")
        assert rc == 0, err
        listed = {i["name"]: (i["state"], i["active"]) for i in json.loads(out)}
        assert listed == {INITIAL: ("READY", True), NEW: ("READY", False)}
        rc, out, err = await _cli(port, "index", "get", "hr/wide", "--json")
        assert rc == 0, err
        assert json.loads(out)["config"]["chunk_size"] == 400

        # Before any switch: the new index answers a search that names it, from its own
        # (longer) chunks; a search that names none still reads the active index.
        rc, out, err = await _cli(
            port, "search", QUESTION, "--kb", "hr", "--index", NEW, "--top-k", "50", "--json"
        )
        assert rc == 0, err
        docs = json.loads(out)["docs"]
        assert docs and docs[0]["document_id"] == "leave.md"
        on_new = {(d["chunk_id"], d["text"]) for d in docs}
        rc, out, err = await _cli(port, "search", QUESTION, "--kb", "hr", "--top-k", "50", "--json")
        assert rc == 0, err
        on_initial = {(d["chunk_id"], d["text"]) for d in json.loads(out)["docs"]}
        assert on_new != on_initial
        rc, _, err = await _cli(
            port, "search", QUESTION, "--index", "knowledge_bases/hr/indexes/nope"
        )
        assert rc == 1 and "search failed: NOT_FOUND: index" in err

        # The orchestrator's ask and an evaluation run read it the same way.
        async with orchestrator(port, tmp_path / "orchestrator.sqlite3") as stack:
            oport = stack.app.server.port
            rc, out, err = await _orchestrator_cli(
                oport, "ask", QUESTION, "--kb", "hr", "--index", NEW, "--json", "--no-answer"
            )
            assert rc == 0, err
            result = json.loads(out)
            asked = {(d["chunk_id"], d["text"]) for d in result["docs"]}
            assert asked and asked <= on_new and not asked <= on_initial
            rc, _, err = await _orchestrator_cli(
                oport, "ask", QUESTION, "--index", "knowledge_bases/hr/indexes/nope"
            )
            assert rc == 1 and "error: NOT_FOUND: index" in err

            made = await stack.evaluation.CreateEvaluationSet(
                E.CreateEvaluationSetRequest(
                    evaluation_set_id="hr", evaluation_set=E.EvaluationSet(knowledge_bases=["hr"])
                )
            )
            await stack.evaluation.CreateEvaluationItem(
                E.CreateEvaluationItemRequest(
                    parent=made.name,
                    evaluation_item=E.EvaluationItem(
                        question=QUESTION, relevant=[E.RelevantDocument(document_id="leave.md")]
                    ),
                )
            )
            run = await run_evaluation(stack, made.name, E.RunConfig(index=NEW))
            assert run.config.index == NEW and run.items_failed == 0
            assert run.metrics["recall@3"] == 1.0
            rc, out, err = await _orchestrator_cli(oport, "eval", "runs", "hr")
            assert rc == 0, err
            assert NEW in out.splitlines()[1].split()

        rc, out, err = await _cli(port, "index", "activate", "hr/wide")
        assert rc == 0, err
        assert out.strip() == f"knowledge_bases/hr now reads {NEW}"
        rc, out, err = await _cli(port, "kb", "list")
        assert rc == 0 and f"active_index={NEW}" in out
        rc, _, err = await _cli(port, "index", "delete", NEW)
        assert rc == 1 and "index delete failed: FAILED_PRECONDITION" in err
        rc, out, err = await _cli(port, "index", "delete", INITIAL)
        assert rc == 0, err
        rc, out, err = await _cli(port, "search", QUESTION, "--kb", "hr", "--json")
        assert rc == 0 and json.loads(out)["docs"][0]["document_id"] == "leave.md"
