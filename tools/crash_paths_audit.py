"""The crash audit's other write paths: a process killed with ``kill -9`` at a random moment
of a bulk or admin write (a CLI command, or a server in the middle of one), then the same
store opened again and the interrupted operation run again.

    PYTHONPATH=src:. python tools/crash_paths_audit.py [--configs sqlite,postgres-2]
                                                     [--paths load,backup,...]
                                                     [--rounds 3] [--seed N] [--out DIR]

Paths (docs/testing.md, "The crash audit of the other write paths"); each round kills
once, at a random moment within a measured whole run:

- ``load``: ``ampup-memory load`` of a .jsonl of 12,000 episodes and 1,500 facts, killed
  mid-way while the servers serve; then: the episodes listed are whole commits (each one's
  commit in the ledger, the same list through every server), none twice; the same command
  run again exits 0, counts what had landed as ``existing`` and the rest as ``created``,
  and every episode and fact is there once.
- ``index``: ``index rebuild`` and ``maintenance --rebuild-index`` (servers stopped, as the
  docs ask) killed mid-way; servers started on the half-rebuilt index answer below 500
  and list and find what they did before; run again, the same.
- ``backup``: ``backup DEST`` killed mid-way (server running), then the same command run
  again must succeed; ``restore SRC --home H`` killed mid-way, then run again must succeed,
  and a server on H answers what the original does.
- ``reembed``: servers stopped, the embedder changed, ``reembed`` killed mid-way; the same
  command run again re-embeds every cell (unless the killed run had finished) and records
  the new embedder; on SQLite the store is read directly (a store recording the new
  embedder holds only vectors of its width); servers then find sampled cells by their
  text.
- ``extract``: ``ampup-memory extract`` against a scripted model (tests/scripted_model.py)
  killed mid-way while it commits; the facts listed are whole commits (each with its read
  marks); run again it reads only what is pending, and every episode's fact is there once.
- ``purge``: a lifecycle pass over many deleted and archived cells with purging on
  (``AMP_PURGE_RETENTION=1``, a what-if ``now`` past the retention window), its server
  killed mid-pass; then no purged cell is readable or found through any server, every
  live cell is, and a pass run again purges the rest (200).
- ``admin``: ``PUT /schemas``, ``PUT /procedures/sources``, workspaces (create, write,
  DELETE, ``workspace gc``) written without pause through every server, one killed;
  every acknowledged write is there through every server, the newest acknowledged schema
  current, a deleted workspace stays deleted.

Every CLI run also must not print a traceback; every server answers below 500 and logs
no traceback. Findings go to ``DIR/findings.json``; the exit code is 1 when there are any.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from functools import partial
from pathlib import Path
from typing import Any

import httpx
from tests.model_support import ScriptedModel
from tests.pg import PostgresFactory, postgres_factory
from tests.server_process import ServerProcess, start_together
from tools.crash_audit import ADMIN, CrashAudit
from tools.race_audit import (
    AGENT,
    USER,
    Call,
    Skip,
    check_chain,
    configs_of,
    load_text,
    new_scope,
    report_findings,
    serving,
)

from ampup_memory.ops.backup import BACKUP_UNFINISHED, MANIFEST, RESTORE_UNFINISHED

CLI_LIMIT = 300.0


# ---------------------------------------------------------------- processes


def run_cli(audit: CrashAudit, env: dict[str, str], *args: str,
            kill_after: float | None = None) -> tuple[int | str, str, str]:
    """Run ``ampup-memory ARGS``; with ``kill_after``, ``kill -9`` it after that many
    seconds if it still runs (its code then ``"killed"``). A traceback is a finding."""
    proc = subprocess.Popen([sys.executable, "-m", "ampup_memory.cli", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    killed = False
    if kill_after is not None:
        try:
            proc.wait(kill_after)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            killed = True
            audit.kills += 1
    try:
        out, err = proc.communicate(timeout=CLI_LIMIT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        audit.find("CLI run over its time limit", " ".join(args))
    if "Traceback" in out + err:
        audit.find("CLI printed a traceback", f"{' '.join(args)}: {(out + err)[-600:]}")
    return ("killed" if killed else proc.returncode), out, err


def last_json(out: str) -> Any:
    for line in reversed(out.strip().splitlines()):
        try:
            return json.loads(line)
        except ValueError:
            continue
    return None


def timed(audit: CrashAudit, env: dict[str, str], *args: str) -> float:
    """How long one whole run takes (the kill lands uniformly within it)."""
    began = time.monotonic()
    code, out, err = run_cli(audit, env, *args)
    if code != 0:
        raise Skip(f"{' '.join(args)} -> {code}: {err[-300:]}")
    return time.monotonic() - began


def restart(audit: CrashAudit, procs: list[ServerProcess], victim: int,
            pause: float = 0.0) -> None:
    """kill -9 one server, and start it again on the same store and port ``pause`` s
    later; a request on a pooled connection to the killed process breaks just after it
    answers again too (1 s of grace)."""
    killed = time.monotonic()  # before: requests cut while it dies end before kill returns
    procs[victim].kill()
    audit.kills += 1
    time.sleep(pause)
    procs[victim].start(timeout=180)
    audit.down.setdefault(victim, []).append((killed, time.monotonic() + 1.0))


def answered(audit: CrashAudit, since: int) -> None:
    """Every request sent since ``audit.log[since]`` to a server that was not down was
    answered."""
    for s in audit.log[since:]:
        a = s.answer
        if a.status == "cut" and not audit.was_down(s.server, a.sent, a.done):
            audit.find("a server that was not killed stopped answering",
                       f"server {s.server}: {a.shown()} (sent {a.sent:.1f}, cut "
                       f"{a.done:.1f}; down {audit.down.get(s.server)})")


def stopped(procs: list[ServerProcess]) -> None:
    for p in procs:
        p.stop()


def started(procs: list[ServerProcess]) -> None:
    errors = start_together(procs, timeout=180)
    if errors:
        raise Skip(f"servers did not start: {errors}")


# ---------------------------------------------------------------- reads


def listed_episodes(audit: CrashAudit, scope: str, server: int) -> list[dict[str, Any]]:
    listed: list[dict[str, Any]] = []
    after: str | None = None
    while True:
        params = {"scope": scope, "limit": "1000", **({"after": after} if after else {})}
        page = audit.ok(Call("GET", "/episodes", "/episodes", params=params), server)
        listed += page["episodes"]
        after = page.get("next_after")
        if not after:
            return listed


def whole(audit: CrashAudit, scope: str, what: str) -> dict[str, int]:
    """The scope's episodes as every server lists them: each one's commit in the ledger,
    no source twice, the same list through every server. Source -> count."""
    commits = {c["id"] for c in check_chain(audit, scope)}
    lists = [listed_episodes(audit, scope, s) for s in range(len(audit.urls))]
    first = lists[0]
    for server, listed in enumerate(lists[1:], 1):
        audit.expect(sorted(e["id"] for e in listed) == sorted(e["id"] for e in first),
                     "servers disagree on the episodes",
                     f"{what}: server 0 lists {len(first)}, server {server} {len(listed)}")
    sources: dict[str, int] = {}
    for e in first:
        audit.expect(e["commit"] in commits, "episode without its ledger row",
                     f"{what}: {e['id']} commit {e['commit']}")
        sources[e["source"]] = sources.get(e["source"], 0) + 1
    twice = [s for s, n in sources.items() if n > 1]
    audit.expect(not twice, "one source loaded twice", f"{what}: {twice[:5]}")
    audit.count("episodes listed", len(first))
    return sources


def new_cell(audit: CrashAudit, text: str, server: int = 0) -> str:
    body = {"type": "semantic", "content": {"text": text},
            "identity": {"owner_id": AGENT, "owner_type": "agent"}}
    return str(audit.ok(Call("POST", "/amp/v1/memories", "/amp/v1/memories", body), server)
               ["id"])


def fact_values(audit: CrashAudit, scope: str, entity: str, server: int = 0) -> list[Any]:
    data = audit.ok(Call("GET", "/facts", "/facts", params={"scope": scope, "entity": entity,
                                                            "history": "true"}), server)
    return [f["value"] for f in data["facts"]]


def sweep(audit: CrashAudit, scope: str) -> None:
    """Every server answers the scope's reads below 500 (each answer judged by ``send``)."""
    for server in range(len(audit.urls)):
        for call in (Call("GET", "/status", "/status"),
                     Call("GET", "/ledger", "/ledger", params={"scope": scope}),
                     Call("POST", "/search", "/search", {"scope": scope, "query": "budget"}),
                     Call("GET", "/amp/v1/memories", "/amp/v1/memories")):
            audit.send(call, server)


