"""Evaluation sets read from what people bring: BEIR's queries.jsonl and qrels TSV (or TREC
qrels), and the project's own JSON Lines. Every refusal is an InvalidArgument naming the input,
the line and the field."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from orchestrator_service.evaluation.model import Item, RelevantDocument, Turn
from shared.errors import InvalidArgument

#: What one evaluation set may hold: a run costs a model call or more per item.
MAX_ITEMS = 10_000
MAX_QUESTION_BYTES = 32 * 1024
MAX_GRADE = 100
#: The final routes a run can end in (docs/trace.md#routes-and-statuses); `rewrite` is not one.
ROUTES = frozenset({"answer", "clarify", "scope_select", "no_knowledge"})
_ITEM_KEYS = frozenset(
    {"question", "history", "relevant", "reference_answer", "expected_route", "tags", "id"}
)
_RELEVANT_KEYS = frozenset({"document_id", "knowledge_base", "grade"})
_TURN_KEYS = frozenset({"question", "answer"})
_INTEGER = re.compile(r"-?[0-9]+")


@dataclass(frozen=True, slots=True)
class ParsedItems:
    items: tuple[Item, ...]
    #: Queries without a qrels line: BEIR's queries.jsonl holds every split's queries.
    skipped_queries: int


def parse_beir(queries_jsonl: bytes, qrels_tsv: bytes) -> ParsedItems:
    """BEIR's layout: queries.jsonl lines `{"_id", "text", …}` (other keys ignored) and a qrels
    file of `query-id<TAB>corpus-id<TAB>score` lines under an optional `query-id` header, or
    TREC's `qid 0 docid grade`. One item per query with at least one qrels line, in the
    queries' order, its documents in qrels order (knowledge base "": the set searches one)."""
    queries: dict[str, tuple[int, str]] = {}
    for number, line in _lines(queries_jsonl, "queries"):
        record = _json_object(line, "queries", number)
        query_id = record.get("_id")
        if isinstance(query_id, int) and not isinstance(query_id, bool):
            query_id = str(query_id)
        if not isinstance(query_id, str) or not query_id:
            raise InvalidArgument("queries", f"line {number}: _id must be a non-empty string")
        if query_id in queries:
            first = queries[query_id][0]
            raise InvalidArgument(
                "queries", f"line {number}: _id {_quote(query_id)} repeats line {first}"
            )
        text = record.get("text")
        if not isinstance(text, str) or not text.strip():
            raise InvalidArgument("queries", f"line {number}: text must be a non-empty string")
        _check_question_size(text, "queries", number, "text")
        queries[query_id] = (number, text)

    judged: dict[str, dict[str, int]] = {}
    for position, (number, line) in enumerate(_lines(qrels_tsv, "qrels")):
        if position == 0 and line.startswith("query-id"):
            continue
        query_id, document_id, grade = _qrels_fields(line, number)
        if query_id not in queries:
            raise InvalidArgument(
                "qrels", f"line {number}: query {_quote(query_id)} is not in queries"
            )
        documents = judged.setdefault(query_id, {})
        if document_id in documents:
            raise InvalidArgument(
                "qrels",
                f"line {number}: document {_quote(document_id)} is judged twice for query "
                f"{_quote(query_id)}",
            )
        documents[document_id] = grade

    if len(judged) > MAX_ITEMS:
        raise InvalidArgument("qrels", f"judges more than {MAX_ITEMS} queries")
    items = tuple(
        Item(
            question=text,
            relevant=tuple(
                RelevantDocument(document_id=document_id, grade=grade)
                for document_id, grade in judged[query_id].items()
            ),
            item_id=query_id,
        )
        for query_id, (_, text) in queries.items()
        if query_id in judged
    )
    return ParsedItems(items=items, skipped_queries=len(queries) - len(items))


def _qrels_fields(line: str, number: int) -> tuple[str, str, int]:
    # A tab-separated line keeps spaces inside ids; TREC's form is whitespace-separated.
    fields = [f.strip() for f in line.split("\t")] if "\t" in line else line.split()
    if len(fields) == 3:
        query_id, document_id, grade_text = fields
    elif len(fields) == 4:
        query_id, _, document_id, grade_text = fields
    else:
        raise InvalidArgument(
            "qrels",
            f"line {number}: expected query-id, corpus-id and score separated by tabs, or "
            f"`qid 0 docid grade`; found {len(fields)} fields",
        )
    if not query_id or not document_id:
        raise InvalidArgument("qrels", f"line {number}: query-id and corpus-id must not be empty")
    return query_id, document_id, _grade_of_text(grade_text, number)


def _grade_of_text(text: str, number: int) -> int:
    # Not int() alone: it would also take "+1", "1_0" and non-ASCII digits.
    if not _INTEGER.fullmatch(text):
        raise InvalidArgument("qrels", f"line {number}: grade {_quote(text)} is not an integer")
    grade = int(text)
    _check_grade(grade, "qrels", number)
    return grade


def _check_grade(grade: int, field: str, number: int) -> None:
    if not 0 <= grade <= MAX_GRADE:
        raise InvalidArgument(
            field, f"line {number}: grade {grade} is outside 0..{MAX_GRADE} (0 = not relevant)"
        )


