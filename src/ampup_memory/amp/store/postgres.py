"""The PostgreSQL cell store: several server processes share one database.

Rows are the SQLite store's rows (`rows.py`), so both stores answer with byte-identical
cells. What several processes must agree on lives in the database: the scoring budget
is counted while the cell's row is locked (``SELECT … FOR UPDATE``), a read is one
``UPDATE … RETURNING``, and a lease is a session advisory lock on its own connection.

The document is ``text``, not ``jsonb``: jsonb would reorder metadata keys and refuses
``\u0000``, and PostgreSQL's JSON operators refuse it too, so everything the store must
compare or score by (guard, scoring, clocks) is kept in columns of its own.

Keywords: a generated ``tsvector`` column (English) with a GIN index, ranked by BM25 as
the SQLite store's FTS5 ``bm25()`` ranks (`search/bm25_sql.py`, the search index's rule),
over statistics of every cell that triggers keep exact as cells are written (`pg_words`):
every server weighs a word alike at every moment. The matches are scored from postings
triggers keep beside the cells (`pg_postings`: each cell's words, their frequency and
the filtered columns, read by an index-only scan), not from the cells' rows, when every
kept word is one lexeme. Meaning: pgvector.
The ``embedding`` column is an untyped ``vector`` with one partial HNSW index (cosine) per
embedding width (the width a store opens with gets its index at start): vectors of another
width are ignored, exactly as the SQLite store ignores them, until `amp/reembed.py`
rewrites them. The embedder they come from is recorded in ``meta``.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import PoolTimeout

from ampup_memory.amp.lifecycle import DecayInputs, Standing
from ampup_memory.amp.model import Status, StoredCell, to_utc
from ampup_memory.amp.store import pg_filters, pg_owner_indexes, pg_postings, pg_words
from ampup_memory.amp.store.base import (
    PASS_HISTORY,
    CellCopy,
    CellFilter,
    Change,
    EmbeddingSource,
    Hit,
    KeyRecord,
    OwnerIndexReport,
    PassRecord,
    Screen,
    StatusMove,
    StoreInfo,
)
from ampup_memory.amp.store.rows import (
    CELL_COLS,
    EXACT_LIMIT,
    KEY_COLS,
    MODEL_DIMENSIONS_KEY,
    MODEL_NAME_KEY,
    PASS_COLS,
    RESTORE_MARK_KEY,
    SCHEMA_VERSION,
    SCHEMA_VERSION_KEY,
    CellColumns,
    cell_words,
    check_layout,
    columns,
    embedding_source,
    guard_from_json,
    key_from_row,
    key_params,
    model_from_meta,
    pass_from_row,
    pass_params,
    screened,
    stored_from_row,
    where_clause,
    with_status,
)
from ampup_memory.errors import (
    AmpError,
    ConfigurationError,
    ServiceUnavailable,
    disk_full,
    driver_said,
    pgvector_fix,
    storage_full,
    storage_trouble,
)
from ampup_memory.pg_locks import SCHEMA_LOCK, advisory_key
from ampup_memory.pg_pool import Pool
from ampup_memory.search import budget
from ampup_memory.search.bm25_sql import Scoring, bm25, number_forms
from ampup_memory.search.budget import (
    affordable_terms,
    exact_counts_sql,
    postings_sql,
    term_counts,
)
from ampup_memory.search.embed import ModelInfo
from ampup_memory.search.index import ann
from ampup_memory.search.index.ann import DEFAULT_PARAMS, GraphParams, pg_ef_search
from ampup_memory.search.index.base import Statistics

Conn = psycopg.Connection[tuple[Any, ...]]

log = logging.getLogger("ampup_memory")


def _unavailable(exc: psycopg.OperationalError) -> AmpError:
    """The answer to the cell store's database failing (down, restarting, unreachable, no
    connection free within the pool's wait), or the 507 when it is out of disk; the cause
    goes to the log, as the HTTP faces log a storage failure they answer."""
    log.warning("cell store (PostgreSQL), %s: %s", storage_trouble(exc),
                driver_said(exc)[:300])
    if disk_full(exc):
        return storage_full()
    return ServiceUnavailable("The cell store (PostgreSQL) is unavailable; try again shortly.",
                              headers={"Retry-After": "5"})


def _hnsw_target(d: int) -> tuple[str, str]:
    """The cells' HNSW index for vectors of width ``d`` (a validated int: DDL cannot bind
    it): its ``table USING hnsw (expression) opclass`` and its predicate, which
    `PostgresStore._nearest`'s statements repeat so that the planner uses it. The large
    owners' own indexes (`pg_owner_indexes`) are this one with the owner added."""
    return (f"cells USING hnsw ((embedding::vector({d})) vector_cosine_ops)",
            f"vector_dims(embedding) = {d}")


def _hnsw_index(dimensions: int | None) -> str:
    """The name of the cells' HNSW index for vectors of ``dimensions`` (a validated int:
    DDL cannot bind it as a parameter)."""
    return f"cells_embedding_hnsw_{dimensions}"


# Enough for a 2-core host: requests mostly wait on the database, not on Python.
POOL_MIN = 2
POOL_MAX = 8
HNSW_MAX_DIMENSIONS = 2000  # pgvector's limit for an HNSW index on `vector`
MAX_DIMENSIONS = 16000  # pgvector's limit for `vector` itself

# The vector stays in the row (pgvector's default, EXTERNAL, moved it out to the TOAST
# table whenever the row passed ~2 kB: a 256-d vector is 1 kB, so nearly always, and
# every distance computed outside the HNSW index cost a TOAST index probe and page).
# The JSON document, read only for the page of results, goes out of line instead.
# Rows written before keep their TOASTed vector until rewritten (`reembed --force`).
EMBEDDING_STORAGE = "m"  # MAIN

# Room left on each page of `cells` for one more version of a row, so that a read's
# `touch` (access count and time, no indexed column) is a HOT update: written beside the
# old version with no new index entry. On a full page it is a whole new row version, so
# every index gets an entry: a search into the HNSW graph (and an owner's own graph)
# for each read, 52-60 ms p50 at 960k cells (loaded machine) against 8 ms HOT, and a dead
# entry left in the graphs for every read. Rows of 256 dimensions are 1.6-1.8 kB: at 80 %
# 95 % of reads were HOT for a table a quarter larger; 70 % made every read HOT but the
# table two thirds larger (docs/performance.md, session 27). Rows over about 2 kB (wider
# vectors, long texts) find room less often; a row over 4 kB never does.
CELLS_FILLFACTOR = 80

# An owner's cells (an exact ranking reads their rows), with the columns
# `rows.where_clause` tests but ``status``. No index of `cells` holds ``status``, so that a
# lifecycle move (a status, the document and the stale clock) is a heap-only (HOT) update:
# no entry in the HNSW graphs, the GIN index or the b-trees. An index holding it made every
# move a new row version with an entry in each of them, 1.2-2.2 ms of server CPU a move at
# 20k cells, most of it the HNSW graph's (docs/performance.md, session 29). What needs
# ``status`` in an index reads `pg_filters`' narrow table.
OWNER_FILTER = ("CREATE INDEX IF NOT EXISTS cells_owner_filter ON cells (owner_id, id)"
                " INCLUDE (type, public, has_readers, created_by)")

# The cells' keyword vector: of ``words`` (`rows.cell_words`: the text's keyword text by the
# one rule, `tokenize.keyword_text`; docs/search.md "Languages and scripts", since session
# 33) where the text is not plain ASCII, else of ``text`` (plain ASCII is its own keyword
# text, so those vectors are what they were). The statistics and postings triggers
# (`pg_words`, `pg_postings`) read ``tsv`` and so keep to the rule with it.
TSV = "to_tsvector('english'::regconfig, coalesce(words, text))"

_TSV_INDEX = "CREATE INDEX IF NOT EXISTS cells_tsv ON cells USING gin (tsv)"

