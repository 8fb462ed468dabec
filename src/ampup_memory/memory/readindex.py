"""The read index: a small SQL copy of committed rows that serves reads in milliseconds.

It is derived: everything here comes from the Iceberg tables and ``rebuild`` recreates it
from them alone (a lost index loses nothing). Only rows of commits in the ledger get here,
which is what makes a crash between data rows and ledger row invisible. Tables are named
``mem_*`` so they can live in the search index's database (``AMPUP_MEMORY_INDEX_URI``) until
the search index folds them in. One SQLAlchemy code path serves SQLite and PostgreSQL.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    and_,
    bindparam,
    case,
    cast,
    create_engine,
    delete,
    event,
    func,
    inspect,
    literal,
    or_,
    select,
    text,
    tuple_,
    union_all,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.selectable import Select, Subquery

from ampup_memory.errors import ConfigurationError, driver_said
from ampup_memory.layouts import newer_layout, stored_version
from ampup_memory.memory.acl import Principal
from ampup_memory.memory.episodes import EpisodeRecord
from ampup_memory.memory.events import EventRecord
from ampup_memory.memory.facts import FactRecord
from ampup_memory.memory.ledger import BRANCH, DELETE, MERGE, Head, LedgerEntry
from ampup_memory.memory.reads import ReadMark
from ampup_memory.memory.schemas import SCHEMA_ENTITY
from ampup_memory.memory.segments import NO_LIMIT, Segment, Segments, layer_order, layers
from ampup_memory.memory.tables import schema_lock, sqlalchemy_url
from ampup_memory.pg_locks import PRINCIPALS_LOCK
from ampup_memory.settings import mask_secrets, mask_uri
from ampup_memory.sqlite_connections import enable_wal, open_note

log = logging.getLogger("ampup_memory.memory")

# A held lease is renewed this many times per its length while the pass runs, so a live
# holder keeps it however long the pass takes and a dead one loses it ``ttl`` after its
# last renewal (``lease_seconds``; docs/deployment.md, "Timed jobs").
LEASE_RENEWALS_PER_TTL = 3
DEFAULT_LEASE = timedelta(seconds=60)


def lease_holder() -> str:
    """A holder name that says which process holds a lease (host/pid/random), for
    operators reading ``mem_leases`` and for tests that kill the holder."""
    return f"{socket.gethostname()}/{os.getpid()}/{uuid.uuid4().hex[:8]}"

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MICRO = timedelta(microseconds=1)


def to_us(value: datetime) -> int:
    return (value - EPOCH) // MICRO


def from_us(value: int) -> datetime:
    return EPOCH + value * MICRO


md = MetaData()
meta_t = Table("mem_meta", md, Column("key", String(64), primary_key=True),
               Column("value", Text, nullable=False))
ledger_t = Table(
    "mem_ledger", md,
    Column("commit_id", String(40), primary_key=True),
    Column("scope", String(140), nullable=False), Column("branch", String(64), nullable=False),
    Column("seq", BigInteger, nullable=False), Column("parent", String(40)),
    Column("author", Text, nullable=False), Column("committed_at", BigInteger, nullable=False),
    Column("message", Text, nullable=False), Column("changes", Text, nullable=False),
    Column("snapshots", Text, nullable=False),
    Column("applied", Boolean, nullable=False, default=False),
    Column("kind", String(16), nullable=False, default="commit"), Column("merged", String(40)),
    Index("mem_ledger_chain", "scope", "branch", "seq"),
    Index("mem_ledger_pending", "scope", "applied"),
)
# The ledger look-ups every commit and branch creation makes, built once (building a
# statement cost more than running it).
_SCOPE: Any = bindparam("scope")
_BRANCH: Any = bindparam("branch")
_HEAD = (select(ledger_t.c.commit_id, ledger_t.c.seq, ledger_t.c.committed_at)
         .where(ledger_t.c.scope == _SCOPE, ledger_t.c.branch == _BRANCH)
         .order_by(ledger_t.c.seq.desc()).limit(1))
_CHAIN = select(func.count(), func.max(ledger_t.c.seq)).where(
    ledger_t.c.scope == _SCOPE, ledger_t.c.branch == _BRANCH)
_ENTRY = select(ledger_t).where(ledger_t.c.commit_id == bindparam("commit_id"))
_MARKER = (select(ledger_t).where(ledger_t.c.scope == _SCOPE, ledger_t.c.branch == _BRANCH,
                                  ledger_t.c.kind.in_((BRANCH, DELETE)))
           .order_by(ledger_t.c.seq.desc()).limit(1))
episodes_t = Table(
    "mem_episodes", md,
    Column("scope", String(140), primary_key=True), Column("branch", String(64), primary_key=True),
    Column("id", String(64), primary_key=True), Column("seq", BigInteger, nullable=False),
    Column("commit_id", String(40), nullable=False), Column("source", Text, nullable=False),
    Column("type", String(32), nullable=False), Column("occurred_at", BigInteger, nullable=False),
    Column("about", Text, nullable=False), Column("acl", Text, nullable=False),
    Column("document", String(512)), Column("body_ref", String(64), nullable=False),
    Index("mem_episodes_document", "scope", "branch", "document", "occurred_at"),
    Index("mem_episodes_time", "scope", "branch", "occurred_at", "id"),
)
# ACL changes by seq. Reads apply the latest one whatever commit they read as of: the current
# ACL decides who may read every version of an episode.
acl_t = Table(
    "mem_acl", md,
    Column("scope", String(140), primary_key=True), Column("branch", String(64), primary_key=True),
    Column("id", String(64), primary_key=True), Column("seq", BigInteger, primary_key=True),
    Column("acl", Text, nullable=False),
)
bodies_t = Table(
    "mem_bodies", md,
    Column("scope", String(140), primary_key=True),
    Column("body_ref", String(64), primary_key=True),
    Column("body", Text, nullable=False),
)
facts_t = Table(
    "mem_facts", md,
    Column("scope", String(140), primary_key=True), Column("branch", String(64), primary_key=True),
    Column("fact_id", String(48), primary_key=True), Column("seq", BigInteger, nullable=False),
    Column("ord", Integer, nullable=False), Column("commit_id", String(40), nullable=False),
    Column("kind", String(16), nullable=False), Column("entity", String(256), nullable=False),
    Column("predicate", String(128), nullable=False), Column("value", Text),
    Column("valid_from", BigInteger, nullable=False), Column("valid_to", BigInteger),
    Column("quote", Text, nullable=False), Column("cites", Text, nullable=False),
    Column("written_by", Text, nullable=False),
    Index("mem_facts_entity", "scope", "branch", "entity", "predicate"),
    # A commit's rows by seq (typed queries fold in the commits since a view's heads).
    Index("mem_facts_commit", "scope", "branch", "seq"),
)
# The episodes each fact row cites, one row per (fact, episode): lets a listing count and
# page the facts a caller may see in SQL (browse.py) instead of loading the scope's facts.
cites_t = Table(
    "mem_fact_cites", md,
    Column("scope", String(140), primary_key=True), Column("branch", String(64), primary_key=True),
    Column("fact_id", String(48), primary_key=True),
    Column("episode", String(64), primary_key=True), Column("seq", BigInteger, nullable=False),
)
# Events of advice runs and sessions (events.py): read by subject, or a scope's by kind.
events_t = Table(
    "mem_events", md,
    Column("scope", String(140), primary_key=True), Column("branch", String(64), primary_key=True),
    Column("id", String(40), primary_key=True), Column("seq", BigInteger, nullable=False),
    Column("commit_id", String(40), nullable=False), Column("subject", String(64), nullable=False),
    Column("kind", String(32), nullable=False), Column("user", String(200), nullable=False),
    Column("acl", Text, nullable=False), Column("reward", Float),
    Column("data", Text, nullable=False), Column("at", BigInteger, nullable=False),
    Index("mem_events_subject", "subject"),
    Index("mem_events_kind", "scope", "branch", "kind", "subject"),
)
# Extraction's read marks (reads.py): which episodes a model read with a schema version.
reads_t = Table(
    "mem_reads", md,
    Column("scope", String(140), primary_key=True), Column("branch", String(64), primary_key=True),
    Column("key", String(40), primary_key=True), Column("episode", String(64), primary_key=True),
    Column("seq", BigInteger, nullable=False), Column("commit_id", String(40), nullable=False),
    Column("model", Text, nullable=False), Column("schema", Text),
    Column("facts", Integer, nullable=False), Column("rejected", Text, nullable=False),
    Column("read_at", BigInteger, nullable=False),
)
principals_t = Table(
    "mem_principals", md,
    Column("user", String(200), primary_key=True), Column("groups", Text, nullable=False),
    Column("roles", Text, nullable=False),
)

leases_t = Table(
    "mem_leases", md,
    Column("name", String(64), primary_key=True), Column("holder", String(64), nullable=False),
    Column("until_us", BigInteger, nullable=False),
)

# Listing counts remembered (``_counted``), per scope, view and readable ACLs.
COUNTS_KEPT = 512
PLACES_KEPT = 100_000  # commit places remembered (commit_places)

# Indexes added to a layout without changing it: made on open where missing.
ADDED_INDEXES = [i for i in facts_t.indexes if i.name == "mem_facts_commit"]
LEDGER_SNAPSHOT = "ledger_snapshot"
PRINCIPALS_SNAPSHOT = "principals_snapshot"
# The layout of the mem_* tables (`layouts.py`). An index of an older layout is dropped and
# rebuilt from the tables on open (it is derived; nothing is lost); one of a newer layout
# is refused, unless the rebuild command asks for it to be replaced.
SCHEMA_KEY = "schema"
SCHEMA_VERSION = 3


class ReadIndex:
    def __init__(self, uri: str, *, replace_newer: bool = False) -> None:
        """``replace_newer``: an index a newer version wrote is dropped and made anew
        instead of refused (`ampup-memory index rebuild`, which rebuilds it at once)."""
        url = sqlalchemy_url(uri, setting="AMPUP_MEMORY_INDEX_URI")
        self.engine: Engine = create_engine(url, pool_pre_ping=True)
        self.dialect = self.engine.dialect.name
        self._counts: dict[tuple[Any, ...], Any] = {}
        self._counts_lock = threading.Lock()
        self._places: dict[str, tuple[str, str, int]] = {}  # commit → scope, branch, seq
        # (scope, a branch's creation marker) → its view's segments (`branch_segments`)
        self.chains: dict[tuple[str, str], Segments] = {}
        if self.dialect == "sqlite":
            event.listen(self.engine, "connect", _sqlite_pragmas)
        try:
            with schema_lock(self.engine) as conn:  # servers starting together: one at a time
                self._open_layout(conn, mask_uri(uri), replace_newer)
        except ConfigurationError:
            self.engine.dispose()
            raise
        except DBAPIError as exc:
            self.engine.dispose()
            # A SQLite file that cannot be opened or written, or a database that refuses
            # the connection (a wrong port, password or database name), is a setting that
            # cannot work: named as the read index, as the catalog is, not a bare
            # "database error" that leaves the operator to guess which of the URIs it was.
            said = mask_secrets(driver_said(exc), [urlsplit(uri).password])
            raise ConfigurationError(
                f"cannot open the read index {mask_uri(uri)}: {said}{open_note(uri)}"
            ) from exc

    def _open_layout(self, conn: Connection, where: str, replace_newer: bool) -> None:
        """Bring the tables to this version's layout, or refuse a newer one. The version
        is read before any table is made: a newer layout is left exactly as it was."""
        found = stored_version(
            conn.execute(select(meta_t.c.value).where(meta_t.c.key == SCHEMA_KEY)).scalar()
            if inspect(conn).has_table(meta_t.name) else None)
        if found is None:  # a new index
            self._reset(conn)
        elif found > SCHEMA_VERSION and not replace_newer:
            raise newer_layout(
                f"the read index {where}", found, SCHEMA_VERSION,
                "upgrade AmpUp Memory, or run `ampup-memory index rebuild` to rebuild the "
                "index for this version from the tables (a newer version rebuilds it "
                "again when it next starts)")
        elif found != SCHEMA_VERSION:
            log.warning("the read index %s has layout version %d and this version reads %d: "
                        "rebuilding it from the tables (nothing is lost; each scope catches "
                        "up on its first read)", where, found, SCHEMA_VERSION)
            self._reset(conn)
        else:
            md.create_all(conn, checkfirst=True)
        for index in ADDED_INDEXES:  # an index kept by an earlier release lacks them
            index.create(conn, checkfirst=True)

    def _reset(self, conn: Connection) -> None:
        self._places.clear()
        self.chains.clear()
        md.drop_all(conn, checkfirst=True)
        md.create_all(conn, checkfirst=True)
        self._set_meta(conn, SCHEMA_KEY, str(SCHEMA_VERSION))

    def close(self) -> None:
        self.engine.dispose()

    def reset(self) -> None:
        """Drop and recreate every ``mem_*`` table (the rebuild starts here)."""
        with schema_lock(self.engine) as conn:
            self._reset(conn)

    def _insert(self, table: Table) -> Any:
        return (sqlite.insert if self.dialect == "sqlite" else postgresql.insert)(table)

    # -- bookkeeping --------------------------------------------------------------------------
    def get_meta(self, key: str) -> str | None:
        with self.engine.connect() as conn:
            return conn.execute(select(meta_t.c.value).where(meta_t.c.key == key)).scalar()

    def meta_items(self, prefix: str) -> list[tuple[str, str]]:
        """Every (key, value) whose key starts with ``prefix`` (bound, wildcards escaped)."""
        with self.engine.connect() as conn:
            rows = conn.execute(select(meta_t.c.key, meta_t.c.value).where(
                meta_t.c.key.startswith(prefix, autoescape=True)).order_by(meta_t.c.key))
            return [(str(k), str(v)) for k, v in rows]

    def set_meta(self, key: str, value: str) -> None:
        with self.engine.begin() as conn:
            self._set_meta(conn, key, value)

    def _set_meta(self, conn: Connection, key: str, value: str) -> None:
        stmt = self._insert(meta_t).values(key=key, value=value)
        conn.execute(stmt.on_conflict_do_update(index_elements=["key"], set_={"value": value}))

    # -- ledger -------------------------------------------------------------------------------
    def add_ledger(self, entries: Sequence[LedgerEntry], snapshot_id: int | None) -> None:
        """Record ledger rows seen in the table (not yet applied) and how far we read."""
        with self.engine.begin() as conn:
            if entries:
                conn.execute(self._insert(ledger_t).on_conflict_do_nothing(),
                             [_ledger_values(e, applied=False) for e in entries])
            if snapshot_id is not None:
                self._set_meta(conn, LEDGER_SNAPSHOT, str(snapshot_id))

    def ledger_snapshot(self) -> int | None:
        value = self.get_meta(LEDGER_SNAPSHOT)
        return int(value) if value is not None else None

    def head(self, scope: str, branch: str) -> Head | None:
        with self.engine.connect() as conn:
            row = conn.execute(_HEAD, {"scope": scope, "branch": branch}).first()
        return Head(row.commit_id, int(row.seq), from_us(row.committed_at)) if row else None

    def chain_complete(self, scope: str, branch: str) -> bool:
        """Seq runs 1..n with no gap: the index holds the whole chain it knows the head of."""
        with self.engine.connect() as conn:
            count, top = conn.execute(_CHAIN, {"scope": scope, "branch": branch}).one()
        return bool(count == (top or 0))

    def entry(self, commit_id: str) -> LedgerEntry | None:
        with self.engine.connect() as conn:
            row = conn.execute(_ENTRY, {"commit_id": commit_id}).first()
        return _ledger_entry(row._mapping) if row else None

    def commit_seqs(self, scope: str, branch: str, commit_ids: Iterable[str]) -> dict[str, int]:
        """Ledger seq of each listed commit of this scope and branch (others are left out)."""
        wanted = sorted(set(commit_ids))
        found: dict[str, int] = {}
        with self.engine.connect() as conn:
            for i in range(0, len(wanted), 500):
                stmt = select(ledger_t.c.commit_id, ledger_t.c.seq).where(
                    ledger_t.c.scope == scope, ledger_t.c.branch == branch,
                    ledger_t.c.commit_id.in_(wanted[i:i + 500]))
                found.update((str(c), int(s)) for c, s in conn.execute(stmt))
        return found

    def marker(self, scope: str, branch: str) -> LedgerEntry | None:
        """The branch's latest creation or deletion row (None: never created)."""
        with self.engine.connect() as conn:
            row = conn.execute(_MARKER, {"scope": scope, "branch": branch}).first()
        return _ledger_entry(row._mapping) if row else None

    def markers(self, scope: str) -> dict[str, LedgerEntry]:
        """Each branch of the scope ever created → its latest creation or deletion row."""
        stmt = (select(ledger_t).where(ledger_t.c.scope == scope,
                                       ledger_t.c.kind.in_((BRANCH, DELETE)))
                .order_by(ledger_t.c.seq))
        with self.engine.connect() as conn:
            return {e.branch: e for e in (_ledger_entry(r._mapping) for r in conn.execute(stmt))}

    def merges(self, scope: str, branch: str, after_seq: int) -> list[LedgerEntry]:
        """Merge commits on the branch's chain after ``after_seq``, oldest first."""
        stmt = (select(ledger_t).where(ledger_t.c.scope == scope, ledger_t.c.branch == branch,
                                       ledger_t.c.kind == MERGE, ledger_t.c.seq > after_seq)
                .order_by(ledger_t.c.seq))
        with self.engine.connect() as conn:
            return [_ledger_entry(r._mapping) for r in conn.execute(stmt)]

    def commit_at(self, scope: str, branch: str, seq: int) -> LedgerEntry | None:
        stmt = select(ledger_t).where(ledger_t.c.scope == scope, ledger_t.c.branch == branch,
                                      ledger_t.c.seq == seq)
        with self.engine.connect() as conn:
            row = conn.execute(stmt).first()
        return _ledger_entry(row._mapping) if row else None

    def ahead(self, scope: str, branch: str, after_seq: int) -> int:
        """Commits on the branch's chain after ``after_seq`` (markers not counted)."""
        stmt = select(func.count()).where(
            ledger_t.c.scope == scope, ledger_t.c.branch == branch,
            ledger_t.c.seq > after_seq, ledger_t.c.kind.not_in((BRANCH, DELETE)))
        with self.engine.connect() as conn:
            return int(conn.execute(stmt).scalar() or 0)

    def ledger_page(self, scope: str, branch: str, limit: int,
                    before_seq: int | None) -> list[LedgerEntry]:
        stmt = select(ledger_t).where(ledger_t.c.scope == scope, ledger_t.c.branch == branch)
        if before_seq is not None:
            stmt = stmt.where(ledger_t.c.seq < before_seq)
        stmt = stmt.order_by(ledger_t.c.seq.desc()).limit(limit)
        with self.engine.connect() as conn:
            return [_ledger_entry(r._mapping) for r in conn.execute(stmt)]

    def pending(self, scope: str) -> list[LedgerEntry]:
        stmt = (select(ledger_t).where(ledger_t.c.scope == scope, ledger_t.c.applied.is_(False))
                .order_by(ledger_t.c.seq))
        with self.engine.connect() as conn:
            return [_ledger_entry(r._mapping) for r in conn.execute(stmt)]

    def latest_commit_time(self) -> datetime | None:
        with self.engine.connect() as conn:
            value = conn.execute(select(func.max(ledger_t.c.committed_at))).scalar()
        return from_us(value) if value is not None else None

    def newest_commit(self) -> str | None:
        """The commit with the latest ``committed_at`` the index holds (None: none)."""
        stmt = (select(ledger_t.c.commit_id)
                .order_by(ledger_t.c.committed_at.desc(), ledger_t.c.commit_id.desc()).limit(1))
        with self.engine.connect() as conn:
            value = conn.execute(stmt).scalar()
        return str(value) if value is not None else None

    def known_commits(self) -> set[str]:
        with self.engine.connect() as conn:
            return set(conn.execute(select(ledger_t.c.commit_id)).scalars())

    # -- applying a commit's rows ---------------------------------------------------------------
    def apply(self, entry: LedgerEntry, episodes: Iterable[EpisodeRecord],
              bodies: Iterable[tuple[str, str]], facts: Iterable[FactRecord],
              acl_changes: Iterable[EpisodeRecord] = (),
              events: Iterable[EventRecord] = (),
              reads: Iterable[ReadMark] = (),
              ledger_step: tuple[int | None, int] | None = None) -> None:
        """Copy one committed commit's rows in, then mark it applied; idempotent.

        When two commits carry the same episode id (two servers racing on one write), the
        earlier commit's row is kept, whichever order they are applied in.

        ``ledger_step``: (the ledger snapshot the index was level with, None for an empty
        ledger; the snapshot this commit's append made on it). The index then holds every
        ledger row of the new one, and records so when it still records the old one; else
        the next read of the ledger had to write it, so every read after a write was a
        write (a 507 on a full disk).
        """
        scope = entry.scope
        with self.engine.begin() as conn:
            ledger_ins = self._insert(ledger_t).values(**_ledger_values(entry, applied=True))
            conn.execute(ledger_ins.on_conflict_do_update(
                index_elements=["commit_id"], set_={"applied": True}))
            if entry.kind == DELETE:
                # A deleted branch's rows leave the index (its commits stay in the ledger),
                # so a branch made later under the same name starts empty.
                for t in (episodes_t, facts_t, cites_t, acl_t, events_t, reads_t):
                    conn.execute(delete(t).where(t.c.scope == scope,
                                                 t.c.branch == entry.branch,
                                                 t.c.seq < entry.seq))
            ep_rows = [_episode_values(scope, e, entry) for e in episodes]
            if ep_rows:
                ins = self._insert(episodes_t)
                keep_first = {c: ins.excluded[c] for c in ep_rows[0] if c not in
                              ("scope", "branch", "id")}
                conn.execute(ins.on_conflict_do_update(
                    index_elements=["scope", "branch", "id"], set_=keep_first,
                    where=episodes_t.c.seq > ins.excluded.seq), ep_rows)
            body_rows = [{"scope": scope, "body_ref": r, "body": b} for r, b in bodies]
            if body_rows:
                conn.execute(self._insert(bodies_t).on_conflict_do_nothing(), body_rows)
            facts = list(facts)
            fact_rows = [_fact_values(scope, f, entry) for f in facts]
            if fact_rows:
                conn.execute(self._insert(facts_t).on_conflict_do_nothing(), fact_rows)
            cite_rows = list({(f.branch, f.fact_id, e): {
                "scope": scope, "branch": f.branch, "fact_id": f.fact_id, "episode": e,
                "seq": entry.seq} for f in facts for e, _ in f.cites}.values())
            if cite_rows:
                conn.execute(self._insert(cites_t).on_conflict_do_nothing(), cite_rows)
            acl_rows = [{"scope": scope, "branch": e.branch, "id": e.id, "seq": entry.seq,
                         "acl": json.dumps(list(e.acl))} for e in acl_changes]
            if acl_rows:
                conn.execute(self._insert(acl_t).on_conflict_do_nothing(), acl_rows)
            event_rows = [_event_values(scope, e, entry) for e in events]
            if event_rows:
                conn.execute(self._insert(events_t).on_conflict_do_nothing(), event_rows)
            read_rows = [_read_values(scope, r, entry) for r in reads]
            if read_rows:
                conn.execute(self._insert(reads_t).on_conflict_do_nothing(), read_rows)
            if ledger_step is not None:  # moved meanwhile (another reader): left as it is
                before, after = ledger_step
                if before is None:  # the ledger's first snapshot: none recorded yet
                    conn.execute(self._insert(meta_t).values(
                        key=LEDGER_SNAPSHOT, value=str(after)).on_conflict_do_nothing())
                else:
                    conn.execute(update(meta_t).where(
                        meta_t.c.key == LEDGER_SNAPSHOT, meta_t.c.value == str(before)
                    ).values(value=str(after)))

    # -- reads --------------------------------------------------------------------------------
    # Every read takes the segments of a view (segments.py): main is one segment, a branch
    # its ancestors' segments then its own. A row is in the view when its branch is one of
    # the segments' and its seq is in that segment's range.
    # Each read runs once per segment (a view has one or a few): one OR across segments
    # keeps SQLite from using the (scope, branch, …) indexes, measured 60–120 ms instead of
    # 4–10 ms for one entity's facts at 100k facts.
    def _in_segment(self, t: Table, g: Segment) -> Any:
        # Facts: ``seq + 0`` keeps SQLite's planner (no statistics) off mem_facts_commit,
        # which serves reads by commit (facts_between) only: for a read by entity it took
        # the seq range over (scope, branch, entity) and scanned the branch.
        seq = t.c.seq + 0 if t is facts_t else t.c.seq
        return and_(t.c.branch == g.branch, seq > g.after, seq <= g.upto)

    def _each(self, conn: Connection, t: Table, segs: Segments,
              build: Callable[..., Any]) -> Iterator[Any]:
        """Rows of ``build(condition)`` for every segment's condition, in segment order."""
        for g in segs:
            yield from conn.execute(build(self._in_segment(t, g)))

    def episodes(self, scope: str, segs: Segments, ids: Iterable[str],
                 ) -> dict[str, EpisodeRecord]:
        return self._episodes(scope, segs, ids, limited=False)

    def _episodes(self, scope: str, segs: Segments, ids: Iterable[str], *,
                  limited: bool) -> dict[str, EpisodeRecord]:
        """The listed episodes held in the view, each with its ACL (``_current_acl``)."""
        wanted = list(set(ids))
        order = layers(segs)
        out: dict[str, EpisodeRecord] = {}
        with self.engine.connect() as conn:
            for i in range(0, len(wanted), 500):
                chunk = wanted[i:i + 500]
                for row in self._each(conn, episodes_t, segs, lambda cond, chunk=chunk: select(
                        episodes_t).where(episodes_t.c.scope == scope, cond,
                                          episodes_t.c.id.in_(chunk))):
                    rec = _episode_record(row._mapping)
                    have = out.get(rec.id)  # held on two layers (a merge): the first wrote it
                    if have is None or order[rec.branch] < order[have.branch]:
                        out[rec.id] = rec
            # The ACLs of every id asked, found or not: a hidden episode and a missing one
            # then cost the same queries, so a 404's time does not tell them apart (with
            # only the found ones, a missing id skipped a round trip: ~1 ms on PostgreSQL).
            return self._current_acl(conn, scope, segs, out, limited=limited, asked=wanted)

    def _current_acl(self, conn: Connection, scope: str, segs: Segments,
                     found: dict[str, EpisodeRecord], *, limited: bool = False,
                     asked: list[str] | None = None) -> dict[str, EpisodeRecord]:
        """Each episode with its current ACL: its latest change on the view's chain, of any
        commit (the last layer's changes come after its ancestors'). There is no reading an
        older ACL, so no ``at_commit`` read, branch, pin or snapshot can see what a
        narrowing hid. ``limited`` keeps to the segments' commit ranges instead: the ACL
        *as of* the view, which only a merge compares (never to decide a read). ``asked``:
        the ids to look up (default: those found); changes of others are dropped."""
        ids = list(found) if asked is None else asked
        order = layers(segs)
        changes: list[tuple[int, int, str, str]] = []
        ranges = segs if limited else tuple(Segment(g.branch) for g in segs)
        for i in range(0, len(ids), 500):
            chunk = ids[i:i + 500]
            changes.extend((order[r.branch], int(r.seq), r.id, r.acl) for r in self._each(
                conn, acl_t, ranges, lambda cond, chunk=chunk: select(
                    acl_t.c.id, acl_t.c.branch, acl_t.c.seq, acl_t.c.acl).where(
                    acl_t.c.scope == scope, cond, acl_t.c.id.in_(chunk))))
        for _, _, ep, acl in sorted(changes):  # along the chain: the last change wins
            if ep in found:
                found[ep] = replace(found[ep], acl=tuple(json.loads(acl)))
        return found

    def acl_as_of(self, scope: str, segs: Segments, ids: Iterable[str],
                  ) -> dict[str, EpisodeRecord]:
        """The episodes with the ACL they had as of the view (a merge's three-way input)."""
        return self._episodes(scope, segs, ids, limited=True)

    def episodes_in(self, scope: str, segs: Segments) -> set[str]:
        """Ids of the episodes these segments' commits wrote."""
        with self.engine.connect() as conn:
            return {r.id for r in self._each(conn, episodes_t, segs, lambda cond: select(
                episodes_t.c.id).where(episodes_t.c.scope == scope, cond))}

    def episodes_of_types(self, scope: str, segs: Segments, types: Iterable[str],
                          ) -> list[EpisodeRecord]:
        """The episodes of these types the view's commits wrote, oldest commit first (their
        ACLs as written: for server-side work such as extraction, never for a read)."""
        wanted = sorted(set(types))
        order = layers(segs)
        found: dict[str, EpisodeRecord] = {}
        with self.engine.connect() as conn:
            for row in self._each(conn, episodes_t, segs, lambda cond: select(episodes_t).where(
                    episodes_t.c.scope == scope, cond, episodes_t.c.type.in_(wanted))):
                rec = _episode_record(row._mapping)
                found.setdefault(rec.id, rec)
        return sorted(found.values(), key=lambda r: (layer_order(order[r.branch], r.seq), r.id))

    def count_commits(self, scope: str, segs: Segments) -> int:
        """Commits (markers not counted) in these segments."""
        with self.engine.connect() as conn:
            return sum(int(r[0] or 0) for r in self._each(conn, ledger_t, segs, lambda cond:
                select(func.count()).where(ledger_t.c.scope == scope, cond,
                                           ledger_t.c.kind.not_in((BRANCH, DELETE)))))

    def acl_changed(self, scope: str, segs: Segments) -> set[str]:
        """Ids of episodes whose ACL a commit in these segments changed."""
        with self.engine.connect() as conn:
            return {r.id for r in self._each(conn, acl_t, segs, lambda cond: select(
                acl_t.c.id).where(acl_t.c.scope == scope, cond))}

    def document_versions(self, scope: str, segs: Segments, document: str,
                          as_of: datetime) -> list[EpisodeRecord]:
        order = layers(segs)
        with self.engine.connect() as conn:
            versions = [_episode_record(r._mapping) for r in self._each(
                conn, episodes_t, segs, lambda cond: select(episodes_t).where(
                    episodes_t.c.scope == scope, cond, episodes_t.c.document == document,
                    episodes_t.c.occurred_at <= to_us(as_of)))]
            versions.sort(key=lambda v: (v.occurred_at, layer_order(order[v.branch], v.seq)),
                          reverse=True)
            current = self._current_acl(conn, scope, segs, {v.id: v for v in versions})
        return [current[v.id] for v in versions]

    def known_bodies(self, scope: str, refs: Iterable[str]) -> set[str]:
        wanted = list(set(refs))
        found: set[str] = set()
        with self.engine.connect() as conn:
            for i in range(0, len(wanted), 500):
                stmt = select(bodies_t.c.body_ref).where(
                    bodies_t.c.scope == scope, bodies_t.c.body_ref.in_(wanted[i:i + 500]))
                found.update(conn.execute(stmt).scalars())
        return found

    def bodies(self, scope: str, refs: Iterable[str]) -> dict[str, str]:
        wanted = list(set(refs))
        found: dict[str, str] = {}
        with self.engine.connect() as conn:
            for i in range(0, len(wanted), 500):
                stmt = select(bodies_t.c.body_ref, bodies_t.c.body).where(
                    bodies_t.c.scope == scope, bodies_t.c.body_ref.in_(wanted[i:i + 500]))
                found.update((r.body_ref, r.body) for r in conn.execute(stmt))
        return found

    def body(self, scope: str, body_ref: str) -> str | None:
        stmt = select(bodies_t.c.body).where(bodies_t.c.scope == scope,
                                             bodies_t.c.body_ref == body_ref)
        with self.engine.connect() as conn:
            return conn.execute(stmt).scalar()

    def facts(self, scope: str, segs: Segments, entity: str | None, predicate: str | None,
              limit: int = NO_LIMIT, *, entity_prefix: str | None = None,
              predicates: Iterable[str] | None = None) -> list[FactRecord]:
        """Fact rows in the view: of one entity (or of the entities whose id starts with
        ``entity_prefix``: a type's, ``opportunity:``), one predicate (or ``predicates``)."""
        def build(cond: Any) -> Any:
            stmt = select(facts_t).where(facts_t.c.scope == scope, cond)
            if entity is not None:
                stmt = stmt.where(facts_t.c.entity == entity)
            if entity_prefix is not None:  # LIKE may ignore case (SQLite): checked again below
                stmt = stmt.where(facts_t.c.entity.startswith(entity_prefix, autoescape=True))
            if predicate is not None:
                stmt = stmt.where(facts_t.c.predicate == predicate)
            if predicates is not None:
                stmt = stmt.where(facts_t.c.predicate.in_(sorted(set(predicates))))
            return stmt.order_by(facts_t.c.entity, facts_t.c.predicate).limit(limit)

        order = layers(segs)
        memo: dict[Any, Any] = {}  # rows share citations and times: each parsed once
        with self.engine.connect() as conn:
            found = [_fact_record(r._mapping, order[r.branch], memo)
                     for r in self._each(conn, facts_t, segs, build)
                     if entity_prefix is None or r.entity.startswith(entity_prefix)]
        if len(segs) > 1:  # one order across segments, as one query would give it
            found.sort(key=lambda f: (f.entity, f.predicate))
        return found[:limit]

    def facts_between(self, scope: str, g: Segment, layer: int, *,
                      entity_prefix: str | None = None,
                      predicates: Iterable[str] | None = None) -> list[FactRecord]:
        """The fact rows the commits of one segment wrote (of the entities whose id starts
        with ``entity_prefix``, of ``predicates``), read by seq through mem_facts_commit;
        ``layer`` is the segment's place in the view's chain."""
        stmt = select(facts_t).where(facts_t.c.scope == scope, facts_t.c.branch == g.branch,
                                     facts_t.c.seq > g.after, facts_t.c.seq <= g.upto)
        if predicates is not None:
            stmt = stmt.where(facts_t.c.predicate.in_(sorted(set(predicates))))
        memo: dict[Any, Any] = {}
        with self.engine.connect() as conn:
            return [_fact_record(r._mapping, layer, memo) for r in conn.execute(stmt)
                    if entity_prefix is None or r.entity.startswith(entity_prefix)]

    def facts_of(self, scope: str, segs: Segments, keys: Iterable[tuple[str, str]],
                 ) -> list[FactRecord]:
        """Every fact row in the view of the listed (entity, predicate) pairs."""
        wanted = sorted(set(keys))
        order = layers(segs)
        out: list[FactRecord] = []
        with self.engine.connect() as conn:
            for i in range(0, len(wanted), 400):
                chunk = wanted[i:i + 400]
                out.extend(_fact_record(r._mapping, order[r.branch]) for r in self._each(
                    conn, facts_t, segs, lambda cond, chunk=chunk: select(facts_t).where(
                        facts_t.c.scope == scope, cond,
                        tuple_(facts_t.c.entity, facts_t.c.predicate).in_(chunk))))
        return out

    # -- browsing (browse.py): counts and pages in SQL, never the whole scope -----------------
    # Who may read an episode is decided by ``acl.may_read`` alone, in Python, once per
    # distinct current ACL of the view (``episode_acls``); these reads then take the set of
    # ACL texts it allowed and only compare texts, so no copy of the rule lives in SQL.
    def _text(self, col: Any) -> Any:
        """Order and compare by code point on both backends (PostgreSQL's default collation
        would order differently from SQLite and from Python)."""
        return col.collate("C") if self.dialect == "postgresql" else col

    def _view_episodes(self, scope: str, segs: Segments) -> Subquery:
        """The view's episodes, one row each (held on two layers: the first layer's, as
        ``_episodes``), ``acl`` being its current ACL text (as ``_current_acl``)."""
        order = layers(segs)
        parts = [select(episodes_t, literal(order[g.branch]).label("layer")).where(
            episodes_t.c.scope == scope, self._in_segment(episodes_t, g)) for g in segs]
        rows = (parts[0] if len(parts) == 1 else union_all(*parts)).subquery("rows")
        if len(parts) > 1:
            rank = func.row_number().over(partition_by=rows.c.id, order_by=rows.c.layer)
            ranked = select(rows, rank.label("rank")).subquery("ranked")
            rows = select(*[c for c in ranked.c if c.name != "rank"]).where(
                ranked.c.rank == 1).subquery("rows1")
        change = (select(acl_t.c.acl).where(
            acl_t.c.scope == scope, acl_t.c.id == rows.c.id, acl_t.c.branch.in_(list(order)))
            .order_by(case(order, value=acl_t.c.branch).desc(), acl_t.c.seq.desc())
            .limit(1).scalar_subquery())
        return select(*[c for c in rows.c if c.name != "acl"],
                      func.coalesce(change, rows.c.acl).label("acl")).subquery("view_episodes")

    def _counted(self, conn: Connection, key: tuple[Any, ...],
                 count: Callable[[], Any]) -> Any:
        """``count()``, remembered until a commit of the scope (``key[0]``) is applied:
        the scope's rows change only then, so a repeated listing costs one small query."""
        version = conn.execute(select(func.count()).where(
            ledger_t.c.scope == key[0], ledger_t.c.applied.is_(True))).scalar()
        full = (*key, version)
        with self._counts_lock:
            if full in self._counts:
                return self._counts[full]
        value = count()
        with self._counts_lock:
            if len(self._counts) >= COUNTS_KEPT:
                self._counts.clear()
            self._counts[full] = value
        return value

    def episode_acls(self, scope: str, segs: Segments) -> dict[str, int]:
        """Each current ACL (as JSON text) of the view's episodes → how many carry it."""
        v = self._view_episodes(scope, segs)
        with self.engine.connect() as conn:
            found: dict[str, int] = self._counted(conn, (scope, "acls", segs), lambda: {
                str(a): int(n) for a, n in conn.execute(
                    select(v.c.acl, func.count()).group_by(v.c.acl))})
        return dict(found)

    def episode_page(self, scope: str, segs: Segments, acls: Iterable[str], limit: int,
                     after: EpisodeRecord | None = None) -> list[EpisodeRecord]:
        """The view's episodes whose current ACL is one of ``acls``, newest ``occurred_at``
        first then by id, from the one after ``after``; each with its current ACL."""
        wanted = sorted(set(acls))
        if not wanted:
            return []
        v = self._view_episodes(scope, segs)
        stmt = select(v).where(v.c.acl.in_(wanted))
        if after is not None:
            t = to_us(after.occurred_at)
            stmt = stmt.where(or_(v.c.occurred_at < t, and_(
                v.c.occurred_at == t, self._text(v.c.id) > after.id)))
        stmt = stmt.order_by(v.c.occurred_at.desc(), self._text(v.c.id)).limit(limit)
        with self.engine.connect() as conn:
            return [_episode_record(r._mapping) for r in conn.execute(stmt)]

    def document_counts(self, scope: str, segs: Segments, acls: Iterable[str],
                        documents: Iterable[str]) -> dict[str, int]:
        """Each listed document → its versions in the view whose current ACL is in ``acls``."""
        wanted, docs = sorted(set(acls)), sorted(set(documents))
        if not wanted or not docs:
            return {}
        v = self._view_episodes(scope, segs)
        stmt = (select(v.c.document, func.count()).where(v.c.acl.in_(wanted),
                                                         v.c.document.in_(docs))
                .group_by(v.c.document))
        with self.engine.connect() as conn:
            return {str(d): int(n) for d, n in conn.execute(stmt)}

    def _visible_facts(self, scope: str, segs: Segments, acls: list[str], *,
                       whole: bool = False) -> Subquery:
        """(entity, predicate) of every fact row in the view all of whose cited episodes
        are the view's episodes with a current ACL in ``acls`` (``visible_facts``' rule),
        the schema's own row left out.
        ``whole``: for reading every row (counts), the hidden facts are found in one pass
        over the cites; else row by row (a page stops early)."""
        v = self._view_episodes(scope, segs)
        parts: list[Select[Any]] = []
        for g in segs:
            shown: ColumnElement[bool]
            if whole:
                hidden = select(cites_t.c.fact_id).where(
                    cites_t.c.scope == scope, cites_t.c.branch == g.branch,
                    cites_t.c.episode.not_in(select(v.c.id).where(v.c.acl.in_(acls))))
                shown = facts_t.c.fact_id.not_in(hidden)
            else:  # each cite looked up: no set of readable ids is built
                shown = ~select(cites_t.c.episode).where(
                    cites_t.c.scope == scope, cites_t.c.branch == facts_t.c.branch,
                    cites_t.c.fact_id == facts_t.c.fact_id,
                    ~select(v.c.id).where(v.c.id == cites_t.c.episode,
                                          v.c.acl.in_(acls)).exists()).exists()
            # The scope's schema is kept as a fact of a reserved entity (schemas.py): not
            # one a client wrote, so listings and their counts leave it out.
            parts.append(select(facts_t.c.entity, facts_t.c.predicate).where(
                facts_t.c.scope == scope, self._in_segment(facts_t, g), shown,
                facts_t.c.entity != SCHEMA_ENTITY))
        return (parts[0] if len(parts) == 1 else union_all(*parts)).subquery("visible")

    def fact_counts(self, scope: str, segs: Segments, acls: Iterable[str]) -> tuple[int, int]:
        """(fact versions, entities) visible in the view with the readable ``acls``."""
        wanted = sorted(set(acls))
        if not wanted:
            return 0, 0
        f = self._visible_facts(scope, segs, wanted, whole=True)
        with self.engine.connect() as conn:
            versions, entities = self._counted(
                conn, (scope, "facts", segs, tuple(wanted)), lambda: conn.execute(
                    select(func.count(), func.count(f.c.entity.distinct()))).one())
        return int(versions), int(entities)

    def entity_page(self, scope: str, segs: Segments, acls: Iterable[str], limit: int,
                    after: str | None = None) -> list[tuple[str, dict[str, int]]]:
        """The next ``limit`` entities (by code point, after ``after``) with visible facts,
        each with its predicates and how many visible versions each holds."""
        wanted = sorted(set(acls))
        if not wanted:
            return []
        f = self._visible_facts(scope, segs, wanted)
        names = select(f.c.entity).group_by(f.c.entity)
        if after is not None:
            names = names.where(self._text(f.c.entity) > after)
        names = names.order_by(self._text(f.c.entity)).limit(limit)
        per: dict[str, dict[str, int]] = {}
        with self.engine.connect() as conn:
            page = [str(n) for n in conn.execute(names).scalars()]
            if page:
                stmt = (select(f.c.entity, f.c.predicate, func.count())
                        .where(f.c.entity.in_(page)).group_by(f.c.entity, f.c.predicate))
                for entity, predicate, n in conn.execute(stmt):
                    per.setdefault(str(entity), {})[str(predicate)] = int(n)
        return [(n, per.get(n, {})) for n in page]

    # -- events (advice runs and sessions) -------------------------------------------------------
    def events_of(self, subjects: Iterable[str]) -> list[EventRecord]:
        """Every event of the listed subjects, whatever scope or branch, in commit order
        (a subject lives on the scope and branch of the event that started it)."""
        wanted = sorted(set(subjects))
        out: list[EventRecord] = []
        with self.engine.connect() as conn:
            for i in range(0, len(wanted), 500):
                out.extend(_event_record(r._mapping) for r in conn.execute(
                    select(events_t).where(
                        events_t.c.subject.in_(wanted[i:i + 500]))))
        out.sort(key=lambda e: (e.seq, e.id))
        return out

    def events(self, scope: str, segs: Segments | None, kinds: Iterable[str] | None = None,
               subjects: Iterable[str] | None = None,
               ids: Iterable[str] | None = None) -> list[EventRecord]:
        """Events in the view (of these kinds, of these subjects, with these event ids), in
        commit order; ``segs`` None: of every branch of the scope."""
        kind_list = None if kinds is None else sorted(set(kinds))
        subject_list = None if subjects is None else sorted(set(subjects))
        id_list = None if ids is None else sorted(set(ids))

        def build(cond: Any) -> Any:
            stmt = select(events_t).where(events_t.c.scope == scope, cond)
            if kind_list is not None:
                stmt = stmt.where(events_t.c.kind.in_(kind_list))
            if subject_list is not None:
                stmt = stmt.where(events_t.c.subject.in_(subject_list))
            if id_list is not None:
                stmt = stmt.where(events_t.c.id.in_(id_list))
            return stmt

        with self.engine.connect() as conn:
            if segs is None:
                found = [_event_record(r._mapping)
                         for r in conn.execute(build(events_t.c.scope == scope))]
            else:
                found = [_event_record(r._mapping)
                         for r in self._each(conn, events_t, segs, build)]
        found.sort(key=lambda e: (e.seq, e.id))
        return found

    def last_event_seq(self, scope: str, kinds: Iterable[str], branch: str | None = None,
                       subjects: Iterable[str] | None = None) -> int:
        """The newest commit seq holding an event of these kinds in the scope (on
        ``branch``; None: any; of these ``subjects``; None: any) (0: none) — a cheap marker
        a cache of what those events say is keyed by, and what a learning pass's commit
        checks has not moved since its read. With a branch the lookup stays in
        ``mem_events_kind`` instead of reading every event of the scope."""
        stmt = select(func.max(events_t.c.seq)).where(
            events_t.c.scope == scope, events_t.c.kind.in_(sorted(set(kinds))))
        if branch is not None:
            stmt = stmt.where(events_t.c.branch == branch)
        if subjects is not None:
            stmt = stmt.where(events_t.c.subject.in_(sorted(set(subjects))))
        with self.engine.connect() as conn:
            value = conn.execute(stmt).scalar()
        return int(value or 0)

    def newest_subjects(self, scope: str, segs: Segments, kind: str, before: str | None,
                        keep: Callable[[EventRecord], bool], limit: int) -> list[EventRecord]:
        """The first ``limit`` events of ``kind`` in the view that ``keep`` accepts, by
        subject newest first (subjects are ULID-named), below ``before`` if given. Rows
        stream in subject order, so a page costs about its own size, not the scope's."""
        found: list[EventRecord] = []
        with self.engine.connect() as conn:
            for g in segs:
                stmt = select(events_t).where(
                    events_t.c.scope == scope, self._in_segment(events_t, g),
                    events_t.c.kind == kind)
                if before is not None:
                    stmt = stmt.where(events_t.c.subject < before)
                stmt = stmt.order_by(events_t.c.subject.desc()).execution_options(
                    yield_per=max(limit, 64))
                taken = 0
                for row in conn.execute(stmt):
                    rec = _event_record(row._mapping)
                    if keep(rec):
                        found.append(rec)
                        taken += 1
                        if taken >= limit:
                            break
        found.sort(key=lambda e: e.subject, reverse=True)
        return found[:limit]

    def pending_scopes(self) -> list[str]:
        """Scopes with commits in the ledger whose rows are not applied yet."""
        stmt = select(ledger_t.c.scope).distinct().where(ledger_t.c.applied.is_(False))
        with self.engine.connect() as conn:
            return sorted(conn.execute(stmt).scalars())

    def reads(self, scope: str, segs: Segments, key: str | None = None,
              episodes: Iterable[str] | None = None) -> list[ReadMark]:
        """Read marks in the view: of one read key (a model and schema version), or all;
        of the listed episodes only, if given."""
        order = layers(segs)
        wanted = None if episodes is None else sorted(set(episodes))
        chunks = [None] if wanted is None else [wanted[i:i + 500]
                                                for i in range(0, len(wanted), 500)]

        def build(cond: Any, chunk: list[str] | None) -> Any:
            stmt = select(reads_t).where(reads_t.c.scope == scope, cond)
            if key is not None:
                stmt = stmt.where(reads_t.c.key == key)
            return stmt if chunk is None else stmt.where(reads_t.c.episode.in_(chunk))

        with self.engine.connect() as conn:
            return [_read_record(r._mapping, order[r.branch]) for chunk in chunks
                    for r in self._each(conn, reads_t, segs,
                                        lambda cond, chunk=chunk: build(cond, chunk))]

    # -- commits in order (the search index is fed from these) ----------------------------------
    def applied_after(self, scope: str, branch: str, after_seq: int,
                      limit: int) -> list[LedgerEntry]:
        """Commits after ``after_seq`` in chain order, stopping before the first one whose
        rows are not applied yet (a feed never skips a commit to come back for it)."""
        stmt = (select(ledger_t).where(ledger_t.c.scope == scope, ledger_t.c.branch == branch,
                                       ledger_t.c.seq > after_seq)
                .order_by(ledger_t.c.seq).limit(limit))
        out: list[LedgerEntry] = []
        with self.engine.connect() as conn:
            for row in conn.execute(stmt):
                entry = _ledger_entry(row._mapping)
                if not row.applied or entry.seq != after_seq + len(out) + 1:
                    break
                out.append(entry)
        return out

    def commit_rows(self, scope: str, branch: str, first_seq: int, last_seq: int,
                    ) -> tuple[dict[str, EpisodeRecord], list[FactRecord]]:
        """What commits ``first_seq..last_seq`` wrote: the episodes they added or changed
        the ACL of (each with its current ACL) and their facts in chain order."""
        between = (first_seq, last_seq)
        with self.engine.connect() as conn:
            # The rows these commits added, read at once (not their ids, then each by id:
            # a row's seq is that of the commit that added it).
            found = {rec.id: rec for rec in (_episode_record(r._mapping) for r in conn.execute(
                select(episodes_t).where(
                    episodes_t.c.scope == scope, episodes_t.c.branch == branch,
                    episodes_t.c.seq.between(*between))))}
            changed = set(conn.execute(select(acl_t.c.id).where(
                acl_t.c.scope == scope, acl_t.c.branch == branch,
                acl_t.c.seq.between(*between))).scalars()) - set(found)
            facts = [_fact_record(r._mapping) for r in conn.execute(
                select(facts_t).where(facts_t.c.scope == scope, facts_t.c.branch == branch,
                                      facts_t.c.seq.between(*between))
                .order_by(facts_t.c.seq, facts_t.c.ord))]
        if changed:  # episodes of earlier commits whose ACL these commits changed
            found.update(self._episodes_of_branch(scope, branch, changed, last_seq))
        with self.engine.connect() as conn:
            return self._current_acl(conn, scope, (Segment(branch),), found), facts

    def _episodes_of_branch(self, scope: str, branch: str, ids: set[str],
                            last_seq: int) -> dict[str, EpisodeRecord]:
        # Rows of this branch's own chain only: the search feed indexes one chain at a time.
        with self.engine.connect() as conn:
            return {rec.id: rec for rec in (_episode_record(r._mapping) for r in conn.execute(
                select(episodes_t).where(
                    episodes_t.c.scope == scope, episodes_t.c.branch == branch,
                    episodes_t.c.id.in_(list(ids)), episodes_t.c.seq <= last_seq)))}

    # -- principals ---------------------------------------------------------------------------
    def principal(self, user: str) -> Principal:
        with self.engine.connect() as conn:
            row = conn.execute(select(principals_t).where(principals_t.c.user == user)).first()
        if row is None:
            return Principal(user)
        return Principal(user, tuple(json.loads(row.groups)), tuple(json.loads(row.roles)))

    def replace_principals(self, newest: Callable[[], tuple[Iterable[Principal], int]]
                           ) -> int:
        """Replace the principals with those ``newest`` reads (the principals table's
        newest rows and that snapshot's id), read once this transaction holds the index's
        write lock (PostgreSQL: an advisory lock; SQLite: its write lock, taken by the
        DELETE). Processes sharing one index copy one at a time, each the table's newest:
        two at once met each other's rows (a UniqueViolation, a 500), and one that had read
        the table before another's change could put the older rows back after it."""
        with self.engine.begin() as conn:
            if self.dialect == "postgresql":
                conn.execute(text("SELECT pg_advisory_xact_lock(:key)"),
                             {"key": PRINCIPALS_LOCK})
            conn.execute(delete(principals_t))
            principals, snapshot_id = newest()
            rows = [{"user": p.user, "groups": json.dumps(list(p.groups)),
                     "roles": json.dumps(list(p.roles))} for p in principals]
            if rows:
                conn.execute(principals_t.insert(), rows)
            self._set_meta(conn, PRINCIPALS_SNAPSHOT, str(snapshot_id))
        return snapshot_id

    def principals_snapshot(self) -> int | None:
        value = self.get_meta(PRINCIPALS_SNAPSHOT)
        return int(value) if value is not None else None

    def take_lease(self, name: str, holder: str, now: datetime | None,
                   ttl: timedelta) -> bool:
        """A lock row: free, expired, or already ours → ours until ``now + ttl``. ``now``
        None: the database's clock on PostgreSQL, which every server sharing the lease
        reads alike (a server whose clock ran ahead by more than the lease took it from a
        live holder and ran its pass beside the holder's); this process's on SQLite."""
        at: Any = to_us(now if now is not None else datetime.now(UTC))
        if now is None and self.dialect == "postgresql":
            at = cast(func.floor(func.extract("epoch", func.clock_timestamp()) * 1_000_000),
                      BigInteger)
        until = at + ttl // MICRO
        stmt = self._insert(leases_t).values(name=name, holder=holder, until_us=until)
        stmt = stmt.on_conflict_do_update(
            index_elements=["name"], set_={"holder": holder, "until_us": until},
            where=(leases_t.c.until_us < at) | (leases_t.c.holder == holder))
        # RETURNING, not rowcount: psycopg reports -1 for this statement, so on PostgreSQL
        # the lease was never taken (a row comes back exactly when it is ours).
        with self.engine.begin() as conn:
            return conn.execute(stmt.returning(leases_t.c.name)).first() is not None

    @contextmanager
    def hold_lease(self, name: str, holder: str, ttl: timedelta = DEFAULT_LEASE,
                   wait: float = 0.0, poll: float = 0.1) -> Iterator[bool]:
        """The lease for the block: False when another process holds it (still, after
        trying every ``poll`` seconds for ``wait``), else True, with a thread renewing it
        every ``ttl / LEASE_RENEWALS_PER_TTL`` until the block ends and then giving it
        back. So exactly one process runs a pass however long it takes, and a holder that
        dies (kill -9) lets another take over ``ttl`` after its last renewal, never
        ``ttl`` after the pass began."""
        deadline = time.monotonic() + wait
        while not self.take_lease(name, holder, None, ttl):
            if time.monotonic() >= deadline:
                yield False
                return
            time.sleep(poll)
        stop = threading.Event()

        def renew() -> None:
            while not stop.wait(ttl.total_seconds() / LEASE_RENEWALS_PER_TTL):
                try:
                    if not self.take_lease(name, holder, None, ttl):
                        log.warning("lease %s: another process took it over (this one "
                                    "did not renew it in time)", name)
                        return
                except Exception as exc:  # the index unreachable: try on the next beat
                    log.warning("lease %s: renewal failed: %s", name, exc)

        beat = threading.Thread(target=renew, name=f"lease-{name}", daemon=True)
        beat.start()
        try:
            yield True
        finally:
            stop.set()
            beat.join()
            self.release_lease(name, holder)

    def release_lease(self, name: str, holder: str) -> None:
        """Give the lease back now, if it is still ours (not only when it runs out)."""
        with self.engine.begin() as conn:
            conn.execute(delete(leases_t).where((leases_t.c.name == name)
                                                & (leases_t.c.holder == holder)))

    def commit_places(self, scope: str, commit_ids: Iterable[str]) -> dict[str, tuple[str, int]]:
        """Branch and seq of each listed commit of this scope (others are left out), looked
        up by commit id alone (by scope and branch, SQLite walked the branch's chain).

        A ledger row never changes once written, so the places found are remembered (a
        search on a branch asks for its own commits' places every time)."""
        known = self._places
        found: dict[str, tuple[str, int]] = {}
        wanted: list[str] = []
        for c in sorted(set(commit_ids)):
            place = known.get(c)
            if place is None:
                wanted.append(c)
            elif place[0] == scope:
                found[c] = (place[1], place[2])
        if not wanted:
            return found
        if len(known) + len(wanted) > PLACES_KEPT:
            known.clear()
        with self.engine.connect() as conn:
            for i in range(0, len(wanted), 500):
                stmt = select(ledger_t.c.commit_id, ledger_t.c.scope, ledger_t.c.branch,
                              ledger_t.c.seq).where(ledger_t.c.commit_id.in_(wanted[i:i + 500]))
                for c, sc, b, q in conn.execute(stmt):
                    known[str(c)] = (str(sc), str(b), int(q))
                    if sc == scope:
                        found[str(c)] = (str(b), int(q))
        return found

    def acl_change_seqs(self, scope: str, branch: str, first_seq: int, last_seq: int,
                        ) -> dict[str, int]:
        """Episodes whose ACL commits ``first_seq..last_seq`` of the branch's own chain
        changed → the seq of the latest such change (the search feed re-indexes them)."""
        stmt = (select(acl_t.c.id, func.max(acl_t.c.seq))
                .where(acl_t.c.scope == scope, acl_t.c.branch == branch,
                       acl_t.c.seq.between(first_seq, last_seq))
                .group_by(acl_t.c.id))
        with self.engine.connect() as conn:
            return {str(i): int(s) for i, s in conn.execute(stmt)}



