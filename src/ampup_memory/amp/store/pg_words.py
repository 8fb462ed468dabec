"""The PostgreSQL cell store's keyword statistics, kept by the database as cells are written.

BM25 needs, per search, the cells (N), their summed lengths and each query word's cells.
Counting them per search cost a pass over the table (N and lengths) and, for a word, a
walk of its postings; so they were counted at most once a minute per process, and two
servers could weigh a word by counts a minute apart. Here triggers on ``cells`` keep
them, in the writing transaction, so a search reads them exactly in one statement of
O(query words) index lookups, and every server reads the same committed counts:

- ``cell_words(word, shard, n)``: the cells whose ``tsv`` holds ``word`` (`_KEY`: a
  lexeme, a signed number's "-11" counted as "11"), ``cell_totals(shard, cells,
  lengths)``: the cells and their lengths (`bm25_sql.LENGTH`). Every cell counts, deleted
  and other owners' too, as FTS5's statistics count every row of ``cells_fts``.
- A cell's counts go to the shard of its id (`_shard`, one of `SHARDS`), so writers of
  other cells rarely wait on the same counter rows; a read sums the shards. Each writer
  locks its rows in one order (words sorted, then the totals row), and a transaction
  counts one cell at most (the store writes no two cells' texts in one), so concurrent
  writers cannot deadlock on them.
- A row trigger counts INSERT and DELETE, and an UPDATE only when ``tsv`` changed (a
  read's ``touch``, a status change or a re-embedding does not fire it); TRUNCATE empties
  the counts. A bulk ``COPY`` fires the row trigger per row: load with the triggers
  disabled and call `recount` instead, as `benchmarks/pg_cell_keyword.py` does.
- A query word's count is read from the table when its ``to_tsquery`` is one lexeme (or,
  for a number, the lexeme and its signed form: `bm25_sql.number_forms`); a word
  ``to_tsquery`` makes into something else (``foo_bar`` is the phrase ``'foo' <->
  'bar'``) has no row here and is counted through the GIN index as before (`STATISTICS`
  says which).

A store made by an older version gets the tables, triggers and their counts when a server
first opens it (`prepare`, under the store's schema lock, in the transaction that makes
them: writers wait for it, and a second server opening at once finds them made). The
counts live in the database, so a server of an older version writing the store keeps
them right too: its writes fire the same triggers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import psycopg

from ampup_memory.search.bm25_sql import LENGTH, length_of

Conn = psycopg.Connection[tuple[Any, ...]]

# A power of two (`_shard` masks the id's hash). With 16, eight writers at once spent 18 %
# of their time waiting on each other's counter rows, with 64, 5 % (docs/performance.md);
# a read sums at most this many rows per word.
SHARDS = 64

# The counted form of a lexeme ``l``: PostgreSQL reads "-11" of "2025-11-20" as a signed
# number, and a number word's query asks for both forms (`bm25_sql.number_forms`), so a
# cell holding either, or both, counts once for the number.
_KEY = "CASE WHEN l ~ '^-[0-9]+$' THEN substr(l, 2) ELSE l END"


def _shard(cell_id: str) -> str:
    """The shard of the cell whose id is the SQL expression ``cell_id``. Any spread would
    do (a read sums every shard); by id, a cell's counts come and go in one shard."""
    return f"(hashtext({cell_id}) & {SHARDS - 1})"


TABLES = (
    """CREATE TABLE IF NOT EXISTS cell_words (
        word text COLLATE "C" NOT NULL,
        shard smallint NOT NULL,
        n bigint NOT NULL,
        PRIMARY KEY (word, shard)
    )""",
    """CREATE TABLE IF NOT EXISTS cell_totals (
        shard smallint PRIMARY KEY,
        cells bigint NOT NULL,
        lengths bigint NOT NULL
    )""",
)

