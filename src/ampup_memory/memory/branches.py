"""Branches and merge, as in git, on the one ledger.

A branch is a chain of the ledger: its first row (kind ``branch``) has for parent the
commit it forked from; its view is that commit's view plus its own commits (segments.py),
so making one copies no rows. ``delete`` is a row of the same chain: the name is free
again, the commits stay in the ledger, and the read index drops the branch's rows.

A merge compares, per (entity, predicate), the current value at three points: the merge
base, ``into`` (ours) and ``from`` (theirs); for a many-valued attribute (schemas.py), per
(entity, predicate, value). Changed on one side only: that side's value;
changed on both to the same result: nothing to do; changed on both to different results: a
conflict, and the whole merge is refused. Episodes are content-addressed, so both sides'
episodes are united; the same episode with a different ACL on each side is compared the
same way. A merge writes one commit on ``into`` whose ledger row names both parents and
which carries copies of what it takes from ``from``.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from ampup_memory.blank import NotBlankText
from ampup_memory.errors import Conflict, NotFound, NotYours, field_error
from ampup_memory.memory.acl import Principal, may_read
from ampup_memory.memory.episodes import EpisodeRecord, Prepared
from ampup_memory.memory.facts import CLOSURE, FactRecord, current, newest_order, timeline
from ampup_memory.memory.ledger import (
    BRANCH,
    DELETE,
    MERGE,
    CommitText,
    LedgerEntry,
)
from ampup_memory.memory.readindex import ReadIndex
from ampup_memory.memory.reads import ReadMark
from ampup_memory.memory.rows import fact_id
from ampup_memory.memory.schemas import SCHEMA_ENTITY, schema_at
from ampup_memory.memory.scopes import (
    MAIN,
    BranchName,
    BranchText,
    Scope,
    ScopeText,
    parse_branch,
    parse_scope,
)
from ampup_memory.memory.segments import NO_LIMIT, Segment, Segments, uncovered
from ampup_memory.memory.snapshots import PIN, SNAPSHOT, head_key, utcnow
from ampup_memory.timefmt import utc_text

if TYPE_CHECKING:
    from ampup_memory.memory.service import MemoryService

MAX_DEPTH = 32  # branches of branches: deeper chains are refused at creation
CHAINS_KEPT = 1024  # branch chains remembered per read index (a few bytes each)


class CreateBranch(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    scope: ScopeText
    name: BranchName
    from_: BranchText | None = Field(default=None, alias="from",
                                     description="The branch to fork (default main).")
    at_commit: CommitText | None = Field(default=None, description="Fork at this commit of "
                                         "`from` (default its head).")


class MergeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    scope: ScopeText
    from_: BranchText = Field(alias="from", description="The branch merged in.")
    into: BranchText | None = Field(default=None, description="Default main.")
    message: NotBlankText | None = Field(default=None, max_length=1000)
    dry_run: bool = False


# -- where a branch reads --------------------------------------------------------------------
def branch_segments(index: ReadIndex, scope: str, branch: str,
                    upto: int = NO_LIMIT) -> Segments:
    """The segments of ``branch``'s view (its own chain up to ``upto``); 404 for a branch
    never created or deleted.

    A branch's chain is fixed by its creation marker: the marker names the commit it
    forked from, ledger rows never change, and a branch with branches made from it
    cannot be deleted. So the chain is read once per marker (`ReadIndex.chains`); each
    read still looks the marker up, so a branch deleted, or deleted and made again under
    its name (a new marker), is never read through a chain it no longer has."""
    if branch == MAIN:
        return (Segment(MAIN, 0, upto),)
    marker = index.marker(scope, branch)
    if marker is None or marker.kind != BRANCH:
        raise NotFound(f"No branch {branch!r} in {scope}.", details={"branch": branch})
    chain = index.chains.get((scope, marker.commit_id))
    if chain is None:
        chain = _chain(index, scope, branch, marker)
        if len(index.chains) >= CHAINS_KEPT:
            index.chains.clear()
        index.chains[(scope, marker.commit_id)] = chain
    own = chain[-1]
    return (*chain[:-1], Segment(own.branch, own.after, upto))


def _chain(index: ReadIndex, scope: str, branch: str, marker: LedgerEntry) -> Segments:
    """The segments of a branch's whole view, read from its marker up the chain."""
    segs: list[Segment] = []
    name, limit = branch, NO_LIMIT
    found: LedgerEntry | None = marker
    for _ in range(MAX_DEPTH + 1):
        if name == MAIN:
            segs.append(Segment(MAIN, 0, limit))
            return tuple(reversed(segs))
        at = found if found is not None else index.marker(scope, name)
        found = None
        base = index.entry(at.parent) if at and at.parent else None
        if at is None or at.kind != BRANCH or base is None:
            raise NotFound(f"No branch {branch!r} in {scope}.", details={"branch": branch})
        segs.append(Segment(name, at.seq, limit))
        name, limit = base.branch, base.seq
    raise Conflict("The branch's chain of ancestors is too deep.")


