"""Audit what a long-running server accumulates under sustained use: does any resource grow
without bound? Real servers over real HTTP, on SQLite (the default home) and PostgreSQL
(an embedded one, `tests/pg.py`), API keys off and on.

    PYTHONPATH=src:. python tools/leak_audit.py [--backends sqlite,postgres] [--keys off,on]
                                               [--workloads routes,reads,...] [--n 40]
                                               [--out DIR]

The server runs under a small probe (``--probe-serve``, this file): a thread inside the
server process that answers, on request, how many asyncio tasks the event loop holds, the
MCP session manager's open sessions, the live SQLite and psycopg connection objects and
the counts of the most common object types (docs/testing.md, "The leak audit").

Each workload runs ``--n`` units after a warm-up of a third of that, then ``--n`` more;
every resource is sampled at the start (after the warm-up), after N and after 2N:

- process: RSS, open file descriptors (by what they point at), threads, asyncio tasks,
  MCP sessions, SQLite/psycopg connection objects;
- PostgreSQL: connections of the server's database (``pg_stat_activity``);
- home: files and bytes, WAL bytes, temp files, Iceberg metadata and data files and the
  snapshots the tables' current metadata holds, keyword space files;
- rows of every table (SQLite files in the home, the PostgreSQL database).

Workloads: ``routes`` (every route family, AMP cells CRUD and search, writes included),
``reads`` (reads only: rows and files must stay flat too), ``churn`` (distinct scopes,
users, branches, workspaces and AMP owners made and deleted), ``mcp`` (streamable HTTP
sessions opened and never closed, calls dropped mid-way, GET streams abandoned),
``abandon`` (clients cut mid-request and mid-response), ``passes`` (lifecycle passes and
the maintenance timer, repeated), ``idle`` (bursts of concurrent requests with pauses
over the 10 s a worker thread idles before it exits).

A resource grows when it grew in the second half by more than its tolerance and by at
least half of what it grew in the first: what rises and then settles (a cache filling up
to its bound) is flat. What a workload writes by design (rows of a write workload, the
files holding them) is reported, not judged. Findings go to ``DIR/findings.json``, every
sample to ``DIR/samples.json``, a table per configuration to ``DIR/report.md``; the exit
code is 1 when there are any.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import socket
import sqlite3
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

PROBE_FILE = "leak-probe"  # in the home: DIR/leak-probe.req → DIR/leak-probe.json
# The one error the probe itself can cause in the server (see `_probe_answer`).
PROBE_HAZARD = "SystemError: Objects/tupleobject.c"


# ---------------------------------------------------------------- the probe (in the server)


def _owners(type_name: str, samples: int = 3, depth: int = 16) -> list[str]:
    """For a few live objects of the type (module.qualname), the chain of what holds each:
    where the type's objects accumulate. Heuristic: the first referrer that is neither a
    frame nor this search's own lists, a dict named by the object whose ``__dict__`` it is."""
    import gc
    import types as pytypes

    mine: set[int] = set()  # the lists this search makes refer to what it looks at
    everything = gc.get_objects()
    mine.add(id(everything))
    found = []
    for o in everything:
        if f"{type(o).__module__}.{type(o).__qualname__}" == type_name:
            found.append(o)
    del everything
    mine.add(id(found))

    def holders_of(obj: Any) -> list[Any]:
        raw = gc.get_referrers(obj)
        mine.add(id(raw))
        out = []
        for r in raw:
            if id(r) not in mine and not isinstance(r, pytypes.FrameType):
                out.append(r)
        mine.add(id(out))
        return out

    chains = []
    # From the middle of the list: old enough not to be some request's passing object.
    for obj in [found[len(found) * (k + 1) // (samples + 1)] for k in range(samples)
                if found]:
        chain: list[str] = []
        current: Any = obj
        for _ in range(depth):
            mine.add(id(current))
            holders = holders_of(current)
            if not holders:
                break
            holder = holders[0]
            if isinstance(holder, dict):
                owner = None
                for o in holders_of(holder):
                    if getattr(o, "__dict__", None) is holder:
                        owner = o
                        break
                key = next((k for k, v in holder.items() if v is current), "?")
                if isinstance(owner, pytypes.ModuleType):
                    chain.append(f"module {owner.__name__}.{key}")
                    break
                if owner is not None:
                    chain.append(f"{type(owner).__qualname__}.{key}")
                    mine.add(id(holder))
                    current = owner
                    continue
                chain.append(f"dict[{len(holder)}][{str(key)[:40]}]")
            else:
                size = ""
                if isinstance(holder, (list, tuple, set, frozenset)):
                    size = f"[{len(holder)}]"
                chain.append(f"{type(holder).__module__}.{type(holder).__qualname__}{size}")
            current = holder
        chains.append(" <- ".join(chain))
    return chains


def _probe_answer(loops: list[Any], types: bool, tasks_only: bool = False) -> dict[str, Any]:
    """What the audit asked. Walking the heap (`gc.get_objects`) from this thread can take
    a reference to a tuple another thread is still building, whose resize then fails:
    ``SystemError: Objects/tupleobject.c:927: bad argument to internal function`` in that
    thread (CPython 3.11; seen in pyiceberg's ``itertools.chain(*executor.map(...))``).
    So only the samples walk it, and such a traceback in the log is the probe's (`PROBE_HAZARD`)."""
    import asyncio
    import gc

    answer: dict[str, Any] = {"tasks": None, "task_kinds": {}, "mcp_sessions": None}
    for loop in loops:
        if loop.is_closed() or not loop.is_running():
            continue
        for _ in range(20):
            try:
                tasks = list(asyncio.all_tasks(loop))
                break
            except RuntimeError:  # the set changed while it was copied: again
                continue
        else:
            continue
        answer["tasks"] = (answer["tasks"] or 0) + len(tasks)
        kinds: Counter[str] = Counter()
        for t in tasks:
            coro = t.get_coro()
            kinds[getattr(coro, "__qualname__", type(coro).__name__)] += 1
        answer["task_kinds"] = dict(kinds.most_common(12))
    if tasks_only:
        return answer
    if types:
        gc.collect()  # what only waits for the cycle collector is no growth
    counts: Counter[str] = Counter()
    sessions = 0
    found_manager = False
    for obj in gc.get_objects():
        kind = type(obj)
        name = f"{kind.__module__}.{kind.__qualname__}"
        counts[name] += 1
        if kind.__name__ == "StreamableHTTPSessionManager":
            found_manager = True
            sessions += len(getattr(obj, "_server_instances", {}))
    if found_manager:
        answer["mcp_sessions"] = sessions
    answer["sqlite_connections"] = sum(
        n for k, n in counts.items() if k.startswith("sqlite3.") and k.endswith("Connection")
        or k.endswith(".SpaceConnection"))
    answer["psycopg_connections"] = sum(
        n for k, n in counts.items() if k.startswith("psycopg.") and k.endswith("Connection"))
    answer["threads"] = sorted(Counter(
        t.name.rstrip("0123456789-_ ") for t in threading.enumerate()).items())
    if types:
        answer["types"] = dict(counts.most_common(300))
    return answer


def probe_serve(argv: list[str]) -> None:
    """Run ``ampup-memory serve ARGS`` with the probe's thread beside it."""
    import asyncio
    import asyncio.base_events

    loops: list[Any] = []
    made = asyncio.base_events.BaseEventLoop.__init__

    def remember(self: Any, *args: Any, **kwargs: Any) -> None:
        made(self, *args, **kwargs)
        loops.append(self)

    asyncio.base_events.BaseEventLoop.__init__ = remember  # type: ignore[method-assign]
    home = Path(os.environ["AMPUP_MEMORY_HOME"])
    req, out = home / f"{PROBE_FILE}.req", home / f"{PROBE_FILE}.json"

    def answer_requests() -> None:
        while True:
            time.sleep(0.1)
            try:
                asked = req.read_text()
            except OSError:
                continue
            req.unlink(missing_ok=True)
            try:
                answer = _probe_answer(loops, types="types" in asked,
                                       tasks_only="tasks" in asked.split())
                if " owners " in asked:
                    answer["owners"] = {name: _owners(name)
                                        for name in asked.split(" owners ")[1].split(",")}
            except Exception as exc:  # the audit reports it; the server goes on
                answer = {"error": f"{type(exc).__name__}: {exc}"}
            answer["asked"] = asked
            tmp = out.with_suffix(".tmp")
            tmp.write_text(json.dumps(answer))
            tmp.replace(out)

    threading.Thread(target=answer_requests, name="leak-probe", daemon=True).start()
    from ampup_memory.cli import main

    sys.argv = ["ampup-memory", *argv]
    main()


if __name__ == "__main__" and len(sys.argv) > 1 and sys.argv[1] == "--probe-serve":
    probe_serve(sys.argv[2:])
    sys.exit(0)

# ---------------------------------------------------------------- the audit (outside)

sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
from tests.pg import PostgresFactory, postgres_factory  # noqa: E402
from tests.server_process import ServerProcess, free_port, plain_client  # noqa: E402

ADMIN_TOKEN = "leak-admin-token"
USER, AGENT = "leak.user", "leak_agent"
OTHER, OTHER_AGENT = "leak.other", "leak_other"
ENV = {"AMP_ADMIN_TOKEN": ADMIN_TOKEN, "AMP_EMBEDDING_PROVIDER": "hash",
       "AMP_LIFECYCLE_ENABLED": "false", "AMP_SCORING_PATCH_LIMIT": "0",
       # The timers run, often: a server that runs for weeks runs them thousands of times.
       "AMPUP_MEMORY_MAINTENANCE_INTERVAL_SECONDS": "5",
       "AMPUP_MEMORY_WORKSPACE_GC_INTERVAL_SECONDS": "3",
       "AMPUP_MEMORY_ORPHAN_GRACE_SECONDS": "0"}
MCP_IDLE = 20.0  # a handshake-era session would be gone this long after its last request
MCP_ACCEPT = "application/json, text/event-stream"
MCP_VERSION = "2025-06-18"

# Per resource: (tolerance of growth in the second half, unit). Under it, flat.
TOLERANCE: dict[str, tuple[float, str]] = {
    "rss_mb": (6.0, "MB"), "fds": (3, ""), "threads": (3, ""), "tasks": (5, ""),
    "mcp_sessions": (2, ""), "sqlite_connections": (3, ""), "psycopg_connections": (3, ""),
    "pg_connections": (2, ""), "home_files": (5, ""), "home_mb": (2.0, "MB"),
    "wal_mb": (4.0, "MB"), "temp_files": (1, ""), "iceberg_metadata_files": (5, ""),
    "iceberg_data_files": (5, ""), "iceberg_snapshots": (5, ""), "keyword_spaces": (2, ""),
}
PROCESS = ("rss_mb", "fds", "threads", "tasks", "mcp_sessions", "sqlite_connections",
           "psycopg_connections", "pg_connections")
HOME = ("home_files", "home_mb", "wal_mb", "temp_files", "iceberg_metadata_files",
        "iceberg_data_files", "iceberg_snapshots", "keyword_spaces")


@dataclass
class Caller:
    user: str
    agent: str
    headers: dict[str, str]


@dataclass
class Server:
    proc: ServerProcess
    backend: str
    keys: bool
    callers: dict[str, Caller]
    db_url: str | None = None

    @property
    def pid(self) -> int:
        assert self.proc.proc is not None
        return self.proc.proc.pid

    @property
    def url(self) -> str:
        return self.proc.url

    @property
    def home(self) -> Path:
        return self.proc.home


@dataclass
class Finding:
    config: str
    workload: str
    resource: str
    values: list[Any]
    detail: str


@dataclass
class Result:
    config: str
    workload: str
    requests: list[int] = field(default_factory=list)
    samples: list[dict[str, Any]] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0
    after_idle: dict[str, Any] | None = None
    # Per phase (0 warm-up, 1 and 2 the halves), per route: seconds each request took.
    latency: list[dict[str, list[float]]] = field(default_factory=lambda: [{}, {}, {}])


# ---------------------------------------------------------------- sampling


def _proc_status(pid: int) -> dict[str, str]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        out[key] = value.strip()
    return out


def _fd_kinds(pid: int, home: Path) -> Counter[str]:
    kinds: Counter[str] = Counter()
    folder = Path(f"/proc/{pid}/fd")
    for fd in os.listdir(folder):
        try:
            target = os.readlink(folder / fd)
        except OSError:
            continue
        if target.startswith(("socket:", "pipe:")):
            kinds[target.split(":")[0]] += 1
        elif target.startswith("anon_inode:"):
            kinds[target] += 1
        elif target.startswith(str(home)):
            rel = Path(target).relative_to(home)
            kinds[rel.parts[0] if len(rel.parts) > 1 else rel.name] += 1
        else:
            kinds["other"] += 1
    return kinds


def probe(server: Server, types: bool = False, timeout: float = 60.0,
          owners: list[str] | None = None, tasks_only: bool = False) -> dict[str, Any]:
    """Ask the probe in the server; ``owners``: type names whose holders to trace."""
    req, out = server.home / f"{PROBE_FILE}.req", server.home / f"{PROBE_FILE}.json"
    token = uuid.uuid4().hex + (" types" if types else "") + (" tasks" if tasks_only else "") + (
        f" owners {','.join(owners)}" if owners else "")
    out.unlink(missing_ok=True)
    req.write_text(token)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            answer: dict[str, Any] = json.loads(out.read_text())
            if answer.get("asked") == token:
                return answer
        except (OSError, ValueError):
            pass
        time.sleep(0.1)
    return {"error": "the probe did not answer"}


def _iceberg(home: Path) -> tuple[int, int, int]:
    """(metadata files, data files, snapshots in the current metadata of each table)."""
    meta = data = snaps = 0
    warehouse = home / "warehouse"
    if not warehouse.is_dir():
        return 0, 0, 0
    newest: dict[Path, Path] = {}
    for path in warehouse.rglob("*"):
        if not path.is_file():
            continue
        if path.parent.name == "metadata":
            meta += 1
            if path.name.endswith(".metadata.json"):
                table = path.parent.parent
                if table not in newest or path.stat().st_mtime > newest[table].stat().st_mtime:
                    newest[table] = path
        elif path.suffix == ".parquet":
            data += 1
    for path in newest.values():
        try:
            snaps += len(json.loads(path.read_text()).get("snapshots") or [])
        except (OSError, ValueError):
            pass
    return meta, data, snaps


def _sqlite_rows(home: Path) -> dict[str, int]:
    rows: dict[str, int] = {}
    for path in sorted(home.glob("*.db")):
        try:
            conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
        except sqlite3.Error:
            continue
        try:
            names = [r[0] for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' "
                "AND name NOT LIKE 'sqlite_%'")]
            for name in names:
                try:
                    (count,) = conn.execute(f'SELECT count(*) FROM "{name}"').fetchone()
                except sqlite3.Error:
                    continue
                rows[f"{path.name}:{name}"] = int(count)
        finally:
            conn.close()
    return rows


