"""Who may read and write: the read rule, the write rule and the one 403 body."""

from __future__ import annotations

import json
from typing import Any

from .runner import (
    _UNSET,
    Ctx,
    check,
    expect_error,
    vector,
)

# --- read rule ----------------------------------------------------------------


def _policy_cell(
    ctx: Ctx, policy: dict[str, Any], owner_type: str = "user"
) -> tuple[str, str, str]:
    creator, owner = ctx.agent("creator"), ctx.owner()
    cell = ctx.create(
        creator, owner, f"policy cell {ctx.run}", owner_type=owner_type, policy=policy
    )
    return cell["id"], creator, owner


def _reads(ctx: Ctx, cid: str, allowed: list[str], denied: list[str]) -> None:
    for agent in allowed:
        check(ctx.can_read(agent, cid), f"{agent!r} should read the cell but got 403")
    for agent in denied:
        check(not ctx.can_read(agent, cid), f"{agent!r} must not read the cell but got 200")


@vector("read_private_denied_to_stranger", "read_rule")
def _(ctx: Ctx) -> None:
    cid, _, _ = _policy_cell(ctx, {})
    _reads(ctx, cid, [], [ctx.agent("stranger")])


@vector("read_public_any_agent", "read_rule")
def _(ctx: Ctx) -> None:
    cid, _, _ = _policy_cell(ctx, {"public": True})
    _reads(ctx, cid, [ctx.agent("stranger"), ctx.agent("other")], [])


@vector("read_creator_always", "read_rule")
def _(ctx: Ctx) -> None:
    cid, creator, _ = _policy_cell(ctx, {"readable_by": [ctx.agent("someone")], "public": False})
    _reads(ctx, cid, [creator], [])


@vector("read_owner_any_owner_type", "read_rule")
def _(ctx: Ctx) -> None:
    for owner_type in ("user", "agent", "organization"):
        cid, _, owner = _policy_cell(ctx, {}, owner_type=owner_type)
        check(
            ctx.can_read(owner, cid), f"owner of owner_type={owner_type} cannot read its own cell"
        )


@vector("read_readable_by_exact", "read_rule")
def _(ctx: Ctx) -> None:
    reader = ctx.agent("reader")
    cid, _, _ = _policy_cell(ctx, {"readable_by": [reader]})
    _reads(ctx, cid, [reader], [ctx.agent("stranger")])


@vector("pattern_exact_is_not_prefix_or_substring", "read_rule")
def _(ctx: Ctx) -> None:
    reader = ctx.agent("exact")
    cid, _, _ = _policy_cell(ctx, {"readable_by": [reader]})
    _reads(ctx, cid, [reader], [reader + "x", "x" + reader, reader[:-1]])


@vector("pattern_star_suffix", "read_rule")
def _(ctx: Ctx) -> None:
    prefix = ctx.agent("team-")
    cid, _, _ = _policy_cell(ctx, {"readable_by": [prefix + "*"]})
    _reads(
        ctx, cid, [prefix + "1", prefix + "billing-v2"], [ctx.agent("teams"), ctx.agent("other-1")]
    )


@vector("pattern_star_matches_empty_run", "read_rule")
def _(ctx: Ctx) -> None:
    prefix = ctx.agent("empty-")
    cid, _, _ = _policy_cell(ctx, {"readable_by": [prefix + "*", ctx.agent("ab-") + "*z"]})
    _reads(ctx, cid, [prefix, ctx.agent("ab-") + "z"], [])


@vector("pattern_star_middle_is_anchored", "read_rule")
def _(ctx: Ctx) -> None:
    head = ctx.agent("mid-")
    cid, _, _ = _policy_cell(ctx, {"readable_by": [head + "*-end"]})
    _reads(
        ctx,
        cid,
        [head + "x-end", head + "a-b-c-end"],
        [head + "x-end-more", "q" + head + "x-end", head + "x-en"],
    )


