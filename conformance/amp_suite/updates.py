"""Changing cells: PATCH, status transitions and DELETE."""

from __future__ import annotations

import json
import time
from datetime import UTC, timedelta, timezone
from typing import Any

from .runner import (
    Ctx,
    check,
    check_cell_shape,
    expect_error,
    expect_status,
    expect_validation,
    parse_ts,
    rfc3339,
    vector,
)

# --- PATCH ----------------------------------------------------------------------------


@vector("patch_returns_cell_and_stamps_last_updated_at", "patch")
def _(ctx: Ctx) -> None:
    agent = ctx.agent("a")
    cell = ctx.create(agent, ctx.owner())
    before = cell["lifecycle"].get("last_updated_at")
    time.sleep(0.05)
    out = ctx.patch_ok(agent, cell["id"], {"content": {"metadata": {"v": 1}}})
    check_cell_shape(out, "PATCH response")
    check(out["content"]["metadata"] == {"v": 1}, "PATCH response does not show the change")
    stamp = out["lifecycle"].get("last_updated_at")
    check(stamp is not None, "last_updated_at not set by PATCH")
    stamp_ts = parse_ts(stamp, "last_updated_at")
    check(
        stamp_ts >= parse_ts(cell["lifecycle"]["created_at"]), "last_updated_at before created_at"
    )
    if before is not None:
        check(stamp_ts > parse_ts(before), f"last_updated_at did not move ({before} -> {stamp})")
    check(ctx.get_ok(agent, cell["id"])["content"]["metadata"] == {"v": 1}, "PATCH not persisted")


@vector("patch_scoring_partial_merge", "patch")
def _(ctx: Ctx) -> None:
    agent = ctx.agent("a")
    cell = ctx.create(
        agent, ctx.owner(), scoring={"importance": 0.4, "confidence": 0.8, "decay_rate": 0.2}
    )
    out = ctx.patch_ok(agent, cell["id"], {"scoring": {"importance": 0.9}})
    s = out["scoring"]
    check(s["importance"] == 0.9, f"importance {s['importance']}")
    check(s["confidence"] == 0.8 and s["decay_rate"] == 0.2, f"unsent scoring fields changed: {s}")


@vector("patch_access_policy_replaces_only_sent_lists", "patch")
def _(ctx: Ctx) -> None:
    agent = ctx.agent("a")
    r1, w1, r2 = ctx.agent("r1"), ctx.agent("w1"), ctx.agent("r2")
    cell = ctx.create(
        agent, ctx.owner(), policy={"readable_by": [r1], "writable_by": [w1], "public": False}
    )
    out = ctx.patch_ok(agent, cell["id"], {"access_policy": {"readable_by": [r2]}})
    check(
        out["access_policy"] == {"readable_by": [r2], "writable_by": [w1], "public": False},
        f"{out['access_policy']}",
    )
    out = ctx.patch_ok(agent, cell["id"], {"access_policy": {"public": True}})
    check(
        out["access_policy"] == {"readable_by": [r2], "writable_by": [w1], "public": True},
        f"{out['access_policy']}",
    )
    check(ctx.can_read(r2, cell["id"]), "new readable_by entry not in force")


@vector("patch_metadata_replaced_text_optional", "patch")
def _(ctx: Ctx) -> None:
    agent = ctx.agent("a")
    cell = ctx.create(agent, ctx.owner(), "keep this text", metadata={"a": 1, "b": 2})
    out = ctx.patch_ok(agent, cell["id"], {"content": {"metadata": {"c": 3}}})
    check(
        out["content"]["metadata"] == {"c": 3},
        f"metadata not replaced: {out['content']['metadata']}",
    )
    check(out["content"]["text"] == "keep this text", "text changed although omitted")


@vector("patch_text_keeps_metadata", "patch")
def _(ctx: Ctx) -> None:
    agent = ctx.agent("a")
    cell = ctx.create(agent, ctx.owner(), "old text", metadata={"a": 1})
    out = ctx.patch_ok(agent, cell["id"], {"content": {"text": "new text"}})
    check(out["content"]["text"] == "new text", "text not updated")
    check(out["content"]["metadata"] == {"a": 1}, f"metadata lost: {out['content']['metadata']}")
    check(
        out["type"] == cell["type"] and out["scoring"] == cell["scoring"],
        "unrelated fields changed",
    )


@vector("patch_rejects_invalid_fields", "patch")
def _(ctx: Ctx) -> None:
    agent = ctx.agent("a")
    cid = ctx.create(agent, ctx.owner(), "unchanged")["id"]
    for body, field in (
        ({"content": {"text": ""}}, "text"),
        ({"scoring": {"importance": 1.2}}, "importance"),
        ({"scoring": {"confidence": -0.5}}, "confidence"),
        ({"scoring": {"decay_rate": -1}}, "decay_rate"),
        ({"lifecycle": {"status": "zombie"}}, "status"),
        ({"access_policy": {"public": "yes please"}}, "public"),
    ):
        expect_validation(ctx.patch(agent, cid, body), json.dumps(body), field)
    got = ctx.get_ok(agent, cid)
    check(
        got["content"]["text"] == "unchanged" and got["scoring"]["importance"] == 0.5,
        "a refused PATCH applied",
    )


