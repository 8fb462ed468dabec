"""AmpUp Memory REST routes: /episodes, /document, /facts, /close, /ledger, /principals.

Bodies are read raw and validated after identity, as on the AMP routes (401 before 422).
Every error is an ``AmpError`` rendered in the one envelope by ``web.errors``.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, WithJsonSchema
from starlette.responses import JSONResponse

from ampup_memory.auth import USER_HEADER, Authenticator, header_map, presented_key
from ampup_memory.blank import NotBlankText
from ampup_memory.errors import ServiceUnavailable, Unauthenticated, field_error
from ampup_memory.memory.acl import ID_PATTERN, ID_RULE, Identifier, require_id, valid_id
from ampup_memory.memory.episode_types import client_types
from ampup_memory.memory.episodes import (
    EPISODE_ID_PATTERN,
    MAX_ENTITY,
    ChangeAcl,
    DocumentKey,
    WriteBatch,
    WriteEpisode,
)
from ampup_memory.memory.facts import CloseValue, PostFact, PostFacts
from ampup_memory.memory.ledger import CommitText
from ampup_memory.memory.scopes import BranchText, ScopeText
from ampup_memory.memory.service import MemoryService, acl_etag, principal_etag
from ampup_memory.memory.snapshots import PinText, SnapshotText, read_view
from ampup_memory.ruled import composed, published, ruled
from ampup_memory.timefmt import Instant
from ampup_memory.web.admin import AdminDep, is_admin
from ampup_memory.web.body import DECIMAL, parse_body
from ampup_memory.web.conditional import (
    PRECONDITION_DOC,
    READ_PRECONDITION_DOC,
    Condition,
    condition,
    conditional_doc,
    etag_response,
    read_answer,
)
from ampup_memory.web.created import created, created_doc
from ampup_memory.web.openapi import body_doc, errors, header_doc, merged
from ampup_memory.web.query import StrictQueryRoute
from ampup_memory.web.routing import segment_except

router = APIRouter(tags=["ampup memory"], route_class=StrictQueryRoute)
# GET /episodes/batch is a wrong method, not a read of an episode called "batch".
EPISODE_PATH = "/episodes/" + segment_except("episode_id", "batch")


class DocumentRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    scope: ScopeText
    document: DocumentKey
    as_of: Instant | None = None
    branch: BranchText | None = None
    at_commit: CommitText | None = None
    pin: PinText | None = None
    snapshot: SnapshotText | None = None


class PrincipalBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    groups: list[Identifier] = Field(default_factory=list, max_length=256)
    roles: list[Identifier] = Field(default_factory=list, max_length=256)


UNAUTHENTICATED = "UNAUTHENTICATED / MISSING_USER: no caller, or not a valid user id"
NOT_FOUND = "NOT_FOUND: unknown branch or at_commit, unknown pin or snapshot"
GONE_DOC = ("PIN_EXPIRED / PIN_RELEASED / SNAPSHOT_RELEASED: the pin or snapshot no longer "
            "holds anything")
INVALID = "VALIDATION_ERROR: details.errors = [{loc, msg, type}]"
UNAVAILABLE = "UNAVAILABLE: the ledger stayed contended; nothing was committed"
READ_ERRORS = errors({401: UNAUTHENTICATED, 404: NOT_FOUND, 410: GONE_DOC, 422: INVALID,
                      503: "UNAVAILABLE: AmpUp Memory is not available in this process"})
# Every write that can add a scope, episodes, facts or body bytes to a workspace.
CAP = ("WORKSPACE_CAP: the write would take its workspace past a cap; nothing was written "
       "(details: workspace, cap, limit, usage, adding)")
WRITE_ERRORS = errors({401: UNAUTHENTICATED, 404: NOT_FOUND, 409: CAP, 422: INVALID,
                       503: UNAVAILABLE})
ADMIN_ERRORS = errors({403: "ADMIN_DISABLED or ACCESS_DENIED: admin only", 422: INVALID,
                       503: "UNAVAILABLE: AmpUp Memory is not available in this process"})
# The caller, read by the route itself (identity is checked before the body or query).
USER_DOC = header_doc(USER_HEADER, "The calling user (keys off; keys on: the key's user).",
                      pattern=ID_PATTERN)


ConditionDep = Annotated[Condition, Depends(condition)]


def service(request: Request) -> MemoryService:
    svc: MemoryService | None = getattr(request.app.state, "memory", None)
    if svc is None:
        raise ServiceUnavailable("AmpUp Memory is not available in this process.")
    return svc


def _headers(request: Request) -> dict[str, str]:
    return header_map(request.headers)


def memory_user(auth: Authenticator, headers: dict[str, str]) -> str:
    """The principal's user: ``X-AmpUp-User`` in trust mode, the key's user with keys on."""
    if auth.require_keys:
        user = auth.caller(headers).user_id
        if not user:
            raise Unauthenticated("This API key speaks for no AmpUp user: create one with "
                                  "`ampup-memory keys create --agent ID --user USER`.")
    else:
        user = headers.get(USER_HEADER, "").strip()
        if not user:
            raise Unauthenticated("Name the user this request acts for in the X-AmpUp-User "
                                  "header (X-AmpUp-User: <user id>).", code="MISSING_USER")
    if not valid_id(user):
        raise not_a_user_id()
    return user


def not_a_user_id() -> Unauthenticated:
    """The 401 of an ``X-AmpUp-User`` that is no valid user id: it says what to send."""
    return Unauthenticated(f"X-AmpUp-User is not a valid user id: {ID_RULE}.")


def admin_author(auth: Authenticator, headers: dict[str, str]) -> str:
    """Who an admin write (a schema, the procedure sources) is committed as. Keys off: the
    user that ``X-AmpUp-User`` names (a blank or malformed id is a 401, as on every route),
    else ``admin``. Keys on: the presented key's user, as on every route (a header could
    name anyone), else ``admin`` (the admin token, or a key bound to no user); a key that
    does not check out is the routes' 401. ``headers``: the request's, as
    `Authenticator.require_admin` checked them."""
    if auth.require_keys:
        if presented_key(headers) is None:
            return "admin"
        return auth.caller(headers).user_id or "admin"
    named = headers.get(USER_HEADER)
    if named is None:
        return "admin"
    if not valid_id(named.strip()):  # named, even blank: then a valid id
        raise not_a_user_id()
    return named.strip()


def _user(request: Request) -> str:
    auth: Authenticator = request.app.state.auth
    return memory_user(auth, _headers(request))


# A dependency, not a call in the body, for every route with a query or path: FastAPI
# resolves dependencies before it validates them, so a request without a caller is 401
# even when its query or path is invalid (as `amp.api.CallerDep` does for AMP).
UserDep = Annotated[str, Depends(_user)]
# For a route that needs a user but not its id (decorator ``dependencies``).
UserOnlyDep = Depends(_user)


# Scope, branch and commit are checked by the service (after identity, `scope_invalid`);
# the schema publishes the same patterns.
ScopeQ = Annotated[ScopeText, Query()]
BranchQ = Annotated[BranchText | None, Query()]
AtCommitQ = Annotated[CommitText | None, Query(description="Read as of this commit.")]
PinQ = Annotated[PinText | None, Query()]
SnapshotQ = Annotated[SnapshotText | None, Query()]
EpisodeIdP = Annotated[str, Path(), WithJsonSchema({
    "type": "string", "pattern": EPISODE_ID_PATTERN, "description": "Episode id (SHA-256)."})]
CONFLICT = "CONFLICT: an id exists with other acl/occurred_at/about/document"


@router.post("/episodes", status_code=201, responses={
    201: created_doc("Stored: `Location` reads it (`GET /episodes/{id}`)"),
    200: {"description": "Already stored: nothing committed (created: false)"},
    **WRITE_ERRORS, **errors({409: f"{CONFLICT}; {CAP}"})},
             openapi_extra={**body_doc(WriteEpisode), **USER_DOC})
async def write_episode(request: Request, user: UserDep) -> JSONResponse:
    req = parse_body(WriteEpisode, await request.body())
    ep_id, new, holder = await run_in_threadpool(service(request).write_episode, user, req)
    body = {"id": ep_id, "commit": holder, "created": new is not None}
    if new is None:
        return JSONResponse(body)
    return created(request, body, f"/episodes/{ep_id}", scope=str(req.scope),
                   branch=req.branch)


@router.post("/episodes/batch", status_code=201, responses={
    200: {"description": "Nothing new: commit is null"},
    **WRITE_ERRORS, **errors({
        409: f"{CONFLICT}; details.conflicts = [{{index, id, fields}}]; {CAP}"})},
             openapi_extra={**body_doc(WriteBatch), **USER_DOC})
async def write_batch(request: Request, user: UserDep) -> JSONResponse:
    req = parse_body(WriteBatch, await request.body())
    result = await run_in_threadpool(service(request).write_batch, user, req)
    body = {"commit": result.commit.commit_id if result.commit else None,
            "episodes": [{"id": i, "status": s} for i, s in result.episodes]}
    return JSONResponse(body, status_code=201 if result.commit else 200)


@router.get(EPISODE_PATH, responses={
    200: etag_response("The episode; the version of its ACL (its one changeable part) "
                       "in ETag, for If-Match on PUT …/acl"),
    304: {"description": "Not Modified: If-None-Match names the current ETag"},
    **errors({401: UNAUTHENTICATED, 404: "NOT_FOUND: unknown or unreadable episode (one "
              "answer), unknown branch, at_commit, pin or snapshot", 410: GONE_DOC,
              412: READ_PRECONDITION_DOC, 422: INVALID, 503: UNAVAILABLE})},
    openapi_extra=merged(USER_DOC, conditional_doc(read=True)))
def get_episode(request: Request, user: UserDep, cond: ConditionDep,
                episode_id: EpisodeIdP, scope: ScopeQ, branch: BranchQ = None,
                at_commit: AtCommitQ = None, pin: PinQ = None,
                snapshot: SnapshotQ = None) -> Response:
    svc = service(request)
    answer = svc.get_episode(user, episode_id,
                             read_view(svc, scope, branch, at_commit, pin, snapshot))
    return read_answer(cond, answer, acl_etag(answer["id"], answer["acl"]))


@router.put(EPISODE_PATH + "/acl", responses={200: etag_response(), **errors({
    401: UNAUTHENTICATED, 403: "ACCESS_DENIED: neither the episode's author nor admin",
    404: "NOT_FOUND: unknown or unreadable episode, unknown branch",
    412: PRECONDITION_DOC, 422: INVALID, 503: UNAVAILABLE})},
    openapi_extra=merged(body_doc(ChangeAcl), USER_DOC, conditional_doc()))
async def change_acl(request: Request, user: UserDep, episode_id: EpisodeIdP,
                     cond: ConditionDep) -> JSONResponse:
    """Replace the episode's ACL; with If-Match (the ETag of GET /episodes/{id}), only
    over that version."""
    req = parse_body(ChangeAcl, await request.body())
    result: dict[str, Any] = await run_in_threadpool(
        service(request).change_acl, user, req, episode_id, is_admin(request), cond)
    return JSONResponse(result, headers={"ETag": acl_etag(result["id"], result["acl"])})


@router.get("/episode-types")
def episode_types() -> dict[str, Any]:
    return {"types": [t.wire() for t in client_types()]}


@router.post("/document", responses=errors({
    401: UNAUTHENTICATED, 404: "NOT_FOUND: no readable version; unknown branch, at_commit, "
    "pin or snapshot", 410: GONE_DOC, 422: INVALID, 503: UNAVAILABLE}),
             openapi_extra={**body_doc(DocumentRequest), **USER_DOC})
async def document(request: Request, user: UserDep) -> dict[str, Any]:
    req = parse_body(DocumentRequest, await request.body())
    svc = service(request)

    def run() -> dict[str, Any]:
        view = read_view(svc, req.scope, req.branch, req.at_commit, req.pin, req.snapshot)
        return svc.document(user, req.document, view, req.as_of)

    return await run_in_threadpool(run)


@router.post("/facts", status_code=201, responses={**WRITE_ERRORS, **errors({
    409: f"SCHEMA_CHANGED: the scope's schema changed under the write; {CAP}"})},
             openapi_extra={**body_doc(PostFact), **USER_DOC})
async def post_fact(request: Request, user: UserDep) -> JSONResponse:
    req = parse_body(PostFact, await request.body())
    fid, entry = await run_in_threadpool(service(request).post_fact, user, req)
    return JSONResponse({"id": fid, "commit": entry.commit_id}, status_code=201)


@router.post("/facts/batch", status_code=201, responses={**WRITE_ERRORS, **errors({
    409: f"SCHEMA_CHANGED: the scope's schema changed under the write; {CAP}"})},
             openapi_extra={**body_doc(PostFacts), **USER_DOC})
async def post_facts(request: Request, user: UserDep) -> JSONResponse:
    req = parse_body(PostFacts, await request.body())
    ids, entry = await run_in_threadpool(service(request).post_facts, user, req.scope,
                                         req.branch, req.facts)
    return JSONResponse({"ids": ids, "commit": entry.commit_id}, status_code=201)


@router.get("/facts", responses=READ_ERRORS, openapi_extra=USER_DOC)
def get_facts(
    request: Request, user: UserDep,
    scope: ScopeQ,
    entity: Annotated[NotBlankText, Query(min_length=1, max_length=MAX_ENTITY),
                      AfterValidator(composed)],
    predicate: Annotated[Annotated[NotBlankText, AfterValidator(composed)] | None,
                         Query(max_length=128)] = None,
    as_of: Annotated[Instant | None, Query(description="Valid time; default now.")] = None,
    history: Annotated[bool, Query(description="Every version with its window.")] = False,
    branch: BranchQ = None,
    at_commit: AtCommitQ = None,
    pin: PinQ = None,
    snapshot: SnapshotQ = None,
) -> dict[str, Any]:
    svc = service(request)
    view = read_view(svc, scope, branch, at_commit, pin, snapshot)
    return {"facts": svc.get_facts(user, view, entity, predicate, as_of, history)}


@router.post("/close", status_code=201, responses=errors({
    401: UNAUTHENTICATED, 404: "NOT_FOUND: no current value to close; unknown branch",
    409: CAP, 422: INVALID, 503: UNAVAILABLE}), openapi_extra={**body_doc(CloseValue), **USER_DOC})
async def close_value(request: Request, user: UserDep) -> JSONResponse:
    req = parse_body(CloseValue, await request.body())
    result = await run_in_threadpool(service(request).close_value, user, req)
    return JSONResponse(result, status_code=201)


@router.get("/ledger", responses=READ_ERRORS, openapi_extra=USER_DOC)
def ledger(request: Request, user: UserDep, scope: ScopeQ, branch: BranchQ = None,
           limit: Annotated[int, Query(ge=1, le=1000), DECIMAL] = 50,
           before: Annotated[CommitText | None,
                             Query(description="Commit id: page before it.")] = None,
           pin: PinQ = None, snapshot: SnapshotQ = None) -> dict[str, Any]:
    svc = service(request)
    return svc.ledger(read_view(svc, scope, branch, None, pin, snapshot), limit, before)


UserPath = Annotated[str, Path(description="User id."),
                     ruled(ID_PATTERN, "id_invalid", "user id", ID_RULE),
                     published(ID_PATTERN, description="User id.")]


@router.put("/principals/{user}", dependencies=[AdminDep],
            responses={200: etag_response(), **ADMIN_ERRORS,
                       **errors({412: PRECONDITION_DOC})},
            openapi_extra=merged(body_doc(PrincipalBody), conditional_doc()))
async def put_principal(request: Request, user: UserPath, cond: ConditionDep) -> JSONResponse:
    """Replace the user's groups and roles; with If-Match, only over that version."""
    raw = await request.body()
    if not raw.strip():  # replacing groups and roles with nothing must be said, not implied
        raise field_error(["body"], "a JSON body {groups, roles} is required", "missing",
                          located=True)  # the body itself, not a field named "body"
    req = parse_body(PrincipalBody, raw)
    principal = await run_in_threadpool(service(request).set_principal, user, req.groups,
                                        req.roles, "admin", cond)
    return JSONResponse(principal.wire(), headers={"ETag": principal_etag(principal)})


@router.get("/principals/{user}", dependencies=[AdminDep],
            responses={200: etag_response(), 304: {"description": "Not Modified"},
                       **ADMIN_ERRORS, **errors({412: READ_PRECONDITION_DOC})},
            openapi_extra=conditional_doc(read=True))
def get_principal(request: Request, user: UserPath, cond: ConditionDep) -> Response:
    principal = service(request).principal(require_id(user, ["user"], "user id"))
    return read_answer(cond, principal.wire(), principal_etag(principal))
