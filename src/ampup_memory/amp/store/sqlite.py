"""The embedded cell store: one SQLite file (WAL), FTS5 for keywords, vectors in memory.

Writes are serialised by one in-process lock plus ``BEGIN IMMEDIATE`` (so a second
process on the same file waits instead of failing). Commits use ``synchronous=FULL``:
a 201 means the cell survived a kill -9 or a power cut.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ampup_memory.amp.access import Guard
from ampup_memory.amp.lifecycle import DecayInputs, Standing
from ampup_memory.amp.model import Status, StoredCell
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
    cell_words,
    check_layout,
    columns,
    embedding_source,
    key_from_row,
    key_params,
    model_from_meta,
    parse_time,
    pass_from_row,
    pass_params,
    screened,
    stored_from_row,
    vector_bytes,
    vector_from_bytes,
    where_clause,
    with_status,
)
from ampup_memory.errors import ConfigurationError
from ampup_memory.search.budget import affordable_terms
from ampup_memory.search.embed import ModelInfo
from ampup_memory.search.index.ann import (
    ANN_MIN_VECTORS,
    DEFAULT_PARAMS,
    GraphFile,
    GraphParams,
    GraphStats,
)
from ampup_memory.search.index.common import VectorMatrix
from ampup_memory.search.tokenize import FTS5_TOKENIZER, fts5_match
from ampup_memory.sqlite_connections import (
    ThreadConnections,
    file_lock,
    open_note,
    roll_back,
    sqlite_path,
)
from ampup_memory.timefmt import format_time

if TYPE_CHECKING:
    import numpy as np

log = logging.getLogger("ampup_memory")

SCHEMA = """
CREATE TABLE IF NOT EXISTS cells (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    type TEXT NOT NULL,
    owner_id TEXT NOT NULL,
    created_by TEXT NOT NULL,
    status TEXT NOT NULL,
    public INTEGER NOT NULL,
    has_readers INTEGER NOT NULL,
    access_count INTEGER NOT NULL,
    last_accessed_at TEXT NOT NULL,
    text TEXT NOT NULL,
    doc TEXT NOT NULL,
    stale_since TEXT,
    deleted_at TEXT,
    vec BLOB,
    vec_seq INTEGER NOT NULL DEFAULT 0,
    guard TEXT NOT NULL DEFAULT '{}',
    importance REAL NOT NULL DEFAULT 0.5,
    confidence REAL NOT NULL DEFAULT 1.0,
    decay_rate REAL NOT NULL DEFAULT 0.01,
    last_updated_at TEXT NOT NULL DEFAULT '',
    expires_at TEXT
);
CREATE INDEX IF NOT EXISTS cells_status_id ON cells(status, id);
-- Every column the filters test (rows.where_clause), so an owner's cells are found and
-- checked in this index alone: a cell's row (document and vector) is ~3 KB to read.
CREATE INDEX IF NOT EXISTS cells_owner_filter
    ON cells(owner_id, status, id, type, public, has_readers, created_by);
DROP INDEX IF EXISTS cells_owner_status_id;
CREATE INDEX IF NOT EXISTS cells_vec_seq ON cells(vec_seq);
CREATE INDEX IF NOT EXISTS cells_deleted_at ON cells(deleted_at) WHERE deleted_at IS NOT NULL;
CREATE VIRTUAL TABLE IF NOT EXISTS cells_fts USING fts5(
    text, content='cells', content_rowid='seq', tokenize='porter unicode61'
);
CREATE TRIGGER IF NOT EXISTS cells_ai AFTER INSERT ON cells BEGIN
    INSERT INTO cells_fts(rowid, text) VALUES (new.seq, new.text);
END;
CREATE TRIGGER IF NOT EXISTS cells_ad AFTER DELETE ON cells BEGIN
    INSERT INTO cells_fts(cells_fts, rowid, text) VALUES ('delete', old.seq, old.text);
END;
CREATE TRIGGER IF NOT EXISTS cells_au AFTER UPDATE OF text ON cells BEGIN
    INSERT INTO cells_fts(cells_fts, rowid, text) VALUES ('delete', old.seq, old.text);
    INSERT INTO cells_fts(rowid, text) VALUES (new.seq, new.text);
