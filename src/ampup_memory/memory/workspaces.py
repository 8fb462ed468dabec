"""Workspaces: disposable orgs with caps and a time to live (seed 003, issue #10).

A workspace ``ws_<16 hex>`` *is* its org: its scopes are ``ws_…/<team>`` and every route
takes them as any other scope. The id pattern is reserved: a scope whose org matches
``^ws_[0-9a-f]{16}$`` is written and read only while that workspace is live, so no normal
org can ever turn into (or collide with) a workspace, and a deleted or expired one is never
recreated by a late write (404 ``WORKSPACE_GONE``).

Storage: ``memory_system.workspaces`` (Iceberg), one row per change. A workspace's state
only moves forward (live → deleted → dropped), so per id the row with the furthest state
wins (newest ``updated_at`` among equals): servers sharing one catalog agree without a
compare-and-set. Each process keeps the workspaces not dropped yet, folded, and reads
only the table's new data files when its snapshot moved (folded.py); a dropped one answers
as one never made (gone), so it is not kept.

Two checks sit on the commit path, both one regex match and nothing else for a scope that
is not a workspace's: :meth:`Workspaces.require_live` (every view and every commit) and
:meth:`Workspaces.admit` (every commit, before any row is written: the caps). ``admit`` runs
under the service's write lock, so writers of one process never overshoot a cap together;
two *servers* writing into one workspace at the same moment may each pass the check and
overshoot by at most their in-flight commits.

Drop (``DELETE``, the ``serve`` timer, ``workspace gc``): first one durable row says the
workspace is deleted (from then on it reads and writes as gone), then each of its scopes
loses its Iceberg tables and files, its read-index rows and its search rows, then a last row
says ``dropped``. A crash anywhere in between leaves a workspace that is gone to every
caller, whose leftovers the next gc pass removes (every step is idempotent).
"""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, ConfigDict, Field
from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError
from sqlalchemy import LargeBinary, cast, delete, func, select

from ampup_memory.errors import Conflict, NotFound
from ampup_memory.memory.episodes import Prepared
from ampup_memory.memory.facts import FactRecord
from ampup_memory.memory.folded import Folded
from ampup_memory.memory.maintenance import Protected, tidy
from ampup_memory.memory.readindex import (
    DEFAULT_LEASE,
    ReadIndex,
    acl_t,
    bodies_t,
    cites_t,
    episodes_t,
    events_t,
    facts_t,
    lease_holder,
    ledger_t,
    reads_t,
)
from ampup_memory.memory.scopes import SYSTEM_NAMESPACE, Scope
from ampup_memory.memory.sync import Sync
from ampup_memory.memory.tables import SCOPE_TABLES, WORKSPACES, MemoryTables, arrow
from ampup_memory.memory.warehouse import namespace_location, remove_tree
from ampup_memory.progress import Progress, ticker
from ampup_memory.ruled import published, ruled
from ampup_memory.timefmt import TtlText, parse_ttl, utc_text
from ampup_memory.web.body import JsonInt

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger("ampup_memory.memory")

ID_PATTERN = r"^ws_[0-9a-f]{16}$"
WORKSPACE_ORG = re.compile(ID_PATTERN)
FAULT_MID_DROP = "workspace-mid-drop"  # after the first table of a drop is gone
TABLE = "workspaces"
LIVE, DELETED, DROPPED = "live", "deleted", "dropped"
_RANK = {LIVE: 0, DELETED: 1, DROPPED: 2}
CAP_NAMES = ("scopes", "episodes", "facts", "bytes")
DEFAULT_CAPS = {"scopes": 20, "episodes": 100_000, "facts": 1_000_000,
                "bytes": 1024 ** 3}
MAX_CAPS = {"scopes": 1_000, "episodes": 10_000_000, "facts": 100_000_000,
            "bytes": 1024 ** 4}
