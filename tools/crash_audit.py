"""Audit what a server killed mid-race leaves behind, and MCP writers racing REST writers:
over real HTTP (and the official MCP client over streamable HTTP at ``/mcp``), against one
server on SQLite and two or three servers sharing one PostgreSQL store, API keys on.

    PYTHONPATH=src:. python tools/crash_audit.py [--configs sqlite,postgres-2,postgres-3]
                                                [--rounds 3] [--out DIR]

Per round (docs/testing.md, "The crash audit"), writer threads run conflicting writes
without pause, each through one server (requests alternate between servers by thread):
AMP cell creates, PATCHes (some with a stale ``If-Match``, refused), archive + DELETE, a
lifecycle pass over a few hundred cells with a what-if ``now`` (admin), episodes of one
scope (some with one body sent by every episode writer), facts of one one-valued
attribute and of one attribute per writer, branches of one name created by two writers,
written and merged, pins, advice runs and rewards; MCP tool calls (``remember_memory``,
``close_memory``, ``branch_memory``/``merge_memory`` on the REST writers' branch names,
``reward_run``, ``amp_remember``/``amp_forget``) interleaved with them. Round 0 kills
nothing (the MCP-against-REST race); every later round ``kill -9``s one server after a
random delay, restarts it on the same store and port, lets the writers run on, then
checks through every server:

- every write answered 2xx is there (its episode, its commit in the ledger, its cell with
  the last acknowledged text unless a later write's outcome is unknown, its pin, its
  reward, its merge's facts on ``into``); no refused write is applied; every listed fact's
  cited episode is readable and its commit is in the ledger; each branch's ledger is one
  chain, the same through every server; one body sent by many is one episode;
- every request to a server that was not killed was answered (no cut connection), below
  500, documented, in the error envelope; every MCP answer is a tool result (never a
  JSON-RPC error, a traceback or the "unexpected error" answer);
- the restarted server answers every GET route (ids filled in) below 500, a lifecycle
  pass (no lease left behind by the killed one), and logs no traceback.

Findings go to ``DIR/findings.json``; the exit code is 1 when there are any.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import httpx
from mcp.shared.exceptions import MCPError
from tests.pg import PostgresFactory, postgres_factory
from tests.server_process import ServerProcess
from tools.mcp_audit import INTERNAL, http_client, text_of
from tools.race_audit import (
    ADMIN_TOKEN,
    USER,
    Answer,
    Audit,
    Call,
    Finding,
    amp_create,
    amp_patch,
    check_chain,
    configs_of,
    counts,
    episode,
    fact_call,
    facts,
    load_text,
    new_scope,
    report_findings,
    serving,
)

from ampup_memory.memory.mcp_tools import NOTE_PREFIX

ADMIN = {"X-AMP-Admin-Token": ADMIN_TOKEN}
LIFECYCLE_CELLS = 600


@dataclass
class Sent:
    """One request of a writer: which server it went to; status ``"cut"`` when the
    connection broke without an answer (its outcome unknown)."""

    server: int
    answer: Answer


@dataclass
class CrashAudit(Audit):
    log: list[Sent] = field(default_factory=list)
    # server -> [(killed, answering again)]: when it could not answer
    down: dict[int, list[tuple[float, float]]] = field(default_factory=dict)
    mcp_calls: int = 0
    kills: int = 0
    samples: dict[str, str] = field(default_factory=dict)  # "tool outcome" -> one answer
    checked: dict[str, int] = field(default_factory=dict)  # what the checks looked at

    def count(self, what: str, n: int = 1) -> None:
        with self.lock:
            self.checked[what] = self.checked.get(what, 0) + n

    def send(self, call: Call, server: int = 0) -> Answer:
        server %= len(self.clients)
        try:
            answer = super().send(call, server)
        except httpx.TransportError as exc:  # the server died under it (or never answered)
            answer = Answer(call.method, call.path, call.template, call.body,
                            time.monotonic(), time.monotonic(), "cut", None, repr(exc))
        with self.lock:
            self.log.append(Sent(server, answer))
        if answer.status == "cut":
            time.sleep(0.05)  # its server is down: no busy loop while it restarts
        return answer

    def was_down(self, server: int, start: float, end: float) -> bool:
        return any(start <= up and end >= killed for killed, up in self.down.get(server, []))


# ---------------------------------------------------------------- writers


@dataclass
class Round:
    scope: str
    quote: str
    ep: str  # the episode every fact cites
    number: int
    stop: threading.Event = field(default_factory=threading.Event)
    # what the writers were told, for the checks
    cells: dict[str, list[tuple[str, Answer]]] = field(default_factory=dict)
    deleted: dict[str, Answer] = field(default_factory=dict)
    refused_texts: set[str] = field(default_factory=set)
    refused_values: set[str] = field(default_factory=set)
    episodes: list[Answer] = field(default_factory=list)
    shared: dict[str, list[Answer]] = field(default_factory=dict)
    facts: list[Answer] = field(default_factory=list)
    own: dict[str, list[Answer]] = field(default_factory=dict)  # entity -> its writes
    merges: list[tuple[Answer, str]] = field(default_factory=list)  # (merge, entity)
    branches: list[Answer] = field(default_factory=list)
    pins: list[Answer] = field(default_factory=list)
    runs: list[Answer] = field(default_factory=list)
    rewards: list[Answer] = field(default_factory=list)
    passes: list[Answer] = field(default_factory=list)
    mcp: list[tuple[str, dict[str, Any], str, Any, float, float]] = field(
        default_factory=list)  # (tool, args, outcome, payload, sent, done)
    samples: dict[str, str] = field(default_factory=dict)


def cell_writer(audit: CrashAudit, r: Round, t: int) -> None:
    """Its own cells, one after another: PATCHes of its text, a stale If-Match now and
    then (412); every tenth step on to a new cell, one in three archived and deleted."""
    server, cell, tag, i = t, None, "", 0
    while not r.stop.is_set():
        i += 1
        if cell is None:
            text = f"c{t}-{i}"
            a = audit.send(Call("POST", "/amp/v1/memories", "/amp/v1/memories", {
                "type": "semantic", "content": {"text": text},
                "identity": {"owner_id": "crash_owner", "owner_type": "agent"}}), server)
            if a.status == 201:
                cell, tag = a.data["id"], ""
                r.cells[cell] = [(text, a)]
            continue
        if i % 10 == 0 and (i // 10) % 3:  # on to a new cell, this one kept
            cell = None
            continue
        if i % 10 == 0:
            a = audit.send(amp_patch(cell, {"lifecycle": {"status": "archived"}}), server)
            r.cells[cell].append(("", a))
            d = audit.send(Call("DELETE", "/amp/v1/memories/{memory_id}",
                                f"/amp/v1/memories/{cell}"), server)
            r.deleted[cell] = d
            cell = None
            continue
        if i % 4 == 0 and tag:
            text = f"refused {t}-{i}"
            a = audit.send(amp_patch(cell, {"content": {"text": text}}, tag), server)
            if a.status == 412:
                r.refused_texts.add(text)
            elif a.status != "cut":
                audit.find("stale If-Match not refused", f"{cell}: {a.status}")
            continue
        text = f"c{t}-{i}"
        a = audit.send(amp_patch(cell, {"content": {"text": text}}), server)
        r.cells[cell].append((text, a))
        if a.status == 200:
            tag = '"stale"' if not tag else tag  # any tag but the current one


def episode_writer(audit: CrashAudit, r: Round, t: int) -> None:
    i = 0
    while not r.stop.is_set():
        i += 1
        body: dict[str, Any]
        if i % 3 == 0:  # one note sent by every episode writer and MCP: one episode
            key = f"shared {r.number}-{i}"
            body = {"scope": r.scope, "source": f"{NOTE_PREFIX}{USER}:chat", "body": key,
                    "acl": ["*"]}
            a = audit.send(Call("POST", "/episodes", "/episodes", body), t)
            r.shared.setdefault(key, []).append(a)
        else:
            body = {"scope": r.scope, "source": f"slack:C1:{t}-{i}",
                    "body": f"episode {t}-{i} {uuid.uuid4().hex[:6]}", "acl": ["*"]}
            r.episodes.append(audit.send(Call("POST", "/episodes", "/episodes", body), t))


def fact_writer(audit: CrashAudit, r: Round, t: int) -> None:
    """Facts of the shared one-valued attribute (acme budget) and of its own entity."""
    i = 0
    mine = f"own{t}"
    while not r.stop.is_set():
        i += 1
        if i % 5 == 0:  # a quote its episode does not hold: refused, never applied
            a = audit.send(fact_call(r.scope, r.ep, "not in the episode", "acme", "budget",
                                     f"refused {t}-{i}"), t)
            if a.status != "cut":
                r.refused_values.add(a.body["value"])
                audit.expect(a.status == 422, "fact with a wrong quote not refused",
                             f"{a.status} {a.text[:200]}")
            continue
        if i % 2:
            r.facts.append(audit.send(fact_call(r.scope, r.ep, r.quote, "acme", "budget",
                                                f"v{t}-{i}"), t))
        else:
            r.own.setdefault(mine, []).append(audit.send(
                fact_call(r.scope, r.ep, r.quote, mine, "budget", f"v{t}-{i}"), t))


def branch_writer(audit: CrashAudit, r: Round, t: int) -> None:
    """Branches b0, b1, ... (the other branch writer and MCP make the same names): create,
    write a fact on it, merge it into main."""
    k = 0
    while not r.stop.is_set():
        k += 1
        name = f"b{r.number}-{k}"
        a = audit.send(Call("POST", "/branches", "/branches", {"scope": r.scope, "name": name}),
                       t)
        r.branches.append(a)
        if a.status not in (201, 409):
            continue
        entity = f"br{t}-{k}"
        w = audit.send(fact_call(r.scope, r.ep, r.quote, entity, "budget", "x", branch=name), t)
        if w.status != 201:
            continue
        m = audit.send(Call("POST", "/merge", "/merge", {"scope": r.scope, "from": name}), t)
        r.merges.append((m, entity))


def pin_writer(audit: CrashAudit, r: Round, t: int) -> None:
    while not r.stop.is_set():
        r.pins.append(audit.send(Call("POST", "/pin", "/pin", {"scope": r.scope, "ttl": "1h"}),
                                 t))
        time.sleep(0.05)


def advice_writer(audit: CrashAudit, r: Round, t: int) -> None:
    i = 0
    while not r.stop.is_set():
        i += 1
        run = audit.send(Call("POST", "/runs", "/runs", {"scope": r.scope, "task": f"t{t}-{i}"}),
                         t)
        r.runs.append(run)
        if run.status == 201:
            for j in range(2):
                r.rewards.append(audit.send(Call("POST", "/runs/reward", "/runs/reward", {
                    "run": run.data["id"], "reward": 0.5, "reason": f"r{t}-{i}-{j}"}), t + j))


def lifecycle_writer(audit: CrashAudit, r: Round, t: int) -> None:
    """Passes with a what-if `now` further ahead each time (cells go stale, then archived)."""
    days = 0
    while not r.stop.is_set():
        days += 40
        now = f"{2027 + days // 365}-{1 + (days % 365) // 31:02d}-01T00:00:00Z"
        r.passes.append(audit.send(Call("POST", "/amp/v1/lifecycle/run",
                                        "/amp/v1/lifecycle/run", {"now": now},
                                        headers=ADMIN), t))


WRITERS: list[Callable[[CrashAudit, Round, int], None]] = [
    cell_writer, cell_writer, episode_writer, episode_writer, fact_writer, fact_writer,
    branch_writer, branch_writer, pin_writer, advice_writer, lifecycle_writer]


# ---------------------------------------------------------------- MCP writers


MCP_CALL_LIMIT = 30.0  # a call through a server killed under it gets no answer


async def mcp_writers(audit: CrashAudit, r: Round, headers: dict[str, str]) -> None:
    """Tool calls on the REST writers' scope, branch names, runs and facts, a few at once,
    through each server, until the round stops; a client whose server was killed under it
    connects again."""

    async def one(client: Any, server: int, sent: float, tool: str,
                  args: dict[str, Any]) -> tuple[bool, Any]:
        """``sent``: when its session was made (one made before its server was killed
        dies with it, whenever it is used). A call its session's end cancels is "cut":
        its outcome unknown, as a REST request's whose connection broke."""
        outcome = "cut"
        try:
            with anyio.fail_after(MCP_CALL_LIMIT):
                result = await client.call_tool(tool, args)
            outcome = "answered"
        except MCPError as exc:
            outcome = "json-rpc error"
            r.mcp.append((tool, args, outcome, str(exc), sent, time.monotonic()))
            return True, None
        except Exception as exc:  # the client broke: a finding unless its server died
            outcome = "broke"
            r.mcp.append((tool, args, outcome, f"server {server}: {exc!r}", sent,
                          time.monotonic()))
            return False, None
        finally:
            if outcome == "cut":  # cancelled: its session ended under it
                r.mcp.append((tool, args, "cut", f"server {server}: no answer", sent,
                              time.monotonic()))
        outcome = "error" if result.is_error else "ok"
        try:
            payload: Any = json.loads(text_of(result))
        except ValueError:
            payload = text_of(result)
        r.mcp.append((tool, args, outcome, payload, sent, time.monotonic()))
        return True, payload if outcome == "ok" else None

    async def through(server: int) -> None:
        k = server * 1000
        while not r.stop.is_set():
            connected = time.monotonic()
            try:
                async with http_client(audit.urls[server], headers) as client:
                    while not r.stop.is_set():
                        k += 1
                        if not await batch(client, server, k, connected):
                            break
            except Exception as exc:  # connecting failed: its server is down
                r.mcp.append(("connect", {}, "broke", f"server {server}: {exc!r}",
                              connected, time.monotonic()))
            await anyio.sleep(0.2)

    async def batch(client: Any, server: int, k: int, connected: float) -> bool:
        runs = [a.data["id"] for a in r.runs[-4:] if a.status == 201]
        calls: list[tuple[str, dict[str, Any]]] = [
            ("remember_memory", {"scope": r.scope, "text": f"mcp note {k}", "acl": ["*"]}),
            ("remember_memory", {"scope": r.scope, "text": f"shared mcp note {k // 2}",
                                 "acl": ["*"]}),
            ("remember_memory", {"scope": r.scope, "acl": ["*"],  # a REST writer's note
                                 "text": max(r.shared, default="shared none")}),
            ("close_memory", {"scope": r.scope, "entity": "acme", "predicate": "budget",
                              "reason": f"mcp close {k}"}),
            ("branch_memory", {"scope": r.scope, "name": f"b{r.number}-{k % 1000}"}),
            ("merge_memory", {"scope": r.scope, "source": f"b{r.number}-{k % 1000}"}),
            ("amp_remember", {"content": f"mcp cell {k}", "owner_id": "crash_owner",
                              "type": "semantic"}),
        ]
        if runs:
            calls.append(("reward_run", {"run": runs[-1], "reward": 1.0, "reason": f"mcp {k}"}))
        answers = await asyncio.gather(*(one(client, server, connected, tool, args)
                                         for tool, args in calls))
        audit.mcp_calls += len(calls)
        made = [p for (tool, _), (_, p) in zip(calls, answers, strict=True)
                if tool == "amp_remember" and isinstance(p, str) and "mem_" in p]
        for text in made[:1]:  # the cell this batch made, forgotten through the same server
            audit.mcp_calls += 1
            answers.append(await one(client, server, connected, "amp_forget", {
                "memory_id": "mem_" + text.split("mem_", 1)[1].split()[0].strip("."),
                "owner_id": "crash_owner"}))
        answered = [went for went, _ in answers]
        return all(answered)

    async with anyio.create_task_group() as tasks:
        for server in range(len(audit.urls)):
            tasks.start_soon(through, server)


