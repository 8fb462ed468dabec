"""Audit what conflicting requests sent at the same moment do, as an outside checker would:
over real HTTP, against real servers on SQLite, on PostgreSQL, and two servers sharing one
PostgreSQL store (catalog, index, cell store and warehouse), API keys on. A config ending
``-s3`` (``postgres-2-s3``) keeps the tables in a bucket of a real S3-compatible server
(moto, as the tests start it) instead of a local folder.

    PYTHONPATH=src:. python tools/race_audit.py [--configs sqlite,postgres,postgres-2]
                                               [--width 16] [--rounds 3] [--out DIR]

Each scenario fires ``--width`` requests at once (threads released by one barrier; with two
servers, alternately to each) and repeats ``--rounds`` times, then checks its invariants
(docs/testing.md, "The race audit"):

- AMP cells: PATCHes holding one ``If-Match`` (one 200, the rest 412, the winner's text
  stored), PATCH against DELETE, DELETE against DELETE and a tagged PATCH against a tagged
  DELETE of an archived cell (one lands; the cell gone after), creates that send one
  ``id`` (ignored: distinct server ids), search during deletes (no cell whose DELETE had
  returned before the search was sent), scoring PATCHes past the budget (exactly 5 land),
  manual lifecycle passes at once, a pass racing archiving PATCHes (never undone).
- AmpUp: one episode by many (one 201, the rest 200 with its commit; other ACLs 409),
  batches sharing episodes (each created once), facts of one one-valued attribute (the
  newest commit wins, every 201 in one ledger chain), closes of one value (one 201, the
  rest 404), closes during writes (newest version wins), one branch name (one 201, the
  rest 409 ``BRANCH_EXISTS``), merges at once (one merge commit), merges during writes,
  a merge against conflicting writes (409 ``MERGE_CONFLICT`` or committed first), a
  schema change during writes, writes past a workspace cap, pins and snapshots during
  writes (each holds every write that returned before it was sent; a pinned read, search
  and passages included, never changes), each writer reading its write back through the
  other server (facts, ledger, search, listings), a workspace deleted during writes and
  snapshots of it, renewed while deleted, a branch deleted during writes, merges into it
  and children of it, and while pins, snapshots and children are taken of it; ``If-Match``
  writes of an ACL and a principal and ``If-None-Match: *`` of a schema (one lands); an
  ACL, a user's groups and a cell's policy narrowed while another caller reads (nothing
  shown after the change returned); pins and snapshots released during renewals and reads.
- Advice: rewards of one run (each 201 kept, the current one the newest commit's), ends of
  one session (one 200, the rest 409 ``SESSION_ENDED``), rewards of a session racing its
  end (201 only after it), runs recorded at once (all kept).
- Keys: ``keys revoke`` while requests use the key (none sent after it returned succeeds).

Every answer must be a status its operation documents, below 500, an error in the
project's envelope, within 60 s; a documented 503 ``UNAVAILABLE`` with ``Retry-After`` (see
`busy`) is counted in ``DIR/notes.json`` instead. Findings go to ``DIR/findings.json`` (what
each scenario's requests answered, counted, to ``DIR/answers.json``) and the exit code is 1
when there are any.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.pg import PostgresFactory, postgres_factory  # noqa: E402
from tests.s3 import S3Server  # noqa: E402
from tests.server_process import ServerProcess, plain_client, start_together  # noqa: E402

ADMIN_TOKEN = "race-admin-token"
USER, AGENT = "race.user", "race_agent"
OTHER, OTHER_AGENT = "race.other", "race_other"
QUIET = {"AMP_ADMIN_TOKEN": ADMIN_TOKEN, "AMP_EMBEDDING_PROVIDER": "hash",
         "AMP_LIFECYCLE_ENABLED": "false", "AMPUP_MEMORY_MAINTENANCE_INTERVAL_SECONDS": "0",
         "AMP_SCORING_PATCH_LIMIT": "5", "AMP_REQUIRE_KEYS": "1"}
TIME_LIMIT = 60.0


@dataclass
class Finding:
    config: str
    scenario: str
    kind: str
    detail: str


@dataclass
class Answer:
    """One request of a race: what was sent, when, and what came back."""

    method: str
    path: str
    template: str
    body: Any
    sent: float
    done: float = 0.0
    status: int | str = "-"
    data: Any = None
    text: str = ""
    retry_after: str | None = None  # its Retry-After header

    def ok(self) -> bool:
        return isinstance(self.status, int) and 200 <= self.status < 300

    def code(self) -> str | None:
        if isinstance(self.data, dict) and isinstance(self.data.get("error"), dict):
            return str(self.data["error"].get("code"))
        return None

    def shown(self) -> str:
        return f"{self.method} {self.path} {json.dumps(self.body)[:160] if self.body else ''}"


def busy(a: Answer, documented: set[str]) -> bool:
    """A documented "try again shortly" (docs/api.md, Errors): a 503 its operation lists,
    in the envelope as ``UNAVAILABLE``, with a ``Retry-After`` of whole seconds (a busy
    store, a lifecycle pass held by another, a full reranker line). A note, not a finding;
    a 503 without any of these stays one."""
    return (a.status == 503 and "503" in documented and a.code() == "UNAVAILABLE"
            and a.retry_after is not None and a.retry_after.strip().isdigit())


@dataclass
class Call:
    method: str
    template: str  # the documented operation's path
    path: str
    body: Any = None
    params: dict[str, str] | None = None
    headers: dict[str, str] | None = None


@dataclass
class Audit:
    config: str
    urls: list[str]
    spec: dict[str, Any]
    headers: dict[str, str]
    width: int
    other: dict[str, str] = field(default_factory=dict)  # a second caller's headers
    findings: list[Finding] = field(default_factory=list)
    sent: int = 0
    scenario: str = ""
    clients: list[httpx.Client] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    # scenario -> "METHOD template -> status [code]" -> count: what the races answered
    seen: dict[str, dict[str, int]] = field(default_factory=dict)
    # "scenario: METHOD template -> 503 UNAVAILABLE" -> count and one answer: the
    # documented "try again shortly" answers (see `busy`), noted, not findings
    notes: dict[str, dict[str, Any]] = field(default_factory=dict)

    def find(self, kind: str, detail: str) -> None:
        with self.lock:
            self.findings.append(Finding(self.config, self.scenario, kind, detail[:600]))

    def guarded(self, job: Callable[[], None], what: str, where: str = "") -> None:
        """Run ``job``; a set-up that failed or a crash of ``what`` (its detail starting
        with ``where``) is a finding, and the audit goes on."""
        try:
            job()
        except Skip as exc:
            self.find("set-up failed", str(exc))
        except Exception as exc:  # the audit goes on; the failure is a finding
            self.find(f"{what} crashed", f"{where}{type(exc).__name__}: {exc}")

    def connect(self, url: str) -> httpx.Client:
        """A client of the server at ``url``, room for every request of a race at once."""
        limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
        return plain_client(base_url=url, timeout=TIME_LIMIT + 30, limits=limits)

    def finish(self, procs: list[ServerProcess]) -> None:
        """Close the clients; the first traceback or unhandled error each server logged
        is a finding."""
        for c in self.clients:
            c.close()
        for p in procs:
            for line in p.log_path.read_text(errors="replace").splitlines():
                if "Traceback" in line or "unhandled error" in line:
                    self.scenario = "server log"
                    self.find("server logged an error", f"{p.log_path.name}: {line}")
                    break

    def expect(self, cond: bool, kind: str, detail: str) -> bool:
        if not cond:
            self.find(kind, detail)
        return cond

    # -- sending -------------------------------------------------------------------------
    def send(self, call: Call, server: int = 0) -> Answer:
        """One request, judged: a documented status, below 500, the error envelope."""
        client = self.clients[server % len(self.clients)]
        answer = Answer(call.method, call.path, call.template, call.body, time.monotonic())
        with self.lock:
            self.sent += 1
        try:
            r = client.request(call.method, call.path, json=call.body, params=call.params,
                               headers={**self.headers, **(call.headers or {})})
        except httpx.TimeoutException:
            answer.done = time.monotonic()
            answer.status = "timeout"
            self.find("no answer within 60 s", answer.shown())
            return answer
        answer.done = time.monotonic()
        answer.status, answer.text = r.status_code, r.text
        answer.retry_after = r.headers.get("retry-after")
        try:
            answer.data = r.json() if r.content else None
        except ValueError:
            answer.data = None
        self.judge(answer)
        key = f"{call.method} {call.template} -> {answer.status}" + (
            f" {answer.code()}" if answer.code() else "")
        with self.lock:
            tally = self.seen.setdefault(self.scenario, {})
            tally[key] = tally.get(key, 0) + 1
        return answer

    def judge(self, a: Answer) -> None:
        status = a.status
        assert isinstance(status, int)
        op = self.spec["paths"].get(a.template, {}).get(a.method.lower(), {})
        documented = set(op.get("responses", {}))
        if busy(a, documented):
            self.note(a)
        elif status >= 500:
            self.find(f"server error {status}", f"{a.shown()} -> {a.text[:300]}")
        elif str(status) not in documented:
            self.find("undocumented status", f"{a.shown()} -> {status} {a.text[:300]}")
        if "Traceback" in a.text:
            self.find("traceback in answer", f"{a.shown()} -> {a.text[:300]}")
        if status >= 400 and a.code() is None:
            self.find("error without the envelope", f"{a.shown()} -> {status} {a.text[:300]}")
        if a.done - a.sent > TIME_LIMIT:
            self.find("slow answer", f"{a.shown()} took {a.done - a.sent:.0f} s")

    def note(self, a: Answer) -> None:
        key = f"{self.scenario}: {a.method} {a.template} -> {a.status} {a.code()}"
        with self.lock:
            entry = self.notes.setdefault(key, {"count": 0, "example": f"{a.shown()} -> "
                                                f"Retry-After {a.retry_after} {a.text[:300]}"})
            entry["count"] += 1

    def race(self, calls: list[Call]) -> list[Answer]:
        """All at once: each call on its own thread, released together; call i goes to
        server i mod the number of servers."""
        barrier = threading.Barrier(len(calls))

        def one(i: int) -> Answer:
            barrier.wait()
            return self.send(calls[i], server=i)

        with ThreadPoolExecutor(len(calls)) as pool:
            return list(pool.map(one, range(len(calls))))

    def ok(self, call: Call, server: int = 0) -> Any:
        """A set-up request that must succeed (a failure is a finding and stops the round)."""
        a = self.send(call, server)
        if not a.ok():
            raise Skip(f"set-up {a.shown()} -> {a.status} {a.text[:300]}")
        return a.data


class Skip(Exception):
    """A set-up step failed: the scenario's round cannot be judged."""


