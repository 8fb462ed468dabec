"""The PostgreSQL cell store's keyword postings, kept by the database as cells are written.

BM25 ranks each cell matching a kept word by the word's frequency in it and its length
(`search/bm25_sql.py`). Taken from the ``tsv`` column, that is one heap page per matching
cell (a wide row: the embedding is stored in it) and a ``ts_rank_cd`` per kept word, up
to about 8,000 cells a search (the postings budget); 29 ms of server CPU at 960k cells
(docs/performance.md, session 23). Here each cell's words are kept as rows of
``cell_postings(word, cell_id, …, tf, len)``, with every column `rows.where_clause`
tests, and read by an index-only scan of ``(word, cell_id) INCLUDE (…)``: a search scores
its matching cells, filters included, from index pages that hold about 80 postings each,
reading no cell.

- ``tf`` is the lexeme's positions in the cell's ``tsv``: what ``ts_rank_cd`` of that
  word alone counts with the weights `bm25f.rank_cd_weights` gives (every weight 1, no
  normalisation); ``len`` the tsvector's distinct lexemes (`bm25_sql.LENGTH`). So the
  scores are the same numbers (`ranked` uses the same `bm25_sql.Scoring`).
- A row trigger writes a cell's postings on INSERT, removes them on DELETE, and rewrites
  them on an UPDATE that changes ``tsv`` or a filtered column (a status change, a new
  access list); a read's ``touch`` and a re-embedding fire nothing. TRUNCATE empties them.
- A query word is read from here when its ``to_tsquery`` is its one lexeme (a number's:
  also the signed form, `bm25_sql.number_forms`): exactly the words `pg_words` counts.
  A search with another kept word (``foo_bar``: the phrase ``'foo' <-> 'bar'``) ranks
  from ``tsv`` as before.

A store an older version made gets the table, index and triggers when a server of this
version first opens it (`prepare`: every cell's postings written, under the store's schema
lock, writers waiting). A server of an older version writing the store afterwards keeps
them right, as the triggers are the database's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg

from ampup_memory.amp.store.pg_words import emptied, kept_by_triggers
from ampup_memory.search.bm25_sql import Scoring, length_of

Conn = psycopg.Connection[tuple[Any, ...]]

# Every column `rows.where_clause` tests, so the filters are tested in the index.
CARRIED = ("type", "owner_id", "created_by", "status", "public", "has_readers")
_COLS = ", ".join(CARRIED)

TABLE = """CREATE TABLE IF NOT EXISTS cell_postings (
    word text COLLATE "C" NOT NULL,
    cell_id text COLLATE "C" NOT NULL,
    type text NOT NULL,
    owner_id text NOT NULL,
    created_by text NOT NULL,
    status text NOT NULL,
    public boolean NOT NULL,
    has_readers boolean NOT NULL,
    tf integer NOT NULL,
    len integer NOT NULL
)"""

INDEX = ("CREATE INDEX IF NOT EXISTS cell_postings_word ON cell_postings (word, cell_id)"
         f" INCLUDE ({_COLS}, tf, len)")


def _postings_of(cell: str, source: str) -> str:
    """The postings rows of the cell row ``cell`` (``NEW``, or an alias ``source`` makes),
    one per lexeme ``u`` of its tsvector."""
    return (f"SELECT u.lexeme, {cell}.id, {', '.join(f'{cell}.{c}' for c in CARRIED)},"
            f" cardinality(u.positions), {length_of(f'{cell}.tsv')} FROM {source}")


_WRITE = f"""CREATE OR REPLACE FUNCTION cell_postings_write() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' THEN
        DELETE FROM cell_postings p USING unnest(tsvector_to_array(OLD.tsv)) l
        WHERE p.word = l COLLATE "C" AND p.cell_id = OLD.id;
    END IF;
    IF TG_OP <> 'DELETE' THEN
        INSERT INTO cell_postings (word, cell_id, {_COLS}, tf, len)
        {_postings_of("NEW", "unnest(NEW.tsv) u")};
    END IF;
    RETURN NULL;
END $$"""

_EMPTY, _EMPTIED = emptied("cell_postings", "cell_postings")


def _watched(row: str) -> str:
    """The columns whose change rewrites a cell's postings, of ``row`` (OLD or NEW)."""
    return ", ".join(f"{row}.{c}" for c in ("tsv", *CARRIED))


TRIGGERS = (
    "CREATE TRIGGER cell_postings_written AFTER INSERT OR DELETE ON cells"
    " FOR EACH ROW EXECUTE FUNCTION cell_postings_write()",
    "CREATE TRIGGER cell_postings_rewritten AFTER UPDATE ON cells FOR EACH ROW WHEN"
    f" (({_watched('OLD')}) IS DISTINCT FROM ({_watched('NEW')}))"
    " EXECUTE FUNCTION cell_postings_write()",
    _EMPTIED,
)


def prepare(conn: Conn, announce: Callable[[str], None]) -> bool:
    """The postings' table, index, functions and triggers, made where missing, and every
    cell's postings written again when any was (a store an older version made, or one
    whose trigger was dropped). Run inside the caller's transaction under its schema
    lock, after ``cells`` exists. ``announce`` is told what is done before the writing
    starts (it reads every cell, writers waiting). True when it wrote them."""
    return kept_by_triggers(conn, "cell_postings", (TABLE, _WRITE, _EMPTY), TRIGGERS, refill,
                            lambda: announce("writing the cells' keyword postings"), (INDEX,))


def refill(conn: Conn) -> None:
    """Every cell's postings written again, in one pass over the cells (the index made
    after them: faster than row by row); writers wait (the table is locked against
    writes until the caller's transaction ends)."""
    conn.execute("LOCK TABLE cells IN SHARE MODE")
    conn.execute("DROP INDEX IF EXISTS cell_postings_word")
    conn.execute("TRUNCATE cell_postings")
    conn.execute(f"INSERT INTO cell_postings (word, cell_id, {_COLS}, tf, len)"
                 f" {_postings_of('c', 'cells c, unnest(c.tsv) u')}")
    conn.execute(INDEX)
    conn.execute("ANALYZE cell_postings")  # autovacuum sets the visibility map later


def ranked(scoring: Scoring, where: str) -> str:
    """The ranking statement over the postings: each kept word's lexemes (its
    ``to_tsvector``'s one lexeme, and a number's signed form), their postings passing
    ``where`` (`rows.where_clause` with alias ``p.``), each cell's ``f<i>`` the sum of its
    word's lexemes' ``tf``, scored by ``scoring.score``; the ``k`` best, ties to the lower
    id. Parameters: ``scoring.values``, the kept terms (text[]), ``where``'s, ``k``."""
    freqs = "".join(
        f", coalesce(sum(p.tf) FILTER (WHERE w.i = {i + 1}), 0)::float8 AS f{i}"
        for i in range(len(scoring.words)))
    return (
        f"SELECT id, {scoring.score} AS r FROM"
        f" (SELECT p.cell_id AS id{freqs}, max(p.len)::float8 AS l FROM"
        " (SELECT u.i, f.word FROM unnest(%s::text[]) WITH ORDINALITY u(term, i),"
        " unnest(tsvector_to_array(to_tsvector('english', u.term))) t(l),"
        " unnest(CASE WHEN t.l ~ '^[0-9]+$' THEN ARRAY[t.l, '-' || t.l]"
        " ELSE ARRAY[t.l] END) f(word)) w"
        f" JOIN cell_postings p ON p.word = w.word COLLATE \"C\" AND {where}"
        " GROUP BY p.cell_id) a ORDER BY r DESC, id LIMIT %s")