def _fork_point(index: ReadIndex, scope: str, name: str) -> LedgerEntry | None:
    marker = index.marker(scope, name)
    if marker is None or marker.kind != BRANCH or not marker.parent:
        return None
    return index.entry(marker.parent)


# -- create, list, delete ----------------------------------------------------------------------
def create(svc: MemoryService, user: str, req: CreateBranch) -> dict[str, Any]:
    scope = parse_scope(req.scope)
    if not req.name:  # a new branch needs its name (blank is refused as everywhere)
        raise field_error(["name"], "a new branch needs a name", "branch_invalid")
    name = parse_branch(req.name, "name", required=True)
    source = parse_branch(req.from_, "from")
    ns = str(scope)
    if name == MAIN:
        raise Conflict("Branch 'main' already exists.", code="BRANCH_EXISTS",
                       details={"name": name})
    with svc._write_lock:
        view = svc.view(ns, source, req.at_commit)  # 404: unknown branch or commit
        if len(view.segments) > MAX_DEPTH:
            raise Conflict("Branches may be nested at most "
                           f"{MAX_DEPTH} deep.", details={"from": source})
        if svc.index.head(ns, source) is None:
            raise NotFound(f"{ns} has no commit to branch from yet.",
                           details={"scope": ns})

        def fork() -> str | None:
            if view.at_commit:
                return view.at_commit
            head = svc.index.head(ns, source)
            return head.commit_id if head else None

        def name_free() -> None:  # inside the ledger's compare-and-set
            marker = svc.index.marker(ns, name)
            if marker is not None and marker.kind == BRANCH:
                raise Conflict(f"Branch {name!r} already exists in {ns}.",
                               code="BRANCH_EXISTS", details={"name": name})
            branch_segments(svc.index, ns, source)  # the source was not deleted meanwhile

        entry = svc._commit(scope, name, user, f"branch from {source}", [], [],
                            svc.next_commit_id(scope, source), recheck=name_free,
                            kind=BRANCH, parent=fork)
    if source == MAIN and not view.at_commit:
        # Forked from main's head as the commit landed (the compare-and-set asserted it):
        # the marker is the branch's head, nothing is ahead or behind; the general answer
        # would read that back in five ledger queries.
        return {"scope": ns, "name": name, "head": entry.commit_id, "from": MAIN,
                "base": entry.parent, "created_by": entry.author,
                "created_at": utc_text(entry.committed_at), "ahead": 0, "behind": 0}
    return _branch_wire(svc.index, ns, name, entry)


