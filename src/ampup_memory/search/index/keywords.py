"""The SQLite index's keyword tables: FTS5, one small SQLite file per keyword space.

A *keyword space* is one (scope, branch). FTS5's ``bm25()`` scores a row with the
statistics of the table it sits in (row count, average length, how many rows hold each
word), so every space has tables of its own and nothing written to one space moves a
score in another.

Why a file per space rather than tables per space in the index file: SQLite parses a
file's whole schema on every new connection and again on every connection after any
schema change, in time that grows faster than the schema (measured here, SQLite 3.40:
500 spaces as FTS5 tables in one file cost 36 ms, 1,000 spaces 0.2 s, 2,000 spaces
0.9 s, per new connection and again on every connection after each first write to a new
scope). A space file has a fixed schema (two FTS5 tables and a bookkeeping table), so
opening one costs the same with ten scopes or ten thousand.

The rows stay in the index file, the only truth. A space file holds postings and, per
kind, the highest row number it has applied (``applied``). Writers apply their rows right
after the index commit; a reader that finds a space file behind (a writer stopped in
between) applies the missing rows itself (:meth:`SQLiteIndex._keyword_space`), so a
space file is never more than a catch-up away from its rows. Row numbers only grow, so
"apply every row above ``applied``" is the whole protocol.

File names come from :func:`space_file` alone: a positive integer and a random hex
token, both from the index's own ``keyword_spaces`` table; no caller text reaches a path.
The token makes a name unique forever, so a file of a cleared space (or of a deleted
index file) can never be mistaken for a live one; such files are removed on clear and
on open.
"""

from __future__ import annotations

import contextlib
import json
import re
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ampup_memory.search.bm25f import K1, B
from ampup_memory.search.bm25f import idf as bm25_idf
from ampup_memory.search.index.base import Statistics
from ampup_memory.search.tokenize import FTS5_TOKENIZER, keyword_text
from ampup_memory.sqlite_connections import enable_wal, roll_back

# What each kind's FTS5 table indexes, in column order (facts: the BM25F fields, in the
# order of `search/bm25f.py`). Contentless: the text lives in the index file's rows.
COLUMNS = {
    "facts": ("entity", "predicate_words", "value", "quote"),
    "passages": ("text",),
}
_TABLES = {"facts": "facts_fts", "passages": "passages_fts"}  # fixed names inside a file
# The postings' format, a file's ``user_version``: 1 since its text is `keyword_text` under
# `FTS5_TOKENIZER` (0: the raw text under 'porter unicode61').
FORMAT = 1
_TOKEN = re.compile(r"[0-9a-f]{16}")
_FILE = re.compile(r"([1-9][0-9]*-[0-9a-f]{16}\.db)(?:-wal|-shm)?")
IDLE_CONNECTIONS = 32  # open space-file connections kept for reuse, across all threads
# Row lengths the idle connections keep together (12 bytes a row, `_row_lengths`): past
# it, the least recently used connections forget theirs (read again when next needed).
LENGTH_ROWS = 4_000_000


@dataclass(frozen=True)
class Space:
    id: int
    token: str
    scope: str
    branch: str


def space_file(folder: Path, space: Space) -> Path:
    """The one place a space file's path is built; checked again here because the name
    reaches the file system."""
    if isinstance(space.id, bool) or not isinstance(space.id, int) or space.id <= 0:
        raise ValueError(f"invalid keyword space number {space.id!r}")
    if not isinstance(space.token, str) or not _TOKEN.fullmatch(space.token):
        raise ValueError("invalid keyword space token")
    return folder / f"{space.id}-{space.token}.db"


def fts_table(kind: str) -> str:
    return _TABLES[kind]


def _current(conn: sqlite3.Connection) -> bool:
    return bool(conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'applied'").fetchone()
                ) and int(conn.execute("PRAGMA user_version").fetchone()[0]) == FORMAT


