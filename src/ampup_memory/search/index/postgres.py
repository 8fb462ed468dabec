"""The index on PostgreSQL: weighted tsvector + BM25 for keywords, pgvector for meaning.

Tables are prefixed ``search_`` so the index can share a database with the AMP store.
Writers take a transaction-scoped advisory lock, so several server processes may share
one index and the ACL bitmaps are never updated by two writers at once. Vectors sit in
an untyped ``vector`` column with an HNSW expression index for the recorded model's
dimension; a model change drops the vectors and rebuilds that index.

Scopes share these tables but never each other's scores: BM25's statistics (the rows of a
space and the rows holding each query word, `_affordable`, `keyword_view`) are counted
with ``scope = %s AND branch = %s``, a word's frequency comes from the row's own tsvector
and a cosine from the two vectors alone, so unlike FTS5's ``bm25()`` nothing here needs
a table per scope (tests/test_scope_isolation.py). A space's row count and average
length are one pass over its rows (`_size`), remembered a minute like a word's count.

The postings budget (`search/budget.py`) is the SQLite index's: the same terms are kept
for the same rows, and an over-budget pass ranks the same newest matches. Counts are per
(scope, branch) space and remembered for a minute (`RecentCounts`; this process's writes
forget them, and a zero is never kept: a word another server just wrote counts at once).
Every row keeps the seq of the commit that put it in its space (a fact's ``commit_seq``,
a passage's ``seq``: its episode's, as on SQLite), so a held search (``upto``) counts and
cuts the rows up to that commit and a view segment's candidate list is bounded to its
commits (``seqs``).

An index made before passage rows kept a seq is emptied when it is opened (`_migrate`)
and refills from the store, as SQLite's index does on a layout change: the index holds
no ledger, and a passage copied to a branch by a merge keeps its ancestor's commit id
but the merge's seq, so no old row's seq can be derived here.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import numpy as np
import psycopg
from pgvector.psycopg import register_vector
from pyroaring import BitMap

from ampup_memory.errors import ConfigurationError, driver_said, pgvector_fix
from ampup_memory.memory.facts import EPOCH
from ampup_memory.pg_locks import SCHEMA_LOCK
from ampup_memory.pg_pool import Pool
from ampup_memory.search.bm25_sql import LENGTH, Scoring, bm25, number_forms
from ampup_memory.search.bm25f import PG_LABELS
from ampup_memory.search.budget import (
    COUNTS_SECONDS,
    POSTINGS_BUDGET,
    RecentCounts,
    affordable_terms,
    exact_counts_sql,
    postings_sql,
    space_terms,
    term_counts,
)
from ampup_memory.search.index.ann import DEFAULT_PARAMS, GraphParams, pg_ef_search
from ampup_memory.search.index.base import (
    EpisodeDoc,
    EpisodeRow,
    FactRow,
    Hit,
    IndexInfo,
    ModelInfo,
    NewFact,
    NewPassage,
    PassageRow,
    SeqRange,
    Statistics,
    Terms,
    ViewWords,
    fact_text,
    own_terms,
    words_of,
)
from ampup_memory.search.index.common import dumps
from ampup_memory.search.tokenize import keyword_text

log = logging.getLogger(__name__)

WRITE_LOCK = 0x5EA2C4  # advisory lock key of index writers
_TABLES = {"facts": "search_facts", "passages": "search_passages"}
GRAPH_TRIES = 5  # `set_model`: building the new width's graphs, a second apart
# The column keeping the seq of the commit that put a row in its space.
_SEQ = {"search_facts": "commit_seq", "search_passages": "seq"}
SIZES_KEPT = 4096  # spaces whose sizes are remembered (`_size`), the least recent go
SIZE_MARKS = 8  # marks remembered per space: the head's, and held searches' commits
_ROW_TABLES = ("search_facts", "search_passages", "search_episodes", "search_cursors",
               "search_acl_bitmaps")


def _tsv(field: str, column: str) -> str:
    return f"setweight(to_tsvector('english', {column}), '{PG_LABELS[field]}')"


# What a row's tsvector is made of: each field's `keyword_text`, kept in ``words`` (a
# passage's text; a fact's entity, value, predicate words and quote) for every row holding
# more than ASCII (ASCII text is its own keyword text: ``words`` stays NULL). A row with
# other text and no ``words`` was written by an older version, which knows no ``words``:
# one serving beside this one during a rolling upgrade (`_fill_words`).
_PASSAGE_TSV = "to_tsvector('english', coalesce(words, text))"
_FACT_FIELDS = (("entity", "entity"), ("value", "value"),
                ("predicate", "replace(predicate, '_', ' ')"), ("quote", "quote"))
_FACT_TSV = " || ".join(_tsv(field, f"coalesce(words[{i}], {column})")
                        for i, (field, column) in enumerate(_FACT_FIELDS, start=1))


def _passage_words(text: str) -> str | None:
    """A passage's ``words``: its `keyword_text`, or None when the text is ASCII."""
    return None if text.isascii() else keyword_text(text)


def _fact_words(entity: str, value: str, predicate: str, quote: str) -> list[str] | None:
    """A fact's ``words``: the `keyword_text` of each field of `_FACT_FIELDS`, or None when
    every one is ASCII."""
    fields = (entity, value, predicate.replace("_", " "), quote)
    return None if all(f.isascii() for f in fields) else [keyword_text(f) for f in fields]


def _wide(columns: str) -> str:
    """The SQL true of a row whose ``columns`` hold more than ASCII."""
    return " OR ".join(f"octet_length({c}) <> char_length({c})" for c in columns.split(", "))


# (table, the columns `words` is made of, the function making it)
_WORDED: tuple[tuple[str, str, Callable[..., Any]], ...] = (
    ("search_passages", "text", _passage_words),
    ("search_facts", "entity, value, predicate, quote", _fact_words))
# Rows without the ``words`` their text needs: found by a partial index at each open.
_UNWORDED = {table: f"words IS NULL AND ({_wide(columns)})" for table, columns, _ in _WORDED}


