"""The embedded index: one SQLite file. FTS5 for keywords, vectors in memory (numpy).

The file also holds core's read index (``mem_*`` tables, `memory/readindex.py`); nothing
here touches those.

One writer at a time (an in-process lock plus ``BEGIN IMMEDIATE`` across processes);
readers use their own thread-local connections and see only committed transactions.
The index is derived, so ``synchronous=NORMAL`` is enough: a lost tail is rebuilt.

**Keyword statistics are per scope and branch.** FTS5's ``bm25()`` scores with whole-table
statistics (row count, average length, how many rows hold each word), so one FTS5 table
shared by every scope let a write to one scope move scores in another. Each (scope,
branch) is a *keyword space* with FTS5 tables of its own, in a small file of its own
(`keywords.py` says why a file and not tables here), created on its first write, filled
from the rows of this file right after each commit and deleted by :meth:`SQLiteIndex.clear`.
The vector matrices are per (scope, branch) too (`common.py`), so nothing written to one
scope changes any score in another. Within one space, rows the caller may not see still
count in the statistics (docs/security-model.md). A view of several spaces of one scope (a
branch over its base) scores each space's rows with their statistics together
(:meth:`SQLiteIndex.keyword_view`, ``keywords.cut_scores``).

Layout changes bump :data:`FORMAT`; an index file of another format is emptied on open
and the start-up catch-up (`search/feed.py`) refills it from the tables, the same path
that rebuilds a deleted index file.
"""

from __future__ import annotations

import json
import logging
import re
import secrets
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, cast

import numpy as np
from pyroaring import BitMap

from ampup_memory.caches import Remembered
from ampup_memory.errors import driver_said, storage_down, storage_trouble
from ampup_memory.memory.facts import EPOCH, begin_instant
from ampup_memory.memory.segments import NO_LIMIT
from ampup_memory.search.bm25f import fts5_weights
from ampup_memory.search.budget import (
    POSTINGS_BUDGET,
    affordable_terms,
    space_terms,
)
from ampup_memory.search.index import keywords
from ampup_memory.search.index.ann import (
    ANN_MIN_VECTORS,
    DEFAULT_PARAMS,
    GraphParams,
    GraphStats,
    graph_path,
    keep_only_graphs,
    remove_graphs,
)
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
from ampup_memory.search.index.common import (
    VectorCache,
    dumps,
    parse_time_text,
    time_text,
    vector_blob,
)
from ampup_memory.search.index.keywords import Space, SpaceFiles
from ampup_memory.search.tokenize import fts5_match
from ampup_memory.sqlite_connections import ThreadConnections, roll_back, sqlite_path

FORMAT = "4"  # 4: row lengths for held searches; 3: row seqs and sizes for held searches;
# 2: a keyword file per (scope, branch); 1 (no key): one shared FTS5 table

SCHEMA = (
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    """CREATE TABLE IF NOT EXISTS cursors (
        scope TEXT NOT NULL, branch TEXT NOT NULL, commit_id TEXT NOT NULL,
        PRIMARY KEY (scope, branch))""",
    """CREATE TABLE IF NOT EXISTS episodes (
        num INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL, scope TEXT NOT NULL, branch TEXT NOT NULL, commit_id TEXT NOT NULL,
        occurred_at TEXT NOT NULL, acl TEXT NOT NULL, source TEXT NOT NULL,
        unit_kinds TEXT NOT NULL,
        UNIQUE (scope, branch, id))""",
    """CREATE TABLE IF NOT EXISTS passages (
        num INTEGER PRIMARY KEY AUTOINCREMENT,
        episode_num INTEGER NOT NULL, scope TEXT NOT NULL, branch TEXT NOT NULL,
        first_unit INTEGER NOT NULL, last_unit INTEGER NOT NULL,
        units TEXT NOT NULL, text TEXT NOT NULL, seq INTEGER NOT NULL,
        vec BLOB, vec_seq INTEGER NOT NULL DEFAULT 0)""",
    "CREATE INDEX IF NOT EXISTS passages_episode ON passages(episode_num)",
    "CREATE INDEX IF NOT EXISTS passages_vec_seq ON passages(vec_seq)",
    "CREATE INDEX IF NOT EXISTS passages_space ON passages(scope, branch)",
    "CREATE INDEX IF NOT EXISTS passages_seq ON passages(scope, branch, seq)",
    """CREATE TABLE IF NOT EXISTS facts (
        num INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL, scope TEXT NOT NULL, branch TEXT NOT NULL, commit_id TEXT NOT NULL,
        commit_seq INTEGER NOT NULL, entity TEXT NOT NULL, predicate TEXT NOT NULL,
        value TEXT NOT NULL, quote TEXT NOT NULL, valid_from TEXT, valid_to TEXT,
        written_by TEXT NOT NULL, cites TEXT NOT NULL, predicate_words TEXT NOT NULL,
        ord INTEGER NOT NULL, kind TEXT NOT NULL,
        vec BLOB, vec_seq INTEGER NOT NULL DEFAULT 0,
        UNIQUE (scope, branch, id))""",
    "CREATE INDEX IF NOT EXISTS facts_key ON facts(scope, branch, entity, predicate)",
    "CREATE INDEX IF NOT EXISTS facts_valid ON facts(scope, branch, valid_from)",
    "CREATE INDEX IF NOT EXISTS facts_vec_seq ON facts(vec_seq)",
    "CREATE INDEX IF NOT EXISTS facts_space ON facts(scope, branch)",
    "CREATE INDEX IF NOT EXISTS facts_seq ON facts(scope, branch, commit_seq)",
    "CREATE TABLE IF NOT EXISTS acl_bitmaps (entry TEXT PRIMARY KEY, bits BLOB NOT NULL)",
    # One row per keyword space; its file is named by id and a random token.
    """CREATE TABLE IF NOT EXISTS keyword_spaces (
        id INTEGER PRIMARY KEY AUTOINCREMENT, scope TEXT NOT NULL, branch TEXT NOT NULL,
        token TEXT NOT NULL, UNIQUE (scope, branch))""",
)

# Kept across an emptying so caches of other processes notice (they compare numbers).
_COUNTERS = ("generation", "acl_generation", "vec_seq")
# This index's tables in every format so far, and nothing else in the file (format 1 had
# one FTS5 table per kind here).
_ROW_TABLES = ("cursors", "episodes", "passages", "facts", "acl_bitmaps", "keyword_spaces")
_OWN_TABLE = re.compile(r"(?:facts|passages)_fts|" + "|".join(_ROW_TABLES))

log = logging.getLogger("ampup_memory.search")

_FACT_COLS = (
    "num, id, scope, branch, commit_id, commit_seq, entity, predicate, value, quote,"
    " valid_from, valid_to, written_by, cites, ord, kind"
)
_TABLES = {"facts": "facts", "passages": "passages"}  # the only row-table names in SQL
_SEQ = {"facts": "commit_seq", "passages": "seq"}  # the commit that put a row in its space
_BM25 = ", ".join(str(w) for w in fts5_weights())
_CHUNK = 500  # bound parameters per IN (...) list
COUNTS_KEPT = 4096  # word counts remembered (`SQLiteIndex._count`)

