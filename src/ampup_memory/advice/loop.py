"""The learning loop wired to storage: situation maps, notes and their evidence as events.

Everything the loop learns is an append-only event of the scope's ``events`` table on
``main`` (``memory/events.py``), committed through the ledger like runs and sessions:

- ``situations`` (subject ``situations``): one whole `SituationMap` per re-clustering — the
  map is versioned by its commits, and each map keeps the ids of the one before it;
- ``note`` (subject the note key): a note the learning model wrote, as a candidate;
- ``gate`` (subject the note key): the note's evidence recomputed from the rewarded runs
  and sessions that served it, with the `GateEvent`s that changed it (outcomes, promotion,
  retirement). A note's state is the fold of its events.

Evidence is a function of the sessions, not a running counter: each learn pass recomputes
every live note's outcome per (note, session) from the session's *current* reward (an
explicit reward replaces the judge's), so nothing is counted twice and a later explicit
reward corrects an earlier judge verdict. Only a changed outcome writes an event.

``POST /advice`` reads a per-process cache of the scope's map and notes, keyed by the
newest commit holding such events (one index query), so serving never re-reads the
rewarded tasks.

Passes may run at once on one home or catalog: a command beside ``serve``'s timer, or two
servers whose lease ran out under a paused holder. Each commit of a pass is checked inside
the ledger's compare-and-set against what it was computed from (`_unmoved`): when another
pass committed the same subject first, the pass reads again and computes again, so nothing
is recorded twice and no newer result is overwritten with an older one.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta
from functools import partial
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field
from ulid import ULID

from ampup_memory.advice import gate
from ampup_memory.advice import notes as note_model
from ampup_memory.advice.aip import ProcedureSet, Skill, procedure_for
from ampup_memory.advice.gate import Evidence, GateRules, NoteState
from ampup_memory.advice.notes import Note, eligible, learn_note
from ampup_memory.advice.runs import (
    RewardedTask,
    TaskText,
    rewarded_tasks,
    utcnow,
)
from ampup_memory.advice.sessions import (
    MAX_SESSION_ID,
    open_session_events,
    record_advice_step,
)
from ampup_memory.advice.situations import SituationMap, build_map, members_of, situation_for
from ampup_memory.background import LifespanHook, TimerRecord, periodic
from ampup_memory.caches import Kept
from ampup_memory.errors import NotFound
from ampup_memory.memory.acl import Principal, may_read
from ampup_memory.memory.events import EventRecord
from ampup_memory.memory.readindex import lease_holder
from ampup_memory.memory.scopes import MAIN, Scope, ScopeText
from ampup_memory.memory.segments import Segments
from ampup_memory.memory.service import MemoryService
from ampup_memory.models.chat import ChatModel, ModelUnavailable, Role, chat_model
from ampup_memory.models.setaside import AsideNews, Asker, Refused, SetAside, asked_key
from ampup_memory.search.embed import Embedder
from ampup_memory.settings import Settings

log = logging.getLogger("ampup_memory.advice")

MAP, NOTE, GATE = "situations", "note", "gate"
PROC_SOURCES, PROCEDURES = "procedure_sources", "procedures"  # advice/procedures.py
LEARNING_KINDS = (MAP, NOTE, GATE, PROC_SOURCES, PROCEDURES)
MAP_SUBJECT = "situations"
LEARNER = "learner"
CLUSTER_LEASE, LEARN_LEASE = "advice-cluster", "advice-learn"
STATES_KEPT = 256  # scopes whose learned state a process keeps (the most recently asked)
ATTEMPTS = 5  # reads of one commit's inputs while other passes commit the same subject first
R = TypeVar("R")


# -- state: the fold of a scope's learning events ------------------------------------------------
@dataclass
class LearnedState:
    smap: SituationMap | None = None
    map_commit: str | None = None
    versions: int = 0
    notes: dict[str, Note] = field(default_factory=dict)  # in creation order
    history: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    outcomes: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    retired_at: dict[str, str] = field(default_factory=dict)
    documents: tuple[str, ...] = ()  # the chosen document keys (PUT /procedures/sources)
    procedures: ProcedureSet | None = None  # the latest compilation
    procedures_commit: str | None = None
    marks: dict[str, int] = field(default_factory=dict)  # subject: its newest event's seq

    def notes_of(self, situation: str) -> list[Note]:
        return [n for n in self.notes.values() if n.situation == situation]


def fold(events: Sequence[EventRecord]) -> LearnedState:
    state = LearnedState()
    for e in events:
        state.marks[e.subject] = max(e.seq, state.marks.get(e.subject, 0))
        if e.kind == MAP:
            state.smap = SituationMap.from_json(str(e.data["map"]))
            state.map_commit = e.commit_id
            state.versions += 1
        elif e.kind == NOTE:
            note = Note.from_dict(e.data["note"])
            state.notes[note.key] = note
            state.history[note.key] = [{"kind": "created", "state": note.state.value,
                                        "evidence": note.evidence.counters(),
                                        "at": note.created_at, "detail": note.model}]
            state.outcomes[note.key] = {}
        elif e.kind == GATE and e.subject in state.notes:
            note = state.notes[e.subject]
            new_state = NoteState(e.data["state"])
            state.notes[e.subject] = replace(
                note, state=new_state, evidence=Evidence.from_dict(e.data["evidence"]))
            state.outcomes[e.subject] = dict(e.data["outcomes"])
            state.history[e.subject].extend(e.data["events"])
            if new_state is NoteState.RETIRED and note.state is not NoteState.RETIRED:
                state.retired_at[e.subject] = e.at.isoformat()
        elif e.kind == PROC_SOURCES:
            state.documents = tuple(e.data["documents"])
        elif e.kind == PROCEDURES:
            state.procedures = ProcedureSet.from_dict(e.data["procedures"])
            state.procedures_commit = e.commit_id
    return state


def load_state(svc: MemoryService, scope: Scope) -> LearnedState:
    segs = svc.events_view(scope, MAIN)
    return fold(svc.index.events(str(scope), segs, LEARNING_KINDS))


# Per read index, as typed queries keep theirs (memory/query.py): two homes open in one
# process (tests, benchmarks) have scopes of the same name. Each keeps the STATES_KEPT
# scopes asked last: a server meets scopes (and workspaces, made and dropped) without end.
_cache: weakref.WeakKeyDictionary[Any, Kept[str, tuple[int, LearnedState]]] = (
    weakref.WeakKeyDictionary())
_cache_lock = threading.Lock()


def _kept(svc: MemoryService) -> Kept[str, tuple[int, LearnedState]]:
    with _cache_lock:
        found = _cache.get(svc.index)
        if found is None:
            found = _cache[svc.index] = Kept(STATES_KEPT)
        return found


def cached_state(svc: MemoryService, scope: Scope) -> LearnedState:
    """The scope's learned state, re-read only when a newer learning event was committed."""
    marker = svc.index.last_event_seq(str(scope), LEARNING_KINDS, MAIN)  # written on main
    kept = _kept(svc)
    hit = kept.get(str(scope))
    if hit is not None and hit[0] == marker:
        return hit[1]
    state = load_state(svc, scope)
    kept.put(str(scope), (marker, state))
    return state


