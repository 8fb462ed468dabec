"""Keeping the read index level with the tables, cheaply enough to check on every request.

Each check is one catalog query per table (its metadata location). Only when the ledger
moved do we read new ledger rows, from the snapshot summaries we already hold; only when a
scope has commits not yet applied do we scan that scope's tables, for just those commits.
Several servers may share one catalog: whatever one commits, the others apply on their next
read of that scope.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Operation, Snapshot

from ampup_memory.memory.acl import Principal
from ampup_memory.memory.events import event_from_row
from ampup_memory.memory.ledger import SUMMARY_KEY, LedgerEntry
from ampup_memory.memory.readindex import ReadIndex
from ampup_memory.memory.reads import read_from_row
from ampup_memory.memory.rows import ACL_OP, episode_from_row, fact_from_row
from ampup_memory.memory.scopes import SYSTEM_NAMESPACE, Scope, valid_name
from ampup_memory.memory.tables import MemoryTables, at_least, is_in
from ampup_memory.progress import Progress, ticker

log = logging.getLogger(__name__)

SKEW = timedelta(minutes=10)
IN_FILTER_MAX = 200  # more pending commits than this: one full scan beats a huge IN list


class Sync:
    def __init__(self, tables: MemoryTables, index: ReadIndex) -> None:
        self.tables = tables
        self.index = index
        self._ledger_seen: int | None = None  # snapshot id the index holds every row of
        self._principals_seen: int | None = None
        self._lock = threading.RLock()

    def forget(self) -> None:
        with self._lock:
            self._ledger_seen = None
            self._principals_seen = None

    # -- ledger -------------------------------------------------------------------------------
    def ledger_table(self) -> None:
        """Bring the index level with the ledger table as it is now."""
        self.catch_up_ledger(self.tables.system("ledger"))

    def catch_up_ledger(self, table: Table) -> None:
        """Index every ledger row of ``table``'s current snapshot.

        Works from one metadata object read once: another thread may replace the table's
        metadata meanwhile, and the index must never claim rows it has not read.
        """
        metadata = table.metadata
        snap = metadata.current_snapshot()
        if snap is None:
            return
        with self._lock:
            if snap.snapshot_id == self._ledger_seen:
                return
            self._catch_up_ledger(table, metadata, snap)
            self._ledger_seen = snap.snapshot_id

    def _catch_up_ledger(self, table: Table, metadata: TableMetadata, snap: Snapshot) -> None:
        known = self.index.ledger_snapshot()
        if known == snap.snapshot_id:
            return
        entries: list[LedgerEntry] | None = []
        cur = snap
        while entries is not None and cur.snapshot_id != known:
            text = cur.summary[SUMMARY_KEY] if cur.summary is not None else None
            if text:
                entries.append(LedgerEntry.from_summary(text))
            elif cur.summary is None or cur.summary.operation == Operation.APPEND:
                entries = None  # a row we cannot see from metadata: read the table
                break
            if cur.parent_snapshot_id is None:
                # Expiry clears the parent of the oldest kept snapshot, so "no parent" is
                # the table's first snapshot only when its sequence number says so.
                if known is not None or (cur.sequence_number or 0) > 1:
                    entries = None
                break
            parent = metadata.snapshot_by_id(cur.parent_snapshot_id)
            if parent is None:
                entries = None  # history expired before the point we had reached
                break
            cur = parent
        if entries is None:
            stray = self._stray_commit()
            if stray is not None:
                # The tables are older than the index (restored from a backup under it):
                # the index is derived, so it starts again from these tables.
                log.warning("the read index holds commit %s, which the ledger table does "
                            "not (tables restored under a newer index?); rebuilding the "
                            "read index from the tables", stray)
                self.index.reset()
                self.forget()
            entries = self._scan_ledger(table, snap.snapshot_id)
        self.index.add_ledger(entries, snap.snapshot_id)

    def _stray_commit(self) -> str | None:
        """The index's newest commit when the ledger table, loaded now, lacks it; else
        None. Only asked when the index's ledger position is not among the table's
        snapshots (expired history, or other tables). Loaded after the index is read: a
        commit reaches the index only once its ledger row is in the catalog, so another
        server's newer commit is never taken for a stray."""
        newest = self.index.newest_commit()
        if newest is None:
            return None
        table = self.tables.private(SYSTEM_NAMESPACE, "ledger")
        snap = table.metadata.current_snapshot()
        if snap is not None and table.scan(snapshot_id=snap.snapshot_id,
                                           row_filter=is_in("commit_id", [newest]),
                                           selected_fields=("commit_id",)).to_arrow().num_rows:
            return None
        return newest

    def rescan_ledger(self, table: Table) -> None:
        """Read every ledger row of ``table`` (the repair path when a chain has a gap)."""
        snap = table.metadata.current_snapshot()
        if snap is None:
            return
        with self._lock:
            rows = table.scan(snapshot_id=snap.snapshot_id).to_arrow().to_pylist()
            self.index.add_ledger([LedgerEntry.from_row(r) for r in rows], snap.snapshot_id)
            self._ledger_seen = snap.snapshot_id

    def _scan_ledger(self, table: Table, snapshot_id: int) -> list[LedgerEntry]:
        """Read ledger rows from the table. A row lands seconds after its ``committed_at``,
        so rows newer than the newest we hold minus a generous clock-skew margin suffice."""
        latest = self.index.latest_commit_time()
        scan = (table.scan(snapshot_id=snapshot_id) if latest is None else table.scan(
            snapshot_id=snapshot_id,
            row_filter=at_least("committed_at", (latest - SKEW).isoformat())))
        return [LedgerEntry.from_row(r) for r in scan.to_arrow().to_pylist()]

    # -- scope data ---------------------------------------------------------------------------
    def scope(self, scope: Scope) -> None:
        """Apply every committed, not yet applied commit of this scope to the index."""
        self.ledger_table()
        self.apply_pending(scope)

    def apply_pending(self, scope: Scope) -> None:
        """Apply the scope's commits the index knows of from the ledger but lacks the rows
        of (a writer calls it on the ledger snapshot its compare-and-set asserts)."""
        if not self.index.pending(str(scope)):
            return
        with self._lock:
            pending = self.index.pending(str(scope))
            if pending:
                self._apply(scope, pending)

    def _apply(self, scope: Scope, pending: list[LedgerEntry],
               applied: Callable[[], None] | None = None) -> None:
        # A ledger row names the tables its commit wrote rows to (``snapshots``): a table
        # none of the pending commits wrote to is not scanned at all.
        episodes = self._rows(scope, "episodes", _writers(pending, "episodes"))
        facts = self._rows(scope, "facts", _writers(pending, "facts"))
        events = self._rows(scope, "events", _writers(pending, "events"))
        reads = self._rows(scope, "reads", _writers(pending, "reads"))
        for entry in pending:
            cid = entry.commit_id
            rows = episodes[cid]
            self.index.apply(
                entry,
                [episode_from_row(r, entry.seq) for r in rows if r["op"] != ACL_OP],
                [(r["body_ref"], r["body"]) for r in rows if r["body"] is not None],
                [fact_from_row(r, entry.seq) for r in facts[cid]],
                [episode_from_row(r, entry.seq) for r in rows if r["op"] == ACL_OP],
                [event_from_row(r, entry.seq) for r in events[cid]],
                [read_from_row(r, entry.seq) for r in reads[cid]],
            )
            if applied is not None:
                applied()

    def _rows(self, scope: Scope, name: str, ids: set[str]) -> dict[str, list[dict[str, Any]]]:
        out: dict[str, list[dict[str, Any]]] = defaultdict(list)
        if not ids:
            return out
        table = self.tables.scope_table(scope, name)
        if table is None or table.current_snapshot() is None:
            return out
        if len(ids) <= IN_FILTER_MAX:
            scan = table.scan(row_filter=is_in("commit_id", ids))
        else:
            scan = table.scan()
        for row in scan.to_arrow().to_pylist():
            if row["commit_id"] in ids:
                out[row["commit_id"]].append(row)
        return out

    def everywhere(self) -> None:
        """Apply every committed, not yet applied commit of any scope (reads by id alone,
        which do not know their scope before they look)."""
        self.ledger_table()
        for name in self.index.pending_scopes():
            org, _, team = name.partition("/")
            if valid_name(org) and valid_name(team):
                self.apply_pending(Scope(org, team))

    def rebuild(self, progress: Progress | None = None) -> int:
        """Recreate the index from the tables alone; returns the commits applied.
        ``progress`` is told (commits applied, commits in all) as it goes."""
        with self._lock:
            self.index.reset()
            self.forget()
            self.ledger_table()
            work = [(scope, pending) for scope in self.tables.scopes()
                    if (pending := self.index.pending(str(scope)))]
            total = sum(len(pending) for _, pending in work)
            applied = ticker(progress, total)
            for scope, pending in work:
                self._apply(scope, pending, applied)
            self.principal("-")
            return total

    # -- principals ---------------------------------------------------------------------------
    def principal(self, user: str) -> Principal:
        """Read fresh on every call, so a membership change counts on the next read."""
        table = self.tables.system("principals")
        snap = table.metadata.current_snapshot()  # one metadata object, read once
        if snap is not None and snap.snapshot_id != self._principals_seen:
            with self._lock:
                seen = snap.snapshot_id
                if seen != self.index.principals_snapshot():
                    # The table is read again under the index's lock: another process may
                    # have copied a newer snapshot meanwhile, never to be put back.
                    seen = self.index.replace_principals(self._newest_principals)
                self._principals_seen = seen
        return self.index.principal(user)

    def _newest_principals(self) -> tuple[list[Principal], int]:
        """The principals table's newest rows, and its snapshot's id, read now."""
        table = self.tables.system("principals")
        snap = table.metadata.current_snapshot()
        assert snap is not None  # a table with a snapshot keeps one
        return _newest(table, snap.snapshot_id), snap.snapshot_id


def _writers(pending: list[LedgerEntry], name: str) -> set[str]:
    """The pending commits that wrote rows to table ``name``."""
    return {e.commit_id for e in pending if name in e.snapshots}


def principal_in(table: Table, user: str) -> Principal:
    """``user``'s principal as of the table object's snapshot (no groups, no roles: never
    set), read from the table, not the index: what a conditional write checks against."""
    snap = table.metadata.current_snapshot()
    found = [] if snap is None else [p for p in _newest(table, snap.snapshot_id)
                                     if p.user == user]
    return found[0] if found else Principal(user)


def _newest(table: Table, snapshot_id: int) -> list[Principal]:
    latest: dict[str, dict[str, Any]] = {}
    for row in table.scan(snapshot_id=snapshot_id).to_arrow().to_pylist():
        have = latest.get(row["user"])
        if have is None or row["updated_at"] >= have["updated_at"]:
            latest[row["user"]] = row
    return [Principal(u, tuple(r["groups"] or ()), tuple(r["roles"] or ())) for u, r in
            latest.items()]

