"""Procedures (AIP) wired to storage: a scope's chosen documents, compiled into skills.

- ``PUT /procedures/sources`` (admin, like a schema) commits one ``procedure_sources`` event
  (subject ``procedure_sources``) on the scope's ``main``: the chosen document keys.
- A compile pass (``ampup-memory advice compile``, ``serve``'s timer under a lease) reads the
  newest version of each chosen document, has the compile model (`aip.compile_skills`,
  citations checked) turn them into skills with step graphs, embeds each skill's name and
  ``when`` and commits the whole set as one ``procedures`` event (subject ``procedures``).
  Nothing changed since the last compilation (same keys, same versions, same embedder): no
  model call, no commit. Model down or garbage: nothing written, the next pass retries;
  answers of the wrong shape (or requests the endpoint refused) on several passes in a row
  set the scope aside until the model or the documents change (models/setaside.py). No
  model: nothing is compiled.

Both kinds are folded with the rest of the scope's learning state (`loop.fold`), so
``POST /advice`` and ``GET /procedures`` read them from the same per-process cache.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ampup_memory.advice import aip
from ampup_memory.advice.aip import ProcedureSet, SourceDocument, compile_skills, match_text
from ampup_memory.advice.aside import count
from ampup_memory.advice.loop import (
    LEARNER,
    LEARNING_KINDS,
    PROC_SOURCES,
    PROCEDURES,
    _learning_event,
    _scopes,
    _under_lease,
    _unmoved,
    again_if_meanwhile,
    fold,
    load_state,
    settle,
)
from ampup_memory.advice.runs import utcnow
from ampup_memory.background import LifespanHook, TimerRecord, periodic
from ampup_memory.memory.episode_types import by_name
from ampup_memory.memory.episodes import DocumentKey
from ampup_memory.memory.readindex import lease_holder
from ampup_memory.memory.scopes import MAIN, Scope, ScopeText, parse_scope
from ampup_memory.memory.segments import Segments
from ampup_memory.memory.service import MemoryService
from ampup_memory.models.chat import ChatModel, ModelUnavailable, Role, chat_model
from ampup_memory.models.setaside import AsideNews, Asker, Refused, SetAside, asked_key
from ampup_memory.search.embed import Embedder
from ampup_memory.settings import Settings
from ampup_memory.timefmt import format_time
from ampup_memory.web.conditional import Condition, etag_of

log = logging.getLogger("ampup_memory.advice")

SOURCES_SUBJECT, PROCEDURES_SUBJECT = "procedure_sources", "procedures"
COMPILE_LEASE = "advice-compile"
MAX_DOCUMENTS = 100
NO_MODEL = "no compile model configured: nothing compiled"


class PutSources(BaseModel):
    model_config = ConfigDict(extra="forbid")

    scope: ScopeText
    documents: list[DocumentKey] = Field(max_length=MAX_DOCUMENTS, description=(
        "The document keys (an episode's `document`) to compile into procedures; the "
        "newest version of each is read. An empty list compiles none."))

    def keys(self) -> list[str]:
        return list(dict.fromkeys(self.documents))


def sources_etag(scope: Scope, documents: Sequence[str]) -> str:
    """The version of a scope's procedure sources for If-Match: a hash of the list."""
    return etag_of({"scope": str(scope), "documents": list(documents)})


def get_sources(svc: MemoryService, scope_text: object) -> dict[str, Any]:
    scope = parse_scope(scope_text)
    return {"scope": str(scope), "documents": list(load_state(svc, scope).documents)}


def put_sources(svc: MemoryService, author: str, req: PutSources,
                condition: Condition | None = None) -> dict[str, Any]:
    """Commit the scope's chosen documents (nothing when they are the same as now).
    ``condition`` (If-Match on `sources_etag`) is checked again inside the commit's
    compare-and-set, on main as of the ledger the append asserts."""
    keys = req.keys()
    scope = parse_scope(req.scope)
    was = load_state(svc, scope).documents
    if condition is not None:
        condition.check(sources_etag(scope, was))
    if list(was) == keys:
        return {"scope": str(scope), "documents": keys, "commit": None}

    def recheck(segs: Segments) -> None:
        if condition is not None and not condition.empty:
            state = fold(svc.index.events(str(scope), segs, LEARNING_KINDS))
            condition.check(sources_etag(scope, state.documents))

    entry = svc.write_events(author, scope, MAIN,
                             f"set procedure sources ({len(keys)} documents)",
                             [replace(_learning_event(SOURCES_SUBJECT, PROC_SOURCES,
                                                      {"documents": keys}), user=author)],
                             recheck=recheck)
    return {"scope": str(scope), "documents": keys, "commit": entry.commit_id}


def _documents(svc: MemoryService, scope: Scope, keys: tuple[str, ...]
               ) -> tuple[list[SourceDocument], dict[str, str]]:
    """The newest version of each chosen document (a compile reads as the system: every
    version, whoever may read it) with its units, and which version that was."""
    segs = svc.events_view(scope, MAIN)
    now = utcnow()
    docs: list[SourceDocument] = []
    inputs: dict[str, str] = {}
    for key in keys:
        versions = svc.index.document_versions(str(scope), segs, key, now)
        if not versions:
            continue
        rec = versions[0]
        etype = by_name(rec.type)
        body = svc.index.body(str(scope), rec.body_ref) or ""
        units = etype.units(body) if etype else []
        docs.append(SourceDocument(episode=rec.id, units=tuple(u.text for u in units),
                                   title=key))
        inputs[key] = rec.id
    return docs, inputs


