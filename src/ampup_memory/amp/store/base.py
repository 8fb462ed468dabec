"""The cell-store contract. SQLite and PostgreSQL implement it; `registry.open_store`
picks one by URI.

A store keeps cells and the small amount of shared state several server processes must
agree on (the scoring budget, the lifecycle lease, API keys). It decides nothing about
access: it may skip rows that `access.may_be_readable` rules out, and the service applies
`access.can_read` to what it returns.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from ampup_memory.amp.access import Guard
from ampup_memory.amp.lifecycle import DecayInputs, Standing
from ampup_memory.amp.model import MemoryType, Status, StoredCell
from ampup_memory.search.embed import ModelInfo


@dataclass(frozen=True)
class CellFilter:
    """What listing and search narrow by, before any access rule."""

    agent_id: str
    statuses: Sequence[Status] = (Status.active,)
    owner_id: str | None = None
    types: Sequence[MemoryType] | None = None  # None: any type

    @property
    def matches_nothing(self) -> bool:
        """No status, or an empty list of types: a list is the set of values allowed, and
        the empty set allows none (docs/api.md, ``POST /memories/search``)."""
        return not self.statuses or (self.types is not None and not self.types)


@dataclass(frozen=True)
class Hit:
    """A search hit before ranking: raw keyword score (higher = better, 0 = no match) and
    cosine similarity of the cell's embedding with the query's (None = no vector). Cells
    are fetched afterwards, best first, only as far as the page needs."""

    cell_id: str
    keyword: float
    cosine: float | None
    guard: Guard
    decay: DecayInputs


@dataclass(frozen=True)
class ScoringBudget:
    """How the store counts scoring PATCHes inside one transaction with the cell locked."""

    limit: int
    window_seconds: int


@dataclass
class UpdateOutcome:
    stored: StoredCell
    count_scoring_patch: bool = False
    vector: list[float] | None = None


class UpdateTx(Protocol):
    def scoring_patches_since(self, since: datetime) -> list[datetime]:
        """Times of the cell's counted scoring PATCHes at or after ``since``, oldest first."""
        ...


Change = Callable[[StoredCell, UpdateTx], UpdateOutcome]


@dataclass(frozen=True)
class KeyRecord:
    key_id: str
    agent_id: str
    key_hash: str  # "sha256:<hex>"
    admin: bool
    created_at: datetime
    expires_at: datetime | None = None
    revoked_at: datetime | None = None
    user_id: str | None = None


@dataclass(frozen=True)
class StatusMove:
    """One engine transition for `CellStore.set_statuses`: the cell as the pass read it
    whole, and its new status and stale clock."""

    expected: StoredCell
    status: Status
    stale_since: datetime | None


@dataclass(frozen=True)
class PassRecord:
    """One finished lifecycle pass, as the history shows it. ``holder`` names the process
    ("host:pid"); times are wall-clock, so passes of different processes compare."""

    started_at: datetime
    finished_at: datetime
    holder: str
    evaluated: int
    transitions: dict[str, int]
    purged: int
    dry_run: bool = False
    # How many cells were in each status (active, stale, archived, deleted) when the pass
    # ended; empty for passes recorded before the history kept it.
    states: dict[str, int] = field(default_factory=dict)


# The lifecycle history keeps this many passes (the newest); older ones are dropped as
# new ones are recorded, so the history stays small whatever the timer's interval.
PASS_HISTORY = 1000


@dataclass(frozen=True)
class EmbeddingSource:
    """What a cell's vector is computed from: the text the service embeds on write."""

    cell_id: str
    text: str


@dataclass
class OwnerIndexReport:
    """What one pass over the large owners' vector indexes did (`CellStore.tend_owner_indexes`).
    Owner ids as stored."""

    built: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)  # logged; tried again next pass
    skipped: bool = False  # another process holds the lease: nothing looked at

    def wire(self) -> dict[str, Any]:
        return {"built": self.built, "dropped": self.dropped, "kept": self.kept,
                "failed": self.failed, "skipped": self.skipped}


