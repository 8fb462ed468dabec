"""Backup and restore of the embedded stores (SQLite cells, Iceberg catalog + warehouse).

A backup is a folder:

    manifest.json                      format, time, versions, every file with rows and SHA-256
    amp.db                             the AMP cell store (SQLite online backup: one instant)
    tables/<namespace>/<table>.parquet every Iceberg table's rows at one instant

Why the Iceberg tables are copied as rows, not as files: an Iceberg table's metadata names
its manifests and data files by absolute path, so a copied warehouse only works at the path
it was copied from. Rows restore anywhere. They are read at one instant: every table's
metadata location is taken in one catalog query, so each ledger row present has its data
rows present (data rows land before their ledger row). While the rows are read the backup
holds the maintenance lease, so no compaction or snapshot expiry deletes a file under it.

The search and read indexes are derived (``ampup-memory index rebuild`` recreates them from
the tables alone and answers identically), so a backup leaves them out and a restore
rebuilds them.

A restore with PostgreSQL or S3 settings (`into_fleet`: a laptop moving to several
servers) writes the same backup into those stores: the cells through the cell stores' own
code (`CellStore.copies` of the backup's file, `put_copies` of the target), the tables as
rows as ever. Its unfinished state is marked in the cell store (`set_restore_mark`), where
every server sees it; run again, it goes on where it stopped.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import sqlite3
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.catalog.sql import IcebergTables
from pyiceberg.table import StaticTable
from sqlalchemy import select
from sqlalchemy.orm import Session

from ampup_memory import __version__
from ampup_memory.amp.store.base import PASS_HISTORY, CellStore
from ampup_memory.errors import ConfigurationError, disk_full, driver_said
from ampup_memory.memory.scopes import SYSTEM_NAMESPACE, scope_from_namespace
from ampup_memory.memory.service import MAINTENANCE_LEASE as LEASE
from ampup_memory.memory.tables import (
    CATALOG_NAME,
    SCOPE_TABLES,
    SYSTEM_TABLES,
    MemoryTables,
)
from ampup_memory.progress import Progress
from ampup_memory.settings import Settings, ensure_home, file_in_the_way
from ampup_memory.sqlite_connections import sqlite_path
from ampup_memory.web.jsontext import loads

FORMAT = 1
MANIFEST = "manifest.json"
# In DEST from a backup's first write until its manifest is in place, and in a home from a
# restore's first write until its index is rebuilt: a run killed with kill -9 (or a power
# cut) runs no clean-up, and the marker tells the same command run again that what it
# finds is its own unfinished work, to clear and write again.
BACKUP_UNFINISHED = ".backup-unfinished"
RESTORE_UNFINISHED = ".restore-unfinished"
LEASE_WAIT = timedelta(minutes=5)

Step = Callable[[str, int], None]  # (what, units done) for a progress bar


class BackupError(ConfigurationError):
    """A backup or restore that cannot proceed; the message says what to do."""


def sqlite_file(uri: str) -> Path | None:
    """The file of a ``sqlite:///path`` URI, read as the stores read it (`sqlite_path`:
    ``~`` expanded), or None for any other store."""
    if urlsplit(uri).scheme != "sqlite":
        return None
    return sqlite_path(uri)


def embedded(settings: Settings) -> list[str]:
    """Which stores are not embedded (each named for the message), or [] when all are."""
    outside = []
    if sqlite_file(settings.resolved_store_uri) is None:
        outside.append("AMP cell store (AMP_STORE_URI): use pg_dump")
    if sqlite_file(settings.resolved_catalog_uri) is None:
        outside.append("Iceberg catalog (AMPUP_MEMORY_CATALOG_URI): use pg_dump")
    if urlsplit(settings.resolved_warehouse).scheme != "file":
        outside.append("Iceberg warehouse (AMPUP_MEMORY_WAREHOUSE): use your object "
                       "store's versioning or replication")
    return outside


def _require_embedded(settings: Settings, verb: str) -> None:
    outside = embedded(settings)
    if outside:
        raise BackupError(f"`{verb}` copies the embedded stores only; this server uses "
                          + "; ".join(outside)
                          + ". The search index is derived: `ampup-memory index rebuild`.")


def _require_stores(settings: Settings) -> None:
    """A home with neither cells nor tables is a mistyped one; opening the tables there
    would create a catalog, an index and a warehouse just to back up nothing."""
    amp_db = sqlite_file(settings.resolved_store_uri)
    catalog = sqlite_file(settings.resolved_catalog_uri)
    if not any(path is not None and path.exists() for path in (amp_db, catalog)):
        raise BackupError(f"nothing to back up: no AMP cell store ({amp_db}) and no catalog "
                          f"({catalog}); is --home / AMPUP_MEMORY_HOME right?")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _sqlite_copy(source: Path, dest: Path) -> None:
    """SQLite's online backup: one consistent instant, while writers go on."""
    src = sqlite3.connect(f"file:{source}?mode=ro", uri=True, timeout=60)
    try:
        out = sqlite3.connect(dest)
        try:
            src.backup(out, pages=4096)
        finally:
            out.close()
    finally:
        src.close()


