"""Discovery (/health, /spec), the error envelope and identity (401) vectors."""

from __future__ import annotations

from .runner import (
    _UNSET,
    AMP_VERSION,
    ERROR_CODES,
    Ctx,
    body_of,
    check,
    check_envelope,
    expect_error,
    expect_status,
    expect_validation,
    vector,
)

# --- discovery --------------------------------------------------------------


@vector("health_shape", "discovery")
def _(ctx: Ctx) -> None:
    r = ctx.call("GET", "/health")
    expect_status(r, 200, "GET /health without identity")
    check(body_of(r) == {"status": "ok", "amp_version": AMP_VERSION}, f"/health body: {r.text}")


@vector("spec_shape", "discovery")
def _(ctx: Ctx) -> None:
    r = ctx.call("GET", "/spec")
    expect_status(r, 200, "GET /spec without identity")
    body = body_of(r)
    check(body.get("amp_version") == AMP_VERSION, f"amp_version {body.get('amp_version')!r}")
    caps = body.get("capabilities")
    check(isinstance(caps, dict), "capabilities missing")
    check(isinstance(caps.get("mcp_compatible"), bool), "mcp_compatible not a bool")
    backends = caps.get("storage_backends")
    check(
        isinstance(backends, list) and backends and all(isinstance(b, str) for b in backends),
        f"storage_backends {backends!r}",
    )
    check(isinstance(caps.get("api_keys_required"), bool), "api_keys_required not a bool")
    check(caps.get("max_page_size") == 100, f"max_page_size {caps.get('max_page_size')!r} != 100")
    limit = caps.get("scoring_patch_limit", "absent")
    check(
        limit is None
        or (
            isinstance(limit, dict)
            and isinstance(limit.get("max_patches"), int)
            and isinstance(limit.get("window_seconds"), (int, float))
        ),
        f"scoring_patch_limit {limit!r}",
    )
    emb = caps.get("embedding")
    check(
        isinstance(emb, dict)
        and isinstance(emb.get("provider"), str)
        and isinstance(emb.get("dimensions"), int),
        f"embedding {emb!r}",
    )
    check(
        caps.get("max_cell_size_bytes") == 65536,
        f"max_cell_size_bytes {caps.get('max_cell_size_bytes')!r}",
    )
    check(caps.get("retention_days") == 30, f"retention_days {caps.get('retention_days')!r}")
    sched = caps.get("lifecycle_scheduler")
    check(isinstance(sched, dict), f"lifecycle_scheduler {sched!r}")
    check(isinstance(sched.get("enabled"), bool), "lifecycle_scheduler.enabled not a bool")
    check(isinstance(sched.get("interval_seconds"), (int, float)), "interval_seconds not a number")
    check(
        sched.get("manual_run_endpoint") == "/amp/v1/lifecycle/run",
        f"manual_run_endpoint {sched.get('manual_run_endpoint')!r}",
    )


@vector("spec_api_keys_required_matches_mode", "discovery")
def _(ctx: Ctx) -> None:
    required = ctx.spec().get("api_keys_required")
    check(
        required is ctx.api_key_mode,
        f"/spec api_keys_required={required!r}, "
        f"but the suite runs with api-key-mode={ctx.api_key_mode}",
    )


# --- error envelope -----------------------------------------------------------


@vector("unknown_route_404_envelope", "errors")
def _(ctx: Ctx) -> None:
    agent = ctx.agent("a")
    expect_error(
        ctx.call("GET", f"/no-such-route-{ctx.run}", agent=agent),
        404,
        "NOT_FOUND",
        "GET unknown route",
    )
    expect_error(
        ctx.call("GET", "/memories/mem_x/extra/segments", agent=agent),
        404,
        "NOT_FOUND",
        "GET too-deep path",
    )


@vector("wrong_method_405_envelope", "errors")
def _(ctx: Ctx) -> None:
    agent = ctx.agent("a")
    expect_error(
        ctx.call("PUT", "/memories", agent=agent, body={}),
        405,
        "METHOD_NOT_ALLOWED",
        "PUT /memories",
    )
    expect_error(
        ctx.call("DELETE", "/health", agent=agent), 405, "METHOD_NOT_ALLOWED", "DELETE /health"
    )
    expect_error(
        ctx.call("PUT", "/memories/mem_01ARZ3NDEKTSV4RRFFQ69G5FAV", agent=agent, body={}),
        405,
        "METHOD_NOT_ALLOWED",
        "PUT /memories/{id}",
    )


