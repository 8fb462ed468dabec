"""Feeding the search index from committed rows, and only from them.

The search index follows the ledger: per scope and branch it keeps a cursor (the last
commit it applied) and applies the commits after it in chain order. Rows come from
core's read index (`memory/readindex.py`), which holds only rows of commits in the
ledger and is itself rebuilt from the Iceberg tables alone; so the search index is a
pure function of the tables too.

Three callers, one path (:meth:`Feed.feed`): every commit of this process (the
``after_commit`` hook of :class:`MemoryService`, so a write is searchable when its POST
returns), every search (the branches of its view first catch up with commits of other
processes), and the ``serve`` timer and ``index rebuild`` (every scope, every branch).

Each branch is fed on its own: its own commits' rows, under its own (scope, branch). A
branch copies nothing from the commit it forked from; a search on it reads its ancestors'
rows too, cut to the fork point (`search/cutoff.py`). A ``delete`` marker drops the
branch's rows from the index (:meth:`SearchIndex.clear_branch`), as it does from the read
index, so a branch made later under the same name starts empty.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from functools import partial

from ampup_memory.errors import NotFound, ServiceUnavailable
from ampup_memory.memory.branches import branch_segments
from ampup_memory.memory.episode_types import by_name
from ampup_memory.memory.episodes import EpisodeRecord
from ampup_memory.memory.facts import FactRecord
from ampup_memory.memory.ledger import DELETE
from ampup_memory.memory.scopes import MAIN
from ampup_memory.memory.segments import NO_LIMIT
from ampup_memory.memory.service import MemoryService
from ampup_memory.search.cutoff import Cutoff
from ampup_memory.search.embed import build_embedder
from ampup_memory.search.engine import SearchEngine
from ampup_memory.search.index.base import (
    Cite,
    DocumentBatch,
    EpisodeDoc,
    FactDoc,
    Unit,
)
from ampup_memory.search.index.registry import open_index
from ampup_memory.settings import Settings

log = logging.getLogger("ampup_memory.search")

COMMITS_PER_BATCH = 50  # one ingest transaction; a commit holds at most a few hundred rows
Progress = Callable[[int], None]


def documents(scope: str, episodes: Iterable[EpisodeRecord], bodies: dict[str, str],
              facts: Iterable[FactRecord]) -> DocumentBatch:
    """Committed rows as index documents: episodes with units and ACL, facts (closures
    included) with citations and valid time."""
    batch = DocumentBatch()
    # Chain order, then id: the order a live feed (one commit at a time) numbers them in,
    # whatever order the read index returns them and however many commits one batch holds,
    # so a rebuilt index numbers every scope's rows in the same relative order.
    for rec in sorted(episodes, key=lambda r: (r.seq, r.id)):
        etype = by_name(rec.type)
        body = bodies.get(rec.body_ref, "")
        units = etype.units(body) if etype and not etype.reserved else []
        batch.episodes.append(EpisodeDoc(
            id=rec.id, scope=scope, branch=rec.branch, commit=rec.commit_id,
            occurred_at=rec.occurred_at, acl=rec.acl, source=rec.source,
            units=tuple(Unit(u.n, u.kind, u.text) for u in units), seq=rec.seq,
        ))
    for f in facts:
        batch.facts.append(FactDoc(
            id=f.fact_id, scope=scope, branch=f.branch, commit=f.commit_id,
            entity=f.entity, predicate=f.predicate, value=f.value or "", quote=f.quote,
            valid_from=f.valid_from, valid_to=f.valid_to,
            cites=tuple(Cite(e, u) for e, u in f.cites), written_by=f.written_by,
            commit_seq=f.seq, ord=f.ord, kind=f.kind,
        ))
    return batch


class Feed:
    def __init__(self, memory: MemoryService, engine: SearchEngine) -> None:
        self.memory = memory
        self.engine = engine
        # One feeder at a time per process: two would both read the same cursor.
        self._lock = threading.Lock()

    def attach(self) -> None:
        """Feed every commit this process makes before its write returns."""
        self.memory.after_commit.append(self.on_commit)
        self.memory.workspaces.dropped.append(self.on_drop)

    def detach(self) -> None:
        if self.on_commit in self.memory.after_commit:
            self.memory.after_commit.remove(self.on_commit)
        if self.on_drop in self.memory.workspaces.dropped:
            self.memory.workspaces.dropped.remove(self.on_drop)

    def on_drop(self, scope: str) -> None:
        """A workspace's scope was dropped: its rows and cursors go (under the feed's lock,
        so no batch of it lands after the clear)."""
        with self._lock:
            self.engine.index.clear(scope)

    def on_commit(self, scope: str, branch: str) -> None:
        self.feed(scope, branch)

    def _cursor_seq(self, scope: str, branch: str) -> int:
        cursor = self.engine.index.cursor(scope, branch)
        if cursor is None:
            return 0
        entry = self.memory.index.entry(cursor)
        if entry is None or entry.scope != scope or entry.branch != branch:
            # A cursor the ledger does not know (an index from other tables, say tables
            # restored under it): the branch's rows go and it is fed again from the start,
            # so nothing of a commit the tables lack stays searchable.
            log.warning("search cursor %s of %s/%s is not in the ledger; refeeding the "
                        "branch", cursor[:12], scope, branch)
            self.engine.index.clear_branch(scope, branch)
            return 0
        return entry.seq

    def feed(self, scope: str, branch: str, progress: Progress | None = None) -> int:
        """Apply the commits the read index holds that the search index has not seen;
        returns how many. A branch's ancestors are fed first (a fact on the branch may cite
        an episode of the commit it forked from). Does not read the tables: see
        :meth:`reach`."""
        with self._lock:
            chain = self._chain(scope, branch)
            return sum(self._feed(scope, b, tuple(reversed(chain[:i])), progress)
                       for i, b in enumerate(chain))

    def _chain(self, scope: str, branch: str) -> list[str]:
        """The branches of ``branch``'s view, oldest ancestor first (just the branch
        itself once it is deleted: its rows leave the index at its delete marker)."""
        if branch == MAIN:
            return [MAIN]
        try:
            return [s.branch for s in branch_segments(self.memory.index, scope, branch)]
        except NotFound:
            return [branch]

    def _feed(self, scope: str, branch: str, lineage: tuple[str, ...],
              progress: Progress | None) -> int:
        done = 0
        while True:
            after = self._cursor_seq(scope, branch)
            entries = self.memory.index.applied_after(scope, branch, after, COMMITS_PER_BATCH)
            if not entries:
                return done
            deleted = [e for e in entries if e.kind == DELETE]
            if deleted:
                # The branch was deleted: what the index holds of it goes (the read index
                # dropped its rows too), so a branch made later under its name starts
                # empty. The commits before the marker have nothing left to feed.
                self.engine.drop_branch(scope, branch, deleted[-1].commit_id)
                done += entries.index(deleted[-1]) + 1
                if progress is not None:
                    progress(entries.index(deleted[-1]) + 1)
                continue
            first, last = entries[0].seq, entries[-1].seq
            episodes, facts = self.memory.index.commit_rows(scope, branch, first, last)
            episodes.update(self._acl_copies(scope, branch, first, last, episodes))
            bodies = self.memory.index.bodies(scope, {e.body_ref for e in episodes.values()})
            batch = documents(scope, episodes.values(), bodies, facts)
            self.engine.ingest(batch, (scope, branch, entries[-1].commit_id), lineage)
            done += len(entries)
            if progress is not None:
                progress(len(entries))

    def _acl_copies(self, scope: str, branch: str, first: int, last: int,
                    own: dict[str, EpisodeRecord]) -> dict[str, EpisodeRecord]:
        """Episodes of the branch's ancestors whose ACL these commits of the branch
        changed, as the branch's own rows: the branch's ACL decides on its view (core's
        ``_current_acl``), so the index holds the episode on the branch too, with the
        ancestor's commit (it is in a view exactly when the ancestor's row is)."""
        if branch == MAIN:  # main has no ancestor: every episode it holds is its own
            return {}
        changed = self.memory.index.acl_change_seqs(scope, branch, first, last)
        wanted = set(changed) - set(own)
        if not wanted:
            return {}
        try:
            segs = branch_segments(self.memory.index, scope, branch)
        except NotFound:  # deleted since: its marker clears the branch on the next pass
            return {}
        found = self.memory.index.episodes(scope, segs, wanted)  # ACL: current on the chain
        # Numbered in the order of the change's commit, as a feed of one commit at a time.
        return {i: replace(rec, branch=branch, seq=changed[i]) for i, rec in found.items()}

    def lag(self, scope: str, branch: str) -> int:
        """Commits the read index holds that the search index has not applied yet."""
        head = self.memory.index.head(scope, branch)
        return 0 if head is None else max(0, head.seq - self._cursor_seq(scope, branch))

    def branches(self, scope: str) -> list[str]:
        """Main and every branch the scope's ledger names, deleted ones included (feeding
        one applies its delete marker: the index lets go of what it still holds of it)."""
        return [MAIN, *sorted(self.memory.index.markers(scope))]

    def reach(self, scope: str, branch: str, at_commit: str | None) -> Cutoff | None:
        """Catch up, then what a search of (scope, branch, ``at_commit``) reads: None for
        the whole of main, else the view's segments (`search/cutoff.py`).

        The view is core's (``MemoryService.view``: the same 404 as ``GET /facts`` for an
        unknown branch, or a commit unknown or of another scope or branch)."""
        view = self.memory.view(scope, branch, at_commit)
        scope, branch = str(view.scope), view.branch
        self.feed(scope, branch)
        if view.at_commit is None and len(view.segments) == 1:
            return None
        for seg in view.segments:
            if seg.upto < NO_LIMIT and self._cursor_seq(scope, seg.branch) < seg.upto:
                # The read index holds the commit but not yet every commit before it.
                self.feed(scope, branch)
                if self._cursor_seq(scope, seg.branch) < seg.upto:
                    raise ServiceUnavailable(
                        "The search index has not reached that commit yet; retry shortly.",
                        details={"at_commit": view.at_commit or ""})
        return Cutoff(view.segments, partial(self.memory.index.commit_places, scope),
                      view.at_commit)

    def catch_up_all(self, only: str | None = None, progress: Progress | None = None) -> int:
        """Every scope (or one), every branch: the start-up pass, the timer's and the
        rebuild's."""
        self.memory.sync.ledger_table()
        done = 0
        for scope in self.memory.tables.scopes():
            if only is not None and str(scope) != only:
                continue
            self.memory.sync.scope(scope)
            for branch in self.branches(str(scope)):
                done += self.feed(str(scope), branch, progress)
        return done

    def pending(self, only: str | None = None) -> int:
        """Commits the search index has still to apply (for a progress bar's total)."""
        self.memory.sync.ledger_table()
        total = 0
        for scope in self.memory.tables.scopes():
            if only is not None and str(scope) != only:
                continue
            self.memory.sync.scope(scope)
            total += sum(self.lag(str(scope), b) for b in self.branches(str(scope)))
        return total


@contextmanager
def attached_feed(settings: Settings, memory: MemoryService) -> Iterator[Feed]:
    """A feed for a process without ``serve`` (the CLI): its commits reach the index
    before it exits, exactly as a server's do."""
    engine = SearchEngine(open_index(settings.resolved_index_uri,
                                     settings.search_ann_min_vectors, settings.ann_params),
                          build_embedder(settings))
    try:
        engine.ensure_model()
        feed = Feed(memory, engine)
        feed.attach()
        try:
            yield feed
        finally:
            feed.detach()
    finally:
        engine.index.close()