class _Meanwhile(Exception):  # noqa: N818 -- not an error: read again, compute again
    """Another pass committed the subject since this pass read it."""


def _unmoved(svc: MemoryService, scope: Scope, state: LearnedState, *subjects: str
             ) -> Callable[[Segments], None]:
    """The recheck of a learning commit computed from ``state``: refused (`_Meanwhile`)
    once another pass committed an event of one of ``subjects`` after that read, checked
    inside the commit's compare-and-set (the index is level with the ledger it asserts),
    so two passes at once never both commit what they computed from the same read."""
    seen = max(state.marks.get(s, 0) for s in subjects)

    def check(_segs: Segments) -> None:
        if svc.index.last_event_seq(str(scope), LEARNING_KINDS, MAIN, subjects) != seen:
            raise _Meanwhile()
    return check


def again_if_meanwhile(attempt: Callable[[], R], what: str) -> R | None:
    """``attempt()`` (which reads, computes and commits with `_unmoved`), again while
    another pass commits the same subject first, at most ATTEMPTS times; None (and one
    WARNING line naming ``what``) when the others kept winning: they committed from
    newer reads, and the next pass reads theirs."""
    for _ in range(ATTEMPTS):
        try:
            return attempt()
        except _Meanwhile:
            continue
    log.warning("%s: other passes committed it first %d times; left to the next pass",
                what, ATTEMPTS)
    return None


