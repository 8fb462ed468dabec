"""Audit a rolling upgrade of a fleet: an OLDER version and this one serving the same
PostgreSQL database and S3 warehouse at the same time, as an operator upgrading servers
behind a load balancer one at a time has them for minutes.

    PYTHONPATH=src:. python tools/rolling_audit.py [--commits 084cb54,38297c3]
                                                  [--out DIR] [--keep]

It shares `tools/upgrade_audit.py`'s checkout of an old commit, its writes of every kind
(`write_all`), its reads of them (`reads_of`) and its comparison (`walk`, `volatile`). For
each old commit (docs/testing.md, "The rolling-upgrade audit"), on one PostgreSQL database
(cell store, catalog, read index) and a bucket of moto's S3 server (`tests/s3.py`), API
keys on, a scripted model (`tests/scripted_model.py`), and every timed pass on (a few
seconds apart under a 4 s lease, so passes hop between the servers):

1. ``old``: the old version starts on the fresh stores and writes records of every kind,
   and text in other scripts (episodes, facts, cells in Chinese and with accents), and
   ``--seed-episodes`` episodes and ``--seed-cells`` cells for the new start to migrate.
2. ``new``: this version starts while the old one serves and is probed: a thread sends
   reads and writes to the old server all along (a cell read, a search, a fact read, an
   episode write, a cell write, a cell search), and its latency before, during and after
   the new server's start is reported; a failure or a stall above ``--stall`` seconds is
   a finding.
3. Both serve: each writes every kind at the same time as the other (two threads), then
   each writes over the other's records (If-Match with the other's ETag, a fact version,
   a closure, a merge, a pin and workspace renewed, a run rewarded, a session ended, an
   ACL, a principal, a schema); text in other scripts is written through each. Every read
   of every record is answered by old, new and old again: a field that differs between
   the two old reads is volatile; any other status or value that differs between the
   old and the new answer is a finding (a field only the new version shows is listed).
4. Passes: the timers run on both all along; each version's lifecycle pass
   (``POST /amp/v1/lifecycle/run``) and `ampup-memory maintenance` are run by hand too.
   The lease names each version takes are compared (a pass named apart would run on both
   at once), and the lease rows are sampled while both serve: holders of both versions
   seen is expected (passes hop), a failure logged by a pass is a finding.
5. ``late old``: a second old server starts while the new one serves (an instance of
   the old image started by an autoscaler, or a rollback of one server): it must start
   and answer every read as the new one does.
6. ``all new``: the old servers stop and a second server of this version starts (the fleet
   upgraded): every read answers as before, and what the old version wrote during the
   overlap is found as this version finds its own: keyword search (`POST /query`
   passages, hash embedder: a hit is a keyword hit) of a word inside each text in other
   scripts, and the search index rows the old version left without their keyword text.

Findings go to ``DIR/findings.json``, the comparisons and timings to ``DIR/summary.json``;
the exit code is 1 when there are any.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Self

import httpx
import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.model_support import ScriptedModel  # noqa: E402
from tests.pg import postgres_factory  # noqa: E402
from tests.s3 import S3Server  # noqa: E402
from tests.server_process import ServerProcess, plain_client  # noqa: E402
from tools.race_audit import Audit, Skip, postgres_env  # noqa: E402
from tools.upgrade_audit import (  # noqa: E402
    AGENT,
    OTHER,
    OTHER_AGENT,
    QUIET,
    USER,
    Answered,
    Read,
    Run,
    as_compared,
    call,
    cell_body,
    global_reads,
    new_writes,
    operations,
    read_one,
    volatile,
    walk,
    worktree,
    write_all,
)

# Session 31's close (before intl32's `words` column of the PostgreSQL search index and
# everything of session 32) and session 30's close (before session 31's serving lease,
# the strict query parameters of the AMP face's HEAD, the write-once sessions).
COMMITS = ["084cb54", "38297c3"]
LEASE_SECONDS = 4
TIMERS = {  # every timed pass on, a few seconds apart, so the lease hops between servers
    "AMP_LIFECYCLE_ENABLED": "true", "AMP_LIFECYCLE_INTERVAL_SECONDS": "3",
    "AMPUP_MEMORY_MAINTENANCE_INTERVAL_SECONDS": "5",
    "AMPUP_MEMORY_EXTRACTION_INTERVAL_SECONDS": "3",
    "AMPUP_MEMORY_WORKSPACE_GC_INTERVAL_SECONDS": "3",
    "AMPUP_MEMORY_ADVICE_JUDGE_INTERVAL_SECONDS": "4",
    "AMPUP_MEMORY_ADVICE_CLUSTER_INTERVAL_SECONDS": "4",
    "AMPUP_MEMORY_ADVICE_LEARN_INTERVAL_SECONDS": "4",
    "AMPUP_MEMORY_ADVICE_COMPILE_INTERVAL_SECONDS": "4",
    "AMPUP_MEMORY_LEASE_SECONDS": str(LEASE_SECONDS),
    "AMPUP_MEMORY_MODEL_RETRIES": "0",
}
# Text in other scripts, each with a word inside it that keyword search must find (the
# query spelled as a reader types it). Written through each version during the overlap.
WORLD = [("北京办公室的预算是四万元", "办公室"), ("東京の会議室は三階にあります", "会議室"),
         ("Le café de Zürich ouvre à huit heures", "cafe zurich"),
         ("서울 사무실은 월요일에 닫습니다", "사무실")]
# Log lines of a timed pass that failed (a traceback is caught apart).
PASS_FAILED = re.compile(r"(pass|timer|lease).*(failed|error)", re.IGNORECASE)


@dataclass
class Server:
    name: str  # old, new, late old, new 2
    src: Path
    proc: ServerProcess
    client: httpx.Client


@dataclass
class Fleet:
    commit: str
    home: Path
    env: dict[str, str]
    db: str
    old_src: Path
    audit: Audit
    findings: list[dict[str, str]] = field(default_factory=list)
    servers: dict[str, Server] = field(default_factory=dict)
    runs: dict[str, Run] = field(default_factory=dict)  # per server: its writes and reads
    reads: list[Read] = field(default_factory=list)
    report: dict[str, Any] = field(default_factory=dict)
    world: list[dict[str, str]] = field(default_factory=list)  # text in other scripts
    headers: dict[str, str] = field(default_factory=dict)
    other: dict[str, str] = field(default_factory=dict)

    def find(self, kind: str, detail: str) -> None:
        self.findings.append({"config": self.commit, "kind": kind, "detail": detail[:800]})
        print(f"  FINDING {kind}: {detail[:300]}", flush=True)

    def cli(self, src: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([sys.executable, "-m", "ampup_memory.cli", *args],
                              env={**self.env, "PYTHONPATH": str(src)}, capture_output=True,
                              text=True, timeout=600)
        if check and done.returncode != 0:
            raise Skip(f"`ampup-memory {' '.join(args)}` ({src}) exited {done.returncode}: "
                       f"{done.stderr.strip()[-400:]}")
        return done


# ---------------------------------------------------------------- servers


def launch(fleet: Fleet, name: str, src: Path) -> ServerProcess:
    env = {**fleet.env, "PYTHONPATH": str(src)}
    return ServerProcess(fleet.home / f"logs-{name.replace(' ', '-')}", env=env).launch()


def ready(fleet: Fleet, name: str, src: Path, proc: ServerProcess) -> Server:
    began = time.monotonic()
    proc.wait_ready(600)
    fleet.report.setdefault("start seconds", {})[name] = round(time.monotonic() - began, 1)
    client = plain_client(base_url=proc.url, timeout=120)
    server = Server(name, src, proc, client)
    fleet.servers[name] = server
    run = run_on(fleet, server)
    fleet.runs[name] = run
    return server


def run_on(fleet: Fleet, server: Server) -> Run:
    """An upgrade_audit `Run` whose requests go to ``server`` (its own Audit: two run at
    once on two threads)."""
    audit = Audit(f"{fleet.commit}/{server.name}", [server.proc.url], {"paths": {}},
                  fleet.headers, 1)
    audit.clients = [audit.connect(server.proc.url)]
    audit.spec = httpx.get(f"{server.proc.url}/openapi.json", timeout=60).json()
    run = Run(fleet.commit, server.name, fleet.home, fleet.env, fleet.old_src, audit,
              lambda line: print(line, flush=True))
    run.headers, run.other = fleet.headers, fleet.other
    return run


def stop(fleet: Fleet, name: str) -> None:
    server = fleet.servers.pop(name)
    run = fleet.runs.pop(name)
    for c in run.audit.clients:
        c.close()
    server.client.close()
    server.proc.stop()
    harvest(fleet, run, server)


def harvest(fleet: Fleet, run: Run, server: Server) -> None:
    """The findings of a server's audit (500s, undocumented statuses) and its log."""
    for f in run.audit.findings:
        fleet.find(f"{server.name}: {f.kind}", f.detail)
    fleet.report.setdefault("requests", {})[server.name] = run.audit.sent
    text = server.proc.log_path.read_text(errors="replace")
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if "Traceback" in line or "unhandled error" in line:
            fleet.find(f"{server.name} logged an error",
                       " | ".join(lines[max(0, i - 2):i + 12])[:800])
            break
    failed = [ln for ln in lines if PASS_FAILED.search(ln) and "WARNING" in ln.upper()]
    fleet.report.setdefault("pass warnings", {})[server.name] = failed[:20]


