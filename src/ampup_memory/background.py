"""Periodic jobs a server runs while it serves: the lifecycle pass, Iceberg upkeep and the
search index's catch-up. One loop and one way to stop it, used by all three."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from fastapi.concurrency import run_in_threadpool

from ampup_memory.errors import storage_down

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

    def wire(self) -> dict[str, Any]:
        def when(value: datetime | None) -> str | None:
            return None if value is None else value.isoformat().replace("+00:00", "Z")
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
    :class:`TimerRecord`, added to ``records`` (``GET /status`` shows them)."""
    record = TimerRecord(what, interval, once=first_at_start and interval <= 0)
    if records is not None:
        records.append(record)

    async def loop() -> None:
        if not first_at_start:
            await asyncio.sleep(interval)
        while True:
            record.last_started_at = datetime.now(UTC)
            try:
                said = await run_in_threadpool(job)
                record.last_said, record.last_error = said, None
                if said:
                    log.info("%s: %s", what, said)
            except Exception as exc:  # a failed run must not kill the timer
                record.failures += 1
                record.last_error = f"{type(exc).__name__}: {exc}"
                if storage_down(exc) is not None:  # storage down: no bug
                    log.warning("%s failed, storage unavailable: %s", what,
                                " ".join(str(exc).split())[:300])
                else:
                    log.exception("%s failed", what)
            record.runs += 1
            record.last_finished_at = datetime.now(UTC)
            if interval <= 0:
                return
            await asyncio.sleep(interval)

    @contextlib.asynccontextmanager
    async def running() -> AsyncIterator[None]:
        if interval <= 0 and not first_at_start:
            yield
            return
        task = asyncio.create_task(loop())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    return running
