"""Table maintenance pyiceberg 0.12 does not do for us.

- **Snapshot expiry.** Every commit copies the table metadata many times, so commit time
  grows with the snapshots kept; we keep few. Branch and tag heads are never expired, nor
  any snapshot the ``protected`` hook names (live pins and snapshots, snapshots.py: what
  they hold and why our own reads need no old snapshot is explained there).
- **Compaction.** Each small commit leaves a small file; reads and manifest merges slow down
  as they pile up. Small files are rewritten into one by an explicit file overwrite: exactly
  the files read are replaced, so a concurrent append is never lost (the commit fails and is
  tried again on the next pass).
- **Orphan rows.** Rows whose commit never reached the ledger (a crash between the two) are
  invisible; they are deleted once older than a grace period longer than any commit takes.
- **Orphan files.** Files under a table's location that no kept snapshot or metadata file
  refers to (expired manifests, compacted data, crashed writes), again after a grace period.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

from pyarrow import fs as pafs
from pyiceberg.exceptions import CommitFailedException, ValidationException
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.io.pyarrow import ArrowScan, _dataframe_to_data_files
from pyiceberg.table import Table

from ampup_memory.memory import warehouse
from ampup_memory.memory.tables import MemoryTables, is_in

log = logging.getLogger("ampup_memory.memory")

SNAPSHOTS_HIGH = 10   # expire when more are kept than this ...
SNAPSHOTS_KEEP = 3    # ... down to this many (plus heads and protected ones)
SMALL_FILE_BYTES = 8 * 1024 * 1024
SMALL_FILES_HIGH = 32  # compact once this many small files pile up

Protected = Callable[[Table], set[int]]


def no_protection(table: Table) -> set[int]:
    return set()


@dataclass
class TableReport:
    expired_snapshots: int = 0
    compacted_files: int = 0
    orphan_rows: int = 0
    orphan_files: int = 0
    skipped: list[str] = field(default_factory=list)

    def wire(self) -> dict[str, Any]:
        return {"expired_snapshots": self.expired_snapshots,
                "compacted_files": self.compacted_files, "orphan_rows": self.orphan_rows,
                "orphan_files": self.orphan_files, "skipped": self.skipped}


def expire_snapshots(table: Table, keep: int, protected: set[int]) -> int:
    """Expire all but the newest ``keep`` snapshots, heads and protected ones.

    Reads never need an old table snapshot: ``at_commit`` selects rows by the commits in
    the ledger, and rows are never rewritten except by compaction, which keeps them.
    """
    snaps = sorted(table.metadata.snapshots, key=lambda s: s.timestamp_ms)
    spared = {ref.snapshot_id for ref in table.metadata.refs.values()} | protected
    spared |= {s.snapshot_id for s in snaps[-keep:]} if keep > 0 else set()
    victims = [s.snapshot_id for s in snaps if s.snapshot_id not in spared]
    if not victims:
        return 0
    table.maintenance.expire_snapshots().by_ids(victims).commit()
    return len(victims)


def compact(table: Table, small_bytes: int = SMALL_FILE_BYTES, min_files: int = 2) -> int:
    """Rewrite the current snapshot's small data files into as few as the target allows."""
    snap = table.current_snapshot()
    if snap is None:
        return 0
    tasks = [t for t in table.scan(snapshot_id=snap.snapshot_id).plan_files()
             if t.file.file_size_in_bytes < small_bytes]
    if len(tasks) < min_files:
        return 0
    rows = ArrowScan(table.metadata, table.io, table.schema(), AlwaysTrue()).to_table(tasks)
    tx = table.transaction()
    with tx.update_snapshot().overwrite() as rewrite:
        for new_file in _dataframe_to_data_files(tx.table_metadata, rows, table.io,
                                                 rewrite.commit_uuid):
            rewrite.append_data_file(new_file)
        for task in tasks:
            rewrite.delete_data_file(task.file)
    tx.commit_transaction()
    return len(tasks)


def delete_orphan_rows(table: Table, committed: set[str], older_than: datetime) -> int:
    """Delete rows whose commit is not in the ledger and that are older than the grace.
    A row without ``written_at`` (events and read marks written before they had one) is
    kept: its age is unknown, and a commit still landing must not lose its rows."""
    if table.current_snapshot() is None:
        return 0
    seen = table.scan(selected_fields=("commit_id", "written_at")).to_arrow().to_pylist()
    orphans = {r["commit_id"] for r in seen if r["commit_id"] not in committed
               and r["written_at"] is not None and r["written_at"] < older_than}
    if not orphans:
        return 0
    count = sum(1 for r in seen if r["commit_id"] in orphans)
    table.delete(is_in("commit_id", orphans))
    return count


def _fs_path(uri: str) -> str:
    parts = urlsplit(uri)
    if parts.scheme in ("", "file"):
        return parts.path
    return parts.netloc + parts.path


