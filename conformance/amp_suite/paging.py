"""Listing and search: filters, defaults, bounds, readable-only paging, ranking."""

from __future__ import annotations

import json
from typing import Any

from .runner import (
    Ctx,
    body_of,
    check,
    check_cell_shape,
    expect_status,
    expect_validation,
    short,
    vector,
)

# --- listing --------------------------------------------------------------------------

PAGE_KEYS = {"results", "returned", "has_more", "offset", "limit"}


def _check_page(body: dict[str, Any], what: str, limit: int, offset: int = 0) -> None:
    missing = PAGE_KEYS - set(body)
    check(not missing, f"{what}: keys missing {sorted(missing)}")
    check(
        body["returned"] == len(body["results"]),
        f"{what}: returned {body['returned']} != {len(body['results'])}",
    )
    check(isinstance(body["has_more"], bool), f"{what}: has_more not a bool")
    check(body["limit"] == limit, f"{what}: limit {body['limit']} != {limit}")
    check(body["offset"] == offset, f"{what}: offset {body['offset']} != {offset}")
    check(len(body["results"]) <= limit, f"{what}: more results than limit")


@vector("listing_shape_and_defaults", "listing")
def _(ctx: Ctx) -> None:
    agent, owner = ctx.agent("a"), ctx.owner()
    ctx.create(agent, owner)
    body = ctx.listing(agent, owner_id=owner)
    _check_page(body, "GET /memories", 20, 0)
    check(
        body["returned"] == 1 and body["has_more"] is False,
        f"one cell listed as {body['returned']}/{body['has_more']}",
    )
    check_cell_shape(body["results"][0], "listing result")


@vector("listing_query_route_answers_as_listing", "listing")
def _(ctx: Ctx) -> None:
    agent, owner = ctx.agent("qa"), ctx.owner()
    r = ctx.call("GET", "/memories/query", agent=agent)
    expect_status(r, 200, "GET /memories/query (not a cell named 'query')")
    body = body_of(r)
    check(
        isinstance(body, dict) and "results" in body,
        f"/memories/query did not answer as a listing: {short(r.text)}",
    )
    _check_page(body, "GET /memories/query", 20, 0)
    cid = ctx.create(agent, owner)["id"]
    ids = [c["id"] for c in ctx.listing(agent, "/memories/query", owner_id=owner)["results"]]
    check(ids == [cid], f"/memories/query?owner_id returned {ids}")


@vector("listing_query_route_same_as_listing", "listing")
def _(ctx: Ctx) -> None:
    agent, owner = ctx.agent("a"), ctx.owner()
    for i in range(3):
        ctx.create(agent, owner, f"same {i}", type="procedural" if i else "semantic")
    for params in (
        {"owner_id": owner},
        {"owner_id": owner, "type": "procedural"},
        {"owner_id": owner, "limit": 2},
    ):
        a = ctx.listing(agent, "/memories", **params)
        b = ctx.listing(agent, "/memories/query", **params)
        check(
            [c["id"] for c in a["results"]] == [c["id"] for c in b["results"]]
            and a["has_more"] == b["has_more"],
            f"/memories and /memories/query disagree for {params}",
        )


@vector("listing_owner_filter", "listing")
def _(ctx: Ctx) -> None:
    agent, o1, o2 = ctx.agent("a"), ctx.owner("one"), ctx.owner("two")
    mine = {ctx.create(agent, o1)["id"], ctx.create(agent, o1)["id"]}
    theirs = ctx.create(agent, o2)["id"]
    got = set(ctx.list_ids(agent, o1))
    check(got == mine, f"owner filter: got {got}, expected {mine} (other owner's {theirs})")
    check(
        all(c["identity"]["owner_id"] == o1 for c in ctx.listing(agent, owner_id=o1)["results"]),
        "wrong owner",
    )