SCHEMA = f"""
CREATE EXTENSION IF NOT EXISTS vector;
CREATE TABLE IF NOT EXISTS search_meta (key text PRIMARY KEY, value text NOT NULL);
CREATE TABLE IF NOT EXISTS search_cursors (
    scope text NOT NULL, branch text NOT NULL, commit_id text NOT NULL,
    PRIMARY KEY (scope, branch)
);
CREATE TABLE IF NOT EXISTS search_episodes (
    num bigserial PRIMARY KEY,
    id text NOT NULL, scope text NOT NULL, branch text NOT NULL, commit_id text NOT NULL,
    occurred_at timestamptz NOT NULL, acl text NOT NULL, source text NOT NULL,
    unit_kinds text NOT NULL,
    UNIQUE (scope, branch, id)
);
CREATE TABLE IF NOT EXISTS search_passages (
    num bigserial PRIMARY KEY,
    episode_num bigint NOT NULL, scope text NOT NULL, branch text NOT NULL,
    first_unit int NOT NULL, last_unit int NOT NULL, units text NOT NULL, text text NOT NULL,
    vec vector, seq bigint NOT NULL, words text,
    tsv tsvector GENERATED ALWAYS AS ({_PASSAGE_TSV}) STORED
);
CREATE INDEX IF NOT EXISTS search_passages_scope ON search_passages (scope, branch);
CREATE INDEX IF NOT EXISTS search_passages_seq ON search_passages (scope, branch, seq);
CREATE INDEX IF NOT EXISTS search_passages_episode ON search_passages (episode_num);
CREATE INDEX IF NOT EXISTS search_passages_tsv ON search_passages USING gin (tsv);
CREATE TABLE IF NOT EXISTS search_facts (
    num bigserial PRIMARY KEY,
    id text NOT NULL, scope text NOT NULL, branch text NOT NULL, commit_id text NOT NULL,
    commit_seq bigint NOT NULL, entity text NOT NULL, predicate text NOT NULL,
    value text NOT NULL, quote text NOT NULL, valid_from timestamptz, valid_to timestamptz,
    written_by text NOT NULL, cites text NOT NULL, ord int NOT NULL, kind text NOT NULL,
    vec vector, words text[],
    tsv tsvector GENERATED ALWAYS AS ({_FACT_TSV}) STORED,
    UNIQUE (scope, branch, id)
);
CREATE INDEX IF NOT EXISTS search_facts_key ON search_facts (scope, branch, entity, predicate);
CREATE INDEX IF NOT EXISTS search_facts_valid ON search_facts (scope, branch, valid_from);
CREATE INDEX IF NOT EXISTS search_facts_seq ON search_facts (scope, branch, commit_seq);
CREATE INDEX IF NOT EXISTS search_facts_tsv ON search_facts USING gin (tsv);
CREATE INDEX IF NOT EXISTS search_passages_unworded ON search_passages (num)
    WHERE {_UNWORDED["search_passages"]};
CREATE INDEX IF NOT EXISTS search_facts_unworded ON search_facts (num)
    WHERE {_UNWORDED["search_facts"]};
CREATE TABLE IF NOT EXISTS search_acl_bitmaps (entry text PRIMARY KEY, bits bytea NOT NULL);
"""

_FACT_COLS = (
    "num, id, scope, branch, commit_id, commit_seq, entity, predicate, value, quote,"
    " valid_from, valid_to, written_by, cites, ord, kind"
)
def _tsquery(terms: Sequence[str]) -> str:
    # Terms are words of word characters and marks (tokenize.keyword_terms), so quoting
    # each as a lexeme cannot break out;
    # a number also matches its signed lexeme (`bm25_sql.number_forms`).
    return " | ".join(f"'{form}'" for t in terms if (word := t.replace("'", ""))
                      for form in number_forms(word))


def _fact_row(r: Sequence[Any]) -> FactRow:
    return FactRow(
        num=r[0], id=r[1], scope=r[2], branch=r[3], commit=r[4], commit_seq=r[5],
        entity=r[6], predicate=r[7], value=r[8], quote=r[9], valid_from=r[10],
        valid_to=r[11], written_by=r[12],
        cites=tuple((int(e), int(u)) for e, u in json.loads(r[13])), ord=r[14], kind=r[15],
    )


def _within(table: str, seqs: SeqRange | None) -> tuple[str, tuple[int, ...]]:
    """The SQL bounding a candidate list to the rows of commits ``seqs``."""
    if seqs is None:
        return "", ()
    seq = _SEQ[table]
    return f" AND {seq} > %s AND {seq} <= %s", (seqs[0], seqs[1])


def _begun(begun_at: datetime | None) -> tuple[str, tuple[datetime, ...]]:
    """The SQL keeping facts begun at ``begun_at`` (`memory.facts.begun`: no valid_from
    begins at the time line's start), agreed with it by tests/test_index_contract.py."""
    if begun_at is None:
        return "", ()
    return " AND coalesce(valid_from, '-infinity'::timestamptz) <= %s", (begun_at,)


def _held(table: str, upto: int | None) -> tuple[str, tuple[int, ...]]:
    """The SQL keeping a space's rows of commits up to ``upto``."""
    if upto is None:
        return "", ()
    return f" AND {_SEQ[table]} <= %s", (upto,)


def _planned(bound: Sequence[object]) -> bool | None:
    """``prepare`` for a statement bounded by a seq range: planned for its values. A
    prepared statement's generic plan does not see how many rows the range holds and
    took the (scope, branch, seq) btree over the HNSW graph (a held passage search's
    nearest list: 43 ms where the custom plan takes 3 ms at 30k passages)."""
    return False if bound else None


def _migrate(conn: psycopg.Connection[Any]) -> None:
    """Bring an index made by an older version to this layout (under the schema lock).
    Passage rows without a seq cannot be given one here (see the module docstring), so
    an index holding any is emptied and refills from the store with exact seqs."""
    row = conn.execute(
        "SELECT to_regclass('search_passages') IS NOT NULL, EXISTS (SELECT 1 FROM"
        " information_schema.columns WHERE table_schema = current_schema()"
        " AND table_name = 'search_passages' AND column_name = 'seq')").fetchone()
    if row is None or not row[0] or row[1]:
        return
    if conn.execute("SELECT EXISTS (SELECT 1 FROM search_passages)").fetchone() == (True,):
        log.warning("the PostgreSQL search index keeps no commit seq on passage rows:"
                    " emptying it; it refills from the store")
        conn.execute(f"TRUNCATE {', '.join(_ROW_TABLES)} RESTART IDENTITY")
        # Other processes' bitmap caches compare this number.
        conn.execute(
            "INSERT INTO search_meta (key, value) VALUES ('acl_generation', '1')"
            " ON CONFLICT (key) DO UPDATE SET value = (search_meta.value::bigint + 1)::text")
    conn.execute("ALTER TABLE search_passages ADD COLUMN IF NOT EXISTS seq bigint NOT NULL")


