"""Context formatting of evidence records (docs/api.md#the-context-text)."""

from __future__ import annotations

from shared.context_text import format_context


def test_empty_list_gives_empty_string() -> None:
    assert format_context([]) == ""


def test_layout_numbering_separator_and_fallbacks() -> None:
    docs = [
        {"filename": "handbook.pdf", "page_number": "3", "text": "年假五天。"},
        {"filename": "", "page_number": None, "text": "no source"},
        {"filename": "faq.md", "page_number": "0", "text": "zero page is a page"},
    ]

    assert format_context(docs) == (
        "[1] handbook.pdf (Page 3):\n年假五天。"
        "\n\n---\n\n"
        "[2] Unknown (Page N/A):\nno source"
        "\n\n---\n\n"
        "[3] faq.md (Page 0):\nzero page is a page"
    )
