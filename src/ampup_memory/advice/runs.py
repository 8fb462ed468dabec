"""Runs and their rewards, stored as append-only events (``memory/events.py``).

A run is one finished piece of agent work: the task, optionally its trace and outcome, and
the advice key it followed. It is written once (``run`` event) and rewarded later, any
number of times (``reward`` events): a newer explicit reward replaces an older one at read
time, and every reward stays in the history. A session (sessions.py) is rewarded the same
way, explicitly or by the judge (judge.py); an explicit reward always wins over the judge's,
whichever came first.

Everything here reads the read index (``mem_events``), never Iceberg, and decides who may
read a run or session with the one visibility rule (``memory.acl.may_read``) on the ACL its
first event carries (default: the recording user only). An id the caller may not read
answers exactly like an unknown one (404).

``rewarded_tasks`` is the interface the learning modules (situations, notes, gate) consume:
plain `RewardedTask` records.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from ulid import ULID

from ampup_memory.blank import NOT_BLANK_PATTERN, not_blank
from ampup_memory.errors import Conflict, NotFound
from ampup_memory.memory.acl import AclEntry, Principal, may_read, normalize_acl, own_acl
from ampup_memory.memory.events import EventRecord
from ampup_memory.memory.ledger import ULID_TEXT
from ampup_memory.memory.scopes import BranchText, Scope, ScopeText, parse_branch, parse_scope
from ampup_memory.memory.segments import Segments
from ampup_memory.memory.service import MemoryService
from ampup_memory.ruled import published, ruled
from ampup_memory.timefmt import utc_text

RUN_PREFIX, SESSION_PREFIX = "run_", "ses_"
RUN_ID_PATTERN = f"^{RUN_PREFIX}{ULID_TEXT}$"
# A run id as a request names it (GET /runs' `before`): refused in words, not by regex.
RunId = Annotated[str, ruled(RUN_ID_PATTERN, "run_id_invalid", "run id",
                             "run_ and 26 ULID characters, as POST /runs answers it"),
                  published(RUN_ID_PATTERN)]
SESSION_ID_PATTERN = f"^{SESSION_PREFIX}{ULID_TEXT}$"
# A session id as GET /sessions' `before` names it, refused in words as RunId is.
SessionId = Annotated[str, ruled(SESSION_ID_PATTERN, "session_id_invalid", "session id",
                                 "ses_ and 26 ULID characters, as POST /sessions/start "
                                 "answers it"), published(SESSION_ID_PATTERN)]
# What POST /runs/reward rewards: a run or a session. A malformed one was looked up and
# answered 404 "No such run." (a trailing space, a newline or lower case included).
RUN_OR_SESSION_PATTERN = f"^(?:{RUN_PREFIX}|{SESSION_PREFIX}){ULID_TEXT}$"
RunOrSessionId = Annotated[str, ruled(
    RUN_OR_SESSION_PATTERN, "run_id_invalid", "run or session id",
    "run_ or ses_ and 26 ULID characters, as POST /runs or POST /sessions/start answers it"),
    published(RUN_OR_SESSION_PATTERN)]
MAX_PAGE = 1000  # GET /runs and GET /sessions: the largest page
# Event kinds: a run and its rewards; a session's start, served advice steps and end.
RUN, REWARD, START, STEP, END = "run", "reward", "start", "step", "end"
EXPLICIT, JUDGE = "explicit", "judge"  # who gave a reward
MAX_TEXT = 20_000
MAX_TRACE = 200_000

RewardValue = Annotated[float, Field(ge=-1.0, le=1.0, allow_inf_nan=False,
                                     description="-1 (failed badly) .. 1 (went well).")]


def new_id(prefix: str) -> str:
    return f"{prefix}{ULID()}"


# A task is what the loop clusters runs by and matches advice to: white space alone names
# none, refused as an entity or a predicate is (`string_blank`, the pattern published).
TaskText = Annotated[str, Field(min_length=1, max_length=MAX_TEXT,
                                json_schema_extra={"pattern": NOT_BLANK_PATTERN}),
                     AfterValidator(not_blank)]


# A retry's key: any text but white space alone, which would name every blank retry alike.
IdempotencyKey = Annotated[str, Field(
    min_length=1, max_length=200, json_schema_extra={"pattern": NOT_BLANK_PATTERN},
    description="Any text naming this request, e.g. a UUID the client made: a retry with "
    "the same key (same user, scope and branch) answers what the first one wrote instead "
    "of writing it twice."), AfterValidator(not_blank)]


def utcnow() -> datetime:
    return datetime.now(UTC)


class RecordRun(BaseModel):
    model_config = ConfigDict(extra="forbid")

    scope: ScopeText
    task: TaskText = Field(description="What the work was.")
    trace: str | None = Field(default=None, max_length=MAX_TRACE,
                              description="What was done (steps, tool calls), as text.")
    outcome: str | None = Field(default=None, max_length=MAX_TEXT)
    advice_key: str | None = Field(default=None, min_length=1, max_length=200,
                                   description="The key of the advice the run followed.")
    acl: list[AclEntry] | None = Field(default=None, min_length=1, max_length=64,
                                       description="Who may read the run (default: you).")
    branch: BranchText | None = None
    idempotency_key: IdempotencyKey | None = None


class RewardRun(BaseModel):
    model_config = ConfigDict(extra="forbid")

    run: RunOrSessionId = Field(description="A run id (run_…) or a session id (ses_…).")
    reward: RewardValue
    reason: str = Field(min_length=1, max_length=MAX_TEXT)


@dataclass(frozen=True)
class Reward:
    value: float
    by: str  # explicit | judge
    user: str
    reason: str
    at: datetime
    notes: dict[str, dict[str, bool]] = field(default_factory=dict)  # judge: per note key

    def wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"value": self.value, "by": self.by, "user": self.user,
                               "reason": self.reason, "at": utc_text(self.at)}
        if self.by == JUDGE:
            out["notes"] = self.notes
        return out


def reward_of(event: EventRecord) -> Reward:
    assert event.reward is not None
    return Reward(value=event.reward, by=str(event.data.get("by", EXPLICIT)), user=event.user,
                  reason=str(event.data.get("reason", "")), at=event.at,
                  notes=dict(event.data.get("notes") or {}))


def current_reward(events: list[EventRecord]) -> Reward | None:
    """Newest wins, and an explicit reward wins over any judge's (events in commit order)."""
    rewards = [reward_of(e) for e in events if e.kind == REWARD and e.reward is not None]
    explicit = [r for r in rewards if r.by == EXPLICIT]
    chosen = explicit or rewards
    return chosen[-1] if chosen else None


