"""The decay score and the lifecycle state machine. Each rule lives here, once.

    decay_score = importance × confidence × e^(−decay_rate × Δt_days)

Δt runs from the cell's clock: the latest of created_at, last_accessed_at and
last_updated_at. The engine's own status changes are not updates and reset no clock.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from ampup_memory.amp.model import MemoryCell, Status, StoredCell

STALE_THRESHOLD = 0.3
ARCHIVE_AFTER = timedelta(days=30)
SECONDS_PER_DAY = 86400.0


def clock(cell: MemoryCell) -> datetime:
    """When the cell was last created, read or written: the start of its decay."""
    life = cell.lifecycle
    return max(life.created_at, life.last_accessed_at, life.last_updated_at)


def touched_at(cell: MemoryCell, now: datetime) -> datetime:
    """The time a write of ``cell`` records: ``now``, or the cell's clock when that is
    later (another server whose clock runs ahead wrote it last, or ours stepped back), so
    ``last_updated_at`` never runs back (docs/deployment.md, "Clocks")."""
    return max(now, clock(cell))


@dataclass(frozen=True)
class DecayInputs:
    """What the decay score depends on; stores can hand these over without a whole cell."""

    importance: float
    confidence: float
    decay_rate: float
    since: datetime
    expires_at: datetime | None = None

    @classmethod
    def of(cls, cell: MemoryCell) -> DecayInputs:
        s = cell.scoring
        return cls(s.importance, s.confidence, s.decay_rate, clock(cell),
                   cell.lifecycle.expires_at)


def decay_score(subject: MemoryCell | DecayInputs, now: datetime) -> float:
    """The one decay score. A cell past its explicit ``expires_at`` scores 0."""
    d = subject if isinstance(subject, DecayInputs) else DecayInputs.of(subject)
    if d.expires_at is not None and now >= d.expires_at:
        return 0.0
    days = max(0.0, (now - d.since).total_seconds() / SECONDS_PER_DAY)
    return d.importance * d.confidence * math.exp(-d.decay_rate * days)


@dataclass(frozen=True)
class Standing:
    """What the state machine reads of a cell. A pass reads these columns from the store
    instead of each whole cell: parsing every cell's document was most of a pass's cost
    (960k cells on PostgreSQL: 68 s of the server's CPU an hour, docs/performance.md)."""

    cell_id: str
    status: Status
    decay: DecayInputs
    stale_since: datetime | None

    @classmethod
    def of(cls, stored: StoredCell) -> Standing:
        cell = stored.cell
        return cls(cell.id, cell.lifecycle.status, DecayInputs.of(cell), stored.stale_since)


class Transition(StrEnum):
    active_to_stale = "active_to_stale"
    stale_to_active = "stale_to_active"
    stale_to_archived = "stale_to_archived"


@dataclass(frozen=True)
class Decision:
    transition: Transition
    new_status: Status


def evaluate(subject: StoredCell | Standing, now: datetime) -> Decision | None:
    """What the engine does with one cell at ``now``; None = leave it alone."""
    s = subject if isinstance(subject, Standing) else Standing.of(subject)
    if s.status is Status.active:
        if decay_score(s.decay, now) < STALE_THRESHOLD:
            return Decision(Transition.active_to_stale, Status.stale)
        return None
    if s.status is Status.stale:
        if decay_score(s.decay, now) >= STALE_THRESHOLD:
            return Decision(Transition.stale_to_active, Status.active)
        # Stale for 30 days with no access or update since it went stale.
        quiet_since = max(s.stale_since or s.decay.since, s.decay.since)
        if now - quiet_since >= ARCHIVE_AFTER:
            return Decision(Transition.stale_to_archived, Status.archived)
        return None
    return None  # archived and deleted are never evaluated


def purgeable_at(deleted_at: datetime, retention_days: int) -> datetime:
    return deleted_at + timedelta(days=retention_days)