SCHEMA = (
    """CREATE TABLE IF NOT EXISTS cells (
        id text COLLATE "C" PRIMARY KEY,
        type text NOT NULL,
        owner_id text NOT NULL,
        created_by text NOT NULL,
        status text NOT NULL,
        public boolean NOT NULL,
        has_readers boolean NOT NULL,
        access_count bigint NOT NULL,
        last_accessed_at timestamptz NOT NULL,
        text text NOT NULL,
        doc text NOT NULL,
        stale_since timestamptz,
        deleted_at timestamptz,
        guard text NOT NULL,
        importance float8 NOT NULL,
        confidence float8 NOT NULL,
        decay_rate float8 NOT NULL,
        created_at timestamptz NOT NULL,
        last_updated_at timestamptz NOT NULL,
        expires_at timestamptz,
        embedding vector,
        words text,
        tsv tsvector GENERATED ALWAYS AS (""" + TSV + """) STORED
    ) WITH (fillfactor = """ + str(CELLS_FILLFACTOR) + ")",
    OWNER_FILTER,  # and no index of `cells` holding `status` (`_status_free`)
    "DROP INDEX IF EXISTS cells_owner_status_id",  # an older layout's owner index
    "CREATE INDEX IF NOT EXISTS cells_deleted_at ON cells (deleted_at)"
    " WHERE deleted_at IS NOT NULL",
    _TSV_INDEX,
    """CREATE TABLE IF NOT EXISTS scoring_patches (
        cell_id text NOT NULL,
        at timestamptz NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS scoring_patches_cell ON scoring_patches (cell_id, at)",
    """CREATE TABLE IF NOT EXISTS api_keys (
        key_id text PRIMARY KEY,
        agent_id text NOT NULL,
        key_hash text NOT NULL UNIQUE,
        admin boolean NOT NULL,
        created_at timestamptz NOT NULL,
        expires_at timestamptz,
        revoked_at timestamptz,
        user_id text
    )""",
    """CREATE TABLE IF NOT EXISTS lifecycle_passes (
        id bigserial PRIMARY KEY,
        started_at timestamptz NOT NULL,
        finished_at timestamptz NOT NULL,
        holder text NOT NULL,
        evaluated integer NOT NULL,
        transitions text NOT NULL,
        purged integer NOT NULL,
        dry_run boolean NOT NULL,
        states text
    )""",
    "CREATE INDEX IF NOT EXISTS lifecycle_passes_started ON lifecycle_passes (started_at)",
    "CREATE TABLE IF NOT EXISTS meta (key text PRIMARY KEY, value text NOT NULL)",
    pg_owner_indexes.TABLE,
)

# A search naming an owner ranks that owner's cells exactly up to this many, far above the
# shared EXACT_LIMIT (which stays for other filters): pgvector's filtered HNSW scan walks
# the graph until enough rows pass the filter (about k·N/n rows met for n of N), which for
# an owner's share costs more than ranking every row of it, and misses some (300k cells,
# docs/performance.md: 5,400 rows exact 20 ms p50 against HNSW 142 ms at recall 0.965;
# 24,000 rows 52 ms against 105 ms at 0.981). Without an owner the filter keeps most rows,
# the walk meets few it drops, and counting to this limit would cost every unfiltered
# search 4 ms more (1.1 → 5.1 ms at 300k). Module-level: tests and benchmarks move it.
OWNER_EXACT_LIMIT = 25_000

# An owner over this many live cells gets an HNSW index of its own (`pg_owner_indexes`),
# made by `tend_owner_indexes`: the limit of exact ranking for any other filter. Ranking
# an owner's cells exactly costs about 2.6 µs of server CPU a cell, one heap page each
# (19,200 cells at 960k: 50-58 ms), and a search of its own graph 15-17 ms whatever its
# size (docs/performance.md, session 26); `OWNER_EXACT_LIMIT` still serves an owner
# until its index is built. Each process re-reads which owners have one this often (a
# search for an owner whose index it has not seen yet takes the path without it: slower,
# never wrong).
OWNER_INDEX_ABOVE = EXACT_LIMIT
OWNER_INDEXES_SEEN_SECONDS = 30.0
OWNER_INDEX_LEASE = "owner-indexes"

# A search whose kept words are each one lexeme scores them from the postings
# (`pg_postings`), else from the ``tsv`` column. Module-level: benchmarks turn it off.
KEYWORD_POSTINGS = True

# A search with words and a vector runs its keyword and vector steps at once, each on a
# pooled connection of its own (`_nearest_beside`). Module-level: benchmarks turn it off.
CONCURRENT_STEPS = True


def conninfo_from_uri(uri: str) -> str:
    """libpq accepts postgresql:// and postgres://; the SQLAlchemy-style spelling too."""
    if uri.startswith("postgresql+psycopg://"):
        return "postgresql://" + uri[len("postgresql+psycopg://") :]
    return uri


def _described(conninfo: str) -> dict[str, str]:
    """Where the store is, for logs and /spec: never the password."""
    try:
        parts = conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError as exc:
        raise ConfigurationError(f"invalid PostgreSQL URI: {exc}") from exc
    return {k: str(parts[k]) for k in ("host", "port", "dbname", "user") if parts.get(k)}


def store_exists(uri: str) -> bool:
    """Whether the store's tables were made in the database (a read-only command makes
    none)."""
    conninfo = conninfo_from_uri(uri)
    try:
        with psycopg.connect(conninfo, autocommit=True, connect_timeout=15) as conn:
            return conn.execute("SELECT to_regclass('cells') IS NOT NULL").fetchone() == (True,)
    except psycopg.OperationalError as exc:
        raise ConfigurationError(
            f"cannot connect to PostgreSQL ({_where(conninfo)}): {driver_said(exc)}") from exc


def _where(conninfo: str) -> str:
    """The store's place in one line, for an error: never the password."""
    d = _described(conninfo)
    return f"{d.get('dbname', '')} on {d.get('host', 'localhost')}:{d.get('port', 5432)}"


def _upgrading(conn: Conn, where: str, what: str) -> None:
    """One warning line as a start upgrades a store an older version made, said before
    the work (it reads every cell while writers wait: about 42 s at 960k cells), so an
    operator watching a slow start at the default log level knows why. A new store (no
    cell yet) has nothing to upgrade and says nothing."""
    if conn.execute("SELECT EXISTS (SELECT 1 FROM cells)").fetchone() != (True,):
        return
    log.warning("the AMP cell store %s was made by an older version: %s (once; writers "
                "wait until it is done)", where, what)


def _recorded_layout(conn: Conn) -> str | None:
    """The layout version the database records, read before any table is made (None for
    a new database, or one made before stores recorded it)."""
    if conn.execute("SELECT to_regclass('meta') IS NOT NULL").fetchone() != (True,):
        return None
    row = conn.execute("SELECT value FROM meta WHERE key = %s", (SCHEMA_VERSION_KEY,)
                       ).fetchone()
    return None if row is None else str(row[0])


def _made(conn: Conn, statement: str) -> bool:
    """Whether ``statement`` is ``CREATE INDEX IF NOT EXISTS`` of an index there is.
    Checked first because the statement locks its table against writes even when the
    index exists, and waits for any lock in the way: behind a large owner's index build
    (`pg_owner_indexes`, minutes) a starting server would wait, and every write to
    ``cells`` would queue behind it."""
    words = statement.split(maxsplit=6)
    if words[:5] != ["CREATE", "INDEX", "IF", "NOT", "EXISTS"]:
        return False
    found = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (words[5],)).fetchone()
    return found == (True,)


def _leave_room(conn: Conn) -> None:
    """Give a store made before `CELLS_FILLFACTOR` its fillfactor: pages written from now
    on keep room for a read's HOT update; full pages stay full until the table is
    rewritten (docs/operations.md). Checked first, as `_made` is: the ALTER waits for an
    owner index's build, which holds a lock it conflicts with, so it waits 2 s at most and
    is tried again at the next start rather than keep the server from starting."""
    row = conn.execute("SELECT reloptions FROM pg_class WHERE oid = 'cells'::regclass"
                       ).fetchone()
    if row is not None and f"fillfactor={CELLS_FILLFACTOR}" in (row[0] or []):
        return
    waited = conn.execute("SHOW lock_timeout").fetchone()
    try:
        with conn.transaction():  # a savepoint: a timeout undoes only this
            conn.execute("SELECT set_config('lock_timeout', '2s', true)")
            conn.execute(f"ALTER TABLE cells SET (fillfactor = {CELLS_FILLFACTOR})")
            # The rest of the schema's transaction waits as long as it did before.
            conn.execute("SELECT set_config('lock_timeout', %s, true)",
                         (waited[0] if waited else "0",))
    except psycopg.errors.LockNotAvailable:
        log.info("the cells table's fillfactor was not set (an index is being built);"
                 " the next start tries again")