def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    enable_wal(dbapi_conn, 60)
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA busy_timeout=60000")
    cur.close()


def _ledger_values(e: LedgerEntry, applied: bool) -> dict[str, Any]:
    return {
        "commit_id": e.commit_id, "scope": e.scope, "branch": e.branch, "seq": e.seq,
        "parent": e.parent, "author": e.author, "committed_at": to_us(e.committed_at),
        "message": e.message, "changes": json.dumps(e.changes, sort_keys=True),
        "snapshots": json.dumps(e.snapshots, sort_keys=True), "applied": applied,
        "kind": e.kind, "merged": e.merged,
    }


def _ledger_entry(row: Any) -> LedgerEntry:
    return LedgerEntry(
        commit_id=row["commit_id"], parent=row["parent"], scope=row["scope"],
        branch=row["branch"], seq=int(row["seq"]), author=row["author"],
        committed_at=from_us(row["committed_at"]), message=row["message"],
        changes=json.loads(row["changes"]), snapshots=json.loads(row["snapshots"]),
        kind=row["kind"], merged=row["merged"],
    )


def _episode_values(scope: str, e: EpisodeRecord, entry: LedgerEntry) -> dict[str, Any]:
    return {
        "scope": scope, "branch": e.branch, "id": e.id, "seq": entry.seq,
        "commit_id": entry.commit_id,
        "source": e.source, "type": e.type, "occurred_at": to_us(e.occurred_at),
        "about": json.dumps(list(e.about)), "acl": json.dumps(list(e.acl)),
        "document": e.document, "body_ref": e.body_ref,
    }


