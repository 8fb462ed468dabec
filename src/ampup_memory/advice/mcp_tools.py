"""The advice loop's MCP tools as plain functions: ``record_run``, ``reward_run``,
``start_session``, ``end_session``, ``get_session``, ``get_advice``. Each takes the memory
service and the authenticated caller and returns JSON-ready data, through the same
functions as the REST routes."""

from __future__ import annotations

from typing import Any

from ampup_memory.advice import loop, runs, sessions
from ampup_memory.auth import Caller
from ampup_memory.memory.mcp_tools import caller_user
from ampup_memory.memory.service import MemoryService, build
from ampup_memory.search.embed import Embedder
from ampup_memory.settings import Settings


def record_run(svc: MemoryService, caller: Caller, *, scope: str, task: str,
               trace: str | None = None, outcome: str | None = None,
               advice_key: str | None = None, acl: list[str] | None = None,
               branch: str | None = None,
               idempotency_key: str | None = None) -> dict[str, Any]:
    user = caller_user(caller)
    req = build(runs.RecordRun, scope=scope, task=task, trace=trace, outcome=outcome,
                advice_key=advice_key, acl=acl, branch=branch,
                idempotency_key=idempotency_key)
    return runs.record_run(svc, user, req).wire()


def reward_run(svc: MemoryService, caller: Caller, *, run: str, reward: float,
               reason: str) -> dict[str, Any]:
    user = caller_user(caller)
    return runs.reward(svc, user, build(runs.RewardRun, run=run, reward=reward, reason=reason))


def start_session(svc: MemoryService, caller: Caller, *, scope: str, task: str | None = None,
                  acl: list[str] | None = None, branch: str | None = None,
                  idempotency_key: str | None = None) -> dict[str, Any]:
    user = caller_user(caller)
    req = build(sessions.StartSession, scope=scope, task=task, acl=acl, branch=branch,
                idempotency_key=idempotency_key)
    return sessions.start_session(svc, user, req).wire()


def end_session(svc: MemoryService, caller: Caller, *, session: str, transcript: str,
                outcome: str, reward: float | None = None,
                reason: str | None = None) -> dict[str, Any]:
    user = caller_user(caller)
    req = build(sessions.EndSession, session=session, transcript=transcript, outcome=outcome,
                reward=reward, reason=reason)
    return sessions.end_session(svc, user, req)


def get_session(svc: MemoryService, caller: Caller, *, session: str) -> dict[str, Any]:
    """A session the caller may read (its steps, outcome, reward and the judge's verdict),
    as GET /sessions/{session_id} answers it: an unknown or unreadable one is NotFound."""
    return sessions.get_session(svc, caller_user(caller), session)


def get_advice(svc: MemoryService, caller: Caller, embedder: Embedder, settings: Settings, *,
               scope: str, task: str, session: str | None = None) -> dict[str, Any]:
    user = caller_user(caller)
    req = build(loop.AdviceRequest, scope=scope, task=task, session=session)
    return loop.get_advice(svc, user, req, embedder, settings)
