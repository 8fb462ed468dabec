"""AmpUp Memory operations, shared by REST, MCP and the CLI.

Every write is one commit: data rows land in the scope's tables first, then one ledger row
(compare-and-set), then the read index learns the commit. Every read first brings the
index level with the ledger (sync.py), then answers from the index alone.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ValidationError
from pyiceberg.exceptions import CommitFailedException, NoSuchTableError
from pyiceberg.table import Table

from ampup_memory.errors import (
    AmpError,
    Conflict,
    NotFound,
    NotYours,
    driver_said,
    field_error,
    refuse_nul,
    storage_down,
    storage_trouble,
)
from ampup_memory.memory.acl import (
    Principal,
    common_acl,
    may_read,
    normalize_acl,
    require_id,
)
from ampup_memory.memory.branches import branch_segments
from ampup_memory.memory.episode_types import (
    NOTE_PREFIX,
    EpisodeType,
    Unit,
    by_name,
    foreign_author,
    type_for_source,
)
from ampup_memory.memory.episodes import (
    ChangeAcl,
    EpisodeIn,
    EpisodeRecord,
    Prepared,
    WriteBatch,
    WriteEpisode,
    differing_fields,
    prepare,
)
from ampup_memory.memory.events import EventRecord, event_row
from ampup_memory.memory.facts import (
    CLOSURE,
    VALUE,
    CloseValue,
    FactIn,
    FactRecord,
    PostFact,
    Window,
    current,
    current_values,
    lines,
    quote_found,
    raw_value,
    timeline,
)
from ampup_memory.memory.ledger import (
    BRANCH,
    COMMIT,
    SUMMARY_KEY,
    LedgerEntry,
    given_commit,
    new_commit_id,
    not_before,
)
from ampup_memory.memory.maintenance import Protected, full_pass, tidy
from ampup_memory.memory.quotes import CitedTexts
from ampup_memory.memory.readindex import DEFAULT_LEASE, ReadIndex
from ampup_memory.memory.reads import ReadMark, read_row
from ampup_memory.memory.retry import Backoff, until_won
from ampup_memory.memory.rows import ACL_OP, episode_row, fact_id, fact_row
from ampup_memory.memory.schemas import SCHEMA_ENTITY, Schema, check_fact, schema_at
from ampup_memory.memory.scopes import (
    MAIN,
    SYSTEM_NAMESPACE,
    Scope,
    parse_branch,
    parse_scope,
)
from ampup_memory.memory.segments import NO_LIMIT, Segment, Segments
from ampup_memory.memory.snapshots import Holds
from ampup_memory.memory.sync import Sync, principal_in
from ampup_memory.memory.tables import (
    EPISODES,
    EVENTS,
    FACTS,
    LEDGER,
    PRINCIPALS,
    READS,
    MemoryTables,
    arrow,
)
from ampup_memory.memory.workspaces import Workspaces
from ampup_memory.settings import Settings, armed_fault, ensure_home
from ampup_memory.web.body import validation_errors
from ampup_memory.web.conditional import Condition, etag_of

log = logging.getLogger("ampup_memory.memory")

FAULT_AFTER_ROWS = "after-rows"
FAULT_AFTER_LEDGER = "after-ledger"  # the commit stands; this process never learned it
ORPHAN_GRACE = timedelta(hours=1)
MAX_LEDGER_PAGE = 1000
OnConflict = Literal["refuse", "skip"]
M = TypeVar("M", bound=BaseModel)


def utcnow() -> datetime:
    return datetime.now(UTC)


def build(model: type[M], **data: Any) -> M:
    """A request model from keyword data (MCP, CLI), with a 422 instead of a traceback;
    its message speaks of arguments, as neither face sends a request."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise validation_errors(exc, prefix=(), message="Invalid arguments.") from exc


@dataclass(frozen=True)
class View:
    """Where a read looks: scope, branch, and the chain of segments it sees (its
    ancestors up to its fork point, then its own commits up to ``at_commit`` if given)."""

    scope: Scope
    branch: str
    segments: Segments = (Segment(MAIN),)
    at_commit: str | None = None

    @property
    def max_seq(self) -> int:
        """How far along the branch's own chain the view reads."""
        return self.segments[-1].upto


@dataclass
class WriteResult:
    commit: LedgerEntry | None
    episodes: list[tuple[str, str]]  # (id, created|existing)
    conflicts: list[dict[str, Any]]


MAINTENANCE_LEASE = "memory-maintenance"  # also taken by `backup` while it reads files