def _episode_record(row: Any) -> EpisodeRecord:
    return EpisodeRecord(
        id=row["id"], source=row["source"], type=row["type"],
        occurred_at=from_us(row["occurred_at"]), about=tuple(json.loads(row["about"])),
        acl=tuple(json.loads(row["acl"])), document=row["document"], body_ref=row["body_ref"],
        branch=row["branch"], commit_id=row["commit_id"], seq=int(row["seq"]),
    )


def _fact_values(scope: str, f: FactRecord, entry: LedgerEntry) -> dict[str, Any]:
    return {
        "scope": scope, "branch": f.branch, "fact_id": f.fact_id, "seq": entry.seq,
        "ord": f.ord, "commit_id": entry.commit_id, "kind": f.kind, "entity": f.entity,
        "predicate": f.predicate, "value": f.value, "valid_from": to_us(f.valid_from),
        "valid_to": to_us(f.valid_to) if f.valid_to else None, "quote": f.quote,
        "cites": json.dumps([[e, u] for e, u in f.cites]), "written_by": f.written_by,
    }


def _read_values(scope: str, r: ReadMark, entry: LedgerEntry) -> dict[str, Any]:
    return {
        "scope": scope, "branch": r.branch, "key": r.key, "episode": r.episode,
        "seq": entry.seq, "commit_id": entry.commit_id, "model": r.model, "schema": r.schema,
        "facts": r.facts, "rejected": json.dumps(r.rejected, sort_keys=True),
        "read_at": to_us(r.read_at),
    }


