"""API keys (--api-key-mode), and the header trusted when keys are off."""

from __future__ import annotations

import json
import uuid

from .runner import (
    _UNSET,
    Ctx,
    Skip,
    check,
    expect_error,
    expect_status,
    vector,
)

# --- API keys (only with --api-key-mode) ---------------------------------------------------------


def _keys_only(ctx: Ctx) -> None:
    if not ctx.api_key_mode:
        raise Skip("needs --api-key-mode")


@vector("keys_missing_key_401", "keys")
def _(ctx: Ctx) -> None:
    _keys_only(ctx)
    agent = ctx.agent("keyed")
    ctx.key_for(agent)
    cid = ctx.create(agent, ctx.owner())["id"]
    for method, path, body in (
        ("GET", "/memories", _UNSET),
        ("GET", "/memories/query", _UNSET),
        ("POST", "/memories", ctx.cell_body(ctx.owner())),
        ("GET", f"/memories/{cid}", _UNSET),
        ("PATCH", f"/memories/{cid}", {"content": {"metadata": {"x": 1}}}),
        ("DELETE", f"/memories/{cid}", _UNSET),
        ("POST", "/memories/search", {"query": "x"}),
    ):
        r = ctx.call(method, path, agent=agent, key=None, body=body)
        expect_error(r, 401, "UNAUTHENTICATED", f"{method} {path} with agent id but no key")


@vector("keys_wrong_key_401", "keys")
def _(ctx: Ctx) -> None:
    _keys_only(ctx)
    agent = ctx.agent("keyed")
    ctx.key_for(agent)
    r = ctx.call("GET", "/memories", agent=agent, key="amp_wrong_" + ctx.run)
    expect_error(r, 401, "UNAUTHENTICATED", "wrong key")


@vector("keys_other_agents_key_401", "keys")
def _(ctx: Ctx) -> None:
    _keys_only(ctx)
    a, b = ctx.agent("keyed"), ctx.agent("keyed-other")
    r = ctx.call("GET", "/memories", agent=a, key=ctx.key_for(b))
    expect_error(r, 401, "UNAUTHENTICATED", "key of another agent")


@vector("keys_unknown_agent_401", "keys")
def _(ctx: Ctx) -> None:
    _keys_only(ctx)
    key = ctx.key_for(ctx.agent("keyed"))
    r = ctx.call("GET", "/memories", agent=ctx.agent("nokey-ever"), key=key)
    expect_error(r, 401, "UNAUTHENTICATED", "agent with no key at all")


@vector("keys_identical_401_bodies", "keys")
def _(ctx: Ctx) -> None:
    _keys_only(ctx)
    agent = ctx.agent("keyed")
    key = ctx.key_for(agent)
    bodies = {
        "no agent": ctx.call("GET", "/memories").json(),
        "no key": ctx.call("GET", "/memories", agent=agent, key=None).json(),
        "wrong key": ctx.call("GET", "/memories", agent=agent, key=key + "x").json(),
        "unknown agent": ctx.call("GET", "/memories", agent=ctx.agent("ghost"), key=key).json(),
    }
    check(
        len({json.dumps(b, sort_keys=True) for b in bodies.values()}) == 1,
        f"401 bodies differ: {bodies}",
    )


@vector("keys_bearer_accepted", "keys")
def _(ctx: Ctx) -> None:
    _keys_only(ctx)
    agent = ctx.agent("bearer")
    key = ctx.key_for(agent)
    r = ctx.call(
        "GET", "/memories", agent=agent, key=None, headers={"Authorization": f"Bearer {key}"}
    )
    expect_status(r, 200, "Authorization: Bearer <key>")


@vector("keys_health_and_spec_open", "keys")
def _(ctx: Ctx) -> None:
    _keys_only(ctx)
    expect_status(ctx.call("GET", "/health"), 200, "/health without key")
    expect_status(ctx.call("GET", "/spec"), 200, "/spec without key")


@vector("keys_checked_before_validation", "keys")
def _(ctx: Ctx) -> None:
    _keys_only(ctx)
    agent = ctx.agent("keyed")
    ctx.key_for(agent)
    expect_error(
        ctx.call("POST", "/memories", agent=agent, key=None, body={}),
        401,
        "UNAUTHENTICATED",
        "{} no key",
    )
    r = ctx.call("POST", "/memories", agent=agent, key=None, raw=b"{bad")
    expect_error(r, 401, "UNAUTHENTICATED", "malformed JSON, no key")


@vector("keys_off_header_trusted", "keys")
def _(ctx: Ctx) -> None:
    if ctx.api_key_mode:
        raise Skip("keys are on")
    agent = ctx.agent(f"anyone-{uuid.uuid4().hex[:6]}")
    r = ctx.call("GET", "/memories", agent=agent, key="some-key-that-means-nothing")
    expect_status(r, 200, "keys off: an unknown agent with a stray key header")