def _pg(url: str) -> tuple[int, dict[str, int]]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        (conns,) = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid()").fetchone() or (0,)
        tables = [r[0] for r in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public'")]
        rows = {}
        for name in tables:
            (count,) = conn.execute(f'SELECT count(*) FROM "{name}"').fetchone() or (0,)
            rows[f"pg:{name}"] = int(count)
    return int(conns), rows


def sample(server: Server, label: str, types: bool = False) -> dict[str, Any]:
    found = probe(server, types=types)  # first: its collection may lower the RSS
    status = _proc_status(server.pid)
    fds = _fd_kinds(server.pid, server.home)
    files = [p for p in server.home.rglob("*") if p.is_file()]
    meta, data, snaps = _iceberg(server.home)
    s: dict[str, Any] = {
        "label": label, "time": time.time(),
        "rss_mb": round(int(status["VmRSS"].split()[0]) / 1024, 1),
        "fds": sum(fds.values()), "fd_kinds": dict(fds.most_common()),
        "threads": int(status["Threads"]),
        "tasks": found.get("tasks"), "task_kinds": found.get("task_kinds"),
        "mcp_sessions": found.get("mcp_sessions"),
        "sqlite_connections": found.get("sqlite_connections"),
        "psycopg_connections": found.get("psycopg_connections"),
        "thread_names": found.get("threads"),
        "home_files": len(files),
        "home_mb": round(sum(_size(p) for p in files) / 2**20, 2),
        "wal_mb": round(sum(_size(p) for p in files if p.name.endswith("-wal")) / 2**20, 2),
        "temp_files": sum(1 for p in files if _temporary(p, server.home)),
        "iceberg_metadata_files": meta, "iceberg_data_files": data,
        "iceberg_snapshots": snaps,
        "keyword_spaces": sum(1 for p in files if p.suffix == ".kw" or "keywords" in p.parts
                              and not p.name.endswith(("-wal", "-shm"))),
        "rows": _sqlite_rows(server.home),
        "file_kinds": dict(Counter(_pattern(p, server.home) for p in files)),
        "pg_connections": None,
    }
    if server.db_url:
        s["pg_connections"], pg_rows = _pg(server.db_url)
        s["rows"].update(pg_rows)
    if "types" in found:
        s["types"] = found["types"]
    if "error" in found:
        s["probe_error"] = found["error"]
    return s


def _size(p: Path) -> int:
    try:
        return p.stat().st_size
    except OSError:
        return 0


def _pattern(p: Path, home: Path) -> str:
    """A file's path in the home with its ids and numbers as ``*``: what kind of file."""
    rel = str(p.relative_to(home))
    return re.sub(r"[0-9a-f]{8}-[0-9a-f-]{27}|[0-9A-Za-z_-]*\d[0-9A-Za-z_-]*", "*", rel)


def _temporary(p: Path, home: Path) -> bool:
    name = p.name.lower()
    return ("tmp" in name or "temp" in name or name.endswith((".partial", ".part"))
            or any(part in ("tmp", "temp") for part in p.relative_to(home).parts[:-1]))


# ---------------------------------------------------------------- servers


def create_key(env: dict[str, str], agent: str, user: str, admin: bool = False) -> str:
    args = ["keys", "create", "--agent", agent, "--user", user, *(["--admin"] if admin else [])]
    done = subprocess.run([sys.executable, "-m", "ampup_memory.cli", *args], env=env,
                          capture_output=True, text=True, timeout=120, check=True)
    return done.stdout.strip().splitlines()[-1]


@contextmanager
def serving(backend: str, keys: bool, home: Path, pg: PostgresFactory | None,
            extra_env: dict[str, str] | None = None) -> Iterator[Server]:
    env = {**os.environ, **ENV, **(extra_env or {}), "AMPUP_MEMORY_HOME": str(home),
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    db_url = None
    if backend == "postgres":
        assert pg is not None
        db_url = pg.new_database("leak")
        env.update({"AMPUP_MEMORY_CATALOG_URI": db_url, "AMPUP_MEMORY_INDEX_URI": db_url,
                    "AMP_STORE_URI": db_url})
    callers: dict[str, Caller] = {}
    for name, user, agent in (("me", USER, AGENT), ("other", OTHER, OTHER_AGENT)):
        headers = {"X-AMP-Agent-ID": agent}
        if keys:
            headers["X-AMP-API-Key"] = create_key(env, agent, user, admin=name == "me")
        else:
            headers["X-AmpUp-User"] = user
        callers[name] = Caller(user, agent, headers)
    if keys:
        env["AMP_REQUIRE_KEYS"] = "1"
    port = free_port()
    command = [sys.executable, str(Path(__file__).resolve()), "--probe-serve",
               "serve", "--port", str(port)]
    proc = ServerProcess(home, env=env, port=port, command=command)
    proc.start(timeout=180)
    try:
        yield Server(proc, backend, keys, callers, db_url)
    finally:
        proc.stop()


# ---------------------------------------------------------------- workloads


class Load:
    """What a workload sends: counts requests and the answers that break the rules (a 5xx,
    a traceback, a status the workload did not expect)."""

    def __init__(self, server: Server, result: Result) -> None:
        self.server = server
        self.result = result
        self.sent = 0
        self.lock = threading.Lock()
        me = server.callers["me"]
        self.me = me
        self.admin = {**me.headers, "X-AMP-Admin-Token": ADMIN_TOKEN}
        self.http = plain_client(base_url=server.url, timeout=120, headers=self.admin)
        self.scope = f"l{uuid.uuid4().hex[:8]}/team_1"
        self.seeded: dict[str, Any] = {}
        self.phase = 0

    def close(self) -> None:
        self.http.close()

    def note(self, what: str) -> None:
        with self.lock:
            self.result.errors[what] += 1

    def req(self, method: str, path: str, *, ok: tuple[int, ...] = (200, 201, 204),
            http: httpx.Client | None = None, **kw: Any) -> Any:
        with self.lock:
            self.sent += 1
        began = time.monotonic()
        try:
            r = (http or self.http).request(method, path, **kw)
            took = time.monotonic() - began
            with self.lock:
                self.result.latency[self.phase].setdefault(
                    f"{method} {_shape(path)}", []).append(took)
        except httpx.HTTPError as exc:
            self.note(f"{method} {_shape(path)}: {type(exc).__name__}")
            return None
        if r.status_code >= 500 or "Traceback" in r.text or r.status_code not in ok:
            self.note(f"{method} {_shape(path)}: {r.status_code} {_code(r)}")
            return None
        if r.status_code == 204 or not r.content:
            return {}
        try:
            return r.json()
        except ValueError:
            return {}


def _code(r: httpx.Response) -> str:
    """The error's code and the start of its message, without ids: one key per kind."""
    try:
        error = r.json()["error"]
        message = re.sub(r"[0-9A-Za-z_:-]*[0-9][0-9A-Za-z_:-]*", "*", error["message"])
        return f"{error['code']}: {message[:120]}"
    except (ValueError, KeyError, TypeError):
        return r.text[:120]


def _shape(path: str) -> str:
    parts = path.split("?")[0].split("/")
    return "/".join(p if len(p) < 20 else "{id}" for p in parts)


def _forget_cell(load: Load, cell: str, **kw: Any) -> None:
    """Archive, then delete (only an archived cell may be deleted)."""
    load.req("PATCH", f"/amp/v1/memories/{cell}", json={"lifecycle": {"status": "archived"}},
             **kw)
    load.req("DELETE", f"/amp/v1/memories/{cell}", **kw)


def _cell(load: Load, text: str) -> dict[str, Any]:
    return {"type": "semantic", "content": {"text": text},
            "identity": {"owner_id": load.me.agent, "owner_type": "agent"}}


def seed(load: Load) -> None:
    """A scope with a little of everything, for the reads."""
    scope = load.scope
    batch = load.req("POST", "/episodes/batch", json={"scope": scope, "episodes": [
        {"source": f"doc:plan{i}", "body": f"Acme renewed in March, note {i}.\n\nBudget {i}k.",
         "acl": ["*"], "about": ["acme"], "document": f"plan{i}"} for i in range(20)]})
    episodes = [e["id"] for e in batch["episodes"]]
    load.req("POST", "/facts", json={
        "scope": scope, "entity": "acme", "predicate": "plan", "value": "Pro",
        "quote": "Acme renewed", "cites": [{"episode": episodes[0], "unit": 1}]})
    load.req("POST", "/branches", json={"scope": scope, "name": "trial"})
    cells = [load.req("POST", "/amp/v1/memories", json=_cell(load, f"Acme fact {i}"))["id"]
             for i in range(10)]
    run = load.req("POST", "/runs", json={"scope": scope, "task": "renew acme"})
    ses = load.req("POST", "/sessions/start", json={"scope": scope, "task": "renew"})
    load.seeded = {"episodes": episodes, "cells": cells, "run": run["id"],
                   "session": ses["id"]}


def unit_reads(load: Load, i: int) -> None:
    s, seeded = load.scope, load.seeded
    ep = seeded["episodes"][i % len(seeded["episodes"])]
    cell = seeded["cells"][i % len(seeded["cells"])]
    q = {"scope": s}
    load.req("GET", f"/episodes/{ep}", params=q)
    load.req("GET", "/episodes", params={**q, "limit": 5})
    load.req("POST", "/document", json={"scope": s, "document": f"plan{i % 20}"})
    load.req("GET", "/facts", params={**q, "entity": "acme"})
    load.req("GET", "/facts", params={**q, "entity": "acme", "history": "true"})
    load.req("POST", "/search", json={"scope": s, "query": f"acme budget {i}"})
    load.req("POST", "/query", json={"scope": s, "find": "passages", "query": f"march {i}"})
    load.req("POST", "/query", json={"scope": s, "find": "facts", "entity": "acme"})
    load.req("GET", "/entities", params=q)
    load.req("GET", "/branches", params=q)
    load.req("GET", "/ledger", params={**q, "limit": 5})
    load.req("GET", "/ledger", params={**q, "branch": "trial"})
    load.req("GET", "/scopes")
    load.req("GET", "/schemas")
    load.req("GET", f"/schemas/{s.split('/')[0]}/team_1")
    load.req("GET", "/episode-types")
    load.req("GET", "/runs", params=q)
    load.req("GET", f"/runs/{seeded['run']}")
    load.req("GET", "/sessions", params=q)
    load.req("GET", f"/sessions/{seeded['session']}")
    load.req("GET", "/notes", params=q)
    load.req("GET", "/situations", params=q)
    load.req("GET", "/procedures", params=q)
    load.req("GET", "/procedures/sources", params=q)
    load.req("GET", "/set-aside", params=q)
    load.req("GET", "/extraction/status", params=q)
    load.req("GET", "/workspaces")
    load.req("GET", f"/principals/{load.me.user}")
    load.req("GET", f"/amp/v1/memories/{cell}")
    load.req("GET", "/amp/v1/memories", params={"limit": 5})
    load.req("GET", "/amp/v1/memories/query", params={"limit": 5, "type": "semantic"})
    load.req("POST", "/amp/v1/memories/search", json={"query": f"acme fact {i}", "limit": 5})
    load.req("GET", "/amp-cells", params={"limit": 5})
    load.req("GET", "/amp-lifecycle", params={"limit": 5})
    load.req("GET", "/status")
    load.req("GET", "/amp/v1/health")
    load.req("GET", "/amp/v1/spec")


def unit_routes(load: Load, i: int) -> None:
    """Writes of every route family (and their reads), all in the one seeded scope."""
    s = load.scope
    tag = f"{i}-{uuid.uuid4().hex[:6]}"
    ep = load.req("POST", "/episodes", json={
        "scope": s, "source": f"slack:{tag}", "acl": ["*"], "about": ["acme"],
        "body": f"Acme asked about invoice {tag}. Dana will follow up."})
    if ep:
        load.req("GET", f"/episodes/{ep['id']}", params={"scope": s})
        load.req("PUT", f"/episodes/{ep['id']}/acl", json={"scope": s, "acl": ["*"]})
        load.req("POST", "/facts", json={
            "scope": s, "entity": "acme", "predicate": "contact", "value": f"dana {tag}",
            "quote": "Dana will follow up", "cites": [{"episode": ep["id"], "unit": 1}]})
    load.req("POST", "/search", json={"scope": s, "query": f"invoice {tag}"})
    load.req("POST", "/query", json={"scope": s, "find": "passages", "query": "invoice"})
    load.req("POST", "/query", json={"scope": s, "find": "facts", "entity": "acme"})
    load.req("GET", "/facts", params={"scope": s, "entity": "acme"})
    load.req("POST", "/episodes", json={
        "scope": s, "branch": "trial", "source": f"doc:{tag}", "acl": ["*"],
        "body": f"On the trial branch {tag}."})
    load.req("POST", "/merge", json={"scope": s, "from": "trial", "dry_run": True})
    pin = load.req("POST", "/pin", json={"scope": s, "ttl": "1h"})
    if pin:
        load.req("GET", f"/pin/{pin['id']}")
        load.req("POST", f"/pin/{pin['id']}/renew", json={"ttl": "1h"})
        load.req("DELETE", f"/pin/{pin['id']}")
    snap = load.req("POST", "/snapshots", json={"scopes": [s]})
    if snap:
        load.req("GET", f"/snapshots/{snap['id']}")
        load.req("DELETE", f"/snapshots/{snap['id']}")
    run = load.req("POST", "/runs", json={"scope": s, "task": f"renew acme {i % 5}",
                                          "outcome": "done"})
    if run:
        load.req("POST", "/runs/reward", json={"run": run["id"], "reward": 1.0,
                                               "reason": "worked"})
        load.req("GET", f"/runs/{run['id']}")
    ses = load.req("POST", "/sessions/start", json={"scope": s, "task": f"renew {i % 5}"})
    if ses:
        load.req("POST", "/advice", json={"scope": s, "task": f"renew {i % 5}",
                                          "session": ses["id"]})
        load.req("POST", "/sessions/end", json={"session": ses["id"], "transcript": "done it",
                                                "outcome": "done", "reward": 0.5})
    load.req("GET", "/notes", params={"scope": s})
    cell = load.req("POST", "/amp/v1/memories", json=_cell(load, f"Acme likes {tag}"))
    if cell:
        load.req("GET", f"/amp/v1/memories/{cell['id']}")
        load.req("PATCH", f"/amp/v1/memories/{cell['id']}",
                 json={"content": {"text": f"Acme loves {tag}"}})
        load.req("POST", "/amp/v1/memories/search", json={"query": f"acme {tag}", "limit": 5})
        _forget_cell(load, cell["id"])
    load.req("GET", "/amp/v1/memories", params={"limit": 5})
    if i % 10 == 0:
        load.req("PUT", f"/schemas/{s.split('/')[0]}/team_1", json={"builtin": "crm"},
                 ok=(200, 201, 404, 422))
        load.req("PUT", "/procedures/sources", json={"scope": s, "documents": ["plan0"]},
                 ok=(200, 201, 404, 422))


def unit_churn(load: Load, i: int) -> None:
    """Distinct scopes, users, branches, workspaces and AMP owners, made and deleted."""
    tag = uuid.uuid4().hex[:10]
    scope = f"c{tag}/team_{i % 7}"
    ep = load.req("POST", "/episodes", json={"scope": scope, "source": "doc:a", "acl": ["*"],
                                             "body": f"Scope {tag} begins."})
    load.req("POST", "/search", json={"scope": scope, "query": "begins"})
    load.req("GET", "/entities", params={"scope": scope})
    load.req("POST", "/branches", json={"scope": scope, "name": f"b{tag}"})
    load.req("POST", "/episodes", json={"scope": scope, "branch": f"b{tag}", "source": "doc:b",
                                        "acl": ["*"], "body": f"Branch {tag} writes."})
    load.req("POST", "/search", json={"scope": scope, "branch": f"b{tag}", "query": "writes"})
    load.req("DELETE", f"/branches/b{tag}", params={"scope": scope})
    if ep:
        load.req("POST", "/facts", json={"scope": scope, "entity": f"e{tag}",
                                         "predicate": "begins", "value": "yes",
                                         "quote": "begins", "cites": [{"episode": ep["id"],
                                                                       "unit": 1}]})
    ws = load.req("POST", "/workspaces", json={"name": f"w{tag}", "ttl": "1h"})
    if ws:
        load.req("POST", "/episodes", json={"scope": f"{ws['id']}/team_1", "source": "doc:w",
                                            "acl": ["*"], "body": f"Workspace {tag}."})
        load.req("POST", "/search", json={"scope": f"{ws['id']}/team_1", "query": "workspace"})
        load.req("DELETE", f"/workspaces/{ws['id']}")
    if not load.server.keys:  # with keys on a user is the key's: one user only
        user = f"u{tag}"
        h = {"X-AMP-Agent-ID": f"a{tag}", "X-AmpUp-User": user,
             "X-AMP-Admin-Token": ADMIN_TOKEN}
        load.req("PUT", f"/principals/{user}", json={"groups": [f"g{i % 13}"]}, headers=h)
        load.req("GET", "/scopes", headers=h)
        load.req("POST", "/search", json={"scope": scope, "query": "begins"}, headers=h)
        c = load.req("POST", "/amp/v1/memories", headers=h, json={
            "type": "semantic", "content": {"text": f"owner {tag}"},
            "identity": {"owner_id": f"a{tag}", "owner_type": "agent"}})
        load.req("POST", "/amp/v1/memories/search", json={"query": "owner", "limit": 3},
                 headers=h)
        if c:
            _forget_cell(load, c["id"], headers=h)
    else:
        c = load.req("POST", "/amp/v1/memories", json=_cell(load, f"owner {tag}"))
        if c:
            _forget_cell(load, c["id"])


def unit_passes(load: Load, i: int) -> None:
    """A few cells, then a lifecycle pass (now and a what-if `now` far ahead), a purge."""
    ids = []
    for k in range(3):
        c = load.req("POST", "/amp/v1/memories", json=_cell(load, f"pass {i} {k}"))
        if c:
            ids.append(c["id"])
    if ids:
        _forget_cell(load, ids[0])
        load.req("POST", "/amp/v1/lifecycle/purge", json={"id": ids[0]}, ok=(200, 204, 404, 409))
    load.req("POST", "/amp/v1/lifecycle/run", json={}, ok=(200, 503))
    load.req("POST", "/amp/v1/lifecycle/run", json={"dry_run": True,
                                                    "now": "2031-01-01T00:00:00Z"},
             ok=(200, 503))
    load.req("GET", "/amp-lifecycle", params={"limit": 5})
    time.sleep(0.5)  # the maintenance timer (every 5 s) gets its turns


# -- MCP over streamable HTTP, by hand: sessions kept open, calls cut, streams abandoned


def _mcp_headers(load: Load, session: str | None = None) -> dict[str, str]:
    h = {**load.me.headers, "Accept": MCP_ACCEPT, "Content-Type": "application/json",
         "MCP-Protocol-Version": MCP_VERSION}
    if session:
        h["Mcp-Session-Id"] = session
    return h


def _mcp_open(load: Load, http: httpx.Client) -> str | None:
    load.sent += 2
    r = http.post("/mcp", headers=_mcp_headers(load), json={
        "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": MCP_VERSION, "capabilities": {},
            "clientInfo": {"name": "leak-audit", "version": "1"}}})
    session = r.headers.get("mcp-session-id")
    if r.status_code != 200 or not session:
        load.note(f"MCP initialize: {r.status_code} {r.text[:160]}")
        return None
    r = http.post("/mcp", headers=_mcp_headers(load, session),
                  json={"jsonrpc": "2.0", "method": "notifications/initialized"})
    if r.status_code >= 400:
        load.note(f"MCP initialized: {r.status_code} {r.text[:160]}")
    return session


def _raw(load: Load, request: bytes, read: int = 0, pause: float = 0.0) -> None:
    """Send ``request`` on a fresh socket, read at most ``read`` bytes, and drop it."""
    load.sent += 1
    host, port = "127.0.0.1", load.server.proc.port
    try:
        with socket.create_connection((host, port), timeout=30) as conn:
            conn.sendall(request)
            if pause:
                time.sleep(pause)
            if read:
                conn.recv(read)
            # An RST, not a FIN: the client is gone, as a killed one would be.
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError as exc:
        load.note(f"raw socket: {type(exc).__name__}")


def _http_bytes(load: Load, method: str, path: str, body: Any = None,
                headers: dict[str, str] | None = None, cut: int | None = None) -> bytes:
    data = b"" if body is None else json.dumps(body).encode()
    h = {"Host": f"127.0.0.1:{load.server.proc.port}", **load.admin, **(headers or {})}
    if body is not None:
        h.setdefault("Content-Type", "application/json")
        h["Content-Length"] = str(len(data))
    head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items())
    raw = head.encode() + b"\r\n" + data
    return raw if cut is None else raw[:cut]


