"""REST routes of search: ``POST /search`` (facts) and ``POST /query`` (passages).

Identity comes first (401 before 422), then the body. ``format: "text"`` answers
``text/plain``; everything else is JSON, errors in the one envelope.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from starlette.responses import JSONResponse, PlainTextResponse, Response

from ampup_memory.amp.service import parse_body
from ampup_memory.auth import USER_HEADER, Authenticator
from ampup_memory.errors import ServiceUnavailable, Unauthenticated
from ampup_memory.openapi import body_doc
from ampup_memory.search.engine import SearchEngine
from ampup_memory.search.index.base import SearchIndex, open_index
from ampup_memory.search.service import FactSearchRequest, PassageQueryRequest, SearchService
from ampup_memory.search.visibility import Principal, valid_entry

router = APIRouter(tags=["search"])
ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"description": "UNAUTHENTICATED / MISSING_USER"},
    422: {"description": "VALIDATION_ERROR"},
}


def search_service(request: Request) -> SearchService:
    svc: SearchService | None = getattr(request.app.state, "search", None)
    if svc is None:
        raise ServiceUnavailable("Search is not available in this process.")
    return svc


def caller_user(request: Request) -> str:
    """The principal's user: ``X-AmpUp-User`` in trust mode, the key's user with keys on."""
    auth: Authenticator = request.app.state.auth
    headers = {k.lower(): v for k, v in request.headers.items()}
    if auth.require_keys:
        user = auth.caller(headers).user_id
        if not user:
            raise Unauthenticated("This API key speaks for no AmpUp user.")
    else:
        user = headers.get(USER_HEADER, "").strip()
        if not user:
            raise Unauthenticated("The X-AmpUp-User header names the caller.",
                                  code="MISSING_USER")
    if not valid_entry(f"user:{user}"):
        raise Unauthenticated("The caller's user id is not a valid id.")
    return user


@router.post("/search",
             responses={**ERRORS, 200: {"content": {"application/json": {}, "text/plain": {}}}},
             openapi_extra=body_doc(FactSearchRequest))
async def search(request: Request) -> Response:
    user = caller_user(request)
    svc = search_service(request)
    req = parse_body(FactSearchRequest, await request.body())
    answer = await run_in_threadpool(svc.search, user, req)
    if isinstance(answer, str):
        return PlainTextResponse(answer)
    return JSONResponse(answer)


@router.post("/query", responses=ERRORS, openapi_extra=body_doc(PassageQueryRequest))
async def query(request: Request) -> JSONResponse:
    user = caller_user(request)
    svc = search_service(request)
    req = parse_body(PassageQueryRequest, await request.body())
    return JSONResponse(await run_in_threadpool(svc.query, user, req))


def open_search(runtime: Any,
                principal_of: Callable[[str], Principal] | None = None,
                catch_up: Callable[[str, str], None] | None = None,
                ) -> tuple[SearchService, SearchIndex]:
    """The search service over the index at ``settings.resolved_index_uri``; the caller
    closes the index. Shared by the HTTP app and the stdio MCP process."""
    index = open_index(runtime.settings.resolved_index_uri)
    engine = SearchEngine(index, runtime.embedder)
    engine.ensure_model()
    return SearchService(engine, principal_of or (lambda user: Principal(user)), catch_up), index


def mount(app: FastAPI, runtime: Any,
          principal_of: Callable[[str], Principal] | None = None,
          catch_up: Callable[[str, str], None] | None = None) -> SearchService:
    """Open the index at ``settings.resolved_index_uri`` and serve the routes."""
    svc, index = open_search(runtime, principal_of, catch_up)
    app.state.search = svc

    @contextlib.asynccontextmanager
    async def close_index() -> AsyncIterator[None]:
        try:
            yield
        finally:
            index.close()

    app.state.lifespan_hooks.append(close_index)
    app.include_router(router)
    return svc