def _status_free(conn: Conn, announce: Callable[[str], None]) -> None:
    """Take ``status`` out of the indexes of a store made before `OWNER_FILTER`:
    ``cells_status_id (status, id)`` dropped, ``cells_owner_filter`` made again without
    it. Checked first, as `_made` is: DROP INDEX waits for an owner index's build, so it
    waits 2 s at most and is tried again at the next start (the old indexes answer the
    same, only moves stay whole new row versions). ``announce`` is told before the
    owner index is made again (a pass over the cells, writers waiting)."""
    found = {str(r[0]): str(r[1]) for r in conn.execute(
        "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema()"
        " AND tablename = 'cells' AND indexname IN ('cells_status_id', 'cells_owner_filter')"
    ).fetchall()}
    old_filter = "status" in found.get("cells_owner_filter", "")
    if "cells_status_id" not in found and not old_filter:
        return
    waited = conn.execute("SHOW lock_timeout").fetchone()
    try:
        with conn.transaction():  # a savepoint: a timeout undoes only this
            conn.execute("SELECT set_config('lock_timeout', '2s', true)")
            conn.execute("DROP INDEX IF EXISTS cells_status_id")
            if old_filter:
                announce("taking the cells' status out of their owner index")
                conn.execute("DROP INDEX cells_owner_filter")
                conn.execute(OWNER_FILTER)
            conn.execute("SELECT set_config('lock_timeout', %s, true)",
                         (waited[0] if waited else "0",))
    except psycopg.errors.LockNotAvailable:
        log.info("the cells' status was not taken out of their indexes (an index is being"
                 " built); the next start tries again")


# What an older version writes (it writes no ``words``) is caught by triggers: a text not
# plain ASCII written without words, or a text changed under words made for the one before,
# is put in `cell_words_owed`, whose words this version makes when it opens the store and
# before a keyword search that finds any owed (`PostgresStore._settle_words`). The test is
# `rows.cell_words`' (bytes against characters). AFTER triggers with a WHEN, as `pg_words`'
# are: a BEFORE row trigger on ``cells``, even one for other columns, made every read's
# `touch` a whole new row version instead of a HOT update (60 of 60 in
# `tests/test_store_contract.py`), with an entry in every index.
_WORDS_OWED = ("CREATE TABLE IF NOT EXISTS cell_words_owed"
               " (id text COLLATE \"C\" PRIMARY KEY)")
_WORDS_OWE = """CREATE OR REPLACE FUNCTION cell_words_owe() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO cell_words_owed (id) VALUES (NEW.id) ON CONFLICT DO NOTHING;
    RETURN NULL;
END $$"""
_NOT_PLAIN = "octet_length(NEW.text) <> char_length(NEW.text)"
_WORDS_TRIGGERS = (
    "CREATE TRIGGER cell_words_owed_written AFTER INSERT ON cells FOR EACH ROW"
    f" WHEN (NEW.words IS NULL AND {_NOT_PLAIN}) EXECUTE FUNCTION cell_words_owe()",
    "CREATE TRIGGER cell_words_owed_rewritten AFTER UPDATE OF text ON cells FOR EACH ROW"
    " WHEN (NEW.text IS DISTINCT FROM OLD.text AND NEW.words IS NOT DISTINCT FROM"
    f" OLD.words AND (NEW.words IS NOT NULL OR {_NOT_PLAIN}))"
    " EXECUTE FUNCTION cell_words_owe()",
)
# How many owed words `PostgresStore._settle_words` makes in one transaction.
_SETTLE_BATCH = 500


def _keyword_words(conn: Conn, announce: Callable[[str], None]) -> bool:
    """A store whose ``tsv`` an older version made of the raw text gets ``words`` and
    ``tsv`` of `TSV`, in the open's transaction under the schema lock (writers wait): the
    column added and filled for the cells whose text is not plain ASCII, ``tsv`` made
    again (a rewrite of the table; nothing is re-embedded) with its GIN index. The
    triggers that watch ``tsv`` go with the old column (CASCADE), so `pg_words` and
    `pg_postings` make them again and recount from the new vectors (their ``prepare``,
    next), unless no text needed words. True when it did this (``announce`` told
    first)."""
    conn.execute(_WORDS_OWED)
    conn.execute(_WORDS_OWE)
    row = conn.execute(
        "SELECT pg_get_expr(d.adbin, d.adrelid) FROM pg_attrdef d JOIN pg_attribute a"
        " ON a.attrelid = d.adrelid AND a.attnum = d.adnum"
        " WHERE d.adrelid = 'cells'::regclass AND a.attname = 'tsv'").fetchone()
    if row is not None and "words" in str(row[0]):
        pg_words.made_triggers(conn, _WORDS_TRIGGERS)
        return False
    announce("making the cells' keyword vectors, statistics and postings again by the"
             " keyword-text rule")
    for statement in _WORDS_TRIGGERS:
        conn.execute(f"DROP TRIGGER IF EXISTS {pg_words.trigger_name(statement)} ON cells")
    conn.execute("ALTER TABLE cells ADD COLUMN IF NOT EXISTS words text,"
                 " DROP COLUMN tsv CASCADE")
    worded = 0
    with conn.cursor(name="cells_not_plain") as rows, conn.cursor() as cur:
        rows.execute("SELECT id, text FROM cells WHERE octet_length(text) <> char_length(text)")
        while batch := rows.fetchmany(1000):
            cur.executemany("UPDATE cells SET words = %s WHERE id = %s",
                            [(_pg_text(cell_words(text)), cell_id) for cell_id, text in batch])
            worded += len(batch)
    conn.execute(f"ALTER TABLE cells ADD COLUMN tsv tsvector GENERATED ALWAYS AS ({TSV}) STORED")
    conn.execute(_TSV_INDEX)
    conn.execute("DELETE FROM cell_words_owed")
    pg_words.made_triggers(conn, _WORDS_TRIGGERS)
    if not worded:
        # Every text plain ASCII: each ``tsv`` is what it was, and so are the counts and
        # postings made from it. Their triggers made again here, the two ``prepare``
        # find them and count nothing again.
        pg_words.made_triggers(conn, pg_words.TRIGGERS + pg_postings.TRIGGERS)
    return True


def _pg_text(value: Any) -> Any:
    # PostgreSQL text cannot hold NUL. Indexed columns and lookups map it to U+FFFD; the
    # JSON document (the cell itself) keeps it, escaped, so the wire never changes.
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd")
    if isinstance(value, list):
        return [_pg_text(v) for v in value]
    return value


def _params(params: Sequence[Any]) -> tuple[Any, ...]:
    return tuple(_pg_text(p) for p in params)


def tsquery(terms: Sequence[str]) -> str | None:
    """``to_tsquery`` input matching any of the terms, each quoted so no operator leaks in
    (a number also as its signed lexeme, as the search index: `bm25_sql.number_forms`)."""
    quoted = [
        "'" + f.replace("\\", "\\\\").replace("'", "''") + "'"
        for t in terms if t.strip() for f in number_forms(t)
    ]
    return " | ".join(quoted) if quoted else None


def vector_literal(vector: Sequence[float]) -> str:
    return "[" + ",".join(repr(float(x)) for x in vector) + "]"


def _vector_from_text(text: str) -> list[float]:
    """pgvector's text form back to the float32 values it stores (each as a Python float
    equal to it, as the SQLite store reads its blobs)."""
    import numpy as np

    return np.array(text.strip("[]").split(","), dtype=np.float32).tolist()  # type: ignore[no-any-return]