def unit_mcp(load: Load, i: int) -> None:
    with plain_client(base_url=load.server.url, timeout=60) as http:
        session = _mcp_open(load, http)  # never closed: the client just goes away
        if session is None:
            return
        load.sent += 1
        r = http.post("/mcp", headers=_mcp_headers(load, session), json={
            "jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
                "name": "search_memory", "arguments": {"scope": load.scope,
                                                       "query": f"acme {i}"}}})
        if r.status_code != 200 or '"isError":true' in r.text.replace(" ", ""):
            load.note(f"MCP tools/call: {r.status_code} {r.text[:160]}")
        if i % 2 == 0:  # a second session whose call is cut off before its answer
            other = _mcp_open(load, http)
            if other:
                _raw(load, _http_bytes(load, "POST", "/mcp", {
                    "jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
                        "name": "search_memory", "arguments": {"scope": load.scope,
                                                               "query": "march"}}},
                    headers=_mcp_headers(load, other)))
        if i % 3 == 0:  # the standalone GET stream, opened and abandoned
            _raw(load, _http_bytes(load, "GET", "/mcp", headers={
                **_mcp_headers(load, session), "Accept": "text/event-stream"}), read=64)
        if i % 5 == 0:  # and one session closed as the protocol says
            load.req("DELETE", "/mcp", http=http, headers=_mcp_headers(load, session),
                     ok=(200, 204))