# ---------------------------------------------------------------- load

LOAD_EPISODES, LOAD_FACTS = 12000, 1500


def load_file(folder: Path) -> Path:
    path = folder / "corpus.jsonl"
    with path.open("w") as f:
        for i in range(LOAD_EPISODES):
            f.write(json.dumps({"body": f"Call {i}: the budget is {i}k for account c{i}.",
                                "source": f"doc:crash-{i}", "acl": ["*"]}) + "\n")
        for i in range(LOAD_FACTS):
            f.write(json.dumps({"fact": {
                "entity": f"acct:c{i}", "predicate": "budget", "value": f"{i}k",
                "quote": f"budget is {i}k", "cites": [{"source": f"doc:crash-{i}",
                                                       "unit": 1}]}}) + "\n")
    return path


def loaded_scope(audit: CrashAudit, env: dict[str, str], home: Path) -> str:
    """A new scope holding the whole `load_file` corpus (a path's starting data), loaded
    through the CLI; `Skip` when the load itself fails."""
    scope = new_scope()
    code, _, err = run_cli(audit, env, "load", str(load_file(home)), "--scope", scope,
                           "--user", USER)
    if code != 0:
        raise Skip(f"load -> {code}: {err[-300:]}")
    return scope


def load_path(audit: CrashAudit, procs: list[ServerProcess], env: dict[str, str],
              home: Path, rounds: int, rng: random.Random) -> None:
    corpus = load_file(home)
    whole_run = timed(audit, env, "load", str(corpus), "--scope", new_scope(),
                      "--batch-size", "200", "--user", USER)
    for number in range(rounds):
        audit.scenario = f"load round {number}"
        scope = new_scope()
        args = ("load", str(corpus), "--scope", scope, "--batch-size", "200", "--user", USER)
        code, _, err = run_cli(audit, env, *args,
                               kill_after=rng.uniform(0.15, 0.95) * whole_run)
        landed = whole(audit, scope, "after the kill")
        audit.count("episodes landed before the kill", len(landed))
        audit.count(f"load killed ({code}) with {len(landed)} episodes in (whole run "
                    f"{whole_run:.1f} s)")
        sweep(audit, scope)
        code, out, err = run_cli(audit, env, *args)
        report = last_json(out) or {}
        if not audit.expect(code == 0, "load run again failed", f"{code}: {err[-400:]}"):
            continue
        audit.expect(report.get("existing") == len(landed)
                     and report.get("created") == LOAD_EPISODES - len(landed),
                     "load run again miscounted", f"{len(landed)} had landed: {report}")
        audit.expect(report.get("facts_created", 0) + report.get("facts_existing", 0)
                     == LOAD_FACTS, "load run again lost facts", str(report))
        after = whole(audit, scope, "after the second run")
        audit.expect(len(after) == LOAD_EPISODES, "episodes missing after the second load",
                     f"{len(after)} of {LOAD_EPISODES}")
        for i in rng.sample(range(LOAD_FACTS), 20):
            for server in range(len(audit.urls)):
                values = fact_values(audit, scope, f"acct:c{i}", server)
                audit.expect(values == [f"{i}k"], "loaded fact missing or twice",
                             f"server {server}: acct:c{i} {values}")
        sweep(audit, scope)


