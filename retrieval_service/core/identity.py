"""Names and identities a request carries (docs/api.md#knowledge-bases): knowledge-base names
(`knowledge_bases/{id}`, the bare id accepted, "" = the default), document ids and document
metadata, each checked with an `InvalidArgument` naming its field. Metadata is kept in one
canonical form (sorted keys, integral numbers as integers) so equal metadata fingerprints
equally."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from shared.access import ACL_KEY, DEFAULT_KB_ID, KB_PREFIX
from shared.errors import InvalidArgument

DEFAULT_KB = KB_PREFIX + DEFAULT_KB_ID
KB_ID = re.compile(r"[a-z][a-z0-9-]{0,62}")
DOCUMENT_ID = re.compile(r"[A-Za-z0-9._/:-]{1,512}")
METADATA_KEY = re.compile(r"[a-z_][a-z0-9_]{0,63}")
MAX_METADATA_KEYS = 32
MAX_METADATA_BYTES = 8 * 1024
#: Integers beyond this are not exact as a JSON double: they stay floats.
_EXACT_INT = 2**53

Metadata = dict[str, Any]


def check_kb_id(kb_id: str, field: str) -> str:
    if not KB_ID.fullmatch(kb_id):
        raise InvalidArgument(field, f"{kb_id!r} is not an id matching [a-z][a-z0-9-]{{0,62}}")
    return kb_id


def kb_name(text: str, field: str) -> str:
    """The full name `knowledge_bases/{id}` of what a request names: the full name, the bare
    id, or "" (the default)."""
    if not text:
        return DEFAULT_KB
    kb_id = text[len(KB_PREFIX) :] if text.startswith(KB_PREFIX) else text
    return KB_PREFIX + check_kb_id(kb_id, field)


def kb_id_of(name: str) -> str:
    return name[len(KB_PREFIX) :]


def check_document_id(document_id: str, field: str) -> str:
    if not DOCUMENT_ID.fullmatch(document_id):
        raise InvalidArgument(field, "must be 1 to 512 characters of letters, digits and . _ / : -")
    return document_id


def _value(value: Any, field: str) -> Any:
    if isinstance(value, bool | str):
        return value
    if isinstance(value, int | float):
        number = float(value)
        if not math.isfinite(number):
            raise InvalidArgument(field, "must be a finite number")
        if number.is_integer() and abs(number) < _EXACT_INT:
            return int(number)
        return number
    if isinstance(value, list | tuple):
        if not all(isinstance(v, str) for v in value):
            raise InvalidArgument(field, "a list must hold strings only")
        return list(value)
    raise InvalidArgument(field, "must be a string, number, boolean or list of strings")


def check_metadata(metadata: Mapping[str, Any] | None, field: str) -> Metadata:
    """The canonical form of a document's metadata ({} for none): at most 32 keys matching
    `[a-z_][a-z0-9_]{0,63}`, values strings, numbers, booleans or lists of strings, at most
    8 KiB as canonical JSON; `acl`, reserved, a list of group names."""
    if not metadata:
        return {}
    if len(metadata) > MAX_METADATA_KEYS:
        raise InvalidArgument(field, f"has {len(metadata)} keys, at most {MAX_METADATA_KEYS}")
    out: Metadata = {}
    for key in sorted(metadata):
        if not isinstance(key, str) or not METADATA_KEY.fullmatch(key):
            raise InvalidArgument(field, f"key {key!r} does not match [a-z_][a-z0-9_]{{0,63}}")
        out[key] = _value(metadata[key], f"{field}.{key}")
        if key == ACL_KEY and not isinstance(out[key], list):
            # Reserved: the document's access groups (docs/api.md#document-access).
            raise InvalidArgument(f"{field}.{key}", "must be a list of group names")
    size = len(canonical_json(out).encode())
    if size > MAX_METADATA_BYTES:
        raise InvalidArgument(field, f"is {size} bytes as JSON, at most {MAX_METADATA_BYTES}")
    return out


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
