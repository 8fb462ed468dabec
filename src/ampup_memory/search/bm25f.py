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
PostgreSQL has no BM25: it keeps a weighted ``tsvector`` (entity A, value B, predicate C,
quote D) and computes BM25 itself (`PostgresIndex._keyword`): a query word's weighted
frequency in a row is ``ts_rank_cd`` of that word alone with these weights (scaled to at
most 1, as PostgreSQL requires, and scaled back: `rank_cd_weights`), its IDF is `idf`
over the space's rows, and a row's length is its tsvector's distinct words.
Each backend's raw score is normalised by the best candidate, so only order matters.
"""

from __future__ import annotations

import math

# Order is the FTS5 column order of the facts table in the SQLite index.
FIELDS = ("entity", "predicate", "value", "quote")
FIELD_WEIGHTS = {"entity": 3.0, "predicate": 1.5, "value": 2.0, "quote": 1.0}

# PostgreSQL setweight labels per field (`rank_cd_weights` weighs them).
PG_LABELS = {"entity": "A", "value": "B", "predicate": "C", "quote": "D"}


def fts5_weights() -> tuple[float, ...]:
    return tuple(FIELD_WEIGHTS[f] for f in FIELDS)


# BM25's term frequency saturation and length normalisation (FTS5's k1 and b; both
# backends).
K1 = 1.2
B = 0.75


def idf(rows: int, hits: int) -> float:
    """A query word's weight in BM25 over ``rows`` rows of which ``hits`` hold it: FTS5's
    (sqlite/ext/fts5/fts5_aux.c), never below 1e-6 (a word in most rows still counts a
    little). One rule for SQLite's held and view scores and for PostgreSQL's."""
    value = math.log((rows - hits + 0.5) / (hits + 0.5))
    return value if value > 0.0 else 1e-6


def rank_cd_weights(fields: bool) -> tuple[list[float], float]:
    """PostgreSQL: the ``ts_rank_cd`` weight array ({D, C, B, A}) that makes the rank of a
    one-word query the word's weighted frequency in the row, and the factor that scales
    it back to FTS5's (a column's weight per occurrence). PostgreSQL rejects weights
    above 1, so the field weights are divided by the largest; a row of one field
    (passages: label D) counts each occurrence as 1."""
    if not fields:
        return [1.0, 1.0, 1.0, 1.0], 1.0
    top = max(FIELD_WEIGHTS.values())
    by_label = {label: FIELD_WEIGHTS[f] / top for f, label in PG_LABELS.items()}
    return [by_label[label] for label in ("D", "C", "B", "A")], top
