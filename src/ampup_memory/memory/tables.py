"""The Iceberg side: catalog from settings, table layouts and their properties.

Layout (see DESIGN.md "AmpUp data model"):

    <org>__<team>.episodes   one row per episode written (and per later ACL change); the
                             body rides in the row of the first episode that carries it
                             (content-addressed by ``body_ref`` = SHA-256, stored once)
    <org>__<team>.facts      fact versions and closures
    <org>__<team>.events     append-only events of advice runs and sessions (events.py)
    <org>__<team>.reads      extraction's read marks: one row per episode a model read with a
                             schema version, in the commit of the facts it gave (extraction.py)
    memory_system.ledger     one row per commit (compare-and-set, see ledger.py)
    memory_system.principals one row per principal change; newest per user wins
    memory_system.workspaces one row per workspace change; the furthest state per id wins
                             (live → deleted → dropped), see workspaces.py
    memory_system.holds      one row per pin/snapshot change; newest per id wins, a release
                             is final (snapshots.py)

Every data row carries the ``commit_id`` of the commit that wrote it; a row counts only once
that commit is in the ledger. Table properties follow what we measured on pyiceberg 0.12:
merged manifests and deleted old metadata keep a commit near 30 ms while snapshots and small
files stay few (maintenance.py keeps them few); data tables may rebase an append on a
concurrent one (rows are independent), the ledger may not.

Bodies share the episodes table instead of a ``bodies`` table of their own: a separate table
is a third Iceberg commit (~30–40 ms) on every episode write, and an episode write must stay
at two commits (rows, then ledger row).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext, suppress
from urllib.parse import urlsplit

import pyarrow as pa
from pyiceberg.catalog.sql import IcebergTables, SqlCatalog, SqlCatalogBaseTable
from pyiceberg.exceptions import (
    CommitFailedException,
    NamespaceAlreadyExistsError,
    NoSuchTableError,
    TableAlreadyExistsError,
)
from pyiceberg.expressions import BooleanExpression, EqualTo, GreaterThanOrEqual, In
from pyiceberg.io import FileIO, load_file_io
from pyiceberg.table import Table, Transaction
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.update import update_table_metadata
from pyiceberg.typedef import EMPTY_DICT, Identifier, Properties
from sqlalchemy import Connection, Engine, bindparam, create_engine, func, inspect, select, text
from sqlalchemy.exc import IntegrityError

from ampup_memory.caches import Kept
from ampup_memory.errors import ConfigurationError, driver_said
from ampup_memory.memory.retry import Backoff, until_won
from ampup_memory.memory.scopes import SYSTEM_NAMESPACE, Scope, scope_from_namespace
from ampup_memory.memory.warehouse import catalog_properties
from ampup_memory.pg_locks import SCHEMA_LOCK, advisory_key
from ampup_memory.settings import Settings, mask_secrets, mask_uri
from ampup_memory.sqlite_connections import enable_wal, file_lock, open_note, poll

CATALOG_NAME = "ampup"
# Loaded tables kept in memory (`MemoryTables`): the system tables and the scopes used
# last, four tables each (about 25 KB a table of few snapshots: some 50 MB at most); one
# left out is read from the catalog again when next used.
TABLES_KEPT = 2048


def _staged_metadata(self: Transaction) -> TableMetadata:
    """``Transaction.table_metadata``, computed once per staged state.

    pyiceberg 0.12 recomputes it, with a deep copy of the whole table metadata, on every
    read, and one append reads it ~20 times: a deep copy of every kept snapshot's summary
    each time, most of a commit's CPU (measured: 45 of 128 ms per append at 8 snapshots).
    The metadata models are frozen, so the copy made for a given (table metadata, staged
    updates) pair can be handed out again until either changes (both are replaced, never
    mutated, when they do).
    """
    base, updates = self._table.metadata, self._updates
    memo = self.__dict__.get("_ampup_staged")
    if memo is not None and memo[0] is base and memo[1] is updates:
        return memo[2]  # type: ignore[no-any-return]
    staged = update_table_metadata(base, updates)
    self.__dict__["_ampup_staged"] = (base, updates, staged)
    return staged


Transaction.table_metadata = property(_staged_metadata)  # type: ignore[method-assign,assignment]
TS = pa.timestamp("us", tz="UTC")

EPISODES = pa.schema([
    ("commit_id", pa.string()), ("branch", pa.string()), ("op", pa.string()),
    ("id", pa.string()), ("source", pa.string()), ("type", pa.string()),
    ("occurred_at", TS), ("about", pa.list_(pa.string())), ("acl", pa.list_(pa.string())),
    ("document", pa.string()), ("body_ref", pa.string()), ("body", pa.string()),
    ("written_at", TS),
])
CITE = pa.struct([("episode", pa.string()), ("unit", pa.int32())])
FACTS = pa.schema([
    ("commit_id", pa.string()), ("branch", pa.string()), ("kind", pa.string()),
    ("fact_id", pa.string()), ("entity", pa.string()), ("predicate", pa.string()),
    ("value", pa.string()), ("valid_from", TS), ("valid_to", TS), ("quote", pa.string()),
    ("cites", pa.list_(CITE)), ("written_by", pa.string()), ("written_at", TS),
])
LEDGER = pa.schema([
    ("commit_id", pa.string()), ("parent", pa.string()), ("scope", pa.string()),
    ("branch", pa.string()), ("seq", pa.int64()), ("author", pa.string()),
    ("committed_at", TS), ("message", pa.string()), ("changes", pa.string()),
    ("snapshots", pa.string()), ("kind", pa.string()), ("merged", pa.string()),
])
PRINCIPALS = pa.schema([
    ("user", pa.string()), ("groups", pa.list_(pa.string())),
    ("roles", pa.list_(pa.string())), ("updated_at", TS), ("updated_by", pa.string()),
])
WORKSPACES = pa.schema([
    ("id", pa.string()), ("name", pa.string()), ("created_by", pa.string()),
    ("created_at", TS), ("expires_at", TS), ("caps", pa.string()), ("state", pa.string()),
    ("updated_at", TS), ("updated_by", pa.string()),
])
READS = pa.schema([
    ("commit_id", pa.string()), ("branch", pa.string()), ("episode", pa.string()),
    ("key", pa.string()), ("model", pa.string()), ("schema", pa.string()),
    ("facts", pa.int32()), ("rejected", pa.string()), ("read_at", TS),
    ("written_at", TS),  # read_at is not when the row was written: a merge copies marks
])

EVENTS = pa.schema([
    ("commit_id", pa.string()), ("branch", pa.string()), ("id", pa.string()),
    ("subject", pa.string()), ("kind", pa.string()), ("user", pa.string()),
    ("acl", pa.list_(pa.string())), ("reward", pa.float64()), ("data", pa.string()),
    ("at", TS), ("written_at", TS),
])

HOLDS = pa.schema([
    ("id", pa.string()), ("kind", pa.string()), ("created_by", pa.string()),
    ("created_at", TS), ("workspace", pa.string()), ("heads", pa.string()),
    ("expires_at", TS), ("released", pa.bool_()), ("updated_at", TS),
])

SCOPE_TABLES: dict[str, pa.Schema] = {"episodes": EPISODES, "facts": FACTS,
                                      "events": EVENTS, "reads": READS}
SYSTEM_TABLES: dict[str, pa.Schema] = {"ledger": LEDGER, "principals": PRINCIPALS,
                                       "workspaces": WORKSPACES, "holds": HOLDS}

_COMMON = {
    "commit.manifest-merge.enabled": "true",
    "commit.manifest.min-count-to-merge": "16",
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "3",
}
# Appends of independent rows may be rebased on a concurrent append: no meaning changes.
# A compaction rewrites exactly the files it read (pyiceberg checks they still exist), so an
# append made meanwhile does not conflict with it ("snapshot"; the default "serializable"
# failed every compaction that overlapped an append, after it had read the whole table).
DATA_PROPERTIES = {
    **_COMMON,
    "write.delete.isolation-level": "snapshot",
    "commit.retry.num-retries": "20",
    "commit.retry.min-wait-ms": "2",
    "commit.retry.max-wait-ms": "100",
}
# The ledger is compare-and-set: a stale append must fail, never be rebased (ledger.py retries
# it itself after recomputing parent and seq).
LEDGER_PROPERTIES = {**_COMMON, "commit.retry.num-retries": "0"}


def sqlalchemy_url(uri: str, *, setting: str) -> str:
    """``sqlite:///…`` or ``postgresql://…`` → a SQLAlchemy URL with our drivers."""
    scheme = urlsplit(uri).scheme
    if scheme == "sqlite":
        return uri + ("&" if "?" in uri else "?") + "timeout=60"
    if scheme in ("postgresql", "postgres"):
        return "postgresql+psycopg://" + uri.split("://", 1)[1]
    if scheme == "postgresql+psycopg":
        return uri
    raise ConfigurationError(
        f"{setting} must be sqlite:///path or postgresql://…, got {uri.split(':', 1)[0]}://"
    )


