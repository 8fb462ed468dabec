"""AmpUp-side views of the AMP cells for the inspector (and any client), outside the AMP
face so its responses keep exactly the fields the AMP v0.1 contract allows:

- ``GET /amp-cells``: a page of the caller's readable cells, as ``GET /amp/v1/memories``
  lists them, each with its decay score now and the time its decay clock runs from;
- ``GET /amp-lifecycle``: the recent lifecycle passes with how many cells were in each
  status after each one (admin only: the counts cover every owner's cells).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.concurrency import run_in_threadpool

from ampup_memory.amp.api import (
    ADMIN_ERRORS,
    ERRORS,
    CallerDep,
    LimitQ,
    OffsetQ,
    OwnerQ,
    StatusQ,
    TypeQ,
    _svc,
)
from ampup_memory.amp.model import ListQuery, Status
from ampup_memory.amp.store.base import PASS_HISTORY
from ampup_memory.timefmt import format_time
from ampup_memory.web.admin import AdminDep, is_admin
from ampup_memory.web.body import DECIMAL
from ampup_memory.web.query import StrictQueryRoute

router = APIRouter(tags=["amp cells"], route_class=StrictQueryRoute)


@router.get("/amp-cells", responses=ERRORS)
def amp_cells(request: Request, caller: CallerDep, owner_id: OwnerQ = None,
              type: TypeQ = None, status: StatusQ = Status.active, limit: LimitQ = 20,
              offset: OffsetQ = 0) -> dict[str, Any]:
    """The page ``GET /amp/v1/memories`` lists with the same parameters (readable cells,
    newest first), each cell with ``decay_score`` at ``now`` and ``decay_clock`` (the
    latest of created, accessed, updated), and ``admin``: whether the request carries
    admin credentials (then ``GET /amp-lifecycle`` answers it). Listing moves no decay
    clock."""
    query = ListQuery(owner_id=owner_id, type=type, status=status, limit=limit,
                      offset=offset)
    # A client (the inspector) asks GET /amp-lifecycle only when it will answer: a 403 it
    # expects still shows in a browser's console as a failed load.
    return {**_svc(request).list_decay(caller.agent_id, query), "admin": is_admin(request)}


@router.get("/amp-lifecycle", responses=ADMIN_ERRORS, dependencies=[AdminDep])
async def amp_lifecycle(request: Request, limit: Annotated[int, Query(
        ge=1, le=PASS_HISTORY, description="How many passes, newest first."), DECIMAL] = 50,
        ) -> dict[str, Any]:
    """The latest recorded lifecycle passes, newest first: when, by which process, cells
    evaluated, transitions, purged, and ``states``: how many cells were in each status
    when the pass ended. Admin only (``X-AMP-Admin-Token`` or an admin key)."""
    passes = await run_in_threadpool(_svc(request).store.recent_passes, limit)
    return {"passes": [{
        "started_at": format_time(p.started_at), "finished_at": format_time(p.finished_at),
        "holder": p.holder, "evaluated": p.evaluated, "transitions": p.transitions,
        "purged": p.purged, "states": p.states} for p in passes]}