# ---------------------------------------------------------------- index rebuild


def index_path(audit: CrashAudit, procs: list[ServerProcess], env: dict[str, str],
               home: Path, rounds: int, rng: random.Random) -> None:
    scope = loaded_scope(audit, env, home)
    before = whole(audit, scope, "before")
    query = {"scope": scope, "query": "budget account c17"}
    found = audit.ok(Call("POST", "/search", "/search", query))
    stopped(procs)
    commands = [("index", "rebuild"), ("maintenance", "--rebuild-index")]
    whole_runs = {c: timed(audit, env, *c) for c in commands}
    for number in range(rounds):
        for command in commands:
            audit.scenario = f"{' '.join(command)} round {number}"
            run_cli(audit, env, *command, kill_after=rng.uniform(0.1, 0.95)
                    * whole_runs[command])
            started(procs)  # on the half-rebuilt index: answers below 500, no traceback
            sweep(audit, scope)
            audit.expect(whole(audit, scope, "on the half-rebuilt index") == before,
                         "half-rebuilt index shows part of the scope", scope)
            half = audit.ok(Call("POST", "/search", "/search", query))
            audit.expect([h.get("id") for h in half.get("results", [])]
                         == [h.get("id") for h in found.get("results", [])],
                         "search differs on the half-rebuilt index", json.dumps(query))
            stopped(procs)
            code, _, err = run_cli(audit, env, *command)
            audit.expect(code == 0, "rebuild run again failed", f"{code}: {err[-400:]}")
            started(procs)
            audit.expect(whole(audit, scope, "after the rebuild") == before,
                         "episodes differ after the rebuild", scope)
            again = audit.ok(Call("POST", "/search", "/search", query))
            audit.expect([h.get("id") for h in again.get("results", [])]
                         == [h.get("id") for h in found.get("results", [])],
                         "search differs after the rebuild", json.dumps(query))
            stopped(procs)
    started(procs)


