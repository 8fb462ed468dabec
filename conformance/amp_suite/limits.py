"""Limits and precedence: cell size (413), scoring budget (429), order of checks, admin routes."""

from __future__ import annotations

from typing import Any

from .runner import (
    Ctx,
    Skip,
    body_of,
    check,
    check_envelope,
    describe,
    expect_error,
    expect_status,
    expect_validation,
    scoring_patch,
    vector,
)

# --- size limit ------------------------------------------------------------------------


def _text(n: int) -> str:
    return ("abcdefghi " * (n // 10 + 1))[:n]


@vector("create_size_limit_413", "size")
def _(ctx: Ctx) -> None:
    limit = ctx.max_cell_size()
    r = ctx.call(
        "POST", "/memories", agent=ctx.agent("a"), body=ctx.cell_body(ctx.owner(), _text(limit + 1))
    )
    expect_error(r, 413, "CELL_TOO_LARGE", f"text of {limit + 1} bytes")


@vector("create_size_counts_whole_cell", "size")
def _(ctx: Ctx) -> None:
    limit = ctx.max_cell_size()
    r = ctx.call(
        "POST",
        "/memories",
        agent=ctx.agent("a"),
        body=ctx.cell_body(ctx.owner(), _text(limit - 150)),
    )
    expect_error(r, 413, "CELL_TOO_LARGE", f"text of {limit - 150} bytes (whole cell over {limit})")


@vector("create_size_under_limit_accepted", "size")
def _(ctx: Ctx) -> None:
    limit = ctx.max_cell_size()
    agent = ctx.agent("a")
    cell = ctx.create(agent, ctx.owner(), _text(limit - 4096))
    check(
        len(ctx.get_ok(agent, cell["id"])["content"]["text"]) == limit - 4096,
        "large text truncated",
    )


@vector("create_size_counts_utf8_bytes", "size")
def _(ctx: Ctx) -> None:
    limit = ctx.max_cell_size()
    chars = limit // 2 + 200  # fewer characters than the limit, more UTF-8 bytes
    r = ctx.call(
        "POST", "/memories", agent=ctx.agent("a"), body=ctx.cell_body(ctx.owner(), "\u00e9" * chars)
    )
    expect_error(r, 413, "CELL_TOO_LARGE", f"{chars} two-byte characters")


@vector("create_size_is_utf8_not_ascii_escaped", "size")
def _(ctx: Ctx) -> None:
    limit = ctx.max_cell_size()
    chars = (limit - 8192) // 2  # ~28k bytes of UTF-8, ~170k as \\u escapes
    agent = ctx.agent("a")
    cell = ctx.create(agent, ctx.owner(), "\u00e9" * chars)
    check(
        ctx.get_ok(agent, cell["id"])["content"]["text"] == "\u00e9" * chars,
        "non-ASCII text altered",
    )


@vector("patch_size_limit_413_keeps_cell", "size")
def _(ctx: Ctx) -> None:
    limit = ctx.max_cell_size()
    agent = ctx.agent("a")
    cell = ctx.create(agent, ctx.owner(), _text(limit // 2), metadata={"keep": True})
    r = ctx.patch(agent, cell["id"], {"content": {"metadata": {"blob": "b" * (limit // 2 + 100)}}})
    expect_error(r, 413, "CELL_TOO_LARGE", "PATCH making the cell too large")
    r = ctx.patch(agent, cell["id"], {"content": {"text": _text(limit + 10)}})
    expect_error(r, 413, "CELL_TOO_LARGE", "PATCH text over the limit")
    got = ctx.get_ok(agent, cell["id"])
    check(
        got["content"]["metadata"] == {"keep": True} and len(got["content"]["text"]) == limit // 2,
        "cell changed",
    )


# --- scoring budget -----------------------------------------------------------------------


def _exhaust(ctx: Ctx, agent: str, cid: str, n: int) -> None:
    for i in range(n):
        ctx.patch_ok(agent, cid, scoring_patch(i), f"scoring PATCH {i + 1}/{n}")


@vector("scoring_budget_429_with_retry_after", "budget")
def _(ctx: Ctx) -> None:
    n, window = ctx.budget()
    agent = ctx.agent("a")
    cid = ctx.create(agent, ctx.owner())["id"]
    _exhaust(ctx, agent, cid, n)
    r = ctx.patch(agent, cid, scoring_patch(n))
    error = expect_error(r, 429, "RATE_LIMITED", f"scoring PATCH {n + 1}")
    header = r.headers.get("Retry-After")
    check(header is not None and header.strip().isdigit(), f"Retry-After header {header!r}")
    assert header is not None
    seconds = (error.get("details") or {}).get("retry_after_seconds")
    check(
        isinstance(seconds, (int, float)) and not isinstance(seconds, bool),
        f"details.retry_after_seconds {seconds!r}",
    )
    assert isinstance(seconds, (int, float))
    check(0 < seconds <= window, f"retry_after_seconds {seconds} outside (0, {window}]")
    check(0 < int(header) <= window + 1, f"Retry-After {header} outside (0, {window}]")
    check(abs(int(header) - seconds) <= 1, f"Retry-After {header} disagrees with details {seconds}")
    check(
        ctx.get_ok(agent, cid)["scoring"]["importance"]
        == scoring_patch(n - 1)["scoring"]["importance"],
        "429 applied",
    )


@vector("scoring_budget_refused_attempts_dont_count", "budget")
def _(ctx: Ctx) -> None:
    n, _ = ctx.budget()
    agent, stranger = ctx.agent("a"), ctx.agent("stranger")
    cid = ctx.create(agent, ctx.owner())["id"]
    _exhaust(ctx, agent, cid, n - 1)
    for _ in range(3):
        expect_validation(
            ctx.patch(agent, cid, {"scoring": {"importance": 3}}), "invalid scoring PATCH"
        )
        expect_error(
            ctx.patch(stranger, cid, scoring_patch(1)),
            403,
            "ACCESS_DENIED",
            "stranger scoring PATCH",
        )
    ctx.patch_ok(agent, cid, scoring_patch(n), f"scoring PATCH {n}/{n} after refused attempts")
    expect_error(
        ctx.patch(agent, cid, scoring_patch(n + 1)), 429, "RATE_LIMITED", f"scoring PATCH {n + 1}"
    )


@vector("scoring_budget_ignores_non_scoring_patches", "budget")
def _(ctx: Ctx) -> None:
    n, _ = ctx.budget()
    agent = ctx.agent("a")
    cid = ctx.create(agent, ctx.owner())["id"]
    for i in range(n + 2):
        ctx.patch_ok(agent, cid, {"content": {"metadata": {"i": i}}}, "metadata PATCH")
    _exhaust(ctx, agent, cid, n)
    expect_error(
        ctx.patch(agent, cid, scoring_patch(0)), 429, "RATE_LIMITED", f"scoring PATCH {n + 1}"
    )
    ctx.patch_ok(
        agent,
        cid,
        {"content": {"metadata": {"after": True}}},
        "metadata PATCH on an exhausted cell",
    )


@vector("scoring_budget_is_per_cell", "budget")
def _(ctx: Ctx) -> None:
    n, _ = ctx.budget()
    agent, owner = ctx.agent("a"), ctx.owner()
    first, second = ctx.create(agent, owner)["id"], ctx.create(agent, owner)["id"]
    _exhaust(ctx, agent, first, n)
    expect_error(ctx.patch(agent, first, scoring_patch(0)), 429, "RATE_LIMITED", "exhausted cell")
    ctx.patch_ok(agent, second, scoring_patch(0), "scoring PATCH on another cell")


# --- order of checks ------------------------------------------------------------------------


@vector("order_403_before_422", "order")
def _(ctx: Ctx) -> None:
    creator, stranger = ctx.agent("creator"), ctx.agent("stranger")
    cid = ctx.create(creator, ctx.owner())["id"]
    bad = {"scoring": {"importance": 9}, "lifecycle": {"status": "zombie"}}
    expect_error(ctx.patch(stranger, cid, bad), 403, "ACCESS_DENIED", "stranger invalid PATCH")
    expect_error(
        ctx.patch(creator, f"mem_{'5' * 26}", bad),
        403,
        "ACCESS_DENIED",
        "invalid PATCH of unknown id",
    )


@vector("order_403_before_422_malformed_json", "order")
def _(ctx: Ctx) -> None:
    creator, stranger = ctx.agent("creator"), ctx.agent("stranger")
    cid = ctx.create(creator, ctx.owner())["id"]
    r = ctx.call("PATCH", f"/memories/{cid}", agent=stranger, raw=b"{broken")
    expect_error(r, 403, "ACCESS_DENIED", "stranger PATCH with malformed JSON")


@vector("order_403_before_409", "order")
def _(ctx: Ctx) -> None:
    creator, stranger = ctx.agent("creator"), ctx.agent("stranger")
    cid = ctx.create(creator, ctx.owner())["id"]
    expect_error(
        ctx.delete(stranger, cid), 403, "ACCESS_DENIED", "stranger DELETE of an active cell"
    )
    r = ctx.patch(stranger, cid, {"lifecycle": {"status": "deleted"}})
    expect_error(r, 403, "ACCESS_DENIED", "stranger PATCH to deleted")


@vector("order_422_before_409", "order")
def _(ctx: Ctx) -> None:
    agent = ctx.agent("a")
    cid = ctx.create(agent, ctx.owner())["id"]
    r = ctx.patch(agent, cid, {"lifecycle": {"status": "deleted"}, "scoring": {"importance": 4}})
    expect_validation(r, "invalid PATCH that also asks for deleted")


@vector("order_422_before_413", "order")
def _(ctx: Ctx) -> None:
    limit = ctx.max_cell_size()
    agent = ctx.agent("a")
    body = ctx.cell_body(ctx.owner(), _text(limit + 10), scoring={"importance": 2})
    expect_validation(
        ctx.call("POST", "/memories", agent=agent, body=body), "oversized invalid create"
    )
    cid = ctx.create(agent, ctx.owner())["id"]
    r = ctx.patch(
        agent, cid, {"content": {"text": _text(limit + 10)}, "scoring": {"confidence": -3}}
    )
    expect_validation(r, "oversized invalid PATCH")


@vector("order_409_before_413", "order")
def _(ctx: Ctx) -> None:
    limit = ctx.max_cell_size()
    agent = ctx.agent("a")
    cid = ctx.create(agent, ctx.owner())["id"]
    ctx.set_status(agent, cid, "archived")
    r = ctx.patch(
        agent, cid, {"lifecycle": {"status": "active"}, "content": {"text": _text(limit + 10)}}
    )
    expect_error(r, 409, "INVALID_TRANSITION", "oversized PATCH out of archived")


@vector("order_budget_after_access_and_validation", "order")
def _(ctx: Ctx) -> None:
    n, _ = ctx.budget()
    agent, stranger = ctx.agent("a"), ctx.agent("stranger")
    cid = ctx.create(agent, ctx.owner())["id"]
    _exhaust(ctx, agent, cid, n)
    expect_error(
        ctx.patch(stranger, cid, scoring_patch(0)),
        403,
        "ACCESS_DENIED",
        "stranger on exhausted cell",
    )
    expect_validation(
        ctx.patch(agent, cid, {"scoring": {"importance": 8}}), "invalid scoring on exhausted cell"
    )


@vector("order_429_before_409", "order")
def _(ctx: Ctx) -> None:
    n, _ = ctx.budget()
    agent = ctx.agent("a")
    cid = ctx.create(agent, ctx.owner())["id"]
    _exhaust(ctx, agent, cid, n)
    r = ctx.patch(agent, cid, {"scoring": {"importance": 0.6}, "lifecycle": {"status": "deleted"}})
    expect_error(r, 429, "RATE_LIMITED", "scoring + status deleted on an exhausted cell")


# --- admin routes ------------------------------------------------------------------------------


def _admin_denial_code(ctx: Ctx, path: str, body: Any) -> str:
    """POST an admin route without credential: 403, code by configuration."""
    r = ctx.call("POST", path, body=body, agent=ctx.agent("notadmin"))
    check(r.status_code == 403, f"{path} without admin credential: expected 403, got {describe(r)}")
    error = check_envelope(body_of(r), path)
    if ctx.admin_token:
        check(
            error["code"] == "ACCESS_DENIED",
            f"{path}: admin configured, missing token gave {error['code']}",
        )
    else:
        check(error["code"] in ("ADMIN_DISABLED", "ACCESS_DENIED"), f"{path}: code {error['code']}")
    return str(error["code"])


@vector("admin_run_requires_credential", "admin")
def _(ctx: Ctx) -> None:
    code = _admin_denial_code(ctx, "/lifecycle/run", {"dry_run": True})
    r = ctx.call("POST", "/lifecycle/run", body={"dry_run": True}, admin="wrong-" + ctx.run)
    expect_error(r, 403, code, "lifecycle run with a wrong token")
    r = ctx.call("POST", "/lifecycle/run", body={"dry_run": True}, admin="")
    expect_error(r, 403, code, "lifecycle run with an empty token")


@vector("admin_purge_requires_credential", "admin")
def _(ctx: Ctx) -> None:
    agent = ctx.agent("a")
    cid = ctx.create(agent, ctx.owner())["id"]
    code = _admin_denial_code(ctx, "/lifecycle/purge", {"id": cid})
    r = ctx.call("POST", "/lifecycle/purge", body={"id": cid}, admin="wrong-" + ctx.run)
    expect_error(r, 403, code, "purge with a wrong token")
    ctx.get_ok(agent, cid)


@vector("admin_disabled_when_unconfigured", "admin")
def _(ctx: Ctx) -> None:
    if ctx.admin_token:
        raise Skip("an admin token is configured (ADMIN_DISABLED applies only when none is)")
    r = ctx.call("POST", "/lifecycle/run", body={"dry_run": True})
    error = check_envelope(body_of(r), "lifecycle run")
    if error["code"] == "ACCESS_DENIED":
        raise Skip("server has an admin credential configured; pass --admin-token to test it")
    expect_error(r, 403, "ADMIN_DISABLED", "lifecycle run, no admin configured")
    expect_error(
        ctx.call("POST", "/lifecycle/purge", body={"id": "mem_x"}), 403, "ADMIN_DISABLED", "purge"
    )


@vector("admin_token_accepted", "admin")
def _(ctx: Ctx) -> None:
    ctx.require_admin()
    r = ctx.admin("/lifecycle/run", {"dry_run": True})
    expect_status(r, 200, "lifecycle dry run with the admin token")


@vector("admin_checked_before_validation", "admin")
def _(ctx: Ctx) -> None:
    r = ctx.call("POST", "/lifecycle/run", body={"now": "not a time"}, admin="wrong-" + ctx.run)
    check(r.status_code == 403, f"invalid body with a wrong token: expected 403, got {describe(r)}")
    r = ctx.call("POST", "/lifecycle/purge", body={}, admin="wrong-" + ctx.run)
    check(r.status_code == 403, f"purge {{}} with a wrong token: expected 403, got {describe(r)}")
