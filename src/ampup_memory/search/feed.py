"""Feeding the search index from committed rows, and only from them.

The search index follows the ledger: per scope and branch it keeps a cursor (the last
commit it applied) and applies the commits after it in chain order. Rows come from
core's read index (`memory/readindex.py`), which holds only rows of commits in the
ledger and is itself rebuilt from the Iceberg tables alone; so the search index is a
pure function of the tables too.

Three callers, one path (:meth:`Feed.feed`): every commit of this process (the
``after_commit`` hook of :class:`MemoryService`, so a write is searchable when its POST
returns), every search (its scope first catches up with commits of other processes),
and the ``serve`` timer and ``index rebuild`` (every scope).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from functools import partial

from ampup_memory.errors import ServiceUnavailable
from ampup_memory.memory.episode_types import by_name
from ampup_memory.memory.episodes import EpisodeRecord
from ampup_memory.memory.facts import FactRecord
from ampup_memory.memory.scopes import MAIN
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
            units=tuple(Unit(u.n, u.kind, u.text) for u in units),
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
            # A cursor the ledger does not know (an index from other tables): start over;
            # re-ingesting a held document changes nothing.
            log.warning("search cursor %s of %s/%s is not in the ledger; refeeding",
                        cursor[:12], scope, branch)
            return 0
        return entry.seq

    def feed(self, scope: str, branch: str, progress: Progress | None = None) -> int:
        """Apply the commits the read index holds that the search index has not seen;
        returns how many. Does not read the tables: see :meth:`catch_up`."""
        done = 0
        with self._lock:
            while True:
                after = self._cursor_seq(scope, branch)
                entries = self.memory.index.applied_after(scope, branch, after,
                                                          COMMITS_PER_BATCH)
                if not entries:
                    return done
                episodes, facts = self.memory.index.commit_rows(
                    scope, branch, entries[0].seq, entries[-1].seq)
                bodies = self.memory.index.bodies(scope, {e.body_ref for e in
                                                          episodes.values()})
                batch = documents(scope, episodes.values(), bodies, facts)
                self.engine.ingest(batch, (scope, branch, entries[-1].commit_id))
                done += len(entries)
                if progress is not None:
                    progress(len(entries))

    def lag(self, scope: str, branch: str) -> int:
        """Commits the read index holds that the search index has not applied yet."""
        head = self.memory.index.head(scope, branch)
        return 0 if head is None else max(0, head.seq - self._cursor_seq(scope, branch))

    def catch_up(self, scope: str, branch: str) -> int:
        """Bring the read index level with the tables for this scope, then feed it."""
        view = self.memory.view(scope, branch)  # parses, refuses unknown branches, syncs
        return self.feed(str(view.scope), view.branch)

    def cutoff(self, scope: str, branch: str, at_commit: str) -> Cutoff:
        """The cut for a search as of ``at_commit``, once the index holds that commit.

        The commit is resolved by core's own view (the check and the 404 of
        ``GET /facts?at_commit``: unknown, or of another scope or branch)."""
        view = self.memory.view(scope, branch, at_commit)
        scope, branch, commit = str(view.scope), view.branch, view.at_commit or at_commit
        if self._cursor_seq(scope, branch) < view.max_seq:
            self.feed(scope, branch)
            if self._cursor_seq(scope, branch) < view.max_seq:
                # The read index holds the commit but not yet every commit before it.
                raise ServiceUnavailable(
                    "The search index has not reached that commit yet; retry shortly.",
                    details={"at_commit": commit})
        return Cutoff(commit, view.max_seq,
                      partial(self.memory.index.commit_seqs, scope, branch))

    def catch_up_all(self, only: str | None = None, progress: Progress | None = None) -> int:
        """Every scope (or one): the start-up pass, the timer's and the rebuild's."""
        self.memory.sync.ledger_table()
        done = 0
        for scope in self.memory.tables.scopes():
            if only is not None and str(scope) != only:
                continue
            self.memory.sync.scope(scope)
            done += self.feed(str(scope), MAIN, progress)
        return done

    def pending(self, only: str | None = None) -> int:
        """Commits the search index has still to apply (for a progress bar's total)."""
        self.memory.sync.ledger_table()
        total = 0
        for scope in self.memory.tables.scopes():
            if only is not None and str(scope) != only:
                continue
            self.memory.sync.scope(scope)
            total += self.lag(str(scope), MAIN)
        return total


@contextmanager
def attached_feed(settings: Settings, memory: MemoryService) -> Iterator[Feed]:
    """A feed for a process without ``serve`` (the CLI): its commits reach the index
    before it exits, exactly as a server's do."""
    engine = SearchEngine(open_index(settings.resolved_index_uri), build_embedder(settings))
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
