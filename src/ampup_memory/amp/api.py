"""AMP v0.1 REST routes under /amp/v1.

Bodies are read raw and parsed by the service, after identity (and, for PATCH, after the
access check): the contract orders checks identity 401 → access 403 → validation 422.
The OpenAPI schema still documents each body (see `ampup_memory.web.openapi`).

The listing routes are registered before ``/memories/{memory_id}``; a test asserts that
``/memories/query`` answers as a listing, not as a cell id.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from starlette.responses import JSONResponse

from ampup_memory.amp.model import (
    AMP_VERSION,
    MAX_CELL_SIZE_BYTES,
    MAX_OFFSET,
    MAX_PAGE_SIZE,
    CreateMemory,
    LifecycleRunRequest,
    ListQuery,
    MemoryCell,
    MemoryType,
    Page,
    PatchMemory,
    PurgeRequest,
    SearchPage,
    SearchRequest,
    Status,
    WriteReceipt,
)
from ampup_memory.amp.service import AmpService, cell_etag, write_answer
from ampup_memory.auth import Authenticator, Caller, header_map
from ampup_memory.errors import AmpError, Unauthenticated
from ampup_memory.settings import Settings
from ampup_memory.web import jsontext
from ampup_memory.web.admin import require_admin
from ampup_memory.web.body import DECIMAL, parse_body
from ampup_memory.web.conditional import (
    PRECONDITION_DOC,
    READ_PRECONDITION_DOC,
    Condition,
    check_read_if_match,
    condition,
    conditional_doc,
    etag_response,
    read_answer,
)
from ampup_memory.web.created import created, created_doc
from ampup_memory.web.head import is_head
from ampup_memory.web.openapi import body_doc, errors, merged
from ampup_memory.web.routing import segment_except

# Where server.py mounts this router (the AMP reference's prefix).
API_PREFIX = "/amp/v1"
router = APIRouter()


def _svc(request: Request) -> AmpService:
    svc: AmpService = request.app.state.amp
    return svc


def _auth(request: Request) -> Authenticator:
    auth: Authenticator = request.app.state.auth
    return auth


def _headers(request: Request) -> dict[str, str]:
    return header_map(request.headers)


def _caller(request: Request) -> Caller:
    return _auth(request).caller(_headers(request))


# A dependency, not a call in the body: FastAPI resolves dependencies before it validates
# query parameters, so a request without identity is 401 even when its query is invalid.
CallerDep = Annotated[Caller, Depends(_caller)]
ConditionDep = Annotated[Condition, Depends(condition)]




ERRORS = errors({
    401: "Missing or invalid identity (MISSING_AGENT_ID / UNAUTHENTICATED)",
    403: "ACCESS_DENIED: unknown, unreadable or deleted (one identical body)",
    422: "VALIDATION_ERROR",
})


@router.get("/health", tags=["meta"])
def health() -> dict[str, str]:
    return {"status": "ok", "amp_version": AMP_VERSION}


# HEAD too (load balancers and uptime checks probe with it), outside the API schema.
router.add_api_route("/health", health, methods=["HEAD"], include_in_schema=False)


@router.get("/spec", tags=["meta"])
def spec(request: Request) -> dict[str, Any]:
    settings: Settings = request.app.state.settings
    svc = _svc(request)
    limit = svc.scoring_limit
    return {
        "amp_version": AMP_VERSION,
        "capabilities": {
            "mcp_compatible": True,
            "storage_backends": [svc.store.info.name],
            "api_keys_required": settings.require_keys,
            "max_page_size": MAX_PAGE_SIZE,
            "scoring_patch_limit": (
                {"max_patches": limit.max_patches, "window_seconds": limit.window_seconds}
                if limit.enabled else None
            ),
            "embedding": {
                # Exactly the contract's two keys; the model's name is in `settings`.
                "provider": settings.embedding_provider,
                "dimensions": svc.embedder.dimensions,
            },
            "max_cell_size_bytes": MAX_CELL_SIZE_BYTES,
            "retention_days": settings.retention_days,
            "lifecycle_scheduler": {
                "enabled": settings.lifecycle_enabled,
                "interval_seconds": settings.lifecycle_interval_seconds,
                "manual_run_endpoint": "/amp/v1/lifecycle/run",
            },
        },
    }


def _created_by_from_body(raw: bytes) -> str | None:
    try:
        data = jsontext.loads(raw)
        value = data["identity"]["created_by"]
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        return None
    return value if isinstance(value, str) and value.strip() else None


@router.post(
    "/memories",
    status_code=201,
    response_model=MemoryCell,
    tags=["memories"],
    responses={201: created_doc("The new cell, its version in `ETag`",
                           etag_response()["headers"]), **ERRORS,
               **errors({413: "CELL_TOO_LARGE"})},
    openapi_extra=body_doc(CreateMemory),
)
async def create_memory(request: Request) -> JSONResponse:
    """The new cell, with its version in `ETag`: a write that sends it back in `If-Match`
    lands only over the cell as created (docs/api.md, Conditional writes)."""
    caller = _auth(request).optional_caller(_headers(request))
    raw = await request.body()
    if caller is None and _created_by_from_body(raw) is None:
        raise Unauthenticated("The X-AMP-Agent-ID header is required.", code="MISSING_AGENT_ID")
    agent = caller.agent_id if caller else None
    cell = await run_in_threadpool(_svc(request).create, agent, raw)
    return created(request, cell.wire(), f"{API_PREFIX}/memories/{cell.id}",
                   headers={"ETag": cell_etag(cell)})


def _list(
    request: Request,
    caller: Caller,
    owner_id: str | None,
    type: MemoryType | None,
    status: Status,
    limit: int,
    offset: int,
) -> dict[str, Any]:
    query = ListQuery(owner_id=owner_id, type=type, status=status, limit=limit, offset=offset)
    return _svc(request).list_cells(caller.agent_id, query)


OwnerQ = Annotated[str | None, Query(description="Only cells owned by this id")]
TypeQ = Annotated[MemoryType | None, Query(description="Only cells of this type")]
StatusQ = Annotated[Status, Query(description="Lifecycle status (deleted is never listed)")]
LimitQ = Annotated[int, Query(ge=1, le=MAX_PAGE_SIZE), DECIMAL]
OffsetQ = Annotated[int, Query(ge=0, le=MAX_OFFSET), DECIMAL]


@router.get("/memories", response_model=Page, tags=["memories"], responses=ERRORS)
def list_memories(
    request: Request,
    caller: CallerDep,
    owner_id: OwnerQ = None,
    type: TypeQ = None,
    status: StatusQ = Status.active,
    limit: LimitQ = 20,
    offset: OffsetQ = 0,
) -> dict[str, Any]:
    """Readable cells, newest first. Paging counts only cells this caller may read."""
    return _list(request, caller, owner_id, type, status, limit, offset)


@router.get("/memories/query", response_model=Page, tags=["memories"], responses=ERRORS)
def query_memories(
    request: Request,
    caller: CallerDep,
    owner_id: OwnerQ = None,
    type: TypeQ = None,
    status: StatusQ = Status.active,
    limit: LimitQ = 20,
    offset: OffsetQ = 0,
) -> dict[str, Any]:
    """The same listing under the reference's second name."""
    return _list(request, caller, owner_id, type, status, limit, offset)


