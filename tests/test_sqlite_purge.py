"""SQLite: a purge erases the purged cells' words from the keyword indexes (FTS5: the
older `cells_fts` and the keyword-text rule's `cells_words`), and the erasure keeps them
readable however often it runs.

FTS5 keeps a deleted row's words (and its delete marker's) in its segments until they
merge; `SQLiteStore.erase_purged` merges them all, once after a pass's purge pages. Each
such merge added two levels to the index's structure on the SQLite here (3.40.1), and past
2,000 FTS5 reads the index as corrupt: a store purging one page an hour broke in six weeks.
"""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

import pytest

from ampup_memory.amp.model import Status
from ampup_memory.amp.store import sqlite as lite
from tests.test_store_contract import make

INDEXES = ("cells_fts", "cells_words")


def shadow_tables_hold(path: Path, word: str, indexes: tuple[str, ...] = INDEXES) -> bool:
    """Does a block or a term of a keyword index hold ``word`` (its last 12 characters:
    FTS5 stores a term after the prefix it shares with the one before it)?"""
    conn = sqlite3.connect(path)
    try:
        rows = [row for t in indexes for row in (*conn.execute(f"SELECT block FROM {t}_data"),
                                                 *conn.execute(f"SELECT term FROM {t}_idx"))]
    finally:
        conn.close()
    return any(word[-12:].encode() in bytes(b) for (b,) in rows if b)


def matches(path: Path, word: str) -> int:
    """The cells holding ``word`` by each keyword index, summed."""
    conn = sqlite3.connect(path)
    try:
        return sum(int(conn.execute(f"SELECT count(*) FROM {t} WHERE {t} MATCH ?",
                                    (f'"{word}"',)).fetchone()[0]) for t in INDEXES)
    finally:
        conn.close()


def fill(store: lite.SQLiteStore, cells: int) -> None:
    """Cells of common words: an index with a large segment beside the small ones a
    write adds (a few cells made no level grow)."""
    rng = random.Random(5)
    for n in range(cells):
        store.create(make(n, " ".join(f"w{rng.randrange(3000)}" for _ in range(15))), None)


def test_a_purge_erases_the_cells_words_and_a_crash_leaves_it_owed(tmp_path: Path) -> None:
    path = tmp_path / "amp.db"
    store = lite.SQLiteStore(f"sqlite:///{path}", None)
    fill(store, 100)
    # Words no other cell holds, ending in a digit (the porter stemmer cuts an "e").
    gone = [f"zqgone{n}aa11bb22cc7" for n in range(3)]
    for n, word in enumerate(gone):
        store.create(make(1000 + n, f"call {word} now", status=Status.deleted), None)
    kept = "zqkeptdd33ee44ff7"
    store.create(make(2000, f"keep {kept}", status=Status.deleted), None)
    assert all(shadow_tables_hold(path, w) for w in [*gone, kept])
    assert store.purge([make(1000 + n).cell.id for n in range(3)]) == 3
    # Between the purge's transaction and the erasure: no search finds the words, but
    # they are still in the file; a process that stops here leaves the erasure owed.
    assert all(matches(path, w) == 0 for w in gone)
    assert all(shadow_tables_hold(path, w) for w in gone)
    store.close()
    store = lite.SQLiteStore(f"sqlite:///{path}", None)
    store.erase_purged()
    assert not any(shadow_tables_hold(path, w) for w in gone)
    assert shadow_tables_hold(path, kept) and matches(path, kept) == 2
    # Owed no more: the next call merges nothing (the index's structure is unchanged).
    conn = sqlite3.connect(path)
    before = conn.execute("SELECT block FROM cells_fts_data WHERE id = 10").fetchone()
    store.erase_purged()
    assert conn.execute("SELECT block FROM cells_fts_data WHERE id = 10").fetchone() == before
    for table in INDEXES:
        conn.execute(f"INSERT INTO {table}({table}) VALUES ('integrity-check')")
    conn.close()
    store.close()


def test_an_older_versions_erasure_leaves_the_newer_index_owed(tmp_path: Path) -> None:
    """An older version merges `cells_fts` alone and takes its mark away; the deletion's
    own mark for `cells_words` stays, and this version's erasure merges that one."""
    path = tmp_path / "amp.db"
    store = lite.SQLiteStore(f"sqlite:///{path}", None)
    fill(store, 50)
    word = "zqolderhh55ii66jj7"
    store.create(make(1000, f"gone {word}", status=Status.deleted), None)
    assert store.purge([make(1000).cell.id]) == 1
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("INSERT INTO cells_fts(cells_fts) VALUES ('optimize')")  # as 9dd8f66 does
    conn.execute("DELETE FROM meta WHERE key = ?", (lite.ERASE_PENDING_KEY,))
    assert not shadow_tables_hold(path, word, ("cells_fts",))
    assert shadow_tables_hold(path, word, ("cells_words",))
    store.erase_purged()
    assert not shadow_tables_hold(path, word)
    conn.close()
    store.close()


def test_erasures_never_grow_the_index_past_the_levels_fts5_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each erasure ('optimize') adds two levels; from FTS_REBUILD_LEVELS on it rebuilds
    the index instead (one level). Here that bound is 12, so the rebuild comes soon."""
    monkeypatch.setattr(lite, "FTS_REBUILD_LEVELS", 12)
    assert lite.FTS_REBUILD_LEVELS < 2000  # the real one too: FTS5's limit is 2,000
    path = tmp_path / "amp.db"
    store = lite.SQLiteStore(f"sqlite:///{path}", None)
    fill(store, 100)
    conn = sqlite3.connect(path)
    seen = []
    for n in range(10):
        word = f"zqround{n}xx55yy66zz7"
        store.create(make(1000 + n, f"gone {word}", status=Status.deleted), None)
        store.purge([make(1000 + n).cell.id])
        store.erase_purged()
        assert not shadow_tables_hold(path, word)
        seen.append(max(lite.fts5_levels(conn, t) or 0 for t in INDEXES))
    assert max(seen) <= 12 and seen[-1] < max(seen), seen  # grew, then started again
    for table in INDEXES:
        conn.execute(f"INSERT INTO {table}({table}) VALUES ('integrity-check')")
    assert matches(path, "w1") + matches(path, "w2") > 0  # the kept cells still found
    conn.close()
    store.close()