@contextmanager
def _maintenance_paused(tables: MemoryTables, settings: Settings) -> Iterator[None]:
    """Hold the maintenance lease (waiting for a running pass to end) while files are read."""
    from ampup_memory.memory.readindex import ReadIndex

    index = ReadIndex(settings.resolved_index_uri)
    holder = f"backup-{os.getpid()}"
    try:  # renewed while the files are read: a backup killed mid-copy frees it in a lease
        with index.hold_lease(LEASE, holder, timedelta(seconds=settings.lease_seconds),
                              wait=LEASE_WAIT.total_seconds(), poll=0.5) as held:
            if not held:
                raise BackupError("table maintenance has been running for 5 minutes; "
                                  "try the backup again when it ends")
            yield
    finally:
        index.close()


def _locations(tables: MemoryTables) -> dict[tuple[str, str], str]:
    """Every table's metadata location, in one query: one instant of the catalog."""
    stmt = select(IcebergTables.table_namespace, IcebergTables.table_name,
                  IcebergTables.metadata_location).where(
        IcebergTables.catalog_name == CATALOG_NAME)
    with Session(tables.catalog.engine) as session:
        return {(ns, name): loc for ns, name, loc in session.execute(stmt) if loc}


@dataclass
class Report:
    path: Path
    files: list[dict[str, Any]]

    def wire(self) -> dict[str, Any]:
        return {"path": str(self.path), "tables": sum(1 for f in self.files if f["kind"] ==
                                                     "table"),
                "rows": sum(int(f.get("rows", 0)) for f in self.files if f["kind"] == "table"),
                "bytes": sum(int(f["bytes"]) for f in self.files)}


def backup(settings: Settings, dest: Path, step: Step | None = None) -> Report:
    """Write a backup of the embedded stores into ``dest`` (new or empty)."""
    _require_embedded(settings, "backup")
    _require_stores(settings)
    step = step or (lambda what, n: None)
    if dest.exists() and any(dest.iterdir()):
        if not (dest / BACKUP_UNFINISHED).is_file():
            raise BackupError(f"{dest} is not empty; back up into a new folder")
        _remove(dest.iterdir())  # a backup killed mid-way: all of it was its own
    amp_db = sqlite_file(settings.resolved_store_uri)
    assert amp_db is not None
    created = not dest.exists()
    try:
        dest.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a "storage error" said nothing of DEST being the trouble
        blocker = file_in_the_way(dest)
        raise BackupError(f"cannot make the backup folder {dest}: "
                          + (f"{blocker} is a file, not a folder" if blocker is not None
                             else exc.strerror or str(exc))) from exc
    try:
        (dest / BACKUP_UNFINISHED).write_bytes(b"")
        return _backup_into(settings, amp_db, dest, step)
    except BaseException as exc:
        # DEST was new or empty: a copy without its manifest is no backup, and left behind
        # it made the same command refuse DEST as not empty.
        _remove(dest.iterdir())
        if created:
            dest.rmdir()
        if isinstance(exc, Exception) and disk_full(exc):  # the usual cause: DEST's disk
            raise BackupError(f"disk full while writing the backup into {dest} "
                              f"({driver_said(exc)}); the partial copy was removed: free "
                              "space there, or back up into a folder on another disk"
                              ) from exc
        raise


