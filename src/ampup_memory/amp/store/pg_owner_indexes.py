"""Vector indexes of the cell store's large owners (PostgreSQL).

A search naming an owner either ranks that owner's cells exactly, at one heap page per
cell (about 2.6 µs of server CPU each: 50-58 ms for 19,200 cells at 960k), or, above
`postgres.OWNER_EXACT_LIMIT`, walks the whole-table HNSW index past every other owner's
cells to find enough of theirs (51–57 ms for an owner of 8 % at 960k). A partial HNSW
index over that owner's cells alone is the graph such a search needs (15-17 ms, recall@10
0.996-0.999; docs/performance.md, sessions 25 and 26), so every owner of more than
`postgres.OWNER_INDEX_ABOVE` live cells gets one. This module decides which owners get
one, and makes and drops them; the store sends such an owner's vector step unprepared
(`indexed_owners`), since PostgreSQL uses an index whose predicate names a value only in
a plan made with that value, and a prepared statement's generic plan is made without it.

Each index is recorded in ``cell_owner_indexes`` before it is built, and the catalog
says which are valid: a build a crash or an error cut short leaves an invalid index
under a recorded name, which the next pass drops and builds again. An owner's index is
made when its live cells pass the limit and dropped when they fall under half of it, so
an owner near the limit is not built and dropped pass after pass. One process tends them
at a time, under the store's lease; builds are ``CONCURRENTLY``, so writers never wait.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import sql

from ampup_memory.amp.store.base import OwnerIndexReport

log = logging.getLogger("ampup_memory")

Conn = psycopg.Connection[tuple[Any, ...]]

TABLE = """CREATE TABLE IF NOT EXISTS cell_owner_indexes (
    name text PRIMARY KEY,
    owner_id text NOT NULL,
    dimensions integer NOT NULL
)"""

# The memory a build may use (only ever raised to this, never lowered): pgvector builds
# a graph that outgrows it on disk, several times slower. An owner of 76,800 cells of 256
# dimensions needs more than the server's default 64 MB (docs/performance.md).
BUILD_MEMORY = "256MB"

# The owners whose index is built and valid, for vectors of one width.
_VALID = ("SELECT o.owner_id FROM cell_owner_indexes o"
          " JOIN pg_index i ON i.indexrelid = to_regclass(o.name)"
          " WHERE o.dimensions = %s AND i.indisvalid AND i.indisready")

# Live cells per owner (the lifecycle's live statuses), counted from the filtered columns'
# owner index alone (`pg_filters`), for every owner with at least %s of them.
_LIVE = ("SELECT owner_id, count(*) FROM cell_filters WHERE status IN ('active', 'stale')"
         " GROUP BY owner_id HAVING count(*) >= %s")


def index_name(owner_id: str, dimensions: int) -> str:
    """The index of ``owner_id``'s vectors of ``dimensions``: named by a hash of the id,
    so no owner's text ever reaches an identifier (and the name stays within
    PostgreSQL's 63 bytes)."""
    digest = hashlib.blake2b(owner_id.encode(), digest_size=10).hexdigest()
    return f"cells_hnsw_{int(dimensions)}_owner_{digest}"


def indexed_owners(conn: Conn, dimensions: int) -> frozenset[str]:
    """The owners (as stored: NUL already mapped) whose index for vectors of
    ``dimensions`` is built and valid."""
    return frozenset(r[0] for r in conn.execute(_VALID, (dimensions,)).fetchall())


Progress = Callable[[int, int], None]


