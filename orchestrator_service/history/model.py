"""The run-history records as the core sees them, and run ids (UUIDv7: time-ordered, so the
newest runs sort last and a page of history is an index range)."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, Final

#: `runs/{id}`: a UUID in its canonical text form.
RUN_NAME_PREFIX: Final = "runs/"


def uuid7(now_ms: int | None = None) -> str:
    """A UUIDv7 (RFC 9562): 48 bits of Unix milliseconds, the version, 74 random bits."""
    ms = (int(time.time() * 1000) if now_ms is None else now_ms) & ((1 << 48) - 1)
    random = int.from_bytes(os.urandom(10), "big")
    rand_a, rand_b = random >> 68, random & ((1 << 62) - 1)
    value = ms << 80 | 0x7 << 76 | rand_a << 64 | 0b10 << 62 | rand_b
    # str(uuid.UUID(int=value)) spelled out: the same text without building and checking a
    # UUID object on every Run.
    digits = f"{value:032x}"
    return f"{digits[:8]}-{digits[8:12]}-{digits[12:16]}-{digits[16:20]}-{digits[20:]}"


class Rating(IntEnum):
    """Feedback.Rating's numbers."""

    RATING_UNSPECIFIED = 0
    THUMBS_UP = 1
    THUMBS_DOWN = 2


#: Feedback.Reason's names, by number.
REASONS: Final = {
    1: "WRONG_ANSWER",
    2: "BAD_CITATION",
    3: "MISSING_INFORMATION",
    4: "NOT_RELEVANT",
    5: "OUTDATED",
    6: "OTHER",
}


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    """One Run or Resume as recorded."""

    run_id: str
    kind: str  # "run" | "resume"
    question: str
    standalone_question: str
    knowledge_bases: tuple[str, ...]  # ids
    filter: str
    route: str
    retrieval_status: str
    answer: str
    cited_document_ids: tuple[str, ...]
    rag_trace: Mapping[str, Any] | None
    key_id: str
    create_time_ms: int
    end_time_ms: int
    feedback_rating: Rating = Rating.RATING_UNSPECIFIED


@dataclass(frozen=True, slots=True)
class FeedbackRecord:
    run_id: str
    id: str
    rating: Rating
    reasons: tuple[int, ...] = ()
    comment: str = ""
    expected_document_ids: tuple[str, ...] = ()
    corrected_answer: str = ""
    question: str = ""
    answer: str = ""
    key_id: str = ""
    create_time_ms: int = 0
    #: The knowledge bases of its run (ids); empty for feedback on a run without a record.
    knowledge_bases: tuple[str, ...] = field(default_factory=tuple)

    @property
    def name(self) -> str:
        return f"{RUN_NAME_PREFIX}{self.run_id}/feedback/{self.id}"
