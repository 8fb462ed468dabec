"""Browsing routes: GET /scopes, GET /episodes, GET /entities (listings, paged; browse.py)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request

from ampup_memory.blank import NotBlankText
from ampup_memory.memory import browse
from ampup_memory.memory.api import (
    INVALID,
    READ_ERRORS,
    UNAUTHENTICATED,
    USER_DOC,
    AtCommitQ,
    BranchQ,
    PinQ,
    ScopeQ,
    SnapshotQ,
    UserDep,
    service,
)
from ampup_memory.memory.episodes import MAX_ENTITY, EpisodeId
from ampup_memory.memory.snapshots import read_view
from ampup_memory.web.body import DECIMAL
from ampup_memory.web.openapi import errors
from ampup_memory.web.query import StrictQueryRoute

router = APIRouter(tags=["ampup memory"], route_class=StrictQueryRoute)

LimitQ = Annotated[int, Query(ge=1, le=browse.MAX_PAGE, description="Page size."), DECIMAL]


@router.get("/scopes", responses=errors({
    401: UNAUTHENTICATED, 422: INVALID,
    503: "UNAVAILABLE: AmpUp Memory is not available in this process"}),
    openapi_extra=USER_DOC)
def list_scopes(request: Request, user: UserDep) -> dict[str, Any]:
    return browse.scopes(service(request), user)


@router.get("/episodes", responses=READ_ERRORS, openapi_extra=USER_DOC)
def list_episodes(request: Request, user: UserDep, scope: ScopeQ, branch: BranchQ = None,
                  at_commit: AtCommitQ = None, pin: PinQ = None, snapshot: SnapshotQ = None,
                  limit: LimitQ = 50,
                  after: Annotated[EpisodeId | None, Query(
                      description="Episode id: the page after it (next_after).")] = None,
                  ) -> dict[str, Any]:
    svc = service(request)
    view = read_view(svc, scope, branch, at_commit, pin, snapshot)
    return browse.episodes(svc, user, view, limit, after)


@router.get("/entities", responses=READ_ERRORS, openapi_extra=USER_DOC)
def list_entities(request: Request, user: UserDep, scope: ScopeQ, branch: BranchQ = None,
                  at_commit: AtCommitQ = None, pin: PinQ = None, snapshot: SnapshotQ = None,
                  limit: LimitQ = 50,
                  after: Annotated[NotBlankText | None, Query(
                      min_length=1, max_length=MAX_ENTITY,
                      description="Entity: the page after it (next_after).")] = None,
                  ) -> dict[str, Any]:
    svc = service(request)
    view = read_view(svc, scope, branch, at_commit, pin, snapshot)
    return browse.entities(svc, user, view, limit, after)
