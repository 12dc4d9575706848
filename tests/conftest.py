"""Suite-wide settings: trace normalisation rejects unknown raw keys throughout the tests, so a
misspelt trace key written by a node fails a test instead of silently vanishing (production
drops such keys, docs/trace.md#normalisation)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from shared.normalize import strict_keys


@pytest.fixture(autouse=True, scope="session")
def _strict_trace_keys() -> Iterator[None]:
    with strict_keys():
        yield