def _stored(row: Sequence[Any]) -> StoredCell:
    return stored_from_row(row[0], row[1], row[2], row[3], row[4])


# Everything a write sets; access_count and last_accessed_at belong to `touch`.
_WRITE_COLS = (
    "type, owner_id, created_by, status, public, has_readers, text, doc, stale_since,"
    " deleted_at, guard, importance, confidence, decay_rate, created_at, last_updated_at,"
    " expires_at, words"
)
_WRITE_MARKS = ", ".join(["%s"] * len(_WRITE_COLS.split(",")))


def _written(c: CellColumns) -> tuple[Any, ...]:
    """Values for ``_WRITE_COLS``, in order."""
    return (
        c.type, c.owner_id, c.created_by, c.status, c.public, c.has_readers, c.text, c.doc,
        c.stale_since, c.deleted_at, c.guard, c.importance, c.confidence, c.decay_rate,
        c.created_at, c.last_updated_at, c.expires_at, cell_words(c.text),
    )


def _insert_sql(unless_there: bool = False) -> str:
    """A new cell's row (``unless_there``: a row with its id is left alone), with
    `_insert_params`."""
    return (f"INSERT INTO cells (id, access_count, last_accessed_at, {_WRITE_COLS},"
            f" embedding) VALUES (%s, %s, %s, {_WRITE_MARKS}, %s::vector)"
            + (" ON CONFLICT (id) DO NOTHING" if unless_there else ""))


def _insert_params(stored: StoredCell, vector: list[float] | None) -> tuple[Any, ...]:
    c = columns(stored)
    return (c.id, c.access_count, c.last_accessed_at, *_written(c),
            vector_literal(vector) if vector is not None else None)


def _cosine(distance: float | None) -> float | None:
    if distance is None:
        return None
    # A zero vector has no direction: pgvector says NaN, SQLite's dot product says 0.
    return 0.0 if math.isnan(distance) else 1.0 - float(distance)



# What a hit needs of its cell: each step's statement reads it for the cells it finds,
# so no third statement reads the candidates again.
# The decay score's inputs (`_decay` reads them), the clock as `lifecycle.clock` has it.
_DECAY_COLS = ("c.importance, c.confidence, c.decay_rate,"
               " greatest(c.created_at, c.last_accessed_at, c.last_updated_at), c.expires_at")
_HIT_COLS = f"c.id, c.guard, {_DECAY_COLS}"
# The HNSW scan's settings, for its transaction only (the iterative scan's where
# pgvector has it: an older one refuses the name).
_HNSW_SETTINGS = "SELECT set_config('hnsw.ef_search', %s, true)"
_ITERATIVE = ", set_config('hnsw.iterative_scan', 'relaxed_order', true)"


def _decay(r: Sequence[Any]) -> DecayInputs:
    """The decay inputs from the five `_DECAY_COLS`."""
    return DecayInputs(importance=float(r[0]), confidence=float(r[1]),
                       decay_rate=float(r[2]), since=to_utc(r[3]),
                       expires_at=to_utc(r[4]) if r[4] is not None else None)


def _hit(r: Sequence[Any], keyword: float) -> Hit:
    """A hit from `_HIT_COLS` and the cosine distance."""
    return Hit(cell_id=r[0], keyword=keyword, cosine=_cosine(r[7]),
               guard=guard_from_json(r[1]), decay=_decay(r[2:7]))


