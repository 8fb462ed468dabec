"""Periodic jobs a server runs while it serves: the lifecycle pass, Iceberg upkeep and the
search index's catch-up. One loop and one way to stop it, used by all three."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager

from fastapi.concurrency import run_in_threadpool

LifespanHook = Callable[[], AbstractAsyncContextManager[None]]


def periodic(job: Callable[[], str | None], interval: float, what: str, log: logging.Logger,
             *, first_at_start: bool = False) -> LifespanHook:
    """A lifespan hook that runs ``job`` in a worker thread every ``interval`` seconds
    while the app serves. ``job`` returns a line worth logging, or None. A failed run is
    logged and the next one still comes. ``interval <= 0`` runs nothing, or, with
    ``first_at_start``, only the first run."""

    async def loop() -> None:
        if not first_at_start:
            await asyncio.sleep(interval)
        while True:
            try:
                said = await run_in_threadpool(job)
                if said:
                    log.info("%s: %s", what, said)
            except Exception:  # a failed run must not kill the timer
                log.exception("%s failed", what)
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