def _schema(conn: sqlite3.Connection) -> None:
    """Create the file's tables; a file of an older `FORMAT` (its postings tokenized by an
    older rule) is emptied first, and refills from the index file's rows on its next
    catch-up, as a new space does (applied is 0)."""
    if _current(conn):
        return
    conn.execute("BEGIN IMMEDIATE")  # two processes opening a new file: one creates
    try:
        if int(conn.execute("PRAGMA user_version").fetchone()[0]) != FORMAT:
            # Virtual tables first: dropping one drops its shadow tables.
            for table in (*_TABLES.values(), "applied", "sizes"):
                conn.execute(f"DROP TABLE IF EXISTS {table}")
            conn.execute(f"PRAGMA user_version = {int(FORMAT)}")
        for kind, columns in COLUMNS.items():
            conn.execute(
                f"CREATE VIRTUAL TABLE IF NOT EXISTS {_TABLES[kind]} USING fts5("
                f"{', '.join(columns)}, content='', tokenize=\"{FTS5_TOKENIZER}\")"
            )
        conn.execute("CREATE TABLE IF NOT EXISTS applied"
                     " (kind TEXT PRIMARY KEY, upto INTEGER NOT NULL)")
        # Per row, how many rows and tokens the space held up to it (the statistics of
        # a held search, `cut_scores`) and its own token count (``length``).
        conn.execute("CREATE TABLE IF NOT EXISTS sizes (kind TEXT NOT NULL,"
                     " num INTEGER NOT NULL, rows INTEGER NOT NULL, tokens INTEGER NOT NULL,"
                     " length INTEGER NOT NULL, PRIMARY KEY (kind, num)) WITHOUT ROWID")
    except BaseException:
        roll_back(conn)
        raise
    conn.execute("COMMIT")


def applied(conn: sqlite3.Connection, kind: str) -> int:
    """The highest row number of ``kind`` this space file holds postings for."""
    row = conn.execute("SELECT upto FROM applied WHERE kind = ?", (kind,)).fetchone()
    return int(row[0]) if row else 0


def apply(conn: sqlite3.Connection, kind: str, rows: Iterable[Sequence[Any]], upto: int
          ) -> None:
    """Add (num, *columns) rows and move ``applied`` to ``upto``; the caller holds the
    file's write lock (``BEGIN IMMEDIATE``) and passes only rows above ``applied``. FTS5
    indexes each column's `keyword_text`."""
    columns = COLUMNS[kind]
    conn.executemany(
        f"INSERT INTO {_TABLES[kind]} (rowid, {', '.join(columns)})"
        f" VALUES (?, {', '.join('?' * len(columns))})",
        ((num, *(keyword_text(v) for v in values)) for num, *values in rows),
    )
    last = conn.execute("SELECT num, rows, tokens FROM sizes WHERE kind = ?"
                        " ORDER BY num DESC LIMIT 1", (kind,)).fetchone()
    num, count, tokens = (int(v) for v in last) if last else (0, 0, 0)
    sizes = []
    for n, size in conn.execute(f"SELECT id, sz FROM {_TABLES[kind]}_docsize WHERE id > ?"
                                " ORDER BY id", (num,)).fetchall():
        length = _row_tokens(size)
        count, tokens = count + 1, tokens + length
        sizes.append((kind, int(n), count, tokens, length))
    conn.executemany("INSERT INTO sizes (kind, num, rows, tokens, length)"
                     " VALUES (?, ?, ?, ?, ?)", sizes)
    conn.execute(
        "INSERT INTO applied (kind, upto) VALUES (?, ?)"
        " ON CONFLICT (kind) DO UPDATE SET upto = excluded.upto",
        (kind, upto),
    )


# ---- BM25 over the rows up to a bound (a held search, a view's segment) ---------------
#
# FTS5's bm25() takes its statistics from the whole table: rows committed after a pinned
# commit would move a pinned search's scores. A held search scores the rows numbered up
# to a bound with the statistics of those rows alone: FTS5 still finds the postings
# (fts5vocab, so stemming and phrases are FTS5's own), the row sizes are FTS5's
# (``<table>_docsize``, a varint per column) and the formula is FTS5's bm25, operation
# for operation (sqlite/ext/fts5/fts5_aux.c), so over every row of a space it gives
# bm25()'s scores bit for bit (tests/test_index_contract.py). The same function scores a
# segment of a view of several spaces (a branch and its base) with the view's statistics,
# its spaces' rows counted together (`Statistics`, `SQLiteIndex.keyword_view`).

_K1 = K1
_B = B


def _row_tokens(size: bytes) -> int:
    """The row's token count: the sum of its ``_docsize`` varints (one per column)."""
    total = value = 0
    for byte in size:
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            total += value
            value = 0
    return total


