"""Path parameters that leave room for the fixed routes beside them, and which methods a
path is served with (`serves`: 405's ``Allow``, HEAD answered as GET).

``/memories/{memory_id}`` also matched ``/memories/search``: a GET there read as a cell
called "search" (403) instead of a wrong method (405), and 405 answers listed methods the
fixed path does not serve. A parameter registered here matches any one path segment
except the given fixed names, so the router itself tells the two apart."""

from __future__ import annotations

import re

from starlette.applications import Starlette
from starlette.convertors import StringConvertor, register_url_convertor
from starlette.routing import Match, Mount
from starlette.types import Scope


def segment_except(param: str, *fixed: str) -> str:
    """The path template ``{param:<convertor>}`` for one segment other than ``fixed``
    (registering that convertor with Starlette)."""
    names = "|".join(re.escape(f) for f in fixed)
    convertor = type(f"{param}_segment", (StringConvertor,),
                     {"regex": rf"(?!(?:{names})$)[^/]+"})
    register_url_convertor(f"{param}_segment", convertor())
    return f"{{{param}:{param}_segment}}"


def serves(app: Starlette, scope: Scope, method: str) -> bool:
    """Whether some route of ``app`` serves ``method`` at the request's path. Routes are
    asked only through `matches` (an included router is a route too), from the app's own
    root: inside a mount the request's ``root_path`` has grown by the mount's path, and no
    route matched (``POST /static-offline-docs/x.css`` answered 405 with an empty
    ``Allow``). A mount matches every method; ours serve static files: GET and HEAD."""
    asked = {**scope, "method": method,
             "root_path": scope.get("app_root_path", scope.get("root_path", ""))}
    return any(route.matches(asked)[0] is Match.FULL
               and (method in _FILE_METHODS or not isinstance(route, Mount))
               for route in app.router.routes)


_FILE_METHODS = frozenset({"GET", "HEAD"})
