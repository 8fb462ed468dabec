"""REST routes of pins and snapshots: ``/pin``, ``/snapshots``, ``/workspaces/{id}/snapshots``.

Reads take ``pin=`` / ``snapshot=`` on their own routes (memory/api.py, search/api.py);
these routes create, show, list, renew and release the holds (snapshots.py).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Request
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import JSONResponse

from ampup_memory.memory import snapshots as holds
from ampup_memory.memory.api import USER_DOC, UserDep, service
from ampup_memory.memory.ledger import CommitText
from ampup_memory.memory.scopes import BranchText, ScopeText, parse_scope
from ampup_memory.timefmt import TtlText, parse_ttl
from ampup_memory.web.admin import is_admin
from ampup_memory.web.body import parse_body
from ampup_memory.web.created import created, created_doc
from ampup_memory.web.openapi import body_doc, errors
from ampup_memory.web.query import StrictQueryRoute

router = APIRouter(tags=["pins and snapshots"], route_class=StrictQueryRoute)

PinP = Annotated[str, Path(description="Pin id.", json_schema_extra={
    "pattern": holds.PIN_PATTERN})]
SnapshotP = Annotated[str, Path(description="Snapshot id.", json_schema_extra={
    "pattern": holds.SNAPSHOT_PATTERN})]

UNAUTHENTICATED = "UNAUTHENTICATED / MISSING_USER: no caller, or not a valid user id"
INVALID = ("VALIDATION_ERROR: details.errors = [{loc, msg, type}] (bad ttl, malformed id, "
           "bad scope)")
GONE = "PIN_EXPIRED / PIN_RELEASED: the pin no longer holds anything"
UNAVAILABLE = "UNAVAILABLE: AmpUp Memory is not available in this process"


class PinRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    scope: ScopeText
    branch: BranchText | None = None
    at_commit: CommitText | None = Field(
        default=None, description="The commit to hold (default: the branch head now).")
    ttl: TtlText


class RenewRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ttl: TtlText


class SnapshotRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    scopes: list[ScopeText] = Field(
        min_length=1, max_length=holds.MAX_SNAPSHOT_SCOPES,
        description="Scopes whose current main head the snapshot holds.")


@router.post("/pin", status_code=201, responses={201: created_doc(
    "The pin: `Location` reads it (`GET /pin/{id}`)"), **errors({
    401: UNAUTHENTICATED, 404: "NOT_FOUND: unknown branch or at_commit",
    409: "NO_COMMITS: the scope has no commit on that branch yet", 422: INVALID,
    503: UNAVAILABLE})}, openapi_extra={**body_doc(PinRequest), **USER_DOC})
async def create_pin(request: Request, user: UserDep) -> JSONResponse:
    req = parse_body(PinRequest, await request.body())
    ttl = parse_ttl(req.ttl, ["ttl"])
    svc = service(request)
    answer = await run_in_threadpool(holds.create_pin, svc, user, req.scope, req.branch,
                                     req.at_commit, ttl)
    return created(request, answer, f"/pin/{answer['id']}")


@router.get("/pin/{pin_id}", responses=errors({
    401: UNAUTHENTICATED, 404: "NOT_FOUND: no such pin", 422: INVALID, 503: UNAVAILABLE}),
            openapi_extra=USER_DOC)
def show_pin(request: Request, user: UserDep, pin_id: PinP) -> dict[str, Any]:
    return holds.show(service(request), pin_id, holds.PIN, ["pin_id"])


@router.post("/pin/{pin_id}/renew", responses=errors({
    401: UNAUTHENTICATED, 403: "ACCESS_DENIED: not the pin's creator",
    404: "NOT_FOUND: no such pin", 410: GONE, 422: INVALID, 503: UNAVAILABLE}),
             openapi_extra={**body_doc(RenewRequest), **USER_DOC})
async def renew_pin(request: Request, user: UserDep, pin_id: PinP) -> dict[str, Any]:
    req = parse_body(RenewRequest, await request.body())
    ttl = parse_ttl(req.ttl, ["ttl"])
    answer: dict[str, Any] = await run_in_threadpool(holds.renew_pin, service(request), user,
                                                     pin_id, ttl, ["pin_id"])
    return answer


@router.delete("/pin/{pin_id}", responses=errors({
    401: UNAUTHENTICATED, 403: "ACCESS_DENIED: not the pin's creator",
    404: "NOT_FOUND: no such pin", 422: INVALID, 503: UNAVAILABLE}), openapi_extra=USER_DOC)
async def release_pin(request: Request, user: UserDep, pin_id: PinP) -> dict[str, Any]:
    answer: dict[str, Any] = await run_in_threadpool(holds.release, service(request), user,
                                                     pin_id, holds.PIN, ["pin_id"])
    return answer


@router.post("/snapshots", status_code=201, responses={201: created_doc(
    "The snapshot: `Location` reads it (`GET /snapshots/{id}`)"), **errors({
    401: UNAUTHENTICATED, 404: "WORKSPACE_GONE: a named scope's workspace is not live",
    409: "NO_COMMITS: a named scope has no commit yet", 422: INVALID,
    503: UNAVAILABLE})}, openapi_extra={**body_doc(SnapshotRequest), **USER_DOC})
async def create_snapshot(request: Request, user: UserDep) -> JSONResponse:
    req = parse_body(SnapshotRequest, await request.body())
    scopes = sorted({parse_scope(s, "scopes") for s in req.scopes})
    answer = await run_in_threadpool(holds.create_snapshot, service(request), user, scopes)
    return created(request, answer, f"/snapshots/{answer['id']}")


@router.post("/workspaces/{workspace_id}/snapshots", status_code=201, responses={
    201: created_doc("The snapshot: `Location` reads it (`GET /snapshots/{id}`)"), **errors({
    401: UNAUTHENTICATED, 404: "NOT_FOUND: no such workspace of the caller",
    409: "NO_COMMITS: no scope of the workspace has a commit yet", 422: INVALID,
    503: UNAVAILABLE})},
             openapi_extra=USER_DOC)
async def snapshot_workspace(request: Request, user: UserDep,
                             workspace_id: Annotated[str, Path(max_length=64)],
                             ) -> JSONResponse:
    svc = service(request)

    def run() -> dict[str, Any]:
        scopes = holds.workspace_scopes(svc, user, workspace_id)
        return holds.create_snapshot(svc, user, scopes, workspace_id)

    answer = await run_in_threadpool(run)
    return created(request, answer, f"/snapshots/{answer['id']}")


@router.get("/workspaces/{workspace_id}/snapshots", responses=errors({
    401: UNAUTHENTICATED, 404: "NOT_FOUND: no live workspace of yours with that id (one "
    "answer for all)", 422: INVALID, 503: UNAVAILABLE}), openapi_extra=USER_DOC)
def list_workspace_snapshots(request: Request, user: UserDep,
                             workspace_id: Annotated[str, Path(max_length=64)],
                             ) -> dict[str, Any]:
    """The snapshots taken of the workspace, newest first, released ones with their
    `state`; for whoever may see the workspace (as `GET /workspaces/{id}`)."""
    return {"snapshots": holds.workspace_snapshots(service(request), user, workspace_id,
                                                   is_admin(request))}


@router.get("/snapshots/{snapshot_id}", responses=errors({
    401: UNAUTHENTICATED, 404: "NOT_FOUND: no such snapshot", 422: INVALID,
    503: UNAVAILABLE}), openapi_extra=USER_DOC)
def show_snapshot(request: Request, user: UserDep, snapshot_id: SnapshotP) -> dict[str, Any]:
    return holds.show(service(request), snapshot_id, holds.SNAPSHOT, ["snapshot_id"])


@router.delete("/snapshots/{snapshot_id}", responses=errors({
    401: UNAUTHENTICATED, 403: "ACCESS_DENIED: not the snapshot's creator",
    404: "NOT_FOUND: no such snapshot", 422: INVALID, 503: UNAVAILABLE}),
               openapi_extra=USER_DOC)
async def release_snapshot(request: Request, user: UserDep,
                           snapshot_id: SnapshotP) -> dict[str, Any]:
    answer: dict[str, Any] = await run_in_threadpool(holds.release, service(request), user,
                                                     snapshot_id, holds.SNAPSHOT, ["snapshot_id"])
    return answer