def _sqlite_wal(uri: str) -> None:
    # WAL lets readers run beside the one writer; several servers share one catalog file.
    path = uri.split("sqlite:///", 1)[1].split("?", 1)[0]
    if path and path != ":memory:":
        with suppress(sqlite3.Error), sqlite3.connect(path, timeout=60) as conn:
            enable_wal(conn, 60)


@contextmanager
def schema_lock(engine: Engine) -> Iterator[Connection]:
    """A transaction in which to create tables: on PostgreSQL under the one schema
    advisory lock (the AMP store's too), so processes starting together on a fresh
    database do not race on CREATE TABLE (``IF NOT EXISTS`` is not safe against that)."""
    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": SCHEMA_LOCK})
        yield conn


# How many times a load follows a moved pointer whose old metadata file was deleted.
MOVED_RELOADS = 20


class Catalog(SqlCatalog):
    """pyiceberg's SQL catalog, with one race between servers closed.

    A load reads the table's metadata pointer, then the file it names. Tables delete
    metadata files older than their last few versions (``previous-versions-max``), so
    when other servers commit that many times between the two reads, the file is gone:
    a ``FileNotFoundError`` that said "storage down" (503) to a write or a merge that
    had only lost a race. The pointer has moved on then, so the load reads it again.
    A file missing while the pointer still names it is a real loss and is raised.
    pyiceberg's own commit and its retries load through here too.

    Every table shares one FileIO per set of properties (pyiceberg made one per load, each
    with its own S3 client and so its own connections to the store)."""

    def __init__(self, name: str, **properties: str) -> None:
        self._ios: dict[tuple[object, ...], FileIO] = {}
        self._ios_lock = threading.Lock()
        super().__init__(name, **properties)

    def _load_file_io(self, properties: Properties = EMPTY_DICT,
                      location: str | None = None) -> FileIO:
        merged = {**self.properties, **properties}
        key = (urlsplit(location or "").scheme, *sorted(merged.items()))
        with self._ios_lock:
            io = self._ios.get(key)
            if io is None:
                io = self._ios[key] = load_file_io(merged, location)
        return io

    def load_table(self, identifier: str | Identifier) -> Table:
        namespace = Catalog.namespace_to_string(Catalog.namespace_from(identifier))
        name = Catalog.table_name_from(identifier)
        # The pointer is read only after a failure (a load on the happy path costs what
        # pyiceberg's does): a second failure at the same pointer is a real loss.
        seen: str | None = None
        for attempt in range(MOVED_RELOADS + 1):
            try:
                return super().load_table(identifier)
            except FileNotFoundError:
                now = metadata_pointer(self.engine, namespace, name)
                if attempt == MOVED_RELOADS or now is None or now == seen:
                    raise
                seen = now
        raise AssertionError("unreachable")


