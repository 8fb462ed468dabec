"""Audit an upgrade as a user makes it: data written by an OLDER version of the server, read
back by this one, on SQLite (the embedded home) and on PostgreSQL (one database for the cell
store, the read index and the catalog, the warehouse in a folder).

    PYTHONPATH=src:. python tools/upgrade_audit.py [--commits 293558a,0057300,fbe5a4f]
                                                  [--backends sqlite,postgres] [--out DIR]

For each older commit (checked out with ``git worktree add --detach``, removed at the end)
and each backend (docs/testing.md, "The upgrade audit"):

1. The old server (``PYTHONPATH=<worktree>/src``) on a fresh store, API keys on (made by the
   old CLI): records of every kind written over HTTP (`write_all`: AMP cells with ACLs,
   patched, archived, deleted; episodes with ACLs, a document in several versions; facts,
   new versions, closures; a schema and typed facts; branches, a merge, a deleted branch,
   pins, snapshots, workspaces; runs, rewards, sessions; principals; procedure sources),
   then every read of them (`reads`: each record's GET as its owner and as another caller,
   listings, search and query answers, ledgers, pinned and snapshot reads), read twice.
   A field that differs between the two reads is volatile (an access count, a clock):
   later it must move the same way (a count by the same step, a time forwards), nothing
   more is asked of it.
2. This version's server on the same store: it must start; every recorded read must answer
   the same status, ETag and body (`compare`; fields this version added are listed apart,
   and `ADDED` names those the docs announce); writes of every kind (`write_all` again,
   and writes over the old records: If-Match with the old ETag, a new fact version, an ACL,
   a merge of an old branch, an old pin and workspace renewed, an old run rewarded and an
   old session ended); search finds old and new records; a lifecycle pass (60 days on)
   moves the old cells; ``ampup-memory doctor`` is clean; ``keys list`` unchanged.
3. This version restarted: every read answers as before the restart (the upgrade is
   idempotent), and its log says nothing more about upgrading.
4. The old version again: where this version records a newer layout version than the old
   one knows, it must refuse the store in one line (docs/operations.md); where the layouts
   are the same, it serves: its reads of what this version wrote are compared, it writes
   (where no recorded read looks), and this version, started a last time, must still
   answer every read as before and read what the old version wrote.
5. SQLite: the old version's ``backup`` (taken after step 1) restored by this version into
   a new home answers every read of the old records as the old server did.

Findings go to ``DIR/findings.json`` (every compared read to ``DIR/reads-*.json``); the exit
code is 1 when there are any.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.pg import PostgresFactory, postgres_factory  # noqa: E402
from tests.server_process import ServerProcess  # noqa: E402
from tools.race_audit import Audit, Call, Skip, postgres_env  # noqa: E402

ADMIN_TOKEN = "upgrade-admin-token"
USER, AGENT = "up.user", "up_agent"
OTHER, OTHER_AGENT = "up.other", "up_other"
THIRD, THIRD_AGENT = "up.third", "up_third"  # writes only in the old version's second run
QUIET = {"AMP_ADMIN_TOKEN": ADMIN_TOKEN, "AMP_EMBEDDING_PROVIDER": "hash",
         "AMP_LIFECYCLE_ENABLED": "false", "AMPUP_MEMORY_MAINTENANCE_INTERVAL_SECONDS": "0",
         "AMP_REQUIRE_KEYS": "1"}
# Older commits spread over the history (docs/testing.md says why these).
COMMITS = ["293558a", "0057300", "fbe5a4f"]
# Fields a newer version adds to an answer, announced in the CHANGELOG / docs: (path regex
# over the read's name and the field's path, why). Every other added field is a finding.
ADDED: list[tuple[str, str]] = [
    (r"^\S+:(cell|principal|episode|schema|procedures sources)\b.* \.etag$",
     "CHANGELOG 'Conditional writes (RFC 9110)': AMP cells, schemas, episode ACLs, principals "
     "and procedure sources answer a strong ETag (an older version sent none)"),
    (r"^\S+:workspace(@other)? \.body\.scopes$",
     "CHANGELOG: GET /workspaces/{id} names its scopes"),
    (r"^\*:status \.body\.stores\.amp\.vector_memory\.owner_indexes$",
     "CHANGELOG: /status gives the large owners' own vector indexes' bytes (owner_indexes)"),
]
# Answers a newer version changes on purpose, announced in the CHANGELOG: (regex over the
# read's name and the path, why). Every other change is a finding.
CHANGED: list[tuple[str, str]] = [
    (r"^\S+:document padded(@other)? \.(status|body)",
     "CHANGELOG (Upgrading): a document key with white space at either end is refused "
     "(422 string_padded); episodes stored earlier with one stay readable by id and search"),
]
# Answers that are not the store's data: (read name regex, path regex, why), not compared.
IGNORED: list[tuple[str, str, str]] = [
    (r"^\*:status$", r"^\.body\.stores\.\w+\.bytes$",
     "the files' sizes: a stopped server checkpoints the SQLite WAL into the file"),
    (r"^\*:status$", r"^\.body\.stores\.amp\.vector_memory\.(table|hnsw_index)$",
     "the PostgreSQL cells table's and HNSW index's sizes: the keyword-text upgrade"
     " (CHANGELOG, session 33) rewrites the table and rebuilds its indexes, packed, so"
     " what is written after takes new pages (seen between reads: 49152 -> 65536)"),
    (r"^\*:status$", r"^\.body\.timers\b",
     "this process's timers and their runs, not stored (a version may add a timer)"),
]
# Log lines that say a store was upgraded (step 3: none on the second start).
UPGRADE_WORDS = re.compile(r"rebuilding it from the tables|made by an older version|"
                           r"layout version|upgraded|upgrading", re.IGNORECASE)


@dataclass
class Read:
    """One recorded read: what was sent and what came back."""

    name: str
    call: Call
    as_other: bool = False


@dataclass
class Answered:
    status: int
    etag: str | None
    body: Any

    def plain(self) -> dict[str, Any]:
        return {"status": self.status, "etag": self.etag, "body": self.body}


@dataclass
class Phase:
    """A server of one version on the run's store."""

    version: str  # "old" or "new"
    src: Path
    proc: ServerProcess


