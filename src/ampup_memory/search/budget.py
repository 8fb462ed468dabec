"""How much keyword ranking a query may cost: one rule for every ranked keyword pass.

The AMP cell stores and the AmpUp search index both score one row per matching posting;
past `POSTINGS_BUDGET` postings a query's most common terms (lowest IDF, least weight) are
left to the embedding side, and the rarest always stays. When the rarest alone is over
the budget, the search index's ranked pass takes only its newest `POSTINGS_BUDGET`
matching rows as candidates (`SQLiteIndex._floor`), so no pass ranks more postings.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

POSTINGS_BUDGET = 8000


def affordable_terms(terms: Sequence[str], postings: Callable[[str], int]) -> list[str]:
    """The query terms worth a ranked keyword pass: known ones, rarest first, until their
    postings (``postings(term)`` = rows matching it) would pass `POSTINGS_BUDGET`."""
    counted = sorted((n, t) for t in terms if (n := postings(t)) > 0)
    kept: list[str] = []
    total = 0
    for n, term in counted:
        if kept and total + n > POSTINGS_BUDGET:
            break
        kept.append(term)
        total += n
    return kept
