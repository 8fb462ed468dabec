"""Records ↔ Iceberg rows: the one place that knows the column names of each table."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from ampup_memory.memory.episodes import EpisodeRecord
from ampup_memory.memory.facts import FactRecord

PUT_OP = "put"
ACL_OP = "acl"  # a later row of the same episode carrying only its new ACL


def _utc(value: datetime | None) -> datetime | None:
    return None if value is None else value.astimezone(UTC)


def episode_row(rec: EpisodeRecord, body: str | None, commit_id: str, now: datetime,
                op: str = PUT_OP) -> dict[str, Any]:
    """``body`` only when no committed episode of the scope carries it yet."""
    return {
        "commit_id": commit_id, "branch": rec.branch, "op": op, "id": rec.id,
        "source": rec.source, "type": rec.type, "occurred_at": rec.occurred_at,
        "about": list(rec.about), "acl": list(rec.acl), "document": rec.document,
        "body_ref": rec.body_ref, "body": body, "written_at": now,
    }


def episode_from_row(row: dict[str, Any], seq: int) -> EpisodeRecord:
    occurred = _utc(row["occurred_at"])
    assert occurred is not None
    return EpisodeRecord(
        id=row["id"], source=row["source"], type=row["type"], occurred_at=occurred,
        about=tuple(row["about"] or ()), acl=tuple(row["acl"] or ()),
        document=row["document"], body_ref=row["body_ref"], branch=row["branch"],
        commit_id=row["commit_id"], seq=seq,
    )


def fact_row(rec: FactRecord, commit_id: str, now: datetime) -> dict[str, Any]:
    return {
        "commit_id": commit_id, "branch": rec.branch, "kind": rec.kind,
        "fact_id": rec.fact_id, "entity": rec.entity, "predicate": rec.predicate,
        "value": rec.value, "valid_from": rec.valid_from, "valid_to": rec.valid_to,
        "quote": rec.quote, "cites": [{"episode": e, "unit": u} for e, u in rec.cites],
        "written_by": rec.written_by, "written_at": now,
    }


def fact_id(commit_id: str, position: int) -> str:
    """Facts are named by their commit and position in it: the order of a tie is kept."""
    return f"{commit_id}-{position:04d}"


def fact_position(fact_id_: str) -> int:
    tail = fact_id_.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def fact_from_row(row: dict[str, Any], seq: int) -> FactRecord:
    valid_from = _utc(row["valid_from"])
    assert valid_from is not None
    return FactRecord(
        fact_id=row["fact_id"], kind=row["kind"], entity=row["entity"],
        predicate=row["predicate"], value=row["value"], valid_from=valid_from,
        valid_to=_utc(row["valid_to"]), quote=row["quote"],
        cites=tuple((c["episode"], int(c["unit"])) for c in row["cites"] or ()),
        written_by=row["written_by"], branch=row["branch"], commit_id=row["commit_id"],
        seq=seq, ord=fact_position(row["fact_id"]),
    )