@dataclass(frozen=True)
class RewardedTask:
    """One rewarded run or session, as the learning modules read it.

    - ``id``: ``run_…`` or ``ses_…``; ``kind``: ``"run"`` or ``"session"``.
    - ``task``: what the work was (a session started without a task: ``""``).
    - ``reward``: the current reward in [-1, 1] (explicit wins over the judge; among
      explicit rewards the newest).
    - ``user``: who recorded the run or started the session (gate: distinct users).
    - ``trace``: a run's trace, a session's transcript (``""`` when none).
    - ``outcome``: the run's or session's outcome (``""`` when none).
    - ``advice_key``: the advice the run followed; for a session, the key of the first
      advice served in it (None: none).
    - ``at``: when the run was recorded / the session ended.
    - ``served``: a session's served advice keys in order (a run: its ``advice_key``).
    - ``verdicts``: the judge's word per served note key ``{"applied": bool,
      "helped": bool}`` (empty when an explicit reward decided or no judge ran).
    - ``reward_by``: ``"explicit"`` or ``"judge"``.
    - ``acl``: who may read it (evidence lists only what the caller may read).
    """

    id: str
    kind: str
    task: str
    reward: float
    user: str
    trace: str
    outcome: str
    advice_key: str | None
    at: datetime
    served: tuple[str, ...] = ()
    verdicts: dict[str, dict[str, bool]] = field(default_factory=dict)
    reward_by: str = EXPLICIT
    acl: tuple[str, ...] = ()


# -- reading ------------------------------------------------------------------------------------
def subject_events(svc: MemoryService, principal: Principal, subject: str,
                   prefix: str | None = None) -> list[EventRecord]:
    """Every event of a run or session the caller may read, first event first; NotFound
    for an unknown id, one of another kind, or one the caller may not read (one answer)."""
    if prefix is not None and not subject.startswith(prefix):
        raise _not_found(prefix)
    svc.sync.everywhere()  # what other servers committed (one catalog query when nothing)
    events = svc.index.events_of([subject])
    first = events[0] if events else None
    if first is None or first.kind not in (RUN, START) or not may_read(principal, first.acl):
        raise _not_found(prefix or subject[:4])
    # The id names no scope, so no view checked it: a run of an expired workspace (not yet
    # dropped by gc) must read as gone, as its scope does. Asked only once the caller may
    # read it, so anyone else still gets the answer of an unknown id.
    svc.workspaces.require_live(parse_scope(first.scope))
    return events


def _not_found(prefix: str) -> NotFound:
    what = "session" if prefix == SESSION_PREFIX else "run"
    return NotFound(f"No such {what}.")