def _words_migration(conn: psycopg.Connection[Any]) -> None:
    """An index whose tsvectors were made from the raw text (before session 32) gets
    ``words`` and tsvectors of `keyword_text` (under the schema and writers' locks): the
    rows holding any non-ASCII text get their ``words`` (ASCII rows need none), then each
    table's tsvector column is made again (a rewrite of the table; its GIN index is
    rebuilt by SCHEMA). Vectors and rows are kept: nothing is re-embedded."""
    for (table, columns, made), words, tsv in zip(_WORDED, ("text", "text[]"),
                                                  (_PASSAGE_TSV, _FACT_TSV), strict=True):
        row = conn.execute(
            "SELECT to_regclass(%s) IS NOT NULL, EXISTS (SELECT 1 FROM"
            " information_schema.columns WHERE table_schema = current_schema()"
            " AND table_name = %s AND column_name = 'words')", (table, table)).fetchone()
        if row is None or not row[0] or row[1]:
            continue
        log.warning("the PostgreSQL search index's %s were made by an older version:"
                    " making their keyword vectors again from their keyword text (once;"
                    " writers wait)", table)
        conn.execute(f"ALTER TABLE {table} DROP COLUMN tsv, ADD COLUMN words {words}")
        _write_words(conn, table, columns, made, _wide(columns))
        conn.execute(f"ALTER TABLE {table} ADD COLUMN tsv tsvector"
                     f" GENERATED ALWAYS AS ({tsv}) STORED")


def _write_words(conn: psycopg.Connection[Any], table: str, columns: str,
                 made: Callable[..., Any], where: str) -> None:
    """``words`` written for the rows of ``table`` that ``where`` picks."""
    with conn.cursor(name=f"{table}_wide") as rows, conn.cursor() as cur:
        rows.execute(f"SELECT num, {columns} FROM {table} WHERE {where}")
        while batch := rows.fetchmany(1000):
            cur.executemany(f"UPDATE {table} SET words = %s WHERE num = %s",
                            [(made(*values), num) for num, *values in batch])


def _fill_words(conn: psycopg.Connection[Any]) -> None:
    """At each open, after the schema's transaction: rows an older version wrote (it
    inserts no ``words``), while it served beside this one in a rolling upgrade, get
    their ``words`` (their tsvector follows), so keyword search finds them as it finds
    this version's rows. Found through a partial index: nothing to do costs nothing.
    1,000 rows a transaction, each under the writers' lock (every version's writers take
    it), so a writer deleting rows of a scope never waits on this in a cycle."""
    for table, columns, made in _WORDED:
        n, last = 0, -1
        while True:
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (WRITE_LOCK,))
                batch = conn.execute(
                    f"SELECT num, {columns} FROM {table} WHERE {_UNWORDED[table]}"
                    " AND num > %s ORDER BY num LIMIT 1000", (last,)).fetchall()
                with conn.cursor() as cur:
                    cur.executemany(f"UPDATE {table} SET words = %s WHERE num = %s",
                                    [(made(*values), num) for num, *values in batch])
            n += len(batch)
            if len(batch) < 1000:
                break
            last = batch[-1][0]
        if n:
            log.warning("the PostgreSQL search index's %s held %d rows an older version"
                        " wrote without their keyword text (a server of that version"
                        " served beside this one): written", table, n)


def _vec(vector: Sequence[float] | None) -> np.ndarray | None:
    return None if vector is None else np.asarray(vector, dtype=np.float32)


def _graph(conn: psycopg.Connection[Any], table: str, dims: int,
           params: GraphParams) -> None:
    """``table``'s HNSW index over vectors of ``dims`` (an int: safe in DDL), made or made
    again with the graph settings' M and efConstruction (`GraphParams.pg_match`)."""
    params.pg_match(conn, f"{table}_vec_hnsw",
                    f"{table} USING hnsw ((vec::vector({int(dims)})) vector_cosine_ops)")


def _match_graphs(conn: psycopg.Connection[Any], params: GraphParams) -> None:
    """At open (under the schema and writers' locks): an HNSW index built with other
    parameters than the settings' is built again with them, as an embedded graph file
    made with others is, so a setting gives one graph whichever process built it."""
    row = conn.execute(
        "SELECT value FROM search_meta WHERE key = 'model_dimensions'").fetchone()
    if row is None:
        return  # no model yet: `set_model` creates the indexes
    for table in _TABLES.values():
        _graph(conn, table, int(row[0]), params)


