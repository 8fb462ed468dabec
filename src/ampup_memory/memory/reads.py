"""Extraction's read marks: that a model read an episode with a schema version.

One row per (episode, read key) in the scope's ``reads`` table, written in the same commit
as the facts the reading gave (extraction.py), so a crash leaves both or neither. The read
index mirrors them (``mem_reads``) so "which episodes are pending" is an indexed query, and
``index rebuild`` recreates them from the table like every other row. They are bookkeeping,
not knowledge: no fact read, search or query ever sees them.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any


def read_key(model: str, version: str | None) -> str:
    """One key per (model, schema version): a new model or schema version reads again."""
    return hashlib.sha256(f"{model}\n{version}".encode()).hexdigest()[:40]


@dataclass(frozen=True)
class ReadMark:
    episode: str
    key: str
    model: str
    schema: str | None
    facts: int
    rejected: dict[str, int]
    read_at: datetime
    branch: str = "main"
    commit_id: str = ""
    seq: int = 0
    layer: int = field(default=0, compare=False)


def read_row(rec: ReadMark, commit_id: str, now: datetime) -> dict[str, Any]:
    return {"commit_id": commit_id, "branch": rec.branch, "episode": rec.episode,
            "key": rec.key, "model": rec.model, "schema": rec.schema, "facts": rec.facts,
            "rejected": json.dumps(rec.rejected, sort_keys=True), "read_at": rec.read_at,
            "written_at": now}


def read_from_row(row: dict[str, Any], seq: int) -> ReadMark:
    return ReadMark(episode=row["episode"], key=row["key"], model=row["model"],
                    schema=row["schema"], facts=int(row["facts"] or 0),
                    rejected=json.loads(row["rejected"] or "{}"),
                    read_at=row["read_at"].astimezone(UTC), branch=row["branch"],
                    commit_id=row["commit_id"], seq=seq)
