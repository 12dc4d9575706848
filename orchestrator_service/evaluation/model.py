"""The evaluation domain's records, as the core sees them: what an item asks and expects,
what one run of it produced. Documents are keyed by `document_key` so a document counts once
however many of its chunks come back."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final


def document_key(knowledge_base: str, document_id: str) -> str:
    """A document's identity in metrics: `kb/doc` when the knowledge base is named, else the
    document id alone (an item whose set searches one knowledge base may omit it)."""
    return f"{knowledge_base}/{document_id}" if knowledge_base else document_id


@dataclass(frozen=True, slots=True)
class RelevantDocument:
    document_id: str
    knowledge_base: str = ""
    #: Graded relevance (trec_eval's convention): > 0 relevant, 0 judged not relevant.
    grade: int = 1


@dataclass(frozen=True, slots=True)
class Turn:
    """An earlier exchange, as RunRequest.history carries it."""

    question: str
    answer: str = ""


@dataclass(frozen=True, slots=True)
class Item:
    """One question of an evaluation set and what a good answer looks like."""

    question: str
    history: tuple[Turn, ...] = ()
    relevant: tuple[RelevantDocument, ...] = ()
    reference_answer: str = ""
    #: A route name of docs/trace.md (`answer`, `clarify`, `no_knowledge`, …) or "" (not judged).
    expected_route: str = ""
    tags: tuple[str, ...] = ()
    #: The item's id within its set when an import names it (BEIR's query `_id`), else "".
    item_id: str = ""


@dataclass(frozen=True, slots=True)
class Judgement:
    """What the metrics compare an outcome with (from an Item)."""

    #: document_key → grade (> 0 relevant).
    qrels: Mapping[str, int] = field(default_factory=dict)
    expected_route: str = ""
    reference_answer: str = ""


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one run of one item produced."""

    #: Document keys in rank order, each once (first occurrence of its chunks).
    ranked_documents: tuple[str, ...] = ()
    route: str = ""
    answer: str = ""
    cited_documents: tuple[str, ...] = ()
    latency_seconds: float = 0.0
    #: The embedder's cosine between answer and reference answer, when both exist.
    answer_cosine: float | None = None
    #: The share of the answer's claims the grounding check found supported, when it ran.
    support_score: float | None = None
    #: RUN mode: the RunResult.run_id of the run that answered.
    run_id: str = ""
    #: RUN mode: the answer's citations (index, filename, page_number, quote, document_id,
    #: support_score).
    citations: tuple[Mapping[str, Any], ...] = ()


def judgement_of(item: Item) -> Judgement:
    return Judgement(
        qrels={document_key(r.knowledge_base, r.document_id): r.grade for r in item.relevant},
        expected_route=item.expected_route,
        reference_answer=item.reference_answer,
    )


def ranked_unique(keys: list[str]) -> tuple[str, ...]:
    """Chunk hits' document keys in rank order → each document once, at its best rank."""
    return tuple(dict.fromkeys(keys))


#: RunConfig defaults: the deepest cut-off the metrics read; items run at once.
DEFAULT_TOP_K: Final = 10
DEFAULT_CONCURRENCY: Final = 4


@dataclass(frozen=True, slots=True)
class RunConfig:
    mode: str = "RETRIEVAL"
    top_k: int | None = None
    generate_answer: bool = False
    concurrency: int | None = None
    #: `knowledge_bases/{kb}/indexes/{id}` every retrieval of the run reads; "": the active
    #: indexes (docs/api.md#indexes).
    index: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "top_k": self.top_k,
            "generate_answer": self.generate_answer,
            "concurrency": self.concurrency,
            "index": self.index,
        }

    @classmethod
    def of(cls, data: Mapping[str, Any]) -> RunConfig:
        return cls(
            mode=data.get("mode", "RETRIEVAL"),
            top_k=data.get("top_k"),
            generate_answer=bool(data.get("generate_answer", False)),
            concurrency=data.get("concurrency"),
            # A run stored before indexes existed read the active ones.
            index=str(data.get("index") or ""),
        )
