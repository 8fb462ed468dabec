"""A deliberately broken AmpUp server, to prove the conformance suite can fail.

    python tests/broken_server.py BREAK PORT

Each BREAK re-creates a bug the AMP reference server shipped or could ship. This file is
test scaffolding only; nothing in src/ knows it exists.
"""

from __future__ import annotations

import sys

import uvicorn
from fastapi.routing import APIRoute

from ampup_memory.amp import access, service
from ampup_memory.amp import api as amp_api
from ampup_memory.server import create_app
from ampup_memory.settings import load_settings


def listing_after_item() -> None:
    """Register GET /memories/query after a GET /memories/{memory_id} that takes any
    segment (lesson 4). Ours no longer matches "query" at all, so the bug needs both."""
    routes = amp_api.router.routes
    query = next(r for r in routes if isinstance(r, APIRoute) and r.path == "/memories/query")
    item = next(r for r in routes if isinstance(r, APIRoute) and r.name == "get_memory")
    routes[routes.index(item)] = APIRoute("/memories/{memory_id}", item.endpoint,
                                          methods=["GET"], response_model=item.response_model)
    routes.remove(query)
    routes.append(query)


def wildcard_blind() -> None:
    """A read rule that forgets wildcards: patterns only match exactly."""
    access.pattern_matches = lambda pattern, agent_id: pattern == agent_id  # type: ignore[assignment]


def public_grants_write() -> None:
    original = access.can_write

    def can_write(subject: object, agent_id: str) -> bool:
        guard = access._guard(subject)  # type: ignore[arg-type]
        return guard.public or original(subject, agent_id)  # type: ignore[arg-type]

    service.can_write = can_write  # type: ignore[assignment]


def spec_crashes() -> None:
    """GET /amp/v1/spec raises what no handler expects: the answer of an unexpected error
    (a 500 made outside every middleware) is held to the same headers as any other."""
    def crash() -> None:
        raise RuntimeError("deliberately broken")

    routes = amp_api.router.routes
    spec = next(r for r in routes if isinstance(r, APIRoute) and r.path == "/spec")
    routes[routes.index(spec)] = APIRoute("/spec", crash, methods=["GET"])


BREAKS = {
    "listing-after-item": listing_after_item,
    "wildcard-blind": wildcard_blind,
    "public-grants-write": public_grants_write,
    "spec-crashes": spec_crashes,
}


def main() -> None:
    name, port = sys.argv[1], int(sys.argv[2])
    BREAKS[name]()  # before the app is built, so route order and rules are already broken
    app = create_app(load_settings())
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main()