def run_mcp(audit: CrashAudit, r: Round, headers: dict[str, str]) -> None:
    try:
        asyncio.run(mcp_writers(audit, r, headers))
    except Exception as exc:
        audit.find("MCP client failed", f"{type(exc).__name__}: {exc}"[:500])


# ---------------------------------------------------------------- checks


def ack(a: Answer) -> bool:
    return a.ok()


def check_round(audit: CrashAudit, r: Round, procs: list[ServerProcess]) -> None:
    n = len(audit.urls)
    # Requests to servers that were not down were answered.
    for s in audit.log:
        a = s.answer
        if a.status == "cut" and not audit.was_down(s.server, a.sent, a.done):
            audit.find("a server that was not killed stopped answering",
                       f"server {s.server}: {a.shown()} -> {a.text[:200]}")
    # MCP answers are tool results.
    for tool, args, outcome, payload, sent, done in r.mcp:
        text = json.dumps(payload) if not isinstance(payload, str) else payload
        if outcome == "json-rpc error":
            audit.find("MCP answered a JSON-RPC error", f"{tool} {json.dumps(args)}: {text}")
        elif outcome in ("broke", "cut") and not audit.was_down(int(text.split()[1].rstrip(":")),
                                                       sent, done):
            audit.find("MCP call broke", f"{tool} {json.dumps(args)}: {text[:300]}")
        elif INTERNAL in text or "Traceback" in text:
            audit.find("MCP answered an unexpected error", f"{tool} {json.dumps(args)}: "
                                                           f"{text[:300]}")
    commits = check_chain(audit, r.scope)
    in_ledger = {c["id"] for c in commits}
    branch_commits = set()
    for b in audit.ok(Call("GET", "/branches", "/branches", params={"scope": r.scope})
                      )["branches"]:
        if b["name"] != "main":
            branch_commits |= {c["id"] for c in check_chain(audit, r.scope, b["name"])}

    def episode_there(ep: str, server: int) -> bool:
        got = audit.send(Call("GET", "/episodes/{episode_id}", f"/episodes/{ep}",
                              params={"scope": r.scope}), server)
        return got.status == 200

    # Episodes: each acknowledged one readable through every server, its commit in the
    # ledger (a 200 repeat names the first one's commit).
    for a in r.episodes + [a for group in r.shared.values() for a in group]:
        if not ack(a):
            continue
        audit.count("acknowledged episodes")
        audit.expect(a.data["commit"] in in_ledger, "acknowledged episode's commit missing",
                     f"{a.data['id']} commit {a.data['commit']}")
        for server in range(n):
            audit.expect(episode_there(a.data["id"], server), "acknowledged episode missing",
                         f"server {server}: {a.data['id']}")
    for key, group in r.shared.items():
        ids = {a.data["id"] for a in group if ack(a)} | {
            p["id"] for (tool, args, out, p, _, _) in r.mcp
            if tool == "remember_memory" and out == "ok" and args["text"] == key}
        if any(tool == "remember_memory" and args["text"] == key
               for (tool, args, *_) in r.mcp):
            audit.count("notes sent through REST and MCP")
        audit.expect(len(ids) <= 1, "one body became several episodes", f"{key}: {ids}")
    # Facts: every acknowledged one in the ledger; the newest commit's value current; no
    # listed fact without its episode or its commit.
    acked = {a.data["commit"]: a.body["value"] for a in r.facts if ack(a)}
    audit.count("acknowledged facts", len(acked))
    missing = [c for c in acked if c not in in_ledger]
    audit.expect(not missing, "acknowledged fact's commit missing from the ledger",
                 f"{len(missing)} of {len(acked)}")
    cut_values = {a.body["value"] for a in r.facts if a.status == "cut"}
    mcp_closes = [c for (tool, _, out, p, _, _) in r.mcp if tool == "close_memory"
                  and out == "ok" and isinstance(p, dict) for c in [p.get("commit")] if c]
    unknown_closes = sum(tool == "close_memory" and out in ("cut", "broke")
                         for (tool, _, out, *_) in r.mcp)  # may have landed
    unknown_close = unknown_closes > 0
    closures = [c["id"] for c in commits if c["changes"].get("closures")]
    audit.expect(len(closures) <= len(mcp_closes) + unknown_closes,
                 "a refused close was applied", f"{len(closures)} closure commits, "
                 f"{len(mcp_closes)} closes acknowledged, {unknown_closes} cut")
    newest = next((c["id"] for c in commits
                   if c["id"] in acked or c["id"] in mcp_closes), None)
    for server in range(n):
        listed = facts(audit, r.scope, "acme", server)
        values = [f["value"] for f in listed if f["predicate"] == "budget"]
        if mcp_closes or unknown_close:  # a closure holds against later facts of an
            # older valid_from (the facts here take the episode's)
            audit.expect(len(values) <= 1 and set(values) <= set(acked.values()) | cut_values,
                         "current value was never acknowledged", f"server {server}: {values}")
        elif newest in acked:
            audit.expect(values == [acked[newest]]
                         or (len(values) == 1 and values[0] in cut_values),
                         "newest acknowledged fact is not current",
                         f"server {server}: current {values}, newest commit's {acked[newest]!r}"
                         f"; closures in the ledger {closures}")
    for entity, versions in r.own.items():
        last = max((i for i, a in enumerate(versions) if ack(a)), default=None)
        if last is None:
            continue
        maybe = {versions[last].body["value"]} | {
            a.body["value"] for a in versions[last + 1:] if a.status == "cut"}
        for server in range(n):
            values = [f["value"] for f in facts(audit, r.scope, entity, server)]
            audit.expect(len(values) == 1 and values[0] in maybe, "last acknowledged fact lost",
                         f"server {server}: {entity} {values}, last acknowledged "
                         f"{versions[last].body['value']!r}")
    seen_eps: set[str] = set()
    for entity in ["acme", *r.own, *(e for _, e in r.merges)]:
        for f in facts(audit, r.scope, entity, history="true"):
            audit.expect(f["value"] not in r.refused_values, "refused fact applied",
                         f"{f['id']}: {f['value']!r}")
            audit.expect(f["commit"] in in_ledger | branch_commits,
                         "listed fact's commit is not in the ledger",
                         f"{f['id']} commit {f['commit']}")
            for cite in f["cites"]:
                if cite["episode"] not in seen_eps:
                    seen_eps.add(cite["episode"])
                    audit.expect(episode_there(cite["episode"], 0), "fact without its episode",
                                 f"{f['id']} cites {cite['episode']}")
    whole_commits(audit, r, commits)
    # Merges: an acknowledged merge's fact is on main.
    for m, entity in r.merges:
        if ack(m) and m.data.get("merged", True):
            values = facts(audit, r.scope, entity)
            audit.expect(bool(values), "merged fact missing from main", f"{entity}: {m.text[:200]}")
    names = [a for a in r.branches if a.status == 201]
    audit.expect(len({a.body["name"] for a in names}) == len(names),
                 "one branch name created twice", str(counts(r.branches)))
    # Pins, runs, rewards.
    for p in r.pins:
        if ack(p):
            got = audit.send(Call("GET", "/pin/{pin_id}", f"/pin/{p.data['id']}"))
            audit.expect(got.status == 200, "acknowledged pin missing",
                         f"{p.data['id']}: {got.status}")
    kept: dict[str, set[str]] = {}
    for run in r.runs:
        if ack(run):
            got = audit.send(Call("GET", "/runs/{run_id}", f"/runs/{run.data['id']}"))
            if audit.expect(got.status == 200, "acknowledged run missing", run.data["id"]):
                kept[run.data["id"]] = {w["reason"] for w in got.data["rewards"]}
    for w in r.rewards:
        run_id = w.body["run"]
        if run_id not in kept:
            continue
        if ack(w):
            audit.expect(w.body["reason"] in kept[run_id], "acknowledged reward missing",
                         f"{run_id}: {w.body['reason']}")
        elif w.status != "cut":
            audit.expect(w.body["reason"] not in kept[run_id], "refused reward kept",
                         f"{run_id}: {w.body['reason']} ({w.status})")
    # AMP cells: the last acknowledged text stays unless a later write's outcome is unknown.
    for cell, writes in r.cells.items():
        d = r.deleted.get(cell)
        if d is not None and d.status == 204:
            for server in range(n):
                got = audit.send(Call("GET", "/amp/v1/memories/{memory_id}",
                                      f"/amp/v1/memories/{cell}"), server)
                audit.expect(got.status in (403, 404), "deleted cell readable",
                             f"server {server}: {cell} {got.status}")
            continue
        audit.count("acknowledged cells")
        texts = [(t, a) for t, a in writes if t]
        last = max((i for i, (_, a) in enumerate(texts) if ack(a)), default=None)
        if last is None:
            continue
        maybe = {texts[last][0]} | {t for t, a in texts[last + 1:] if a.status == "cut"}
        for server in range(n):
            got = audit.send(Call("GET", "/amp/v1/memories/{memory_id}",
                                  f"/amp/v1/memories/{cell}"), server)
            if d is not None and d.status == "cut" and got.status in (403, 404):
                continue
            if not audit.expect(got.status == 200, "acknowledged cell missing",
                                f"server {server}: {cell} {got.status}"):
                continue
            text = got.data["content"]["text"]
            audit.expect(text in maybe, "last acknowledged cell text lost",
                         f"server {server}: {cell} {text!r}, last acknowledged "
                         f"{texts[last][0]!r}")
            audit.expect(text not in r.refused_texts, "refused PATCH applied", f"{cell}")
    check_mcp_writes(audit, r, in_ledger, kept)
    # Every server: every GET route answers below 500, and a lifecycle pass runs.
    for server in range(n):
        sweep(audit, r, server)
        a = audit.send(Call("POST", "/amp/v1/lifecycle/run", "/amp/v1/lifecycle/run",
                            {"dry_run": False}, headers=ADMIN), server)
        audit.expect(a.status == 200, "lifecycle pass refused after the restart",
                     f"server {server}: {a.status} {a.text[:200]}")
    del procs


