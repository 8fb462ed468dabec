"""How a cell becomes a row and back: shared by every SQL store so they cannot drift."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np

from ampup_memory.amp.model import MemoryCell, StoredCell, format_time, to_utc

SCHEMA_VERSION = 1


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
    )


def parse_time(value: str | datetime | None) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return to_utc(value)
    return to_utc(datetime.fromisoformat(value.replace("Z", "+00:00")))


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
    if vector is None:
        return None
    return np.asarray(vector, dtype=np.float32).tobytes()


def vector_from_bytes(blob: bytes) -> np.ndarray:
    return np.frombuffer(blob, dtype=np.float32)
