"""``GET /status``: the admin's view of a running server (see ``ops/status.py``)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool

from ampup_memory.ops.status import collect
from ampup_memory.web.admin import AdminDep
from ampup_memory.web.openapi import errors
from ampup_memory.web.query import StrictQueryRoute

router = APIRouter(route_class=StrictQueryRoute)

STATUS_ERRORS = errors(
    {403: "ADMIN_DISABLED (no admin credential configured) or ACCESS_DENIED"})


@router.get("/status", tags=["admin"], responses=STATUS_ERRORS, dependencies=[AdminDep])
async def status(request: Request) -> dict[str, Any]:
    """Versions, stores and their sizes, scopes with their commits and index lag, the
    timers of this process and their last runs, the embedder. Admin only (the
    ``X-AMP-Admin-Token`` header or an admin key)."""
    state = request.app.state
    return await run_in_threadpool(collect, state.runtime, getattr(state, "search_feed", None),
                                   state.timers)
