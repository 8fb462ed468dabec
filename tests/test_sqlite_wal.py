"""Several openers switching one new SQLite file to WAL together all succeed.

SQLite can refuse the switch at once ("database is locked", no busy handler) while another
connection is making it; CI hit this when four servers opened one fresh store together.
"""

from __future__ import annotations

import sqlite3
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ampup_memory.sqlite_connections import enable_wal


def test_many_first_openers_all_end_in_wal(tmp_path: Path) -> None:
    for round_ in range(60):
        path = tmp_path / f"fresh-{round_}.db"

        def open_one(_: int, path: Path = path) -> str:
            conn = sqlite3.connect(path, isolation_level=None, timeout=5)
            try:
                enable_wal(conn, 5)
                conn.execute("CREATE TABLE IF NOT EXISTS t (a)")
                return str(conn.execute("PRAGMA journal_mode").fetchone()[0])
            finally:
                conn.close()

        with ThreadPoolExecutor(6) as pool:
            assert list(pool.map(open_one, range(6))) == ["wal"] * 6


def test_other_errors_are_not_retried(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "x.db")
    conn.close()
    try:
        enable_wal(conn, 5)
    except sqlite3.ProgrammingError as exc:  # a closed connection fails at once
        assert "closed" in str(exc)
    else:
        raise AssertionError("a closed connection must fail")