def _branch_wire(index: ReadIndex, scope: str, name: str,
                 marker: LedgerEntry | None) -> dict[str, Any]:
    head = index.head(scope, name)
    out: dict[str, Any] = {"scope": scope, "name": name,
                           "head": head.commit_id if head else None}
    if name == MAIN or marker is None:
        segs: Segments = (Segment(MAIN),)
        out.update(base=None, created_by=None, created_at=None, ahead=0, behind=0,
                   **{"from": None})
        return out
    base = index.entry(marker.parent) if marker.parent else None
    segs = branch_segments(index, scope, name)
    main_upto = segs[0].upto  # how much of main the branch sees
    out.update({"from": base.branch if base else None,
                "base": marker.parent, "created_by": marker.author,
                "created_at": utc_text(marker.committed_at),
                "ahead": index.count_commits(scope, (Segment(name, marker.seq),)),
                "behind": index.count_commits(scope, (Segment(MAIN, main_upto),))})
    return out


def list_branches(svc: MemoryService, scope_text: str) -> dict[str, Any]:
    scope = parse_scope(scope_text)
    ns = str(scope)
    svc.workspaces.require_live(scope)  # a gone workspace's scope lists nothing, as reads
    svc.sync.scope(scope)
    out = [_branch_wire(svc.index, ns, MAIN, None)]
    for name, marker in sorted(svc.index.markers(ns).items()):
        if marker.kind == BRANCH:
            out.append(_branch_wire(svc.index, ns, name, marker))
    return {"scope": ns, "branches": out}


def delete(svc: MemoryService, user: str, scope_text: str, name_text: str,
           admin: bool) -> dict[str, Any]:
    scope = parse_scope(scope_text)
    name = parse_branch(name_text, "name", required=True)
    ns = str(scope)
    if name == MAIN:
        raise Conflict("Branch 'main' cannot be deleted.", code="BRANCH_PROTECTED")
    svc.workspaces.require_live(scope)
    with svc._write_lock:
        svc.sync.scope(scope)
        marker = svc.index.marker(ns, name)
        if marker is None or marker.kind != BRANCH:
            raise NotFound(f"No branch {name!r} in {ns}.", details={"branch": name})
        if not admin and marker.author != user:
            raise NotYours("Only the branch's creator or an admin may delete it.")

        def deletable() -> None:
            now = svc.index.marker(ns, name)
            if now is None or now.kind != BRANCH or now.commit_id != marker.commit_id:
                raise NotFound(f"No branch {name!r} in {ns}.", details={"branch": name})
            children = _children(svc.index, ns, name)
            if children:
                raise Conflict(f"Branch {name!r} has branches made from it; delete those "
                               "first.", code="BRANCH_HAS_CHILDREN",
                               details={"branches": children})
            held = _held_by(svc, ns, name)
            if held:
                # A pin or snapshot promises its reads for its lease: the branch stays until
                # they are released or expire. Counts only: a hold's id lets its holder read.
                raise Conflict(f"Branch {name!r} is held by a live pin or snapshot; release "
                               "it or let it expire first.", code="BRANCH_HELD",
                               details=held)

        entry = svc._commit(scope, name, user, f"delete branch {name}", [], [],
                            svc.next_commit_id(scope, name), recheck=deletable,
                            kind=DELETE)
    return {"scope": ns, "name": name, "deleted": True, "commit": entry.commit_id}


def _held_by(svc: MemoryService, scope: str, name: str) -> dict[str, int]:
    """How many live pins and snapshots hold a head of this branch (none: empty)."""
    key, now = head_key(scope, name), utcnow()
    held = [h for h in svc.holds.all().values() if h.live(now) and key in h.heads]
    counts = {"pins": sum(h.kind == PIN for h in held),
              "snapshots": sum(h.kind == SNAPSHOT for h in held)}
    return counts if held else {}


def _children(index: ReadIndex, scope: str, name: str) -> list[str]:
    out = []
    for child, marker in index.markers(scope).items():
        if marker.kind != BRANCH or not marker.parent:
            continue
        base = index.entry(marker.parent)
        if base is not None and base.branch == name:
            out.append(child)
    return sorted(out)