def _backup_into(settings: Settings, amp_db: Path, dest: Path, step: Step) -> Report:
    files: list[dict[str, Any]] = []
    if amp_db.exists():
        _sqlite_copy(amp_db, dest / "amp.db")
        files.append({"kind": "amp", "path": "amp.db"})
    step("AMP cells", 1)
    tables = MemoryTables.open(settings)
    try:
        with _maintenance_paused(tables, settings):
            # Metadata files of old versions are deleted a few commits later; load every
            # table right after the one catalog query and start again if one went missing.
            for attempt in range(5):
                locations = _locations(tables)
                try:
                    loaded = {key: StaticTable.from_metadata(loc, tables.catalog.properties)
                              for key, loc in sorted(locations.items())}
                    break
                except FileNotFoundError:
                    if attempt == 4:
                        raise
            for (namespace, name), table in loaded.items():
                rows = table.scan().to_arrow()
                rel = f"tables/{namespace}/{name}.parquet"
                (dest / rel).parent.mkdir(parents=True, exist_ok=True)
                pq.write_table(rows, dest / rel)
                files.append({"kind": "table", "path": rel, "namespace": namespace,
                              "table": name, "rows": rows.num_rows})
                step(f"{namespace}.{name}", 1)
    finally:
        tables.close()
    for f in files:
        f["bytes"] = (dest / f["path"]).stat().st_size
        f["sha256"] = _sha256(dest / f["path"])
    manifest = {"format": FORMAT, "version": __version__,
                "created_at": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
                "files": files}
    partial = dest / (MANIFEST + ".partial")
    partial.write_text(json.dumps(manifest, indent=2) + "\n")
    os.replace(partial, dest / MANIFEST)  # whole or absent
    (dest / BACKUP_UNFINISHED).unlink()
    return Report(dest, files)


def backup_steps(settings: Settings) -> int:
    """How many steps ``backup`` reports (for a progress bar's total)."""
    _require_embedded(settings, "backup")
    _require_stores(settings)
    tables = MemoryTables.open(settings)
    try:
        return 1 + len(_locations(tables))
    finally:
        tables.close()


def _entry_ok(f: Any) -> bool:
    if not isinstance(f, dict) or f.get("kind") not in ("amp", "table"):
        return False
    names = ("path", "sha256", "namespace", "table") if f["kind"] == "table" else (
        "path", "sha256")
    if not all(isinstance(f.get(name), str) for name in names):
        return False
    if f["kind"] == "amp":
        return True
    # A namespace no scope can have reached the catalog as a traceback, and a table named
    # twice was appended twice: every row of it doubled in the restored home.
    namespace, name = f["namespace"], f["table"]
    if namespace == SYSTEM_NAMESPACE:
        return name in SYSTEM_TABLES
    return scope_from_namespace(namespace) is not None and name in SCOPE_TABLES


def _files_ok(files: Any) -> bool:
    if not isinstance(files, list) or not all(_entry_ok(f) for f in files):
        return False
    keys = [(f["kind"], f.get("namespace"), f.get("table")) for f in files]
    return len(set(keys)) == len(keys)


def read_manifest(src: Path) -> dict[str, Any]:
    try:
        # A manifest nested 10,000 deep was a RecursionError's traceback.
        manifest = loads((src / MANIFEST).read_text(), MANIFEST, finite=False)
    except (OSError, ValueError) as exc:
        raise BackupError(f"{src} is not a backup ({MANIFEST} unreadable: {exc})") from exc
    if not isinstance(manifest, dict):
        raise BackupError(f"{src} is not a backup ({MANIFEST} is not a JSON object)")
    if manifest.get("format") != FORMAT:
        raise BackupError(f"{src}: unknown backup format {manifest.get('format')!r}")
    files: Any = manifest.get("files")
    if not _files_ok(files):
        raise BackupError(f"{src}: {MANIFEST} is damaged (its list of files is unreadable)")
    for f in files:
        path = _inside(src, f["path"])
        if not path.is_file() or _sha256(path) != f["sha256"]:
            raise BackupError(f"{src}: {f['path']} is missing or damaged (checksum differs)")
    return manifest


def _inside(root: Path, rel: str) -> Path:
    path = (root / rel).resolve()
    if not path.is_relative_to(root.resolve()):
        raise BackupError(f"backup manifest names a file outside the backup: {rel!r}")
    return path


def _occupied(settings: Settings) -> list[str]:
    found = []
    for label, uri in (("amp.db", settings.resolved_store_uri),
                       ("catalog", settings.resolved_catalog_uri),
                       ("index", settings.resolved_index_uri)):
        path = sqlite_file(uri)
        if path is not None and path.exists():
            found.append(f"{label} ({path})")
    warehouse = Path(urlsplit(settings.resolved_warehouse).path)
    if warehouse.exists() and any(warehouse.iterdir()):
        found.append(f"warehouse ({warehouse})")
    return found