@vector("listing_type_filter", "listing")
def _(ctx: Ctx) -> None:
    agent, owner = ctx.agent("a"), ctx.owner()
    ids = {
        t: ctx.create(agent, owner, type=t)["id"] for t in ("episodic", "semantic", "procedural")
    }
    for t, cid in ids.items():
        got = ctx.list_ids(agent, owner, type=t)
        check(got == [cid], f"type={t}: got {got}, expected [{cid}]")


@vector("listing_status_filter_default_active", "listing")
def _(ctx: Ctx) -> None:
    agent, owner = ctx.agent("a"), ctx.owner()
    ids = {s: ctx.create(agent, owner, f"{s} cell")["id"] for s in ("active", "stale", "archived")}
    ctx.set_status(agent, ids["stale"], "stale")
    ctx.set_status(agent, ids["archived"], "archived")
    body = ctx.listing(agent, owner_id=owner, limit=100)
    check(
        [c["id"] for c in body["results"]] == [ids["active"]],
        "default listing is not status=active only",
    )
    for status, cid in ids.items():
        got = ctx.list_ids(agent, owner, status=status)
        check(got == [cid], f"status={status}: got {got}, expected [{cid}]")


@vector("listing_limit_default_20", "listing")
def _(ctx: Ctx) -> None:
    agent, owner = ctx.agent("a"), ctx.owner()
    for i in range(21):
        ctx.create(agent, owner, f"bulk {i}")
    body = ctx.listing(agent, owner_id=owner)
    _check_page(body, "default page", 20, 0)
    check(
        body["returned"] == 20 and body["has_more"] is True,
        f"21 cells, default page: {body['returned']}/{body['has_more']}",
    )


@vector("listing_limit_bounds_422", "listing")
def _(ctx: Ctx) -> None:
    agent = ctx.agent("a")
    top = ctx.max_page_size()
    for params, field in (
        ({"limit": top + 1}, "limit"),
        ({"limit": 0}, "limit"),
        ({"limit": -1}, "limit"),
        ({"limit": "ten"}, "limit"),
        ({"offset": -1}, "offset"),
    ):
        for path in ("/memories", "/memories/query"):
            expect_validation(
                ctx.call("GET", path, agent=agent, params=params), f"GET {path} {params}", field
            )


@vector("listing_limit_max_page_size_accepted", "listing")
def _(ctx: Ctx) -> None:
    agent = ctx.agent("a")
    top = ctx.max_page_size()
    body = ctx.listing(agent, owner_id=ctx.owner(), limit=top)
    _check_page(body, f"limit={top}", top, 0)


@vector("listing_bad_enum_filters_422", "listing")
def _(ctx: Ctx) -> None:
    agent = ctx.agent("a")
    expect_validation(
        ctx.call("GET", "/memories", agent=agent, params={"type": "opinion"}),
        "type=opinion",
        "type",
    )
    expect_validation(
        ctx.call("GET", "/memories", agent=agent, params={"status": "zombie"}),
        "status=zombie",
        "status",
    )


@vector("listing_has_more_and_offset", "listing")
def _(ctx: Ctx) -> None:
    agent, owner = ctx.agent("a"), ctx.owner()
    made = {ctx.create(agent, owner, f"page {i}")["id"] for i in range(3)}
    p1 = ctx.listing(agent, owner_id=owner, limit=2)
    _check_page(p1, "page 1", 2, 0)
    check(
        p1["returned"] == 2 and p1["has_more"] is True, f"page 1: {p1['returned']}/{p1['has_more']}"
    )
    p2 = ctx.listing(agent, owner_id=owner, limit=2, offset=2)
    _check_page(p2, "page 2", 2, 2)
    check(
        p2["returned"] == 1 and p2["has_more"] is False,
        f"page 2: {p2['returned']}/{p2['has_more']}",
    )
    seen = [c["id"] for c in p1["results"] + p2["results"]]
    check(set(seen) == made and len(seen) == 3, "pages overlap or miss cells")
    exact = ctx.listing(agent, owner_id=owner, limit=3)
    check(exact["has_more"] is False, "has_more true although the page held every cell")
    past = ctx.listing(agent, owner_id=owner, limit=2, offset=10)
    check(past["returned"] == 0 and past["has_more"] is False, "page past the end not empty")


