"""End to end: the orchestrator (production wiring) against the REAL retrieval service on
Milvus Lite with the built-in embedder, and the scripted model server. Ingest a few documents,
ask a simple and a complex question, then an ambiguous one and resume it."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from google.protobuf.struct_pb2 import Struct
from supermew.v1 import retrieval_pb2

from shared.codec import chunk_from_proto, rag_trace_from_proto
from tests.fakes.model_server import ModelScript, complexity, grade
from tests.fakes.orchestrator_stack import start_stack
from tests.integration.retrieval_harness import running_service

DOCS = {
    "leave.md": "# 年假制度\n\n新员工入职满一年后享有五天带薪年假。年假需提前一周申请。\n\n"
    "工作满十年的员工享有十五天年假。未休年假可顺延至次年三月。",
    "remote.md": "# 远程办公\n\n员工每周可远程办公两天，需要主管批准。远程办公期间须保持在线。\n\n"
    "远程办公设备由公司统一配发，离职时归还。",
    "travel.txt": "差旅报销标准：高铁二等座、经济舱机票。住宿每晚不超过五百元。报销需在出差结束后"
    "十五天内提交。",
}
Q_SIMPLE = "新员工年假有几天"
Q_COMPLEX = "请综合说明年假制度与远程办公制度的要求"
SUB1, SUB2 = "年假制度有哪些规定？", "远程办公有哪些要求？"
Q_AMBIG = "这个制度的申请要求是什么"
ANSWER = "年假"
QSTAR = f"{ANSWER}：{Q_AMBIG}"


async def test_end_to_end_against_real_retrieval(tmp_path: Path) -> None:
    ms = ModelScript()
    ms.add("complexity_classification", Q_COMPLEX, complexity("complex", "两项制度", [SUB1, SUB2]))
    ms.add(
        "evidence_grade",
        Q_AMBIG,
        grade(
            "weak",
            "partial",
            "clarify",
            ambiguity="missing_slot",
            missing_slots=["制度名称"],
            hitl_options=["年假", "远程办公", "差旅"],
        ),
    )
    ms.fallback = lambda task, q: grade("strong", "sufficient", "answer", confidence=0.9)
    async with running_service(tmp_path / "kb.db") as retrieval:
        ingested = await retrieval.ingest(*((name, text.encode()) for name, text in DOCS.items()))
        assert [d.filename for d in ingested.documents] == list(DOCS)
        stack = await start_stack(ms, retrieval_addr=f"127.0.0.1:{retrieval.port}")
        try:
            simple = await stack.run(Q_SIMPLE)
            trace = rag_trace_from_proto(simple.rag_trace)
            assert (simple.route, simple.retrieval_status) == ("answer", "answerable")
            assert simple.docs and "leave.md" in {d.filename for d in simple.docs}
            assert trace["retrieval_stage"] == "initial" and trace["complexity"] == "simple"
            assert trace["retrieval_pipeline"] == "recall_merge_rerank"
            assert trace["retrieval_mode"] in ("hybrid", "dense_fallback")
            assert len(trace["retrieved_chunks"]) == trace["post_threshold_count"]
            assert stack.model.tasks() == ["evidence_grade"]  # fast path, one grading

            complex_ = await stack.run(Q_COMPLEX)
            trace = rag_trace_from_proto(complex_.rag_trace)
            assert complex_.route == "answer" and trace["retrieval_stage"] == "synthesis"
            assert [t["query"] for t in trace["sub_traces"]] == [SUB1, SUB2]
            assert trace["sub_agent_count"] == 2
            docs = [chunk_from_proto(d) for d in complex_.docs]
            assert [d["rrf_rank"] for d in docs] == list(range(1, len(docs) + 1))
            assert len({d["chunk_id"] for d in docs}) == len(docs)  # deduped
            assert trace["synthesis_merged_count"] >= len(docs)
            assert {"leave.md", "remote.md"} <= {d["filename"] for d in docs}
            # Ingested without an id or a knowledge base: each document is its file name in the
            # default knowledge base, and carries no metadata.
            assert all(d["document_id"] == d["filename"] for d in docs)
            assert {d["knowledge_base"] for d in docs} == {"knowledge_bases/default"}
            assert not any("metadata" in d for d in docs)

            ambiguous = await stack.run(Q_AMBIG)
            assert ambiguous.route == "clarify" and list(ambiguous.docs) == []
            trace = rag_trace_from_proto(ambiguous.rag_trace)
            assert trace["retrieved_chunks"] == [] and trace["initial_retrieved_chunks"]
            assert trace["hitl_prompt"] == "我找到了相关内容，但还缺少关键信息：制度名称"

            resumed = await stack.resume(ambiguous.hitl_resume_state, ANSWER)
            trace = rag_trace_from_proto(resumed.rag_trace)
            assert (resumed.route, resumed.question) == ("answer", QSTAR)
            assert trace["retrieval_stage"] == "hitl_targeted_retrieval"
            assert trace["hitl_resumed"] is True and trace["hitl_answer"] == ANSWER
            assert trace["hitl_targeted_retrieved_chunks"] == trace["retrieved_chunks"]
            assert "leave.md" in {d.filename for d in resumed.docs}
            assert stack.retrieval.queries == []  # the scripted retrieval was never used
        finally:
            await stack.aclose()


async def test_a_run_within_knowledge_bases_and_a_filter_against_real_retrieval(tmp_path) -> None:
    # The same file name in two knowledge bases, with metadata: every retrieval of a simple, a
    # complex and a resumed run sees only what the run's knowledge base and filter admit.
    ms = ModelScript()
    ms.add("complexity_classification", Q_COMPLEX, complexity("complex", "两项制度", [SUB1, SUB2]))
    ms.add(
        "evidence_grade",
        Q_AMBIG,
        grade("weak", "partial", "clarify", ambiguity="missing_slot", missing_slots=["制度名称"]),
    )
    ms.fallback = lambda task, q: grade("strong", "sufficient", "answer", confidence=0.9)
    sales, eng = Struct(), Struct()
    sales.update({"department": "sales", "year": 2024})
    eng.update({"department": "eng", "year": 2022})
    async with running_service(tmp_path / "kb.db") as retrieval:
        for kb in ("hr", "eng"):
            await retrieval.stub.CreateKnowledgeBase(
                retrieval_pb2.CreateKnowledgeBaseRequest(knowledge_base_id=kb)
            )
        for kb, meta in (("hr", sales), ("eng", eng)):
            await retrieval.stub.IngestDocuments(
                retrieval_pb2.IngestDocumentsRequest(
                    knowledge_base=kb,
                    documents=[
                        retrieval_pb2.SourceDocument(
                            filename=name, content=text.encode(), metadata=meta
                        )
                        for name, text in DOCS.items()
                    ],
                )
            )
        stack = await start_stack(ms, retrieval_addr=f"127.0.0.1:{retrieval.port}")
        scope = {"knowledge_bases": ["hr"], "filter": 'metadata.department = "sales"'}

        def admitted(docs) -> bool:
            found = [chunk_from_proto(d) for d in docs]
            return bool(found) and all(
                d["knowledge_base"] == "knowledge_bases/hr"
                and d["metadata"] == {"department": "sales", "year": 2024}
                and d["document_id"] == d["filename"]
                for d in found
            )

        try:
            assert admitted((await stack.run(Q_SIMPLE, **scope)).docs)
            complex_ = await stack.run(Q_COMPLEX, **scope)
            assert complex_.rag_trace.sub_agent_count == 2 and admitted(complex_.docs)
            # The other knowledge base's copy of the same files is not mixed in.
            assert len({d.chunk_id for d in complex_.docs}) == len(complex_.docs)

            ambiguous = await stack.run(Q_AMBIG, **scope)
            assert ambiguous.route == "clarify"
            resumed = await stack.resume(ambiguous.hitl_resume_state, ANSWER, **scope)
            assert resumed.route == "answer" and admitted(resumed.docs)

            nothing = await stack.run(Q_SIMPLE, knowledge_bases=["eng"], filter=scope["filter"])
            assert list(nothing.docs) == [] and nothing.route == "no_knowledge"

            with pytest.raises(grpc.aio.AioRpcError) as err:
                await stack.run(Q_SIMPLE, knowledge_bases=["nope"])
            assert err.value.code() == grpc.StatusCode.NOT_FOUND
            assert (err.value.details() or "").startswith("knowledge_bases")
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await stack.run(Q_SIMPLE, filter="metadata.department = ")
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert (err.value.details() or "").startswith("filter")
        finally:
            await stack.aclose()
