"""How much keyword ranking a query may cost: one rule for every ranked keyword pass.

The AMP cell stores and the AmpUp search index both score one row per matching posting;
past `POSTINGS_BUDGET` postings a query's most common terms (lowest IDF, least weight) are
left to the embedding side, and the rarest always stays. When the rarest alone is over
the budget, the search index's ranked pass takes only its newest `POSTINGS_BUDGET`
matching rows as candidates (`SQLiteIndex._floor`, `PostgresIndex._keyword`), so no pass
ranks more postings. Both index backends keep the same terms and rank the same rows.

On PostgreSQL the search index counts a term's rows with `postings_sql` (through the GIN
index, stopped past the budget) and remembers the counts a while (`RecentCounts`); the
AMP cell store reads exact counts its triggers keep (`amp/store/pg_words.py`), and counts
with `postings_sql` only a word they do not count. Both take the kept terms by
`term_counts` and `affordable_terms`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable, Sequence

POSTINGS_BUDGET = 8000
COUNTS_SECONDS = 60.0  # how long PostgreSQL's counts are remembered (`RecentCounts`)


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


def space_terms(terms: Sequence[str], postings: Callable[[str], int], view: bool = False
                ) -> tuple[list[str], bool]:
    """The terms one space's ranked keyword pass ranks by, and whether their postings
    there are over the budget (then it ranks its newest `POSTINGS_BUDGET` matches only).

    ``view``: the terms were kept for a view of several spaces (`affordable_terms` over
    their rows together), so every one is ranked, even one this space lacks: each
    segment of the view ranks by the same query, with the view's statistics."""
    kept = list(terms) if view else affordable_terms(terms, postings)
    return kept, sum(postings(t) for t in kept) > POSTINGS_BUDGET


def postings_sql(table: str, where: str = "") -> str:
    """PostgreSQL: the rows of ``table`` matching a tsquery (the first ``%s``), counted up
    to a cap (the last ``%s``; NULL counts them all). ``where`` narrows the rows
    (" AND ..." with its own ``%s`` parameters, passed between the two)."""
    if not table.isidentifier():
        raise ValueError(f"not a table name: {table!r}")
    return (f"SELECT count(*) FROM (SELECT 1 FROM {table} WHERE tsv @@"
            f" to_tsquery('english', %s){where} LIMIT %s) s")


def term_counts(terms: Sequence[str], capped: Callable[[str], int],
                exact: Callable[[list[str]], dict[str, int]]) -> dict[str, int]:
    """Rows matching each term, as the budget and BM25's IDF need them: counted only up to
    the budget (``capped``: stopped past `POSTINGS_BUDGET`), and only when every known
    term is over it counted to the end (``exact``, given the known terms), which decides
    the one kept. So a kept term's count is always exact, and a common word is never
    counted to the end while a rarer one is there to keep."""
    counts = {term: capped(term) for term in terms}
    known = [term for term, n in counts.items() if n > 0]
    if known and all(counts[term] > POSTINGS_BUDGET for term in known):
        found = exact(known)
        counts = {term: n and found[term] for term, n in counts.items()}
    return counts


def exact_counts_sql(table: str, terms: int, where: str = "") -> str:
    """PostgreSQL: every row of ``table`` matching each of ``terms`` tsqueries (the first
    ``terms`` ``%s``), in one pass over the rows matching any of them (the next ``%s``):
    a common word's count reads most of the table, three words one pass, not three.
    ``where`` narrows the rows as in `postings_sql`."""
    if not table.isidentifier():
        raise ValueError(f"not a table name: {table!r}")
    each = ", ".join(["count(*) FILTER (WHERE tsv @@ to_tsquery('english', %s))"] * terms)
    return f"SELECT {each} FROM {table} WHERE tsv @@ to_tsquery('english', %s){where}"


class RecentCounts:
    """Postings counts remembered for ``seconds``: a common word's count is a walk of up
    to `POSTINGS_BUDGET` rows, and the budget needs only its order of magnitude, which a
    minute of writes barely moves. `clear` forgets them (after this process's writes).

    A zero is never remembered: `affordable_terms` drops a word no row holds, so a
    remembered zero left out of the keyword pass, for a minute, the first rows to hold it
    that another server (or this one) had just written."""

    def __init__(self, seconds: float, kept: int = 10_000) -> None:
        self.seconds = seconds
        self.kept = kept
        self._counts: dict[Hashable, tuple[int, float]] = {}
        self._lock = threading.Lock()

    def get(self, key: Hashable, count: Callable[[], int]) -> int:
        found = self.peek(key)
        if found is not None:
            return found
        n = count()
        self.put(key, n)
        return n

    def peek(self, key: Hashable) -> int | None:
        """The count remembered for ``key``, if still fresh."""
        with self._lock:
            found = self._counts.get(key)
        if found is None or time.monotonic() - found[1] >= self.seconds:
            return None
        return found[0]

    def put(self, key: Hashable, n: int) -> None:
        if n <= 0:
            return
        with self._lock:
            if len(self._counts) >= self.kept:
                self._counts.clear()
            self._counts[key] = (n, time.monotonic())

    def clear(self) -> None:
        with self._lock:
            self._counts.clear()
