"""Open files (``ulimit -n``): every client connection, SQLite file, WAL and warehouse file
the server reads is one. Out of them, a request that must open a file answers 503 (the
file cannot be opened: `errors.storage_down`) and new connections wait in the listen
queue until others close.

Two things here: ``serve`` raises its soft limit to the hard one (a soft 1,024 under a
hard 524,288 is systemd's and many shells' default), and, once out, asyncio's accept loop
is kept from flooding the log: Python 3.11's ``_accept_connection`` logs a traceback and
schedules another try for each of up to ``backlog`` (2,048) failed accepts a tick, about
200 MB of log a minute with 100 waiting clients, enough to fill the disk it logs to.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import time
from typing import Any

log = logging.getLogger("ampup_memory")

# Past this many, raising the soft limit further buys nothing a single server uses.
CEILING = 65_536
# Under this many (after raising), `serve` warns at start.
FLOOR = 1_024
# One line per this many seconds while accepts keep failing.
SAY_EVERY_SECONDS = 30.0


def raise_open_file_limit() -> int:
    """Raise this process's soft limit on open files to its hard limit (at most
    ``CEILING``); the limit in force after, which is unchanged where it may not be
    raised."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = CEILING if hard == resource.RLIM_INFINITY else min(hard, CEILING)
    if soft != resource.RLIM_INFINITY and soft < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            soft = want
        except (OSError, ValueError):
            pass
    return soft


def low_limit_warning(limit: int) -> str | None:
    """The start-up warning for a limit under ``FLOOR``, or None."""
    if limit == resource.RLIM_INFINITY or limit >= FLOOR:
        return None
    return (f"this process may open only {limit} files (ulimit -n; its hard limit too): "
            "each client connection and store file takes one, so under load new "
            "connections wait and requests answer 503; raise it (ulimit -n, systemd's "
            "LimitNOFILE, Docker's --ulimit nofile) to at least 1024")


class _AcceptErrors:
    """A loop exception handler: "socket.accept() out of system resource" as one warning
    line per ``SAY_EVERY_SECONDS`` (with how many were folded in), and the failed retries
    of a listening socket already closed at shutdown dropped; everything else goes to the
    loop's default handler."""

    def __init__(self) -> None:
        self.said_at = -SAY_EVERY_SECONDS
        self.folded = 0

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if context.get("message") == "socket.accept() out of system resource":
            now = time.monotonic()
            if now - self.said_at < SAY_EVERY_SECONDS:
                self.folded += 1
                return
            more = f" ({self.folded} more since the last line)" if self.folded else ""
            soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
            log.warning("cannot accept connections: %s (open files limit %s, ulimit -n); "
                        "they wait until others close%s", getattr(exc, "strerror", exc),
                        soft, more)
            self.said_at, self.folded = now, 0
            return
        handle = context.get("handle")
        if isinstance(exc, ValueError) and "_start_serving" in repr(handle):
            return  # a retry of the above after the listening socket closed: nothing lost
        loop.default_exception_handler(context)


def quiet_accept_errors() -> None:
    """Install the handler on the running loop (``serve``'s lifespan)."""
    asyncio.get_running_loop().set_exception_handler(_AcceptErrors())
