"""Creating and reading cells: create, validation and GET vectors."""

from __future__ import annotations

import re
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .runner import (
    AMP_VERSION,
    ID_RE,
    Ctx,
    body_of,
    check,
    check_cell_shape,
    expect_error,
    expect_status,
    expect_validation,
    parse_ts,
    utcnow,
    vector,
)

# --- create -----------------------------------------------------------------

@vector("create_returns_201_full_cell", "create")
def _(ctx: Ctx) -> None:
    owner = ctx.owner()
    cell = ctx.create(ctx.agent("a"), owner, "The user prefers short emails", type="episodic")
    check_cell_shape(cell, "create response")
    check(cell["type"] == "episodic", f"type {cell['type']!r}")
    check(cell["content"]["text"] == "The user prefers short emails", "text not stored as sent")
    check(
        cell["identity"]["owner_id"] == owner and cell["identity"]["owner_type"] == "user",
        "identity wrong",
    )


@vector("create_defaults", "create")
def _(ctx: Ctx) -> None:
    cell = ctx.create(ctx.agent("a"), ctx.owner())
    s, p = cell["scoring"], cell["access_policy"]
    check(s.get("importance") == 0.5, f"importance default {s.get('importance')!r}")
    check(s.get("confidence") == 1.0, f"confidence default {s.get('confidence')!r}")
    check(s.get("decay_rate") == 0.01, f"decay_rate default {s.get('decay_rate')!r}")
    check(s.get("access_count") == 0, f"access_count default {s.get('access_count')!r}")
    check(
        p == {"readable_by": [], "writable_by": [], "public": False}, f"access_policy default {p!r}"
    )
    check(
        cell["lifecycle"].get("status") == "active", f"status {cell['lifecycle'].get('status')!r}"
    )
    check(cell.get("amp_version") == AMP_VERSION, f"amp_version {cell.get('amp_version')!r}")
    check(
        cell["content"].get("metadata") == {},
        f"metadata default {cell['content'].get('metadata')!r}",
    )


@vector("create_id_is_mem_ulid", "create")
def _(ctx: Ctx) -> None:
    cell = ctx.create(ctx.agent("a"), ctx.owner())
    check(ID_RE.match(cell["id"]), f"id {cell['id']!r} is not mem_ + 26 Crockford base32 chars")


@vector("create_ids_strictly_increasing", "create")
def _(ctx: Ctx) -> None:
    agent, owner = ctx.agent("a"), ctx.owner()
    ids = [ctx.create(agent, owner, f"sequential {i}")["id"] for i in range(8)]
    for before, after in zip(ids, ids[1:], strict=False):
        check(after > before, f"ids not strictly increasing: {before} then {after}")


@vector("create_ignores_client_id", "create")
def _(ctx: Ctx) -> None:
    body = ctx.cell_body(ctx.owner())
    body["id"] = "mem_01ARZ3NDEKTSV4RRFFQ69G5FAV"
    r = ctx.call("POST", "/memories", agent=ctx.agent("a"), body=body)
    expect_status(r, 201, "create with a client id")
    check(body_of(r)["id"] != body["id"], "server kept the client-sent id")


@vector("create_ignores_client_created_at", "create")
def _(ctx: Ctx) -> None:
    body = ctx.cell_body(ctx.owner())
    body["lifecycle"] = {"created_at": "2001-01-01T00:00:00Z"}
    r = ctx.call("POST", "/memories", agent=ctx.agent("a"), body=body)
    expect_status(r, 201, "create with a client created_at")
    created = parse_ts(body_of(r)["lifecycle"]["created_at"], "created_at")
    check(created.year > 2001, f"server kept the client-sent created_at {created}")


@vector("create_ignores_client_status", "create")
def _(ctx: Ctx) -> None:
    body = ctx.cell_body(ctx.owner())
    body["lifecycle"] = {"status": "archived"}
    r = ctx.call("POST", "/memories", agent=ctx.agent("a"), body=body)
    expect_status(r, 201, "create with a client status")
    check(body_of(r)["lifecycle"]["status"] == "active", "server kept the client-sent status")


@vector("create_ignores_client_access_count", "create")
def _(ctx: Ctx) -> None:
    r = ctx.call(
        "POST",
        "/memories",
        agent=ctx.agent("a"),
        body=ctx.cell_body(ctx.owner(), scoring={"importance": 0.7, "access_count": 77}),
    )
    expect_status(r, 201, "create with a client access_count")
    scoring = body_of(r)["scoring"]
    check(scoring["access_count"] == 0, f"access_count {scoring['access_count']!r}")
    check(scoring["importance"] == 0.7, "importance sent alongside was lost")


