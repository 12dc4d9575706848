"""Sanitising, three-level splitting and the id scheme (docs/api.md#documents-and-chunks), and
the loaders."""

from __future__ import annotations

import io
import random
import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st

from retrieval_service.adapters.loaders import load_pages
from retrieval_service.core.chunking import ChunkingConfig, Page, chunk_document, split_text
from retrieval_service.core.file_types import resolve_file_type
from retrieval_service.core.ingest import validate_filename
from retrieval_service.core.sanitize import sanitize_text
from shared.errors import InvalidArgument


def test_sanitize_removes_invisible_control_and_private_use() -> None:
    raw = "Cafe\u0301\u200b \ufeffa\u202eb\x00c\x07\td\ne\r\x7f\ue000f\ud800g"
    assert sanitize_text(raw) == "Café ab" + "c\td\ne\rfg"


def test_a_long_text_sanitises_by_segments_as_it_would_whole() -> None:
    """Segments end after a line feed; combining marks, stripped characters and CRLFs on
    either side of a cut come out as if the text had been sanitised at once."""
    rng = random.Random(5)
    alphabet = ["e", "\u0301", "\u0327", "\n", "\r\n", "\u200b", "A", "\u212b", "한", "\ue000", " "]
    for _ in range(300):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 120)))
        whole = unicodedata.normalize("NFC", text)
        whole = "".join(c for c in whole if c not in "\u200b\ue000")
        assert sanitize_text(text, segment_chars=rng.randint(1, 12)) == whole
    clean = "plain line\n" * 50
    assert sanitize_text(clean, segment_chars=7) is clean  # nothing to change: no copy


def test_default_sizes_follow_the_reference_formulas() -> None:
    cfg = ChunkingConfig.from_chunk_size()
    assert [(lv.size, lv.overlap) for lv in (cfg.l1, cfg.l2, cfg.l3)] == [
        (2400, 400),
        (1600, 200),
        (800, 100),
    ]
    small = ChunkingConfig.from_chunk_size(100, 10)
    assert (small.l1.size, small.l2.size, small.l3.size) == (2000, 1000, 600)
    assert ChunkingConfig.from_chunk_size(1000, 150).l1 == type(cfg.l1)(3000, 450)


def test_separator_priority_paragraph_then_full_stop() -> None:
    text = "第一句话。第二句话。\n\n第三句话。第四句话。"
    assert split_text(text, 12, 0) == ["第一句话。第二句话。", "第三句话。第四句话。"]
    assert split_text("一二三四。五六七八。九十", 6, 0) == [
        "一二三四。",
        "五六七八。",
        "九十",
    ]


def test_overlap_carries_trailing_pieces() -> None:
    pieces = split_text("aa bb cc dd ee ff", 8, 3)
    # "aa " "bb " … are 3 characters each with the separator kept at their end; a chunk
    # keeps up to 3 characters of its predecessor, and "dd ee ff" is exactly 8.
    assert pieces == ["aa bb", "bb cc", "cc dd", "dd ee ff"]


