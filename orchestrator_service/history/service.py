"""Run history and feedback, the core (docs/api.md#run-history): what the orchestrator records
after each Run and Resume (RUN_HISTORY on), the reads keys may make of it (only runs on their
knowledge bases), feedback on answers, and the retention sweep (RUN_HISTORY_DAYS).

Recording never fails a Run: a database that refuses the row is logged and counted
(supermew_db_errors_total{operation="runs_write"}), and the caller still gets its answer."""

from __future__ import annotations

import asyncio
import logging
import re
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Final

from orchestrator_service.history.filters import (
    FEEDBACK_FIELDS,
    RUN_FIELDS,
    parse_filter,
)
from orchestrator_service.history.model import (
    REASONS,
    RUN_NAME_PREFIX,
    FeedbackRecord,
    HistoryEntry,
    Rating,
)
from orchestrator_service.history.store import HistoryStore
from shared.errors import DomainError, InvalidArgument, NotFound
from shared.paging import page_size_of

log = logging.getLogger(__name__)

_UUID: Final = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_FEEDBACK_ID: Final = re.compile(r"[0-9a-f]{20}")
MAX_COMMENT_BYTES: Final = 4 * 1024
MAX_TEXT_BYTES: Final = 32 * 1024
MAX_EXPECTED: Final = 100
#: How often the retention sweep runs.
SWEEP_SECONDS: Final = 3600.0
DAY_MS: Final = 86_400_000


def _now_ms() -> int:
    return int(time.time() * 1000)


def parse_run_name(name: str, field: str) -> str:
    run_id = name.removeprefix(RUN_NAME_PREFIX)
    if not name.startswith(RUN_NAME_PREFIX) or not _UUID.fullmatch(run_id):
        raise InvalidArgument(field, f"{name!r} is not a run (runs/{{run_id}}, a UUID)")
    return run_id


def parse_feedback_name(name: str, field: str) -> tuple[str, str]:
    parts = name.split("/")
    if (
        len(parts) != 4
        or parts[0] != "runs"
        or not _UUID.fullmatch(parts[1])
        or parts[2] != "feedback"
        or not _FEEDBACK_ID.fullmatch(parts[3])
    ):
        raise InvalidArgument(field, f"{name!r} is not runs/{{run_id}}/feedback/{{id}}")
    return parts[1], parts[3]


def visible_to(kb_ids: Sequence[str], visible: frozenset[str] | None) -> bool:
    return visible is None or set(kb_ids) <= visible


@dataclass(frozen=True, slots=True)
class FeedbackInput:
    rating: int
    reasons: tuple[int, ...] = ()
    comment: str = ""
    expected_document_ids: tuple[str, ...] = ()
    corrected_answer: str = ""
    question: str = ""
    answer: str = ""


def check_feedback(given: FeedbackInput) -> None:
    if given.rating not in (Rating.THUMBS_UP, Rating.THUMBS_DOWN):
        raise InvalidArgument("feedback.rating", "must be THUMBS_UP or THUMBS_DOWN")
    if len(set(given.reasons)) != len(given.reasons) or any(
        r not in REASONS for r in given.reasons
    ):
        raise InvalidArgument("feedback.reasons", "must be distinct reasons, none unspecified")
    if len(given.comment.encode()) > MAX_COMMENT_BYTES:
        raise InvalidArgument("feedback.comment", "is longer than 4 KiB")
    if len(given.expected_document_ids) > MAX_EXPECTED or not all(given.expected_document_ids):
        raise InvalidArgument(
            "feedback.expected_document_ids", "at most 100 document ids, none empty"
        )
    for name in ("corrected_answer", "question", "answer"):
        if len(getattr(given, name).encode()) > MAX_TEXT_BYTES:
            raise InvalidArgument(f"feedback.{name}", "is longer than 32 KiB")