def _learning_event(subject: str, kind: str, data: dict[str, Any]) -> EventRecord:
    return EventRecord(id=str(ULID()), subject=subject, kind=kind, user=LEARNER, at=utcnow(),
                       acl=(), data=data, branch=MAIN)


def _scopes(svc: MemoryService, scope: Scope | None) -> list[Scope]:
    svc.sync.ledger_table()
    return [scope] if scope is not None else svc.tables.scopes()


# -- clustering ------------------------------------------------------------------------------
def _same_map(a: SituationMap | None, b: SituationMap) -> bool:
    if a is None:
        return not b.situations
    return ([(s.id, s.category, s.name, s.members) for s in a.situations]
            == [(s.id, s.category, s.name, s.members) for s in b.situations])


def cluster_scope(svc: MemoryService, scope: Scope, embedder: Embedder,
                  model: ChatModel | None, min_similarity: float) -> dict[str, Any]:
    """Re-cluster one scope's rewarded tasks; commit the map when it changed (and no other
    pass committed one since the read: else again, from that map)."""
    report = again_if_meanwhile(
        lambda: _cluster_once(svc, scope, embedder, model, min_similarity),
        f"cluster {scope}")
    return report if report is not None else {"scope": str(scope), "tasks": None,
                                              "situations": None, "committed": None}


def _cluster_once(svc: MemoryService, scope: Scope, embedder: Embedder,
                  model: ChatModel | None, min_similarity: float) -> dict[str, Any]:
    state = load_state(svc, scope)
    previous = state.smap
    tasks = rewarded_tasks(svc, scope)
    if previous is not None and previous.embedder == embedder.name and (
            {t.id for t in tasks} == {m for s in previous.situations for m in s.members}):
        return {"scope": str(scope), "tasks": len(tasks),  # nothing new: no embedding,
                "situations": len(previous.situations), "committed": None}  # no naming
    smap = build_map(tasks, embedder, previous=previous, model=model,
                     min_similarity=min_similarity)
    if _same_map(previous, smap):
        return {"scope": str(scope), "tasks": len(tasks), "situations": len(smap.situations),
                "committed": None}
    entry = svc.write_events(LEARNER, scope, MAIN, "cluster situations",
                             [_learning_event(MAP_SUBJECT, MAP, {"map": smap.to_json()})],
                             recheck=_unmoved(svc, scope, state, MAP_SUBJECT))
    return {"scope": str(scope), "tasks": len(tasks), "situations": len(smap.situations),
            "committed": entry.commit_id}


def cluster_pass(svc: MemoryService, embedder: Embedder, model: ChatModel | None,
                 min_similarity: float, scope: Scope | None = None,
                 on_one: Callable[[], None] | None = None) -> dict[str, Any]:
    reports = []
    for s in _scopes(svc, scope):
        reports.append(cluster_scope(svc, s, embedder, model, min_similarity))
        if on_one is not None:
            on_one()
    return {"scopes": reports}


# -- evidence and the gate -------------------------------------------------------------------
def outcome_of(task: RewardedTask, key: str) -> dict[str, Any]:
    """What one rewarded session (or run) says of a note it served: the judge's verdict,
    or — when an explicit reward decided — applied, and helped when the reward is positive."""
    if task.reward_by == "judge":
        verdict = task.verdicts.get(key, {})
        helped = bool(verdict.get("helped"))
        applied = bool(verdict.get("applied")) or helped
    else:
        applied, helped = True, task.reward > 0
    return {"user": task.user, "applied": applied, "helped": helped}


def review_note(note: Note, tasks: Sequence[RewardedTask], old: dict[str, dict[str, Any]],
                rules: GateRules) -> dict[str, Any] | None:
    """The note's next ``gate`` event data, or None when nothing changed."""
    if note.state is NoteState.RETIRED:
        return None
    outcomes = {t.id: outcome_of(t, note.key) for t in tasks if note.key in t.served}
    evidence, events = Evidence(), []
    for sid in sorted(outcomes):
        o = outcomes[sid]
        evidence, _ = gate.record_served(note.key, note.state, evidence, session=sid)
        evidence, ev = gate.record_outcome(note.key, note.state, evidence, session=sid,
                                           user=o["user"], applied=o["applied"],
                                           helped=o["helped"])
        if old.get(sid) != o:
            events.append(ev.to_dict())
    state, change = gate.review(note.key, note.state, evidence, rules)
    if change is not None:
        events.append(change.to_dict())
    if not events and outcomes == old:
        return None
    for ev_dict in events:  # who was helped is kept in storage, never shown (counters only)
        ev_dict.pop("user", None)
    return {"state": state.value, "evidence": evidence.to_dict(), "outcomes": outcomes,
            "events": events}


