"""REST routes of search: ``POST /search`` (facts) and ``POST /query`` (passages; typed
``find: "facts"``/``"entities"`` are answered by core's memory/query.py).

Identity comes first (401 before 422), then the body. ``format: "text"`` answers
``text/plain``; everything else is JSON, errors in the one envelope.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

from fastapi import APIRouter, FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from starlette.responses import JSONResponse, PlainTextResponse, Response

from ampup_memory.auth import USER_HEADER
from ampup_memory.background import periodic
from ampup_memory.errors import ServiceUnavailable, field_error
from ampup_memory.memory.acl import ID_PATTERN
from ampup_memory.memory.api import UserDep
from ampup_memory.memory.api import service as memory_service
from ampup_memory.memory.query import TypedQuery
from ampup_memory.memory.query import run as typed_query
from ampup_memory.memory.service import MemoryService
from ampup_memory.search.engine import SearchEngine
from ampup_memory.search.feed import Feed
from ampup_memory.search.index.base import SearchIndex
from ampup_memory.search.index.registry import open_index
from ampup_memory.search.rerank import Slots, build_rerank
from ampup_memory.search.service import FactSearchRequest, PassageQueryRequest, SearchService
from ampup_memory.web.body import parse_body
from ampup_memory.web.openapi import body_doc, errors, header_doc
from ampup_memory.web.query import StrictQueryRoute

log = logging.getLogger("ampup_memory.search")
_T = TypeVar("_T")
_Req = TypeVar("_Req", FactSearchRequest, PassageQueryRequest)
router = APIRouter(tags=["search"], route_class=StrictQueryRoute)
ERRORS = errors({
    401: "UNAUTHENTICATED / MISSING_USER: no caller, or not a valid user id",
    404: "NOT_FOUND: unknown branch, or at_commit no commit of the scope and branch; "
         "unknown pin or snapshot",
    410: "PIN_EXPIRED / PIN_RELEASED / SNAPSHOT_RELEASED: the pin or snapshot no longer "
         "holds anything",
    422: "VALIDATION_ERROR: details.errors = [{loc, msg, type}]",
    503: "UNAVAILABLE: search is not available, or the index cannot reach the ledger; "
         "with the reranker, AMPUP_MEMORY_RERANK_QUEUE searches already wait for it "
         "(Retry-After)",
})
USER_DOC = header_doc(USER_HEADER, "The calling user (keys off; keys on: the key's user).",
                      pattern=ID_PATTERN)


def search_service(request: Request) -> SearchService:
    svc: SearchService | None = getattr(request.app.state, "search", None)
    if svc is None:
        raise ServiceUnavailable("Search is not available in this process.")
    return svc


_CITE = {"type": "object", "required": ["episode", "unit"],
         "properties": {"episode": {"type": "string"}, "unit": {"type": "integer"}}}
_SOURCE = {"type": "object", "required": ["episode", "unit", "kind", "text", "source",
                                          "occurred_at"],
           "properties": {"episode": {"type": "string"}, "unit": {"type": "integer"},
                          "kind": {"type": "string"}, "text": {"type": "string"},
                          "source": {"type": "string"},
                          "occurred_at": {"type": "string", "format": "date-time"}}}
SEARCH_ANSWER = {
    "type": "object",
    "required": ["scope", "branch", "query", "as_of", "at_commit", "window", "results",
                 "sources"],
    "properties": {
        "results": {"type": "array", "description": "Ranked facts, best first.", "items": {
            "type": "object", "required": ["id", "entity", "predicate", "value", "quote",
                                           "cites", "score", "parts"],
            "properties": {"cites": {"type": "array", "items": _CITE}}}},
        "sources": {"type": "array", "items": _SOURCE, "description":
                    "Matching source text no fact in results cites (at most 3 units, best "
                    "first): the text answer's 'source text no fact cites'."},
    },
}


@router.post("/search",
             responses={**ERRORS, 200: {"content": {
                 "application/json": {"schema": SEARCH_ANSWER}, "text/plain": {}}}},
             openapi_extra={**body_doc(FactSearchRequest), **USER_DOC})
async def search(request: Request, user: UserDep) -> Response:
    svc = search_service(request)
    req = parse_body(FactSearchRequest, await request.body())
    answer = await _in_turn(request, svc.slots(req.rerank), svc.search, user, req)
    if isinstance(answer, str):
        return PlainTextResponse(answer)
    return JSONResponse(answer)


def _query_doc() -> dict[str, Any]:
    """POST /query's body: passages (ranked text) or a typed query (facts, entities)."""
    refs = [body_doc(m)["requestBody"]["content"]["application/json"]["schema"]
            for m in (PassageQueryRequest, TypedQuery)]
    return {"requestBody": {"required": True, "content": {
        "application/json": {"schema": {"oneOf": refs}}}}}


