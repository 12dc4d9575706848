"""Trace normalisation, one test per rule of docs/trace.md#normalisation, on raw traces
modelled on the node rows of docs/trace.md#node-by-node."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest

from shared.normalize import (
    TraceFieldError,
    normalize_rag_trace,
    normalize_sub_trace,
    strict_keys,
)
from shared.trace_fields import RETRIEVED_CHUNK_FIELD_NAMES, TRACE_FIELD_NAMES, Route, Stage


@pytest.fixture
def lenient_keys() -> Iterator[None]:
    """Production's behaviour (unknown raw keys dropped) for the tests that assert it; the
    suite otherwise runs with strict keys (tests/conftest.py)."""
    with strict_keys(False):
        yield


def runtime_chunk(n: int, *, filename: str = "handbook.pdf", page: int | str = 3) -> dict[str, Any]:
    """A 19-key runtime evidence record as the retrieval service returns it
    (docs/trace.md#evidence-records)."""
    return {
        "id": 460000 + n,
        "filename": filename,
        "file_type": "PDF",
        "file_path": "",
        "page_number": page,
        "text": f"chunk {n} text",
        "score": 0.03 - n / 1000,
        "rrf_rank": n,
        "rerank_score": 0.9 - n / 10,
        "chunk_idx": 10 + n,
        "chunk_id": f"{filename}::p{page}::l3::{n}",
        "parent_chunk_id": f"{filename}::p{page}::l2::0",
        "root_chunk_id": f"{filename}::p{page}::l1::0",
        "chunk_level": 3,
        "merged_from_children": False,
        "merged_child_count": 0,
        "document_id": f"manuals/{filename}",
        "knowledge_base": "knowledge_bases/default",
        "metadata": {"department": "hr", "year": 2024},
    }


def retrieval_meta(**overrides: Any) -> dict[str, Any]:
    """R as the retrieval service wrote it, rerank unconfigured: rerank_model/rerank_error None,
    rerank_endpoint "" (docs/api.md#rerank)."""
    meta: dict[str, Any] = {
        "retrieval_pipeline": "recall_merge_rerank",
        "retrieval_mode": "hybrid",
        "candidate_k": 24,
        "candidate_k_source": "multiplier",
        "candidate_k_config_error": None,
        "retrieval_candidate_multiplier": 3,
        "retrieval_top_k": 8,
        "leaf_retrieve_level": 3,
        "recall_count": 2,
        "post_merge_candidate_count": 2,
        "candidate_count": 2,
        "auto_merge_enabled": True,
        "auto_merge_applied": False,
        "auto_merge_threshold": 2,
        "auto_merge_replaced_chunks": 0,
        "auto_merge_steps": 0,
        "rerank_enabled": False,
        "rerank_applied": False,
        "rerank_model": None,
        "rerank_endpoint": "",
        "rerank_error": None,
        "rerank_timeout_seconds": 5.0,
        "rerank_min_score": 0.0,
        "post_rerank_count": 2,
        "post_threshold_count": 2,
        "retrieval_empty": False,
    }
    meta.update(overrides)
    return meta


def raw_initial_then_clarify() -> dict[str, Any]:
    """S1 retrieve_initial then S2 grade → clarify: retrieved_chunks cleared to [], D₀ kept."""
    d0 = [runtime_chunk(1), runtime_chunk(2, page="4")]
    return {
        "tool_used": True,
        "tool_name": "search_knowledge_base",
        "query": "年假怎么休？",
        "retrieved_chunks": [],
        "initial_retrieved_chunks": d0,
        "retrieval_stage": "initial",
        "complexity": "simple",
        "complexity_reason": "obvious_simple_fast_path:short_single_intent",
        **retrieval_meta(),
        "route": "clarify",
        "retrieval_status": "needs_clarification",
        "evidence_relevance": "weak",
        "evidence_answerability": "partial",
        "evidence_ambiguity": "missing_slot",
        "evidence_confidence": 0.4,
        "evidence_reason": "员工类型未知",
        "missing_slots": ["员工类型"],
        "hitl_prompt": "请问您是正式员工还是实习生？",
        "hitl_options": [],
    }


def raw_sub_trace(query: str, *, route: str = "answer") -> dict[str, Any]:
    """C2 + C3: a child trace — complexity null (not inherited), initial retrieval, grade."""
    return {
        "tool_used": True,
        "tool_name": "search_knowledge_base",
        "query": query,
        "retrieved_chunks": [runtime_chunk(1)],
        "initial_retrieved_chunks": [runtime_chunk(1)],
        "retrieval_stage": "initial",
        "complexity": None,
        "complexity_reason": None,
        **retrieval_meta(recall_count=1),
        "route": route,
        "retrieval_status": "partial",
        "evidence_relevance": "strong",
        "evidence_answerability": "partial",
        "evidence_ambiguity": "none",
        "evidence_confidence": 0.7,
        "evidence_reason": "部分覆盖",
        "missing_slots": [],
        "hitl_prompt": "",
        "hitl_options": [],
    }


def raw_synthesis() -> dict[str, Any]:
    """C5: a synthesis parent — evidence_confidence explicit None, child traces as sub_traces
    (one of them wrongly carrying its own sub_traces and raw-only keys)."""
    child_b = raw_sub_trace("实习生年假几天？")
    child_b["sub_traces"] = [raw_sub_trace("nested, must vanish")]
    child_b["rewrite_count"] = 0
    return {
        "tool_used": True,
        "tool_name": "search_knowledge_base",
        "query": "正式员工和实习生的年假各几天？",
        "retrieval_stage": "synthesis",
        "complexity": "complex",
        "complexity_reason": "两个对象",
        "sub_questions": ["正式员工年假几天？", "实习生年假几天？"],
        "sub_agent_count": 2,
        "synthesis_merged_count": 2,
        "sub_traces": [raw_sub_trace("正式员工年假几天？"), child_b],
        "retrieved_chunks": [runtime_chunk(1)],
        "route": "answer",
        "retrieval_status": "partial",
        "evidence_relevance": "strong",
        "evidence_answerability": "partial",
        "evidence_confidence": None,
        "hitl_prompt": "",
        "hitl_options": [],
    }


def raw_rewrite() -> dict[str, Any]:
    """S3 rewrite_question (step-back) after a rewrite grade: raw rewrite_count 1, stage still
    initial, the old grade kept."""
    trace = raw_initial_then_clarify()
    trace.update(
        retrieved_chunks=[runtime_chunk(1)],
        route="rewrite",
        retrieval_status="needs_rewrite",
        evidence_ambiguity="none",
        hitl_prompt="",
        rewrite_method="step_back",
        rewritten_query="年假怎么休？\n年假制度的总体规定是什么？",
        step_back_question="年假制度的总体规定是什么？",
        rewrite_count=1,
    )
    return trace


def external(chunk: dict[str, Any]) -> dict[str, Any]:
    """The expected external projection of a runtime chunk."""
    out = {k: chunk[k] for k in RETRIEVED_CHUNK_FIELD_NAMES if chunk.get(k) is not None}
    out["page_number"] = str(chunk["page_number"])
    return out


def test_whole_trace_after_initial_retrieval_and_clarify_grade() -> None:
    raw = raw_initial_then_clarify()
    expected = {k: v for k, v in raw.items() if v is not None}
    expected["initial_retrieved_chunks"] = [external(c) for c in raw["initial_retrieved_chunks"]]

    assert normalize_rag_trace(raw) == expected


def test_non_dict_or_empty_input_gives_none() -> None:
    for raw in (None, {}, [], "trace", 3, {"rewrite_count": 1}, {"query": None}):
        assert normalize_rag_trace(raw) is None  # type: ignore[arg-type]
        assert normalize_sub_trace(raw) is None  # type: ignore[arg-type]


@pytest.mark.usefixtures("lenient_keys")
def test_keeps_protocol_keys_only() -> None:
    raw = raw_rewrite()
    raw.update(hitl_resume_state={"question": "q"}, session_id="s1", grade_score=0.5, docs=[])

    out = normalize_rag_trace(raw)

    assert out is not None
    assert set(out) <= set(TRACE_FIELD_NAMES)
    assert set(out) == {k for k, v in raw.items() if k in TRACE_FIELD_NAMES and v is not None}


def test_drops_none_values() -> None:
    out = normalize_rag_trace(raw_synthesis())

    assert out is not None
    assert "evidence_confidence" not in out  # explicit None on a synthesis parent → absent
    for sub in out["sub_traces"]:
        assert "complexity" not in sub and "complexity_reason" not in sub
        assert "rerank_model" not in sub and "rerank_error" not in sub


def test_keeps_false_zero_empty_string_and_empty_list() -> None:
    out = normalize_rag_trace(raw_initial_then_clarify())

    assert out is not None
    assert out["auto_merge_applied"] is False
    assert out["rerank_enabled"] is False
    assert out["auto_merge_steps"] == 0
    assert out["rerank_min_score"] == 0.0
    assert out["rerank_endpoint"] == ""
    assert out["retrieved_chunks"] == []
    assert out["hitl_options"] == []


@pytest.mark.usefixtures("lenient_keys")
def test_removes_rewrite_count_and_unknown_keys() -> None:
    raw = raw_rewrite()
    raw["grade_route"] = "rewrite"

    out = normalize_rag_trace(raw)

    assert out is not None
    assert "rewrite_count" not in out and "grade_route" not in out
    assert out["rewrite_method"] == "step_back"
    assert out["step_back_question"] == "年假制度的总体规定是什么？"
    assert "hyde_document" not in out


def test_chunk_lists_are_projected_to_the_six_external_keys() -> None:
    raw = raw_rewrite()
    d1 = [runtime_chunk(1), runtime_chunk(2)]
    del d1[1]["rerank_score"]  # not reranked: the key stays absent, never null
    raw.update(rewrite_retrieved_chunks=d1, hitl_targeted_retrieved_chunks=d1)

    out = normalize_rag_trace(raw)

    assert out is not None
    for key in (
        "retrieved_chunks",
        "initial_retrieved_chunks",
        "rewrite_retrieved_chunks",
        "hitl_targeted_retrieved_chunks",
    ):
        assert out[key] == [external(c) for c in raw[key]]
        assert all(set(c) <= set(RETRIEVED_CHUNK_FIELD_NAMES) for c in out[key])
    assert "rerank_score" not in out["rewrite_retrieved_chunks"][1]


def test_chunk_elements_need_a_non_empty_filename() -> None:
    kept = runtime_chunk(1)
    no_source = [
        runtime_chunk(2, filename=""),
        {**runtime_chunk(3), "filename": None},
        {k: v for k, v in runtime_chunk(4).items() if k != "filename"},
        "handbook.pdf",
        None,
        7,
    ]
    raw = {"query": "q", "retrieved_chunks": [no_source[0], kept, *no_source[1:]]}

    assert normalize_rag_trace(raw) == {"query": "q", "retrieved_chunks": [external(kept)]}


@pytest.mark.usefixtures("lenient_keys")
def test_sub_traces_are_normalised_and_never_nested() -> None:
    raw = raw_synthesis()
    raw["sub_traces"] += [None, "child", {}, {"rewrite_count": 0, "unknown": 1}]

    out = normalize_rag_trace(raw)

    assert out is not None
    first, second = (raw_sub_trace(q) for q in raw["sub_questions"])
    expected = []
    for child in (first, second):
        norm = {k: v for k, v in child.items() if v is not None}
        norm["retrieved_chunks"] = [external(c) for c in child["retrieved_chunks"]]
        norm["initial_retrieved_chunks"] = [external(c) for c in child["initial_retrieved_chunks"]]
        expected.append(norm)
    assert out["sub_traces"] == expected
    assert all("sub_traces" not in sub and "rewrite_count" not in sub for sub in out["sub_traces"])
    # normalize_sub_trace on its own drops nesting the same way.
    assert "sub_traces" not in (normalize_sub_trace(raw["sub_traces"][1]) or {})


def test_non_list_chunk_lists_and_sub_traces_become_empty_lists() -> None:
    raw = {
        "query": "q",
        "retrieved_chunks": {"filename": "a.pdf"},
        "initial_retrieved_chunks": "a.pdf",
        "rewrite_retrieved_chunks": 0,
        "hitl_targeted_retrieved_chunks": False,
        "sub_traces": {"query": "q1"},
    }

    assert normalize_rag_trace(raw) == {
        "query": "q",
        "retrieved_chunks": [],
        "initial_retrieved_chunks": [],
        "rewrite_retrieved_chunks": [],
        "hitl_targeted_retrieved_chunks": [],
        "sub_traces": [],
    }


@pytest.mark.parametrize(
    ("key", "value", "field"),
    [
        ("tool_used", 1, "tool_used"),
        ("tool_used", "true", "tool_used"),
        ("query", 5, "query"),
        ("candidate_k", True, "candidate_k"),  # bool is not an int here
        ("candidate_k", 24.0, "candidate_k"),
        ("candidate_k", 2**31, "candidate_k"),  # outside int32
        ("evidence_confidence", "0.9", "evidence_confidence"),
        ("evidence_confidence", False, "evidence_confidence"),
        ("rewrite_method", "paraphrase", "rewrite_method"),  # not step_back / hyde
        ("route", "select", "route"),  # the value is scope_select
        ("retrieval_stage", "graded", "retrieval_stage"),
        ("missing_slots", "员工类型", "missing_slots"),
        ("hitl_options", ["a", 2], "hitl_options[1]"),
        ("retrieved_chunks", [{"filename": "a.pdf", "score": "high"}], "retrieved_chunks[0].score"),
        ("retrieved_chunks", [{"filename": 5}], "retrieved_chunks[0].filename"),
        (
            "retrieved_chunks",
            [{"filename": "a", "page_number": 1.5}],
            "retrieved_chunks[0].page_number",
        ),
        ("sub_traces", [{"route": "maybe"}], "sub_traces[0].route"),
    ],
)
def test_type_mismatch_raises_naming_the_field(key: str, value: Any, field: str) -> None:
    raw = raw_initial_then_clarify()
    raw[key] = value

    with pytest.raises(TraceFieldError) as info:
        normalize_rag_trace(raw)

    assert info.value.field == field
    assert str(info.value).startswith(f"{field}: ")
    assert isinstance(info.value, ValueError)


def test_int_is_accepted_for_a_float_field_and_becomes_a_float() -> None:
    # The empty-evidence short circuit writes confidence 1.0; a writer passing 1 means the same.
    out = normalize_rag_trace({"evidence_confidence": 1, "rerank_timeout_seconds": 5})

    assert out == {"evidence_confidence": 1.0, "rerank_timeout_seconds": 5.0}
    assert all(type(v) is float for v in out.values())


def test_page_number_is_canonicalised_to_text() -> None:
    raw = {
        "retrieved_chunks": [
            runtime_chunk(1, page=0),
            runtime_chunk(2, page="7"),
            {**runtime_chunk(3), "page_number": None},
        ]
    }

    out = normalize_rag_trace(raw)

    assert out is not None
    assert [c.get("page_number") for c in out["retrieved_chunks"]] == ["0", "7", None]
    assert "page_number" not in out["retrieved_chunks"][2]


def test_normalisation_does_not_mutate_its_input() -> None:
    raw = raw_synthesis()
    before = copy.deepcopy(raw)

    normalize_rag_trace(raw)

    assert raw == before


def test_strict_keys_reject_an_unknown_raw_key_naming_it() -> None:
    raw = raw_rewrite()
    raw["evidence_relevence"] = "strong"  # misspelt: would otherwise vanish
    with strict_keys(), pytest.raises(TraceFieldError) as err:
        normalize_rag_trace(raw)
    assert err.value.field == "evidence_relevence"


def test_strict_keys_name_an_unknown_key_inside_a_sub_trace() -> None:
    raw = raw_synthesis()
    raw["sub_traces"][1]["retrieval_stat"] = "partial"
    with strict_keys(), pytest.raises(TraceFieldError) as err:
        normalize_rag_trace(raw)
    assert err.value.field == "sub_traces[1].retrieval_stat"


def test_strict_keys_allow_raw_only_keys_and_a_nested_sub_traces() -> None:
    raw = raw_rewrite()
    with strict_keys():
        out = normalize_rag_trace(raw)
        child = normalize_sub_trace({"query": "q", "sub_traces": [], "rewrite_count": 1})
    assert raw["rewrite_count"] == 1 and out is not None and "rewrite_count" not in out
    assert child == {"query": "q"}


def test_vocabulary_members_come_out_as_plain_strings() -> None:
    raw = raw_rewrite()
    raw.update(route=Route.ANSWER, retrieval_stage=Stage.REWRITTEN)
    out = normalize_rag_trace(raw)
    assert out is not None
    assert type(out["route"]) is str and type(out["retrieval_stage"]) is str
    assert (out["route"], out["retrieval_stage"]) == ("answer", "rewritten")
