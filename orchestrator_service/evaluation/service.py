"""The evaluation API's core (docs/api.md#evaluation): sets and items checked and stored, imports
parsed, runs started as long-running operations, results read, two runs compared. Typed in and
out; the servicer (`servicer.py`) converts protos. `access(permission, kb_id)` is the caller's
check: a key acts on a set only with the permission on every knowledge base it searches."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from orchestrator_service.evaluation.compare import MetricComparison, compare_runs
from orchestrator_service.evaluation.formats import parse_beir, parse_jsonl
from orchestrator_service.evaluation.messages import packed_run_metadata
from orchestrator_service.evaluation.model import Item, RunConfig
from orchestrator_service.evaluation.names import (
    check_item_id,
    check_set_id,
    new_id,
    parse_item,
    parse_run,
    parse_set,
)
from orchestrator_service.evaluation.results import judgement_and_outcome
from orchestrator_service.evaluation.store import EvaluationStore, RunRecord, SetRecord, StoredItem
from shared.access import Permission, kb_id_named
from shared.errors import FailedPrecondition, InvalidArgument, NotFound
from shared.index_names import NAME_RULE, index_kb_id, index_kb_name, is_index_name
from shared.operations import Access, OperationState
from shared.paging import page_size_of
from shared.sql.operations import NewOperation, SqlOperationStore
from shared.trace_fields import Route

KIND: Final = "run_evaluation"
MAX_DISPLAY_NAME: Final = 256
MAX_FILTER_CHARS: Final = 4096
MAX_QUESTION_BYTES: Final = 32 * 1024
MAX_HISTORY_TURNS: Final = 20
MAX_TAGS: Final = 20
MAX_TAG_CHARS: Final = 64
MAX_GRADE: Final = 100
MAX_BATCH: Final = 1000
MAX_IMPORT_ITEMS: Final = 10_000
EXPECTED_ROUTES: Final = frozenset(r.value for r in Route)
MODES: Final = ("RETRIEVAL", "RUN")


def _now_ms() -> int:
    return int(time.time() * 1000)


def _page_size(size: int, default: int = 50) -> int:
    return page_size_of(size, default=default, maximum=1000)


def check_config(config: RunConfig) -> RunConfig:
    if config.mode not in MODES:
        raise InvalidArgument("config.mode", f"must be one of {', '.join(MODES)}")
    if config.top_k is not None and not 1 <= config.top_k <= 100:
        raise InvalidArgument("config.top_k", "must be 1..100")
    if config.concurrency is not None and not 1 <= config.concurrency <= 16:
        raise InvalidArgument("config.concurrency", "must be 1..16")
    if config.index and not is_index_name(config.index):
        raise InvalidArgument("config.index", NAME_RULE)
    return config


def check_index_of_set(config: RunConfig, knowledge_bases: Sequence[str]) -> None:
    """A run's index must be of a knowledge base its set searches (INVALID_ARGUMENT naming
    `config.index`); whether it exists and is READY is retrieval's to say, item by item."""
    if config.index and index_kb_id(config.index) not in knowledge_bases:
        raise InvalidArgument(
            "config.index",
            f"is an index of {index_kb_name(config.index)}, which the set does not search",
        )


def check_item(item: Item, field: str) -> Item:
    """INVALID_ARGUMENT naming `field.…` for the first rule the item breaks."""
    if not item.question.strip():
        raise InvalidArgument(f"{field}.question", "must not be blank")
    if len(item.question.encode()) > MAX_QUESTION_BYTES:
        raise InvalidArgument(f"{field}.question", "is longer than 32 KiB")
    if len(item.history) > MAX_HISTORY_TURNS:
        raise InvalidArgument(f"{field}.history", f"has more than {MAX_HISTORY_TURNS} turns")
    for i, relevant in enumerate(item.relevant):
        if not relevant.document_id:
            raise InvalidArgument(f"{field}.relevant[{i}].document_id", "must not be empty")
        if not 0 <= relevant.grade <= MAX_GRADE:
            raise InvalidArgument(f"{field}.relevant[{i}].grade", f"must be 0..{MAX_GRADE}")
    if item.expected_route and item.expected_route not in EXPECTED_ROUTES:
        raise InvalidArgument(
            f"{field}.expected_route",
            f"{item.expected_route!r} is not a route ({', '.join(sorted(EXPECTED_ROUTES))})",
        )
    if len(item.tags) > MAX_TAGS or any(len(t) > MAX_TAG_CHARS for t in item.tags):
        raise InvalidArgument(
            f"{field}.tags", f"at most {MAX_TAGS} tags of at most {MAX_TAG_CHARS} characters"
        )
    return item