# ---------------------------------------------------------------- the probe


class _Alongside:
    """A thread that runs ``loop`` while the audit goes on, from ``with`` to its end."""

    name = "alongside"
    join_seconds = 10.0

    def __init__(self) -> None:
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.loop, name=self.name, daemon=True)

    def loop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.thread.join(self.join_seconds)


class Probe(_Alongside):
    """Requests to one server all along (a cell read, a search, a fact read, an episode
    write, in turn), each one's latency and status kept with its time."""

    name, join_seconds = "probe", 400.0

    def __init__(self, fleet: Fleet, server: Server, scope: str, cell: str) -> None:
        self.url = server.proc.url
        self.headers = fleet.headers
        self.scope, self.cell = scope, cell
        self.samples: list[tuple[float, str, float, int | str]] = []
        super().__init__()

    def loop(self) -> None:
        calls = [("GET", f"/amp/v1/memories/{self.cell}", None, None),
                 ("POST", "/search", {"scope": self.scope, "query": "acme renews"}, None),
                 ("GET", "/facts", None, {"scope": self.scope, "entity": "acme"}),
                 ("POST", "/episodes", {"scope": self.scope, "source": "doc:probe",
                                        "acl": ["*"], "body": "The probe wrote this line."},
                  None),
                 ("POST", "/amp/v1/memories", cell_body("The probe wrote this cell."), None),
                 ("POST", "/amp/v1/memories/search", {"query": "probe cell", "limit": 5},
                  None)]
        i = 0
        with plain_client(base_url=self.url, timeout=300) as client:
            while not self.stopping.is_set():
                method, path, body, params = calls[i % len(calls)]
                i += 1
                t = time.monotonic()
                try:
                    status: int | str = client.request(method, path, json=body, params=params,
                                                       headers=self.headers).status_code
                except httpx.HTTPError as exc:
                    status = type(exc).__name__
                shown = re.sub(r"/amp/v1/memories/(?!search)[^/]+$", "/amp/v1/memories/{id}",
                               path)
                self.samples.append((t, f"{method} {shown}", time.monotonic() - t, status))
                time.sleep(0.05)

    def window(self, since: float, until: float) -> dict[str, Any]:
        got = [s for s in self.samples if since <= s[0] < until]
        lat = sorted(s[2] for s in got)
        if not lat:
            return {"requests": 0}
        return {"requests": len(got), "p50_ms": round(statistics.median(lat) * 1000),
                "p95_ms": round(lat[int(0.95 * (len(lat) - 1))] * 1000),
                "max_ms": round(lat[-1] * 1000),
                "slowest": max(got, key=lambda s: s[2])[1],
                "max_ms_by_call": {k: round(max(s[2] for s in got if s[1] == k) * 1000)
                                   for k in sorted({s[1] for s in got})},
                "failed": [f"{s[1]} -> {s[3]}" for s in got
                           if not (isinstance(s[3], int) and s[3] < 300)][:10]}


