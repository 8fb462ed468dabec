"""What the model passes set aside, as one caller may see it (``GET /set-aside``,
``ampup-memory set-aside``, the timers' counts).

`setaside.set_aside_items` is the one listing; this module gives it each kind's rule
(`setaside.Rule`), built from the read rules each kind already has, never new ones:

- ``extract``: an episode, the one episode read rule (`extraction.episode_rule`);
- ``judge``: a session while it is pending (ended, no reward: `judge.pending_sessions`),
  read as its run or session is (`loop.readable_runs`, the rule of ``GET /sessions/{id}``);
  rewarded meanwhile, or gone, it is no longer work for the judge and its record goes;
- ``learn``: a situation of the scope's map (gone once a re-clustering drops it), shown to
  whoever may read the scope's map, as ``GET /situations`` shows it;
- ``compile``: the scope itself while it has documents chosen to compile (gone once the
  choice is emptied), shown as ``GET /procedures`` shows its procedures.

A scope that is gone (its workspace deleted or expired) takes every record with it.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from typing import Annotated, Any, Literal, get_args

from ampup_memory.advice.judge import pending_sessions
from ampup_memory.advice.loop import cached_state, readable_runs
from ampup_memory.errors import NotFound, field_error
from ampup_memory.memory.acl import Principal
from ampup_memory.memory.extraction import episode_rule
from ampup_memory.memory.scopes import Scope
from ampup_memory.memory.service import MemoryService
from ampup_memory.models.chat import Role, endpoint_for
from ampup_memory.models.setaside import KINDS, Item, Rule, order, set_aside_items
from ampup_memory.ruled import published, ruled
from ampup_memory.settings import Settings
from ampup_memory.web import jsontext

Kind = Literal["extract", "judge", "learn", "compile"]
assert get_args(Kind) == KINDS  # noqa: S101 — one list of kinds, spelled twice for typing
MAX_PAGE = 1000
CURSOR_CHARS = 2048  # a cursor's length: its items' ids, base64'd, fit with room
CURSOR_PATTERN = f"^[A-Za-z0-9_-]{{1,{CURSOR_CHARS}}}$"
# What `page` gives as next_after (URL-safe base64, unpadded), refused in words.
Cursor = Annotated[str, ruled(CURSOR_PATTERN, "cursor_invalid", "cursor",
                              "the next_after of the page before, as it was given"),
                   published(CURSOR_PATTERN, minLength=1, maxLength=CURSOR_CHARS)]


def _live(svc: MemoryService, scope: str) -> Scope | None:
    """The scope, or None when it is gone (its workspace deleted or expired)."""
    try:
        return svc.view(scope).scope
    except NotFound:
        return None


def _sessions(svc: MemoryService, principal: Principal | None) -> Rule:
    def rule(scope: str, items: list[Item]) -> tuple[list[Item], list[Item]]:
        live = _live(svc, scope)
        if live is None:
            return [], items
        pending = set(pending_sessions(svc, live, [str(i["item"]) for i in items]))
        seen = pending if principal is None else readable_runs(svc, principal, sorted(pending))
        return ([i for i in items if i["item"] in seen],
                [i for i in items if i["item"] not in pending])
    return rule


def _situations(svc: MemoryService) -> Rule:
    def rule(scope: str, items: list[Item]) -> tuple[list[Item], list[Item]]:
        live = _live(svc, scope)
        smap = None if live is None else cached_state(svc, live).smap
        have = set() if smap is None else {s.id for s in smap.situations}
        return ([i for i in items if i["item"] in have],
                [i for i in items if i["item"] not in have])
    return rule


def _scopes(svc: MemoryService) -> Rule:
    def rule(scope: str, items: list[Item]) -> tuple[list[Item], list[Item]]:
        live = _live(svc, scope)
        # No documents chosen any more (`PUT /procedures/sources` with []): nothing is left
        # to compile, so nothing is set aside; a new choice is asked anew (other inputs).
        chosen = live is not None and bool(cached_state(svc, live).documents)
        return (items, []) if chosen else ([], items)
    return rule


def rules(svc: MemoryService, principal: Principal | None) -> dict[str, Rule]:
    """Every kind's rule for ``principal`` (None: the system, which reads everything)."""
    return {"extract": episode_rule(svc, principal), "judge": _sessions(svc, principal),
            "learn": _situations(svc), "compile": _scopes(svc)}


def models_now(settings: Settings) -> dict[str, str]:
    """The model each kind of work asks now (`chat.endpoint_for`; a kind with no model
    configured is absent): a record another model set aside is not listed."""
    out: dict[str, str] = {}
    for role in Role:
        endpoint = endpoint_for(settings, role)
        if endpoint is not None:
            out[role.value] = endpoint.model
    return out


def listing(svc: MemoryService, principal: Principal | None, scope: str | None = None,
            kind: str | None = None, models: Mapping[str, str] | None = None) -> list[Item]:
    """The items set aside now (of one scope, of one kind) that ``principal`` may read,
    oldest first; records of items gone are dropped on the way. ``models``: `models_now`
    (None: whichever model set each aside)."""
    return set_aside_items(svc.index, scope, kind, rules(svc, principal), models)


def count(svc: MemoryService, kind: str, model: str | None) -> int:
    """How many items of ``kind`` are set aside now, in every scope, for the pass's
    ``model`` (None: none configured): what a timer's log line says, the count of what
    the listing shows."""
    return len(listing(svc, None, None, kind, {} if model is None else {kind: model}))


def _key(item: Item) -> tuple[str, ...]:
    """`setaside.order` within one scope (a page's listing is of one)."""
    at, kind, _scope, branch, name = order(item)
    return (at, kind, branch, name)


def _cursor(item: Item) -> str:
    text = json.dumps(list(_key(item)), ensure_ascii=False)
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def _after(cursor: str) -> tuple[str, ...]:
    """The order key a cursor names; a cursor no listing gave is refused (422)."""
    try:
        key = jsontext.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)),
                             "the cursor")
    except (binascii.Error, ValueError):  # UnicodeDecodeError and JsonRefused are too
        key = None
    if not (isinstance(key, list) and len(key) == 4 and all(isinstance(k, str) for k in key)):
        raise field_error(["after"], "not a cursor of this listing (next_after)",
                          "cursor_invalid")
    return tuple(key)


def page(svc: MemoryService, user: str, scope_text: object, kind: str | None, limit: int,
         after: str | None, models: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``GET /set-aside``: one page of `listing` for the caller, oldest first;
    ``next_after`` names the page after it (None: the last page). A cursor is the order key
    of the last item shown, so it names no item and tells nothing about hidden ones."""
    scope = svc.view(scope_text).scope  # 404 for a workspace that is gone
    start = None if after is None else _after(after)
    items = listing(svc, svc.principal(user), str(scope), kind, models)
    if start is not None:
        items = [i for i in items if _key(i) > start]
    shown = items[:max(1, min(limit, MAX_PAGE))]
    return {"scope": str(scope), "items": shown,
            "next_after": _cursor(shown[-1]) if len(items) > len(shown) else None}

