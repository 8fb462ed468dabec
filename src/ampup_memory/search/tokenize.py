"""Query and document tokenisation shared by every keyword index."""

from __future__ import annotations

import re

_WORD = re.compile(r"\w+", re.UNICODE)

# Words so common that matching them ranks nothing but costs a scan of most rows. "many"
# and "much" are the quantifiers of "how many / how much": the question asks for a count,
# and passages that say "many" are no nearer to it (docs/performance.md, "Search: levers
# on both benchmarks").
STOPWORDS = frozenset(
    """a an and are as at be but by do does did for from had has have he her hers him his
    how i if in into is it its many me much my no not of on or our ours she so than that
    the their them then there these they this those to too us was we were what when where
    which who whom why will with you your yours""".split()
)

MAX_QUERY_TERMS = 32


def words(text: str) -> list[str]:
    """Lower-cased word tokens, in order, stopwords kept."""
    return [w.lower() for w in _WORD.findall(text)]


def query_terms(text: str) -> list[str]:
    """Distinct content words of a query, in order of first appearance."""
    seen: dict[str, None] = {}
    for word in words(text):
        if word not in STOPWORDS and word not in seen:
            seen[word] = None
    terms = list(seen) or list(dict.fromkeys(words(text)))
    return terms[:MAX_QUERY_TERMS]


def fts5_match(terms: list[str]) -> str:
    """An FTS5 MATCH expression: any of the terms, each quoted so no syntax leaks in."""
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)
