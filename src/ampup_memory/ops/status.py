"""What a running deployment is made of and how it is doing: ``GET /status`` and
``ampup-memory status`` answer with :func:`collect`."""

from __future__ import annotations

import platform
import sqlite3
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from ampup_memory import __version__
from ampup_memory.background import TimerRecord
from ampup_memory.memory.scopes import MAIN
from ampup_memory.ops.backup import sqlite_file
from ampup_memory.settings import mask_uri
from ampup_memory.timefmt import utc_text

if TYPE_CHECKING:
    from ampup_memory.runtime import Runtime
    from ampup_memory.search.feed import Feed
    from ampup_memory.settings import Settings


def _file_bytes(path: Path) -> int | None:
    """A SQLite file with its WAL, or a folder's files, in bytes; None if absent."""
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    if not path.exists():
        return None
    extra = [Path(f"{path}-wal"), Path(f"{path}-shm"), Path(f"{path}.keywords")]
    return path.stat().st_size + sum(_file_bytes(p) or 0 for p in extra if p.exists())


def _store(uri: str) -> dict[str, Any]:
    path = sqlite_file(uri)
    return {"uri": mask_uri(uri), "engine": "sqlite" if path else "postgresql",
            "bytes": _file_bytes(path) if path else None}


def _versions() -> dict[str, str]:
    found = {"ampup-memory": __version__, "python": platform.python_version(),
             "sqlite": sqlite3.sqlite_version}
    for package in ("pyiceberg", "pyarrow", "fastapi", "mcp"):
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            continue
    return found


def collect(runtime: Runtime, feed: Feed | None = None,
            timers: list[TimerRecord] | None = None) -> dict[str, Any]:
    """The status report. ``feed`` and ``timers`` are the serving process's (the CLI has
    neither: its scopes have no ``search_index_lag``)."""
    settings = runtime.settings
    warehouse = settings.resolved_warehouse
    warehouse_path = Path(urlsplit(warehouse).path) if warehouse.startswith("file:") else None
    memory = runtime.memory
    scopes = []
    for scope in memory.tables.scopes():
        name = str(scope)
        head = memory.index.head(name, MAIN)
        entry: dict[str, Any] = {
            "scope": name,
            "commits": 0 if head is None else head.seq,
            # Ledger rows the read index has seen but not yet applied.
            "read_index_lag": len(memory.index.pending(name)),
        }
        if feed is not None:
            entry["search_index_lag"] = feed.lag(name, MAIN)
        scopes.append(entry)
    model = runtime.store.embedding_model()
    passes = runtime.store.recent_passes(1)
    return {
        "versions": _versions(),
        "stores": {
            "amp": {**_store(settings.resolved_store_uri), "cells": runtime.store.count(),
                    "graphs": runtime.store.graphs(),
                    # Bytes of cell vectors in this process; on PostgreSQL the HNSW index,
                    # the cells table and shared_buffers.
                    "vector_memory": runtime.store.vector_memory()},
            "catalog": _store(settings.resolved_catalog_uri),
            "warehouse": {"location": mask_uri(warehouse),
                          "bytes": _file_bytes(warehouse_path) if warehouse_path else None},
            "index": _store(settings.resolved_index_uri),
        },
        "scopes": scopes,
        "commits": sum(s["commits"] for s in scopes),
        "embedder": {"configured": runtime.embedder.name,
                     "dimensions": runtime.embedder.dimensions,
                     "recorded": None if model is None else model.name},
        "model": _models(settings),
        "timers": [t.wire() for t in timers] if timers is not None else None,
        # This process's HNSW graphs (SQLite index): built, loaded from their saved files,
        # files rejected, saves, builds running; None for the CLI and PostgreSQL.
        "search_graphs": feed.engine.index.graphs() if feed is not None else None,
        "last_lifecycle_pass": None if not passes else {
            "finished_at": utc_text(passes[0].finished_at), "holder": passes[0].holder,
            "evaluated": passes[0].evaluated, "transitions": passes[0].transitions,
            "purged": passes[0].purged},
    }


def _models(settings: Settings) -> dict[str, Any]:
    """Each model role's configured model name (None: that work does not run); never a
    URL or key."""
    from ampup_memory.models.chat import Role, endpoint_for

    found = {role.value: endpoint_for(settings, role) for role in Role}
    return {role: ep.model if ep else None for role, ep in found.items()}