# -- learning --------------------------------------------------------------------------------
def learn_scope(svc: MemoryService, scope: Scope, model: ChatModel | None, rules: GateRules,
                min_runs: int, asker: Asker) -> dict[str, Any]:
    """Review every note's evidence, then learn a note for each situation with none,
    asking through ``asker`` (the pass's; `learn_pass` settles what it held)."""
    report: dict[str, Any] = {"scope": str(scope), "reviewed": 0, "promoted": 0,
                              "retired": 0, "learned": 0, "failed": 0, "set_aside": 0}
    read = _Read(svc, scope)
    for key in list(read.state.notes):
        data = again_if_meanwhile(partial(read.review, key, rules), f"note evidence {key}")
        if not data:
            continue
        report["reviewed"] += 1
        kinds = {e["kind"] for e in data["events"]}
        report["promoted"] += int("promoted" in kinds)
        report["retired"] += int("retired" in kinds)
    tasks = read.tasks
    if model is None or read.state.smap is None:
        return report
    state = load_state(svc, scope)
    smap = state.smap
    if smap is None:
        return report
    for situation in smap.situations:
        notes = state.notes_of(situation.id)
        if any(n.state is not NoteState.RETIRED for n in notes):
            continue
        members = members_of(smap, situation.id, tasks)
        since = max((state.retired_at.get(n.key, "") for n in notes), default="")
        if since:  # after a retirement only what happened since teaches a new note
            members = [t for t in members if t.at.isoformat() > since]
        if not eligible(members, min_runs):
            continue
        # Asked the same way: same model, same traces shown (a new reward shows others).
        key = asked_key(model.name, note_model.SYSTEM,
                        note_model.build_prompt(situation, members)[0])
        try:
            learned = asker.ask(
                ("learn", str(scope), situation.id), situation.id, key,
                partial(learn_note, situation, members, model, min_runs=min_runs),
                f"learn: situation {situation.id} of {scope}, with no note,")
        except SetAside:
            report["set_aside"] += 1
            continue
        except (Refused, ModelUnavailable) as exc:
            report["failed"] += 1
            log.warning("learn: situation %s keeps no note for now: %s", situation.id,
                        exc.message)
            if asker.stopped:
                break  # the endpoint refuses every request
            continue
        if learned is None:
            continue
        try:
            svc.write_events(LEARNER, scope, MAIN, f"learn note {learned.key}",
                             [_learning_event(learned.key, NOTE, {"note": learned.to_dict()})],
                             recheck=_no_live_note(svc, scope, situation.id))
        except _NoteMeanwhile:
            continue
        report["learned"] += 1
    return report


class _Read:
    """What a learn pass's reviews compute from: the scope's learned state and rewarded
    tasks, read again once another pass committed a note's review first."""

    def __init__(self, svc: MemoryService, scope: Scope) -> None:
        self.svc, self.scope = svc, scope
        self.state, self.tasks = self._read()

    def _read(self) -> tuple[LearnedState, list[RewardedTask]]:
        state = load_state(self.svc, self.scope)  # first: its marks are what commits check
        return state, rewarded_tasks(self.svc, self.scope)

    def review(self, key: str, rules: GateRules) -> dict[str, Any]:
        """Commit the note's review (`review_note`) when it changed anything: its ``gate``
        event data, or {} for none. `_Meanwhile` (after reading again) when another pass
        committed an event of the note since the read."""
        data = review_note(self.state.notes[key], self.tasks,
                           self.state.outcomes.get(key, {}), rules)
        if data is None:
            return {}
        try:
            self.svc.write_events(LEARNER, self.scope, MAIN, f"note evidence {key}",
                                  [_learning_event(key, GATE, data)],
                                  recheck=_unmoved(self.svc, self.scope, self.state, key))
        except _Meanwhile:
            self.state, self.tasks = self._read()
            raise
        return data