# One function for every row event: the words of the old text (none for an INSERT) are
# taken away and the new text's (none for a DELETE) added, only those that changed; a
# word's row that falls to 0 is deleted (a purge is an erasure, and an edit's old words
# are no one's). An INSERT, the common write, only adds: its own statement spares it the
# grouping (a quarter of the trigger's cost, measured).
_COUNT = f"""CREATE OR REPLACE FUNCTION cell_words_count() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    was_tsv tsvector := CASE WHEN TG_OP = 'INSERT' THEN NULL ELSE OLD.tsv END;
    new_tsv tsvector := CASE WHEN TG_OP = 'DELETE' THEN NULL ELSE NEW.tsv END;
    s smallint := {_shard("CASE WHEN TG_OP = 'DELETE' THEN OLD.id ELSE NEW.id END")};
    d_cells bigint := (TG_OP = 'INSERT')::int - (TG_OP = 'DELETE')::int;
    d_lengths bigint := coalesce({length_of("new_tsv")}, 0)
        - coalesce({length_of("was_tsv")}, 0);
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO cell_words AS w (word, shard, n)
        SELECT DISTINCT {_KEY} COLLATE "C", s, 1
        FROM unnest(tsvector_to_array(new_tsv)) l ORDER BY 1
        ON CONFLICT (word, shard) DO UPDATE SET n = w.n + 1;
    ELSE
        INSERT INTO cell_words AS w (word, shard, n)
        SELECT k, s, sum(d) FROM (
            SELECT DISTINCT {_KEY} AS k, 1 AS d FROM unnest(tsvector_to_array(new_tsv)) l
            UNION ALL
            SELECT DISTINCT {_KEY}, -1 FROM unnest(tsvector_to_array(was_tsv)) l
        ) x GROUP BY k HAVING sum(d) <> 0 ORDER BY k COLLATE "C"
        ON CONFLICT (word, shard) DO UPDATE SET n = w.n + excluded.n;
        -- A word the old text held that no cell of the shard holds now leaves the table:
        -- a row at 0 named a word of a replaced or purged text for ever. Only rows the
        -- statement above just locked match (n = 0), so no other writer waits longer.
        DELETE FROM cell_words w WHERE w.shard = s AND w.n = 0 AND w.word IN (
            SELECT {_KEY} COLLATE "C" FROM unnest(tsvector_to_array(was_tsv)) l);
    END IF;
    IF d_cells <> 0 OR d_lengths <> 0 THEN
        INSERT INTO cell_totals AS t (shard, cells, lengths) VALUES (s, d_cells, d_lengths)
        ON CONFLICT (shard) DO UPDATE
        SET cells = t.cells + excluded.cells, lengths = t.lengths + excluded.lengths;
    END IF;
    RETURN NULL;
END $$"""

def emptied(name: str, *tables: str) -> tuple[str, str]:
    """The function ``<name>_empty`` that empties ``tables`` when ``cells`` is truncated,
    and its trigger ``<name>_emptied`` (names and tables are ours, never a caller's).
    Not TRUNCATE: a TRUNCATE naming these tables too (a test's of every table) holds
    them."""
    deletes = "".join(f"    DELETE FROM {t};\n" for t in tables)
    return (f"""CREATE OR REPLACE FUNCTION {name}_empty() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
{deletes}    RETURN NULL;
END $$""", f"CREATE TRIGGER {name}_emptied AFTER TRUNCATE ON cells"
            f" FOR EACH STATEMENT EXECUTE FUNCTION {name}_empty()")


_EMPTY, _EMPTIED = emptied("cell_words", "cell_words", "cell_totals")

TRIGGERS = (
    "CREATE TRIGGER cell_words_written AFTER INSERT OR DELETE ON cells"
    " FOR EACH ROW EXECUTE FUNCTION cell_words_count()",
    "CREATE TRIGGER cell_words_rewritten AFTER UPDATE ON cells FOR EACH ROW"
    " WHEN (OLD.tsv IS DISTINCT FROM NEW.tsv) EXECUTE FUNCTION cell_words_count()",
    _EMPTIED,
)


def prepare(conn: Conn, announce: Callable[[str], None]) -> bool:
    """The counts' tables, functions and triggers, made where missing, and counted from
    the cells when any was (a store an older version made: cells written without a
    trigger are not counted). Run inside the caller's transaction under its schema lock,
    after ``cells`` exists. ``announce`` is told what is done before the count starts (it
    reads every cell, writers waiting). True when it counted."""
    return kept_by_triggers(conn, "cell_words", (*TABLES, _COUNT, _EMPTY), TRIGGERS,
                            recount, lambda: announce("counting the cells' keyword statistics"))