# -- merge -------------------------------------------------------------------------------------
class _Moved(Exception):
    """``into`` moved between planning a merge and committing it: plan again."""


@dataclass
class Plan:
    base: Segments
    ours_head: str | None
    theirs_head: str | None
    fast_forward: bool
    episodes: list[EpisodeRecord] = field(default_factory=list)
    acl_changes: list[EpisodeRecord] = field(default_factory=list)
    facts: list[FactRecord] = field(default_factory=list)
    conflicts: list[dict[str, Any]] = field(default_factory=list)
    reads: list[ReadMark] = field(default_factory=list)  # extraction's, carried along

    @property
    def changes(self) -> dict[str, int]:
        return {"episodes": len(self.episodes), "facts": len(self.facts),
                "acl_changes": len(self.acl_changes)}

    @property
    def empty(self) -> bool:
        return not (self.episodes or self.facts or self.acl_changes or self.reads)


def merge_base(index: ReadIndex, scope: str, src: str, dst: str, theirs: Segments,
               ours: Segments) -> Segments:
    """What both sides last had in common: the newest commit merged between them (either
    way) if any, else where their chains part."""
    best: tuple[datetime, LedgerEntry] | None = None
    for here, other, segs_here, segs_other in ((dst, src, ours, theirs),
                                               (src, dst, theirs, ours)):
        for m in index.merges(scope, here, segs_here[-1].after):
            got = index.entry(m.merged) if m.merged else None
            if (got is not None and got.branch == other and segs_other[-1].holds(got.seq)
                    and (best is None or m.committed_at > best[0])):
                best = (m.committed_at, got)
    if best is not None:
        return branch_segments(index, scope, best[1].branch, best[1].seq)
    common: list[Segment] = []
    for a, b in zip(theirs, ours, strict=False):
        if a.branch != b.branch or a.after != b.after:
            break
        common.append(Segment(a.branch, a.after, min(a.upto, b.upto)))
        if a.upto != b.upto:
            break
    return tuple(common)


def _value(versions: Iterable[FactRecord], at: datetime) -> FactRecord | None:
    window = current(timeline(versions), at)
    return None if window is None else window.version


def _same(a: FactRecord | None, b: FactRecord | None) -> bool:
    return (a.value if a else None) == (b.value if b else None)


