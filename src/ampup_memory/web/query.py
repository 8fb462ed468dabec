"""The query parameters a route takes, and AmpUp routes refusing the ones they do not.

Bodies refuse an unknown field; a query did not: ``GET /facts?asof=…`` (for ``as_of``)
answered as of now, and ``?brnach=exp`` read ``main``, with nothing to say the parameter
was not read. AmpUp routes now answer 422 naming it. The AMP face keeps the reference
server's leniency (FastAPI ignores unknown query parameters there), as it does for an
unknown body field."""

from __future__ import annotations

import difflib
import functools
import inspect
from collections.abc import Callable, Container
from typing import Any

from fastapi import Request, params
from fastapi.dependencies.utils import get_flat_params
from fastapi.routing import APIRoute

from ampup_memory.web.body import reported


class _AnyName:
    """Every name: what an unmatched request's query may hold (no route says)."""

    def __contains__(self, name: object) -> bool:
        return True


def query_names(request: Request) -> Container[str]:
    """The query parameters the matched route declares, through its dependencies too."""
    route = request.scope.get("route")
    if not isinstance(route, APIRoute):
        return _AnyName()
    return _declared(route)


def _declared(route: APIRoute) -> frozenset[str]:
    # Kept on the route (its parameters are fixed once the app is built; routes compare
    # by value, so they are no dictionary keys).
    names: frozenset[str] | None = getattr(route, "_ampup_query_names", None)
    if names is None:
        names = frozenset(param.alias for param in get_flat_params(route.dependant)
                          if isinstance(param.field_info, params.Query))
        route._ampup_query_names = names  # type: ignore[attr-defined]
    return names


def _known_only(request: Request) -> None:
    route = request.scope.get("route")
    if not isinstance(route, APIRoute):
        return
    takes = _declared(route)
    errors = [{"loc": ["query", name], "msg": _not_taken(name, takes),
               "type": "extra_forbidden"}
              for name in dict.fromkeys(request.query_params) if name not in takes]
    if errors:
        raise reported(errors)


def _not_taken(name: str, takes: frozenset[str]) -> str:
    if not takes:
        return "not a query parameter of this route, which takes none"
    close = difflib.get_close_matches(name, sorted(takes), n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    return (f"not a query parameter of this route{hint}; it takes "
            f"{', '.join(sorted(takes))}")


class StrictQueryRoute(APIRoute):
    """An APIRoute whose requests may carry only the query parameters it declares.

    Judged when the endpoint is called: after identity and admin rights (401, 403) and
    the declared parameters' own checks, before the endpoint reads its body, so the answer
    names the first thing to fix in the order every other refusal follows."""

    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        super().__init__(path, _checked(endpoint), **kwargs)


_PARAM = "ampup_query_request"


def _checked(endpoint: Callable[..., Any]) -> Callable[..., Any]:
    """``endpoint`` checking the request's query before the call. FastAPI fills one
    parameter annotated ``Request``: the endpoint's own when it has one, else one more
    keyword parameter, dropped before the call."""
    try:
        signature = inspect.signature(endpoint, eval_str=True)
    except NameError:  # a name only imported for type checking
        signature = inspect.signature(endpoint)
    given = list(signature.parameters.values())
    own = next((p.name for p in given if p.annotation in (Request, "Request")), None)
    name = own or _PARAM
    wrapper: Callable[..., Any]
    if inspect.iscoroutinefunction(endpoint):
        @functools.wraps(endpoint)
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            _known_only(kwargs[name] if own else kwargs.pop(name))
            return await endpoint(*args, **kwargs)
    else:
        @functools.wraps(endpoint)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            _known_only(kwargs[name] if own else kwargs.pop(name))
            return endpoint(*args, **kwargs)
    if own is None:
        at = next((i for i, p in enumerate(given) if p.kind is p.VAR_KEYWORD), len(given))
        extra = inspect.Parameter(_PARAM, inspect.Parameter.KEYWORD_ONLY, annotation=Request)
        signature = signature.replace(parameters=[*given[:at], extra, *given[at:]])
    wrapper.__signature__ = signature  # type: ignore[attr-defined]
    return wrapper
