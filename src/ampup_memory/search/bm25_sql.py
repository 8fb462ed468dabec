"""BM25 in PostgreSQL's SQL: one rule for every keyword pass ranked on PostgreSQL (the
search index's facts and passages, `PostgresIndex._keyword`, and the AMP cell store,
`PostgresStore.search_candidates`), so each ranks as its SQLite twin's FTS5 ``bm25()``.

PostgreSQL has no BM25: each kept word's weighted frequency in a row is ``ts_rank_cd`` of
that word alone (`bm25f.rank_cd_weights`), its IDF is `bm25f.idf` over the statistics the
caller counted (`Statistics`: rows, their summed lengths, each word's rows), and a row's
length is its tsvector's distinct words (`LENGTH`: FTS5 counts every token; PostgreSQL
keeps no token count, and a repeated word saturates in ``f`` already).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ampup_memory.search.bm25f import K1, B, idf, rank_cd_weights
from ampup_memory.search.index.base import Statistics


def length_of(tsv: str) -> str:
    """A row's length for BM25's length normalisation (see above), of the tsvector
    ``tsv`` (an SQL expression)."""
    return f"length({tsv})"


LENGTH = length_of("tsv")


def number_forms(term: str) -> tuple[str, ...]:
    """The lexemes a query term matches. PostgreSQL's parser reads a number after a hyphen
    as a signed integer ("2025-11-20" is the lexemes 2025, -11, -20), where FTS5 and the
    query see 11 and 20: a number term also matches its signed lexeme, so a date finds
    its words on both backends."""
    return (term, f"-{term}") if term.isdigit() else (term,)


@dataclass(frozen=True)
class Scoring:
    """A keyword pass's BM25 in SQL (`bm25`): ``columns`` (each word's frequency ``f<i>``
    and the row's length ``l``, selected from rows with ``tsv`` beside the ``queries``,
    FROM items ``q<i>`` of parameters ``words``) feed ``score`` (parameters ``values``).
    The columns are computed in a subquery kept apart (``OFFSET 0``): inlined, each
    ``f<i>`` would be computed twice per row."""

    columns: str
    queries: str
    words: tuple[str, ...]
    score: str
    values: tuple[float, ...]


def bm25(words: Sequence[str], stats: Statistics, fields: bool) -> Scoring:
    """BM25 of a row over the kept words (``words``: each one's ``to_tsquery`` input, in
    the order of ``stats.hits``): per word, its IDF times its weighted frequency ``f``
    saturated as ``f (k1 + 1) / (f + k1 (1 - b + b L / avgL))``, FTS5's form, ``L`` the
    row's length. ``fields``: the rows' tsvectors carry the facts' field labels."""
    weights, scale = rank_cd_weights(fields)
    array = "'{" + ",".join(str(w) for w in weights) + "}'::float4[]"
    norm = f"({K1!r} * ({1.0 - B!r} + {B!r} * l / %s::float8))"
    columns, parts, items = [], [], []
    for i in range(len(words)):
        columns.append(f", {scale!r} * ts_rank_cd({array}, tsv, q{i})::float8 AS f{i}")
        parts.append(f"%s::float8 * (f{i} * {K1 + 1.0!r}) / (f{i} + {norm})")
        items.append(f", to_tsquery('english', %s) q{i}")
    average = stats.tokens / stats.rows if stats.rows and stats.tokens else 1.0
    values = tuple(v for hits in stats.hits for v in (idf(stats.rows, hits), average))
    return Scoring("".join(columns) + f", {LENGTH}::float8 AS l", "".join(items),
                   tuple(words), " + ".join(parts) or "0.0", values)