def plan(svc: MemoryService, principal: Principal, scope: Scope, src: str, dst: str,
         now: datetime) -> Plan:
    index, ns = svc.index, str(scope)
    theirs = branch_segments(index, ns, src)
    ours = branch_segments(index, ns, dst)
    ours_head, theirs_head = index.head(ns, dst), index.head(ns, src)
    base = merge_base(index, ns, src, dst, theirs, ours)
    new_t, new_o = uncovered(theirs, base), uncovered(ours, base)
    out = Plan(base, ours_head.commit_id if ours_head else None,
               theirs_head.commit_id if theirs_head else None,
               fast_forward=not new_o or index.count_commits(ns, new_o) == 0)
    if not new_t:
        return out
    # Facts: only pairs ``from`` wrote since the base can need anything.
    written = index.facts(ns, new_t, None, None)
    new_by_key = _grouped(written)
    keys = set(new_by_key)
    if out.fast_forward:  # ours is the base: every pair changed on theirs only
        keys = set()
        out.facts.extend(sorted(written, key=lambda f: (f.entity, f.predicate,
                                                        newest_order(f))))
    sides = {name: _grouped(index.facts_of(ns, segs, keys)) if segs and keys else {}
             for name, segs in (("base", base), ("ours", ours), ("theirs", theirs))}
    # A many-valued attribute (the schema of `from`, else of `into`) merges per value.
    typed = (schema_at(index, ns, theirs, now) or schema_at(index, ns, ours, now)
             if keys else None)
    for key in sorted(keys):
        many = typed is not None and typed[0].many(*key)
        slots = sorted({f.value or "" for side in sides.values()
                        for f in side.get(key, ())}) if many else [None]
        for slot in slots:
            def pick(vs: Iterable[FactRecord], slot: str | None = slot) -> list[FactRecord]:
                return [v for v in vs if slot is None or (v.value or "") == slot]

            new = pick(new_by_key[key])
            if not new:
                continue
            b, o, t = (_value(pick(sides[n].get(key, ())), now)
                       for n in ("base", "ours", "theirs"))
            if _same(o, b):  # ours untouched: take theirs (with its history)
                out.facts.extend(sorted(new, key=newest_order))
            elif _same(t, b) or _same(o, t):
                continue
            else:
                out.conflicts.append(_conflict(svc, principal, ns, key, (
                    ("base", base, b), ("ours", ours, o), ("theirs", theirs, t))))
    # Read marks: what `from` read that `into` has not, so `into` does not read it again.
    have = {(m.key, m.episode) for m in index.reads(ns, ours)}
    out.reads = [replace(m, branch=dst) for m in index.reads(ns, new_t)
                 if (m.key, m.episode) not in have]
    # Episodes: united; an ACL that differs is compared like a value.
    ids = index.episodes_in(ns, new_t) | index.acl_changed(ns, new_t)
    t_acl = index.acl_as_of(ns, theirs, ids)
    o_acl = index.acl_as_of(ns, ours, ids)
    b_acl = index.acl_as_of(ns, base, ids) if base else {}
    for ep in sorted(ids):
        t_rec, o_rec, b_rec = t_acl[ep], o_acl.get(ep), b_acl.get(ep)
        if o_rec is None:
            out.episodes.append(replace(t_rec, branch=dst))
            continue
        base_acl = b_rec.acl if b_rec else None
        if t_rec.acl == o_rec.acl or t_rec.acl == base_acl:
            continue
        if o_rec.acl == base_acl:
            out.acl_changes.append(replace(o_rec, acl=t_rec.acl, branch=dst))
            continue
        out.conflicts.append(_acl_conflict(svc, principal, ns, ep, (
            ("base", base, base_acl), ("ours", ours, o_rec.acl),
            ("theirs", theirs, t_rec.acl))))
    return out


def _acl_conflict(svc: MemoryService, principal: Principal, scope: str, episode: str,
                  sides: Iterable[tuple[str, Segments, tuple[str, ...] | None]],
                  ) -> dict[str, Any]:
    """An ACL conflict, reported as a value's is (`_conflict`): each side's ACL only to a
    caller who may read the episode on that side, which that ACL decides *and* so does the
    episode's current ACL on that side's chain (the one every read applies, as of any
    commit: a base ACL a narrowing since revoked shows nothing); the episode's id (its
    content's hash) only when some side is readable."""
    shown: dict[str, Any] = {}
    for name, segs, acl in sides:
        if acl is None:
            shown[name] = None
            continue
        readable = bool(segs) and may_read(principal, acl) and bool(
            svc.readable_episodes(principal, scope, segs, [episode]))
        shown[name] = list(acl) if readable else "hidden"
    named = any(v not in (None, "hidden") for v in shown.values())
    return {"episode": episode if named else "hidden", "field": "acl", **shown}


def _grouped(rows: Iterable[FactRecord]) -> dict[tuple[str, str], list[FactRecord]]:
    out: dict[tuple[str, str], list[FactRecord]] = defaultdict(list)
    for f in rows:
        out[(f.entity, f.predicate)].append(f)
    return out