def open_catalog(settings: Settings) -> SqlCatalog:
    uri = settings.resolved_catalog_uri
    url = sqlalchemy_url(uri, setting="AMPUP_MEMORY_CATALOG_URI")
    properties = catalog_properties(settings)
    if url.startswith("sqlite"):
        _sqlite_wal(url)
    try:
        if not url.startswith("sqlite"):
            # pyiceberg creates its own tables unlocked: servers starting together on a
            # fresh database would race on them. Made here first, under the lock.
            engine = create_engine(url)
            try:
                with schema_lock(engine) as conn:
                    SqlCatalogBaseTable.metadata.create_all(conn, checkfirst=True)
            finally:
                engine.dispose()
            properties["pool_pre_ping"] = "true"  # survive a database restart
        catalog = Catalog(CATALOG_NAME, uri=url, **properties)
        stray = table_outside(catalog.engine, properties["warehouse"])
    except Exception as exc:  # the driver's own error names what is wrong
        # the driver may quote the URI it was given
        said = mask_secrets(driver_said(exc), [urlsplit(uri).password])
        raise ConfigurationError(
            f"cannot open the Iceberg catalog {mask_uri(uri)!r}: {said}{open_note(uri)}"
        ) from exc
    if stray is not None:
        raise ConfigurationError(moved_warehouse(properties["warehouse"], stray))
    return catalog