@vector("pattern_star_alone_matches_everyone", "read_rule")
def _(ctx: Ctx) -> None:
    cid, _, _ = _policy_cell(ctx, {"readable_by": ["*"]})
    _reads(ctx, cid, [ctx.agent("anyone"), ctx.agent("x.y?z")], [])


@vector("pattern_multiple_stars", "read_rule")
def _(ctx: Ctx) -> None:
    head = ctx.agent("ms-")
    cid, _, _ = _policy_cell(ctx, {"readable_by": [head + "*core*"]})
    _reads(
        ctx,
        cid,
        [head + "core", head + "a-core-b", head + "corecore"],
        [head + "cor", head + "c-o-r-e"],
    )


@vector("pattern_dot_is_literal", "read_rule")
def _(ctx: Ctx) -> None:
    head, star = ctx.agent("dot-agent"), ctx.agent("dotstar-agent")
    # alone, and beside a `*` (a server that turns only `*` into regex still fails)
    cid, _, _ = _policy_cell(ctx, {"readable_by": [head + ".x", star + ".y*"]})
    _reads(
        ctx,
        cid,
        [head + ".x", star + ".y", star + ".y-1"],
        [head + "Xx", head + "_x", star + "Zy1", star + "-y"],
    )


@vector("pattern_question_mark_is_literal", "read_rule")
def _(ctx: Ctx) -> None:
    head, star = ctx.agent("qm-agent"), ctx.agent("qmstar-agent")
    cid, _, _ = _policy_cell(ctx, {"readable_by": [head + "?", star + "?*"]})
    _reads(
        ctx,
        cid,
        [head + "?", star + "?", star + "?tail"],
        [head + "Z", head + "1", star + "Z", star + "Ztail", star],
    )


@vector("pattern_brackets_are_literal", "read_rule")
def _(ctx: Ctx) -> None:
    head, star = ctx.agent("br-agent"), ctx.agent("brstar-agent")
    cid, _, _ = _policy_cell(ctx, {"readable_by": [head + "[12]", star + "[12]*"]})
    _reads(
        ctx,
        cid,
        [head + "[12]", star + "[12]", star + "[12]x"],
        [head + "1", head + "2", star + "1", star + "2x"],
    )


@vector("pattern_regex_metachars_are_literal", "read_rule")
def _(ctx: Ctx) -> None:
    head = ctx.agent("re-agent")
    patterns = [
        head + "(a|b)",
        head + "c+",
        "^" + head + "d$",
        head + "\\w",
        head + "(e|f)*",
        head + "g+*",
    ]
    allowed = [*patterns[:4], head + "(e|f)", head + "(e|f)zz", head + "g+", head + "g+h"]
    denied = [
        head + "a",
        head + "cc",
        head + "d",
        head + "w",
        head + "e",
        head + "ezz",
        head + "gg",
        head + "ggh",
    ]
    cid, _, _ = _policy_cell(ctx, {"readable_by": patterns})
    _reads(ctx, cid, allowed, denied)


@vector("read_rule_same_for_get_listing_search", "read_rule")
def _(ctx: Ctx) -> None:
    creator, owner = ctx.agent("agree-creator"), ctx.owner("agree")
    word = f"agreeword{ctx.run}"
    team = ctx.agent("agree-team-")
    cell = ctx.create(
        creator,
        owner,
        f"{word} shared contact preference",
        policy={
            "readable_by": [team + "*", ctx.agent("agree-exact")],
            "writable_by": [ctx.agent("agree-w")],
        },
    )
    agents = {
        creator: True,
        owner: True,
        ctx.agent("agree-exact"): True,
        team + "billing": True,
        team: True,
        ctx.agent("agree-w"): False,
        ctx.agent("agree-stranger"): False,
        ctx.agent("agree-exactx"): False,
    }
    for agent, expected in agents.items():
        in_list = cell["id"] in ctx.list_ids(agent, owner)
        in_alias = cell["id"] in [
            c["id"] for c in ctx.listing(agent, "/memories/query", owner_id=owner)["results"]
        ]
        in_search = cell["id"] in ctx.search_ids(agent, {"query": word, "owner_id": owner})
        by_get = ctx.can_read(agent, cell["id"])
        got = {"get": by_get, "listing": in_list, "listing_alias": in_alias, "search": in_search}
        check(
            all(v == expected for v in got.values()),
            f"{agent}: expected read={expected}, got {got}",
        )