@vector("listing_paging_counts_only_readable", "listing")
def _(ctx: Ctx) -> None:
    creator, reader, owner = ctx.agent("pcreator"), ctx.agent("preader"), ctx.owner()
    readable = set()
    for i in range(6):
        policy = {"readable_by": [reader]} if i % 2 else {}
        cid = ctx.create(creator, owner, f"mixed {i}", policy=policy)["id"]
        if i % 2:
            readable.add(cid)
    p1 = ctx.listing(reader, owner_id=owner, limit=2)
    check(
        p1["returned"] == 2 and p1["has_more"] is True,
        f"reader page 1: {p1['returned']}/{p1['has_more']}",
    )
    p2 = ctx.listing(reader, owner_id=owner, limit=2, offset=2)
    check(
        p2["returned"] == 1 and p2["has_more"] is False,
        f"reader page 2: {p2['returned']}/{p2['has_more']}",
    )
    seen = {c["id"] for c in p1["results"] + p2["results"]}
    check(seen == readable, f"reader saw {seen}, may read {readable}")
    stranger = ctx.listing(ctx.agent("pstranger"), owner_id=owner)
    check(
        stranger["returned"] == 0 and stranger["has_more"] is False,
        "stranger listed unreadable cells",
    )


# --- search ---------------------------------------------------------------------------

SEARCH_KEYS = PAGE_KEYS | {"query"}


@vector("search_shape_and_defaults", "search")
def _(ctx: Ctx) -> None:
    agent, owner = ctx.agent("a"), ctx.owner()
    word = f"shapeword{ctx.run}"
    cid = ctx.create(agent, owner, f"{word} in a cell")["id"]
    out = ctx.search(agent, {"query": word, "owner_id": owner})
    missing = SEARCH_KEYS - set(out)
    check(not missing, f"search keys missing {sorted(missing)}")
    _check_page(out, "search", 10, 0)
    check(out["query"] == word, f"query echo {out['query']!r}")
    check(
        [c["id"] for c in out["results"]] == [cid],
        f"search results {[c['id'] for c in out['results']]}",
    )
    check_cell_shape(out["results"][0], "search result")


@vector("search_query_required_422", "search")
def _(ctx: Ctx) -> None:
    agent = ctx.agent("a")
    expect_validation(
        ctx.call("POST", "/memories/search", agent=agent, body={}), "search {}", "query"
    )
    expect_validation(
        ctx.call("POST", "/memories/search", agent=agent, body={"owner_id": "x", "limit": 5}),
        "no query",
        "query",
    )


@vector("search_bounds_422", "search")
def _(ctx: Ctx) -> None:
    agent, top = ctx.agent("a"), ctx.max_page_size()
    for extra, field in (
        ({"limit": top + 1}, "limit"),
        ({"limit": 0}, "limit"),
        ({"offset": -1}, "offset"),
        ({"types": ["opinion"]}, "types"),
        ({"status": ["zombie"]}, "status"),
    ):
        body = {"query": "anything", **extra}
        expect_validation(
            ctx.call("POST", "/memories/search", agent=agent, body=body), json.dumps(extra), field
        )
    out = ctx.search(agent, {"query": "anything", "owner_id": ctx.owner(), "limit": top})
    check(out["limit"] == top, f"limit={top} not accepted as is")


@vector("search_only_readable", "search")
def _(ctx: Ctx) -> None:
    creator, reader, stranger = ctx.agent("screator"), ctx.agent("sreader"), ctx.agent("sstranger")
    word = f"visibility{ctx.run}"
    owner = ctx.owner()
    private = ctx.create(creator, owner, f"{word} private")["id"]
    shared = ctx.create(creator, owner, f"{word} shared", policy={"readable_by": [reader]})["id"]
    public = ctx.create(creator, owner, f"{word} public", policy={"public": True})["id"]
    for agent, expected in (
        (creator, {private, shared, public}),
        (reader, {shared, public}),
        (stranger, {public}),
    ):
        got = set(ctx.search_ids(agent, {"query": word, "limit": 50}))
        mine = got & {private, shared, public}
        check(mine == expected, f"{agent} found {sorted(mine)}, may read {sorted(expected)}")


