"""The background maintenance timer ``serve`` runs (one server at a time, by lease)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from datetime import timedelta

from fastapi.concurrency import run_in_threadpool

from ampup_memory.memory.service import MemoryService
from ampup_memory.settings import Settings

log = logging.getLogger("ampup_memory.memory")


async def _loop(svc: MemoryService, interval: int, grace: timedelta) -> None:
    holder = uuid.uuid4().hex[:16]
    while True:
        await asyncio.sleep(interval)
        try:
            report = await run_in_threadpool(svc.maintain_if_free, grace, holder)
            if report is not None:
                log.info("memory maintenance: %s", report)
        except Exception:  # a failed pass must not kill the timer
            log.exception("memory maintenance pass failed")


def maintenance_timer(svc: MemoryService,
                      settings: Settings) -> Callable[[], AbstractAsyncContextManager[None]]:
    """A lifespan hook for ``create_app``: runs the timer while the app serves."""

    @contextlib.asynccontextmanager
    async def running() -> AsyncIterator[None]:
        interval = settings.memory_maintenance_interval_seconds
        if interval <= 0:
            yield
            return
        grace = timedelta(seconds=settings.memory_orphan_grace_seconds)
        task = asyncio.create_task(_loop(svc, interval, grace))
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    return running
