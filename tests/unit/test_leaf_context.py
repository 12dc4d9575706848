"""Contextual leaf headers: what the embedder and BM25 read for a leaf is
its document title and section path, then the leaf; the stored text stays the leaf."""

from __future__ import annotations

from dataclasses import replace

from retrieval_service.core.chunking import ChunkingConfig, Page, chunk_document
from retrieval_service.core.leaf_context import (
    MAX_HEADER_CHARS,
    leaf_header,
    markdown_headings,
    page_contexts,
    with_header,
)

SMALL = ChunkingConfig.from_chunk_size(80, 10, floors=False, context_header=True)
TITLE = "Vitamin D and bone density in adults"
ABSTRACT = " ".join(f"Sentence {i} reports a measured effect on the cohort." for i in range(12))


def leaves(filename: str, file_type: str, pages: list[Page], config: ChunkingConfig = SMALL):
    return [c for c in chunk_document(filename, file_type, pages, config) if c.chunk_level == 3]


def test_text_title_heads_every_leaf_but_the_one_holding_it() -> None:
    found = leaves("a.txt", "Text", [Page(0, f"{TITLE}\n\n{ABSTRACT}")])
    assert len(found) > 3
    assert found[0].text.startswith(TITLE) and found[0].context == ""
    for leaf in found[1:]:
        assert leaf.context == TITLE
        assert leaf.embedded_text == f"{TITLE}\n\n{leaf.text}"
        assert TITLE not in leaf.text  # the stored text is the leaf alone


def test_disabled_header_leaves_the_embedded_text_alone() -> None:
    assert not ChunkingConfig.from_chunk_size().context_header  # off unless configured
    config = replace(SMALL, context_header=False)
    for leaf in leaves("a.txt", "Text", [Page(0, f"{TITLE}\n\n{ABSTRACT}")], config):
        assert leaf.context == "" and leaf.embedded_text == leaf.text


def test_a_long_first_line_or_a_one_line_document_is_no_title() -> None:
    assert {c.context for c in leaves("a.txt", "Text", [Page(0, ABSTRACT)])} == {""}
    prose = "x" * 250 + "\n\n" + ABSTRACT
    assert {c.context for c in leaves("b.txt", "Text", [Page(0, prose)])} == {""}


def test_markdown_section_path_follows_the_heading_levels() -> None:
    body = " ".join(["install the package and check its version"] * 4)
    md = (
        "# Guide\n\nintro\n\n## Install\n\n"
        + body
        + "\n\n### Linux\n\n"
        + body
        + "\n\n## Usage\n\n"
        + body
        + "\n\n```\n# not a heading\n```\n"
        + body
    )
    by_text = [(c.context, c.text) for c in leaves("g.md", "Markdown", [Page(0, md)])]
    contexts = [ctx for ctx, text in by_text if text.startswith("install")]
    assert contexts[0] == "Guide › Install"
    assert "Guide › Install › Linux" in contexts
    assert "Guide › Usage" in contexts
    assert all("not a heading" not in ctx for ctx, _ in by_text)
    # A leaf that opens with its heading carries the path above it, not the heading twice.
    opening = next(ctx for ctx, text in by_text if text.startswith("### Linux"))
    assert opening == "Guide › Install"


def test_markdown_headings_skip_fenced_code() -> None:
    text = "# A\n\n```\n## B\n```\n\n## C #\n"
    assert [(h.level, h.text) for h in markdown_headings(text)] == [(1, "A"), (2, "C")]


def test_html_sections_are_its_h2_pages() -> None:
    pages = [Page(0, f"{TITLE}\n\n{ABSTRACT}"), Page(1, f"Methods\n\n{ABSTRACT}")]
    found = leaves("p.html", "HTML", pages)
    methods = [c for c in found if c.page_number == "1"]
    assert methods[0].context == TITLE  # the page's first leaf holds "Methods" itself
    assert {c.context for c in methods[1:]} == {f"{TITLE} › Methods"}


def test_header_is_bounded_and_unknown_offsets_get_the_title_only() -> None:
    context = page_contexts("Markdown", [(0, "# " + "t" * 150 + "\n\n## " + "s" * 190 + "\n\nx")])[
        0
    ]
    assert len(leaf_header(context, 10_000, 10_001)) <= MAX_HEADER_CHARS
    assert leaf_header(context, None, 0) == "t" * 150
    assert with_header("", "leaf") == "leaf"
