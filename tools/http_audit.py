"""Audit every HTTP route as an outside conformance checker would: over real HTTP, against
real servers on SQLite and on PostgreSQL, with API keys off and on.

    PYTHONPATH=src:. python tools/http_audit.py [--backends sqlite,postgres] [--keys off,on]
                                               [--examples 20] [--seed 1] [--out DIR]

Two parts per server (docs/testing.md, "The HTTP audit"):

1. schemathesis's own CLI (``st run``) over the served ``/openapi.json``: its example,
   coverage (boundary and invalid values of every parameter and field) and fuzzing phases,
   with every check but ``positive_data_acceptance`` (a schema-valid request may be refused
   for what exists or for a rule no JSON Schema states: tests/test_fuzz.py lists those).
   Path ids, scopes and commits come from the seeded records most of the time, so the
   requests get past "not found" into the code behind.
2. Probes no schema-driven tool sends: every status checked against the operation's
   documented ``responses``; a body over ``max_request_bytes`` and JSON nested 100,000 deep
   on every body route; NUL, a lone surrogate, right-to-left marks, combining marks and
   10,000 characters in every path segment and every top-level string field; each query
   parameter twice; odd If-Match / If-None-Match values (and each twice) on every route
   that takes them, and on every read answering an ETag a 304 for its tag and a 412 for a
   stale If-Match; HEAD, OPTIONS, TRACE and an unknown method on every path; forged,
   stale and another caller's pagination cursors; the caller and key matrix (keys on: no
   key, a wrong key, another agent's key, an unknown agent must be one identical 401);
   admin routes without the admin credential; another caller's records against missing
   ones, status, body and time. What HTTP clients send besides clean JSON (`probe_bodies`:
   no or another Content-Type, charsets, a BOM, empty, top-level non-objects, a key twice,
   chunked, Expect: 100-continue, a Content-Encoding) and besides clean requests
   (`probe_requests`: an unsatisfiable Accept, long and non-ASCII headers, bad
   percent-encoding, + against %20, HTTP/1.0 without Host, path variants sent raw).

Every answer must be below 500 with no traceback, a JSON error envelope for a 4xx, a
status the operation documents, ``Cache-Control: no-store`` and a ``Vary`` naming the
caller headers, no CORS header, ``WWW-Authenticate`` on a 401 and ``Location`` on a 201
whose operation documents one. Findings go to ``DIR/findings.json`` and the exit code is
1 when there are any. Takes several minutes a server (see docs/testing.md).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.pg import PostgresFactory, postgres_factory  # noqa: E402
from tests.server_process import ServerProcess, plain_client, raw_exchange  # noqa: E402

ADMIN_TOKEN = "audit-admin-token"
DOOMED_BRANCH = "doomed"
USER, OTHER = "aud.user", "aud.other"
AGENT, OTHER_AGENT, PLAIN_AGENT = "aud_agent", "aud_other", "aud_plain"
QUIET = {"AMP_ADMIN_TOKEN": ADMIN_TOKEN, "AMP_EMBEDDING_PROVIDER": "hash",
         "AMP_LIFECYCLE_ENABLED": "false", "AMPUP_MEMORY_MAINTENANCE_INTERVAL_SECONDS": "0",
         "AMP_SCORING_PATCH_LIMIT": "0"}
# Edge text for every string field and path segment (the brief of a conformance suite).
EDGE_TEXT = ["\x00", "a\x00b", "\u202eevil\u202c", "e\u0301\u0301\u0301", "x" * 10_000,
             "\ufeff", "\U0001f600", " "]
# Each JSON type once (and numbers no double or int64 holds), in every body field.
WRONG_TYPES: list[Any] = [{"a": 1}, [1], True, "s", 1.5, -1, 2**64, None]
LONE_SURROGATE = '"\\udc00x"'
SEGMENTS = ["%00", "%ED%A0%80", "%E2%80%AE", "e%CC%81%CC%81", "x" * 10_000, "%2F", "%2e%2e",
            "%FF", "%F0%9F%98%80"]
# The headers that name the caller: every answer varies by them.
CALLER_HEADERS = {"authorization", "x-amp-api-key", "x-amp-admin-token", "x-amp-agent-id",
                  "x-ampup-user"}
RAW_QUERY = ["%ED%A0%80", "%FF%FE", "%C0%AF", "%00", "a%26b%3Dc", "%"]


@dataclass
class Finding:
    config: str
    kind: str
    request: str
    status: int | str
    detail: str

    def key(self) -> tuple[str, str, str]:
        return (self.kind, re.sub(r"\?.*", "", self.request), str(self.status))


@dataclass
class Config:
    backend: str
    keys: bool

    @property
    def name(self) -> str:
        return f"{self.backend}-keys-{'on' if self.keys else 'off'}"


@dataclass
class Caller:
    """Headers that name one caller (keys on: its agent and key)."""

    user: str
    agent: str
    headers: dict[str, str]


@dataclass
class Audit:
    config: Config
    url: str
    spec: dict[str, Any]
    findings: list[Finding] = field(default_factory=list)
    sent: int = 0

    def find(self, kind: str, request: str, status: int | str, detail: str) -> None:
        self.findings.append(Finding(self.config.name, kind, request[:200], status,
                                     detail[:400]))

    def operation(self, method: str, template: str) -> dict[str, Any] | None:
        op: dict[str, Any] | None = self.spec["paths"].get(template, {}).get(method.lower())
        return op

    def check(self, http: httpx.Client, method: str, url: str, template: str | None,
              expect: set[int] | None = None, **kw: Any) -> httpx.Response | None:
        """Send one request; note what breaks the rules. ``template`` names the documented
        operation whose ``responses`` the status must be in (HEAD: its GET's)."""
        self.sent += 1
        shown = f"{method} {url}"
        try:
            r = http.request(method, url, **kw)
        except httpx.TimeoutException:
            self.find("timeout", shown, "-", str(kw)[:200])
            return None
        self.judge(method, url, template, expect, r.status_code, r.headers, r.text, r)
        return r

    def judge(self, method: str, url: str, template: str | None, expect: set[int] | None,
              status: int, headers: httpx.Headers, text: str,
              r: httpx.Response | None = None) -> None:
        """The rules every answer keeps (``check``'s, and a raw request's: `send_raw`)."""
        shown = f"{method} {url}"
        if status >= 500:
            self.find("server error", shown, status, text)
        if "Traceback" in text or 'File "' in text:
            self.find("traceback", shown, status, text)
        if method == "HEAD":
            if text:
                self.find("HEAD with a body", shown, status, text)
        elif status not in (204, 304):
            kind = headers.get("content-type", "")
            if not kind.startswith("application/json"):
                self.find("content type", shown, status, kind)
            if status >= 400:
                try:
                    error = json.loads(text).get("error")
                except (ValueError, AttributeError):
                    error = None
                if not (isinstance(error, dict) and set(error) == {"code", "message", "details"}
                        and isinstance(error["details"], dict)):
                    self.find("error envelope", shown, status, text)
        if status == 405 and not headers.get("allow"):
            self.find("405 without Allow", shown, 405, "")
        # One caller's answer is never a shared cache's to hand to another (docs/
        # security-model.md, "Caches, proxies and browsers"); a 400 of uvicorn's own, for
        # a request no route saw, is no answer of ours.
        if not (status == 400 and not headers.get("content-type", "").startswith(
                "application/json")):
            directives = {d.strip().lower() for d in headers.get("cache-control", "").split(",")}
            varies = {v.strip().lower() for v in headers.get("vary", "").split(",")}
            if "no-store" not in directives or not CALLER_HEADERS <= varies:
                self.find("cacheable by a shared cache", shown, status,
                          f"Cache-Control: {headers.get('cache-control')}; "
                          f"Vary: {headers.get('vary')}")
            if [h for h in headers if h.lower().startswith("access-control-")]:
                self.find("CORS header", shown, status, str(dict(headers)))
        if status == 401 and not headers.get("www-authenticate"):
            self.find("401 without WWW-Authenticate", shown, 401, "")
        if status == 201 and template is not None and not headers.get("location"):
            op = self.operation(method, template) or {}
            if "Location" in op.get("responses", {}).get("201", {}).get("headers", {}):
                self.find("201 without Location", shown, 201, "")
        if expect is not None and status not in expect:
            self.find("unexpected status", shown, status,
                      f"expected one of {sorted(expect)}: {text}")
        elif template is not None and expect is None:
            op = self.operation("get" if method == "HEAD" else method, template)
            if op is not None and str(status) not in op["responses"] \
                    and not (r is not None and _another_route(url, r)):
                self.find("undocumented status", shown, status,
                          f"documented: {sorted(op['responses'])}; {text}")


def _another_route(url: str, r: httpx.Response) -> bool:
    """A ``%2F`` in a segment is a ``/`` to the router: the path names no route, which is
    the 404 every unknown route answers (docs/api.md, Errors), not the operation's."""
    return "%2F" in url.upper() and r.status_code == 404 and '"No such route."' in r.text


# ---------------------------------------------------------------- servers and records


def create_key(env: dict[str, str], agent: str, user: str, admin: bool = False) -> str:
    """``ampup-memory keys create``; the key is the last line it prints."""
    args = ["keys", "create", "--agent", agent, "--user", user, *(["--admin"] if admin else [])]
    done = subprocess.run([sys.executable, "-m", "ampup_memory.cli", *args], env=env,
                          capture_output=True, text=True, timeout=120, check=True)
    return done.stdout.strip().splitlines()[-1]


@contextmanager
def serving(config: Config, home: Path, pg: PostgresFactory | None,
            ) -> Iterator[tuple[ServerProcess, dict[str, Caller]]]:
    env = {**os.environ, **QUIET, "AMPUP_MEMORY_HOME": str(home),
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    if config.backend == "postgres":
        assert pg is not None
        url = pg.new_database("audit")
        env.update({"AMPUP_MEMORY_CATALOG_URI": url, "AMPUP_MEMORY_INDEX_URI": url,
                    "AMP_STORE_URI": url})
    callers: dict[str, Caller] = {}
    for name, user, agent in (("me", USER, AGENT), ("other", OTHER, OTHER_AGENT),
                              ("plain", USER, PLAIN_AGENT)):
        headers = {"X-AMP-Agent-ID": agent}
        if config.keys:
            headers["X-AMP-API-Key"] = create_key(env, agent, user, admin=name == "me")
        else:
            headers["X-AmpUp-User"] = user
        callers[name] = Caller(user, agent, headers)
    if config.keys:
        env["AMP_REQUIRE_KEYS"] = "1"
    proc = ServerProcess(home, env=env)
    proc.start(timeout=180)
    try:
        yield proc, callers
    finally:
        proc.stop()


def _ok(r: httpx.Response) -> dict[str, Any]:
    if r.status_code not in (200, 201):
        raise RuntimeError(f"seeding failed: {r.request.method} {r.request.url}: {r.text}")
    body: dict[str, Any] = r.json()
    return body


def seed(url: str, caller: Caller) -> dict[str, Any]:
    """A record of every kind that has an id, as this caller, in a fresh scope."""
    scope = f"a{uuid.uuid4().hex[:8]}/team_1"
    admin = {**caller.headers, "X-AMP-Admin-Token": ADMIN_TOKEN}
    with plain_client(base_url=url, timeout=120, headers=admin) as http:
        _ok(http.put(f"/principals/{caller.user}", json={"groups": ["auditors"],
                                                         "roles": ["tester"]}))
        batch = _ok(http.post("/episodes/batch", json={"scope": scope, "episodes": [
            # Ids hash the text: the scope in it keeps each seed's episodes its own.
            {"source": "doc:plan", "body": f"Acme renewed in March ({scope}).\n\n"
             "Budget is 40k.", "acl": ["*"], "about": ["acme"], "document": "plan"},
            {"source": "slack:C1", "body": f"Acme moved to the Pro plan ({scope}).",
             "acl": [f"user:{caller.user}"]}]}))
        episodes = [e["id"] for e in batch["episodes"]]
        fact = _ok(http.post("/facts", json={
            "scope": scope, "entity": "acme", "predicate": "plan", "value": "Pro",
            "quote": "Pro plan", "cites": [{"episode": episodes[1], "unit": 1}]}))
        _ok(http.post("/branches", json={"scope": scope, "name": "trial"}))
        ws = _ok(http.post("/workspaces", json={"name": "audit", "ttl": "1h"}))
        _ok(http.post("/episodes", json={"scope": f"{ws['id']}/team_1", "source": "doc:x",
                                         "body": "In a workspace.", "acl": ["*"]}))
        cell = _ok(http.post("/amp/v1/memories", json={
            "type": "semantic", "content": {"text": "Acme prefers e-mail."},
            "identity": {"owner_id": caller.agent, "owner_type": "agent"}}))
        # A record of each kind a DELETE ends, for the DELETEs alone: deleting the seeded
        # one ended it for every other route (the cell's PATCH, the workspace's routes),
        # whose requests then all stopped at "not found" and never reached their checks.
        doomed_ws = _ok(http.post("/workspaces", json={"name": "doomed", "ttl": "1h"}))
        _ok(http.post("/branches", json={"scope": scope, "name": DOOMED_BRANCH}))
        doomed = {
            "memory_id": _ok(http.post("/amp/v1/memories", json={
                "type": "semantic", "content": {"text": "To be deleted."},
                "identity": {"owner_id": caller.agent, "owner_type": "agent"}}))["id"],
            "workspace_id": doomed_ws["id"], "name": DOOMED_BRANCH,
            "pin_id": _ok(http.post("/pin", json={"scope": scope, "ttl": "1h"}))["id"],
            "snapshot_id": _ok(http.post(f"/workspaces/{ws['id']}/snapshots"))["id"],
        }
        return {
            "doomed": doomed,
            "scope": scope, "org": scope.split("/")[0], "team": scope.split("/")[1],
            "episodes": episodes, "commits": [batch["commit"], fact["commit"]],
            "episode_id": episodes[1], "name": "trial", "user": caller.user,
            "workspace_id": ws["id"], "memory_id": cell["id"],
            "pin_id": _ok(http.post("/pin", json={"scope": scope, "ttl": "1h"}))["id"],
            "snapshot_id": _ok(http.post(f"/workspaces/{ws['id']}/snapshots"))["id"],
            "run_id": _ok(http.post("/runs", json={"scope": scope, "task": "t"}))["id"],
            "session_id": _ok(http.post("/sessions/start", json={"scope": scope}))["id"],
        }


# ---------------------------------------------------------------- part 1: schemathesis

# (dictionary, the parameters it feeds): a seeded value most of the time, a drawn one else.
BINDINGS = {
    "scopes": ["query.scope", "body.scope"],
    "commits": ["query.at_commit", "body.at_commit", "query.before"],
    "episodes": ["path.episode_id"],
    # A branch that exists (the seeded one, main) gets past "unknown branch" (404).
    "branches": ["path.name", "query.branch", "body.branch", "body.from", "body.into"],
    "memories": ["path.memory_id", "body.id"],
    "workspaces": ["path.workspace_id"], "pins": ["path.pin_id"],
    "runs": ["path.run_id", "body.run"],
    "snapshots": ["path.snapshot_id"], "sessions": ["path.session_id", "body.session"],
    "orgs": ["path.org"], "teams": ["path.team"], "users": ["path.user"],
    # The seeded fact's entity and predicate, the seeded document: past "no such value".
    "entities": ["body.entity", "query.entity"],
    "predicates": ["body.predicate", "query.predicate"], "documents": ["body.document"],
}


# (operation, parameter, dictionary) bound for that operation alone, over BINDINGS: a
# `before` is a commit on /ledger but a run or session id on /runs and /sessions (bound to
# commits, their seeded cursors were never sent), and a DELETE ends its own record
# (`doomed`, see `seed`), not the one every other route reads.
OPERATION_BINDINGS = [
    ("GET", "/runs", "query.before", "runs"),
    ("GET", "/sessions", "query.before", "sessions"),
    ("DELETE", "/amp/v1/memories/{memory_id}", "path.memory_id", "doomed_memories"),
    ("DELETE", "/workspaces/{workspace_id}", "path.workspace_id", "doomed_workspaces"),
    ("DELETE", "/pin/{pin_id}", "path.pin_id", "doomed_pins"),
    ("DELETE", "/snapshots/{snapshot_id}", "path.snapshot_id", "doomed_snapshots"),
    ("DELETE", "/branches/{name}", "path.name", "doomed_branches"),
]


def targets(method: str, seeded: dict[str, Any]) -> dict[str, Any]:
    """The seeded values a request of ``method`` names: a DELETE its doomed records."""
    return {**seeded, **seeded["doomed"]} if method.upper() == "DELETE" else seeded


def schemathesis_config(seeded: dict[str, Any], headers: dict[str, str], examples: int,
                        seed_value: int, keys: bool) -> str:
    doomed = seeded["doomed"]
    values = {"scopes": [seeded["scope"]], "commits": seeded["commits"],
              "episodes": seeded["episodes"], "memories": [seeded["memory_id"]],
              "workspaces": [seeded["workspace_id"]], "pins": [seeded["pin_id"]],
              "runs": [seeded["run_id"]], "snapshots": [seeded["snapshot_id"]],
              "sessions": [seeded["session_id"]], "orgs": [seeded["org"]],
              "teams": [seeded["team"]], "users": [seeded["user"]],
              "branches": ["trial", "main"], "entities": ["acme"], "predicates": ["plan"],
              "documents": ["plan"],
              "doomed_memories": [doomed["memory_id"]],
              "doomed_workspaces": [doomed["workspace_id"]],
              "doomed_pins": [doomed["pin_id"]], "doomed_snapshots": [doomed["snapshot_id"]],
              "doomed_branches": [doomed["name"]]}
    # Health checks judge the generator (a path pattern few strings match), not the server.
    lines = [f"seed = {seed_value}", "continue-on-failure = true", "request-timeout = 120",
             'suppress-health-check = ["all"]',
             "workers = 2", "", "[headers]"]
    lines += [f"{json.dumps(k)} = {json.dumps(v)}" for k, v in headers.items()]
    lines += ["", "[generation]", f"max-examples = {examples}", "",
              "[checks]", "positive_data_acceptance.enabled = false",
              # A 412 refuses too: on a cell the condition is judged before the body
              # (docs/api.md, "Conditional writes"), so a bad body with a stale If-Match
              # (schemathesis sends an empty one) is a 412, by design.
              "negative_data_rejection.expected-statuses = "
              '["400", "401", "403", "404", "405", "406", "409", "412", "413", "415", "422", '
              '"428", "429"]', ""]
    for name, entries in values.items():
        lines += [f"[dictionaries.{name}]", f"values = {json.dumps(entries)}", ""]
    lines.append("[parameters]")
    if keys:  # keys on, X-AmpUp-User may only name the key's user (docs/api.md): not fuzzed
        lines.append(f'"header.x-ampup-user" = {json.dumps(USER)}')
    for name, bound in BINDINGS.items():
        for key in bound:
            lines.append(f'"{key}" = {{ dictionary = "{name}", probability = 0.7 }}')
    for method, path, key, name in OPERATION_BINDINGS:
        # The name ("GET /runs"): include-method and include-path are either-or filters.
        lines += ["", "[[operations]]", f"include-name = {json.dumps(f'{method} {path}')}",
                  f'parameters = {{ "{key}" = {{ dictionary = "{name}", probability = 0.7 }} }}']
    return "\n".join(lines) + "\n"


def run_schemathesis(audit: Audit, seeded: dict[str, Any], headers: dict[str, str],
                     out: Path, examples: int, seed_value: int) -> None:
    config = out / f"{audit.config.name}.schemathesis.toml"
    config.write_text(schemathesis_config(seeded, headers, examples, seed_value,
                                          audit.config.keys))
    report = out / f"{audit.config.name}.schemathesis.json"
    st = Path(sys.executable).with_name("st")
    done = subprocess.run(
        [str(st), "--config-file", str(config), "run", f"{audit.url}/openapi.json",
         "--phases", "examples,coverage,fuzzing", "--checks", "all",
         "--exclude-checks", "positive_data_acceptance", "--no-color",
         "--report", "json", "--report-json-path", str(report)],
        capture_output=True, text=True, timeout=3600, cwd=out)  # its cache goes there too
    (out / f"{audit.config.name}.schemathesis.out").write_text(done.stdout + done.stderr)
    if not report.exists():
        audit.find("schemathesis did not run", "st run", done.returncode, done.stderr[-400:])
        return
    result = json.loads(report.read_text())
    audit.sent += result["test_cases"]["generated"]
    for failure in result["failures"]:
        for operation in failure["operations"]:
            audit.find(f"schemathesis {failure['code']} {failure['title']}", operation,
                       failure["code"], f"see {done.stdout and report.name}")
    for error in result.get("errors", []):
        audit.find("schemathesis error", str(error)[:200], "-", str(error))


# ---------------------------------------------------------------- part 2: probes


def operations(spec: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in spec["paths"].items():
        for method, op in item.items():
            yield method.upper(), path, op


def fill(template: str, values: dict[str, Any]) -> str:
    return re.sub(r"{(\w+)}", lambda m: str(values[m.group(1)]), template)


def base_query(op: dict[str, Any], seeded: dict[str, Any]) -> dict[str, str]:
    wanted = {p["name"] for p in op.get("parameters", []) if p["in"] == "query"}
    return {k: v for k, v in {"scope": seeded["scope"]}.items() if k in wanted}


def body_schema(op: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any] | None:
    """The body's schema (of a choice of several, the first)."""
    if "requestBody" not in op:
        return None
    schema = op["requestBody"]["content"]["application/json"]["schema"]
    schema = schema.get("oneOf", [schema])[0]
    found: dict[str, Any] = spec["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    return found


def body_example(op: dict[str, Any], spec: dict[str, Any], seeded: dict[str, Any],
                 ) -> dict[str, Any] | None:
    """The required fields of a route's body, each a plausible value: enough to get past
    the body's shape into the checks behind it (an edge value then replaces one field)."""
    schema = body_schema(op, spec)
    if schema is None:
        return None
    known = {"scope": seeded["scope"], "source": "doc:audit", "body": "Audit text.",
             "acl": ["*"], "query": "acme", "task": "renew acme", "ttl": "1h",
             "name": "audit_two", "entity": "acme", "predicate": "plan", "value": "Pro",
             "quote": "Acme", "cites": [{"episode": seeded["episodes"][0], "unit": 1}],
             "reason": "audit", "document": "plan", "from": "trial", "find": "facts",
             "run": seeded["run_id"], "reward": 1, "session": seeded["session_id"],
             "transcript": "t", "outcome": "success", "scopes": [seeded["scope"]],
             "episodes": [{"source": "doc:z", "body": "Text two.", "acl": ["*"]}],
             "facts": [{"entity": "acme", "predicate": "plan", "value": "Pro",
                        "quote": "Acme",
                        "cites": [{"episode": seeded["episodes"][0], "unit": 1}]}],
             "documents": ["plan"], "id": seeded["memory_id"], "builtin": "sales",
             "type": "semantic", "content": {"text": "hi"}, "groups": ["g"],
             "identity": {"owner_id": AGENT, "owner_type": "agent"}}
    body = {}
    for name in schema.get("required", []):
        body[name] = known.get(name, "x")
    return body


def body_fields(op: dict[str, Any], spec: dict[str, Any]) -> list[str]:
    schema = body_schema(op, spec)
    return [] if schema is None else list(schema.get("properties", {}))


def string_fields(op: dict[str, Any], spec: dict[str, Any]) -> list[str]:
    schema = body_schema(op, spec)
    if schema is None:
        return []
    out = []
    for name, prop in schema.get("properties", {}).items():
        kinds = [prop.get("type")] + [p.get("type") for p in prop.get("anyOf", [])]
        if "string" in kinds:
            out.append(name)
    return out


def probe_inputs(audit: Audit, http: httpx.Client, seeded: dict[str, Any],
                 max_bytes: int) -> None:
    """Edge input on every operation, every answer a documented one."""
    huge = b'{"x": "' + b"y" * (max_bytes + 1) + b'"}'
    deep = b"[" * 100_000 + b"]" * 100_000
    for method, template, op in operations(audit.spec):
        values = targets(method, seeded)
        url = fill(template, values)
        query = base_query(op, seeded)
        body = body_example(op, audit.spec, seeded)
        as_json: dict[str, Any] = {} if body is None else {"json": body}

        def send(u: str = url, m: str = method, t: str = template,
                 q: dict[str, str] = query, **kw: Any) -> httpx.Response | None:
            kw.setdefault("params", q)
            return audit.check(http, m, u, t, **kw)

        send(**as_json)
        for name in (p["name"] for p in op.get("parameters", []) if p["in"] == "path"):
            for segment in SEGMENTS:
                send(fill(template, {**values, name: segment}), **as_json)
        for param in (p for p in op.get("parameters", []) if p["in"] == "query"):
            name = param["name"]
            for value in [*EDGE_TEXT, "99999999999999999999999"]:
                send(params={**query, name: value}, **as_json)
            send(params=[*query.items(), (name, "1"), (name, "2")], **as_json)
            for raw in RAW_QUERY:  # bytes no str holds, escaped as a client may send them
                send(f"{url}?{urlencode({k: v for k, v in query.items() if k != name})}"
                     f"&{name}={raw}", params={}, **as_json)
        if body is not None:
            for name in string_fields(op, audit.spec):
                for value in EDGE_TEXT:
                    send(json={**body, name: value})
                raw = json.dumps({k: v for k, v in body.items() if k != name})
                send(content=raw[:-1] + f'{", " if len(raw) > 2 else ""}"{name}": '
                     f'{LONE_SURROGATE}}}', headers={"Content-Type": "application/json"})
            for name in body_fields(op, audit.spec):
                for wrong in WRONG_TYPES:
                    send(json={**body, name: wrong})
            send(content=huge, headers={"Content-Type": "application/json"})
            send(content=deep, headers={"Content-Type": "application/json"})
            send(content=json.dumps(body), headers={"Content-Type": "text/plain"})


def send_raw(audit: Audit, request: bytes, template: str | None,
             expect: set[int] | None = None) -> int | None:
    """Send ``request`` byte for byte over a fresh connection (what httpx never sends: no
    Host, HTTP/1.0, ``..`` and ``//`` in a path, ``Expect: 100-continue``) and judge the
    answer by the rules of `Audit.check`. The status, or None on a timeout."""
    audit.sent += 1
    line = request.split(b"\r\n", 1)[0].decode("latin-1")
    method, url = line.split(" ")[:2]
    host, port = audit.url.removeprefix("http://").rsplit(":", 1)
    try:
        answer = raw_exchange(host, int(port), request, timeout=120)
    except TimeoutError:
        audit.find("timeout", line, "-", "")
        return None
    while re.match(rb"HTTP/1\.[01] 1\d\d ", answer):  # 100 Continue and the like
        answer = answer.split(b"\r\n\r\n", 1)[1]
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    if not lines[0].startswith("HTTP/"):
        audit.find("no HTTP answer", line, "-", answer[:200].decode("latin-1"))
        return None
    status = int(lines[0].split()[1])
    headers = httpx.Headers([(k.strip(), v.strip()) for k, _, v in
                             (h.partition(":") for h in lines[1:] if ":" in h)])
    if headers.get("transfer-encoding", "").lower() == "chunked":
        decoded, rest = b"", body
        while rest:
            size, _, rest = rest.partition(b"\r\n")
            if not int(size or b"0", 16):
                break
            decoded, rest = decoded + rest[:int(size, 16)], rest[int(size, 16) + 2:]
        body = decoded
    audit.judge(method, url, template, expect, status, headers,
                body.decode("utf-8", "replace"))
    return status


def raw_head(http: httpx.Client, method: str, target: str, *, version: str = "1.1",
             host: bool = True, extra: tuple[str, ...] = ()) -> bytes:
    """A request head as bytes: the client's own headers (the caller), ``Connection:
    close`` so the answer ends with the connection."""
    lines = [f"{method} {target} HTTP/{version}"]
    if host:
        lines.append(f"Host: {http.base_url.host}:{http.base_url.port}")
    lines += [f"{k}: {v}" for k, v in http.headers.items()
              if k.lower() not in ("host", "connection", "accept-encoding", "user-agent")]
    lines += [*extra, "Connection: close"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def probe_bodies(audit: Audit, http: httpx.Client, seeded: dict[str, Any]) -> None:
    """What HTTP clients send as a body besides clean JSON, on every body route: no
    Content-Type, a form or multipart type, a charset that is not UTF-8 (and text in it),
    a byte order mark, UTF-16, nothing at all, a top-level array, string, number or null,
    a key twice, a content coding (gzip, an unknown one), chunked, and Expect:
    100-continue. Each a documented answer."""
    for method, template, op in operations(audit.spec):
        body = body_example(op, audit.spec, seeded)
        if body is None:
            continue
        url = fill(template, targets(method, seeded))
        query = base_query(op, seeded)
        raw = json.dumps(body).encode()
        latin = json.dumps({**body, **{k: "caf\u00e9" for k in string_fields(op, audit.spec)
                                       if k in body}}, ensure_ascii=False)
        first = next(iter(body), None)  # again, last, with a value of the wrong type
        twice = raw if first is None else raw[:-1] + f', "{first}": [[]]}}'.encode()
        cases: list[tuple[dict[str, str], Any]] = [
            ({}, raw),
            ({"Content-Type": "application/x-www-form-urlencoded"}, urlencode(
                {k: v for k, v in body.items() if isinstance(v, str)}).encode()),
            ({"Content-Type": "multipart/form-data; boundary=b"},
             b'--b\r\nContent-Disposition: form-data; name="scope"\r\n\r\nx\r\n--b--\r\n'),
            ({"Content-Type": "application/json; charset=latin-1"}, latin.encode("latin-1")),
            ({"Content-Type": "application/json; charset=utf-16"}, latin.encode("utf-16")),
            ({"Content-Type": "application/json"}, b"\xef\xbb\xbf" + raw),
            ({"Content-Type": "application/json"}, b""),
            ({"Content-Type": "application/json"}, twice),
            ({"Content-Type": "application/json", "Content-Encoding": "identity"}, raw),
            ({"Content-Type": "application/json"}, (part for part in (raw[:3], raw[3:]))),
        ]
        cases += [({"Content-Type": "application/json"}, top)
                  for top in (b"[]", b'"x"', b"1", b"null", b"[" + raw + b"]")]
        for headers, content in cases:
            audit.check(http, method, url, template, params=query, content=content,
                        headers=headers)
        # No content coding is decoded: refused, never read as if plain (docs/api.md).
        for coding, coded in (("gzip", gzip.compress(raw)), ("x-unknown", raw)):
            audit.check(http, method, url, template, {415}, params=query, content=coded,
                        headers={"Content-Type": "application/json",
                                 "Content-Encoding": coding})
        target = f"{url}?{urlencode(query)}" if query else url
        send_raw(audit, raw_head(http, method, target, extra=(
            "Content-Type: application/json", f"Content-Length: {len(raw)}",
            "Expect: 100-continue")) + raw, template)


# Header values past what a client usually sends: long, non-ASCII, UTF-8 and Latin-1 bytes.
ODD_HEADERS: list[dict[str, str | bytes]] = [
    {"X-AMP-Agent-ID": "a" * 9000}, {"Authorization": "Bearer " + "k" * 9000},
    {"X-AMP-API-Key": "k" * 9000}, {"X-AmpUp-User": "u" * 9000},
    {"X-AMP-Agent-ID": "agent\u00e9".encode()}, {"Authorization": b"Bearer \xe9\xff"},
    {"X-AmpUp-User": "us\u00e9r".encode("latin-1")}, {"X-Unknown": "v" * 9000},
]


def probe_requests(audit: Audit, http: httpx.Client, seeded: dict[str, Any]) -> None:
    """Every operation with an Accept it cannot satisfy (disregarded: docs/api.md), odd
    header values, invalid percent-encoding in its query, ``+`` against ``%20`` (one
    answer), and without Host over HTTP/1.0; every path with a trailing slash, in upper
    case, with doubled slashes and with ``..`` segments (404: no such route)."""
    for method, template, op in operations(audit.spec):
        url = fill(template, targets(method, seeded))
        query = base_query(op, seeded)
        body = body_example(op, audit.spec, seeded)
        as_json: dict[str, Any] = {} if body is None else {"json": body}
        for accept in ("application/xml", "text/html;q=1, application/json;q=0"):
            audit.check(http, method, url, template, params=query, headers={"Accept": accept},
                        **as_json)
        for headers in ODD_HEADERS:
            audit.check(http, method, url, template, params=query, headers=headers,
                        **as_json)
        if "scope" in query:
            for bad in ("%zz", "%ff", "%e2%82", "a%2"):
                audit.check(http, method, f"{url}?scope={query['scope']}{bad}", template,
                            **as_json)
            plus = http.request(method, f"{url}?scope=a+b", **as_json)
            space = http.request(method, f"{url}?scope=a%20b", **as_json)
            audit.sent += 2
            if (plus.status_code, plus.text) != (space.status_code, space.text):
                audit.find("+ and %20 differ in a query", f"{method} {url}?scope=a+b",
                           plus.status_code, f"{plus.text[:150]} / {space.text[:150]}")
        if method == "GET":
            target = f"{url}?{urlencode(query)}" if query else url
            send_raw(audit, raw_head(http, "GET", target, version="1.0", host=False),
                     template)
    for template, item in audit.spec["paths"].items():
        method = "GET" if "get" in item else next(iter(item)).upper()
        url = fill(template, targets(method, seeded))
        parts = url.split("/")
        variants = {url + "/", url.upper(), "/" + url, url.replace("/", "//", 2)[1:],
                    "/".join([*parts[:-1], "..", *parts[-1:]]) if len(parts) > 2 else "",
                    url + "/.."} - {"", url}
        for variant in sorted(variants):  # another route, or this one's own answer
            send_raw(audit, raw_head(http, method, variant, extra=(
                "Content-Length: 0",) if method in ("POST", "PUT", "PATCH") else ()), None)


# If-Match / If-None-Match values a client may send: malformed, weak, lists with empty
# elements, `*` inside a list, a huge one, bytes no text holds.
CONDITION_VALUES: list[str | bytes] = [
    "", "*", "W/\"x\"", "\"x\"", "\"a\",,\"b\"", ",", "*, \"x\"", "garbage", "W/",
    "\"" + "x" * 8000 + "\"", b"\"\xff\"", "\"x\" \"y\""]


def probe_conditions(audit: Audit, http: httpx.Client, seeded: dict[str, Any]) -> None:
    """Odd If-Match / If-None-Match values, and twice, on every route that takes them: a
    documented answer. And every read that answers an ETag judges them as RFC 9110 does:
    If-None-Match with its tag is a 304, and If-Match with another tag a 412, never the
    200 of a condition ignored."""
    for method, template, op in operations(audit.spec):
        url = fill(template, targets(method, seeded))
        query = base_query(op, seeded)
        body = body_example(op, audit.spec, seeded)
        as_json: dict[str, Any] = {} if body is None else {"json": body}
        names = [p["name"] for p in op.get("parameters", [])
                 if p["in"] == "header" and p["name"] in ("If-Match", "If-None-Match")]
        for name in names:
            for value in CONDITION_VALUES:
                audit.check(http, method, url, template, params=query,
                            headers={name: value}, **as_json)
            audit.check(http, method, url, template, params=query,
                        headers=[(name, '"x"'), (name, '"y"')], **as_json)
        if method != "GET":
            continue
        got = http.get(url, params=query)
        tag = got.headers.get("etag")
        if got.status_code != 200 or tag is None:
            continue
        shown = f"GET {url}"
        r = audit.check(http, "GET", url, template, params=query,
                        headers={"If-None-Match": tag})
        if r is not None and r.status_code != 304:
            audit.find("If-None-Match with the ETag not 304", shown, r.status_code, r.text)
        r = audit.check(http, "GET", url, template, params=query,
                        headers={"If-Match": '"audit-stale"'})
        if r is not None and r.status_code != 412:
            audit.find("a stale If-Match on a read not 412", shown, r.status_code, r.text)


def probe_methods(audit: Audit, http: httpx.Client, seeded: dict[str, Any]) -> None:
    """HEAD answers as GET does, without a body; any other method the path does not serve
    is a 405 whose Allow lists exactly the served ones."""
    for template, item in audit.spec["paths"].items():
        url = fill(template, seeded)
        served = {m.upper() for m in item} | ({"HEAD"} if "get" in item else set())
        query = base_query(next(iter(item.values())), seeded)
        if "get" in item:
            got = http.get(url, params=query)
            head = audit.check(http, "HEAD", url, template, params=query)
            if head is not None and head.status_code != got.status_code:
                audit.find("HEAD differs from GET", f"HEAD {url}", head.status_code,
                           f"GET answered {got.status_code}")
        for method in ("OPTIONS", "TRACE", "BREW", "PATCH", "PUT", "DELETE", "POST"):
            if method in served:
                continue
            r = audit.check(http, method, url, None, expect={405}, params=query)
            if r is not None and r.status_code == 405:
                allow = {m.strip() for m in r.headers.get("allow", "").split(",") if m.strip()}
                if allow != served:
                    audit.find("Allow differs from the schema", f"{method} {url}", 405,
                               f"Allow {sorted(allow)}, schema {sorted(served)}")
    for unknown in ("/nope", "/episodes/", "/amp/v1/", "/amp/v2/memories"):
        audit.check(http, "GET", unknown, None, expect={404})


LISTINGS = [  # (path, cursor parameter, what its values are)
    ("/episodes", "after", "episode"), ("/entities", "after", "entity"),
    ("/set-aside", "after", "cursor"), ("/ledger", "before", "commit"),
    ("/runs", "before", "run"), ("/sessions", "before", "session"),
]


def probe_cursors(audit: Audit, http: httpx.Client, seeded: dict[str, Any],
                  hidden: dict[str, Any], other: Caller) -> None:
    """Forged, stale and another caller's cursors: a documented 4xx (or a page), never
    one that tells a hidden record from a missing one."""
    forged = {"episode": "0" * 64, "entity": "no_such_entity", "cursor": "x" * 40,
              "commit": "c" * 40, "run": "run_" + "0" * 26, "session": "ses_" + "0" * 26}
    for path, name, kind in LISTINGS:
        for value in [forged[kind], "", "\x00", "%", "x" * 10_000, "../" * 20]:
            audit.check(http, "GET", path, path,
                        params={"scope": seeded["scope"], name: value})
    # Another caller's episode in its scope, a cursor of another scope's listing and one
    # made stale (its episode since hidden from the caller), against a missing one.
    page = http.get("/episodes", params={"scope": seeded["scope"], "limit": "1"}).json()
    stale, acl = page["next_after"], page["episodes"][0]["acl"]
    moved = http.put(f"/episodes/{stale}/acl",
                     json={"scope": seeded["scope"], "acl": [f"user:{OTHER}"]})
    for label, scope, value in (("hidden", hidden["scope"], hidden["episode_id"]),
                                ("another scope's", hidden["scope"], seeded["episodes"][0]),
                                ("stale", seeded["scope"], stale)):
        answers = []
        for cursor in (value, "f" * 64):
            r = http.get("/episodes", params={"scope": scope, "after": cursor})
            answers.append((r.status_code, r.text.replace(cursor, "<id>")))
        if answers[0] != answers[1]:
            audit.find(f"a {label} cursor differs from a missing one", "GET /episodes?after=",
                       answers[0][0], f"{answers}")
    if moved.status_code == 200:  # back as it was, by the one who may read it now
        with plain_client(base_url=audit.url, timeout=120, headers=other.headers) as theirs:
            theirs.put(f"/episodes/{stale}/acl", json={"scope": seeded["scope"], "acl": acl})
    # An AMP listing past its end and with an offset no page reaches.
    for offset in ("0", "999999999", "-1", "1e3", "99999999999999999999"):
        audit.check(http, "GET", "/amp/v1/memories", "/amp/v1/memories",
                    params={"offset": offset, "limit": "1"})


def probe_callers(audit: Audit, callers: dict[str, Caller], seeded: dict[str, Any]) -> None:
    """Keys on: every route but the open ones answers any credential failure with one
    identical 401. Keys off: the AmpUp routes without a user say MISSING_USER. Admin
    routes refuse a caller without the admin credential with a documented 403."""
    me = callers["me"]
    bad: dict[str, dict[str, str | bytes]] = {"nothing": {}}
    if audit.config.keys:
        key = me.headers["X-AMP-API-Key"]
        plain_key = callers["plain"].headers["X-AMP-API-Key"]
        bad.update({
            "agent, no key": {"X-AMP-Agent-ID": me.agent},
            "wrong key": {"X-AMP-Agent-ID": me.agent, "X-AMP-API-Key": key[:-2] + "xx"},
            "another agent's key": {"X-AMP-Agent-ID": me.agent,
                                    "X-AMP-API-Key": callers["other"].headers["X-AMP-API-Key"]},
            # A key that is no admin's: an admin key alone is an admin credential
            # (docs/security-model.md, Admin routes), whatever agent is named beside it.
            "unknown agent": {"X-AMP-Agent-ID": "nobody", "X-AMP-API-Key": plain_key},
            "bearer, wrong": {"X-AMP-Agent-ID": me.agent, "Authorization": "Bearer nope"},
            "bad agent": {"X-AMP-Agent-ID": "bad agent\u00e9".encode(),
                          "X-AMP-API-Key": plain_key},
        })
    open_paths = {"/amp/v1/health", "/amp/v1/spec", "/episode-types"}
    for method, template, op in operations(audit.spec):
        if template in open_paths:
            continue
        url = fill(template, targets(method, seeded))
        body = body_example(op, audit.spec, seeded)
        query = base_query(op, seeded)
        answers = {}
        for label, headers in bad.items():
            with plain_client(base_url=audit.url, timeout=120, headers=headers) as http:
                r = audit.check(http, method, url, template, params=query, json=body)
            if r is not None:
                if r.status_code < 400:
                    audit.find("no credential accepted", f"{method} {url} ({label})",
                               r.status_code, r.text)
                answers[label] = (r.status_code, r.text)
        if audit.config.keys and len(set(answers.values())) > 1:
            audit.find("credential failures differ", f"{method} {template}", "-",
                       json.dumps(answers)[:400])
        if "admin" in op.get("tags", []) or template.startswith("/amp/v1/lifecycle"):
            with plain_client(base_url=audit.url, timeout=120,
                              headers=callers["plain"].headers) as http:
                r = audit.check(http, method, url, template, params=query, json=body)
                if r is not None and r.status_code != 403:
                    audit.find("admin route without admin credential", f"{method} {url}",
                               r.status_code, r.text)


LEAK_PROBES = [  # (method, path with @ for the id, the seeded kind, request keywords)
    ("GET", "/episodes/@", "episode_id", {"params": {"scope": "#"}}),
    ("PUT", "/episodes/@/acl", "episode_id", {"json": {"scope": "#", "acl": ["*"]}}),
    ("GET", "/workspaces/@", "workspace_id", {}),
    ("POST", "/workspaces/@/renew", "workspace_id", {"json": {"ttl": "2h"}}),
    ("GET", "/workspaces/@/snapshots", "workspace_id", {}),
    ("GET", "/runs/@", "run_id", {}),
    ("POST", "/runs/reward", "run_id", {"json": {"run": "@", "reward": 1, "reason": "r"}}),
    ("GET", "/sessions/@", "session_id", {}),
    ("POST", "/sessions/end", "session_id",
     {"json": {"session": "@", "transcript": "t", "outcome": "success"}}),
    ("GET", "/amp/v1/memories/@", "memory_id", {}),
    ("PATCH", "/amp/v1/memories/@", "memory_id", {"json": {"content": {"text": "x"}}}),
    ("DELETE", "/amp/v1/memories/@", "memory_id", {"headers": {"If-Match": '"x"'}}),
    ("GET", "/amp-cells/@", "memory_id", {}),
    ("POST", "/amp/v1/memories/@/x", "memory_id", {}),
    ("GET", "/facts", "episode_id", {"params": {"scope": "#", "entity": "acme"}}),
    ("POST", "/document", "episode_id", {"json": {"scope": "#", "document": "@"}}),
]


def probe_leaks(audit: Audit, callers: dict[str, Caller], hidden: dict[str, Any],
                rounds: int = 25) -> None:
    """Another caller's record against one that does not exist: same status, same body
    (the id masked), and no time difference a caller could measure."""
    # As a caller with no admin key (with keys on, "me" holds one, and an admin may read
    # every workspace).
    with plain_client(base_url=audit.url, timeout=120,
                      headers=callers["plain"].headers) as http:
        for method, path, kind, kw in LEAK_PROBES:
            real = str(hidden[kind])
            absent = real[:-4] + ("0000" if real[-4:] != "0000" else "1111")
            answers, times = [], {real: [], absent: []}  # type: ignore[var-annotated]
            for n in range(rounds):
                for value in (real, absent) if n % 2 else (absent, real):
                    filled = json.loads(json.dumps(kw).replace("@", value)
                                        .replace('"#"', json.dumps(hidden["scope"])))
                    started = time.perf_counter()
                    r = http.request(method, path.replace("@", value), **filled)
                    times[value].append(time.perf_counter() - started)
                    if n == 0:
                        answers.append((r.status_code, r.text.replace(value, "<id>")))
            shown = f"{method} {path}"
            if answers[0] != answers[1]:
                audit.find("hidden differs from missing", shown, answers[0][0], str(answers))
            hid, mis = statistics.median(times[real]), statistics.median(times[absent])
            # Told apart: medians 5 ms and half apart, and the middle halves do not overlap
            # (a loaded machine moves single requests by more than that).
            (h1, _, h3), (m1, _, m3) = (statistics.quantiles(times[v], n=4)
                                        for v in (real, absent))
            if abs(hid - mis) > max(0.005, 0.5 * min(hid, mis)) and (h1 > m3 or m1 > h3):
                audit.find("timing tells hidden from missing", shown, answers[0][0],
                           f"median {hid * 1000:.1f} ms hidden, {mis * 1000:.1f} ms missing "
                           f"over {rounds} rounds each")


# ---------------------------------------------------------------- driver


def audit_one(config: Config, pg: PostgresFactory | None, out: Path, examples: int,
              seed_value: int, parts: set[str], log: Callable[[str], None]) -> Audit:
    home = Path(tempfile.mkdtemp(prefix=f"audit-{config.name}-"))
    with serving(config, home, pg) as (proc, callers):
        spec = httpx.get(f"{proc.url}/openapi.json").json()
        audit = Audit(config, proc.url, spec)
        seeded = seed(proc.url, callers["me"])
        hidden = seed(proc.url, callers["other"])
        main = {**callers["me"].headers, "X-AMP-Admin-Token": ADMIN_TOKEN}
        max_bytes = 4 * 1024 * 1024  # max_request_bytes' default (docs/settings.md)
        started = time.monotonic()
        if "probes" in parts:
            with plain_client(base_url=proc.url, timeout=120, headers=main) as http:
                probe_inputs(audit, http, seeded, max_bytes)
                probe_bodies(audit, http, seeded)
                probe_requests(audit, http, seeded)
                probe_methods(audit, http, seeded)
                probe_conditions(audit, http, seeded)
                probe_cursors(audit, http, seeded, hidden, callers["other"])
            probe_callers(audit, callers, seeded)
            probe_leaks(audit, callers, hidden)
            log(f"{config.name}: probes {time.monotonic() - started:.0f} s, "
                f"{audit.sent} requests")
        if "schemathesis" in parts:
            started = time.monotonic()
            run_schemathesis(audit, seeded, main, out, examples, seed_value)
            log(f"{config.name}: schemathesis {time.monotonic() - started:.0f} s")
        logged = proc.log_path.read_text(errors="replace")
        for line in logged.splitlines():
            if "Traceback" in line or "unhandled error" in line:
                audit.find("server logged an error", "server log", "-", line)
                break
    return audit


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--keys", default="off,on")
    parser.add_argument("--parts", default="probes,schemathesis")
    parser.add_argument("--examples", type=int, default=20,
                        help="schemathesis examples per operation and phase")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path("audit-report"))
    args = parser.parse_args(argv)
    args.out = args.out.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    configs = [Config(b, k == "on") for b in args.backends.split(",")
               for k in args.keys.split(",")]
    parts = set(args.parts.split(","))
    began = time.monotonic()
    findings: list[Finding] = []
    sent = 0
    with ExitStack() as stack:
        pg = (stack.enter_context(postgres_factory())
              if any(c.backend == "postgres" for c in configs) else None)
        for config in configs:
            audit = audit_one(config, pg, args.out, args.examples, args.seed, parts,
                              lambda line: print(line, flush=True))
            findings += audit.findings
            sent += audit.sent
    unique: dict[tuple[str, str, str], list[Finding]] = {}
    for f in findings:
        unique.setdefault(f.key(), []).append(f)
    report = [{"kind": k[0], "request": k[1], "status": k[2],
               "configs": sorted({f.config for f in fs}), "example": fs[0].request,
               "detail": fs[0].detail} for k, fs in sorted(unique.items())]
    (args.out / "findings.json").write_text(json.dumps(report, indent=1))
    for item in report:
        print(f"- {item['kind']}: {item['request']} -> {item['status']} "
              f"[{', '.join(item['configs'])}]\n    {item['detail'][:300]}")
    print(f"{len(report)} findings, {sent} requests, {time.monotonic() - began:.0f} s "
          f"({', '.join(c.name for c in configs)})")
    return 1 if report else 0


if __name__ == "__main__":
    sys.exit(main())
