"""Procedures (AIP) over real HTTP: an admin chooses a scope's documents, `advice compile`
(the scripted compile model, a real HTTP process) turns them into citation-checked skills
with step graphs, `GET /procedures` lists them, and `POST /advice` serves a procedure for a
matching task until a note for that kind of task is promoted. Model down, garbage or
absent: nothing is written. Both catalogs.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ampup_memory.advice.gate import GateRules
from ampup_memory.advice.loop import cluster_pass, learn_pass
from ampup_memory.advice.procedures import compile_pass
from ampup_memory.memory.scopes import parse_scope
from ampup_memory.memory.service import MemoryService
from ampup_memory.models.chat import Role, chat_model
from ampup_memory.search.embed import WordLlamaEmbedder
from ampup_memory.settings import Settings
from tests.memory_support import (
    ADMIN_TOKEN,
    BACKENDS,
    Memory,
    backend_env,
    cli_in_process,
    new_scope,
    start,
)
from tests.model_support import ScriptedModel

ADMIN = {"X-AMP-Admin-Token": ADMIN_TOKEN}
RUNBOOK = ("Refunds: check the order is under 30 days old.\n\n"
           "If it is, ask the team lead to approve the refund.\n\n"
           "If it is older, send the request to finance.\n\n"
           "Once approved, issue the refund in the billing tool.\n\n"
           "Gift cards are never refunded in cash.")
REFUND_TASK = "A customer asks for a refund of their order"
UNRELATED = "Tune the PostgreSQL autovacuum settings on the replica"


def answer(episode: str) -> dict[str, Any]:
    """The compile model's answer: one well-cited skill, one citing a unit never shown."""
    def cite(*units: int) -> list[dict[str, Any]]:
        return [{"episode": episode, "unit": u} for u in units]
    return {"skills": [
        {"name": "Refund an order", "when": "When a customer asks for a refund of an order.",
         "steps": [{"id": "check_age", "text": "Check the order is under 30 days old",
                    "cites": cite(1)},
                   {"id": "ask_lead", "text": "Ask the team lead to approve",
                    "cites": cite(2)},
                   {"id": "finance", "text": "Send it to finance", "cites": cite(3)},
                   {"id": "issue", "text": "Issue the refund in billing", "cites": cite(4)}],
         "edges": [{"from": "check_age", "to": "ask_lead", "condition": "under 30 days"},
                   {"from": "check_age", "to": "finance", "condition": "older"},
                   {"from": "ask_lead", "to": "issue", "condition": "approved"}],
         "edge_cases": [{"text": "Gift cards are never refunded in cash", "cites": cite(5)}]},
        {"name": "Invented procedure", "when": "Never.",
         "steps": [{"id": "s1", "text": "Something the document never says",
                    "cites": cite(99)}]},
    ]}


@dataclass
class Proc:
    m: Memory
    home: Path
    env: dict[str, str]
    scope: str
    model: ScriptedModel

    def settings(self, **extra: str) -> Settings:
        return Settings.model_validate({**self.env, **extra,
                                        "AMPUP_MEMORY_HOME": str(self.home)})

    def in_process(self, job: str, with_model: bool = True) -> dict[str, Any]:
        """One compile, cluster or learn pass in this process, through the service the
        commands open (as test_advice_loop does, to keep the file fast)."""
        settings = self.settings()
        svc = MemoryService.open(settings)
        scope = parse_scope(self.scope)
        try:
            if job == "compile":
                model = chat_model(settings, Role.COMPILE) if with_model else None
                return compile_pass(svc, model, WordLlamaEmbedder(), scope)
            if job == "cluster":
                return cluster_pass(svc, WordLlamaEmbedder(), None,
                                    settings.advice_situation_min_similarity, scope)
            return learn_pass(svc, chat_model(settings, Role.LEARN),
                              GateRules.from_settings(settings),
                              settings.advice_min_runs_for_note, scope)
        finally:
            svc.close()

    def procedures(self, user: str = "alice") -> dict[str, Any]:
        r = self.m.as_user(user).http.get("/procedures", params={"scope": self.scope})
        assert r.status_code == 200, r.text
        out: dict[str, Any] = r.json()
        return out

    def advice(self, task: str, user: str = "alice", session: str | None = None) -> Any:
        body = {"scope": self.scope, "task": task} | ({"session": session} if session else {})
        r = self.m.as_user(user).http.post("/advice", json=body)
        assert r.status_code == 200, r.text
        return r.json()


