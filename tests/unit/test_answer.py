"""The grounded-answer rules (orchestrator_service/answer.py) and the local model's extractive
answer: markers, their streamed filtering, quotes, the partial note, the prompt."""

from __future__ import annotations

import re

import pytest

from orchestrator_service.answer import (
    Citation,
    MarkerFilter,
    build_citations,
    choose_quote,
    clean_markers,
    partial_note,
)
from orchestrator_service.models.local.answer import answer_pieces
from orchestrator_service.models.prompts import answer_messages, question_of
from shared.sentences import sentence_spans, sentences, unwrap

DOCS = [
    {
        "filename": "sleep.md",
        "page_number": 1,
        "text": "# 睡眠\n\n成年人每晚需要七到九小时。熬夜伤身！",
    },
    {
        "filename": "loop.md",
        "page_number": "2",
        "text": "An event loop runs tasks. It is one thread.",
        "document_id": "guides/async/loop.md",
    },
]


def test_sentences_are_verbatim_spans_without_headings_or_bullets() -> None:
    text = "# Title\n\n- First point. Second one!\n2) 第三句。第四句\nVersion 3.11 is out."
    spans = sentence_spans(text)
    assert [text[a:b] for a, b in spans] == sentences(text)
    assert sentences(text) == [
        "First point.",
        "Second one!",
        "第三句。",
        "第四句",
        "Version 3.11 is out.",
    ]


@pytest.mark.parametrize(
    ("raw", "cleaned"),
    [
        ("A [1]. B [2].", "A [1]. B [2]."),
        ("A [3]. B [2].", "A. B [2]."),
        ("A [1, 9, 2]。", "A [1][2]。"),
        ("A[1，1、2]。", "A[1][2]。"),
        ("A [0] B [12]", "A B"),
        ("list[x] and a[0]", "list[x] and a"),
    ],
)
def test_markers_outside_the_docs_are_dropped(raw: str, cleaned: str) -> None:
    assert clean_markers(raw, 2) == cleaned


@pytest.mark.parametrize("size", [1, 2, 3, 5, 100])
def test_marker_filter_streams_exactly_the_cleaned_text(size: int) -> None:
    raw = "Loops run tasks [2]. Threads [7] are not used [1, 5]. Done [12]"
    markers = MarkerFilter(2)
    out = [markers.feed(raw[i : i + size]) for i in range(0, len(raw), size)]
    out.append(markers.finish())
    assert (
        "".join(out)
        == clean_markers(raw, 2)
        == "Loops run tasks [2]. Threads are not used [1]. Done"
    )


def test_quote_is_the_copied_sentence_or_the_closest_one() -> None:
    doc = DOCS[1]["text"]
    assert choose_quote("It is one thread", doc) == "It is one thread."
    assert choose_quote("Tasks are run by the event loop", doc) == "An event loop runs tasks."
    zh = DOCS[0]["text"]
    assert choose_quote("成年人需要睡七到九小时", zh) == "成年人每晚需要七到九小时。"


def test_citations_one_per_cited_doc_in_order_of_first_citation() -> None:
    text = "Loops run tasks [2]. 成年人每晚需要七到九小时[1]。One thread [2][1]."
    assert build_citations(text, DOCS) == (
        Citation(2, "loop.md", "2", "An event loop runs tasks.", "guides/async/loop.md"),
        # A doc without a document_id was ingested under its file name.
        Citation(1, "sleep.md", "1", "成年人每晚需要七到九小时。", "sleep.md"),
    )


def test_partial_note_names_the_missing_slots_in_the_question_language() -> None:
    assert "缺少关于版本、型号的信息。" in partial_note(["版本", "型号", "版本"], chinese=True)
    assert partial_note([], chinese=True) == "注意：现有资料只能部分回答这个问题。"
    assert partial_note(["version"], chinese=False).endswith("says nothing about version.")