@dataclass
class Run:
    commit: str
    backend: str
    home: Path
    env: dict[str, str]
    old_src: Path
    audit: Audit
    log: Callable[[str], None]
    headers: dict[str, str] = field(default_factory=dict)
    other: dict[str, str] = field(default_factory=dict)
    third: dict[str, str] = field(default_factory=dict)
    reads: list[Read] = field(default_factory=list)
    written: dict[str, Any] = field(default_factory=dict)
    compared: int = 0
    timings: dict[str, float] = field(default_factory=dict)
    kill_within: float = 0.0  # > 0: this version's first start is killed (--kill-upgrade)

    @property
    def where(self) -> str:
        return f"{self.commit}/{self.backend}"

    def env_for(self, src: Path) -> dict[str, str]:
        return {**self.env, "PYTHONPATH": str(src)}

    def cli(self, src: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([sys.executable, "-m", "ampup_memory.cli", *args],
                              env=self.env_for(src), capture_output=True, text=True,
                              timeout=300)
        if check and done.returncode != 0:
            raise Skip(f"`ampup-memory {' '.join(args)}` ({src}) exited {done.returncode}: "
                       f"{done.stderr.strip()[-400:]}")
        return done

    def find(self, kind: str, detail: str) -> None:
        self.audit.find(kind, f"{self.where}: {detail}")


# ---------------------------------------------------------------- serving


@contextmanager
def serving(run: Run, version: str, src: Path) -> Iterator[Phase]:
    env = {k: v for k, v in run.env_for(src).items()}
    proc = ServerProcess(run.home / f"logs-{version}", env=env)
    began = time.monotonic()
    proc.start(timeout=300)
    run.timings[f"start {version} #{len(run.timings)}"] = round(time.monotonic() - began, 1)
    run.audit.clients = [run.audit.connect(proc.url)]
    run.audit.spec = httpx.get(f"{proc.url}/openapi.json").json()
    try:
        yield Phase(version, src, proc)
    finally:
        for c in run.audit.clients:
            c.close()
        run.audit.clients = []
        proc.stop()
        for line in proc.log_path.read_text(errors="replace").splitlines():
            if "Traceback" in line or "unhandled error" in line:
                run.find("server logged an error", f"{version}: {line}")
                break


def log_lines(phase: Phase) -> list[str]:
    return phase.proc.log_path.read_text(errors="replace").splitlines()


# ---------------------------------------------------------------- writing


def cell_body(text: str, **extra: Any) -> dict[str, Any]:
    return {"type": "semantic", "content": {"text": text},
            "identity": {"owner_id": AGENT, "owner_type": "agent"}, **extra}


def call(method: str, template: str, path: str | None = None, body: Any = None,
         params: dict[str, str] | None = None, headers: dict[str, str] | None = None) -> Call:
    return Call(method, template, path or template, body, params, headers)


def delete_cell(a: Audit, cid: str) -> None:
    """Archive, then delete (only an archived cell is deleted)."""
    a.ok(call("PATCH", "/amp/v1/memories/{memory_id}", f"/amp/v1/memories/{cid}",
              body={"lifecycle": {"status": "archived"}}))
    a.ok(call("DELETE", "/amp/v1/memories/{memory_id}", f"/amp/v1/memories/{cid}"))


def write_all(run: Run, tag: str) -> dict[str, Any]:
    """Records of every kind this version's API takes, all named by ``tag``; returns their
    ids (and the reads of them are added to ``run.reads``)."""
    a = run.audit
    w: dict[str, Any] = {"tag": tag}
    org = f"u{tag}"
    scope, typed = f"{org}/team", f"{org}/sales"
    w.update(scope=scope, typed=typed)
    # -- AMP cells
    words = f"amber{tag} falcon"
    cells: dict[str, str] = {}
    cells["plain"] = a.ok(call("POST", "/amp/v1/memories", body=cell_body(
        f"The {words} prefers e-mail over calls.",
        scoring={"importance": 0.7, "confidence": 0.9, "decay_rate": 0.02},
        provenance={"source_type": "chat", "source_ref": "c-1", "extraction_method": "manual"},
    )))["id"]
    cells["shared"] = a.ok(call("POST", "/amp/v1/memories", body=cell_body(
        f"The {words} budget is forty thousand.",
        access_policy={"readable_by": [OTHER_AGENT], "writable_by": [OTHER_AGENT]})))["id"]
    cells["public"] = a.ok(call("POST", "/amp/v1/memories", body={
        **cell_body(f"The {words} met the team on Tuesday.", access_policy={"public": True}),
        "type": "episodic",
        "content": {"text": f"The {words} met the team on Tuesday.",
                    "metadata": {"room": "b2", "n": 3, "nested": {"ok": True}}}}))["id"]
    cells["patched"] = a.ok(call("POST", "/amp/v1/memories", body=cell_body(
        f"The {words} plan is Basic.")))["id"]
    path = f"/amp/v1/memories/{cells['patched']}"
    a.ok(call("PATCH", "/amp/v1/memories/{memory_id}", path, body={
        "content": {"text": f"The {words} plan is Pro."}, "scoring": {"importance": 0.9}}))
    cells["archived"] = a.ok(call("POST", "/amp/v1/memories", body=cell_body(
        f"The {words} used the old portal.")))["id"]
    a.ok(call("PATCH", "/amp/v1/memories/{memory_id}", f"/amp/v1/memories/{cells['archived']}",
              body={"lifecycle": {"status": "archived"}}))
    cells["deleted"] = a.ok(call("POST", "/amp/v1/memories", body=cell_body(
        f"The {words} secret to forget.")))["id"]
    delete_cell(a, cells["deleted"])
    cells["expiring"] = a.ok(call("POST", "/amp/v1/memories", body=cell_body(
        f"The {words} trial ends next year.",
        lifecycle={"expires_at": "2031-01-01T00:00:00Z"})))["id"]
    cells["procedural"] = a.ok(call("POST", "/amp/v1/memories", body={
        **cell_body(f"To reach the {words}, call after ten."), "type": "procedural"}))["id"]
    w["cells"] = cells
    # -- principals
    a.ok(call("PUT", "/principals/{user}", f"/principals/{USER}",
              body={"groups": ["sales", f"g{tag}"], "roles": ["lead"]}))
    a.ok(call("PUT", "/principals/{user}", f"/principals/{OTHER}",
              body={"groups": ["support"], "roles": []}))
    # -- episodes (ACLs, a document in versions), facts, closures
    batch = a.ok(call("POST", "/episodes/batch", body={"scope": scope, "episodes": [
        {"source": "doc:handbook", "body": f"Handbook v1 ({tag}). The {words} renews in "
         "March.\n\nThe budget is 40k.", "acl": ["*"], "about": ["acme"],
         "document": "handbook"},
        {"source": "slack:C1", "body": f"Acme moved to the Pro plan ({tag}).",
         "acl": [f"user:{USER}"], "occurred_at": "2026-03-02T10:00:00Z"},
        {"source": "slack:C2", "body": f"Acme's sales lead is Jane ({tag}).",
         "acl": ["group:sales"]}]}))
    eps = [e["id"] for e in batch["episodes"]]
    v2 = a.ok(call("POST", "/episodes", body={
        "scope": scope, "source": "doc:handbook", "document": "handbook", "acl": ["*"],
        "body": f"Handbook v2 ({tag}). The {words} renews in April.\n\nThe budget is 45k."}))
    v3 = a.ok(call("POST", "/episodes", body={
        "scope": scope, "source": "doc:handbook", "document": "handbook", "acl": ["*"],
        "body": f"Handbook v3 ({tag}). The {words} renews in May."}))
    acl_ep = a.ok(call("POST", "/episodes", body={
        "scope": scope, "source": "slack:C3", "body": f"A private note ({tag}).",
        "acl": [f"user:{USER}"]}))["id"]
    a.ok(call("PUT", "/episodes/{episode_id}/acl", f"/episodes/{acl_ep}/acl",
              body={"scope": scope, "acl": [f"user:{USER}", f"user:{OTHER}"]}))
    w["episodes"] = [*eps, v2["id"], v3["id"], acl_ep]
    f1 = a.ok(call("POST", "/facts", body={
        "scope": scope, "entity": "acme", "predicate": "plan", "value": "Pro", "quote": "Pro plan",
        "cites": [{"episode": eps[1], "unit": 1}], "valid_from": "2026-03-02T00:00:00Z"}))
    a.ok(call("POST", "/facts", body={
        "scope": scope, "entity": "acme", "predicate": "plan", "value": "Enterprise",
        "quote": "Acme moved", "cites": [{"episode": eps[1], "unit": 1}]}))
    a.ok(call("POST", "/facts/batch", body={"scope": scope, "facts": [
        {"entity": "acme", "predicate": "lead", "value": "Jane", "quote": "sales lead is Jane",
         "cites": [{"episode": eps[2], "unit": 1}]},
        {"entity": "acme", "predicate": "budget", "value": 40000, "quote": "The budget is 40k.",
         "cites": [{"episode": eps[0], "unit": 2}]},
        {"entity": "acme", "predicate": "renews", "value": "March", "quote": "renews in",
         "cites": [{"episode": eps[0], "unit": 1}]}]}))
    a.ok(call("POST", "/close", body={"scope": scope, "entity": "acme", "predicate": "renews",
                                      "reason": "superseded by v3"}))
    w["first_commit"] = batch["commit"]
    w["fact_commit"] = f1["commit"]
    # -- a schema and typed facts
    a.ok(call("PUT", "/schemas/{org}/{team}", f"/schemas/{org}/sales", body={"builtin": "sales"}))
    tep = a.ok(call("POST", "/episodes", body={
        "scope": typed, "source": "doc:crm", "acl": ["*"],
        "body": f"Acme Corp ({tag}) is an enterprise customer with 500 employees."}))["id"]
    a.ok(call("POST", "/facts/batch", body={"scope": typed, "facts": [
        {"entity": "account:acme", "predicate": "name", "value": "Acme Corp",
         "quote": "Acme Corp", "cites": [{"episode": tep, "unit": 1}]},
        {"entity": "account:acme", "predicate": "segment", "value": "enterprise",
         "quote": "enterprise customer", "cites": [{"episode": tep, "unit": 1}]},
        {"entity": "account:acme", "predicate": "employees", "value": 500,
         "quote": "500 employees", "cites": [{"episode": tep, "unit": 1}]}]}))
    # -- branches, a merge, a deleted branch, pins, snapshots, workspaces
    for name in ("trial", "side", "gone"):
        a.ok(call("POST", "/branches", body={"scope": scope, "name": name}))
    bep = a.ok(call("POST", "/episodes", body={
        "scope": scope, "branch": "trial", "source": "slack:C4", "acl": ["*"],
        "body": f"On trial: Acme wants SSO ({tag})."}))["id"]
    a.ok(call("POST", "/facts", body={
        "scope": scope, "branch": "trial", "entity": "acme", "predicate": "wants", "value": "SSO",
        "quote": "Acme wants SSO", "cites": [{"episode": bep, "unit": 1}]}))
    a.ok(call("POST", "/merge", body={"scope": scope, "from": "trial", "message": "trial in"}))
    sep = a.ok(call("POST", "/episodes", body={
        "scope": scope, "branch": "side", "source": "slack:C5", "acl": ["*"],
        "body": f"On side: Acme asks for a discount ({tag})."}))["id"]
    a.ok(call("POST", "/facts", body={
        "scope": scope, "branch": "side", "entity": "acme", "predicate": "asks",
        "value": "discount", "quote": "asks for a discount",
        "cites": [{"episode": sep, "unit": 1}]}))
    a.ok(call("DELETE", "/branches/{name}", "/branches/gone", params={"scope": scope}))
    w["pin"] = a.ok(call("POST", "/pin", body={"scope": scope, "ttl": "24h"}))["id"]
    w["pin_gone"] = a.ok(call("POST", "/pin", body={"scope": scope, "ttl": "24h"}))["id"]
    a.ok(call("DELETE", "/pin/{pin_id}", f"/pin/{w['pin_gone']}"))
    w["snapshot"] = a.ok(call("POST", "/snapshots", body={"scopes": [scope, typed]}))["id"]
    ws = a.ok(call("POST", "/workspaces", body={"name": f"ws{tag}", "ttl": "24h"}))["id"]
    w["workspace"] = ws
    a.ok(call("POST", "/episodes", body={"scope": f"{ws}/team", "source": "doc:x", "acl": ["*"],
                                         "body": f"In a workspace ({tag}): draft plan."}))
    w["ws_snapshot"] = a.ok(call("POST", "/workspaces/{workspace_id}/snapshots",
                                 f"/workspaces/{ws}/snapshots"))["id"]
    gone_ws = a.ok(call("POST", "/workspaces", body={"name": f"gone{tag}", "ttl": "1h"}))["id"]
    a.ok(call("DELETE", "/workspaces/{workspace_id}", f"/workspaces/{gone_ws}"))
    w["workspace_gone"] = gone_ws
    # -- runs, rewards, sessions, procedure sources
    run_id = a.ok(call("POST", "/runs", body={
        "scope": scope, "task": f"renew acme {tag}", "outcome": "success",
        "trace": "called Jane; sent the quote", "advice_key": "renewal"}))["id"]
    a.ok(call("POST", "/runs/reward", body={"run": run_id, "reward": 0.8, "reason": "renewed"}))
    a.ok(call("POST", "/runs/reward", body={"run": run_id, "reward": 0.6, "reason": "late"}))
    w["run"] = run_id
    s_done = a.ok(call("POST", "/sessions/start", body={"scope": scope, "task": f"call {tag}"}))
    a.ok(call("POST", "/sessions/end", body={
        "session": s_done["id"], "transcript": f"user: hi ({tag})\nagent: hello",
        "outcome": "success", "reward": 1.0, "reason": "done"}))
    s_open = a.ok(call("POST", "/sessions/start", body={"scope": scope, "task": f"open {tag}"}))
    w["sessions"] = [s_done["id"], s_open["id"]]
    a.ok(call("PUT", "/procedures/sources", body={"scope": scope, "documents": ["handbook"]}))
    reads_of(run, w)
    return w


def reads_of(run: Run, w: dict[str, Any]) -> None:
    """Every read of the records ``write_all`` made, as the owner and as the other caller."""
    scope, typed, tag = w["scope"], w["typed"], w["tag"]
    org = scope.split("/")[0]
    words = f"amber{tag} falcon"
    R: list[Read] = []

    def add(name: str, c: Call, both: bool = False) -> None:
        R.append(Read(f"{tag}:{name}", c))
        if both:
            R.append(Read(f"{tag}:{name}@other", c, as_other=True))

    for kind, cid in w["cells"].items():
        add(f"cell {kind}", call("GET", "/amp/v1/memories/{memory_id}",
                                 f"/amp/v1/memories/{cid}"), both=True)
    add("cells list", call("GET", "/amp/v1/memories", params={"limit": "100"}), both=True)
    add("cells list archived", call("GET", "/amp/v1/memories",
                                    params={"status": "archived", "limit": "100"}))
    add("cells query", call("GET", "/amp/v1/memories/query",
                            params={"owner_id": AGENT, "limit": "100"}))
    for q in (words, "prefers e-mail", "budget forty thousand", "plan Pro"):
        add(f"cells search {q}", call("POST", "/amp/v1/memories/search",
                                      body={"query": q, "limit": 100}), both=True)
    # limit 100: every match on the page, so a page is one set whatever the decay does
    add("cells search archived", call("POST", "/amp/v1/memories/search", body={
        "query": words, "status": ["archived"], "include_stale": True, "limit": 100}))
    add("cells search types", call("POST", "/amp/v1/memories/search", body={
        "query": words, "types": ["episodic", "procedural"], "owner_id": AGENT,
        "limit": 100}))
    add("inspector cells", call("GET", "/amp-cells", params={"limit": "100"}))
    for u in (USER, OTHER):
        add(f"principal {u}", call("GET", "/principals/{user}", f"/principals/{u}"))
    add("episodes", call("GET", "/episodes", params={"scope": scope, "limit": "100"}), both=True)
    for e in w["episodes"]:
        add(f"episode {e}", call("GET", "/episodes/{episode_id}", f"/episodes/{e}",
                                 params={"scope": scope}), both=True)
    add("document", call("POST", "/document", body={"scope": scope, "document": "handbook"}),
        both=True)
    add("document at first", call("POST", "/document", body={
        "scope": scope, "document": "handbook", "at_commit": w["first_commit"]}))
    add("facts", call("GET", "/facts", params={"scope": scope, "entity": "acme"}), both=True)
    add("facts as_of", call("GET", "/facts", params={
        "scope": scope, "entity": "acme", "as_of": "2026-03-05T00:00:00Z"}))
    add("facts at fact commit", call("GET", "/facts", params={
        "scope": scope, "entity": "acme", "at_commit": w["fact_commit"]}))
    add("facts plan", call("GET", "/facts", params={"scope": scope, "entity": "acme",
                                                    "predicate": "plan"}))
    add("facts side", call("GET", "/facts", params={"scope": scope, "entity": "acme",
                                                    "branch": "side"}))
    add("facts pinned", call("GET", "/facts", params={"scope": scope, "entity": "acme",
                                                      "pin": w["pin"]}))
    add("facts snapshot", call("GET", "/facts", params={
        "scope": scope, "entity": "acme", "snapshot": w["snapshot"]}))
    add("typed facts", call("GET", "/facts", params={"scope": typed, "entity": "account:acme"}))
    add("entities", call("GET", "/entities", params={"scope": scope}), both=True)
    add("entities typed", call("GET", "/entities", params={"scope": typed}))
    for b in ("main", "trial", "side"):
        add(f"ledger {b}", call("GET", "/ledger", params={"scope": scope, "branch": b,
                                                          "limit": "1000"}), both=True)
    add("ledger typed", call("GET", "/ledger", params={"scope": typed, "limit": "1000"}))
    add("branches", call("GET", "/branches", params={"scope": scope}))
    add("search", call("POST", "/search", body={"scope": scope, "query": "when does acme renew"}),
        both=True)
    add("search words", call("POST", "/search", body={"scope": scope, "query": words}))
    add("search snapshot", call("POST", "/search", body={
        "scope": scope, "query": "acme plan", "snapshot": w["snapshot"]}))
    add("search pinned", call("POST", "/search", body={
        "scope": scope, "query": "acme plan", "pin": w["pin"]}))
    add("search side", call("POST", "/search", body={
        "scope": scope, "query": "discount", "branch": "side"}))
    add("query passages", call("POST", "/query", body={
        "scope": scope, "find": "passages", "query": "budget"}), both=True)
    add("query typed", call("POST", "/query", body={
        "scope": typed, "find": "facts", "type": "account"}))
    add("query typed where", call("POST", "/query", body={
        "scope": typed, "find": "entities", "type": "account",
        "where": [{"attribute": "segment", "op": "eq", "value": "enterprise"}]}))
    add("schema", call("GET", "/schemas/{org}/{team}", f"/schemas/{org}/sales",
                       params={"history": "true"}))
    add("schema none", call("GET", "/schemas/{org}/{team}", f"/schemas/{org}/team"))
    add("pin", call("GET", "/pin/{pin_id}", f"/pin/{w['pin']}"))
    add("pin released", call("GET", "/pin/{pin_id}", f"/pin/{w['pin_gone']}"))
    add("snapshot", call("GET", "/snapshots/{snapshot_id}", f"/snapshots/{w['snapshot']}"))
    add("workspace", call("GET", "/workspaces/{workspace_id}", f"/workspaces/{w['workspace']}"),
        both=True)
    add("workspace deleted", call("GET", "/workspaces/{workspace_id}",
                                  f"/workspaces/{w['workspace_gone']}"))
    add("workspace snapshots", call("GET", "/workspaces/{workspace_id}/snapshots",
                                    f"/workspaces/{w['workspace']}/snapshots"))
    add("workspace episodes", call("GET", "/episodes",
                                   params={"scope": f"{w['workspace']}/team"}))
    add("workspace snapshot", call("GET", "/snapshots/{snapshot_id}",
                                   f"/snapshots/{w['ws_snapshot']}"))
    add("runs", call("GET", "/runs", params={"scope": scope}), both=True)
    add("run", call("GET", "/runs/{run_id}", f"/runs/{w['run']}"))
    for s in w["sessions"]:
        add(f"session {s}", call("GET", "/sessions/{session_id}", f"/sessions/{s}"), both=True)
    add("procedures sources", call("GET", "/procedures/sources", params={"scope": scope}))
    add("procedures", call("GET", "/procedures", params={"scope": scope}))
    add("notes", call("GET", "/notes", params={"scope": scope}))
    add("situations", call("GET", "/situations", params={"scope": scope}))
    add("extraction status", call("GET", "/extraction/status", params={"scope": scope}))
    run.reads += R


def edge_writes(run: Run, w: dict[str, Any]) -> None:
    """What an older version took and this one refuses (CHANGELOG), where the old version
    takes it: an episode under a document key with white space at either end, and that
    key among the procedure sources. Read back by id, listing, search and key."""
    scope, tag = w["scope"], w["tag"]
    r = run.audit.send(call("POST", "/episodes", body={
        "scope": scope, "source": "doc:padded", "document": " padded.md", "acl": ["*"],
        "body": f"Padded key ({tag}): the kiwi{tag} notes."}))
    if not r.ok():
        w["edge"] = f"padded document key refused by the old version: {r.status}"
        return
    ep = r.data["id"]
    w["edge"] = ep
    run.audit.send(call("PUT", "/procedures/sources",
                        body={"scope": scope, "documents": ["handbook", " padded.md"]}))
    for name, c in (
            ("episode padded", call("GET", "/episodes/{episode_id}", f"/episodes/{ep}",
                                    params={"scope": scope})),
            ("search padded", call("POST", "/search", body={"scope": scope,
                                                            "query": f"kiwi{tag} notes"})),
            ("query padded", call("POST", "/query", body={
                "scope": scope, "find": "passages", "query": f"kiwi{tag}"})),
            ("document padded", call("POST", "/document", body={
                "scope": scope, "document": " padded.md"})),
            ("procedures sources padded", call("GET", "/procedures/sources",
                                               params={"scope": scope})),
            ("procedures padded", call("GET", "/procedures", params={"scope": scope}))):
        run.reads.append(Read(f"{tag}:{name}", c))


def global_reads(run: Run) -> None:
    for name, c in (("scopes", call("GET", "/scopes")), ("workspaces", call("GET", "/workspaces")),
                    ("schemas builtin", call("GET", "/schemas")),
                    ("episode types", call("GET", "/episode-types")),
                    ("inspector lifecycle", call("GET", "/amp-lifecycle")),
                    ("status", call("GET", "/status"))):
        run.reads.append(Read(f"*:{name}", c))
        if name in ("scopes", "workspaces"):
            run.reads.append(Read(f"*:{name}@other", c, as_other=True))


# ---------------------------------------------------------------- reading and comparing


def operations(spec: dict[str, Any]) -> set[tuple[str, str]]:
    """(METHOD, path template) of every operation a server's OpenAPI document lists."""
    return {(m.upper(), p) for p, ops in spec["paths"].items() for m in ops}


def read_one(run: Run, r: Read) -> Answered:
    headers = {**(run.other if r.as_other else run.headers), **(r.call.headers or {})}
    client = run.audit.clients[0]
    run.audit.sent += 1
    resp = client.request(r.call.method, r.call.path, json=r.call.body, params=r.call.params,
                          headers=headers)
    try:
        body = resp.json() if resp.content else None
    except ValueError:
        body = resp.text[:2000]
    if resp.status_code >= 500:
        run.find("server error", f"{r.name}: {r.call.method} {r.call.path} -> "
                 f"{resp.status_code} {resp.text[:300]}")
    return Answered(resp.status_code, resp.headers.get("etag"), body)


def read_all(run: Run, reads: list[Read]) -> dict[str, Answered]:
    return {r.name: read_one(run, r) for r in reads}


def as_compared(name: str, a: Answered) -> dict[str, Any]:
    """What is compared of an answer. An AMP search's order is its score at the moment of
    the search, decay included, whose clocks move with time and every read: its results
    are compared by id (`compare` checks the order apart, right after the upgrade)."""
    plain = a.plain()
    body = plain["body"]
    if " search" in name and name.split(":", 1)[1].startswith("cells search") and \
            isinstance(body, dict) and isinstance(body.get("results"), list):
        plain["body"] = {**body, "results": sorted(body["results"], key=lambda c: c["id"])}
    return plain


def walk(a: Any, b: Any, path: str, out: list[tuple[str, str, Any, Any]]) -> None:
    """Differences between ``a`` (before) and ``b`` (after): (kind, path, before, after),
    kind one of changed, removed, added."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in a:
            if k not in b:
                out.append(("removed", f"{path}.{k}", a[k], None))
            else:
                walk(a[k], b[k], f"{path}.{k}", out)
        for k in b:
            if k not in a:
                out.append(("added", f"{path}.{k}", None, b[k]))
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            walk(x, y, f"{path}[{i}]", out)
    elif a != b or type(a) is not type(b):
        out.append(("changed", path, a, b))


def volatile(first: dict[str, Answered], second: dict[str, Answered]) -> dict[str, set[str]]:
    """Per read, the paths that differ between two reads in a row on one server."""
    out: dict[str, set[str]] = {}
    for name, x in first.items():
        diffs: list[tuple[str, str, Any, Any]] = []
        walk(as_compared(name, x), as_compared(name, second[name]), "", diffs)
        out[name] = {p for _, p, _, _ in diffs}
    return out


def _instant(v: Any) -> datetime | None:
    if not isinstance(v, str):
        return None
    try:
        return datetime.fromisoformat(v.replace("Z", "+00:00"))
    except ValueError:
        return None


def moved_alike(path: str, prev: Any, before: Any, after: Any) -> bool:
    """A volatile value moved as it moves between two reads: a count by the same step, a
    time forwards; anything else volatile (a list whose length changes, an uptime) is let
    through, as the two reads on one server did."""
    if isinstance(before, int) and isinstance(after, int) and isinstance(prev, int):
        return after - before == before - prev
    t0, t1 = _instant(before), _instant(after)
    if t0 is not None and t1 is not None:
        return t1 >= t0
    return True


def at(doc: Any, path: str) -> Any:
    for part in re.findall(r"\.([^.\[]+)|\[(\d+)\]", path):
        key, idx = part
        try:
            doc = doc[int(idx)] if idx else doc[key]
        except (KeyError, IndexError, TypeError):
            return None
    return doc


def compare(run: Run, stage: str, before: dict[str, Answered], after: dict[str, Answered],
            moving: dict[str, set[str]], prev: dict[str, Answered] | None = None,
            older_reads: bool = False) -> list[Any]:
    """Every read answered alike; a list of what differed, each also a finding (an added
    field that ADDED names is listed, not a finding). ``older_reads``: ``after`` is the
    older version's answers, which lack what was added since (fields, ETags, the words of
    an error): only a status or a value both show that differ count."""
    rows: list[Any] = []
    for name, x in before.items():
        if name not in after:
            continue
        run.compared += 1
        diffs: list[tuple[str, str, Any, Any]] = []
        walk(as_compared(name, x), as_compared(name, after[name]), "", diffs)
        if prev is not None and as_compared(name, x) != x.plain():  # right after the upgrade
            order = [[c["id"] for c in y.body["results"]] for y in (x, after[name])]
            if order[0] != order[1] and sorted(order[0]) == sorted(order[1]):
                rows.append({"read": name, "kind": "order", "before": order[0],
                             "after": order[1]})
                run.find(f"{stage}: search order changed", f"{name}: {order[0]} -> {order[1]}")
        for kind, path, old, new in diffs:
            if path in moving.get(name, set()) or any(
                    path.startswith(p + ".") or path.startswith(p + "[")
                    for p in moving.get(name, set())):
                if prev is None or kind != "changed" or moved_alike(
                        path, at(as_compared(name, prev[name]), path), old, new):
                    continue
                kind = "moved unlike"
            if any(re.search(rn, name) and re.search(rp, path) for rn, rp, _ in IGNORED):
                continue
            if older_reads and (kind != "changed" or path == ".etag"
                                or path.startswith(".body.error.")):
                continue
            new_field = kind == "added" or (kind == "changed" and old is None)
            why = next((w for rx, w in ADDED if new_field and re.search(rx, f"{name} {path}")),
                       None) or next((w for rx, w in CHANGED if re.search(rx, f"{name} {path}")),
                                     None)
            rows.append({"read": name, "kind": kind, "path": path, "before": old, "after": new,
                         "known": why})
            if why is None:
                run.find(f"{stage}: read {kind}",
                         f"{name} {path}: {json.dumps(old)[:200]} -> {json.dumps(new)[:200]}")
    return rows


# ---------------------------------------------------------------- the run


def key_records(lines: str) -> list[Any]:
    """`keys list --json`: one object a line, times as instants (CHANGELOG: `keys list
    --json` spells its times with `Z`, no longer `+00:00`)."""
    keys = [{k: (_instant(v) or v) for k, v in json.loads(line).items()}
            for line in lines.splitlines() if line.strip()]
    return sorted(keys, key=lambda k: str(k["key_id"]))


def old_phase(run: Run) -> tuple[dict[str, Answered], dict[str, Answered], dict[str, set[str]]]:
    with serving(run, "old", run.old_src) as phase:
        available = operations(run.audit.spec)
        t = time.monotonic()
        run.written["old"] = write_all(run, "o" + uuid.uuid4().hex[:6])
        edge_writes(run, run.written["old"])
        global_reads(run)
        run.reads = [r for r in run.reads if (r.call.method, r.call.template) in available]
        run.timings["old writes"] = round(time.monotonic() - t, 1)
        first = read_all(run, run.reads)
        second = read_all(run, run.reads)
        del phase
    return first, second, volatile(first, second)


def new_writes(run: Run, old_answers: dict[str, Answered]) -> None:
    """This version writes every kind, and over the old records."""
    a, w = run.audit, run.written["old"]
    scope = w["scope"]
    tag = w["tag"]
    etag = old_answers[f"{tag}:cell plain"].etag
    cid = w["cells"]["plain"]
    r = a.send(call("PATCH", "/amp/v1/memories/{memory_id}", f"/amp/v1/memories/{cid}",
                    body={"content": {"text": f"The amber{tag} falcon prefers letters."}},
                    headers={"If-Match": etag} if etag else None))
    if r.status != 200:
        run.find("old ETag refused", f"PATCH {cid} If-Match {etag} -> {r.status} {r.text[:200]}")
    a.ok(call("PATCH", "/amp/v1/memories/{memory_id}",
              f"/amp/v1/memories/{w['cells']['expiring']}",
              body={"scoring": {"confidence": 0.4}, "access_policy": {"public": True}}))
    delete_cell(a, w["cells"]["procedural"])
    eps = w["episodes"]
    a.ok(call("POST", "/facts", body={
        "scope": scope, "entity": "acme", "predicate": "plan", "value": "Team", "quote": "Pro plan",
        "cites": [{"episode": eps[1], "unit": 1}]}))
    a.ok(call("POST", "/close", body={"scope": scope, "entity": "acme", "predicate": "lead",
                                      "reason": "left"}))
    a.ok(call("POST", "/episodes", body={
        "scope": scope, "source": "doc:handbook", "document": "handbook", "acl": ["*"],
        "body": f"Handbook v4 ({tag}). Written after the upgrade."}))
    a.ok(call("PUT", "/episodes/{episode_id}/acl", f"/episodes/{eps[-1]}/acl",
              body={"scope": scope, "acl": [f"user:{USER}"]}))
    a.ok(call("POST", "/merge", body={"scope": scope, "from": "side"}))
    a.ok(call("POST", "/pin/{pin_id}/renew", f"/pin/{w['pin']}/renew", body={"ttl": "48h"}))
    a.ok(call("POST", "/workspaces/{workspace_id}/renew", f"/workspaces/{w['workspace']}/renew",
              body={"ttl": "48h"}))
    a.ok(call("POST", "/runs/reward", body={"run": w["run"], "reward": 0.9, "reason": "upgraded"}))
    a.ok(call("POST", "/sessions/end", body={
        "session": w["sessions"][1], "transcript": "after the upgrade", "outcome": "success"}))
    a.ok(call("PUT", "/principals/{user}", f"/principals/{OTHER}",
              body={"groups": ["support", "sales"], "roles": []}))
    a.ok(call("PUT", "/schemas/{org}/{team}", f"/schemas/{scope.split('/')[0]}/sales",
              body={"builtin": "corpus"}))


def search_finds(run: Run, old: dict[str, Any], new: dict[str, Any]) -> None:
    a = run.audit
    hits = a.ok(call("POST", "/amp/v1/memories/search",
                     body={"query": "falcon budget forty thousand", "limit": 50}))
    shown = json.dumps(hits.get("results"))
    for w in (old, new):
        if w["cells"]["shared"] not in shown:
            run.find("search misses a cell", f"{w['tag']} shared {w['cells']['shared']}")
    for w in (old, new):
        res = a.ok(call("POST", "/search", body={"scope": w["scope"], "query": "handbook renews"}))
        text = json.dumps(res)
        if w["tag"] not in text:
            run.find("search misses episodes", f"{w['scope']}: {text[:300]}")
        res = a.ok(call("POST", "/search", body={"scope": old["scope"], "query": "written after"}))
        if "after the upgrade" not in json.dumps(res):
            run.find("search misses a new version", json.dumps(res)[:300])


def killed_upgrade(run: Run, within: float) -> None:
    """This version's first start on the old store, killed with ``kill -9`` after a random
    delay of up to ``within`` seconds: wherever the upgrade was, the next start must finish
    it and answer every read as the old version did (`new_phase` compares)."""
    proc = ServerProcess(run.home / "logs-killed", env=run.env_for(ROOT / "src")).launch()
    delay = random.uniform(0.0, within)
    time.sleep(delay)
    proc.kill()
    text = proc.log_path.read_text(errors="replace")
    run.written["killed upgrade"] = {"after_s": round(delay, 2),
                                     "said": [ln for ln in text.splitlines()
                                              if UPGRADE_WORDS.search(ln)][:3]}
    run.log(f"{run.where}: first start of this version killed after {delay:.2f} s")
    if "Traceback" in text:
        run.find("server logged an error", f"killed upgrade: {text[-1500:]}")


def new_phase(run: Run, first: dict[str, Answered], second: dict[str, Answered],
              moving: dict[str, set[str]]) -> dict[str, Answered]:
    if run.kill_within:
        killed_upgrade(run, run.kill_within)
    with serving(run, "new", ROOT / "src") as phase:
        said = [ln for ln in log_lines(phase) if UPGRADE_WORDS.search(ln)]
        run.written["upgrade log"] = said
        third = read_all(run, run.reads)
        run.written["compare old->new"] = compare(run, "old -> new", second, third, moving, first)
        t = time.monotonic()
        new_writes(run, second)
        run.written["new"] = write_all(run, "n" + uuid.uuid4().hex[:6])
        run.timings["new writes"] = round(time.monotonic() - t, 1)
        search_finds(run, run.written["old"], run.written["new"])
        later = (datetime.now(UTC) + timedelta(days=60)).isoformat()
        report = run.audit.ok(call("POST", "/amp/v1/lifecycle/run", body={"now": later}))
        run.written["lifecycle"] = report
        if not report.get("transitions"):
            run.find("lifecycle pass moved nothing", json.dumps(report)[:300])
        after = read_all(run, run.reads)
        again = read_all(run, run.reads)
    doctor = run.cli(ROOT / "src", "doctor", check=False)
    run.written["doctor"] = doctor.stdout.splitlines()
    if doctor.returncode != 0 or "FAIL" in doctor.stdout:
        run.find("doctor not clean", f"exit {doctor.returncode}: {doctor.stdout[-600:]} "
                 f"{doctor.stderr[-300:]}")
    new_keys = run.cli(ROOT / "src", "keys", "list", "--json").stdout
    if key_records(new_keys) != key_records(run.written["keys old"]):
        run.find("keys list differs", f"{run.written['keys old']!r} -> {new_keys!r}")
    run.written["moving new"] = volatile(after, again)
    return again


def restart_new(run: Run, last: dict[str, Answered], moving: dict[str, set[str]],
                stage: str) -> dict[str, Answered]:
    with serving(run, "new", ROOT / "src") as phase:
        said = [ln for ln in log_lines(phase)[-200:] if UPGRADE_WORDS.search(ln)]
        if said and stage == "restart":
            run.find("upgrade said again on a restart", said[0][:300])
        answers = read_all(run, run.reads)
        # The old version's writes change what the whole server lists (scopes, status).
        kept = {k: v for k, v in last.items()
                if stage == "restart" or not k.startswith("*:")}
        run.written[f"compare {stage}"] = compare(run, stage, kept, answers, moving)
        if "old again wrote" in run.written:
            old_writes_read(run)
    return answers


def layout_versions(src: Path) -> dict[str, int]:
    """The layout versions a source tree writes and reads (layouts.py): the cell store's
    and the read index's ``SCHEMA_VERSION``."""
    out = {}
    for name, rel in (("cell store", "ampup_memory/amp/store/rows.py"),
                      ("read index", "ampup_memory/memory/readindex.py")):
        found = re.search(r"^SCHEMA_VERSION = (\d+)", (src / rel).read_text(), re.MULTILINE)
        assert found is not None, rel
        out[name] = int(found.group(1))
    return out