def _conflict(svc: MemoryService, principal: Principal, scope: str, key: tuple[str, str],
              sides: Iterable[tuple[str, Segments, FactRecord | None]]) -> dict[str, Any]:
    """A conflict report: each side's value in clear only if the caller may read every
    episode it cites (as any read of it would require), else ``"hidden"``. The entity and
    predicate are named only when the caller may read some side: otherwise no read would
    show them the attribute exists, and the report must not either (as for an episode's
    ACL conflict, and as the ledger never names one)."""
    shown: dict[str, Any] = {}
    named = False
    for name, segs, version in sides:
        if version is None:
            shown[name] = None
            continue
        cited = [e for e, _ in version.cites]
        if not segs or len(svc.readable_episodes(principal, scope, segs, cited)) < len(
                set(cited)):
            shown[name] = "hidden"
            continue
        named = True
        shown[name] = (None if version.kind == CLOSURE or version.value is None
                       else json.loads(version.value))
    entity, predicate = key if named else ("hidden", "hidden")
    return {"entity": entity, "predicate": predicate, **shown}


def merge(svc: MemoryService, user: str, req: MergeRequest, *,
          admin: bool = False) -> dict[str, Any]:
    """``admin``: the caller holds admin rights, which a merge carrying a schema needs."""
    scope = parse_scope(req.scope)
    src = parse_branch(req.from_, "from", required=True)
    dst = parse_branch(req.into, "into")
    if src == dst:
        raise field_error(["from"], "a branch cannot be merged into itself", "merge_self")
    svc.workspaces.require_live(scope)
    ns = str(scope)
    principal = svc.principal(user)
    with svc._write_lock:
        while True:
            svc.sync.scope(scope)
            # Values current on either side as each side's chain tells the time.
            p = plan(svc, principal, scope, src, dst,
                     max(svc.now_on(scope, src), svc.now_on(scope, dst)))
            said = {"scope": ns, "from": src, "into": dst,
                    "base": _base_commit(svc.index, ns, p.base),
                    "fast_forward": p.fast_forward, "changes": p.changes}
            if not admin and dst == MAIN and any(f.entity == SCHEMA_ENTITY for f in p.facts):
                # Setting a schema takes admin rights (PUT /schemas), and main is what the
                # whole scope reads: an admin's trial schema on a branch is not main's until
                # an admin says so. (Any other branch may be forked from that branch by
                # anyone, schema and all.) A dry run answers as the merge would.
                raise NotYours(f"Merging {src} into main would set main's schema, which "
                               "takes admin rights (as PUT /schemas does): merge with an "
                               "admin key or the admin token, or ask an admin to.")
            if p.conflicts:
                raise Conflict(f"Merging {src} into {dst} conflicts on "
                               f"{len(p.conflicts)} value(s); nothing was written.",
                               code="MERGE_CONFLICT",
                               details={**said, "conflicts": p.conflicts})
            if p.empty or req.dry_run:
                return {**said, "merged": False, "dry_run": req.dry_run, "commit": None}
            commit_id = svc.next_commit_id(scope, dst, src)
            facts = [replace(f, fact_id=fact_id(commit_id, n), ord=n, branch=dst, layer=0)
                     for n, f in enumerate(p.facts)]
            bodies = svc.index.bodies(ns, {e.body_ref for e in p.episodes})
            episodes = [Prepared(e, bodies.get(e.body_ref, ""), True, True)
                        for e in p.episodes]

            def unmoved(head: str | None = p.ours_head) -> None:
                now = svc.index.head(ns, dst)
                if (now.commit_id if now else None) != head:
                    raise _Moved()

            try:
                entry = svc._commit(scope, dst, user, req.message or f"merge {src} into {dst}",
                                    episodes, facts, commit_id, p.acl_changes,
                                    recheck=unmoved, kind=MERGE, merged=p.theirs_head,
                                    reads=p.reads)
            except _Moved:
                continue
            return {**said, "merged": True, "dry_run": False, "commit": entry.commit_id}


def _base_commit(index: ReadIndex, scope: str, base: Segments) -> str | None:
    if not base:
        return None
    last = base[-1]
    if last.upto >= NO_LIMIT:
        head = index.head(scope, last.branch)
        return head.commit_id if head else None
    entry = index.commit_at(scope, last.branch, last.upto)
    return entry.commit_id if entry else None