def cut_totals(conn: sqlite3.Connection, kind: str, bound: int) -> tuple[int, int]:
    """Rows and tokens of ``kind`` numbered up to ``bound``."""
    row = conn.execute("SELECT rows, tokens FROM sizes WHERE kind = ? AND num <= ?"
                       " ORDER BY num DESC LIMIT 1", (kind, bound)).fetchone()
    return (int(row[0]), int(row[1])) if row else (0, 0)


def _helpers(conn: sqlite3.Connection) -> None:
    """This connection's temporary tables: a vocabulary view of each kind's postings and
    a scratch table that tokenizes a query term as the space's tables do."""
    if conn.execute("SELECT 1 FROM temp.sqlite_master WHERE name = 'term_tokens'"
                    ).fetchone():
        return
    conn.execute("PRAGMA temp_store=MEMORY")  # the scratch row of one term
    for table in _TABLES.values():
        conn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.{table}_instances"
                     f" USING fts5vocab(main, {table}, instance)")
    conn.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.term_text"
                 f" USING fts5(x, tokenize=\"{FTS5_TOKENIZER}\")")
    conn.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.term_tokens"
                 " USING fts5vocab(temp, term_text, instance)")


def _tokens(conn: sqlite3.Connection, term: str) -> list[str]:
    """The indexed tokens of one query term, in order (a phrase when more than one)."""
    conn.execute("DELETE FROM temp.term_text")
    conn.execute("INSERT INTO temp.term_text (rowid, x) VALUES (1, ?)", (term,))
    return [str(t) for (t,) in conn.execute("SELECT term FROM temp.term_tokens"
                                            " ORDER BY offset")]


def _weight_of(kind: str, weights: Sequence[float]) -> np.ndarray:
    """Each of ``kind``'s columns' weight, in column order (1.0 where none is given)."""
    columns = COLUMNS[kind]
    return np.array([float(weights[i]) if i < len(weights) else 1.0
                     for i in range(len(columns))], dtype=np.float64)


def _ints(text: str | None) -> np.ndarray:
    """The integers of a ``group_concat`` (one string instead of a Python row per value:
    fetching ~10k rows of a common word as tuples cost more than SQLite's walk)."""
    if not text:
        return np.zeros(0, dtype=np.int64)
    return np.fromstring(text, dtype=np.int64, sep=",")


def _word_rows(conn: sqlite3.Connection, kind: str, token: str, weights: np.ndarray,
               after: int, bound: int) -> tuple[np.ndarray, np.ndarray]:
    """The rows numbered above ``after`` and up to ``bound`` that hold one token, ascending,
    and its weighted frequency in each (FTS5's ``aFreq``: a column's weight per instance,
    added in the order FTS5 lists them, as SQL's ``sum`` did)."""
    fts, columns = _TABLES[kind], COLUMNS[kind]
    code = "doc"
    if len(columns) > 1:  # the row and the column in one integer: doc * columns + column
        cases = " ".join(f"WHEN '{c}' THEN {i}" for i, c in enumerate(columns))
        code = f"doc * {len(columns)} + CASE col {cases} END"
    (text,) = conn.execute(
        f"SELECT group_concat({code}) FROM temp.{fts}_instances"
        " WHERE term = ? AND doc <= ? AND doc > ?", (token, bound, after)).fetchone()
    docs, col = np.divmod(_ints(text), len(columns))
    rows, at = np.unique(docs, return_inverse=True)
    # bincount adds each bin's weights in input order, from 0.0, as sum() did.
    return rows, np.bincount(at, weights=weights[col], minlength=len(rows))