@router.post(
    "/memories/search",
    response_model=SearchPage,
    tags=["memories"],
    responses=ERRORS,
    openapi_extra=body_doc(SearchRequest),
)
async def search_memories(request: Request) -> dict[str, Any]:
    caller = _caller(request)
    req = parse_body(SearchRequest, await request.body(), nul=True)
    result: dict[str, Any] = await run_in_threadpool(_svc(request).search, caller.agent_id, req)
    return result


# GET /memories/search is a wrong method, not a read of a cell called "search".
CELL_PATH = "/memories/" + segment_except("memory_id", "search", "query")


@router.get(CELL_PATH, response_model=MemoryCell, tags=["memories"],
            responses={200: etag_response(), 304: {"description": "Not Modified: "
                       "If-None-Match names the current ETag"}, **ERRORS,
                       **errors({412: READ_PRECONDITION_DOC})},
            openapi_extra=conditional_doc(read=True))
def get_memory(request: Request, memory_id: str, cond: ConditionDep) -> Response:
    """The cell, with its version in `ETag` (docs/api.md, Conditional writes). Counts an
    access when it answers the cell or a 304; a HEAD or a 412 hands over no cell and
    counts none."""
    caller = _caller(request)
    svc = _svc(request)
    if is_head(request.scope):
        seen = svc.peek(memory_id, caller.agent_id)
        return read_answer(cond, seen.wire(), cell_etag(seen))
    if cond.if_match is not None:
        check_read_if_match(cond, cell_etag(svc.peek(memory_id, caller.agent_id)))
    cell = svc.get(memory_id, caller.agent_id)
    return read_answer(cond, cell.wire(), cell_etag(cell))