@pytest.fixture(scope="module", params=BACKENDS)
def proc(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
         scripted_model_process: ScriptedModel) -> Iterator[Proc]:
    env = {**backend_env(request.param, request), **scripted_model_process.env("COMPILE_"),
           **scripted_model_process.env("LEARN_"),
           "AMP_EMBEDDING_PROVIDER": "wordllama",
           "AMPUP_MEMORY_MODEL_RETRIES": "0",
           "AMPUP_MEMORY_ADVICE_JUDGE_INTERVAL_SECONDS": "0",
           "AMPUP_MEMORY_ADVICE_CLUSTER_INTERVAL_SECONDS": "0",
           "AMPUP_MEMORY_ADVICE_LEARN_INTERVAL_SECONDS": "0",
           "AMPUP_MEMORY_ADVICE_COMPILE_INTERVAL_SECONDS": "0",
           "AMPUP_MEMORY_ADVICE_MIN_RUNS_FOR_NOTE": "2",
           "AMPUP_MEMORY_ADVICE_PROMOTE_AFTER_PEOPLE": "1",
           "AMPUP_MEMORY_ADVICE_TRIAL_SHARE": "1.0"}
    home = tmp_path_factory.mktemp(f"advice-procedures-{request.param}")
    server = start(home, env)
    m = Memory(server.url)
    yield Proc(m, home, env, new_scope(), scripted_model_process)
    m.close()
    server.stop()


