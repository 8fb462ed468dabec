"""The judge: a reward for each ended session nobody rewarded.

An ended session with no reward is *pending*. A judging pass asks the ``judge`` role's
model (models/chat.py) for a reward in [-1, 1] and, per advice key served in the session,
whether the agent applied it and whether it helped; the answer is stored as one judge
reward event, in one commit. An explicit reward always wins over it at read time, even
one given later, and a session that got an explicit reward meanwhile is not judged (the
check runs inside the commit's compare-and-set).

No judge model configured: nothing is judged and nothing fails (only explicit rewards
count). The model down or answering garbage: that session gets nothing written and stays
pending for the next pass. A session whose answers were of the wrong shape on several passes
in a row is set aside (models/setaside.py): pending still, but not asked again until the
judge model changes. A session the endpoint refuses (HTTP 400: its transcript too long,
say) counts toward the same rule, unless the endpoint refuses every request
(`setaside.Asker`, the rule of every model pass). ``serve`` runs a pass every
``advice_judge_interval_seconds`` under a lease (one server at a time);
``ampup-memory advice judge`` runs one now.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

from pydantic import BaseModel, Field

from ampup_memory.advice.runs import (
    END,
    JUDGE,
    REWARD,
    STEP,
    reward_event,
    served_keys,
)
from ampup_memory.background import LifespanHook, TimerRecord, periodic
from ampup_memory.memory.events import EventRecord
from ampup_memory.memory.readindex import DEFAULT_LEASE, lease_holder
from ampup_memory.memory.scopes import Scope, parse_scope
from ampup_memory.memory.segments import Segments
from ampup_memory.memory.service import MemoryService
from ampup_memory.models.chat import (
    AnswerBool,
    AnswerNumber,
    ChatModel,
    ModelUnavailable,
    Role,
    chat_model,
)
from ampup_memory.models.setaside import AsideNews, Asker, Refused, SetAside, asked_key
from ampup_memory.settings import Settings

log = logging.getLogger("ampup_memory.advice")

JUDGE_LEASE = "advice-judge"
JUDGE_USER = "judge"
MAX_TRANSCRIPT = 20_000  # characters of a transcript the judge reads (its end, if longer)

SYSTEM = (
    "You judge how an AI agent's work session went. You get the task, the outcome the agent "
    "reported, its transcript, and the advice it was served (by key). Answer JSON only: "
    '{"reward": number from -1 (failed, or did harm) to 1 (fully done, well), '
    '"reason": one short sentence, "notes": {"<served key>": {"applied": true|false, '
    '"helped": true|false}}}. "applied": the transcript shows the agent followed that '
    'advice; "helped": following it moved the work forward. Judge only what the transcript '
    "shows."
)


class NoteVerdict(BaseModel):
    applied: AnswerBool
    helped: AnswerBool


class JudgeAnswer(BaseModel):
    reward: AnswerNumber = Field(ge=-1.0, le=1.0, allow_inf_nan=False)
    reason: str = Field(default="", max_length=2000)
    notes: dict[str, NoteVerdict] = Field(default_factory=dict)


class _RewardedMeanwhile(Exception):
    """Another reward of the session landed before the judge's commit."""


def prompt(events: list[EventRecord]) -> str:
    start = events[0]
    end = next(e for e in events if e.kind == END)
    transcript = str(end.data.get("transcript") or "")
    if len(transcript) > MAX_TRANSCRIPT:
        transcript = "…" + transcript[-MAX_TRANSCRIPT:]
    served = [e.data.get("served", {}) for e in events if e.kind == STEP]
    return json.dumps({"task": start.data.get("task", ""), "outcome": end.data.get("outcome"),
                       "served_advice": served, "transcript": transcript},
                      ensure_ascii=False, indent=1)


def pending_sessions(svc: MemoryService, scope: Scope,
                     among: Sequence[str] | None = None) -> list[str]:
    """Ended sessions of the scope (any branch) with no reward at all (of those ``among``),
    oldest first."""
    svc.sync.scope(scope)
    found = svc.index.events(str(scope), None, (END, REWARD), among)
    rewarded = {e.subject for e in found if e.kind == REWARD}
    return [e.subject for e in found if e.kind == END and e.subject not in rewarded]