def run_wire(events: list[EventRecord], *, history: bool) -> dict[str, Any]:
    run = events[0]
    reward = current_reward(events)
    out: dict[str, Any] = {
        "id": run.subject, "scope": run.scope, "branch": run.branch, "user": run.user,
        "task": run.data.get("task", ""), "outcome": run.data.get("outcome"),
        "advice_key": run.data.get("advice_key"), "acl": list(run.acl),
        "at": utc_text(run.at), "commit": run.commit_id,
        "reward": None if reward is None else reward.wire(),
    }
    if history:
        out["trace"] = run.data.get("trace")
        out["rewards"] = [reward_of(e).wire() for e in events
                          if e.kind == REWARD and e.reward is not None]
    return out


def get_run(svc: MemoryService, user: str, run_id: str) -> dict[str, Any]:
    events = subject_events(svc, svc.principal(user), run_id, RUN_PREFIX)
    return run_wire(events, history=True)


def list_runs(svc: MemoryService, user: str, scope_text: object, branch_text: object = None,
              limit: int = 50, before: str | None = None) -> dict[str, Any]:
    """The runs of a scope the caller may read, newest first, each with its current reward."""
    page, more = readable_page(svc, user, scope_text, branch_text, RUN, (REWARD,), limit,
                               before)
    return {"runs": [run_wire(evs, history=False) for evs in page],
            "next_before": page[-1][0].subject if more else None}


def readable_page(svc: MemoryService, user: str, scope_text: object, branch_text: object,
                  kind: str, later: tuple[str, ...], limit: int, before: str | None,
                  ) -> tuple[list[list[EventRecord]], bool]:
    """One page of the runs (``kind`` RUN) or sessions (START) of a scope the caller may
    read, newest first: each subject's events of the first kind and of ``later`` kinds, in
    commit order; and whether a readable one follows the page.

    Streams first events newest first from the read index and stops at a full page (the
    one visibility rule decides each, so neither the page, nor "more", nor the cursor made
    of its last id counts anything hidden), then reads only that page's later events."""
    view = svc.view(scope_text, branch_text)
    principal = svc.principal(user)
    scope = str(view.scope)
    found = svc.index.newest_subjects(scope, view.segments, kind, before,
                                      lambda e: may_read(principal, e.acl), limit + 1)
    page = found[:limit]
    rest = _grouped_by_subject(svc.index.events(
        scope, view.segments, later, [e.subject for e in page])) if page else {}
    return [[e, *rest.get(e.subject, [])] for e in page], len(found) > limit


def _grouped_by_subject(events: list[EventRecord]) -> dict[str, list[EventRecord]]:
    out: dict[str, list[EventRecord]] = defaultdict(list)
    for e in events:
        out[e.subject].append(e)
    return out


def _grouped(events: list[EventRecord]) -> dict[str, list[EventRecord]]:
    """Events by subject, each subject's in commit order, its first event first."""
    return {s: evs for s, evs in _grouped_by_subject(events).items()
            if evs[0].kind in (RUN, START)}


# -- writing ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Recorded:
    """What POST /runs (and /sessions/start) answers: the run or session, its commit, and
    whether this request wrote it."""
    subject: str  # the run's or session's id
    commit: str
    created: bool

    def wire(self) -> dict[str, Any]:
        return {"id": self.subject, "commit": self.commit, "created": self.created}


def record_run(svc: MemoryService, user: str, req: RecordRun) -> Recorded:
    scope = parse_scope(req.scope)
    branch = parse_branch(req.branch)
    acl = normalize_acl(req.acl, ["acl"]) if req.acl is not None else tuple(own_acl(user))
    run_id = new_id(RUN_PREFIX)
    data = {"task": req.task, "trace": req.trace, "outcome": req.outcome,
            "advice_key": req.advice_key}
    event = EventRecord(id=str(ULID()), subject=run_id, kind=RUN, user=user, at=utcnow(),
                        acl=acl, data=data, branch=branch)
    return write_once(svc, user, scope, branch, "record run", event, req.idempotency_key)


