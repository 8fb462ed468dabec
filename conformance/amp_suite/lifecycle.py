"""The lifecycle engine and purge (need --admin-token). They run last: passes are global."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from .runner import (
    Ctx,
    body_of,
    check,
    expect_error,
    expect_status,
    expect_validation,
    parse_ts,
    utcnow,
    vector,
)

# --- lifecycle (needs the admin token) ---------------------------------------------


def _check_run_shape(out: Any, what: str) -> None:
    check(isinstance(out, dict), f"{what}: not an object")
    for key in ("evaluated", "transitions", "purged"):
        check(key in out, f"{what}: {key!r} missing in {out}")
    check(
        isinstance(out["evaluated"], int) and out["evaluated"] >= 0,
        f"{what}: evaluated {out['evaluated']!r}",
    )
    check(
        isinstance(out["purged"], int) and out["purged"] >= 0, f"{what}: purged {out['purged']!r}"
    )
    t = out["transitions"]
    check(isinstance(t, dict), f"{what}: transitions {t!r}")
    for key in ("active_to_stale", "stale_to_active", "stale_to_archived"):
        check(
            isinstance(t.get(key), int) and t[key] >= 0, f"{what}: transitions.{key} {t.get(key)!r}"
        )


def _listed(ctx: Ctx, agent: str, owner: str) -> dict[str, dict[str, Any]]:
    """Every status of this owner's cells, via listing (which resets no clock)."""
    out: dict[str, dict[str, Any]] = {}
    for status in ("active", "stale", "archived"):
        for cell in ctx.listing(agent, owner_id=owner, status=status, limit=100)["results"]:
            out[cell["id"]] = cell
    return out


@vector("lifecycle_run_shape", "lifecycle")
def _(ctx: Ctx) -> None:
    ctx.require_admin()
    ctx.create(ctx.agent("a"), ctx.owner())
    r = ctx.admin("/lifecycle/run", {})
    expect_status(r, 200, "lifecycle run {}")
    out = body_of(r)
    _check_run_shape(out, "lifecycle run")
    check(out["evaluated"] >= 1, "evaluated 0 although active cells exist")
    r = ctx.admin("/lifecycle/run")
    expect_status(r, 200, "lifecycle run without a body")
    _check_run_shape(body_of(r), "lifecycle run (no body)")


@vector("lifecycle_run_invalid_now_422", "lifecycle")
def _(ctx: Ctx) -> None:
    ctx.require_admin()
    expect_validation(
        ctx.admin("/lifecycle/run", {"now": "next tuesday"}), "now=next tuesday", "now"
    )
    expect_validation(ctx.admin("/lifecycle/run", {"dry_run": "maybe"}), "dry_run=maybe", "dry_run")


@vector("purge_not_deleted_409", "lifecycle")
def _(ctx: Ctx) -> None:
    ctx.require_admin()
    agent = ctx.agent("a")
    for status in ("active", "stale", "archived"):
        cid = ctx.create(agent, ctx.owner())["id"]
        if status != "active":
            ctx.set_status(agent, cid, status)
        expect_error(
            ctx.admin("/lifecycle/purge", {"id": cid}),
            409,
            "INVALID_TRANSITION",
            f"purge {status} cell",
        )
        check(
            ctx.get_ok(agent, cid)["lifecycle"]["status"] == status,
            f"{status} cell changed by purge",
        )


@vector("purge_requires_id_422", "lifecycle")
def _(ctx: Ctx) -> None:
    ctx.require_admin()
    expect_validation(ctx.admin("/lifecycle/purge", {}), "purge {}", "id")


@vector("purge_inside_retention_window_409", "lifecycle")
def _(ctx: Ctx) -> None:
    ctx.require_admin()
    agent = ctx.agent("a")
    cid = ctx.create(agent, ctx.owner())["id"]
    ctx.archive_and_delete(agent, cid)
    error = expect_error(
        ctx.admin("/lifecycle/purge", {"id": cid}), 409, "RETENTION_WINDOW", "purge fresh tombstone"
    )
    details = error.get("details") or {}
    for key in ("deleted_at", "purgeable_at", "days_remaining"):
        check(key in details, f"RETENTION_WINDOW details lack {key!r}: {details}")
    deleted_at = parse_ts(details["deleted_at"], "deleted_at")
    purgeable_at = parse_ts(details["purgeable_at"], "purgeable_at")
    days = ctx.spec().get("retention_days")
    check(isinstance(days, int), f"/spec retention_days {days!r}")
    assert isinstance(days, int)
    gap = (purgeable_at - deleted_at).total_seconds() / 86400
    check(
        abs(gap - days) < 0.01,
        f"purgeable_at - deleted_at = {gap:.3f} days, /spec retention_days = {days}",
    )
    check(
        abs((deleted_at - utcnow()).total_seconds()) < 24 * 3600,
        f"deleted_at {details['deleted_at']} is not now",
    )
    remaining = details["days_remaining"]
    check(
        isinstance(remaining, (int, float)) and days - 1 <= remaining <= days,
        f"days_remaining {remaining!r}",
    )
    message = error["message"]
    check(
        any(k in message for k in ("deleted_at", "purgeable", "days")),
        f"message names nothing: {message!r}",
    )


