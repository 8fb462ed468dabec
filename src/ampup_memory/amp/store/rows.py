"""How a cell becomes a row and back: shared by every SQL store so they cannot drift.

The SQLite and PostgreSQL stores keep the same columns and the same JSON document, and
build their filters with the same `where_clause`; only the placeholder differs.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from ampup_memory.amp.access import Guard
from ampup_memory.amp.model import MemoryCell, Status, StoredCell, to_utc
from ampup_memory.amp.store.base import (
    CellFilter,
    EmbeddingSource,
    KeyRecord,
    PassRecord,
    Screen,
)
from ampup_memory.layouts import newer_layout, stored_version
from ampup_memory.search.embed import ModelInfo
from ampup_memory.search.tokenize import keyword_text
from ampup_memory.timefmt import format_time
from ampup_memory.timefmt import parse_time as stored_time

if TYPE_CHECKING:
    import numpy as np

# The layout of the cell store's tables, recorded in its `meta` table under
# SCHEMA_VERSION_KEY when it is made (or first opened by a version that records it) and
# checked on every open (`check_layout`).
SCHEMA_VERSION = 1
SCHEMA_VERSION_KEY = "schema_version"

# Exact vector ranking is cheap below this many filtered cells; above it, an index answers.
EXACT_LIMIT = 5000

# Where both stores record the embedding model, in their `meta` table.
MODEL_NAME_KEY = "embedding_model_name"
MODEL_DIMENSIONS_KEY = "embedding_model_dimensions"
# Where both stores record an unfinished restore into them (`CellStore.set_restore_mark`).
RESTORE_MARK_KEY = "restore_unfinished"

CELL_COLS = "doc, access_count, last_accessed_at, stale_since, deleted_at"
KEY_COLS = "key_id, agent_id, key_hash, admin, created_at, expires_at, revoked_at, user_id"
PASS_COLS = ("started_at, finished_at, holder, evaluated, transitions, purged, dry_run,"
             " states")


@dataclass(frozen=True)
class CellColumns:
    """The columns a store indexes or updates in place; the rest is one JSON document."""

    id: str
    type: str
    owner_id: str
    created_by: str
    status: str
    public: bool
    has_readers: bool
    access_count: int
    last_accessed_at: str
    text: str
    doc: str
    stale_since: str | None
    deleted_at: str | None
    # What search scores a hit by, without the document (PostgreSQL keeps them as columns;
    # SQLite reads them from the document with json_extract).
    guard: str  # JSON: created_by, owner_id, public, readable_by
    importance: float
    confidence: float
    decay_rate: float
    created_at: str
    last_updated_at: str
    expires_at: str | None


def with_status(stored: StoredCell, status: Status, stale_since: datetime | None) -> StoredCell:
    """The cell after an engine transition: new status and stale clock, nothing else."""
    cell = stored.cell
    life = cell.lifecycle.model_copy(update={"status": status})
    return stored.model_copy(
        update={"cell": cell.model_copy(update={"lifecycle": life}), "stale_since": stale_since}
    )


def columns(stored: StoredCell) -> CellColumns:
    cell = stored.cell
    return CellColumns(
        id=cell.id,
        type=cell.type.value,
        owner_id=cell.identity.owner_id,
        created_by=cell.identity.created_by,
        status=cell.lifecycle.status.value,
        public=cell.access_policy.public,
        has_readers=bool(cell.access_policy.readable_by),
        access_count=cell.scoring.access_count,
        last_accessed_at=format_time(cell.lifecycle.last_accessed_at),
        text=cell.content.text,
        doc=json.dumps(cell.wire(), separators=(",", ":"), ensure_ascii=False),
        stale_since=format_time(stored.stale_since) if stored.stale_since else None,
        deleted_at=format_time(stored.deleted_at) if stored.deleted_at else None,
        guard=json.dumps(
            {"created_by": cell.identity.created_by, "owner_id": cell.identity.owner_id,
             "public": cell.access_policy.public,
             "readable_by": cell.access_policy.readable_by,
             "writable_by": cell.access_policy.writable_by},
            separators=(",", ":"),
        ),
        importance=cell.scoring.importance,
        confidence=cell.scoring.confidence,
        decay_rate=cell.scoring.decay_rate,
        created_at=format_time(cell.lifecycle.created_at),
        last_updated_at=format_time(cell.lifecycle.last_updated_at),
        expires_at=_time_or_none(cell.lifecycle.expires_at),
    )


def cell_words(text: str) -> str | None:
    """A cell's ``words`` column: what its keyword index holds of its text by the one
    rule (`tokenize.keyword_text`), or None when the text is plain ASCII (its own keyword
    text: the index reads ``text`` then). Every text not plain ASCII gets its words, even
    where they are the text, so that a NULL beside such a text means "not made yet" to the
    stores' triggers (a cell an older version wrote): their test is the text's bytes
    against its characters (a NUL counts as not plain, as SQLite's length() stops at it
    and PostgreSQL stores it as U+FFFD)."""
    if text.isascii() and "\x00" not in text:
        return None
    return keyword_text(text)


def embedding_source(cell_id: str, doc: str) -> EmbeddingSource:
    """The text the service embeds, from the document (PostgreSQL's ``text`` column has
    NUL mapped away; the document keeps the cell as written)."""
    return EmbeddingSource(cell_id, str(json.loads(doc)["content"]["text"]))


def check_layout(recorded: str | None, where: str) -> None:
    """Refuse a store whose recorded layout is newer than this version's, before anything
    touches it; an older or unrecorded one is upgraded by the opener, which then records
    SCHEMA_VERSION."""
    found = stored_version(recorded)
    if found is not None and found > SCHEMA_VERSION:
        raise newer_layout(f"the AMP cell store {where}", found, SCHEMA_VERSION,
                           "upgrade AmpUp Memory to open it")


def model_from_meta(name: str | None, dimensions: str | None) -> ModelInfo | None:
    if name is None or dimensions is None:
        return None
    return ModelInfo(name, int(dimensions))


@lru_cache(maxsize=4096)
def guard_and_writers(text: str) -> tuple[Guard, bool]:
    """The guard column read: the Guard, and whether it names the cell's writers (rows
    written before the column held ``writable_by`` do not: their Guard has none).
    Cached: a search reads 100 to 200 guards, and cells share a few (one owner, one
    creator, the same readers); a Guard is immutable, so sharing one costs nothing."""
    data = json.loads(text)
    writers = data.get("writable_by")
    return Guard(created_by=data["created_by"], owner_id=data["owner_id"],
                 public=bool(data["public"]), readable_by=tuple(data["readable_by"]),
                 writable_by=tuple(writers or ())), writers is not None


def guard_from_json(text: str) -> Guard:
    return guard_and_writers(text)[0]


def screened(status: str, guard: str, screen: Screen) -> bool:
    """Whether ``screen`` keeps a row out by its status and guard columns alone."""
    return screen(status, *guard_and_writers(guard))


def parse_time(value: str | datetime | None) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return to_utc(value)
    return stored_time(value)


def stored_from_row(
    doc: str | dict[str, Any],
    access_count: int,
    last_accessed_at: str | datetime,
    stale_since: str | datetime | None,
    deleted_at: str | datetime | None,
) -> StoredCell:
    """Rebuild a cell; the in-place columns (access count, last read) win over the doc."""
    data = json.loads(doc) if isinstance(doc, str) else doc
    data["scoring"]["access_count"] = access_count
    data["lifecycle"]["last_accessed_at"] = (
        last_accessed_at if isinstance(last_accessed_at, str) else format_time(last_accessed_at)
    )
    return StoredCell(
        cell=MemoryCell.model_validate(data),
        stale_since=parse_time(stale_since),
        deleted_at=parse_time(deleted_at),
    )


def vector_bytes(vector: list[float] | None) -> bytes | None:
    import numpy as np

    if vector is None:
        return None
    return np.asarray(vector, dtype=np.float32).tobytes()


def vector_from_bytes(blob: bytes) -> np.ndarray:
    import numpy as np

    return np.frombuffer(blob, dtype=np.float32)


def where_clause(filters: CellFilter, mark: str, alias: str = "") -> tuple[str, list[Any]]:
    """The SQL condition for ``filters``, with `access.may_be_readable` pushed down so rows
    that can never be readable are skipped in the database. ``mark`` is the driver's
    placeholder (``?`` for sqlite3, ``%s`` for psycopg); every value is bound, never spliced.
    """
    p = alias
    clauses = [
        f"{p}status IN ({','.join([mark] * len(filters.statuses))})",
        f"({p}public OR {p}created_by = {mark} OR {p}owner_id = {mark} OR {p}has_readers)",
    ]
    params: list[Any] = [s.value for s in filters.statuses]
    params += [filters.agent_id, filters.agent_id]
    if filters.owner_id is not None:
        clauses.append(f"{p}owner_id = {mark}")
        params.append(filters.owner_id)
    if filters.types:
        clauses.append(f"{p}type IN ({','.join([mark] * len(filters.types))})")
        params += [t.value for t in filters.types]
    return " AND ".join(clauses), params


def _time_or_none(value: datetime | None) -> str | None:
    return format_time(value) if value is not None else None


def key_params(record: KeyRecord) -> tuple[Any, ...]:
    """Values for ``KEY_COLS``, in order."""
    return (
        record.key_id, record.agent_id, record.key_hash, record.admin,
        format_time(record.created_at), _time_or_none(record.expires_at),
        _time_or_none(record.revoked_at), record.user_id,
    )


def key_from_row(row: Sequence[Any]) -> KeyRecord:
    created = parse_time(row[4])
    assert created is not None  # NOT NULL column
    return KeyRecord(
        key_id=row[0], agent_id=row[1], key_hash=row[2], admin=bool(row[3]),
        created_at=created, expires_at=parse_time(row[5]), revoked_at=parse_time(row[6]),
        user_id=row[7],
    )


def pass_params(record: PassRecord) -> tuple[Any, ...]:
    """Values for ``PASS_COLS``, in order."""
    return (
        format_time(record.started_at), format_time(record.finished_at), record.holder,
        record.evaluated, json.dumps(record.transitions, separators=(",", ":")),
        record.purged, record.dry_run, json.dumps(record.states, separators=(",", ":")),
    )


def pass_from_row(row: Sequence[Any]) -> PassRecord:
    started, finished = parse_time(row[0]), parse_time(row[1])
    assert started is not None and finished is not None  # NOT NULL columns
    transitions = json.loads(row[4]) if isinstance(row[4], str) else row[4]
    states = json.loads(row[7]) if isinstance(row[7], str) else row[7] or {}
    return PassRecord(
        started_at=started, finished_at=finished, holder=row[2], evaluated=int(row[3]),
        transitions={str(k): int(v) for k, v in transitions.items()},
        purged=int(row[5]), dry_run=bool(row[6]),
        states={str(k): int(v) for k, v in states.items()},
    )