class _NoteMeanwhile(Exception):
    """Another pass committed a live note for the situation first."""


def _no_live_note(svc: MemoryService, scope: Scope, situation: str
                  ) -> Callable[[Segments], None]:
    """Refuse a second live note for a situation, checked inside the commit's
    compare-and-set (a command and a timer learning at once write one note)."""
    def check(segs: Segments) -> None:
        state = fold(svc.index.events(str(scope), segs, (NOTE, GATE)))
        if any(n.state is not NoteState.RETIRED for n in state.notes_of(situation)):
            raise _NoteMeanwhile()
    return check


def learn_pass(svc: MemoryService, model: ChatModel | None, rules: GateRules, min_runs: int,
               scope: Scope | None = None,
               on_one: Callable[[], None] | None = None) -> dict[str, Any]:
    """`learn_scope` for every scope (or one), asking through one `Asker`: a situation
    the endpoint refuses counts toward setting it aside, unless it refuses every request
    (then the pass stops: the rest are tried again next pass)."""
    reports = []
    asker = Asker(svc.index, log)
    for s in _scopes(svc, scope):
        if not asker.stopped:
            reports.append(learn_scope(svc, s, model, rules, min_runs, asker))
        if on_one is not None:
            on_one()
    settle(asker, reports)
    return {"scopes": reports, "model": None if model is None else model.name}


def settle(asker: Asker, reports: list[dict[str, Any]]) -> None:
    """At the end of a pass over scopes: the refusals ``asker`` held count, and each
    item that sets aside moves from its scope's ``failed`` to its ``set_aside``."""
    by_scope = {r["scope"]: r for r in reports}
    for slot in asker.settle(end=True):
        report = by_scope[slot[1]]
        report["failed"] -= 1
        report["set_aside"] += 1


# -- timers ----------------------------------------------------------------------------------
def _under_lease(svc: MemoryService, name: str, holder: str, lease: timedelta,
                 job: Callable[[], dict[str, Any]]) -> dict[str, Any] | None:
    with svc.index.hold_lease(name, holder, lease) as held:
        return job() if held else None


def learning_timers(svc: MemoryService, settings: Settings, embedder: Embedder,
                    records: list[TimerRecord] | None = None) -> list[LifespanHook]:
    """``serve``'s clustering and learning timers, each under its own lease."""
    holder = lease_holder()
    lease = timedelta(seconds=settings.lease_seconds)
    model = chat_model(settings, Role.LEARN)
    rules = GateRules.from_settings(settings)

    def cluster() -> str | None:
        report = _under_lease(svc, CLUSTER_LEASE, holder, lease, lambda: cluster_pass(
            svc, embedder, model, settings.advice_situation_min_similarity))
        done = [r for r in (report or {}).get("scopes", []) if r["committed"]]
        return f"clustered {len(done)} scope(s)" if done else None

    aside = AsideNews()

    def learn() -> str | None:
        from ampup_memory.advice.aside import count  # noqa: PLC0415 — it reads this module

        report = _under_lease(svc, LEARN_LEASE, holder, lease, lambda: learn_pass(
            svc, model, rules, settings.advice_min_runs_for_note))
        if report is None:
            return None
        listed = count(svc, "learn", None if model is None else model.name)  # GET /set-aside's
        news = aside.changed(listed)
        if not news and not any(r["reviewed"] or r["learned"] or r["failed"]
                                for r in report["scopes"]):
            return None
        return f"{report}; {listed} situation(s) set aside now"

    return [periodic(cluster, settings.advice_cluster_interval_seconds,
                     "advice cluster pass", log, records=records),
            periodic(learn, settings.advice_learn_interval_seconds,
                     "advice learn pass", log, records=records)]


# -- reading: situations, notes, advice ------------------------------------------------------
def readable_runs(svc: MemoryService, principal: Principal, ids: Sequence[str]) -> set[str]:
    """The runs and sessions among ``ids`` the caller may read (the one visibility rule)."""
    firsts: dict[str, EventRecord] = {}
    for e in svc.index.events_of(ids):
        firsts.setdefault(e.subject, e)
    return {s for s, e in firsts.items() if may_read(principal, e.acl)}