def whole_commits(audit: CrashAudit, r: Round, commits: list[dict[str, Any]]) -> None:
    """No half-written commit is visible, whoever wrote it (acknowledged, refused or cut
    by the kill): every listed episode's commit is in the ledger, and every commit of
    main that counts episodes or facts (a merge aside) shows them, through every server."""
    in_ledger = {c["id"]: c for c in commits}
    fact_commits: set[str] = set()
    for entity in ["acme", *r.own]:
        fact_commits |= {f["commit"] for f in facts(audit, r.scope, entity, history="true")}
    for server in range(len(audit.urls)):
        listed: list[dict[str, Any]] = []
        after: str | None = None
        while True:
            params = {"scope": r.scope, "limit": "1000", **({"after": after} if after else {})}
            page = audit.ok(Call("GET", "/episodes", "/episodes", params=params), server)
            listed += page["episodes"]
            after = page.get("next_after")
            if not after:
                break
        with_episodes = {e["commit"] for e in listed}
        audit.count("listed episodes", len(listed))
        audit.count("ledger commits (kinds " + ",".join(sorted({c["kind"] for c in commits}))
                    + ")", len(commits))
        for e in listed:
            audit.expect(e["commit"] in in_ledger, "episode without its ledger row",
                         f"server {server}: {e['id']} commit {e['commit']}")
        for c in commits:
            if c["kind"] != "commit":
                continue
            if c["changes"].get("episodes") and c["id"] not in with_episodes:
                audit.find("ledger row without its episodes",
                           f"server {server}: {c['id']} {c['message']!r} {c['changes']}")
            if (server == 0 and c["changes"].get("facts") and not c["changes"].get("closures")
                    and c["id"] not in fact_commits):
                audit.find("ledger row without its facts", f"{c['id']} {c['message']!r} "
                                                          f"{c['changes']}")


