"""Schema routes: PUT and GET /schemas/{org}/{team}, GET /schemas (the built-ins).

Setting a schema is an admin's act; it is a commit on the scope's branch like any write
(memory/schemas.py says how it is stored). Reading it needs only a caller.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from starlette.responses import JSONResponse

from ampup_memory.auth import Authenticator
from ampup_memory.memory.api import (
    CAP,
    GONE_DOC,
    INVALID,
    UNAUTHENTICATED,
    USER_DOC,
    AtCommitQ,
    BranchQ,
    PinQ,
    SnapshotQ,
    UserDep,
    UserOnlyDep,
    _headers,
    admin_author,
    service,
)
from ampup_memory.memory.schemas import PutSchema, get_schema, list_builtins, set_schema
from ampup_memory.memory.scopes import scope_of_parts
from ampup_memory.timefmt import Instant
from ampup_memory.web.admin import AdminDep
from ampup_memory.web.body import parse_body
from ampup_memory.web.conditional import (
    PRECONDITION_DOC,
    READ_PRECONDITION_DOC,
    Condition,
    condition,
    conditional_doc,
    etag_response,
    quote,
    read_answer,
)
from ampup_memory.web.openapi import body_doc, errors, merged
from ampup_memory.web.query import StrictQueryRoute

router = APIRouter(tags=["schemas"], route_class=StrictQueryRoute)
UNAVAILABLE = "UNAVAILABLE: AmpUp Memory is not available in this process"
NamePart = Annotated[str, Path(max_length=64, description="Org or team name.")]
ConditionDep = Annotated[Condition, Depends(condition)]


def _etag(answer: dict[str, Any]) -> dict[str, str]:
    """The schema's version (memory/schemas.py `schema_etag`): the commit that set it. An
    answer with its ``history`` (oldest first) is the newest version's: read as of a past
    time, the shown version's commit stayed while a later version grew the history, and a
    conditional read answered 304 over a stale list."""
    history = answer.get("history")
    commit = history[-1]["commit"] if history else answer.get("commit")
    return {"ETag": quote(commit)} if commit else {}


@router.put("/schemas/{org}/{team}", responses={200: etag_response(), **errors({
    401: "UNAUTHENTICATED: X-AmpUp-User names no valid user id",
    403: "ADMIN_DISABLED or ACCESS_DENIED: admin only", 404: "NOT_FOUND: unknown branch",
    409: f"CONFLICT: the ledger moved under the write; retry; {CAP}",
    412: PRECONDITION_DOC + " (If-None-Match: * and the scope has a schema)",
    422: INVALID + " (schema_invalid names the first problem)", 503: UNAVAILABLE})},
    dependencies=[AdminDep],
    openapi_extra=merged(body_doc(PutSchema), USER_DOC, conditional_doc()))
async def put_schema(request: Request, org: NamePart, team: NamePart,
                     cond: ConditionDep) -> Response:
    """Set the scope's schema on a branch (default main): ``{builtin}`` or ``{schema}``.
    With ``If-Match`` (an ETag from GET), only over that version; ``If-None-Match: *``:
    only where the branch has no schema yet."""
    auth: Authenticator = request.app.state.auth
    headers = _headers(request)  # admin credentials checked (AdminDep): who is committing
    req = parse_body(PutSchema, await request.body())
    author = admin_author(auth, headers)
    result: dict[str, Any] = await run_in_threadpool(
        set_schema, service(request), author, str(scope_of_parts(org, team)), req, cond)
    return JSONResponse(result, headers=_etag(result))


@router.get("/schemas/{org}/{team}", responses={
    200: etag_response("The schema; its version (commit) in ETag when there is one"),
    304: {"description": "Not Modified: If-None-Match names the current ETag"},
    **errors({401: UNAUTHENTICATED,
              404: "NOT_FOUND: unknown branch or at_commit, unknown pin or snapshot",
              410: GONE_DOC, 412: READ_PRECONDITION_DOC, 422: INVALID, 503: UNAVAILABLE})},
    openapi_extra=merged(USER_DOC, conditional_doc(read=True)))
def read_schema(
    request: Request, user: UserDep, org: NamePart, team: NamePart, cond: ConditionDep,
    branch: BranchQ = None,
    at_commit: AtCommitQ = None,
    as_of: Annotated[Instant | None, Query(description="Valid time; default now.")] = None,
    history: Annotated[bool, Query(description="Every version with its window.")] = False,
    pin: PinQ = None,
    snapshot: SnapshotQ = None,
) -> Response:
    """The schema in force (``schema: null`` when the scope has none)."""
    scope = str(scope_of_parts(org, team))
    answer = get_schema(service(request), scope, branch, at_commit, as_of, history, pin, snapshot)
    return read_answer(cond, answer, _etag(answer).get("ETag"))


@router.get("/schemas", responses=errors({401: UNAUTHENTICATED}), openapi_extra=USER_DOC,
            dependencies=[UserOnlyDep])
def builtin_schemas(request: Request) -> dict[str, Any]:
    """The built-in schemas, in full."""
    return list_builtins()
