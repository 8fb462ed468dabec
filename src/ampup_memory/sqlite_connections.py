"""What every SQLite-backed store shares: its URI's path and one connection per thread.

Connections are not shared across threads (sqlite3 objects are not thread-safe), WAL lets
readers run beside the one writer, a thread's connection is closed when the thread ends,
and ``close_all`` ends every live thread's connection.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

from ampup_memory.errors import ConfigurationError


def roll_back(conn: sqlite3.Connection) -> None:
    """End a failed transaction: ROLLBACK, unless SQLite ended it already. On a full disk,
    an I/O error or a busy file SQLite may roll the whole transaction back itself, and a
    ROLLBACK then raises "no transaction is active", hiding the error that said why."""
    if conn.in_transaction:
        conn.execute("ROLLBACK")


ROOM_FLOOR_BYTES = 1 << 20


def open_note(where: str | Path) -> str:
    """For an error opening a SQLite file (a path, or a ``sqlite:///`` URI; "" for any other
    URI), what SQLite's words leave out ("disk I/O error", "unable to open database file"):
    "; its disk is full …" when the folder holding it has under 1 MiB free (SQLite cannot
    make its ``-wal`` and ``-shm`` files), "; its folder is on a read-only filesystem"."""
    if isinstance(where, str):
        if not where.startswith("sqlite:///"):
            return ""
        where = sqlite_path(where)
    folder = Path(where).expanduser().absolute().parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        st = os.statvfs(folder)
    except OSError:
        return ""
    if st.f_flag & os.ST_RDONLY:
        return f"; its folder {folder} is on a read-only filesystem"
    if st.f_bavail * st.f_frsize >= ROOM_FLOOR_BYTES:
        return ""
    return f"; its disk is full ({folder}: {st.f_bavail * st.f_frsize} bytes free): free space"


def sqlite_path(uri: str) -> Path:
    """``sqlite:///abs/path.db`` or ``sqlite:///rel.db`` → a path. Nothing else is accepted."""
    if not uri.startswith("sqlite:///"):
        raise ConfigurationError(f"SQLite URI must look like sqlite:///path, got {uri!r}")
    raw = uri[len("sqlite:///") :]
    if not raw or "\x00" in raw or "?" in raw:
        raise ConfigurationError(f"invalid SQLite path in {uri!r}")
    return Path(raw).expanduser()


def poll(take: Callable[[], bool], wait: float) -> bool:
    """Try ``take`` until it succeeds or ``wait`` seconds are over; whether it succeeded."""
    deadline = time.monotonic() + wait
    pause = 0.001
    while not take():
        if time.monotonic() >= deadline:
            return False
        time.sleep(pause)
        pause = min(pause * 2, 0.01)
    return True


def _try_flock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


@contextmanager
def file_lock(path: str | Path, wait: float = 0.0) -> Iterator[bool]:
    """An exclusive lock on the file ``path`` (made if missing) for the block, trying for
    up to ``wait`` seconds; yields whether it is held. The kernel releases it when its
    process ends, however it ends: a holder killed with kill -9 keeps nothing held (what
    a lock row with an expiry cannot promise). Every process sharing a SQLite file in WAL
    mode is on one host, so the lock beside it excludes them all."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        held = poll(lambda: _try_flock(fd), wait)
        try:
            yield held
        finally:
            if held:
                fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def enable_wal(conn: sqlite3.Connection, timeout: float) -> None:
    """Switch ``conn``'s database to WAL, retrying while another opener holds the lock.

    The switch takes an exclusive lock, and SQLite can answer "database is locked" at once
    (no busy handler) while another process is making the same first switch, so several
    servers opening a new file together retry here until ``timeout``.
    """
    deadline = time.monotonic() + timeout
    pause = 0.005
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc):
                raise
            if time.monotonic() >= deadline:
                raise
            time.sleep(pause)
            pause = min(pause * 2, 0.2)


class _Held:
    """A thread's connection, held by that thread's `threading.local` alone: when the
    thread ends its locals are dropped, and with them this, which closes the connection
    (`ThreadConnections.get`)."""

    __slots__ = ("conn", "__weakref__")

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn


class ThreadConnections:
    def __init__(
        self, path: Path, *, synchronous: Literal["FULL", "NORMAL"], timeout: float
    ) -> None:
        self.path = path
        self.synchronous = synchronous
        self.timeout = timeout
        self._local = threading.local()
        # Every live thread's connection, for `close_all`. A server's worker threads come
        # and go (anyio ends one idle for 10 s), so a connection must not outlive its
        # thread: a server running for weeks kept a file and its WAL open per thread it
        # had ever had (tools/leak_audit.py, workload "idle").
        self._all: dict[int, sqlite3.Connection] = {}
        self._lock = threading.Lock()

    def get(self) -> sqlite3.Connection:
        """This thread's connection, opened on first use (autocommit: callers BEGIN)."""
        held: _Held | None = getattr(self._local, "held", None)
        if held is not None:
            return held.conn
        conn = sqlite3.connect(
            self.path, isolation_level=None, check_same_thread=False, timeout=self.timeout
        )
        enable_wal(conn, self.timeout)
        conn.execute(f"PRAGMA synchronous={self.synchronous}")
        conn.execute(f"PRAGMA busy_timeout={int(self.timeout * 1000)}")
        held = _Held(conn)
        with self._lock:
            self._all[id(conn)] = conn
        weakref.finalize(held, self._forget, conn)
        self._local.held = held
        return conn

    def _forget(self, conn: sqlite3.Connection) -> None:
        """Its thread has ended (or the locals were reset): no one can use it again."""
        with self._lock:
            self._all.pop(id(conn), None)
        try:
            conn.close()
        except sqlite3.Error:
            pass

    def close_all(self) -> None:
        with self._lock:
            closing = list(self._all.values())
            self._all.clear()
        for conn in closing:
            try:
                conn.close()
            except sqlite3.Error:
                pass
        self._local = threading.local()
