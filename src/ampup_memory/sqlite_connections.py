"""What every SQLite-backed store shares: its URI's path and one connection per thread.

Connections are not shared across threads (sqlite3 objects are not thread-safe), WAL lets
readers run beside the one writer, and ``close_all`` ends every thread's connection.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Literal

from ampup_memory.errors import ConfigurationError


def sqlite_path(uri: str) -> Path:
    """``sqlite:///abs/path.db`` or ``sqlite:///rel.db`` → a path. Nothing else is accepted."""
    if not uri.startswith("sqlite:///"):
        raise ConfigurationError(f"SQLite URI must look like sqlite:///path, got {uri!r}")
    raw = uri[len("sqlite:///") :]
    if not raw or "\x00" in raw or "?" in raw:
        raise ConfigurationError(f"invalid SQLite path in {uri!r}")
    return Path(raw).expanduser()


class ThreadConnections:
    def __init__(
        self, path: Path, *, synchronous: Literal["FULL", "NORMAL"], timeout: float
    ) -> None:
        self.path = path
        self.synchronous = synchronous
        self.timeout = timeout
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._lock = threading.Lock()

    def get(self) -> sqlite3.Connection:
        """This thread's connection, opened on first use (autocommit: callers BEGIN)."""
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(
                self.path, isolation_level=None, check_same_thread=False, timeout=self.timeout
            )
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={self.synchronous}")
            conn.execute(f"PRAGMA busy_timeout={int(self.timeout * 1000)}")
            self._local.conn = conn
            with self._lock:
                self._all.append(conn)
        return conn

    def close_all(self) -> None:
        with self._lock:
            for conn in self._all:
                try:
                    conn.close()
                except sqlite3.Error:
                    pass
            self._all.clear()
        self._local = threading.local()