class MemoryService:
    def __init__(self, tables: MemoryTables, index: ReadIndex, fault: str | None = None,
                 backoff: Backoff | None = None) -> None:
        self.tables = tables
        self.index = index
        self.sync = Sync(tables, index)
        self.fault = fault
        self.backoff = backoff or Backoff()
        # One writer per process: in-process writers would only race each other on the
        # ledger; across processes the compare-and-set keeps the chain.
        self._write_lock = threading.Lock()
        self._scopes_made: set[Scope] = set()
        # Pins and snapshots (snapshots.py); maintenance spares what they hold.
        self.holds = Holds(tables, index)
        self.protected: Protected = self.holds.protected
        # Called with (scope, branch) once a commit is in the ledger and the read index
        # (the search index feeds itself here, so a write is searchable when it returns).
        self.after_commit: list[Callable[[str, str], None]] = []
        # Workspace orgs: refused once gone, capped on every commit (workspaces.py).
        self.workspaces = Workspaces(tables, index, self.sync, self._write_lock,
                                     self._scopes_made, lambda: self.protected,
                                     MAINTENANCE_LEASE, fault)

    @classmethod
    def open(cls, settings: Settings, *, replace_newer_index: bool = False) -> MemoryService:
        """``replace_newer_index``: see `ReadIndex` (only a command that rebuilds it)."""
        ensure_home(settings)
        index = ReadIndex(settings.resolved_index_uri, replace_newer=replace_newer_index)
        try:
            tables = MemoryTables.open(settings)
        except BaseException:
            index.close()
            raise
        svc = cls(tables, index, armed_fault(settings))
        svc.workspaces.lease_ttl = timedelta(seconds=settings.lease_seconds)
        return svc

    def close(self) -> None:
        self.index.close()
        self.tables.close()

    # -- who and where ------------------------------------------------------------------------
    def principal(self, user: str) -> Principal:
        return self.sync.principal(user)

    def now_on(self, scope: Scope | str, branch: str) -> datetime:
        """Now on a scope's branch, the valid time its writes and reads take when none is
        given: this server's clock, or the time of the branch's newest commit when that is
        later (its writer's clock ran ahead of ours, or ours stepped back). So a value
        written after another is never older than it, and a read sees every value
        committed before it, whichever server wrote it (docs/deployment.md, "Clocks")."""
        head = self.index.head(str(scope), branch)
        return not_before(utcnow(), head.committed_at if head else None)

    def next_commit_id(self, scope: Scope | str, *branches: str) -> str:
        """A new commit id that sorts after the heads of ``branches`` (the branch it lands
        on; a merge's source; a new branch's fork), whatever clock stamped them."""
        heads = [h.commit_id for b in branches if (h := self.index.head(str(scope), b))]
        return new_commit_id(max(heads, default=None))

    def view(self, scope_text: object, branch_text: object = None,
             at_commit: str | None = None) -> View:
        """The one place a read's scope, branch and commit become a view (404 for an
        unknown or deleted branch, or a commit not on this branch as it now is)."""
        scope = parse_scope(scope_text)
        branch = parse_branch(branch_text)
        at_commit = given_commit(at_commit)
        self.workspaces.require_live(scope)
        self.sync.scope(scope)
        if at_commit is None:
            return View(scope, branch, branch_segments(self.index, str(scope), branch))
        entry = self.index.entry(at_commit)
        segs = branch_segments(self.index, str(scope), branch)
        # A branch's creation marker sits at its segment's lower bound: it is the head of
        # a branch with no commit of its own (what GET /branches, a pin and a snapshot
        # name), so it reads as the fork point plus nothing.
        if (entry is None or entry.scope != str(scope) or entry.branch != branch
                or not (segs[-1].holds(entry.seq)
                        or (entry.kind == BRANCH and entry.seq == segs[-1].after))):
            raise NotFound("No such commit on this scope and branch.",
                           details={"at_commit": at_commit[:64]})
        last = segs[-1]
        return View(scope, branch, (*segs[:-1], Segment(branch, last.after, entry.seq)),
                    entry.commit_id)

    def _write_view(self, scope: Scope, branch: str) -> Segments:
        """The segments a write on the branch classifies against (synced first)."""
        self.workspaces.require_live(scope)
        self.sync.scope(scope)
        return branch_segments(self.index, str(scope), branch)

    # -- who may read what ---------------------------------------------------------------------
    def readable_episodes(self, principal: Principal, scope: str, segs: Segments,
                          ids: Iterable[str]) -> dict[str, EpisodeRecord]:
        """The episodes among ``ids`` the caller may read: the one decision every read path
        of core makes (episodes, documents, facts, citations, ACL changes, the held-episode
        check). An episode counts when a commit in the view wrote it; who may
        read it is always its *current* ACL (the read index hands out no other), so a
        narrowed ACL hides every version at once, ``at_commit`` reads included; on a
        branch, the current ACL along its chain (readindex._current_acl)."""
        found = self.index.episodes(scope, segs, ids)
        return {i: rec for i, rec in found.items() if may_read(principal, rec.acl)}

    def readable_acls(self, principal: Principal, view: View) -> tuple[set[str], int]:
        """The current ACLs (as the read index's JSON texts) of the view's episodes that the
        caller may read, and how many episodes carry them: ``readable_episodes``' decision
        taken once per distinct ACL, so listings can count and page in the index."""
        found = self.index.episode_acls(str(view.scope), view.segments)
        ok = {text for text in found if may_read(principal, json.loads(text))}
        return ok, sum(found[text] for text in ok)

    # -- episodes -----------------------------------------------------------------------------
    def write_episode(self, user: str, req: WriteEpisode) -> tuple[str, LedgerEntry | None,
                                                                   str]:
        """One episode → (id, new commit or None, commit that holds it)."""
        item = EpisodeIn.model_validate(req.model_dump(exclude={"scope", "branch"}))
        result = self.write_episodes(user, req.scope, req.branch, [item], loc=[])
        ep_id, status = result.episodes[0]
        if result.commit is not None:
            return ep_id, result.commit, result.commit.commit_id
        view = self.view(req.scope, req.branch)
        # "existing" only ever answers an episode the caller may read (see _classify).
        held = self.readable_episodes(self.principal(user), str(view.scope), view.segments,
                                      [ep_id])[ep_id]
        return ep_id, None, held.commit_id

    def write_batch(self, user: str, req: WriteBatch) -> WriteResult:
        return self.write_episodes(user, req.scope, req.branch, req.episodes)

    def write_episodes(self, user: str, scope_text: str, branch_text: str | None,
                       items: list[EpisodeIn], *, loc: list[str | int] | None = None,
                       on_conflict: OnConflict = "refuse",
                       unclaimed: EpisodeType | None = None) -> WriteResult:
        """Write episodes in one commit; ones already held answer ``existing``."""
        scope = parse_scope(scope_text)
        branch = parse_branch(branch_text)
        base: list[str | int] = ["episodes"] if loc is None else loc
        now = self.now_on(scope, branch)
        prepared = [
            prepare(item, branch, now, [*base, i] if loc is None else base,
                    unclaimed if unclaimed and _unclaimed(item.source) else None)
            for i, item in enumerate(items)
        ]
        for i, item in enumerate(items):
            if foreign_author(item.source, user):
                raise field_error([*base, i, "source"] if loc is None else [*base, "source"],
                                  f"a source starting {NOTE_PREFIX} names the note's author, "
                                  f"who must be you: {NOTE_PREFIX}{user}:<label>",
                                  "source_author")
        principal = self.principal(user)
        ns = str(scope)
        with self._write_lock:
            while True:
                segs = self._write_view(scope, branch)
                statuses, fresh, conflicts = self._classify(principal, ns, segs, prepared)
                if conflicts and on_conflict == "refuse":
                    raise _conflict(conflicts, batch=loc is None)
                if not fresh:
                    return WriteResult(None, statuses, conflicts)
                try:
                    commit = self._commit(scope, branch, user, f"write {len(fresh)} episode(s)",
                                          list(fresh.values()), [],
                                          self.next_commit_id(scope, branch),
                                          recheck=partial(self._none_held, ns, segs,
                                                          list(fresh)))
                except _HeldMeanwhile:
                    # Another server committed one of these ids first: answer as a second
                    # write would (its data rows stay orphans, invisible, for maintenance).
                    continue
                return WriteResult(commit, statuses, conflicts)

    def _none_held(self, scope: str, segs: Segments, ids: list[str]) -> None:
        """Inside the commit's compare-and-set: no other commit holds these ids by now."""
        if self.index.episodes(scope, segs, ids):
            raise _HeldMeanwhile()

    def _classify(self, principal: Principal, scope: str, segs: Segments,
                  prepared: list[Prepared],
                  ) -> tuple[list[tuple[str, str]], dict[str, Prepared], list[dict[str, Any]]]:
        """Each incoming episode: new, already held alike, or a conflict. A held episode the
        caller may not read is a conflict whatever it holds, with no field named: the
        answer says it exists (its id is its content) and nothing more."""
        ids = [p.record.id for p in prepared]
        held = self.index.episodes(scope, segs, ids)
        readable = self.readable_episodes(principal, scope, segs, ids)
        fresh: dict[str, Prepared] = {}
        statuses: list[tuple[str, str]] = []
        conflicts: list[dict[str, Any]] = []
        for i, p in enumerate(prepared):
            rid = p.record.id
            if rid in held and rid not in readable:
                conflicts.append({"index": i, "id": rid})
                statuses.append((rid, "conflict"))
                continue
            before = readable.get(rid) or (fresh[rid].record if rid in fresh else None)
            if before is None:
                fresh[rid] = p
                statuses.append((rid, "created"))
                continue
            diff = differing_fields(before, p)
            if diff:
                conflicts.append({"index": i, "id": rid, "fields": diff})
            statuses.append((rid, "conflict" if diff else "existing"))
        return statuses, fresh, conflicts

    def get_episode(self, user: str, episode_id: str, view: View) -> dict[str, Any]:
        principal = self.principal(user)
        rec = self.readable_episodes(principal, str(view.scope), view.segments,
                                     [episode_id]).get(episode_id)
        if rec is None:
            raise NotFound("No such episode.")  # unreadable and missing: one answer
        return self._episode_wire(view.scope, rec)

    def _episode_wire(self, scope: Scope, rec: EpisodeRecord) -> dict[str, Any]:
        body = self.index.body(str(scope), rec.body_ref) or ""
        etype = by_name(rec.type)
        units = etype.units(body) if etype else []
        return rec.wire(str(scope), units, body)

    def change_acl(self, user: str, req: ChangeAcl, episode_id: str,
                   admin: bool, condition: Condition | None = None) -> dict[str, Any]:
        """An episode's ACL changes only here: its own commit, by the episode's author or an
        admin. The new ACL decides who may read every version, ``at_commit`` reads too.
        ``condition`` (If-Match on `acl_etag`) is checked again inside the commit's
        compare-and-set, on the branch as of the ledger the append asserts."""
        scope = parse_scope(req.scope)
        branch = parse_branch(req.branch)
        acl = normalize_acl(req.acl, ["acl"])
        principal = self.principal(user)
        with self._write_lock:
            segs = self._write_view(scope, branch)
            rec = self.readable_episodes(principal, str(scope), segs,
                                         [episode_id]).get(episode_id)
            if rec is None:
                raise NotFound("No such episode.")
            wrote = self.index.entry(rec.commit_id)
            if not admin and (wrote is None or wrote.author != user):
                raise NotYours("Only the author of the commit that wrote this episode, or an "
                               "admin, may change its ACL.")
            recheck = None
            if condition is not None and not condition.empty:
                cond, ns = condition, str(scope)
                cond.check(acl_etag(episode_id, rec.acl))

                def recheck() -> None:  # the caller read it above: no probe of a hidden one
                    now = self.index.episodes(ns, branch_segments(self.index, ns, branch),
                                              [episode_id]).get(episode_id)
                    cond.check(None if now is None else acl_etag(episode_id, now.acl))

            if acl == rec.acl:
                return {"id": episode_id, "acl": list(acl), "commit": None}
            entry = self._commit(scope, branch, user, "change acl of 1 episode", [],
                                 [], self.next_commit_id(scope, branch),
                                 [replace(rec, acl=acl, branch=branch)],
                                 recheck=recheck)
        return {"id": episode_id, "acl": list(acl), "commit": entry.commit_id}

    def document(self, user: str, document: str, view: View,
                 as_of: datetime | None) -> dict[str, Any]:
        principal = self.principal(user)
        at = (as_of or self.now_on(view.scope, view.branch)).astimezone(UTC)
        versions = self.index.document_versions(str(view.scope), view.segments, document, at)
        readable = self.readable_episodes(principal, str(view.scope), view.segments,
                                          [v.id for v in versions])
        for rec in versions:  # newest first
            if rec.id in readable:
                return self._episode_wire(view.scope, readable[rec.id])
        raise NotFound("No readable version of that document.")

    # -- facts --------------------------------------------------------------------------------
    def post_fact(self, user: str, req: PostFact) -> tuple[str, LedgerEntry]:
        item = FactIn.model_validate(req.model_dump(exclude={"scope", "branch"}))
        ids, entry = self.post_facts(user, req.scope, req.branch, [item], loc=[])
        return ids[0], entry

    def post_facts(self, user: str, scope_text: str, branch_text: str | None,
                   items: list[FactIn], *, loc: list[str | int] | None = None,
                   written_by: str = "posted") -> tuple[list[str], LedgerEntry]:
        """Post facts in one commit; any invalid fact refuses them all. ``written_by``
        says who wrote them: ``posted`` (a client) or ``extract:<model>`` (extraction.py)."""
        ids, entry = self._post_facts(user, scope_text, branch_text, items, loc, written_by,
                                      skip_held=False)
        assert entry is not None  # nothing is skipped, so the commit was made
        return [i for i in ids if i is not None], entry

    def post_new_facts(self, user: str, scope_text: str, branch_text: str | None,
                       items: list[FactIn], *, loc: list[str | int] | None = None,
                       ) -> tuple[list[str | None], LedgerEntry | None]:
        """:meth:`post_facts`, except that a fact the branch holds already is not written
        again (``ampup-memory load``: a re-run writes nothing). Held means a version of its
        (entity, predicate) the caller may see, as ``GET /facts?history=true`` shows it,
        with the same kind, value, window, quote and cites as the fact once checked (so an
        omitted ``valid_from`` compares as the default it takes); a fact twice in ``items``
        is written once. A held fact's id is None; with nothing new, no commit (None)."""
        return self._post_facts(user, scope_text, branch_text, items, loc, "posted",
                                skip_held=True)

    def _post_facts(self, user: str, scope_text: str, branch_text: str | None,
                    items: list[FactIn], loc: list[str | int] | None, written_by: str,
                    skip_held: bool) -> tuple[list[str | None], LedgerEntry | None]:
        scope = parse_scope(scope_text)
        branch = parse_branch(branch_text)
        principal = self.principal(user)
        with self._write_lock:
            segs = self._write_view(scope, branch)
            typed = schema_at(self.index, str(scope), segs, self.now_on(scope, branch))
            cited = self.readable_episodes(principal, str(scope), segs,
                                           {c.episode for f in items for c in f.cites})
            # The cited bodies in one read, not one per episode (two thirds of a
            # thousand-fact batch's check went to those reads).
            bodies = self.index.bodies(str(scope), {r.body_ref for r in cited.values()})
            units_of = {r.id: _units(r, bodies.get(r.body_ref, "")) for r in cited.values()}
            texts = CitedTexts()  # the batch's quotes ask the same units
            checked = []
            for n, item in enumerate(items):
                where: list[str | int] = ["facts", n] if loc is None else list(loc)
                value = check_fact(typed[0] if typed else None, item.entity, item.predicate,
                                   raw_value(item.value), where)
                rec = self._check_fact(scope, item, cited, units_of, where, written_by, texts)
                checked.append(replace(rec, branch=branch, value=_json_value(value)))
            held = self._held_facts(principal, View(scope, branch, segs), checked) \
                if skip_held else set()
            commit_id = self.next_commit_id(scope, branch)
            facts: list[FactRecord] = []
            ids: list[str | None] = []
            for rec in checked:
                if skip_held:
                    key = _fact_key(rec)
                    if key in held:
                        ids.append(None)
                        continue
                    held.add(key)
                n = len(facts)
                facts.append(replace(rec, fact_id=fact_id(commit_id, n), ord=n))
                ids.append(facts[-1].fact_id)
            if not facts and skip_held:
                return ids, None
            # Messages name kinds and counts only: the ledger is shown to every reader of
            # the scope, and an entity or predicate name could reveal hidden material.
            message = "post 1 fact" if len(facts) == 1 else f"post {len(facts)} facts"
            entry = self._commit(scope, branch, user, message, [], facts, commit_id,
                                 recheck=partial(self._schema_unchanged, scope, segs, typed))
        return ids, entry

    def _held_facts(self, principal: Principal, view: View,
                    checked: list[FactRecord]) -> set[tuple[Any, ...]]:
        """The keys (:func:`_fact_key`) of the versions of these facts' attributes that the
        caller may see in the view: what ``visible_facts`` hands ``GET /facts``."""
        rows = self.index.facts_of(str(view.scope), view.segments,
                                   {(f.entity, f.predicate) for f in checked})
        groups = self.visible_facts(principal, view, None, None, rows=rows)
        return {_fact_key(v) for versions in groups.values() for v in versions}

    def _schema_unchanged(self, scope: Scope, segs: Segments,
                          checked: tuple[Schema, FactRecord] | None) -> None:
        """Inside the commit's compare-and-set: the schema the facts were checked against is
        still the branch's (another server may have set a new one meanwhile)."""
        now = schema_at(self.index, str(scope), segs, self.now_on(scope, segs[-1].branch))
        if (now[1].fact_id if now else None) != (checked[1].fact_id if checked else None):
            raise Conflict("The scope's schema changed while these facts were checked; "
                           "nothing was written. Post them again.", code="SCHEMA_CHANGED")

    def schema(self, view: View, now: datetime | None = None) -> Schema | None:
        """The schema current in a view (newest version): how its reads count cardinality.
        ``now``: the view's ``now_on``, when the caller has it already."""
        typed = schema_at(self.index, str(view.scope), view.segments,
                          now or self.now_on(view.scope, view.branch))
        return typed[0] if typed else None

    def _check_fact(self, scope: Scope, item: FactIn,
                    cited: dict[str, EpisodeRecord], units_of: dict[str, list[Unit]],
                    loc: list[str | int], written_by: str = "posted",
                    texts: CitedTexts | None = None) -> FactRecord:
        """Cited episodes readable, units present, quote verbatim in one of them."""
        # A request body never carries U+0000 (web.body refuses it), a model's answer may:
        # refused here, per fact, it rejects that candidate; left to the commit's own
        # check it refused the whole batch, and the same answer on every pass after.
        refuse_nul(item.entity, [*loc, "entity"])
        refuse_nul(item.predicate, [*loc, "predicate"])
        refuse_nul(raw_value(item.value), [*loc, "value"])
        units = []
        for i, cite in enumerate(item.cites):
            rec = cited.get(cite.episode)  # readable ones only: unreadable reads as missing
            if rec is None:
                raise field_error([*loc, "cites", i, "episode"], "no such episode",
                                  "episode_unknown")
            if rec.id not in units_of:
                units_of[rec.id] = _units(rec, self.index.body(str(scope), rec.body_ref) or "")
            ep_units = units_of[rec.id]
            if cite.unit > len(ep_units):
                raise field_error([*loc, "cites", i, "unit"],
                                  f"episode has {len(ep_units)} unit(s)", "unit_unknown")
            units.append(ep_units[cite.unit - 1])
        if not quote_found(item.quote, units, texts):
            raise field_error([*loc, "quote"], "the quote does not occur verbatim in any "
                              "cited unit", "quote_not_found")
        valid_from = item.valid_from or max(cited[c.episode].occurred_at for c in item.cites)
        valid_from = valid_from.astimezone(UTC)
        valid_to = item.valid_to.astimezone(UTC) if item.valid_to else None
        if valid_to is not None and valid_to <= valid_from:
            raise field_error([*loc, "valid_to"], "valid_to must be after valid_from")
        return FactRecord(
            fact_id="", kind=VALUE, entity=item.entity, predicate=item.predicate,
            value=_json_value(raw_value(item.value)), valid_from=valid_from, valid_to=valid_to,
            quote=item.quote, cites=tuple((c.episode, c.unit) for c in item.cites),
            written_by=written_by, branch=MAIN,
        )

    def visible_facts(self, principal: Principal, view: View, entity: str | None,
                      predicate: str | None, *, entity_prefix: str | None = None,
                      predicates: Iterable[str] | None = None,
                      rows: list[FactRecord] | None = None,
                      readable: Mapping[str, object] | None = None,
                      ) -> dict[tuple[str, str], list[FactRecord]]:
        """Fact versions the caller may see, per (entity, predicate): every cited episode
        readable (the one ACL rule for facts; typed queries read through it too, passing
        the view's ``rows`` when they hold them already, and the caller's ``readable``
        episodes among them when they decided them already by ``readable_episodes``)."""
        if rows is None:
            rows = self.index.facts(str(view.scope), view.segments, entity, predicate,
                                    entity_prefix=entity_prefix, predicates=predicates)
        if readable is None:
            readable = self.readable_episodes(principal, str(view.scope), view.segments,
                                              {e for f in rows for e, _ in f.cites})
        groups: dict[tuple[str, str], list[FactRecord]] = defaultdict(list)
        seen: dict[tuple[tuple[str, int], ...], bool] = {}  # rows share their citations
        for f in rows:
            ok = seen.get(f.cites)
            if ok is None:  # every cited episode, as in acl.py
                ok = seen[f.cites] = all(e in readable for e, _ in f.cites)
            if ok:
                groups[(f.entity, f.predicate)].append(f)
        return groups

    def get_facts(self, user: str, view: View, entity: str, predicate: str | None,
                  as_of: datetime | None, history: bool) -> list[dict[str, Any]]:
        groups = self.visible_facts(self.principal(user), view, entity, predicate)
        now = self.now_on(view.scope, view.branch)
        at = (as_of or now).astimezone(UTC)
        scope = str(view.scope)
        schema = self.schema(view, now) if groups else None
        out: list[dict[str, Any]] = []
        for key in sorted(groups):
            many = schema is not None and schema.many(*key)
            if history:
                out.extend(w.version.wire(scope, w.end)
                           for line in lines(groups[key], many) for w in line)
            else:
                out.extend(w.version.wire(scope, w.end)
                           for w in current_values(groups[key], at, many))
        return out

    def close_value(self, user: str, req: CloseValue) -> dict[str, Any]:
        scope = parse_scope(req.scope)
        branch = parse_branch(req.branch)
        if req.entity == SCHEMA_ENTITY:
            raise field_error(["entity"], f"{SCHEMA_ENTITY} is reserved for the scope's "
                              "schema (PUT /schemas)", "entity_reserved")
        principal = self.principal(user)
        with self._write_lock:
            while True:
                view = View(scope, branch, self._write_view(scope, branch))
                now = self.now_on(scope, branch)
                window, closed = self._closing(principal, view, req, now)
                if req.acl is not None:
                    acl = list(normalize_acl(req.acl, ["acl"]))
                else:
                    held = self.readable_episodes(principal, str(scope), view.segments,
                                                  [e for e, _ in window.version.cites])
                    acl = list(common_acl(held[e].acl for e, _ in window.version.cites))
                    if not acl:
                        raise field_error(["acl"], "the closed value's episodes share no ACL "
                                          "entry; pass acl for the reason", "acl_required")
                commit_id = self.next_commit_id(scope, branch)
                reason = prepare(
                    EpisodeIn(source=f"close:{req.entity}:{req.predicate}:{commit_id}",
                              body=req.reason, occurred_at=now, about=[req.entity], acl=acl),
                    branch, now, ["reason"])
                closure = FactRecord(
                    fact_id=fact_id(commit_id, 0), kind=CLOSURE, entity=req.entity,
                    predicate=req.predicate, value=closed, valid_from=now, valid_to=None,
                    quote=req.reason.strip(), cites=((reason.record.id, 1),),
                    written_by="posted", branch=branch,
                )

                def still_current(closing: str = window.version.fact_id) -> None:
                    """Inside the compare-and-set: the value is still the one to close. A
                    close of another server got there first: the 404 of a second close on
                    one server (it closed the value twice); a newer value: close that one."""
                    segs = branch_segments(self.index, str(scope), branch)
                    again, _ = self._closing(principal, View(scope, branch, segs), req,
                                             self.now_on(scope, branch))
                    if again.version.fact_id != closing:
                        raise _ChangedMeanwhile()

                try:
                    entry = self._commit(scope, branch, user, "close 1 value",
                                         [reason], [closure], commit_id,
                                         recheck=still_current)
                except _ChangedMeanwhile:
                    continue
                return {"episode": reason.record.id, "commit": entry.commit_id,
                        "closed": window.version.fact_id, "fact": closure.fact_id}

    def _closing(self, principal: Principal, view: View, req: CloseValue, now: datetime,
                 ) -> tuple[Window[FactRecord], str | None]:
        """The window a close ends (404 when none is current) and, for a many-valued
        attribute, the value its closure names."""
        versions = self.visible_facts(principal, view, req.entity, req.predicate)
        schema = self.schema(view)
        if schema is not None and schema.many(req.entity, req.predicate):
            if req.value is None:
                raise field_error(["value"], f"{req.predicate} is many-valued: name the "
                                  "value to close", "value_required")
            closed = _json_value(check_fact(schema, req.entity, req.predicate,
                                            raw_value(req.value), []))
            holding = current_values(versions.get((req.entity, req.predicate), []), now,
                                     many=True)
            window = next((w for w in holding if w.version.value == closed), None)
        else:
            if req.value is not None:
                raise field_error(["value"], "only a many-valued attribute (schema "
                                  "cardinality many) closes one value", "value_unexpected")
            closed = None
            window = current(timeline(versions.get((req.entity, req.predicate), [])), now)
        if window is None:
            raise NotFound("No current value of that entity and predicate to close.")
        return window, closed

    # -- ledger and principals ------------------------------------------------------------------
    def ledger(self, view: View, limit: int, before: str | None) -> dict[str, Any]:
        before_seq = None
        before = given_commit(before, "before", "the newest page")
        if before is not None:
            entry = self.index.entry(before)
            if entry is None or entry.scope != str(view.scope) or entry.branch != view.branch:
                raise field_error(["before"], "no such commit on this scope and branch")
            before_seq = entry.seq
        if view.max_seq != NO_LIMIT:  # as of a commit (pin, snapshot): nothing after it
            before_seq = min(before_seq or NO_LIMIT, view.max_seq + 1)
        limit = max(1, min(limit, MAX_LEDGER_PAGE))
        page = self.index.ledger_page(str(view.scope), view.branch, limit, before_seq)
        more = len(page) == limit and page[-1].seq > 1
        return {"commits": [e.wire() for e in page],
                "next_before": page[-1].commit_id if more else None}

    def set_principal(self, user: str, groups: list[str], roles: list[str],
                      by: str, condition: Condition | None = None) -> Principal:
        """Replace a user's groups and roles. ``condition`` (If-Match on `principal_etag`)
        is checked on the principals table as of the snapshot the append asserts."""
        require_id(user, ["user"], "user id")
        gs = tuple(sorted({require_id(g, ["groups", i], "group") for i, g in enumerate(groups)}))
        rs = tuple(sorted({require_id(r, ["roles", i], "role") for i, r in enumerate(roles)}))
        row = {"user": user, "groups": list(gs), "roles": list(rs), "updated_at": utcnow(),
               "updated_by": by}
        check = None
        if condition is not None and not condition.empty:
            cond = condition
            cond.check(principal_etag(self.principal(user)))  # early: the common refusal

            def check(table: Table) -> None:
                cond.check(principal_etag(principal_in(table, user)))

        self.tables.append_anew(SYSTEM_NAMESPACE, "principals", arrow(PRINCIPALS, [row]),
                                self.backoff, check)
        tidy(self.tables, SYSTEM_NAMESPACE, "principals", self.protected)
        return self.principal(user)

    # -- events (advice runs and sessions, events.py) ------------------------------------------
    def write_events(self, user: str, scope: Scope, branch: str, message: str,
                     events: list[EventRecord],
                     recheck: Callable[[Segments], None] | None = None) -> LedgerEntry:
        """Append events as one commit. ``recheck`` runs inside the commit's
        compare-and-set with the branch's segments as of exactly the ledger the append
        asserts (see ``_commit``): it raises to refuse the commit (e.g. a second end of
        one session, whichever server wrote the first)."""
        with self._write_lock:
            segs = self._write_view(scope, branch)
            check = None if recheck is None else (
                lambda: recheck(branch_segments(self.index, str(scope), branch)))
            if recheck is not None:
                recheck(segs)  # early, for the common case: no rows written at all
            return self._commit(scope, branch, user, message, [], [],
                                self.next_commit_id(scope, branch),
                                recheck=check, events=events)

    def events_view(self, scope: Scope, branch: str) -> Segments:
        """The segments an events read of the scope's branch looks at (synced first)."""
        return self._write_view(scope, branch)

    # -- maintenance ----------------------------------------------------------------------------
    def maintain(self, scope: Scope | None = None, grace: timedelta = ORPHAN_GRACE,
                 done: Callable[[int], None] | None = None) -> dict[str, dict[str, Any]]:
        """Orphan rows, compaction, snapshot expiry and orphan files on every table (or on
        one scope's and the system tables). ``done(total)`` is called after each table
        (a progress bar's tick)."""
        self.sync.ledger_table()
        committed = self.index.known_commits()
        report: dict[str, dict[str, Any]] = {}
        tables = [(namespace, name) for namespace, name in self.tables.all_tables()
                  if scope is None or namespace in (scope.namespace, SYSTEM_NAMESPACE)]
        for namespace, name in tables:
            table = self.tables.private(namespace, name)
            rows = committed if namespace != SYSTEM_NAMESPACE else None
            report[f"{namespace}.{name}"] = full_pass(
                table, committed=rows, grace=grace, protected=self.protected).wire()
            if done is not None:
                done(len(tables))
        return report

    def maintain_if_free(self, grace: timedelta, holder: str,
                         lease: timedelta = DEFAULT_LEASE) -> dict[str, Any] | None:
        """The timer's pass: only one server at a time runs it (a lease in the index,
        renewed while it runs; a backup waits for it: held no longer than the pass)."""
        with self.index.hold_lease(MAINTENANCE_LEASE, holder, lease) as held:
            return self.maintain(None, grace) if held else None

    # -- the commit ---------------------------------------------------------------------------
    def _commit(self, scope: Scope, branch: str, author: str, message: str,
                episodes: list[Prepared], facts: list[FactRecord],
                commit_id: str, acl_changes: list[EpisodeRecord] | None = None,
                recheck: Callable[[], None] | None = None, kind: str = COMMIT,
                parent: Callable[[], str | None] | None = None,
                merged: str | None = None,
                events: list[EventRecord] | None = None,
                reads: list[ReadMark] | None = None) -> LedgerEntry:
        """Rows first, then one ledger row; the caller holds the write lock.

        ``recheck`` runs inside each compare-and-set attempt, on the scope as of exactly the
        ledger snapshot the append asserts: what it checks holds when the commit lands,
        across processes (a commit of another server in between fails the append, and the
        next attempt checks again). It raises to abandon the commit.

        ``reads`` are extraction's read marks (reads.py): rows of the same commit.

        ``parent`` names the row's parent instead of the chain's head (a branch's creation
        row: the commit it forked from), asked inside each attempt like ``recheck``.

        A commit lands only on the branch its writer found: one another server deleted (or
        deleted and made again) before the append answers the 404 of a deleted branch. It
        was acknowledged after the delete marker, where no read of any branch shows it."""
        self.workspaces.admit(scope, episodes, facts)  # caps, before any row is written
        now = utcnow()
        ns = str(scope)
        # Where the branch's own chain starts (its creation marker); 0 for main.
        found = None if kind == BRANCH else branch_segments(self.index, ns, branch)[-1].after
        # Each body once per scope: only the first episode to carry it stores the text.
        bodies: dict[str, str] = {}
        known = self.index.known_bodies(ns, {p.record.body_ref for p in episodes})
        episode_rows = []
        for p in episodes:
            ref = p.record.body_ref
            first = ref not in known and ref not in bodies
            if first:
                bodies[ref] = p.body
            episode_rows.append(episode_row(p.record, p.body if first else None, commit_id,
                                            now))
        acl_rows = [episode_row(r, None, commit_id, now, ACL_OP) for r in acl_changes or ()]
        rows = episode_rows + acl_rows
        fact_rows = [fact_row(f, commit_id, now) for f in facts]
        event_rows = [event_row(e, commit_id, now) for e in events or ()]
        read_rows = [read_row(r, commit_id, now) for r in reads or ()]
        # Before anything is written: a row the read index cannot hold would stall the scope.
        # Named as the commit's parts (``facts[3].value``): a batch's facts and a corpus's
        # lines are in the same order, so the place is the caller's too.
        refuse_nul({"author": author, "message": message, "episodes": episode_rows,
                    "acl_changes": acl_rows, "facts": fact_rows, "events": event_rows,
                    "reads": read_rows}, [])
        snapshots: dict[str, int] = {}
        try:
            if scope not in self._scopes_made:
                self.tables.ensure_scope(scope)  # a scope is born inside its first commit
                self._scopes_made.add(scope)
            if rows:
                snapshots["episodes"] = self._append(scope, "episodes", arrow(EPISODES, rows))
            if fact_rows:
                snapshots["facts"] = self._append(scope, "facts", arrow(FACTS, fact_rows))
            if event_rows:
                snapshots["events"] = self._append(scope, "events", arrow(EVENTS, event_rows))
            if read_rows:
                snapshots["reads"] = self._append(scope, "reads", arrow(READS, read_rows))
        except NoSuchTableError:
            # Dropped under the write (it was a 500): only a workspace's tables ever are,
            # by another server's delete or gc once the workspace is gone.
            self.workspaces.require_live(scope)
            raise
        if self.fault == FAULT_AFTER_ROWS:
            log.error("fault hook %s: exiting between data rows and ledger row", self.fault)
            os._exit(70)
        # No count of bodies: whether a body was new depends on episodes the caller may not
        # read, and the ledger is shown to every reader of the scope.
        changes = {"episodes": len(episodes),
                   "acl_changes": len(acl_changes or ()),
                   "facts": sum(f.kind == VALUE for f in facts),
                   "closures": sum(f.kind == CLOSURE for f in facts)}
        if events:
            changes["events"] = len(events)

        def attempt() -> tuple[LedgerEntry, tuple[int | None, int]]:
            # A private table object: the snapshot this append asserts is exactly the one
            # the index was brought level with, so parent and seq are right or it fails.
            table = self.tables.private(SYSTEM_NAMESPACE, "ledger")
            self.sync.catch_up_ledger(table)
            level = table.metadata.current_snapshot()
            if not self.index.chain_complete(ns, branch):
                log.warning("read index lost part of %s/%s's chain; rereading the ledger",
                            ns, branch)
                self.sync.rescan_ledger(table)
            if found is not None and branch_segments(self.index, ns, branch)[-1].after != found:
                raise NotFound(f"No branch {branch!r} in {ns}.", details={"branch": branch})
            if recheck is not None:
                self.sync.apply_pending(scope)  # the scope's rows up to this snapshot
                recheck()
            head = self.index.head(ns, branch)
            parent_id = parent() if parent is not None else head.commit_id if head else None
            # Never before the commits it follows: its parent (a branch's creation row: the
            # commit it forked from) and a merge's merged-in head.
            before = [head.committed_at if head and parent_id == head.commit_id else
                      self._committed_at(parent_id), self._committed_at(merged)]
            entry = LedgerEntry(
                commit_id=commit_id, parent=parent_id,
                scope=ns, branch=branch, seq=head.seq + 1 if head else 1, author=author,
                committed_at=not_before(utcnow(), *before), message=message,
                changes=changes, snapshots=snapshots, kind=kind, merged=merged,
            )
            if self.tables.moved(table):  # lost already: skip writing the append's files
                raise CommitFailedException("the ledger moved during the attempt")
            made = self.tables.append(table, arrow(LEDGER, [entry.row()]),
                                      {SUMMARY_KEY: entry.summary()})
            self.tables.remember(table)  # the next read of the ledger starts from it
            return entry, (level.snapshot_id if level is not None else None, made)

        with self.tables.ledger_turn.hold():
            (entry, ledger_step), conflicts = until_won(attempt, self.backoff)
        if self.fault == FAULT_AFTER_LEDGER:
            log.error("fault hook %s: exiting after the ledger row", self.fault)
            os._exit(70)
        if conflicts:
            log.debug("ledger append for %s met %d conflict(s)", ns, conflicts)
        # `apply` stamps every row with the entry's commit and seq (copies of 1,000 records
        # per commit to set them here first were ~2 % of a load).
        self.index.apply(entry, [p.record for p in episodes], list(bodies.items()), facts,
                         acl_changes or (), events or (), reads or (), ledger_step)
        for listener in self.after_commit:
            try:
                listener(ns, branch)
            except AmpError as exc:  # a refusal with its reason (503: the index's embedder
                log.warning("after-commit listener failed for %s/%s: %s", ns, branch,
                            exc.message)  # changed under this server): no bug, no traceback
            except Exception as exc:  # the commit stands; the listener catches up next pass
                if storage_down(exc) is None:
                    log.exception("after-commit listener failed for %s/%s", ns, branch)
                else:  # a disk full, a database down: no bug, no traceback
                    log.warning("after-commit listener failed for %s/%s, %s: %s", ns,
                                branch, storage_trouble(exc), driver_said(exc)[:300])
        self.workspaces.landed(scope)  # after the listeners: they fill the search index
        # Upkeep after the commit is durable and visible: amortised, never fails the write.
        for name in snapshots:
            tidy(self.tables, scope.namespace, name, self.protected)
        tidy(self.tables, SYSTEM_NAMESPACE, "ledger", self.protected)
        return entry

    def _committed_at(self, commit_id: str | None) -> datetime | None:
        entry = self.index.entry(commit_id) if commit_id is not None else None
        return entry.committed_at if entry is not None else None

    def _append(self, scope: Scope, name: str, rows: Any) -> int:
        """Append data rows; a lost race is retried on the table as it now is (pyiceberg's
        own rebase fails when another server expired the snapshot it started from)."""

        def attempt() -> int:
            table = self.tables.scope_table(scope, name)
            if table is None:
                raise NoSuchTableError(f"Table does not exist: {scope.namespace}.{name}")
            return self.tables.append(table, rows)

        return until_won(attempt, self.backoff)[0]


