#!/usr/bin/env python3
"""AMP v0.1 conformance suite: talks to a server over HTTP and nothing else.

Usage::

    python conformance/amp_conformance.py --base-url http://127.0.0.1:8765
    python conformance/amp_conformance.py --base-url URL --admin-token TOKEN
    python conformance/amp_conformance.py --base-url URL --api-key-mode \
        --key-command 'ampup-memory keys create --agent {agent}'
    python conformance/amp_conformance.py --base-url URL -k pattern_ -k listing

Every rule of the AMP v0.1 wire contract is one named vector: a small function
registered with ``@vector(name, group)``. A vector either returns (PASS), raises
``Fail`` (FAIL) or raises ``Skip`` (SKIP: it could not verify anything, for
example because it needs the admin credential and none was given). Skips are
counted in neither passed nor failed.

Output: one ``PASS name`` / ``FAIL name: reason`` / ``SKIP name: why`` line per
vector, then exactly one summary line ``N passed, M failed`` (with
``, K skipped`` appended when K > 0). The exit code is 0 iff M == 0.

The suite imports nothing from any server implementation (only the standard
library and httpx). Every run makes up fresh agent and owner ids (a random run
id is part of each), so it can run any number of times against one server.

Vectors in the "lifecycle" group run the lifecycle engine with a ``now`` far in
the future; that changes the status of every cell on the server (the engine's
passes are global). Point the suite at a test server, not at one holding data
you care about, when you pass --admin-token.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import subprocess
import sys
import time
import traceback
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import httpx

AMP_VERSION = "0.1.0"
#: "mem_" + a ULID: 26 Crockford base32 characters, the first one 0-7.
ID_RE = re.compile(r"^mem_[0-7][0-9A-HJKMNP-TV-Z]{25}$")
ERROR_CODES = {
    "MISSING_AGENT_ID",
    "UNAUTHENTICATED",
    "ACCESS_DENIED",
    "ADMIN_DISABLED",
    "NOT_FOUND",
    "METHOD_NOT_ALLOWED",
    "INVALID_TRANSITION",
    "RETENTION_WINDOW",
    "CELL_TOO_LARGE",
    "VALIDATION_ERROR",
    "RATE_LIMITED",
}
#: Budget vectors refuse to hammer a server whose limit is larger than this.
MAX_BUDGET_TO_EXERCISE = 60


class Fail(Exception):
    """The server broke the rule this vector checks."""


class Skip(Exception):
    """The vector could not verify anything in this configuration."""


_UNSET: Any = object()

Vector = Callable[["Ctx"], None]
VECTORS: list[tuple[str, str, Vector]] = []


def vector(name: str, group: str) -> Callable[[Vector], Vector]:
    """Register a vector under a unique snake_case name."""
    if not re.fullmatch(r"[a-z][a-z0-9_]*", name):
        raise ValueError(f"vector name {name!r} is not snake_case")
    if any(existing == name for existing, _, _ in VECTORS):
        raise ValueError(f"duplicate vector name {name!r}")

    def register(fn: Vector) -> Vector:
        VECTORS.append((name, group, fn))
        return fn

    return register


# ---------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------


def check(condition: Any, message: str) -> None:
    if not condition:
        raise Fail(message)


def short(text: str, limit: int = 300) -> str:
    text = text.replace("\n", " ")
    return text if len(text) <= limit else text[:limit] + "..."


def describe(r: httpx.Response) -> str:
    return f"{r.status_code} {short(r.text)}"


def body_of(r: httpx.Response, what: str = "response") -> Any:
    try:
        return r.json()
    except ValueError:
        raise Fail(f"{what}: body is not JSON: {describe(r)}") from None


def parse_ts(value: Any, what: str = "timestamp") -> datetime:
    """Parse an RFC 3339 timestamp; a value without an offset is read as UTC."""
    if not isinstance(value, str):
        raise Fail(f"{what}: expected an RFC 3339 string, got {value!r}")
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    # Python < 3.11 cannot read more than 6 fractional digits; trim them.
    text = re.sub(r"(\.\d{6})\d+", r"\1", text)
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise Fail(f"{what}: not an RFC 3339 timestamp: {value!r}") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def utcnow() -> datetime:
    return datetime.now(UTC)


def check_envelope(body: Any, what: str) -> dict[str, Any]:
    """The one error shape: {"error": {"code", "message", "details"}}."""
    check(isinstance(body, dict), f"{what}: error body is not an object: {body!r}")
    error = body.get("error")
    check(isinstance(error, dict), f"{what}: no 'error' object in {short(json.dumps(body))}")
    assert isinstance(error, dict)
    for key in ("code", "message", "details"):
        check(key in error, f"{what}: error.{key} missing in {short(json.dumps(body))}")
    check(isinstance(error["code"], str), f"{what}: error.code is not a string")
    check(isinstance(error["message"], str), f"{what}: error.message is not a string")
    check(
        error["details"] is None or isinstance(error["details"], dict),
        f"{what}: error.details is not an object: {error['details']!r}",
    )
    return error


def expect_status(r: httpx.Response, status: int, what: str) -> None:
    check(r.status_code == status, f"{what}: expected {status}, got {describe(r)}")


def expect_error(r: httpx.Response, status: int, code: str, what: str) -> dict[str, Any]:
    check(
        r.status_code == status,
        f"{what}: expected {status} {code}, got {describe(r)}",
    )
    error = check_envelope(body_of(r, what), what)
    check(error["code"] == code, f"{what}: expected error.code {code}, got {error['code']!r}")
    return error


def loc_text(entry: dict[str, Any]) -> str:
    loc = entry.get("loc")
    if isinstance(loc, list):
        return ".".join(str(part) for part in loc)
    return str(loc)


def expect_validation(
    r: httpx.Response, what: str, field: str | None = None
) -> list[dict[str, Any]]:
    """A 422 VALIDATION_ERROR with details.errors = [{loc, msg, type}, ...]."""
    error = expect_error(r, 422, "VALIDATION_ERROR", what)
    details = error.get("details") or {}
    errors = details.get("errors") if isinstance(details, dict) else None
    check(
        isinstance(errors, list) and errors,
        f"{what}: details.errors must be a non-empty list, got {errors!r}",
    )
    assert isinstance(errors, list)
    for entry in errors:
        check(isinstance(entry, dict), f"{what}: details.errors entry is not an object: {entry!r}")
        for key in ("loc", "msg", "type"):
            check(key in entry, f"{what}: details.errors entry lacks {key!r}: {entry!r}")
        check(
            isinstance(entry["loc"], (list, str)),
            f"{what}: loc must be a list (or string): {entry['loc']!r}",
        )
        check(isinstance(entry["msg"], str), f"{what}: msg must be a string: {entry!r}")
        check(isinstance(entry["type"], str), f"{what}: type must be a string: {entry!r}")
    if field is not None:
        check(
            any(field in loc_text(entry) for entry in errors),
            f"{what}: no details.errors entry names {field!r}: {[loc_text(e) for e in errors]}",
        )
    return errors


# ---------------------------------------------------------------------------
# The context every vector receives
# ---------------------------------------------------------------------------


class Ctx:
    def __init__(
        self,
        base_url: str,
        *,
        admin_token: str | None,
        api_key_mode: bool,
        key_command: str,
        timeout: float,
    ) -> None:
        base = base_url.rstrip("/")
        self.base = base if base.endswith("/amp/v1") else base + "/amp/v1"
        self.http = httpx.Client(timeout=timeout)
        self.run = uuid.uuid4().hex[:10]
        self.admin_token = admin_token
        self.api_key_mode = api_key_mode
        self.key_command = key_command
        self._keys: dict[str, str] = {}
        self._spec: dict[str, Any] | None = None
        self._serial = 0

    # ids ------------------------------------------------------------------
    def agent(self, label: str) -> str:
        """An agent id unique to this run."""
        return f"cf{self.run}-{label}"

    def owner(self, label: str = "o") -> str:
        """An owner id unique to this run and to this call."""
        self._serial += 1
        return f"cfo{self.run}-{self._serial}-{label}"

    @property
    def missing_code(self) -> str:
        return "UNAUTHENTICATED" if self.api_key_mode else "MISSING_AGENT_ID"

    # keys -----------------------------------------------------------------
    def key_for(self, agent: str) -> str:
        if agent in self._keys:
            return self._keys[agent]
        argv = [part.replace("{agent}", agent) for part in shlex.split(self.key_command)]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.SubprocessError) as exc:
            raise Skip(f"cannot mint an API key for {agent!r}: {exc}") from None
        lines = [line.strip() for line in done.stdout.splitlines() if line.strip()]
        if done.returncode != 0 or not lines:
            raise Skip(
                f"key command failed for {agent!r} (rc={done.returncode}): "
                f"{short(done.stderr or done.stdout)}"
            )
        self._keys[agent] = lines[-1]
        return lines[-1]

    # HTTP -----------------------------------------------------------------
    def call(
        self,
        method: str,
        path: str,
        *,
        agent: str | None = None,
        body: Any = _UNSET,
        raw: bytes | None = None,
        params: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        key: Any = _UNSET,
        admin: Any = _UNSET,
    ) -> httpx.Response:
        """One request. agent=None sends no X-AMP-Agent-ID; "" sends an empty one.

        In API-key mode the agent's key is added unless key= says otherwise
        (key=None: no key). admin= adds X-AMP-Admin-Token.
        """
        sent: dict[str, str] = {}
        if agent is not None:
            sent["X-AMP-Agent-ID"] = agent
            if key is _UNSET and self.api_key_mode and agent:
                sent["X-AMP-API-Key"] = self.key_for(agent)
        if key is not _UNSET and key is not None:
            sent["X-AMP-API-Key"] = key
        if admin is not _UNSET and admin is not None:
            sent["X-AMP-Admin-Token"] = admin
        content: bytes | None = None
        if body is not _UNSET:
            content = json.dumps(body).encode("utf-8")
            sent["Content-Type"] = "application/json"
        elif raw is not None:
            content = raw
            sent["Content-Type"] = "application/json"
        if headers:
            sent.update(headers)
        return self.http.request(
            method, self.base + path, content=content, params=params, headers=sent
        )

    # discovery ------------------------------------------------------------
    def spec(self) -> dict[str, Any]:
        """The capabilities object from GET /spec (fetched once per run)."""
        if self._spec is None:
            r = self.call("GET", "/spec")
            expect_status(r, 200, "GET /spec")
            body = body_of(r, "GET /spec")
            caps = body.get("capabilities") if isinstance(body, dict) else None
            check(isinstance(caps, dict), f"GET /spec: no capabilities object: {short(r.text)}")
            assert isinstance(caps, dict)
            self._spec = caps
        return self._spec

    def max_page_size(self) -> int:
        value = self.spec().get("max_page_size")
        check(isinstance(value, int) and value > 0, f"/spec max_page_size unusable: {value!r}")
        assert isinstance(value, int)
        return value

    def max_cell_size(self) -> int:
        value = self.spec().get("max_cell_size_bytes")
        check(
            isinstance(value, int) and value > 2048,
            f"/spec max_cell_size_bytes unusable: {value!r}",
        )
        assert isinstance(value, int)
        return value

    # cells ----------------------------------------------------------------
    def cell_body(
        self,
        owner: str,
        text: str | None = None,
        *,
        type: str = "semantic",
        owner_type: str = "user",
        scoring: dict[str, Any] | None = None,
        policy: dict[str, Any] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {
            "type": type,
            "content": {"text": text if text is not None else f"conformance note {self.run}"},
            "identity": {"owner_id": owner, "owner_type": owner_type},
        }
        if metadata is not None:
            body["content"]["metadata"] = metadata
        if scoring is not None:
            body["scoring"] = scoring
        if policy is not None:
            body["access_policy"] = policy
        return body

    def create(
        self, agent: str, owner: str, text: str | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        r = self.call("POST", "/memories", agent=agent, body=self.cell_body(owner, text, **kwargs))
        expect_status(r, 201, "POST /memories")
        cell: dict[str, Any] = body_of(r, "POST /memories")
        check(
            isinstance(cell, dict) and isinstance(cell.get("id"), str),
            f"create: no id in {short(r.text)}",
        )
        return cell

    def get(self, agent: str, cell_id: str) -> httpx.Response:
        return self.call("GET", f"/memories/{cell_id}", agent=agent)

    def get_ok(self, agent: str, cell_id: str) -> dict[str, Any]:
        r = self.get(agent, cell_id)
        expect_status(r, 200, f"GET {cell_id} as {agent}")
        cell: dict[str, Any] = body_of(r)
        return cell

    def patch(self, agent: str, cell_id: str, body: Any) -> httpx.Response:
        return self.call("PATCH", f"/memories/{cell_id}", agent=agent, body=body)

    def patch_ok(self, agent: str, cell_id: str, body: Any, what: str = "PATCH") -> dict[str, Any]:
        r = self.patch(agent, cell_id, body)
        expect_status(r, 200, f"{what} {json.dumps(body)[:120]}")
        cell: dict[str, Any] = body_of(r)
        return cell

    def set_status(self, agent: str, cell_id: str, status: str) -> dict[str, Any]:
        return self.patch_ok(
            agent, cell_id, {"lifecycle": {"status": status}}, f"PATCH status={status}"
        )

    def delete(self, agent: str, cell_id: str) -> httpx.Response:
        return self.call("DELETE", f"/memories/{cell_id}", agent=agent)

    def archive_and_delete(self, agent: str, cell_id: str) -> None:
        self.set_status(agent, cell_id, "archived")
        r = self.delete(agent, cell_id)
        expect_status(r, 204, "DELETE archived cell")

    def listing(self, agent: str, path: str = "/memories", **params: Any) -> dict[str, Any]:
        r = self.call(
            "GET", path, agent=agent, params={k: v for k, v in params.items() if v is not None}
        )
        expect_status(r, 200, f"GET {path} {params}")
        body: dict[str, Any] = body_of(r, f"GET {path}")
        check(
            isinstance(body, dict) and isinstance(body.get("results"), list),
            f"GET {path}: no results list: {short(r.text)}",
        )
        return body

    def list_ids(
        self, agent: str, owner: str, status: str | None = None, **params: Any
    ) -> list[str]:
        body = self.listing(
            agent, owner_id=owner, status=status, limit=self.max_page_size(), **params
        )
        return [c.get("id") for c in body["results"]]

    def search(self, agent: str, body: dict[str, Any]) -> dict[str, Any]:
        r = self.call("POST", "/memories/search", agent=agent, body=body)
        expect_status(r, 200, f"POST /memories/search {json.dumps(body)[:120]}")
        out: dict[str, Any] = body_of(r, "search")
        check(
            isinstance(out, dict) and isinstance(out.get("results"), list),
            f"search: no results list: {short(r.text)}",
        )
        return out

    def search_ids(self, agent: str, body: dict[str, Any]) -> list[str]:
        return [c.get("id") for c in self.search(agent, body)["results"]]

    def can_read(self, agent: str, cell_id: str) -> bool:
        r = self.get(agent, cell_id)
        if r.status_code == 200:
            return True
        expect_error(r, 403, "ACCESS_DENIED", f"GET as {agent}")
        return False

    def can_write(self, agent: str, cell_id: str) -> bool:
        r = self.patch(agent, cell_id, {"content": {"metadata": {"touched_by": agent}}})
        if r.status_code == 200:
            return True
        expect_error(r, 403, "ACCESS_DENIED", f"PATCH as {agent}")
        return False

    # admin ----------------------------------------------------------------
    def require_admin(self) -> str:
        if not self.admin_token:
            raise Skip("needs --admin-token")
        return self.admin_token

    def admin(self, path: str, body: Any = _UNSET) -> httpx.Response:
        return self.call("POST", path, body=body, admin=self.require_admin())

    def lifecycle_run(self, now: datetime | None = None, dry_run: bool = False) -> dict[str, Any]:
        body: dict[str, Any] = {"dry_run": dry_run}
        if now is not None:
            body["now"] = rfc3339(now)
        r = self.admin("/lifecycle/run", body)
        expect_status(r, 200, f"POST /lifecycle/run {body}")
        out: dict[str, Any] = body_of(r, "lifecycle run")
        return out

    def budget(self) -> tuple[int, int]:
        limit = self.spec().get("scoring_patch_limit")
        if limit is None:
            raise Skip("server advertises no scoring_patch_limit (null)")
        check(isinstance(limit, dict), f"/spec scoring_patch_limit is not an object: {limit!r}")
        n, window = limit.get("max_patches"), limit.get("window_seconds")
        check(isinstance(n, int) and n > 0, f"scoring_patch_limit.max_patches unusable: {n!r}")
        check(
            isinstance(window, (int, float)) and window > 0, f"window_seconds unusable: {window!r}"
        )
        if n > MAX_BUDGET_TO_EXERCISE:
            raise Skip(f"max_patches={n} is too large to exercise")
        return int(n), int(window)


def scoring_patch(i: int) -> dict[str, Any]:
    return {"scoring": {"importance": round(0.5 + (i % 10) / 100, 2)}}


# ===========================================================================
# Vectors
# ===========================================================================

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


# --- create -----------------------------------------------------------------

CELL_SHAPE = {
    "content": ("text", "metadata"),
    "identity": ("owner_id", "owner_type", "created_by", "session_id"),
    "scoring": ("importance", "confidence", "decay_rate", "access_count"),
    "lifecycle": ("created_at", "last_accessed_at", "last_updated_at", "expires_at", "status"),
    "access_policy": ("readable_by", "writable_by", "public"),
    "provenance": ("source_type", "source_ref", "extraction_method"),
}


def check_cell_shape(cell: Any, what: str) -> None:
    check(isinstance(cell, dict), f"{what}: cell is not an object")
    for key in ("id", "amp_version", "type"):
        check(key in cell, f"{what}: cell lacks {key!r}")
    for section, keys in CELL_SHAPE.items():
        check(isinstance(cell.get(section), dict), f"{what}: cell lacks the {section!r} object")
        for key in keys:
            check(key in cell[section], f"{what}: cell lacks {section}.{key}")


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


# ===========================================================================
# Runner
# ===========================================================================


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="AMP v0.1 HTTP conformance suite")
    parser.add_argument(
        "--base-url", default="http://127.0.0.1:8765", help="server root (or .../amp/v1)"
    )
    parser.add_argument(
        "--admin-token", default=None, help="value of X-AMP-Admin-Token (enables admin vectors)"
    )
    parser.add_argument("--api-key-mode", action="store_true", help="the server has API keys on")
    parser.add_argument(
        "--key-command",
        default="ampup-memory keys create --agent {agent}",
        help="command that mints a key for {agent} and prints it on its last line (api-key mode)",
    )
    parser.add_argument(
        "-k",
        dest="filters",
        action="append",
        default=[],
        help="run vectors whose name contains this",
    )
    parser.add_argument(
        "--timeout", type=float, default=60.0, help="per-request timeout in seconds"
    )
    parser.add_argument("--list", action="store_true", help="print the vector names and exit")
    parser.add_argument(
        "--verbose", action="store_true", help="print a traceback for unexpected exceptions"
    )
    args = parser.parse_args(argv)

    selected = [v for v in VECTORS if not args.filters or any(f in v[0] for f in args.filters)]
    if args.list:
        for name, group, _ in selected:
            print(f"{group:12} {name}")
        return 0

    ctx = Ctx(
        args.base_url,
        admin_token=args.admin_token,
        api_key_mode=args.api_key_mode,
        key_command=args.key_command,
        timeout=args.timeout,
    )
    passed = failed = skipped = 0
    for name, _group, fn in selected:
        try:
            fn(ctx)
        except Skip as exc:
            skipped += 1
            print(f"SKIP {name}: {exc}", flush=True)
        except Fail as exc:
            failed += 1
            print(f"FAIL {name}: {exc}", flush=True)
        except httpx.HTTPError as exc:
            failed += 1
            print(f"FAIL {name}: HTTP error: {type(exc).__name__}: {exc}", flush=True)
        except Exception as exc:  # a malformed response the vector did not expect
            failed += 1
            print(f"FAIL {name}: unexpected {type(exc).__name__}: {exc}", flush=True)
            if args.verbose:
                traceback.print_exc()
        else:
            passed += 1
            print(f"PASS {name}", flush=True)
    ctx.http.close()
    summary = f"{passed} passed, {failed} failed"
    if skipped:
        summary += f", {skipped} skipped"
    print(summary)
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