@dataclass(frozen=True)
class CellCopy:
    """One cell whole, as a store keeps it: the cell with its clocks and access count, its
    vector, and the times of its counted scoring PATCHes (the budget's window). What
    `CellStore.copies` reads and `CellStore.put_copies` of another store writes (moving a
    laptop's cells to PostgreSQL, `ops/backup.py`)."""

    stored: StoredCell
    vector: list[float] | None
    scoring_patches: tuple[datetime, ...] = ()


@dataclass
class StoreInfo:
    name: str
    details: dict[str, str] = field(default_factory=dict)


# Decides from a row's status and guard columns alone whether a caller is kept away from
# the cell: (status, guard, whether the guard names the writers) -> kept out. A cell the
# caller may not read (or write) is then answered without its document being parsed, as
# fast as an id that names no cell: how long the refusal takes does not tell whether the
# cell exists (a 64 KB cell took 0.13 ms more than a missing one).
Screen = Callable[[str, Guard, bool], bool]


class CellStore(Protocol):
    """Persistence for AMP cells. Every method is safe to call from many threads."""

    info: StoreInfo

    def create(self, stored: StoredCell, vector: list[float] | None) -> None:
        """Insert a new cell; durable when it returns."""
        ...

    def get(self, cell_id: str, screen: Screen | None = None) -> StoredCell | None:
        """The cell, or None when there is none. With ``screen``: also None, without the
        cell's document being read, when ``screen(status, guard, writers_known)`` says
        the row is not the caller's (see `Screen`)."""
        ...

    def get_many(self, cell_ids: Sequence[str]) -> list[StoredCell]:
        """The cells that exist among ``cell_ids``, in no particular order."""
        ...

    def touch(self, cell_id: str, now: datetime) -> StoredCell | None:
        """Atomically add one to access_count and set last_accessed_at; the cell after it.
        None when the cell is missing or deleted."""
        ...

    def update(self, cell_id: str, change: Change) -> StoredCell | None:
        """Run ``change`` on the locked cell and write its outcome in one transaction.
        An exception from ``change`` leaves the cell untouched. None = no such cell."""
        ...

    def list_candidates(
        self, filters: CellFilter, before_id: str | None, batch: int
    ) -> list[StoredCell]:
        """Cells matching ``filters``, newest id first, strictly older than ``before_id``."""
        ...

    def search_candidates(
        self, filters: CellFilter, terms: Sequence[str], vector: list[float] | None, k: int
    ) -> list[Hit]:
        """Up to about ``k`` best keyword hits and ``k`` nearest vectors among the cells
        matching ``filters``, merged; every hit carries both scores."""
        ...

    def lifecycle_batch(self, after_id: str | None, batch: int) -> list[Standing]:
        """What the state machine reads of the active and stale cells, in id order after
        ``after_id`` (their columns, not their documents)."""
        ...

    def set_statuses(self, moves: Sequence[StatusMove]) -> set[str]:
        """Engine transitions, each applied only if its cell's status and clock are
        unchanged since ``expected`` was read (a concurrent read or write wins, and leaves
        that cell alone). Touches no clock. The ids of the cells moved. Each is committed
        on its own, without waiting for the disk: a move lost in a crash was acknowledged
        to no one, and the next pass makes it again."""
        ...

    def deleted_before(self, cutoff: datetime, batch: int, after: str = "") -> list[str]:
        """Ids of cells deleted at or before ``cutoff``, in id order, only those after
        ``after``: a dry run purges nothing, so it pages on from the last id it saw."""
        ...

    def purge(self, cell_ids: Sequence[str]) -> int:
        """Hard-delete cells, in one transaction; how many rows went."""
        ...

    def erase_purged(self) -> None:
        """Erase what the purges since the last call left of the purged cells' words in the
        store's indexes (SQLite: the keyword index's segments hold a deleted row's words
        until they merge): once after a pass's purge pages, or after one purge."""
        ...

    def lease(self, name: str, ttl_seconds: float) -> AbstractContextManager[bool]:
        """Hold a cross-process lease while the block runs; yields False if taken."""
        ...

    def put_key(self, record: KeyRecord) -> None: ...

    def key_by_hash(self, key_hash: str) -> KeyRecord | None: ...

    def list_keys(self) -> list[KeyRecord]: ...

    def revoke_key(self, key_id: str, now: datetime) -> bool: ...

    def record_pass(self, record: PassRecord, keep: int = PASS_HISTORY) -> None:
        """Append a finished lifecycle pass to the history, which keeps the newest
        ``keep`` passes."""
        ...

    def recent_passes(self, limit: int) -> list[PassRecord]:
        """The latest ``limit`` recorded passes, newest first."""
        ...

    def count(self) -> int: ...

    def status_counts(self) -> dict[str, int]:
        """How many cells hold each lifecycle status (statuses with none are left out)."""
        ...

    # -- embedding model (amp/reembed.py keeps the vectors in one space) ----------------

    def embedding_model(self) -> ModelInfo | None:
        """The embedder every stored vector comes from, as last recorded. None: never
        recorded (a fresh store, or one made before stores recorded it)."""
        ...

    def set_embedding_model(self, model: ModelInfo) -> None:
        """Record the embedder the stored vectors come from; durable when it returns."""
        ...

    def embedding_sources(self, after_id: str | None, batch: int) -> list[EmbeddingSource]:
        """The text of every cell, whatever its status, in id order after ``after_id``."""
        ...

    def replace_vectors(self, vectors: Sequence[tuple[EmbeddingSource, list[float]]]) -> int:
        """Set each cell's embedding in one transaction, only where the cell's text is
        still the source's (a concurrent edit wrote its own vector). Touches no clock,
        status or document: re-embedding is not an update. Returns the rows written."""
        ...

    # -- moving cells between stores (`ops/backup.py`) -----------------------------------

    def copies(self, after_id: str | None, batch: int) -> list[CellCopy]:
        """Every cell whatever its status, whole (`CellCopy`), in id order after
        ``after_id``: what `put_copies` of another store takes."""
        ...

    def put_copies(self, copies: Sequence[CellCopy]) -> int:
        """Write cells as another store kept them (ids, clocks, access counts, vectors,
        counted scoring PATCHes), in one transaction, through this store's own insert, so
        everything it derives from a cell (keyword index, filters, vector indexes) is
        made as for a created cell. A cell whose id is here already is left as it is (a
        copy run again after an interruption). Returns the cells written."""
        ...

    def restore_mark(self) -> str | None:
        """What `set_restore_mark` recorded (an unfinished restore into this store), or
        None."""
        ...

    def set_restore_mark(self, mark: str | None) -> None:
        """Record (or with None, clear) that a restore into this store has not finished;
        durable when it returns. Servers refuse to open a store that holds one."""
        ...

    def graphs(self) -> dict[str, int] | None:
        """Counters of this process's HNSW graph over the cell vectors (`GraphStats`:
        built, loaded, rejected, saved, building); None where the database keeps the
        vector index (PostgreSQL)."""
        ...

    def vector_memory(self) -> dict[str, int] | None:
        """Bytes this process holds for the cell vectors: ``matrix`` (every vector),
        ``graph`` (the HNSW graph in use, 0: none), ``blocks`` (large owners' contiguous
        copies). Where the database keeps them (PostgreSQL): the bytes of its HNSW index
        (``hnsw_index``), of the large owners' own ones (``owner_indexes``), of the
        cells table (``table``) and of the server's buffers
        (``shared_buffers``), to compare: a search reads what the buffers do not hold
        from outside them."""
        ...

    def tend_owner_indexes(
        self, progress: Callable[[int, int], None] | None = None
    ) -> OwnerIndexReport | None:
        """Make or drop the vector indexes of the owners with many cells, where the
        database keeps the vector index (PostgreSQL: one partial HNSW index per owner over
        `OWNER_INDEX_ABOVE` live cells, `pg_owner_indexes`); one process at a time.
        ``progress`` is told (work done, to do). None where there is nothing to tend
        (SQLite builds a large owner's block in memory as it searches, or no width)."""
        ...

    def close(self) -> None: ...


def iter_all(store: CellStore, batch: int = 1000) -> Iterator[Standing]:
    """Every active or stale cell's standing, in batches (lifecycle passes)."""
    after: str | None = None
    while True:
        rows = store.lifecycle_batch(after, batch)
        if not rows:
            return
        yield from rows
        after = rows[-1].cell_id