def test_answer_prompt_carries_question_numbered_docs_and_missing_slots() -> None:
    messages = answer_messages("What runs tasks?", DOCS, ["version"])
    assert question_of(messages) == "What runs tasks?"
    user = messages[1]["content"]
    assert '<chunk index="2" source="loop.md" page="2">\nAn event loop runs tasks.' in user
    assert "[n]" not in messages[0]["content"] and "[1]" in messages[0]["content"]
    assert "lacks: version" in messages[0]["content"]


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        ("成年人每晚需要睡多久？", "成年人每晚需要七到九小时[1]。"),
        ("What does an event loop run?", "An event loop runs tasks[2]."),
    ],
)
def test_local_answer_extracts_cited_sentences_in_the_question_language(
    question: str, expected: str
) -> None:
    text = "".join(answer_pieces(question, DOCS))
    assert text == expected
    for claim, number in re.findall(r"(.+?)\[(\d+)\]\W*", text):
        assert claim.strip() in DOCS[int(number) - 1]["text"]


def test_local_answer_is_deterministic_and_covers_several_terms() -> None:
    docs = [{"text": "Cats sleep a lot. Dogs bark loudly."}, {"text": "Fish swim. Dogs also dig."}]
    first = answer_pieces("Do cats sleep and do dogs bark?", docs)
    assert first == answer_pieces("Do cats sleep and do dogs bark?", docs)
    assert "".join(first) == "Cats sleep a lot[1]. Dogs bark loudly[1]."


def test_sse_lines_and_completion_chunks_are_read_as_the_protocol_says() -> None:
    from orchestrator_service.models.remote import delta_content, sse_data
    from shared.errors import ModelOutputInvalid

    assert sse_data("data: [DONE]") == "[DONE]"
    assert sse_data(": keep-alive") is None and sse_data("event: x") is None
    assert delta_content('{"choices":[{"delta":{"content":"丹瑾[1]"}}]}') == "丹瑾[1]"
    assert delta_content('{"choices":[{"delta":{"role":"assistant"}}]}') == ""
    assert delta_content('{"choices":[],"usage":{"total_tokens":9}}') == ""
    with pytest.raises(ModelOutputInvalid, match="answer_generation"):
        delta_content("not json")


WRAPPED = """\
NAME
       grep, egrep, fgrep - print lines that match patterns

DESCRIPTION
       grep searches for PATTERNS in each FILE.  PATTERNS is one or more
       patterns separated by newline characters, and grep prints each line
       that matches a pattern.  Typically PATTERNS should be quoted when grep
       is used in a shell command.

The package was rewritten in 2019 to use the new parser, which reads
the configuration once at start-up and keeps it in memory for the rest
of the run.
- A list item stays on its line
- Another one.
"""


def test_hard_wrapped_paragraphs_keep_their_sentences_whole() -> None:
    found = [unwrap(s) for s in sentences(WRAPPED)]
    assert "grep searches for PATTERNS in each FILE." in found
    assert (
        "PATTERNS is one or more patterns separated by newline characters, and grep prints "
        "each line that matches a pattern." in found
    )
    assert "Typically PATTERNS should be quoted when grep is used in a shell command." in found
    assert (
        "The package was rewritten in 2019 to use the new parser, which reads the "
        "configuration once at start-up and keeps it in memory for the rest of the run."
    ) in found
    # Titles, short lines and list items keep their lines.
    assert "NAME" in found and "DESCRIPTION" in found
    assert "A list item stays on its line" in found and "Another one." in found
    # Spans stay verbatim: each sentence is text[start:end], its line breaks included.
    assert [WRAPPED[a:b] for a, b in sentence_spans(WRAPPED)] == sentences(WRAPPED)


def test_wrapped_chinese_joins_without_a_space_and_tables_keep_their_rows() -> None:
    text = (
        "本公司员工每年享有十五天带薪年假，入职未满一年的员工按照实际在职月份折算年假天数，\n"
        "并须提前五个工作日申请。\n"
        "| 假期 | 天数 |\n| 年假 | 15 |\n"
    )
    found = [unwrap(s) for s in sentences(text)]
    assert found[0] == (
        "本公司员工每年享有十五天带薪年假，入职未满一年的员工按照实际在职月份折算年假天数，"
        "并须提前五个工作日申请。"
    )
    assert "| 假期 | 天数 |" in found and "| 年假 | 15 |" in found


def test_a_quote_of_a_wrapped_sentence_is_the_whole_sentence() -> None:
    claim = "PATTERNS is one or more patterns separated by newline characters"
    quote = choose_quote(claim, WRAPPED)
    assert unwrap(quote) == (
        "PATTERNS is one or more patterns separated by newline characters, and grep prints "
        "each line that matches a pattern."
    )