def unit_abandon(load: Load, i: int) -> None:
    s = load.scope
    body = {"scope": s, "query": f"acme budget {i}"}
    whole = _http_bytes(load, "POST", "/search", body)
    _raw(load, whole[: len(whole) - 10])  # mid-request: the body cut short
    _raw(load, _http_bytes(load, "POST", "/episodes", {
        "scope": s, "source": f"slack:cut{i}", "acl": ["*"], "body": "x" * 200}), pause=0.0)
    _raw(load, whole)  # the request whole, the client gone before the answer
    _raw(load, _http_bytes(load, "GET", "/openapi.json"), read=100)  # mid-response
    _raw(load, _http_bytes(load, "GET", "/amp/v1/memories?limit=100"), read=50)
    _raw(load, _http_bytes(load, "POST", "/query", {"scope": s, "find": "passages",
                                                    "query": "march"}), read=10)
    # Headers cut in the middle, and a connection opened and left silent for a moment.
    _raw(load, _http_bytes(load, "GET", "/status")[:30], pause=0.05)
    load.req("GET", "/amp/v1/health")


def unit_idle(load: Load, i: int) -> None:
    """A burst of 12 requests at once, then a pause past the thread pool's 10 s idle expiry
    (a worker thread idle that long exits; the next burst starts new ones)."""
    with ThreadPoolExecutor(12) as pool:
        list(pool.map(lambda k: load.req("POST", "/search", json={
            "scope": load.scope, "query": f"acme {k}"}), range(12)))
        list(pool.map(lambda k: load.req("GET", f"/amp/v1/memories/{load.seeded['cells'][0]}"),
                      range(12)))
    time.sleep(11)


