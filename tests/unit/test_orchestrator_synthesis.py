"""Synthesis (docs/trace.md#synthesis-of-a-complex-question) and the resume snapshot / q* rules
(docs/trace.md#the-resume-snapshot)."""

from __future__ import annotations

import pytest

from orchestrator_service.resume import ResumeSnapshot, refined_question, state_from_resume
from orchestrator_service.synthesis import dedupe_documents, dedupe_key, synthesize
from shared.errors import InvalidArgument
from shared.normalize import normalize_sub_trace


def _doc(cid: str | None, score: float, rank: int, text: str = "t", **kw):
    d = {"filename": "f.md", "page_number": "1", "text": text, "score": score, "rrf_rank": rank}
    if cid is not None:
        d["chunk_id"] = cid
    d.update(kw)
    return d


def test_dedupe_keeps_first_place_folds_max_and_renumbers() -> None:
    a, b, c = _doc("a", 0.2, 1), _doc("b", 0.9, 2), _doc("a", 0.7, 1)
    d = _doc(None, 0.1, 3, text="same")
    e = _doc("", 0.4, 9, text="same")  # blank chunk_id: filename+page+text key
    out = dedupe_documents([a, b, c, d, e])
    assert [(x.get("chunk_id"), x["score"], x["rrf_rank"]) for x in out] == [
        ("a", 0.7, 1),
        ("b", 0.9, 2),
        (None, 0.4, 3),
    ]
    assert a["score"] == 0.2 and a["rrf_rank"] == 1  # inputs untouched
    assert dedupe_key(d) == "f.md|1|same"


def test_the_same_chunk_id_in_two_knowledge_bases_is_two_chunks() -> None:
    hr = _doc("notes.md::p0::l3::0", 0.5, 1, knowledge_base="knowledge_bases/hr")
    eng = _doc("notes.md::p0::l3::0", 0.6, 1, knowledge_base="knowledge_bases/eng")
    hr_again = _doc("notes.md::p0::l3::0", 0.9, 2, knowledge_base="knowledge_bases/hr")
    out = dedupe_documents([hr, eng, hr_again])
    assert [(d["knowledge_base"], d["score"], d["rrf_rank"]) for d in out] == [
        ("knowledge_bases/hr", 0.9, 1),
        ("knowledge_bases/eng", 0.6, 2),
    ]
    assert dedupe_key(_doc(None, 0.1, 1, text="x", knowledge_base="knowledge_bases/hr")) == (
        "knowledge_bases/hr#f.md|1|x"
    )


def test_dedupe_folds_rerank_score_when_either_has_one() -> None:
    out = dedupe_documents([_doc("a", 0.9, 1), _doc("a", 0.1, 2, rerank_score=0.8)])
    assert out == [_doc("a", 0.9, 1, rerank_score=0.8)]


def _sub(status: str, docs=(), prompt: str = "", options=(), route: str = "answer"):
    trace = {
        "query": "q",
        "route": route,
        "retrieval_status": status,
        "hitl_prompt": prompt,
        "hitl_options": list(options),
    }
    return {"retrieval_status": status, "route": route, "docs": list(docs), "rag_trace": trace}


def _synth(*subs):
    return synthesize(
        question="Q",
        complexity_reason="r",
        sub_questions=["q1", "q2", "q3"][: len(subs)],
        sub_results=list(subs),
        normalize_sub_trace=normalize_sub_trace,
    )


def test_synthesis_partial_and_answerable_states() -> None:
    partial = _synth(_sub("partial", [_doc("a", 0.1, 1)]), _sub("answerable", [_doc("a", 0.3, 1)]))
    t = partial["rag_trace"]
    assert (t["route"], t["retrieval_status"]) == ("answer", "partial")
    assert (t["evidence_relevance"], t["evidence_answerability"]) == ("strong", "partial")
    assert t["synthesis_merged_count"] == 2 and len(t["retrieved_chunks"]) == 1
    assert t["retrieved_chunks"][0]["score"] == 0.3 and t["evidence_confidence"] is None
    assert "evidence_ambiguity" not in t and "missing_slots" not in t
    ok = _synth(_sub("answerable", [_doc("a", 0.1, 1)]), _sub("needs_clarification", [], "p"))
    assert ok["route"] == "answer" and ok["retrieval_status"] == "answerable"
    assert ok["hitl_prompt"] == "" and ok["hitl_options"] == []