def into_fleet(settings: Settings) -> bool:
    """Whether a restore writes into stores outside the home folder (PostgreSQL, an
    ``s3://`` warehouse): then the AMP cells are copied cell by cell through the stores
    (`CellStore.put_copies`), not as a file, and an unfinished restore is marked in the
    cell store, where every server sees it, not by a file in one machine's home."""
    return bool(embedded(settings))


def restore(settings: Settings, src: Path, step: Step | None = None) -> dict[str, Any]:
    """Restore a backup into the (fresh) stores ``settings`` names; the caller rebuilds
    the indexes afterwards (and, `into_fleet`, then calls `finish_restore`)."""
    step = step or (lambda what, n: None)
    manifest = read_manifest(src)
    if into_fleet(settings):
        return _restore_into_fleet(settings, src, manifest, step)
    occupied = _occupied(settings)
    if occupied:
        raise BackupError("restore writes into a fresh home only; found "
                          + ", ".join(occupied)
                          + ". Point AMPUP_MEMORY_HOME (or --home) at an empty folder.")
    ensure_home(settings)
    amp_db = sqlite_file(settings.resolved_store_uri)
    assert amp_db is not None
    for f in manifest["files"]:
        if f["kind"] == "amp":
            amp_db.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(_inside(src, f["path"]), amp_db)
            step("AMP cells", 1)
    tables = MemoryTables.open(settings)
    try:
        rows = _restore_tables(tables, src, manifest, step)
    finally:
        tables.close()
    return {"restored_from": str(src), "backup_created_at": manifest.get("created_at"),
            "rows": rows}


def _restore_tables(tables: MemoryTables, src: Path, manifest: dict[str, Any],
                    step: Step) -> int:
    """Append every table's rows, one commit a table. A table already holding the
    backup's number of rows is this restore's, committed before it was stopped: left as
    it is. One holding other rows is not: refused."""
    rows = 0
    for f in manifest["files"]:
        if f["kind"] != "table":
            continue
        namespace, name = f["namespace"], f["table"]
        layout = SYSTEM_TABLES if namespace == SYSTEM_NAMESPACE else SCOPE_TABLES
        tables.ensure_namespace(namespace, layout)
        held = _rows_held(tables, namespace, name)
        if held is not None and held == f.get("rows"):
            rows += held
            step(f"{namespace}.{name}", 1)
            continue
        if held is not None:
            raise BackupError(f"the Iceberg table {namespace}.{name} already holds {held} "
                              f"rows, not this backup's {f.get('rows')}: restore into "
                              "empty stores")
        data: pa.Table = pq.read_table(_inside(src, f["path"]))
        if data.num_rows:
            schema = layout[name]
            unknown = [c for c in data.schema.names if c not in schema.names]
            if unknown:  # dropping them would lose what a newer version wrote
                raise BackupError(f"{src}: {f['path']} has columns this version does "
                                  f"not know ({', '.join(unknown)}); restore it with "
                                  f"the version that made it ({manifest.get('version')})")
            for field in schema:  # added since the backup: null, as on upgrade
                if field.name not in data.schema.names and field.nullable:
                    data = data.append_column(field, pa.nulls(data.num_rows, field.type))
            try:
                rows_here = data.select(schema.names).cast(schema)
            except (pa.ArrowException, ValueError, KeyError) as exc:
                raise BackupError(f"{src}: {f['path']} does not hold the rows of "
                                  f"{namespace}.{name} this version reads ({exc})") from exc
            tables.append(tables.private(namespace, name), rows_here)
        rows += data.num_rows
        step(f"{namespace}.{name}", 1)
    return rows


def _rows_held(tables: MemoryTables, namespace: str, name: str) -> int | None:
    """How many rows the table holds, None when it has never been written."""
    table = tables.private(namespace, name)
    snapshot = table.current_snapshot()
    if snapshot is None:
        return None
    total = snapshot.summary.get("total-records") if snapshot.summary else None
    return int(total) if total is not None else table.scan().to_arrow().num_rows


COPY_BATCH = 500  # cells a transaction when copying them into another store


def _mark(manifest: dict[str, Any]) -> str:
    """The unfinished restore's name in the cell store: which backup it is, wherever its
    folder is now (a rerun of the same one goes on, another is refused)."""
    digest = hashlib.sha256(json.dumps(manifest["files"], sort_keys=True).encode())
    return f"the backup made {manifest.get('created_at')} ({digest.hexdigest()[:16]})"