def _view_and_words(terms: Terms) -> tuple[Statistics | None, list[str]]:
    """A view's statistics (None: one space's own terms), and the terms."""
    return (terms.stats if isinstance(terms, ViewWords) else None), words_of(terms)


def _last(bound: int | None, applied: int) -> int:
    """The last row a space's statistics or list reach (``bound`` None: all it holds)."""
    return applied if bound is None else bound


def _chunks(values: Iterable[Any]) -> Iterator[list[Any]]:
    batch: list[Any] = []
    for v in values:
        batch.append(v)
        if len(batch) >= _CHUNK:
            yield batch
            batch = []
    if batch:
        yield batch


def _place(at: tuple[datetime, int, int] | None, default: tuple[str, int, int]
           ) -> tuple[str, int, int]:
    """A place in newest-wins' order as SQL compares it (``default`` when none)."""
    return default if at is None else (time_text(at[0]) or "", at[1], at[2])


def _fact_row(r: Sequence[Any]) -> FactRow:
    return FactRow(
        num=r[0], id=r[1], scope=r[2], branch=r[3], commit=r[4], commit_seq=r[5],
        entity=r[6], predicate=r[7], value=r[8], quote=r[9],
        valid_from=parse_time_text(r[10]), valid_to=parse_time_text(r[11]),
        written_by=r[12], cites=tuple((int(e), int(u)) for e, u in json.loads(r[13])),
        ord=r[14], kind=r[15],
    )