# --- write rule -----------------------------------------------------------------


@vector("write_creator_and_owner", "write_rule")
def _(ctx: Ctx) -> None:
    for owner_type in ("user", "agent", "organization"):
        cid, creator, owner = _policy_cell(ctx, {}, owner_type=owner_type)
        check(ctx.can_write(creator, cid), "creator cannot PATCH its cell")
        check(ctx.can_write(owner, cid), f"owner (owner_type={owner_type}) cannot PATCH its cell")


@vector("write_owner_can_delete", "write_rule")
def _(ctx: Ctx) -> None:
    cid, _, owner = _policy_cell(ctx, {}, owner_type="agent")
    ctx.archive_and_delete(owner, cid)


@vector("write_writable_by_exact_and_wildcard", "write_rule")
def _(ctx: Ctx) -> None:
    exact, team = ctx.agent("writer"), ctx.agent("wteam-")
    cid, _, _ = _policy_cell(ctx, {"writable_by": [exact, team + "*"]})
    check(ctx.can_write(exact, cid), "exact writable_by agent cannot PATCH")
    check(ctx.can_write(team + "7", cid), "wildcard writable_by agent cannot PATCH")
    check(not ctx.can_write(ctx.agent("wteam"), cid), "non-matching agent could PATCH")


@vector("write_writable_by_can_delete", "write_rule")
def _(ctx: Ctx) -> None:
    writer = ctx.agent("deleter")
    cid, _, _ = _policy_cell(ctx, {"writable_by": [writer]})
    ctx.archive_and_delete(writer, cid)


@vector("write_writable_by_grants_no_read", "write_rule")
def _(ctx: Ctx) -> None:
    writer = ctx.agent("blindwriter")
    word = f"blindword{ctx.run}"
    creator, owner = ctx.agent("creator"), ctx.owner()
    cid = ctx.create(creator, owner, f"{word} secret", policy={"writable_by": [writer]})["id"]
    check(not ctx.can_read(writer, cid), "writable_by granted GET")
    check(cid not in ctx.list_ids(writer, owner), "writable_by granted listing")
    check(cid not in ctx.search_ids(writer, {"query": word}), "writable_by granted search")
    check(ctx.can_write(writer, cid), "writable_by agent cannot PATCH")


@vector("write_public_grants_no_write", "write_rule")
def _(ctx: Ctx) -> None:
    stranger = ctx.agent("publicreader")
    cid, creator, _ = _policy_cell(ctx, {"public": True})
    check(ctx.can_read(stranger, cid), "public cell not readable")
    check(not ctx.can_write(stranger, cid), "public granted PATCH")
    ctx.set_status(creator, cid, "archived")
    expect_error(ctx.delete(stranger, cid), 403, "ACCESS_DENIED", "public granted DELETE")


@vector("write_readable_by_grants_no_write", "write_rule")
def _(ctx: Ctx) -> None:
    reader = ctx.agent("readonly")
    cid, creator, _ = _policy_cell(ctx, {"readable_by": [reader]})
    check(ctx.can_read(reader, cid), "readable_by agent cannot read")
    check(not ctx.can_write(reader, cid), "readable_by granted PATCH")
    ctx.set_status(creator, cid, "archived")
    expect_error(ctx.delete(reader, cid), 403, "ACCESS_DENIED", "readable_by granted DELETE")


