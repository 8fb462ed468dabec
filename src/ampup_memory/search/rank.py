"""The one ranker. AMP cell search and AmpUp fact/passage search both score with it.

    keyword  = raw keyword score / best raw keyword score among the candidates   ∈ [0, 1]
    meaning  = max(0, cosine(query, document))                                   ∈ [0, 1]
    score    = 0.6 · keyword + 0.4 · meaning (+ time boost for AmpUp facts)

AMP cells then blend relevance with their decay score: ``score × (0.5 + 0.5 · decay)``,
so fading context sinks but a relevant memory never drops below half its relevance.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

KEYWORD_WEIGHT = 0.6
MEANING_WEIGHT = 0.4
DECAY_FLOOR = 0.5


@dataclass(frozen=True)
class Parts:
    keyword: float
    meaning: float
    time: float = 0.0

    @property
    def relevance(self) -> float:
        return KEYWORD_WEIGHT * self.keyword + MEANING_WEIGHT * self.meaning + self.time


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


def with_decay(relevance: float, decay: float) -> float:
    """AMP's blend of relevance and the cell's decay score."""
    return relevance * (DECAY_FLOOR + (1.0 - DECAY_FLOOR) * max(0.0, min(1.0, decay)))