def table_outside(engine: Engine, warehouse: str) -> str | None:
    """A table of the catalog whose files are not under ``warehouse`` (its location), or
    None. A table's files stay where the warehouse was when it was made, and are read
    where the catalog says: a changed setting split a home in two, new scopes in the new
    place and old ones in the old, and a backup (which copies the configured warehouse)
    missed the old half. A catalog with no tables yet has nothing outside."""
    prefix = warehouse.rstrip("/") + "/"
    stmt = select(IcebergTables.metadata_location).where(
        IcebergTables.catalog_name == CATALOG_NAME,
        func.substr(IcebergTables.metadata_location, 1, len(prefix)) != prefix,
    ).limit(1)
    with engine.connect() as conn:
        if not inspect(conn).has_table(IcebergTables.__tablename__):
            return None
        location = conn.execute(stmt).scalar_one_or_none()
    return None if location is None else location.rsplit("/metadata/", 1)[0]


def moved_warehouse(warehouse: str, stray: str) -> str:
    return (f"the warehouse is set to {mask_uri(warehouse)!r}, but this catalog's tables"
            f" were made under another one (a table at {mask_uri(stray)}): set"
            " AMPUP_MEMORY_WAREHOUSE (--warehouse) back to it; a new warehouse needs a new"
            " home or catalog (`ampup-memory backup` and `restore` move an embedded home)")


# Built once: building the statement cost more than running it (a commit asks ~4 times).
_LOCATION = select(IcebergTables.metadata_location).where(
    IcebergTables.catalog_name == CATALOG_NAME,
    IcebergTables.table_namespace == bindparam("namespace"),
    IcebergTables.table_name == bindparam("name"),
)


def metadata_pointer(engine: Engine, namespace: str, name: str) -> str | None:
    """The table's current metadata file as the catalog names it (None: no such table)."""
    with engine.connect() as conn:
        return conn.execute(_LOCATION, {"namespace": namespace, "name": name}
                            ).scalar_one_or_none()


# How long a writer waits for the ledger turn before committing without it (the
# compare-and-set keeps the chain either way; the turn only saves wasted attempts).
TURN_WAIT_SECONDS = 10.0


