"""Each thread's SQLite connection (`ThreadConnections`) ends with its thread.

A server's worker threads come and go: anyio ends one that idled 10 s, and the next burst
of requests (or the next timer pass on a quiet server) starts new ones. Every new thread
opened its own connections, and the store kept every connection it had ever opened, so a
server that ran for weeks held a file and its WAL per thread it had ever had: the leak
audit saw 83 open files grow to 229 over 4 bursts 11 s apart (tools/leak_audit.py,
workload ``idle``).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from ampup_memory.sqlite_connections import ThreadConnections


def _open_on(path: Path) -> int:
    """How many of this process's descriptors point at ``path`` or its WAL."""
    names = {str(path), f"{path}-wal"}
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") in names:
                count += 1
        except OSError:
            pass
    return count


def test_a_thread_that_ends_closes_its_connection(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    conns = ThreadConnections(path, synchronous="NORMAL", timeout=5.0)
    conns.get().execute("CREATE TABLE t (x)")  # this thread's, kept

    def use() -> None:
        conns.get().execute("INSERT INTO t VALUES (1)")

    for _ in range(30):  # one after another, as idle worker threads are replaced
        t = threading.Thread(target=use)
        t.start()
        t.join()
    # Only this thread's connection is left: a file and its WAL, and at most one more
    # descriptor SQLite keeps from a closed connection, to reuse at the next open, while
    # another connection of this process holds locks on the file. (Before: 62.)
    assert _open_on(path) <= 4
    assert conns.get().execute("SELECT count(*) FROM t").fetchone() == (30,)
    conns.close_all()
    assert _open_on(path) == 0


def test_close_all_still_closes_the_connections_of_live_threads(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    conns = ThreadConnections(path, synchronous="NORMAL", timeout=5.0)
    opened, done = threading.Barrier(5), threading.Event()

    def hold() -> None:
        conns.get().execute("SELECT 1")
        opened.wait()
        done.wait(10)

    threads = [threading.Thread(target=hold) for _ in range(4)]
    for t in threads:
        t.start()
    opened.wait()
    assert _open_on(path) >= 4
    conns.close_all()
    assert _open_on(path) == 0
    done.set()
    for t in threads:
        t.join()