# ---------------------------------------------------------------- backup and restore


def finished(folder: Path, marker: str, made: str | None = None) -> bool:
    """Whether a killed backup or restore into ``folder`` had finished: something written
    (``made``, when named), and no ``marker`` (in place from its first write to its
    last)."""
    return folder.is_dir() and any(folder.iterdir()) and not (folder / marker).exists() \
        and (made is None or (folder / made).is_file())


def backup_path(audit: CrashAudit, procs: list[ServerProcess], env: dict[str, str],
                home: Path, rounds: int, rng: random.Random) -> None:
    scope = loaded_scope(audit, env, home)
    for i in range(50):
        new_cell(audit, f"backup cell {i}")
    before = whole(audit, scope, "before")
    whole_backup = timed(audit, env, "backup", str(home / "b-timed"))
    whole_restore = timed(audit, env, "restore", str(home / "b-timed"),
                          "--home", str(home / "r-timed"))
    for number in range(rounds):
        audit.scenario = f"backup round {number}"
        dest = home / f"b{number}"
        code, _, _ = run_cli(audit, env, "backup", str(dest),
                             kill_after=rng.uniform(0.1, 0.9) * whole_backup)
        audit.count(f"backups {code}")
        if code == "killed" and finished(dest, BACKUP_UNFINISHED, MANIFEST):
            # Killed after its last write (the manifest in place, the marker gone): a whole
            # backup, which the same command rightly refuses to write over.
            audit.count("backups killed after they finished")
            code = 0
        if code != "killed":
            shutil.rmtree(dest)
        code, out, err = run_cli(audit, env, "backup", str(dest))
        audit.expect(code == 0, "backup run again failed", f"{code}: {err[-400:]}")
        if code != 0:
            shutil.rmtree(dest)
            code, out, err = run_cli(audit, env, "backup", str(dest))
            if code != 0:
                raise Skip(f"backup -> {code}: {err[-300:]}")
        audit.scenario = f"restore round {number}"
        target = home / f"r{number}"
        code, _, _ = run_cli(audit, env, "restore", str(dest), "--home", str(target),
                             kill_after=rng.uniform(0.1, 0.9) * whole_restore)
        audit.count(f"restores {code}")
        if code == "killed" and finished(target, RESTORE_UNFINISHED):
            audit.count("restores killed after they finished")  # a whole home, as above
            code = 0
        if code != "killed":
            shutil.rmtree(target)
        elif target.exists():
            left = sorted(p.name for p in target.iterdir())
            audit.count("restores that left files behind", 1 if left else 0)
        code, out, err = run_cli(audit, env, "restore", str(dest), "--home", str(target))
        audit.expect(code == 0, "restore run again failed", f"{code}: {err[-400:]}")
        if code != 0:
            continue
        server_env = {k: v for k, v in env.items() if k != "AMPUP_MEMORY_HOME"}
        with ServerProcess(target, env=server_env) as restored:
            other = CrashAudit(audit.config, [restored.url], audit.spec, audit.headers, 1)
            other.clients = [other.connect(restored.url)]
            other.scenario = audit.scenario
            got = whole(other, scope, "restored")
            audit.expect(got == before, "restored episodes differ",
                         f"{len(got)} of {len(before)}")
            other.finish([restored])
            audit.findings += other.findings


# ---------------------------------------------------------------- reembed

REEMBED_CELLS = 4000


def reembed_path(audit: CrashAudit, procs: list[ServerProcess], env: dict[str, str],
                 home: Path, rounds: int, rng: random.Random) -> None:
    texts = [f"reembed probe {i} {uuid.uuid4().hex[:6]}" for i in range(REEMBED_CELLS)]
    ids = [new_cell(audit, t) for t in texts]
    stopped(procs)
    whole_run = timed(audit, env, "reembed", "--force")
    # WordLlama embeds ~0.5 ms a cell, hash far faster: a kill lands mid-rewrite more often
    embedders = [("wordllama", "256"), ("hash", "192"), ("wordllama", "256"), ("hash", "96")]
    for number in range(rounds):
        audit.scenario = f"reembed round {number}"
        provider, width = embedders[number % len(embedders)]
        changed = {**env, "AMP_EMBEDDING_PROVIDER": provider,
                   "AMP_EMBEDDING_DIMENSIONS": width}
        began = time.monotonic()
        code, _, _ = run_cli(audit, changed, "reembed",
                             kill_after=rng.uniform(0.6, 2.5) * whole_run)
        took = time.monotonic() - began
        killed = code == "killed"
        if not killed:
            audit.count("reembed finished before its kill")
        recorded = vector_widths(audit, env, int(width), "after the kill")
        code, out, err = run_cli(audit, changed, "reembed")
        report = last_json(out) or {}
        audit.expect(code == 0 and report.get("dimensions") == int(width)
                     and report.get("reembedded", 0) >= REEMBED_CELLS * (not recorded),
                     "reembed run again did not finish", f"{code} {report} {err[-300:]}")
        audit.count(f"reembed killed after {took:.1f} s of {whole_run:.1f} s")
        for p in procs:
            p.env.update(AMP_EMBEDDING_PROVIDER=provider, AMP_EMBEDDING_DIMENSIONS=width)
        started(procs)
        for i in rng.sample(range(REEMBED_CELLS), 10):
            for server in range(len(audit.urls)):
                a = audit.send(Call("POST", "/amp/v1/memories/search",
                                    "/amp/v1/memories/search",
                                    {"query": texts[i], "limit": 3}), server)
                hits = [h.get("id") or h.get("memory", {}).get("id")
                        for h in (a.data or {}).get("results", [])]
                audit.expect(ids[i] in hits, "cell not found by its text after reembed",
                             f"server {server}: {ids[i]} {a.status} {a.text[:200]}")
        stopped(procs)
    started(procs)


