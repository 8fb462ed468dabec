"""Advice REST routes: /runs, /runs/reward, /sessions, /sessions/start, /sessions/end,
/sessions/{id},
/situations, /notes, /procedures, /procedures/sources, /advice and /set-aside.

Identity first (401), then the body (422), as on every AmpUp route; every error is an
``AmpError`` rendered in the one envelope. An unknown run or session and one the caller may
not read answer the same 404.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from starlette.responses import JSONResponse

from ampup_memory.advice import aside, loop, procedures, runs, sessions
from ampup_memory.auth import Authenticator
from ampup_memory.blank import NotBlankText
from ampup_memory.memory.api import (
    CAP,
    USER_DOC,
    ConditionDep,
    UserDep,
    _headers,
    admin_author,
    service,
)
from ampup_memory.memory.scopes import BranchText, ScopeText, parse_scope
from ampup_memory.web.admin import AdminDep
from ampup_memory.web.body import DECIMAL, parse_body
from ampup_memory.web.conditional import (
    PRECONDITION_DOC,
    READ_PRECONDITION_DOC,
    conditional_doc,
    etag_response,
    read_answer,
)
from ampup_memory.web.created import created, created_doc
from ampup_memory.web.openapi import body_doc, errors, merged
from ampup_memory.web.query import StrictQueryRoute
from ampup_memory.web.routing import segment_except

router = APIRouter(tags=["advice"], route_class=StrictQueryRoute)
# GET /runs/reward and GET /sessions/start are wrong methods, not reads of a run or session
# called "reward" or "start".
RUN_PATH = "/runs/" + segment_except("run_id", "reward")
SESSION_PATH = "/sessions/" + segment_except("session_id", "start", "end")

UNAUTHENTICATED = "UNAUTHENTICATED / MISSING_USER: no caller, or not a valid user id"
INVALID = "VALIDATION_ERROR: details.errors = [{loc, msg, type}] (reward outside [-1, 1])"
UNAVAILABLE = "UNAVAILABLE: the ledger stayed contended; nothing was committed"
NOT_FOUND_RUN = "NOT_FOUND: unknown run or session, or one you may not read (one answer)"
ENDED = "SESSION_ENDED: the session has ended already"
OPEN = "SESSION_OPEN: the session is still open; end it first (its end takes a reward)"
# A read meets what any route may: the catalog, index or table storage down, or no AmpUp
# Memory in this process (docs/api.md, Errors).
DOWN = ("UNAVAILABLE: the catalog, index or table storage is down (Retry-After), or AmpUp "
        "Memory is not available in this process")
GONE_SCOPE = ("NOT_FOUND / WORKSPACE_GONE: unknown branch, or a workspace scope that is "
              "gone")


def _listing_invalid(cursor: str) -> str:
    return (f"VALIDATION_ERROR: details.errors = [{{loc, msg, type}}] (a bad scope or branch, "
            f"a limit outside 1-{runs.MAX_PAGE}; {cursor}_id_invalid: a `before` that is no "
            f"{cursor} id)")


def _recorded(request: Request, done: runs.Recorded, collection: str) -> JSONResponse:
    """A run or session written once (`runs.write_once`): 201 with its ``Location`` when
    this request wrote it, 200 when a retry with its idempotency_key found it."""
    wire = done.wire()
    if not done.created:
        return JSONResponse(wire)
    return created(request, wire, f"{collection}/{wire['id']}")


RunIdP = Annotated[str, Path(max_length=64, description="A run id (run_…).")]
SessionIdP = Annotated[str, Path(max_length=sessions.MAX_SESSION_ID,
                                  description="A session id (ses_…).")]


@router.post("/runs", status_code=201, responses={
    201: created_doc("Recorded: `Location` reads it (`GET /runs/{id}`)"),
    200: {"description": "Already recorded with this idempotency_key: that run, nothing "
                         "committed (created: false)"}, **errors({
        401: UNAUTHENTICATED, 404: "NOT_FOUND: unknown branch",
        409: CAP + "; IDEMPOTENCY_KEY_REUSED: the idempotency_key already recorded another "
        "run",
        422: INVALID, 503: UNAVAILABLE})},
             openapi_extra={**body_doc(runs.RecordRun), **USER_DOC})
async def record_run(request: Request, user: UserDep) -> JSONResponse:
    req = parse_body(runs.RecordRun, await request.body())
    done = await run_in_threadpool(runs.record_run, service(request), user, req)
    return _recorded(request, done, "/runs")


@router.post("/runs/reward", status_code=201, responses=errors({
    401: UNAUTHENTICATED, 404: NOT_FOUND_RUN, 409: OPEN, 422: INVALID, 503: UNAVAILABLE}),
             openapi_extra={**body_doc(runs.RewardRun), **USER_DOC})
async def reward_run(request: Request, user: UserDep) -> JSONResponse:
    req = parse_body(runs.RewardRun, await request.body())
    result = await run_in_threadpool(runs.reward, service(request), user, req)
    return JSONResponse(result, status_code=201)


@router.get("/runs", responses=errors({
    401: UNAUTHENTICATED, 404: GONE_SCOPE, 422: _listing_invalid("run"), 503: DOWN}),
            openapi_extra=USER_DOC)
def list_runs(request: Request, user: UserDep, scope: Annotated[ScopeText, Query()],
              branch: Annotated[BranchText | None, Query()] = None,
              limit: Annotated[int, Query(ge=1, le=runs.MAX_PAGE), DECIMAL] = 50,
              before: Annotated[runs.RunId | None, Query(
                  description="Run id (`next_before` of the page before): page before it."
              )] = None,
              ) -> dict[str, Any]:
    return runs.list_runs(service(request), user, scope, branch, limit, before)


@router.get("/sessions", responses=errors({
    401: UNAUTHENTICATED, 404: GONE_SCOPE, 422: _listing_invalid("session"), 503: DOWN}),
            openapi_extra=USER_DOC)
def list_sessions(request: Request, user: UserDep, scope: Annotated[ScopeText, Query()],
                  branch: Annotated[BranchText | None, Query()] = None,
                  limit: Annotated[int, Query(ge=1, le=runs.MAX_PAGE), DECIMAL] = 50,
                  before: Annotated[runs.SessionId | None, Query(
                      description="Session id (`next_before` of the page before): the "
                      "page before it.")] = None,
                  ) -> dict[str, Any]:
    """The scope's sessions you may read (their ACL, as `GET /sessions/{id}` decides),
    newest first, each as `GET /sessions/{id}` answers it without `transcript` and
    `rewards`: task, state, steps (advice served), outcome, the current `reward` (the
    judge's with its per-note verdicts), `judging`. `next_before` pages."""
    return sessions.list_sessions(service(request), user, scope, branch, limit, before)


@router.get(RUN_PATH, responses=errors({401: UNAUTHENTICATED, 404: NOT_FOUND_RUN,
                                        422: INVALID, 503: DOWN}),
            openapi_extra=USER_DOC)
def get_run(request: Request, user: UserDep, run_id: RunIdP) -> dict[str, Any]:
    return runs.get_run(service(request), user, run_id)


@router.post("/sessions/start", status_code=201, responses={
    201: created_doc("Started: `Location` reads it (`GET /sessions/{id}`)"),
    200: {"description": "Already started with this idempotency_key: that session, nothing "
                         "committed (created: false)"}, **errors({
        401: UNAUTHENTICATED, 404: "NOT_FOUND: unknown branch",
        409: CAP + "; IDEMPOTENCY_KEY_REUSED: the idempotency_key already started another "
        "session", 422: INVALID, 503: UNAVAILABLE})},
             openapi_extra={**body_doc(sessions.StartSession), **USER_DOC})
async def start_session(request: Request, user: UserDep) -> JSONResponse:
    req = parse_body(sessions.StartSession, await request.body())
    done = await run_in_threadpool(sessions.start_session, service(request), user, req)
    return _recorded(request, done, "/sessions")


@router.post("/sessions/end", responses=errors({
    401: UNAUTHENTICATED, 404: NOT_FOUND_RUN, 409: ENDED, 422: INVALID, 503: UNAVAILABLE}),
             openapi_extra={**body_doc(sessions.EndSession), **USER_DOC})
async def end_session(request: Request, user: UserDep) -> dict[str, Any]:
    req = parse_body(sessions.EndSession, await request.body())
    result: dict[str, Any] = await run_in_threadpool(sessions.end_session, service(request),
                                                     user, req)
    return result


@router.get(SESSION_PATH, responses=errors({
    401: UNAUTHENTICATED, 404: NOT_FOUND_RUN, 422: INVALID, 503: DOWN}), openapi_extra=USER_DOC)
def get_session(request: Request, user: UserDep, session_id: SessionIdP) -> dict[str, Any]:
    return sessions.get_session(service(request), user, session_id)


@router.get("/situations", responses=errors({
    401: UNAUTHENTICATED, 404: "NOT_FOUND: unknown scope", 422: INVALID, 503: DOWN}),
            openapi_extra=USER_DOC)
def list_situations(request: Request, user: UserDep,
                    scope: Annotated[ScopeText, Query()]) -> dict[str, Any]:
    """The scope's situation map (latest version); member lists show only the runs and
    sessions you may read."""
    return loop.list_situations(service(request), user, scope)


@router.get("/notes", responses=errors({
    401: UNAUTHENTICATED, 404: "NOT_FOUND: unknown scope", 422: INVALID, 503: DOWN}),
            openapi_extra=USER_DOC)
def list_notes(request: Request, user: UserDep, scope: Annotated[ScopeText, Query()],
               situation: Annotated[NotBlankText | None, Query(max_length=64)] = None,
               ) -> dict[str, Any]:
    """The scope's notes (of one situation), each with its state, evidence counters and
    history; sources and history name only the runs and sessions you may read."""
    return loop.list_notes(service(request), user, scope, situation)


@router.post("/advice", responses=errors({
    401: UNAUTHENTICATED, 404: "NOT_FOUND: unknown scope, or a session you may not read",
    409: ENDED, 422: INVALID, 503: UNAVAILABLE}),
             openapi_extra={**body_doc(loop.AdviceRequest), **USER_DOC})
async def get_advice(request: Request, user: UserDep) -> dict[str, Any]:
    """The advice for a task: its situation's promoted note, or a candidate on trial in
    your session, or `{"advice": null}`. Serving is recorded on the session."""
    req = parse_body(loop.AdviceRequest, await request.body())
    result: dict[str, Any] = await run_in_threadpool(
        loop.get_advice, service(request), user, req, request.app.state.runtime.embedder,
        request.app.state.settings)
    return result


@router.put("/procedures/sources", responses={200: etag_response(), **errors({
    401: "UNAUTHENTICATED: X-AmpUp-User given but not a valid user id",
    403: "ADMIN_DISABLED or ACCESS_DENIED: admin only", 404: "NOT_FOUND: unknown scope",
    409: CAP, 412: PRECONDITION_DOC, 422: INVALID, 503: UNAVAILABLE})},
            openapi_extra=merged(body_doc(procedures.PutSources), USER_DOC,
                                 conditional_doc()))
async def put_procedure_sources(request: Request, cond: ConditionDep) -> JSONResponse:
    """Choose the scope's documents to compile into procedures (admin, as a schema is):
    `{scope, documents: [keys]}` replaces the list; committed on `main`. With If-Match
    (the ETag of GET /procedures/sources), only over that list."""
    auth: Authenticator = request.app.state.auth
    headers = _headers(request)
    auth.require_admin(headers)
    req = parse_body(procedures.PutSources, await request.body())
    author = admin_author(auth, headers)
    result: dict[str, Any] = await run_in_threadpool(procedures.put_sources,
                                                     service(request), author, req, cond)
    etag = procedures.sources_etag(parse_scope(result["scope"]), result["documents"])
    return JSONResponse(result, headers={"ETag": etag})


@router.get("/procedures/sources", dependencies=[AdminDep], tags=["admin"], responses={
    200: etag_response("The scope's chosen documents; their version in ETag"),
    304: {"description": "Not Modified: If-None-Match names the current ETag"},
    **errors({403: "ADMIN_DISABLED or ACCESS_DENIED: admin only",
              404: "NOT_FOUND: unknown scope", 412: READ_PRECONDITION_DOC, 422: INVALID,
              503: UNAVAILABLE})},
            openapi_extra=conditional_doc(read=True))
def get_procedure_sources(request: Request, cond: ConditionDep,
                          scope: Annotated[ScopeText, Query()]) -> Response:
    """The scope's procedure sources (admin, as setting them is)."""
    answer = procedures.get_sources(service(request), scope)
    return read_answer(cond, answer, procedures.sources_etag(parse_scope(answer["scope"]),
                                                             answer["documents"]))


@router.get("/procedures", responses=errors({
    401: UNAUTHENTICATED, 404: "NOT_FOUND: unknown scope", 422: INVALID, 503: DOWN}),
            openapi_extra=USER_DOC)
def list_procedures(request: Request, user: UserDep,
                    scope: Annotated[ScopeText, Query()]) -> dict[str, Any]:
    """The scope's compiled procedures, each with its AIP step graph; sources show only
    the episodes you may read."""
    return loop.list_procedures(service(request), user, scope)


@router.get("/set-aside", responses=errors({
    401: UNAUTHENTICATED, 404: "NOT_FOUND / WORKSPACE_GONE: a workspace scope that is gone",
    422: "VALIDATION_ERROR: details.errors = [{loc, msg, type}] (a bad scope, kind or "
         "limit; cursor_invalid: an `after` no listing gave)"}), openapi_extra=USER_DOC)
def list_set_aside(request: Request, user: UserDep, scope: Annotated[ScopeText, Query()],
                   kind: Annotated[aside.Kind | None, Query(
                       description="One kind of model work; left out: every kind.")] = None,
                   limit: Annotated[int, Query(ge=1, le=aside.MAX_PAGE,
                                               description="Page size."), DECIMAL] = 50,
                   after: Annotated[aside.Cursor | None, Query(
                       description="`next_after` of the page before: the page after it.")
                   ] = None) -> dict[str, Any]:
    """The scope's items a model pass set aside (no usable answer, or the request refused,
    on 3 passes in a row), oldest first: extraction's episodes, the judge's sessions,
    learn's situations, compile's scope. Each: ``kind``, ``scope``, ``item``, ``branch``
    (extraction's), ``model``, ``reason``, ``passes``, ``at``. Only items you may read are
    listed: episodes and sessions by their ACLs, situations and the scope's compilation
    as `GET /situations` and `GET /procedures` show them."""
    return aside.page(service(request), user, scope, kind, limit, after,
                      aside.models_now(request.app.state.settings))
