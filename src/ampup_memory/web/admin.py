"""The admin check as a FastAPI dependency, shared by the AMP and AmpUp faces.

``dependencies=[AdminDep]`` on a route with a query or path: FastAPI resolves
dependencies before it validates parameters, so a caller without admin credentials gets
403 even when the parameters are invalid, not a 422 that would tell anyone which values
are well formed (docs/api.md: identity before anything else).
"""

from __future__ import annotations

from fastapi import Depends, Request

from ampup_memory.auth import Authenticator, header_map
from ampup_memory.errors import AmpError


def require_admin(request: Request) -> None:
    auth: Authenticator = request.app.state.auth
    auth.require_admin(header_map(request.headers))


def is_admin(request: Request) -> bool:
    """Whether the request carries admin credentials (`require_admin`, with no error when
    it does not)."""
    try:
        require_admin(request)
    except AmpError:
        return False
    return True


AdminDep = Depends(require_admin)