def compile_scope(svc: MemoryService, scope: Scope, model: ChatModel, embedder: Embedder,
                  asker: Asker) -> dict[str, Any]:
    """Compile one scope's chosen documents, asking through ``asker`` (the pass's;
    `compile_pass` settles what it held); commit the procedures when their inputs
    changed since the last compilation. Another pass's compilation (or a new choice of
    documents) committed since the read refuses the commit: then the scope is read and
    compiled again, which asks nothing when that compilation's inputs are the newest."""
    report = again_if_meanwhile(lambda: _compile_once(svc, scope, model, embedder, asker),
                                f"compile {scope}")
    return report if report is not None else {
        "scope": str(scope), "documents": None, "procedures": None, "committed": None,
        "failed": 0, "set_aside": 0}


def _compile_once(svc: MemoryService, scope: Scope, model: ChatModel, embedder: Embedder,
                  asker: Asker) -> dict[str, Any]:
    state = load_state(svc, scope)
    previous = state.procedures
    report: dict[str, Any] = {"scope": str(scope), "documents": len(state.documents),
                              "procedures": 0 if previous is None else len(previous.skills),
                              "committed": None, "failed": 0, "set_aside": 0}
    if not state.documents and previous is None:
        return report
    docs, inputs = _documents(svc, scope, state.documents)
    if previous is not None and (previous.documents, previous.inputs, previous.embedder) == (
            state.documents, inputs, embedder.name):
        return report  # nothing new: no model call, no commit
    # Asked the same way: same model, same documents shown (a new version shows others).
    key = asked_key(model.name, aip.SYSTEM, aip.build_prompt(docs)[0])
    try:
        skills = asker.ask(
            ("compile", str(scope)), str(scope), key, lambda: compile_skills(docs, model),
            f"compile: scope {scope}, keeping its procedures,")
    except SetAside:
        report["set_aside"] = 1
        return report
    except (Refused, ModelUnavailable) as exc:
        report["failed"] = 1
        log.warning("compile: scope %s keeps its procedures for now: %s", scope,
                    exc.message)
        return report
    vectors = embedder.embed([match_text(s) for s in skills]) if skills else []
    procs = ProcedureSet(skills=tuple(skills), vectors=tuple(tuple(v) for v in vectors),
                         embedder=embedder.name, documents=state.documents, inputs=inputs,
                         model=model.name, compiled_at=format_time(utcnow()))
    entry = svc.write_events(LEARNER, scope, MAIN, f"compile {len(skills)} procedures",
                             [_learning_event(PROCEDURES_SUBJECT, PROCEDURES,
                                              {"procedures": procs.to_dict()})],
                             recheck=_unmoved(svc, scope, state, PROCEDURES_SUBJECT,
                                              SOURCES_SUBJECT))
    report.update(procedures=len(skills), committed=entry.commit_id)
    return report


def compile_pass(svc: MemoryService, model: ChatModel | None, embedder: Embedder,
                 scope: Scope | None = None,
                 on_one: Callable[[], None] | None = None) -> dict[str, Any]:
    """Compile every scope's (or one scope's) chosen documents once, asking through one
    `Asker` (a scope the endpoint refuses counts toward setting it aside, unless it
    refuses every request: then the pass stops). Without a model nothing is compiled, and
    the report says so."""
    if model is None:
        return {"scopes": [], "model": None, "message": NO_MODEL}
    reports = []
    asker = Asker(svc.index, log)
    for s in _scopes(svc, scope):
        if not asker.stopped:
            reports.append(compile_scope(svc, s, model, embedder, asker))
        if on_one is not None:
            on_one()
    settle(asker, reports)
    return {"scopes": reports, "model": model.name}


def compile_timer(svc: MemoryService, settings: Settings, embedder: Embedder,
                  records: list[TimerRecord] | None = None) -> LifespanHook:
    """``serve``'s compile timer, under its lease (several servers never compile at once)."""
    holder = lease_holder()
    lease = timedelta(seconds=settings.lease_seconds)
    model = chat_model(settings, Role.COMPILE)
    said = AsideNews()

    def job() -> str | None:
        if model is None:
            return None
        report = _under_lease(svc, COMPILE_LEASE, holder, lease,
                              lambda: compile_pass(svc, model, embedder))
        if report is None:
            return None
        scopes = report.get("scopes", [])
        done = sum(1 for r in scopes if r["committed"])
        failed = sum(r["failed"] for r in scopes)
        aside = count(svc, "compile", model.name)  # what GET /set-aside lists, not the pass's
        news = said.changed(aside)
        if not (done or failed or news):
            return None
        return (f"compiled procedures of {done} scope(s)"
                + (f"; the model failed on {failed}" if failed else "")
                + (f"; {aside} set aside" if aside else ""))

    return periodic(job, settings.advice_compile_interval_seconds, "advice compile pass", log,
                    records=records)