def _read_record(row: Any, layer: int = 0) -> ReadMark:
    return ReadMark(
        episode=row["episode"], key=row["key"], model=row["model"], schema=row["schema"],
        facts=int(row["facts"]), rejected=json.loads(row["rejected"]),
        read_at=from_us(row["read_at"]), branch=row["branch"], commit_id=row["commit_id"],
        seq=int(row["seq"]), layer=layer,
    )


def _fact_record(row: Any, layer: int = 0, memo: dict[Any, Any] | None = None) -> FactRecord:
    """A fact row as a record; ``memo`` (one per read) parses each distinct citation list
    and time once (the rows of a type share a few episodes and dates)."""
    memo = {} if memo is None else memo
    raw, start, end = row["cites"], row["valid_from"], row["valid_to"]
    cites = memo.get(raw)
    if cites is None:
        cites = memo[raw] = tuple((e, int(u)) for e, u in json.loads(raw))
    valid_from = memo.get(start)
    if valid_from is None:
        valid_from = memo[start] = from_us(start)
    valid_to = None
    if end is not None:
        valid_to = memo.get(end)
        if valid_to is None:
            valid_to = memo[end] = from_us(end)
    return FactRecord(
        fact_id=row["fact_id"], kind=row["kind"], entity=row["entity"],
        predicate=row["predicate"], value=row["value"], valid_from=valid_from,
        valid_to=valid_to, quote=row["quote"], cites=cites,
        written_by=row["written_by"], branch=row["branch"], commit_id=row["commit_id"],
        seq=int(row["seq"]), ord=int(row["ord"]), layer=layer,
    )


def _event_values(scope: str, e: EventRecord, entry: LedgerEntry) -> dict[str, Any]:
    return {
        "scope": scope, "branch": e.branch, "id": e.id, "seq": entry.seq,
        "commit_id": entry.commit_id, "subject": e.subject, "kind": e.kind, "user": e.user,
        "acl": json.dumps(list(e.acl)), "reward": e.reward,
        "data": json.dumps(e.data, ensure_ascii=False, sort_keys=True), "at": to_us(e.at),
    }


def _event_record(row: Any) -> EventRecord:
    return EventRecord(
        id=row["id"], subject=row["subject"], kind=row["kind"], user=row["user"],
        at=from_us(row["at"]), acl=tuple(json.loads(row["acl"])), reward=row["reward"],
        data=json.loads(row["data"]), branch=row["branch"], commit_id=row["commit_id"],
        seq=int(row["seq"]), scope=row["scope"],
    )
