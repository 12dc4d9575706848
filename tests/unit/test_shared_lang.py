"""The one definition of Chinese text: which characters count and when a text is Chinese."""

from __future__ import annotations

import pytest

from shared.lang import CJK_CHAR, CJK_RUN, is_chinese


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("丹瑾的武器类型是什么？", True),
        ("asyncio.gather 的返回值顺序是什么", True),  # one English name in a Chinese question
        ("What does asyncio.gather return?", False),
        ("", True),  # no words of either language: no reason to leave Chinese
        ("水 water", True),  # a tie counts as Chinese
        ("水 water flows", False),
    ],
)
def test_is_chinese(text: str, expected: bool) -> None:
    assert is_chinese(text) is expected


def test_cjk_classes_share_one_range() -> None:
    assert CJK_CHAR.search("价格 price")
    assert not CJK_CHAR.search("price, ¥ 100 。")  # CJK punctuation is not a character
    assert CJK_RUN.findall("北京 Beijing 上海市") == ["北京", "上海市"]
    # The block's edges: U+4E00 and U+9FFF in, Extension A (U+3400…) and U+A000 out.
    assert [bool(CJK_CHAR.match(c)) for c in "\u4e00\u9fff\u3400\ua000"] == [
        True,
        True,
        False,
        False,
    ]