@given(st.text(alphabet="ab 。\n，", min_size=0, max_size=400), st.integers(5, 60))
def test_pieces_never_exceed_size_and_cover_the_text(text: str, size: int) -> None:
    pieces = split_text(text, size, size // 4)
    assert all(0 < len(p) <= size for p in pieces)
    compact = "".join(ch for ch in text if not ch.isspace())
    joined = "".join(ch for p in pieces for ch in p if not ch.isspace())
    # Every non-space character survives, in order (overlap may repeat some).
    it = iter(joined)
    assert all(ch in it for ch in compact)


def test_hierarchy_ids_and_chunk_idx() -> None:
    cfg = ChunkingConfig.from_chunk_size(20, 0, floors=False)  # L1 60, L2 40, L3 20
    text = "。".join(f"句子{i:02d}内容" for i in range(12)) + "。"
    pages = [Page(0, text), Page(1, "   "), Page(2, "短页。")]
    chunks = chunk_document("doc.md", "Markdown", pages, cfg)
    by_id = {c.chunk_id: c for c in chunks}
    assert len(by_id) == len(chunks)
    assert [c.chunk_idx for c in chunks] == list(range(len(chunks)))
    assert {c.page_number for c in chunks} == {"0", "2"}  # the blank page yields nothing
    for c in chunks:
        filename, page, level, n = c.chunk_id.split("::")
        assert (filename, page, level) == ("doc.md", f"p{c.page_number}", f"l{c.chunk_level}")
        assert n.isdigit()
        if c.chunk_level == 1:
            assert c.parent_chunk_id == "" and c.root_chunk_id == c.chunk_id
        else:
            parent = by_id[c.parent_chunk_id]
            assert parent.chunk_level == c.chunk_level - 1
            assert c.root_chunk_id == (parent.root_chunk_id)
            assert c.text in parent.text
            assert parent.chunk_idx < c.chunk_idx
    levels = [c.chunk_level for c in chunks]
    assert levels[0] == 1 and levels.count(3) >= levels.count(2) >= levels.count(1) >= 2
    first_l3 = [c.chunk_id for c in chunks if c.chunk_level == 3 and c.page_number == "0"]
    assert first_l3[:3] == ["doc.md::p0::l3::0", "doc.md::p0::l3::1", "doc.md::p0::l3::2"]
    # Depth first: L1, then its first L2, then that L2's leaves.
    assert levels[:3] == [1, 2, 3]


def test_repeated_page_numbers_keep_ids_unique() -> None:
    cfg = ChunkingConfig.from_chunk_size(20, 0, floors=False)
    chunks = chunk_document("a.docx", "Word", [Page(0, "甲。乙。"), Page(0, "丙。丁。")], cfg)
    ids = [c.chunk_id for c in chunks]
    assert len(ids) == len(set(ids))
    assert "a.docx::p0::l1::1" in ids


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("notes.txt", True),
        ("报告 2026.PDF", True),
        ('O\'Reilly "quoted".md', True),
        ("page.htm", True),
        ("", False),
        (" lead.txt", False),
        ("a/b.txt", False),
        ("a\\b.txt", False),
        ("..txt", False),
        ("x..y.txt", False),
        ("tab\there.txt", False),
        ("rtl\u202e.txt", False),
        ("sheet.xlsx", False),
        ("README", False),
        ("x" * 252 + ".txt", False),
    ],
)
def test_filename_validation(name: str, ok: bool) -> None:
    if ok:
        validate_filename(name, "f")
    else:
        with pytest.raises(InvalidArgument, match=r"^f: "):
            validate_filename(name, "f")


def test_file_type_inference_and_declaration() -> None:
    assert resolve_file_type("a.MD", None, "t") == "Markdown"
    assert resolve_file_type("a.htm", None, "t") == "HTML"
    assert resolve_file_type("a.txt", "PDF", "t") == "PDF"
    assert resolve_file_type("a.txt", ".docx", "t") == "Word"
    with pytest.raises(InvalidArgument, match=r"^t: unsupported"):
        resolve_file_type("a.txt", "xlsx", "t")


def test_loaders_text_html_docx() -> None:
    assert load_pages("\ufeffhello\u200b world  ".encode(), "Text", "c")[0].text == "hello world"
    html = (
        b"<html><head><style>p{}</style></head><body><p>Intro <b>bold</b></p>"
        b"<script>alert(1)</script><h2>One</h2><p>alpha</p><ul><li>beta</li></ul>"
        b"<h2>Two</h2><div><p>gamma</p></div></body></html>"
    )
    pages = load_pages(html, "HTML", "c")
    assert [(p.number, p.text) for p in pages] == [
        (0, "Intro bold"),
        (1, "One\n\nalpha\n\nbeta"),
        (2, "Two\n\ngamma"),
    ]
    import docx

    document = docx.Document()
    document.add_paragraph("第一段")
    document.add_paragraph("second paragraph")
    buf = io.BytesIO()
    document.save(buf)
    assert load_pages(buf.getvalue(), "Word", "c")[0].text == "第一段\n\nsecond paragraph"


def test_corrupt_content_is_invalid_argument() -> None:
    for file_type in ("PDF", "Word"):
        with pytest.raises(InvalidArgument, match=r"^documents\[0\]\.content: cannot parse"):
            load_pages(b"garbage", file_type, "documents[0].content")
    with pytest.raises(InvalidArgument, match="not UTF-8"):
        load_pages(b"\xff\xfe\xfa", "Text", "c")
