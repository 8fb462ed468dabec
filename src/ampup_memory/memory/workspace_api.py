"""Workspace routes: POST /workspaces, GET /workspaces, GET and DELETE /workspaces/{id},
POST /workspaces/{id}/renew.

Any authenticated user may create one; only its creator (or an admin) sees, reads the usage
of or deletes it, and every other id is the same 404 (no probing for ids). The workspace's
org then works in every route as any org (workspaces.py).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from fastapi.concurrency import run_in_threadpool
from starlette.responses import JSONResponse

from ampup_memory.memory.api import (
    INVALID,
    UNAUTHENTICATED,
    USER_DOC,
    UserDep,
    service,
)
from ampup_memory.memory.snapshots_api import RenewRequest
from ampup_memory.memory.workspaces import ID_PATTERN, CreateWorkspace
from ampup_memory.timefmt import parse_ttl
from ampup_memory.web.admin import is_admin, require_admin
from ampup_memory.web.body import parse_body
from ampup_memory.web.created import created as created_at
from ampup_memory.web.created import created_doc
from ampup_memory.web.openapi import body_doc, errors
from ampup_memory.web.query import StrictQueryRoute

router = APIRouter(tags=["workspaces"], route_class=StrictQueryRoute)
UNAVAILABLE = "UNAVAILABLE: AmpUp Memory is not available in this process"
NOT_FOUND = "NOT_FOUND: no live workspace of yours with that id (one answer for all)"
WorkspaceId = Annotated[str, Path(max_length=64, description="Workspace id (ws_…).",
                                  json_schema_extra={"pattern": ID_PATTERN})]



@router.post("/workspaces", status_code=201, responses={201: created_doc(
    "The workspace: `Location` reads it (`GET /workspaces/{id}`)"), **errors({
    401: UNAUTHENTICATED, 422: INVALID + " (bad name, ttl or caps)", 503: UNAVAILABLE})},
    openapi_extra={**body_doc(CreateWorkspace), **USER_DOC})
async def create_workspace(request: Request, user: UserDep) -> JSONResponse:
    req = parse_body(CreateWorkspace, await request.body())
    made = await run_in_threadpool(service(request).workspaces.create, user, req)
    return created_at(request, made, f"/workspaces/{made['id']}")


@router.get("/workspaces", responses=errors({
    401: UNAUTHENTICATED, 403: "ADMIN_DISABLED or ACCESS_DENIED: all=true without admin rights",
    422: INVALID, 503: UNAVAILABLE}), openapi_extra=USER_DOC)
def list_workspaces(
    request: Request, user: UserDep,
    all_users: Annotated[bool, Query(alias="all", description=(
        "Admin only: every user's live workspaces."))] = False,
) -> dict[str, Any]:
    if all_users:
        # Asked for everyone's: without admin rights that is the admin routes' 403, not
        # the caller's own list passed off as everyone's.
        require_admin(request)
    return {"workspaces": service(request).workspaces.listing(user, all_users)}


@router.get("/workspaces/{workspace_id}", responses=errors({
    401: UNAUTHENTICATED, 404: NOT_FOUND, 422: INVALID, 503: UNAVAILABLE}),
    openapi_extra=USER_DOC)
def get_workspace(request: Request, user: UserDep, workspace_id: WorkspaceId) -> dict[str, Any]:
    return service(request).workspaces.show(user, workspace_id, is_admin(request))


@router.post("/workspaces/{workspace_id}/renew", responses=errors({
    401: UNAUTHENTICATED, 404: NOT_FOUND, 422: INVALID + " (bad ttl)", 503: UNAVAILABLE}),
    openapi_extra={**body_doc(RenewRequest), **USER_DOC})
async def renew_workspace(request: Request, user: UserDep,
                          workspace_id: WorkspaceId) -> dict[str, Any]:
    """A new expiry: ``ttl`` from now (as on create). Its creator or an admin."""
    req = parse_body(RenewRequest, await request.body())
    ttl = parse_ttl(req.ttl, ["ttl"])
    result: dict[str, Any] = await run_in_threadpool(
        service(request).workspaces.renew, user, workspace_id, is_admin(request), ttl)
    return result


@router.delete("/workspaces/{workspace_id}", responses=errors({
    401: UNAUTHENTICATED, 404: NOT_FOUND, 422: INVALID, 503: UNAVAILABLE}),
    openapi_extra=USER_DOC)
async def delete_workspace(request: Request, user: UserDep,
                           workspace_id: WorkspaceId) -> dict[str, Any]:
    admin = is_admin(request)
    result: dict[str, Any] = await run_in_threadpool(
        service(request).workspaces.delete, user, workspace_id, admin)
    return result