def vector_widths(audit: CrashAudit, env: dict[str, str], width: int, what: str) -> bool:
    """On SQLite, read the cell store itself: a store that records the new embedder has
    only vectors of its width (a record written before the last vector is a half-done
    re-embedding nothing redoes). Whether the new embedder is recorded."""
    if "AMP_STORE_URI" in env:
        return False  # PostgreSQL: the rerun's count says it
    db = sqlite3.connect(f"file:{Path(env['AMPUP_MEMORY_HOME']) / 'amp.db'}?mode=ro",
                         uri=True)
    try:
        meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
        sizes = dict(db.execute("SELECT length(vec), count(*) FROM cells GROUP BY 1"))
    finally:
        db.close()
    recorded = meta.get("embedding_model_dimensions") == str(width)
    audit.count(f"vector widths {what} (new embedder recorded: {recorded}): "
                + ", ".join(f"{(n or 0) // 4}d" for n in sorted(sizes, key=lambda n: n or 0)))
    if recorded:
        audit.expect(set(sizes) == {width * 4}, "new embedder recorded over old vectors",
                     f"{what}: widths {[(n or 0) // 4 for n in sizes]}, recorded {width}")
    return recorded


# ---------------------------------------------------------------- extraction

EXTRACT_EPISODES = 400
SCHEMA = {"schema": {
    "name": "crash", "entities": [{"name": "acct", "attributes": [
        {"name": "budget", "type": "string"}]}],
    "extract": [{"episode_types": ["call"], "targets": {"acct": ["budget"]}}]}}


def extract_path(audit: CrashAudit, procs: list[ServerProcess], env: dict[str, str],
                 home: Path, rounds: int, rng: random.Random) -> None:
    model = ScriptedModel().start()
    try:
        model_env = {**env, **model.env()}
        for number in range(rounds):
            audit.scenario = f"extract round {number}"
            scope = new_scope()
            org, team = scope.split("/")
            audit.ok(Call("PUT", "/schemas/{org}/{team}", f"/schemas/{org}/{team}", SCHEMA))
            for chunk in range(0, EXTRACT_EPISODES, 100):
                audit.ok(Call("POST", "/episodes/batch", "/episodes/batch", {
                    "scope": scope, "episodes": [
                        {"source": f"call:x{i}", "acl": ["*"],
                         "body": f"Agent: the budget is {i}k for account c{i}."}
                        for i in range(chunk, chunk + 100)]}))
            model.script([{"match": f"account c{i}.", "delay": 0.01, "reply": {"facts": [
                {"entity": f"acct:c{i}", "predicate": "budget", "value": f"{i}k",
                 "unit": 1, "quote": f"budget is {i}k"}]}} for i in range(EXTRACT_EPISODES)])
            args = ("extract", "--scope", scope, "--batch", "25")
            run_cli(audit, model_env, *args, kill_after=rng.uniform(2.5, 9.0))
            landed = extracted(audit, scope, "after the kill")
            audit.count("facts extracted before the kill", len(landed))
            code, out, err = run_cli(audit, model_env, *args)
            audit.expect(code == 0, "extract run again failed", f"{code}: {err[-400:]}")
            done = extracted(audit, scope, "after the second run")
            audit.expect(len(done) == EXTRACT_EPISODES, "extracted facts missing",
                         f"{len(done)} of {EXTRACT_EPISODES}")
            audit.count("model calls", len(model.calls()))
            sweep(audit, scope)
    finally:
        model.stop()


