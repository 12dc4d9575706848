"""Progress events (RagStep, docs/trace.md#progress-steps): the step catalogue's texts and the
per-request sink that stamps elapsed / stage-elapsed milliseconds. Steps are never part of the
trace."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from shared.trace_fields import RewriteMethod


@dataclass(frozen=True, slots=True)
class Step:
    icon: str
    label: str
    detail: str
    elapsed_ms: int
    stage_elapsed_ms: int
    group: str = ""
    group_label: str = ""


#: The synthetic first step of every stream; it does not touch the request's clock.
RECEIVED = Step("📨", "请求已接收，正在准备回答", "", 0, 0)


class StepSink:
    """Where the nodes of one request report progress. The base sink discards (unary RPCs)."""

    enabled = False

    def emit(
        self, icon: str, label: str, detail: str = "", group: str | None = None,
        group_label: str | None = None,
    ) -> None:  # fmt: skip
        """Record one step; `group`/`group_label` mark a sub-question's steps."""


NULL_SINK = StepSink()


class QueueStepSink(StepSink):
    """Stamps each step (monotonic clock; `stage_elapsed_ms` since the previous step of the
    whole request, whichever group emitted it) and queues it for a stream."""

    enabled = True
    _CLOSED = object()

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._start = self._previous = clock()
        self._queue: asyncio.Queue[object] = asyncio.Queue()
        #: Every step emitted so far, in order (the stream consumes the queue, not this).
        self.steps: list[Step] = []

    def emit(
        self, icon: str, label: str, detail: str = "", group: str | None = None,
        group_label: str | None = None,
    ) -> None:  # fmt: skip
        now = self._clock()
        step = Step(
            icon,
            label,
            detail,
            max(0, int((now - self._start) * 1000)),
            max(0, int((now - self._previous) * 1000)),
            group or "",
            group_label or "",
        )
        self._previous = now
        self.steps.append(step)
        self._queue.put_nowait(step)

    def close(self) -> None:
        """No more steps: ends the iteration once the queued ones are consumed."""
        self._queue.put_nowait(self._CLOSED)

    async def __aiter__(self) -> AsyncIterator[Step]:
        while True:
            item = await self._queue.get()
            if item is self._CLOSED:
                return
            assert isinstance(item, Step)
            yield item


# ---- the catalogue (docs/trace.md#progress-steps) -------------------------------------------
CLASSIFY = ("🧭", "正在分析问题复杂度...")
CLASSIFY_FAST = ("⚡", "快速判断为简单问题 → 走标准 RAG 流程")
CLASSIFY_SIMPLE = ("✅", "简单问题 → 走标准 RAG 流程")
CLASSIFY_COMPLEX = ("🔀", "复杂问题 → 将分解为子问题并行检索")
RETRIEVE = ("🔍", "正在检索知识库...")
RETRIEVE_LEVELS = ("🧱", "三级分块检索")
AUTO_MERGE = ("🧩", "Auto-merging 合并")
RETRIEVE_EMPTY = ("⚠️", "无可用片段，将进入证据评分短路判断")
GRADE = ("📊", "正在评估证据质量...")
GRADE_PARTIAL = ("🟡", "保留部分相关证据")
GRADE_ANSWER = ("✅", "证据足够，返回检索片段")
GRADE_REWRITE = ("⚠️", "证据不足，将改写查询一次")
GRADE_HITL = ("❓", "需要用户补充信息")
GRADE_NO_KNOWLEDGE = ("⛔", "知识库中未找到可用证据")
REWRITE = ("✏️", "正在重写查询...")
REWRITE_EXHAUSTED = ("⛔", "改写预算已用完，停止检索")
REWRITE_CHOOSE = ("🧠", "选择 Step-back / HyDE 重写方式")
RESUME = ("▶️", "收到 HITL 补充，继续原 RAG 流程")
RESUME_RETRIEVE = ("🔎", "使用 HITL 补充进行针对性检索")
RESUME_LEVELS = ("🧱", "HITL 三级分块检索")
SYNTHESIS_DONE_EMPTY = ("⛔", "所有子问题都没有可用证据")

METHOD_LABELS: dict[RewriteMethod, str] = {
    RewriteMethod.STEP_BACK: "Step-back",
    RewriteMethod.HYDE: "HyDE",
}


def confidence_detail(confidence: float) -> str:
    return f"置信度: {confidence:.2f}"


def levels_detail(meta: dict) -> str:
    return (
        f"叶子层 L{meta.get('leaf_retrieve_level') or 3} 召回，候选 {meta.get('candidate_k') or 0}"
    )


def auto_merge_detail(meta: dict) -> str:
    return (
        f"启用: {bool(meta.get('auto_merge_enabled'))}，"
        f"应用: {bool(meta.get('auto_merge_applied'))}，"
        f"替换片段: {meta.get('auto_merge_replaced_chunks') or 0}"
    )


def mode_detail(meta: dict) -> str:
    return f"模式: {meta.get('retrieval_mode') or 'hybrid'}"
