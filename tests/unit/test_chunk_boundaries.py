"""The chunker cuts where the answerer reads a sentence to end (shared/sentences.py): a chunk
never ends inside a sentence that fits in it, nor at a line break inside a hard-wrapped
paragraph; headings, list items, table rows and code lines keep their lines; a sentence longer
than the chunk is still cut by size."""

from __future__ import annotations

import textwrap

import pytest

from retrieval_service.core.chunking import (
    ChunkingConfig,
    Page,
    Reading,
    chunk_document,
    split_spans,
    split_text,
)
from shared.sentences import sentence_spans, unwrap

Span = tuple[int, int]

ENGLISH = "\n\n".join(
    textwrap.fill(paragraph, 72)
    for paragraph in (
        "The scheduler runs every task on the worker that holds its data. When a worker fails, "
        "its tasks are moved to the next worker in the ring, and the data follows them from "
        "the replica. Retries back off exponentially! Why does the ring keep three replicas? "
        "Because two failures in the same minute are rare but not unheard of in a large "
        "cluster, and a third copy costs less than a lost day of work.",
        "Operators can drain a worker before maintenance. A drained worker finishes what it "
        "runs, accepts nothing new and reports itself idle, so the ring can be resized without "
        "losing a single task or copying any data twice.",
    )
)

_ZH = (
    "本公司员工每年享有十五天带薪年假，入职未满一年的员工按照实际在职月份折算年假天数。"
    "年假须提前五个工作日在人事系统中申请，并经直属主管批准后方可休假！"
    "未休完的年假可以顺延至次年第一季度，逾期未休的部分不再保留，也不折算为工资？"
    "因工作需要无法休假的员工，可以向人事部门申请延期，延期最长不超过六个月；"
    "延期申请须说明理由。",
    "病假须提供医院出具的诊断证明，连续病假超过三天的，须在返岗后两个工作日内补交材料。"
    "病假期间的工资按照国家和本市的有关规定发放，不低于最低工资标准的百分之八十。"
    "婚假、产假和陪产假按照国家规定执行，员工应当在休假前一个月告知直属主管！"
    "如有疑问，请联系人事部门的假期专员。",
    "加班须事先获得批准，工作日加班按小时计算，休息日加班优先安排调休。"
    "法定节假日加班的，按照不低于工资的百分之三百支付加班工资？"
    "调休须在加班后三个月内使用，逾期作废。",
)
# Chinese hard-wrapped at 36 characters (72 columns), as a terminal editor wraps it.
CHINESE = "\n\n".join(
    "\n".join(paragraph[i : i + 36] for i in range(0, len(paragraph), 36)) for paragraph in _ZH
)

MARKDOWN = """# Deploying the service

The service runs as two processes behind one load balancer, and each process
reads its settings from the environment at start-up. Nothing is read later.

## Steps

- Build the image with the pinned dependencies, then push it to the registry
  that the cluster pulls from.
- Apply the manifests.
- Wait for the readiness probe.

| Setting | Default | Meaning |
| --- | --- | --- |
| PORT | 50051 | the gRPC port |
| WORKERS | 4 | the worker threads |

```python
import os
port = int(os.environ.get("PORT", "50051"))
print(port)
```

The rollout is done when every replica reports ready. Roll back with the previous tag.
"""

# SciFact's corpus as the benchmark ingests it: the title, a blank line, the abstract on one line.
SCIFACT = (
    "Microstructural development of human newborn cerebral white matter assessed in vivo by "
    "diffusion tensor magnetic resonance imaging.\n\n"
    "Alterations of the architecture of cerebral white matter in the developing human brain "
    "can affect cortical development and result in functional disabilities. A line scan "
    "diffusion-weighted magnetic resonance imaging (MRI) sequence with diffusion tensor "
    "analysis was applied to measure the apparent diffusion coefficient, to calculate "
    "relative anisotropy, and to delineate three-dimensional fiber architecture in cerebral "
    "white matter in preterm (n = 17) and full-term infants (n = 7). To assess effects of "
    "prematurity on cerebral white matter development, early gestation preterm infants "
    "(n = 10) were studied a second time at term. In the central white matter the mean "
    "apparent diffusion coefficient at 28 wk was high, 1.8 microm2/ms, and decreased toward "
    "term to 1.2 microm2/ms. In the posterior limb of the internal capsule, the mean apparent "
    "diffusion coefficients at both times were similar (1.2 versus 1.1 microm2/ms). Relative "
    "anisotropy was higher the closer birth was to term with greater absolute values in the "
    "internal capsule than in the central white matter. Preterm infants at term showed "
    "higher mean diffusion coefficients in the central white matter (1.4 +/- 0.24 versus "
    "1.15 +/- 0.09 microm2/ms, p = 0.016) and lower relative anisotropy in both areas "
    "compared with full-term infants (white matter, 10.9 +/- 0.6 versus 22.9 +/- 3.0%, "
    "p = 0.001; internal capsule, 24.0 +/- 4.44 versus 33.1 +/- 0.6% p = 0.006). "
    "Nonmyelinated fibers in the corpus callosum were visible by diffusion tensor MRI as "
    "early as 28 wk; full-term and preterm infants at term showed marked differences in "
    "white matter fiber organization. The data indicate that quantitative assessment of "
    "water diffusion by diffusion tensor MRI provides insight into microstructural "
    "development in cerebral white matter in living infants."
)

