"""BM25F field weights for facts, shared by both index backends.

A fact is matched over four fields. The weights say how much a query word found in that
field counts against the same word found in the quote:

    field      weight  why
    entity     3.0     the query names who or what it is about most of the time
    value      2.0     the answer itself ("Postgres", "$40k")
    predicate  1.5     the attribute asked for ("budget", "owner")
    quote      1.0     the verbatim evidence: long, so it matches often and weakly

SQLite applies them as FTS5 column weights, ``bm25(facts_fts_<space>, 3.0, 1.5, 2.0, 1.0)``
(true BM25 per column, summed with these weights, over one scope and branch's facts).
PostgreSQL has no BM25: it uses a weighted ``tsvector`` (entity A, value B, predicate C,
quote D) ranked by ``ts_rank`` with the same weights scaled to at most 1, which orders
alike on short fields but is not identical.
Each backend's raw score is normalised by the best candidate, so only order matters.
"""

from __future__ import annotations

# Order is the FTS5 column order of the facts table in the SQLite index.
FIELDS = ("entity", "predicate", "value", "quote")
FIELD_WEIGHTS = {"entity": 3.0, "predicate": 1.5, "value": 2.0, "quote": 1.0}

# PostgreSQL setweight labels per field, and ts_rank's {D, C, B, A} weight array.
PG_LABELS = {"entity": "A", "value": "B", "predicate": "C", "quote": "D"}


def fts5_weights() -> tuple[float, ...]:
    return tuple(FIELD_WEIGHTS[f] for f in FIELDS)


def ts_rank_weights() -> list[float]:
    top = max(FIELD_WEIGHTS.values())
    by_label = {label: FIELD_WEIGHTS[f] / top for f, label in PG_LABELS.items()}
    return [by_label[label] for label in ("D", "C", "B", "A")]