@dataclass(frozen=True, slots=True)
class ImportRequest:
    set_name: str
    format: str  # "BEIR" | "JSONL"
    queries: bytes = b""
    qrels: bytes = b""
    content: bytes = b""
    uri: str = ""
    split: str = ""


@dataclass(frozen=True, slots=True)
class Comparison:
    metrics: list[MetricComparison]
    items_paired: int


@dataclass
class Evaluations:
    store: EvaluationStore
    operations: SqlOperationStore
    import_roots: Sequence[Path] = ()
    now_ms: Callable[[], int] = field(default=_now_ms)
    #: Called once a run is queued (the composition root: the runner's `wake`).
    on_queued: Callable[[], None] = field(default=lambda: None)

    # ---- sets -----------------------------------------------------------------------------

    async def _set(self, set_id: str, field: str) -> SetRecord:
        record = await self.store.get_set(set_id)
        if record is None:
            raise NotFound(field, f"evaluation_sets/{set_id} does not exist")
        return record

    async def readable_set(
        self, name: str, field: str, access: Access, permission: Permission
    ) -> SetRecord:
        record = await self._set(parse_set(name, field), field)
        for kb in record.knowledge_bases:
            access(permission, kb)
        return record

    @staticmethod
    def _scope(knowledge_bases: Sequence[str], filter_: str, display_name: str) -> None:
        if len(display_name) > MAX_DISPLAY_NAME:
            raise InvalidArgument("evaluation_set.display_name", "is longer than 256 characters")
        if len(filter_) > MAX_FILTER_CHARS:
            raise InvalidArgument("evaluation_set.filter", "is longer than 4096 characters")
        for i, kb in enumerate(knowledge_bases):
            if not kb.strip() or "/" in kb.removeprefix("knowledge_bases/"):
                raise InvalidArgument(
                    f"evaluation_set.knowledge_bases[{i}]", f"{kb!r} is not a knowledge base"
                )

    async def create_set(
        self,
        set_id: str,
        display_name: str,
        knowledge_bases: Sequence[str],
        filter_: str,
        access: Access,
    ) -> SetRecord:
        set_id = check_set_id(set_id, "evaluation_set_id") if set_id else "s" + new_id()
        self._scope(knowledge_bases, filter_, display_name)
        kb_ids = tuple(dict.fromkeys(kb_id_named(kb) for kb in knowledge_bases)) or ("default",)
        for kb in kb_ids:
            access(Permission.WRITE, kb)
        record = SetRecord(set_id, display_name, kb_ids, filter_, self.now_ms())
        return await self.store.create_set(record)

    async def get_set(self, name: str, access: Access) -> SetRecord:
        return await self.readable_set(name, "name", access, Permission.READ)

    async def list_sets(
        self, page_size: int, token: str, visible: frozenset[str] | None
    ) -> tuple[list[SetRecord], str]:
        size = _page_size(page_size)
        records = await self.store.page_sets(size, token or None)
        next_token = records[-1].id if len(records) == size else ""
        shown = [r for r in records if visible is None or set(r.knowledge_bases) <= visible]
        return shown, next_token

    async def update_set(self, name: str, changes: Mapping[str, Any], access: Access) -> SetRecord:
        record = await self.readable_set(name, "evaluation_set.name", access, Permission.WRITE)
        self._scope(
            changes.get("knowledge_bases", ()),
            changes.get("filter", ""),
            changes.get("display_name", ""),
        )
        values = dict(changes)
        if "knowledge_bases" in values:
            kb_ids = tuple(dict.fromkeys(kb_id_named(k) for k in values["knowledge_bases"]))
            values["knowledge_bases"] = kb_ids or ("default",)
            for kb in values["knowledge_bases"]:
                access(Permission.WRITE, kb)
        return await self.store.update_set(record.id, values)

    async def delete_set(self, name: str, access: Access) -> None:
        record = await self.readable_set(name, "name", access, Permission.WRITE)
        if not await self.store.delete_set(record.id):
            raise NotFound("name", f"{name} does not exist")

    # ---- items ----------------------------------------------------------------------------

    async def add_items(
        self,
        parent: str,
        items: Sequence[tuple[str, Item]],
        access: Access,
        field: str = "requests",
    ) -> list[StoredItem]:
        """(id or "", item) pairs, all or none."""
        where_set = "evaluation_set" if field == "feedback" else "parent"
        record = await self.readable_set(parent, where_set, access, Permission.WRITE)
        if len(items) > MAX_IMPORT_ITEMS:
            raise InvalidArgument(field, f"at most {MAX_IMPORT_ITEMS} items at once")
        checked: list[tuple[str, Item]] = []
        for i, (item_id, item) in enumerate(items):
            where = f"{field}[{i}]" if field else "evaluation_item"
            check_item(item, where)
            item_id = check_item_id(item_id, f"{where}.id") if item_id else new_id() + f"{i:05d}"
            checked.append((item_id, item))
        await self.store.add_items(record.id, checked, self.now_ms(), field or "evaluation_item_id")
        return [StoredItem(record.id, item_id, item) for item_id, item in checked]

    async def get_item(self, name: str, access: Access) -> StoredItem:
        set_id, item_id = parse_item(name, "name")
        await self.readable_set(f"evaluation_sets/{set_id}", "name", access, Permission.READ)
        stored = await self.store.get_item(set_id, item_id)
        if stored is None:
            raise NotFound("name", f"{name} does not exist")
        return stored

    async def list_items(
        self, parent: str, page_size: int, token: str, access: Access
    ) -> tuple[list[StoredItem], str]:
        record = await self.readable_set(parent, "parent", access, Permission.READ)
        size = _page_size(page_size)
        items = await self.store.page_items(record.id, size, token or None)
        return items, items[-1].id if len(items) == size else ""

    async def delete_item(self, name: str, access: Access) -> None:
        set_id, item_id = parse_item(name, "name")
        await self.readable_set(f"evaluation_sets/{set_id}", "name", access, Permission.WRITE)
        if not await self.store.delete_item(set_id, item_id):
            raise NotFound("name", f"{name} does not exist")

    async def import_items(self, request: ImportRequest, access: Access) -> tuple[int, int]:
        """(items added, BEIR queries skipped for want of a judgement)."""
        await self.readable_set(request.set_name, "evaluation_set", access, Permission.WRITE)
        skipped = 0
        if request.format == "BEIR":
            queries, qrels = request.queries, request.qrels
            if request.uri:
                folder = self._local(request.uri)
                queries = _read(folder / "queries.jsonl", "uri")
                qrels = _read(folder / "qrels" / f"{request.split or 'test'}.tsv", "split")
            elif not queries or not qrels:
                raise InvalidArgument("queries", "BEIR needs queries and qrels (or a uri)")
            parsed = parse_beir(queries, qrels)
            items, skipped = parsed.items, parsed.skipped_queries
        elif request.format == "JSONL":
            content = _read(self._local(request.uri), "uri") if request.uri else request.content
            if not content:
                raise InvalidArgument("content", "JSONL needs content (or a uri)")
            items = tuple(parse_jsonl(content))
        else:
            raise InvalidArgument("format", "must be BEIR or JSONL")
        pairs = [(item.item_id, item) for item in items]
        added = await self.add_items(request.set_name, pairs, access, field="items")
        return len(added), skipped

    def _local(self, uri: str) -> Path:
        if not uri.startswith("file://"):
            raise InvalidArgument("uri", "must be a file:// uri")
        path = Path(uri.removeprefix("file://")).resolve()
        roots = [Path(r).resolve() for r in self.import_roots]
        if not any(path == root or root in path.parents for root in roots):
            raise InvalidArgument(
                "uri", "is not under IMPORT_ROOTS" if roots else "IMPORT_ROOTS is not set"
            )
        return path

    # ---- runs -----------------------------------------------------------------------------

    async def start_run(
        self, set_name: str, config: RunConfig, request: bytes, access: Access
    ) -> tuple[str, RunRecord]:
        """Stores the run and its QUEUED operation; (operation id, run)."""
        record = await self.readable_set(set_name, "evaluation_set", access, Permission.WRITE)
        check_config(config)
        check_index_of_set(config, record.knowledge_bases)
        if record.item_count == 0:
            raise FailedPrecondition("evaluation_set", f"{set_name} has no items")
        now = self.now_ms()
        run_id = new_id()
        run = RunRecord(
            record.id,
            run_id,
            config.as_dict(),
            OperationState.QUEUED,
            now,
            items_total=record.item_count,
        )
        await self.store.create_run(run)
        await self.operations.create(
            NewOperation(
                id=run_id,
                kind=KIND,
                knowledge_base=",".join(record.knowledge_bases),
                request_id="",
                request_sha256=hashlib.sha256(request).hexdigest(),
                request=request,
                metadata=packed_run_metadata(run, now),
                checkpoint={"set_id": record.id, "run_id": run_id},
                now_ms=now,
            )
        )
        self.on_queued()
        return run_id, run

    async def get_run(self, name: str, access: Access, field: str = "name") -> RunRecord:
        set_id, run_id = parse_run(name, field)
        await self.readable_set(f"evaluation_sets/{set_id}", field, access, Permission.READ)
        run = await self.store.get_run(set_id, run_id)
        if run is None:
            raise NotFound(field, f"{name} does not exist")
        return run

    async def list_runs(
        self, parent: str, page_size: int, token: str, access: Access
    ) -> tuple[list[RunRecord], str]:
        record = await self.readable_set(parent, "parent", access, Permission.READ)
        size = _page_size(page_size)
        runs = await self.store.page_runs(record.id, size, token or None)
        return runs, runs[-1].id if len(runs) == size else ""

    async def list_results(
        self, run_name: str, page_size: int, token: str, access: Access
    ) -> tuple[list[tuple[str, dict[str, Any]]], str]:
        run = await self.get_run(run_name, access, "run")
        size = _page_size(page_size, 100)
        rows = await self.store.results(run.set_id, run.id, size, token or None)
        return rows, rows[-1][0] if len(rows) == size else ""

    async def compare(self, a: str, b: str, access: Access) -> Comparison:
        run_a = await self.get_run(a, access, "a")
        run_b = await self.get_run(b, access, "b")
        if run_a.set_id != run_b.set_id:
            raise InvalidArgument("b", "must be a run of the same evaluation set as a")
        rows_a = dict(await self.store.results(run_a.set_id, run_a.id))
        rows_b = dict(await self.store.results(run_b.set_id, run_b.id))
        paired = [
            item
            for item in rows_a
            if item in rows_b and not rows_a[item].get("error") and not rows_b[item].get("error")
        ]
        judgements, outcomes_a, outcomes_b = [], [], []
        for item in paired:
            judgement, outcome_a = judgement_and_outcome(rows_a[item])
            _, outcome_b = judgement_and_outcome(rows_b[item])
            judgements.append(judgement)
            outcomes_a.append(outcome_a)
            outcomes_b.append(outcome_b)
        return Comparison(compare_runs(judgements, outcomes_a, outcomes_b), len(paired))


def _read(path: Path, field: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        raise InvalidArgument(field, f"cannot read {path.name}") from None