def check_mcp_writes(audit: CrashAudit, r: Round, in_ledger: set[str],
                     kept: dict[str, set[str]]) -> None:
    """What MCP acknowledged is there too: its episodes (one per note), closes, merges and
    rewards in the ledger, its branches listed, its AMP cells readable unless forgotten."""
    notes: dict[str, set[str]] = {}
    forgotten = {a["memory_id"] for (tool, a, out, _, _, _) in r.mcp if tool == "amp_forget"}
    branches = {b["name"] for b in audit.ok(Call("GET", "/branches", "/branches",
                                                 params={"scope": r.scope}))["branches"]}
    for tool, args, out, p, sent, done in r.mcp:
        if tool == "amp_forget" and out == "error":  # its own cell, which nobody else moves
            got = audit.send(Call("GET", "/amp/v1/memories/{memory_id}",
                                  f"/amp/v1/memories/{args['memory_id']}"))
            audit.find("MCP forget of its own cell refused",
                       f"{args['memory_id']}: {p!r} ({done - sent:.1f} s); now "
                       f"{got.status} {json.dumps((got.data or {}).get('lifecycle'))}")
        if out != "ok":
            continue
        audit.count("acknowledged MCP writes")
        if tool in ("remember_memory", "close_memory", "merge_memory", "reward_run"):
            commit = p.get("commit") if isinstance(p, dict) else None
            if tool == "merge_memory" and isinstance(p, dict) and not p.get("merged"):
                continue  # nothing to merge: no commit
            audit.expect(commit in in_ledger, f"MCP {tool}'s commit missing from the ledger",
                         json.dumps(p)[:300])
        if tool == "remember_memory" and isinstance(p, dict):
            notes.setdefault(args["text"], set()).add(p["id"])
            got = audit.send(Call("GET", "/episodes/{episode_id}", f"/episodes/{p['id']}",
                                  params={"scope": r.scope}))
            audit.expect(got.status == 200, "MCP episode missing", f"{p['id']}: {got.status}")
        elif tool == "branch_memory":
            audit.expect(args["name"] in branches, "MCP branch missing", args["name"])
        elif tool == "reward_run" and args["run"] in kept:
            audit.expect(args["reason"] in kept[args["run"]], "MCP reward missing",
                         f"{args['run']}: {args['reason']}")
        elif tool == "amp_remember" and isinstance(p, str) and "mem_" in p:
            cell = "mem_" + p.split("mem_", 1)[1].split()[0].strip(".\"")
            if cell in forgotten:
                continue
            got = audit.send(Call("GET", "/amp/v1/memories/{memory_id}",
                                  f"/amp/v1/memories/{cell}"))
            audit.expect(got.status == 200, "MCP cell missing", f"{cell}: {got.status}")
    for text, ids in notes.items():
        audit.expect(len(ids) == 1, "one MCP note became several episodes", f"{text}: {ids}")


