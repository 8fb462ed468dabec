"""The PostgreSQL cell store's filtered columns, kept by the database in a narrow table.

A lifecycle move changes a cell's ``status`` (and its document and stale clock). While an
index of ``cells`` held ``status``, every move was a whole new row version with an entry
in every index of the table, the HNSW graphs' included: 1.2-2.2 ms of server CPU a move
at 20k cells, most of it the graph's (docs/performance.md, session 29). So no index of
``cells`` holds ``status`` (a move is then a heap-only update, as a read's ``touch`` is),
and what needed one reads ``cell_filters`` instead: each cell's id and every column
`rows.where_clause` tests, with the b-trees ``cells`` had on them:

- ``(status, id) INCLUDE (…)``: a listing's page in id order
  (`PostgresStore.list_candidates`), the status counts;
- ``(owner_id, status, id) INCLUDE (…)``: an owner's filtered cells counted and checked
  from the index alone (the vector step's size probe, the owners' live counts of
  `pg_owner_indexes`).

A row trigger writes a cell's row on INSERT, removes it on DELETE, and writes it again on
an UPDATE that changes one of its columns (a move, an edit of the access list; a read's
``touch`` and a re-embedding fire nothing); TRUNCATE empties it. A move writes this
narrow row and its three index entries, not a row of ``cells`` with its graph entries.

A store an older version made gets the table, indexes and triggers when a server of this
version first opens it (`prepare`: every cell's row written, under the store's schema
lock, writers waiting). A server of an older version writing the store afterwards keeps
it right, as the triggers are the database's (it makes ``cells``' status index again,
which a server of this version drops at its next start).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg

from ampup_memory.amp.store.pg_postings import CARRIED  # what `rows.where_clause` tests
from ampup_memory.amp.store.pg_words import emptied, kept_by_triggers

Conn = psycopg.Connection[tuple[Any, ...]]

_COLS = ", ".join(CARRIED)

TABLE = """CREATE TABLE IF NOT EXISTS cell_filters (
    id text COLLATE "C" PRIMARY KEY,
    type text NOT NULL,
    owner_id text NOT NULL,
    created_by text NOT NULL,
    status text NOT NULL,
    public boolean NOT NULL,
    has_readers boolean NOT NULL
)"""

# Each with every column `rows.where_clause` tests, so a page of ids or an owner's cells
# are found and checked from the index alone (an index-only scan): with (status, id)
# alone a listing read a row of this table for each cell besides the cell's own (0.3-0.5
# against 0.2 ms of server CPU a page of 51 at 20k-100k cells).
INDEXES = (
    "CREATE INDEX IF NOT EXISTS cell_filters_status_id ON cell_filters (status, id)"
    " INCLUDE (type, owner_id, public, has_readers, created_by)",
    "CREATE INDEX IF NOT EXISTS cell_filters_owner ON cell_filters (owner_id, status, id)"
    " INCLUDE (type, public, has_readers, created_by)",
)


def _of(row: str) -> str:
    return ", ".join(f"{row}.{c}" for c in CARRIED)


_WRITE = f"""CREATE OR REPLACE FUNCTION cell_filters_write() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO cell_filters (id, {_COLS}) VALUES (NEW.id, {_of("NEW")});
    ELSIF TG_OP = 'UPDATE' THEN
        UPDATE cell_filters SET ({_COLS}) = ROW({_of("NEW")}) WHERE id = NEW.id;
    ELSE
        DELETE FROM cell_filters WHERE id = OLD.id;
    END IF;
    RETURN NULL;
END $$"""

_EMPTY, _EMPTIED = emptied("cell_filters", "cell_filters")

TRIGGERS = (
    "CREATE TRIGGER cell_filters_written AFTER INSERT OR DELETE ON cells"
    " FOR EACH ROW EXECUTE FUNCTION cell_filters_write()",
    "CREATE TRIGGER cell_filters_rewritten AFTER UPDATE ON cells FOR EACH ROW WHEN"
    f" (({_of('OLD')}) IS DISTINCT FROM ({_of('NEW')}))"
    " EXECUTE FUNCTION cell_filters_write()",
    _EMPTIED,
)


def prepare(conn: Conn, announce: Callable[[str], None]) -> bool:
    """The table, its indexes, functions and triggers, made where missing, and every
    cell's row written again when any was (a store an older version made, or one whose
    trigger was dropped). Run inside the caller's transaction under its schema lock,
    after ``cells`` exists. ``announce`` is told what is done before the writing starts
    (it reads every cell, writers waiting). True when it wrote them."""
    return kept_by_triggers(conn, "cell_filters", (TABLE, _WRITE, _EMPTY), TRIGGERS, refill,
                            lambda: announce("writing the cells' filtered columns"), INDEXES)


def refill(conn: Conn) -> None:
    """Every cell's row written again, in one pass over the cells (the indexes made
    after them); writers wait (the table is locked against writes until the caller's
    transaction ends)."""
    conn.execute("LOCK TABLE cells IN SHARE MODE")
    for statement in INDEXES:
        conn.execute(f"DROP INDEX IF EXISTS {statement.split()[5]}")
    conn.execute("TRUNCATE cell_filters")
    conn.execute(f"INSERT INTO cell_filters (id, {_COLS}) SELECT id, {_COLS} FROM cells")
    for statement in INDEXES:
        conn.execute(statement)
    conn.execute("ANALYZE cell_filters")
