"""The background maintenance timer ``serve`` runs (one server at a time, by lease)."""

from __future__ import annotations

import logging
from datetime import timedelta

from ampup_memory.background import LifespanHook, TimerRecord, periodic
from ampup_memory.errors import AmpError
from ampup_memory.memory.readindex import lease_holder
from ampup_memory.memory.service import MemoryService
from ampup_memory.settings import Settings

log = logging.getLogger("ampup_memory.memory")


def maintenance_timer(svc: MemoryService, settings: Settings,
                      records: list[TimerRecord] | None = None) -> LifespanHook:
    """A lifespan hook for ``create_app``: runs the timer while the app serves."""
    holder = lease_holder()
    grace = timedelta(seconds=settings.memory_orphan_grace_seconds)
    lease = timedelta(seconds=settings.lease_seconds)

    def maintain() -> str | None:
        report = svc.maintain_if_free(grace, holder, lease)
        return None if report is None else str(report)

    return periodic(maintain, settings.memory_maintenance_interval_seconds,
                    "memory maintenance pass", log, records=records)


def workspace_timer(svc: MemoryService, settings: Settings,
                    records: list[TimerRecord] | None = None) -> LifespanHook:
    """Drops expired and deleted workspaces (``workspace gc``) while the app serves."""
    holder = lease_holder()
    lease = timedelta(seconds=settings.lease_seconds)

    def gc() -> str | None:
        report = svc.workspaces.gc_if_free(holder, lease)
        if report is None or not (report["dropped"] or report["scopes"]):
            return None
        return str(report)

    return periodic(gc, settings.workspace_gc_interval_seconds, "workspace gc pass", log,
                    records=records)


EXTRACTION_LEASE = "memory-extraction"


def extraction_timer(svc: MemoryService, settings: Settings,
                     records: list[TimerRecord] | None = None) -> LifespanHook:
    """Extraction passes over every scope's main branch while the app serves (one server at
    a time, by lease); nothing when no extract model is configured."""
    from ampup_memory.memory.extraction import extractor

    holder = lease_holder()
    lease = timedelta(seconds=settings.lease_seconds)
    interval = settings.extraction_interval_seconds
    ex = extractor(svc, settings)
    if ex.model is None:
        interval = 0

    def extract() -> str | None:
        with svc.index.hold_lease(EXTRACTION_LEASE, holder, lease) as held:
            return scan() if held else None

    def scan() -> str | None:
        said = []
        for scope in svc.tables.scopes():
            try:
                out = ex.run(str(scope))
            except AmpError as exc:  # a workspace gone meanwhile, a schema changed ...
                said.append(f"{scope}: {exc.message}")
                continue
            if out.read or out.error or out.refused:
                said.append(f"{scope}: read {out.read}, wrote {out.facts}"
                            + (f", refused {out.refused}" if out.refused else "")
                            + (f", error {out.error}" if out.error else ""))
        return "; ".join(said) or None

    return periodic(extract, interval, "extraction pass", log, records=records)


def warm_timer(svc: MemoryService, settings: Settings,
               records: list[TimerRecord] | None = None) -> LifespanHook:
    """Once at start, in a worker thread: what the first typed query of each scope's entity
    types would build (``memory.query.warm``), so that query does not pay for reading and
    evaluating the whole type (seconds at 50k facts). Up to ``query.ROW_CACHE`` types in
    all, scopes in name order: more would push each other out of what is kept. Nothing
    with ``settings.query_warm`` off (the record still shows the timer, disabled)."""
    from ampup_memory.memory import query

    def warm() -> str | None:
        warmed: list[str] = []
        for scope in svc.tables.scopes():
            if len(warmed) >= query.ROW_CACHE:
                break
            try:
                types = query.warm(svc, str(scope), limit=query.ROW_CACHE - len(warmed))
            except AmpError:  # a workspace gone meanwhile: its first query says so
                continue
            warmed.extend(f"{scope} {t}" for t in types)
        return f"typed queries warmed for {', '.join(warmed)}" if warmed else None

    return periodic(warm, 0, "typed query warm-up", log, first_at_start=settings.query_warm,
                    records=records)
