"""Answers a newcomer can trust (LOCAL_MODEL.md §2 and §4): the claim is the sentence or table
row that answers, never a heading, a table header or a title line; its citation quotes it
verbatim; a question about a name the evidence does not hold gets no answer."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator_service.answer import build_citations, clean_markers
from orchestrator_service.models.local.answer import (
    answer_pieces,
    is_title,
    rarity,
    stated_as_asked,
)
from orchestrator_service.models.local.grading import grade
from orchestrator_service.models.local.support import (
    absent_names,
    measure_coverage,
    question_names,
)
from orchestrator_service.models.local.text import key_terms, prepare_evidence

BAKERY = (
    "Aurelia Bakery staff handbook\n\nAurelia Bakery opens at 5:30 in the morning.\n\n"
    "Shift schedule\n\nShift | Lead | Hours\n\nMorning shift | Giulia Ferraro | 5:30 to 13:30\n\n"
    "Night baking | Ana Duarte | 22:00 to 6:00"
)
ROSTER_ZH = (
    "华东仓库值班安排\n\n班次 | 负责人 | 时间\n\n早班 | 李明 | 8:00至16:00\n\n"
    "晚班 | 王芳 | 16:00至24:00"
)
MARKDOWN_TABLE = "| Plan | Price |\n|---|---|\n| Basic | 9 dollars a month |\n| Pro | 29 dollars |"
TEAM_A = (
    "Field notes for team A\n\nThe secret code of team A is PELICAN. The captain is Rosa Mbeki."
)
KESTREL = "# Kestrel 2 drone\n\nThe Kestrel 2 drone flies for up to 31 minutes on one battery."
ZEPHYR = (
    "# Zephyr Widget user manual\n\n## Overview\n\nThe Zephyr Widget is a weather sensor.\n\n"
    "## Battery\n\nThe Zephyr Widget batteries last about 18 hours of continuous use.\n\n"
    "## Calibration\n\nTo calibrate the Zephyr Widget, hold the reset button for ten seconds."
)
FAQ = (
    "# Library FAQ\n\n**How many books can I borrow?**\nMembers can borrow up to eight books.\n\n"
    "**How long is the loan period?**\nThe standard loan period is three weeks."
)
REPORT = (
    "Northgate warehouse inspection report\nInspection findings\n"
    "The inspection took place on 12 March 2026.\nInspectors found three blocked fire exits."
)
HANDBOOK_ZH = (
    "# 员工手册\n\n## 年假\n\n入职满一年的员工每年享有十天带薪年假。年假须提前五个工作日申请。"
)


def doc(text: str, filename: str = "doc.md", rank: int = 1) -> dict[str, Any]:
    return {"text": text, "filename": filename, "score": 2 / (60 + rank), "rrf_rank": rank}


def answer(question: str, docs: list[dict[str, Any]]) -> str:
    return clean_markers("".join(answer_pieces(question, docs)), len(docs))


@pytest.mark.parametrize(
    ("question", "text", "expected"),
    [
        ("Who leads the morning shift?", BAKERY,
         "Morning shift — Lead: Giulia Ferraro; Hours: 5:30 to 13:30[1]."),
        ("Who leads the night baking?", BAKERY,
         "Night baking — Lead: Ana Duarte; Hours: 22:00 to 6:00[1]."),
        ("早班的负责人是谁？", ROSTER_ZH, "早班 — 负责人：李明；时间：8:00至16:00[1]。"),
        ("晚班是几点？", ROSTER_ZH, "晚班 — 负责人：王芳；时间：16:00至24:00[1]。"),
        ("What is the price of the Pro plan?", MARKDOWN_TABLE, "Pro — Price: 29 dollars[1]."),
    ],
)  # fmt: skip
def test_a_table_row_answers_by_its_cells_with_the_header_and_is_quoted_verbatim(
    question: str, text: str, expected: str
) -> None:
    docs = [doc(text)]
    written = answer(question, docs)
    assert written == expected
    (citation,) = build_citations(written, docs)
    row = expected.split(" — ")[0]
    assert citation.quote.strip("| ").startswith(row) and citation.quote in text
    assert "|" in citation.quote  # the row itself, not the header or a title


@pytest.mark.parametrize(
    ("question", "text", "sentence"),
    [
        ("What did the inspectors find?", REPORT, "Inspectors found three blocked fire exits."),
        ("How long is the loan period?", FAQ, "The standard loan period is three weeks."),
        ("How many books can I borrow?", FAQ, "Members can borrow up to eight books."),
        ("年假需要提前多久申请？", HANDBOOK_ZH, "年假须提前五个工作日申请。"),
    ],
)
def test_headings_titles_and_faq_questions_are_never_claims(
    question: str, text: str, sentence: str
) -> None:
    docs = [doc(text)]
    written = answer(question, docs)
    assert written.replace("[1]", "") == sentence
    (citation,) = build_citations(written, docs)
    assert citation.quote == sentence


@pytest.mark.parametrize(
    ("line", "title"),
    [
        ("Inspection findings", True),
        ("Aurelia Bakery staff handbook", True),
        ("华东仓库值班安排", True),
        ("一、充电", True),
        ("**How long is the loan period?**", True),
        ("What happens if I return a book late?", True),
        ("The sprinkler system passed all pressure tests.", False),
        ("手环每十分钟自动测量一次心率。", False),
        ("Forklift drivers should renew their safety training every two years", False),
    ],
)
def test_a_line_without_a_predicate_is_a_title(line: str, title: bool) -> None:
    assert is_title(line) is title


@pytest.mark.parametrize(
    ("question", "names"),
    [
        ("What is team B's secret code?", ["team B"]),
        ("How long can the Kestrel 3 drone fly?", ["Kestrel", "Kestrel 3"]),
        ("When does the first ferry to Heron Island leave?", ["Heron", "Island"]),
        # Quantities and acronyms are not names: "in 2001", "than 6 months", "(CKD)".
        ("Did 32% of programs require it in 2001?", []),
        ("Do deaths happen in newborns aged less than 6 months?", []),
        ("Does folic acid affect chronic kidney disease (CKD)?", []),
        ("What is an event loop?", []),
        ("云雀智能手环支持NFC支付吗？", ["NFC"]),
        ("华北仓库早班的负责人是谁？", ["华北"]),
        ("成年人每晚需要睡多久？", []),
    ],
)
def test_the_names_a_question_asks_about(question: str, names: list[str]) -> None:
    assert question_names(question) == names


@pytest.mark.parametrize(
    ("question", "text"),
    [
        ("What is team B's secret code?", TEAM_A),
        ("Who is the captain of team C?", TEAM_A),
        ("How long can the Kestrel 3 drone fly?", KESTREL),
        ("How long can the Falcon drone fly?", KESTREL),
    ],
)
def test_a_neighbour_of_the_name_asked_about_is_no_knowledge(question: str, text: str) -> None:
    evidence = prepare_evidence([doc(text)])
    coverage = measure_coverage(key_terms(question), evidence)
    assert absent_names(question, coverage, chinese=False)
    result = grade(question, [doc(text)])
    assert result.route == "no_knowledge" and "names not in the evidence" in result.reason


def test_the_name_asked_about_answers() -> None:
    assert grade("What is team A's secret code?", [doc(TEAM_A)]).route == "answer"
    assert grade("How long can the Kestrel 2 drone fly?", [doc(KESTREL)]).route == "answer"


def test_a_chinese_noun_no_chunk_holds_is_not_answered() -> None:
    # 产假 is the thing asked about; 年假 beside it does not answer.
    result = grade("星河科技员工手册的产假有多少天？", [doc(HANDBOOK_ZH)])
    assert result.route != "answer"
    assert grade("员工手册的年假有多少天？", [doc(HANDBOOK_ZH)]).route == "answer"


def test_sections_of_one_named_thing_are_not_several_things_to_choose_from() -> None:
    result = grade("How long do the Zephyr Widget batteries last?", [doc(ZEPHYR)])
    assert (result.route, result.ambiguity) == ("answer", "none")
    assert answer("How long do the Zephyr Widget batteries last?", [doc(ZEPHYR)]) == (
        "The Zephyr Widget batteries last about 18 hours of continuous use[1]."
    )


ROLES_EN = (
    "# Roles in Harbor Quest\n\n## Navigator\nThe Navigator is a support role. Its skill is Star "
    "Chart.\n\n## Quartermaster\nThe Quartermaster is a tank role. Its skill is Iron Hull.\n\n"
    "## Lookout\nThe Lookout is a ranged role. Its skill is Eagle Eye."
)
ROLES_ZH = (
    "# 《星海守望者》的角色\n\n## 丹瑾\n丹瑾是治疗角色，属性为水。\n\n"
    "## 赤羽\n赤羽是近战输出角色，属性为火。\n\n## 墨言\n墨言是远程辅助角色，属性为风。"
)


@pytest.mark.parametrize(
    ("choice", "option"),
    [
        ("2", "Quartermaster"),
        ("#2", "Quartermaster"),
        ("the second", "Quartermaster"),
        ("第二个", "Quartermaster"),
        ("B", "Quartermaster"),
        ("1", "Navigator"),
        ("the last", "Lookout"),
        ("3", "Lookout"),
    ],
)
def test_a_resume_answer_picks_the_option_at_its_place(choice: str, option: str) -> None:
    question = "What is the skill of this role?"
    docs = [doc(ROLES_EN, "harbor_quest_roles.en.md")]
    assert grade(question, docs).hitl_options == ["Navigator", "Quartermaster", "Lookout"]
    resumed = grade(f"{choice}：{question}", docs)
    assert resumed.route == "answer" and resumed.ambiguity == "none"
    written = answer(f"{choice}：{question}", docs)
    assert option in build_citations(written, docs)[0].quote or option in written


def test_a_chinese_resume_answer_by_place_and_an_out_of_range_one() -> None:
    docs = [doc(ROLES_ZH, "star_guardians_roles.zh.md")]
    assert grade("这个角色的属性是什么？", docs).hitl_options == ["丹瑾", "赤羽", "墨言"]
    assert grade("第二个：这个角色的属性是什么？", docs).route == "answer"
    assert "火" in answer("第二个：这个角色的属性是什么？", docs)
    # No fourth option: the choice stays as written and the grade asks again.
    assert grade("4：这个角色的属性是什么？", docs).route == "clarify"


@pytest.mark.parametrize(
    ("question", "statement"),
    [
        ("What is OpenSSH based on?", ("openssh is based on",)),
        (
            "What is the fixed parameter of bc's recursive multiplication?",
            ("the fixed parameter is",),
        ),
        ("What is an event loop?", ("an event loop is",)),
        (
            "Why does Debian reserve the 0-99 range?",
            ("the reason", "because", "due to", "so that", "in order to"),
        ),
        ("Who leads the night baking at Aurelia Bakery?", ()),
        ("成年人每晚需要睡多久？", ()),
    ],
)
def test_the_words_that_state_a_question_back(question: str, statement: tuple[str, ...]) -> None:
    assert stated_as_asked(question) == statement


def test_the_sentence_that_states_the_question_back_answers_it() -> None:
    docs = [
        {
            "filename": "README.txt",
            "text": "This version of OpenSSH is based upon code retrieved from the OpenBSD CVS "
            "repository.\n\nOpenSSH is based on the last free version of Tatu Ylonen's sample "
            "implementation.",
        }
    ]
    (lead,) = answer_pieces("What is OpenSSH based on?", docs)[:1]
    assert lead.startswith("OpenSSH is based on the last free version")


def test_a_word_a_few_sentences_share_still_weighs_near_a_rare_one() -> None:
    # BM25's idf over the candidate sentences: a second holder does not halve a word's
    # weight (as 1 / holders did), and a word every candidate holds weighs next to nothing.
    assert rarity(2, 8) > 0.6 * rarity(1, 8)
    assert rarity(3, 8) > 0.45 * rarity(1, 8)
    assert rarity(8, 8) < 0.1 * rarity(1, 8)
    assert rarity(1, 8) > rarity(2, 8) > rarity(3, 8) > rarity(8, 8) > 0


def test_the_sentence_holding_the_asked_words_leads_the_one_holding_a_rare_noun() -> None:
    # "removed" and "changed" are each said by another sentence too, "account" by one only:
    # at 1 / holders the account sentence outweighed the one stating what was asked.
    text = (
        "Tool notes\n\nThe tool keeps the system users consistent with the master list. "
        "root is never removed or changed. If it does not exist a root account is added. "
        "Stale home directories are removed by hand. Group names are changed only on request. "
        "Unused groups are removed at upgrade."
    )
    pieces = answer_pieces(
        "Does the tool ever remove or change the root account?",
        [{"text": text, "filename": "tool.txt"}],
    )
    assert pieces[0] == "root is never removed or changed[1]."