def tend(conn: Conn, dimensions: int | None, target: str, predicate: str, storage: str,
         build_above: int, progress: Progress | None = None,
         watch: Callable[[], Conn] | None = None) -> OwnerIndexReport:
    """Make the index of each owner with more than ``build_above`` live cells, drop those
    of owners under half of it (or of another width), and make again any a crash left
    invalid. ``conn``: an autocommit connection of the caller's, which holds the lease
    (``CONCURRENTLY`` cannot run inside a transaction); ``dimensions``: the width
    searched, None for none indexable; ``target`` and ``predicate``: the whole-table
    index's (`postgres._hnsw_target`), and ``storage`` its parameters' ``WITH`` clause
    (`GraphParams.pg_storage`), all trusted. ``progress`` is told (table blocks read, to
    read): a build reads the table twice, and ``watch`` opens the connection that
    follows it (PostgreSQL's ``pg_stat_progress_create_index``)."""
    report = OwnerIndexReport()
    counts: dict[str, int] = dict(conn.execute(_LIVE, (max(1, build_above // 2),)).fetchall())
    recorded = {name: (owner, int(d)) for name, owner, d in conn.execute(
        "SELECT name, owner_id, dimensions FROM cell_owner_indexes").fetchall()}
    valid = set(indexed_owners(conn, dimensions)) if dimensions is not None else set()
    wanted: dict[str, str] = {}
    if dimensions is not None:
        for owner, n in counts.items():
            name = index_name(owner, dimensions)
            if n > build_above or name in recorded:  # recorded: kept down to half
                wanted[name] = owner
    to_drop = [name for name in recorded if name not in wanted]
    # The largest owners first: their searches gain the most, and a pass cut short by a
    # shutdown leaves the smaller ones for the next.
    to_build = sorted((name for name, owner in wanted.items() if owner not in valid),
                      key=lambda name: (-counts[wanted[name]], name))
    report.kept = sorted(owner for name, owner in wanted.items() if owner in valid)
    for name in to_drop:
        _drop(conn, name)
        report.dropped.append(recorded[name][0])
    blocks = _table_blocks(conn) if to_build else 0
    total = 2 * blocks * len(to_build)
    if progress is not None:
        progress(0, total)
    for n, name in enumerate(to_build):
        assert dimensions is not None  # nothing is wanted without a width
        owner = wanted[name]
        try:
            with _followed(conn, watch, progress, 2 * blocks * n, total):
                _build(conn, name, owner, dimensions, f"{target} {storage}", predicate)
            report.built.append(owner)
        except psycopg.Error as exc:
            log.warning("could not build the vector index of a large owner (%d live"
                        " cells), dropped it, will try again: %s", counts[owner], exc)
            report.failed.append(owner)
            if not conn.closed:
                _drop(conn, name)
        if progress is not None:
            progress(2 * blocks * (n + 1), total)
    return report


def _table_blocks(conn: Conn) -> int:
    row = conn.execute("SELECT pg_relation_size('cells') / current_setting('block_size')::int"
                       ).fetchone()
    return int(row[0]) if row else 0


# A build's two scans of the table, as PostgreSQL names them; the first also inserts into
# the graph, the second checks for rows written meanwhile.
_FIRST_SCAN = "building index: loading tuples"
_SECOND_SCAN = "index validation: scanning table"


@contextmanager
def _followed(conn: Conn, watch: Callable[[], Conn] | None, progress: Progress | None,
              before: int, total: int) -> Iterator[None]:
    """While the block runs a build on ``conn``: its scans' blocks told to ``progress``
    (after ``before`` blocks of earlier builds), read once a second on a connection of
    ``watch``'s."""
    if progress is None or watch is None:
        yield
        return
    told = progress
    pid = conn.info.backend_pid
    stop = threading.Event()

    def follow() -> None:
        try:
            with watch() as w:
                while not stop.wait(1.0):
                    row = w.execute(
                        "SELECT phase, blocks_done, blocks_total FROM"
                        " pg_stat_progress_create_index WHERE pid = %s", (pid,)).fetchone()
                    if row is None or not row[2]:
                        continue
                    phase, done, of = str(row[0]), int(row[1]), int(row[2])
                    if phase == _FIRST_SCAN:
                        told(before + min(done, of), total)
                    elif phase == _SECOND_SCAN:
                        told(before + of + min(done, of), total)
        except psycopg.Error:
            pass  # only the bar stops; the build goes on

    thread = threading.Thread(target=follow, name="ampup-owner-index-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def _build(conn: Conn, name: str, owner: str, dimensions: int, index: str,
           predicate: str) -> None:
    conn.execute("INSERT INTO cell_owner_indexes (name, owner_id, dimensions)"
                 " VALUES (%s, %s, %s) ON CONFLICT (name) DO NOTHING",
                 (name, owner, dimensions))
    _drop_index(conn, name)  # one a crash left (invalid, yet kept up to date by every write)
    conn.execute("SELECT set_config('statement_timeout', '0', false),"
                 " set_config('maintenance_work_mem', greatest(pg_size_bytes(current_setting("
                 "'maintenance_work_mem')), pg_size_bytes(%s)) / 1024 || 'kB', false)",
                 (BUILD_MEMORY,))
    # The whole-table index's predicate and the owner's filter of `rows.where_clause`,
    # both of which `PostgresStore._nearest` tests, so the planner proves it from the
    # search's own conditions; the owner's value as a literal (DDL binds no parameter).
    conn.execute(sql.SQL(
        "CREATE INDEX CONCURRENTLY {name} ON {index} WHERE {predicate} AND owner_id = {owner}"
    ).format(name=sql.Identifier(name), index=sql.SQL(index), predicate=sql.SQL(predicate),
             owner=sql.Literal(owner)))
    log.info("built the vector index of a large owner: %s", name)


def _drop_index(conn: Conn, name: str) -> None:
    conn.execute(sql.SQL("DROP INDEX CONCURRENTLY IF EXISTS {}").format(sql.Identifier(name)))


def _drop(conn: Conn, name: str) -> None:
    _drop_index(conn, name)
    conn.execute("DELETE FROM cell_owner_indexes WHERE name = %s", (name,))