def kept_by_triggers(conn: Conn, table: str, made: Sequence[str], triggers: Sequence[str],
                     write_all: Callable[[Conn], None], announce: Callable[[], None],
                     after: Sequence[str] = ()) -> bool:
    """The one step that readies a table the database keeps from ``cells`` by triggers
    (word counts, postings, filtered columns): ``made`` run (its tables and functions,
    each ``IF NOT EXISTS`` / ``OR REPLACE``), the missing ``triggers`` made, and every
    cell's rows written again by ``write_all`` (after ``announce``) when ``table`` or any
    trigger was missing: cells written meanwhile were not seen. Otherwise ``after`` runs
    (indexes ``write_all`` makes itself). True when it wrote them."""
    missing = conn.execute("SELECT to_regclass(%s) IS NULL", (table,)).fetchone() == (True,)
    for statement in made:
        conn.execute(statement)
    if made_triggers(conn, triggers) or missing:  # the triggers are made either way
        announce()
        write_all(conn)
        return True
    for statement in after:
        conn.execute(statement)
    return False


def trigger_name(statement: str) -> str:
    """The name a ``CREATE TRIGGER <name> … ON cells`` statement gives."""
    return statement.split()[2]


def made_triggers(conn: Conn, triggers: Sequence[str]) -> bool:
    """Each of ``triggers`` (``CREATE TRIGGER <name> … ON cells``) the table lacks, made;
    True when any was missing (what it keeps must then be written again from the cells:
    cells written while it was missing were not seen)."""
    have = {str(r[0]) for r in conn.execute(
        "SELECT tgname FROM pg_trigger WHERE tgrelid = 'cells'::regclass AND NOT tgisinternal"
    ).fetchall()}
    made = False
    for statement in triggers:
        if trigger_name(statement) not in have:
            conn.execute(statement)
            made = True
    return made


def recount(conn: Conn) -> None:
    """Every count taken again from the cells, in one pass over them; writers wait (the
    table is locked against writes until the caller's transaction ends)."""
    conn.execute("LOCK TABLE cells IN SHARE MODE")
    # Not DELETE: the upserts after would step over a dead version of every counter.
    conn.execute("TRUNCATE cell_words, cell_totals")
    conn.execute(
        f"INSERT INTO cell_words (word, shard, n) SELECT x.k, {_shard('c.id')}, count(*)"
        f" FROM cells c, LATERAL (SELECT DISTINCT {_KEY} AS k"
        " FROM unnest(tsvector_to_array(c.tsv)) l) x GROUP BY 1, 2")
    conn.execute(
        f"INSERT INTO cell_totals (shard, cells, lengths) SELECT {_shard('id')}, count(*),"
        f" coalesce(sum({LENGTH}), 0) FROM cells GROUP BY 1")


# BM25's N, the cells' summed lengths, and per query word (its text and its ``to_tsquery``
# input, two arrays): its cells from `cell_words` when that query is the word's one lexeme
# (a number's: also its signed form), 0 when it is empty (a stop word matches nothing),
# NULL otherwise (counted elsewhere). Exact as of the statement's snapshot. Then whether any
# cell's words are owed (`postgres._WORDS_TRIGGERS`): the search makes them first.
STATISTICS = """SELECT
    (SELECT coalesce(sum(cells), 0) FROM cell_totals),
    (SELECT coalesce(sum(lengths), 0) FROM cell_totals),
    array(SELECT CASE
        WHEN p.asked = '' THEN 0
        WHEN cardinality(p.l) = 1 AND p.l[1] !~ '[''\\\\]|^-[0-9]+$'
            AND p.asked = CASE WHEN p.l[1] ~ '^[0-9]+$'
                THEN format('''%%s'' | ''-%%s''', p.l[1], p.l[1])
                ELSE format('''%%s''', p.l[1]) END
        THEN (SELECT coalesce(sum(w.n), 0) FROM cell_words w
              WHERE w.word = p.l[1] COLLATE "C")
        END
    FROM unnest(%s::text[], %s::text[]) WITH ORDINALITY u(term, q, i),
    LATERAL (SELECT to_tsquery('english', u.q)::text AS asked,
                    tsvector_to_array(to_tsvector('english', u.term)) AS l) p
    ORDER BY u.i),
    EXISTS (SELECT 1 FROM cell_words_owed)"""


def statistics(row: Sequence[Any] | None, terms: Sequence[str]
               ) -> tuple[int, int, dict[str, int | None]]:
    """`STATISTICS`' row read: N, the summed lengths, and each term's cells (None: the
    table has no count for it, see the module's doc)."""
    assert row is not None
    return int(row[0]), int(row[1]), {
        term: None if n is None else int(n) for term, n in zip(terms, row[2], strict=True)}