MAX_WORKSPACE_NAME = 200
NAME_PATTERN = r"^[^\x00-\x1f\x7f]*[^\s\x00-\x1f\x7f][^\x00-\x1f\x7f]*$"
LEASE_WAIT_SECONDS = 5.0  # how long DELETE waits for a gc pass to give the lease back


def is_workspace_org(org: str) -> bool:
    """The reserved pattern: an org that is (or was, or could only be) a workspace."""
    return org.startswith("ws_") and WORKSPACE_ORG.fullmatch(org) is not None


def utcnow() -> datetime:
    return datetime.now(UTC)


class CapsIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    scopes: JsonInt = Field(default=DEFAULT_CAPS["scopes"], ge=1, le=MAX_CAPS["scopes"])
    episodes: JsonInt = Field(default=DEFAULT_CAPS["episodes"], ge=1,
                              le=MAX_CAPS["episodes"])
    facts: JsonInt = Field(default=DEFAULT_CAPS["facts"], ge=1, le=MAX_CAPS["facts"],
                           description="Fact rows, closures included.")
    bytes: JsonInt = Field(default=DEFAULT_CAPS["bytes"], ge=1, le=MAX_CAPS["bytes"],
                           description="UTF-8 bytes of stored episode bodies.")


class CreateWorkspace(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: Annotated[str, ruled(NAME_PATTERN, "name_invalid", "workspace name",
                               "printable text, not only spaces"),
                    published(NAME_PATTERN, minLength=1,
                              maxLength=MAX_WORKSPACE_NAME)] = Field(
        min_length=1, max_length=MAX_WORKSPACE_NAME,
        description="A label: printable text, not only spaces.")
    ttl: TtlText
    caps: CapsIn | None = Field(default=None, description="Limits; each one left out takes "
                                "its default.")


@dataclass(frozen=True)
class Workspace:
    id: str
    name: str
    created_by: str
    created_at: datetime
    expires_at: datetime
    caps: dict[str, int]
    state: str
    updated_at: datetime
    updated_by: str

    def live(self, now: datetime) -> bool:
        return self.state == LIVE and self.expires_at > now

    def row(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "created_by": self.created_by,
                "created_at": self.created_at, "expires_at": self.expires_at,
                "caps": json.dumps(self.caps, sort_keys=True), "state": self.state,
                "updated_at": self.updated_at, "updated_by": self.updated_by}

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Workspace:
        return cls(id=row["id"], name=row["name"], created_by=row["created_by"],
                   created_at=row["created_at"], expires_at=row["expires_at"],
                   caps=json.loads(row["caps"]), state=row["state"],
                   updated_at=row["updated_at"], updated_by=row["updated_by"])

    def wire(self, usage: dict[str, int] | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id, "org": self.id, "name": self.name, "created_by": self.created_by,
            "created_at": utc_text(self.created_at), "expires_at": utc_text(self.expires_at),
            "caps": dict(self.caps)}
        if usage is not None:
            out["usage"] = usage
        return out


def fold(rows: list[dict[str, Any]]) -> dict[str, Workspace]:
    """Per id the row with the furthest state (newest ``updated_at`` among equals)."""
    known: dict[str, Workspace] = {}
    for row in rows:
        ws = Workspace.from_row(row)
        have = known.get(ws.id)
        if have is None or (_RANK[ws.state], ws.updated_at) >= (
                _RANK[have.state], have.updated_at):
            known[ws.id] = ws
    return known


def _not_dropped(ws: Workspace, now: datetime) -> bool:
    return ws.state != DROPPED


def _never_dropped(rows: pa.Table, now: datetime) -> pa.ChunkedArray:
    """Rows of ids with no ``dropped`` row (a dropped workspace's rows stay in Arrow)."""
    import pyarrow.compute as pc

    ids = rows.column("id")
    dropped = pc.unique(pc.filter(ids, pc.equal(rows.column("state"), DROPPED)))
    return pc.invert(pc.is_in(ids, value_set=dropped))


def gone(org: str) -> NotFound:
    return NotFound(f"No live workspace {org}: it has expired, was deleted or never "
                    "existed. Create a new one with POST /workspaces.",
                    code="WORKSPACE_GONE", details={"workspace": org})


class Workspaces:
    """The registry, the checks on the commit path and the drop."""

    def __init__(self, tables: MemoryTables, index: ReadIndex, sync: Sync,
                 write_lock: threading.Lock, scopes_made: set[Scope],
                 protected: Callable[[], Protected], lease: str,
                 fault: str | None = None) -> None:
        self.tables = tables
        self.index = index
        self.sync = sync
        self.write_lock = write_lock
        self.scopes_made = scopes_made
        self.protected = protected
        self.fault = fault
        self.lease = lease  # maintenance's: a drop never runs beside it or a backup
        self.lease_ttl = DEFAULT_LEASE  # AMPUP_MEMORY_LEASE_SECONDS (MemoryService.open)
        # Called with a scope's name as it is dropped (the search index clears its rows).
        self.dropped: list[Callable[[str], None]] = []
        self._folded: Folded[Workspace] = Folded(lambda: tables.system(TABLE), fold,
                                                 Workspace.row, _not_dropped, _never_dropped)

    # -- the registry -------------------------------------------------------------------------
    def all(self) -> dict[str, Workspace]:
        """Every workspace not dropped yet (live, or ended and still to drop), its furthest
        state each, as the table says now (`Folded`: one catalog query unless it moved,
        then only its new files). A dropped one answers as one never made: gone
        (``require_live``), 404 (``visible``), nothing left to drop (``gc``)."""
        return self._folded.current()

    def _record(self, ws: Workspace) -> None:
        self.tables.append_anew(SYSTEM_NAMESPACE, TABLE, arrow(WORKSPACES, [ws.row()]))
        tidy(self.tables, SYSTEM_NAMESPACE, TABLE, self.protected())

    # -- the checks on the commit path --------------------------------------------------------
    def require_live(self, scope: Scope) -> Workspace | None:
        """None for a scope of a normal org (one regex match); the live workspace for a
        workspace's scope; 404 ``WORKSPACE_GONE`` otherwise."""
        if not is_workspace_org(scope.org):
            return None
        ws = self.all().get(scope.org)
        if ws is None or not ws.live(utcnow()):
            raise gone(scope.org)
        return ws

    def admit(self, scope: Scope, episodes: list[Prepared], facts: list[FactRecord]) -> None:
        """Refuse a commit that would take its workspace past a cap (409 ``WORKSPACE_CAP``,
        naming the cap, the usage and the limit), before any row is written. The caller
        holds the write lock."""
        ws = self.require_live(scope)
        if ws is None:
            return
        scopes = self._scopes(ws.id)
        for s in scopes:  # usage counts the other servers' commits too, as far as known
            self.sync.apply_pending(s)
        usage = self.usage(ws.id, scopes)
        bodies = {p.record.body_ref: p.body for p in episodes}
        known = self.index.known_bodies(str(scope), bodies)
        adding = {"scopes": 0 if scope in scopes else 1, "episodes": len(episodes),
                  "facts": len(facts),
                  "bytes": sum(len(b.encode("utf-8")) for r, b in bodies.items()
                               if r not in known)}
        for cap in CAP_NAMES:
            limit = ws.caps[cap]
            if adding[cap] and usage[cap] + adding[cap] > limit:
                raise Conflict(
                    f"Workspace {ws.id} is capped at {limit} {cap}: it holds {usage[cap]} "
                    f"and this write adds {adding[cap]}. Nothing was written.",
                    code="WORKSPACE_CAP",
                    details={"workspace": ws.id, "cap": cap, "limit": limit,
                             "usage": usage[cap], "adding": adding[cap]})

    def _scopes(self, org: str) -> list[Scope]:
        return [s for s in self.tables.scopes() if s.org == org]

    def usage(self, org: str, scopes: list[Scope] | None = None) -> dict[str, int]:
        """What the workspace holds: scopes, episode rows, fact rows (closures included)
        and UTF-8 bytes of stored bodies, from the read index."""
        names = [str(s) for s in (self._scopes(org) if scopes is None else scopes)]
        if not names:
            return dict.fromkeys(CAP_NAMES, 0)
        if self.index.dialect == "sqlite":
            size = func.length(cast(bodies_t.c.body, LargeBinary))
        else:
            size = func.octet_length(bodies_t.c.body)
        with self.index.engine.connect() as conn:
            episodes = conn.execute(select(func.count()).select_from(episodes_t)
                                    .where(episodes_t.c.scope.in_(names))).scalar()
            facts = conn.execute(select(func.count()).select_from(facts_t)
                                 .where(facts_t.c.scope.in_(names))).scalar()
            size_sum = conn.execute(select(func.coalesce(func.sum(size), 0))
                                    .where(bodies_t.c.scope.in_(names))).scalar()
        return {"scopes": len(names), "episodes": int(episodes or 0),
                "facts": int(facts or 0), "bytes": int(size_sum or 0)}

    # -- what callers do ----------------------------------------------------------------------
    def create(self, user: str, req: CreateWorkspace) -> dict[str, Any]:
        ttl = parse_ttl(req.ttl, ["ttl"])
        caps = (req.caps or CapsIn()).model_dump()
        now = utcnow()
        ws = Workspace(id="ws_" + secrets.token_hex(8), name=req.name, created_by=user,
                       created_at=now, expires_at=now + ttl, caps=caps, state=LIVE,
                       updated_at=now, updated_by=user)
        self._record(ws)
        return ws.wire(dict.fromkeys(CAP_NAMES, 0))

    def listing(self, user: str, admin_all: bool) -> list[dict[str, Any]]:
        """Live workspaces the caller created (an admin asking for all: everyone's)."""
        now = utcnow()
        found = [ws for ws in self.all().values()
                 if ws.live(now) and (admin_all or ws.created_by == user)]
        return [ws.wire(self.usage(ws.id)) for ws in sorted(found, key=lambda w: w.created_at)]

    def visible(self, user: str, ws_id: str, admin: bool) -> Workspace:
        """A live workspace the caller created (or any, for an admin); every other id,
        another user's included, is the same 404."""
        ws = self.all().get(ws_id) if is_workspace_org(ws_id) else None
        if ws is None or not ws.live(utcnow()) or not (admin or ws.created_by == user):
            raise NotFound("No such workspace.")
        return ws

    def show(self, user: str, ws_id: str, admin: bool) -> dict[str, Any]:
        """The workspace with its usage and its scopes' names: whoever may see it (its
        creator, an admin) may write and read in every one of them."""
        ws = self.visible(user, ws_id, admin)
        scopes = self._scopes(ws.id)
        return ws.wire(self.usage(ws.id, scopes)) | {"scopes": sorted(map(str, scopes))}

    def renew(self, user: str, ws_id: str, admin: bool, ttl: timedelta) -> dict[str, Any]:
        """A new expiry ``ttl`` from now, for a live workspace of the caller's (any, for an
        admin). One durable row; a delete recorded beside it still wins (its state ranks
        above live), so a renewal never brings a deleted workspace back."""
        self.visible(user, ws_id, admin)  # before the lock: a missing one waits for nothing
        # Read and written under the write lock a delete records under: a renewal racing
        # a delete on this server either lands first or answers the deleted one's 404; it
        # answered "live" for a workspace that ended deleted.
        with self.write_lock:
            ws = self.visible(user, ws_id, admin)
            now = utcnow()
            renewed = replace(ws, expires_at=now + ttl, updated_at=now, updated_by=user)
            self._record(renewed)
        return renewed.wire(self.usage(ws.id))

    def delete(self, user: str, ws_id: str, admin: bool,
               progress: Progress | None = None) -> dict[str, Any]:
        """Mark deleted (one durable row: gone from here on), then drop what it holds when
        maintenance is not running (else the next gc pass drops it). ``progress`` is told
        (scopes dropped, scopes to drop), as `gc`'s."""
        ws = self.visible(user, ws_id, admin)
        # The lease first, waiting a little: a gc pass of the timer holds it for moments
        # only, and a caller who deletes expects the drop now (a maintenance pass or a
        # backup may hold it longer: then the next gc pass drops it). Renewed while the
        # drop runs, so a server killed mid-drop frees it within one lease. Lease before
        # the write lock, in the order gc takes them: the other order let a gc pass hold
        # the lease while it waited for the write lock this call held, so the delete
        # waited out its LEASE_WAIT_SECONDS and left the drop to the next pass.
        with self.index.hold_lease(self.lease, lease_holder(), self.lease_ttl,
                                   wait=LEASE_WAIT_SECONDS) as held:
            with self.write_lock:  # no commit of this process lands between the two steps
                # Again under the lock: a delete that got here first answers the others
                # the 404 of a deleted workspace, as deletes sent one after another do.
                ws = self.visible(user, ws_id, admin)
                now = utcnow()
                deleted = replace(ws, state=DELETED, updated_at=now, updated_by=user)
                self._record(deleted)
                if not held:
                    return {"id": ws.id, "deleted": True, "dropped": False, "scopes": []}
                names = self._scope_names(deleted.id)
                scopes = self._drop(deleted, user, names, ticker(progress, len(names)))
        return {"id": ws.id, "deleted": True, "dropped": True, "scopes": scopes}

    def gc_if_free(self, holder: str, lease: timedelta | None = None,
                   progress: Progress | None = None,
                   ) -> dict[str, Any] | None:
        """The timer's and the CLI's pass: None when maintenance (or a backup) holds the
        lease; it comes again on the next pass. ``progress``: see `gc`."""
        with self.index.hold_lease(self.lease, holder, lease or self.lease_ttl) as held:
            return self.gc(progress=progress) if held else None

    def gc(self, now: datetime | None = None,
           progress: Progress | None = None) -> dict[str, Any]:
        """Drop every expired or deleted workspace not dropped yet, and any namespace of the
        reserved pattern without a live workspace (a crash, or a write of another server
        racing a drop). The caller holds the maintenance lease. ``progress`` is told
        (scopes dropped, scopes to drop) as it goes."""
        now = now or utcnow()
        known = self.all()
        done: list[str] = []
        scopes: list[str] = []
        with self.write_lock:
            doomed = [(ws, self._scope_names(ws.id))
                      for ws in sorted(known.values(), key=lambda w: w.id)
                      if ws.state != DROPPED and not ws.live(now)]
            gone = {ws.id for ws, _ in doomed}  # their scopes go with them
            stray = [scope for scope in self.tables.scopes()
                     if is_workspace_org(scope.org) and scope.org not in gone
                     and ((ws_of := known.get(scope.org)) is None or not ws_of.live(now))]
            total = sum(len(names) for _, names in doomed) + len(stray)
            dropped_one = ticker(progress, total)
            for ws, names in doomed:
                scopes += self._drop(ws, "gc", names, dropped_one)
                done.append(ws.id)
            for scope in stray:
                self._drop_scope(scope)
                scopes.append(str(scope))
                dropped_one()
            self._drop_stale_reads(known, now)
        return {"dropped": done, "scopes": sorted(set(scopes))}

    def _drop_stale_reads(self, known: dict[str, Workspace], now: datetime) -> None:
        """Extraction's read marks of a workspace that is no longer live (left by a
        version that dropped a workspace without them)."""
        with self.index.engine.begin() as conn:
            for name in list(conn.execute(select(reads_t.c.scope).distinct().where(
                    reads_t.c.scope.startswith("ws_", autoescape=True))).scalars()):
                ws_of = known.get(name.partition("/")[0])
                if is_workspace_org(name.partition("/")[0]) and (
                        ws_of is None or not ws_of.live(now)):
                    conn.execute(delete(reads_t).where(reads_t.c.scope == name))

    # -- the drop -----------------------------------------------------------------------------
    def _scope_names(self, org: str) -> list[str]:
        """Every scope of a workspace to drop: in the tables, or only in the read index."""
        return sorted({str(s) for s in self._scopes(org)} | self._indexed_scopes(org))

    def _drop(self, ws: Workspace, by: str, names: list[str] | None = None,
              dropped_one: Callable[[], None] | None = None) -> list[str]:
        names = self._scope_names(ws.id) if names is None else names
        for name in names:
            org, _, team = name.partition("/")
            self._drop_scope(Scope(org, team))
            if dropped_one is not None:
                dropped_one()
        self._record(replace(ws, state=DROPPED, updated_at=utcnow(), updated_by=by))
        return sorted(names)

    def _indexed_scopes(self, org: str) -> set[str]:
        """Scopes of ``org`` the ledger knows (a drop cut short after its namespaces went
        may have left their read-index rows)."""
        prefix = org + "/"
        with self.index.engine.connect() as conn:
            return {s for s in conn.execute(select(ledger_t.c.scope).distinct().where(
                ledger_t.c.scope.startswith(prefix, autoescape=True))).scalars()}

    def landed(self, scope: Scope) -> None:
        """After a commit to ``scope`` is in the ledger and the indexes: a workspace that
        stopped being live meanwhile (another server deleted it while this write ran) may
        have been dropped before the commit filled the indexes again. Its rows go once
        more and the write answers ``WORKSPACE_GONE``, as one that began after the delete
        does; the drop (or the next gc pass) removes the tables."""
        if not is_workspace_org(scope.org):
            return
        ws = self.all().get(scope.org)
        if ws is not None and ws.live(utcnow()):
            return
        self._forget_rows(scope)
        raise gone(scope.org)

    def _drop_scope(self, scope: Scope) -> None:
        """Tables and files, then read-index rows, then search rows: each idempotent."""
        ns = scope.namespace
        for n, name in enumerate(SCOPE_TABLES):
            self._purge(ns, name)
            if n == 0 and self.fault == FAULT_MID_DROP:
                log.error("fault hook %s: exiting in the middle of a drop", self.fault)
                os._exit(70)
        try:
            self.tables.catalog.drop_namespace(ns)
        except NoSuchNamespaceError:
            pass
        self._remove_folder(ns)
        self.scopes_made.discard(scope)
        self._forget_rows(scope)
        log.info("dropped workspace scope %s", scope)

    def _forget_rows(self, scope: Scope) -> None:
        """The scope's read-index rows, then its search rows. Its commits stay in the
        ledger (ids, authors, counts: no content), as a deleted branch's do; the index
        mirrors the ledger, so only the scope's rows go."""
        with self.index.engine.begin() as conn:
            for t in (episodes_t, acl_t, bodies_t, facts_t, cites_t, events_t, reads_t):
                conn.execute(delete(t).where(t.c.scope == str(scope)))
        for listener in self.dropped:
            listener(str(scope))

    def _purge(self, namespace: str, name: str) -> None:
        self.tables.forget(namespace, name)
        try:
            self.tables.catalog.purge_table((namespace, name))
        except NoSuchTableError:
            return
        except Exception:  # files already gone (a drop cut short): forget the table anyway
            log.warning("purge of %s.%s failed; dropping its catalog entry", namespace, name,
                        exc_info=True)
            try:
                self.tables.catalog.drop_table((namespace, name))
            except NoSuchTableError:
                pass

    def _remove_folder(self, namespace: str) -> None:
        """The namespace's folder (or S3 prefix) goes too, with any orphan files of crashed
        commits that purge did not list."""
        properties = self.tables.catalog.properties
        try:
            remove_tree(properties, namespace_location(properties, namespace))
        except OSError:  # the drop itself is done: stray files cost space, not meaning
            log.warning("removing the files of %s failed", namespace, exc_info=True)