@vector("create_created_by_is_header", "create")
def _(ctx: Ctx) -> None:
    agent = ctx.agent("hdr")
    body = ctx.cell_body(ctx.owner())
    body["identity"]["created_by"] = ctx.agent("impostor")
    r = ctx.call("POST", "/memories", agent=agent, body=body)
    expect_status(r, 201, "create with a different body created_by")
    check(
        body_of(r)["identity"]["created_by"] == agent, "created_by is not the X-AMP-Agent-ID header"
    )


@vector("create_timestamps", "create")
def _(ctx: Ctx) -> None:
    cell = ctx.create(ctx.agent("a"), ctx.owner())
    raw = cell["lifecycle"]["created_at"]
    created = parse_ts(raw, "created_at")
    check(re.search(r"(Z|[+-]\d\d:\d\d)$", raw), f"created_at {raw!r} carries no UTC offset")
    check(abs((created - utcnow()).total_seconds()) < 24 * 3600, f"created_at {raw} is not now")


@vector("create_keeps_optional_fields", "create")
def _(ctx: Ctx) -> None:
    body = ctx.cell_body(
        ctx.owner(),
        "optional fields",
        type="procedural",
        metadata={"lang": "python", "n": 3, "nested": {"k": [1, 2]}},
        scoring={"importance": 0.8, "confidence": 0.9, "decay_rate": 0.05},
        policy={"readable_by": ["x-*"], "writable_by": ["y"], "public": True},
    )
    body["identity"]["session_id"] = "sess-1"
    body["provenance"] = {
        "source_type": "conversation",
        "source_ref": "conv-1",
        "extraction_method": "llm_extraction",
    }
    body["lifecycle"] = {"expires_at": "2031-05-06T07:08:09Z"}
    r = ctx.call("POST", "/memories", agent=ctx.agent("a"), body=body)
    expect_status(r, 201, "create with every optional field")
    cell = body_of(r)
    check(cell["content"]["metadata"] == body["content"]["metadata"], "metadata changed")
    check(cell["identity"]["session_id"] == "sess-1", "session_id lost")
    for key, value in body["scoring"].items():
        check(cell["scoring"][key] == value, f"scoring.{key} {cell['scoring'][key]!r} != {value!r}")
    check(
        cell["access_policy"] == body["access_policy"], f"access_policy {cell['access_policy']!r}"
    )
    check(cell["provenance"] == body["provenance"], f"provenance {cell['provenance']!r}")
    expires = parse_ts(cell["lifecycle"]["expires_at"], "expires_at")
    check(
        expires == parse_ts("2031-05-06T07:08:09Z"),
        f"expires_at {cell['lifecycle']['expires_at']!r}",
    )


@vector("create_accepts_boundary_scores", "create")
def _(ctx: Ctx) -> None:
    agent, owner = ctx.agent("a"), ctx.owner()
    for scoring in (
        {"importance": 0.0, "confidence": 0.0, "decay_rate": 0.0},
        {"importance": 1.0, "confidence": 1.0, "decay_rate": 5.0},
    ):
        cell = ctx.create(agent, owner, scoring=scoring)
        for key, value in scoring.items():
            check(cell["scoring"][key] == value, f"{key} {cell['scoring'][key]!r} != {value}")


# --- validation ----------------------------------------------------------------


def _create_422(ctx: Ctx, body: dict[str, Any], what: str, field: str | None) -> None:
    expect_validation(ctx.call("POST", "/memories", agent=ctx.agent("a"), body=body), what, field)


@vector("create_rejects_bad_type", "validation")
def _(ctx: Ctx) -> None:
    _create_422(ctx, ctx.cell_body(ctx.owner(), type="opinion"), "type=opinion", "type")
    body = ctx.cell_body(ctx.owner())
    del body["type"]
    _create_422(ctx, body, "type missing", "type")


@vector("create_rejects_empty_or_missing_text", "validation")
def _(ctx: Ctx) -> None:
    _create_422(ctx, ctx.cell_body(ctx.owner(), ""), "empty text", "text")
    body = ctx.cell_body(ctx.owner())
    del body["content"]["text"]
    _create_422(ctx, body, "text missing", "text")