TEXTS = {"english": ENGLISH, "chinese": CHINESE, "markdown": MARKDOWN, "scifact": SCIFACT}


def pieces(text: str, size: int, overlap: int) -> list[Span]:
    return list(split_spans(text, Reading.of(text), size, overlap))


def cut_inside(spans: list[Span], at: int) -> Span | None:
    """The sentence `at` falls strictly inside, if any."""
    return next(((a, b) for a, b in spans if a < at < b), None)


def assert_cut_at_sentence_boundaries(text: str, chunks: list[Span], size: int) -> None:
    sentences = sentence_spans(text)
    fitting = [(a, b) for a, b in sentences if b - a <= size]
    for a, b in chunks:
        assert 0 < b - a <= size
        assert text[a:b] == text[a:b].strip()
        assert cut_inside(fitting, a) is None, (
            f"starts inside {text[slice(*cut_inside(fitting, a))]!r}"
        )
        assert cut_inside(fitting, b) is None, (
            f"ends inside {text[slice(*cut_inside(fitting, b))]!r}"
        )


@pytest.mark.parametrize("name", sorted(TEXTS))
@pytest.mark.parametrize(("size", "overlap"), [(60, 0), (120, 20), (200, 50), (300, 100)])
def test_chunks_start_and_end_where_sentences_do(name: str, size: int, overlap: int) -> None:
    text = TEXTS[name]
    chunks = pieces(text, size, overlap)
    assert len(text) > size and len(chunks) >= 2  # something was cut
    assert_cut_at_sentence_boundaries(text, chunks, size)
    # Nothing is lost: every sentence lies in some chunk, whole when it fits.
    for a, b in sentence_spans(text):
        if b - a <= size:
            assert any(s <= a and b <= e for s, e in chunks), text[a:b]
        else:
            assert any(s < b and a < e for s, e in chunks), text[a:b]


@pytest.mark.parametrize("name", sorted(TEXTS))
def test_every_level_of_a_document_cuts_where_the_page_does(name: str) -> None:
    """L2 and L3 pieces are cut by the page's reading, not by the reading of their parent's
    text alone (whose first line may be the short tail of a wrapped one)."""
    text = TEXTS[name].strip()
    config = ChunkingConfig.from_chunk_size(70, 15, floors=False)  # L1 210, L2 140, L3 70
    chunks = chunk_document("doc.txt", "Text", [Page(0, text)], config)
    by_id = {c.chunk_id: c for c in chunks}
    for level in (1, 2, 3):
        spans = []
        for chunk in (c for c in chunks if c.chunk_level == level):
            at = text.find(chunk.text)
            assert at >= 0 and text.rfind(chunk.text) == at  # verbatim, and found only there
            spans.append((at, at + len(chunk.text)))
        assert_cut_at_sentence_boundaries(text, spans, config.level(level).size)
    for leaf in (c for c in chunks if c.chunk_level == 3):
        assert leaf.text in by_id[leaf.parent_chunk_id].text
        assert by_id[leaf.parent_chunk_id].text in by_id[leaf.root_chunk_id].text