@vector("patch_identity_equal_ignored", "patch")
def _(ctx: Ctx) -> None:
    agent = ctx.agent("a")
    cell = ctx.create(agent, ctx.owner())
    out = ctx.patch_ok(
        agent, cell["id"], {"identity": cell["identity"], "content": {"metadata": {"k": 1}}}
    )
    check(out["identity"] == cell["identity"], "identity changed")
    check(out["content"]["metadata"] == {"k": 1}, "rest of the PATCH not applied")


@vector("patch_identity_different_422", "patch")
def _(ctx: Ctx) -> None:
    agent = ctx.agent("a")
    cell = ctx.create(agent, ctx.owner())
    for key, value in (
        ("owner_id", ctx.owner("thief")),
        ("created_by", ctx.agent("thief")),
        ("owner_type", "agent"),
    ):
        identity = dict(cell["identity"], **{key: value})
        expect_validation(
            ctx.patch(agent, cell["id"], {"identity": identity}), f"identity.{key} changed"
        )
    check(
        ctx.get_ok(agent, cell["id"])["identity"] == cell["identity"],
        "identity changed by a refused PATCH",
    )


@vector("patch_id_and_amp_version_equal_ignored", "patch")
def _(ctx: Ctx) -> None:
    agent = ctx.agent("a")
    cell = ctx.create(agent, ctx.owner())
    body = {"id": cell["id"], "amp_version": cell["amp_version"], "content": {"metadata": {"z": 1}}}
    out = ctx.patch_ok(agent, cell["id"], body)
    check(
        out["id"] == cell["id"] and out["content"]["metadata"] == {"z": 1},
        "PATCH with equal id not applied",
    )


@vector("patch_id_different_422", "patch")
def _(ctx: Ctx) -> None:
    agent = ctx.agent("a")
    cell = ctx.create(agent, ctx.owner())
    other = ctx.create(agent, ctx.owner())
    expect_validation(ctx.patch(agent, cell["id"], {"id": other["id"]}), "PATCH with another id")


@vector("patch_amp_version_different_422", "patch")
def _(ctx: Ctx) -> None:
    agent = ctx.agent("a")
    cell = ctx.create(agent, ctx.owner())
    expect_validation(
        ctx.patch(agent, cell["id"], {"amp_version": "0.2.0"}), "PATCH amp_version 0.2.0"
    )


@vector("patch_created_at_compared_as_instant", "patch")
def _(ctx: Ctx) -> None:
    agent = ctx.agent("a")
    cell = ctx.create(agent, ctx.owner())
    stored = parse_ts(cell["lifecycle"]["created_at"], "created_at")
    shifted = stored.astimezone(timezone(timedelta(hours=5, minutes=30))).isoformat()
    check(parse_ts(shifted) == stored, "internal: reformatting changed the instant")
    out = ctx.patch_ok(
        agent, cell["id"], {"lifecycle": {"created_at": shifted}, "content": {"metadata": {"t": 1}}}
    )
    check(parse_ts(out["lifecycle"]["created_at"]) == stored, "created_at moved")
    utc_plus = stored.astimezone(UTC).isoformat()  # +00:00 rather than Z
    ctx.patch_ok(agent, cell["id"], {"lifecycle": {"created_at": utc_plus}})


@vector("patch_created_at_different_422", "patch")
def _(ctx: Ctx) -> None:
    agent = ctx.agent("a")
    cell = ctx.create(agent, ctx.owner())
    stored = parse_ts(cell["lifecycle"]["created_at"], "created_at")
    earlier = rfc3339(stored - timedelta(days=3))
    expect_validation(
        ctx.patch(agent, cell["id"], {"lifecycle": {"created_at": earlier}}),
        "created_at moved back",
    )
    got = ctx.get_ok(agent, cell["id"])
    check(
        parse_ts(got["lifecycle"]["created_at"]) == stored, "created_at changed by a refused PATCH"
    )


# --- status transitions --------------------------------------------------------------


@vector("status_same_is_noop_200", "transitions")
def _(ctx: Ctx) -> None:
    agent = ctx.agent("a")
    cid = ctx.create(agent, ctx.owner())["id"]
    for status in ("active", "stale", "archived"):
        if status != "active":
            ctx.set_status(agent, cid, status)
        out = ctx.set_status(agent, cid, status)
        check(
            out["lifecycle"]["status"] == status,
            f"{status}->{status} changed status to {out['lifecycle']['status']}",
        )


@vector("status_moves_among_active_stale_archived", "transitions")
def _(ctx: Ctx) -> None:
    agent = ctx.agent("a")
    for path in (["stale", "active", "stale", "archived"], ["archived"]):
        cid = ctx.create(agent, ctx.owner())["id"]
        for status in path:
            out = ctx.set_status(agent, cid, status)
            check(
                out["lifecycle"]["status"] == status,
                f"status {out['lifecycle']['status']} after ->{status}",
            )
        check(ctx.get_ok(agent, cid)["lifecycle"]["status"] == path[-1], "status not persisted")


