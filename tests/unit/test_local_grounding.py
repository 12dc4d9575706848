"""The local `check_grounding` (LOCAL_MODEL.md §7) as a table: a claim, its facts, and the
verdict — supported (score ≥ 0.6), unsupported, or no check — one row per rule, in en and zh;
and the whole hand-labelled set (tests/data/grounding) at claim-level accuracy ≥ 0.9."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator_service.grounding import DEFAULT_CITATION_THRESHOLD, claim_spans
from orchestrator_service.models.base import ClaimToCheck
from orchestrator_service.models.local.grounding import check

LEAVE = (
    "Staff who have worked here for one year get 20 days of paid annual leave. Up to five "
    "unused days may be carried over, and must be used before the end of March. Staff should "
    "book leave at least two weeks ahead where possible."
)
PLANS = [
    "Starter plan: tickets opened in the help centre are answered within two business days. "
    "Starter plan customers can add up to three users.",
    "Business plan customers get a named support engineer and a monthly usage report.",
]
CLI = (
    "quill reads notes from standard input and prints them sorted by date.\n"
    "With --dry-run, quill prints what it would change instead of writing the files. "
    "Without --force, existing files are kept and not overwritten."
)
QUOTA = "Each project may send up to 300 messages per hour. The upload limit is 25 MB per file."
RELEASE = (
    "Version 5.1.0 (released 3 April 2026)\n"
    "- Dropped support for Node 16.\n"
    "- Added an export to CSV."
)
ZH_LEAVE = (
    "员工入职满两年后，每年享有12天带薪年假。未休年假最多可结转3天，须在次年6月30日前使用。"
    "请假需至少提前2个工作日在系统中申请。"
)
ZH_PLANS = [
    "标准版账户每月可导出 10 次报表，单次导出上限为 5000 行。",
    "旗舰版账户支持单点登录和操作审计。",
]
ZH_DEVICE = "水箱容量为1.5升，建议每周清洗一次。设备运行时请勿移动机身，以免漏水。"
ZH_SESSION = "会话闲置超过 600 秒后会被自动注销。如果所有席位都已占用，新用户需要排队等待。"

CASES = [
    # supported: verbatim, paraphrase, inflection, spelled numbers, equivalent units, two sentences
    ("supported", "en", "Staff who have worked here for one year get 20 days of paid annual leave.",
     [LEAVE]),
    ("supported", "en", "Unused leave of up to 5 days can be carried over.", [LEAVE]),
    ("supported", "en", "On the Starter plan, tickets opened in the help centre get an answer "
     "within two business days.", PLANS),
    ("supported", "en", "Without --force, existing files are not overwritten.", [CLI]),
    ("supported", "en", "Version 5.1.0 dropped support for Node 16.", [RELEASE]),
    ("supported", "en", "Each project can send 300 messages per hour, and each file may be up "
     "to 25 MB.", [QUOTA]),
    ("supported", "zh", "入职满两年的员工每年有12天带薪年假。", [ZH_LEAVE]),
    ("supported", "zh", "水箱容量为1500毫升。", [ZH_DEVICE]),
    ("supported", "zh", "当所有席位都被占用时，新用户需要排队。", [ZH_SESSION]),
    ("supported", "en", "Support for Node 16 was dropped in version 5.1.0.", [RELEASE]),
    ("supported", "en", "Each project may send no more than 300 messages per hour.", [QUOTA]),
    ("supported", "en", "Staff should book leave at least two weeks in advance where possible.",
     [LEAVE]),
    ("supported", "en", "Unused days that are carried over must be used before the end of March.",
     [LEAVE]),
    ("supported", "zh", "v5.1.0 移除了对 Node 16 的支持。",
     ["v5.1.0（2026年4月3日发布）\n- 移除对 Node 16 的支持。\n- 新增 CSV 导出。"]),
    # unsupported: not mentioned, sibling entity
    ("unsupported", "en", "quill can read notes from a URL.", [CLI]),
    ("unsupported", "en", "Business plan customers can add up to three users.", PLANS),
    ("unsupported", "en", "Starter plan customers can also get support by phone.", PLANS),
    ("unsupported", "zh", "旗舰版账户每月可导出 10 次报表。", ZH_PLANS),
    ("unsupported", "zh", "标准版账户支持单点登录。", ZH_PLANS),
    # partly: an added clause, a universal word the fact lacks
    ("partly", "en", "Up to five unused days may be carried over and are paid out in cash.",
     [LEAVE]),
    ("partly", "en", "Staff must always book leave at least two weeks ahead.", [LEAVE]),
    ("partly", "zh", "所有员工每年都享有12天带薪年假。", [ZH_LEAVE]),
    ("partly", "zh", "水箱容量为1.5升，并且可以放入洗碗机清洗。", [ZH_DEVICE]),
    ("partly", "en", "Each project may send up to 300 messages", ["Each project may send up to "
     "300 messages if it is on a paid plan."]),
    # number_changed: a number, a unit
    ("number_changed", "en", "Staff who have worked here for one year get 25 days of paid "
     "annual leave.", [LEAVE]),
    ("number_changed", "en", "Each project may send up to 300 messages per minute.", [QUOTA]),
    ("number_changed", "en", "The upload limit is 25 GB per file.", [QUOTA]),
    ("number_changed", "zh", "会话闲置超过 600 分钟后会被自动注销。", [ZH_SESSION]),
    ("number_changed", "zh", "未休年假最多可结转5天。", [ZH_LEAVE]),
    ("number_changed", "en", "The upload limit is 25 MB per project.", [QUOTA]),
    ("number_changed", "zh", "每次导出上限为 5000 美元。", ZH_PLANS),
    ("number_changed", "en", "Files under 25 MB cannot be uploaded.", ["Files over 25 MB cannot be "
     "uploaded."]),
    ("number_changed", "zh", "会话闲置低于 600 秒后会被自动注销。", [ZH_SESSION]),
    # negation: the claim denies what the fact states, or states what it denies
    ("negation", "en", "Annual leave is unpaid.", [LEAVE]),
    ("negation", "en", "Without --force, existing files are overwritten.", [CLI]),
    ("negation", "en", "Version 5.1.0 still supports Node 16.", [RELEASE]),
    ("negation", "zh", "设备运行时可以移动机身。", [ZH_DEVICE]),
    ("negation", "zh", "会话闲置后不会被自动注销。", [ZH_SESSION]),
    ("negation", "zh", "未休年假不能结转到次年。", [ZH_LEAVE]),
    ("negation", "en", "Version 5.1.0 removed the export to CSV.", [RELEASE]),
    ("negation", "en", "Booking leave two weeks ahead is optional.",
     ["Booking leave two weeks ahead is mandatory."]),
    ("negation", "en", "Reports are sent weekly.", ["Reports are sent daily."]),
    # no_check: greetings, lead-ins, notes on the evidence
    ("no_check", "en", "Sure, here is what I found.", [LEAVE]),
    ("no_check", "en", "Here is a summary of the release notes:", [RELEASE]),
    ("no_check", "zh", "好的，以下是相关信息。", [ZH_LEAVE]),
]  # fmt: skip

EXPECTED = {"supported": "supported", "no_check": "no_check"}


def _label(claim: str, facts: list[str]) -> str:
    """The verdict as the bench reads it: no claim needs a check, all are supported, or not."""
    claims = [span.to_check(claim, len(facts)) for span in claim_spans(claim)]
    verdicts = [
        v for v in check(claims, facts, DEFAULT_CITATION_THRESHOLD) if v.grounding_check_required
    ]
    if not verdicts:
        return "no_check"
    supported = all(v.score >= DEFAULT_CITATION_THRESHOLD for v in verdicts)
    return "supported" if supported else "unsupported"


@pytest.mark.parametrize(("kind", "lang", "claim", "facts"), CASES)
def test_claim_verdict_by_kind(kind: str, lang: str, claim: str, facts: list[str]) -> None:
    assert _label(claim, facts) == EXPECTED.get(kind, "unsupported")


def test_citations_are_the_supporting_facts_best_first() -> None:
    facts = [QUOTA, "Unrelated: the office opens at nine.", QUOTA.replace("300", "400")]
    [verdict] = check([ClaimToCheck("The upload limit is 25 MB per file.")], facts, 0.6)
    assert verdict.grounding_check_required
    assert verdict.score == 1.0
    assert verdict.citation_indices == [0, 2]


def test_a_claim_is_checked_against_the_facts_it_cites_only() -> None:
    facts = ["The office opens at nine.", QUOTA]
    claim = "Each project may send up to 300 messages per hour."
    [cited_wrong] = check([ClaimToCheck(claim, cited=(0,))], facts, 0.6)
    [cited_right] = check([ClaimToCheck(claim, cited=(1,))], facts, 0.6)
    assert cited_wrong.score < 0.6 and cited_wrong.citation_indices == []
    assert cited_right.citation_indices == [1]


def test_the_labelled_set_reaches_the_target_accuracy() -> None:
    path = Path(__file__).resolve().parents[1] / "data" / "grounding" / "claims.jsonl"
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    hits = sum(_label(row["claim"], row["facts"]) == row["label"] for row in rows)
    assert hits / len(rows) >= 0.9


def test_without_facts_a_claim_is_unsupported_and_cites_nothing() -> None:
    claim = ClaimToCheck("The upload limit is 25 MB per file.", cited=(4,))
    assert check([claim], [], 0.6)[0].model_dump() == {
        "claim_index": 0,
        "grounding_check_required": True,
        "score": 0.0,
        "citation_indices": [],
    }
    [cited_outside] = check([claim], [QUOTA], 0.6)
    assert cited_outside.score == 0.0 and cited_outside.citation_indices == []