def test_synthesis_hitl_scope_select_wins_and_merges_prompts() -> None:
    out = _synth(
        _sub("needs_clarification", [], "补充角色？", ["丹瑾"], "clarify"),
        _sub("needs_scope_selection", [], "选方向？", ["丹瑾", "丹恒"], "scope_select"),
        _sub("needs_clarification", [], "补充角色？", [], "clarify"),
    )
    assert (out["route"], out["retrieval_status"]) == ("scope_select", "needs_scope_selection")
    assert out["hitl_prompt"] == "补充角色？；选方向？"
    assert out["hitl_options"] == ["丹瑾", "丹恒"]
    assert out["rag_trace"]["sub_agent_count"] == 3


def test_synthesis_no_knowledge() -> None:
    out = _synth(_sub("no_knowledge", [_doc("a", 1, 1)], route="no_knowledge"))
    t = out["rag_trace"]
    assert (t["route"], t["retrieval_status"], t["evidence_relevance"]) == (
        "no_knowledge",
        "no_knowledge",
        "none",
    )
    assert t["retrieved_chunks"] == [] and t["synthesis_merged_count"] == 0


SNAP = {
    "question": "这个角色的属性是什么？",
    "route": "clarify",
    "retrieval_status": "needs_clarification",
    "rewrite_count": 0,
    "complexity": "simple",
    "complexity_reason": "r",
    "sub_questions": [],
}


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"question": "  "}, "resume_state.question"),
        ({"route": "answer"}, "resume_state.route"),
        ({"retrieval_status": "needs_scope_selection"}, "resume_state.retrieval_status"),
        ({"rewrite_count": -1}, "resume_state.rewrite_count"),
        ({"complexity": "hard"}, "resume_state.complexity"),
        ({"sub_questions": ["a", "b", "c", "d", "e"]}, "resume_state.sub_questions"),
    ],
)
def test_snapshot_validation_names_the_field(change, field) -> None:
    with pytest.raises(InvalidArgument) as err:
        ResumeSnapshot.from_mapping({**SNAP, **change})
    assert err.value.field == field and str(err.value).startswith(field)


def test_refined_question_rules() -> None:
    assert refined_question("这个角色的属性是什么？", " 丹瑾 ") == "丹瑾：这个角色的属性是什么？"
    assert refined_question("丹瑾的属性？", "丹瑾") == "丹瑾的属性？"
    assert refined_question("q", "") == "q"
    assert refined_question("", "a") == "a"


def test_state_from_resume_and_snapshot_round() -> None:
    state = state_from_resume(ResumeSnapshot.from_mapping({**SNAP, "rewrite_count": 1}), "丹瑾")
    assert state["question"] == state["query"] == "丹瑾：这个角色的属性是什么？"
    assert state["rewrite_count"] == 1 and state["is_sub_agent"] is False
    assert state["rag_trace"] == {
        "tool_used": True,
        "tool_name": "search_knowledge_base",
        "query": "丹瑾：这个角色的属性是什么？",
        "hitl_resumed": True,
        "hitl_answer": "丹瑾",
        "hitl_resume_from_status": "needs_clarification",
        "hitl_resume_from_route": "clarify",
        "complexity": "simple",
        "complexity_reason": "r",
    }
    state.update(route="clarify", retrieval_status="needs_clarification")
    snap = ResumeSnapshot.from_state(state).to_dict()
    assert set(snap) == set(SNAP) and snap["question"] == "丹瑾：这个角色的属性是什么？"