def write_once(svc: MemoryService, user: str, scope: Scope, branch: str, message: str,
               event: EventRecord, key: str | None) -> Recorded:
    """Write the first event of a run or session as one commit. With ``key``, a retry
    writes nothing and answers what the first one wrote: the event's id is derived from
    (user, kind, key), and the commit's recheck (inside its compare-and-set, so retries
    racing on two servers write once) looks that id up; the key already used for another
    body is a 409."""
    if key is None:
        return Recorded(event.subject, svc.write_events(user, scope, branch, message,
                                                        [event]).commit_id, created=True)
    event = replace(event, id="idem_" + hashlib.sha256(
        f"{user}\n{event.kind}\n{key}".encode()).hexdigest()[:32])

    def check(segs: Segments) -> None:
        found = svc.index.events(str(scope), segs, (event.kind,), ids=[event.id])
        if not found:
            return
        first = found[0]
        if first.data != event.data or tuple(first.acl) != tuple(event.acl):
            what = "run" if event.kind == RUN else "session"
            raise Conflict(f"This idempotency_key already started {what} {first.subject} "
                           "with another body: a retry sends the same request; a new "
                           f"{what} takes a new key.", code="IDEMPOTENCY_KEY_REUSED")
        raise _Written(first)

    try:
        entry = svc.write_events(user, scope, branch, message, [event], recheck=check)
    except _Written as earlier:
        return Recorded(earlier.event.subject, earlier.event.commit_id, created=False)
    return Recorded(event.subject, entry.commit_id, created=True)


class _Written(Exception):  # noqa: N818 -- not an error: what a retry answers
    def __init__(self, event: EventRecord) -> None:
        super().__init__(event.subject)
        self.event = event


def reward_event(subject: str, user: str, value: float, reason: str, by: str,
                 branch: str, notes: dict[str, dict[str, bool]] | None = None,
                 extra: dict[str, Any] | None = None) -> EventRecord:
    data: dict[str, Any] = {"by": by, "reason": reason, **(extra or {})}
    if notes is not None:
        data["notes"] = notes
    return EventRecord(id=str(ULID()), subject=subject, kind=REWARD, user=user, at=utcnow(),
                       reward=float(value), data=data, branch=branch)


def reward(svc: MemoryService, user: str, req: RewardRun) -> dict[str, Any]:
    """An explicit reward of a run or a session (replaces an earlier one at read time)."""
    events = subject_events(svc, svc.principal(user), req.run)
    first = events[0]
    if first.kind == START and not any(e.kind == END for e in events):
        # A session's reward judges how it went: an open session has no outcome yet, and
        # a reward on it would put it among the rewarded tasks before it has a transcript.
        raise Conflict(f"Session {req.run} is still open; end it first (end_session, or "
                       "POST /sessions/end, takes the reward too).", code="SESSION_OPEN")
    event = reward_event(first.subject, user, req.reward, req.reason, EXPLICIT, first.branch)
    entry = svc.write_events(user, parse_scope(first.scope), first.branch,
                             f"reward {first.kind}", [event])
    return {"id": first.subject, "reward": reward_of(event).wire(), "commit": entry.commit_id}


# -- what the learning modules read ---------------------------------------------------------------
def rewarded_tasks(svc: MemoryService, scope: Scope | str, branch: str | None = None,
                   principal: Principal | None = None) -> list[RewardedTask]:
    """Every rewarded run and session of the scope's branch (default main), oldest first.

    With ``principal`` only those it may read (the one visibility rule); without, all of
    them (the learning passes run for the scope, and filter evidence per caller later)."""
    view = svc.view(str(scope), branch)
    out: list[RewardedTask] = []
    for evs in _grouped(svc.index.events(str(view.scope), view.segments)).values():
        first = evs[0]
        if principal is not None and not may_read(principal, first.acl):
            continue
        task = rewarded_task(evs)
        if task is not None:
            out.append(task)
    out.sort(key=lambda t: (t.at, t.id))
    return out


def served_keys(events: list[EventRecord]) -> tuple[str, ...]:
    """The advice keys served in a session, in the order first served."""
    keys: list[str] = []
    for e in events:
        key = e.data.get("served", {}).get("key") if e.kind == STEP else None
        if key and str(key) not in keys:
            keys.append(str(key))
    return tuple(keys)


def rewarded_task(evs: list[EventRecord]) -> RewardedTask | None:
    first = evs[0]
    current = current_reward(evs)
    if current is None:
        return None
    if first.kind == RUN:
        key = first.data.get("advice_key")
        return RewardedTask(
            id=first.subject, kind="run", task=str(first.data.get("task") or ""),
            reward=current.value, user=first.user, trace=str(first.data.get("trace") or ""),
            outcome=str(first.data.get("outcome") or ""), advice_key=key, at=first.at,
            served=(key,) if key else (), verdicts=current.notes, reward_by=current.by,
            acl=first.acl)
    end = next((e for e in evs if e.kind == END), None)
    served = served_keys(evs)
    return RewardedTask(
        id=first.subject, kind="session", task=str(first.data.get("task") or ""),
        reward=current.value, user=first.user,
        trace=str(end.data.get("transcript") or "") if end else "",
        outcome=str(end.data.get("outcome") or "") if end else "",
        advice_key=served[0] if served else None, at=end.at if end else current.at,
        served=served, verdicts=current.notes, reward_by=current.by, acl=first.acl)
