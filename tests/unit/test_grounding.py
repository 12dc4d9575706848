"""The grounding check's pure parts (docs/api.md#grounding-check): claims and their markers,
the request's limits, byte positions, the support score, and the gate that hands a streamed
answer out claim by claim."""

from __future__ import annotations

import pytest

from orchestrator_service.grounding import (
    DEFAULT_CITATION_THRESHOLD,
    MAX_FACTS,
    MAX_TEXT_BYTES,
    ClaimGate,
    check_request,
    claim_spans,
    grounding,
    support_score,
)
from orchestrator_service.models.base import ClaimToCheck, ClaimVerdict
from shared.errors import InvalidArgument


def _claims(answer: str) -> list[tuple[str, tuple[int, ...]]]:
    return [(answer[s.start : s.end], s.cited) for s in claim_spans(answer)]


@pytest.mark.parametrize(
    ("answer", "claims"),
    [
        (
            "Basic answers in 24 hours[1]. Premium in 4 hours[2][3].",
            [("Basic answers in 24 hours[1].", (1,)), ("Premium in 4 hours[2][3].", (2, 3))],
        ),
        # Markers a sentence starts with close the claim before.
        (
            "Basic answers in 24 hours. [1] Premium in 4 hours. [2]",
            [("Basic answers in 24 hours. [1]", (1,)), ("Premium in 4 hours. [2]", (2,))],
        ),
        (
            "丹瑾是衍射属性[1]。她来自今州[2]。",
            [("丹瑾是衍射属性[1]。", (1,)), ("她来自今州[2]。", (2,))],
        ),
        # A line break inside a wrapped paragraph does not end a claim.
        (
            "The daemon rereads its configuration file whenever it receives\n"
            "the SIGHUP signal from the system [1]. Done.",
            [
                (
                    "The daemon rereads its configuration file whenever it receives\n"
                    "the SIGHUP signal from the system [1].",
                    (1,),
                ),
                ("Done.", ()),
            ],
        ),
        ("", []),
        ("[1]", []),
    ],
)
def test_claims_are_sentences_with_the_markers_after_them(
    answer: str, claims: list[tuple[str, tuple[int, ...]]]
) -> None:
    assert _claims(answer) == claims


def test_a_claim_is_checked_without_markers_against_the_facts_it_cites() -> None:
    answer = "The Premium Support Plan answers every ticket within\nfour hours [2][9][2]."
    (span,) = claim_spans(answer)
    assert span.to_check(answer, fact_count=3) == ClaimToCheck(
        "The Premium Support Plan answers every ticket within four hours.", (1,)
    )


@pytest.mark.parametrize(
    ("answer", "facts", "threshold", "field"),
    [
        (" ", ["a"], None, "answer_candidate"),
        ("x" * (MAX_TEXT_BYTES + 1), ["a"], None, "answer_candidate"),
        ("好" * (MAX_TEXT_BYTES // 3 + 1), ["a"], None, "answer_candidate"),  # bytes, not chars
        ("ok", ["a"] * (MAX_FACTS + 1), None, "facts"),
        ("ok", ["a", "\n"], None, "facts[1].text"),
        ("ok", ["a", "b" * (MAX_TEXT_BYTES + 1)], None, "facts[1].text"),
        ("ok", ["a"], 1.5, "citation_threshold"),
        ("ok", ["a"], -0.1, "citation_threshold"),
        ("ok", ["a"], float("nan"), "citation_threshold"),
    ],
)
def test_requests_outside_the_limits_name_the_field(
    answer: str, facts: list[str], threshold: float | None, field: str
) -> None:
    with pytest.raises(InvalidArgument) as err:
        check_request(answer, facts, threshold)
    assert err.value.field == field


def test_an_absent_threshold_is_the_default_and_zero_is_kept() -> None:
    assert check_request("ok", ["a"], None) == DEFAULT_CITATION_THRESHOLD == 0.6
    assert check_request("ok", [], 0.0) == 0.0
    assert check_request("ok", ["a"] * MAX_FACTS, 1.0) == 1.0


def _verdict(index: int, score: float, cited: list[int], required: bool = True) -> ClaimVerdict:
    return ClaimVerdict(
        claim_index=index, grounding_check_required=required, score=score, citation_indices=cited
    )


def test_positions_are_utf8_bytes_and_citations_need_the_threshold() -> None:
    answer = "你好！丹瑾是衍射属性[1]。她来自天州[2]。"
    spans = claim_spans(answer)
    result = grounding(
        answer,
        spans,
        [_verdict(0, 0.0, [], required=False), _verdict(1, 1.0, [0]), _verdict(2, 0.3, [1])],
        threshold=0.6,
    )
    encoded = answer.encode()
    assert (
        [encoded[c.start_pos : c.end_pos].decode() for c in result.claims]
        == [c.claim_text for c in result.claims]
        == ["你好！", "丹瑾是衍射属性[1]。", "她来自天州[2]。"]
    )
    assert [c.citation_indices for c in result.claims] == [(), (0,), ()]
    assert [c.grounding_check_required for c in result.claims] == [False, True, True]
    assert result.support_score == pytest.approx(0.65)  # the two claims needing support


def test_the_support_score_is_zero_when_nothing_needs_support() -> None:
    assert support_score([_verdict(0, 0.0, [], required=False)]) == 0.0
    assert support_score([]) == 0.0


def test_the_gate_hands_out_a_claim_once_the_next_one_begins() -> None:
    gate = ClaimGate()
    assert gate.feed("Basic answers in 24 ho") == []
    assert gate.feed("urs[1]. ") == []  # the claim may still gain markers
    first = gate.feed("Premium")
    assert [(s.lead, s.claim) for s in first] == [("", "Basic answers in 24 hours[1].")]
    assert gate.feed(" in 4 hours. [2]") == []
    rest = gate.finish()
    assert [(s.lead, s.claim) for s in rest] == [(" ", "Premium in 4 hours. [2]")]
    assert rest[0].text(first=True) == "Premium in 4 hours. [2]"
    assert rest[0].text(first=False) == " Premium in 4 hours. [2]"
    assert gate.finish() == []  # nothing is handed out twice