# ---------------------------------------------------------------- writes and reads


def world_writes(fleet: Fleet, run: Run, who: str) -> None:
    """Episodes, facts and AMP cells in other scripts, written through ``run``'s server."""
    a = run.audit
    scope = f"w{who.replace(' ', '')}{uuid.uuid4().hex[:5]}/team"
    for i, (text, word) in enumerate(WORLD):
        ep = a.ok(call("POST", "/episodes", body={"scope": scope, "source": "doc:world",
                                                  "acl": ["*"], "body": text}))["id"]
        a.ok(call("POST", "/facts", body={
            "scope": scope, "entity": f"place{i}", "predicate": "said", "value": text,
            "quote": text, "cites": [{"episode": ep, "unit": 1}]}))
        cell = a.ok(call("POST", "/amp/v1/memories", body=cell_body(text)))["id"]
        fleet.world.append({"by": who, "scope": scope, "text": text, "word": word,
                            "episode": ep, "cell": cell})


def seed(run: Run, n: int, cells: int) -> float:
    """``n`` episodes (a third of them in other scripts) in one scope, 200 a request, and
    ``cells`` AMP cells (a third in other scripts, four writers at once), so the new
    version's start has rows to migrate; the seconds it took."""
    t = time.monotonic()

    def cell(i: int) -> None:
        text = (f"{WORLD[i % len(WORLD)][0]} ({i})" if i % 3 == 0
                else f"Seeded cell {i}: the customer prefers e-mail on day {i % 28 + 1}.")
        run.audit.ok(call("POST", "/amp/v1/memories", body=cell_body(text)))

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(cell, range(cells)))
    scope = f"seed{uuid.uuid4().hex[:6]}/team"
    for start in range(0, n, 200):
        bodies = [f"{WORLD[i % len(WORLD)][0]} ({i})" if i % 3 == 0 else
                  f"Seeded note {i}: the account renews in month {i % 12 + 1}."
                  for i in range(start, min(n, start + 200))]
        run.audit.ok(call("POST", "/episodes/batch", body={"scope": scope, "episodes": [
            {"source": f"doc:s{start}", "body": b, "acl": ["*"]} for b in bodies]}))
    return round(time.monotonic() - t, 1)