class PostgresIndex:
    def __init__(self, uri: str, ann_params: GraphParams = DEFAULT_PARAMS) -> None:
        self.info = IndexInfo(backend="postgresql", details={})
        self.ann_params = ann_params
        try:
            with psycopg.connect(uri, autocommit=True) as conn:
                with conn.transaction():
                    # Servers starting together on a fresh database: one creates, the rest
                    # see. The writers' lock too: CREATE INDEX IF NOT EXISTS locks its table
                    # even when the index exists, and a server already writing (rows into
                    # one table, then another) deadlocked with a starting one running this
                    # (seen in the fleet test: 3 servers started together).
                    conn.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
                    conn.execute("SELECT pg_advisory_xact_lock(%s)", (WRITE_LOCK,))
                    _migrate(conn)
                    _words_migration(conn)
                    conn.execute(SCHEMA)
                    _match_graphs(conn, ann_params)
                _fill_words(conn)
        except psycopg.Error as exc:
            raise ConfigurationError(f"cannot open the PostgreSQL index: {driver_said(exc)}"
                                     f"{pgvector_fix(exc)}") from exc
        self._pool: Pool[Any] = Pool(
            uri, min_size=1, max_size=8, kwargs={"autocommit": True},
            configure=register_vector, open=True,
            check=Pool.check_connection,  # survive a database restart
        )
        self._local = threading.local()
        self._write_lock = threading.RLock()
        self._bitmaps: dict[str, BitMap] = {}
        self._bitmap_gen: int | None = None
        self._bitmap_lock = threading.Lock()
        self._pending_bits: dict[str, BitMap] | None = None
        self._counts = RecentCounts(COUNTS_SECONDS)
        # The one place a space's size is remembered (`_size`): (table, scope, branch) ->
        # {mark: (rows, length sum, when first counted in full)}, the spaces used last
        # at the end; at most SIZES_KEPT spaces and SIZE_MARKS marks each.
        self._sizes: OrderedDict[tuple[str, str, str], dict[int, tuple[int, int, float]]] = (
            OrderedDict())
        self._sizes_lock = threading.Lock()

    # -- connections and meta --------------------------------------------------------------

    @contextmanager
    def _read(self) -> Iterator[psycopg.Connection[Any]]:
        conn: psycopg.Connection[Any] | None = getattr(self._local, "tx", None)
        if conn is not None:
            yield conn  # reads inside a transaction see its own writes
            return
        with self._pool.connection() as pooled:
            yield pooled

    def _tx(self) -> psycopg.Connection[Any]:
        conn: psycopg.Connection[Any] | None = getattr(self._local, "tx", None)
        if conn is None:
            raise RuntimeError("index writes must run inside transaction()")
        return conn

    def _meta(self, key: str) -> str | None:
        with self._read() as conn:
            row = conn.execute("SELECT value FROM search_meta WHERE key = %s", (key,)).fetchone()
        return str(row[0]) if row else None

    def _set_meta(self, key: str, value: str) -> None:
        self._tx().execute(
            "INSERT INTO search_meta (key, value) VALUES (%s, %s)"
            " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (key, value),
        )

    def _bump(self, key: str) -> None:
        self._tx().execute(
            "INSERT INTO search_meta (key, value) VALUES (%s, '1') ON CONFLICT (key)"
            " DO UPDATE SET value = (search_meta.value::bigint + 1)::text",
            (key,),
        )

    @contextmanager
    def transaction(self) -> Iterator[None]:
        with self._write_lock:
            if getattr(self._local, "tx", None) is not None:
                yield
                return
            try:
                with self._pool.connection() as conn, conn.transaction():
                    conn.execute("SELECT pg_advisory_xact_lock(%s)", (WRITE_LOCK,))
                    self._local.tx = conn
                    self._pending_bits = {}
                    try:
                        yield
                        self._flush_bits()
                    finally:
                        self._local.tx = None
                        self._pending_bits = None
            except BaseException:
                # Rolled back: a size taken inside it counted rows that are not there.
                self._forget_sizes()
                raise
            finally:
                # Once committed (or rolled back): counts taken meanwhile, inside the
                # transaction included, may name rows that are not (or no longer) there.
                self._counts.clear()

    # -- model and cursors -----------------------------------------------------------------

    def model(self) -> ModelInfo | None:
        name, dims = self._meta("model_name"), self._meta("model_dimensions")
        if name is None or dims is None:
            return None
        return ModelInfo(name, int(dims))

    def set_model(self, model: ModelInfo) -> None:
        dims = int(model.dimensions)  # an int: safe in DDL
        with self.transaction():
            if self.model() == model:
                return
            conn = self._tx()
            for table in _TABLES.values():
                conn.execute(f"DROP INDEX IF EXISTS {table}_vec_hnsw")
                conn.execute(f"UPDATE {table} SET vec = NULL WHERE vec IS NOT NULL")
            self._set_meta("model_name", model.name)
            self._set_meta("model_dimensions", str(dims))
        # The new width's graphs once the old vectors are dead. Built in the transaction
        # that nulled them, CREATE INDEX also read the rows' old versions (an update that
        # cannot stay on its page leaves them) and failed on their width ("expected 192
        # dimensions, not 256"): with a few thousand rows, no server started after a
        # change of the embedder's width. An older snapshot (another server's read) may
        # still see them for a moment; if it outlasts the tries, the next open builds the
        # graphs (`_match_graphs`) and searches go on without them meanwhile.
        for attempt in range(GRAPH_TRIES):
            try:
                with self.transaction():
                    for table in _TABLES.values():
                        _graph(self._tx(), table, dims, self.ann_params)
                return
            except psycopg.errors.DataException as exc:
                if attempt == GRAPH_TRIES - 1:
                    log.warning("search index: the HNSW graphs for %d dimensions wait for "
                                "the next start (%s)", dims, driver_said(exc))
                    return
                time.sleep(1.0)

    def passage_cut(self) -> str | None:
        return self._meta("passage_cut")

    def set_passage_cut(self, cut: str) -> None:
        with self.transaction():
            self._set_meta("passage_cut", cut)

    def _dims(self) -> int:
        model = self.model()
        return model.dimensions if model else 0

    def cursor(self, scope: str, branch: str) -> str | None:
        with self._read() as conn:
            row = conn.execute(
                "SELECT commit_id FROM search_cursors WHERE scope = %s AND branch = %s",
                (scope, branch),
            ).fetchone()
        return str(row[0]) if row else None

    def set_cursor(self, scope: str, branch: str, commit: str) -> None:
        self._tx().execute(
            "INSERT INTO search_cursors (scope, branch, commit_id) VALUES (%s, %s, %s)"
            " ON CONFLICT (scope, branch) DO UPDATE SET commit_id = excluded.commit_id",
            (scope, branch, commit),
        )

    def scopes(self) -> list[tuple[str, str]]:
        with self._read() as conn:
            rows = conn.execute("SELECT scope, branch FROM search_cursors ORDER BY 1, 2")
            return [(str(s), str(b)) for s, b in rows]

    def clear(self, scope: str | None = None) -> None:
        try:
            with self.transaction():
                conn = self._tx()
                if scope is None:
                    conn.execute(f"TRUNCATE {', '.join(_ROW_TABLES)} RESTART IDENTITY")
                    assert self._pending_bits is not None
                    self._pending_bits.clear()
                    self._bump("acl_generation")
                    return
                self._clear_rows(conn, "scope = %s", (scope,))
        finally:
            self._forget_sizes()

    def clear_branch(self, scope: str, branch: str) -> None:
        try:
            with self.transaction():
                self._clear_rows(self._tx(), "scope = %s AND branch = %s", (scope, branch))
        finally:
            self._forget_sizes()

    def _forget_sizes(self) -> None:
        """Rows removed (once their transaction ends: a search meanwhile may have kept the
        size before): a size grown by later commits would still count them. Another
        server's removal is counted again within a minute (`_size`)."""
        with self._sizes_lock:
            self._sizes.clear()

    def _clear_rows(self, conn: psycopg.Connection[Any], where: str,
                    params: tuple[str, ...]) -> None:
        """Delete the rows matching ``where`` (a fixed condition on scope and branch) from
        every row table, and their episodes' bits from every bitmap."""
        nums = BitMap(int(r[0]) for r in conn.execute(
            f"SELECT num FROM search_episodes WHERE {where}", params))  # noqa: S608
        for entry, bits in self._all_bitmaps(conn).items():
            if bits & nums:
                self._pending(entry, bits - nums)
        for table in ("search_facts", "search_passages", "search_episodes",
                      "search_cursors"):
            conn.execute(f"DELETE FROM {table} WHERE {where}", params)  # noqa: S608

    # -- bitmaps ---------------------------------------------------------------------------

    @staticmethod
    def _all_bitmaps(conn: psycopg.Connection[Any]) -> dict[str, BitMap]:
        return {
            str(e): BitMap.deserialize(bytes(b))
            for e, b in conn.execute("SELECT entry, bits FROM search_acl_bitmaps")
        }

    def _pending(self, entry: str, bits: BitMap | None = None) -> BitMap:
        assert self._pending_bits is not None
        if bits is not None:
            self._pending_bits[entry] = bits
        if entry not in self._pending_bits:
            row = self._tx().execute(
                "SELECT bits FROM search_acl_bitmaps WHERE entry = %s", (entry,)
            ).fetchone()
            self._pending_bits[entry] = BitMap.deserialize(bytes(row[0])) if row else BitMap()
        return self._pending_bits[entry]

    def _flush_bits(self) -> None:
        if not self._pending_bits:
            return
        conn = self._tx()
        for entry, bits in self._pending_bits.items():
            bits.run_optimize()
            conn.execute(
                "INSERT INTO search_acl_bitmaps (entry, bits) VALUES (%s, %s)"
                " ON CONFLICT (entry) DO UPDATE SET bits = excluded.bits",
                (entry, bits.serialize()),
            )
        self._bump("acl_generation")

    def acl_bitmap(self, entry: str) -> BitMap:
        with self._bitmap_lock:
            gen = int(self._meta("acl_generation") or 0)
            if gen != self._bitmap_gen:
                with self._read() as conn:
                    self._bitmaps = self._all_bitmaps(conn)
                self._bitmap_gen = gen
            found = self._bitmaps.get(entry)
            return BitMap(found) if found is not None else BitMap()

    # -- writes ----------------------------------------------------------------------------

    def upsert_episodes(self, docs: Sequence[EpisodeDoc]) -> list[tuple[int, bool]]:
        conn = self._tx()
        # The held ones in one lookup per (scope, branch), inside the transaction.
        held: dict[tuple[str, str, str], tuple[int, set[str]]] = {}
        for scope, branch in dict.fromkeys((d.scope, d.branch) for d in docs):
            ids = list(dict.fromkeys(d.id for d in docs if (d.scope, d.branch) == (scope, branch)))
            for i, n, acl in conn.execute(
                "SELECT id, num, acl FROM search_episodes WHERE scope = %s AND branch = %s"
                " AND id = ANY(%s)",
                (scope, branch, ids),
            ).fetchall():
                held[(scope, branch, str(i))] = (int(n), set(json.loads(acl)))
        out: list[tuple[int, bool]] = []
        for doc in docs:
            key = (doc.scope, doc.branch, doc.id)
            found = held.get(key)
            if found is None:
                kinds = dumps([u.kind for u in sorted(doc.units, key=lambda u: u.n)])
                inserted = conn.execute(
                    "INSERT INTO search_episodes (id, scope, branch, commit_id, occurred_at,"
                    " acl, source, unit_kinds) VALUES (%s,%s,%s,%s,%s,%s,%s,%s) RETURNING num",
                    (doc.id, doc.scope, doc.branch, doc.commit, doc.occurred_at,
                     dumps(list(doc.acl)), doc.source, kinds),
                ).fetchone()
                assert inserted is not None
                num, old, new = int(inserted[0]), set[str](), True
            else:
                (num, old), new = found, False
                conn.execute(
                    "UPDATE search_episodes SET acl = %s, occurred_at = %s, source = %s"
                    " WHERE num = %s",
                    (dumps(list(doc.acl)), doc.occurred_at, doc.source, num),
                )
            held[key] = (num, set(doc.acl))  # the same episode again below is held
            for entry in old - set(doc.acl):
                self._pending(entry).discard(num)
            for entry in set(doc.acl) - old:
                self._pending(entry).add(num)
            out.append((num, new))
        return out

    def episode_numbers(self, scope: str, branch: str, ids: Iterable[str]) -> dict[str, int]:
        wanted = list(dict.fromkeys(ids))
        if not wanted:
            return {}
        with self._read() as conn:
            rows = conn.execute(
                "SELECT id, num FROM search_episodes WHERE scope = %s AND branch = %s"
                " AND id = ANY(%s)",
                (scope, branch, wanted),
            ).fetchall()
        return {str(i): int(n) for i, n in rows}

    def add_passages(self, passages: Sequence[NewPassage]) -> None:
        if not passages:
            return
        with self._tx().cursor() as cur:
            cur.executemany(
                "INSERT INTO search_passages (episode_num, scope, branch, first_unit,"
                " last_unit, units, text, vec, seq, words)"
                " VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)",
                [
                    (p.episode_num, p.scope, p.branch, p.first_unit, p.last_unit,
                     dumps([list(u) for u in p.units]), text, _vec(p.vector), p.seq,
                     _passage_words(text))
                    for p in passages
                    for text in ("\n\n".join(t for _, _, t in p.units),)
                ],
            )

    def upsert_facts(self, facts: Sequence[NewFact]) -> None:
        if not facts:
            return
        with self._tx().cursor() as cur:
            cur.executemany(
                "INSERT INTO search_facts (id, scope, branch, commit_id, commit_seq, entity,"
                " predicate, value, quote, valid_from, valid_to, written_by, cites, vec, ord,"
                " kind, words) VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)"
                " ON CONFLICT (scope, branch, id) DO NOTHING",
                [
                    (f.doc.id, f.doc.scope, f.doc.branch, f.doc.commit, f.doc.commit_seq,
                     f.doc.entity, f.doc.predicate, f.doc.value, f.doc.quote,
                     f.doc.valid_from, f.doc.valid_to, f.doc.written_by,
                     dumps([list(c) for c in f.cites]), _vec(f.vector), f.doc.ord, f.doc.kind,
                     _fact_words(f.doc.entity, f.doc.value, f.doc.predicate, f.doc.quote))
                    for f in facts
                ],
            )

    # -- candidates ------------------------------------------------------------------------

    def _count(self, conn: psycopg.Connection[Any], table: str, scope: str, branch: str,
               upto: int | None, term: str, cap: int | None) -> int:
        """Rows of one space (held: up to commit ``upto``) matching ``term``, counted up
        to ``cap`` through the GIN index."""
        query = _tsquery([term])
        if not query:
            return 0
        held, bound = _held(table, upto)

        def count() -> int:
            row = conn.execute(postings_sql(table, " AND scope = %s AND branch = %s" + held),
                               (query, scope, branch, *bound, cap),
                               prepare=_planned(bound)).fetchone()
            return int(row[0]) if row else 0

        return self._counts.get((table, scope, branch, bound, term, cap), count)

    def _term_counts(self, conn: psycopg.Connection[Any], table: str, scope: str,
                     spaces: Sequence[tuple[str, int | None]], terms: Sequence[str]
                     ) -> dict[str, int]:
        """Rows matching each term in these (branch, ``upto``) spaces together, counted
        only up to the budget; only when every known term is over it do exact counts
        decide which one stays (`SQLiteIndex._term_counts`)."""
        def counted(term: str) -> int:
            return sum(self._count(conn, table, scope, branch, upto, term, POSTINGS_BUDGET + 1)
                       for branch, upto in spaces)

        def exact(known: list[str]) -> dict[str, int]:
            found = [self._exact_counts(conn, table, scope, branch, upto, known)
                     for branch, upto in spaces]
            return {term: sum(e[term] for e in found) for term in known}

        return term_counts(terms, counted, exact)

    def _exact_counts(self, conn: psycopg.Connection[Any], table: str, scope: str,
                      branch: str, upto: int | None, terms: Sequence[str]) -> dict[str, int]:
        """Every row of one space matching each term. Uncounted terms are counted in one
        pass over the rows matching any of them: a common word's count reads most of the
        space (130 ms per word at 200k passages here), three words one pass, not three."""
        held, bound = _held(table, upto)
        keys = {term: (table, scope, branch, bound, term, None) for term in terms}
        found = {term: self._counts.peek(key) for term, key in keys.items()}
        missing = [term for term, n in found.items() if n is None]
        if missing:
            row = conn.execute(
                exact_counts_sql(table, len(missing), f" AND scope = %s AND branch = %s{held}"),
                (*(_tsquery([t]) for t in missing), _tsquery(missing), scope, branch,
                 *bound), prepare=_planned(bound),
            ).fetchone()
            for term, n in zip(missing, row or [0] * len(missing), strict=True):
                found[term] = int(n)
                self._counts.put(keys[term], int(n))
        return {term: n or 0 for term, n in found.items()}

    def _size(self, conn: psycopg.Connection[Any], table: str, scope: str, branch: str,
              upto: int, head: bool = False) -> tuple[int, int]:
        """Rows of one space up to commit ``upto`` (a held commit, or the space's newest
        row's: `_mark`) and their lengths summed (a row's length: its tsvector's distinct
        words, `bm25_sql.LENGTH`), BM25's N and, with it, the average length. A pass over the
        space's rows (their tsvectors) once a minute per space; in between a later mark
        adds only the rows of the commits since the nearest mark below it (the (scope,
        branch, seq) index), so a search after each write does not read the whole space
        again. Remembered by mark in `_sizes` alone: the rows up to a commit the space has
        reached do not change (commits are applied in order; a removal forgets them all,
        `_forget_sizes`). ``head``: ``upto`` is the space's newest row's commit; a held
        commit beyond it (the index not yet caught up) is counted, not remembered."""
        space = (table, scope, branch)
        now = time.monotonic()
        with self._sizes_lock:
            marks = self._sizes.get(space, {})
            fresh = {m: v for m, v in marks.items() if now - v[2] < COUNTS_SECONDS}
        kept = fresh.get(upto)
        if kept is not None:
            self._remember(space, upto, kept)
            return kept[0], kept[1]
        below = max((m for m in fresh if m < upto), default=None)
        seq = _SEQ[table]
        if below is not None:
            rows, tokens, when = fresh[below]
            row = conn.execute(f"SELECT count(*), coalesce(sum({LENGTH}), 0) FROM {table}"
                               f" WHERE scope = %s AND branch = %s AND {seq} > %s"
                               f" AND {seq} <= %s", (scope, branch, below, upto),
                               prepare=False).fetchone()
            size = (rows + int(row[0]), tokens + int(row[1])) if row else (rows, tokens)
        else:
            held, bound = _held(table, upto)
            row = conn.execute(f"SELECT count(*), coalesce(sum({LENGTH}), 0) FROM {table}"
                               f" WHERE scope = %s AND branch = %s{held}",
                               (scope, branch, *bound), prepare=_planned(bound)).fetchone()
            size, when = ((int(row[0]), int(row[1])) if row else (0, 0)), now
        if head or any(m >= upto for m in fresh) or (
                self._mark(conn, table, scope, branch, None) >= upto):
            self._remember(space, upto, (*size, when))
        return size

    def _remember(self, space: tuple[str, str, str], mark: int,
                  size: tuple[int, int, float]) -> None:
        """Keep a space's size at ``mark``, the space as used last; the least recently
        used spaces, and a space's least recently used marks, go past the caps."""
        now = time.monotonic()
        with self._sizes_lock:
            marks = self._sizes.setdefault(space, {})
            self._sizes.move_to_end(space)
            marks.pop(mark, None)
            marks[mark] = size  # last: used last
            for m in [m for m, v in marks.items() if now - v[2] >= COUNTS_SECONDS]:
                del marks[m]
            while len(marks) > SIZE_MARKS:
                del marks[next(iter(marks))]
            while len(self._sizes) > SIZES_KEPT:
                self._sizes.popitem(last=False)

    @staticmethod
    def _mark(conn: psycopg.Connection[Any], table: str, scope: str, branch: str,
              upto: int | None) -> int:
        """``upto``, or for a space's head its newest row's seq: counts and sizes are
        taken up to it and remembered under it, so every server that sees the same rows
        weighs them by the same statistics (a count remembered from before another
        server's write would have scored its rows apart for a minute). An index read."""
        if upto is not None:
            return upto
        row = conn.execute(f"SELECT max({_SEQ[table]}) FROM {table}"
                           " WHERE scope = %s AND branch = %s", (scope, branch)).fetchone()
        return int(row[0]) if row and row[0] is not None else 0

    def _affordable(self, conn: psycopg.Connection[Any], table: str, scope: str,
                    branch: str, terms: Terms, upto: int | None
                    ) -> tuple[list[str], bool, Statistics, int]:
        """The kept terms, whether their postings are over the budget (the rarest alone
        is: a ranked pass then ranks its newest matches only), the statistics that weigh
        them: a view's (`keyword_view`), else this space's (held: up to ``upto``), and the
        mark they were counted at (the last commit of this space whose rows count). A
        space a view counted is counted at the view's mark for it, and a view of this
        space alone (a search's own, taken once) gives all four (`own_terms`)."""
        # Each matching row is scored per kept word, so a common word would rank most of
        # the space: keep the rarest terms within the budget, as SQLite does.
        words = words_of(terms)
        own = own_terms(terms, branch)
        counted = terms.mark(branch) if isinstance(terms, ViewWords) else None
        if own is not None:  # this space's, taken once for the search: nothing to read
            assert isinstance(terms, ViewWords) and terms.stats is not None
            assert counted is not None
            kept, over = own
            return kept, over, terms.stats, counted
        mark = counted if counted is not None else self._mark(conn, table, scope, branch,
                                                              upto)
        counts = self._term_counts(conn, table, scope, [(branch, mark)], words)
        kept, over = space_terms(words, counts.__getitem__, isinstance(terms, ViewWords))
        if isinstance(terms, ViewWords) and terms.stats is not None:
            return kept, over, terms.stats, mark
        # A kept word's count is exact: below the cap, or all were counted to the end
        # (`_term_counts`), so the IDF does not depend on the budget's shortcut.
        rows, tokens = self._size(conn, table, scope, branch, mark,
                                  head=counted is None and upto is None)
        return kept, over, Statistics(rows, tokens, tuple(counts[t] for t in kept)), mark

    @staticmethod
    def _bm25(table: str, kept: Sequence[str], stats: Statistics) -> Scoring:
        """BM25 of a row over the kept words, with ``stats`` (`bm25_sql.bm25`)."""
        return bm25([_tsquery([term]) for term in kept], stats, table == "search_facts")

    def _keyword(self, table: str, scope: str, branch: str, terms: Terms, k: int,
                 upto: int | None, seqs: SeqRange | None,
                 begun_at: datetime | None = None) -> list[Hit]:
        if not words_of(terms) or k <= 0:
            return []
        within, bound = _within(table, seqs)
        # Begun facts only (`_begun`), kept after the budget's cut: the newest matches
        # rank as on SQLite, and those not begun at ``begun_at`` drop out of them.
        started, at = _begun(begun_at)
        with self._read() as conn:
            kept, over, stats, mark = self._affordable(conn, table, scope, branch, terms,
                                                       upto)
            query = _tsquery(kept)
            if not query:
                return []
            bm25 = self._bm25(table, kept, stats)
            start = ", valid_from" if started else ""
            # The rows listed are the rows counted: those up to the mark. A row another
            # server writes after it neither enters the list (nor, over the budget, pushes
            # a counted row out of the newest matches) nor is weighed by statistics
            # that do not count it.
            held, upper = _held(table, mark)
            matches = (f"SELECT num, tsv{start} FROM {table}"
                       f" WHERE tsv @@ to_tsquery('english', %s) AND scope = %s"
                       f" AND branch = %s{within}{held}")
            params: tuple[Any, ...] = (query, scope, branch, *bound, *upper)
            if over:  # only the newest POSTINGS_BUDGET matches are ranked (`budget.py`)
                matches += " ORDER BY num DESC LIMIT %s"
                params += (POSTINGS_BUDGET,)
            # Ties go to the older row, as on SQLite, so the cut at k is reproducible.
            rows = conn.execute(
                f"SELECT num, {bm25.score} AS r FROM (SELECT num{start}{bm25.columns}"
                f" FROM ({matches}) m{bm25.queries} OFFSET 0) s"
                f" WHERE true{started} ORDER BY r DESC, num LIMIT %s",
                (*bm25.values, *params, *bm25.words, *at, k),
                prepare=_planned((*bound, *upper)),
            ).fetchall()
        return [(int(n), float(r)) for n, r in rows]

    # ``upto`` bounds the rows the budget counts, the statistics BM25 weighs by (those of
    # the rows up to that commit, so a held search scores alike however many commits
    # follow) and the rows an over-budget pass ranks.
    def keyword_facts(self, scope: str, branch: str, terms: Terms, k: int,
                      upto: int | None = None, seqs: SeqRange | None = None,
                      begun_at: datetime | None = None) -> list[Hit]:
        return self._keyword("search_facts", scope, branch, terms, k, upto, seqs, begun_at)

    def keyword_passages(
        self, scope: str, branch: str, terms: Terms, k: int, upto: int | None = None,
        seqs: SeqRange | None = None,
    ) -> list[Hit]:
        return self._keyword("search_passages", scope, branch, terms, k, upto, seqs)

    def keyword_view(self, kind: str, scope: str, spaces: Sequence[tuple[str, int | None]],
                     terms: Sequence[str]) -> ViewWords:
        # The view's rows counted together, as SQLite's: each segment's rows are weighed
        # as in the whole view. A kept word's count is exact (see `_affordable`).
        table = _TABLES[kind]
        with self._read() as conn:
            marked = [(branch, self._mark(conn, table, scope, branch, upto))
                      for branch, upto in spaces]
            counts = self._term_counts(conn, table, scope, marked, terms)
            kept = affordable_terms(terms, counts.__getitem__)
            sizes = [self._size(conn, table, scope, branch, mark, head=upto is None)
                     for (branch, mark), (_, upto) in zip(marked, spaces, strict=True)]
        return ViewWords(tuple(kept), Statistics(sum(n for n, _ in sizes),
                                                 sum(t for _, t in sizes),
                                                 tuple(counts[t] for t in kept)),
                         tuple(marked))

    def fact_keyword(self, scope: str, branch: str, nums: Sequence[int],
                     terms: Terms, upto: int | None = None) -> dict[int, float]:
        if not words_of(terms) or not nums:
            return {}
        with self._read() as conn:
            # The candidate lists' kept terms and statistics, so every fact of one
            # answer is scored on one scale.
            kept, _, stats, _ = self._affordable(conn, "search_facts", scope, branch,
                                                 terms, upto)
            query = _tsquery(kept)
            if not query:
                return {}
            bm25 = self._bm25("search_facts", kept, stats)
            rows = conn.execute(
                f"SELECT num, {bm25.score} FROM (SELECT num{bm25.columns} FROM"
                " (SELECT num, tsv FROM search_facts WHERE tsv @@ to_tsquery('english', %s)"
                f" AND num = ANY(%s) AND scope = %s AND branch = %s) m{bm25.queries}"
                " OFFSET 0) s",
                (*bm25.values, query, list(nums), scope, branch, *bm25.words),
            ).fetchall()
        return {int(n): float(r) for n, r in rows}

    def _nearest(self, table: str, scope: str, branch: str, vector: Sequence[float],
                 k: int, seqs: SeqRange | None, begun_at: datetime | None = None
                 ) -> list[Hit]:
        dims = self._dims()
        if dims == 0 or len(vector) != dims or k <= 0:
            return []
        cast = f"vector({dims})"
        within, seq_bound = _within(table, seqs)
        started, at = _begun(begun_at)
        within, bound = within + started, (*seq_bound, *at)
        with self._read() as conn, conn.transaction():
            # Iterative scans keep walking the HNSW graph until k rows pass the filter.
            conn.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
            conn.execute(f"SET LOCAL hnsw.ef_search = {pg_ef_search(k)}")
            rows = conn.execute(
                f"SELECT num, 1 - (vec::{cast} <=> %s::{cast}) FROM {table}"
                f" WHERE scope = %s AND branch = %s AND vec IS NOT NULL{within}"
                f" ORDER BY vec::{cast} <=> %s::{cast} LIMIT %s",
                (_vec(vector), scope, branch, *bound, _vec(vector), k),
                prepare=_planned(seq_bound),
            ).fetchall()
        return [(int(n), float(c)) for n, c in rows]

    def nearest_facts(self, scope: str, branch: str, vector: Sequence[float], k: int,
                      seqs: SeqRange | None = None, begun_at: datetime | None = None
                      ) -> list[Hit]:
        return self._nearest("search_facts", scope, branch, vector, k, seqs, begun_at)

    def nearest_passages(
        self, scope: str, branch: str, vector: Sequence[float], k: int,
        seqs: SeqRange | None = None,
    ) -> list[Hit]:
        return self._nearest("search_passages", scope, branch, vector, k, seqs)

    def _cosines(self, table: str, nums: Sequence[int], vector: Sequence[float]
                 ) -> dict[int, float]:
        dims = self._dims()
        if not nums or dims == 0 or len(vector) != dims:
            return {}
        with self._read() as conn:
            rows = conn.execute(
                f"SELECT num, 1 - (vec <=> %s) FROM {table}"
                f" WHERE num = ANY(%s) AND vec IS NOT NULL AND vector_dims(vec) = %s",
                (_vec(vector), list(nums), dims),
            ).fetchall()
        return {int(n): float(c) for n, c in rows}

    def fact_cosines(self, nums: Sequence[int], vector: Sequence[float]) -> dict[int, float]:
        return self._cosines("search_facts", nums, vector)

    def passage_cosines(self, nums: Sequence[int], vector: Sequence[float]) -> dict[int, float]:
        return self._cosines("search_passages", nums, vector)

    # -- rows ------------------------------------------------------------------------------

    def facts(self, nums: Iterable[int]) -> list[FactRow]:
        wanted = list(dict.fromkeys(nums))
        if not wanted:
            return []
        with self._read() as conn:
            rows = conn.execute(
                f"SELECT {_FACT_COLS} FROM search_facts WHERE num = ANY(%s)", (wanted,)
            ).fetchall()
        return [_fact_row(r) for r in rows]

    def versions(
        self, scope: str, branch: str, keys: Iterable[tuple[str, str]],
        since: Mapping[tuple[str, str], tuple[datetime, int, int]] | None = None,
    ) -> list[FactRow]:
        pairs = list(dict.fromkeys(keys))
        if not pairs:
            return []
        since = since or {}
        # With ``since``, a key's versions at or after that place in newest-wins' order
        # (no valid_from counts as the order's epoch); without, all of them.
        places = [since.get(k, (EPOCH, -(2**62), -(2**62))) for k in pairs]
        with self._read() as conn:
            rows = conn.execute(
                f"SELECT {_FACT_COLS} FROM search_facts f JOIN unnest(%s::text[],"
                " %s::text[], %s::timestamptz[], %s::bigint[], %s::bigint[])"
                " AS k(k_entity, k_predicate, k_at, k_seq, k_ord)"
                " ON f.entity = k_entity AND f.predicate = k_predicate"
                " WHERE f.scope = %s AND f.branch = %s"
                " AND (coalesce(f.valid_from, %s), f.commit_seq, f.ord)"
                " >= (k_at, k_seq, k_ord)",
                ([e for e, _ in pairs], [p for _, p in pairs], [a for a, _, _ in places],
                 [q for _, q, _ in places], [o for _, _, o in places], scope, branch, EPOCH),
            ).fetchall()
        return [_fact_row(r) for r in rows]

    def facts_overlapping(
        self, scope: str, branch: str, start: datetime, end: datetime, limit: int
    ) -> list[int]:
        with self._read() as conn:
            rows = conn.execute(
                "SELECT num FROM search_facts WHERE scope = %s AND branch = %s"
                " AND valid_from IS NOT NULL AND valid_from < %s"
                " AND (valid_to IS NULL OR valid_to > %s) ORDER BY valid_from DESC LIMIT %s",
                (scope, branch, end, start, limit),
            ).fetchall()
        return [int(r[0]) for r in rows]

    def passages(self, nums: Iterable[int]) -> list[PassageRow]:
        wanted = list(dict.fromkeys(nums))
        if not wanted:
            return []
        with self._read() as conn:
            rows = conn.execute(
                "SELECT num, episode_num, scope, branch, first_unit, last_unit, units, seq"
                " FROM search_passages WHERE num = ANY(%s)",
                (wanted,),
            ).fetchall()
        return [
            PassageRow(
                num=r[0], episode_num=r[1], scope=r[2], branch=r[3], first_unit=r[4],
                last_unit=r[5],
                units=tuple((int(n), str(k), str(t)) for n, k, t in json.loads(r[6])),
                seq=int(r[7]),
            )
            for r in rows
        ]

    def episodes(self, nums: Iterable[int]) -> list[EpisodeRow]:
        wanted = list(dict.fromkeys(nums))
        if not wanted:
            return []
        with self._read() as conn:
            rows = conn.execute(
                "SELECT num, id, scope, branch, commit_id, occurred_at, acl, source,"
                " unit_kinds FROM search_episodes WHERE num = ANY(%s)",
                (wanted,),
            ).fetchall()
        return [
            EpisodeRow(
                num=r[0], id=r[1], scope=r[2], branch=r[3], commit=r[4], occurred_at=r[5],
                acl=tuple(json.loads(r[6])), source=r[7], unit_kinds=tuple(json.loads(r[8])),
            )
            for r in rows
        ]

    def episode_refs(self, nums: Iterable[int]) -> dict[int, tuple[str, str]]:
        wanted = list(dict.fromkeys(nums))
        if not wanted:
            return {}
        with self._read() as conn:
            rows = conn.execute(
                "SELECT num, id, commit_id FROM search_episodes WHERE num = ANY(%s)",
                (wanted,)).fetchall()
        return {int(n): (str(i), str(c)) for n, i, c in rows}

    def missing_vectors(self, kind: str, limit: int) -> list[tuple[int, str]]:
        with self._read() as conn:
            if kind == "passages":
                rows = conn.execute(
                    "SELECT num, text FROM search_passages WHERE vec IS NULL ORDER BY num"
                    " LIMIT %s",
                    (limit,),
                ).fetchall()
                return [(int(n), str(t)) for n, t in rows]
            rows = conn.execute(
                "SELECT num, entity, predicate, value, quote FROM search_facts"
                " WHERE vec IS NULL ORDER BY num LIMIT %s",
                (limit,),
            ).fetchall()
        return [(int(r[0]), fact_text(r[1], r[2], r[3], r[4])) for r in rows]

    def set_vectors(self, kind: str, vectors: Sequence[tuple[int, list[float]]]) -> None:
        table = _TABLES[kind]
        with self._tx().cursor() as cur:
            cur.executemany(
                f"UPDATE {table} SET vec = %s WHERE num = %s",
                [(_vec(v), n) for n, v in vectors],
            )

    def counts(self, scope: str | None = None) -> dict[str, int]:
        where, params = ("WHERE scope = %s", (scope,)) if scope else ("", ())
        found: dict[str, int] = {}
        with self._read() as conn:
            for kind in ("episodes", "passages", "facts"):
                row = conn.execute(f"SELECT count(*) FROM search_{kind} {where}", params
                                   ).fetchone()
                found[kind] = int(row[0]) if row else 0
        return found

    def graphs(self) -> None:
        return None

    def close(self) -> None:
        self._pool.close()