def counts(answers: list[Answer]) -> dict[str, int]:
    out: dict[str, int] = {}
    for a in answers:
        key = f"{a.status}" + (f" {a.code()}" if a.code() else "")
        out[key] = out.get(key, 0) + 1
    return out


# ---------------------------------------------------------------- helpers


def amp_create(audit: Audit, text: str, **extra: Any) -> dict[str, Any]:
    body = {"type": "semantic", "content": {"text": text},
            "identity": {"owner_id": AGENT, "owner_type": "agent"}, **extra}
    return dict(audit.ok(Call("POST", "/amp/v1/memories", "/amp/v1/memories", body)))


def amp_patch(cell: str, body: Any, if_match: str | None = None) -> Call:
    return Call("PATCH", "/amp/v1/memories/{memory_id}", f"/amp/v1/memories/{cell}", body,
                headers={"If-Match": if_match} if if_match else None)


def amp_delete(cell: str) -> Call:
    return Call("DELETE", "/amp/v1/memories/{memory_id}", f"/amp/v1/memories/{cell}")


def amp_archived(audit: Audit, text: str) -> str:
    cell = amp_create(audit, text)["id"]
    audit.ok(amp_patch(cell, {"lifecycle": {"status": "archived"}}))
    return str(cell)


def new_scope() -> str:
    return f"r{uuid.uuid4().hex[:10]}/team"


def episode(audit: Audit, scope: str, text: str, branch: str | None = None) -> str:
    body: dict[str, Any] = {"scope": scope, "source": f"slack:C1:{uuid.uuid4().hex[:8]}",
                            "body": text, "acl": ["*"]}
    if branch:
        body["branch"] = branch
    return str(audit.ok(Call("POST", "/episodes", "/episodes", body))["id"])


def fact_call(scope: str, ep: str, quote: str, entity: str, predicate: str, value: Any,
              branch: str | None = None, **extra: Any) -> Call:
    body = {"scope": scope, "entity": entity, "predicate": predicate, "value": value,
            "quote": quote, "cites": [{"episode": ep, "unit": 1}], **extra}
    if branch:
        body["branch"] = branch
    return Call("POST", "/facts", "/facts", body)


def ledger(audit: Audit, scope: str, branch: str = "main", server: int = 0,
           **params: str) -> list[dict[str, Any]]:
    query = {"scope": scope, "limit": "1000", **params}
    if "pin" not in params:  # a pin holds one branch: leave branch out
        query["branch"] = branch
    data = audit.ok(Call("GET", "/ledger", "/ledger", params=query), server)
    return list(data["commits"])


def check_chain(audit: Audit, scope: str, branch: str = "main") -> list[dict[str, Any]]:
    """The branch's ledger is one chain (each commit's parent the next older one, ``seq``
    one apart), identical through every server."""
    commits = ledger(audit, scope, branch)
    for newer, older in zip(commits, commits[1:], strict=False):
        if newer["parent"] != older["id"] or newer["seq"] != older["seq"] + 1:
            audit.find("ledger is not one chain",
                       f"{scope}@{branch}: {newer['id']} (seq {newer['seq']}, parent "
                       f"{newer['parent']}) after {older['id']} (seq {older['seq']})")
            break
    for server in range(1, len(audit.urls)):
        if ledger(audit, scope, branch, server) != commits:
            audit.find("servers disagree on the ledger", f"{scope}@{branch}")
    return commits


def facts(audit: Audit, scope: str, entity: str, server: int = 0,
          **params: str) -> list[dict[str, Any]]:
    data = audit.ok(Call("GET", "/facts", "/facts",
                         params={"scope": scope, "entity": entity, **params}), server)
    return list(data["facts"])


def current(audit: Audit, scope: str, entity: str, predicate: str, **params: str) -> Any:
    values = [f["value"] for f in facts(audit, scope, entity, **params)
              if f["predicate"] == predicate]
    return values[0] if len(values) == 1 else (None if not values else values)


def instant(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


# ---------------------------------------------------------------- AMP cells


def amp_if_match(audit: Audit) -> None:
    cell = amp_create(audit, "if-match race")["id"]
    got = audit.send(Call("GET", "/amp/v1/memories/{memory_id}", f"/amp/v1/memories/{cell}"))
    tag = audit.clients[0].get(f"/amp/v1/memories/{cell}", headers=audit.headers).headers[
        "etag"]
    answers = audit.race([amp_patch(cell, {"content": {"text": f"writer {i}"}}, tag)
                          for i in range(audit.width)])
    won = [a for a in answers if a.status == 200]
    lost = [a for a in answers if a.status == 412]
    audit.expect(len(won) == 1 and len(lost) == audit.width - 1, "If-Match: not one winner",
                 f"{cell}: {counts(answers)}")
    final = audit.ok(Call("GET", "/amp/v1/memories/{memory_id}", f"/amp/v1/memories/{cell}"))
    if won:
        audit.expect(final["content"]["text"] == won[0].body["content"]["text"],
                     "If-Match: stored text is not the winner's",
                     f"{cell}: stored {final['content']['text']!r}, 200 for "
                     f"{[a.body['content']['text'] for a in won]}")
    del got


def amp_patch_delete(audit: Audit) -> None:
    cell = amp_archived(audit, "patch against delete")
    half = audit.width // 2
    calls = [amp_delete(cell) if i % 2 else
             amp_patch(cell, {"content": {"metadata": {"n": i}}}) for i in range(audit.width)]
    answers = audit.race(calls)
    deletes = [a for a in answers if a.method == "DELETE"]
    patches = [a for a in answers if a.method == "PATCH"]
    audit.expect(sorted(a.status for a in deletes) == [204] + [403] * (len(deletes) - 1),
                 "DELETE race: not one 204 and the rest 403", f"{cell}: {counts(deletes)}")
    audit.expect(all(a.status in (200, 403) for a in patches),
                 "PATCH during DELETE: not 200 or 403", f"{cell}: {counts(patches)}")
    deleted_at = min((a.done for a in deletes if a.status == 204), default=None)
    if deleted_at is not None:
        late = [a for a in patches if a.status == 200 and a.sent > deleted_at]
        audit.expect(not late, "PATCH sent after the DELETE returned succeeded",
                     f"{cell}: {len(late)} of {len(patches)}")
    gone = audit.send(Call("GET", "/amp/v1/memories/{memory_id}", f"/amp/v1/memories/{cell}"))
    audit.expect(gone.status == 403, "deleted cell still readable", f"{cell}: {gone.status}")
    del half
    # Both holding one tag: one lands, in either order the other is 412 or 403.
    cell = amp_archived(audit, "tagged patch against delete")
    tag = audit.clients[0].get(f"/amp/v1/memories/{cell}", headers=audit.headers
                               ).headers["etag"]
    calls = [Call("DELETE", "/amp/v1/memories/{memory_id}", f"/amp/v1/memories/{cell}",
                  headers={"If-Match": tag}) if i % 2 else
             amp_patch(cell, {"content": {"metadata": {"n": i}}}, tag)
             for i in range(audit.width)]
    answers = audit.race(calls)
    won = [a for a in answers if a.ok()]
    audit.expect(len(won) == 1 and all(a.status in (403, 412) for a in answers
                                       if a not in won),
                 "tagged PATCH against DELETE: not one landed", f"{cell}: {counts(answers)}")


def amp_delete_twice(audit: Audit) -> None:
    cell = amp_archived(audit, "delete twice")
    answers = audit.race([amp_delete(cell) for _ in range(audit.width)])
    audit.expect(sorted(a.status for a in answers) == [204] + [403] * (audit.width - 1),
                 "DELETE twice: not one 204 and the rest 403", f"{cell}: {counts(answers)}")


def amp_same_id(audit: Audit) -> None:
    sent_id = "mem_01JZZZZZZZZZZZZZZZZZZZZZZZ"
    body = {"id": sent_id, "type": "semantic", "content": {"text": "same client id"},
            "identity": {"owner_id": AGENT, "owner_type": "agent"}}
    answers = audit.race([Call("POST", "/amp/v1/memories", "/amp/v1/memories", body)
                          for _ in range(audit.width)])
    ids = [a.data["id"] for a in answers if a.status == 201]
    audit.expect(len(ids) == audit.width and len(set(ids)) == audit.width
                 and sent_id not in ids, "create with one client id",
                 f"{counts(answers)}; ids {len(set(ids))} distinct, sent id kept: "
                 f"{sent_id in ids}")


def amp_budget(audit: Audit) -> None:
    """Scoring PATCHes over the budget at once: exactly the budget (5) land, the rest 429;
    manual lifecycle passes at once: each 200 (or 503 after waiting its turn)."""
    cell = amp_create(audit, "budget race")["id"]
    answers = audit.race([amp_patch(cell, {"scoring": {"importance": round(i / 100, 2)}})
                          for i in range(audit.width)])
    won = [a for a in answers if a.status == 200]
    audit.expect(len(won) == 5 and all(a.status == 429 and a.code() == "RATE_LIMITED"
                                       for a in answers if a not in won),
                 "scoring budget at once: not 5 landed and the rest 429", counts(answers))
    got = audit.ok(Call("GET", "/amp/v1/memories/{memory_id}", f"/amp/v1/memories/{cell}"))
    audit.expect(got["scoring"]["importance"] in
                 [a.body["scoring"]["importance"] for a in won],
                 "scoring budget: stored importance from a refused PATCH",
                 str(got["scoring"]))
    run = Call("POST", "/amp/v1/lifecycle/run", "/amp/v1/lifecycle/run", {"dry_run": False},
               headers={"X-AMP-Admin-Token": ADMIN_TOKEN})
    answers = audit.race([run] * min(audit.width, 4))
    audit.expect(all(a.status in (200, 503) for a in answers), "lifecycle runs at once",
                 counts(answers))


def amp_lifecycle_patch(audit: Audit) -> None:
    """A lifecycle pass (which would make these cells stale) racing PATCHes that archive
    them: in either order the cell ends archived (archived cells are never evaluated,
    stale ones may be archived), so a stale cell whose archiving PATCH answered 200 is a
    lost update."""
    cells = [amp_create(audit, f"fading {i}", scoring={"importance": 0.1})["id"]
             for i in range(audit.width - 1)]
    calls = [amp_patch(c, {"lifecycle": {"status": "archived"}}) for c in cells]
    calls.insert(audit.width // 2, Call(
        "POST", "/amp/v1/lifecycle/run", "/amp/v1/lifecycle/run", {},
        headers={"X-AMP-Admin-Token": ADMIN_TOKEN}))
    answers = audit.race(calls)
    audit.expect(all(a.status == 200 for a in answers), "lifecycle against PATCH: refused",
                 counts(answers))
    for a in answers:
        if a.method == "PATCH" and a.status == 200:
            got = audit.ok(Call("GET", "/amp/v1/memories/{memory_id}", a.path))
            audit.expect(got["lifecycle"]["status"] == "archived",
                         "lifecycle pass undid an archiving PATCH",
                         f"{a.path}: {got['lifecycle']['status']}")