def judge_session(svc: MemoryService, model: ChatModel, session: str,
                  asker: Asker) -> bool:
    """Judge one pending session, asking through ``asker`` (the pass's); True when a judge
    reward was written. Raises ModelUnavailable (nothing written) when the model gave no
    usable answer, `SetAside` when the session is (or now becomes) set aside, `Refused`
    when the endpoint refused its request."""
    events = svc.index.events_of([session])
    if not events or not any(e.kind == END for e in events):
        return False
    if any(e.kind == REWARD for e in events):
        return False
    asked = prompt(events)
    answer = asker.ask(("judge", events[0].scope, session), session,
                       asked_key(model.name, SYSTEM, asked),
                       lambda: model.ask(SYSTEM, asked, JudgeAnswer),
                       f"judge: session {session}, pending still,")
    keys = served_keys(events)
    notes = {k: answer.notes[k].model_dump() for k in keys if k in answer.notes}
    first = events[0]
    event = reward_event(session, JUDGE_USER, answer.reward, answer.reason, JUDGE,
                         first.branch, notes=notes, extra={"model": model.name})

    def unrewarded(segs: Segments) -> None:
        if svc.index.events(first.scope, segs, (REWARD,), [session]):
            raise _RewardedMeanwhile()

    try:
        svc.write_events(f"judge:{model.name}", parse_scope(first.scope), first.branch,
                         "judge session", [event], recheck=unrewarded)
    except _RewardedMeanwhile:
        return False
    return True


def judge_pass(svc: MemoryService, model: ChatModel | None, scope: Scope | None = None,
               on_total: Callable[[int], None] | None = None,
               on_one: Callable[[], None] | None = None) -> dict[str, Any]:
    """Judge every pending session (of one scope, or of all). A session the model could
    not judge stays pending (``failed``); the pass goes on with the next, unless the
    endpoint refuses every request (`setaside.Asker`). ``set_aside`` counts the pending
    sessions not asked (again) for their unusable answers or refused requests."""
    if model is None:
        return {"judged": 0, "failed": 0, "skipped": 0, "set_aside": 0, "model": None}
    svc.sync.ledger_table()
    scopes = [scope] if scope is not None else svc.tables.scopes()
    work = [(s, ses) for s in scopes for ses in pending_sessions(svc, s)]
    if on_total is not None:
        on_total(len(work))
    judged = failed = skipped = set_aside = 0
    asker = Asker(svc.index, log)
    for _, session in work:
        try:
            if judge_session(svc, model, session, asker):
                judged += 1
            else:
                skipped += 1
        except SetAside:
            set_aside += 1
        except Refused as exc:
            failed += 1
            log.warning("judge: session %s refused, stays pending: %s", session, exc.message)
        except ModelUnavailable as exc:
            failed += 1
            log.warning("judge: session %s stays pending: %s", session, exc.message)
        if on_one is not None:
            on_one()
        if asker.stopped:
            break  # the endpoint refuses every request: the rest stay pending
    aside = len(asker.settle(end=True))
    failed, set_aside = failed - aside, set_aside + aside
    return {"judged": judged, "failed": failed, "skipped": skipped, "set_aside": set_aside,
            "model": model.name}


def judge_if_free(svc: MemoryService, model: ChatModel | None, holder: str,
                  lease: timedelta = DEFAULT_LEASE) -> dict[str, Any] | None:
    """The timer's pass: only one server at a time runs it (a lease in the index,
    renewed while it runs)."""
    if model is None:
        return None
    with svc.index.hold_lease(JUDGE_LEASE, holder, lease) as held:
        return judge_pass(svc, model) if held else None


def judge_timer(svc: MemoryService, settings: Settings,
                records: list[TimerRecord] | None = None) -> LifespanHook:
    """``serve``'s judging timer (a no-op pass when no judge model is configured)."""
    holder = lease_holder()
    model = chat_model(settings, Role.JUDGE)
    aside = AsideNews()

    def one_pass() -> str | None:
        from ampup_memory.advice.aside import count  # noqa: PLC0415 — it reads this module

        report = judge_if_free(svc, model, holder, timedelta(seconds=settings.lease_seconds))
        if report is None:
            return None
        listed = count(svc, "judge", None if model is None else model.name)  # GET /set-aside's
        news = aside.changed(listed)
        if not (report["judged"] or report["failed"] or news):
            return None
        return f"{report}; {listed} session(s) set aside now"

    return periodic(one_pass, settings.advice_judge_interval_seconds, "advice judge pass",
                    log, records=records)
