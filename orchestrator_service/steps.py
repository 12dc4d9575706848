"""Progress events (RagStep, docs/trace.md#progress-steps): the step catalogue's texts and the
per-request sink that stamps elapsed / stage-elapsed milliseconds. Steps are never part of the
trace."""

from __future__ import annotations

import asyncio
import re
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
    whole request, whichever group emitted it) and queues it for a stream. With `english`
    set (`for_question` of an English question) the catalogue's texts are written in English."""

    enabled = True
    _CLOSED = object()

    def __init__(
        self, clock: Callable[[], float] = time.monotonic, *, english: bool = False
    ) -> None:
        self.english = english
        self._clock = clock
        self._start = self._previous = clock()
        self._queue: asyncio.Queue[object] = asyncio.Queue()
        #: Every step emitted so far, in order (the stream consumes the queue, not this).
        self.steps: list[Step] = []

    def emit(
        self, icon: str, label: str, detail: str = "", group: str | None = None,
        group_label: str | None = None,
    ) -> None:  # fmt: skip
        if self.english:
            label, detail = in_english(label), in_english(detail)
            group_label = in_english(group_label or "")
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

    def for_question(self, question: str) -> None:
        """Write the steps in the question's language: English for a question with no CJK
        character, the catalogue's Chinese otherwise."""
        self.english = bool(question.strip()) and not _CJK.search(question)

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
CONDENSE = ("💬", "正在结合对话历史理解问题...")
CONDENSE_DONE = ("✅", "已改写为独立问题")
CONDENSE_UNCHANGED = ("✅", "问题本身完整，无需改写")
CONDENSE_FALLBACK = ("⚠️", "改写结果无效，沿用原问题")

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


def history_detail(turns: int) -> str:
    return f"对话历史 {turns} 轮"


def mode_detail(meta: dict) -> str:
    return f"模式: {meta.get('retrieval_mode') or 'hybrid'}"


# ---- English texts (a question with no CJK character gets its steps in English) --------------
_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")
#: Catalogue label or fixed detail → its English text.
EN_TEXTS: dict[str, str] = {
    RECEIVED.label: "Request received, preparing the answer",
    CLASSIFY[1]: "Analysing the question's complexity...",
    CLASSIFY_FAST[1]: "Judged simple at a glance → standard RAG flow",
    CLASSIFY_SIMPLE[1]: "Simple question → standard RAG flow",
    CLASSIFY_COMPLEX[1]: "Complex question → split into sub-questions retrieved in parallel",
    RETRIEVE[1]: "Searching the knowledge base...",
    RETRIEVE_LEVELS[1]: "Three-level chunk retrieval",
    AUTO_MERGE[1]: "Auto-merging",
    RETRIEVE_EMPTY[1]: "No usable chunks; the evidence grade decides what follows",
    GRADE[1]: "Grading the evidence...",
    GRADE_PARTIAL[1]: "Keeping the partly relevant evidence",
    GRADE_ANSWER[1]: "Evidence sufficient, returning the retrieved chunks",
    GRADE_REWRITE[1]: "Evidence insufficient, rewriting the query once",
    GRADE_HITL[1]: "More information needed from the user",
    GRADE_NO_KNOWLEDGE[1]: "No usable evidence in the knowledge base",
    REWRITE[1]: "Rewriting the query...",
    REWRITE_EXHAUSTED[1]: "Rewrite budget used up, retrieval stops",
    REWRITE_CHOOSE[1]: "Choosing Step-back or HyDE",
    RESUME[1]: "Got the user's answer, resuming the RAG flow",
    RESUME_RETRIEVE[1]: "Targeted retrieval with the user's answer",
    RESUME_LEVELS[1]: "HITL three-level chunk retrieval",
    SYNTHESIS_DONE_EMPTY[1]: "No sub-question found usable evidence",
    CONDENSE[1]: "Reading the question with the conversation so far...",
    CONDENSE_DONE[1]: "Rewritten as a standalone question",
    CONDENSE_UNCHANGED[1]: "The question stands alone, unchanged",
    CONDENSE_FALLBACK[1]: "The rewrite was unusable, keeping the question as asked",
    "初始检索": "initial retrieval",
    "跳过复杂度判断与子问题分解": "complexity check and decomposition skipped",
    "本轮只执行这一种重写检索": "only this rewrite runs in this round",
}
#: Texts with values in them: (pattern of the Chinese text, English template).
EN_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern), english)
    for pattern, english in (
        (r"^检索完成，找到 (\d+) 个片段$", r"Retrieval done, \1 chunks found"),
        (
            r"^HITL 针对性检索完成，找到 (\d+) 个片段$",
            r"HITL targeted retrieval done, \1 chunks found",
        ),
        (r"^重写检索完成，共 (\d+) 个片段$", r"Rewrite retrieval done, \1 chunks"),
        (r"^使用 (.+) 查询重新检索\.\.\.$", r"Retrieving again with the \1 query..."),
        (r"^(.+) 三级检索$", r"\1 three-level retrieval"),
        (r"^已选择 (.+) 重写$", r"\1 rewrite chosen"),
        (
            r"^正在合成 (\d+) 个子问题的检索结果\.\.\.$",
            r"Synthesising the results of \1 sub-questions...",
        ),
        (r"^合成完成，共 (\d+) 个去重片段$", r"Synthesis done, \1 distinct chunks"),
        (r"^子问题 (\d+)$", r"Sub-question \1"),
        (r"^(.*) 已加入并行检索$", r"\1 added to the parallel retrieval"),
        (r"^理由: (.*)$", r"reason: \1"),
        (r"^对话历史 (\d+) 轮$", r"\1 earlier turns"),
        (r"^置信度: (.*)$", r"confidence: \1"),
        (r"^模式: (.*)$", r"mode: \1"),
        (r"^叶子层 L(\d+) 召回，候选 (\d+)$", r"leaf level L\1 recall, \2 candidates"),
        (r"^L(\d+) 召回，候选 (\d+)，合并替换 (\d+)$", r"L\1 recall, \2 candidates, \3 merged"),
        (
            r"^启用: (\w+)，应用: (\w+)，替换片段: (\d+)$",
            r"enabled: \1, applied: \2, chunks replaced: \3",
        ),
    )
)


def in_english(text: str) -> str:
    """The English text of a step's label or detail; text that is not the catalogue's (a
    sub-question, a reason, a prompt) is returned as it is."""
    if not text or not _CJK.search(text):
        return text
    if text in EN_TEXTS:
        return EN_TEXTS[text]
    for pattern, english in EN_PATTERNS:
        if pattern.match(text):
            return pattern.sub(english, text)
    return text