@dataclass
class Workload:
    name: str
    unit: Callable[[Load, int], None]
    writes: bool  # rows and data files grow by design
    scale: float = 1.0  # units per --n
    width: int = 4  # units at once
    # Sampled once more after this long idle, judged by that sample: what is bounded by
    # an expiry (MCP sessions left open) must be back to where it started by then.
    idle_after: float = 0.0
    expiring: tuple[str, ...] = ()


WORKLOADS = {
    "routes": Workload("routes", unit_routes, True, 1.0, 4),
    "reads": Workload("reads", unit_reads, False, 1.0, 4),
    "churn": Workload("churn", unit_churn, True, 1.0, 4),
    "mcp": Workload("mcp", unit_mcp, False, 2.0, 4, MCP_IDLE + 10,
                    ("mcp_sessions", "tasks")),
    "abandon": Workload("abandon", unit_abandon, True, 3.0, 4),
    "passes": Workload("passes", unit_passes, True, 1.0, 1),
    "idle": Workload("idle", unit_idle, False, 0.1, 1),
}


def run_units(load: Load, work: Workload, start: int, count: int) -> None:
    with ThreadPoolExecutor(work.width) as pool:
        for f in [pool.submit(work.unit, load, start + k) for k in range(count)]:
            try:
                f.result()
            except Exception as exc:  # the audit's own trouble: noted, the run goes on
                load.note(f"workload error: {type(exc).__name__}: {exc}"[:200])