def test_procedures_are_compiled_and_served_until_a_note_is_promoted(proc: Proc) -> None:
    scope, model, alice = proc.scope, proc.model, proc.m.http
    r = proc.m.write(scope, RUNBOOK, acl=["user:alice"], document="refund-runbook")
    assert r.status_code == 201, r.text
    episode = r.json()["id"]

    # Choosing the documents is an admin's act, committed once (the same list: no commit).
    body = {"scope": scope, "documents": ["refund-runbook", "no-such-document"]}
    r = alice.put("/procedures/sources", json=body)
    assert r.status_code == 403, r.text
    r = alice.put("/procedures/sources", json=body, headers=ADMIN)
    assert r.status_code == 200, r.text
    assert r.json()["documents"] == body["documents"] and r.json()["commit"]
    assert alice.put("/procedures/sources", json=body, headers=ADMIN).json()["commit"] is None
    bad = alice.put("/procedures/sources", json={"scope": scope, "documents": [" "]},
                    headers=ADMIN)
    assert (bad.status_code, bad.json()["error"]["code"]) == (422, "VALIDATION_ERROR")
    assert proc.procedures()["procedures"] == [] and proc.advice(REFUND_TASK) == {
        "advice": None}

    # No model: a pass compiles nothing and says so.
    assert proc.in_process("compile", with_model=False) == {
        "scopes": [], "model": None, "message": "no compile model configured: nothing compiled"}
    # Model down, then garbage: nothing written, tried again by the next pass; the command
    # exits 2, as `extract` does when the model failed.
    for rules, default in (([], {"status": 500, "reply": "down"}),
                           ([{"match": "refund", "reply": "not json at all"}], None)):
        model.script(rules, default=default)
        report = proc.in_process("compile")
        assert report["scopes"][0]["failed"] == 1 and report["scopes"][0]["committed"] is None
        assert proc.procedures()["version"] is None
    done = cli_in_process(proc.home, proc.env, "advice", "compile", "--scope", scope)
    assert done.returncode == 2, done.stderr
    assert json.loads(done.stdout)["scopes"][0]["failed"] == 1
    assert done.stderr.splitlines()[-1] == (
        "error: the model failed on 1 scope(s); they keep their procedures until the next pass")
    assert proc.procedures()["version"] is None

    # The command compiles; the skill citing a unit never shown is rejected.
    model.script([{"match": "Refunds: check the order", "reply": answer(episode)}])
    done = cli_in_process(proc.home, proc.env, "advice", "compile", "--scope", scope)
    assert done.returncode == 0, done.stderr
    got = proc.procedures()
    assert got["version"] and got["model"] == model.name
    [skill] = got["procedures"]
    assert (skill["kind"], skill["name"], skill["steps"], skill["edge_cases"]) == (
        "procedure", "Refund an order", ["Check the order is under 30 days old",
                                         "Ask the team lead to approve", "Send it to finance",
                                         "Issue the refund in billing"],
        ["Gift cards are never refunded in cash"])
    assert [s["id"] for s in skill["graph"]["steps"]] == ["check_age", "ask_lead", "finance",
                                                          "issue"]
    assert {"from": "check_age", "to": "finance", "condition": "older"} in skill["graph"][
        "edges"]
    assert skill["sources"] == [{"episode": episode, "unit": u} for u in range(1, 6)]
    assert proc.procedures("bob")["procedures"][0]["sources"] == []  # bob may not read it

    # Nothing changed: the next pass neither asks the model nor commits.
    calls = len(model.calls())
    assert proc.in_process("compile")["scopes"][0]["committed"] is None
    assert len(model.calls()) == calls

    # Served for a matching task (and recorded on the session), not for an unrelated one.
    ses = alice.post("/sessions/start", json={"scope": scope, "task": REFUND_TASK}).json()["id"]
    advice = proc.advice(REFUND_TASK, session=ses)["advice"]
    assert (advice["kind"], advice["key"], advice["trial"], advice["situation"]) == (
        "procedure", skill["key"], False, None)
    assert advice["graph"] == skill["graph"] and advice["pitfalls"] == skill["edge_cases"]
    assert advice["sources"] == skill["sources"]
    served = alice.get(f"/sessions/{ses}").json()["steps"]
    assert [s["served"]["kind"] for s in served] == ["procedure"]
    assert proc.advice(UNRELATED) == {"advice": None}
    assert proc.advice(REFUND_TASK, user="bob")["advice"]["sources"] == []

    # Rewarded refund sessions teach a note: a candidate on trial in a session wins over
    # the procedure; outside a trial the procedure still answers; once promoted, the note.
    alice.post("/sessions/end", json={"session": ses, "transcript": "refunded",
                                      "outcome": "done", "reward": 1.0})
    for user in ("bob", "carol"):
        http = proc.m.as_user(user).http
        s = http.post("/sessions/start", json={"scope": scope, "task": REFUND_TASK}).json()
        http.post("/sessions/end", json={"session": s["id"], "transcript": "[kind:refund]",
                                         "outcome": "done", "reward": 1.0})
    assert proc.in_process("cluster")["scopes"][0]["committed"]
    model.script([{"match": "refund", "reply": {
        "when": "Refund requests.", "steps": ["Check the age.", "Refund."],
        "pitfalls": ["Cash for gift cards."]}}])
    assert proc.in_process("learn")["scopes"][0]["learned"] == 1
    assert proc.advice(REFUND_TASK)["advice"]["kind"] == "procedure"  # no trial, no note
    ses = alice.post("/sessions/start", json={"scope": scope, "task": REFUND_TASK}).json()["id"]
    note = proc.advice(REFUND_TASK, session=ses)["advice"]
    assert (note["kind"], note["trial"]) == ("note", True)
    alice.post("/sessions/end", json={"session": ses, "transcript": "used the note",
                                      "outcome": "done", "reward": 1.0})
    assert proc.in_process("learn")["scopes"][0]["promoted"] == 1
    advice = proc.advice(REFUND_TASK)["advice"]
    assert (advice["kind"], advice["key"], advice["state"]) == ("note", note["key"],
                                                                 "promoted")

    # An empty list leaves no procedures after the next compilation.
    alice.put("/procedures/sources", json={"scope": scope, "documents": []}, headers=ADMIN)
    assert proc.in_process("compile")["scopes"][0]["committed"]
    assert proc.procedures()["procedures"] == []