@vector("status_to_deleted_409", "transitions")
def _(ctx: Ctx) -> None:
    agent = ctx.agent("a")
    for start in ("active", "stale", "archived"):
        cid = ctx.create(agent, ctx.owner())["id"]
        if start != "active":
            ctx.set_status(agent, cid, start)
        r = ctx.patch(agent, cid, {"lifecycle": {"status": "deleted"}})
        expect_error(r, 409, "INVALID_TRANSITION", f"PATCH {start}->deleted")
        check(
            ctx.get_ok(agent, cid)["lifecycle"]["status"] == start,
            f"{start} cell changed by the refused PATCH",
        )


@vector("status_out_of_archived_409", "transitions")
def _(ctx: Ctx) -> None:
    agent = ctx.agent("a")
    cid = ctx.create(agent, ctx.owner())["id"]
    ctx.set_status(agent, cid, "archived")
    for target in ("active", "stale"):
        expect_error(
            ctx.patch(agent, cid, {"lifecycle": {"status": target}}),
            409,
            "INVALID_TRANSITION",
            f"archived->{target}",
        )
    check(
        ctx.get_ok(agent, cid)["lifecycle"]["status"] == "archived", "archived cell left archived"
    )


@vector("status_patch_is_atomic_on_409", "transitions")
def _(ctx: Ctx) -> None:
    agent = ctx.agent("a")
    cid = ctx.create(agent, ctx.owner(), "before")["id"]
    ctx.set_status(agent, cid, "archived")
    r = ctx.patch(agent, cid, {"lifecycle": {"status": "active"}, "content": {"text": "after"}})
    expect_error(r, 409, "INVALID_TRANSITION", "archived->active with a text change")
    check(
        ctx.get_ok(agent, cid)["content"]["text"] == "before",
        "the rest of a refused PATCH was applied",
    )


# --- DELETE ---------------------------------------------------------------------------


@vector("delete_active_or_stale_409", "delete")
def _(ctx: Ctx) -> None:
    agent = ctx.agent("a")
    for status in ("active", "stale"):
        cid = ctx.create(agent, ctx.owner())["id"]
        if status == "stale":
            ctx.set_status(agent, cid, "stale")
        expect_error(ctx.delete(agent, cid), 409, "INVALID_TRANSITION", f"DELETE {status} cell")
        check(
            ctx.get_ok(agent, cid)["lifecycle"]["status"] == status,
            f"{status} cell changed by refused DELETE",
        )


@vector("delete_archived_204", "delete")
def _(ctx: Ctx) -> None:
    agent = ctx.agent("a")
    cid = ctx.create(agent, ctx.owner())["id"]
    ctx.set_status(agent, cid, "archived")
    r = ctx.delete(agent, cid)
    expect_status(r, 204, "DELETE archived cell")
    check(r.content == b"", f"204 with a body: {r.text!r}")


@vector("delete_then_get_patch_delete_403", "delete")
def _(ctx: Ctx) -> None:
    agent = ctx.agent("a")
    cid = ctx.create(agent, ctx.owner())["id"]
    ctx.archive_and_delete(agent, cid)
    expect_error(ctx.get(agent, cid), 403, "ACCESS_DENIED", "GET after DELETE")
    expect_error(
        ctx.patch(agent, cid, {"lifecycle": {"status": "archived"}}), 403, "ACCESS_DENIED", "PATCH"
    )
    expect_error(ctx.delete(agent, cid), 403, "ACCESS_DENIED", "second DELETE")


@vector("deleted_never_listed_any_status", "delete")
def _(ctx: Ctx) -> None:
    agent, owner = ctx.agent("a"), ctx.owner()
    cid = ctx.create(agent, owner)["id"]
    ctx.archive_and_delete(agent, cid)
    for status in (None, "active", "stale", "archived", "deleted"):
        for path in ("/memories", "/memories/query"):
            body = ctx.listing(agent, path, owner_id=owner, status=status, limit=100)
            check(
                cid not in [c.get("id") for c in body["results"]],
                f"deleted cell listed by {path} status={status}",
            )
            check(
                all(c.get("lifecycle", {}).get("status") != "deleted" for c in body["results"]),
                f"a deleted cell was listed by {path} status={status}",
            )


@vector("deleted_never_in_search_any_status", "delete")
def _(ctx: Ctx) -> None:
    agent, owner = ctx.agent("a"), ctx.owner()
    word = f"tombstone{ctx.run}"
    cid = ctx.create(agent, owner, f"{word} erased fact")["id"]
    ctx.archive_and_delete(agent, cid)
    for status in (["deleted"], ["active", "stale", "archived", "deleted"], None):
        body: dict[str, Any] = {"query": word, "owner_id": owner, "include_stale": True}
        if status is not None:
            body["status"] = status
        out = ctx.search(agent, body)
        check(
            cid not in [c.get("id") for c in out["results"]],
            f"deleted cell found by search status={status}",
        )