def world_found(fleet: Fleet, run: Run, stage: str, judged: bool = True) -> dict[str, Any]:
    """Every text in another script found by a keyword search of its word, whoever wrote
    it (the hash embedder finds nothing by meaning). ``judged``: a miss is a finding (not
    through an older version, whose keyword rule for other scripts was older)."""
    found, missed = 0, []
    cells: dict[str, set[str]] = {}  # text -> who wrote a cell of it that search found
    for w in fleet.world:
        got = run.audit.send(call("POST", "/query", body={
            "scope": w["scope"], "find": "passages", "query": w["word"], "limit": 5}))
        if w["text"] in json.dumps(got.data, ensure_ascii=False):
            found += 1
        else:
            missed.append(f"{w['by']}: {w['word']!r} in {w['text']!r} -> {got.status}")
        got = run.audit.send(call("POST", "/amp/v1/memories/search", body={
            "query": w["word"], "limit": 100}))
        if w["cell"] in json.dumps(got.data):
            cells.setdefault(w["text"], set()).add(w["by"])
    if missed and judged:
        fleet.find(f"{stage}: keyword search misses text another version wrote",
                   f"{len(missed)} of {len(fleet.world)} not found through {run.backend}: "
                   + "; ".join(missed))
    # AMP cells: whether a text in another script is found at all is the cell store's
    # rule of the version searched; a cell an older version wrote must be found as the
    # same text this version wrote is (cellintl33's `words` of the cell stores).
    writers = {w["by"] for w in fleet.world}
    ours = {b for b in writers if b.startswith("new")}
    cells_missed = sorted(f"{by}: {text!r}" for text, by_found in cells.items()
                          if by_found & ours for by in writers - by_found)
    if cells_missed and judged:
        fleet.find(f"{stage}: cell search misses cells another version wrote of a text it "
                   "finds in this version's", "; ".join(cells_missed))
    return {"found": found, "of": len(fleet.world), "missed": missed,
            "cells found": {t: sorted(b) for t, b in cells.items()},
            "cells missed": cells_missed}


def unworded(fleet: Fleet) -> dict[str, int] | None:
    """Search index rows holding text other than ASCII without their keyword text
    (``words``, this version's rule), by table; None when the index has no such column."""
    out = {}
    with psycopg.connect(fleet.db) as conn:
        for table, columns in (("search_passages", ["text"]),
                               ("search_facts", ["entity", "value", "quote"])):
            has = conn.execute("SELECT 1 FROM information_schema.columns WHERE table_name = %s"
                               " AND column_name = 'words'", (table,)).fetchone()
            if has is None:
                return None
            wide = " OR ".join(f"octet_length({c}) <> char_length({c})" for c in columns)
            row = conn.execute(f"SELECT count(*) FROM {table} WHERE words IS NULL AND ({wide})"
                               ).fetchone()
            out[table] = int(row[0]) if row else 0
    return out


def answers(run: Run, reads: list[Read]) -> dict[str, Answered]:
    """Each read through ``run``'s server (reads this server's API lacks are left out)."""
    have = operations(run.audit.spec)
    return {r.name: read_one(run, r) for r in reads
            if (r.call.method, r.call.template) in have}



def _moves(path: str, moving: set[str]) -> bool:
    """Whether ``path`` of a read is one of ``moving`` (a field the timers change between
    two reads) or inside one."""
    return any(path == p or path.startswith(p + ".") or path.startswith(p + "[")
               for p in moving)