def sweep(audit: CrashAudit, r: Round, server: int) -> None:
    """Every GET route of the spec, its ids filled in from this round's writes."""
    org, team = r.scope.split("/")
    first = {
        "memory_id": next(iter(r.cells), "mem_x"), "episode_id": r.ep,
        "pin_id": next((a.data["id"] for a in r.pins if ack(a)), "pin_x"),
        "run_id": next((a.data["id"] for a in r.runs if ack(a)), "run_x"),
        "session_id": "ses_x", "snapshot_id": "snap_x", "workspace_id": "ws_x",
        "user": "race.user", "org": org, "team": team,
    }
    for template, ops in audit.spec["paths"].items():
        if "get" not in ops:
            continue
        path = template
        for k, v in first.items():
            path = path.replace("{" + k + "}", v)
        params = {"scope": r.scope} if any(p.get("name") == "scope" for p in
                                           ops["get"].get("parameters", [])) else None
        headers = ADMIN if "lifecycle" in template else None
        audit.send(Call("GET", template, path, params=params, headers=headers), server)


# ---------------------------------------------------------------- driver


def one_round(audit: CrashAudit, procs: list[ServerProcess], number: int, kill: bool,
              headers: dict[str, str], rng: random.Random, log: Callable[[str], None]) -> None:
    scope = new_scope()
    quote = "Acme budget changed."
    r = Round(scope, quote, episode(audit, scope, quote), number)
    audit.log = []
    for i in range(LIFECYCLE_CELLS // 3 if number else LIFECYCLE_CELLS):
        amp_create(audit, f"fading {number}-{i}", scoring={"importance": 0.1})
    n = len(procs)
    victim = number % n
    threads = [threading.Thread(target=w, args=(audit, r, t)) for t, w in enumerate(WRITERS)]
    threads.append(threading.Thread(target=run_mcp, args=(audit, r, headers)))
    for t in threads:
        t.start()
    if kill:
        time.sleep(rng.uniform(0.3, 4.0))
        killed = time.monotonic()
        procs[victim].kill()
        audit.kills += 1
        time.sleep(rng.uniform(0.0, 1.0))
        port = procs[victim].port
        procs[victim].start(timeout=180)
        if procs[victim].port != port:  # its port was taken meanwhile
            audit.clients[victim].close()
            audit.urls[victim] = procs[victim].url
            audit.clients[victim] = audit.connect(procs[victim].url)
        up = time.monotonic()
        audit.down.setdefault(victim, []).append((killed, up))
        log(f"  round {number}: server {victim} killed after {killed - r_started(audit):.1f} s,"
            f" answering again {up - killed:.1f} s later")
        time.sleep(rng.uniform(1.0, 3.0))
    else:
        time.sleep(8.0)
    r.stop.set()
    for t in threads:
        t.join()
    log(f"  round {number}: {len(audit.log)} writes ({counts([s.answer for s in audit.log])}),"
        f" MCP {mcp_tally(r)}")
    if kill:  # how the others served while one was down
        meanwhile = [s.answer for s in audit.log if s.server != victim
                     and killed <= s.answer.sent <= up]
        slowest = max((a.done - a.sent for a in meanwhile), default=0.0)
        audit.count("requests to the others while one was down", len(meanwhile))
        log(f"  round {number}: while server {victim} was down the others answered "
            f"{counts(meanwhile)}, slowest {slowest:.2f} s")
    for key, text in r.samples.items():
        audit.samples.setdefault(key, text)
    check_round(audit, r, procs)


def mcp_tally(r: Round) -> dict[str, int]:
    out: dict[str, int] = {}
    for tool, _, outcome, payload, *_ in r.mcp:
        out[f"{tool} {outcome}"] = out.get(f"{tool} {outcome}", 0) + 1
        r.samples.setdefault(f"{tool} {outcome}", json.dumps(payload)[:300])
    return out


def r_started(audit: CrashAudit) -> float:
    return min((s.answer.sent for s in audit.log), default=time.monotonic())


def audit_one(config: str, pg: PostgresFactory | None, rounds: int, seed: int,
              log: Callable[[str], None]) -> CrashAudit:
    home = Path(tempfile.mkdtemp(prefix=f"crash-{config}-"))
    rng = random.Random(seed)
    with serving(config, home, pg) as (procs, headers, env):
        spec = httpx.get(f"{procs[0].url}/openapi.json").json()
        audit = CrashAudit(config, [p.url for p in procs], spec, headers, 16)
        audit.clients = [audit.connect(p.url) for p in procs]
        for number in range(rounds + 1):
            audit.scenario = f"round {number}" + (" (kill)" if number else " (MCP, no kill)")
            started = time.monotonic()
            audit.guarded(partial(one_round, audit, procs, number, number > 0, headers, rng,
                                  log), "round")
            log(f"{config} {audit.scenario}: {time.monotonic() - started:.0f} s, "
                f"{len(audit.findings)} findings so far")
        audit.finish(procs)
    return audit


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--configs", default="sqlite,postgres-2,postgres-3")
    parser.add_argument("--rounds", type=int, default=3, help="rounds with a kill")
    parser.add_argument("--seed", type=int, default=28)
    parser.add_argument("--out", type=Path, default=Path("crash-report"))
    args = parser.parse_args(argv)
    args.out = args.out.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    configs = configs_of(args.configs)
    began = time.monotonic()
    findings: list[Finding] = []
    sent = mcp = kills = 0
    samples: dict[str, dict[str, str]] = {}
    notes: dict[str, Any] = {}
    with ExitStack() as stack:
        pg = (stack.enter_context(postgres_factory())
              if any(c.startswith("postgres") for c in configs) else None)
        for config in configs:
            audit = audit_one(config, pg, args.rounds, args.seed,
                              lambda line: print(line, flush=True))
            findings += audit.findings
            sent, mcp, kills = sent + audit.sent, mcp + audit.mcp_calls, kills + audit.kills
            samples[config] = audit.samples
            notes[config] = audit.notes  # documented 503s with Retry-After (race_audit.busy)
            print(f"{config} checked: {json.dumps(audit.checked)}", flush=True)
    (args.out / "mcp-answers.json").write_text(json.dumps(samples, indent=1, sort_keys=True))
    (args.out / "notes.json").write_text(json.dumps(notes, indent=1, sort_keys=True))
    found = report_findings(args.out, findings)
    print(f"{found} findings, {sent} requests, {mcp} MCP calls, {kills} kills, "
          f"{time.monotonic() - began:.0f} s, {load_text()} ({', '.join(configs)}, "
          f"{args.rounds} kill rounds)")
    return 1 if found else 0


if __name__ == "__main__":
    import sys

    sys.exit(main())