@vector("search_keyword_match_ranks_first", "search")
def _(ctx: Ctx) -> None:
    agent, owner = ctx.agent("a"), ctx.owner()
    ctx.create(agent, owner, "The quarterly budget spreadsheet needs a review before Friday")
    match = ctx.create(
        agent, owner, "The customer prefers quokka marmalade telescope deliveries on Mondays"
    )["id"]
    ctx.create(agent, owner, "Deploy the service after unit tests pass and the container builds")
    ids = ctx.search_ids(agent, {"query": "quokka marmalade telescope", "owner_id": owner})
    check(ids and ids[0] == match, f"keyword-sharing cell is not first: {ids}")


@vector("search_blends_decay_score", "search")
def _(ctx: Ctx) -> None:
    agent, owner = ctx.agent("a"), ctx.owner()
    text = f"identical reminder about the harbour ferry timetable {ctx.run}"
    low = ctx.create(agent, owner, text, scoring={"importance": 0.35})["id"]
    high = ctx.create(agent, owner, text, scoring={"importance": 1.0})["id"]
    mid = ctx.create(agent, owner, text, scoring={"importance": 0.6})["id"]
    ids = ctx.search_ids(agent, {"query": "harbour ferry timetable", "owner_id": owner})
    check(
        ids == [high, mid, low],
        f"equal relevance not ordered by decay score: {ids} (expected {[high, mid, low]})",
    )


@vector("search_owner_and_types_filter", "search")
def _(ctx: Ctx) -> None:
    agent, o1, o2 = ctx.agent("a"), ctx.owner(), ctx.owner()
    word = f"filterword{ctx.run}"
    proc = ctx.create(agent, o1, f"{word} steps", type="procedural")["id"]
    sem = ctx.create(agent, o1, f"{word} fact", type="semantic")["id"]
    other = ctx.create(agent, o2, f"{word} other owner", type="procedural")["id"]
    got = set(ctx.search_ids(agent, {"query": word, "owner_id": o1}))
    check(got == {proc, sem}, f"owner filter: {got} (other owner's cell {other})")
    only = ctx.search_ids(agent, {"query": word, "owner_id": o1, "types": ["procedural"]})
    check(only == [proc], f"types=[procedural]: {only}")
    got = set(
        ctx.search_ids(agent, {"query": word, "owner_id": o1, "types": ["procedural", "semantic"]})
    )
    check(got == {proc, sem}, f"types=[procedural, semantic]: {got}")


@vector("search_status_default_active_only", "search")
def _(ctx: Ctx) -> None:
    agent, owner = ctx.agent("a"), ctx.owner()
    word = f"statusword{ctx.run}"
    ids = {
        s: ctx.create(agent, owner, f"{word} {s}")["id"] for s in ("active", "stale", "archived")
    }
    ctx.set_status(agent, ids["stale"], "stale")
    ctx.set_status(agent, ids["archived"], "archived")
    got = ctx.search_ids(agent, {"query": word, "owner_id": owner})
    check(got == [ids["active"]], f"default search returned {got}, expected only the active cell")


@vector("search_include_stale_adds_stale", "search")
def _(ctx: Ctx) -> None:
    agent, owner = ctx.agent("a"), ctx.owner()
    word = f"staleword{ctx.run}"
    ids = {
        s: ctx.create(agent, owner, f"{word} {s}")["id"] for s in ("active", "stale", "archived")
    }
    ctx.set_status(agent, ids["stale"], "stale")
    ctx.set_status(agent, ids["archived"], "archived")
    got = set(ctx.search_ids(agent, {"query": word, "owner_id": owner, "include_stale": True}))
    check(got == {ids["active"], ids["stale"]}, f"include_stale returned {got}")


