"""Pins and snapshots: named, durable sets of heads a read can be fixed to.

A **pin** (``pin_…``) holds one ``(scope, branch, commit)`` for a leased time (``ttl``,
renewable); a **snapshot** (``snap_…``) holds several heads ``{"<scope>@<branch>":
commit}`` (every scope of a workspace, or scopes the caller names) until released. A read
with ``pin=`` or ``snapshot=`` is exactly an ``at_commit`` read of the held
``(scope, branch, commit)`` (``MemoryService.view``, search's ``Feed.cutoff``): this module
only turns the id into those three values, it reads nothing itself.

Who may use one: anyone who holds the id. A pin or snapshot fixes *which commit* is read,
never *who may read what*: every read through one obeys the caller's current ACL exactly
as without it. Only its creator may renew or release it.

Storage: ``memory_system.holds``, one row per change (create, renew, release); the newest
row per id wins and a release is final (a renew racing a release on another server cannot
bring the hold back). A change reads the hold and appends its next row under one lock per
process, and answers with the hold as the table says right after its own append (without
both, a release racing a renew answered the expiry the renew had just replaced). Several
servers on one catalog share the table; each keeps in memory only the holds that may be
live, folded, and reads only the table's new data files when its snapshot moved
(folded.py), so a held read costs one catalog lookup (the same indexed query every read
already makes for principals) however many holds were ever made. An ended hold (released
or expired) is looked up in the table by its id when asked for, and answers as it always
did (410, its ``GET`` the ended hold).

Maintenance (the ``protected`` hook, maintenance.py): our reads do not need old Iceberg
snapshots. They are served from the read index by ledger seq, and the read index is
rebuilt from each table's *current* snapshot, which holds every committed row: rows are
append-only, compaction rewrites them unchanged, and orphan-row cleanup deletes only rows
whose commit never reached the ledger. What a held read needs, the committed rows and the
ledger rows up to its commit, no maintenance step removes. The hook still spares, per
table of a held scope, the Iceberg snapshot the held commit left the table at, so the
held state stays readable from the tables alone by Iceberg time travel (``snapshot_id``
scans, other engines) for as long as the hold lives; that keeps at most one extra
snapshot (and the files only it references) per table per live hold, freed by the first
maintenance pass after the hold expires or is released.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import WithJsonSchema
from pyiceberg.table import Table
from ulid import ULID

from ampup_memory.caches import Kept
from ampup_memory.errors import Conflict, Gone, NotFound, NotYours, field_error
from ampup_memory.memory.acl import require_id
from ampup_memory.memory.folded import Folded, current_snapshot, rows_of
from ampup_memory.memory.ledger import BRANCH, ULID_TEXT, given_commit
from ampup_memory.memory.maintenance import tidy
from ampup_memory.memory.readindex import ReadIndex
from ampup_memory.memory.scopes import MAIN, SYSTEM_NAMESPACE, Scope, parse_branch, parse_scope
from ampup_memory.memory.tables import HOLDS, MemoryTables, arrow
from ampup_memory.timefmt import utc_text

if TYPE_CHECKING:
    import pyarrow as pa

    from ampup_memory.memory.service import MemoryService, View

Kind = Literal["pin", "snapshot"]
PIN: Literal["pin"] = "pin"
SNAPSHOT: Literal["snapshot"] = "snapshot"
# A live hold of a workspace's scope after the workspace ended (see ``shown``).
GONE = "gone"
# A hold shows its creator to anyone with its id, so the refusal may say whose it is.
_NOT_YOURS: dict[str, str] = {PIN: "Only the pin's creator may renew or release it.",
                              SNAPSHOT: "Only the snapshot's creator may release it."}
PREFIX: dict[str, str] = {PIN: "pin_", SNAPSHOT: "snap_"}
PIN_PATTERN = f"^pin_{ULID_TEXT}$"
SNAPSHOT_PATTERN = f"^snap_{ULID_TEXT}$"
_ID_RE = {PIN: re.compile(PIN_PATTERN), SNAPSHOT: re.compile(SNAPSHOT_PATTERN)}
MAX_SNAPSHOT_SCOPES = 256
# What the schema publishes; the check is `check_id` (a 422 after identity, not before).
PinText = Annotated[str, WithJsonSchema({
    "type": "string", "pattern": PIN_PATTERN,
    "description": "Read exactly the commit this pin holds (the pin's scope; give no "
    "branch or at_commit)."})]
SnapshotText = Annotated[str, WithJsonSchema({
    "type": "string", "pattern": SNAPSHOT_PATTERN,
    "description": "Read the head this snapshot holds for the scope and branch (give no "
    "at_commit)."})]
TABLE = "holds"
# Ended holds a server keeps after looking one up by id (a read with a released pin).
ENDED_KEPT = 1024


def utcnow() -> datetime:
    return datetime.now(UTC)


def head_key(scope: str, branch: str) -> str:
    return f"{scope}@{branch}"


def split_key(key: str) -> tuple[str, str]:
    scope, _, branch = key.rpartition("@")
    return scope, branch


def check_id(text: object, kind: Kind, loc: list[str | int]) -> str:
    """A pin or snapshot id of the right shape, or a 422 (before anything is looked up)."""
    if not isinstance(text, str) or _ID_RE[kind].fullmatch(text) is None:
        raise field_error(loc, f"not a {kind} id ({PREFIX[kind]} and 26 characters)",
                          f"{kind}_id_invalid")
    return text


@dataclass(frozen=True)
class Hold:
    """A pin or snapshot as its newest row says (``released`` once any row said so)."""

    id: str
    kind: str
    created_by: str
    created_at: datetime
    heads: dict[str, str]
    workspace: str | None = None
    expires_at: datetime | None = None
    released: bool = False
    updated_at: datetime = field(default_factory=utcnow)

    def live(self, now: datetime) -> bool:
        return not self.released and (self.expires_at is None or now < self.expires_at)

    def state(self, now: datetime) -> str:
        if self.released:
            return "released"
        return "live" if self.live(now) else "expired"

    def row(self) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind, "created_by": self.created_by,
                "created_at": self.created_at, "workspace": self.workspace,
                "heads": json.dumps(self.heads, sort_keys=True),
                "expires_at": self.expires_at, "released": self.released,
                "updated_at": self.updated_at}

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Hold:
        return cls(id=row["id"], kind=row["kind"], created_by=row["created_by"],
                   created_at=row["created_at"].astimezone(UTC),
                   heads=dict(json.loads(row["heads"] or "{}")), workspace=row["workspace"],
                   expires_at=(row["expires_at"].astimezone(UTC) if row["expires_at"]
                               else None),
                   released=bool(row["released"]), updated_at=row["updated_at"].astimezone(UTC))

    def wire(self, now: datetime) -> dict[str, Any]:
        common = {"id": self.id, "created_by": self.created_by,
                  "created_at": utc_text(self.created_at),
                  "expires_at": utc_text(self.expires_at) if self.expires_at else None,
                  "state": self.state(now)}
        if self.kind == PIN:
            (key, commit), = self.heads.items()
            scope, branch = split_key(key)
            return {**common, "scope": scope, "branch": branch, "commit": commit}
        return {**common, "heads": dict(sorted(self.heads.items())),
                "workspace": self.workspace}


def fold(rows: Iterable[dict[str, Any]]) -> dict[str, Hold]:
    """Each id's rows in the order they count in (``updated_at``; a release after a
    renewal of the same instant): a renewal sets the expiry, a release keeps the expiry of
    the row before it and is final, so a row after it (another server's renewal that read
    the hold before the release landed) changes nothing."""
    out: dict[str, Hold] = {}
    for row in sorted(rows, key=lambda r: (r["updated_at"], bool(r["released"]))):
        hold = Hold.from_row(row)
        before = out.get(hold.id)
        if before is not None and before.released:
            continue
        if before is not None and hold.released:
            hold = replace(before, released=True, updated_at=hold.updated_at)
        out[hold.id] = hold
    return out


def require_live(hold: Hold, kind: Kind, now: datetime) -> Hold:
    """``hold``, or 410 when it is released or expired."""
    if hold.released:
        raise Gone(f"That {kind} was released.", code=f"{kind.upper()}_RELEASED",
                   details={kind: hold.id})
    if not hold.live(now):
        assert hold.expires_at is not None
        raise Gone(f"That {kind} expired at {utc_text(hold.expires_at)}.",
                   code=f"{kind.upper()}_EXPIRED",
                   details={kind: hold.id, "expired_at": utc_text(hold.expires_at)})
    return hold


class Holds:
    """The holds table as a server needs it: the holds that may be live, folded in memory
    (`Folded`: only a moved table's new files are read); an ended one (released or
    expired) looked up in the table by its id when asked for. Shared by every server on
    one catalog."""

    def __init__(self, tables: MemoryTables, index: ReadIndex) -> None:
        self.tables = tables
        self.index = index
        self._folded: Folded[Hold] = Folded(lambda: tables.system(TABLE), fold, Hold.row,
                                            Hold.live, _may_be_live)
        # Ended holds looked up by id: an ended hold never changes again (a release is
        # final; an expired pin cannot be renewed), so one lookup answers for good.
        self._ended: Kept[str, Hold] = Kept(ENDED_KEPT)
        # Held around a read of a hold and the append of its next row. A renew and a
        # release of one hold each read it, then append a row built from what they read:
        # interleaved, the later row undid the other's change (a release's row carried the
        # expiry the renew had just replaced). This process's writers only: another
        # server's row still lands between them; ``write`` answers the stored hold, and a
        # renewal that lost to such a release answers 410 (``renew_pin``).
        self.changing = threading.Lock()

    def all(self) -> dict[str, Hold]:
        """The holds that may be live, as the table says now (one catalog lookup unless it
        moved; then only its new data files are read). Callers check ``live(now)``."""
        return self._folded.current()

    def of_workspace(self, workspace_id: str) -> tuple[Hold, ...]:
        """The snapshots taken of one workspace (released ones too), as the table says now:
        its rows only, looked up in the table."""
        table = self.tables.system(TABLE)
        held = fold(rows_of(table, current_snapshot(table), "workspace", workspace_id))
        return tuple(h for h in held.values() if h.kind == SNAPSHOT)

    def get(self, hold_id: str, kind: Kind) -> Hold:
        table = self.tables.system(TABLE)
        hold = self._folded.current(table).get(hold_id) or self._ended.get(hold_id)
        if hold is None:
            hold = fold(rows_of(table, current_snapshot(table), "id", hold_id)).get(hold_id)
            if hold is not None and not hold.live(utcnow()):
                self._ended.put(hold_id, hold)
        if hold is None or hold.kind != kind:
            raise NotFound(f"No such {kind}.", details={kind: hold_id})
        return hold

    def live(self, hold_id: str, kind: Kind, now: datetime | None = None) -> Hold:
        """The hold, or 410 when released or expired (never a silently newer read)."""
        return require_live(self.get(hold_id, kind), kind, now or utcnow())

    def write(self, hold: Hold) -> Hold:
        """Append a new hold's first row; the hold as the table says right after."""
        row = hold.row()
        self._append(arrow(HOLDS, [row]))
        return fold([row])[hold.id]

    def change(self, hold_id: str, kind: Kind, make: Callable[[Hold], Hold]) -> Hold:
        """Append the hold's next row, ``make(hold)``, where ``hold`` is the hold as the
        table says at exactly the snapshot the append asserts: another server's row in
        between fails the append and ``make`` runs again on the newer state (it raises to
        refuse, e.g. 410 for a renewal of a released pin). The row's ``updated_at`` comes
        after every row of the hold before it, so rows count in the order they were
        appended (`fold`): a renewal and a release through two servers answer as the one
        order the table keeps. Returns the hold as the table says right after: that
        state and the row, folded (no row came between them)."""
        landed: list[dict[str, Any]] = []

        def next_row(table: Table) -> pa.Table:
            hold = self._at(table, hold_id)
            if hold is None or hold.kind != kind:
                raise NotFound(f"No such {kind}.", details={kind: hold_id})
            made = make(hold)
            after = hold.updated_at + timedelta(microseconds=1)
            landed[:] = [hold.row(), replace(made, updated_at=max(made.updated_at, after)).row()]
            return arrow(HOLDS, landed[1:])

        self._append(next_row)
        return fold(landed)[hold_id]

    def _at(self, table: Table, hold_id: str) -> Hold | None:
        """The hold as ``table`` (a private object, at the snapshot an append asserts)
        says: the folded one when this process has folded exactly that snapshot (only its
        new files are read for it), else its rows looked up."""
        sid = current_snapshot(table)
        held = self._folded.current(table)
        if self._folded.seen == sid and hold_id in held:
            return held[hold_id]
        return fold(rows_of(table, sid, "id", hold_id)).get(hold_id)

    def _append(self, rows: pa.Table | Callable[[Table], pa.Table]) -> None:
        table, _ = self.tables.append_anew(SYSTEM_NAMESPACE, TABLE, rows)
        self._folded.current(table)  # the next all() reads nothing, unless the table moved
        tidy(self.tables, SYSTEM_NAMESPACE, TABLE)

    # -- reads --------------------------------------------------------------------------------
    def resolve(self, scope_text: object, branch_text: object, at_commit: str | None,
                pin: str | None, snapshot: str | None,
                ) -> tuple[object, object, str | None]:
        """(scope, branch, at_commit) for a read that may name a pin or a snapshot: the
        held commit as an ``at_commit``; unchanged when it names neither."""
        if pin is None and snapshot is None:
            return scope_text, branch_text, at_commit
        if pin is not None and snapshot is not None:
            raise field_error(["snapshot"], "give pin or snapshot, not both",
                              "hold_combined")
        if given_commit(at_commit) is not None:
            raise field_error(["at_commit"], "a pinned or snapshot read is already fixed "
                              "to a commit: leave at_commit out", "hold_combined")
        scope = str(parse_scope(scope_text))
        if pin is not None:
            if branch_text is not None:
                parse_branch(branch_text)  # blank: said as everywhere
                raise field_error(["branch"], "a pin holds one branch: leave branch out",
                                  "hold_combined")
            hold = self.live(check_id(pin, PIN, ["pin"]), PIN)
            (key, commit), = hold.heads.items()
            held_scope, branch = split_key(key)
            if held_scope != scope:
                raise field_error(["scope"], f"the pin holds scope {held_scope}, not "
                                  f"{scope}", "hold_scope")
            return scope, branch, commit
        branch = parse_branch(branch_text)
        hold = self.live(check_id(snapshot, SNAPSHOT, ["snapshot"]), SNAPSHOT)
        held = hold.heads.get(head_key(scope, branch))
        if held is None:
            raise field_error(["scope"], f"the snapshot holds no head of {scope} on "
                              f"branch {branch}", "hold_scope")
        return scope, branch, held

    # -- maintenance --------------------------------------------------------------------------
    def protected(self, table: Table) -> set[int]:
        """Iceberg snapshots of ``table`` that live holds left it at (see the module doc):
        the one the held commit recorded for this table, or else the newest one made
        before that commit (a commit that did not write to this table)."""
        namespace, name = _table_name(table)
        now = utcnow()
        commits = {commit for hold in self.all().values() if hold.live(now)
                   for key, commit in hold.heads.items()
                   if _namespace(split_key(key)[0]) == namespace}
        if not commits:
            return set()
        snaps = sorted(table.metadata.snapshots, key=lambda s: s.timestamp_ms)
        out: set[int] = set()
        for commit in commits:
            entry = self.index.entry(commit)
            if entry is None:
                continue
            if name in entry.snapshots:
                out.add(entry.snapshots[name])
                continue
            cut = entry.committed_at.timestamp() * 1000
            before = [s.snapshot_id for s in snaps if s.timestamp_ms <= cut]
            if before:
                out.add(before[-1])
        return out