def list_situations(svc: MemoryService, user: str, scope_text: object) -> dict[str, Any]:
    view = svc.view(scope_text)
    state = cached_state(svc, view.scope)
    smap = state.smap
    if smap is None:
        return {"scope": str(view.scope), "version": None, "versions": 0, "built_at": None,
                "named_by": None, "categories": [], "situations": []}
    principal = svc.principal(user)
    readable = readable_runs(svc, principal, [m for s in smap.situations for m in s.members])
    return {
        "scope": str(view.scope), "version": state.map_commit, "versions": state.versions,
        "built_at": smap.built_at, "named_by": smap.named_by,
        "categories": [{"id": c.id, "name": c.name, "terms": list(c.terms),
                        "situations": list(c.situations)} for c in smap.categories],
        "situations": [{"id": s.id, "category": s.category, "name": s.name,
                        "terms": list(s.terms), "size": len(s.members),
                        "members": [m for m in s.members if m in readable]}
                       for s in smap.situations],
    }


def note_wire(note: Note, readable: set[str], history: list[dict[str, Any]] | None = None
              ) -> dict[str, Any]:
    out: dict[str, Any] = {
        "key": note.key, "kind": "note", "situation": note.situation, "state": note.state.value,
        "when": note.when, "steps": list(note.steps), "pitfalls": list(note.pitfalls),
        "evidence": note.evidence.counters(),
        "sources": [s for s in note.sources if s in readable],
        "model": note.model, "created_at": note.created_at}
    if history is not None:  # a step names its session only to who may read it, as sources
        out["history"] = [h if h.get("session") is None or h["session"] in readable
                          else {**h, "session": None} for h in history]
    return out


def list_notes(svc: MemoryService, user: str, scope_text: object,
               situation: str | None = None) -> dict[str, Any]:
    view = svc.view(scope_text)
    state = cached_state(svc, view.scope)
    notes = [n for n in state.notes.values() if situation is None or n.situation == situation]
    named = [s for n in notes for s in n.sources] + [
        h["session"] for n in notes for h in state.history.get(n.key, []) if h.get("session")]
    readable = readable_runs(svc, svc.principal(user), named)
    return {"scope": str(view.scope),
            "notes": [note_wire(n, readable, state.history.get(n.key, [])) for n in notes]}


class AdviceRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    scope: ScopeText
    task: TaskText = Field(description="The task at hand.")
    session: str | None = Field(default=None, min_length=1, max_length=MAX_SESSION_ID,
                                description="Your open session (ses_…): the serving is "
                                "recorded on it, and a candidate note may be tried in it.")


def choose(state: LearnedState, situation: str, session: str | None,
           rules: GateRules) -> tuple[Note, bool] | None:
    """The note served for ``situation``: the newest promoted one, else a candidate the
    gate's trial draw picks for this session (no session: no trial)."""
    notes = state.notes_of(situation)
    promoted = [n for n in notes if n.state is NoteState.PROMOTED]
    if promoted:
        return promoted[-1], False
    if session is None:
        return None
    for n in reversed([n for n in notes if n.state is NoteState.CANDIDATE]):
        served, trial = gate.serves(n.key, n.state, session, rules)
        if served:
            return n, trial
    return None


@dataclass(frozen=True)
class Pick:
    """What `advise` decided for one task (and session): a note (``trial``: a candidate
    drawn for the session), else a procedure, else nothing; ``situation`` is the task's."""

    situation: str | None
    note: Note | None = None
    trial: bool = False
    skill: Skill | None = None


def advise(state: LearnedState, vector: Sequence[float], embedder: str,
           session: str | None, settings: Settings) -> Pick:
    """The one serving rule of ``POST /advice`` (pure; `get_advice` records and answers
    it): the task's situation's promoted note, else a candidate the gate's trial draw picks
    for ``session``, else the closest compiled procedure, else nothing."""
    smap = state.smap if state.smap is not None and state.smap.situations else None
    situation = None if smap is None else situation_for(
        vector, smap, embedder=embedder,
        min_similarity=settings.advice_situation_min_similarity)
    sid = None if situation is None else situation.id
    chosen = None if sid is None else choose(state, sid, session,
                                             GateRules.from_settings(settings))
    if chosen is not None:
        return Pick(sid, note=chosen[0], trial=chosen[1])
    procs = state.procedures
    skill = None if procs is None or not procs.skills else procedure_for(
        vector, procs, embedder=embedder,
        min_similarity=settings.advice_situation_min_similarity)
    return Pick(sid, skill=skill)


