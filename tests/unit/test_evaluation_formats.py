"""Reading evaluation sets: BEIR queries and qrels (TSV and TREC form), the project's JSON
Lines, and each refusal naming its input, line and field."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from orchestrator_service.evaluation.formats import (
    MAX_ITEMS,
    MAX_QUESTION_BYTES,
    ParsedItems,
    parse_beir,
    parse_jsonl,
)
from orchestrator_service.evaluation.model import Item, RelevantDocument, Turn
from shared.errors import InvalidArgument

#: The whole SciFact beside the checkout, as the benches find it (bench/_retrieval_rig.py);
#: absent on a machine without it (then only the slice in tests/data is read).
SCIFACT = Path(
    os.environ.get(
        "SCIFACT_DIR", Path(__file__).resolve().parents[3] / "shared" / "data" / "scifact"
    )
)
SCIFACT_SMALL = Path(__file__).resolve().parents[1] / "data" / "scifact-small"

QUERIES = b"\n".join(
    json.dumps(q).encode()
    for q in (
        {"_id": "q1", "text": "What is BM25?", "metadata": {"x": 1}},
        {"_id": "q2", "text": "Unjudged question"},
        {"_id": "q3", "text": "什么是向量检索？", "title": "ignored"},
    )
)


def _jsonl(*records: object) -> bytes:
    return b"\n".join(json.dumps(r, ensure_ascii=False).encode() for r in records)


def _refusal(call: object, *args: bytes) -> str:
    assert callable(call)
    with pytest.raises(InvalidArgument) as raised:
        call(*args)
    return str(raised.value)


# BEIR


def test_beir_queries_with_tab_separated_qrels() -> None:
    qrels = b"query-id\tcorpus-id\tscore\nq3\tdoc 9\t2\nq1\td1\t1\nq1\td0\t0\n"

    parsed = parse_beir(QUERIES, qrels)

    assert parsed == ParsedItems(
        items=(
            Item(
                question="What is BM25?",
                relevant=(RelevantDocument("d1", "", 1), RelevantDocument("d0", "", 0)),
                item_id="q1",
            ),
            # A tab-separated id keeps its space.
            Item(
                question="什么是向量检索？",
                relevant=(RelevantDocument("doc 9", "", 2),),
                item_id="q3",
            ),
        ),
        skipped_queries=1,
    )


def test_beir_qrels_in_trec_form_without_a_header() -> None:
    qrels = b"q2 0 d7 3\r\n\r\nq2 0 d8 100\r\n"

    parsed = parse_beir(QUERIES, qrels)

    assert [i.item_id for i in parsed.items] == ["q2"]
    assert parsed.items[0].relevant == (
        RelevantDocument("d7", "", 3),
        RelevantDocument("d8", "", 100),
    )
    assert parsed.skipped_queries == 2


def test_beir_numeric_query_ids_are_read_as_strings() -> None:
    parsed = parse_beir(b'{"_id": 7, "text": "seven"}', b"7\td\t1")
    assert parsed.items[0].item_id == "7"


@pytest.mark.parametrize(
    ("qrels", "message"),
    [
        (b"q1\td1\tx", 'qrels: line 1: grade "x" is not an integer'),
        (
            b"query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td2\t1.5",
            'qrels: line 3: grade "1.5" is not an integer',
        ),
        (b"q1\td1\t-1", "qrels: line 1: grade -1 is outside 0..100"),
        (b"q1\td1\t101", "qrels: line 1: grade 101 is outside 0..100"),
        (b"q1\td1\t+1", 'qrels: line 1: grade "+1" is not an integer'),
        (b"q1\td1\t1\n\nq9\td1\t1", 'qrels: line 3: query "q9" is not in queries'),
        (b"q1\td1", "qrels: line 1: expected query-id, corpus-id and score"),
        (b"q1 0 d1 1 extra", "qrels: line 1: expected query-id, corpus-id and score"),
        (b"q1\t\t1", "qrels: line 1: query-id and corpus-id must not be empty"),
        (b"q1\td1\t1\nq1\td1\t2", 'qrels: line 2: document "d1" is judged twice for query "q1"'),
        (b"q1\td1\t\xff", "qrels: line 1: not UTF-8 text"),
    ],
)
def test_beir_refuses_bad_qrels(qrels: bytes, message: str) -> None:
    assert _refusal(parse_beir, QUERIES, qrels).startswith(message)


@pytest.mark.parametrize(
    ("queries", "message"),
    [
        (b'{"_id": "q1", "text": "ok"}\n{"_id": "q2", "text": ', "queries: line 2: not valid JSON"),
        (b'{"_id": "q1", "text": "ok"}\n\n["q2"]', "queries: line 3: not a JSON object"),
        (b'{"_id": "q1", "text": "  "}', "queries: line 1: text must be a non-empty string"),
        (b'{"_id": "q1"}', "queries: line 1: text must be a non-empty string"),
        (b'{"text": "no id"}', "queries: line 1: _id must be a non-empty string"),
        (
            b'{"_id": "q1", "text": "a"}\n{"_id": "q1", "text": "b"}',
            'queries: line 2: _id "q1" repeats line 1',
        ),
        (
            json.dumps({"_id": "q1", "text": "x" * (MAX_QUESTION_BYTES + 1)}).encode(),
            "queries: line 1: text is longer than 32 KiB",
        ),
    ],
)
def test_beir_refuses_bad_queries(queries: bytes, message: str) -> None:
    assert _refusal(parse_beir, queries, b"q1\td1\t1").startswith(message)


def test_beir_refuses_more_than_ten_thousand_judged_queries() -> None:
    count = MAX_ITEMS + 1
    queries = b"\n".join(b'{"_id": "%d", "text": "q"}' % i for i in range(count))
    qrels = b"\n".join(b"%d\td\t1" % i for i in range(count))

    assert _refusal(parse_beir, queries, qrels) == f"qrels: judges more than {MAX_ITEMS} queries"


@pytest.mark.parametrize(
    ("folder", "items", "judgements"), [(SCIFACT_SMALL, 24, None), (SCIFACT, 809, 919)]
)
def test_the_scifact_training_set_parses_to_one_item_per_judged_query(
    folder: Path, items: int, judgements: int | None
) -> None:
    if not folder.exists():
        pytest.skip(f"{folder} is not on this machine")
    queries = (folder / "queries.jsonl").read_bytes()
    qrels = (folder / "qrels" / "train.tsv").read_bytes()
    judged = [line.split("\t") for line in qrels.decode().splitlines()[1:] if line]
    judged_ids = {row[0] for row in judged}
    query_ids = [json.loads(line)["_id"] for line in queries.decode().splitlines() if line]

    parsed = parse_beir(queries, qrels)

    assert len(parsed.items) == len(set(query_ids) & judged_ids) == items
    assert parsed.skipped_queries == len(query_ids) - len(parsed.items)
    assert sum(len(item.relevant) for item in parsed.items) == (judgements or len(judged))
    assert all(item.question and item.item_id for item in parsed.items)


# JSON Lines


def test_jsonl_reads_every_field_and_skips_blank_lines() -> None:
    data = (
        _jsonl(
            {
                "id": "i1",
                "question": "和上次一样吗？",
                "history": [
                    {"question": "What is BM25?", "answer": "A ranking function."},
                ],
                "relevant": [
                    {"document_id": "d1", "knowledge_base": "kb", "grade": 2},
                    {"document_id": "d2"},
                ],
                "reference_answer": "Yes.",
                "expected_route": "answer",
                "tags": ["follow-up", "zh"],
            },
        )
        + b"\n\n   \n"
        + _jsonl({"question": "Only a question"})
        + b"\n"
    )

    items = parse_jsonl(data)

    assert items == [
        Item(
            question="和上次一样吗？",
            history=(Turn("What is BM25?", "A ranking function."),),
            relevant=(RelevantDocument("d1", "kb", 2), RelevantDocument("d2", "", 1)),
            reference_answer="Yes.",
            expected_route="answer",
            tags=("follow-up", "zh"),
            item_id="i1",
        ),
        Item(question="Only a question"),
    ]


@pytest.mark.parametrize("route", ["answer", "clarify", "scope_select", "no_knowledge", ""])
def test_jsonl_accepts_every_final_route(route: str) -> None:
    assert (
        parse_jsonl(_jsonl({"question": "q", "expected_route": route}))[0].expected_route == route
    )


def test_jsonl_of_nothing_is_no_items() -> None:
    assert parse_jsonl(b"") == []
    assert parse_jsonl(b"\n\n") == []


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ({"question": "q", "answer": "x"}, 'items: line 2: unknown key "answer"'),
        (
            {"question": "q", "relevant": [{"document_id": "d", "score": 1}]},
            'items: line 2: unknown key "relevant.score"',
        ),
        (
            {"question": "q", "history": [{"question": "x", "text": "x"}]},
            'items: line 2: unknown key "history.text"',
        ),
        ({"tags": []}, "items: line 2: question must be a non-empty string"),
        ({"question": ""}, "items: line 2: question must be a non-empty string"),
        ({"question": 3}, "items: line 2: question must be a non-empty string"),
        (
            {"question": "x" * (MAX_QUESTION_BYTES + 1)},
            "items: line 2: question is longer than 32 KiB",
        ),
        # Bytes, not characters: 11,000 three-byte characters are over 32 KiB.
        ({"question": "问" * 11_000}, "items: line 2: question is longer than 32 KiB"),
        (
            {"question": "q", "expected_route": "rewrite"},
            'items: line 2: expected_route "rewrite" is not one of',
        ),
        (
            {"question": "q", "expected_route": None},
            "items: line 2: expected_route must be a string",
        ),
        (
            {"question": "q", "history": [{"question": " ", "answer": "x"}]},
            "items: line 2: history.question must be a non-blank string",
        ),
        (
            {"question": "q", "history": [{"question": "x", "answer": 1}]},
            "items: line 2: history.answer must be a string",
        ),
        (
            {"question": "q", "history": ["hi"]},
            "items: line 2: each history entry must be an object",
        ),
        ({"question": "q", "history": {"question": "x"}}, "items: line 2: history must be a list"),
        (
            {"question": "q", "relevant": ["d1"]},
            "items: line 2: each relevant entry must be an object",
        ),
        (
            {"question": "q", "relevant": [{"grade": 1}]},
            "items: line 2: relevant.document_id must be a non-empty string",
        ),
        (
            {"question": "q", "relevant": [{"document_id": "d", "knowledge_base": 1}]},
            "items: line 2: relevant.knowledge_base must be a string",
        ),
        (
            {"question": "q", "relevant": [{"document_id": "d", "grade": "2"}]},
            "items: line 2: relevant.grade must be an integer",
        ),
        (
            {"question": "q", "relevant": [{"document_id": "d", "grade": True}]},
            "items: line 2: relevant.grade must be an integer",
        ),
        (
            {"question": "q", "relevant": [{"document_id": "d", "grade": 1.5}]},
            "items: line 2: relevant.grade must be an integer",
        ),
        (
            {"question": "q", "relevant": [{"document_id": "d", "grade": -1}]},
            "items: line 2: grade -1 is outside 0..100",
        ),
        ({"question": "q", "tags": "a"}, "items: line 2: tags must be a list"),
        ({"question": "q", "tags": [1]}, "items: line 2: tags must be strings"),
        (
            {"question": "q", "reference_answer": ["a"]},
            "items: line 2: reference_answer must be a string",
        ),
        ({"question": "q", "id": 5}, "items: line 2: id must be a string"),
        ({"question": "q", "id": "first"}, 'items: line 2: id "first" repeats line 1'),
        (["question"], "items: line 2: not a JSON object"),
    ],
)
def test_jsonl_refuses_bad_items(record: object, message: str) -> None:
    data = _jsonl({"question": "fine", "id": "first"}, record)
    assert _refusal(parse_jsonl, data).startswith(message)


def test_jsonl_refuses_bad_json_and_bad_text() -> None:
    assert _refusal(parse_jsonl, b'{"question": "q"}\n{"question": }').startswith(
        "items: line 2: not valid JSON"
    )
    assert _refusal(parse_jsonl, b'\n{"question": "\xff"}').startswith(
        "items: line 2: not UTF-8 text"
    )


def test_jsonl_holds_at_most_ten_thousand_items() -> None:
    line = b'{"question": "q"}\n'
    assert len(parse_jsonl(line * MAX_ITEMS)) == MAX_ITEMS
    assert _refusal(parse_jsonl, line * (MAX_ITEMS + 1)) == (
        f"items: line {MAX_ITEMS + 1}: more than {MAX_ITEMS} items"
    )


def test_a_question_of_exactly_32_kib_is_accepted() -> None:
    assert parse_jsonl(_jsonl({"question": "x" * MAX_QUESTION_BYTES}))[0].question