END;
CREATE TABLE IF NOT EXISTS scoring_patches (
    cell_id TEXT NOT NULL,
    at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS scoring_patches_cell ON scoring_patches(cell_id, at);
CREATE TABLE IF NOT EXISTS api_keys (
    key_id TEXT PRIMARY KEY,
    agent_id TEXT NOT NULL,
    key_hash TEXT NOT NULL UNIQUE,
    admin INTEGER NOT NULL,
    created_at TEXT NOT NULL,
    expires_at TEXT,
    revoked_at TEXT,
    user_id TEXT
);
CREATE TABLE IF NOT EXISTS lifecycle_passes (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    started_at TEXT NOT NULL,
    finished_at TEXT NOT NULL,
    holder TEXT NOT NULL,
    evaluated INTEGER NOT NULL,
    transitions TEXT NOT NULL,
    purged INTEGER NOT NULL,
    dry_run INTEGER NOT NULL,
    states TEXT
);
CREATE INDEX IF NOT EXISTS lifecycle_passes_started ON lifecycle_passes(started_at);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""

# The keyword index of the one rule (`tokenize.keyword_text`, docs/search.md "Languages and
# scripts"; since session 33): `cells_words` holds each cell's ``words`` (`rows.cell_words`:
# its keyword text, NULL for plain ASCII text, which is its own) or else its ``text``, read
# through the view `cells_keyword` when rebuilt, kept by triggers as `cells_fts` is. It is
# added beside `cells_fts`, which stays as it was with its triggers: a store this version
# opened still serves an older version, which searches `cells_fts` and never writes
# ``words``. What such a version writes is caught by the triggers alone (SQL, no function
# of ours): a text not plain ASCII written without its words, or a text changed under
# words made for the one before, is put in `cell_words_owed`, and this version makes
# those words (`_settle_words`) when it opens the store and before a search. A deletion
# marks `WORDS_ERASE_KEY` for `erase_purged`, whichever version purged.
WORDS_ERASE_KEY = "purge_erase_pending_words"
_NOT_PLAIN = "length(CAST({0}.text AS BLOB)) <> length({0}.text)"  # `rows.cell_words`
_WORDS_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS cell_words_owed (seq INTEGER PRIMARY KEY)",
    "CREATE VIEW IF NOT EXISTS cells_keyword AS"
    " SELECT seq, coalesce(words, text) AS words FROM cells",
    "CREATE VIRTUAL TABLE IF NOT EXISTS cells_words USING fts5(words,"
    f" content='cells_keyword', content_rowid='seq', tokenize=\"{FTS5_TOKENIZER}\")",
    f"""CREATE TRIGGER IF NOT EXISTS cells_words_ai AFTER INSERT ON cells BEGIN
    INSERT INTO cells_words(rowid, words) VALUES (new.seq, coalesce(new.words, new.text));
    INSERT OR IGNORE INTO cell_words_owed(seq) SELECT new.seq
        WHERE new.words IS NULL AND {_NOT_PLAIN.format("new")};
END""",
    f"""CREATE TRIGGER IF NOT EXISTS cells_words_ad AFTER DELETE ON cells BEGIN
    INSERT INTO cells_words(cells_words, rowid, words)
        VALUES ('delete', old.seq, coalesce(old.words, old.text));
    DELETE FROM cell_words_owed WHERE seq = old.seq;
    INSERT OR IGNORE INTO meta (key, value) VALUES ('{WORDS_ERASE_KEY}', '1');
END""",
    f"""CREATE TRIGGER IF NOT EXISTS cells_words_au AFTER UPDATE OF text, words ON cells
WHEN new.text IS NOT old.text OR new.words IS NOT old.words BEGIN
    INSERT INTO cells_words(cells_words, rowid, words)
        VALUES ('delete', old.seq, coalesce(old.words, old.text));
    INSERT INTO cells_words(rowid, words) VALUES (new.seq, coalesce(new.words, new.text));
    INSERT OR IGNORE INTO cell_words_owed(seq) SELECT new.seq
        WHERE new.text IS NOT old.text AND new.words IS old.words
        AND (new.words IS NOT NULL OR {_NOT_PLAIN.format("new")});
END""",
)
# How many owed words `_settle_words` makes in one transaction.
_SETTLE_BATCH = 500


def _add_words(conn: sqlite3.Connection, where: str) -> None:
    """A store made before `cells_words` gets it, in the open's transaction: the
    ``words`` column, filled for the cells whose text is not plain ASCII (before the
    triggers exist, so no index is written twice), then the triggers and the index built
    from `cells_keyword` in one pass. Nothing else of a cell is touched (no vector)."""
    if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'cells_words'"
                    ).fetchone() is not None:
        return
    started = time.perf_counter()
    if "words" not in {row[1] for row in conn.execute("PRAGMA table_info(cells)")}:
        conn.execute("ALTER TABLE cells ADD COLUMN words TEXT")
    rows = conn.execute(f"SELECT seq, text FROM cells WHERE {_NOT_PLAIN.format('cells')}"
                        ).fetchall()
    conn.executemany("UPDATE cells SET words = ? WHERE seq = ?",
                     [(cell_words(text), seq) for seq, text in rows])
    for statement in _WORDS_SCHEMA:
        conn.execute(statement)
    conn.execute("INSERT INTO cells_words(cells_words) VALUES ('rebuild')")
    cells = conn.execute("SELECT count(*) FROM cells").fetchone()[0]
    if cells:
        log.warning("the AMP cell store %s was made by an older version: its keyword index"
                    " by the keyword-text rule made (%d cells, %d of them not plain ASCII,"
                    " %.1f s; once)", where, cells, len(rows), time.perf_counter() - started)


_COLS = CELL_COLS
# `SQLiteStore.purge` marks the keyword index as holding purged words; `erase_purged`
# merges it and takes the mark away.
ERASE_PENDING_KEY = "purge_erase_pending"
# An FTS5 'optimize' puts every segment on a new level and merges it into another, and
# SQLite 3.40.1 (Debian 12's; SQLite's current source caps this) never takes a level
# away: each erasure adds two, and past 2,000 FTS5 reads its index as corrupt ("database
# disk image is malformed": every search and write of a cell fails), after about a
# thousand of them. From this many levels on, the erasure rebuilds the index instead (one
# level again; 4-13 s at 1M cells against 0.8-1.6 s, docs/performance.md, session 31).
FTS_REBUILD_LEVELS = 1000


def fts5_levels(conn: sqlite3.Connection, table: str) -> int | None:
    """How many levels the FTS5 index ``table`` has: the varint after the 4-byte cookie
    (and the 4-byte mark of the second format) of its structure record, row 10 of
    ``<table>_data``. None when it is not there or not in that shape (then the erasure
    optimizes: a later format comes from a later SQLite, which caps the levels)."""
    row = conn.execute(f"SELECT block FROM {table}_data WHERE id = 10").fetchone()
    blob = bytes(row[0]) if row and row[0] is not None else b""
    i = 8 if blob[4:8] == b"\xff\x00\x00\x01" else 4
    value = 0
    for byte in blob[i:i + 9]:  # SQLite's varint: 7 bits a byte, high bit = more
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            return value
    return None