def acl_etag(episode_id: str, acl: Iterable[str]) -> str:
    """An episode's version for If-Match: a hash of its id and current ACL, the one part of
    an episode a write changes (its body and fields are content-addressed, fixed)."""
    return etag_of({"id": episode_id, "acl": sorted(acl)})


def principal_etag(principal: Principal) -> str:
    """A principal's version: a hash of its groups and roles. Every user id has one (none
    set: no groups, no roles), so it always has a tag."""
    return etag_of(principal.wire())


class _HeldMeanwhile(Exception):
    """Another commit wrote one of a write's new episode ids after it was classified."""


class _ChangedMeanwhile(Exception):
    """Another commit changed the value a close was about to end: plan the close again."""


def _conflict(conflicts: list[dict[str, Any]], batch: bool) -> Conflict:
    first = conflicts[0]
    if "fields" in first:
        message = (f"Episode {first['id']} already exists with a different "
                   + ", ".join(first["fields"]) + "; a write never changes a held episode.")
    else:
        message = f"Episode {first['id']} already exists; a write never changes a held episode."
    return Conflict(message, details={"conflicts": conflicts} if batch else
                    {k: v for k, v in first.items() if k != "index"})


def _units(rec: EpisodeRecord, body: str) -> list[Unit]:
    etype = by_name(rec.type)
    return etype.units(body) if etype else []


def _fact_key(f: FactRecord) -> tuple[Any, ...]:
    """What makes two fact versions the same statement (ids, commits and authors aside)."""
    return (f.kind, f.entity, f.predicate, f.value, f.valid_from, f.valid_to, f.quote, f.cites)


def _json_value(value: object) -> str:
    return json.dumps(value, ensure_ascii=False)


def _unclaimed(source: str) -> bool:
    return type_for_source(source) is None