def _held(store: CellStore, tables: MemoryTables) -> list[str]:
    """What the fleet's stores hold already (a restore writes into empty ones only). A
    server started on them before holds nothing that counts: its lifecycle passes over
    no cell (the backup's history is added to them), its empty system tables."""
    found = []
    if n := store.count():
        found.append(f"AMP cells ({n})")
    if n := len(store.list_keys()):
        found.append(f"API keys ({n})")
    written = [f"{ns}.{name}" for ns, name in sorted(_locations(tables))
               if _rows_held(tables, ns, name) is not None]
    if written:
        found.append(f"Iceberg tables with rows ({len(written)}: {', '.join(written[:3])}"
                     + (", …" if len(written) > 3 else "") + ")")
    return found


def _restore_into_fleet(settings: Settings, src: Path, manifest: dict[str, Any],
                        step: Step) -> dict[str, Any]:
    from ampup_memory.amp.store.registry import open_store
    from ampup_memory.serving import alone

    ensure_home(settings)
    mark = _mark(manifest)
    # No vector width: the vector indexes are built once over every cell in
    # `finish_restore`, not grown one insert at a time.
    store = open_store(settings.resolved_store_uri, None)
    try:
        tables = MemoryTables.open(settings)
        try:
            found = store.restore_mark()
            if found is None:
                held = _held(store, tables)
                if held:
                    raise BackupError("restore writes into empty stores only; these hold "
                                      + ", ".join(held) + ". Point the settings at new "
                                      "databases (and a new warehouse prefix).")
                store.set_restore_mark(mark)
            elif found != mark:
                raise BackupError(f"these stores hold an unfinished restore of another "
                                  f"backup ({found}); run that restore again to finish "
                                  "it, or start over with new databases")
            # Marked: no server starts on the stores from now on. One started before is
            # found by the lease every server holds on the index (refused: stop it and run
            # the same command again).
            with alone(settings):
                pass
            cells = _copy_cells(store, src, manifest, settings.home, step)
            rows = _restore_tables(tables, src, manifest, step)
        finally:
            tables.close()
    finally:
        store.close()
    return {"restored_from": str(src), "backup_created_at": manifest.get("created_at"),
            "rows": rows, "cells": cells, "resumed": found is not None}


def _copy_cells(store: CellStore, src: Path, manifest: dict[str, Any], home: Path,
                step: Step) -> int:
    """Every cell, API key, lifecycle pass and the embedder record of the backup's cell
    store into ``store``, through the stores' own code (`CellStore.copies`,
    `put_copies`), in batches: a large store never sits in memory. The backup's file is
    opened as a copy (opening a store may upgrade its layout: the backup stays as its
    checksum says). Run again, it adds only what is missing."""
    from ampup_memory.amp.store.registry import open_store

    amp = next((f for f in manifest["files"] if f["kind"] == "amp"), None)
    if amp is None:
        return 0
    scratch = home / ".restore-cells.db"
    _remove(_scratch_files(scratch))
    shutil.copyfile(_inside(src, amp["path"]), scratch)
    source = open_store(f"sqlite:///{scratch}", None)
    try:
        after: str | None = None
        while batch := source.copies(after, COPY_BATCH):
            store.put_copies(batch)
            after = batch[-1].stored.cell.id
            step("AMP cells", len(batch))
        for key in source.list_keys():
            if store.key_by_hash(key.key_hash) is None:
                store.put_key(key)
        have = {(p.started_at, p.holder) for p in store.recent_passes(PASS_HISTORY)}
        for record in reversed(source.recent_passes(PASS_HISTORY)):  # oldest first
            if (record.started_at, record.holder) not in have:
                store.record_pass(record)
        model = source.embedding_model()
        if model is not None:  # what the copied vectors come from
            store.set_embedding_model(model)
        return source.count()
    finally:
        source.close()
        _remove(_scratch_files(scratch))


def _scratch_files(scratch: Path) -> list[Path]:
    return [p for p in scratch.parent.glob(scratch.name + "*")] if scratch.parent.is_dir() \
        else []