@vector("search_status_list_and_archived_only_when_asked", "search")
def _(ctx: Ctx) -> None:
    agent, owner = ctx.agent("a"), ctx.owner()
    word = f"archword{ctx.run}"
    ids = {
        s: ctx.create(agent, owner, f"{word} {s}")["id"] for s in ("active", "stale", "archived")
    }
    ctx.set_status(agent, ids["stale"], "stale")
    ctx.set_status(agent, ids["archived"], "archived")
    only = ctx.search_ids(agent, {"query": word, "owner_id": owner, "status": ["archived"]})
    check(only == [ids["archived"]], f"status=[archived]: {only}")
    got = set(
        ctx.search_ids(agent, {"query": word, "owner_id": owner, "status": ["stale", "archived"]})
    )
    check(got == {ids["stale"], ids["archived"]}, f"status=[stale, archived]: {got}")
    got = set(
        ctx.search_ids(
            agent, {"query": word, "owner_id": owner, "include_stale": True, "limit": 50}
        )
    )
    check(ids["archived"] not in got, "archived cell returned without being asked for")


@vector("search_does_not_bump_access_count", "search")
def _(ctx: Ctx) -> None:
    agent, owner = ctx.agent("a"), ctx.owner()
    word = f"nobump{ctx.run}"
    cid = ctx.create(agent, owner, f"{word} cell")["id"]
    for _ in range(3):
        out = ctx.search(agent, {"query": word, "owner_id": owner})
        check([c["id"] for c in out["results"]] == [cid], "search did not find the cell")
        check(
            out["results"][0]["scoring"]["access_count"] == 0,
            "search result shows a bumped access_count",
        )
    check(ctx.get_ok(agent, cid)["scoring"]["access_count"] == 1, "search bumped access_count")


@vector("search_has_more_and_offset", "search")
def _(ctx: Ctx) -> None:
    agent, owner = ctx.agent("a"), ctx.owner()
    word = f"pelican{ctx.run}"
    made = {ctx.create(agent, owner, f"{word} note number {i}")["id"] for i in range(3)}
    p1 = ctx.search(agent, {"query": word, "owner_id": owner, "limit": 2})
    _check_page(p1, "search page 1", 2, 0)
    check(
        p1["returned"] == 2 and p1["has_more"] is True, f"page 1: {p1['returned']}/{p1['has_more']}"
    )
    p2 = ctx.search(agent, {"query": word, "owner_id": owner, "limit": 2, "offset": 2})
    _check_page(p2, "search page 2", 2, 2)
    check(
        p2["returned"] == 1 and p2["has_more"] is False,
        f"page 2: {p2['returned']}/{p2['has_more']}",
    )
    seen = [c["id"] for c in p1["results"] + p2["results"]]
    check(set(seen) == made and len(seen) == 3, "search pages overlap or miss cells")


@vector("search_paging_counts_only_readable", "search")
def _(ctx: Ctx) -> None:
    creator, reader, owner = ctx.agent("spc"), ctx.agent("spr"), ctx.owner()
    word = f"mixedpage{ctx.run}"
    readable = set()
    for i in range(6):
        policy = {"readable_by": [reader]} if i % 2 else {}
        cid = ctx.create(creator, owner, f"{word} item {i}", policy=policy)["id"]
        if i % 2:
            readable.add(cid)
    p1 = ctx.search(reader, {"query": word, "owner_id": owner, "limit": 2})
    check(
        p1["returned"] == 2 and p1["has_more"] is True,
        f"reader page 1: {p1['returned']}/{p1['has_more']}",
    )
    p2 = ctx.search(reader, {"query": word, "owner_id": owner, "limit": 2, "offset": 2})
    check(
        p2["returned"] == 1 and p2["has_more"] is False,
        f"reader page 2: {p2['returned']}/{p2['has_more']}",
    )
    seen = {c["id"] for c in p1["results"] + p2["results"]}
    check(seen == readable, f"reader saw {seen}, may read {readable}")