# What a search reads of its hits (`SQLiteStore._hit_rows`: the filters' columns, id, guard,
# decay inputs), by row number: about 270 bytes a cell instead of a 1.8 KB row, so the
# pages searches touch (one per hit) stay in the page cache: at 1M cells 270 MB of them,
# not 4.3 GB. Made after `_add_search_columns` (older files lack some of the columns).
_HITS_INDEX = """
CREATE INDEX IF NOT EXISTS cells_hits ON cells(seq, status, public, created_by, owner_id,
    has_readers, type, id, guard, importance, confidence, decay_rate, last_accessed_at,
    last_updated_at, expires_at)
"""
# `SQLiteStore._hit_rows`: the hits' rows (200 for a 10-result search) are read by
# HIT_READERS threads at once, from HIT_SPLIT rows on, when the first HIT_PROBE of them
# took more than HIT_SLOW_US of wall time a row (their pages came from disk). At 1M cells,
# every page from disk: 24 to 29 ms p50 read one after another, 10 to 11 by 4 threads, 5
# to 6 by 8; with the file's pages cached a row takes about 6 us, and the threads would
# only add their cost (1 to 2 ms of CPU per search) (docs/performance.md, "AMP cell
# search at 1M: an owner's block, hits read at once").
HIT_READERS = 8
HIT_SPLIT = 64
HIT_PROBE = 8
HIT_SLOW_US = 25.0



_SEARCH_COLUMNS = {
    "guard": "TEXT NOT NULL DEFAULT '{}'",
    "importance": "REAL NOT NULL DEFAULT 0.5",
    "confidence": "REAL NOT NULL DEFAULT 1.0",
    "decay_rate": "REAL NOT NULL DEFAULT 0.01",
    "last_updated_at": "TEXT NOT NULL DEFAULT ''",
    "expires_at": "TEXT",
}


def _add_search_columns(conn: sqlite3.Connection) -> None:
    """Files made before search kept its inputs in columns get them, filled from the doc."""
    have = {row[1] for row in conn.execute("PRAGMA table_info(cells)")}
    missing = [name for name in _SEARCH_COLUMNS if name not in have]
    if not missing:
        return
    for name in missing:
        conn.execute(f"ALTER TABLE cells ADD COLUMN {name} {_SEARCH_COLUMNS[name]}")
    conn.execute(
        "UPDATE cells SET"
        " guard = json_object('created_by', created_by, 'owner_id', owner_id,"
        "   'public', json(CASE WHEN public THEN 'true' ELSE 'false' END),"
        "   'readable_by', json_extract(doc, '$.access_policy.readable_by')),"
        " importance = json_extract(doc, '$.scoring.importance'),"
        " confidence = json_extract(doc, '$.scoring.confidence'),"
        " decay_rate = json_extract(doc, '$.scoring.decay_rate'),"
        " last_updated_at = json_extract(doc, '$.lifecycle.last_updated_at'),"
        " expires_at = json_extract(doc, '$.lifecycle.expires_at')"
    )


def store_exists(uri: str) -> bool:
    """Whether the store's file was made (a read-only command opens no new one)."""
    return sqlite_path(uri).exists()


def _recorded_layout(conn: sqlite3.Connection) -> str | None:
    """The layout version the file records, read before any table is made (None for a
    new file, or one made before stores recorded it)."""
    if conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'"
                    ).fetchone() is None:
        return None
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (SCHEMA_VERSION_KEY,)
                       ).fetchone()
    return None if row is None else str(row[0])


# The decay score's inputs (`_decay` reads them). The clock leaves out created_at, which
# this table does not keep: no cell is read or updated before it was made.
_DECAY_COLS = ("c.importance, c.confidence, c.decay_rate,"
               " max(c.last_accessed_at, c.last_updated_at), c.expires_at")


def _decay(r: Sequence[Any]) -> DecayInputs:
    """The decay inputs from the five `_DECAY_COLS`."""
    return DecayInputs(importance=r[0], confidence=r[1], decay_rate=r[2], since=_time(r[3]),
                       expires_at=parse_time(r[4]))


def _time(value: str) -> datetime:
    # Every stored timestamp has the one spelling of timefmt.format_time, so strings sort
    # like instants (the max() above relies on it).
    parsed = parse_time(value)
    assert parsed is not None
    return parsed


def _stored(row: sqlite3.Row | tuple[Any, ...]) -> StoredCell:
    return stored_from_row(row[0], row[1], row[2], row[3], row[4])


class _VectorCache:
    """Embeddings of every cell, in memory, refreshed by ``vec_seq`` on each search: one
    `VectorMatrix` (the search index's: from ``ann_min`` vectors on, an HNSW graph saved
    in ``graph`` proposes candidates and the matrix re-scores them exactly), keyed by the
    cell's ``seq``, grouped by owner (an owner never changes) for owner-filtered search."""

    def __init__(self, dimensions: int, ann_min: int, graph: Path,
                 params: GraphParams) -> None:
        self.lock = threading.RLock()
        self.stats = GraphStats()
        self.matrix = VectorMatrix(dimensions, ann_min, self.lock,
                                   GraphFile(graph, self.stats, params), self.stats, params)
        self.high_water = 0
        self.owners: dict[str, int] = {}

    def refresh(self, conn: sqlite3.Connection) -> None:
        import numpy as np

        with self.lock:
            rows = conn.execute(
                "SELECT seq, owner_id, vec, vec_seq FROM cells WHERE vec_seq > ?"
                " ORDER BY vec_seq",
                (self.high_water,),
            ).fetchall()
            for seq, owner, blob, vec_seq in rows:
                self.high_water = max(self.high_water, vec_seq)
                if blob is None:
                    self.matrix.remove(seq)
                    continue
                vec = np.frombuffer(blob, dtype=np.float32)
                if vec.shape[0] != self.matrix.dimensions:
                    continue  # written under another model: re-embedding replaces it
                group = self.owners.setdefault(owner, len(self.owners) + 1)
                self.matrix.put(seq, vec, group=group)

    def top(self, query: np.ndarray, k: int, owner: str | None = None) -> dict[int, float]:
        with self.lock:
            if owner is None:
                return dict(self.matrix.top(query, k))
            group = self.owners.get(owner)
            return {} if group is None else dict(self.matrix.top(query, k, group=group))

    def cosine(self, query: np.ndarray, seqs: Sequence[int]) -> dict[int, float]:
        with self.lock:
            return self.matrix.cosines(query, seqs)