def extracted(audit: CrashAudit, scope: str, what: str) -> dict[str, int]:
    """acct key -> how many versions of its budget; each fact's commit in the ledger, the
    same through every server."""
    commits = {c["id"]: c for c in check_chain(audit, scope)}
    counts: dict[str, int] = {}
    for server in range(len(audit.urls)):
        here: dict[str, int] = {}
        for i in range(EXTRACT_EPISODES):
            for f in audit.ok(Call("GET", "/facts", "/facts", params={
                    "scope": scope, "entity": f"acct:c{i}", "history": "true"}), server
                              )["facts"]:
                here[f["entity"]] = here.get(f["entity"], 0) + 1
                audit.expect(f["commit"] in commits, "fact without its ledger row",
                             f"{what}: {f['entity']} {f['commit']}")
        if server == 0:
            counts = here
        audit.expect(here == counts, "servers disagree on the facts", what)
    twice = [e for e, n in counts.items() if n > 1]
    audit.expect(not twice, "one episode's fact extracted twice", f"{what}: {twice[:5]}")
    return counts


# ---------------------------------------------------------------- purge and lifecycle

PURGE_CELLS = 2400


def purge_path(audit: CrashAudit, procs: list[ServerProcess], env: dict[str, str],
               home: Path, rounds: int, rng: random.Random) -> None:
    for number in range(rounds):
        audit.scenario = f"purge round {number}"
        tag = uuid.uuid4().hex[:8]
        with ThreadPoolExecutor(4) as pool:
            made = list(pool.map(partial(purge_cell, audit, tag), range(PURGE_CELLS)))
        live = [cell for cell, i in made if i % 3 == 0]
        gone = [cell for cell, i in made if i % 3 == 1]
        now = f"{2030 + number}-01-01T00:00:00Z"
        victim = number % len(procs)
        dry = audit.send(Call("POST", "/amp/v1/lifecycle/run", "/amp/v1/lifecycle/run",
                              {"dry_run": True, "now": now}, headers=ADMIN), victim)
        result: list[Any] = []
        lifecycle = Call("POST", "/amp/v1/lifecycle/run", "/amp/v1/lifecycle/run",
                         {"dry_run": False, "now": now}, headers=ADMIN)
        passing = threading.Thread(
            target=lambda c, v, into: into.append(audit.send(c, v)),
            args=(lifecycle, victim, result))
        passing.start()
        time.sleep(rng.uniform(0.05, 1.2) * (dry.done - dry.sent))
        restart(audit, procs, victim)
        passing.join()
        audit.count(f"passes answered before the kill: {result[0].status if result else '-'}"
                    f" (dry run {dry.done - dry.sent:.1f} s)")
        check_cells(audit, tag, live, gone, "after the kill")
        again = audit.send(Call("POST", "/amp/v1/lifecycle/run", "/amp/v1/lifecycle/run",
                                {"dry_run": False, "now": now}, headers=ADMIN), victim)
        audit.expect(again.status == 200, "lifecycle pass run again refused",
                     f"{again.status} {again.text[:200]}")
        check_cells(audit, tag, live, gone, "after the pass run again", purged=True)


def purge_cell(audit: CrashAudit, tag: str, i: int) -> tuple[str, int]:
    """Cell ``i``: kept active (i % 3 == 0), deleted (1) or archived (2)."""
    cell = new_cell(audit, f"purge {tag} cell {i}", i)
    if i % 3:
        audit.ok(Call("PATCH", "/amp/v1/memories/{memory_id}", f"/amp/v1/memories/{cell}",
                      {"lifecycle": {"status": "archived"}}), i)
    if i % 3 == 1:
        audit.ok(Call("DELETE", "/amp/v1/memories/{memory_id}", f"/amp/v1/memories/{cell}"),
                 i)
    return cell, i


def check_cells(audit: CrashAudit, tag: str, live: list[str], gone: list[str], what: str,
                purged: bool = False) -> None:
    for server in range(len(audit.urls)):
        for cell in live[:200]:
            got = audit.send(Call("GET", "/amp/v1/memories/{memory_id}",
                                  f"/amp/v1/memories/{cell}"), server)
            audit.expect(got.status == 200, "live cell lost",
                         f"{what}: server {server}: {cell} {got.status}")
        for cell in gone[:200]:
            got = audit.send(Call("GET", "/amp/v1/memories/{memory_id}",
                                  f"/amp/v1/memories/{cell}"), server)
            audit.expect(got.status in (403, 404), "deleted cell readable",
                         f"{what}: server {server}: {cell} {got.status}")
        found = audit.send(Call("POST", "/amp/v1/memories/search", "/amp/v1/memories/search",
                                {"query": f"purge {tag}", "limit": 100}), server)
        hits = {h.get("id") or h.get("memory", {}).get("id")
                for h in (found.data or {}).get("results", [])}
        audit.expect(not hits & set(gone), "deleted cell found by search",
                     f"{what}: server {server}: {len(hits & set(gone))}")
    if purged:
        audit.count("cells purged and checked", len(gone))


