"""The PostgreSQL connection pool every store opens (the AMP cells, the search index).

psycopg_pool reconnects a lost database with exponential backoff: 1 s, doubling, for up
to `reconnect_timeout` (5 minutes). After an outage of T seconds its next attempt can be
about T seconds away, and until then every request waits for a connection and answers
503, though the database is back. A server that tells clients to retry after 5 s should
itself be back within a few seconds, so our pool caps the wait between attempts. The
attempts still stop after `reconnect_timeout`, as psycopg_pool's do.

The same backoff spaces a request's checks of pooled connections: after a restart of the
database while the server idled, each pooled connection is broken, and a request checked
them one by one 1, 2, 4, 8 … s apart (five took 15 s, the database up all along). So the
first broken one makes the pool check, and replace, all the others at once.
"""

from __future__ import annotations

from psycopg_pool import ConnectionPool
from psycopg_pool.abc import CT
from psycopg_pool.base import AttemptWithBackoff

# The longest wait between two attempts to reconnect. A refused connection costs the
# database next to nothing, and 2 s keeps recovery well inside the 5 s of Retry-After.
MAX_RECONNECT_DELAY = 2.0


class CappedBackoff(AttemptWithBackoff):
    """psycopg_pool's reconnect attempt, its delay doubling up to MAX_RECONNECT_DELAY."""

    def update_delay(self, now: float) -> None:
        super().update_delay(now)
        self.delay = min(self.delay, MAX_RECONNECT_DELAY)


class Pool(ConnectionPool[CT]):
    """A `ConnectionPool` whose reconnect attempts back off to at most
    MAX_RECONNECT_DELAY apart, and which replaces every broken idle connection as soon as
    a request finds one."""

    def _add_connection(self, attempt: AttemptWithBackoff | None,
                        growing: bool = False) -> None:
        # psycopg_pool makes its own attempt when given none; the first call of each
        # reconnection is ours, and later calls carry the same attempt on.
        super()._add_connection(
            attempt or CappedBackoff(timeout=self.reconnect_timeout), growing=growing)

    def _check_connection(self, conn: CT) -> None:
        # Called by getconn on a pooled connection, outside the pool's lock; `check()`
        # takes the idle ones out, keeps those that answer and reconnects the rest.
        try:
            super()._check_connection(conn)
        except Exception:
            self.check()
            raise