def parse_jsonl(data: bytes) -> list[Item]:
    """The project's evaluation set: one JSON object a line, `{"question": str (required),
    "history": [{"role", "content"}], "relevant": [{"document_id", "knowledge_base"?,
    "grade"? = 1}], "reference_answer": str, "expected_route": str, "tags": [str], "id": str}`.
    Blank lines are skipped; an unknown key is refused, so a misspelt one cannot silently
    drop a judgement."""
    items: list[Item] = []
    seen_ids: dict[str, int] = {}
    for number, line in _lines(data, "items"):
        if len(items) == MAX_ITEMS:
            raise InvalidArgument("items", f"line {number}: more than {MAX_ITEMS} items")
        record = _json_object(line, "items", number)
        item = _item(record, number)
        if item.item_id:
            if item.item_id in seen_ids:
                raise InvalidArgument(
                    "items",
                    f"line {number}: id {_quote(item.item_id)} repeats line "
                    f"{seen_ids[item.item_id]}",
                )
            seen_ids[item.item_id] = number
        items.append(item)
    return items


def _item(record: dict[str, Any], number: int) -> Item:
    _check_keys(record, _ITEM_KEYS, number, "")
    question = record.get("question")
    if not isinstance(question, str) or not question.strip():
        raise InvalidArgument("items", f"line {number}: question must be a non-empty string")
    _check_question_size(question, "items", number, "question")
    expected_route = _string(record, "expected_route", number)
    if expected_route and expected_route not in ROUTES:
        raise InvalidArgument(
            "items",
            f"line {number}: expected_route {_quote(expected_route)} is not one of "
            f"{', '.join(sorted(ROUTES))} (or empty)",
        )
    return Item(
        question=question,
        history=tuple(_turn(turn, number) for turn in _list(record, "history", number)),
        relevant=tuple(_relevant(r, number) for r in _list(record, "relevant", number)),
        reference_answer=_string(record, "reference_answer", number),
        expected_route=expected_route,
        tags=tuple(_tag(tag, number) for tag in _list(record, "tags", number)),
        item_id=_string(record, "id", number),
    )


def _turn(value: object, number: int) -> Turn:
    if not isinstance(value, dict):
        raise InvalidArgument("items", f"line {number}: each history entry must be an object")
    _check_keys(value, _TURN_KEYS, number, "history.")
    question, answer = value.get("question"), value.get("answer", "")
    if not isinstance(question, str) or not question.strip():
        raise InvalidArgument(
            "items", f"line {number}: history.question must be a non-blank string"
        )
    if not isinstance(answer, str):
        raise InvalidArgument("items", f"line {number}: history.answer must be a string")
    return Turn(question=question, answer=answer)


def _relevant(value: object, number: int) -> RelevantDocument:
    if not isinstance(value, dict):
        raise InvalidArgument("items", f"line {number}: each relevant entry must be an object")
    _check_keys(value, _RELEVANT_KEYS, number, "relevant.")
    document_id = value.get("document_id")
    if not isinstance(document_id, str) or not document_id:
        raise InvalidArgument(
            "items", f"line {number}: relevant.document_id must be a non-empty string"
        )
    knowledge_base = value.get("knowledge_base", "")
    if not isinstance(knowledge_base, str):
        raise InvalidArgument("items", f"line {number}: relevant.knowledge_base must be a string")
    grade = value.get("grade", 1)
    # bool is an int in Python, but `true` is no grade.
    if not isinstance(grade, int) or isinstance(grade, bool):
        raise InvalidArgument("items", f"line {number}: relevant.grade must be an integer")
    _check_grade(grade, "items", number)
    return RelevantDocument(document_id=document_id, knowledge_base=knowledge_base, grade=grade)


def _tag(value: object, number: int) -> str:
    if not isinstance(value, str):
        raise InvalidArgument("items", f"line {number}: tags must be strings")
    return value


def _check_keys(record: dict[str, Any], allowed: frozenset[str], number: int, path: str) -> None:
    unknown = sorted(set(record) - allowed)
    if unknown:
        raise InvalidArgument("items", f"line {number}: unknown key {_quote(path + unknown[0])}")


def _string(record: dict[str, Any], key: str, number: int) -> str:
    value = record.get(key, "")
    if not isinstance(value, str):
        raise InvalidArgument("items", f"line {number}: {key} must be a string")
    return value


def _list(record: dict[str, Any], key: str, number: int) -> list[Any]:
    value = record.get(key, [])
    if not isinstance(value, list):
        raise InvalidArgument("items", f"line {number}: {key} must be a list")
    return value


def _check_question_size(text: str, field: str, number: int, key: str) -> None:
    if len(text.encode()) > MAX_QUESTION_BYTES:
        raise InvalidArgument(
            field, f"line {number}: {key} is longer than {MAX_QUESTION_BYTES // 1024} KiB"
        )


def _lines(data: bytes, field: str) -> Iterator[tuple[int, str]]:
    """The non-blank lines with their 1-based numbers (blank lines still count)."""
    try:
        # utf-8-sig: a file saved by a Windows editor starts with a byte-order mark.
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        where = data[: e.start].count(b"\n") + 1
        raise InvalidArgument(field, f"line {where}: not UTF-8 text") from None
    # Not str.splitlines: JSON strings may hold U+2028 and other separators it splits on.
    for number, line in enumerate(text.split("\n"), 1):
        if line.strip():
            yield number, line.rstrip("\r")


def _json_object(line: str, field: str, number: int) -> dict[str, Any]:
    try:
        value = json.loads(line)
    except json.JSONDecodeError as e:
        raise InvalidArgument(field, f"line {number}: not valid JSON ({e.msg})") from None
    if not isinstance(value, dict):
        raise InvalidArgument(field, f"line {number}: not a JSON object")
    return value


def _quote(value: str) -> str:
    # Quoted and cut short: the message leaves the process as status details.
    return json.dumps(value if len(value) <= 80 else value[:77] + "…", ensure_ascii=False)