def amp_search_deletes(audit: Audit) -> None:
    word = f"zq{uuid.uuid4().hex[:8]}"
    cells = [amp_archived(audit, f"{word} cell {i}") for i in range(audit.width // 2)]
    search = Call("POST", "/amp/v1/memories/search", "/amp/v1/memories/search",
                  {"query": word, "status": ["archived"], "limit": 100})
    calls = [amp_delete(c) for c in cells] + [search] * (audit.width - len(cells))
    answers = audit.race(calls)
    deleted = {a.path.rsplit("/", 1)[1]: a.done for a in answers
               if a.method == "DELETE" and a.status == 204}
    audit.expect(len(deleted) == len(cells), "delete during search refused",
                 counts([a for a in answers if a.method == "DELETE"]))
    for a in answers:
        if a.method != "POST" or a.status != 200:
            continue
        for hit in a.data["results"]:
            at = deleted.get(hit["id"])
            if at is not None and at < a.sent:
                audit.find("search shows a cell deleted before it was sent",
                           f"{hit['id']} deleted {a.sent - at:.3f} s before the search")
    after = audit.ok(search)  # ranked by meaning too: other archived cells may come back
    found = [h["id"] for h in after["results"] if h["id"] in cells]
    audit.expect(not found, "deleted cells still found", str(found))


# ---------------------------------------------------------------- AmpUp memory


def same_episode(audit: Audit) -> None:
    scope = new_scope()
    episode(audit, scope, "warm-up")
    text = f"one episode by many {uuid.uuid4().hex}"
    body = {"scope": scope, "source": "slack:C9:1", "body": text, "acl": ["*"]}
    answers = audit.race([Call("POST", "/episodes", "/episodes", body)
                          for _ in range(audit.width)])
    won = [a for a in answers if a.status == 201]
    audit.expect(len(won) == 1 and all(a.status == 200 for a in answers if a not in won),
                 "same episode: not one 201 and the rest 200", counts(answers))
    if won:
        same = all(a.data == {**won[0].data, "created": False}
                   for a in answers if a.status == 200)
        audit.expect(same, "same episode: a 200 does not name the winner's commit",
                     str([a.data for a in answers][:3]))
    commits = check_chain(audit, scope)
    audit.expect(len(commits) == 2, "same episode: more than one commit",
                 f"{len(commits) - 1} commits for one episode")
    # The same id with other ACLs: one 201, the rest 409 naming acl or 200 (same ACL).
    text2 = f"other acls {uuid.uuid4().hex}"
    calls = [Call("POST", "/episodes", "/episodes",
                  {"scope": scope, "source": "slack:C9:2", "body": text2,
                   "acl": ["*"] if i % 2 else [f"user:{USER}", f"group:g{i}"]})
             for i in range(audit.width)]
    answers = audit.race(calls)
    won = [a for a in answers if a.status == 201]
    if audit.expect(len(won) == 1, "same id, other ACLs: not one 201", counts(answers)):
        wacl = won[0].body["acl"]
        for a in answers:
            if a is won[0]:
                continue
            want = 200 if a.body["acl"] == wacl else 409
            audit.expect(a.status == want, "same id, other ACLs: wrong loser answer",
                         f"{a.status} for acl {a.body['acl']} (winner {wacl})")


def overlapping_batches(audit: Audit) -> None:
    """Batches sharing episodes at once: each episode created by exactly one answer, the
    others naming it ``existing``; every acknowledged batch in the chain."""
    scope = new_scope()
    episode(audit, scope, "warm-up")
    tag = uuid.uuid4().hex[:8]
    texts = [f"shared {tag} {k}" for k in range(audit.width + 1)]
    calls = [Call("POST", "/episodes/batch", "/episodes/batch", {"scope": scope, "episodes": [
        {"source": f"slack:C3:{k}", "body": texts[k], "acl": ["*"]} for k in (i, i + 1)]})
        for i in range(audit.width)]
    answers = audit.race(calls)
    audit.expect(all(a.status in (200, 201) for a in answers), "overlapping batches refused",
                 counts(answers))
    created: dict[str, int] = {}
    for a in answers:
        if a.ok():
            for e in a.data["episodes"]:
                created[e["id"]] = created.get(e["id"], 0) + (e["status"] == "created")
    twice = {k: v for k, v in created.items() if v != 1}
    audit.expect(not twice, "overlapping batches: an episode not created exactly once",
                 f"{len(twice)} of {len(created)}: {list(twice.values())[:5]}")
    commits = check_chain(audit, scope)
    acked = {a.data["commit"] for a in answers if a.ok() and a.data["commit"]}
    audit.expect(acked <= {c["id"] for c in commits}, "acknowledged batch not in the chain",
                 str(acked - {c["id"] for c in commits}))
    listed = audit.ok(Call("GET", "/episodes", "/episodes",
                           params={"scope": scope, "limit": "1000"}))
    audit.expect(listed["total"] == len(texts) + 1, "overlapping batches: episode count",
                 f"{listed['total']} listed, {len(texts) + 1} written")


def one_valued(audit: Audit) -> None:
    scope = new_scope()
    quote = "Acme budget changed."
    ep = episode(audit, scope, quote)
    answers = audit.race([fact_call(scope, ep, quote, "acme", "budget", f"v{i}")
                          for i in range(audit.width)])
    audit.expect(all(a.status == 201 for a in answers), "facts at once refused",
                 counts(answers))
    commits = check_chain(audit, scope)
    by_commit = {a.data["commit"]: a.body["value"] for a in answers if a.status == 201}
    in_chain = [c["id"] for c in commits if c["id"] in by_commit]
    audit.expect(len(in_chain) == len(by_commit), "acknowledged fact missing from the ledger",
                 f"{len(by_commit)} 201s, {len(in_chain)} in the chain")
    if in_chain:
        newest = by_commit[in_chain[0]]
        for server in range(len(audit.urls)):
            got = [f["value"] for f in facts(audit, scope, "acme", server)]
            audit.expect(got == [newest], "newest commit does not win",
                         f"server {server}: current {got}, newest commit's {newest!r}")
        hist = facts(audit, scope, "acme", history="true")
        audit.expect(len(hist) == len(by_commit), "history lost a version",
                     f"{len(hist)} versions, {len(by_commit)} acknowledged")


def close_race(audit: Audit) -> None:
    scope = new_scope()
    quote = "Acme owner is Raj."
    ep = episode(audit, scope, quote)
    audit.ok(fact_call(scope, ep, quote, "acme", "owner", "raj"))
    close = Call("POST", "/close", "/close", {"scope": scope, "entity": "acme",
                                              "predicate": "owner", "reason": "left"})
    answers = audit.race([close] * audit.width)
    audit.expect(sorted(a.status for a in answers) == [201] + [404] * (audit.width - 1),
                 "closes at once: not one 201 and the rest 404", counts(answers))
    audit.expect(current(audit, scope, "acme", "owner") is None, "closed value still current",
                 scope)
    # Close during writes: the final state is the newest commit's (a value or closed).
    calls = [close if i % 4 == 0 else fact_call(scope, ep, quote, "acme", "owner", f"o{i}")
             for i in range(audit.width)]
    answers = audit.race(calls)
    audit.expect(all(a.status in ((201, 404) if a.template == "/close" else (201,))
                     for a in answers), "close during writes: unexpected answer",
                 counts(answers))
    commits = check_chain(audit, scope)
    # Newest wins by valid time, a tie by the later commit (docs/api.md, GET /facts): a
    # closure is valid from when it was made, a fact from its episode's time, so a fact
    # committed after a closure does not reopen the attribute.
    seq = {c["id"]: c["seq"] for c in commits}
    hist = facts(audit, scope, "acme", history="true")
    acked = {a.data["commit"] for a in answers if a.ok()}
    audit.expect(acked <= {h["commit"] for h in hist}, "acknowledged version not in history",
                 str(acked - {h["commit"] for h in hist}))
    if hist:
        top = max(hist, key=lambda h: (instant(h["valid_from"]), seq.get(h["commit"], -1)))
        want = None if top["kind"] == "closure" else top["value"]
        got = current(audit, scope, "acme", "owner")
        audit.expect(got == want, "close during writes: final state is not the newest "
                     "version's", f"current {got!r}, newest version {top}")
    acked = {a.data["commit"] for a in answers if a.ok()}
    audit.expect(acked <= {c["id"] for c in commits}, "acknowledged commit not in ledger",
                 str(acked - {c["id"] for c in commits}))


def branch_create(audit: Audit) -> None:
    scope = new_scope()
    episode(audit, scope, "branch base")
    body = {"scope": scope, "name": "feature/x"}
    answers = audit.race([Call("POST", "/branches", "/branches", body)] * audit.width)
    audit.expect(sorted(a.status for a in answers) == [201] + [409] * (audit.width - 1)
                 and all(a.code() == "BRANCH_EXISTS" for a in answers if a.status == 409),
                 "branch at once: not one 201 and the rest 409 BRANCH_EXISTS", counts(answers))
    listed = audit.ok(Call("GET", "/branches", "/branches", params={"scope": scope}))
    names = [b["name"] for b in listed["branches"]]
    audit.expect(names.count("feature/x") == 1, "branch listed other than once", str(names))
    check_chain(audit, scope, "feature/x")


def merge_race(audit: Audit) -> None:
    scope = new_scope()
    quote = "Acme stage is won."
    ep = episode(audit, scope, quote)
    audit.ok(Call("POST", "/branches", "/branches", {"scope": scope, "name": "dev"}))
    audit.ok(fact_call(scope, ep, quote, "acme", "stage", "won", branch="dev"))
    merge = Call("POST", "/merge", "/merge", {"scope": scope, "from": "dev"})
    answers = audit.race([merge] * audit.width)
    merged = [a for a in answers if a.status == 200 and a.data["merged"]]
    audit.expect(len(merged) == 1 and all(a.status == 200 for a in answers),
                 "merges at once: not one merge", counts(answers) | {"merged": len(merged)})
    commits = check_chain(audit, scope)
    kinds = [c["kind"] for c in commits]
    audit.expect(kinds.count("merge") == 1, "merges at once: merge commits",
                 f"{kinds.count('merge')} merge commits")
    audit.expect(current(audit, scope, "acme", "stage") == "won", "merged fact missing", "")
    # Merge during writes to both branches (other entities: no conflicts).
    calls: list[Call] = []
    for i in range(audit.width):
        if i % 4 == 0:
            calls.append(merge)
        elif i % 2:
            calls.append(fact_call(scope, ep, quote, f"b{i}", "stage", "won", branch="dev"))
        else:
            calls.append(fact_call(scope, ep, quote, f"m{i}", "stage", "won"))
    answers = audit.race(calls)
    audit.expect(all(a.status == 200 if a.template == "/merge" else a.status == 201
                     for a in answers), "merge during writes: unexpected answer",
                 counts(answers))
    check_chain(audit, scope)
    check_chain(audit, scope, "dev")
    final = audit.send(merge)
    audit.expect(final.status == 200, "last merge failed", final.text[:300])
    for a in answers:
        if a.template == "/facts" and a.ok():
            ent = a.body["entity"]
            audit.expect(current(audit, scope, ent, "stage") == "won",
                         "merge during writes lost a fact", f"{ent} ({a.body.get('branch')})")


def merge_conflict(audit: Audit) -> None:
    """A merge racing a write to ``into`` of the attribute the branch changed: the write
    after the merge (merge commit first in the chain) or the merge refused with 409
    ``MERGE_CONFLICT``, never a merge committed over the write it conflicts with."""
    scope = new_scope()
    quote = "Acme stage moved."
    ep = episode(audit, scope, quote)
    audit.ok(fact_call(scope, ep, quote, "acme", "stage", "open"))
    audit.ok(Call("POST", "/branches", "/branches", {"scope": scope, "name": "dev"}))
    audit.ok(fact_call(scope, ep, quote, "acme", "stage", "lost", branch="dev"))
    merge = Call("POST", "/merge", "/merge", {"scope": scope, "from": "dev"})
    # Two conflicting writes among writes of other entities (which merge cleanly).
    calls = [fact_call(scope, ep, quote, "acme" if i % 8 == 7 else f"x{i}", "stage",
                       f"won{i}") for i in range(audit.width - 1)]
    calls.insert(audit.width // 2, merge)
    answers = audit.race(calls)
    merged = next(a for a in answers if a.template == "/merge")
    writes = [a for a in answers if a.template == "/facts" and a.body["entity"] == "acme"]
    audit.expect(all(a.status == 201 for a in writes), "writes during merge refused",
                 counts(writes))
    audit.expect(merged.status == 200 or merged.code() == "MERGE_CONFLICT",
                 "merge during conflicting writes: unexpected answer",
                 f"{merged.status} {merged.text[:200]}")
    seq = {c["id"]: c["seq"] for c in check_chain(audit, scope)}
    if merged.status == 200 and merged.data["merged"]:
        at = seq.get(merged.data["commit"], -1)
        before = [a.body["value"] for a in writes
                  if a.ok() and seq.get(a.data["commit"], 10**9) < at]
        audit.expect(not before, "merge committed over a conflicting write",
                     f"merge at seq {at} after {len(before)} conflicting writes to main")
    elif merged.code() == "MERGE_CONFLICT":
        # Each conflict's `ours` (main's value) a write that landed, sent before the merge
        # returned. Not one that returned before it: with two servers a write commits,
        # the merge meets it and answers, and the write's own answer comes after.
        ours = {c.get("ours") for c in merged.data["error"]["details"].get("conflicts", [])}
        landed = {a.body["value"] for a in writes if a.ok() and a.sent < merged.done}
        audit.expect(bool(ours) and ours <= landed,
                     "merge conflict with no conflicting write landed",
                     f"ours {sorted(map(str, ours))}, landed {sorted(landed)}: "
                     f"{merged.text[:300]}")


def schema_race(audit: Audit) -> None:
    """Facts of a schema's types written while the schema is replaced by one without those
    types: every acknowledged fact's commit follows the schema it is valid under."""
    scope = new_scope()
    org, team = scope.split("/")
    admin = {"X-AMP-Admin-Token": ADMIN_TOKEN}
    quote = "Acme is an account."
    ep = episode(audit, scope, quote)
    put = f"/schemas/{org}/{team}"
    audit.ok(Call("PUT", "/schemas/{org}/{team}", put, {"builtin": "sales"}, headers=admin))
    calls = [fact_call(scope, ep, quote, f"account:a{i}", "name", f"Acme {i}")
             for i in range(audit.width - 1)]
    calls.insert(audit.width // 2, Call("PUT", "/schemas/{org}/{team}", put,
                                        {"builtin": "engineering"}, headers=admin))
    answers = audit.race(calls)
    changed = next(a for a in answers if a.method == "PUT")
    writes = [a for a in answers if a.method == "POST"]
    audit.expect(changed.status == 200, "schema change during writes failed",
                 changed.text[:300])
    audit.expect(all(a.status == 201 or a.code() in ("SCHEMA_CHANGED", "VALIDATION_ERROR")
                     for a in writes), "write during schema change: unexpected answer",
                 counts(writes))
    if changed.status == 200:
        seq = {c["id"]: c["seq"] for c in check_chain(audit, scope)}
        at = seq.get(changed.data["commit"], -1)
        late = [a for a in writes if a.ok() and seq.get(a.data["commit"], -1) > at]
        audit.expect(not late, "a fact of a type the schema in force lacks was committed",
                     f"{len(late)} facts after the schema change (seq {at})")
        refused = [a for a in writes if not a.ok() and a.done < changed.sent]
        audit.expect(not refused, "a fact refused before the schema changed",
                     counts(refused))


def workspace_caps(audit: Audit) -> None:
    """Writes into a workspace past its cap at once, on one server: exactly the cap lands
    (docs/api.md: writers of one server never overshoot together; two servers may)."""
    cap = 5
    ws = audit.ok(Call("POST", "/workspaces", "/workspaces",
                       {"name": "caps", "ttl": "1h", "caps": {"episodes": cap}}))
    scope = f"{ws['id']}/team"
    calls = [Call("POST", "/episodes", "/episodes",
                  {"scope": scope, "source": f"slack:C4:{i}", "body": f"capped {i}",
                   "acl": ["*"]}) for i in range(audit.width)]
    answers = audit.race(calls)
    landed = sum(a.status == 201 for a in answers)
    audit.expect(all(a.status == 201 or a.code() == "WORKSPACE_CAP" for a in answers),
                 "writes past a cap: unexpected answer", counts(answers))
    if len(audit.urls) == 1:
        audit.expect(landed == cap, "writes past a cap: not exactly the cap landed",
                     f"{landed} landed, cap {cap}")
    got = audit.ok(Call("GET", "/workspaces/{workspace_id}", f"/workspaces/{ws['id']}"))
    audit.expect(got["usage"]["episodes"] == landed, "workspace usage differs from the 201s",
                 f"usage {got['usage']['episodes']}, {landed} landed")
    audit.ok(Call("DELETE", "/workspaces/{workspace_id}", f"/workspaces/{ws['id']}"))


def pins_during_writes(audit: Audit) -> None:
    scope = new_scope()
    quote = "Acme region is west."
    ep = episode(audit, scope, quote)
    audit.ok(fact_call(scope, ep, quote, "acme", "region", "start"))
    calls: list[Call] = []
    for i in range(audit.width):
        if i % 4 == 0:
            calls.append(Call("POST", "/pin", "/pin", {"scope": scope, "ttl": "1h"}))
        elif i % 4 == 2:
            calls.append(Call("POST", "/snapshots", "/snapshots", {"scopes": [scope]}))
        else:
            calls.append(fact_call(scope, ep, quote, "acme", "region", f"r{i}"))
    answers = audit.race(calls)
    audit.expect(all(a.status == 201 for a in answers), "pins during writes refused",
                 counts(answers))
    commits = {c["id"]: c for c in check_chain(audit, scope)}
    # A hold taken after a write returned holds that write (or a later commit).
    wrote = [(a.done, commits[a.data["commit"]]["seq"]) for a in answers
             if a.template == "/facts" and a.ok() and a.data["commit"] in commits]
    for a in answers:
        if not a.ok() or a.template not in ("/pin", "/snapshots"):
            continue
        held = a.data["commit"] if a.template == "/pin" else a.data["heads"].get(
            f"{scope}@main")
        if held not in commits:
            continue
        missed = [seq for done, seq in wrote if done < a.sent and seq > commits[held]["seq"]]
        audit.expect(not missed, "a hold misses a write that returned before it was sent",
                     f"{a.template} holds seq {commits[held]['seq']}, missed {missed}")
    holds = []
    for a in answers:
        if a.template == "/pin" and a.ok():
            audit.expect(a.data["commit"] in commits, "pin holds a commit not in the chain",
                         a.data["commit"])
            holds.append(("pin", a.data["id"]))
        elif a.template == "/snapshots" and a.ok():
            head = a.data["heads"].get(f"{scope}@main")
            audit.expect(head in commits, "snapshot holds a commit not in the chain",
                         str(a.data["heads"]))
            holds.append(("snapshot", a.data["id"]))
    def pinned(h: tuple[str, str], server: int = 0) -> Any:
        search = audit.ok(Call("POST", "/search", "/search", {
            "scope": scope, "query": "acme region", "limit": 100, h[0]: h[1]}), server)
        passages = audit.ok(Call("POST", "/query", "/query", {
            "scope": scope, "find": "passages", "query": "acme region", h[0]: h[1]}), server)
        return (facts(audit, scope, "acme", server, history="true", **{h[0]: h[1]}),
                ledger(audit, scope, server=server, **{h[0]: h[1]}) if h[0] == "pin"
                else None, search["results"], passages["results"])

    seen = {h: pinned(h) for h in holds}
    for i in range(2):
        audit.ok(fact_call(scope, ep, quote, "acme", "region", f"later{i}"))
        episode(audit, scope, f"Acme region later {i}")
    for h, was in seen.items():
        for server in range(len(audit.urls)):
            now = pinned(h, server)
            for part, a, b in zip(("facts", "ledger", "search", "passages"), was, now,
                                  strict=True):
                audit.expect(a == b, "a pinned read changed",
                             f"{h} {part} through server {server}")


def narrowing(audit: Audit) -> None:
    """Another user reads an episode, its fact and search while its ACL is narrowed, and
    while the group that let it read is taken from it: no read sent after the change
    returned shows them (docs/api.md: the current ACL, the caller's groups read fresh)."""
    scope = new_scope()
    for how in ("acl", "groups", "amp"):
        narrow_one(audit, scope, how)


def narrow_one(audit: Audit, scope: str, how: str) -> None:
    quote = f"Secret plan {uuid.uuid4().hex[:6]}."
    admin = {"X-AMP-Admin-Token": ADMIN_TOKEN}
    if how == "amp":
        cell = amp_create(audit, quote, access_policy={"public": True})["id"]
        change = amp_patch(cell, {"access_policy": {"public": False}})
        reads = [Call("GET", "/amp/v1/memories/{memory_id}", f"/amp/v1/memories/{cell}",
                      headers=audit.other),
                 Call("POST", "/amp/v1/memories/search", "/amp/v1/memories/search",
                      {"query": quote, "limit": 100}, headers=audit.other)]
        narrowed(audit, change, reads, lambda a: a.status == 200 and (
            a.method == "GET" or any(h["id"] == cell for h in a.data["results"])), how)
        return
    acl = ["*"] if how == "acl" else [f"user:{USER}", "group:insiders"]
    body = {"scope": scope, "source": f"slack:C5:{how}", "body": quote, "acl": acl}
    ep = audit.ok(Call("POST", "/episodes", "/episodes", body))["id"]
    audit.ok(fact_call(scope, ep, quote, f"plan_{how}", "status", "secret"))
    if how == "groups":
        audit.ok(Call("PUT", "/principals/{user}", f"/principals/{OTHER}",
                      {"groups": ["insiders"], "roles": []}, headers=admin))
        change = Call("PUT", "/principals/{user}", f"/principals/{OTHER}",
                      {"groups": [], "roles": []}, headers=admin)
    else:
        change = Call("PUT", "/episodes/{episode_id}/acl", f"/episodes/{ep}/acl",
                      {"scope": scope, "acl": [f"user:{USER}"]})
    reads = [
        Call("GET", "/episodes/{episode_id}", f"/episodes/{ep}", params={"scope": scope},
             headers=audit.other),
        Call("GET", "/facts", "/facts", params={"scope": scope, "entity": f"plan_{how}"},
             headers=audit.other),
        Call("POST", "/search", "/search", {"scope": scope, "query": "secret plan status"},
             headers=audit.other)]

    def shows(a: Answer) -> bool:
        if a.template == "/episodes/{episode_id}":
            return a.status == 200
        if a.template == "/facts":
            return a.status == 200 and bool(a.data["facts"])
        return a.status == 200 and any(h["entity"] == f"plan_{how}"
                                       for h in a.data["results"])

    narrowed(audit, change, reads, shows, how)


def narrowed(audit: Audit, change: Call, reads: list[Call], shows: Callable[[Answer], bool],
             how: str) -> None:
    """``reads`` hammered from several threads while ``change`` is sent once: none sent
    after the change returned ``shows`` what it hid."""
    stop = threading.Event()
    seen: list[Answer] = []

    def hammer(i: int) -> None:
        while not stop.is_set():
            seen.append(audit.send(reads[i % len(reads)], server=i))

    threads = [threading.Thread(target=hammer, args=(i,))
               for i in range(max(3, audit.width // 2))]
    for t in threads:
        t.start()
    time.sleep(0.5)
    done = audit.send(change, server=1)
    time.sleep(1.0)
    stop.set()
    for t in threads:
        t.join()
    audit.expect(done.status == 200, f"{how} change failed", done.text[:300])
    before = [a for a in seen if a.done < done.sent]
    late = [a for a in seen if a.sent > done.done and shows(a)]
    audit.expect(any(shows(a) for a in before), f"{how}: never readable before",
                 counts(before))
    audit.expect(not late, f"read after the {how} narrowing returned still shows it",
                 f"{len(late)} of {len(seen)}: {sorted({a.template for a in late})}")


def pin_release(audit: Audit) -> None:
    """Renewals and reads of a pin racing its release: the release is final (no renew or
    read sent after it returned succeeds, the pin ends released) and a renewal that
    answers 200 answers a live pin (a renewal after the release is 410)."""
    scope = new_scope()
    quote = "Acme pin race."
    ep = episode(audit, scope, quote)
    audit.ok(fact_call(scope, ep, quote, "acme", "pinned", "yes"))
    for kind in ("pin", "snapshot"):
        if kind == "pin":
            hold = audit.ok(Call("POST", "/pin", "/pin", {"scope": scope, "ttl": "1h"}))
            path, template = f"/pin/{hold['id']}", "/pin/{pin_id}"
        else:
            hold = audit.ok(Call("POST", "/snapshots", "/snapshots", {"scopes": [scope]}))
            path, template = f"/snapshots/{hold['id']}", "/snapshots/{snapshot_id}"
        calls: list[Call] = []
        for i in range(audit.width - 1):
            if kind == "pin" and i % 2:
                calls.append(Call("POST", "/pin/{pin_id}/renew", f"{path}/renew",
                                  {"ttl": "2h"}))
            else:
                calls.append(Call("GET", "/facts", "/facts", params={
                    "scope": scope, "entity": "acme", kind: hold["id"]}))
        calls.insert(audit.width // 2, Call("DELETE", template, path))
        answers = audit.race(calls)
        released = next(a for a in answers if a.method == "DELETE")
        audit.expect(released.status == 200 and released.data["state"] == "released",
                     f"{kind} release failed", released.text[:300])
        others = [a for a in answers if a.method != "DELETE"]
        audit.expect(all(a.status == 200 or (a.status == 410 and a.code() in (
            "PIN_RELEASED", "SNAPSHOT_RELEASED")) for a in others),
            f"{kind} use during release: unexpected answer", counts(others))
        late = [a for a in others if a.ok() and a.sent > released.done]
        audit.expect(not late, f"{kind} used after its release returned",
                     f"{counts(late)}")
        odd = [a for a in others if a.template.endswith("/renew") and a.ok()
               and a.data["state"] != "live"]
        audit.expect(not odd, "a renewal answered 200 for a pin it did not renew",
                     f"{len(odd)}: {odd[0].text[:200] if odd else ''}")
        renewed = [a.data["expires_at"] for a in others
                   if a.template.endswith("/renew") and a.ok()]
        for server in range(len(audit.urls)):
            got = audit.ok(Call("GET", template, path), server)
            audit.expect(got["state"] == "released", f"{kind} not released in the end",
                         f"server {server}: {got['state']}")
            # In any order that lets them land, the renewals came before the release,
            # which keeps the expiry of the last of them.
            if renewed:
                audit.expect(got["expires_at"] == max(renewed),
                             "a released pin lost the expiry of a renewal that landed",
                             f"server {server}: {got['expires_at']}, renewed to "
                             f"{max(renewed)}")


def read_your_writes(audit: Audit) -> None:
    """Each writer reads its own write back at once, through the other server when there
    are two: the fact, the ledger's head chain and search must hold it."""
    scope = new_scope()
    quote = "Acme color is blue."
    ep = episode(audit, scope, quote)
    barrier = threading.Barrier(audit.width)

    def one(i: int) -> None:
        barrier.wait()
        a = audit.send(fact_call(scope, ep, quote, f"ryw{i}", "color", f"c{i}"), i)
        if not a.ok():
            audit.find("write refused", f"{a.status} {a.text[:200]}")
            return
        other = i + 1
        got = [f["value"] for f in facts(audit, scope, f"ryw{i}", other)]
        audit.expect(got == [f"c{i}"], "a write is not read back at once",
                     f"ryw{i} through server {other % len(audit.urls)}: {got}")
        ids = {c["id"] for c in ledger(audit, scope, server=other)}
        audit.expect(a.data["commit"] in ids, "a write's commit is not in the ledger at once",
                     f"server {other % len(audit.urls)}")
        hits = audit.ok(Call("POST", "/search", "/search", {
            "scope": scope, "query": f"ryw{i} color", "limit": 100}), other)
        audit.expect(any(h["entity"] == f"ryw{i}" for h in hits["results"]),
                     "a write is not searchable at once",
                     f"ryw{i} through server {other % len(audit.urls)}")

    with ThreadPoolExecutor(audit.width) as pool:
        list(pool.map(one, range(audit.width)))
    check_chain(audit, scope)
    # Every server's listings agree with each other and with the writes.
    for server in range(len(audit.urls)):
        listed = audit.ok(Call("GET", "/scopes", "/scopes"), server)
        mine = [x for x in listed["scopes"] if x["scope"] == scope]
        ents = audit.ok(Call("GET", "/entities", "/entities",
                             params={"scope": scope, "limit": "1000"}), server)
        want = {"scope": scope, "episodes": 1, "facts": audit.width,
                "entities": audit.width}
        audit.expect(mine == [want] and ents["total"] == audit.width,
                     "listings disagree with the writes",
                     f"server {server}: /scopes {mine}, /entities total {ents['total']}")


def workspace_delete(audit: Audit) -> None:
    ws = audit.ok(Call("POST", "/workspaces", "/workspaces", {"name": "race", "ttl": "1h"}))
    scope = f"{ws['id']}/team"
    episode(audit, scope, "workspace warm-up")
    calls = [Call("POST", "/episodes", "/episodes",
                  {"scope": scope, "source": f"slack:C2:{i}", "body": f"ws write {i}",
                   "acl": ["*"]}) for i in range(audit.width - 1)]
    for i in range(1, audit.width, 5):  # snapshots of the workspace taken at once
        calls[i] = Call("POST", "/workspaces/{workspace_id}/snapshots",
                        f"/workspaces/{ws['id']}/snapshots")
    calls.insert(audit.width // 2, Call("DELETE", "/workspaces/{workspace_id}",
                                        f"/workspaces/{ws['id']}"))
    answers = audit.race(calls)
    dropped = [a for a in answers if a.method == "DELETE"][0]
    snaps = [a for a in answers if a.template.endswith("/snapshots")]
    audit.expect(all(a.status in (201, 404) for a in snaps),
                 "workspace snapshot during delete: unexpected answer", counts(snaps))
    audit.expect(not [a for a in snaps if a.ok() and a.sent > dropped.done],
                 "workspace snapshot sent after the delete returned was taken", counts(snaps))
    writes = [a for a in answers if a.template == "/episodes"]
    audit.expect(dropped.status == 200, "workspace delete failed", dropped.text[:300])
    audit.expect(all(a.status == 201 or (a.status == 404 and a.code() == "WORKSPACE_GONE")
                     for a in writes), "write during workspace delete: unexpected answer",
                 counts(writes))
    late = [a for a in writes if a.ok() and a.sent > dropped.done]
    audit.expect(not late, "write sent after the workspace delete returned landed",
                 f"{len(late)} writes")
    for server in range(len(audit.urls)):
        after = audit.send(calls[0], server)
        audit.expect(after.status == 404 and after.code() == "WORKSPACE_GONE",
                     "write after the delete", f"server {server}: {after.status}")
        got = audit.send(Call("GET", "/workspaces/{workspace_id}", f"/workspaces/{ws['id']}"),
                         server)
        audit.expect(got.status == 404, "deleted workspace still answers",
                     f"server {server}: {got.status}")


def conditional(audit: Audit) -> None:
    """AmpUp's conditional writes: of writers holding one tag, exactly one lands."""
    scope = new_scope()
    ep = episode(audit, scope, f"acl race {uuid.uuid4().hex}")
    path = f"/episodes/{ep}"
    tag = audit.clients[0].get(path, params={"scope": scope}, headers=audit.headers
                               ).headers["etag"]
    calls = [Call("PUT", "/episodes/{episode_id}/acl", f"{path}/acl",
                  {"scope": scope, "acl": [f"user:{USER}", f"group:g{i}"]},
                  headers={"If-Match": tag}) for i in range(audit.width)]
    answers = audit.race(calls)
    won = [a for a in answers if a.status == 200]
    audit.expect(len(won) == 1 and all(a.status == 412 for a in answers if a not in won),
                 "ACL If-Match: not one 200 and the rest 412", counts(answers))
    got = audit.ok(Call("GET", "/episodes/{episode_id}", path, params={"scope": scope}))
    if won:
        audit.expect(sorted(got["acl"]) == sorted(won[0].body["acl"]),
                     "ACL If-Match: stored ACL is not the winner's", str(got["acl"]))
    user = f"p{uuid.uuid4().hex[:8]}"
    admin = {"X-AMP-Admin-Token": ADMIN_TOKEN}
    tag = audit.clients[0].get(f"/principals/{user}", headers={**audit.headers, **admin}
                               ).headers["etag"]
    answers = audit.race([Call("PUT", "/principals/{user}", f"/principals/{user}",
                               {"groups": [f"g{i}"], "roles": []},
                               headers={**admin, "If-Match": tag})
                          for i in range(audit.width)])
    won = [a for a in answers if a.status == 200]
    audit.expect(len(won) == 1 and all(a.status == 412 for a in answers if a not in won),
                 "principal If-Match: not one 200 and the rest 412", counts(answers))
    got = audit.ok(Call("GET", "/principals/{user}", f"/principals/{user}", headers=admin))
    if won:
        audit.expect(got["groups"] == won[0].body["groups"],
                     "principal If-Match: stored groups are not the winner's",
                     str(got["groups"]))
    org, team = scope.split("/")
    answers = audit.race([Call("PUT", "/schemas/{org}/{team}", f"/schemas/{org}/{team}",
                               {"builtin": ("sales", "engineering")[i % 2]},
                               headers={**admin, "If-None-Match": "*"})
                          for i in range(audit.width)])
    won = [a for a in answers if a.status == 200]
    audit.expect(len(won) == 1 and all(a.status == 412 for a in answers if a not in won),
                 "schema If-None-Match *: not one 200 and the rest 412", counts(answers))
    got = audit.ok(Call("GET", "/schemas/{org}/{team}", f"/schemas/{org}/{team}"))
    if won:
        audit.expect(got["name"] == won[0].data["name"],
                     "schema If-None-Match *: the schema in force is not the winner's",
                     f"{got['name']} vs {won[0].data['name']}")
    check_chain(audit, scope)


def branch_delete(audit: Audit) -> None:
    """Writes to a branch while it is deleted: each lands before the delete or is 404."""
    scope = new_scope()
    quote = "Acme tier is gold."
    ep = episode(audit, scope, quote)
    audit.ok(Call("POST", "/branches", "/branches", {"scope": scope, "name": "tmp"}))
    audit.ok(fact_call(scope, ep, quote, "main_only", "tier", "gold"))  # a merge has work
    kid = random.random() < 0.5  # a child branch taken at once wins most races: half the rounds
    calls = [Call("POST", "/merge", "/merge", {"scope": scope, "from": "main", "into": "tmp"})
             if i % 4 == 3 else
             Call("POST", "/branches", "/branches",
                  {"scope": scope, "name": f"kid{i}", "from": "tmp"}) if kid and i == 6 else
             fact_call(scope, ep, quote, f"e{i}", "tier", "gold", branch="tmp")
             for i in range(audit.width - 1)]
    calls.insert(audit.width // 2, Call("DELETE", "/branches/{name}", "/branches/tmp",
                                        params={"scope": scope}))
    answers = audit.race(calls)
    dropped = next(a for a in answers if a.method == "DELETE")
    writes = [a for a in answers if a.method == "POST" and a.template != "/branches"]
    kids = [a for a in answers if a.template == "/branches"]
    audit.expect(dropped.status == 200 or dropped.code() == "BRANCH_HAS_CHILDREN",
                 "branch delete during writes failed", dropped.text[:300])
    audit.expect(all(a.status in (200, 201, 404) for a in writes),
                 "write during branch delete: unexpected answer", counts(writes))
    if dropped.status == 200:
        audit.expect(not any(a.ok() for a in kids), "child made of a deleted branch",
                     counts(kids))
    else:
        audit.expect(any(a.ok() for a in kids), "BRANCH_HAS_CHILDREN without a child",
                     counts(kids))
        return
    late = [a for a in writes if a.ok() and a.sent > dropped.done]
    audit.expect(not late, "write sent after the branch delete returned landed",
                 f"{len(late)} writes")
    audit.expect(dropped.data["commit"] not in {a.data.get("commit") for a in writes
                                                if a.ok()},
                 "a write shares the delete's commit", "")

    listed = audit.ok(Call("GET", "/branches", "/branches", params={"scope": scope}))
    audit.expect("tmp" not in [b["name"] for b in listed["branches"]],
                 "deleted branch still listed", "")


def branch_holds(audit: Audit) -> None:
    """A branch deleted while pins, snapshots and child branches are taken of it: the
    delete is 409 (something holds it) or every hold taken with it is refused (docs/api.md,
    DELETE /branches); deletes at once: one 200, the rest 404."""
    scope = new_scope()
    episode(audit, scope, "holds base")
    audit.ok(Call("POST", "/branches", "/branches", {"scope": scope, "name": "held"}))
    episode(audit, scope, "on held", branch="held")
    calls: list[Call] = []
    for i in range(audit.width - 1):
        if i % 3 == 0:
            calls.append(Call("POST", "/pin", "/pin",
                              {"scope": scope, "branch": "held", "ttl": "1h"}))
        elif i % 3 == 1:
            calls.append(Call("POST", "/snapshots", "/snapshots", {"scopes": [scope]}))
        else:
            calls.append(Call("POST", "/branches", "/branches",
                              {"scope": scope, "name": f"child{i}", "from": "held"}))
    calls.insert(audit.width // 2, Call("DELETE", "/branches/{name}", "/branches/held",
                                        params={"scope": scope}))
    answers = audit.race(calls)
    dropped = next(a for a in answers if a.method == "DELETE")
    pins = [a for a in answers if a.template == "/pin"]
    snaps = [a for a in answers if a.template == "/snapshots"]
    kids = [a for a in answers if a.template == "/branches" and a.method == "POST"]
    audit.expect(dropped.status in (200, 409), "branch delete under holds: unexpected answer",
                 f"{dropped.status} {dropped.text[:200]}")
    if dropped.status == 200:
        held = [a.shown() for a in pins + kids if a.ok()]
        held += [a.shown() for a in snaps
                 if a.ok() and f"{scope}@held" in a.data["heads"]]
        audit.expect(not held, "branch deleted while a hold taken at once stands",
                     f"{len(held)}: {held[:2]}")
        live = [a for a in snaps if a.ok() and f"{scope}@held" in a.data["heads"]]
        del live
    else:
        held = [a for a in pins + kids if a.ok()] + [
            a for a in snaps if a.ok() and f"{scope}@held" in a.data["heads"]]
        audit.expect(bool(held), "branch delete 409 with nothing holding it",
                     dropped.text[:300])
    listed = audit.ok(Call("GET", "/branches", "/branches", params={"scope": scope}))
    names = {b["name"] for b in listed["branches"]}
    for kid in kids:
        if kid.ok():
            audit.expect(kid.body["name"] in names, "child branch created but not listed",
                         kid.body["name"])
    audit.expect(("held" in names) == (dropped.status != 200),
                 "branch listing disagrees with the delete", f"{dropped.status}, {names}")
    # Deletes at once.
    audit.ok(Call("POST", "/branches", "/branches", {"scope": scope, "name": "twice"}))
    answers = audit.race([Call("DELETE", "/branches/{name}", "/branches/twice",
                               params={"scope": scope})] * audit.width)
    audit.expect(sorted(a.status for a in answers) == [200] + [404] * (audit.width - 1),
                 "branch deletes at once: not one 200 and the rest 404", counts(answers))
    check_chain(audit, scope)


def workspace_renew(audit: Audit) -> None:
    """Renewals racing a delete never bring the workspace back; deletes at once."""
    ws = audit.ok(Call("POST", "/workspaces", "/workspaces", {"name": "renew", "ttl": "1h"}))
    path = f"/workspaces/{ws['id']}"
    calls = [Call("POST", "/workspaces/{workspace_id}/renew", f"{path}/renew", {"ttl": "2h"})
             if i % 2 else Call("DELETE", "/workspaces/{workspace_id}", path)
             for i in range(audit.width)]
    answers = audit.race(calls)
    deletes = [a for a in answers if a.method == "DELETE"]
    renews = [a for a in answers if a.method == "POST"]
    audit.expect(sum(a.status == 200 for a in deletes) >= 1
                 and all(a.status in (200, 404) for a in deletes),
                 "workspace deletes at once: unexpected answers", counts(deletes))
    audit.expect(all(a.status in (200, 404) for a in renews),
                 "renew during delete: unexpected answer", counts(renews))
    first = min((a.done for a in deletes if a.status == 200), default=None)
    if first is not None:
        late = [a for a in renews if a.ok() and a.sent > first]
        audit.expect(not late, "renew sent after the delete returned succeeded",
                     f"{len(late)}")
    for server in range(len(audit.urls)):
        got = audit.send(Call("GET", "/workspaces/{workspace_id}", path), server)
        audit.expect(got.status == 404, "workspace back after delete and renew",
                     f"server {server}: {got.status}")


# ---------------------------------------------------------------- advice


def rewards(audit: Audit) -> None:
    scope = new_scope()
    run = audit.ok(Call("POST", "/runs", "/runs", {"scope": scope, "task": "race reward"}))
    answers = audit.race([Call("POST", "/runs/reward", "/runs/reward",
                               {"run": run["id"], "reward": round(i / audit.width, 3),
                                "reason": f"r{i}"}) for i in range(audit.width)])
    audit.expect(all(a.status == 201 for a in answers), "rewards at once: unexpected answer",
                 counts(answers))
    got = audit.ok(Call("GET", "/runs/{run_id}", f"/runs/{run['id']}"))
    reasons = sorted(r["reason"] for r in got["rewards"])
    acked = sorted(a.body["reason"] for a in answers if a.ok())
    audit.expect(reasons == acked, "rewards at once: kept rewards differ from the 201s",
                 f"{len(reasons)} kept, {len(acked)} acknowledged")
    commits = check_chain(audit, scope)
    newest = next((a for c in commits for a in answers
                   if a.ok() and a.data["commit"] == c["id"]), None)
    if newest is not None and got["reward"]:
        audit.expect(got["reward"]["reason"] == newest.body["reason"],
                     "rewards at once: current reward is not the newest commit's",
                     f"{got['reward']['reason']} vs {newest.body['reason']}")
    # Sessions: ended once.
    ses = audit.ok(Call("POST", "/sessions/start", "/sessions/start",
                        {"scope": scope, "task": "race end"}))
    answers = audit.race([Call("POST", "/sessions/end", "/sessions/end",
                               {"session": ses["id"], "transcript": f"t{i}", "outcome": f"o{i}",
                                "reward": 0.5}) for i in range(audit.width)])
    audit.expect(sorted(a.status for a in answers) == [200] + [409] * (audit.width - 1)
                 and all(a.code() == "SESSION_ENDED" for a in answers if a.status == 409),
                 "ends at once: not one 200 and the rest 409 SESSION_ENDED", counts(answers))
    got = audit.ok(Call("GET", "/sessions/{session_id}", f"/sessions/{ses['id']}"))
    won = [a for a in answers if a.status == 200]
    if won:
        audit.expect(got["outcome"] == won[0].body["outcome"] and len(got["rewards"]) == 1,
                     "ended session is not the winner's",
                     f"outcome {got['outcome']}, {len(got['rewards'])} rewards")
    # A reward of a session racing its end (no reward): 201 only if the end came first.
    ses = audit.ok(Call("POST", "/sessions/start", "/sessions/start",
                        {"scope": scope, "task": "race reward end"}))
    calls = [Call("POST", "/runs/reward", "/runs/reward",
                  {"run": ses["id"], "reward": 1, "reason": f"r{i}"})
             for i in range(audit.width - 1)]
    calls.insert(audit.width // 2, Call("POST", "/sessions/end", "/sessions/end",
                                        {"session": ses["id"], "transcript": "t",
                                         "outcome": "done"}))
    answers = audit.race(calls)
    end = next(a for a in answers if a.template == "/sessions/end")
    paid = [a for a in answers if a.template == "/runs/reward"]
    audit.expect(end.status == 200, "end during rewards failed", end.text[:300])
    audit.expect(all(a.status == 201 or a.code() == "SESSION_OPEN" for a in paid),
                 "reward during end: unexpected answer", counts(paid))
    early = [a for a in paid if a.ok() and a.done < end.sent]
    audit.expect(not early, "a session reward returned before its end was sent",
                 f"{len(early)}")
    got = audit.ok(Call("GET", "/sessions/{session_id}", f"/sessions/{ses['id']}"))
    audit.expect(len(got["rewards"]) == sum(a.ok() for a in paid),
                 "session rewards differ from the 201s",
                 f"{len(got['rewards'])} kept, {sum(a.ok() for a in paid)} acknowledged")
    # Runs recorded at once: every one kept.
    answers = audit.race([Call("POST", "/runs", "/runs", {"scope": scope, "task": f"run {i}"})
                          for i in range(audit.width)])
    ids = {a.data["id"] for a in answers if a.status == 201}
    audit.expect(len(ids) == audit.width, "runs at once refused", counts(answers))
    listed = audit.ok(Call("GET", "/runs", "/runs", params={"scope": scope, "limit": "1000"}))
    audit.expect(ids <= {r["id"] for r in listed["runs"]}, "recorded run missing",
                 f"{len(ids - {r['id'] for r in listed['runs']})} missing")
    check_chain(audit, scope)


# ---------------------------------------------------------------- keys


def key_revoke(audit: Audit, env: dict[str, str]) -> None:
    agent = f"rev_{uuid.uuid4().hex[:6]}"
    key = cli(env, "keys", "create", "--agent", agent, "--user", USER)[-1]
    listing = [json.loads(line) for line in cli(env, "keys", "list", "--json")]
    key_id = next(k["key_id"] for k in listing if k["agent_id"] == agent)
    headers = {"X-AMP-Agent-ID": agent, "X-AMP-API-Key": key}
    call = Call("POST", "/amp/v1/memories/search", "/amp/v1/memories/search",
                {"query": "anything", "limit": 1}, headers=headers)
    stop = threading.Event()
    answers: list[Answer] = []

    def hammer(i: int) -> None:
        while not stop.is_set():
            answers.append(audit.send(call, server=i))

    threads = [threading.Thread(target=hammer, args=(i,)) for i in range(audit.width // 2)]
    for t in threads:
        t.start()
    time.sleep(1.0)
    cli(env, "keys", "revoke", key_id)
    revoked = time.monotonic()
    time.sleep(1.5)
    stop.set()
    for t in threads:
        t.join()
    before = [a for a in answers if a.sent < revoked]
    late = [a for a in answers if a.sent > revoked and a.status != 401]
    audit.expect(any(a.ok() for a in before), "key never worked", counts(answers))
    audit.expect(not late, "request with a revoked key answered",
                 f"{counts(late)} of {len(answers)} sent after the revoke returned")


def cli(env: dict[str, str], *args: str) -> list[str]:
    done = subprocess.run([sys.executable, "-m", "ampup_memory.cli", *args], env=env,
                          capture_output=True, text=True, timeout=120, check=True)
    return done.stdout.strip().splitlines()


# ---------------------------------------------------------------- driver

SCENARIOS: dict[str, Callable[[Audit], None]] = {
    "amp-if-match": amp_if_match, "amp-patch-delete": amp_patch_delete,
    "amp-delete-twice": amp_delete_twice, "amp-same-id": amp_same_id,
    "amp-search-deletes": amp_search_deletes, "amp-budget": amp_budget,
    "amp-lifecycle-patch": amp_lifecycle_patch,
    "same-episode": same_episode, "overlapping-batches": overlapping_batches,
    "one-valued-facts": one_valued, "close": close_race, "branch-create": branch_create,
    "merge": merge_race, "merge-conflict": merge_conflict, "schema-change": schema_race,
    "workspace-caps": workspace_caps, "pins-during-writes": pins_during_writes,
    "read-your-writes": read_your_writes, "workspace-delete": workspace_delete,
    "conditional": conditional, "narrowing": narrowing, "pin-release": pin_release,
    "branch-delete": branch_delete, "branch-holds": branch_holds,
    "workspace-renew": workspace_renew, "advice": rewards,
}


def parse_config(config: str) -> tuple[str, int, bool]:
    """``sqlite``, ``postgres``, ``postgres-N`` (N servers on one store), each optionally
    ending ``-s3`` (the tables in a bucket of a real S3-compatible server, moto): the
    backend, the number of servers, and whether the warehouse is on S3."""
    parts = config.split("-")
    s3 = parts[-1] == "s3"
    if s3:
        parts.pop()
    backend, count = parts[0], parts[1] if len(parts) > 1 else "1"
    if backend not in ("sqlite", "postgres") or not count.isdigit() or len(parts) > 2 or (
            backend == "sqlite" and count != "1"):
        raise SystemExit(f"unknown config {config!r}: sqlite[-s3] or postgres[-N][-s3]")
    return backend, int(count), s3


def postgres_env(url: str, warehouse: Path) -> dict[str, str]:
    """The settings of a server whose stores are all in one PostgreSQL database ``url``
    (cell store, catalog, read index) and whose tables are in the folder ``warehouse``."""
    return {"AMPUP_MEMORY_CATALOG_URI": url, "AMPUP_MEMORY_INDEX_URI": url,
            "AMP_STORE_URI": url, "AMPUP_MEMORY_WAREHOUSE": f"file://{warehouse}"}


def configs_of(text: str) -> list[str]:
    """``--configs``, each checked: a misspelt one is refused before anything starts."""
    configs = text.split(",")
    for config in configs:
        parse_config(config)
    return configs


def load_text() -> str:
    return f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}"


def report_findings(out: Path, findings: list[Finding]) -> int:
    """``out/findings.json`` written and each finding printed; how many there were."""
    report = [{"config": f.config, "scenario": f.scenario, "kind": f.kind,
               "detail": f.detail} for f in findings]
    (out / "findings.json").write_text(json.dumps(report, indent=1))
    for item in report:
        print(f"- [{item['config']} {item['scenario']}] {item['kind']}: {item['detail'][:300]}")
    return len(report)


@contextmanager
def serving(config: str, home: Path, pg: PostgresFactory | None,
            ) -> Iterator[tuple[list[ServerProcess], dict[str, str], dict[str, str]]]:
    env = {**os.environ, **QUIET, "AMPUP_MEMORY_HOME": str(home / "cli"),
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    backend, count, on_s3 = parse_config(config)
    if backend == "postgres":
        assert pg is not None
        url = pg.new_database("race")
        env.update(postgres_env(url, home / "warehouse"))
    else:
        env["AMPUP_MEMORY_HOME"] = str(home / "srv0")
    with ExitStack() as stack:
        if on_s3:
            s3 = S3Server(home).start()
            stack.callback(s3.stop)
            env.update(s3.env(s3.new_bucket("audit")))
        key = cli(env, "keys", "create", "--agent", AGENT, "--user", USER, "--admin")[-1]
        headers = {"X-AMP-Agent-ID": AGENT, "X-AMP-API-Key": key}
        other = cli(env, "keys", "create", "--agent", OTHER_AGENT, "--user", OTHER)[-1]
        env["RACE_OTHER_KEY"] = other
        procs = [ServerProcess(home / f"srv{i}", env={k: v for k, v in env.items()
                                                      if k != "AMPUP_MEMORY_HOME"})
                 for i in range(count)]
        for p in procs:
            stack.callback(p.stop)
        errors = start_together(procs, timeout=180)
        if errors:
            raise RuntimeError(f"servers did not start: {errors}")
        yield procs, headers, env


def audit_one(config: str, pg: PostgresFactory | None, width: int, rounds: int,
              only: set[str] | None, log: Callable[[str], None]) -> Audit:
    home = Path(tempfile.mkdtemp(prefix=f"race-{config}-"))
    with serving(config, home, pg) as (procs, headers, env):
        spec = httpx.get(f"{procs[0].url}/openapi.json").json()
        audit = Audit(config, [p.url for p in procs], spec, headers, width,
                      other={"X-AMP-Agent-ID": OTHER_AGENT,
                             "X-AMP-API-Key": env["RACE_OTHER_KEY"]})
        audit.clients = [audit.connect(p.url) for p in procs]
        jobs: list[tuple[str, Callable[[], None]]] = [
            (name, (lambda f=f: f(audit))) for name, f in SCENARIOS.items()]
        jobs.append(("key-revoke", lambda: key_revoke(audit, env)))
        for name, job in jobs:
            if only and name not in only:
                continue
            audit.scenario = name
            started, sent = time.monotonic(), audit.sent
            for n in range(rounds):
                audit.guarded(job, "scenario", f"round {n}: ")
            log(f"{config} {name}: {audit.sent - sent} requests, "
                f"{time.monotonic() - started:.0f} s")
        audit.finish(procs)
    return audit


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", default="sqlite,postgres,postgres-2")
    parser.add_argument("--width", type=int, default=16, help="requests fired at once")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", default="", help="scenarios to run (comma-separated)")
    parser.add_argument("--out", type=Path, default=Path("race-report"))
    args = parser.parse_args(argv)
    args.out = args.out.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    configs = configs_of(args.configs)
    only = set(args.only.split(",")) if args.only else None
    unknown = sorted((only or set()) - {*SCENARIOS, "key-revoke"})
    if unknown:  # a misspelt name ran nothing and reported 0 findings
        parser.error(f"unknown scenarios {', '.join(unknown)}; known: "
                     f"{', '.join([*SCENARIOS, 'key-revoke'])}")
    began = time.monotonic()
    findings: list[Finding] = []
    seen: dict[str, Any] = {}
    notes: dict[str, Any] = {}
    sent = 0
    with ExitStack() as stack:
        pg = (stack.enter_context(postgres_factory())
              if any(c.startswith("postgres") for c in configs) else None)
        for config in configs:
            audit = audit_one(config, pg, args.width, args.rounds, only,
                              lambda line: print(line, flush=True))
            findings += audit.findings
            sent += audit.sent
            seen[config] = audit.seen
            notes[config] = audit.notes
    (args.out / "answers.json").write_text(json.dumps(seen, indent=1, sort_keys=True))
    (args.out / "notes.json").write_text(json.dumps(notes, indent=1, sort_keys=True))
    found = report_findings(args.out, findings)
    noted = sum(e["count"] for n in notes.values() for e in n.values())
    print(f"{found} findings, {noted} documented 503s with Retry-After (notes.json), "
          f"{sent} requests, {time.monotonic() - began:.0f} s, {load_text()} "
          f"({', '.join(configs)}, width {args.width}, {args.rounds} rounds)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