@vector("purge_refusal_keeps_cell", "lifecycle")
def _(ctx: Ctx) -> None:
    ctx.require_admin()
    agent = ctx.agent("a")
    cid = ctx.create(agent, ctx.owner())["id"]
    ctx.archive_and_delete(agent, cid)
    for attempt in (1, 2):
        expect_error(
            ctx.admin("/lifecycle/purge", {"id": cid}),
            409,
            "RETENTION_WINDOW",
            f"purge attempt {attempt}",
        )
    expect_error(ctx.get(agent, cid), 403, "ACCESS_DENIED", "deleted cell after refused purges")


@vector("lifecycle_dry_run_changes_nothing", "lifecycle")
def _(ctx: Ctx) -> None:
    ctx.require_admin()
    agent, owner = ctx.agent("a"), ctx.owner()
    cid = ctx.create(agent, owner, scoring={"importance": 0.9})["id"]
    out = ctx.lifecycle_run(utcnow() + timedelta(days=2000), dry_run=True)
    _check_run_shape(out, "dry run")
    check(
        out["transitions"]["active_to_stale"] >= 1,
        f"dry run at +2000 days reports no active_to_stale: {out}",
    )
    cells = _listed(ctx, agent, owner)
    check(
        cells[cid]["lifecycle"]["status"] == "active",
        f"dry run changed status to {cells[cid]['lifecycle']['status']}",
    )


@vector("lifecycle_future_now_moves_active_to_stale", "lifecycle")
def _(ctx: Ctx) -> None:
    ctx.require_admin()
    agent, owner = ctx.agent("a"), ctx.owner()
    cid = ctx.create(agent, owner, scoring={"importance": 0.9})["id"]
    out = ctx.lifecycle_run(utcnow() + timedelta(days=1000))
    _check_run_shape(out, "run at +1000 days")
    check(out["transitions"]["active_to_stale"] >= 1, f"no active_to_stale reported: {out}")
    check(
        cid in ctx.list_ids(agent, owner, status="stale"),
        "cell not stale after a run at +1000 days",
    )
    check(cid not in ctx.list_ids(agent, owner, status="active"), "cell still listed as active")


@vector("lifecycle_transition_resets_no_clock", "lifecycle")
def _(ctx: Ctx) -> None:
    ctx.require_admin()
    agent, owner = ctx.agent("a"), ctx.owner()
    cell = ctx.create(agent, owner, scoring={"importance": 0.9})
    before = _listed(ctx, agent, owner)[cell["id"]]["lifecycle"]
    ctx.lifecycle_run(utcnow() + timedelta(days=1000))
    after = _listed(ctx, agent, owner)[cell["id"]]["lifecycle"]
    check(after["status"] == "stale", f"status {after['status']} after the run")
    for key in ("last_updated_at", "last_accessed_at", "created_at"):
        check(
            after.get(key) == before.get(key),
            f"engine changed {key}: {before.get(key)} -> {after.get(key)}",
        )


@vector("lifecycle_zero_decay_stays_active", "lifecycle")
def _(ctx: Ctx) -> None:
    ctx.require_admin()
    agent, owner = ctx.agent("a"), ctx.owner()
    keep = ctx.create(agent, owner, scoring={"importance": 0.9, "decay_rate": 0.0})["id"]
    fade = ctx.create(agent, owner, scoring={"importance": 0.9, "decay_rate": 0.01})["id"]
    ctx.lifecycle_run(utcnow() + timedelta(days=1000))
    cells = _listed(ctx, agent, owner)
    check(cells[keep]["lifecycle"]["status"] == "active", "decay_rate 0 cell went stale")
    check(cells[fade]["lifecycle"]["status"] == "stale", "decaying cell stayed active")