def cross(fleet: Fleet, stage: str, old: Run, new: Run, reads: list[Read]) -> dict[str, Any]:
    """Every read through old, new, old again: a path that differs between the two old
    answers is volatile; any other difference of status or value between old and new is a
    finding, a field only the new version shows is listed (``added``), one only the old
    version shows is a finding."""
    first = answers(old, reads)
    mid = answers(new, reads)
    last = answers(old, reads)
    moving = volatile(first, last)
    added: dict[str, int] = {}
    diffs_out: list[dict[str, Any]] = []
    compared = 0
    for name, x in first.items():
        if name not in mid:
            continue
        compared += 1
        diffs: list[tuple[str, str, Any, Any]] = []
        walk(as_compared(name, x), as_compared(name, mid[name]), "", diffs)
        for kind, path, before, after in diffs:
            if _moves(path, moving.get(name, set())):
                continue
            if re.search(r"^\*:status$", name) and re.search(r"\.(bytes|timers)\b", path):
                continue
            if name == "*:inspector lifecycle":  # the timers' passes: `lifecycle_overlaps`
                continue
            if kind == "added" or (kind == "changed" and before is None and path == ".etag"):
                key = re.sub(r"\[\d+\]", "[]", f"{name.split(':', 1)[1]} {path}")
                added[key] = added.get(key, 0) + 1
                continue
            if path.startswith(".body.error.") and kind == "changed" and path != \
                    ".body.error.code":
                continue
            diffs_out.append({"read": name, "kind": kind, "path": path, "old": before,
                              "new": after})
            fleet.find(f"{stage}: old and new answer apart",
                       f"{name} {path} ({kind}): old {json.dumps(before)[:200]} -> new "
                       f"{json.dumps(after)[:200]}")
    return {"compared": compared, "differ": diffs_out, "only new shows": added}


def etag_of(run: Run, tag: str) -> dict[str, Answered]:
    """The answer of the plain cell's read (its ETag) as `new_writes` takes it."""
    read = next(r for r in run.reads if r.name == f"{tag}:cell plain")
    return {read.name: read_one(run, read)}


def writes_over(fleet: Fleet, run: Run, written: dict[str, Any], owner: Run) -> None:
    """``run``'s server writes over the records ``written`` through another server
    (upgrade_audit's `new_writes`, with that server's ETag of the patched cell)."""
    run.written["old"] = written
    new_writes(run, etag_of(owner, written["tag"]))


