"""Schema routes: PUT and GET /schemas/{org}/{team}, GET /schemas (the built-ins).

Setting a schema is an admin's act; it is a commit on the scope's branch like any write
(memory/schemas.py says how it is stored). Reading it needs only a caller.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from fastapi.concurrency import run_in_threadpool

from ampup_memory.auth import USER_HEADER, Authenticator
from ampup_memory.memory.acl import valid_id
from ampup_memory.memory.api import (
    INVALID,
    UNAUTHENTICATED,
    USER_DOC,
    AtCommitQ,
    BranchQ,
    _headers,
    _user,
    service,
)
from ampup_memory.memory.schemas import PutSchema, get_schema, list_builtins, set_schema
from ampup_memory.timefmt import Instant
from ampup_memory.web.body import parse_body
from ampup_memory.web.openapi import body_doc, errors

router = APIRouter(tags=["schemas"])
UNAVAILABLE = "UNAVAILABLE: AmpUp Memory is not available in this process"
NamePart = Annotated[str, Path(max_length=64, description="Org or team name.")]


@router.put("/schemas/{org}/{team}", responses=errors({
    403: "ADMIN_DISABLED or ACCESS_DENIED: admin only", 404: "NOT_FOUND: unknown branch",
    409: "CONFLICT: the ledger moved under the write; retry",
    422: INVALID + " (schema_invalid names the first problem)", 503: UNAVAILABLE}),
    openapi_extra=body_doc(PutSchema))
async def put_schema(request: Request, org: NamePart, team: NamePart) -> dict[str, Any]:
    """Set the scope's schema on a branch (default main): ``{builtin}`` or ``{schema}``."""
    auth: Authenticator = request.app.state.auth
    auth.require_admin(_headers(request))
    req = parse_body(PutSchema, await request.body())
    named = request.headers.get(USER_HEADER, "").strip()
    author = named if named and valid_id(named) else "admin"
    result: dict[str, Any] = await run_in_threadpool(
        set_schema, service(request), author, f"{org}/{team}", req)
    return result


@router.get("/schemas/{org}/{team}", responses=errors({
    401: UNAUTHENTICATED, 404: "NOT_FOUND: unknown branch or at_commit", 422: INVALID,
    503: UNAVAILABLE}), openapi_extra=USER_DOC)
def read_schema(
    request: Request, org: NamePart, team: NamePart, branch: BranchQ = None,
    at_commit: AtCommitQ = None,
    as_of: Annotated[Instant | None, Query(description="Valid time; default now.")] = None,
    history: Annotated[bool, Query(description="Every version with its window.")] = False,
) -> dict[str, Any]:
    """The schema in force (``schema: null`` when the scope has none)."""
    _user(request)
    return get_schema(service(request), f"{org}/{team}", branch, at_commit, as_of, history)


@router.get("/schemas")
def builtin_schemas() -> dict[str, Any]:
    """The built-in schemas, in full."""
    return list_builtins()
