"""Resource names of the evaluation API (AIP-122) and the ids inside them."""

from __future__ import annotations

import re
import secrets
import time
from typing import Final

from shared.errors import InvalidArgument

SET_ID: Final = re.compile(r"[a-z][a-z0-9-]{0,62}")
ITEM_ID: Final = re.compile(r"[A-Za-z0-9_.-]{1,128}")
_RUN_ID: Final = re.compile(r"[0-9a-f]{20}")


def new_id() -> str:
    """20 hex digits, time-ordered (as operation ids): a set, item or run made without one."""
    return f"{int(time.time() * 1000):012x}{secrets.token_hex(4)}"


def set_name(set_id: str) -> str:
    return f"evaluation_sets/{set_id}"


def item_name(set_id: str, item_id: str) -> str:
    return f"evaluation_sets/{set_id}/items/{item_id}"


def run_name(set_id: str, run_id: str) -> str:
    return f"evaluation_sets/{set_id}/runs/{run_id}"


def check_set_id(set_id: str, field: str) -> str:
    if not SET_ID.fullmatch(set_id):
        raise InvalidArgument(
            field, f"{set_id!r} is not a set id (1..63 of a-z, 0-9, '-', starting with a letter)"
        )
    return set_id


def check_item_id(item_id: str, field: str) -> str:
    if not ITEM_ID.fullmatch(item_id):
        raise InvalidArgument(
            field, f"{item_id!r} is not an item id (1..128 of A-Z, a-z, 0-9, '-', '_', '.')"
        )
    return item_id


def parse_set(name: str, field: str) -> str:
    """`evaluation_sets/{id}` → id; INVALID_ARGUMENT naming `field` otherwise."""
    parts = name.split("/")
    if len(parts) != 2 or parts[0] != "evaluation_sets" or not SET_ID.fullmatch(parts[1]):
        raise InvalidArgument(field, f"{name!r} is not an evaluation set (evaluation_sets/{{id}})")
    return parts[1]


def _parse_child(name: str, field: str, collection: str) -> tuple[str, str]:
    parts = name.split("/")
    valid = (
        len(parts) == 4
        and parts[0] == "evaluation_sets"
        and SET_ID.fullmatch(parts[1])
        and parts[2] == collection
        and (ITEM_ID if collection == "items" else _RUN_ID).fullmatch(parts[3])
    )
    if not valid:
        raise InvalidArgument(field, f"{name!r} is not evaluation_sets/{{set}}/{collection}/{{id}}")
    return parts[1], parts[3]


def parse_item(name: str, field: str) -> tuple[str, str]:
    return _parse_child(name, field, "items")


def parse_run(name: str, field: str) -> tuple[str, str]:
    return _parse_child(name, field, "runs")
