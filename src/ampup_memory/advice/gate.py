"""The evidence gate: when a note is served, and when it is promoted or retired.

Pure functions over a note's evidence; nothing here stores anything. A new note is a
*candidate*: it is served only in a trial share of sessions, drawn deterministically per
(note, session) so the same session always gets the same answer. Once it has helped enough
*different* people it is *promoted* and served always. A note served often that rarely
helps is *retired* and no longer served. Every step returns a `GateEvent`, so the caller
can keep the note's whole history.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from ampup_memory.settings import Settings
from ampup_memory.timefmt import format_time


class NoteState(StrEnum):
    CANDIDATE = "candidate"
    PROMOTED = "promoted"
    RETIRED = "retired"


@dataclass(frozen=True)
class Evidence:
    """What a note's servings showed. ``helped_users`` are the distinct users it helped."""

    served: int = 0
    applied: int = 0
    helped: int = 0
    helped_users: frozenset[str] = frozenset()

    @property
    def helped_by_people(self) -> int:
        return len(self.helped_users)

    def counters(self) -> dict[str, int]:
        """What callers are shown (never who was helped)."""
        return {"served": self.served, "applied": self.applied, "helped": self.helped,
                "helped_by_people": self.helped_by_people}

    def to_dict(self) -> dict[str, Any]:
        """Everything, for storage (JSON)."""
        return {"served": self.served, "applied": self.applied, "helped": self.helped,
                "helped_users": sorted(self.helped_users)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Evidence:
        return cls(served=int(data["served"]), applied=int(data["applied"]),
                   helped=int(data["helped"]),
                   helped_users=frozenset(str(u) for u in data["helped_users"]))


@dataclass(frozen=True)
class GateRules:
    trial_share: float = 0.2
    promote_after_people: int = 3
    retire_min_served: int = 20
    retire_max_help_rate: float = 0.1

    @classmethod
    def from_settings(cls, settings: Settings) -> GateRules:
        return cls(trial_share=settings.advice_trial_share,
                   promote_after_people=settings.advice_promote_after_people,
                   retire_min_served=settings.advice_retire_min_served,
                   retire_max_help_rate=settings.advice_retire_max_help_rate)


@dataclass(frozen=True)
class GateEvent:
    """One step of a note's history: ``served``, ``outcome``, ``promoted`` or ``retired``."""

    note: str
    kind: str
    state: NoteState  # the note's state after this step
    evidence: dict[str, int]  # the counters after this step
    at: str  # ISO-8601 UTC
    session: str | None = None
    user: str | None = None
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"note": self.note, "kind": self.kind, "state": self.state.value,
                "evidence": dict(self.evidence), "at": self.at, "session": self.session,
                "user": self.user, "detail": self.detail}


def _now(at: datetime | None) -> str:
    return format_time(at or datetime.now(UTC))


def trial_draw(note: str, session: str) -> float:
    """A uniform number in [0, 1) fixed by the (note, session) pair (SHA-256)."""
    digest = hashlib.sha256(f"{note}\n{session}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def serves(note: str, state: NoteState, session: str, rules: GateRules) -> tuple[bool, bool]:
    """(served?, served as a trial?) for this note in this session."""
    if state is NoteState.PROMOTED:
        return True, False
    if state is NoteState.CANDIDATE:
        drawn = trial_draw(note, session) < rules.trial_share
        return drawn, drawn
    return False, False


def record_served(note: str, state: NoteState, evidence: Evidence, *, session: str,
                  user: str | None = None, at: datetime | None = None
                  ) -> tuple[Evidence, GateEvent]:
    """The note was served in ``session``."""
    after = replace(evidence, served=evidence.served + 1)
    return after, GateEvent(note=note, kind="served", state=state, evidence=after.counters(),
                            at=_now(at), session=session, user=user)


def record_outcome(note: str, state: NoteState, evidence: Evidence, *, session: str,
                   user: str, applied: bool, helped: bool, at: datetime | None = None
                   ) -> tuple[Evidence, GateEvent]:
    """What the judge (or an explicit reward) said of the note in ``session`` of ``user``.

    A note that helped was applied, whatever ``applied`` says."""
    applied = applied or helped
    after = replace(
        evidence,
        applied=evidence.applied + int(applied),
        helped=evidence.helped + int(helped),
        helped_users=evidence.helped_users | {user} if helped else evidence.helped_users,
    )
    detail = "helped" if helped else ("applied, did not help" if applied else "not applied")
    return after, GateEvent(note=note, kind="outcome", state=state, evidence=after.counters(),
                            at=_now(at), session=session, user=user, detail=detail)


def help_rate(evidence: Evidence) -> float:
    return evidence.helped / evidence.served if evidence.served else 0.0


def review(note: str, state: NoteState, evidence: Evidence, rules: GateRules, *,
           at: datetime | None = None) -> tuple[NoteState, GateEvent | None]:
    """The note's state given its evidence, and the event if it changed.

    Retirement is checked first: evidence against a note outweighs the people it helped.
    A retired note stays retired."""
    if state is NoteState.RETIRED:
        return state, None
    if (evidence.served >= rules.retire_min_served
            and help_rate(evidence) <= rules.retire_max_help_rate):
        detail = (f"helped {evidence.helped} of {evidence.served} servings "
                  f"(at most {rules.retire_max_help_rate:g} after {rules.retire_min_served})")
        return NoteState.RETIRED, GateEvent(
            note=note, kind="retired", state=NoteState.RETIRED, evidence=evidence.counters(),
            at=_now(at), detail=detail)
    if state is NoteState.CANDIDATE and evidence.helped_by_people >= rules.promote_after_people:
        detail = (f"helped {evidence.helped_by_people} different people "
                  f"(needs {rules.promote_after_people})")
        return NoteState.PROMOTED, GateEvent(
            note=note, kind="promoted", state=NoteState.PROMOTED, evidence=evidence.counters(),
            at=_now(at), detail=detail)
    return state, None
