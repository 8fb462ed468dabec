"""Who is using a store's read index: every server (``serve``, stdio ``mcp``) holds a
shared lease on it while it runs, and an index rebuild holds the exclusive one, so a
rebuild never runs under a server and no server starts under a rebuild.

A rebuild under a running server would have it answer from a half-filled index, and a
commit it applied meanwhile could be cleared by the rebuild: the docs said to stop the
servers, and nothing checked. The lease lives where the read index does, so every server
that shares it sees it: a PostgreSQL index takes a session advisory lock on a connection
of its own (servers on several machines); a SQLite index, a ``flock`` on a file beside it.
Both end with their holder's process, however it ends, so a crash leaves no lease behind.
A database restart ends the PostgreSQL lease early; the server keeps serving without it.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ampup_memory.errors import ConfigurationError
from ampup_memory.pg_locks import advisory_key
from ampup_memory.settings import Settings

SERVING_KEY = advisory_key("serving")

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

    try:
        conn: Any = psycopg.connect(conninfo_from_uri(uri), autocommit=True)
    except psycopg.OperationalError as exc:
        raise ConfigurationError(f"cannot reach the read index's database: {exc}") from exc
    try:
        function = "pg_try_advisory_lock" if exclusive else "pg_try_advisory_lock_shared"
        row = conn.execute(f"SELECT {function}(%s)", (SERVING_KEY,)).fetchone()
        if not row or not row[0]:
            raise LeaseTaken(taken)
        yield
    finally:
        conn.close()  # the session's locks end with it