@dataclass
class RunHistory:
    """`enabled` (RUN_HISTORY) decides whether runs are recorded; reads and feedback work
    either way (with history off there is simply nothing to read)."""

    store: HistoryStore
    enabled: bool = False
    days: int = 30
    now_ms: Callable[[], int] = field(default=_now_ms)
    on_feedback: Callable[[str], None] = lambda rating: None

    async def record(self, entry: HistoryEntry) -> None:
        if not self.enabled:
            return
        try:
            await self.store.record(entry)
        except DomainError as exc:
            log.warning("run %s not recorded in the history: %s", entry.run_id, exc)

    async def get(self, name: str, visible: frozenset[str] | None) -> HistoryEntry:
        run_id = parse_run_name(name, "name")
        entry = await self.store.get(run_id)
        if entry is None or not visible_to(entry.knowledge_bases, visible):
            raise NotFound("name", f"{name} has no history record")
        return entry

    async def page(
        self, filter_text: str, page_size: int, token: str, visible: frozenset[str] | None
    ) -> tuple[list[HistoryEntry], str]:
        conditions = parse_filter(filter_text, RUN_FIELDS)
        size = _page_size(page_size)
        before = _run_token(token)
        shown: list[HistoryEntry] = []
        while True:
            batch = await self.store.scan(conditions, size * 2, before)
            for entry in batch:
                before = entry.run_id
                if visible_to(entry.knowledge_bases, visible):
                    shown.append(entry)
                    if len(shown) == size:
                        return shown, before
            if len(batch) < size * 2:
                return shown, ""

    async def create_feedback(
        self, parent: str, given: FeedbackInput, key_id: str, visible: frozenset[str] | None
    ) -> FeedbackRecord:
        run_id = parse_run_name(parent, "parent")
        check_feedback(given)
        entry = await self.store.get(run_id)
        if entry is not None and not visible_to(entry.knowledge_bases, visible):
            raise NotFound("parent", f"{parent} has no history record")
        if entry is None and not (given.question.strip() and given.answer.strip()):
            field = "feedback.question" if not given.question.strip() else "feedback.answer"
            raise InvalidArgument(
                field,
                f"{parent} has no history record: give the question and the answer",
            )
        now = self.now_ms()
        record = FeedbackRecord(
            run_id=run_id,
            id=f"{now:012x}{secrets.token_hex(4)}",
            rating=Rating(given.rating),
            reasons=given.reasons,
            comment=given.comment,
            expected_document_ids=given.expected_document_ids,
            corrected_answer=given.corrected_answer,
            question=entry.question if entry is not None else given.question,
            answer=entry.answer if entry is not None else given.answer,
            key_id=key_id,
            create_time_ms=now,
            knowledge_bases=entry.knowledge_bases if entry is not None else (),
        )
        await self.store.add_feedback(record)
        self.on_feedback(record.rating.name)
        return record

    async def feedback_page(
        self,
        parent: str,
        filter_text: str,
        page_size: int,
        token: str,
        key_id: str,
        visible: frozenset[str] | None,
    ) -> tuple[list[FeedbackRecord], str]:
        run_id = None if parent == "runs/-" else parse_run_name(parent, "parent")
        conditions = parse_filter(filter_text, FEEDBACK_FIELDS)
        reasons = [c.value for c in conditions if c.field == "reasons"]
        size = _page_size(page_size)
        before = _feedback_token(token)
        shown: list[FeedbackRecord] = []
        while True:
            batch = await self.store.scan_feedback(run_id, conditions, size * 2, before)
            for record in batch:
                before = (record.create_time_ms, record.id)
                if self._may_see(record, key_id, visible) and all(
                    r in record.reasons for r in reasons
                ):
                    shown.append(record)
                    if len(shown) == size:
                        return shown, f"{record.create_time_ms}:{record.id}"
            if len(batch) < size * 2:
                return shown, ""

    async def feedback_named(
        self, names: Sequence[str], key_id: str, visible: frozenset[str] | None
    ) -> list[tuple[FeedbackRecord, HistoryEntry | None]]:
        found = []
        for i, name in enumerate(names):
            run_id, feedback_id = parse_feedback_name(name, f"feedback[{i}]")
            record = await self.store.get_feedback(run_id, feedback_id)
            if record is None or not self._may_see(record, key_id, visible):
                raise NotFound(f"feedback[{i}]", f"{name} does not exist")
            found.append((record, await self.store.get(run_id)))
        return found

    @staticmethod
    def _may_see(record: FeedbackRecord, key_id: str, visible: frozenset[str] | None) -> bool:
        if record.knowledge_bases:
            return visible_to(record.knowledge_bases, visible)
        return visible is None or record.key_id == key_id

    async def sweep(self) -> int:
        """Deletes the runs older than RUN_HISTORY_DAYS; how many."""
        removed = await self.store.expire(self.now_ms() - self.days * DAY_MS)
        if removed:
            log.info("run history: %d runs older than %d days deleted", removed, self.days)
        return removed

    async def sweep_periodically(self, every: float = SWEEP_SECONDS) -> None:
        """After the start-up sweep (App.start), one every `every` seconds."""
        while True:
            await asyncio.sleep(every)
            try:
                await self.sweep()
            except DomainError as exc:
                log.warning("run history sweep failed: %s", exc)


def _page_size(size: int) -> int:
    return page_size_of(size, default=50, maximum=1000)


def _run_token(token: str) -> str | None:
    if not token:
        return None
    if not _UUID.fullmatch(token):
        raise InvalidArgument("page_token", "is not a token this list gave")
    return token


def _feedback_token(token: str) -> tuple[int, str] | None:
    if not token:
        return None
    time_ms, _, last = token.partition(":")
    if not time_ms.isdigit() or not _FEEDBACK_ID.fullmatch(last):
        raise InvalidArgument("page_token", "is not a token this list gave")
    return int(time_ms), last
