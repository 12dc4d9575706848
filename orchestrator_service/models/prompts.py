"""Prompts of the model tasks (docs/api.md#model-calls; answer_generation:
docs/api.md#grounded-answers). The question and every chunk text are
carried verbatim, inside tags, so that nothing in them can be mistaken for instructions — and
so a scripted test server can read them back."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from orchestrator_service.conversation import Turn
from orchestrator_service.models.base import ClaimToCheck

COMPLEXITY_SYSTEM = """\
You plan retrieval for a knowledge-base assistant. Decide whether the user's question is simple \
or complex.
- simple: a fact lookup, a definition, a single data point, an explicit either/or question, or \
one attribute, parameter or specification of one thing.
- complex: needs synthesis across documents, analysis from several angles, a comparison, \
multi-step reasoning, or several independent sources.
For a complex question also give 2 to 4 sub-questions that do not overlap and can each be \
retrieved on their own; write them in the language of the question. For a simple question \
sub_questions must be an empty list. Give a one-sentence reason."""

GRADE_SYSTEM = """\
You grade retrieved evidence for a knowledge-base assistant. Judge ONLY from the snippets given; \
never add outside facts.
relevance: none = off-topic; weak = related but the evidence is weak; strong = clearly on-topic.
answerability: none; partial = clues but no definitive answer; sufficient = the snippets \
support an answer directly or in combination.
ambiguity: missing_slot = a key condition is missing (a name, version, file type, module, \
product line, ...); multiple_candidates = several candidate directions fit; none.
route: answer = strong and sufficient; rewrite = a related signal, but phrasing, an alias or \
generality left the evidence thin; clarify = the user must supply a condition; scope_select = \
the user must choose a direction; no_knowledge = nothing useful was retrieved or it is off-topic.
For clarify or scope_select write hitl_prompt, a short follow-up question in the language of \
the question, and hitl_options when you can list the choices; name missing conditions in \
missing_slots. confidence is your certainty from 0 to 1; reason is one sentence."""

REWRITE_SYSTEM = """\
A first retrieval for the user's question found a related signal but not enough evidence. \
Choose exactly ONE rewrite method and write its text; leave the other field an empty string.
- step_back: the question is too specific (entity names, model numbers, times, conditions, \
details); write a more general question about the underlying concept, mechanism or principle.
- hyde: the question is vague or conceptual, or lacks the knowledge base's terms; write a short \
plausible answer-style passage to search with. It only aids retrieval: it is not evidence and \
must not invent citations.
step_back_question at most 300 characters, hyde_document at most 1200."""

CONDENSE_SYSTEM = """\
You prepare a chat follow-up for retrieval from a knowledge base. Given the earlier turns of the \
conversation (oldest first) and the user's new question, rewrite the new question so that it \
stands alone: replace pronouns and demonstratives ("it", "they", "this plan", "它", "这个", \
"那家") with what they refer to, and complete an elliptical question ("And the Basic one?", \
"那标准版呢？", "What about in winter?") with what it asks about from the earlier turn. Keep \
the user's language, intent and wording otherwise; add no facts from the answers beyond the \
names needed. If the new question already stands alone or starts a new topic, return it \
unchanged. Answer with standalone_question only."""

ANSWER_SYSTEM = """\
You answer the user's question for a knowledge-base assistant, using ONLY the numbered chunks \
given; never add outside facts. Write in the language of the question, in plain sentences. \
After each claim put the number of the chunk it comes from in square brackets, e.g. [1] or \
[1][3]; cite only numbers that appear in the chunks. Do not list the sources at the end. If \
the chunks do not cover part of the question, do not guess it."""

GROUNDING_SYSTEM = """\
You check whether the claims of an answer are supported by the numbered facts given. Judge ONLY \
from the facts; never use outside knowledge. For every claim give one verdict with its \
claim_index:
- grounding_check_required: false when the claim asserts nothing that needs support (a \
greeting, a closing line, a note saying what the evidence lacks), else true.
- score from 0 to 1: how well the best fact supports the claim. 1 = the facts state everything \
the claim says; 0 = nothing in the facts supports it. A claim about a different entity than the \
fact (another product, plan, model, person or kind), with a different number, date or unit, or \
with the opposite polarity (negated) is NOT supported, however similar the words; a claim only \
partly supported scores below 0.5.
- citation_indices: the indices of the facts that support the claim, best first; when a claim \
lists cites, judge it against those facts only. Empty when nothing supports it.
A claim that needs no support has score 0 and no citation_indices."""