@vector("validation_422_envelope", "errors")
def _(ctx: Ctx) -> None:
    body = ctx.cell_body(ctx.owner(), type="not-a-type")
    expect_validation(
        ctx.call("POST", "/memories", agent=ctx.agent("a"), body=body), "bad type", field="type"
    )


@vector("malformed_json_422", "errors")
def _(ctx: Ctx) -> None:
    agent = ctx.agent("a")
    expect_validation(
        ctx.call("POST", "/memories", agent=agent, raw=b'{"type": "semantic", '), "create"
    )
    expect_validation(ctx.call("POST", "/memories/search", agent=agent, raw=b"{not json"), "search")
    cell = ctx.create(agent, ctx.owner())
    expect_validation(
        ctx.call("PATCH", f"/memories/{cell['id']}", agent=agent, raw=b'{"content": '), "patch"
    )


@vector("non_finite_numbers_422", "errors")
def _(ctx: Ctx) -> None:
    # JSON has no NaN or Infinity; 1e400 is not a finite double either. None may be stored.
    agent = ctx.agent("a")
    owner = ctx.owner()
    for token in ("NaN", "Infinity", "-Infinity", "1e400"):
        raw = ('{"type": "semantic", "content": {"text": "finite"}, "identity": {"owner_id": '
               f'"{owner}", "owner_type": "user"}}, "scoring": {{"decay_rate": {token}}}}}')
        expect_validation(ctx.call("POST", "/memories", agent=agent, raw=raw.encode()),
                          f"create with decay_rate {token}")
    listed = ctx.call("GET", "/memories", agent=agent, params={"owner_id": owner})
    check(listed.status_code == 200 and listed.json().get("results") == [],
          "a refused non-finite create left a cell behind")


@vector("fixed_route_wrong_method_405", "errors")
def _(ctx: Ctx) -> None:
    # /memories/search is a route of its own: GET on it is a wrong method, not a cell read.
    agent = ctx.agent("a")
    expect_error(ctx.call("GET", "/memories/search", agent=agent), 405, "METHOD_NOT_ALLOWED",
                 "GET /memories/search")


@vector("trailing_slash_is_not_a_route", "errors")
def _(ctx: Ctx) -> None:
    agent = ctx.agent("a")
    r = ctx.call("GET", "/memories/", agent=agent)
    check(r.status_code in (404, 405) or r.status_code == 200 and "results" in r.json(),
          f"GET /memories/ answered {r.status_code} (a redirect or an empty body breaks "
          "clients that do not follow redirects)")
    if r.status_code in (404, 405):
        expect_error(r, r.status_code, "NOT_FOUND" if r.status_code == 404
                     else "METHOD_NOT_ALLOWED", "GET /memories/")


@vector("blank_search_query_like_empty", "search")
def _(ctx: Ctx) -> None:
    agent = ctx.agent("a")
    empty = ctx.call("POST", "/memories/search", agent=agent, body={"query": ""})
    blank = ctx.call("POST", "/memories/search", agent=agent, body={"query": "   "})
    check(empty.status_code == blank.status_code,
          f'query "" answered {empty.status_code} but "   " answered {blank.status_code}')


@vector("non_object_json_body_422", "errors")
def _(ctx: Ctx) -> None:
    agent = ctx.agent("a")
    expect_validation(
        ctx.call("POST", "/memories", agent=agent, body=[1, 2]), "create with a JSON array"
    )
    expect_validation(
        ctx.call("POST", "/memories/search", agent=agent, body="query"), "search with a JSON string"
    )


@vector("error_codes_are_documented", "errors")
def _(ctx: Ctx) -> None:
    agent = ctx.agent("a")
    for r in (
        ctx.call("GET", f"/memories/mem_{'0' * 26}", agent=agent),
        ctx.call("GET", "/memories/mem_x"),
        ctx.call("GET", "/memories", agent=agent, params={"limit": 0}),
    ):
        error = check_envelope(body_of(r), f"{r.request.method} {r.request.url}")
        check(error["code"] in ERROR_CODES, f"undocumented error code {error['code']!r}")
        check(error["message"].strip(), f"empty error.message for {error['code']}")
        check("Traceback" not in r.text, "traceback in an error body")


# --- identity ---------------------------------------------------------------


@vector("missing_agent_id_401", "identity")
def _(ctx: Ctx) -> None:
    expect_error(
        ctx.call("GET", "/memories"), 401, ctx.missing_code, "GET /memories without identity"
    )