FINDS = ("passages", "facts", "entities")
_NO_FIND = object()  # no "find" key, or no JSON object: parse_body answers


def _find(raw: bytes) -> object:
    try:
        data = json.loads(raw or b"{}")
    except (ValueError, RecursionError):
        return _NO_FIND  # parse_body answers malformed or too deeply nested JSON
    return data.get("find", _NO_FIND) if isinstance(data, dict) else _NO_FIND


@router.post("/query", responses=ERRORS, openapi_extra={**_query_doc(), **USER_DOC})
async def query(request: Request, user: UserDep) -> JSONResponse:
    raw = await request.body()
    find = _find(raw)
    if find in ("facts", "entities"):  # typed: current values through core's view and ACL
        typed = parse_body(TypedQuery, raw)
        return JSONResponse(await run_in_threadpool(
            typed_query, memory_service(request), user, typed))
    if find is not _NO_FIND and find not in FINDS:  # 1, null or "stuff": one answer
        raise field_error(["find"], "find is one of: " + ", ".join(FINDS), "literal_error")
    svc = search_service(request)
    req = parse_body(PassageQueryRequest, raw)
    return JSONResponse(await _in_turn(request, svc.slots(req.rerank), svc.query, user, req))


async def _in_turn(request: Request, slots: Slots | None,
                   search: Callable[[str, _Req], _T], user: str, req: _Req) -> _T:
    """``search(user, req)`` on a request thread; a reranked search (``slots``:
    SearchService.slots) first waits for its slot on the event loop, holding no thread,
    or is refused when the line is full (rerank.py, `Slots`). Its client may have given
    up by its turn: it is then not run, or a burst of clients that time out and retry
    would fill the line with searches nobody reads (docs/performance.md, "Search: the
    reranker under concurrent load")."""
    if slots is None:
        return await run_in_threadpool(search, user, req)
    async with slots.turn():
        if await request.is_disconnected():
            log.info("a reranked search's client left while it waited; not run")
            raise ServiceUnavailable("The client left before its search's turn.")
        return await run_in_threadpool(search, user, req)


def _open(runtime: Any) -> tuple[SearchService, SearchIndex, Feed]:
    memory: MemoryService = runtime.memory
    index = open_index(runtime.settings.resolved_index_uri,
                       runtime.settings.search_ann_min_vectors, runtime.settings.ann_params)
    try:
        rerank = build_rerank(runtime.settings)
    except BaseException:
        index.close()
        raise
    engine = SearchEngine(index, runtime.embedder, rerank)
    engine.ensure_model()
    feed = Feed(memory, engine)
    feed.attach()
    return SearchService(engine, memory.principal, feed.reach,
                         resolve_held=memory.holds.resolve, clock=memory.now_on), index, feed


def open_search(runtime: Any) -> tuple[SearchService, SearchIndex]:
    """The search service over the index at ``settings.resolved_index_uri``, fed from
    core's commits (this process's on write, others' before each search); the caller
    closes the index. Shared by the HTTP app and the stdio MCP process."""
    svc, index, _feed = _open(runtime)
    return svc, index


def mount(app: FastAPI, runtime: Any) -> SearchService:
    """Open the index, feed it from core's commits (on every commit of this process,
    before each search, at start-up and on a timer) and serve the routes."""
    settings = runtime.settings
    svc, index, feed = _open(runtime)
    app.state.search = svc
    app.state.search_feed = feed

    def catch_up() -> str | None:
        done = feed.catch_up_all()
        return f"applied {done} commit(s)" if done else None

    # Catch up with commits of other processes: once at start-up, then every interval.
    refreshing = periodic(catch_up, settings.search_refresh_interval_seconds,
                          "search index refresh", log, first_at_start=True,
                          records=app.state.timers)

    @contextlib.asynccontextmanager
    async def feeding() -> AsyncIterator[None]:
        try:
            async with refreshing():
                yield
        finally:
            feed.detach()
            index.close()

    app.state.lifespan_hooks.append(feeding)
    app.include_router(router)
    return svc