def get_advice(svc: MemoryService, user: str, req: AdviceRequest, embedder: Embedder,
               settings: Settings) -> dict[str, Any]:
    """`advise` for the task, recorded on the session (one commit) when something is
    served; ``{advice: null}`` when nothing is."""
    view = svc.view(req.scope)  # 404 for a deleted scope
    scope = view.scope
    if req.session is not None:  # unknown, unreadable or other scope's: 404; ended: 409
        first = open_session_events(svc, user, req.session)[0]
        if first.scope != str(scope):
            raise NotFound("No such session.")
    state = cached_state(svc, scope)
    none: dict[str, Any] = {"advice": None}
    smap = state.smap if state.smap is not None and state.smap.situations else None
    procs = state.procedures if state.procedures is not None and state.procedures.skills \
        else None
    if smap is None and procs is None:
        return none
    vector = embedder.embed([req.task])[0]
    situation = None if smap is None else situation_for(
        vector, smap, embedder=embedder.name,
        min_similarity=settings.advice_situation_min_similarity)
    chosen = None if situation is None else choose(state, situation.id, req.session,
                                                   GateRules.from_settings(settings))
    if chosen is not None and situation is not None:
        note, trial = chosen
        if req.session is not None:
            record_advice_step(svc, user, req.session,
                               {"key": note.key, "kind": "note", "situation": situation.id,
                                "trial": trial})
        readable = readable_runs(svc, svc.principal(user), note.sources)
        wire = note_wire(note, readable)
        return {"advice": {k: wire[k] for k in ("key", "kind", "situation", "when", "steps",
                                                "pitfalls", "evidence", "sources")}
                | {"trial": trial, "state": note.state.value}}
    skill = None if procs is None else procedure_for(
        vector, procs, embedder=embedder.name,
        min_similarity=settings.advice_situation_min_similarity)
    if skill is None:
        return none if situation is None else none | {"situation": situation.id}
    sid = None if situation is None else situation.id
    if req.session is not None:
        record_advice_step(svc, user, req.session,
                           {"key": skill.key, "kind": "procedure", "situation": sid,
                            "trial": False})
    wire = procedure_wire(skill, readable_units(svc, user, view.scope, view.segments, skill))
    return {"advice": {k: wire[k] for k in ("key", "kind", "name", "when", "steps",
                                            "edge_cases", "graph", "sources")}
            | {"situation": sid, "pitfalls": wire["edge_cases"],
               "evidence": Evidence().counters(), "trial": False, "state": "compiled"}}


# -- procedures: reading ---------------------------------------------------------------------
def readable_units(svc: MemoryService, user: str, scope: Scope, segs: Segments,
                   *skills: Skill) -> set[str]:
    """The episodes the skills cite that the caller may read (the one episode read rule)."""
    ids = {c.episode for s in skills for c in s.sources}
    return set(svc.readable_episodes(svc.principal(user), str(scope), segs, ids))


def procedure_wire(skill: Skill, readable: set[str]) -> dict[str, Any]:
    return {"key": skill.key, "kind": "procedure", "name": skill.name, "when": skill.when,
            "steps": list(skill.steps), "edge_cases": list(skill.edge_cases),
            "graph": skill.graph.to_json_dict(),
            "sources": [c.model_dump() for c in skill.sources if c.episode in readable]}


def list_procedures(svc: MemoryService, user: str, scope_text: object) -> dict[str, Any]:
    view = svc.view(scope_text)
    state = cached_state(svc, view.scope)
    procs = state.procedures
    if procs is None:
        return {"scope": str(view.scope), "version": None, "compiled_at": None,
                "model": None, "procedures": []}
    readable = readable_units(svc, user, view.scope, view.segments, *procs.skills)
    return {"scope": str(view.scope), "version": state.procedures_commit,
            "compiled_at": procs.compiled_at, "model": procs.model,
            "procedures": [procedure_wire(s, readable) for s in procs.skills]}
