"""The background maintenance timer ``serve`` runs (one server at a time, by lease)."""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

from ampup_memory.background import LifespanHook, TimerRecord, periodic
from ampup_memory.errors import AmpError
from ampup_memory.memory.readindex import ReadIndex
from ampup_memory.memory.service import MemoryService
from ampup_memory.settings import Settings

log = logging.getLogger("ampup_memory.memory")


def maintenance_timer(svc: MemoryService, settings: Settings,
                      records: list[TimerRecord] | None = None) -> LifespanHook:
    """A lifespan hook for ``create_app``: runs the timer while the app serves."""
    holder = uuid.uuid4().hex[:16]
    grace = timedelta(seconds=settings.memory_orphan_grace_seconds)

    def maintain() -> str | None:
        report = svc.maintain_if_free(grace, holder)
        return None if report is None else str(report)

    return periodic(maintain, settings.memory_maintenance_interval_seconds,
                    "memory maintenance pass", log, records=records)


def workspace_timer(svc: MemoryService, settings: Settings,
                    records: list[TimerRecord] | None = None) -> LifespanHook:
    """Drops expired and deleted workspaces (``workspace gc``) while the app serves."""
    holder = uuid.uuid4().hex[:16]

    def gc() -> str | None:
        report = svc.workspaces.gc_if_free(holder)
        if report is None or not (report["dropped"] or report["scopes"]):
            return None
        return str(report)

    return periodic(gc, settings.workspace_gc_interval_seconds, "workspace gc pass", log,
                    records=records)


EXTRACTION_LEASE = "memory-extraction"
# The extraction pass holds its lease for this long and renews it every third of it while
# the pass runs, so a server killed mid-pass (kill -9: no release) hands over within a
# minute. A pass that outlives a lost lease is harmless: each batch's commit refuses
# episodes another pass read meanwhile (ALREADY_READ).
EXTRACTION_LEASE_TIME = timedelta(seconds=60)


@contextmanager
def renewing(index: ReadIndex, name: str, holder: str, ttl: timedelta) -> Iterator[None]:
    """Keep renewing a lease the caller holds (take_lease by its holder) every ``ttl / 3``
    until the block ends; a thread of this process, so it dies with the process."""
    stop = threading.Event()

    def beat() -> None:
        from ampup_memory.memory.service import utcnow

        while not stop.wait(ttl.total_seconds() / 3):
            try:
                if not index.take_lease(name, holder, utcnow(), ttl):
                    return  # another server has it now (ours ran out): nothing to keep
            except Exception:  # the index unreachable a moment: try again next beat
                log.warning("renewing lease %s failed", name, exc_info=True)

    thread = threading.Thread(target=beat, name=f"lease {name}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def extraction_timer(svc: MemoryService, settings: Settings,
                     records: list[TimerRecord] | None = None) -> LifespanHook:
    """Extraction passes over every scope's main branch while the app serves (one server at
    a time, by lease); nothing when no extract model is configured."""
    from ampup_memory.memory.extraction import extractor

    holder = uuid.uuid4().hex[:16]
    interval = settings.extraction_interval_seconds
    ex = extractor(svc, settings)
    if ex.model is None:
        interval = 0

    def extract() -> str | None:
        from ampup_memory.memory.service import utcnow

        lease = EXTRACTION_LEASE_TIME
        if not svc.index.take_lease(EXTRACTION_LEASE, holder, utcnow(), lease):
            return None
        try:
            with renewing(svc.index, EXTRACTION_LEASE, holder, lease):
                return extract_all()
        finally:
            svc.index.release_lease(EXTRACTION_LEASE, holder)

    def extract_all() -> str | None:
        said = []
        for scope in svc.tables.scopes():
            try:
                out = ex.run(str(scope))
            except AmpError as exc:  # a workspace gone meanwhile, a schema changed ...
                said.append(f"{scope}: {exc.message}")
                continue
            if out.read or out.error:
                said.append(f"{scope}: read {out.read}, wrote {out.facts}"
                            + (f", error {out.error}" if out.error else ""))
        return "; ".join(said) or None

    return periodic(extract, interval, "extraction pass", log, records=records)