def settle(server: Server, wait: float = 20.0) -> None:
    """Until no request is in flight (a request whose client left mid-way runs to its
    end), at most ``wait`` seconds: what is sampled then is what stays."""
    deadline = time.monotonic() + wait
    time.sleep(0.5)
    while time.monotonic() < deadline:
        kinds = probe(server, tasks_only=True).get("task_kinds") or {}
        if not any("run_asgi" in k for k in kinds):
            return
        time.sleep(0.5)


def run_workload(server: Server, work: Workload, n: int, config: str) -> Result:
    result = Result(config, work.name)
    load = Load(server, result)
    began = time.monotonic()
    try:
        seed(load)
        units = max(2, round(n * work.scale))
        run_units(load, work, 0, max(1, units // 3))  # warm-up
        settle(server)
        result.samples.append(sample(server, "start", types=True))  # collected each time
        result.requests.append(load.sent)
        for half in (1, 2):
            load.phase = half
            run_units(load, work, half * units, units)
            settle(server)
            result.samples.append(sample(server, f"{half}N", types=True))
            result.requests.append(load.sent)
        if work.idle_after:
            time.sleep(work.idle_after)
            result.after_idle = sample(server, "after idle")
    finally:
        load.close()
    result.seconds = round(time.monotonic() - began, 1)
    return result


# ---------------------------------------------------------------- judging


def grows(resource: str, values: list[Any]) -> bool:
    if any(v is None for v in values):
        return False
    tol = TOLERANCE[resource][0]
    first, second = values[1] - values[0], values[2] - values[1]
    # Still rising in the second half, about as fast as in the first, and above the start
    # (a count that fell and came part of the way back is no growth).
    return bool(second > tol and second >= 0.5 * max(first, 0) and values[2] - values[0] > tol)


def judge(result: Result) -> list[Finding]:
    findings = []
    s = result.samples
    if len(s) < 3:
        return [Finding(result.config, result.workload, "-", [], "the workload did not finish")]
    work = WORKLOADS[result.workload]
    judged = PROCESS + (() if work.writes else HOME)
    for resource in judged:
        values = [x.get(resource) for x in s]
        if resource in work.expiring and result.after_idle is not None:
            left = result.after_idle.get(resource)
            if left is not None and values[0] is not None \
                    and left > values[0] + TOLERANCE[resource][0]:
                findings.append(Finding(
                    result.config, result.workload, resource, [*values, left],
                    f"still there {work.idle_after:g} s after the last request"))
            continue
        if grows(resource, values):
            findings.append(Finding(result.config, result.workload, resource, values,
                                    _why(resource, s)))
    if not work.writes:
        rows0, rows1, rows2 = (x["rows"] for x in s)
        for table in sorted(rows2):
            values = [rows0.get(table, 0), rows1.get(table, 0), rows2[table]]
            if values[2] > values[1] > values[0]:  # a lease row comes and goes
                findings.append(Finding(result.config, result.workload, f"rows {table}",
                                        values, "rows added by a workload that writes none"))
    for what, count in result.errors.items():
        findings.append(Finding(result.config, result.workload, "answer", [count], what))
    return findings


def _why(resource: str, s: list[dict[str, Any]]) -> str:
    """What grew with it, to start the search for the cause."""
    parts = []
    if resource == "fds":
        a, b = Counter(s[0]["fd_kinds"]), Counter(s[2]["fd_kinds"])
        parts.append("fds by target: " + ", ".join(
            f"{k} {a.get(k, 0)}→{b[k]}" for k in b if b[k] != a.get(k, 0)))
    if resource == "tasks":
        parts.append(f"task kinds at 2N: {s[2].get('task_kinds')}")
    if resource == "threads":
        parts.append(f"threads at 2N: {s[2].get('thread_names')}")
    if resource in HOME:
        a, b = Counter(s[0]["file_kinds"]), Counter(s[2]["file_kinds"])
        parts.append("files by kind: " + ", ".join(
            f"{k} {a.get(k, 0)}→{b[k]}" for k in sorted(b, key=lambda k: a.get(k, 0) - b[k])
            if b[k] != a.get(k, 0))[:600])
    ta, tb = s[0].get("types"), s[2].get("types")
    if ta and tb:
        diff = sorted(((tb[k] - ta.get(k, 0), k) for k in tb), reverse=True)[:8]
        parts.append("objects grown: " + ", ".join(f"{k} +{d}" for d, k in diff if d > 0))
    return "; ".join(parts)


def _without_probe_hazards(log: str) -> str:
    """The log without the tracebacks that end in `PROBE_HAZARD`."""
    out, block = [], []
    for line in log.splitlines(keepends=True):
        if line.startswith("Traceback") or block:
            block.append(line)
            if not line.startswith((" ", "Traceback")):  # the exception's line ends it
                if not line.startswith(PROBE_HAZARD):
                    out += block
                block = []
            continue
        out.append(line)
    return "".join(out + block)


def report_lines(results: list[Result]) -> list[str]:
    lines = []
    for r in results:
        if len(r.samples) < 3:
            continue
        work = WORKLOADS[r.workload]
        lines += [f"### {r.config}: {r.workload} ({r.requests[0]} requests warm-up, then "
                  f"N = {r.requests[1] - r.requests[0]}, 2N = {r.requests[2] - r.requests[0]};"
                  f" {r.seconds} s)", "",
                  "| resource | start | after N | after 2N | verdict |", "|---|---|---|---|---|"]
        for resource in PROCESS + HOME:
            values = [x.get(resource) for x in r.samples]
            if all(v is None for v in values):
                continue
            judged = resource in PROCESS or not work.writes
            verdict = ("GROWS" if grows(resource, values) else "flat") if judged else (
                "data (not judged)")
            if resource in work.expiring and r.after_idle is not None:
                left = r.after_idle.get(resource)
                verdict = (f"{left} after {work.idle_after:g} s idle: "
                           + ("GROWS" if left is not None and values[0] is not None
                              and left > values[0] + TOLERANCE[resource][0] else "flat"))
            lines.append(f"| {resource} | " + " | ".join(str(v) for v in values)
                         + f" | {verdict} |")
        rows = [x["rows"] for x in r.samples]
        moved = [t for t in sorted(rows[2]) if rows[2][t] != rows[0].get(t, 0)]
        if moved:
            lines.append(f"| rows that moved | {len(moved)} tables | | | "
                         f"{'data (not judged)' if work.writes else 'GROWS'} |")
            for t in moved[:40]:
                lines.append(f"| &nbsp; {t} | {rows[0].get(t, 0)} | {rows[1].get(t, 0)} | "
                             f"{rows[2][t]} | |")
        slower = _slower(r)
        if slower:
            lines += ["", "Routes whose median time grew by half or more from the first half "
                      "to the second (ms):", ""]
            lines += [f"- `{route}`: {a:.1f} → {b:.1f}" for route, a, b in slower]
        lines.append("")
    return lines


def _slower(r: Result) -> list[tuple[str, float, float]]:
    """Routes (sent 10 times or more in each half) whose median grew by 50 % and 5 ms."""
    out = []
    one, two = r.latency[1], r.latency[2]
    for route in sorted(set(one) & set(two)):
        if len(one[route]) < 10 or len(two[route]) < 10:
            continue
        a, b = statistics.median(one[route]) * 1000, statistics.median(two[route]) * 1000
        if b >= 1.5 * a and b - a >= 5:
            out.append((route, a, b))
    return out


# ---------------------------------------------------------------- main


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--keys", default="off,on")
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--n", type=int, default=40, help="units per half (a unit is "
                        "20-40 requests of the routes and reads workloads)")
    parser.add_argument("--out", default="leak-report")
    parser.add_argument("--seed", type=int, default=32)
    args = parser.parse_args()
    random.seed(args.seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    backends, keys = args.backends.split(","), [k == "on" for k in args.keys.split(",")]
    workloads = [WORKLOADS[w] for w in args.workloads.split(",")]
    results: list[Result] = []
    findings: list[Finding] = []
    with ExitStack() as stack:
        pg = (stack.enter_context(postgres_factory()) if "postgres" in backends else None)
        for backend in backends:
            for key in keys:
                config = f"{backend}-keys-{'on' if key else 'off'}"
                home = Path(stack.enter_context(tempfile.TemporaryDirectory(
                    prefix=f"leak-{config}-")))
                print(f"{config}: starting", flush=True)
                with serving(backend, key, home, pg) as server:
                    for work in workloads:
                        result = run_workload(server, work, args.n, config)
                        results.append(result)
                        found = judge(result)
                        findings += found
                        print(f"{config}: {work.name}: {result.requests[-1]} requests in "
                              f"{result.seconds} s, {len(found)} findings", flush=True)
                        for f in found:
                            print(f"  {f.resource}: {f.values} {f.detail[:300]}", flush=True)
                    log = server.proc.log_path.read_text(errors="replace")
                    hazards = log.count(PROBE_HAZARD)
                    if hazards:
                        print(f"{config}: {hazards} traceback(s) of the probe's own heap walk "
                              f"in the server log ({PROBE_HAZARD}), not counted", flush=True)
                        log = _without_probe_hazards(log)
                    if "Traceback" in log:
                        kept = out / f"{config}.server.log"
                        kept.write_text(log)
                        start = log.rfind("\n", 0, log.index("Traceback")) + 1
                        findings.append(Finding(config, "-", "server log", [],
                                                f"{log[start:][:3000]} (the whole log: {kept})"))
    (out / "samples.json").write_text(json.dumps(
        [{"config": r.config, "workload": r.workload, "requests": r.requests,
          "seconds": r.seconds, "errors": dict(r.errors),
          "median_ms": [{k: round(statistics.median(v) * 1000, 1) for k, v in phase.items()}
                        for phase in r.latency],
          "samples": [{k: v for k, v in s.items() if k != "types"} for s in r.samples]}
         for r in results], indent=1))
    (out / "findings.json").write_text(json.dumps([f.__dict__ for f in findings], indent=1))
    (out / "report.md").write_text("\n".join(report_lines(results)) + "\n")
    print(f"{len(findings)} findings; report in {out / 'report.md'}")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
