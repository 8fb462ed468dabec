"""Append-only events of a scope: the storage the advice loop's runs and sessions use.

An event is one immutable row of ``<org>__<team>.events``: what happened (``kind``) to
which ``subject`` (a ``run_…`` or ``ses_…`` id), by whom, who may read the subject
(``acl``, carried by the event that starts a subject), an optional ``reward`` and a JSON
``data`` object. Events are committed like episodes and facts — rows first, then one
ledger row (`MemoryService.write_events`) — so a crash between the two leaves nothing
visible, and the read index (``mem_events``) is rebuilt from the table alone.

This module knows nothing of what the kinds mean: ``advice/`` folds a subject's events into
its state. It is the small, named interface between ``memory/`` and ``advice/``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ampup_memory.memory.scopes import MAIN


@dataclass(frozen=True)
class EventRecord:
    id: str  # a ULID (a keyed run's: ``idem_`` + a hash): one subject's sort by it after ``seq``
    subject: str
    kind: str
    user: str
    at: datetime
    acl: tuple[str, ...] = ()
    reward: float | None = None
    data: dict[str, Any] = field(default_factory=dict)
    branch: str = MAIN
    commit_id: str = ""
    seq: int = 0
    scope: str = ""  # set on events read from the index


def event_row(rec: EventRecord, commit_id: str, now: datetime) -> dict[str, Any]:
    return {
        "commit_id": commit_id, "branch": rec.branch, "id": rec.id, "subject": rec.subject,
        "kind": rec.kind, "user": rec.user, "acl": list(rec.acl), "reward": rec.reward,
        "data": json.dumps(rec.data, ensure_ascii=False, sort_keys=True), "at": rec.at,
        "written_at": now,
    }


def event_from_row(row: dict[str, Any], seq: int) -> EventRecord:
    return EventRecord(
        id=row["id"], subject=row["subject"], kind=row["kind"], user=row["user"],
        at=row["at"].astimezone(UTC), acl=tuple(row["acl"] or ()), reward=row["reward"],
        data=json.loads(row["data"] or "{}"), branch=row["branch"],
        commit_id=row["commit_id"], seq=seq,
    )
