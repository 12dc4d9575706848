"""The scenario matrix (every route, both rewrites, synthesis and resume, as docs/trace.md
describes them) through the real Run / Resume RPCs: the production wiring
(`build_app`) against a scripted OpenAI-compatible model server and a scripted in-process
RetrievalService. Every row asserts the WHOLE normalised trace, the snapshot, the result's
docs/context, and exactly which model tasks and retrievals happened."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest

from shared.codec import (
    chunk_from_proto,
    hitl_state_from_proto,
    hitl_state_to_proto,
    rag_trace_from_proto,
)
from shared.context_text import format_context
from tests.fakes.model_server import HttpError, ModelScript, complexity, grade, rewrite
from tests.fakes.orchestrator_stack import API_KEY, MODELS, Stack, start_stack
from tests.fakes.retrieval_servicer import RetrievalScript, chunk, meta

CX, GR, RW = "complexity_classification", "evidence_grade", "query_rewrite"
TASK_MODEL = {CX: MODELS["fast_model"], GR: MODELS["grade_model"], RW: MODELS["fast_model"]}
FAST_FACT = "obvious_simple_fast_path:single_fact_marker"
FAST_SHORT = "obvious_simple_fast_path:short_single_intent"

Q = "丹瑾是什么属性？"  # fast path, single-fact marker
Q_SHORT = "退款期限？"  # fast path, short single intent
Q_LONG = "请介绍一下公司年假制度里面关于新员工的具体规定内容"  # goes to the model
Q_CMP = "比较丹瑾与卡卡罗的战斗定位"
S1, S2, S3, S4 = "丹瑾的战斗定位？", "卡卡罗的战斗定位？", "丹瑾的武器？", "卡卡罗的武器？"
SB = "角色的元素属性体系是怎样的？"
HY = "丹瑾是一名衍射属性的角色，擅长近战输出。"
RQ_SB = f"{Q}\n\n退步问题：{SB}"
RQ_HY = f"{Q}\n\n假设性答案文档：{HY}"

A1 = chunk("roles.md", "1", "丹瑾：衍射属性，近战。", score=0.031, rrf_rank=1, chunk_id="roles::1")
A2 = chunk("roles.md", "2", "卡卡罗：导电属性。", score=0.029, rrf_rank=2, chunk_id="roles::2")
B1 = chunk("guide.pdf", "0", "属性体系分为六种。", score=0.05, rrf_rank=1, chunk_id="guide::1")
B2 = chunk(
    "guide.pdf", "3", "衍射克制湮灭。", score=0.04, rrf_rank=2, rerank_score=0.7, chunk_id=""
)
A1_DUP = {**A1, "score": 0.09, "rrf_rank": 1}  # same chunk_id, higher score

# The initial retrieval of the rewrite rows reports keys the second one does not: they must
# disappear from R once retrieval is redone (docs/trace.md#node-by-node, S4).
META0 = meta(
    1, rerank_model="bge-reranker", candidate_k_config_error="invalid RETRIEVAL_CANDIDATE_K"
)
META0["candidate_k_source"] = "multiplier"


def ext(*docs: dict[str, Any]) -> list[dict[str, Any]]:
    keys = ("filename", "page_number", "text", "score", "rrf_rank", "rerank_score")
    return [{k: d[k] for k in keys if d.get(k) is not None} for d in docs]


def ident(query: str) -> dict[str, Any]:
    return {"tool_used": True, "tool_name": "search_knowledge_base", "query": query}


def initial(
    query: str, docs: list, r: dict | None = None, cx: str | None = None, why: str | None = None
):
    t = {
        **ident(query),
        "retrieved_chunks": ext(*docs),
        "initial_retrieved_chunks": ext(*docs),
        "retrieval_stage": "initial",
        **(meta(len(docs)) if r is None else r),
    }
    if cx is not None:
        t["complexity"], t["complexity_reason"] = cx, why
    return t


def graded(route, status, rel, ans, amb="none", conf=0.9, reason="", slots=(), prompt="", opts=()):
    return {
        "route": route,
        "retrieval_status": status,
        "evidence_relevance": rel,
        "evidence_answerability": ans,
        "evidence_ambiguity": amb,
        "evidence_confidence": conf,
        "evidence_reason": reason,
        "missing_slots": list(slots),
        "hitl_prompt": prompt,
        "hitl_options": list(opts),
    }


EMPTY_GRADE = graded(
    "no_knowledge", "no_knowledge", "none", "none", conf=1.0, reason="no_retrieved_documents"
)
DEFAULT_SLOT_PROMPT = "我找到了相关内容，但还缺少关键信息：角色名"
DEFAULT_CLARIFY = "我找到了相关内容，但证据不足以确定答案。请补充一下你具体想问的条件。"
DEFAULT_SCOPE = "我在知识库中找到了多个可能相关的方向。你想问的是哪一个？"


def snap(question, route, status, rc=0, cx="simple", why=FAST_FACT, subs=()):
    return {
        "question": question,
        "route": route,
        "retrieval_status": status,
        "rewrite_count": rc,
        "complexity": cx,
        "complexity_reason": why,
        "sub_questions": list(subs),
    }


@dataclass
class Row:
    name: str
    question: str | None = None
    resume: tuple[dict[str, Any], str] | None = None
    model: list[tuple] = field(default_factory=list)
    retrieval: list[tuple] = field(default_factory=list)
    route: str = ""
    status: str = ""
    trace: dict[str, Any] | None = None
    snapshot: dict[str, Any] | None = None
    docs: list[dict[str, Any]] = field(default_factory=list)
    calls: list[tuple[str, str]] = field(default_factory=list)
    queries: list[str] = field(default_factory=list)
    error: tuple[grpc.StatusCode, str] | None = None


def rewritten(method, helper, rq, d0, d1, r0, r1, second_grade, **extra):
    """The trace after initial retrieval → rewrite → re-retrieval → second grading."""
    t = initial(Q, d0, r0, "simple", FAST_FACT)
    for key in r0:
        t.pop(key)
    t.update(r1)
    t.update(
        retrieved_chunks=ext(*d1),
        rewrite_retrieved_chunks=ext(*d1),
        retrieval_stage="rewritten",
        rewrite_method=method,
        rewritten_query=rq,
        **{("step_back_question" if method == "step_back" else "hyde_document"): helper},
    )
    t.update(second_grade)
    t.update(extra)
    return t


ROWS: list[Row] = [
    Row(
        "fast_path_single_fact_answer",
        Q,
        model=[(GR, Q, grade("strong", "sufficient", "answer", reason="直接支持"))],
        retrieval=[(Q, [A1])],
        route="answer",
        status="answerable",
        trace={
            **initial(Q, [A1], cx="simple", why=FAST_FACT),
            **graded("answer", "answerable", "strong", "sufficient", reason="直接支持"),
        },
        docs=[A1],
        calls=[(GR, Q)],
        queries=[Q],
    ),
    Row(
        "fast_path_short_intent_no_knowledge_keeps_chunks_in_T",
        Q_SHORT,
        model=[(GR, Q_SHORT, grade("none", "none", "no_knowledge", confidence=0.8, reason="无关"))],
        retrieval=[(Q_SHORT, [A1, A2])],
        route="no_knowledge",
        status="no_knowledge",
        trace={
            **initial(Q_SHORT, [A1, A2], cx="simple", why=FAST_SHORT),
            **graded("no_knowledge", "no_knowledge", "none", "none", conf=0.8, reason="无关"),
        },
        docs=[],
        calls=[(GR, Q_SHORT)],
        queries=[Q_SHORT],
    ),
    Row(
        "model_simple_answer",
        Q_LONG,
        model=[
            (CX, Q_LONG, complexity("simple", "单一制度查询")),
            (GR, Q_LONG, grade("strong", "sufficient", "answer", confidence=0.95)),
        ],
        retrieval=[(Q_LONG, [B1, B2])],
        route="answer",
        status="answerable",
        trace={
            **initial(Q_LONG, [B1, B2], cx="simple", why="单一制度查询"),
            **graded("answer", "answerable", "strong", "sufficient", conf=0.95),
        },
        docs=[B1, B2],
        calls=[(CX, Q_LONG), (GR, Q_LONG)],
        queries=[Q_LONG],
    ),
    Row(
        "empty_recall_short_circuit_model_not_called",
        Q,
        retrieval=[(Q, [])],
        route="no_knowledge",
        status="no_knowledge",
        trace={**initial(Q, [], cx="simple", why=FAST_FACT), **EMPTY_GRADE},
        calls=[],
        queries=[Q],
    ),
    Row(
        "clarify_missing_slot_default_prompt_clears_current_evidence",
        Q,
        model=[
            (
                GR,
                Q,
                grade(
                    "weak", "partial", "clarify", ambiguity="missing_slot", missing_slots=["角色名"]
                ),
            )
        ],
        retrieval=[(Q, [A1])],
        route="clarify",
        status="needs_clarification",
        trace={
            **initial(Q, [A1], cx="simple", why=FAST_FACT),
            **graded(
                "clarify",
                "needs_clarification",
                "weak",
                "partial",
                "missing_slot",
                slots=["角色名"],
                prompt=DEFAULT_SLOT_PROMPT,
            ),
            "retrieved_chunks": [],
        },
        snapshot=snap(Q, "clarify", "needs_clarification"),
        calls=[(GR, Q)],
        queries=[Q],
    ),
    Row(
        "scope_select_multiple_candidates_model_prompt_and_options",
        Q,
        model=[
            (
                GR,
                Q,
                grade(
                    "strong",
                    "partial",
                    "scope_select",
                    ambiguity="multiple_candidates",
                    hitl_prompt="你问哪个角色？",
                    hitl_options=["丹瑾", "丹恒"],
                ),
            )
        ],
        retrieval=[(Q, [A1, A2])],
        route="scope_select",
        status="needs_scope_selection",
        trace={
            **initial(Q, [A1, A2], cx="simple", why=FAST_FACT),
            **graded(
                "scope_select",
                "needs_scope_selection",
                "strong",
                "partial",
                "multiple_candidates",
                prompt="你问哪个角色？",
                opts=["丹瑾", "丹恒"],
            ),
            "retrieved_chunks": [],
        },
        snapshot=snap(Q, "scope_select", "needs_scope_selection"),
        calls=[(GR, Q)],
        queries=[Q],
    ),
    Row(
        "answer_options_copied_on_non_hitl_route",
        Q,
        model=[
            (
                GR,
                Q,
                grade("strong", "sufficient", "answer", hitl_prompt="ignored", hitl_options=["x"]),
            )
        ],
        retrieval=[(Q, [A1])],
        route="answer",
        status="answerable",
        trace={
            **initial(Q, [A1], cx="simple", why=FAST_FACT),
            **graded("answer", "answerable", "strong", "sufficient", opts=["x"]),
        },
        docs=[A1],
        calls=[(GR, Q)],
        queries=[Q],
    ),
]


def _rewrite_row(
    name,
    method,
    second,
    route,
    status,
    trace_grade,
    *,
    d1=(B1,),
    snapshot=None,
    docs=None,
    second_called=True,
):
    helper, rq = (SB, RQ_SB) if method == "step_back" else (HY, RQ_HY)
    r1 = meta(len(d1))
    model = [
        (GR, Q, grade("weak", "partial", "rewrite", confidence=0.4), *([second] if second else [])),
        (RW, Q, rewrite(method, helper)),
    ]
    return Row(
        name,
        Q,
        model=model,
        retrieval=[(Q, [A1], META0), (rq, list(d1))],
        route=route,
        status=status,
        trace=rewritten(method, helper, rq, [A1], list(d1), META0, r1, trace_grade),
        snapshot=snapshot,
        docs=list(docs or []),
        calls=[(GR, Q), (RW, Q), *([(GR, Q)] if second_called else [])],
        queries=[Q, rq],
    )


ROWS += [
    _rewrite_row(
        "step_back_then_answer",
        "step_back",
        grade("strong", "sufficient", "answer", confidence=0.9),
        "answer",
        "answerable",
        graded("answer", "answerable", "strong", "sufficient"),
        docs=[B1],
    ),
    _rewrite_row(
        "step_back_then_clarify",
        "step_back",
        grade(
            "weak",
            "partial",
            "clarify",
            ambiguity="missing_slot",
            missing_slots=["角色名"],
            hitl_prompt="哪个角色？",
        ),
        "clarify",
        "needs_clarification",
        {
            **graded(
                "clarify",
                "needs_clarification",
                "weak",
                "partial",
                "missing_slot",
                slots=["角色名"],
                prompt="哪个角色？",
            ),
            "retrieved_chunks": [],
        },
        snapshot=snap(Q, "clarify", "needs_clarification", rc=1),
    ),
    _rewrite_row(
        "step_back_then_scope_select",
        "step_back",
        grade(
            "strong",
            "partial",
            "scope_select",
            ambiguity="multiple_candidates",
            hitl_options=["六种属性", "克制关系"],
        ),
        "scope_select",
        "needs_scope_selection",
        {
            **graded(
                "scope_select",
                "needs_scope_selection",
                "strong",
                "partial",
                "multiple_candidates",
                prompt=DEFAULT_SCOPE,
                opts=["六种属性", "克制关系"],
            ),
            "retrieved_chunks": [],
        },
        snapshot=snap(Q, "scope_select", "needs_scope_selection", rc=1),
    ),
    _rewrite_row(
        "step_back_then_no_knowledge",
        "step_back",
        grade("none", "none", "no_knowledge", confidence=0.7),
        "no_knowledge",
        "no_knowledge",
        graded("no_knowledge", "no_knowledge", "none", "none", conf=0.7),
    ),
    _rewrite_row(
        "step_back_then_partial_budget_used_becomes_clarify",
        "step_back",
        grade("strong", "partial", "answer", confidence=0.6),
        "clarify",
        "needs_clarification",
        {
            **graded(
                "clarify",
                "needs_clarification",
                "strong",
                "partial",
                conf=0.6,
                prompt=DEFAULT_CLARIFY,
            ),
            "retrieved_chunks": [],
        },
        snapshot=snap(Q, "clarify", "needs_clarification", rc=1),
    ),
    _rewrite_row(
        "hyde_then_answer",
        "hyde",
        grade("strong", "sufficient", "answer", confidence=0.9),
        "answer",
        "answerable",
        graded("answer", "answerable", "strong", "sufficient"),
        d1=(B1, B2),
        docs=[B1, B2],
    ),
    _rewrite_row(
        "hyde_then_rewrite_again_budget_used_other_becomes_no_knowledge",
        "hyde",
        grade("weak", "none", "rewrite", confidence=0.3),
        "no_knowledge",
        "no_knowledge",
        graded("no_knowledge", "no_knowledge", "weak", "none", conf=0.3),
    ),
    _rewrite_row(
        "hyde_then_rewrite_again_budget_used_partial_becomes_clarify",
        "hyde",
        grade("weak", "partial", "rewrite", confidence=0.3),
        "clarify",
        "needs_clarification",
        {
            **graded(
                "clarify",
                "needs_clarification",
                "weak",
                "partial",
                conf=0.3,
                prompt=DEFAULT_CLARIFY,
            ),
            "retrieved_chunks": [],
        },
        snapshot=snap(Q, "clarify", "needs_clarification", rc=1),
    ),
    _rewrite_row(
        "hyde_then_empty_recall_short_circuit",
        "hyde",
        None,
        "no_knowledge",
        "no_knowledge",
        EMPTY_GRADE,
        d1=(),
        second_called=False,
    ),
]


def sub_trace(q, docs, g):
    return {**initial(q, docs), **g}


def parent(
    subs, traces, docs, merged, status, rel, ans, route, prompt="", opts=(), why="对比两个角色"
):
    return {
        **ident(Q_CMP),
        "retrieved_chunks": docs,
        "retrieval_stage": "synthesis",
        "complexity": "complex",
        "complexity_reason": why,
        "sub_questions": list(subs),
        "sub_agent_count": len(subs),
        "synthesis_merged_count": merged,
        "sub_traces": traces,
        "retrieval_status": status,
        "evidence_relevance": rel,
        "evidence_answerability": ans,
        "route": route,
        "hitl_prompt": prompt,
        "hitl_options": list(opts),
    }


G_ANS = grade("strong", "sufficient", "answer")
T_ANS = graded("answer", "answerable", "strong", "sufficient")
G_PART = grade("weak", "partial", "rewrite", confidence=0.5)  # sub-questions never rewrite
T_PART = graded("answer", "partial", "weak", "partial", conf=0.5)
G_CLAR = grade(
    "weak",
    "partial",
    "clarify",
    ambiguity="missing_slot",
    hitl_prompt="具体指什么角色？",
    hitl_options=["丹瑾"],
)
T_CLAR = {
    **graded(
        "clarify",
        "needs_clarification",
        "weak",
        "partial",
        "missing_slot",
        prompt="具体指什么角色？",
        opts=["丹瑾"],
    ),
    "retrieved_chunks": [],
}
G_SCOPE = grade(
    "strong",
    "partial",
    "answer",
    ambiguity="multiple_candidates",
    hitl_prompt="选哪个版本？",
    hitl_options=["丹瑾", "v2"],
)
T_SCOPE = {
    **graded(
        "scope_select",
        "needs_scope_selection",
        "strong",
        "partial",
        "multiple_candidates",
        prompt="选哪个版本？",
        opts=["丹瑾", "v2"],
    ),
    "retrieved_chunks": [],
}
G_NONE = grade("none", "none", "no_knowledge", confidence=0.8)
T_NONE = graded("no_knowledge", "no_knowledge", "none", "none", conf=0.8)


def cmp_row(
    name, subs, per_sub, route, status, rel, ans, docs, merged, prompt="", opts=(), snapshot=None
):
    """per_sub: (docs, model grade or None for an empty recall, expected grade keys)."""
    model = [(CX, Q_CMP, complexity("complex", "对比两个角色", subs))]
    retrieval, calls, traces = [], [(CX, Q_CMP)], []
    for sq, (d, g, tg) in zip(subs, per_sub, strict=True):
        retrieval.append((sq, d))
        if g is not None:
            model.append((GR, sq, g))
            calls.append((GR, sq))
        traces.append(sub_trace(sq, d, tg))
    return Row(
        name,
        Q_CMP,
        model=model,
        retrieval=retrieval,
        route=route,
        status=status,
        trace=parent(subs, traces, docs, merged, status, rel, ans, route, prompt, opts),
        snapshot=snapshot,
        docs=[],
        calls=calls,
        queries=list(subs),
    )


def renumbered(*docs):
    return [{**d, "rrf_rank": i} for i, d in enumerate(ext(*docs), start=1)]


ROWS += [
    cmp_row(
        "complex_sub_question_partial_kept_other_empty",
        [S1, S2],
        [([A1], G_PART, T_PART), ([], None, EMPTY_GRADE)],
        "answer",
        "partial",
        "strong",
        "partial",
        renumbered(A1),
        1,
    ),
    cmp_row(
        "complex_answerable_with_dedupe_max_score_and_renumbering",
        [S1, S2],
        [([A1, B1], G_ANS, T_ANS), ([A1_DUP, A2], G_ANS, T_ANS)],
        "answer",
        "answerable",
        "strong",
        "sufficient",
        renumbered(A1_DUP, B1, A2),
        4,
    ),
    cmp_row(
        "complex_answerable_even_when_other_child_hitl_or_no_knowledge",
        [S1, S2, S3],
        [([A1], G_ANS, T_ANS), ([A2], G_CLAR, T_CLAR), ([B1], G_NONE, T_NONE)],
        "answer",
        "answerable",
        "strong",
        "sufficient",
        renumbered(A1),
        1,
    ),
    cmp_row(
        "complex_all_empty_no_knowledge_grader_never_called",
        [S1, S2],
        [([], None, EMPTY_GRADE), ([], None, EMPTY_GRADE)],
        "no_knowledge",
        "no_knowledge",
        "none",
        "none",
        [],
        0,
    ),
    cmp_row(
        "complex_hitl_scope_select_precedence_prompts_joined",
        [S1, S2, S3, S4],
        [
            ([A1], G_CLAR, T_CLAR),
            ([A2], G_SCOPE, T_SCOPE),
            ([B1], G_CLAR, T_CLAR),
            ([], None, EMPTY_GRADE),
        ],
        "scope_select",
        "needs_scope_selection",
        "none",
        "none",
        [],
        0,
        prompt="具体指什么角色？；选哪个版本？",
        opts=["丹瑾", "v2"],
        snapshot=snap(
            Q_CMP,
            "scope_select",
            "needs_scope_selection",
            cx="complex",
            why="对比两个角色",
            subs=[S1, S2, S3, S4],
        ),
    ),
    cmp_row(
        "complex_hitl_clarify_only",
        [S1],
        [([A1], G_CLAR, T_CLAR)],
        "clarify",
        "needs_clarification",
        "none",
        "none",
        [],
        0,
        prompt="具体指什么角色？",
        opts=["丹瑾"],
        snapshot=snap(
            Q_CMP, "clarify", "needs_clarification", cx="complex", why="对比两个角色", subs=[S1]
        ),
    ),
]
ROWS[-6].docs = [{**A1, "rrf_rank": 1}]
ROWS[-5].docs = [{**A1_DUP, "rrf_rank": 1}, {**B1, "rrf_rank": 2}, {**A2, "rrf_rank": 3}]
ROWS[-4].docs = [{**A1, "rrf_rank": 1}]

ROWS += [
    Row(
        "classification_complex_without_sub_questions_is_internal",
        Q_CMP,
        model=[(CX, Q_CMP, complexity("complex", "x", ["  ", ""]))],
        calls=[(CX, Q_CMP), (CX, Q_CMP)],
        error=(grpc.StatusCode.INTERNAL, "complexity_classification"),
    ),
    Row(
        "classification_invalid_output_after_retry_is_internal",
        Q_CMP,
        model=[
            (CX, Q_CMP, "not json", {"complexity": "medium", "reason": "", "sub_questions": []})
        ],
        calls=[(CX, Q_CMP), (CX, Q_CMP)],
        error=(grpc.StatusCode.INTERNAL, "complexity_classification"),
    ),
    Row(
        "classification_more_than_four_sub_questions_is_internal",
        Q_CMP,
        model=[(CX, Q_CMP, complexity("complex", "x", ["a", "b", "c", "d", "e"]))],
        calls=[(CX, Q_CMP), (CX, Q_CMP)],
        error=(grpc.StatusCode.INTERNAL, "complexity_classification"),
    ),
    Row(
        "classification_invalid_then_valid_retry_succeeds",
        Q_LONG,
        model=[
            (CX, Q_LONG, "{", complexity("simple", "ok")),
            (GR, Q_LONG, grade("strong", "sufficient", "answer")),
        ],
        retrieval=[(Q_LONG, [B1])],
        route="answer",
        status="answerable",
        trace={**initial(Q_LONG, [B1], cx="simple", why="ok"), **T_ANS},
        docs=[B1],
        calls=[(CX, Q_LONG), (CX, Q_LONG), (GR, Q_LONG)],
        queries=[Q_LONG],
    ),
    Row(
        "grade_invalid_output_is_internal",
        Q,
        model=[(GR, Q, {"relevance": "very"})],
        retrieval=[(Q, [A1])],
        calls=[(GR, Q), (GR, Q)],
        queries=[Q],
        error=(grpc.StatusCode.INTERNAL, "evidence_grade"),
    ),
    Row(
        "model_endpoint_http_error_is_unavailable",
        Q,
        model=[(GR, Q, HttpError(500))],  # 503 would be retried
        retrieval=[(Q, [A1])],
        calls=[(GR, Q)],
        queries=[Q],
        error=(grpc.StatusCode.UNAVAILABLE, "model endpoint"),
    ),
]

QSTAR = f"丹瑾：{Q_SHORT}"
SNAP_CLARIFY = snap(Q_SHORT, "clarify", "needs_clarification", why=FAST_SHORT)


def resumed(query, docs, g, **extra):
    return {
        **ident(query),
        "hitl_resumed": True,
        "hitl_answer": extra.pop("answer", "丹瑾"),
        "hitl_resume_from_status": extra.pop("from_status", "needs_clarification"),
        "hitl_resume_from_route": extra.pop("from_route", "clarify"),
        "retrieved_chunks": ext(*docs),
        "hitl_targeted_retrieved_chunks": ext(*docs),
        "hitl_resume_strategy": "targeted_retrieval",
        "retrieval_stage": "hitl_targeted_retrieval",
        **meta(len(docs)),
        **g,
        **extra,
    }


ROWS += [
    Row(
        "resume_to_answer",
        resume=(SNAP_CLARIFY, "丹瑾"),
        model=[(GR, QSTAR, G_ANS)],
        retrieval=[(QSTAR, [A1])],
        route="answer",
        status="answerable",
        trace=resumed(QSTAR, [A1], T_ANS, complexity="simple", complexity_reason=FAST_SHORT),
        docs=[A1],
        calls=[(GR, QSTAR)],
        queries=[QSTAR],
    ),
    Row(
        "resume_hitl_again_returns_new_snapshot_with_budget",
        resume=({**SNAP_CLARIFY, "rewrite_count": 1}, "丹瑾"),
        model=[(GR, QSTAR, grade("strong", "partial", "answer", confidence=0.5))],
        retrieval=[(QSTAR, [A1])],
        route="clarify",
        status="needs_clarification",
        trace={
            **resumed(
                QSTAR,
                [A1],
                graded(
                    "clarify",
                    "needs_clarification",
                    "strong",
                    "partial",
                    conf=0.5,
                    prompt=DEFAULT_CLARIFY,
                ),
                complexity="simple",
                complexity_reason=FAST_SHORT,
            ),
            "retrieved_chunks": [],
        },
        snapshot=snap(QSTAR, "clarify", "needs_clarification", rc=1, why=FAST_SHORT),
        calls=[(GR, QSTAR)],
        queries=[QSTAR],
    ),
    Row(
        "resume_rewrite_verdict_returned_as_needs_rewrite_not_executed",
        resume=(
            snap(
                Q_CMP,
                "scope_select",
                "needs_scope_selection",
                cx="complex",
                why="对比",
                subs=[S1, S2],
            ),
            "2.0版本",
        ),
        model=[(GR, f"2.0版本：{Q_CMP}", grade("weak", "partial", "rewrite", confidence=0.4))],
        retrieval=[(f"2.0版本：{Q_CMP}", [A1, A2])],
        route="rewrite",
        status="needs_rewrite",
        trace=resumed(
            f"2.0版本：{Q_CMP}",
            [A1, A2],
            graded("rewrite", "needs_rewrite", "weak", "partial", conf=0.4),
            answer="2.0版本",
            from_status="needs_scope_selection",
            from_route="scope_select",
            complexity="complex",
            complexity_reason="对比",
            sub_questions=[S1, S2],
        ),
        docs=[A1, A2],
        calls=[(GR, f"2.0版本：{Q_CMP}")],
        queries=[f"2.0版本：{Q_CMP}"],
    ),
    Row(
        "resume_answer_already_in_question_empty_recall",
        resume=(snap("丹瑾的属性？", "clarify", "needs_clarification", cx=None, why=None), "丹瑾"),
        retrieval=[("丹瑾的属性？", [])],
        route="no_knowledge",
        status="no_knowledge",
        trace=resumed("丹瑾的属性？", [], EMPTY_GRADE),
        calls=[],
        queries=["丹瑾的属性？"],
    ),
]


def _script(row: Row) -> tuple[ModelScript, RetrievalScript]:
    ms = ModelScript()
    for task, question, *replies in row.model:
        ms.add(task, question, *replies)
    rs = RetrievalScript()
    for query, docs, *m in row.retrieval:
        rs.add(query, docs, m[0] if m else None)
    return ms, rs


# A run limited to two knowledge bases under a filter (docs/api.md#knowledge-bases).
KBS, FILTER = ("hr", "knowledge_bases/eng"), 'metadata.department = "sales"'


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
async def test_matrix(row: Row) -> None:
    stack = await _check(row)
    assert {(s.knowledge_bases, s.filter) for s in stack.retrieval.sent} <= {((), "")}


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
async def test_matrix_within_knowledge_bases_and_a_filter(row: Row) -> None:
    # The same outcome, and every retrieval of the row (the first recall, each sub-question,
    # the rewrite, the resumed one) searched the run's knowledge bases under its filter.
    stack = await _check(row, knowledge_bases=KBS, filter=FILTER)
    assert len(stack.retrieval.sent) == len(row.queries)
    assert {(s.knowledge_bases, s.filter) for s in stack.retrieval.sent} <= {(KBS, FILTER)}


async def _check(row: Row, **scope: Any) -> Stack:
    ms, rs = _script(row)
    stack = await start_stack(ms, rs)
    try:
        if row.error is not None:
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await stack.run(row.question, **scope)
            assert err.value.code() == row.error[0]
            assert row.error[1] in err.value.details()
        else:
            if row.resume is not None:
                snapshot, answer = row.resume
                result = await stack.resume(hitl_state_to_proto(snapshot), answer, **scope)
            else:
                result = await stack.run(row.question, **scope)
            assert (result.route, result.retrieval_status) == (row.route, row.status)
            assert rag_trace_from_proto(result.rag_trace) == row.trace
            if row.snapshot is None:
                assert not result.HasField("hitl_resume_state")
            else:
                assert hitl_state_from_proto(result.hitl_resume_state) == row.snapshot
            assert [chunk_from_proto(c) for c in result.docs] == row.docs
            assert result.context == format_context(row.docs)
        assert Counter(stack.model.calls()) == Counter(row.calls)
        assert Counter(stack.retrieval.queries) == Counter(row.queries)
        for request in stack.model.requests:
            assert request.authorization == f"Bearer {API_KEY}"
            assert request.model == TASK_MODEL[request.task]
    finally:
        await stack.aclose()
    return stack


def test_matrix_has_at_least_26_rows() -> None:
    assert len(ROWS) >= 26
