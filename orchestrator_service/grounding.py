"""The grounding check (docs/api.md#grounding-check): an answer read as claims, each scored
against facts by the model task `check_grounding`, and what follows from the scores — the
CheckGrounding response, and an answer that keeps only its supported claims. Pure: the model
call is the caller's.

A claim is a sentence of the answer (`shared.sentences.sentence_spans`: a line break inside a
wrapped paragraph does not end one) with the "[n]" markers that follow it; markers a sentence starts
with ("… timeouts. [2] It …") close the claim before. A claim that carries markers is checked
against the facts it cites only ("supported by the cited evidence"); one without, against all.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from orchestrator_service.answer import MARKER, clean_markers, marker_numbers
from orchestrator_service.models.base import ClaimToCheck, ClaimVerdict
from shared.errors import InvalidArgument
from shared.sentences import CLAIM_EDGES, sentence_spans, unwrap

#: The score a fact must reach to support a claim, unless the request says otherwise.
DEFAULT_CITATION_THRESHOLD = 0.6
#: CheckGroundingRequest limits.
MAX_FACTS = 200
MAX_TEXT_BYTES = 32 * 1024

_SPACE_BEFORE_MARK = re.compile(r"[ \t]+(?=[。！？；，.!?;,]|$)")
_LEADING_MARKERS = re.compile(r"(?:\s*" + MARKER.pattern + r")+")


@dataclass(frozen=True, slots=True)
class ClaimSpan:
    """One claim of an answer: `answer[start:end]` (characters), and the 1-based fact numbers
    its markers cite."""

    start: int
    end: int
    cited: tuple[int, ...]

    def to_check(self, answer: str, fact_count: int) -> ClaimToCheck:
        """The claim as the model reads it: its text without markers, on one line, and the
        0-based facts it cites (numbers outside the facts ignored)."""
        return _to_check(answer[self.start : self.end], self.cited, fact_count)


def _to_check(claim: str, cited: Sequence[int], fact_count: int) -> ClaimToCheck:
    # clean_markers with no facts removes every marker, with the spaces before it.
    body = _SPACE_BEFORE_MARK.sub("", unwrap(clean_markers(claim, 0))).strip()
    facts = (n - 1 for n in cited if 1 <= n <= fact_count)
    return ClaimToCheck(body, tuple(dict.fromkeys(facts)))


def claim_spans(answer: str) -> list[ClaimSpan]:
    """The claims of `answer` in order (see the module docstring)."""
    bounds: list[list[int]] = []
    for start, end in sentence_spans(answer):
        lead = _LEADING_MARKERS.match(answer, start, end)
        if lead and lead.end() > start and bounds:
            bounds[-1][1] = lead.end()  # the markers close the claim before
            start = lead.end()
            while start < end and answer[start].isspace():
                start += 1
        if not MARKER.sub("", answer[start:end]).strip(CLAIM_EDGES):
            if bounds and start < end:  # markers alone: they belong to the claim before
                bounds[-1][1] = end
            continue
        bounds.append([start, end])
    return [ClaimSpan(a, b, _cited(answer, a, b)) for a, b in bounds]


def _cited(answer: str, start: int, end: int) -> tuple[int, ...]:
    """The fact numbers the markers within answer[start:end] name, in order."""
    return tuple(n for m in MARKER.finditer(answer, start, end) for n in marker_numbers(m[1]))


# ---- CheckGrounding ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Claim:
    """A claim of CheckGroundingResponse: positions in UTF-8 bytes of the answer."""

    start_pos: int
    end_pos: int
    claim_text: str
    citation_indices: tuple[int, ...]
    grounding_check_required: bool
    score: float


@dataclass(frozen=True, slots=True)
class Grounding:
    support_score: float
    claims: tuple[Claim, ...]


def check_request(answer: str, facts: Sequence[str], threshold: float | None) -> float:
    """The request's threshold (the default when absent), once every field is within its
    limits; InvalidArgument naming the field otherwise."""
    if not answer.strip():
        raise InvalidArgument("answer_candidate", "must not be blank")
    size = len(answer.encode())
    if size > MAX_TEXT_BYTES:
        raise InvalidArgument("answer_candidate", f"is {size} bytes, at most {MAX_TEXT_BYTES}")
    if len(facts) > MAX_FACTS:
        raise InvalidArgument("facts", f"holds {len(facts)} facts, at most {MAX_FACTS}")
    for index, text in enumerate(facts):
        if not text.strip():
            raise InvalidArgument(f"facts[{index}].text", "must not be blank")
        size = len(text.encode())
        if size > MAX_TEXT_BYTES:
            raise InvalidArgument(
                f"facts[{index}].text", f"is {size} bytes, at most {MAX_TEXT_BYTES}"
            )
    if threshold is None:
        return DEFAULT_CITATION_THRESHOLD
    if not 0.0 <= threshold <= 1.0:  # also refuses NaN
        raise InvalidArgument("citation_threshold", f"is {threshold}, must be within 0 and 1")
    return threshold


def support_score(verdicts: Sequence[ClaimVerdict]) -> float:
    """The mean score of the claims that need support; 0 when none does."""
    scores = [v.score for v in verdicts if v.grounding_check_required]
    return sum(scores) / len(scores) if scores else 0.0


def grounding(
    answer: str, spans: Sequence[ClaimSpan], verdicts: Sequence[ClaimVerdict], threshold: float
) -> Grounding:
    """The CheckGrounding response for `answer`'s claims and their verdicts (in claim order):
    positions in UTF-8 bytes, and only the citations that reach `threshold`."""
    claims = []
    byte_at = _byte_offsets(answer)
    for span, verdict in zip(spans, verdicts, strict=True):
        required = verdict.grounding_check_required
        cited = required and verdict.score >= threshold
        claims.append(
            Claim(
                start_pos=byte_at(span.start),
                end_pos=byte_at(span.end),
                claim_text=answer[span.start : span.end],
                citation_indices=tuple(verdict.citation_indices) if cited else (),
                grounding_check_required=required,
                score=verdict.score if required else 0.0,
            )
        )
    return Grounding(support_score(verdicts), tuple(claims))


def in_claim_order(verdicts: Sequence[ClaimVerdict], count: int) -> list[ClaimVerdict]:
    """The verdicts sorted by claim, once there is exactly one per claim 0..count-1."""
    ordered = sorted(verdicts, key=lambda v: v.claim_index)
    if [v.claim_index for v in ordered] != list(range(count)):
        raise ValueError(f"expected one verdict for each of the {count} claims")
    return ordered


def _byte_offsets(text: str) -> Callable[[int], int]:
    """Character offset → UTF-8 byte offset, without re-encoding the prefix each time."""
    if text.isascii():
        return lambda at: at
    prefix = [0]
    for char in text:
        prefix.append(prefix[-1] + len(char.encode()))
    return lambda at: prefix[at]


# ---- answers keep their supported claims ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Settled:
    """A claim whose text is complete: `text` is what the answer gains if it is kept — the
    separator before it (unless it would open the answer) and the claim itself."""

    span: ClaimSpan
    lead: str
    claim: str

    def to_check(self, fact_count: int) -> ClaimToCheck:
        return _to_check(self.claim, self.span.cited, fact_count)

    def text(self, *, first: bool) -> str:
        """What the claim adds to the answer when kept: no separator before the first."""
        return (self.lead.lstrip() if first else self.lead) + self.claim


class ClaimGate:
    """Cuts a streamed answer into settled claims: `feed` takes the next (marker-cleaned)
    piece and returns the claims it completed, `finish` the rest. A claim is settled once the
    next one has begun, so a kept claim can be sent on while the model still writes."""

    def __init__(self) -> None:
        self.text = ""  # everything fed so far
        self._done = 0  # character offset up to which claims were handed out

    def feed(self, piece: str) -> list[Settled]:
        self.text += piece
        spans = claim_spans(self.text)
        return self._hand_out(spans[:-1])

    def finish(self) -> list[Settled]:
        return self._hand_out(claim_spans(self.text))

    def _hand_out(self, spans: list[ClaimSpan]) -> list[Settled]:
        settled = []
        for span in spans:
            if span.start < self._done:
                continue
            lead = self.text[self._done : span.start]
            settled.append(Settled(span, lead, self.text[span.start : span.end]))
            self._done = span.end
        return settled


def citation_scores(
    kept: Sequence[tuple[ClaimSpan, ClaimVerdict]],
) -> dict[int, float]:
    """Citation.support_score by cited doc number: the mean score of the kept claims that
    cite it and need support."""
    scores: dict[int, list[float]] = {}
    for span, verdict in kept:
        if verdict.grounding_check_required:
            for number in dict.fromkeys(span.cited):
                scores.setdefault(number, []).append(verdict.score)
    return {n: sum(s) / len(s) for n, s in scores.items()}