class Turn:
    """A lock every server sharing the catalog sees, that its holder's death frees: an
    ``flock`` on a file beside a SQLite catalog, a session advisory lock on PostgreSQL
    (nothing for an in-memory catalog, which one process holds).

    Turns mostly save wasted work: a holder gives up after its wait and goes ahead, so
    nothing may rely on one alone. Two are taken (service.py, maintenance.py; the ledger's
    also by a new pin or snapshot, snapshots.py, which checks its heads again after):

    - ``ledger``: one ledger appender at a time. The ledger's compare-and-set keeps each
      history one chain, but an attempt that loses it has already done all its work
      (catching up, reading the scope's new rows, writing the append's files), and with
      several servers appending at once most attempts lost (measured with 4 servers: ~1.3
      lost attempts per commit, each as costly as the commit). Losers now wait instead; a
      writer that cannot get the turn within ``TURN_WAIT_SECONDS`` goes ahead anyway.
    - ``upkeep``: one server compacts or expires at a time. Every server crosses a table's
      thresholds at the same commit, and each compaction read and rewrote the whole table
      only for all but one to fail. A server that finds the turn taken skips its upkeep.
    """

    def __init__(self, catalog: SqlCatalog, name: str) -> None:
        self.engine = catalog.engine
        self.name = name
        self.path: str | None = None
        url = self.engine.url
        if url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:"):
            self.path = f"{url.database}.{name}-turn"
        self.postgres = url.get_backend_name() == "postgresql"

    @contextmanager
    def hold(self, wait: float = TURN_WAIT_SECONDS) -> Iterator[bool]:
        """Take the turn, trying for up to ``wait`` seconds; yields whether it is ours."""
        if self.path is not None:
            with self._file(wait) as held:
                yield held
        elif self.postgres:
            with self._advisory(wait) as held:
                yield held
        else:
            yield True

    @contextmanager
    def _file(self, wait: float) -> Iterator[bool]:
        assert self.path is not None
        with file_lock(self.path, wait) as held:
            yield held

    @contextmanager
    def _advisory(self, wait: float) -> Iterator[bool]:
        key = advisory_key(f"{self.name}-turn")
        with self.engine.connect() as conn:
            held = poll(lambda: bool(conn.execute(
                text("SELECT pg_try_advisory_lock(:k)"), {"k": key}).scalar()), wait)
            conn.commit()
            try:
                yield held
            finally:
                if held:
                    try:
                        conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": key})
                        conn.commit()
                    except Exception:  # a broken connection frees the lock as it closes
                        conn.invalidate()