@vector("lifecycle_stale_threshold_is_0_3", "lifecycle")
def _(ctx: Ctx) -> None:
    ctx.require_admin()
    agent, owner = ctx.agent("a"), ctx.owner()
    # score at +2 days: 0.31*e^-0.02 = 0.304 (stays), 0.32*0.9*e^-0.02 = 0.282 (goes)
    above = ctx.create(agent, owner, scoring={"importance": 0.31})["id"]
    below = ctx.create(agent, owner, scoring={"importance": 0.32, "confidence": 0.9})["id"]
    ctx.lifecycle_run(utcnow() + timedelta(days=2))
    cells = _listed(ctx, agent, owner)
    check(cells[above]["lifecycle"]["status"] == "active", "score 0.304 went stale")
    check(
        cells[below]["lifecycle"]["status"] == "stale",
        "score 0.282 stayed active (confidence ignored?)",
    )


@vector("lifecycle_stale_recovers_to_active", "lifecycle")
def _(ctx: Ctx) -> None:
    ctx.require_admin()
    agent, owner = ctx.agent("a"), ctx.owner()
    cid = ctx.create(agent, owner, scoring={"importance": 0.9})["id"]
    ctx.set_status(agent, cid, "stale")
    out = ctx.lifecycle_run()
    check(out["transitions"]["stale_to_active"] >= 1, f"no stale_to_active reported: {out}")
    check(
        _listed(ctx, agent, owner)[cid]["lifecycle"]["status"] == "active",
        "stale cell with score 0.9 not active",
    )


@vector("lifecycle_stale_to_archived_after_30_days", "lifecycle")
def _(ctx: Ctx) -> None:
    ctx.require_admin()
    agent, owner = ctx.agent("a"), ctx.owner()
    cid = ctx.create(agent, owner, scoring={"importance": 0.9})["id"]
    start = utcnow() + timedelta(days=1000)
    ctx.lifecycle_run(start)
    check(
        _listed(ctx, agent, owner)[cid]["lifecycle"]["status"] == "stale",
        "not stale after the first run",
    )
    ctx.lifecycle_run(start + timedelta(days=10))
    check(
        _listed(ctx, agent, owner)[cid]["lifecycle"]["status"] == "stale",
        "archived after 10 days stale",
    )
    out = ctx.lifecycle_run(start + timedelta(days=40))
    check(out["transitions"]["stale_to_archived"] >= 1, f"no stale_to_archived reported: {out}")
    check(
        _listed(ctx, agent, owner)[cid]["lifecycle"]["status"] == "archived",
        "not archived after 40 days stale",
    )


@vector("lifecycle_never_touches_archived", "lifecycle")
def _(ctx: Ctx) -> None:
    ctx.require_admin()
    agent, owner = ctx.agent("a"), ctx.owner()
    cid = ctx.create(agent, owner, scoring={"importance": 1.0, "decay_rate": 0.0})["id"]
    ctx.set_status(agent, cid, "archived")
    before = _listed(ctx, agent, owner)[cid]["lifecycle"]
    ctx.lifecycle_run()
    ctx.lifecycle_run(utcnow() + timedelta(days=1000))
    after = _listed(ctx, agent, owner)[cid]["lifecycle"]
    check(after == before, f"engine touched an archived cell: {before} -> {after}")


@vector("lifecycle_evaluates_only_active_and_stale", "lifecycle")
def _(ctx: Ctx) -> None:
    ctx.require_admin()
    agent, owner = ctx.agent("a"), ctx.owner()
    base = ctx.lifecycle_run(dry_run=True)["evaluated"]
    archived = ctx.create(agent, owner)["id"]
    ctx.set_status(agent, archived, "archived")
    deleted = ctx.create(agent, owner)["id"]
    ctx.archive_and_delete(agent, deleted)
    after_cold = ctx.lifecycle_run(dry_run=True)["evaluated"]
    ctx.create(agent, owner)
    stale = ctx.create(agent, owner)["id"]
    ctx.set_status(agent, stale, "stale")
    after_warm = ctx.lifecycle_run(dry_run=True)["evaluated"]
    check(
        after_cold == base,
        f"evaluated went {base} -> {after_cold} after adding an archived and a deleted cell",
    )
    check(
        after_warm == base + 2,
        f"evaluated went {base} -> {after_warm} after adding an active and a stale cell",
    )


@vector("lifecycle_run_keeps_deleted_inside_window", "lifecycle")
def _(ctx: Ctx) -> None:
    ctx.require_admin()
    agent = ctx.agent("a")
    cid = ctx.create(agent, ctx.owner())["id"]
    ctx.archive_and_delete(agent, cid)
    ctx.lifecycle_run()
    ctx.lifecycle_run(utcnow() + timedelta(days=10))
    r = ctx.admin("/lifecycle/purge", {"id": cid})
    expect_error(
        r,
        409,
        "RETENTION_WINDOW",
        "purge after lifecycle runs inside the window (cell must still exist)",
    )
