"""The one ranker. AMP cell search and AmpUp fact/passage search both score with it.

    keyword  = raw keyword score / best raw keyword score among the candidates   ∈ [0, 1]
    meaning  = max(0, cosine(query, document))                                   ∈ [0, 1]
    time     = TIME_BOOST when a fact's validity overlaps the window the query names
    score    = 0.6 · keyword + 0.4 · meaning + time

The time boost is 1.0, more than any relevance (at most 1), so a query that names a
window ranks every candidate valid in that window above every one that is not, and
relevance orders each group.

With a reranker (passages only, `search/rerank.py`), a reranked passage's relevance is

    (1 − w) · (0.6 · keyword + 0.4 · meaning) + w · rerank + time

where ``rerank`` is its cross-encoder logit scaled to [0, 1] by the lowest and highest
logit among the passages reranked together, and ``w`` is AMPUP_MEMORY_RERANK_WEIGHT.

AMP cells then blend relevance with their decay score: ``score × (0.5 + 0.5 · decay)``,
so fading context sinks but a relevant memory never drops below half its relevance.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime

KEYWORD_WEIGHT = 0.6
MEANING_WEIGHT = 0.4
DECAY_FLOOR = 0.5
TIME_BOOST = 1.0


@dataclass(frozen=True)
class Parts:
    keyword: float
    meaning: float
    time: float = 0.0
    rerank: float | None = None  # the scaled cross-encoder score, when reranked
    rerank_weight: float = 0.0

    @property
    def relevance(self) -> float:
        hybrid = KEYWORD_WEIGHT * self.keyword + MEANING_WEIGHT * self.meaning
        if self.rerank is None:
            return hybrid + self.time
        w = self.rerank_weight
        return (1.0 - w) * hybrid + w * self.rerank + self.time


def normalise_keyword(raw: Sequence[float]) -> list[float]:
    best = max(raw, default=0.0)
    if best <= 0:
        return [0.0 for _ in raw]
    return [max(0.0, r) / best for r in raw]


def meaning(cosine: float | None) -> float:
    if cosine is None:
        return 0.0
    return min(1.0, max(0.0, cosine))


def score_parts(raw_keyword: Sequence[float], cosines: Sequence[float | None]) -> list[Parts]:
    """Normalised parts for a candidate list, in the same order."""
    keyword = normalise_keyword(raw_keyword)
    return [Parts(k, meaning(c)) for k, c in zip(keyword, cosines, strict=True)]


def overlaps(
    valid_from: datetime | None, valid_to: datetime | None, start: datetime, end: datetime
) -> bool:
    """Whether validity [valid_from, valid_to) meets the window [start, end); None = open."""
    return (valid_from is None or valid_from < end) and (valid_to is None or valid_to > start)


def time_part(
    valid_from: datetime | None,
    valid_to: datetime | None,
    window: tuple[datetime, datetime] | None,
) -> float:
    """The time boost of one fact for a query's window (0 when the query names none).

    A fact with no ``valid_from`` says nothing about when it held, so it gets no boost."""
    if window is None or valid_from is None:
        return 0.0
    return TIME_BOOST if overlaps(valid_from, valid_to, window[0], window[1]) else 0.0


def with_time(parts: Parts, time: float) -> Parts:
    return replace(parts, time=time)


def reranked(parts: Sequence[Parts], logits: Sequence[float], weight: float) -> list[Parts]:
    """``parts`` with their reranker logits, scaled to [0, 1] among themselves, blended in
    with ``weight``. A logit is unbounded and its spread differs per question, so only
    its place between this question's lowest and highest counts."""
    low, high = min(logits, default=0.0), max(logits, default=0.0)
    span = high - low
    return [replace(p, rerank=(x - low) / span if span > 0 else 0.0, rerank_weight=weight)
            for p, x in zip(parts, logits, strict=True)]


def with_decay(relevance: float, decay: float) -> float:
    """AMP's blend of relevance and the cell's decay score."""
    return relevance * (DECAY_FLOOR + (1.0 - DECAY_FLOOR) * max(0.0, min(1.0, decay)))