def _phrase_rows(conn: sqlite3.Connection, kind: str, tokens: list[str],
                 weights: np.ndarray, after: int, bound: int
                 ) -> tuple[np.ndarray, np.ndarray]:
    """`_word_rows` of a query phrase: its tokens at consecutive offsets of one column."""
    if len(tokens) == 1:  # one word (the usual case)
        return _word_rows(conn, kind, tokens[0], weights, after, bound)
    fts = _TABLES[kind]
    places: dict[tuple[int, str], list[set[int]]] = {}
    for j, token in enumerate(tokens):
        for doc, col, offset in conn.execute(
                f"SELECT doc, col, offset FROM temp.{fts}_instances"
                " WHERE term = ? AND doc <= ? AND doc > ?", (token, bound, after)):
            places.setdefault((int(doc), str(col)), [set() for _ in tokens]
                              )[j].add(int(offset))
    by_col = dict(zip(COLUMNS[kind], weights.tolist(), strict=True))
    freqs: dict[int, float] = {}
    for (doc, col), at in sorted(places.items()):
        found = sum(1 for o in at[0] if all(o + j in at[j] for j in range(1, len(at))))
        if found:
            freqs[doc] = freqs.get(doc, 0.0) + by_col.get(col, 1.0) * found
    return (np.fromiter(freqs, dtype=np.int64, count=len(freqs)),
            np.fromiter(freqs.values(), dtype=np.float64, count=len(freqs)))


# Rows of recently collected phrases a space connection keeps (16 bytes a row): a fact
# scored apart (`SQLiteIndex.fact_keyword`) asks for the rows of the words its segment's
# list collected moments before, ~2 ms per word in 7,000 rows. At most PHRASES of them
# (a word no row holds keeps no row, and each kept one is a step of the look-up).
PHRASE_ROWS = 65_536
PHRASES = 256


