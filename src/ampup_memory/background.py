"""Periodic jobs a server runs while it serves: the lifecycle pass, Iceberg upkeep, the
search index's catch-up and the rest. One loop and one way to stop it, used by all."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import anyio.to_thread
from fastapi.concurrency import run_in_threadpool

from ampup_memory.errors import AmpError, driver_said, storage_down, storage_trouble
from ampup_memory.timefmt import format_time

LifespanHook = Callable[[], AbstractAsyncContextManager[None]]


@dataclass
class TimerRecord:
    """What one periodic job of this process has done, for ``GET /status``."""

    name: str
    interval_seconds: float
    runs: int = 0
    failures: int = 0
    last_started_at: datetime | None = None
    last_finished_at: datetime | None = None
    last_said: str | None = None
    last_error: str | None = None
    once: bool = False  # runs once at start (``first_at_start`` with no interval)
    # What `stop_timers` needs, never shown: the loop's task, whether it is in a pass (a
    # worker thread writing), and whether it may start another.
    task: asyncio.Task[None] | None = field(default=None, repr=False)
    in_pass: bool = False
    stopped: bool = False

    def wire(self) -> dict[str, Any]:
        def when(value: datetime | None) -> str | None:
            return None if value is None else format_time(value)
        return {"name": self.name, "interval_seconds": self.interval_seconds,
                "enabled": self.interval_seconds > 0 or self.once, "runs": self.runs,
                "failures": self.failures, "last_started_at": when(self.last_started_at),
                "last_finished_at": when(self.last_finished_at),
                "last_result": self.last_said, "last_error": self.last_error}


def periodic(job: Callable[[], str | None], interval: float, what: str, log: logging.Logger,
             *, first_at_start: bool = False,
             records: list[TimerRecord] | None = None) -> LifespanHook:
    """A lifespan hook that runs ``job`` in a worker thread every ``interval`` seconds
    while the app serves. ``job`` returns a line worth logging, or None. A failed run is
    logged and the next one still comes. ``interval <= 0`` runs nothing, or, with
    ``first_at_start``, only the first run. Each run is noted in a
    :class:`TimerRecord`, added to ``records`` (``GET /status`` shows them, and
    :func:`stop_timers` stops them at shutdown)."""
    record = TimerRecord(what, interval, once=first_at_start and interval <= 0)
    if records is not None:
        records.append(record)

    async def loop() -> None:
        if not first_at_start:
            await asyncio.sleep(interval)
        while not record.stopped:
            record.last_started_at = datetime.now(UTC)
            record.in_pass = True
            try:
                said = await run_in_threadpool(job)
                record.last_said, record.last_error = said, None
                if said:
                    log.info("%s: %s", what, said)
            except Exception as exc:  # a failed run must not kill the timer
                record.failures += 1
                record.last_error = f"{type(exc).__name__}: {exc}"
                if storage_down(exc) is not None:  # storage down or full: no bug
                    log.warning("%s failed, %s: %s", what, storage_trouble(exc),
                                driver_said(exc)[:300])
                elif isinstance(exc, AmpError):  # a refusal with its reason: no bug
                    log.warning("%s failed: %s", what, exc.message)
                else:
                    log.exception("%s failed", what)
            record.in_pass = False
            record.runs += 1
            record.last_finished_at = datetime.now(UTC)
            if interval <= 0 or record.stopped:
                return
            await asyncio.sleep(interval)

    @contextlib.asynccontextmanager
    async def running() -> AsyncIterator[None]:
        if interval <= 0 and not first_at_start:
            yield
            return
        task = record.task = asyncio.create_task(loop())
        try:
            yield
        finally:
            # After `stop_timers` the loop has ended or is left for good; without it, a
            # pass still running is abandoned to its thread here.
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    return running


async def stop_timers(records: list[TimerRecord], grace: float,
                      log: logging.Logger) -> list[str]:
    """Shutdown, before anything closes: no timer starts another pass, and the passes
    still running are waited for, then the other worker threads (requests uvicorn cut
    off at its own graceful timeout go on in theirs), all within ``grace`` seconds.
    Returns what still runs then: the names of the unfinished passes, and
    ``"N request thread(s)"``; empty when all ended.

    A pass is never cancelled: cancelling its task leaves its thread running, and the
    stores would be closed under its writes."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace
    for record in records:
        record.stopped = True
        if record.task is not None and not record.in_pass:
            record.task.cancel()  # asleep between passes: nothing to wait for
    busy = [r for r in records if r.task is not None and not r.task.done()]
    if busy:
        log.info("shutting down: waiting up to %g s for %s", grace,
                 ", ".join(r.name for r in busy))
        await asyncio.wait([r.task for r in busy if r.task is not None], timeout=grace)
    threads = anyio.to_thread.current_default_thread_limiter()
    while threads.borrowed_tokens and loop.time() < deadline:
        await asyncio.sleep(0.05)
    left = [r.name for r in records if r.task is not None and not r.task.done()]
    others = int(threads.borrowed_tokens) - len(left)  # each pass holds one thread too
    if others > 0:
        left.append(f"{others} request thread(s)")
    return left