@vector("create_rejects_importance_out_of_range", "validation")
def _(ctx: Ctx) -> None:
    for value in (1.01, -0.01):
        _create_422(
            ctx,
            ctx.cell_body(ctx.owner(), scoring={"importance": value}),
            f"importance={value}",
            "importance",
        )


@vector("create_rejects_confidence_out_of_range", "validation")
def _(ctx: Ctx) -> None:
    for value in (1.5, -1):
        _create_422(
            ctx,
            ctx.cell_body(ctx.owner(), scoring={"confidence": value}),
            f"confidence={value}",
            "confidence",
        )


@vector("create_rejects_negative_decay_rate", "validation")
def _(ctx: Ctx) -> None:
    _create_422(
        ctx,
        ctx.cell_body(ctx.owner(), scoring={"decay_rate": -0.001}),
        "decay_rate<0",
        "decay_rate",
    )


@vector("create_rejects_bad_owner_type", "validation")
def _(ctx: Ctx) -> None:
    _create_422(
        ctx, ctx.cell_body(ctx.owner(), owner_type="robot"), "owner_type=robot", "owner_type"
    )


@vector("create_rejects_missing_identity_fields", "validation")
def _(ctx: Ctx) -> None:
    body = ctx.cell_body(ctx.owner())
    del body["identity"]["owner_id"]
    _create_422(ctx, body, "owner_id missing", "owner_id")
    body = ctx.cell_body(ctx.owner())
    del body["identity"]["owner_type"]
    _create_422(ctx, body, "owner_type missing", "owner_type")


# --- get ------------------------------------------------------------------------


@vector("get_returns_cell", "get")
def _(ctx: Ctx) -> None:
    agent = ctx.agent("a")
    cell = ctx.create(agent, ctx.owner(), "read me back")
    got = ctx.get_ok(agent, cell["id"])
    check_cell_shape(got, "GET")
    check(
        got["id"] == cell["id"] and got["content"]["text"] == "read me back",
        "GET returned another cell",
    )


@vector("get_bumps_access_count_by_one", "get")
def _(ctx: Ctx) -> None:
    agent = ctx.agent("a")
    cell = ctx.create(agent, ctx.owner())
    counts = [ctx.get_ok(agent, cell["id"])["scoring"]["access_count"] for _ in range(3)]
    check(counts == [1, 2, 3], f"access_count over three GETs: {counts} (expected [1, 2, 3])")


@vector("get_sets_last_accessed_at", "get")
def _(ctx: Ctx) -> None:
    agent = ctx.agent("a")
    cell = ctx.create(agent, ctx.owner())
    created = parse_ts(cell["lifecycle"]["created_at"], "created_at")
    first = ctx.get_ok(agent, cell["id"])["lifecycle"]["last_accessed_at"]
    check(first is not None, "last_accessed_at still null after a GET")
    first_ts = parse_ts(first, "last_accessed_at")
    check(first_ts >= created, f"last_accessed_at {first} before created_at")
    time.sleep(0.05)
    second_ts = parse_ts(
        ctx.get_ok(agent, cell["id"])["lifecycle"]["last_accessed_at"], "last_accessed_at"
    )
    check(second_ts > first_ts, "last_accessed_at did not move on the next GET")


@vector("get_access_count_concurrent_no_lost_updates", "get")
def _(ctx: Ctx) -> None:
    agent = ctx.agent("a")
    cid = ctx.create(agent, ctx.owner())["id"]
    if ctx.api_key_mode:
        ctx.key_for(agent)
    with ThreadPoolExecutor(max_workers=10) as pool:
        statuses = list(pool.map(lambda _: ctx.get(agent, cid).status_code, range(30)))
    check(statuses == [200] * 30, f"concurrent GETs answered {sorted(set(statuses))}")
    count = ctx.get_ok(agent, cid)["scoring"]["access_count"]
    check(count == 31, f"access_count {count} after 31 GETs (30 concurrent): increments lost")


@vector("get_unknown_id_403", "get")
def _(ctx: Ctx) -> None:
    agent = ctx.agent("a")
    expect_error(
        ctx.get(agent, f"mem_{'7' * 26}"), 403, "ACCESS_DENIED", "GET unknown well-formed id"
    )
    expect_error(ctx.get(agent, "not-an-id"), 403, "ACCESS_DENIED", "GET unknown malformed id")