class SpaceConnection(sqlite3.Connection):
    """A space file's connection, with what its searches have read so far that cannot
    change: per kind, the row numbers ascending and each row's token count
    (`_row_lengths`), and the latest phrases' rows (`_kept_phrase_rows`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lengths: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self.phrases: OrderedDict[tuple[Any, ...], tuple[np.ndarray, np.ndarray]] = (
            OrderedDict())
        self.phrase_rows = 0

    @property
    def length_rows(self) -> int:
        """Rows whose lengths this connection keeps."""
        return sum(len(nums) for nums, _ in self.lengths.values())


def _kept_phrase_rows(conn: sqlite3.Connection, kind: str, tokens: list[str],
                      weights: np.ndarray, after: int, bound: int
                      ) -> tuple[np.ndarray, np.ndarray]:
    """`_phrase_rows`, from the rows the connection keeps of a range covering this one
    when it has them. Rows are only ever added above the last one applied (`apply`), so
    the rows up to ``bound`` stay as read once ``bound`` is within what the file has
    applied."""
    if not isinstance(conn, SpaceConnection):
        return _phrase_rows(conn, kind, tokens, weights, after, bound)
    phrase = (kind, tuple(tokens), weights.tobytes())
    for key, (rows, freqs) in conn.phrases.items():
        if key[:3] == phrase and key[3] <= after and key[4] >= bound:
            conn.phrases.move_to_end(key)
            cut = slice(np.searchsorted(rows, after, "right"),
                        np.searchsorted(rows, bound, "right"))
            return rows[cut], freqs[cut]
    found = _phrase_rows(conn, kind, tokens, weights, after, bound)
    if len(found[0]) <= PHRASE_ROWS and bound <= applied(conn, kind):
        for part in found:
            part.setflags(write=False)
        conn.phrases[(*phrase, after, bound)] = found
        conn.phrase_rows += len(found[0])
        while conn.phrase_rows > PHRASE_ROWS or len(conn.phrases) > PHRASES:
            _, (rows, _) = conn.phrases.popitem(last=False)
            conn.phrase_rows -= len(rows)
    return found


def _sizes(conn: sqlite3.Connection, kind: str, where: str, *params: Any
           ) -> tuple[np.ndarray, np.ndarray]:
    """Row numbers ascending and their token counts, of the ``sizes`` rows ``where``."""
    nums, lengths = conn.execute(
        f"SELECT group_concat(num), group_concat(length) FROM sizes WHERE kind = ?"
        f" AND {where}", (kind, *params)).fetchone()
    nums, lengths = _ints(nums), _ints(lengths)
    if len(nums) != len(lengths):
        raise sqlite3.DatabaseError("keyword file row sizes unreadable")
    order = np.argsort(nums, kind="stable")
    return nums[order], lengths[order].astype(np.int32)  # 12 bytes a row kept


def _row_lengths(conn: sqlite3.Connection, kind: str, docs: np.ndarray) -> np.ndarray:
    """The token count of each listed row (ascending row numbers the file holds).

    Looked up per row in ``sizes`` this was ~5 ms for a word in 7,000 rows. A row's
    length never changes and rows are only added above the last (`apply`, in the same
    transaction as its postings), so the connection keeps them and reads only the rows
    added since; but reading them all costs ~19 ms at 100,000 rows, so a few rows among
    many not yet read (a rare word, a connection just opened) are looked up alone."""
    if not len(docs):
        return np.zeros(0, np.int32)
    cache = conn.lengths if isinstance(conn, SpaceConnection) else {}
    nums, lengths = cache.get(kind, (np.zeros(0, np.int64), np.zeros(0, np.int32)))
    last = int(nums[-1]) if len(nums) else 0
    if int(docs[-1]) > last:
        held, _ = cut_totals(conn, kind, 1 << 62)  # the file's rows; those kept: all up to last
        if int(np.count_nonzero(docs > last)) * 8 < held - len(nums):
            nums, lengths = _sizes(conn, kind, "num IN (SELECT value FROM json_each(?))",
                                   json.dumps(docs.tolist()))
        else:
            more, sizes = _sizes(conn, kind, "num > ?", last)
            nums, lengths = np.concatenate([nums, more]), np.concatenate([lengths, sizes])
            cache[kind] = nums, lengths
    at = np.minimum(np.searchsorted(nums, docs), max(len(nums) - 1, 0))
    if not len(nums) or not np.array_equal(nums[at], docs):
        raise sqlite3.DatabaseError("keyword file lacks the sizes of rows it holds")
    return lengths[at]


def cut_scores(conn: sqlite3.Connection, kind: str, terms: Sequence[str], bound: int,
               weights: Sequence[float], nums: Iterable[int] | None = None,
               limit: int | None = None, after: int = 0,
               stats: Statistics | None = None) -> list[tuple[int, float]]:
    """BM25 (FTS5's, with column ``weights``) of each row numbered up to ``bound`` that
    matches any term (only the listed ``nums`` when given, only rows numbered above
    ``after``), with the row count, average length and document frequencies of the rows
    up to ``bound`` (``stats``, when given: those of a view of several spaces, this one
    among them); best first (ties: the older row), the best ``limit`` when given.

    Per query phrase, the rows holding it and its weighted frequency in each, from
    which (without ``stats``) its document frequency; then each row's score from its
    frequencies and its length, in numpy over arrays, operation for operation as FTS5's
    bm25 (phrases added in query order, as ``score +=`` there). numpy's float64
    operations round as SQLite's and C's doubles do, so the scores are those of the SQL
    this replaced, bit for bit."""
    n_rows, n_tokens = cut_totals(conn, kind, bound) if stats is None else (
        stats.rows, stats.tokens)
    if not terms or n_rows == 0:
        return []
    _helpers(conn)
    wanted: np.ndarray | None = None
    if nums is not None:
        wanted = np.unique(np.fromiter(nums, dtype=np.int64))
        if not len(wanted):
            return []
    # Without given statistics every held row is collected, to count each phrase's rows;
    # with them, only the rows to score (a fact scored apart: its segment's list of a
    # moment before holds them, `_kept_phrase_rows`).
    low, high = (0, bound) if stats is None else (after, bound)
    if stats is not None and wanted is not None:
        low, high = max(low, int(wanted[0]) - 1), min(high, int(wanted[-1]))
        if low >= high:
            return []
    by_col = _weight_of(kind, weights)
    idf: list[float] = []
    found: list[tuple[np.ndarray, np.ndarray]] = []
    for phrase, term in enumerate(terms):
        tokens = _tokens(conn, term)
        docs, freqs = (_kept_phrase_rows(conn, kind, tokens, by_col, low, high) if tokens
                       else (np.zeros(0, np.int64), np.zeros(0, np.float64)))
        hits = len(docs) if stats is None else stats.hits[phrase]
        idf.append(bm25_idf(n_rows, hits))
        keep = docs > after
        if wanted is not None:
            keep &= np.isin(docs, wanted, assume_unique=True)
        found.append((docs[keep], freqs[keep]))
    rows = np.unique(np.concatenate([d for d, _ in found]))
    if not len(rows):
        return []
    avgdl = float(n_tokens) / float(n_rows)
    # score = 0.0; score += idf[i] * ((f * (k1 + 1)) / (f + k1 * (1 - b + b * D / avgdl)))
    # for each phrase i in order; a phrase a row lacks adds 0.0, which changes nothing.
    norm = (1 - _B) + (_B * _row_lengths(conn, kind, rows)) / avgdl
    score = np.zeros(len(rows), dtype=np.float64)
    for value, (docs, freqs) in zip(idf, found, strict=True):
        at = np.searchsorted(rows, docs)
        part = np.zeros(len(rows), dtype=np.float64)
        part[at] = value * ((freqs * (_K1 + 1.0)) / (freqs + _K1 * norm[at]))
        score = score + part
    order = np.lexsort((rows, -score))
    if limit is not None:
        order = order[:limit]
    return list(zip(rows[order].tolist(), score[order].tolist(), strict=True))


class SpaceFiles:
    """The folder of space files, and a pool of open connections to them.

    Connections are shared by threads (one user at a time) and bounded in number, so a
    server with many threads and many scopes does not hold a file handle per pair."""

    def __init__(self, folder: Path, timeout: float) -> None:
        self.folder = folder
        self.timeout = timeout
        self._idle: OrderedDict[Path, list[sqlite3.Connection]] = OrderedDict()
        self._lock = threading.Lock()

    def _open(self, path: Path) -> sqlite3.Connection:
        self.folder.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False,
                               timeout=self.timeout, factory=SpaceConnection)
        try:
            enable_wal(conn, self.timeout)
            # Derived from the index file's rows: a lost tail is applied again.
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute(f"PRAGMA busy_timeout={int(self.timeout * 1000)}")
            _schema(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    @contextmanager
    def connect(self, space: Space) -> Iterator[sqlite3.Connection]:
        """A connection to the space's file (created on first use), for this caller only
        until the block ends."""
        path = space_file(self.folder, space)
        with self._lock:
            idle = self._idle.get(path)
            conn = idle.pop() if idle else None
        if conn is None:
            conn = self._open(path)
        try:
            yield conn
        except BaseException:
            roll_back(conn)
            raise
        finally:
            self._give_back(path, conn)

    def _give_back(self, path: Path, conn: sqlite3.Connection) -> None:
        surplus: list[sqlite3.Connection] = []
        with self._lock:
            self._idle.setdefault(path, []).append(conn)
            self._idle.move_to_end(path)
            while sum(len(c) for c in self._idle.values()) > IDLE_CONNECTIONS:
                _, oldest = self._idle.popitem(last=False)
                surplus += oldest
            # The row lengths kept, newest connections first, within LENGTH_ROWS: the
            # least recently used spaces' are read again when next needed.
            kept = 0
            for c in reversed([c for conns in self._idle.values() for c in conns]):
                if isinstance(c, SpaceConnection):
                    rows = c.length_rows
                    if kept + rows > LENGTH_ROWS:
                        c.lengths.clear()
                    else:
                        kept += rows
        for c in surplus:
            c.close()

    def _forget(self, paths: set[Path]) -> None:
        with self._lock:
            closing = [c for p in paths for c in self._idle.pop(p, [])]
        for c in closing:
            c.close()

    def remove(self, spaces: Iterable[Space]) -> None:
        """Delete the files of cleared spaces. Another process still reading one keeps
        its open copy; no later lookup names it again."""
        paths = {space_file(self.folder, s) for s in spaces}
        self._forget(paths)
        for path in paths:
            _unlink(path)

    def keep_only(self, spaces: Iterable[Space]) -> None:
        """Delete every space file not listed (left by a clear another process missed, a
        deleted index file, or a reader that reopened a file just cleared)."""
        if not self.folder.is_dir():
            return
        keep = {space_file(self.folder, s).name for s in spaces}
        stale = set()
        for p in self.folder.iterdir():
            found = _FILE.fullmatch(p.name)
            if found and found.group(1) not in keep:
                stale.add(self.folder / found.group(1))
        self._forget(stale)
        for path in stale:
            _unlink(path)

    def close(self) -> None:
        with self._lock:
            closing = [c for conns in self._idle.values() for c in conns]
            self._idle.clear()
        for c in closing:
            with contextlib.suppress(sqlite3.Error):
                c.close()


def _unlink(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        path.with_name(path.name + suffix).unlink(missing_ok=True)