class MemoryTables:
    """Loads and creates tables; keeps each loaded table until the catalog says it moved."""

    def __init__(self, catalog: SqlCatalog, kept: int = TABLES_KEPT) -> None:
        self.catalog = catalog
        # Both keep the ``kept`` tables used last: every scope has tables of its own, and
        # a server meets scopes (and workspaces, made and dropped) without end.
        self._cache: Kept[tuple[str, str], Table] = Kept(kept)
        # Per table, the latest metadata file seen and its parsed content (frozen): a table
        # object for that location is built from it without reading the file again.
        self._known: Kept[tuple[str, str], tuple[str, TableMetadata, Table]] = Kept(kept)
        self.ledger_turn = Turn(catalog, "ledger")
        self.upkeep_turn = Turn(catalog, "upkeep")

    @classmethod
    def open(cls, settings: Settings) -> MemoryTables:
        tables = cls(open_catalog(settings))
        try:
            tables.ensure_namespace(SYSTEM_NAMESPACE, SYSTEM_TABLES)
        except OSError as exc:  # the warehouse's own error: no bucket, refused, no access
            tables.close()
            said = mask_secrets(" ".join(str(exc).split()), [settings.s3_secret_access_key])
            raise ConfigurationError(
                f"cannot use the Iceberg warehouse {mask_uri(settings.resolved_warehouse)!r}: "
                f"{said} (`ampup-memory doctor` checks every engine)") from exc
        return tables

    def close(self) -> None:
        self.catalog.engine.dispose()

    # -- creation -------------------------------------------------------------------------
    def ensure_namespace(self, namespace: str, layout: dict[str, pa.Schema]) -> None:
        """Create the namespace and its tables if missing; safe against racing servers
        (a lost race surfaces as the driver's integrity error, not always as pyiceberg's)."""
        if namespace not in {ns[0] for ns in self.catalog.list_namespaces()}:
            try:
                self.catalog.create_namespace(namespace)
            except (NamespaceAlreadyExistsError, IntegrityError):
                pass
        for name, schema in layout.items():
            props = LEDGER_PROPERTIES if name == "ledger" else DATA_PROPERTIES
            if self.location(namespace, name) is not None:
                self._add_missing_columns(namespace, name, schema, props)
                continue
            try:
                self.catalog.create_table((namespace, name), schema=schema, properties=props)
            except (TableAlreadyExistsError, IntegrityError):
                if self.location(namespace, name) is None:
                    raise

    def _add_missing_columns(self, namespace: str, name: str, schema: pa.Schema,
                             props: dict[str, str]) -> None:
        """Tables made by an older version gain the columns (all optional, so older rows
        read as null) and properties added since. Two servers upgrading at once: one wins,
        the other finds the columns there on its reload."""
        table = self.catalog.load_table((namespace, name))
        if any(k not in table.properties for k in props):
            with suppress(CommitFailedException), table.transaction() as tx:
                tx.set_properties({k: v for k, v in props.items() if k not in table.properties})
            table = self.catalog.load_table((namespace, name))
        have = {f.name for f in table.schema().fields}
        missing = [f for f in schema if f.name not in have]
        if not missing:
            return
        try:
            with table.update_schema() as update:
                update.union_by_name(pa.schema(missing))
        except CommitFailedException:
            table = self.catalog.load_table((namespace, name))
            if {f.name for f in missing} - {f.name for f in table.schema().fields}:
                raise

    def ensure_scope(self, scope: Scope) -> None:
        self.ensure_namespace(scope.namespace, SCOPE_TABLES)

    def scopes(self) -> list[Scope]:
        found = (scope_from_namespace(ns[0]) for ns in self.catalog.list_namespaces())
        return sorted(s for s in found if s is not None)

    # -- reading ----------------------------------------------------------------------------
    def location(self, namespace: str, name: str) -> str | None:
        """The table's current metadata file: one indexed catalog query, no file read.

        Freshness checks run on every request, so they must cost well under a millisecond.
        """
        return metadata_pointer(self.catalog.engine, namespace, name)

    def table(self, namespace: str, name: str, *, fresh: bool = True) -> Table:
        """The table, reloaded only when its metadata moved since we last saw it."""
        key = (namespace, name)
        cached = self._cache.get(key)
        if cached is not None and not fresh:
            return cached
        at = self.location(namespace, name)
        if cached is not None and cached.metadata_location == at:
            return cached
        loaded = self._load(key, at)
        self._cache.put(key, loaded)
        return loaded

    def _load(self, key: tuple[str, str], at: str | None) -> Table:
        """A new table object at the catalog's metadata file ``at``: from the metadata
        parsed last time when that is the same file (a file at a location never changes),
        else read from the catalog. A commit moves the ledger every time, and the ledger
        is read again after each (reads level the index, writers assert it): each read
        was a parse of the whole metadata file (~20 % of a branch creation)."""
        known = self._known.get(key)
        if known is not None and at is not None and known[0] == at:
            location, metadata, like = known
            return Table(identifier=like.name(), metadata=metadata,
                         metadata_location=location, io=like.io, catalog=self.catalog)
        loaded = self.catalog.load_table(key)
        self.remember(loaded)
        return loaded

    def remember(self, table: Table) -> None:
        """Note a table object's metadata as the latest seen. Call it only with an object
        no other thread commits through (loaded just now, or ``private`` after its commit),
        so its location and metadata are one pair."""
        key = tuple(table.name()[-2:])
        location, metadata = table.metadata_location, table.metadata
        self._known.put((key[0], key[1]), (location, metadata, table))

    def commit_turn(self, namespace: str, name: str) -> AbstractContextManager[bool]:
        """The turn a commit to this table takes: the ledger's for the ledger, else none
        (data appends rebase on each other)."""
        if (namespace, name) == (SYSTEM_NAMESPACE, "ledger"):
            return self.ledger_turn.hold()
        return nullcontext(True)

    def moved(self, table: Table) -> bool:
        """Whether the catalog's pointer left ``table``'s metadata: a commit based on it
        would lose the compare-and-set, so a writer can give up before writing files."""
        namespace, name = table.name()[-2:]
        return self.location(namespace, name) != table.metadata_location

    def forget(self, namespace: str, name: str) -> None:
        """Drop the loaded copy of a table and its metadata (it is being dropped from the
        catalog): a dropped workspace's tables stayed in `_known` for good."""
        self._cache.pop((namespace, name))
        self._known.pop((namespace, name))

    def private(self, namespace: str, name: str) -> Table:
        """A table object no other thread holds: for commits whose base must not move
        under them (the ledger's compare-and-set, maintenance). Shared objects from
        ``table`` are replaced in place by every commit made through them."""
        return self._load((namespace, name), self.location(namespace, name))

    def scope_table(self, scope: Scope, name: str) -> Table | None:
        try:
            return self.table(scope.namespace, name)
        except NoSuchTableError:
            return None

    def system(self, name: str) -> Table:
        return self.table(SYSTEM_NAMESPACE, name)

    # -- writing ----------------------------------------------------------------------------
    def append(self, table: Table, rows: pa.Table, summary: dict[str, str] | None = None) -> int:
        """Append rows as one snapshot; returns that snapshot's id (`_staged_metadata`
        keeps the transaction from recomputing its metadata)."""
        table.append(rows, snapshot_properties=summary or {})
        snapshot = table.current_snapshot()
        assert snapshot is not None
        return snapshot.snapshot_id

    def append_anew(self, namespace: str, name: str,
                    rows: pa.Table | Callable[[Table], pa.Table],
                    backoff: Backoff | None = None,
                    check: Callable[[Table], None] | None = None) -> tuple[Table, int]:
        """Append rows that each stand alone (a principal, a workspace's or a hold's next
        state: readers fold them), retrying a lost race on the table as it now is; the
        table object, holding the new snapshot, and its id. pyiceberg's own retry rebases
        on the snapshot it started from, which another writer's upkeep (`tidy`) may have
        expired: concurrent ``PUT /principals/{user}`` answered 500 ("Cannot find
        starting snapshot").

        ``check`` runs in each attempt on the table as of exactly the snapshot the append
        asserts (a write of another thread or server in between fails the append, and the
        next attempt checks again); it raises to abandon the write (If-Match). ``rows``
        may be made there too: a function of that table, called after ``check``, for rows
        built from the state they follow (a hold's next row)."""

        def attempt() -> tuple[Table, int]:
            table = self.private(namespace, name)
            if check is not None or callable(rows):
                if check is not None:
                    check(table)
                made = rows(table) if callable(rows) else rows
                # pyiceberg would rebase a lost append onto the winner's snapshot, past the
                # state just checked: this one fails instead (the object is ours alone;
                # the property is not committed), and the next attempt checks again.
                table.metadata = table.metadata.model_copy(update={"properties": {
                    **table.metadata.properties, "commit.retry.num-retries": "0"}})
                return table, self.append(table, made)
            return table, self.append(table, rows)

        return until_won(attempt, backoff or Backoff())[0]

    def all_tables(self) -> Iterator[tuple[str, str]]:
        """Every table we own: system tables, then each scope's (a scope made before a
        table was added gains it on its next commit; until then it has none)."""
        for name in SYSTEM_TABLES:
            yield SYSTEM_NAMESPACE, name
        for scope in self.scopes():
            for name in SCOPE_TABLES:
                if self.location(scope.namespace, name) is not None:
                    yield scope.namespace, name


def arrow(schema: pa.Schema, rows: list[dict[str, object]]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=schema)


# pyiceberg's predicates are pydantic models with a custom __new__ that mypy cannot follow;
# these wrappers keep the ignores in one place.
def is_in(column: str, values: Iterable[str]) -> BooleanExpression:
    return In(column, set(values))  # type: ignore[call-arg,arg-type]


def at_least(column: str, value: str) -> BooleanExpression:
    return GreaterThanOrEqual(column, value)  # type: ignore[call-arg,arg-type]


def equal_to(column: str, value: str) -> BooleanExpression:
    return EqualTo(column, value)  # type: ignore[call-arg,arg-type]