ANSWER_PARTIAL = """\
The evidence is known to be incomplete; it lacks: {slots}. Answer only what the chunks support."""


def _question_block(question: str) -> str:
    return f"<question>\n{question}\n</question>"


def _chunks_block(docs: Sequence[Mapping[str, Any]]) -> str:
    parts = [
        f'<chunk index="{i}" source="{d.get("filename") or "Unknown"}" '
        f'page="{d.get("page_number") or "N/A"}">\n{d.get("text") or ""}\n</chunk>'
        for i, d in enumerate(docs, start=1)
    ]
    return "<chunks>\n" + "\n".join(parts) + "\n</chunks>"


def complexity_messages(question: str) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": COMPLEXITY_SYSTEM},
        {"role": "user", "content": _question_block(question)},
    ]


def _history_block(history: Sequence[Turn]) -> str:
    turns = [
        f'<turn index="{i}">\n<user>\n{t.question}\n</user>\n'
        f"<assistant>\n{t.answer}\n</assistant>\n</turn>"
        for i, t in enumerate(history, start=1)
    ]
    return "<history>\n" + "\n".join(turns) + "\n</history>"


def condense_messages(question: str, history: Sequence[Turn]) -> list[dict[str, str]]:
    """The earlier turns verbatim, oldest first, then the new question."""
    return [
        {"role": "system", "content": CONDENSE_SYSTEM},
        {"role": "user", "content": f"{_history_block(history)}\n{_question_block(question)}"},
    ]


def grade_messages(question: str, docs: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": GRADE_SYSTEM},
        {"role": "user", "content": f"{_question_block(question)}\n{_chunks_block(docs)}"},
    ]


def rewrite_messages(question: str, docs: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": REWRITE_SYSTEM},
        {"role": "user", "content": f"{_question_block(question)}\n{_chunks_block(docs)}"},
    ]


def answer_messages(
    question: str, docs: Sequence[Mapping[str, Any]], missing_slots: Sequence[str] = ()
) -> list[dict[str, str]]:
    """The question and the numbered evidence verbatim; the chunk numbers are the positions in
    RunResult.docs that the answer's "[n]" markers cite."""
    system = ANSWER_SYSTEM
    slots = [slot for slot in missing_slots if slot.strip()]
    if slots:
        system += "\n" + ANSWER_PARTIAL.format(slots=", ".join(slots))
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": f"{_question_block(question)}\n{_chunks_block(docs)}"},
    ]


def grounding_messages(
    claims: Sequence[ClaimToCheck], facts: Sequence[str]
) -> list[dict[str, str]]:
    """The facts (0-based, as citation_indices count) and the claims verbatim."""
    fact_block = "\n".join(f'<fact index="{i}">\n{text}\n</fact>' for i, text in enumerate(facts))
    claim_block = "\n".join(
        f'<claim index="{i}"'
        + (f' cites="{",".join(str(n) for n in claim.cited)}"' if claim.cited else "")
        + f">\n{claim.text}\n</claim>"
        for i, claim in enumerate(claims)
    )
    return [
        {"role": "system", "content": GROUNDING_SYSTEM},
        {
            "role": "user",
            "content": f"<facts>\n{fact_block}\n</facts>\n<claims>\n{claim_block}\n</claims>",
        },
    ]


def question_of(messages: Sequence[Mapping[str, Any]]) -> str | None:
    """The question carried by a task's messages (what scripted test servers key on)."""
    for message in messages:
        content = str(message.get("content") or "")
        start = content.find("<question>\n")
        end = content.find("\n</question>")
        if start != -1 and end != -1:
            return content[start + len("<question>\n") : end]
    return None