def test_answers_refused_on_every_pass_set_a_compile_and_a_situation_aside(
        proc: Proc) -> None:
    """Extraction's rule (models/setaside.py) for `advice compile` and `advice learn`: a
    scope's documents, or a situation, whose every attempt got an answer of the wrong shape
    was asked again on every pass, forever, a model call each time, and only ``failed``
    said so. After UNUSABLE_PASSES such passes it is set aside: one WARNING line naming it
    and the reason, ``set_aside`` in the report and a warning line from the command, no
    call on later passes; changed inputs (a new version of the document, a new rewarded
    session) ask again."""
    from dataclasses import replace

    from ampup_memory.models.setaside import UNUSABLE_PASSES

    own = replace(proc, scope=new_scope())
    scope, model, alice = own.scope, own.model, own.m.http
    runbook = "Backups: snapshot the volume nightly.\n\nCopy the snapshot off site."
    assert own.m.write(scope, runbook, acl=["user:alice"],
                       document="backup-runbook").status_code == 201
    assert alice.put("/procedures/sources", headers=ADMIN, json={
        "scope": scope, "documents": ["backup-runbook"]}).status_code == 200
    for n in range(1, 3):  # rewarded sessions of one kind of work, for a situation
        s = alice.post("/sessions/start", json={
            "scope": scope, "task": "Renew the TLS certificate of the load balancer"}).json()
        alice.post("/sessions/end", json={"session": s["id"], "transcript": f"renewed {n}",
                                          "outcome": "done", "reward": 1.0})
    assert own.in_process("cluster")["scopes"][0]["committed"]
    model.script([{"match": "Backups: snapshot", "reply": {"skills": "none"}},
                  {"match": "TLS certificate", "reply": {"when": "", "steps": ["Renew."]}}])
    compile_reason, learn_reason = ("skills: Input should be a valid list",
                                    "when: String should have at least 1 character")
    for _ in range(1, UNUSABLE_PASSES):
        compiled, learned = own.in_process("compile"), own.in_process("learn")
        assert (compiled["scopes"][0]["failed"], compiled["scopes"][0]["set_aside"]) == (1, 0)
        assert (learned["scopes"][0]["failed"], learned["scopes"][0]["set_aside"]) == (1, 0)
    calls = len(model.calls())
    for job, reason, what in (("compile", compile_reason, "scope"),
                              ("learn", learn_reason, "situation")):
        done = cli_in_process(own.home, own.env, "advice", job, "--scope", scope)
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout)["scopes"][0]
        assert (report["failed"], report["set_aside"]) == (0, 1), report
        warned = [line for line in done.stderr.splitlines() if "set aside after" in line]
        assert len(warned) == 1 and "WARNING" in warned[0] and reason in warned[0], done.stderr
        assert f"warning: 1 {what}(s) set aside" in done.stderr, done.stderr
    assert len(model.calls()) - calls == 2
    # Set aside: the next passes ask nothing.
    for job in ("compile", "learn"):
        assert own.in_process(job)["scopes"][0]["set_aside"] == 1
    assert len(model.calls()) - calls == 2
    assert own.procedures()["version"] is None
    # Changed inputs ask again: a new version of the document, a new rewarded session.
    assert own.m.write(scope, runbook + "\n\nTest a restore monthly.", acl=["user:alice"],
                       document="backup-runbook").status_code == 201
    assert own.in_process("compile")["scopes"][0]["failed"] == 1
    s = alice.post("/sessions/start", json={
        "scope": scope, "task": "Renew the TLS certificate of the load balancer"}).json()
    alice.post("/sessions/end", json={"session": s["id"], "transcript": "renewed 3",
                                      "outcome": "done", "reward": 1.0})
    assert own.in_process("cluster")["scopes"][0]["committed"]
    assert own.in_process("learn")["scopes"][0]["failed"] == 1
    assert len(model.calls()) - calls == 4


