"""The names of a knowledge base's indexes (docs/api.md#indexes),
`knowledge_bases/{knowledge_base_id}/indexes/{index_id}`, as both services' callers write them:
the form is checked here, whether the index exists and is READY is retrieval's to say."""

from __future__ import annotations

import re
from typing import Final

from shared.access import KB_PREFIX

#: The segment between a knowledge base's name and an index id.
INDEXES_SEGMENT: Final = "/indexes/"
#: Both ids follow the same rule: `[a-z][a-z0-9-]{0,62}`.
_ID = r"[a-z][a-z0-9-]{0,62}"
INDEX_NAME: Final = re.compile(rf"{KB_PREFIX}(?P<kb>{_ID}){INDEXES_SEGMENT}(?P<index>{_ID})")
#: What an InvalidArgument about a malformed index name says after the field.
NAME_RULE: Final = "must be knowledge_bases/{kb}/indexes/{id}, each id [a-z][a-z0-9-]{0,62}"


def is_index_name(text: str) -> bool:
    """Whether `text` is a well-formed `knowledge_bases/{kb}/indexes/{id}`."""
    return INDEX_NAME.fullmatch(text) is not None


def index_kb_id(name: str) -> str:
    """The knowledge base id of a well-formed index name (ValueError otherwise)."""
    match = INDEX_NAME.fullmatch(name)
    if match is None:
        raise ValueError(f"{name!r} is not knowledge_bases/{{kb}}/indexes/{{id}}")
    return match["kb"]


def index_kb_name(name: str) -> str:
    """`knowledge_bases/{kb}` of a well-formed index name (ValueError otherwise)."""
    return KB_PREFIX + index_kb_id(name)
