"""Sessions: one agent's work on a task, with the advice served along the way.

A session is the fold of its events (runs.py stores them): ``start`` (scope, task, ACL),
one ``step`` per advice served (``record_advice_step``), one ``end`` (transcript, outcome)
and any number of rewards — explicit (at the end, or later with ``POST /runs/reward``) or
the judge's (judge.py). Ending an ended session is a 409, decided inside the commit's
compare-and-set so two servers cannot both end one session.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from ulid import ULID

from ampup_memory.advice.runs import (
    END,
    EXPLICIT,
    MAX_TEXT,
    MAX_TRACE,
    REWARD,
    SESSION_PREFIX,
    START,
    STEP,
    IdempotencyKey,
    Recorded,
    RewardValue,
    TaskText,
    current_reward,
    new_id,
    readable_page,
    reward_event,
    reward_of,
    subject_events,
    utcnow,
    write_once,
)
from ampup_memory.errors import Conflict
from ampup_memory.memory.acl import AclEntry, normalize_acl, own_acl
from ampup_memory.memory.events import EventRecord
from ampup_memory.memory.scopes import BranchText, ScopeText, parse_branch, parse_scope
from ampup_memory.memory.segments import Segments
from ampup_memory.memory.service import MemoryService
from ampup_memory.timefmt import utc_text

OPEN, ENDED = "open", "ended"
MAX_STEP_BYTES = 64_000
MAX_SESSION_ID = 64  # a session id as a request names it (ses_ and a ULID is 30)


class StartSession(BaseModel):
    model_config = ConfigDict(extra="forbid")

    scope: ScopeText
    task: TaskText | None = None
    acl: list[AclEntry] | None = Field(default=None, min_length=1, max_length=64,
                                       description="Who may read the session (default: you).")
    branch: BranchText | None = None
    idempotency_key: IdempotencyKey | None = None


class EndSession(BaseModel):
    model_config = ConfigDict(extra="forbid")

    session: str = Field(min_length=1, max_length=MAX_SESSION_ID)
    transcript: str = Field(max_length=MAX_TRACE)
    outcome: str = Field(max_length=MAX_TEXT)
    reward: RewardValue | None = None
    reason: str | None = Field(default=None, max_length=MAX_TEXT,
                               description="Why this reward (default: the outcome).")


def start_session(svc: MemoryService, user: str, req: StartSession) -> Recorded:
    scope = parse_scope(req.scope)
    branch = parse_branch(req.branch)
    acl = normalize_acl(req.acl, ["acl"]) if req.acl is not None else tuple(own_acl(user))
    event = EventRecord(id=str(ULID()), subject=new_id(SESSION_PREFIX), kind=START, user=user,
                        at=utcnow(), acl=acl, data={"task": req.task or ""}, branch=branch)
    return write_once(svc, user, scope, branch, "start session", event, req.idempotency_key)


def _refuse_if_ended(svc: MemoryService, scope: str, session: str, what: str
                     ) -> Callable[[Segments], None]:
    """The recheck of a write to an open session: refused once it has ended."""
    def check(segs: Segments) -> None:
        if svc.index.events(scope, segs, (END,), [session]):
            raise Conflict(f"Session {session} has ended; {what}.",
                           code="SESSION_ENDED")
    return check


NO_ADVICE = "no advice is recorded on it"


def open_session_events(svc: MemoryService, user: str, session: str) -> list[EventRecord]:
    """The events of an open session the caller may read, oldest first: NotFound for an
    unknown or unreadable one, 409 once it has ended. POST /advice asks this before it
    knows whether anything will be served, so an ended session is refused either way."""
    events = subject_events(svc, svc.principal(user), session, SESSION_PREFIX)
    if any(e.kind == END for e in events):
        raise Conflict(f"Session {session} has ended; {NO_ADVICE}.", code="SESSION_ENDED")
    return events


def record_advice_step(svc: MemoryService, user: str, session: str,
                       served: dict[str, Any]) -> dict[str, Any]:
    """Append one served-advice step to an open session the caller may read.

    ``served`` is what was served (for a note: at least ``{"key": ...}``); POST /advice
    calls this. NotFound for an unknown or unreadable session, 409 once it has ended."""
    first = open_session_events(svc, user, session)[0]
    event = EventRecord(id=str(ULID()), subject=session, kind=STEP, user=user, at=utcnow(),
                        data={"served": served}, branch=first.branch)
    entry = svc.write_events(user, parse_scope(first.scope), first.branch, "advice step",
                             [event], recheck=_refuse_if_ended(
                                 svc, first.scope, session, NO_ADVICE))
    return {"session": session, "step": event.id, "commit": entry.commit_id}


def end_session(svc: MemoryService, user: str, req: EndSession) -> dict[str, Any]:
    """End an open session (with its reward, if given). A retry of the request that ended
    it (same caller, transcript, outcome, reward and reason) answers the session again,
    so a client whose answer was lost may send it again; any other end of an ended
    session is 409 ``SESSION_ENDED``."""
    events = subject_events(svc, svc.principal(user), req.session, SESSION_PREFIX)
    first = events[0]
    if any(e.kind == END for e in events):
        return _ended_by(events, user, req)
    end = EventRecord(id=str(ULID()), subject=req.session, kind=END, user=user, at=utcnow(),
                      data=_end_data(req), branch=first.branch)
    written = [end]
    if req.reward is not None:
        written.append(reward_event(req.session, user, req.reward, req.reason or req.outcome,
                                    EXPLICIT, first.branch))
    # The answer is the session as the commit found it: an advice step that landed after
    # the read above (another request, another server) is in it, as it is in the session.
    seen: list[list[EventRecord]] = []

    def check(segs: Segments) -> None:
        found = svc.index.events(first.scope, segs, None, [req.session])
        if any(e.kind == END for e in found):
            raise _Ended(found)  # a racing end: the same request, or another
        seen.append(found)

    try:
        entry = svc.write_events(user, parse_scope(first.scope), first.branch, "end session",
                                 written, recheck=check)
    except _Ended as ended:
        return _ended_by(ended.events, user, req)
    found = seen[-1] if seen and seen[-1] else events
    return session_wire([*found, *written]) | {"commit": entry.commit_id}


def _end_data(req: EndSession) -> dict[str, Any]:
    return {"transcript": req.transcript, "outcome": req.outcome}


def _ended_by(events: list[EventRecord], user: str, req: EndSession) -> dict[str, Any]:
    """The answer to ``req`` for a session that has ended: the session and the commit that
    ended it, when ``req`` is the request that did (the end and, in the same commit, the
    explicit reward it carried); else 409 ``SESSION_ENDED``."""
    end = next(e for e in events if e.kind == END)
    rewards = [e for e in events if e.kind == REWARD and e.commit_id == end.commit_id]
    asked = None if req.reward is None else (float(req.reward), req.reason or req.outcome)
    given = next(((e.reward, e.data.get("reason")) for e in rewards), None)
    if end.user != user or end.data != _end_data(req) or asked != given:
        raise Conflict(f"Session {req.session} has already ended.", code="SESSION_ENDED")
    return session_wire(events) | {"commit": end.commit_id}


class _Ended(Exception):  # noqa: N818 -- not an error: the session another end ended
    def __init__(self, events: list[EventRecord]) -> None:
        super().__init__(events[0].subject if events else "")
        self.events = events


def get_session(svc: MemoryService, user: str, session: str) -> dict[str, Any]:
    return session_wire(subject_events(svc, svc.principal(user), session, SESSION_PREFIX))


def list_sessions(svc: MemoryService, user: str, scope_text: object,
                  branch_text: object = None, limit: int = 50,
                  before: str | None = None) -> dict[str, Any]:
    """The sessions of a scope the caller may read, newest first: each as
    ``GET /sessions/{id}`` answers it less ``transcript`` and ``rewards`` (the history; the
    current ``reward`` with the judge's per-note verdicts stays), as ``GET /runs`` leaves
    out a run's trace and history."""
    page, more = readable_page(svc, user, scope_text, branch_text, START,
                               (STEP, END, REWARD), limit, before)
    return {"sessions": [session_wire(evs, history=False) for evs in page],
            "next_before": page[-1][0].subject if more else None}


def session_wire(events: list[EventRecord], *, history: bool = True) -> dict[str, Any]:
    first = events[0]
    end = next((e for e in events if e.kind == END), None)
    reward = current_reward(events)
    if end is None:
        judging = None
    elif reward is None:
        judging = "pending"
    else:
        judging = "judged" if reward.by != EXPLICIT else "not needed"
    out: dict[str, Any] = {
        "id": first.subject, "scope": first.scope, "branch": first.branch,
        "user": first.user, "task": first.data.get("task", ""), "acl": list(first.acl),
        "started_at": utc_text(first.at), "state": ENDED if end else OPEN,
        "steps": [{"at": utc_text(e.at), "user": e.user, "served": e.data.get("served", {})}
                  for e in events if e.kind == STEP],
        "transcript": end.data.get("transcript") if end else None,
        "outcome": end.data.get("outcome") if end else None,
        "ended_at": utc_text(end.at) if end else None,
        "reward": None if reward is None else reward.wire(),
        "judging": judging,
    }
    if history:
        out["rewards"] = [reward_of(e).wire() for e in events
                          if e.kind == REWARD and e.reward is not None]
    else:
        del out["transcript"]
    return out