class SQLiteIndex:
    def __init__(self, uri: str, ann_min_vectors: int = ANN_MIN_VECTORS,
                 ann_params: GraphParams = DEFAULT_PARAMS) -> None:
        self.path = sqlite_path(uri)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.info = IndexInfo(backend="sqlite", details={"path": str(self.path)})
        self._local = threading.local()  # per-thread transaction state
        # NORMAL: the index is derived and rebuildable, so a power cut costs a catch-up.
        self._conns = ThreadConnections(self.path, synchronous="NORMAL", timeout=60.0)
        self._write_lock = threading.RLock()
        # From ann_min_vectors rows of one (scope, branch) on, an HNSW graph proposes
        # vector candidates and the matrix re-scores them (`ann.py`); 0: always exact.
        # Graphs are saved beside this file and reused while they match the rows.
        self.graph_stats = GraphStats()
        self._graphs = graphs = self.path.with_name(self.path.name + ".graphs")
        self._vectors = {t: VectorCache(ann_min_vectors, graphs, t, self.graph_stats,
                                        ann_params)
                         for t in ("facts", "passages")}
        self._bitmaps: dict[str, BitMap] = {}
        self._bitmap_gen: int | None = None
        self._bitmap_lock = threading.Lock()
        self._pending_bits: dict[str, BitMap] | None = None
        # Word counts of the postings budget, per keyword space content (`_count`), and
        # facts per space (`_space_facts`).
        self._counts: Remembered[tuple[str, str, int | None, int | None], int] = Remembered(
            COUNTS_KEPT)
        self._space_counts: Remembered[str, int] = Remembered(COUNTS_KEPT)
        self._spaces = SpaceFiles(self.path.with_name(self.path.name + ".keywords"),
                                  timeout=60.0)
        self._prepare_file()

    # -- connections and meta ------------------------------------------------------------

    def _conn(self) -> sqlite3.Connection:
        return self._conns.get()

    def _prepare_file(self) -> None:
        """Create the schema; empty an index of another format first (it is refilled from
        the tables by the start-up catch-up, as a deleted index file would be)."""
        with self._write_lock:
            conn = self._conn()
            conn.execute("BEGIN IMMEDIATE")  # two processes opening one old file: one empties
            try:
                tables = {str(r[0]) for r in conn.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'table'")}
                found = None
                if "meta" in tables:
                    row = conn.execute("SELECT value FROM meta WHERE key = 'format'").fetchone()
                    found = str(row[0]) if row else "1"
                if found is not None and found != FORMAT:
                    log.warning("search index %s has format %s, this version uses %s:"
                                " emptying it; it refills from the tables", self.path,
                                found, FORMAT)
                    self._empty_file(conn)
                for statement in SCHEMA:
                    conn.execute(statement)
                self._set_meta(conn, "format", FORMAT)
                # Under the write lock: a space's file is only created after its row is
                # committed, so no file of a space being created can look stale here.
                self._spaces.keep_only(self._all_spaces(conn))
                keep_only_graphs(self._graphs, self._graph_paths(self._all_spaces(conn)))
            except BaseException:
                roll_back(conn)
                raise
            conn.execute("COMMIT")

    def _empty_file(self, conn: sqlite3.Connection) -> None:
        """Drop this index's tables of any format (the file also holds core's ``mem_*``
        read index, which stays) and keep only meta's counters, each moved on."""
        names = [str(r[0]) for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")]
        ours = [n for n in names if _OWN_TABLE.fullmatch(n)]  # fixed names only
        # Virtual tables first: dropping one drops its shadow tables (…_data, …_idx).
        for name in sorted(ours, key=lambda n: "_fts" not in n):
            conn.execute(f"DROP TABLE IF EXISTS {name}")
        if "sqlite_sequence" in names:
            conn.execute(
                f"DELETE FROM sqlite_sequence WHERE name IN ({','.join('?' * len(_ROW_TABLES))})",
                _ROW_TABLES,
            )
        conn.execute(
            f"DELETE FROM meta WHERE key NOT IN ({','.join('?' * len(_COUNTERS))})",
            _COUNTERS,
        )
        for key in ("generation", "acl_generation"):
            self._bump(conn, key)

    def _meta(self, key: str) -> str | None:
        row = self._conn().execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return str(row[0]) if row else None

    def _set_meta(self, conn: sqlite3.Connection, key: str, value: str) -> None:
        conn.execute(
            "INSERT INTO meta (key, value) VALUES (?, ?)"
            " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (key, value),
        )

    def _bump(self, conn: sqlite3.Connection, key: str) -> int:
        row = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        value = int(row[0]) + 1 if row else 1
        self._set_meta(conn, key, str(value))
        return value

    @contextmanager
    def transaction(self) -> Iterator[None]:
        with self._write_lock:
            if getattr(self._local, "in_tx", False):
                yield  # nested: the outer transaction commits
                return
            conn = self._conn()
            conn.execute("BEGIN IMMEDIATE")
            self._local.in_tx = True
            self._local.after_commit = []
            self._local.touched = set()
            self._pending_bits = {}
            self._local.vec_seq = None
            try:
                yield
                self._flush_bits(conn)
            except BaseException:
                roll_back(conn)
                raise
            else:
                conn.execute("COMMIT")
            finally:
                self._local.in_tx = False
                self._pending_bits = None
                after: list[Callable[[], None]] = self._local.after_commit
                self._local.after_commit = []
            for step in after:  # only after a commit (an exception above skips this)
                step()

    def _tx(self) -> sqlite3.Connection:
        if not getattr(self._local, "in_tx", False):
            raise RuntimeError("index writes must run inside transaction()")
        return self._conn()

    def _vec_seq(self, conn: sqlite3.Connection) -> int:
        # One number per transaction: readers load a whole transaction or none of it.
        seq: int | None = getattr(self._local, "vec_seq", None)
        if seq is None:
            seq = self._bump(conn, "vec_seq")
            self._local.vec_seq = seq
        return seq

    # -- model and cursors ---------------------------------------------------------------

    def model(self) -> ModelInfo | None:
        name, dims = self._meta("model_name"), self._meta("model_dimensions")
        if name is None or dims is None:
            return None
        return ModelInfo(name, int(dims))

    def set_model(self, model: ModelInfo) -> None:
        with self.transaction():
            conn = self._tx()
            if self.model() != model:
                conn.execute("UPDATE facts SET vec = NULL, vec_seq = 0")
                conn.execute("UPDATE passages SET vec = NULL, vec_seq = 0")
                self._bump(conn, "generation")
            self._set_meta(conn, "model_name", model.name)
            self._set_meta(conn, "model_dimensions", str(model.dimensions))

    def passage_cut(self) -> str | None:
        return self._meta("passage_cut")

    def set_passage_cut(self, cut: str) -> None:
        with self.transaction():
            self._set_meta(self._tx(), "passage_cut", cut)

    def cursor(self, scope: str, branch: str) -> str | None:
        row = self._conn().execute(
            "SELECT commit_id FROM cursors WHERE scope = ? AND branch = ?", (scope, branch)
        ).fetchone()
        return str(row[0]) if row else None

    def set_cursor(self, scope: str, branch: str, commit: str) -> None:
        self._tx().execute(
            "INSERT INTO cursors (scope, branch, commit_id) VALUES (?, ?, ?)"
            " ON CONFLICT (scope, branch) DO UPDATE SET commit_id = excluded.commit_id",
            (scope, branch, commit),
        )

    def scopes(self) -> list[tuple[str, str]]:
        rows = self._conn().execute("SELECT scope, branch FROM cursors ORDER BY 1, 2")
        return [(str(s), str(b)) for s, b in rows]

    def clear(self, scope: str | None = None) -> None:
        with self.transaction():
            conn = self._tx()
            cleared = [s for s in self._all_spaces(conn) if scope is None or s.scope == scope]
            if scope is None:
                for table in ("facts", "passages", "episodes", "cursors", "acl_bitmaps",
                              "keyword_spaces"):
                    conn.execute(f"DELETE FROM {table}")  # noqa: S608 (fixed names)
                # Numbers restart; keyword spaces' do not (their files are named by them).
                conn.execute("DELETE FROM sqlite_sequence"
                             " WHERE name IN ('facts', 'passages', 'episodes')")
                assert self._pending_bits is not None
                self._pending_bits.clear()
                self._bump(conn, "acl_generation")
            else:
                self._clear_rows(conn, "scope = ?", (scope,))
            self._bump(conn, "generation")
            self._local.after_commit.append(lambda: self._remove_files(cleared))

    def clear_branch(self, scope: str, branch: str) -> None:
        with self.transaction():
            conn = self._tx()
            cleared = [s for s in self._all_spaces(conn) if (s.scope, s.branch) == (scope, branch)]
            self._clear_rows(conn, "scope = ? AND branch = ?", (scope, branch))
            # Vector caches reload (they hold the branch's rows); its keyword file goes.
            self._bump(conn, "generation")
            self._local.after_commit.append(lambda: self._remove_files(cleared))

    def _clear_rows(self, conn: sqlite3.Connection, where: str, params: tuple[str, ...]
                    ) -> None:
        """Delete the rows matching ``where`` (a fixed condition on scope and branch) from
        every row table, and their episodes' bits from every bitmap."""
        nums = BitMap(int(r[0]) for r in conn.execute(
            f"SELECT num FROM episodes WHERE {where}", params))  # noqa: S608
        for entry, bits in self._all_bitmaps(conn).items():
            if bits & nums:
                self._pending(entry, bits - nums)
        for table in ("facts", "passages", "episodes", "cursors", "keyword_spaces"):
            conn.execute(f"DELETE FROM {table} WHERE {where}", params)  # noqa: S608

    # -- keyword spaces --------------------------------------------------------------------

    @staticmethod
    def _all_spaces(conn: sqlite3.Connection) -> list[Space]:
        return [Space(int(i), str(t), str(s), str(b)) for i, t, s, b in conn.execute(
            "SELECT id, token, scope, branch FROM keyword_spaces")]

    def _space(self, scope: str, branch: str) -> Space | None:
        """The keyword space of (scope, branch), if anything was ever written to it."""
        row = self._conn().execute(
            "SELECT id, token FROM keyword_spaces WHERE scope = ? AND branch = ?",
            (scope, branch),
        ).fetchone()
        return Space(int(row[0]), str(row[1]), scope, branch) if row else None

    def _space_for_write(self, conn: sqlite3.Connection, scope: str, branch: str) -> Space:
        """The keyword space of (scope, branch), registered on first use; its file gets
        this transaction's rows right after the commit."""
        space = self._space(scope, branch)
        if space is None:
            token = secrets.token_hex(8)
            row = conn.execute(
                "INSERT INTO keyword_spaces (scope, branch, token) VALUES (?, ?, ?)"
                " RETURNING id", (scope, branch, token),
            ).fetchone()
            space = Space(int(row[0]), token, scope, branch)
        if space not in self._local.touched:
            self._local.touched.add(space)
            self._local.after_commit.append(lambda: self._apply_after_commit(space))
        return space

    def _apply_after_commit(self, space: Space) -> None:
        try:
            with self._spaces.connect(space) as kconn:
                for kind in keywords.COLUMNS:
                    self._catch_up(kconn, space, kind)
        except (sqlite3.Error, OSError) as exc:
            # The rows are committed: the next search of this space applies them. A disk
            # full or a file it cannot open is said in one line; anything else with its
            # traceback.
            trouble = storage_down(exc) is not None
            log.warning("keyword file of %s/%s lags its rows; the next search applies them%s",
                        space.scope, space.branch,
                        f" ({storage_trouble(exc)}: {driver_said(exc)[:300]})" if trouble
                        else "", exc_info=not trouble)

    def _catch_up(self, kconn: sqlite3.Connection, space: Space, kind: str) -> int:
        """Bring the space file's ``kind`` postings level with this file's rows; returns
        the row number they are applied up to (the version of the space's statistics)."""
        t = _TABLES[kind]
        upto = int(self._conn().execute(
            f"SELECT max(num) FROM {t} INDEXED BY {t}_space WHERE scope = ? AND branch = ?",
            (space.scope, space.branch),
        ).fetchone()[0] or 0)
        done = keywords.applied(kconn, kind)
        if done >= upto:
            return done
        kconn.execute("BEGIN IMMEDIATE")
        try:
            done = keywords.applied(kconn, kind)  # another writer may have been first
            if done < upto:
                rows = self._conn().execute(
                    f"SELECT num, {', '.join(keywords.COLUMNS[kind])} FROM {t}"
                    f" INDEXED BY {t}_space WHERE scope = ? AND branch = ?"
                    " AND num > ? AND num <= ? ORDER BY num",
                    (space.scope, space.branch, done, upto),
                )
                keywords.apply(kconn, kind, rows, upto)
        except BaseException:
            roll_back(kconn)
            raise
        kconn.execute("COMMIT")
        return max(done, upto)

    def _graph_paths(self, spaces: list[Space]) -> list[Path]:
        """The saved HNSW graphs of these spaces' matrices (`ann.py`), of both tables."""
        return [graph_path(self._graphs, table, s.scope, s.branch)
                for s in spaces for table in self._vectors]

    def _remove_files(self, spaces: list[Space]) -> None:
        """A cleared space's keyword file and saved graphs; what a crash leaves here, the
        next open removes (`keep_only`, `keep_only_graphs`)."""
        remove_graphs(self._graph_paths(spaces))
        try:
            self._spaces.remove(spaces)
        except OSError:
            log.warning("could not delete a cleared keyword file; the next open does",
                        exc_info=True)

    @contextmanager
    def _keyword_space(self, kind: str, scope: str, branch: str
                       ) -> Iterator[tuple[sqlite3.Connection, str, int] | None]:
        """The space's keyword file, caught up, a key naming its current content and the
        row it is applied up to."""
        space = self._space(scope, branch)
        if space is None:
            yield None
            return
        with self._spaces.connect(space) as kconn:
            upto = self._catch_up(kconn, space, kind)
            yield kconn, f"{space.id}-{space.token}-{kind}-{upto}", upto

    # -- bitmaps ---------------------------------------------------------------------------

    def _all_bitmaps(self, conn: sqlite3.Connection) -> dict[str, BitMap]:
        return {
            str(e): BitMap.deserialize(bytes(b))
            for e, b in conn.execute("SELECT entry, bits FROM acl_bitmaps")
        }

    def _pending(self, entry: str, bits: BitMap | None = None) -> BitMap:
        """The bitmap of an entry as this transaction will leave it."""
        assert self._pending_bits is not None
        if bits is not None:
            self._pending_bits[entry] = bits
        if entry not in self._pending_bits:
            row = self._conn().execute(
                "SELECT bits FROM acl_bitmaps WHERE entry = ?", (entry,)
            ).fetchone()
            self._pending_bits[entry] = BitMap.deserialize(bytes(row[0])) if row else BitMap()
        return self._pending_bits[entry]

    def _flush_bits(self, conn: sqlite3.Connection) -> None:
        if not self._pending_bits:
            return
        for entry, bits in self._pending_bits.items():
            bits.run_optimize()
            conn.execute(
                "INSERT INTO acl_bitmaps (entry, bits) VALUES (?, ?)"
                " ON CONFLICT (entry) DO UPDATE SET bits = excluded.bits",
                (entry, bits.serialize()),
            )
        self._bump(conn, "acl_generation")

    def acl_bitmap(self, entry: str) -> BitMap:
        with self._bitmap_lock:
            gen = int(self._meta("acl_generation") or 0)
            if gen != self._bitmap_gen:
                self._bitmaps = self._all_bitmaps(self._conn())
                self._bitmap_gen = gen
            found = self._bitmaps.get(entry)
            return BitMap(found) if found is not None else BitMap()

    # -- writes ----------------------------------------------------------------------------

    def upsert_episodes(self, docs: Sequence[EpisodeDoc]) -> list[tuple[int, bool]]:
        conn = self._tx()
        # The held ones in one lookup per (scope, branch) and chunk, inside the transaction
        # (one SELECT per episode was a sixth of the index writes of a load).
        held: dict[tuple[str, str, str], tuple[int, set[str]]] = {}
        for scope, branch in dict.fromkeys((d.scope, d.branch) for d in docs):
            ids = [d.id for d in docs if (d.scope, d.branch) == (scope, branch)]
            for batch in _chunks(dict.fromkeys(ids)):
                for i, n, acl in conn.execute(
                    "SELECT id, num, acl FROM episodes WHERE scope = ? AND branch = ?"
                    f" AND id IN ({','.join('?' * len(batch))})",
                    (scope, branch, *batch),
                ):
                    held[(scope, branch, str(i))] = (int(n), set(json.loads(acl)))
        # The new ones (first occurrence of each) in one insert, in batch order, so they
        # are numbered as one insert each would number them; their numbers are read back
        # per chunk (an INSERT … RETURNING per episode was ~5 % of a load's CPU).
        fresh = {(d.scope, d.branch, d.id): d for d in reversed(docs)
                 if (d.scope, d.branch, d.id) not in held}
        firsts = [d for d in docs if fresh.get((d.scope, d.branch, d.id)) is d]
        conn.executemany(
            "INSERT INTO episodes (id, scope, branch, commit_id, occurred_at, acl,"
            " source, unit_kinds) VALUES (?,?,?,?,?,?,?,?)",
            [(d.id, d.scope, d.branch, d.commit, time_text(d.occurred_at),
              dumps(list(d.acl)), d.source,
              dumps([u.kind for u in sorted(d.units, key=lambda u: u.n)])) for d in firsts],
        )
        numbered: dict[tuple[str, str, str], int] = {}
        for scope, branch in dict.fromkeys((d.scope, d.branch) for d in firsts):
            ids = [d.id for d in firsts if (d.scope, d.branch) == (scope, branch)]
            for batch in _chunks(ids):
                for i, n in conn.execute(
                    "SELECT id, num FROM episodes WHERE scope = ? AND branch = ?"
                    f" AND id IN ({','.join('?' * len(batch))})",
                    (scope, branch, *batch),
                ):
                    numbered[(scope, branch, str(i))] = int(n)
        out: list[tuple[int, bool]] = []
        for doc in docs:
            key = (doc.scope, doc.branch, doc.id)
            found = held.get(key)
            if found is None:
                num = numbered[key]
                old: set[str] = set()
                new = True
            else:
                (num, old), new = found, False
                conn.execute(
                    "UPDATE episodes SET acl = ?, occurred_at = ?, source = ? WHERE num = ?",
                    (dumps(list(doc.acl)), time_text(doc.occurred_at), doc.source, num),
                )
            held[key] = (num, set(doc.acl))  # the same episode again below is held
            for entry in old - set(doc.acl):
                self._pending(entry).discard(num)
            for entry in set(doc.acl) - old:
                self._pending(entry).add(num)
            out.append((num, new))
        return out

    def episode_numbers(self, scope: str, branch: str, ids: Iterable[str]) -> dict[str, int]:
        found: dict[str, int] = {}
        for batch in _chunks(dict.fromkeys(ids)):
            for i, n in self._conn().execute(
                "SELECT id, num FROM episodes WHERE scope = ? AND branch = ?"
                f" AND id IN ({','.join('?' * len(batch))})",
                (scope, branch, *batch),
            ):
                found[str(i)] = int(n)
        return found

    def add_passages(self, passages: Sequence[NewPassage]) -> None:
        conn = self._tx()
        if not passages:
            return
        seq = self._vec_seq(conn)
        for scope, branch in dict.fromkeys((p.scope, p.branch) for p in passages):
            self._space_for_write(conn, scope, branch)
        conn.executemany(
            "INSERT INTO passages (episode_num, scope, branch, first_unit, last_unit, units,"
            " text, seq, vec, vec_seq) VALUES (?,?,?,?,?,?,?,?,?,?)",
            [(p.episode_num, p.scope, p.branch, p.first_unit, p.last_unit,
              dumps([list(u) for u in p.units]), "\n\n".join(t for _, _, t in p.units),
              p.seq, vector_blob(p.vector), seq if p.vector is not None else 0)
             for p in passages],
        )

    def upsert_facts(self, facts: Sequence[NewFact]) -> None:
        conn = self._tx()
        if not facts:
            return
        seq = self._vec_seq(conn)
        for scope, branch in dict.fromkeys((f.doc.scope, f.doc.branch) for f in facts):
            self._space_for_write(conn, scope, branch)
        conn.executemany(
            "INSERT INTO facts (id, scope, branch, commit_id, commit_seq, entity, predicate,"
            " value, quote, valid_from, valid_to, written_by, cites, predicate_words, vec,"
            " vec_seq, ord, kind) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"
            " ON CONFLICT (scope, branch, id) DO NOTHING",
            [
                (f.doc.id, f.doc.scope, f.doc.branch, f.doc.commit, f.doc.commit_seq,
                 f.doc.entity, f.doc.predicate, f.doc.value, f.doc.quote,
                 time_text(f.doc.valid_from), time_text(f.doc.valid_to), f.doc.written_by,
                 dumps([list(c) for c in f.cites]), f.doc.predicate.replace("_", " "),
                 vector_blob(f.vector), seq if f.vector is not None else 0, f.doc.ord,
                 f.doc.kind)
                for f in facts
            ],
        )

    # -- candidates ------------------------------------------------------------------------

    @staticmethod
    def _postings(kconn: sqlite3.Connection, kind: str, term: str, cap: int | None,
                  bound: int | None = None) -> int:
        """Rows of one keyword space (numbered up to ``bound``) matching one term, counted
        up to ``cap``."""
        fts = keywords.fts_table(kind)
        below, params = ("", ()) if bound is None else (" AND rowid <= ?", (bound,))
        row = kconn.execute(
            # Newest first: FTS5 starts a descending walk at once, where an ascending one
            # over many segments paid ~10 ms before its first row at 300k rows here.
            f"SELECT count(*) FROM (SELECT 1 FROM {fts} WHERE {fts} MATCH ?{below}"
            " ORDER BY rowid DESC LIMIT ?)",
            (fts5_match([term]), *params, -1 if cap is None else cap),
        ).fetchone()
        return int(row[0])

    def _count(self, kconn: sqlite3.Connection, kind: str, version: str, term: str,
               cap: int | None, bound: int | None) -> int:
        """`_postings`, remembered per space content (``version`` names the space and the
        row it is applied up to, so a write starts afresh): a common word's exact count
        walks its whole doclist (2 ms per 30k postings here), and common words recur."""
        return self._counts.get((version, term, cap, bound),
                                lambda: self._postings(kconn, kind, term, cap, bound))

    def _affordable(self, kconn: sqlite3.Connection, kind: str, version: str,
                    terms: Sequence[str], bound: int | None = None,
                    view: Statistics | None = None) -> tuple[list[str], bool]:
        """The kept terms, and whether their postings are over the budget (the rarest
        term alone is: a ranked pass then ranks its newest postings only, `_floor`);
        given a view's statistics, its terms (`space_terms`)."""
        # FTS5's bm25() walks every posting of every query term (to rank, and to count
        # document frequencies), so one very common word costs a scan of most of the
        # space. Keep the rarest terms within the postings budget (the rarest always
        # stays): the dropped ones carry the least IDF, and the embedding side still
        # sees the whole query. Same rule as the AMP cell store. Counted in the space
        # alone (up to the bound of a held search), so which terms are kept depends on
        # this scope's rows only (the held ones only).
        counts = self._term_counts(kind, [(kconn, version, bound)], terms)
        return space_terms(terms, counts.__getitem__, view is not None)

    def _kept(self, kconn: sqlite3.Connection, kind: str, version: str, branch: str,
              terms: Terms, bound: int | None
              ) -> tuple[list[str], bool, Statistics | None]:
        """`_affordable`, and the view's statistics that score the rows (None: the rows'
        own up to ``bound``). A view of this space alone (a fact search's) gives the
        terms without counting again (`own_terms`), and where nothing was applied since
        its mark (``bound`` None) FTS5's own statistics are the view's, bit for bit."""
        view, words = _view_and_words(terms)
        own = own_terms(terms, branch)
        if own is None:
            kept, over = self._affordable(kconn, kind, version, words, bound, view)
            return kept, over, view
        kept, over = own
        return kept, over, view if bound is not None else None

    def _term_counts(self, kind: str,
                     spaces: Sequence[tuple[sqlite3.Connection, str, int | None]],
                     terms: Sequence[str]) -> dict[str, int]:
        """Rows matching each term in these spaces together (each: its connection,
        version and bound), as the budget needs them. Counting is itself a doclist walk
        (~16 ms per 100k postings here), so count only up to the budget; only when every
        known term is over it do the exact counts decide which one stays."""
        cap = POSTINGS_BUDGET + 1
        counts = {term: self._rows_holding(kind, spaces, term, cap) for term in terms}
        if all(n >= cap for n in counts.values() if n > 0):
            counts = {term: n and self._rows_holding(kind, spaces, term, None)
                      for term, n in counts.items()}
        return counts

    def _rows_holding(self, kind: str,
                      spaces: Sequence[tuple[sqlite3.Connection, str, int | None]],
                      term: str, cap: int | None) -> int:
        """Rows matching ``term`` in these spaces together, each counted up to ``cap``."""
        return sum(self._count(kconn, kind, version, term, cap, bound)
                   for kconn, version, bound in spaces)

    @staticmethod
    def _floor(kconn: sqlite3.Connection, kind: str, kept: list[str], low: int,
               high: int | None) -> int:
        """The row above which a ranked pass over ``kept`` (rows ``low`` < n <= ``high``)
        finds at most `POSTINGS_BUDGET` matches: the newest ones (`budget.py`); ``low``
        when they are fewer."""
        fts = keywords.fts_table(kind)
        within, params = " AND rowid > ?", [low]
        if high is not None:
            within, params = within + " AND rowid <= ?", [low, high]
        row = kconn.execute(
            f"SELECT rowid FROM {fts} WHERE {fts} MATCH ?{within}"
            " ORDER BY rowid DESC LIMIT 1 OFFSET ?",
            (fts5_match(kept), *params, POSTINGS_BUDGET),
        ).fetchone()
        return low if row is None else max(low, int(row[0]))

    def keyword_view(self, kind: str, scope: str,
                     spaces: Sequence[tuple[str, int | None]], terms: Sequence[str]
                     ) -> ViewWords:
        with ExitStack() as stack:
            found: list[tuple[sqlite3.Connection, str, int | None]] = []
            marks: list[tuple[str, int]] = []
            rows = tokens = 0
            for branch, upto in spaces:
                space = stack.enter_context(self._keyword_space(kind, scope, branch))
                if space is not None:
                    kconn, version, applied = space
                    # Words and rows counted up to one row: another search may catch the
                    # file up past `applied` between the counts (the rows it adds would
                    # make a word's rows outnumber the rows, a negative IDF).
                    last = _last(self._bound(kind, scope, branch, upto, applied), applied)
                    found.append((kconn, version, last))
                    marks.append((branch, last))
                    n, size = keywords.cut_totals(kconn, kind, last)
                    rows, tokens = rows + n, tokens + size
            counts = self._term_counts(kind, found, terms)
            kept = affordable_terms(terms, counts.__getitem__)
            # A count below the cap is exact (the budget's counts stop at the cap); a kept
            # term at it is counted to the end (remembered when the budget did already).
            cap = POSTINGS_BUDGET + 1
            hits = tuple(counts[t] if counts[t] < cap
                         else self._rows_holding(kind, found, t, None) for t in kept)
        return ViewWords(tuple(kept), Statistics(rows, tokens, hits), tuple(marks))

    def _bound(self, kind: str, scope: str, branch: str, upto: int | None,
               applied: int) -> int | None:
        """The last row the space held after its branch's commit ``upto`` (None: every
        row it holds now). Rows are numbered in the order their commits were applied
        (`feed.documents`), so the rows up to it are the rows of those commits."""
        if upto is None:
            return None
        t, seq = _TABLES[kind], _SEQ[kind]
        row = self._conn().execute(
            f"SELECT num FROM {t} INDEXED BY {t}_seq WHERE scope = ? AND branch = ?"
            f" AND {seq} <= ? ORDER BY {seq} DESC, num DESC LIMIT 1",
            (scope, branch, upto),
        ).fetchone()
        bound = int(row[0]) if row else 0
        # Nothing after it: FTS5's own statistics are the held ones (bit for bit).
        return None if bound >= applied else bound

    def _counted(self, kind: str, scope: str, branch: str, terms: Terms, upto: int | None,
                 applied: int) -> int | None:
        """`_bound`; for a space a view counted (its words as ``terms``), the row the view
        counted up to, so a search's steps count the same rows of the space whatever was
        applied between them (None: every row it holds now)."""
        mark = terms.mark(branch) if isinstance(terms, ViewWords) else None
        if mark is None:
            return self._bound(kind, scope, branch, upto, applied)
        return None if mark >= applied else mark

    def _first_after(self, kind: str, scope: str, branch: str, after: int) -> int | None:
        """The first row the space holds of a commit after seq ``after`` (None: none)."""
        t, seq = _TABLES[kind], _SEQ[kind]
        row = self._conn().execute(
            f"SELECT num FROM {t} INDEXED BY {t}_seq WHERE scope = ? AND branch = ?"
            f" AND {seq} > ? ORDER BY {seq}, num LIMIT 1",
            (scope, branch, after),
        ).fetchone()
        return int(row[0]) if row else None

    def _keyword(self, kind: str, scope: str, branch: str, terms: Terms, k: int,
                 weights: tuple[float, ...], upto: int | None,
                 seqs: SeqRange | None = None, begun_at: int | None = None) -> list[Hit]:
        words = words_of(terms)
        if not words or k <= 0:
            return []
        with self._keyword_space(kind, scope, branch) as found:
            if found is None:
                return []
            kconn, version, applied = found
            bound = self._counted(kind, scope, branch, terms, upto, applied)
            # Rows are numbered in commit order (see _bound), so a seq range is a rowid
            # range: only the rows a view's segment holds are listed.
            low, high = 0, None
            if seqs is not None:
                if seqs[1] < NO_LIMIT:
                    high = self._bound(kind, scope, branch, seqs[1], applied)
                if seqs[0] > 0:
                    first = self._first_after(kind, scope, branch, seqs[0])
                    if first is None:
                        return []
                    low = first - 1
            kept, over, view = self._kept(kconn, kind, version, branch, terms, bound)
            if not kept:
                return []
            if over:  # only the newest POSTINGS_BUDGET matches are ranked (`budget.py`)
                low = self._floor(kconn, kind, kept, low, high if high is not None
                                  else bound)
            # Only begun facts wanted, and some of this space's are not: the whole ranked
            # list is checked, its first k begun kept (`_begun_first`). When every fact of
            # the space has its start cached, the rows outside the begun ones' row-number
            # span are not ranked at all (none of them has begun); the budget's floor
            # above is unchanged by it, so the same rows rank as without the span.
            late, span = False, None
            if begun_at is not None:
                late, span = self._begun_span(kind, scope, branch, version, begun_at)
            if view is not None:
                # The view's statistics score, so the bound only ends the rows listed.
                end = _last(bound, applied)
                high, bound = (end if high is None else min(high, end)), None
            if span is not None and bound is None:
                if span[0] > span[1]:
                    return []
                low = max(low, span[0] - 1)
                high = span[1] if high is None else min(high, span[1])
                if high is not None and low >= high:
                    return []
            if bound is not None or view is not None:
                # BM25 over the held rows alone (a held search), or over this segment's
                # rows with the view's statistics.
                last = bound if view is None else high
                assert last is not None
                best = keywords.cut_scores(kconn, kind, kept, last, weights,
                                           limit=None if late else k, after=low, stats=view)
                if late:
                    assert begun_at is not None
                    return self._begun_first(scope, branch, best, k, begun_at)
                return [(n, max(s, 0.0)) for n, s in best]
            fts = keywords.fts_table(kind)
            rank = f"bm25({fts}{''.join(f', {w}' for w in weights)})"
            within, params = "", cast(tuple[int, ...], ())
            if low:
                within, params = " AND rowid > ?", (low,)
            if high is not None:
                within, params = within + " AND rowid <= ?", (*params, high)
            # The file holds this scope and branch only: no filter, no join. Ties go to
            # the older row, so the cut at k is the same in a rebuilt index.
            cursor = kconn.execute(
                f"SELECT rowid, -{rank} FROM {fts} WHERE {fts} MATCH ?{within}"
                f" ORDER BY {rank}, rowid LIMIT ?",
                (fts5_match(kept), *params, -1 if late else k),
            )
            if late:
                assert begun_at is not None
                return self._begun_first(scope, branch, cursor, k, begun_at)
            rows = cursor.fetchall()
        return [(int(n), max(float(s), 0.0)) for n, s in rows]

    def _begun_span(self, kind: str, scope: str, branch: str, version: str, at: int
                    ) -> tuple[bool, tuple[int, int] | None]:
        """Whether a fact of the space may not have begun at ``at`` (then the candidate
        lists check each row), and, when the space's every fact has its start cached
        (one per live vector row), the row numbers (first, last) its begun facts lie
        between ((1, 0): none). A pre-filter: the engine still applies
        `memory.facts.begun` to every candidate."""
        cache = self._refresh("facts")
        with cache.lock:
            matrix = cache.by_key.get((scope, branch))
            if matrix is None:
                return True, None
            late = matrix.latest_start() > at
            live = matrix.live_rows()
            span = matrix.begun_span(at) if late else None
        if not late:
            # The cached starts say all have begun; a fact without a cached vector may not.
            return live != self._space_facts(kind, scope, branch, version), None
        return True, span if live == self._space_facts(kind, scope, branch, version) else None

    def _space_facts(self, kind: str, scope: str, branch: str, version: str) -> int:
        """How many facts the space holds, remembered per keyword space content (any
        write of a fact moves ``version``)."""
        def count() -> int:
            (n,) = self._conn().execute(
                "SELECT count(*) FROM facts INDEXED BY facts_space"
                " WHERE scope = ? AND branch = ?", (scope, branch)).fetchone()
            return int(n)

        return self._space_counts.get(version, count)

    def _begun_first(self, scope: str, branch: str, ranked: Iterable[Sequence[Any]], k: int,
                     at: int) -> list[Hit]:
        """The first ``k`` of a ranked list (row, score) whose facts have begun at ``at``.
        The list is the pass's whole ranked set (within the postings budget, so at most
        about `POSTINGS_BUDGET` rows), checked at once (`_begun_mask`)."""
        rows = list(ranked)
        if not rows:
            return []
        nums = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
        keep = np.flatnonzero(self._begun_mask(scope, branch, nums, at))[:k]
        return [(int(rows[i][0]), max(float(rows[i][1]), 0.0)) for i in keep.tolist()]

    def _begun_mask(self, scope: str, branch: str, nums: np.ndarray, at: int) -> np.ndarray:
        """Whether each listed fact has begun at ``at`` (`memory.facts.begin_instant`):
        from the cached starts of their vectors, else from their rows (the same integers)."""
        cache = self._refresh("facts")
        with cache.lock:
            matrix = cache.by_key.get((scope, branch))
            if matrix is None:
                ok, held = np.zeros(len(nums), dtype=bool), np.zeros(len(nums), dtype=bool)
            else:
                ok, held = matrix.begun_mask(nums, at)
        missing = np.flatnonzero(~held)
        if len(missing):
            where = {int(n): i for i, n in zip(missing.tolist(), nums[missing].tolist(),
                                               strict=True)}
            for batch in _chunks(list(where)):
                marks = ",".join("?" * len(batch))
                for n, valid_from in self._conn().execute(
                        f"SELECT num, valid_from FROM facts WHERE num IN ({marks})", batch):
                    ok[where[int(n)]] = begin_instant(parse_time_text(valid_from)) <= at
        return ok

    def begun_facts(self, scope: str, branch: str, nums: Sequence[int], at: int) -> set[int]:
        """Of the listed facts, those begun at ``at`` (`_begun_mask`)."""
        listed = np.asarray(list(nums), dtype=np.int64)
        ok = self._begun_mask(scope, branch, listed, at)
        return {int(n) for n in listed[ok].tolist()}

    def keyword_facts(self, scope: str, branch: str, terms: Terms, k: int,
                      upto: int | None = None, seqs: SeqRange | None = None,
                      begun_at: datetime | None = None) -> list[Hit]:
        return self._keyword("facts", scope, branch, terms, k, fts5_weights(), upto, seqs,
                             None if begun_at is None else begin_instant(begun_at))

    def keyword_passages(
        self, scope: str, branch: str, terms: Terms, k: int, upto: int | None = None,
        seqs: SeqRange | None = None,
    ) -> list[Hit]:
        return self._keyword("passages", scope, branch, terms, k, (), upto, seqs)

    def fact_keyword(self, scope: str, branch: str, nums: Sequence[int],
                     terms: Terms, upto: int | None = None) -> dict[int, float]:
        found: dict[int, float] = {}
        words = words_of(terms)
        if not words or not nums:
            return found
        with self._keyword_space("facts", scope, branch) as space:
            if space is None:
                return found
            kconn, version, applied = space
            bound = self._counted("facts", scope, branch, terms, upto, applied)
            # The same kept terms as candidate selection, so every fact of one answer is
            # scored on one scale (and no common term's doclist is walked here either).
            kept, _, view = self._kept(kconn, "facts", version, branch, terms, bound)
            if not kept:
                return found
            if view is not None:
                scores = keywords.cut_scores(kconn, "facts", kept, _last(bound, applied),
                                             fts5_weights(), nums, stats=view)
                return {n: max(s, 0.0) for n, s in scores}
            if bound is not None:
                scores = keywords.cut_scores(kconn, "facts", kept, bound, fts5_weights(),
                                             nums)
                return {n: max(s, 0.0) for n, s in scores}
            fts = keywords.fts_table("facts")
            for batch in _chunks(nums):
                # "+rowid": one walk of the doclist, filtered here. A plain rowid IN goes
                # to FTS5 as one lookup per row, and bm25() then counts the term's rows
                # again for each (1.4 ms per matching row for a word in 30k facts).
                for n, s in kconn.execute(
                    f"SELECT rowid, -bm25({fts}, {_BM25}) FROM {fts} WHERE {fts}"
                    f" MATCH ? AND +rowid IN ({','.join('?' * len(batch))})",
                    (fts5_match(kept), *batch),
                ):
                    found[int(n)] = max(float(s), 0.0)
        return found

    def _refresh(self, table: str) -> VectorCache:
        cache = self._vectors[table]
        conn = self._conn()
        gen = int(self._meta("generation") or 0)
        model = self.model()
        with cache.lock:
            if cache.generation != gen:
                cache.reset(gen)
            if model is None:
                return cache
            t, seq = _TABLES[table], _SEQ[table]
            # Facts: where each one's validity begins, for candidates begun at an instant.
            start = ", valid_from" if table == "facts" else ""
            rows = conn.execute(
                f"SELECT num, scope, branch, vec, vec_seq, {seq}{start} FROM {t}"
                " WHERE vec_seq > ? ORDER BY vec_seq",
                (cache.high_water,),
            ).fetchall()
            starts: list[int] | None = None
            if start:
                instants: dict[str | None, int] = {}  # a time text parsed once
                starts = []
                for r in rows:
                    text = r[6]
                    if text not in instants:
                        instants[text] = begin_instant(parse_time_text(text))
                    starts.append(instants[text])
                rows = [r[:6] for r in rows]
            cache.apply(rows, model.dimensions, starts)
        return cache

    def _nearest(self, table: str, scope: str, branch: str, vector: Sequence[float],
                 k: int, seqs: SeqRange | None, begun_at: int | None = None) -> list[Hit]:
        cache = self._refresh(table)
        query = np.asarray(vector, dtype=np.float32)
        with cache.lock:
            return cache.top(scope, branch, query, k, seqs, begun_at)

    def nearest_facts(self, scope: str, branch: str, vector: Sequence[float], k: int,
                      seqs: SeqRange | None = None, begun_at: datetime | None = None
                      ) -> list[Hit]:
        return self._nearest("facts", scope, branch, vector, k, seqs,
                             None if begun_at is None else begin_instant(begun_at))

    def nearest_passages(
        self, scope: str, branch: str, vector: Sequence[float], k: int,
        seqs: SeqRange | None = None,
    ) -> list[Hit]:
        return self._nearest("passages", scope, branch, vector, k, seqs)

    def _cosines(self, table: str, nums: Sequence[int], vector: Sequence[float]
                 ) -> dict[int, float]:
        cache = self._refresh(table)
        with cache.lock:
            return cache.cosines(nums, np.asarray(vector, dtype=np.float32))

    def fact_cosines(self, nums: Sequence[int], vector: Sequence[float]) -> dict[int, float]:
        return self._cosines("facts", nums, vector)

    def passage_cosines(self, nums: Sequence[int], vector: Sequence[float]) -> dict[int, float]:
        return self._cosines("passages", nums, vector)

    # -- rows ------------------------------------------------------------------------------

    def facts(self, nums: Iterable[int]) -> list[FactRow]:
        found: list[FactRow] = []
        for batch in _chunks(dict.fromkeys(nums)):
            found += [_fact_row(r) for r in self._conn().execute(
                f"SELECT {_FACT_COLS} FROM facts WHERE num IN ({','.join('?' * len(batch))})",
                batch,
            )]
        return found

    def versions(
        self, scope: str, branch: str, keys: Iterable[tuple[str, str]],
        since: Mapping[tuple[str, str], tuple[datetime, int, int]] | None = None,
    ) -> list[FactRow]:
        found: list[FactRow] = []
        since = since or {}
        everything = ("", 0, 0)  # '' sorts before every time text: all versions
        for batch in _chunks(sorted(set(keys))):
            # The (entity, predicate) pairs go to SQL so only the wanted versions are
            # read and parsed (an entity can hold many other predicates), and with
            # ``since`` only those at or after its place in newest-wins' order (time
            # text sorts as time; no valid_from counts as the order's epoch).
            # A join, not a row-value IN, so SQLite probes facts_key per pair.
            rows = [(e, p, *_place(since.get((e, p)), everything)) for e, p in batch]
            values = ",".join("(?, ?, ?, ?, ?)" for _ in batch)
            found += [_fact_row(r) for r in self._conn().execute(
                f"SELECT {_FACT_COLS} FROM (VALUES {values}) AS k JOIN facts"
                " ON facts.scope = ? AND facts.branch = ? AND facts.entity = k.column1"
                " AND facts.predicate = k.column2 AND (coalesce(facts.valid_from, ?),"
                " facts.commit_seq, facts.ord) >= (k.column3, k.column4, k.column5)",
                (*(v for row in rows for v in row), scope, branch, time_text(EPOCH)),
            )]
        return found

    def facts_overlapping(
        self, scope: str, branch: str, start: datetime, end: datetime, limit: int
    ) -> list[int]:
        rows = self._conn().execute(
            "SELECT num FROM facts WHERE scope = ? AND branch = ? AND valid_from IS NOT NULL"
            " AND valid_from < ? AND (valid_to IS NULL OR valid_to > ?)"
            " ORDER BY valid_from DESC LIMIT ?",
            (scope, branch, time_text(end), time_text(start), limit),
        ).fetchall()
        return [int(r[0]) for r in rows]

    def passages(self, nums: Iterable[int]) -> list[PassageRow]:
        found: list[PassageRow] = []
        for batch in _chunks(dict.fromkeys(nums)):
            for r in self._conn().execute(
                "SELECT num, episode_num, scope, branch, first_unit, last_unit, units, seq"
                f" FROM passages WHERE num IN ({','.join('?' * len(batch))})",
                batch,
            ):
                found.append(PassageRow(
                    num=r[0], episode_num=r[1], scope=r[2], branch=r[3], first_unit=r[4],
                    last_unit=r[5],
                    units=tuple((int(n), str(k), str(t)) for n, k, t in json.loads(r[6])),
                    seq=int(r[7]),
                ))
        return found

    def episodes(self, nums: Iterable[int]) -> list[EpisodeRow]:
        found: list[EpisodeRow] = []
        for batch in _chunks(dict.fromkeys(nums)):
            for r in self._conn().execute(
                "SELECT num, id, scope, branch, commit_id, occurred_at, acl, source, unit_kinds"
                f" FROM episodes WHERE num IN ({','.join('?' * len(batch))})",
                batch,
            ):
                occurred = parse_time_text(r[5])
                assert occurred is not None
                found.append(EpisodeRow(
                    num=r[0], id=r[1], scope=r[2], branch=r[3], commit=r[4],
                    occurred_at=occurred, acl=tuple(json.loads(r[6])), source=r[7],
                    unit_kinds=tuple(json.loads(r[8])),
                ))
        return found

    def episode_refs(self, nums: Iterable[int]) -> dict[int, tuple[str, str]]:
        found: dict[int, tuple[str, str]] = {}
        for batch in _chunks(dict.fromkeys(nums)):
            found.update((int(n), (str(i), str(c))) for n, i, c in self._conn().execute(
                "SELECT num, id, commit_id FROM episodes"
                f" WHERE num IN ({','.join('?' * len(batch))})", batch))
        return found

    def missing_vectors(self, kind: str, limit: int) -> list[tuple[int, str]]:
        conn = self._conn()
        if kind == "passages":
            rows = conn.execute(
                "SELECT num, text FROM passages WHERE vec IS NULL ORDER BY num LIMIT ?",
                (limit,),
            ).fetchall()
            return [(int(n), str(t)) for n, t in rows]
        rows = conn.execute(
            "SELECT num, entity, predicate, value, quote FROM facts WHERE vec IS NULL"
            " ORDER BY num LIMIT ?",
            (limit,),
        ).fetchall()
        return [(int(r[0]), fact_text(r[1], r[2], r[3], r[4])) for r in rows]

    def set_vectors(self, kind: str, vectors: Sequence[tuple[int, list[float]]]) -> None:
        conn = self._tx()
        seq = self._vec_seq(conn)
        t = _TABLES[kind]
        conn.executemany(
            f"UPDATE {t} SET vec = ?, vec_seq = ? WHERE num = ?",
            [(vector_blob(v), seq, n) for n, v in vectors],
        )

    def counts(self, scope: str | None = None) -> dict[str, int]:
        conn = self._conn()
        where, params = ("WHERE scope = ?", (scope,)) if scope else ("", ())
        return {
            t: int(conn.execute(f"SELECT count(*) FROM {t} {where}", params).fetchone()[0])
            for t in ("episodes", "passages", "facts")
        }

    def graphs(self) -> dict[str, int]:
        """Counters of the HNSW graphs (`ann.py`): built from the rows, loaded from a
        saved file, saved files rejected (torn, corrupt or stale), saves, builds running."""
        return self.graph_stats.wire()

    def wait_graphs(self, timeout: float = 600.0) -> None:
        """Until no graph is being built, loaded or saved (tests, benchmarks)."""
        for cache in self._vectors.values():
            cache.wait(timeout)

    def close(self) -> None:
        for cache in self._vectors.values():
            cache.close()
        self._spaces.close()
        self._conns.close_all()
        self._local = threading.local()