@router.patch(
    CELL_PATH,
    response_model=MemoryCell | WriteReceipt,
    tags=["memories"],
    responses={200: etag_response(), **ERRORS,
               **errors({409: "INVALID_TRANSITION", 412: PRECONDITION_DOC,
                         413: "CELL_TOO_LARGE", 429: "RATE_LIMITED"})},
    openapi_extra=merged(body_doc(PatchMemory), conditional_doc()),
)
async def patch_memory(request: Request, memory_id: str, cond: ConditionDep) -> JSONResponse:
    """The changed cell, or only `{"id": …}` when the caller may write but not read it
    (`writable_by` grants no read). Only the cell's owner or creator may send
    `access_policy` or `identity`; anyone else gets the one 403. With `If-Match`, only
    over that version of the cell (412 otherwise); the new version is in `ETag`, for a
    caller who may read the cell."""
    caller = _caller(request)
    raw = await request.body()
    cell = await run_in_threadpool(_svc(request).patch, memory_id, caller.agent_id, raw,
                                   cond)
    answer = write_answer(cell, caller.agent_id)
    # A blind writer (writable_by, no read) learns no more of the cell than its id.
    headers = {"ETag": cell_etag(cell)} if "content" in answer else None
    return JSONResponse(answer, headers=headers)


@router.delete(
    CELL_PATH,
    status_code=204,
    tags=["memories"],
    responses={**ERRORS, **errors({409: "INVALID_TRANSITION: only archived cells",
                                   412: PRECONDITION_DOC})},
    openapi_extra=conditional_doc(),
)
def delete_memory(request: Request, memory_id: str, cond: ConditionDep) -> Response:
    caller = _caller(request)
    _svc(request).delete(memory_id, caller.agent_id, cond)
    return Response(status_code=204)


ADMIN_ERRORS = errors({
    403: "ADMIN_DISABLED (no admin credential configured) or ACCESS_DENIED",
    422: "VALIDATION_ERROR",
})


@router.post("/lifecycle/run", tags=["admin"],
             responses={**ADMIN_ERRORS, **errors({503: "UNAVAILABLE: another pass held on"})},
             openapi_extra=body_doc(LifecycleRunRequest, required=False))
async def lifecycle_run(request: Request) -> dict[str, Any]:
    require_admin(request)
    req = parse_body(LifecycleRunRequest, await request.body(), nul=True)
    wait = request.app.state.settings.lifecycle_run_wait_seconds
    report = await run_in_threadpool(_svc(request).run_lifecycle, req, wait)
    return report.wire()


@router.post("/lifecycle/purge", tags=["admin"],
             responses={**ADMIN_ERRORS,
                        **errors({409: "INVALID_TRANSITION or RETENTION_WINDOW"})},
             openapi_extra=body_doc(PurgeRequest))
async def lifecycle_purge(request: Request) -> dict[str, int]:
    require_admin(request)
    req = parse_body(PurgeRequest, await request.body(), nul=True)
    purged = await run_in_threadpool(_svc(request).purge, req.id)
    return {"purged": purged}


__all__ = ["router", "AmpError"]