def document_and_situation(own: Proc, key: str, text: str, task: str) -> None:
    """A scope with one chosen document (``key``: ``text``, alice's) and one situation: two
    rewarded sessions of ``task``, clustered."""
    alice = own.m.http
    assert own.m.write(own.scope, text, acl=["user:alice"], document=key).status_code == 201
    assert alice.put("/procedures/sources", headers=ADMIN, json={
        "scope": own.scope, "documents": [key]}).status_code == 200
    for n in range(1, 3):
        s = alice.post("/sessions/start", json={"scope": own.scope, "task": task}).json()
        alice.post("/sessions/end", json={"session": s["id"], "transcript": f"done {n}",
                                          "outcome": "done", "reward": 1.0})
    assert own.in_process("cluster")["scopes"][0]["committed"]


def test_requests_refused_set_a_compile_and_a_situation_aside_until_the_scope_goes(
        proc: Proc) -> None:
    """`setaside.Asker`, the one rule of every model pass, for `advice compile` and
    `advice learn`: an HTTP 400 for a scope's documents or a situation (too long, say) was
    a plain failure on every pass, forever. The pass ran out of items with the endpoint
    refusing none other, so each refusal counts; after UNUSABLE_PASSES passes the item is
    set aside, no call is made, and ``GET /set-aside`` lists both (a situation and a
    compilation are shown to whoever may read the scope's map and procedures). The
    workspace deleted, its records go with it."""
    from ampup_memory.models.setaside import UNUSABLE_PASSES, set_aside_items

    model, alice = proc.model, proc.m.http
    ws = alice.post("/workspaces", json={"name": "refusals", "ttl": "1h"})
    assert ws.status_code == 201, ws.text
    org = ws.json()["org"]
    own = Proc(proc.m, proc.home, proc.env, f"{org}/ops", model)
    scope = own.scope
    document_and_situation(own, "failover-runbook",
                           "Failover: promote the replica.\n\nRepoint the DNS name.",
                           "Rotate the database passwords of the cluster")
    model.script([{"match": "Failover: promote", "status": 400},
                  {"match": "database passwords", "status": 400}])
    for n in range(1, UNUSABLE_PASSES + 1):
        last = n == UNUSABLE_PASSES
        for job in ("compile", "learn"):
            calls = len(model.calls())
            report = own.in_process(job)["scopes"][0]
            assert (report["failed"], report["set_aside"]) == (int(not last), int(last)), (
                job, n, report)
            assert len(model.calls()) - calls == 1, (job, n)
        if not last:
            assert own.m.http.get("/set-aside", params={"scope": scope}).json()["items"] == []
    calls = len(model.calls())
    for job in ("compile", "learn"):
        assert own.in_process(job)["scopes"][0]["set_aside"] == 1
    assert len(model.calls()) == calls
    situation = own.m.http.get("/situations", params={"scope": scope}).json()
    sid = situation["situations"][0]["id"]
    for user in ("alice", "bob"):
        r = own.m.as_user(user).http.get("/set-aside", params={"scope": scope})
        assert r.status_code == 200, r.text
        got = sorted((i["kind"], i["item"], i["passes"]) for i in r.json()["items"])
        assert got == [("compile", scope, UNUSABLE_PASSES), ("learn", sid, UNUSABLE_PASSES)]
        assert all("HTTP 400" in i["reason"] for i in r.json()["items"]), r.json()
    r = alice.get("/set-aside", params={"scope": scope, "kind": "learn"})
    assert [i["item"] for i in r.json()["items"]] == [sid], r.text
    done = cli_in_process(own.home, own.env, "set-aside", "--kind", "compile")
    assert done.returncode == 0, done.stderr
    assert scope in [json.loads(x)["item"] for x in done.stdout.splitlines()]
    # The workspace deleted: the route answers 404, and no listing keeps its records.
    assert alice.delete(f"/workspaces/{org}").status_code == 200
    r = alice.get("/set-aside", params={"scope": scope})
    assert (r.status_code, r.json()["error"]["code"]) == (404, "WORKSPACE_GONE"), r.text
    done = cli_in_process(own.home, own.env, "set-aside")
    assert done.returncode == 0 and scope not in done.stdout, done.stdout
    svc = MemoryService.open(own.settings())
    try:
        kept = set_aside_items(svc.index, scope, None, {
            k: lambda _scope, items: (items, []) for k in ("compile", "learn")})
    finally:
        svc.close()
    assert kept == []


