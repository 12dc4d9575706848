"""AIP-158 page sizes, one rule for every List RPC: 0 means the list's default, anything above
its maximum is the maximum, a negative size is INVALID_ARGUMENT naming `page_size`."""

from __future__ import annotations

from shared.errors import InvalidArgument


def page_size_of(page_size: int, *, default: int, maximum: int) -> int:
    if page_size < 0:
        raise InvalidArgument("page_size", f"must not be negative, got {page_size}")
    return min(page_size or default, maximum)