def old_again(run: Run, last: dict[str, Answered], moving: dict[str, set[str]]) -> bool:
    """The old version on the upgraded store. Where this version records a newer layout
    than the old one knows, it must refuse the store in one line (docs/operations.md);
    where the layouts are the same (what was added since, an older version ignores), it
    serves: then its reads are compared and it writes, and this version must afterwards
    answer as before. True when it served."""
    newer = {k: v for k, v in layout_versions(ROOT / "src").items()
             if v > layout_versions(run.old_src)[k]}
    run.written["newer layouts"] = newer
    env = run.env_for(run.old_src)
    began = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "ampup_memory.cli", "serve", "--port", "0"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        proc.terminate()
        out, err = proc.communicate(timeout=30)
        run.written["old again"] = f"served for 20 s: {err[-400:]}"
        if newer:
            run.find("old version opens a store of a newer layout",
                     f"`serve` of the old version started on a store whose {newer} it does "
                     "not know (docs/operations.md: it refuses it in one line)")
    else:
        run.written["old again"] = f"exit {proc.returncode}: {err.strip()}"
        lines = err.strip().splitlines()
        if not newer:
            run.find("old version refuses a store of its own layout",
                     f"exit {proc.returncode}: {err[-600:]}")
        elif proc.returncode != 2 or len(lines) != 1 or not lines[0].startswith("error: "):
            run.find("old version's refusal is not one line",
                     f"exit {proc.returncode}: {err[-600:]}")
        return False
    run.timings["old again probe"] = round(time.monotonic() - began, 1)
    with serving(run, "old-again", run.old_src):
        available = operations(run.audit.spec)
        reads = [r for r in run.reads if (r.call.method, r.call.template) in available]
        answers = read_all(run, reads)
        run.written["compare old-again"] = compare(run, "new -> old again", last, answers, moving,
                                                   older_reads=True)
        # Its writes go where no recorded read looks (another owner's cell, a scope of its
        # own), so this version's reads afterwards must be exactly those before.
        tag = "a" + uuid.uuid4().hex[:6]
        scope = f"u{tag}/team"
        cell = run.audit.ok(call("POST", "/amp/v1/memories", headers=run.third, body={
            **cell_body(f"Zebra{tag} written by the old version again."),
            "identity": {"owner_id": THIRD_AGENT, "owner_type": "agent"}}))["id"]
        ep = run.audit.ok(call("POST", "/episodes", headers=run.third, body={
            "scope": scope, "source": "slack:C9", "acl": ["*"],
            "body": f"Zebra{tag}: the old version wrote this."}))["id"]
        run.audit.ok(call("POST", "/facts", headers=run.third, body={
            "scope": scope, "entity": "zebra", "predicate": "writer", "value": "old",
            "quote": "the old version wrote this", "cites": [{"episode": ep, "unit": 1}]}))
        run.written["old again wrote"] = {"cell": cell, "scope": scope, "tag": tag}
    return True