def test_a_situation_clustered_out_and_a_compile_with_no_documents_leave_the_listing(
        proc: Proc) -> None:
    """The listing shows what the model passes would not ask now. A record another model
    set aside is not listed where that model is no longer configured (the next pass asks
    the item again; it stayed listed until then), and is listed where it is. A record whose
    item is no longer work is dropped: a compilation once the scope's chosen documents are
    emptied (it stayed listed: nothing is left to compile), a situation once a re-clustering
    leaves it out of the map (here: the map rebuilt by another embedder, so every situation
    gets a new id). Over HTTP and through `ampup-memory set-aside`."""
    from dataclasses import replace

    from ampup_memory.models.setaside import UNUSABLE_PASSES, set_aside_items
    from ampup_memory.search.embed import HashEmbedder

    own = replace(proc, scope=new_scope())
    scope, model, alice = own.scope, own.model, own.m.http
    document_and_situation(own, "restore-runbook",
                           "Restore: mount the snapshot.\n\nCheck the checksums.",
                           "Archive the mailboxes of people who left")
    model.script([{"match": "Restore: mount", "reply": {"skills": "none"}},
                  {"match": "mailboxes", "reply": {"when": "", "steps": ["Archive."]}}])
    for _ in range(UNUSABLE_PASSES):
        own.in_process("compile")
        own.in_process("learn")

    def listed() -> list[tuple[str, str]]:
        r = alice.get("/set-aside", params={"scope": scope})
        assert r.status_code == 200, r.text
        return sorted((i["kind"], i["item"]) for i in r.json()["items"])

    [old] = [s["id"] for s in alice.get("/situations", params={"scope": scope}).json()[
        "situations"]]
    assert listed() == [("compile", scope), ("learn", old)]

    # Another compile model (same endpoint, another name) sets the compilation aside anew.
    other = {**own.env, "AMPUP_MEMORY_COMPILE_MODEL": "scripted-2"}
    svc = MemoryService.open(own.settings(AMPUP_MEMORY_COMPILE_MODEL="scripted-2"))
    try:
        compiler = chat_model(own.settings(AMPUP_MEMORY_COMPILE_MODEL="scripted-2"),
                              Role.COMPILE)
        for _ in range(UNUSABLE_PASSES):
            compile_pass(svc, compiler, WordLlamaEmbedder(), parse_scope(scope))
    finally:
        svc.close()

    def listed_by(env: dict[str, str]) -> list[tuple[str, str, str]]:
        done = cli_in_process(own.home, env, "set-aside", "--scope", scope)
        assert done.returncode == 0, done.stderr
        return sorted((i["kind"], i["item"], i["model"])
                      for i in map(json.loads, done.stdout.splitlines()))

    assert listed() == [("learn", old)]  # the server asks scripted-1: compile asks again
    assert listed_by(other) == [("compile", scope, "scripted-2"), ("learn", old, model.name)]
    assert listed_by(own.env) == [("learn", old, model.name)]

    assert alice.put("/procedures/sources", headers=ADMIN, json={
        "scope": scope, "documents": []}).status_code == 200
    assert listed_by(other) == [("learn", old, model.name)]
    assert listed() == [("learn", old)]

    svc = MemoryService.open(own.settings())
    try:
        report = cluster_pass(svc, HashEmbedder(), None,
                              own.settings().advice_situation_min_similarity,
                              parse_scope(scope))
        assert report["scopes"][0]["committed"], report
        now = [s["id"] for s in alice.get("/situations", params={"scope": scope}).json()[
            "situations"]]
        assert now and old not in now
        assert listed() == []
        kept = set_aside_items(svc.index, scope, None, {
            k: lambda _scope, items: (items, []) for k in ("compile", "learn")})
    finally:
        svc.close()
    assert kept == []