# ---------------------------------------------------------------- schemas, sources, workspaces


def admin_path(audit: CrashAudit, procs: list[ServerProcess], env: dict[str, str],
               home: Path, rounds: int, rng: random.Random) -> None:
    for number in range(rounds):
        admin_round(audit, procs, env, number, rng)


def admin_round(audit: CrashAudit, procs: list[ServerProcess], env: dict[str, str],
                number: int, rng: random.Random) -> None:
    audit.scenario = f"admin round {number}"
    scope = new_scope()
    org, team = scope.split("/")
    stop = threading.Event()
    since = len(audit.log)
    schemas: list[tuple[int, Any]] = []
    sources: list[tuple[int, Any]] = []
    spaces: list[tuple[str, Any, Any]] = []  # (id, its write, its delete)

    def schema_writer(t: int) -> None:
        k = 0
        while not stop.is_set():
            k += 1
            body = {"schema": {"name": f"s{t}", "entities": [{"name": "acct",
                    "attributes": [{"name": f"a{t}_{k}", "type": "string"}]}]}}
            schemas.append((k, audit.send(Call("PUT", "/schemas/{org}/{team}",
                                               f"/schemas/{org}/{team}", body), t)))

    def source_writer(t: int) -> None:
        k = 0
        while not stop.is_set():
            k += 1
            body = {"scope": scope, "documents": [f"runbook-{t}-{k}"]}
            sources.append((k, audit.send(Call("PUT", "/procedures/sources",
                                               "/procedures/sources", body,
                                               headers=ADMIN), t)))

    def workspace_writer(t: int) -> None:
        while not stop.is_set():
            made = audit.send(Call("POST", "/workspaces", "/workspaces",
                                   {"name": f"crash {t}", "ttl": "1h"}), t)
            if not made.ok():
                continue
            ws = made.data["id"]
            wscope = f"{ws}/main"
            wrote = audit.send(Call("POST", "/episodes", "/episodes", {
                "scope": wscope, "source": f"slack:C1:{uuid.uuid4().hex[:8]}",
                "body": "workspace note", "acl": ["*"]}), t)
            gone = audit.send(Call("DELETE", "/workspaces/{workspace_id}",
                                   f"/workspaces/{ws}"), t) if t % 2 else None
            spaces.append((ws, wrote, gone))

    threads = [threading.Thread(target=f, args=(t,)) for f in
               (schema_writer, source_writer, workspace_writer) for t in range(2)]
    for th in threads:
        th.start()
    time.sleep(rng.uniform(0.5, 3.0))
    restart(audit, procs, number % len(procs), rng.uniform(0, 1.0))
    time.sleep(rng.uniform(1.0, 2.0))
    stop.set()
    for th in threads:
        th.join()
    answered(audit, since)
    check_admin(audit, scope, schemas, sources, spaces)
    # A server killed mid-DELETE holds the maintenance lease until it lapses
    # (AMPUP_MEMORY_LEASE_SECONDS, 6 here): gc says so (exit 2) until then.
    for _ in range(4):
        code, out, err = run_cli(audit, env, "workspace", "gc")
        if code != 2 or "holds the lease" not in err:
            break
        audit.count("workspace gc: the lease still held")
        time.sleep(3)
    audit.expect(code == 0, "workspace gc failed", f"{code}: {err[-300:]}")
    check_admin(audit, scope, schemas, sources, spaces)


