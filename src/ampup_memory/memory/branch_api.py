"""Branch and merge routes: POST/GET /branches, DELETE /branches/{name}, POST /merge."""

from __future__ import annotations

from functools import partial
from typing import Annotated, Any

from fastapi import APIRouter, Path, Request
from fastapi.concurrency import run_in_threadpool
from starlette.responses import JSONResponse

from ampup_memory.memory import branches
from ampup_memory.memory.api import (
    CAP,
    INVALID,
    UNAUTHENTICATED,
    UNAVAILABLE,
    USER_DOC,
    ScopeQ,
    UserDep,
    service,
)
from ampup_memory.memory.branches import CreateBranch, MergeRequest
from ampup_memory.memory.scopes import BRANCH_RE, BRANCH_SCHEMA
from ampup_memory.web.admin import is_admin
from ampup_memory.web.body import parse_body
from ampup_memory.web.openapi import body_doc, errors
from ampup_memory.web.query import StrictQueryRoute

router = APIRouter(tags=["branches"], route_class=StrictQueryRoute)

# The name of a branch that exists: an empty one (`DELETE /branches/`) names none, though
# an empty `branch` elsewhere reads main.
NamePath = Annotated[str, Path(min_length=1, json_schema_extra={
    **{k: v for k, v in BRANCH_SCHEMA.items() if k != "description"},
    "pattern": BRANCH_RE.pattern}, description="Branch name (may hold '/').")]



@router.post("/branches", status_code=201, responses=errors({
    401: UNAUTHENTICATED, 404: "NOT_FOUND: unknown scope commit, `from` branch or at_commit",
    409: "BRANCH_EXISTS: the name is taken", 422: INVALID, 503: UNAVAILABLE}),
    openapi_extra={**body_doc(CreateBranch), **USER_DOC})
async def create_branch(request: Request, user: UserDep) -> JSONResponse:
    req = parse_body(CreateBranch, await request.body())
    made = await run_in_threadpool(branches.create, service(request), user, req)
    return JSONResponse(made, status_code=201)


@router.get("/branches", responses=errors({
    401: UNAUTHENTICATED, 404: "WORKSPACE_GONE: the scope's workspace is not live",
    422: INVALID, 503: UNAVAILABLE}), openapi_extra=USER_DOC)
def list_branches(request: Request, user: UserDep, scope: ScopeQ) -> dict[str, Any]:
    return branches.list_branches(service(request), scope)


@router.delete("/branches/{name:path}", responses=errors({
    401: UNAUTHENTICATED, 403: "ACCESS_DENIED: neither the branch's creator nor admin",
    404: "NOT_FOUND: no such branch",
    409: "BRANCH_PROTECTED (main), BRANCH_HAS_CHILDREN or BRANCH_HELD",
    422: INVALID, 503: UNAVAILABLE}), openapi_extra=USER_DOC)
async def delete_branch(request: Request, user: UserDep,
                        name: NamePath, scope: ScopeQ) -> dict[str, Any]:
    result: dict[str, Any] = await run_in_threadpool(
        branches.delete, service(request), user, scope, name, is_admin(request))
    return result


@router.post("/merge", responses=errors({
    401: UNAUTHENTICATED, 403: "ACCESS_DENIED: the merge would set main's schema, which "
    "takes admin rights", 404: "NOT_FOUND: unknown branch",
    409: "MERGE_CONFLICT: details.conflicts = [{entity, predicate, base, ours, theirs}]; "
    f"nothing was written; {CAP}", 422: INVALID, 503: UNAVAILABLE}),
    openapi_extra={**body_doc(MergeRequest), **USER_DOC})
async def merge(request: Request, user: UserDep) -> dict[str, Any]:
    req = parse_body(MergeRequest, await request.body())
    result: dict[str, Any] = await run_in_threadpool(
        partial(branches.merge, service(request), user, req, admin=is_admin(request)))
    return result