class SQLiteStore:
    def __init__(self, uri: str, dimensions: int | None,
                 ann_min_vectors: int = ANN_MIN_VECTORS,
                 ann_params: GraphParams = DEFAULT_PARAMS) -> None:
        self.path = sqlite_path(uri)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.info = StoreInfo(name="sqlite", details={"path": str(self.path)})
        # FULL: a 201 must survive a power cut, not only a crashed process.
        self._conns = ThreadConnections(self.path, synchronous="FULL", timeout=30.0)
        self._write_lock = threading.Lock()
        self._readers: ThreadPoolExecutor | None = None  # `_hit_rows`, made when needed
        self._readers_lock = threading.Lock()
        # From ann_min_vectors cells on, an HNSW graph (search/index/ann.py) proposes
        # vector candidates; it is saved beside the file and loaded on the next start.
        graph = self.path.with_name(self.path.name + ".graphs") / "cells.ann"
        self._vectors = (_VectorCache(dimensions, ann_min_vectors, graph, ann_params)
                         if dimensions else None)
        try:
            conn = self._conn()
            with self._write_lock:
                check_layout(_recorded_layout(conn), str(self.path))
                conn.executescript(SCHEMA)
                _add_search_columns(conn)
                conn.execute(_HITS_INDEX)
                conn.execute("BEGIN IMMEDIATE")
                try:
                    _add_words(conn, str(self.path))
                except BaseException:
                    roll_back(conn)
                    raise
                conn.execute("COMMIT")
                if "states" not in {r[1] for r in conn.execute(
                        "PRAGMA table_info(lifecycle_passes)")}:  # made before it kept states
                    conn.execute("ALTER TABLE lifecycle_passes ADD COLUMN states TEXT")
                conn.execute(
                    "INSERT INTO meta (key, value) VALUES (?, ?)"
                    " ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                    (SCHEMA_VERSION_KEY, str(SCHEMA_VERSION)))
        except ConfigurationError:
            self._conns.close_all()
            raise
        except sqlite3.DatabaseError as exc:  # not a file, not writable, not a database
            self._conns.close_all()
            raise ConfigurationError(f"cannot open the AMP store {self.path}: {exc}"
                                     f"{open_note(self.path)}") from exc
        self._settle_words()

    # -- connections ----------------------------------------------------------------------

    def _conn(self) -> sqlite3.Connection:
        return self._conns.get()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        conn = self._conn()
        with self._write_lock:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                roll_back(conn)
                raise
            else:
                conn.execute("COMMIT")

    def _next_vec_seq(self, conn: sqlite3.Connection) -> int:
        row = conn.execute("SELECT coalesce(max(vec_seq), 0) + 1 FROM cells").fetchone()
        return int(row[0])

    # -- cells ----------------------------------------------------------------------------

    def create(self, stored: StoredCell, vector: list[float] | None) -> None:
        with self._write() as conn:
            self._insert(conn, stored, vector)

    def _insert(self, conn: sqlite3.Connection, stored: StoredCell,
                vector: list[float] | None, *, unless_there: bool = False) -> bool:
        """Insert one cell's row (the triggers index its words); whether it was written
        (``unless_there``: a row with its id is left alone)."""
        c = columns(stored)
        cur = conn.execute(
            "INSERT INTO cells (id, type, owner_id, created_by, status, public, has_readers,"
            " access_count, last_accessed_at, text, doc, stale_since, deleted_at, vec,"
            " vec_seq, guard, importance, confidence, decay_rate, last_updated_at,"
            " expires_at, words) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"
            + (" ON CONFLICT(id) DO NOTHING" if unless_there else ""),
            (
                c.id, c.type, c.owner_id, c.created_by, c.status, c.public,
                c.has_readers, c.access_count, c.last_accessed_at, c.text, c.doc,
                c.stale_since, c.deleted_at, vector_bytes(vector),
                self._next_vec_seq(conn), c.guard, c.importance, c.confidence,
                c.decay_rate, c.last_updated_at, c.expires_at, cell_words(c.text),
            ),
        )
        return cur.rowcount == 1

    def get(self, cell_id: str, screen: Screen | None = None) -> StoredCell | None:
        conn = self._conn()
        if screen is not None:
            # The guard first: a screened-out cell's document is not even fetched.
            head = conn.execute("SELECT status, guard FROM cells WHERE id = ?",
                                (cell_id,)).fetchone()
            if head is None or screened(head[0], head[1], screen):
                return None
        row = conn.execute(f"SELECT {_COLS} FROM cells WHERE id = ?", (cell_id,)).fetchone()
        return _stored(row) if row else None

    def get_many(self, cell_ids: Sequence[str]) -> list[StoredCell]:
        if not cell_ids:
            return []
        marks = ",".join("?" * len(cell_ids))
        rows = self._conn().execute(
            f"SELECT {_COLS} FROM cells WHERE id IN ({marks})", tuple(cell_ids)
        ).fetchall()
        return [_stored(r) for r in rows]

    def touch(self, cell_id: str, now: datetime) -> StoredCell | None:
        with self._write() as conn:
            row = conn.execute(
                "UPDATE cells SET access_count = access_count + 1, last_accessed_at = ?"
                f" WHERE id = ? AND status != 'deleted' RETURNING {_COLS}",
                (format_time(now), cell_id),
            ).fetchone()
        return _stored(row) if row else None

    def update(self, cell_id: str, change: Change) -> StoredCell | None:
        with self._write() as conn:
            row = conn.execute(f"SELECT {_COLS} FROM cells WHERE id = ?", (cell_id,)).fetchone()
            if row is None:
                return None
            tx = _Tx(conn, cell_id)
            outcome = change(_stored(row), tx)
            c = columns(outcome.stored)
            params: list[Any] = [
                c.type, c.owner_id, c.created_by, c.status, c.public, c.has_readers,
                c.text, c.doc, c.stale_since, c.deleted_at, c.guard, c.importance,
                c.confidence, c.decay_rate, c.last_updated_at, c.expires_at,
                cell_words(c.text),
            ]
            vec_sql = ""
            if outcome.vector is not None:
                vec_sql = ", vec = ?, vec_seq = ?"
                params += [vector_bytes(outcome.vector), self._next_vec_seq(conn)]
            conn.execute(
                "UPDATE cells SET type=?, owner_id=?, created_by=?, status=?, public=?,"
                " has_readers=?, text=?, doc=?, stale_since=?, deleted_at=?, guard=?,"
                " importance=?, confidence=?, decay_rate=?, last_updated_at=?,"
                f" expires_at=?, words=?{vec_sql}"
                " WHERE id = ?",
                (*params, cell_id),
            )
            if outcome.count_scoring_patch:
                conn.execute(
                    "INSERT INTO scoring_patches (cell_id, at) VALUES (?, ?)",
                    (cell_id, format_time(outcome.stored.cell.lifecycle.last_updated_at)),
                )
        return outcome.stored

    # -- listing and search ---------------------------------------------------------------

    def list_candidates(
        self, filters: CellFilter, before_id: str | None, batch: int
    ) -> list[StoredCell]:
        if filters.matches_nothing:
            return []
        where, params = where_clause(filters, "?")
        if before_id is not None:
            where += " AND id < ?"
            params.append(before_id)
        rows = self._conn().execute(
            f"SELECT {_COLS} FROM cells WHERE {where} ORDER BY id DESC LIMIT ?",
            (*params, batch),
        ).fetchall()
        return [_stored(r) for r in rows]

    def search_candidates(
        self, filters: CellFilter, terms: Sequence[str], vector: list[float] | None, k: int
    ) -> list[Hit]:
        import numpy as np

        if filters.matches_nothing:
            return []
        conn = self._conn()
        where, params = where_clause(filters, "?", "c.")
        keyword: dict[int, float] = {}
        if terms:
            self._settle_words(conn)
        kept = self._affordable_terms(conn, terms)
        if kept and filters.owner_id is None:
            # Broad filters: rank in FTS5 alone (a join costs a row lookup per match) and
            # let the hits query below drop the few rows the filters exclude.
            for seq, score in conn.execute(
                "SELECT rowid, -bm25(cells_words) FROM cells_words WHERE cells_words MATCH ?"
                " ORDER BY bm25(cells_words) LIMIT ?",
                (fts5_match(kept), k * 2),
            ):
                keyword[seq] = max(float(score), 0.0)
        elif kept:
            # One owner: rank only the matches among the owner's cells, taken from the
            # covering index once (a join would read each match's wide row). The `+` keeps
            # the rowid test out of FTS5, which would run one MATCH per owned cell.
            for seq, score in conn.execute(
                "SELECT rowid, -bm25(cells_words) FROM cells_words WHERE cells_words MATCH ?"
                f" AND +rowid IN (SELECT c.seq FROM cells c WHERE {where})"
                " ORDER BY bm25(cells_words) LIMIT ?",
                (fts5_match(kept), *params, k),
            ):
                keyword[seq] = max(float(score), 0.0)
        cosine: dict[int, float] = {}
        query = None
        if vector is not None and self._vectors is not None:
            query = np.asarray(vector, dtype=np.float32)
            self._vectors.refresh(conn)
            small = None
            if filters.owner_id is not None:  # selective: rank the owner's cells exactly
                # (cells_owner_filter answers this without reading a row)
                small = conn.execute(
                    f"SELECT c.seq FROM cells c WHERE {where} LIMIT ?",
                    (*params, EXACT_LIMIT + 1),
                ).fetchall()
            if small is not None and len(small) <= EXACT_LIMIT:
                cosine = self._vectors.cosine(query, [r[0] for r in small])
                cosine = dict(sorted(cosine.items(), key=lambda kv: -kv[1])[: max(k, 1)])
            else:
                # An owner with more cells: the owner's nearest cells (the filters below
                # drop those another rule excludes), never the nearest of all cells.
                cosine = self._vectors.top(query, max(k * 2, 200), filters.owner_id)
        seqs = set(keyword) | set(cosine)
        if not seqs:
            return []
        rows = self._hit_rows(conn, sorted(seqs), where, params)
        if query is not None and self._vectors is not None:
            missing = [r[0] for r in rows if r[0] not in cosine]
            cosine.update(self._vectors.cosine(query, missing))
        hits = []
        for r in rows:
            g = json.loads(r[2])
            hits.append(Hit(
                cell_id=r[1],
                keyword=keyword.get(r[0], 0.0),
                cosine=cosine.get(r[0]),
                guard=Guard(created_by=g["created_by"], owner_id=g["owner_id"],
                            public=bool(g["public"]), readable_by=tuple(g["readable_by"])),
                decay=_decay(r[3:8]),
            ))
        return hits

    def _hit_rows(self, conn: sqlite3.Connection, seqs: list[int], where: str,
                  params: list[Any]) -> list[Any]:
        """The search inputs of the rows ``seqs`` that pass the filters (neighbours and
        keyword hits were found without them). Each row is a random page of the file;
        where the first rows' pages came from disk (`HIT_SLOW_US`), `HIT_READERS` threads
        read a share each of the others, at once instead of one after another. Each share
        is read in its own snapshot: a row is as if read a moment earlier or later (the
        rows were picked from an earlier snapshot anyway). The rows come in row order
        either way."""

        def read(conn: sqlite3.Connection, part: list[int]) -> list[Any]:
            return conn.execute(
                f"SELECT c.seq, c.id, c.guard, {_DECAY_COLS}"
                # INDEXED BY: look the hits up by row number in the narrow index that
                # holds every column read here. Left alone, the planner walks the status
                # index over every active cell (16 ms instead of 1 ms at 100k).
                f" FROM cells c INDEXED BY cells_hits"
                f" WHERE c.seq IN ({','.join('?' * len(part))})"
                f" AND {where}",
                (*part, *params),
            ).fetchall()

        if len(seqs) < HIT_SPLIT + HIT_PROBE:
            return read(conn, seqs)
        # A few rows first, one after another, tell whether this search's pages come from
        # disk; measured before the threads start, so none of them slows it.
        started = time.perf_counter()
        rows = read(conn, seqs[:HIT_PROBE])
        per_row = (time.perf_counter() - started) * 1e6 / HIT_PROBE
        rest = seqs[HIT_PROBE:]
        if per_row <= HIT_SLOW_US:
            return rows + read(conn, rest)
        with self._readers_lock:
            if self._readers is None:
                self._readers = ThreadPoolExecutor(HIT_READERS - 1,
                                                   thread_name_prefix="ampup-amp-hits")
            pool = self._readers
        parts = [rest[i::HIT_READERS] for i in range(HIT_READERS)]
        others = [pool.submit(lambda part: read(self._conn(), part), part)
                  for part in parts[1:]]
        rows += read(conn, parts[0])
        for job in others:
            rows += job.result()
        rows.sort(key=lambda r: r[0])  # the order one query gives
        return rows

    @staticmethod
    def _affordable_terms(conn: sqlite3.Connection, terms: Sequence[str]) -> list[str]:
        def postings(term: str) -> int:
            # fts5vocab holds stemmed terms; count each query word by a cheap MATCH instead.
            row = conn.execute(
                "SELECT count(*) FROM cells_words WHERE cells_words MATCH ?",
                (fts5_match([term]),),
            ).fetchone()
            return int(row[0])

        return affordable_terms(terms, postings)

    # -- lifecycle ------------------------------------------------------------------------

    def lifecycle_batch(self, after_id: str | None, batch: int) -> list[Standing]:
        rows = self._conn().execute(
            f"SELECT c.id, c.status, c.stale_since, {_DECAY_COLS} FROM cells c"
            " WHERE c.status IN ('active', 'stale') AND c.id > ? ORDER BY c.id LIMIT ?",
            (after_id or "", batch),
        ).fetchall()
        return [Standing(r[0], Status(r[1]), _decay(r[3:8]), parse_time(r[2])) for r in rows]

    def set_statuses(self, moves: Sequence[StatusMove]) -> set[str]:
        moved: set[str] = set()
        if not moves:
            return moved
        # Each move its own transaction, so readers and writers wait for one row's write,
        # not a batch's, and none syncs the disk (synchronous=FULL took 1.4 ms a move): a
        # move lost in a crash was acknowledged to no one, and the next pass makes it again
        # from the same columns. WAL keeps the file whole either way.
        conn = self._conn()
        was = conn.execute("PRAGMA synchronous").fetchone()[0]
        conn.execute("PRAGMA synchronous=NORMAL")
        try:
            for move in moves:
                cell = move.expected.cell
                c = columns(with_status(move.expected, move.status, move.stale_since))
                with self._write() as tx:
                    cur = tx.execute(
                        "UPDATE cells SET status = ?, doc = ?, stale_since = ? WHERE id = ?"
                        " AND status = ? AND last_accessed_at = ?"
                        " AND json_extract(doc, '$.lifecycle.last_updated_at') = ?",
                        (
                            c.status, c.doc, c.stale_since, cell.id,
                            cell.lifecycle.status.value,
                            format_time(cell.lifecycle.last_accessed_at),
                            format_time(cell.lifecycle.last_updated_at),
                        ),
                    )
                if cur.rowcount == 1:
                    moved.add(cell.id)
        finally:
            conn.execute(f"PRAGMA synchronous={int(was)}")
        return moved

    def deleted_before(self, cutoff: datetime, batch: int, after: str = "") -> list[str]:
        rows = self._conn().execute(
            "SELECT id FROM cells WHERE status = 'deleted' AND deleted_at <= ? AND id > ?"
            " ORDER BY id LIMIT ?",
            (format_time(cutoff), after, batch),
        ).fetchall()
        return [r[0] for r in rows]

    def purge(self, cell_ids: Sequence[str]) -> int:
        gone = 0
        if not cell_ids:
            return gone
        with self._write() as conn:
            # A purge is an erasure: pages freed by it are overwritten with zeros, whatever
            # the SQLite build's default (many compile it on, not all).
            conn.execute("PRAGMA secure_delete=ON")
            for cell_id in cell_ids:
                gone += conn.execute("DELETE FROM cells WHERE id = ?", (cell_id,)).rowcount
                conn.execute("DELETE FROM scoring_patches WHERE cell_id = ?", (cell_id,))
            if gone:
                # The words stay in the keyword index until `erase_purged` (a mark, so a
                # crash before it leaves the work to the next call, not undone).
                conn.execute("INSERT INTO meta (key, value) VALUES (?, '1')"
                             " ON CONFLICT(key) DO NOTHING", (ERASE_PENDING_KEY,))
        return gone

    def erase_purged(self) -> None:
        owed = "SELECT key FROM meta WHERE key IN (?, ?)"
        keys = (ERASE_PENDING_KEY, WORDS_ERASE_KEY)
        if self._conn().execute(owed, keys).fetchone() is None:
            return
        with self._write() as conn:
            marked = {r[0] for r in conn.execute(owed, keys).fetchall()}
            if not marked:
                return  # another process merged it meanwhile
            conn.execute("PRAGMA secure_delete=ON")
            # FTS5 keeps a deleted row's words (and its delete marker's) in its index
            # segments until they merge, so the words of a purged cell stayed in the file.
            # Merging every segment drops both; no partial merge is sure to (the marker
            # stays until it reaches the oldest segment), and FTS5's own 'secure-delete'
            # (SQLite 3.42) made each delete 14 times as slow and the file unreadable to
            # an older SQLite (docs/performance.md, session 31). Each keyword index is
            # merged when its own mark says so: an older version's erasure merges
            # `cells_fts` alone and leaves the mark its deletions put for `cells_words`.
            for table, key in (("cells_fts", ERASE_PENDING_KEY),
                               ("cells_words", WORDS_ERASE_KEY)):
                if key not in marked:
                    continue
                levels = fts5_levels(conn, table)
                command = "rebuild" if levels is not None and levels >= FTS_REBUILD_LEVELS \
                    else "optimize"
                conn.execute(f"INSERT INTO {table}({table}) VALUES ('{command}')")
                conn.execute("DELETE FROM meta WHERE key = ?", (key,))

    def _settle_words(self, conn: sqlite3.Connection | None = None) -> None:
        """The words of the cells `cell_words_owed` names (written by an older version:
        see `_WORDS_SCHEMA`) made, so the keyword index holds them by the rule. A read of
        an empty table when there are none (every search asks)."""
        read = conn or self._conn()
        if read.execute("SELECT 1 FROM cell_words_owed LIMIT 1").fetchone() is None:
            return
        while True:
            with self._write() as tx:
                rows = tx.execute(
                    "SELECT o.seq, c.text FROM cell_words_owed o"
                    " LEFT JOIN cells c ON c.seq = o.seq LIMIT ?", (_SETTLE_BATCH,)
                ).fetchall()
                # Each cell's words and text in one statement, in the write's
                # transaction: no text can change between them.
                tx.executemany("UPDATE cells SET words = ? WHERE seq = ?",
                               [(cell_words(text) or text, seq) for seq, text in rows
                                if text is not None])
                tx.executemany("DELETE FROM cell_words_owed WHERE seq = ?",
                               [(seq,) for seq, _ in rows])
            if len(rows) < _SETTLE_BATCH:
                return

    @contextmanager
    def lease(self, name: str, ttl_seconds: float) -> Iterator[bool]:
        """A lock on a file beside the database (``<db>.lease-<name>``), held for the block:
        as PostgreSQL's session advisory lock, it ends with its process, so no TTL is
        needed. A lease row with an expiry outlived a holder killed mid-pass (kill -9):
        the lifecycle's 600 s, every manual run 503 and every timer pass skipped until
        then, also after the server came back."""
        del ttl_seconds
        with file_lock(f"{self.path}.lease-{name}") as held:
            yield held

    # -- keys -----------------------------------------------------------------------------

    def put_key(self, record: KeyRecord) -> None:
        with self._write() as conn:
            conn.execute(
                f"INSERT INTO api_keys ({KEY_COLS}) VALUES (?,?,?,?,?,?,?,?)", key_params(record)
            )

    def key_by_hash(self, key_hash: str) -> KeyRecord | None:
        row = self._conn().execute(
            f"SELECT {KEY_COLS} FROM api_keys WHERE key_hash = ?", (key_hash,)
        ).fetchone()
        return key_from_row(row) if row else None

    def list_keys(self) -> list[KeyRecord]:
        rows = self._conn().execute(
            f"SELECT {KEY_COLS} FROM api_keys ORDER BY created_at"
        ).fetchall()
        return [key_from_row(r) for r in rows]

    def revoke_key(self, key_id: str, now: datetime) -> bool:
        with self._write() as conn:
            cur = conn.execute(
                "UPDATE api_keys SET revoked_at = ? WHERE key_id = ? AND revoked_at IS NULL",
                (format_time(now), key_id),
            )
            return cur.rowcount == 1

    # -- lifecycle history ----------------------------------------------------------------

    def record_pass(self, record: PassRecord, keep: int = PASS_HISTORY) -> None:
        with self._write() as conn:
            conn.execute(
                f"INSERT INTO lifecycle_passes ({PASS_COLS}) VALUES (?,?,?,?,?,?,?,?)",
                pass_params(record),
            )
            conn.execute(
                "DELETE FROM lifecycle_passes WHERE seq NOT IN (SELECT seq FROM"
                " lifecycle_passes ORDER BY started_at DESC, seq DESC LIMIT ?)", (keep,))

    def recent_passes(self, limit: int) -> list[PassRecord]:
        rows = self._conn().execute(
            f"SELECT {PASS_COLS} FROM lifecycle_passes ORDER BY started_at DESC, seq DESC"
            " LIMIT ?",
            (limit,),
        ).fetchall()
        return [pass_from_row(r) for r in rows]

    def count(self) -> int:
        return int(self._conn().execute("SELECT count(*) FROM cells").fetchone()[0])

    def status_counts(self) -> dict[str, int]:
        rows = self._conn().execute("SELECT status, count(*) FROM cells GROUP BY status")
        return {str(s): int(n) for s, n in rows.fetchall()}

    # -- embedding model ------------------------------------------------------------------

    def embedding_model(self) -> ModelInfo | None:
        rows = dict(self._conn().execute(
            "SELECT key, value FROM meta WHERE key IN (?, ?)",
            (MODEL_NAME_KEY, MODEL_DIMENSIONS_KEY),
        ).fetchall())
        return model_from_meta(rows.get(MODEL_NAME_KEY), rows.get(MODEL_DIMENSIONS_KEY))

    def set_embedding_model(self, model: ModelInfo) -> None:
        with self._write() as conn:
            conn.executemany(
                "INSERT INTO meta (key, value) VALUES (?, ?)"
                " ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                [(MODEL_NAME_KEY, model.name), (MODEL_DIMENSIONS_KEY, str(model.dimensions))],
            )

    def embedding_sources(self, after_id: str | None, batch: int) -> list[EmbeddingSource]:
        rows = self._conn().execute(
            "SELECT id, doc FROM cells WHERE id > ? ORDER BY id LIMIT ?", (after_id or "", batch)
        ).fetchall()
        return [embedding_source(r[0], r[1]) for r in rows]

    def replace_vectors(self, vectors: Sequence[tuple[EmbeddingSource, list[float]]]) -> int:
        written = 0
        with self._write() as conn:
            seq = self._next_vec_seq(conn)
            for source, vector in vectors:
                # A fresh vec_seq per row: every process's vector cache picks the row up.
                cur = conn.execute(
                    "UPDATE cells SET vec = ?, vec_seq = ? WHERE id = ? AND text = ?",
                    (vector_bytes(vector), seq, source.cell_id, source.text),
                )
                if cur.rowcount == 1:
                    written += 1
                    seq += 1
        return written

    def tend_owner_indexes(
        self, progress: Callable[[int, int], None] | None = None
    ) -> OwnerIndexReport | None:
        return None  # a large owner's block is built in memory as it is searched

    # -- moving cells between stores ------------------------------------------------------

    def copies(self, after_id: str | None, batch: int) -> list[CellCopy]:
        conn = self._conn()
        rows = conn.execute(
            f"SELECT {_COLS}, vec, id FROM cells WHERE id > ? ORDER BY id LIMIT ?",
            (after_id or "", batch),
        ).fetchall()
        patches: dict[str, list[datetime]] = {}
        if rows:
            for cell_id, at in conn.execute(
                    "SELECT cell_id, at FROM scoring_patches WHERE cell_id >= ? AND"
                    " cell_id <= ? ORDER BY cell_id, at", (rows[0][6], rows[-1][6])):
                patches.setdefault(cell_id, []).append(_time(at))
        return [CellCopy(_stored(r),
                         None if r[5] is None else vector_from_bytes(r[5]).tolist(),
                         tuple(patches.get(r[6], ()))) for r in rows]

    def put_copies(self, copies: Sequence[CellCopy]) -> int:
        written = 0
        with self._write() as conn:
            for copy in copies:
                if not self._insert(conn, copy.stored, copy.vector, unless_there=True):
                    continue
                written += 1
                conn.executemany(
                    "INSERT INTO scoring_patches (cell_id, at) VALUES (?, ?)",
                    [(copy.stored.cell.id, format_time(at)) for at in copy.scoring_patches])
        return written

    def restore_mark(self) -> str | None:
        row = self._conn().execute("SELECT value FROM meta WHERE key = ?",
                                   (RESTORE_MARK_KEY,)).fetchone()
        return None if row is None else str(row[0])

    def set_restore_mark(self, mark: str | None) -> None:
        with self._write() as conn:
            if mark is None:
                conn.execute("DELETE FROM meta WHERE key = ?", (RESTORE_MARK_KEY,))
            else:
                conn.execute("INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT(key)"
                             " DO UPDATE SET value = excluded.value", (RESTORE_MARK_KEY, mark))

    def graphs(self) -> dict[str, int] | None:
        """Counters of the cell vectors' HNSW graph (`GraphStats`)."""
        return self._vectors.stats.wire() if self._vectors is not None else None

    def graph_memory(self) -> int:
        """Bytes the graph holds in memory (0: none in use)."""
        if self._vectors is None:
            return 0
        with self._vectors.lock:
            ann = self._vectors.matrix.ann
            return ann.memory_bytes if ann is not None else 0

    def block_memory(self) -> int:
        """Bytes the large owners' contiguous copies of their vectors hold
        (`group_candidates`, "block"; 0: none)."""
        if self._vectors is None:
            return 0
        with self._vectors.lock:
            return self._vectors.matrix.block_memory()

    def vector_memory(self) -> dict[str, int] | None:
        if self._vectors is None:
            return None
        with self._vectors.lock:
            matrix = self._vectors.matrix
            return {"matrix": matrix.buffer_memory(), "graph": self.graph_memory(),
                    "blocks": matrix.block_memory()}

    def wait_graphs(self, timeout: float = 600.0) -> None:
        """Until the graph is built, loaded or saved (tests, benchmarks)."""
        if self._vectors is not None:
            self._vectors.matrix.wait(timeout)

    def close(self) -> None:
        if self._vectors is not None:
            with self._vectors.lock:
                self._vectors.matrix.drop()
        with self._readers_lock:
            readers, self._readers = self._readers, None
        if readers is not None:
            readers.shutdown(wait=True)
        self._conns.close_all()


class _Tx:
    def __init__(self, conn: sqlite3.Connection, cell_id: str) -> None:
        self.conn = conn
        self.cell_id = cell_id

    def scoring_patches_since(self, since: datetime) -> list[datetime]:
        rows = self.conn.execute(
            "SELECT at FROM scoring_patches WHERE cell_id = ? AND at >= ? ORDER BY at",
            (self.cell_id, format_time(since)),
        ).fetchall()
        return [t for t in (parse_time(r[0]) for r in rows) if t is not None]