def old_writes_read(run: Run) -> None:
    """This version reads what the old version wrote into the store it had upgraded."""
    w = run.written["old again wrote"]
    a = run.audit
    got = a.send(call("GET", "/amp/v1/memories/{memory_id}", f"/amp/v1/memories/{w['cell']}",
                      headers=run.third))
    if got.status != 200:
        run.find("old version's cell unread", f"{w['cell']} -> {got.status} {got.text[:200]}")
    hits = a.ok(call("POST", "/amp/v1/memories/search", headers=run.third,
                     body={"query": f"zebra{w['tag']} old version", "limit": 5}))
    if w["cell"] not in json.dumps(hits):
        run.find("old version's cell not searched", json.dumps(hits)[:300])
    facts = a.ok(call("GET", "/facts", params={"scope": w["scope"], "entity": "zebra"}))
    if [f["value"] for f in facts.get("facts", [])] != ["old"]:
        run.find("old version's fact unread", json.dumps(facts)[:300])
    res = a.ok(call("POST", "/search", body={"scope": w["scope"], "query": f"zebra{w['tag']}"}))
    if "the old version wrote this" not in json.dumps(res):
        run.find("old version's episode not searched", json.dumps(res)[:300])


def audit_run(run: Run) -> None:
    old_keys = run.cli(run.old_src, "keys", "create", "--agent", AGENT, "--user", USER,
                       "--admin").stdout.strip().splitlines()[-1]
    other_key = run.cli(run.old_src, "keys", "create", "--agent", OTHER_AGENT, "--user",
                        OTHER).stdout.strip().splitlines()[-1]
    run.headers = {"X-AMP-Agent-ID": AGENT, "X-AMP-API-Key": old_keys}
    run.other = {"X-AMP-Agent-ID": OTHER_AGENT, "X-AMP-API-Key": other_key}
    run.third = {"X-AMP-Agent-ID": THIRD_AGENT, "X-AMP-API-Key": run.cli(
        run.old_src, "keys", "create", "--agent", THIRD_AGENT, "--user", THIRD,
    ).stdout.strip().splitlines()[-1]}
    run.audit.headers = run.headers
    run.written["keys old"] = run.cli(run.old_src, "keys", "list", "--json").stdout
    t = time.monotonic()
    first, second, moving = old_phase(run)
    if run.backend == "sqlite":  # docs/operations.md: backup and restore, embedded default
        run.cli(run.old_src, "backup", str(run.home / "backup"))
    run.log(f"{run.where}: old server wrote and read {len(run.reads)} reads "
            f"({time.monotonic() - t:.0f} s)")
    t = time.monotonic()
    last = new_phase(run, first, second, moving)
    moving_new = run.written["moving new"]
    run.log(f"{run.where}: new server compared, wrote, searched, lifecycle, doctor "
            f"({time.monotonic() - t:.0f} s); upgrade log: {run.written['upgrade log'][:3]}")
    last = restart_new(run, last, moving_new, "restart")
    if old_again(run, last, moving_new):
        restart_new(run, last, moving_new, "after old again")
    run.log(f"{run.where}: old version again: {str(run.written['old again'])[:300]}")
    if run.backend == "sqlite":
        restored(run, first, second, moving)