class PostgresStore:
    def __init__(self, uri: str, dimensions: int | None,
                 pool_wait_seconds: float = 30.0,
                 ann_params: GraphParams = DEFAULT_PARAMS) -> None:
        if dimensions is not None and not 1 <= dimensions <= MAX_DIMENSIONS:
            raise ConfigurationError(
                f"embedding dimensions must be 1..{MAX_DIMENSIONS} for pgvector, "
                f"got {dimensions}"
            )
        self.conninfo = conninfo_from_uri(uri)
        self.dimensions = dimensions
        self.ann_params = ann_params  # the HNSW index's m and ef_construction (settings)
        self.info = StoreInfo(name="postgresql", details=_described(self.conninfo))
        self._iterative_scan = self._create_schema()
        self._owner_indexes: tuple[float, frozenset[str]] = (-math.inf, frozenset())
        self._steps = ThreadPoolExecutor(POOL_MAX, thread_name_prefix="ampup-amp-nearest")
        self._pool: Pool[Conn] = Pool(
            self.conninfo,
            min_size=POOL_MIN,
            max_size=POOL_MAX,
            kwargs={"autocommit": True},
            check=Pool.check_connection,  # survive a database restart
            name="amp-cells",
            timeout=pool_wait_seconds,  # a request's wait for a connection, then its 503
            open=False,
        )
        try:
            self._pool.open(wait=True, timeout=15)
        except PoolTimeout as exc:
            self._pool.close()
            raise ConfigurationError(f"cannot open PostgreSQL connections: {exc}") from exc
        self._warn_if_unbuffered()
        try:
            self._settle_words()
        except ServiceUnavailable:
            pass  # the next keyword search settles them

    def _warn_if_unbuffered(self) -> None:
        """Say at start when the HNSW index outgrows ``shared_buffers``: the server's
        setting, not ours, and the largest cost of a search at scale (300k cells: 37 against
        15 ms of server CPU per unfiltered search, docs/performance.md)."""
        try:
            memory = self.vector_memory()
        except ServiceUnavailable:
            return  # only a diagnostic: the next request reports the outage itself
        if memory is not None and memory["hnsw_index"] > memory["shared_buffers"]:
            log.warning(
                "the cells' HNSW index (%d MB) is larger than PostgreSQL's shared_buffers"
                " (%d MB): searches read most of its pages from outside them; set"
                " shared_buffers above the index and the cells table (%d MB) together"
                " (docs/operations.md)", memory["hnsw_index"] >> 20,
                memory["shared_buffers"] >> 20, memory["table"] >> 20)

    # -- connections ----------------------------------------------------------------------

    def _create_schema(self) -> bool:
        """Idempotent DDL under an advisory lock, so processes starting together do not
        race on CREATE … IF NOT EXISTS. Returns whether pgvector has iterative scans."""
        try:
            with self._own_connection() as conn:
                with conn.transaction():
                    conn.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
                    check_layout(_recorded_layout(conn), _where(self.conninfo))
                    conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
                    for statement in SCHEMA:
                        if not _made(conn, statement):
                            conn.execute(statement)
                    where = _where(self.conninfo)
                    # One line for the keyword upgrade, whose counts and postings follow.
                    rewrote = _keyword_words(conn, lambda what: _upgrading(conn, where, what))
                    said = (lambda what: None) if rewrote else (
                        lambda what: _upgrading(conn, where, what))
                    pg_words.prepare(conn, said)
                    pg_postings.prepare(conn, said)
                    pg_filters.prepare(conn, lambda what: _upgrading(conn, where, what))
                    # A store made before passes kept their states. Checked first: ALTER
                    # TABLE locks the table even when the column is there.
                    if conn.execute(
                        "SELECT 1 FROM information_schema.columns WHERE table_schema ="
                        " current_schema() AND table_name = 'lifecycle_passes'"
                        " AND column_name = 'states'"
                    ).fetchone() is None:
                        conn.execute("ALTER TABLE lifecycle_passes ADD COLUMN states text")
                    storage = conn.execute(
                        "SELECT attstorage FROM pg_attribute"
                        " WHERE attrelid = 'cells'::regclass AND attname = 'embedding'"
                    ).fetchone()
                    if storage is not None and storage[0] != EMBEDDING_STORAGE:
                        conn.execute("ALTER TABLE cells ALTER COLUMN embedding SET STORAGE MAIN")
                    _leave_room(conn)
                    _status_free(conn, lambda what: _upgrading(conn, where, what))
                    d = self.dimensions
                    if d is not None and d <= HNSW_MAX_DIMENSIONS:
                        target, predicate = _hnsw_target(d)
                        self.ann_params.pg_match(conn, _hnsw_index(d), target,
                                                 f" WHERE {predicate}")
                    conn.execute(
                        "INSERT INTO meta (key, value) VALUES (%s, %s)"
                        " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                        (SCHEMA_VERSION_KEY, str(SCHEMA_VERSION)))
                row = conn.execute(
                    "SELECT extversion FROM pg_extension WHERE extname = 'vector'"
                ).fetchone()
        except psycopg.OperationalError as exc:
            raise ConfigurationError(
                f"cannot connect to PostgreSQL ({_where(self.conninfo)}): {driver_said(exc)}"
            ) from exc
        except psycopg.Error as exc:
            raise ConfigurationError(
                f"cannot prepare the PostgreSQL cell store ({_where(self.conninfo)}): "
                f"{driver_said(exc).rstrip('.')}.{pgvector_fix(exc)}"
            ) from exc
        version = tuple(int(x) for x in str(row[0] if row else "0").split(".")[:2])
        return version >= (0, 8)

    def _settle_words(self, conn: Conn | None = None) -> None:
        """The words of the cells `cell_words_owed` names (see `_WORDS_TRIGGERS`) made, so
        their ``tsv`` and its counts and postings follow the rule. Each word is written
        only where the cell's text is still the one it was made from; a text changed
        meanwhile stays owed, with its new text, for the next pass. Owed rows another
        process is settling are skipped."""
        if conn is None:
            with self._conn() as own:
                return self._settle_words(own)
        while True:
            settled = 0
            with conn.transaction():
                rows = self._execute(
                    conn, "SELECT o.id, c.text FROM cell_words_owed o LEFT JOIN cells c"
                    " ON c.id = o.id ORDER BY o.id LIMIT %s FOR UPDATE OF o SKIP LOCKED",
                    (_SETTLE_BATCH,)).fetchall()
                for cell_id, text in rows:
                    if text is not None and self._execute(
                            conn, "UPDATE cells SET words = %s WHERE id = %s AND text = %s",
                            (cell_words(text) or text, cell_id, text)).rowcount != 1:
                        continue
                    self._execute(conn, "DELETE FROM cell_words_owed WHERE id = %s",
                                  (cell_id,))
                    settled += 1
            if len(rows) < _SETTLE_BATCH or not settled:
                return

    def _own_connection(self) -> Conn:
        """A connection outside the pool, in autocommit: for DDL and long work."""
        return psycopg.connect(self.conninfo, autocommit=True, connect_timeout=15)

    @contextmanager
    def _conn(self) -> Iterator[Conn]:
        try:
            with self._pool.connection() as conn:
                yield conn
        except psycopg.OperationalError as exc:  # includes PoolTimeout
            raise _unavailable(exc) from exc

    @staticmethod
    def _execute(conn: Conn, sql: str, params: Sequence[Any] = (),
                 prepare: bool | None = None) -> psycopg.Cursor[Any]:
        return conn.execute(sql, _params(params), prepare=prepare)

    # -- cells ----------------------------------------------------------------------------

    def create(self, stored: StoredCell, vector: list[float] | None) -> None:
        with self._conn() as conn:
            self._insert(conn, stored, vector)

    @classmethod
    def _insert(cls, conn: Conn, stored: StoredCell, vector: list[float] | None) -> None:
        """Insert one cell's row (its triggers fill the words, postings and filters
        tables)."""
        cls._execute(conn, _insert_sql(), _insert_params(stored, vector))

    def get(self, cell_id: str, screen: Screen | None = None) -> StoredCell | None:
        with self._conn() as conn:
            if screen is not None:
                # The guard first: a screened-out cell's document (decoded from jsonb as it
                # is fetched) is never sent.
                head = self._execute(conn, "SELECT status, guard FROM cells WHERE id = %s",
                                     (cell_id,)).fetchone()
                if head is None or screened(head[0], head[1], screen):
                    return None
            row = self._execute(
                conn, f"SELECT {CELL_COLS} FROM cells WHERE id = %s", (cell_id,)
            ).fetchone()
        return _stored(row) if row else None

    def get_many(self, cell_ids: Sequence[str]) -> list[StoredCell]:
        if not cell_ids:
            return []
        with self._conn() as conn:
            rows = self._execute(
                conn, f"SELECT {CELL_COLS} FROM cells WHERE id = ANY(%s)", (list(cell_ids),)
            ).fetchall()
        return [_stored(r) for r in rows]

    def touch(self, cell_id: str, now: datetime) -> StoredCell | None:
        with self._conn() as conn:
            row = self._execute(
                conn,
                "UPDATE cells SET access_count = access_count + 1, last_accessed_at = %s"
                f" WHERE id = %s AND status <> 'deleted' RETURNING {CELL_COLS}",
                (to_utc(now), cell_id),
            ).fetchone()
        return _stored(row) if row else None

    def update(self, cell_id: str, change: Change) -> StoredCell | None:
        with self._conn() as conn, conn.transaction():
            row = self._execute(
                conn, f"SELECT {CELL_COLS} FROM cells WHERE id = %s FOR UPDATE", (cell_id,)
            ).fetchone()
            if row is None:
                return None
            outcome = change(_stored(row), _Tx(conn, cell_id))
            params = list(_written(columns(outcome.stored)))
            vec_sql = ""
            if outcome.vector is not None:
                vec_sql = ", embedding = %s::vector"
                params.append(vector_literal(outcome.vector))
            # Access count and last read stay as they are: only `touch` moves them.
            self._execute(
                conn,
                f"UPDATE cells SET ({_WRITE_COLS}) = ({_WRITE_MARKS}){vec_sql} WHERE id = %s",
                (*params, cell_id),
            )
            if outcome.count_scoring_patch:
                self._execute(
                    conn,
                    "INSERT INTO scoring_patches (cell_id, at) VALUES (%s, %s)",
                    (cell_id, outcome.stored.cell.lifecycle.last_updated_at),
                )
        return outcome.stored

    # -- listing and search ---------------------------------------------------------------

    def list_candidates(
        self, filters: CellFilter, before_id: str | None, batch: int
    ) -> list[StoredCell]:
        if filters.matches_nothing:
            return []
        where, params = where_clause(filters, "%s", "f.")
        if before_id is not None:
            where += " AND f.id < %s"
            params.append(before_id)
        with self._conn() as conn:
            # The page's ids from the filtered columns' table (`pg_filters`), in the order
            # of its (status, id) index, then their rows.
            rows = self._execute(
                conn,
                f"SELECT {CELL_COLS} FROM cells WHERE id IN (SELECT f.id FROM cell_filters f"
                f" WHERE {where} ORDER BY f.id DESC LIMIT %s) ORDER BY id DESC",
                (*params, batch),
            ).fetchall()
        return [_stored(r) for r in rows]

    def search_candidates(
        self, filters: CellFilter, terms: Sequence[str], vector: list[float] | None, k: int
    ) -> list[Hit]:
        if filters.matches_nothing:
            return []
        where, params = where_clause(filters, "%s", "c.")
        usable = vector is not None and len(vector) == self.dimensions
        qvec = vector_literal(vector) if vector is not None and usable else None
        owner = filters.owner_id
        with self._conn() as conn:
            beside = (self._nearest_beside(where, params, qvec, k, owner)
                      if qvec is not None and terms else None)
            keyword = self._keyword(conn, filters, where, params, terms, k, qvec)
            if beside is not None:
                near = beside.result()
            elif qvec is not None:
                near = self._nearest(conn, where, params, qvec, k, owner)
            else:
                near = []
        # Each step's statement read its cells' hit columns (`_HIT_COLS`): a cell both
        # found is the same row twice, its keyword score from the keyword step.
        scores = {r[0]: r[-1] for r in keyword}
        rows = {r[0]: r[:-1] for r in keyword}
        rows.update((r[0], r) for r in near if r[0] not in rows)
        return [_hit(r, scores.get(r[0], 0.0)) for r in rows.values()]

    def _keyword(self, conn: Conn, filters: CellFilter, where: str, params: list[Any],
                 terms: Sequence[str], k: int, qvec: str | None) -> list[tuple[Any, ...]]:
        """The ``k`` best keyword matches passing the filters, by BM25 over every cell
        (`bm25_sql.bm25`, as FTS5's ``bm25()`` ranks them on SQLite), on the words the
        postings budget keeps. Ties go to the lower id, so the cut at k is reproducible.
        Scored from the postings (`pg_postings`) when every kept word is one lexeme,
        which the counts table counts too, else from the ``tsv`` column (`_ranked`).
        Rows: `_HIT_COLS` and the cosine distance to ``qvec``, then the score."""
        if tsquery(terms) is None:
            return []
        asked = (list(terms), [tsquery([t]) or "" for t in terms])
        found = self._execute(conn, pg_words.STATISTICS, asked).fetchone()
        if found is not None and found[3]:  # words an older version left to make
            self._settle_words(conn)
            found = self._execute(conn, pg_words.STATISTICS, asked).fetchone()
        rows, tokens, table = pg_words.statistics(found, terms)
        counts = term_counts(
            terms, lambda t: n if (n := table[t]) is not None else self._capped(conn, t),
            lambda known: self._exact_counts(conn, known, table))
        kept = affordable_terms(terms, counts.__getitem__)
        query = tsquery(kept)
        if query is None:
            return []
        scoring = bm25([tsquery([t]) or "" for t in kept],
                       Statistics(rows, tokens, tuple(counts[t] for t in kept)), False)
        if KEYWORD_POSTINGS and all(table[t] is not None for t in kept):
            on_postings, their = where_clause(filters, "%s", "p.")
            return self._scores(conn, pg_postings.ranked(scoring, on_postings),
                                (*scoring.values, list(kept), *their, k), qvec)
        return self._ranked(conn, where, params, query, scoring, k, qvec)

    def _ranked(self, conn: Conn, where: str, params: list[Any], query: str,
                scoring: Scoring, k: int, qvec: str | None) -> list[tuple[Any, ...]]:
        """The ``k`` best cells matching ``query`` (the kept words) that pass the filters,
        by ``scoring``, as `_scores` reads them."""
        return self._scores(
            conn,
            f"SELECT id, {scoring.score} AS r FROM (SELECT id{scoring.columns} FROM"
            " (SELECT c.id, c.tsv FROM cells c WHERE c.tsv @@ to_tsquery('english', %s)"
            f" AND {where}) m{scoring.queries} OFFSET 0) s ORDER BY r DESC, id LIMIT %s",
            (*scoring.values, query, *params, *scoring.words, k), qvec)

    def _scores(self, conn: Conn, sql: str, params: Sequence[Any],
                qvec: str | None) -> list[tuple[Any, ...]]:
        """A ranking statement's cells (``sql`` gives ``id`` and score ``r``, ``params``
        its parameters): `_HIT_COLS`, the cosine distance to ``qvec``, the BM25 score
        (never below 0 but for rounding, so clamped)."""
        if qvec is not None:
            d = self.dimensions
            distance = (f"CASE WHEN vector_dims(c.embedding) = {d}"
                        f" THEN c.embedding::vector({d}) <=> %s::vector({d}) END")
            head: tuple[Any, ...] = (qvec,)
        else:
            distance, head = "NULL::float8", ()
        # Never prepared: psycopg prepares a statement run 5 times, and PostgreSQL then
        # plans it once for any words (a generic plan), which cannot see how many cells
        # the words match: it read an owner's whole index even for a word in a few
        # hundred cells (18 against 1.8 ms at 960k, docs/performance.md). Planning each
        # time costs about 0.3 ms.
        rows = self._execute(
            conn, f"SELECT {_HIT_COLS}, {distance}, greatest(k.r, 0)::float8"
            f" FROM ({sql}) k JOIN cells c ON c.id = k.id", (*head, *params), prepare=False,
        ).fetchall()
        return [(*r[:-1], float(r[-1])) for r in rows]

    def _capped(self, conn: Conn, term: str) -> int:
        """Rows matching a term the counts table has no row for (`pg_words.STATISTICS`:
        one ``to_tsquery`` makes into a phrase, say), counted through the GIN index no
        further than the budget can use."""
        query = tsquery([term])
        if query is None:
            return 0
        row = self._execute(conn, postings_sql("cells"), (query, budget.POSTINGS_BUDGET + 1)
                            ).fetchone()
        return int(row[0]) if row else 0

    def _exact_counts(self, conn: Conn, terms: Sequence[str],
                      table: dict[str, int | None]) -> dict[str, int]:
        """Every cell matching each term (all of them over the budget: `term_counts`): the
        table's counts, and the terms it has none for counted in one pass."""
        found = {term: table[term] for term in terms}
        missing = [term for term, n in found.items() if n is None]
        if missing:
            row = self._execute(
                conn, exact_counts_sql("cells", len(missing)),
                (*(tsquery([t]) for t in missing), tsquery(missing)),
            ).fetchone()
            found.update(zip(missing, (int(n) for n in row or [0] * len(missing)),
                             strict=True))
        return {term: n or 0 for term, n in found.items()}

    def _nearest_beside(self, where: str, params: list[Any], qvec: str, k: int,
                        owner: str | None) -> Future[list[tuple[Any, ...]]] | None:
        """The vector step started on a second connection, to run while the caller's
        ranks the keywords (two backends, so two cores; docs/performance.md: the whole
        search's wall time is then about the slower step's, not their sum). None when
        turned off or no connection is idle at once: a search never waits for a second
        connection, or searches each holding one would wait on each other."""
        if not CONCURRENT_STEPS:
            return None
        try:
            conn = self._pool.getconn(timeout=0.001)
        except PoolTimeout:
            return None

        def nearest() -> list[tuple[Any, ...]]:
            try:
                return self._nearest(conn, where, params, qvec, k, owner)
            finally:
                self._pool.putconn(conn)

        return self._steps.submit(nearest)

    def _nearest(
        self, conn: Conn, where: str, params: list[Any], qvec: str, k: int,
        owner: str | None
    ) -> list[tuple[Any, ...]]:
        """The cells nearest the query (`_HIT_COLS` and the cosine distance): exact over
        a filtered set of at most `EXACT_LIMIT` cells, else HNSW at the cell store's
        ef_search floor (`ann.pg_ef_search`): an owner's own index where it has one
        (`pg_owner_indexes`); a filter naming an ``owner`` without one scans the
        whole-table index, above `OWNER_EXACT_LIMIT` and at a higher floor."""
        # Planned with the owner's value, or the planner cannot use the owner's index
        # (its predicate names the value): psycopg prepares a statement run 5 times, and
        # PostgreSQL keeps a generic plan, made without values (docs/performance.md).
        # Planning costs 1-3 ms, so only where there is such an index to use.
        own_index = owner is not None and self._has_own_index(conn, owner)
        prepare = False if own_index else None
        # The owner's own graph holds only its cells, as the whole-table one holds all,
        # so it is searched as that one is: the same floor (0.996 of the exact 10 at 960k)
        # and the same exact limit (the filter drops only the owner's cells it refuses,
        # not 92 % of the graph), which also counts 5 times fewer rows each search.
        whole_table_scan = owner is not None and not own_index
        exact_limit = OWNER_EXACT_LIMIT if whole_table_scan else EXACT_LIMIT
        floor = None if whole_table_scan else ann.PG_CELL_EF_FLOOR
        d = self.dimensions
        has = f"vector_dims(c.embedding) = {d}"  # matches the partial index's predicate
        dist = f"c.embedding::vector({d}) <=> %s::vector({d})"  # matches its expression
        # Iterative scans (pgvector >= 0.8) keep walking the graph until enough rows pass
        # the filter; without them, over-fetch and filter the rows found.
        limit = k if self._iterative_scan else max(k * 4, 400)
        if self._iterative_scan:
            scan = (f"SELECT {_HIT_COLS}, {dist} AS distance FROM cells c WHERE NOT b.small"
                    f" AND {where} AND {has} ORDER BY distance LIMIT %s")
            args: tuple[Any, ...] = (qvec, *params, limit)
        else:
            scan = (f"SELECT {_HIT_COLS}, o.distance FROM (SELECT c.id, {dist} AS distance"
                    f" FROM cells c WHERE NOT b.small AND {has} ORDER BY distance LIMIT %s) o"
                    f" JOIN cells c ON c.id = o.id WHERE {where}")
            args = (qvec, limit, *params)
        # How big is the filtered set (counted no further than the limit, from the
        # filtered columns' table: `pg_filters`, an index-only scan)? The scan runs
        # only when it is over the limit, in the same statement (one round trip: the
        # settings, the statement and the commit are sent together).
        with conn.pipeline(), conn.transaction():
            self._execute(conn, _HNSW_SETTINGS + (_ITERATIVE if self._iterative_scan else ""),
                          (str(pg_ef_search(limit, floor)),))
            cur = self._execute(
                conn,
                "SELECT b.small, n.* FROM (SELECT count(*) <= %s AS small FROM"
                f" (SELECT 1 FROM cell_filters c WHERE {where} LIMIT %s) s) b"
                f" LEFT JOIN LATERAL ({scan}) n ON true",
                (exact_limit, *params, exact_limit + 1, *args), prepare=prepare)
        rows = cur.fetchall()
        if not rows or not rows[0][0]:
            return [r[1:] for r in rows if r[1] is not None]
        # Rank all of them. The distance is written without the cast the HNSW index is
        # built on, so the planner cannot answer from the (approximate) index; `has`
        # keeps other widths out, and the values equal the cast form's.
        return self._execute(
            conn,
            f"SELECT {_HIT_COLS}, c.embedding <=> %s::vector AS distance FROM cells c"
            f" WHERE {where} AND {has} ORDER BY distance LIMIT %s",
            (qvec, *params, max(k, 1)),
        ).fetchall()

    def _has_own_index(self, conn: Conn, owner: str) -> bool:
        """Whether ``owner`` has a valid index of its own, as this process last read it
        (`OWNER_INDEXES_SEEN_SECONDS` ago at most)."""
        seen_at, owners = self._owner_indexes
        if time.monotonic() - seen_at > OWNER_INDEXES_SEEN_SECONDS:
            assert self.dimensions is not None  # a vector step has a width
            owners = pg_owner_indexes.indexed_owners(conn, self.dimensions)
            self._owner_indexes = (time.monotonic(), owners)
        return _pg_text(owner) in owners

    def tend_owner_indexes(
        self, progress: Callable[[int, int], None] | None = None
    ) -> OwnerIndexReport | None:
        """`CellStore.tend_owner_indexes`: ``progress`` is told table blocks read (a
        build reads the table twice)."""
        d = self.dimensions
        if d is None:
            return None  # opened without an embedder: which width is searched is unknown
        with self.lease(OWNER_INDEX_LEASE, ttl_seconds=3600) as held:
            if not held:
                return OwnerIndexReport(skipped=True)
            try:
                # A connection of its own: a build holds it for minutes, outside any
                # transaction (CONCURRENTLY).
                with self._own_connection() as conn:
                    report = pg_owner_indexes.tend(
                        conn, d if d <= HNSW_MAX_DIMENSIONS else None, *_hnsw_target(d),
                        self.ann_params.pg_storage(), OWNER_INDEX_ABOVE, progress,
                        self._own_connection)
            except psycopg.OperationalError as exc:
                raise _unavailable(exc) from exc
        self._owner_indexes = (-math.inf, frozenset())  # this process sees them at once
        return report

    # -- lifecycle ------------------------------------------------------------------------

    def lifecycle_batch(self, after_id: str | None, batch: int) -> list[Standing]:
        with self._conn() as conn:
            rows = self._execute(
                conn,
                f"SELECT c.id, c.status, c.stale_since, {_DECAY_COLS} FROM cells c"
                " WHERE c.status IN ('active', 'stale') AND c.id > %s ORDER BY c.id LIMIT %s",
                (after_id or "", batch),
            ).fetchall()
        return [Standing(r[0], Status(r[1]), _decay(r[3:8]),
                         to_utc(r[2]) if r[2] is not None else None) for r in rows]

    def set_statuses(self, moves: Sequence[StatusMove]) -> set[str]:
        moved: set[str] = set()
        if not moves:
            return moved
        with self._conn() as conn:
            # Each move its own transaction, so a read of a moving cell waits for one
            # row's write, not a batch's (one statement of 200 held reads up to 2 s at
            # 20k cells), and no commit waits for the WAL to reach the disk (one each took
            # 3.4-10 ms a cell): a move lost in a crash was acknowledged to no one, and the
            # next pass makes it again from the same columns (docs/performance.md).
            self._execute(conn, "SET synchronous_commit TO off")
            try:
                for move in moves:
                    cell = move.expected.cell
                    c = columns(with_status(move.expected, move.status, move.stale_since))
                    cur = self._execute(
                        conn,
                        "UPDATE cells SET status = %s, doc = %s, stale_since = %s WHERE id = %s"
                        " AND status = %s AND last_accessed_at = %s AND last_updated_at = %s",
                        (
                            c.status, c.doc, c.stale_since, cell.id,
                            cell.lifecycle.status.value, to_utc(cell.lifecycle.last_accessed_at),
                            to_utc(cell.lifecycle.last_updated_at),
                        ),
                    )
                    if cur.rowcount == 1:
                        moved.add(cell.id)
            finally:
                self._execute(conn, "RESET synchronous_commit")
        return moved

    def deleted_before(self, cutoff: datetime, batch: int, after: str = "") -> list[str]:
        with self._conn() as conn:
            rows = self._execute(
                conn,
                "SELECT id FROM cells WHERE status = 'deleted' AND deleted_at <= %s"
                " AND id > %s ORDER BY id LIMIT %s",
                (to_utc(cutoff), after, batch),
            ).fetchall()
        return [r[0] for r in rows]

    def purge(self, cell_ids: Sequence[str]) -> int:
        if not cell_ids:
            return 0
        ids = list(cell_ids)
        with self._conn() as conn, conn.transaction():
            # The purged texts' words leave `cell_words` by its trigger (rows fallen to 0).
            cur = self._execute(conn, "DELETE FROM cells WHERE id = ANY(%s::text[])", (ids,))
            self._execute(conn, "DELETE FROM scoring_patches WHERE cell_id = ANY(%s::text[])",
                          (ids,))
            return cur.rowcount

    def erase_purged(self) -> None:
        """Nothing: `purge`'s own transaction took the purged texts' words away (dead row
        versions wait for VACUUM: docs/security-model.md)."""

    @contextmanager
    def lease(self, name: str, ttl_seconds: float) -> Iterator[bool]:
        """A session advisory lock on a connection of its own, held for the block.

        No TTL is needed: the lock ends with its session, so a killed holder frees it as
        soon as PostgreSQL notices the connection is gone (keepalives bound that).
        """
        key = advisory_key(f"lease:{name}")
        try:
            conn = psycopg.connect(
                self.conninfo, autocommit=True, connect_timeout=15,
                keepalives=1, keepalives_idle=30, keepalives_interval=10, keepalives_count=3,
            )
        except psycopg.OperationalError as exc:
            raise _unavailable(exc) from exc
        with conn:
            row = conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()
            got = bool(row and row[0])
            try:
                yield got
            finally:
                if got and not conn.closed:
                    try:
                        conn.execute("SELECT pg_advisory_unlock(%s)", (key,))
                    except psycopg.Error:
                        pass  # closing the session below releases it anyway

    # -- keys -----------------------------------------------------------------------------

    def put_key(self, record: KeyRecord) -> None:
        with self._conn() as conn:
            self._execute(
                conn,
                f"INSERT INTO api_keys ({KEY_COLS}) VALUES (%s,%s,%s,%s,%s,%s,%s,%s)",
                key_params(record),
            )

    def key_by_hash(self, key_hash: str) -> KeyRecord | None:
        with self._conn() as conn:
            row = self._execute(
                conn, f"SELECT {KEY_COLS} FROM api_keys WHERE key_hash = %s", (key_hash,)
            ).fetchone()
        return key_from_row(row) if row else None

    def list_keys(self) -> list[KeyRecord]:
        with self._conn() as conn:
            rows = self._execute(
                conn, f"SELECT {KEY_COLS} FROM api_keys ORDER BY created_at"
            ).fetchall()
        return [key_from_row(r) for r in rows]

    def revoke_key(self, key_id: str, now: datetime) -> bool:
        with self._conn() as conn:
            cur = self._execute(
                conn,
                "UPDATE api_keys SET revoked_at = %s WHERE key_id = %s AND revoked_at IS NULL",
                (to_utc(now), key_id),
            )
            return cur.rowcount == 1

    # -- lifecycle history ----------------------------------------------------------------

    def record_pass(self, record: PassRecord, keep: int = PASS_HISTORY) -> None:
        with self._conn() as conn:
            self._execute(
                conn,
                f"INSERT INTO lifecycle_passes ({PASS_COLS})"
                " VALUES (%s,%s,%s,%s,%s,%s,%s,%s)",
                pass_params(record),
            )
            self._execute(
                conn,
                "DELETE FROM lifecycle_passes WHERE id NOT IN (SELECT id FROM"
                " lifecycle_passes ORDER BY started_at DESC, id DESC LIMIT %s)",
                (keep,),
            )

    def recent_passes(self, limit: int) -> list[PassRecord]:
        with self._conn() as conn:
            rows = self._execute(
                conn,
                f"SELECT {PASS_COLS} FROM lifecycle_passes ORDER BY started_at DESC, id DESC"
                " LIMIT %s",
                (limit,),
            ).fetchall()
        return [pass_from_row(r) for r in rows]

    def count(self) -> int:
        with self._conn() as conn:
            row = conn.execute("SELECT count(*) FROM cells").fetchone()
        return int(row[0]) if row else 0

    def status_counts(self) -> dict[str, int]:
        with self._conn() as conn:
            rows = conn.execute("SELECT status, count(*) FROM cell_filters GROUP BY status"
                                ).fetchall()
        return {str(s): int(n) for s, n in rows}

    # -- embedding model ------------------------------------------------------------------

    def embedding_model(self) -> ModelInfo | None:
        with self._conn() as conn:
            rows = dict(self._execute(
                conn, "SELECT key, value FROM meta WHERE key = ANY(%s)",
                ([MODEL_NAME_KEY, MODEL_DIMENSIONS_KEY],),
            ).fetchall())
        return model_from_meta(rows.get(MODEL_NAME_KEY), rows.get(MODEL_DIMENSIONS_KEY))

    def set_embedding_model(self, model: ModelInfo) -> None:
        with self._conn() as conn, conn.transaction():
            for key, value in ((MODEL_NAME_KEY, model.name),
                               (MODEL_DIMENSIONS_KEY, str(model.dimensions))):
                self._execute(
                    conn,
                    "INSERT INTO meta (key, value) VALUES (%s, %s)"
                    " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                    (key, value),
                )

    def embedding_sources(self, after_id: str | None, batch: int) -> list[EmbeddingSource]:
        with self._conn() as conn:
            rows = self._execute(
                conn, "SELECT id, doc FROM cells WHERE id > %s ORDER BY id LIMIT %s",
                (after_id or "", batch),
            ).fetchall()
        return [embedding_source(r[0], r[1]) for r in rows]

    def replace_vectors(self, vectors: Sequence[tuple[EmbeddingSource, list[float]]]) -> int:
        if not vectors:
            return 0
        with self._conn() as conn, conn.transaction(), conn.cursor() as cur:
            # One pipelined round trip; `text` compares as stored (NUL mapped on both sides).
            cur.executemany(
                "UPDATE cells SET embedding = %s::vector WHERE id = %s AND text = %s",
                [_params((vector_literal(v), s.cell_id, s.text)) for s, v in vectors],
            )
            return max(cur.rowcount, 0)  # the sum over the rows (psycopg >= 3.1)

    # -- moving cells between stores ------------------------------------------------------

    def copies(self, after_id: str | None, batch: int) -> list[CellCopy]:
        with self._conn() as conn, conn.transaction():  # cells and patches: one instant
            rows = self._execute(
                conn,
                f"SELECT {CELL_COLS}, embedding::text, id FROM cells WHERE id > %s"
                " ORDER BY id LIMIT %s", (after_id or "", batch),
            ).fetchall()
            patches: dict[str, list[datetime]] = {}
            for cell_id, at in self._execute(
                    conn, "SELECT cell_id, at FROM scoring_patches WHERE cell_id = ANY(%s)"
                    " ORDER BY cell_id, at", ([r[6] for r in rows],)).fetchall():
                patches.setdefault(cell_id, []).append(to_utc(at))
        return [CellCopy(_stored(r), None if r[5] is None else _vector_from_text(r[5]),
                         tuple(patches.get(r[6], ()))) for r in rows]

    def put_copies(self, copies: Sequence[CellCopy]) -> int:
        if not copies:
            return 0
        with self._conn() as conn, conn.transaction(), conn.cursor() as cur:
            # `_insert`'s statement for every cell, pipelined (one round trip, not one a
            # cell); RETURNING names the cells written, whose scoring patches follow.
            cur.executemany(
                _insert_sql(unless_there=True) + " RETURNING id",
                [_params(_insert_params(copy.stored, copy.vector)) for copy in copies],
                returning=True)
            written: set[str] = set()
            while True:
                written.update(str(r[0]) for r in cur.fetchall())
                if not cur.nextset():
                    break
            patches = [(copy.stored.cell.id, to_utc(at)) for copy in copies
                       if copy.stored.cell.id in written for at in copy.scoring_patches]
            if patches:
                cur.executemany("INSERT INTO scoring_patches (cell_id, at) VALUES (%s, %s)",
                                [_params(p) for p in patches])
        return len(written)

    def restore_mark(self) -> str | None:
        with self._conn() as conn:
            row = self._execute(conn, "SELECT value FROM meta WHERE key = %s",
                                (RESTORE_MARK_KEY,)).fetchone()
        return None if row is None else str(row[0])

    def set_restore_mark(self, mark: str | None) -> None:
        with self._conn() as conn:
            if mark is None:
                self._execute(conn, "DELETE FROM meta WHERE key = %s", (RESTORE_MARK_KEY,))
            else:
                self._execute(conn, "INSERT INTO meta (key, value) VALUES (%s, %s)"
                              " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                              (RESTORE_MARK_KEY, mark))

    def graphs(self) -> dict[str, int] | None:
        return None  # pgvector's HNSW index lives in the database

    def vector_memory(self) -> dict[str, int] | None:
        """The database's bytes, not this process's: the HNSW index searched, the cells
        table (its rows are read for every hit, and for every cell an exact owner
        search ranks), the large owners' own indexes (`pg_owner_indexes`) and the
        server's ``shared_buffers``. The 128 MB default is smaller
        than the index from about 80,000 cells of 256 dimensions, and then most of a
        search's pages are copied in from outside PostgreSQL's buffers: at 300k cells more
        than twice the server CPU of a search whose pages stay in them
        (docs/operations.md)."""
        with self._conn() as conn:
            row = conn.execute(
                "SELECT coalesce(pg_relation_size(to_regclass(%s)), 0),"
                " pg_relation_size('cells'), pg_size_bytes(current_setting('shared_buffers')),"
                " (SELECT coalesce(sum(pg_relation_size(to_regclass(name))), 0)"
                " FROM cell_owner_indexes)",
                (_hnsw_index(self.dimensions),),
            ).fetchone()
        assert row is not None
        return {"hnsw_index": int(row[0]), "owner_indexes": int(row[3]), "table": int(row[1]),
                "shared_buffers": int(row[2])}

    def close(self) -> None:
        self._steps.shutdown(wait=True)
        self._pool.close()


class _Tx:
    """The budget view inside `update`'s transaction; the cell row is already locked, so
    concurrent scoring PATCHes of one cell (from any process) count one after another."""

    def __init__(self, conn: Conn, cell_id: str) -> None:
        self.conn = conn
        self.cell_id = cell_id

    def scoring_patches_since(self, since: datetime) -> list[datetime]:
        rows = self.conn.execute(
            "SELECT at FROM scoring_patches WHERE cell_id = %s AND at >= %s ORDER BY at",
            _params((self.cell_id, to_utc(since))),
        ).fetchall()
        return [to_utc(r[0]) for r in rows]