def referenced_files(table: Table) -> set[str]:
    """Every file the table's kept metadata can reach."""
    meta = table.metadata
    out = {_fs_path(table.metadata_location)}
    out.update(_fs_path(m.metadata_file) for m in meta.metadata_log)
    out.update(_fs_path(s.statistics_path) for s in meta.statistics)
    seen_manifests: set[str] = set()
    for snap in meta.snapshots:
        out.add(_fs_path(snap.manifest_list))
        for manifest in snap.manifests(table.io):
            if manifest.manifest_path in seen_manifests:
                continue
            seen_manifests.add(manifest.manifest_path)
            out.add(_fs_path(manifest.manifest_path))
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
                out.add(_fs_path(entry.data_file.file_path))
    return out


def delete_orphan_files(table: Table, older_than: datetime) -> int:
    filesystem, root = warehouse.filesystem(table.io, table.location())
    keep = referenced_files(table)
    count = 0
    for info in filesystem.get_file_info(pafs.FileSelector(root, recursive=True,
                                                            allow_not_found=True)):
        if info.type != pafs.FileType.File or info.path in keep:
            continue
        if info.mtime is not None and info.mtime.astimezone(UTC) < older_than:
            try:
                filesystem.delete_file(info.path)
            except OSError as exc:
                if not warehouse.not_found(exc):
                    raise
                # Gone since the listing: another server's orphan pass, or the deleter of
                # superseded metadata files (`warehouse.DELETES`), which runs after a
                # commit and may still be behind it when this lists the folder.
                continue
            count += 1
    return count


def tidy(tables: MemoryTables, namespace: str, name: str,
         protected: Protected = no_protection) -> None:
    """The cheap upkeep a writer runs after committing to a table: amortised, never fatal.

    Thresholds are read on the shared table object; the work runs on a private one, so
    readers holding the shared object never see it change under them.
    """
    try:
        if _data_files_if_due(tables.table(namespace, name, fresh=False), protected) is None:
            return
        # Every server crosses the thresholds at about the same commit: one does the work
        # (tables.Turn), the others skip; the one that does rechecks on fresh metadata.
        # Upkeep of the ledger is a commit to it like an append: it takes the ledger's turn
        # too, or it would fail (and make appends fail) whenever appends run.
        with tables.upkeep_turn.hold(wait=0) as mine:
            if not mine:
                return
            with tables.commit_turn(namespace, name):
                table = tables.private(namespace, name)
                files = _data_files_if_due(table, protected)
                if files is None:
                    return
                if files > SMALL_FILES_HIGH:
                    compact(table, min_files=SMALL_FILES_HIGH)
                if len(table.metadata.snapshots) > SNAPSHOTS_HIGH:
                    expire_snapshots(table, SNAPSHOTS_KEEP, protected(table))
    except (CommitFailedException, ValidationException, ValueError) as exc:
        # Another server upkept the same table first (pyiceberg reports an expiry of a
        # snapshot that is already gone as ValueError); the write itself is committed.
        log.info("upkeep of %s.%s deferred (concurrent commit): %s", namespace, name, exc)
    except Exception:
        # The write this follows is already durable and visible: whatever went wrong here
        # (a file another server's upkeep removed, a busy catalog) must not turn it into an
        # error. The next write, or the maintenance timer, tries again.
        log.warning("upkeep of %s.%s failed; deferred", namespace, name, exc_info=True)


def _data_files_if_due(table: Table, protected: Protected) -> int | None:
    """``table``'s data file count when its files or its snapshots are over their
    threshold (held snapshots do not count towards expiry), else None."""
    meta = table.metadata
    snap = meta.current_snapshot()
    summary = snap.summary if snap is not None else None
    files = int(summary["total-data-files"] or 0) if summary is not None else 0
    kept = len(meta.snapshots)
    if kept > SNAPSHOTS_HIGH:
        kept -= len(protected(table) & {s.snapshot_id for s in meta.snapshots})
    if kept <= SNAPSHOTS_HIGH and files <= SMALL_FILES_HIGH:
        return None
    return files


def full_pass(table: Table, *, committed: set[str] | None, grace: timedelta,
              protected: Protected = no_protection, now: datetime | None = None,
              ) -> TableReport:
    """Everything, for one table: orphan rows, compaction, expiry, orphan files."""
    now = now or datetime.now(UTC)
    report = TableReport()
    steps: list[tuple[str, Callable[[], None]]] = []

    def rows() -> None:
        assert committed is not None
        report.orphan_rows = delete_orphan_rows(table, committed, now - grace)

    def files_compact() -> None:
        report.compacted_files = compact(table)

    def expire() -> None:
        report.expired_snapshots = expire_snapshots(table, SNAPSHOTS_KEEP, protected(table))

    def files_orphan() -> None:
        report.orphan_files = delete_orphan_files(table, now - grace)

    if committed is not None:
        steps.append(("orphan_rows", rows))
    steps += [("compact", files_compact), ("expire", expire), ("orphan_files", files_orphan)]
    for name, step in steps:
        try:
            step()
        except (CommitFailedException, ValidationException, ValueError) as exc:
            log.info("maintenance %s on %s deferred: %s", name, table.name(), exc)
            report.skipped.append(name)
        table.refresh()
    return report