def both_write(fleet: Fleet, old: Run, new: Run) -> tuple[dict[str, Any], dict[str, Any]]:
    """Each server writes every kind at the same time as the other."""
    out: dict[str, dict[str, Any]] = {}
    errors: list[str] = []

    def job(run: Run, prefix: str) -> None:
        try:
            out[prefix] = write_all(run, prefix + uuid.uuid4().hex[:6])
        except Exception as exc:  # a finding, and the audit goes on
            errors.append(f"{run.backend}: {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=job, args=(old, "o")),
               threading.Thread(target=job, args=(new, "n"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for e in errors:
        fleet.find("writes at once failed", e)
    if errors:
        raise Skip("writes at once failed")
    return out["o"], out["n"]


def lease_names(src: Path) -> set[str]:
    """The lease names a source tree's timed passes take (the `*_LEASE = "..."`
    constants): a pass whose name differs between versions runs on both at once."""
    names: set[str] = set()
    for path in (src / "ampup_memory").rglob("*.py"):
        for m in re.finditer(r"^(\w*LEASE\w*(?:, \w*LEASE\w*)*) = (.+)$", path.read_text(),
                             re.MULTILINE):
            names.update(re.findall(r'"([\w-]+)"', m.group(2)))
    return names  # workspace gc takes maintenance's (memory/workspaces.py)


def leases_now(fleet: Fleet) -> list[tuple[str, str]]:
    with psycopg.connect(fleet.db) as conn:
        return [(str(n), str(h)) for n, h in conn.execute(
            "SELECT name, holder FROM mem_leases ORDER BY name").fetchall()]


class LeaseWatch(_Alongside):
    """The lease rows sampled every 0.2 s: which server (by pid) held which pass."""

    name = "leases"

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        self.held: dict[str, set[str]] = {}
        super().__init__()

    def loop(self) -> None:
        while not self.stopping.wait(0.2):
            pids = {str(s.proc.proc.pid): s.name for s in list(self.fleet.servers.values())
                    if s.proc.proc is not None}
            try:
                rows = leases_now(self.fleet)
            except psycopg.Error:
                continue
            for name, holder in rows:
                parts = holder.split("/")
                who = pids.get(parts[1], f"pid {parts[1]}") if len(parts) > 1 else holder
                self.held.setdefault(name, set()).add(who)


def lifecycle_overlaps(fleet: Fleet, run: Run) -> dict[str, Any]:
    """The lifecycle passes recorded (``GET /amp-lifecycle``: when, by which process):
    two whose times overlap ran at once (the cell store's advisory lock should forbid it,
    whichever version holds it)."""
    pids = {str(s.proc.proc.pid): s.name for s in fleet.servers.values() if s.proc.proc}
    got = run.audit.send(call("GET", "/amp-lifecycle", params={"limit": "200"}))
    seen = (got.data or {}).get("passes", []) if isinstance(got.data, dict) else []
    spans = sorted((p["started_at"], p["finished_at"],
                    pids.get(str(p["holder"]).rsplit(":", 1)[-1], p["holder"])) for p in seen)
    overlaps = [(a, b) for a, b in zip(spans, spans[1:], strict=False) if b[0] < a[1]]
    for a, b in overlaps:
        fleet.find("two lifecycle passes at once", f"{a} and {b}")
    return {"passes": len(spans), "by": sorted({s[2] for s in spans}),
            "overlapping": len(overlaps)}


def passes(fleet: Fleet, old: Run, new: Run) -> None:
    """Each version's lifecycle pass and maintenance by hand, beside the timers."""
    later = (datetime.now(UTC) + timedelta(days=60)).isoformat()
    for run in (old, new):
        got = run.audit.send(call("POST", "/amp/v1/lifecycle/run", body={"now": later}))
        fleet.report.setdefault("lifecycle by hand", {})[run.backend] = (
            got.status, {k: v for k, v in (got.data or {}).items() if k != "transitions"}
            if isinstance(got.data, dict) else got.text[:200])
        if got.status >= 500:
            fleet.find("lifecycle pass failed", f"{run.backend}: {got.status} {got.text[:300]}")
    for name, src in (("old", fleet.old_src), ("new", ROOT / "src")):
        done = fleet.cli(src, "maintenance", check=False)
        fleet.report.setdefault("maintenance by hand", {})[name] = done.returncode
        if done.returncode != 0 or "Traceback" in done.stderr:
            fleet.find("maintenance by hand failed", f"{name}: exit {done.returncode}: "
                       f"{done.stderr[-500:]}")


# ---------------------------------------------------------------- the run


def keys(fleet: Fleet) -> None:
    made = fleet.cli(fleet.old_src, "keys", "create", "--agent", AGENT, "--user", USER,
                     "--admin").stdout.strip().splitlines()[-1]
    other = fleet.cli(fleet.old_src, "keys", "create", "--agent", OTHER_AGENT, "--user",
                      OTHER).stdout.strip().splitlines()[-1]
    fleet.headers.update({"X-AMP-Agent-ID": AGENT, "X-AMP-API-Key": made})
    fleet.other.update({"X-AMP-Agent-ID": OTHER_AGENT, "X-AMP-API-Key": other})


def fleet_run(fleet: Fleet, stall: float, seeded: int, cells: int) -> None:
    keys(fleet)
    t0 = time.monotonic()
    old = ready(fleet, "old", fleet.old_src, launch(fleet, "old", fleet.old_src))
    old_run = fleet.runs["old"]
    w0 = write_all(old_run, "f" + uuid.uuid4().hex[:6])
    world_writes(fleet, old_run, "old before")
    fleet.report["seeded"] = {"episodes": seeded, "cells": cells,
                              "seconds": seed(old_run, seeded, cells)}
    global_reads(old_run)
    print(f"{fleet.commit}: old wrote {len(old_run.reads)} reads' records "
          f"({time.monotonic() - t0:.0f} s)", flush=True)
    with LeaseWatch(fleet) as watch:
        # -- 2. this version starts while the old one serves, probed
        with Probe(fleet, old, w0["scope"], w0["cells"]["plain"]) as probe:
            time.sleep(6)
            launched = time.monotonic()
            proc = launch(fleet, "new", ROOT / "src")
            new = ready(fleet, "new", ROOT / "src", proc)
            up = time.monotonic()
            time.sleep(6)
            done = time.monotonic()
        said = [ln for ln in new.proc.log_path.read_text(errors="replace").splitlines()
                if re.search(r"older|upgrad|layout|again", ln, re.IGNORECASE)]
        fleet.report["new start said"] = said[:10]
        fleet.report["old server's latency"] = {
            "before the new start": probe.window(launched - 6, launched),
            "during the new start": probe.window(launched, up),
            "after": probe.window(up, done)}
        latency = fleet.report["old server's latency"]
        print(f"{fleet.commit}: new started in {up - launched:.1f} s; old server's latency "
              f"{json.dumps(latency)}", flush=True)
        for window, got in latency.items():
            if got.get("failed"):
                fleet.find("old server failed while the new one started",
                           f"{window}: {got['failed']}")
            if got.get("max_ms", 0) > stall * 1000:
                fleet.find("old server stalled while the new one started",
                           f"{window}: {got}")
        new_run = fleet.runs["new"]
        # -- 3. both serve: writes at once, writes over each other's, reads compared
        t = time.monotonic()
        w_old, w_new = both_write(fleet, old_run, new_run)
        writes_over(fleet, new_run, w0, old_run)
        writes_over(fleet, new_run, w_old, old_run)
        writes_over(fleet, old_run, w_new, new_run)
        world_writes(fleet, old_run, "old beside new")
        world_writes(fleet, new_run, "new beside old")
        fleet.reads = old_run.reads + new_run.reads
        fleet.report["writes seconds"] = round(time.monotonic() - t, 1)
        fleet.report["both serve"] = cross(fleet, "both serve", old_run, new_run, fleet.reads)
        # What the old version writes during the overlap lacks this version's keyword text
        # until a server of this version starts again (`PostgresIndex._fill_words`):
        # reported, judged once the fleet is new.
        fleet.report["found both serve (new)"] = world_found(fleet, new_run, "both serve",
                                                             judged=False)
        fleet.report["found both serve (old)"] = world_found(fleet, old_run, "old reads",
                                                             judged=False)
        # -- 4. passes by hand beside the timers
        passes(fleet, old_run, new_run)
        time.sleep(3 * LEASE_SECONDS)
        # -- 5. a second old server starts beside the new one
        late_src = fleet.old_src
        late = ready(fleet, "late old", late_src, launch(fleet, "late old", late_src))
        del late
        fleet.report["late old beside new"] = cross(fleet, "late old", fleet.runs["late old"],
                                                    new_run, fleet.reads)
        world_writes(fleet, fleet.runs["late old"], "late old")
        time.sleep(2 * LEASE_SECONDS)
        fleet.report["lifecycle passes"] = lifecycle_overlaps(fleet, new_run)
    fleet.report["lease holders"] = {k: sorted(v) for k, v in watch.held.items()}
    names = {"old": lease_names(fleet.old_src), "new": lease_names(ROOT / "src")}
    fleet.report["lease names"] = {k: sorted(v) for k, v in names.items()}
    if names["old"] - names["new"]:
        fleet.find("a pass takes a lease of another name in each version",
                   f"old only: {sorted(names['old'] - names['new'])}; new only: "
                   f"{sorted(names['new'] - names['old'])}")
    # -- 6. the old servers stop; a second server of this version starts
    before = answers(new_run, fleet.reads)
    stop(fleet, "old")
    stop(fleet, "late old")
    fleet.report["unworded rows, old stopped"] = unworded(fleet)
    done = fleet.cli(ROOT / "src", "maintenance", check=False)
    fleet.report["unworded rows, after maintenance by hand"] = (done.returncode,
                                                                unworded(fleet))
    second = ready(fleet, "new 2", ROOT / "src", launch(fleet, "new 2", ROOT / "src"))
    del second
    fleet.report["all new"] = cross_new(fleet, before, fleet.runs["new 2"])
    fleet.report["unworded rows, all new"] = unworded(fleet)
    fleet.report["found all new"] = world_found(fleet, fleet.runs["new 2"], "all new")
    rows = fleet.report["unworded rows, all new"]
    if rows and any(rows.values()):
        fleet.find("all new: index rows the old version wrote lack this version's keyword "
                   "text", json.dumps(rows))
    # and after a restart of both new servers (what an operator may do last)
    for name in ("new", "new 2"):
        stop(fleet, name)
    ready(fleet, "new 3", ROOT / "src", launch(fleet, "new 3", ROOT / "src"))
    fleet.report["unworded rows, restarted"] = unworded(fleet)
    fleet.report["found restarted"] = world_found(fleet, fleet.runs["new 3"], "restarted")
    doctor = fleet.cli(ROOT / "src", "doctor", check=False)
    fleet.report["doctor"] = doctor.stdout.splitlines()
    if doctor.returncode != 0 or "FAIL" in doctor.stdout:
        fleet.find("doctor not clean", f"exit {doctor.returncode}: {doctor.stdout[-600:]}")
    stop(fleet, "new 3")


def cross_new(fleet: Fleet, before: dict[str, Answered], run: Run) -> dict[str, Any]:
    """The second new server answers every read as the first did before the old ones
    stopped (volatile paths from two reads of its own)."""
    first = answers(run, fleet.reads)
    again = answers(run, fleet.reads)
    moving = volatile(first, again)
    differ = []
    for name, x in before.items():
        if name not in first or name.startswith("*:"):
            continue
        diffs: list[tuple[str, str, Any, Any]] = []
        walk(as_compared(name, x), as_compared(name, first[name]), "", diffs)
        for kind, path, b, a in diffs:
            if _moves(path, moving.get(name, set())):
                continue
            differ.append({"read": name, "kind": kind, "path": path, "before": b, "after": a})
    # The timers moved things between the two (extraction, lifecycle, an access count):
    # listed for the report, judged by hand, not findings.
    return {"compared": len(before), "differ": differ[:200], "n differ": len(differ)}


@contextmanager
def moto(home: Path) -> Iterator[S3Server]:
    home.mkdir(parents=True, exist_ok=True)
    server = S3Server(home).start()
    try:
        yield server
    finally:
        server.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commits", default=",".join(COMMITS))
    parser.add_argument("--out", type=Path, default=Path("rolling-report"))
    parser.add_argument("--stall", type=float, default=5.0,
                        help="an old server's request slower than this while the new one "
                             "starts is a finding (seconds)")
    parser.add_argument("--seed-episodes", type=int, default=3000, metavar="N",
                        help="episodes the old version writes before the new one starts "
                             "(a third in other scripts: rows its start migrates)")
    parser.add_argument("--seed-cells", type=int, default=600, metavar="N",
                        help="AMP cells the old version writes before the new one starts "
                             "(a third in other scripts)")
    parser.add_argument("--keep", action="store_true", help="keep the homes (printed)")
    args = parser.parse_args(argv)
    args.out = args.out.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    findings: list[dict[str, str]] = []
    summary: list[dict[str, Any]] = []
    with ExitStack() as stack:
        pg = stack.enter_context(postgres_factory())
        base = Path(tempfile.mkdtemp(prefix="rolling-"))
        s3 = stack.enter_context(moto(base / "moto"))
        model = ScriptedModel().start()
        stack.callback(model.stop)
        model.script([], default={"reply": "{}"})
        for commit in args.commits.split(","):
            old = stack.enter_context(worktree(commit))
            home = base / commit[:7]
            db = pg.new_database("rolling")
            env = {**os.environ, **QUIET, **TIMERS, **postgres_env(db, home / "unused"),
                   **s3.env(s3.new_bucket("rolling")), **model.env(),
                   "AMPUP_MEMORY_HOME": str(home / "home")}
            audit = Audit(commit, [], {"paths": {}}, {}, 1)
            fleet = Fleet(commit, home, env, db, old / "src", audit)
            t = time.monotonic()
            try:
                fleet_run(fleet, args.stall, args.seed_episodes, args.seed_cells)
            except Skip as exc:
                fleet.find("set-up failed", str(exc))
            except Exception as exc:  # a finding, and the next commit runs
                fleet.find("run crashed", f"{type(exc).__name__}: {exc}")
            finally:
                for name in list(fleet.servers):
                    stop(fleet, name)
            fleet.report["seconds"] = round(time.monotonic() - t, 1)
            findings += fleet.findings
            summary.append({"commit": commit, **fleet.report,
                            "findings": len(fleet.findings)})
            (args.out / f"report-{commit[:7]}.json").write_text(
                json.dumps(summary[-1], indent=1, default=str, ensure_ascii=False))
            print(json.dumps({k: v for k, v in summary[-1].items()
                              if k not in ("both serve", "late old beside new", "all new")},
                             default=str, ensure_ascii=False)[:3000], flush=True)
        if args.keep:
            print(f"kept {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)
    (args.out / "findings.json").write_text(json.dumps(findings, indent=1, ensure_ascii=False))
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1, default=str,
                                                      ensure_ascii=False))
    for f in findings:
        print(f"- [{f['config']}] {f['kind']}: {f['detail'][:400]}")
    print(f"{len(findings)} findings, {time.monotonic() - began:.0f} s ({args.commits})")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