def _table_name(table: Table) -> tuple[str, str]:
    ident = table.name()
    return str(ident[-2]), str(ident[-1])


def _namespace(scope: str) -> str | None:
    try:
        return parse_scope(scope).namespace
    except Exception:  # a stored key is always valid; never let upkeep fail on one
        return None


def _may_be_live(rows: pa.Table, now: datetime) -> pa.ChunkedArray:
    """Rows of ids with a row neither released nor expired and no release row: an ended
    hold's rows are left in Arrow (`Folded`)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    ids, released = rows.column("id"), pc.fill_null(rows.column("released"), False)
    expires = rows.column("expires_at")
    later = pc.fill_null(pc.greater(expires, pa.scalar(now, type=expires.type)), False)
    open_ = pc.and_(pc.invert(released), pc.or_(pc.is_null(expires), later))
    ended = pc.unique(pc.filter(ids, released))
    maybe = pc.unique(pc.filter(ids, open_))
    return pc.and_(pc.is_in(ids, value_set=maybe), pc.invert(pc.is_in(ids, value_set=ended)))


# -- operations (REST, MCP and the CLI call these) -------------------------------------------
def new_id(kind: Kind) -> str:
    return PREFIX[kind] + str(ULID())


def _held_commit(svc: MemoryService, scope: object, branch: object,
                 at_commit: str | None) -> tuple[str, str, str]:
    """(scope, branch, commit): ``at_commit`` if given (404 when unknown), else the head."""
    view = svc.view(scope, branch, at_commit)
    if view.at_commit is not None:
        return str(view.scope), view.branch, view.at_commit
    head = svc.index.head(str(view.scope), view.branch)
    if head is None:
        raise Conflict(f"{view.scope} has no commits on branch {view.branch} yet: "
                       "there is nothing to hold.", code="NO_COMMITS",
                       details={"scope": str(view.scope), "branch": view.branch})
    return str(view.scope), view.branch, head.commit_id


def _take(svc: MemoryService, hold_of: Callable[[], Hold]) -> Hold:
    """A new hold whose every head a read can use once its row is written: a hold taken
    during a branch delete holds the branch (the delete is 409) or finds it gone (a pin
    404, a snapshot without it). Without this both answered, and the hold held a deleted
    branch. A delete checks holds inside its ledger compare-and-set, under the process's
    write lock and the ledger's turn (tables.Turn, every server's): taken here too, they
    keep any server's delete from checking and landing while the heads are read and the
    row written. A turn not had within its wait is gone without (it never blocks for
    long), so the heads are read once more after the write; a hold found holding a
    deleted branch is released and taken again."""
    with svc._write_lock, svc.tables.ledger_turn.hold():
        while True:
            hold = svc.holds.write(hold_of())
            if all(_readable(svc, key, commit) for key, commit in hold.heads.items()):
                return hold
            svc.holds.write(replace(hold, released=True, updated_at=utcnow()))


def _readable(svc: MemoryService, key: str, commit: str) -> bool:
    scope, branch = split_key(key)
    try:
        svc.view(scope, branch, commit)
    except NotFound:
        return False
    return True


def create_pin(svc: MemoryService, user: str, scope: object, branch: object,
               at_commit: str | None, ttl: timedelta) -> dict[str, Any]:
    require_id(user, ["user"], "user id")

    def pin() -> Hold:
        scope_text, branch_name, commit = _held_commit(svc, scope, branch, at_commit)
        now = utcnow()
        return Hold(id=new_id(PIN), kind=PIN, created_by=user, created_at=now,
                    heads={head_key(scope_text, branch_name): commit},
                    expires_at=now + ttl, updated_at=now)

    return _take(svc, pin).wire(utcnow())


def renew_pin(svc: MemoryService, user: str, pin_id: str, ttl: timedelta,
              loc: list[str | int] | None = None) -> dict[str, Any]:
    """A new expiry ``ttl`` from now; only a live pin, only by its creator. ``loc``: where
    the caller's request holds the id (a route's path parameter), for a 422."""
    pin_id = check_id(pin_id, PIN, loc or ["pin"])

    def renewed(hold: Hold) -> Hold:
        # Judged on the pin as the append finds it: a release landed through another
        # server since this process read it makes this renewal the 410 of one sent after
        # the release, never a 200 of a released pin.
        require_live(hold, PIN, utcnow())
        if hold.created_by != user:
            raise NotYours(_NOT_YOURS[PIN])
        now = utcnow()
        return replace(hold, expires_at=now + ttl, updated_at=now)

    with svc.holds.changing:
        hold = svc.holds.live(pin_id, PIN)  # early, for the common refusals
        if hold.created_by != user:
            raise NotYours(_NOT_YOURS[PIN])
        return shown(svc, svc.holds.change(pin_id, PIN, renewed))


def release(svc: MemoryService, user: str, hold_id: str, kind: Kind,
            loc: list[str | int] | None = None) -> dict[str, Any]:
    """Release a pin or snapshot (by its creator); releasing it again changes nothing."""
    hold_id = check_id(hold_id, kind, loc or [kind])
    with svc.holds.changing:
        hold = svc.holds.get(hold_id, kind)
        if hold.created_by != user:
            raise NotYours(_NOT_YOURS[kind])
        if not hold.released:
            # Made from the hold as the append finds it: the expiry a renewal through
            # another server set in between is the one the released hold keeps.
            hold = svc.holds.change(hold_id, kind, lambda held: replace(
                held, released=True, updated_at=utcnow()))
        return hold.wire(utcnow())


def show(svc: MemoryService, hold_id: str, kind: Kind,
         loc: list[str | int] | None = None) -> dict[str, Any]:
    return shown(svc, svc.holds.get(check_id(hold_id, kind, loc or [kind]), kind))


def shown(svc: MemoryService, hold: Hold, now: datetime | None = None) -> dict[str, Any]:
    """A hold as the routes answer it: ``state`` is ``gone``, not ``live``, once a
    workspace whose scope it holds was deleted or expired, since every read through it
    then answers 404 ``WORKSPACE_GONE`` (the hold itself is not released: nothing
    records the workspace's end on it)."""
    out = hold.wire(now or utcnow())
    if out["state"] == "live" and any(_workspace_gone(svc, split_key(key)[0])
                                      for key in hold.heads):
        out["state"] = GONE
    return out


def _workspace_gone(svc: MemoryService, scope_text: str) -> bool:
    try:
        svc.workspaces.require_live(parse_scope(scope_text))
    except NotFound:
        return True
    return False


def create_snapshot(svc: MemoryService, user: str, heads: dict[str, str] | Iterable[Scope],
                    workspace_id: str | None = None) -> dict[str, Any]:
    """A snapshot of the given heads, or of the current ``main`` head of each scope.

    Scopes with no commit yet are refused (409 ``NO_COMMITS``) when named by the caller
    and left out when they are a workspace's (``workspace_id``): such a scope holds
    nothing to read. Heads given as ``{"<scope>@<branch>": commit}`` are checked like
    ``at_commit`` (404 for a commit not on that scope and branch)."""
    require_id(user, ["user"], "user id")

    def snapshot() -> Hold:
        found: dict[str, str] = {}
        if isinstance(heads, dict):
            for key, commit in heads.items():
                scope, branch = split_key(key)
                s, b, c = _held_commit(svc, scope, branch, commit or None)
                found[head_key(s, b)] = c
        else:
            for each in heads:
                try:
                    s, b, c = _held_commit(svc, str(each), MAIN, None)
                except Conflict:
                    if workspace_id is not None:
                        continue
                    raise
                found[head_key(s, b)] = c
                # Every live branch of the scope too: a read of any of them is held.
                for name, marker in sorted(svc.index.markers(s).items()):
                    if marker.kind == BRANCH:
                        found[head_key(s, name)] = _held_commit(svc, s, name, None)[2]
        if not found:
            raise Conflict("None of those scopes has a commit yet: there is nothing to hold.",
                           code="NO_COMMITS")
        now = utcnow()
        return Hold(id=new_id(SNAPSHOT), kind=SNAPSHOT, created_by=user, created_at=now,
                    heads=found, workspace=workspace_id, updated_at=now)

    return _take(svc, snapshot).wire(utcnow())


def read_view(svc: MemoryService, scope: object, branch: object = None,
              at_commit: str | None = None, pin: str | None = None,
              snapshot: str | None = None) -> View:
    """``MemoryService.view`` for a read that may name a pin or a snapshot."""
    return svc.view(*svc.holds.resolve(scope, branch, at_commit, pin, snapshot))


def workspace_snapshots(svc: MemoryService, user: str, workspace_id: str,
                        admin: bool) -> list[dict[str, Any]]:
    """The snapshots taken of a workspace (``POST /workspaces/{id}/snapshots``), newest
    first, released ones too (``state`` says so), for whoever may see the workspace
    (``Workspaces.visible``: its creator or an admin; any other id is the same 404)."""
    ws = svc.workspaces.visible(user, workspace_id, admin)
    now = utcnow()
    taken = svc.holds.of_workspace(ws.id)
    return [shown(svc, h, now) for h in sorted(taken, key=lambda h: (h.created_at, h.id),
                                            reverse=True)]


def workspace_scopes(svc: MemoryService, user: str, workspace_id: str) -> list[Scope]:
    """The scopes of a live workspace the caller made; any other id (another user's
    included) is the same 404 as an unknown one."""
    ws = svc.workspaces.visible(user, workspace_id, admin=False)
    return svc.workspaces._scopes(ws.id)  # a workspace's id is its org
