"""The shared runner of the AMP v0.1 conformance suite: registry, helpers, context, CLI.

A vector is a small function registered with ``@vector(name, group)``. It returns
(PASS), raises ``Fail`` (FAIL) or raises ``Skip`` (SKIP: it could not verify anything in
this configuration, for example without ``--admin-token``). The vectors live in the area
modules beside this one (errors, cells, access, updates, paging, limits, lifecycle, keys);
``amp_suite/__init__.py`` imports them in run order, and ``main`` runs them in the order
they registered.

Like the whole suite, this module imports nothing from any server implementation: only
the standard library and httpx.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import subprocess
import sys
import traceback
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
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


# ---------------------------------------------------------------------------
# Runner
# ---------------------------------------------------------------------------


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