def test_a_wrapped_paragraph_is_one_chunk_when_it_fits() -> None:
    """Its line breaks are no cut: a chunk the size of the paragraph holds all of it, and
    smaller chunks end with a sentence's mark, never at the end of a wrapped line."""
    first = ENGLISH.split("\n\n")[0]
    assert first.count("\n") >= 4
    assert split_text(first, len(first), 0) == [first]
    chunks = split_text(ENGLISH, 200, 0)
    assert all(chunk[-1] in ".!?" for chunk in chunks)
    assert any("\n" in chunk for chunk in chunks)  # wrapped lines are kept verbatim
    assert "Retries back off exponentially! Why does the ring keep three replicas?" in [
        unwrap(chunk) for chunk in chunks
    ] or any("Retries back off exponentially!" in unwrap(chunk) for chunk in chunks)


def test_chinese_wrapped_lines_are_no_cut_but_its_sentences_are() -> None:
    chunks = split_text(CHINESE, 60, 0)
    assert all(chunk[-1] in "。！？；" for chunk in chunks)
    # The first sentence (41 characters) crosses a line break and stays whole.
    first = "本公司员工每年享有十五天带薪年假，入职未满一年的员工按照实际在职月份折算年假天数。"
    assert unwrap(chunks[0]) == first
    assert "".join(unwrap(chunk) for chunk in chunks) == "".join(_ZH)


def test_markdown_headings_items_rows_and_code_keep_their_lines() -> None:
    whole = [
        "# Deploying the service",
        "## Steps",
        "- Apply the manifests.",
        "| Setting | Default | Meaning |",
        "| PORT | 50051 | the gRPC port |",
        "| WORKERS | 4 | the worker threads |",
        'port = int(os.environ.get("PORT", "50051"))',
    ]
    # Even small chunks hold each of these lines whole (the prose sentence of 129 characters
    # is the one thing cut at 60).
    chunks = split_text(MARKDOWN, 60, 0)
    assert all(any(line in chunk for chunk in chunks) for line in whole)
    assert "| PORT | 50051 | the gRPC port |" in chunks  # a row is never joined mid-way
    # When every sentence fits, a chunk starts at a line's or a sentence's start and ends at a
    # line's or a sentence's end; a list item keeps its wrapped continuation.
    lines = {line.strip() for line in MARKDOWN.splitlines()}
    chunks = split_text(MARKDOWN, 140, 0)
    for chunk in chunks:
        assert chunk.splitlines()[0].strip() in lines or chunk[0].isupper(), chunk
        assert chunk.splitlines()[-1].strip() in lines or chunk[-1] in ".!?", chunk
    item = (
        "- Build the image with the pinned dependencies, then push it to the registry\n"
        "  that the cluster pulls from."
    )
    assert any(item in chunk for chunk in chunks)


def test_a_one_line_abstract_is_cut_between_sentences_not_words() -> None:
    """The old splitter cut SciFact's one-line abstracts at a space once they passed the
    chunk size; now each chunk is whole sentences (or the title)."""
    title = SCIFACT.split("\n\n")[0]
    chunks = split_text(SCIFACT, 600, 100)
    assert chunks[0].startswith(title)
    assert all(chunk[-1] == "." for chunk in chunks)
    assert {s for s in (SCIFACT[a:b] for a, b in sentence_spans(SCIFACT)) if len(s) <= 600} <= {
        s for chunk in chunks for s in (chunk[a:b] for a, b in sentence_spans(chunk))
    }
    assert len(chunks) >= 3


def test_a_sentence_longer_than_the_chunk_is_still_cut_by_size() -> None:
    sentence = " ".join(f"word{i:03d}" for i in range(60)) + "."  # 480 characters, one sentence
    chunks = split_text(sentence, 100, 0)
    assert len(chunks) == 5 and all(len(c) <= 100 for c in chunks)
    assert " ".join(chunks) == sentence  # cut between words
    chinese = "这是一个没有任何标点的很长的句子" * 10  # 160 characters, no mark at all
    chunks = split_text(chinese, 50, 0)
    assert [len(c) for c in chunks] == [50, 50, 50, 10]
    assert "".join(chunks) == chinese
    # Clause marks come before characters.
    clauses = "，".join(["第一个分句的内容比较长一些"] * 8) + "。"
    assert all(c.endswith(("，", "。")) for c in split_text(clauses, 40, 0))


def test_overlap_carries_whole_sentences() -> None:
    text = "One two. Three four. Five six. Seven eight."
    assert split_text(text, 25, 12) == [
        "One two. Three four.",
        "Three four. Five six.",
        "Five six. Seven eight.",
    ]