def restored(run: Run, first: dict[str, Answered], second: dict[str, Answered],
             moving: dict[str, set[str]]) -> None:
    """The old version's backup (taken right after its reads) restored by this version
    into a new home (docs/operations.md: "a backup made by an earlier version restores"):
    this version's server there answers every read of the old records as the old server
    did."""
    home = run.home / "restored"
    done = run.cli(ROOT / "src", "restore", str(run.home / "backup"), "--home", str(home),
                   check=False)
    run.written["restore"] = f"exit {done.returncode}: {done.stderr.strip()[-300:]}"
    if done.returncode != 0:
        run.find("old backup not restored", run.written["restore"])
        return
    saved = run.env
    run.env = {**saved, "AMPUP_MEMORY_HOME": str(home)}
    try:
        with serving(run, "restored", ROOT / "src"):
            tag = run.written["old"]["tag"]
            reads = [r for r in run.reads if r.name.startswith(f"{tag}:")]
            answers = read_all(run, reads)
            run.written["compare restored"] = compare(
                run, "old backup -> restored", {r.name: second[r.name] for r in reads},
                answers, moving, first)
    finally:
        run.env = saved


@contextmanager
def worktree(commit: str) -> Iterator[Path]:
    short = commit[:7]
    path = Path(f"/work/wt-up-{short}")
    if not path.exists():
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(path), commit],
                       check=True, capture_output=True)
    try:
        yield path
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(path)],
                       capture_output=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commits", default=",".join(COMMITS))
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--out", type=Path, default=Path("upgrade-report"))
    parser.add_argument("--keep", action="store_true", help="keep the homes (printed)")
    parser.add_argument("--kill-upgrade", type=float, default=0.0, metavar="SECONDS",
                        help="kill this version's first start after a random delay of up "
                             "to SECONDS, then start it again (default: no kill)")
    parser.add_argument("--seed", type=int, default=29)
    args = parser.parse_args(argv)
    args.out = args.out.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    random.seed(args.seed)
    backends = args.backends.split(",")
    began = time.monotonic()
    findings: list[dict[str, str]] = []
    sent = compared = 0
    summary: list[dict[str, Any]] = []
    with ExitStack() as stack:
        pg: PostgresFactory | None = (stack.enter_context(postgres_factory())
                                      if "postgres" in backends else None)
        for commit in args.commits.split(","):
            old = stack.enter_context(worktree(commit))
            for backend in backends:
                home = Path(tempfile.mkdtemp(prefix=f"upaudit-{commit[:7]}-{backend}-"))
                env = {**os.environ, **QUIET, "AMPUP_MEMORY_HOME": str(home / "home")}
                if backend == "postgres":
                    assert pg is not None
                    url = pg.new_database("upgrade")
                    env.update(postgres_env(url, home / "warehouse"))
                audit = Audit(f"{commit}/{backend}", [], {"paths": {}}, {}, 1)
                run = Run(commit, backend, home, env, old / "src", audit,
                          lambda line: print(line, flush=True),
                          kill_within=args.kill_upgrade)
                t = time.monotonic()
                audit.guarded(partial(audit_run, run), "upgrade run")
                run.timings["total"] = round(time.monotonic() - t, 1)
                findings += [{"config": f.config, "kind": f.kind, "detail": f.detail}
                             for f in audit.findings]
                sent += audit.sent
                compared += run.compared
                (args.out / f"reads-{commit[:7]}-{backend}.json").write_text(json.dumps(
                    {k: v for k, v in run.written.items() if k.startswith("compare")
                     or k in ("upgrade log", "old again", "doctor", "lifecycle",
                              "killed upgrade")},
                    indent=1, default=str))
                summary.append({"commit": commit, "backend": backend, "reads": len(run.reads),
                                "compared": run.compared, "requests": audit.sent,
                                "findings": len(audit.findings), "timings": run.timings})
                print(json.dumps(summary[-1]), flush=True)
                if not args.keep:
                    shutil.rmtree(home, ignore_errors=True)
                else:
                    print(f"kept {home}")
    (args.out / "findings.json").write_text(json.dumps(findings, indent=1))
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1))
    for f in findings:
        print(f"- [{f['config']}] {f['kind']}: {f['detail'][:400]}")
    print(f"{len(findings)} findings, {compared} reads compared, {sent} requests, "
          f"{time.monotonic() - began:.0f} s ({args.commits}; {args.backends})")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