def check_admin(audit: CrashAudit, scope: str, schemas: list[tuple[int, Any]],
                sources: list[tuple[int, Any]], spaces: list[tuple[str, Any, Any]]) -> None:
    org, team = scope.split("/")
    acked = [a for _, a in schemas if a.ok()]
    audit.count("acknowledged schemas", len(acked))
    cut = [a for _, a in schemas if a.status == "cut"]
    newest = max(acked, key=lambda a: a.done, default=None)
    for server in range(len(audit.urls)):
        got = audit.send(Call("GET", "/schemas/{org}/{team}", f"/schemas/{org}/{team}"),
                         server)
        if newest is None or got.status != 200:
            continue
        text = json.dumps(got.data)
        names = [a.body["schema"]["entities"][0]["attributes"][0]["name"]
                 for a in [newest, *cut]]
        audit.expect(any(n in text for n in names), "newest acknowledged schema not current",
                     f"server {server}: expected one of {names[:3]}")
    for server in range(len(audit.urls)):
        got = audit.send(Call("GET", "/procedures/sources", "/procedures/sources",
                              params={"scope": scope}, headers=ADMIN), server)
        if got.status == 200:
            audit.count("procedure source reads")
    for ws, wrote, gone in spaces:
        if gone is not None and gone.ok():
            for server in range(len(audit.urls)):
                got = audit.send(Call("GET", "/workspaces/{workspace_id}",
                                      f"/workspaces/{ws}"), server)
                audit.expect(got.status in (404, 410), "deleted workspace still there",
                             f"server {server}: {ws} {got.status}")
        elif wrote.ok() and gone is None:  # a cut DELETE may have landed
            audit.count("acknowledged workspace writes")
            for server in range(len(audit.urls)):
                got = audit.send(Call("GET", "/episodes/{episode_id}",
                                      f"/episodes/{wrote.data['id']}",
                                      params={"scope": wrote.body["scope"]}), server)
                audit.expect(got.status == 200, "acknowledged workspace episode missing",
                             f"server {server}: {ws} {wrote.data['id']} {got.status} "
                             f"{got.text[:200]}")


# ---------------------------------------------------------------- driver

PATHS: dict[str, Callable[..., None]] = {
    "load": load_path, "index": index_path, "backup": backup_path, "reembed": reembed_path,
    "extract": extract_path, "purge": purge_path, "admin": admin_path,
}
SQLITE_ONLY = {"backup"}  # backup refuses PostgreSQL (pg_dump instead)


def audit_one(config: str, pg: PostgresFactory | None, paths: list[str], rounds: int,
              seed: int, log: Callable[[str], None]) -> CrashAudit:
    rng = random.Random(seed)
    home = Path(tempfile.mkdtemp(prefix=f"crashpaths-{config}-"))
    extra = {"AMP_PURGE_RETENTION": "1", "AMPUP_MEMORY_LEASE_SECONDS": "6"}
    os.environ.update(extra)
    with serving(config, home, pg) as (procs, headers, env):
        spec = httpx.get(f"{procs[0].url}/openapi.json").json()
        audit = CrashAudit(config, [p.url for p in procs], spec, headers, 1)
        audit.clients = [audit.connect(p.url) for p in procs]
        for name in paths:
            if name in SQLITE_ONLY and config != "sqlite":
                continue
            began, sent, kills = time.monotonic(), audit.sent, audit.kills
            audit.scenario = name
            audit.guarded(lambda n=name: PATHS[n](audit, procs, env, home, rounds, rng),
                          "path", f"{name}: ")
            try:  # a path that failed midway may have left them stopped
                started([p for p in procs if p.proc is None or p.proc.poll() is not None])
            except Skip as exc:
                audit.scenario = name
                audit.find("server did not start again", str(exc)[-600:])
                break
            log(f"{config} {name}: {audit.kills - kills} kills, {audit.sent - sent} requests,"
                f" {time.monotonic() - began:.0f} s, {load_text()}")
        audit.finish(procs)
    if audit.findings:  # the server logs name what went wrong
        log(f"{config}: findings; its home is kept: {home}")
    else:
        shutil.rmtree(home, ignore_errors=True)
    return audit


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", default="sqlite,postgres-2")
    parser.add_argument("--paths", default=",".join(PATHS))
    parser.add_argument("--rounds", type=int, default=3, help="kills per path")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--out", type=Path, default=Path("crash-paths-report"))
    args = parser.parse_args(argv)
    paths = args.paths.split(",")
    unknown = sorted(set(paths) - set(PATHS))
    if unknown:
        parser.error(f"unknown paths {', '.join(unknown)}; known: {', '.join(PATHS)}")
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    args.out = args.out.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    configs = configs_of(args.configs)
    findings = []
    checked: dict[str, Any] = {}
    kills = sent = 0
    with ExitStack() as stack:
        pg = (stack.enter_context(postgres_factory())
              if any(c.startswith("postgres") for c in configs) else None)
        for config in configs:
            audit = audit_one(config, pg, paths, args.rounds, seed,
                              lambda line: print(line, flush=True))
            findings += audit.findings
            checked[config] = audit.checked
            kills, sent = kills + audit.kills, sent + audit.sent
    (args.out / "checked.json").write_text(json.dumps(checked, indent=1, sort_keys=True))
    found = report_findings(args.out, findings)
    print(f"{found} findings, {kills} kills, {sent} requests (seed {seed})")
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
