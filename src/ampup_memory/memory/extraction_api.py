"""``GET /extraction/status``: how far extraction has read a scope's branch, and ``GET
/extraction/set-aside``: the episodes it set aside (extraction.py)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from ampup_memory.memory.api import (
    READ_ERRORS,
    USER_DOC,
    BranchQ,
    ScopeQ,
    UserDep,
    service,
)
from ampup_memory.memory.extraction import extractor
from ampup_memory.web.query import StrictQueryRoute

router = APIRouter(tags=["extraction"], route_class=StrictQueryRoute)


@router.get("/extraction/status", responses=READ_ERRORS, openapi_extra=USER_DOC)
def extraction_status(request: Request, user: UserDep, scope: ScopeQ, branch: BranchQ = None,
                      ) -> dict[str, Any]:
    """Episodes pending and read by the extract model with the scope's schema version,
    facts written, candidates rejected by reason, the last model error, and the model
    (``"no model configured"`` when there is none: then nothing runs). Every count covers
    only the episodes the caller may read."""
    svc = service(request)
    principal = svc.principal(user)
    return extractor(svc, request.app.state.settings).status(scope, branch, principal)


@router.get("/extraction/set-aside", responses=READ_ERRORS, openapi_extra=USER_DOC)
def extraction_set_aside(request: Request, user: UserDep, scope: ScopeQ,
                         branch: BranchQ = None) -> dict[str, Any]:
    """The episodes of the branch extraction set aside (read with no fact after 3 passes
    with no usable answer: ``answer_unusable`` or ``request_refused`` in the status), oldest
    first: each ``item`` (the episode id), the ``model`` asked, the ``reason`` of its last
    refused answer, ``passes`` and ``at``. Only episodes the caller may read are listed."""
    svc = service(request)
    principal = svc.principal(user)
    items = extractor(svc, request.app.state.settings).set_aside(scope, branch, principal)
    return {"items": items}
