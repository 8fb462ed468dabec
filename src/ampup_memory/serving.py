"""Who is using a store's read index: every server (``serve``, stdio ``mcp``) holds a
shared lease on it while it runs, and an index rebuild holds the exclusive one, so a
rebuild never runs under a server and no server starts under a rebuild.

A rebuild under a running server would have it answer from a half-filled index, and a
commit it applied meanwhile could be cleared by the rebuild: the docs said to stop the
servers, and nothing checked. The lease lives where the read index does, so every server
that shares it sees it: a PostgreSQL index takes a session advisory lock on a connection
of its own (servers on several machines); a SQLite index, a ``flock`` on a file beside it.
Both end with their holder's process, however it ends, so a crash leaves no lease behind.
A database restart (or a connection killed by an operator or a proxy) also ends a
PostgreSQL lease: its holder checks the connection every ``KEEP_SECONDS`` and takes the
lease again on a new one, so a rebuild started after the database came back is refused
again within that time.
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ampup_memory.errors import ConfigurationError
from ampup_memory.pg_locks import advisory_key
from ampup_memory.settings import Settings

SERVING_KEY = advisory_key("serving")
# How often a PostgreSQL lease's holder checks that its connection (and with it the lock)
# is still there: one `SELECT 1` a server each time.
KEEP_SECONDS = 5.0

log = logging.getLogger(__name__)

SERVERS_RUNNING = ("a server is using this store (ampup-memory serve, or mcp over stdio): "
                   "stop every server on it first, then run this again")
REBUILD_RUNNING = ("an index rebuild is running on this store; start the server once it "
                   "has finished")


class LeaseTaken(ConfigurationError):
    """The store is in use in a way that excludes what was asked (the message says how)."""


@contextmanager
def serving(settings: Settings) -> Iterator[None]:
    """Held for as long as a server runs: any number of servers at once."""
    with _lease(settings, exclusive=False, taken=REBUILD_RUNNING):
        yield


@contextmanager
def alone(settings: Settings) -> Iterator[None]:
    """Held for the whole of an index rebuild: refused while any server runs."""
    with _lease(settings, exclusive=True, taken=SERVERS_RUNNING):
        yield


@contextmanager
def _lease(settings: Settings, *, exclusive: bool, taken: str) -> Iterator[None]:
    uri = settings.resolved_index_uri
    if uri.startswith(("postgresql", "postgres:")):
        with _advisory(uri, exclusive, taken):
            yield
    else:
        with _flocked(_lock_file(settings, uri), exclusive, taken):
            yield


def _lock_file(settings: Settings, uri: str) -> Path:
    """``<index file>.serving`` beside a SQLite index; in the home for anything else."""
    path = uri.split("///", 1)[1] if uri.startswith("sqlite:///") else ""
    if path and not path.startswith(":memory:"):
        return Path(path).with_name(Path(path).name + ".serving")
    return settings.home / "index.serving"


@contextmanager
def _flocked(path: Path, exclusive: bool, taken: str) -> Iterator[None]:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        # A home that is a file, or one that cannot be written: no lease can be taken, and
        # opening the store says why in its own words (which this would hide).
        yield
        return
    try:
        try:
            fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
        except BlockingIOError:
            raise LeaseTaken(taken) from None
        yield
    finally:
        os.close(fd)  # and with it the lock


@contextmanager
def _advisory(uri: str, exclusive: bool, taken: str) -> Iterator[None]:
    import psycopg

    from ampup_memory.amp.store.postgres import conninfo_from_uri

    conninfo = conninfo_from_uri(uri)
    try:
        conn = _take(psycopg.connect(conninfo, autocommit=True), exclusive)
    except psycopg.OperationalError as exc:
        raise ConfigurationError(f"cannot reach the read index's database: {exc}") from exc
    if conn is None:
        raise LeaseTaken(taken)
    keeper = _Keeper(conninfo, conn, exclusive)
    keeper.start()
    try:
        yield
    finally:
        keeper.stop()  # and closes the connection: the session's locks end with it


def _take(conn: Any, exclusive: bool) -> Any:
    """``conn`` holding the lease, or None (closed) when another holder excludes it."""
    function = "pg_try_advisory_lock" if exclusive else "pg_try_advisory_lock_shared"
    try:
        row = conn.execute(f"SELECT {function}(%s)", (SERVING_KEY,)).fetchone()
    except BaseException:
        conn.close()
        raise
    if not row or not row[0]:
        conn.close()
        return None
    return conn


class _Keeper:
    """Keeps a PostgreSQL lease while its holder runs: the lock lives in the connection's
    session, so a database restart ended it and a rebuild could then start under a
    running server (it was said in the docs, and nothing noticed). Every
    ``KEEP_SECONDS`` the connection is checked; a lost one is replaced and the lease
    taken again. If another holder took it meanwhile (a rebuild started while the
    database had just come back), that is logged as an error until it can be taken."""

    def __init__(self, conninfo: str, conn: Any, exclusive: bool) -> None:
        self.conninfo = conninfo
        self.conn: Any = conn
        self.exclusive = exclusive
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, name="ampup-serving-lease",
                                       daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.done.set()
        self.thread.join(timeout=KEEP_SECONDS + 30)
        if self.conn is not None:
            self.conn.close()

    def _run(self) -> None:
        import psycopg

        lost_said = False
        while not self.done.wait(KEEP_SECONDS):
            try:
                if self.conn is not None:
                    self.conn.execute("SELECT 1")
                    continue
            except psycopg.Error:
                self.conn.close()
                self.conn = None
                log.warning("lost the %s lease on the read index's database (its "
                            "connection ended); taking it again",
                            "rebuild's" if self.exclusive else "server's")
            try:
                self.conn = _take(psycopg.connect(self.conninfo, autocommit=True,
                                                  connect_timeout=10), self.exclusive)
            except psycopg.Error:
                continue  # the database is not back yet: try at the next tick
            if self.conn is None:
                if not lost_said:
                    log.error("%s; this process holds no lease until it can take it again",
                              SERVERS_RUNNING if self.exclusive else
                              "an index rebuild started on this store while this server's "
                              "lease was lost: answers may come from a half-filled index "
                              "until it ends")
                    lost_said = True
            else:
                lost_said = False
                log.warning("took the %s lease on the read index's database again",
                            "rebuild's" if self.exclusive else "server's")
