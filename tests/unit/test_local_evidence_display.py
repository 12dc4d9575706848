"""The CLI's evidence list a person can read: the graded top 3 and the cited chunks by default
(`--all-evidence` for the rest), each score explained by its signal."""

from __future__ import annotations

import io
from typing import Any

from orchestrator_service.cli import print_result, score_note


def doc(n: int, **extra: Any) -> dict[str, Any]:
    return {"filename": f"f{n}.md", "page_number": "0", "text": f"chunk {n}", **extra}


def result(cited: list[int]) -> dict[str, Any]:
    return {
        "question": "q?",
        "route": "answer",
        "retrieval_status": "answerable",
        "docs": [doc(n, score=2 / (60 + n), rrf_rank=n) for n in range(1, 9)],
        "rag_trace": {},
        "hitl_resume_state": None,
        "answer": {
            "text": "a[6].",
            "citations": [
                {"index": i, "filename": f"f{i}.md", "page_number": "0", "quote": "q"}
                for i in cited
            ],
            "model": "local",
            "partial": False,
        },
    }


def shown(data: dict[str, Any], **kwargs: Any) -> str:
    out = io.StringIO()
    print_result(data, out, **kwargs)
    return out.getvalue()


def test_graded_and_cited_chunks_are_shown_by_default() -> None:
    text = shown(result([6]))
    assert "evidence: 8 chunk(s)" in text
    for n in (1, 2, 3, 6):
        assert f"  [{n}] f{n}.md" in text
    for n in (4, 5, 7, 8):
        assert f"  [{n}] f{n}.md" not in text
    assert "… 4 more, neither graded nor cited (--all-evidence shows them)" in text


def test_all_evidence_shows_every_chunk() -> None:
    text = shown(result([6]), all_evidence=True)
    assert all(f"  [{n}] f{n}.md" in text for n in range(1, 9)) and "more, neither" not in text


def test_each_score_says_which_signal_it_is() -> None:
    assert score_note(doc(1, score=2 / 61, rrf_rank=1)) == (
        "fused rank 1, RRF of the dense and keyword rankings: 100% of a chunk ranked first by both"
    )
    assert "97% of a chunk ranked first" in score_note(doc(3, score=2 / 63, rrf_rank=3))
    assert score_note(doc(1, score=0.03, rerank_score=0.87)) == "reranker relevance, 0–1"
    assert score_note(doc(1, score=0.71)) == "cosine similarity to the question, 0–1"
