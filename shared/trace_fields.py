"""The trace field catalogue of docs/trace.md (#fields, #evidence-records, #the-resume-snapshot) as
data: every protocol field's name, group, kind and allowed values, and the typed vocabulary (routes,
statuses, grades, stages, methods) those values come from. Normalisation, the codec, the workflow
and the tests all read it; nothing else lists field names or protocol values."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType


class Kind(StrEnum):
    """The value kinds a trace key can hold (docs/trace.md#fields, "type" column)."""

    BOOL = "bool"
    STR = "str"
    INT = "int"
    FLOAT = "float"
    STR_LIST = "str_list"
    CHUNK_LIST = "chunk_list"
    TRACE_LIST = "trace_list"
    #: A JSON object (google.protobuf.Struct): a document's metadata on a Chunk.
    STRUCT = "struct"


# Every int of the trace and of the 16-key Chunk is an int32 on the wire, except Chunk.id.
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


class TraceFieldError(ValueError):
    """A trace, chunk or snapshot value does not fit its catalogued kind or allowed values.
    `field` names the offending key (with a list index where one applies)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.reason = message

    def within(self, outer: str) -> TraceFieldError:
        """The same error seen from the enclosing key or list index `outer`."""
        sep = "" if self.field.startswith("[") else "."
        return TraceFieldError(f"{outer}{sep}{self.field}", self.reason)


@dataclass(frozen=True, slots=True)
class FieldSpec:
    """One key of a trace-family dict. `allowed` is set only where the spec enumerates values;
    `optional` matters for the fixed-shape records (Chunk, HitlResumeState): True when the key
    may be absent, i.e. the proto field has explicit presence."""

    name: str
    kind: Kind
    group: str = ""
    allowed: frozenset[str] | None = None
    optional: bool = True


# ---- the protocol vocabulary (docs/trace.md#fields) ----------------------------------------
# StrEnums compare and hash equal to their values, so protos, dicts and JSON carry plain text.


class Route(StrEnum):
    """The final route of a grading (docs/trace.md#routes-and-statuses) and the model's suggested
    one."""

    ANSWER = "answer"
    REWRITE = "rewrite"
    CLARIFY = "clarify"
    SCOPE_SELECT = "scope_select"
    NO_KNOWLEDGE = "no_knowledge"


class RetrievalStatus(StrEnum):
    """`retrieval_status`, read with the final route (docs/trace.md#routes-and-statuses)."""

    ANSWERABLE = "answerable"
    PARTIAL = "partial"
    NEEDS_REWRITE = "needs_rewrite"
    NEEDS_CLARIFICATION = "needs_clarification"
    NEEDS_SCOPE_SELECTION = "needs_scope_selection"
    NO_KNOWLEDGE = "no_knowledge"


class Relevance(StrEnum):
    NONE = "none"
    WEAK = "weak"
    STRONG = "strong"


class Answerability(StrEnum):
    NONE = "none"
    PARTIAL = "partial"
    SUFFICIENT = "sufficient"


class Ambiguity(StrEnum):
    NONE = "none"
    MISSING_SLOT = "missing_slot"
    MULTIPLE_CANDIDATES = "multiple_candidates"


class Stage(StrEnum):
    """`retrieval_stage`: which retrieval the current evidence came from (docs/trace.md#fields)."""

    INITIAL = "initial"
    REWRITTEN = "rewritten"
    SYNTHESIS = "synthesis"
    HITL_TARGETED_RETRIEVAL = "hitl_targeted_retrieval"


class RewriteMethod(StrEnum):
    STEP_BACK = "step_back"
    HYDE = "hyde"


class Complexity(StrEnum):
    SIMPLE = "simple"
    COMPLEX = "complex"


#: The two routes that need the user, each with the status it is reported under
#: (docs/trace.md#the-resume-snapshot).
HITL_STATUS_FOR_ROUTE: Mapping[Route, RetrievalStatus] = MappingProxyType(
    {
        Route.CLARIFY: RetrievalStatus.NEEDS_CLARIFICATION,
        Route.SCOPE_SELECT: RetrievalStatus.NEEDS_SCOPE_SELECTION,
    }
)
HITL_ROUTES: frozenset[Route] = frozenset(HITL_STATUS_FOR_ROUTE)
HITL_STATUSES: frozenset[RetrievalStatus] = frozenset(HITL_STATUS_FOR_ROUTE.values())

#: `tool_name` of every trace: the one tool the workflow stands for (docs/trace.md#fields).
TOOL_NAME = "search_knowledge_base"

#: A complex question splits into at most this many sub-questions (docs/trace.md#classification).
MAX_SUB_QUESTIONS = 4


def _values(members: Iterable[StrEnum]) -> frozenset[str]:
    return frozenset(m.value for m in members)


def _f(
    name: str, group: str, kind: Kind, allowed: Iterable[StrEnum] | tuple[str, ...] = ()
) -> FieldSpec:
    values = frozenset(v.value if isinstance(v, StrEnum) else v for v in allowed)
    return FieldSpec(name, kind, group, values or None)


# The 61 protocol fields (docs/trace.md#fields), in RagTrace field-number order (1..61).
TRACE_FIELDS: tuple[FieldSpec, ...] = (
    # A · tool identity and stage
    _f("tool_used", "A", Kind.BOOL),
    _f("tool_name", "A", Kind.STR),
    _f("query", "A", Kind.STR),
    _f("retrieval_stage", "A", Kind.STR, Stage),
    # B · complexity and sub-questions
    _f("complexity", "B", Kind.STR, Complexity),
    _f("complexity_reason", "B", Kind.STR),
    _f("sub_questions", "B", Kind.STR_LIST),
    _f("sub_agent_count", "B", Kind.INT),
    _f("synthesis_merged_count", "B", Kind.INT),
    _f("sub_traces", "B", Kind.TRACE_LIST),
    # C · evidence sets of the stages
    _f("retrieved_chunks", "C", Kind.CHUNK_LIST),
    _f("initial_retrieved_chunks", "C", Kind.CHUNK_LIST),
    _f("rewrite_retrieved_chunks", "C", Kind.CHUNK_LIST),
    _f("hitl_targeted_retrieved_chunks", "C", Kind.CHUNK_LIST),
    # D · final route and evidence grade
    _f("route", "D", Kind.STR, Route),
    _f("retrieval_status", "D", Kind.STR, RetrievalStatus),
    _f("evidence_relevance", "D", Kind.STR, Relevance),
    _f("evidence_answerability", "D", Kind.STR, Answerability),
    _f("evidence_ambiguity", "D", Kind.STR, Ambiguity),
    _f("evidence_confidence", "D", Kind.FLOAT),
    _f("evidence_reason", "D", Kind.STR),
    _f("missing_slots", "D", Kind.STR_LIST),
    # E · query rewrite
    _f("rewrite_method", "E", Kind.STR, RewriteMethod),
    _f("rewritten_query", "E", Kind.STR),
    _f("step_back_question", "E", Kind.STR),
    _f("hyde_document", "E", Kind.STR),
    # F · HITL follow-up and cross-turn resume
    _f("hitl_prompt", "F", Kind.STR),
    _f("hitl_options", "F", Kind.STR_LIST),
    _f("hitl_resumed", "F", Kind.BOOL),
    _f("hitl_answer", "F", Kind.STR),
    _f("hitl_resume_strategy", "F", Kind.STR, ("targeted_retrieval",)),
    _f("hitl_resume_from_status", "F", Kind.STR, HITL_STATUSES),
    _f("hitl_resume_from_route", "F", Kind.STR, HITL_ROUTES),
    # G · recall parameters and counts (R)
    _f("retrieval_pipeline", "G", Kind.STR),
    _f("retrieval_mode", "G", Kind.STR, ("hybrid", "dense_fallback", "failed")),
    _f("candidate_k", "G", Kind.INT),
    _f("candidate_k_source", "G", Kind.STR, ("env", "multiplier")),
    _f("candidate_k_config_error", "G", Kind.STR),
    _f("retrieval_candidate_multiplier", "G", Kind.INT),
    _f("retrieval_top_k", "G", Kind.INT),
    _f("recall_count", "G", Kind.INT),
    _f("post_merge_candidate_count", "G", Kind.INT),
    _f("candidate_count", "G", Kind.INT),
    _f("leaf_retrieve_level", "G", Kind.INT),
    # H · auto-merging (R)
    _f("auto_merge_enabled", "H", Kind.BOOL),
    _f("auto_merge_applied", "H", Kind.BOOL),
    _f("auto_merge_threshold", "H", Kind.INT),
    _f("auto_merge_replaced_chunks", "H", Kind.INT),
    _f("auto_merge_steps", "H", Kind.INT),
    # I · rerank, threshold and failures (R)
    _f("rerank_enabled", "I", Kind.BOOL),
    _f("rerank_applied", "I", Kind.BOOL),
    _f("rerank_model", "I", Kind.STR),
    _f("rerank_endpoint", "I", Kind.STR),
    _f("rerank_error", "I", Kind.STR),
    _f("rerank_timeout_seconds", "I", Kind.FLOAT),
    _f("rerank_min_score", "I", Kind.FLOAT),
    _f("post_rerank_count", "I", Kind.INT),
    _f("post_threshold_count", "I", Kind.INT),
    _f("retrieval_empty", "I", Kind.BOOL),
    # J · conversation: the question condensed against the caller's history
    _f("history_turns", "J", Kind.INT),
    _f("condense_error", "J", Kind.STR),
)

TRACE_FIELD_BY_NAME: dict[str, FieldSpec] = {spec.name: spec for spec in TRACE_FIELDS}
TRACE_FIELD_NAMES: tuple[str, ...] = tuple(TRACE_FIELD_BY_NAME)

# A sub trace supports every field but `sub_traces` itself: traces never nest
# (docs/trace.md#normalisation).
SUB_TRACE_FIELDS: tuple[FieldSpec, ...] = tuple(
    s for s in TRACE_FIELDS if s.kind is not Kind.TRACE_LIST
)
SUB_TRACE_FIELD_NAMES: tuple[str, ...] = tuple(s.name for s in SUB_TRACE_FIELDS)

# Raw-trace keys that are not protocol fields yet are written on purpose (docs/trace.md#fields,
# below the table).
RAW_ONLY: frozenset[str] = frozenset({"rewrite_count"})

# R: the 26 retrieval-meta fields (docs/api.md#retrieve-step-by-step), in pipeline order.
RETRIEVAL_META_FIELD_NAMES: tuple[str, ...] = (
    "retrieval_pipeline",
    "retrieval_mode",
    "candidate_k",
    "candidate_k_source",
    "candidate_k_config_error",
    "retrieval_candidate_multiplier",
    "retrieval_top_k",
    "leaf_retrieve_level",
    "recall_count",
    "post_merge_candidate_count",
    "candidate_count",
    "auto_merge_enabled",
    "auto_merge_applied",
    "auto_merge_threshold",
    "auto_merge_replaced_chunks",
    "auto_merge_steps",
    "rerank_enabled",
    "rerank_applied",
    "rerank_model",
    "rerank_endpoint",
    "rerank_error",
    "rerank_timeout_seconds",
    "rerank_min_score",
    "post_rerank_count",
    "post_threshold_count",
    "retrieval_empty",
)
RETRIEVAL_META_FIELDS: tuple[FieldSpec, ...] = tuple(
    TRACE_FIELD_BY_NAME[name] for name in RETRIEVAL_META_FIELD_NAMES
)

# GRADE: the 10 keys a grading overwrites (docs/trace.md#node-by-node).
GRADE_FIELD_NAMES: tuple[str, ...] = (
    "route",
    "retrieval_status",
    "evidence_relevance",
    "evidence_answerability",
    "evidence_ambiguity",
    "evidence_confidence",
    "evidence_reason",
    "missing_slots",
    "hitl_prompt",
    "hitl_options",
)

# The 19 runtime Chunk keys (docs/trace.md#evidence-records), in Chunk field-number order. Only
# `id`, `rerank_score` and `metadata` may be absent; `page_number` is text on the wire and
# `metadata` a Struct, absent when the document has none (see shared.codec).
CHUNK_FIELDS: tuple[FieldSpec, ...] = (
    FieldSpec("id", Kind.INT, optional=True),
    FieldSpec("filename", Kind.STR, optional=False),
    FieldSpec("file_type", Kind.STR, optional=False),
    FieldSpec("file_path", Kind.STR, optional=False),
    FieldSpec("page_number", Kind.STR, optional=False),
    FieldSpec("text", Kind.STR, optional=False),
    FieldSpec("score", Kind.FLOAT, optional=False),
    FieldSpec("rrf_rank", Kind.INT, optional=False),
    FieldSpec("rerank_score", Kind.FLOAT, optional=True),
    FieldSpec("chunk_idx", Kind.INT, optional=False),
    FieldSpec("chunk_id", Kind.STR, optional=False),
    FieldSpec("parent_chunk_id", Kind.STR, optional=False),
    FieldSpec("root_chunk_id", Kind.STR, optional=False),
    FieldSpec("chunk_level", Kind.INT, optional=False),
    FieldSpec("merged_from_children", Kind.BOOL, optional=False),
    FieldSpec("merged_child_count", Kind.INT, optional=False),
    FieldSpec("document_id", Kind.STR, optional=False),
    FieldSpec("knowledge_base", Kind.STR, optional=False),
    FieldSpec("metadata", Kind.STRUCT, optional=True),
)

# The 6 keys of the external evidence shape that survive normalisation
# (docs/trace.md#evidence-records). `filename` is required (an element without one is dropped); the
# rest may be absent.
RETRIEVED_CHUNK_FIELDS: tuple[FieldSpec, ...] = (
    FieldSpec("filename", Kind.STR, optional=False),
    FieldSpec("page_number", Kind.STR),
    FieldSpec("text", Kind.STR),
    FieldSpec("score", Kind.FLOAT),
    FieldSpec("rrf_rank", Kind.INT),
    FieldSpec("rerank_score", Kind.FLOAT),
)
RETRIEVED_CHUNK_FIELD_NAMES: tuple[str, ...] = tuple(s.name for s in RETRIEVED_CHUNK_FIELDS)

# The 7 keys of the resume snapshot (docs/trace.md#the-resume-snapshot). The dict form always holds
# all seven; `optional` marks the two that are None when unknown.
HITL_RESUME_STATE_FIELDS: tuple[FieldSpec, ...] = (
    FieldSpec("question", Kind.STR, optional=False),
    FieldSpec("route", Kind.STR, allowed=_values(HITL_ROUTES), optional=False),
    FieldSpec("retrieval_status", Kind.STR, allowed=_values(HITL_STATUSES), optional=False),
    FieldSpec("rewrite_count", Kind.INT, optional=False),
    FieldSpec("complexity", Kind.STR, allowed=_values(Complexity), optional=True),
    FieldSpec("complexity_reason", Kind.STR, optional=True),
    FieldSpec("sub_questions", Kind.STR_LIST, optional=False),
)
HITL_RESUME_STATE_FIELD_NAMES: tuple[str, ...] = tuple(s.name for s in HITL_RESUME_STATE_FIELDS)