@vector("write_stranger_denied", "write_rule")
def _(ctx: Ctx) -> None:
    stranger = ctx.agent("stranger")
    cid, creator, _ = _policy_cell(ctx, {})
    check(not ctx.can_write(stranger, cid), "stranger could PATCH")
    ctx.set_status(creator, cid, "archived")
    expect_error(ctx.delete(stranger, cid), 403, "ACCESS_DENIED", "stranger DELETE")
    check(
        ctx.get_ok(creator, cid)["lifecycle"]["status"] == "archived", "stranger DELETE took effect"
    )


# --- one 403 body -------------------------------------------------------------------


def _denial_cases(ctx: Ctx) -> tuple[str, dict[str, str]]:
    """A stranger and four ids it is denied: unknown, malformed, unreadable, deleted."""
    creator, stranger = ctx.agent("creator"), ctx.agent("prober")
    hidden = ctx.create(creator, ctx.owner())["id"]
    public = ctx.create(creator, ctx.owner(), policy={"public": True})["id"]
    gone = ctx.create(creator, ctx.owner(), policy={"public": True})["id"]
    ctx.archive_and_delete(creator, gone)
    return stranger, {
        "unknown": f"mem_{'3' * 26}",
        "malformed": "nonsense",
        "unreadable": hidden,
        "public-unwritable": public,
        "deleted": gone,
    }


def _same_bodies(ctx: Ctx, method: str, stranger: str, ids: dict[str, str], skip: set[str]) -> str:
    bodies = {}
    for label, cid in ids.items():
        if label in skip:
            continue
        body = {"content": {"metadata": {"probe": 1}}} if method == "PATCH" else _UNSET
        r = ctx.call(method, f"/memories/{cid}", agent=stranger, body=body)
        expect_error(r, 403, "ACCESS_DENIED", f"{method} {label} id")
        bodies[label] = json.dumps(r.json(), sort_keys=True)
    distinct = set(bodies.values())
    check(len(distinct) == 1, f"{method}: 403 bodies differ: {bodies}")
    return distinct.pop()


@vector("denied_body_identical_get", "denial")
def _(ctx: Ctx) -> None:
    stranger, ids = _denial_cases(ctx)
    _same_bodies(ctx, "GET", stranger, ids, {"public-unwritable"})


@vector("denied_body_identical_patch", "denial")
def _(ctx: Ctx) -> None:
    stranger, ids = _denial_cases(ctx)
    _same_bodies(ctx, "PATCH", stranger, ids, set())


@vector("denied_body_identical_delete", "denial")
def _(ctx: Ctx) -> None:
    stranger, ids = _denial_cases(ctx)
    _same_bodies(ctx, "DELETE", stranger, ids, set())


@vector("denied_body_identical_across_methods", "denial")
def _(ctx: Ctx) -> None:
    stranger, ids = _denial_cases(ctx)
    bodies = {
        m: _same_bodies(ctx, m, stranger, ids, {"public-unwritable"})
        for m in ("GET", "PATCH", "DELETE")
    }
    check(len(set(bodies.values())) == 1, f"403 body differs by method: {bodies}")


@vector("denied_deleted_cell_even_for_creator", "denial")
def _(ctx: Ctx) -> None:
    creator = ctx.agent("creator")
    cid = ctx.create(creator, ctx.owner())["id"]
    ctx.archive_and_delete(creator, cid)
    unknown = ctx.call("GET", f"/memories/mem_{'4' * 26}", agent=creator)
    expect_error(unknown, 403, "ACCESS_DENIED", "GET unknown")
    for method, body in (
        ("GET", _UNSET),
        ("PATCH", {"content": {"metadata": {}}}),
        ("DELETE", _UNSET),
    ):
        r = ctx.call(method, f"/memories/{cid}", agent=creator, body=body)
        expect_error(r, 403, "ACCESS_DENIED", f"creator {method} of its deleted cell")
        check(
            r.json() == unknown.json(),
            f"{method} deleted body {r.text} != unknown-id body {unknown.text}",
        )
