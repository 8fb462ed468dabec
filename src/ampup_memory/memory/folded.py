"""A system table of one row per change, folded per id, with only what still counts in
memory: the one way the holds (snapshots.py) and the workspace registry (workspaces.py)
are read.

Such a table gains rows for every pin, snapshot and workspace ever made, and each server
used to fold all of them again whenever the table moved: a pin's create, renew and
release, and a read of a pin through another server, cost more with every hold ever made
(leak audit, session 32; docs/performance.md). Now a server

- reads only the data files it has not folded yet when the table moves (a write is one
  small file). Files go only when compaction rewrites them, row for row, into new ones
  (these tables lose no row: no delete, no orphan-row cleanup, which needs a
  ``commit_id``). So when the files that went hold exactly as many rows as every file
  not folded yet, those are the rewrite and nothing else: every row in them is folded
  already and none is read. Otherwise (another server also appended, or wrote and
  compacted before this one looked) it folds again from nothing, in Arrow;
- drops, in Arrow, the rows of every id that can no longer count (an ended hold, a
  dropped workspace) before any Python object is made of them, and keeps in memory only
  the entries that still count (``kept``);
- leaves an id that stopped counting to be looked up in the table by that id when asked
  for (`rows_of`: a file whose statistics rule the id out is not read).

A row of an id the server does not keep that is not the id's first (a renewal through a
server whose clock is behind) is folded with every row of that id, looked up: the table's
own fold decides, exactly as a fold of every row did.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from pyiceberg.expressions import AlwaysTrue
from pyiceberg.io.pyarrow import ArrowScan
from pyiceberg.table import Table

from ampup_memory.memory.tables import equal_to

if TYPE_CHECKING:
    import pyarrow as pa

Row = dict[str, Any]
T = TypeVar("T")


def rows_of(table: Table, sid: int | None, column: str, value: str) -> list[Row]:
    """The rows of ``table`` at snapshot ``sid`` whose ``column`` is ``value``; data files
    whose statistics rule it out are not read (each write's file holds its own rows)."""
    if sid is None:
        return []
    found: list[Row] = table.scan(snapshot_id=sid, row_filter=equal_to(column, value)
                                  ).to_arrow().to_pylist()
    return found


def current_snapshot(table: Table) -> int | None:
    snap = table.metadata.current_snapshot()
    return None if snap is None else snap.snapshot_id


class Folded(Generic[T]):
    """The entries of one system table that still count, by id, as of its newest snapshot
    this process saw. ``fold`` folds rows (any order, any ids) into entries;
    ``row_of`` is an entry's row (its newest state, foldable with later rows); ``kept``
    says whether an entry still counts; ``may_count`` is the Arrow mask of rows whose id
    may still count (rows of every other id are dropped unread by Python)."""

    def __init__(self, table: Callable[[], Table], fold: Callable[[list[Row]], dict[str, T]],
                 row_of: Callable[[T], Row], kept: Callable[[T, datetime], bool],
                 may_count: Callable[[pa.Table, datetime], pa.ChunkedArray]) -> None:
        self._table = table
        self._fold = fold
        self._row_of = row_of
        self._kept = kept
        self._may_count = may_count
        self._seen: int | None = None  # the table's snapshot the entries were folded at
        self._seq = -1  # its sequence number
        self._files: dict[str, int] = {}  # its data files (every row folded): row counts
        self._entries: dict[str, T] = {}
        self._lock = threading.Lock()

    @property
    def seen(self) -> int | None:
        """The table's snapshot the entries were folded at."""
        return self._seen

    def current(self, table: Table | None = None) -> dict[str, T]:
        """The entries that count as ``table`` says (default: the table now, one catalog
        lookup unless it moved); never older than what this process folded before."""
        table = self._table() if table is None else table
        snap = table.metadata.current_snapshot()  # one metadata object, read once
        sid = snap.snapshot_id if snap is not None else None
        if sid == self._seen:
            return self._entries
        with self._lock:
            seq = (snap.sequence_number or 0) if snap is not None else 0
            if sid == self._seen or seq < self._seq:  # folded already, or further
                return self._entries
            tasks = [] if sid is None else list(table.scan(snapshot_id=sid).plan_files())
            paths = {t.file.file_path: t.file.record_count for t in tasks}
            entries, files = self._entries, self._files
            new = [t for t in tasks if t.file.file_path not in files]
            gone = [n for path, n in files.items() if path not in paths]
            if gone and sum(gone) == sum(t.file.record_count for t in new):
                new = []  # a rewrite of rows folded already (see the module's doc)
            elif gone:  # files rewritten with rows not folded here: from nothing
                entries, files = {}, {}
                new = tasks
            if new:
                rows = ArrowScan(table.metadata, table.io, table.schema(),
                                 AlwaysTrue()).to_table(new)
                entries = self._folded_in(entries, table, sid, rows)
            # Entries before the snapshot they are at: a reader without the lock that
            # finds the new snapshot finds its entries.
            self._entries, self._files, self._seq = entries, dict(paths), seq
            self._seen = sid
            return entries

    def _folded_in(self, entries: dict[str, T], table: Table, sid: int | None,
                   rows: pa.Table) -> dict[str, T]:
        """``entries`` with ``rows`` (new rows of the table at ``sid``) folded in."""
        import pyarrow as pa
        import pyarrow.compute as pc

        now = datetime.now(UTC)
        out = dict(entries)
        if rows.num_rows:
            ids = rows.column("id")
            known = pc.is_in(ids, value_set=pa.array(sorted(out), type=pa.string()))
            rows = rows.filter(pc.or_(self._may_count(rows, now), known))
        groups: dict[str, list[Row]] = {}
        for row in rows.to_pylist():
            groups.setdefault(row["id"], []).append(row)
        for key, group in groups.items():
            before = out.get(key)
            if before is not None:
                group = [self._row_of(before), *group]
            elif not any(r["created_at"] == r["updated_at"] for r in group):
                group = rows_of(table, sid, "id", key)  # see the module's doc
            entry = self._fold(group).get(key)
            if entry is not None:
                out[key] = entry
        return {key: entry for key, entry in out.items() if self._kept(entry, now)}
