"""The free-text rule shared by Run/Resume questions and Retrieve queries."""

from __future__ import annotations

import pytest

from shared.errors import InvalidArgument
from shared.text_input import check_text


@pytest.mark.parametrize("text", ["茶多少度泡？", "line one\nline two\r\n\twith a tab", "a" * 10])
def test_ordinary_text_passes(text: str) -> None:
    check_text("question", text, 10 if text == "a" * 10 else 4000)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "must not be blank"),
        (" \t\n\u3000", "must not be blank"),
        ("a" * 11, "is 11 characters, at most 10"),
        ("tea\x00time", "U+0000"),
        ("tea\x1b[31m", "U+001B"),
        ("tea\x7f", "U+007F"),
        ("tea\x85", "U+0085"),
    ],
)
def test_bad_text_names_the_field(text: str, reason: str) -> None:
    with pytest.raises(InvalidArgument) as err:
        check_text("question", text, 10)
    assert err.value.field == "question"
    assert str(err.value).startswith("question: ") and reason in str(err.value)