@vector("empty_agent_id_401", "identity")
def _(ctx: Ctx) -> None:
    expect_error(
        ctx.call("GET", "/memories", agent=""), 401, ctx.missing_code, "GET /memories with empty id"
    )
    cell = ctx.create(ctx.agent("a"), ctx.owner())
    expect_error(ctx.get("", cell["id"]), 401, ctx.missing_code, "GET cell with empty id")


@vector("missing_agent_id_on_every_memory_route", "identity")
def _(ctx: Ctx) -> None:
    cell = ctx.create(ctx.agent("a"), ctx.owner())
    cid = cell["id"]
    for method, path, body in (
        ("GET", "/memories", _UNSET),
        ("GET", "/memories/query", _UNSET),
        ("GET", f"/memories/{cid}", _UNSET),
        ("PATCH", f"/memories/{cid}", {"content": {"metadata": {"x": 1}}}),
        ("DELETE", f"/memories/{cid}", _UNSET),
        ("POST", "/memories/search", {"query": "conformance"}),
    ):
        expect_error(ctx.call(method, path, body=body), 401, ctx.missing_code, f"{method} {path}")
    # nothing happened to the cell
    check(
        ctx.get_ok(ctx.agent("a"), cid)["content"].get("metadata") in ({}, None),
        "unauthenticated PATCH applied",
    )


@vector("identity_before_validation_invalid_body", "identity")
def _(ctx: Ctx) -> None:
    expect_error(
        ctx.call("POST", "/memories", body={}), 401, ctx.missing_code, "POST {} without identity"
    )
    expect_error(
        ctx.call("POST", "/memories", agent="", body={"type": "bogus"}),
        401,
        ctx.missing_code,
        "empty id, bad body",
    )
    expect_error(
        ctx.call("POST", "/memories/search", body={}),
        401,
        ctx.missing_code,
        "search {} without identity",
    )


@vector("identity_before_query_validation", "identity")
def _(ctx: Ctx) -> None:
    for path in ("/memories", "/memories/query"):
        for params in ({"limit": 0}, {"offset": -1}, {"status": "zombie"}):
            r = ctx.call("GET", path, params=params)
            expect_error(r, 401, ctx.missing_code, f"GET {path} {params} without identity")


@vector("identity_before_validation_malformed_json", "identity")
def _(ctx: Ctx) -> None:
    expect_error(
        ctx.call("POST", "/memories", raw=b"{oops"), 401, ctx.missing_code, "malformed create"
    )
    expect_error(
        ctx.call("POST", "/memories/search", raw=b"{oops"),
        401,
        ctx.missing_code,
        "malformed search",
    )
    expect_error(
        ctx.call("PATCH", f"/memories/mem_{'1' * 26}", raw=b"{oops"),
        401,
        ctx.missing_code,
        "malformed patch",
    )


@vector("identity_before_validation_no_body", "identity")
def _(ctx: Ctx) -> None:
    expect_error(ctx.call("POST", "/memories"), 401, ctx.missing_code, "body-less create")
    expect_error(ctx.call("POST", "/memories/search"), 401, ctx.missing_code, "body-less search")


@vector("identity_before_access", "identity")
def _(ctx: Ctx) -> None:
    unknown = f"mem_{'2' * 26}"
    expect_error(
        ctx.call("GET", f"/memories/{unknown}"),
        401,
        ctx.missing_code,
        "GET unknown id, no identity",
    )
    expect_error(
        ctx.call("DELETE", f"/memories/{unknown}"), 401, ctx.missing_code, "DELETE unknown id"
    )


@vector("create_created_by_body_fallback", "identity")
def _(ctx: Ctx) -> None:
    creator = ctx.agent("bodycreator")
    body = ctx.cell_body(ctx.owner())
    body["identity"]["created_by"] = creator
    r = ctx.call("POST", "/memories", body=body)
    if ctx.api_key_mode:
        expect_error(r, 401, "UNAUTHENTICATED", "keys on: body created_by is not an identity")
        return
    expect_status(r, 201, "keys off: no header, body identity.created_by")
    check(
        body_of(r)["identity"]["created_by"] == creator, "created_by is not the body's created_by"
    )
    # an empty header counts as missing, so the body's created_by applies again
    r = ctx.call("POST", "/memories", agent="", body=body)
    expect_status(r, 201, "keys off: empty header, body identity.created_by")
    check(body_of(r)["identity"]["created_by"] == creator, "empty header: body created_by unused")


@vector("create_without_any_identity_401", "identity")
def _(ctx: Ctx) -> None:
    expect_error(
        ctx.call("POST", "/memories", body=ctx.cell_body(ctx.owner())),
        401,
        ctx.missing_code,
        "valid body, no identity",
    )
