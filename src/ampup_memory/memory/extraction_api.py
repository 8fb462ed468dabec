"""``GET /extraction/status``: how far extraction has read a scope's branch (extraction.py)."""

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

router = APIRouter(tags=["extraction"])


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