def finish_restore(settings: Settings, progress: Progress | None = None) -> dict[str, Any]:
    """The last step of a restore `into_fleet`, after the index rebuild: the cell store
    opened with the fleet's embedder, as a server opens it (its vector index built over
    every copied cell), every vector brought to that embedder (nothing to do when it is
    the laptop's: `amp/reembed.py`), the large owners' vector indexes made, then the
    unfinished-restore mark cleared: from then on servers start on the stores."""
    from ampup_memory.amp.reembed import ensure_embedding_model
    from ampup_memory.amp.store.registry import open_configured_store
    from ampup_memory.search.embed import build_embedder

    embedder = build_embedder(settings)
    store = open_configured_store(settings, embedder.dimensions)
    try:
        report = ensure_embedding_model(store, embedder, progress=progress)
        owners = store.tend_owner_indexes()
        store.set_restore_mark(None)
        return {"cells": store.count(), **report.wire(),
                "owner_indexes": None if owners is None else owners.wire()}
    finally:
        store.close()


def refuse_marked_store(store: CellStore) -> None:
    """A cell store a restore into the fleet's stores was stopped in holds part of a
    backup: refused until the same restore runs again and finishes."""
    mark = store.restore_mark()
    if mark is not None:
        raise BackupError(f"the AMP cell store holds a restore that was stopped before it "
                          f"finished ({mark}); run the same `ampup-memory restore` with these "
                          "settings again (it goes on where it stopped)")


def _remove(paths: Iterable[Path]) -> None:
    """Delete what a failed backup or restore wrote: folders with their contents, files
    and links themselves (a link's target is never followed)."""
    for path in list(paths):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


def _written_by_restore(settings: Settings) -> set[Path]:
    """What a restore may create: each SQLite store with the files named after it (``-wal``,
    ``.keywords``, ``.graphs`` …) and whatever is in the warehouse folder."""
    found: set[Path] = set()
    for uri in (settings.resolved_store_uri, settings.resolved_catalog_uri,
                settings.resolved_index_uri):
        path = sqlite_file(uri)
        if path is None or not path.parent.is_dir():
            continue
        found.update(p for p in path.parent.iterdir() if p.name == path.name
                     or p.name.startswith((path.name + "-", path.name + ".")))
    warehouse = Path(urlsplit(settings.resolved_warehouse).path)
    if warehouse.is_dir():
        found.update(warehouse.iterdir())
    return found


@contextmanager
def undone_on_failure(settings: Settings) -> Iterator[None]:
    """Around a whole restore (tables and index): when it fails or is interrupted, remove
    what it wrote. A half-restored home served its cells without some tables, and refused
    the next restore as not fresh; it only ever held what this restore put there. A
    restore killed outright (kill -9) leaves its marker in the home: run again, it removes
    what that one wrote first."""
    marker = settings.home / RESTORE_UNFINISHED
    home_existed = settings.home.exists()
    if marker.is_file():
        _remove(_written_by_restore(settings))
    if _occupied(settings):  # restore refuses it; files appearing meanwhile are not ours
        yield
        return
    warehouse = Path(urlsplit(settings.resolved_warehouse).path)
    warehouse_existed = warehouse.exists()
    before = _written_by_restore(settings)
    settings.home.mkdir(parents=True, exist_ok=True)
    marker.write_bytes(b"")
    try:
        yield
    except BaseException:
        _remove(_written_by_restore(settings) - before)
        marker.unlink(missing_ok=True)
        for folder, existed in ((warehouse, warehouse_existed), (settings.home, home_existed)):
            if not existed:
                with contextlib.suppress(OSError):  # left when anything else is in it
                    folder.rmdir()
        raise
    marker.unlink()


def refuse_unfinished_restore(settings: Settings) -> None:
    """A home a restore was killed in holds part of a backup (some tables, no index):
    served, that part would read as the whole. Refused in one line until the same restore
    runs again (it starts over) or the home is removed."""
    if (settings.home / RESTORE_UNFINISHED).is_file():
        raise BackupError(f"{settings.home} holds a restore that was stopped before it "
                          "finished; run the same `ampup-memory restore SRC --home "
                          f"{settings.home}` again (it starts over), or remove the folder")


def restore_steps(settings: Settings, src: Path) -> int:
    """How many steps ``restore`` reports: a file each, or `into_fleet`, a table each
    and a cell each."""
    manifest = read_manifest(src)
    if not into_fleet(settings):
        return len(manifest["files"])
    steps = 0
    for f in manifest["files"]:
        if f["kind"] == "table":
            steps += 1
        else:
            with contextlib.closing(sqlite3.connect(
                    f"file:{_inside(src, f['path'])}?mode=ro&immutable=1", uri=True)) as conn:
                steps += int(conn.execute("SELECT count(*) FROM cells").fetchone()[0])
    return steps
