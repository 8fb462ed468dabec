"""The advice loop end to end over real HTTP: sessions from six users across three kinds of
task → `advice cluster` (situations) → `advice learn` (notes, scripted learning model) →
POST /advice serving candidates on trial, the evidence gate promoting a note only once three
different people were helped, retiring one that does not help, and nothing for an
unrelated task.

The server is real (WordLlama embeddings, SQLite or PostgreSQL catalog, real Iceberg
tables); the
commands run through the CLI's own entry in this process (`cli_in_process`), and the later
learn passes through the same service the command opens (as the judge tests do), to keep
the file fast.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ampup_memory.advice.gate import GateRules
from ampup_memory.advice.loop import cluster_pass, learn_pass
from ampup_memory.advice.sessions import MAX_SESSION_ID
from ampup_memory.memory.scopes import parse_scope
from ampup_memory.memory.service import MemoryService
from ampup_memory.models.chat import Role, chat_model
from ampup_memory.search.embed import WordLlamaEmbedder
from ampup_memory.settings import Settings
from tests.memory_support import (
    BACKENDS,
    Memory,
    backend_env,
    cli_in_process,
    new_scope,
    run_cli,
    start,
)
from tests.model_support import ScriptedModel
from tests.test_advice_learning import KINDS, NEW_TASKS, UNRELATED
from tests.test_mcp import http_client_for, ok

USERS = [f"u{i}" for i in range(1, 7)]
NOTES = {kind: {"when": f"For {kind} tasks.", "steps": [f"Do the {kind} thing first.",
                                                          "Check the result."],
                "pitfalls": [f"Skipping the {kind} check."]} for kind in KINDS}


@dataclass
class Loop:
    m: Memory
    home: Path
    env: dict[str, str]
    scope: str
    model: ScriptedModel

    def settings(self) -> Settings:
        return Settings.model_validate({**self.env, "AMPUP_MEMORY_HOME": str(self.home)})

    def learn(self) -> dict[str, Any]:
        settings = self.settings()
        svc = MemoryService.open(settings)
        try:
            report = learn_pass(svc, chat_model(settings, Role.LEARN),
                                GateRules.from_settings(settings),
                                settings.advice_min_runs_for_note, parse_scope(self.scope))
        finally:
            svc.close()
        scope_report: dict[str, Any] = report["scopes"][0]
        return scope_report

    def session(self, user: str, task: str, reward: float, kind: str = "") -> tuple[str, Any]:
        """One session of ``user``: start, ask for advice, end with an explicit reward."""
        http = self.m.as_user(user).http
        r = http.post("/sessions/start", json={"scope": self.scope, "task": task})
        assert r.status_code == 201, r.text
        ses = r.json()["id"]
        advice = http.post("/advice", json={"scope": self.scope, "task": task,
                                            "session": ses})
        assert advice.status_code == 200, advice.text
        r = http.post("/sessions/end", json={
            "session": ses, "transcript": f"[kind:{kind}] worked on it", "outcome": "done",
            "reward": reward})
        assert r.status_code == 200, r.text
        return ses, advice.json()["advice"]

    def notes(self, user: str = "u1") -> dict[str, dict[str, Any]]:
        r = self.m.as_user(user).http.get("/notes", params={"scope": self.scope})
        assert r.status_code == 200, r.text
        return {n["situation"]: n for n in r.json()["notes"]}


@pytest.fixture(scope="module", params=BACKENDS)
def loop(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
         scripted_model_process: ScriptedModel) -> Iterator[Loop]:
    env = {**backend_env(request.param, request), **scripted_model_process.env("LEARN_"),
           "AMP_EMBEDDING_PROVIDER": "wordllama",
           "AMPUP_MEMORY_MODEL_RETRIES": "0",
           "AMPUP_MEMORY_ADVICE_JUDGE_INTERVAL_SECONDS": "0",
           "AMPUP_MEMORY_ADVICE_CLUSTER_INTERVAL_SECONDS": "0",
           "AMPUP_MEMORY_ADVICE_LEARN_INTERVAL_SECONDS": "0",
           "AMPUP_MEMORY_ADVICE_TRIAL_SHARE": "1.0",
           "AMPUP_MEMORY_ADVICE_RETIRE_MIN_SERVED": "4"}
    home = tmp_path_factory.mktemp(f"advice-loop-{request.param}")
    proc = start(home, env)
    m = Memory(proc.url)
    yield Loop(m, home, env, new_scope(), scripted_model_process)
    m.close()
    proc.stop()


def test_the_learning_loop(loop: Loop) -> None:
    scope, model = loop.scope, loop.model
    # ~40 sessions from six users across three kinds of task, explicitly rewarded; before
    # any map exists there is no advice.
    kind_of: dict[str, str] = {}
    n = 0
    for kind, texts in KINDS.items():
        for i, text in enumerate(texts):
            reward = -0.5 if i % 5 == 4 else 1.0
            ses, advice = loop.session(USERS[n % len(USERS)], text, reward, kind)
            assert advice is None
            kind_of[ses] = kind
            n += 1
    assert n == 40

    # Situations: one per kind of task, committed as the scope's first map version.
    done = cli_in_process(loop.home, loop.env, "advice", "cluster", "--scope", scope)
    assert done.returncode == 0, done.stderr
    u1 = loop.m.as_user("u1").http
    smap = u1.get("/situations", params={"scope": scope}).json()
    assert smap["versions"] == 1 and len(smap["situations"]) == 3
    situation_of_kind: dict[str, str] = {}
    mine = {s for s in kind_of if loop.m.as_user("u1").http.get(f"/sessions/{s}")
            .status_code == 200}
    for s in smap["situations"]:
        kinds = {kind_of[m] for m in s["members"]}
        assert len(kinds) == 1, s  # one kind of task per situation
        assert set(s["members"]) <= mine  # only the sessions u1 may read are listed
        situation_of_kind[kinds.pop()] = s["id"]
        assert s["size"] > len(s["members"])
    assert sorted(situation_of_kind) == sorted(KINDS)

    # Model down during learn: nothing half-written, the next pass learns.
    model.script([], default={"status": 500, "reply": "down"})
    done = run_cli(loop.home, loop.env, "advice", "learn", "--scope", scope)
    assert done.returncode == 2, done.stderr  # as `extract`: the model failed on an item
    assert json.loads(done.stdout)["scopes"][0]["failed"] == 3
    assert done.stderr.splitlines()[-1] == (
        "error: the model failed on 3 situation(s); they are tried again next pass")
    assert loop.notes() == {}
    model.script([{"match": f"[kind:{kind}]", "reply": NOTES[kind]} for kind in KINDS])
    done = cli_in_process(loop.home, loop.env, "advice", "learn", "--scope", scope)
    assert done.returncode == 0, done.stderr
    notes = loop.notes()
    assert set(notes) == set(situation_of_kind.values())
    for kind, sit in situation_of_kind.items():
        note = notes[sit]
        assert (note["state"], note["when"], note["steps"]) == (
            "candidate", NOTES[kind]["when"], NOTES[kind]["steps"])
        assert note["evidence"] == {"served": 0, "applied": 0, "helped": 0,
                                    "helped_by_people": 0}
        assert note["sources"] and set(note["sources"]) <= mine
    sql_key = notes[situation_of_kind["sql"]]["key"]

    # A candidate is served on trial in sessions; one user helped ten times is one person.
    sql_task = NEW_TASKS["sql"][0]
    for _ in range(10):
        _, advice = loop.session("u1", sql_task, 1.0, "sql")
        assert (advice["key"], advice["kind"], advice["trial"]) == (sql_key, "note", True)
        assert advice["situation"] == situation_of_kind["sql"]
    report = loop.learn()  # evidence of the one note served; no second note anywhere
    assert (report["reviewed"], report["learned"]) == (1, 0)
    note = loop.notes()[situation_of_kind["sql"]]
    assert note["state"] == "candidate"
    assert note["evidence"] == {"served": 10, "applied": 10, "helped": 10,
                                "helped_by_people": 1}
    loop.session("u2", sql_task, 1.0, "sql")
    loop.learn()
    assert loop.notes()[situation_of_kind["sql"]]["state"] == "candidate"  # two: not enough
    # Without a session a candidate is never served (no trial draw).
    r = u1.post("/advice", json={"scope": scope, "task": sql_task})
    assert r.json() == {"advice": None, "situation": situation_of_kind["sql"]}

    loop.session("u3", sql_task, 1.0, "sql")
    assert loop.learn()["promoted"] == 1
    note = loop.notes()[situation_of_kind["sql"]]
    assert note["state"] == "promoted" and note["evidence"]["helped_by_people"] == 3
    assert [h["kind"] for h in note["history"]][-1] == "promoted"
    assert all("user" not in h for h in note["history"])  # who was helped is not shown
    # Its steps name only the sessions u1 may read, as `sources` does (they named u2's and
    # u3's too, which u1's GET /sessions/{id} answers 404; sec31); the counters count all.
    named = {h["session"] for h in note["history"] if h.get("session")}
    assert named and all(u1.get(f"/sessions/{s}").status_code == 200 for s in named), named
    assert sum(h["kind"] == "outcome" for h in note["history"]) == 12
    # every step has the shape docs/api.md gives, `created` too (it had no `evidence`)
    assert all({"kind", "state", "evidence", "at"} <= set(h) for h in note["history"])
    assert note["history"][0]["evidence"] == {"served": 0, "applied": 0, "helped": 0,
                                              "helped_by_people": 0}

    # A promoted note is served to anyone, always; an unrelated task gets nothing.
    for user in ("u4", "someone-else"):
        r = loop.m.as_user(user).http.post("/advice", json={"scope": scope,
                                                            "task": NEW_TASKS["sql"][1]})
        advice = r.json()["advice"]
        assert (advice["key"], advice["trial"], advice["state"]) == (sql_key, False, "promoted")
        assert advice["evidence"]["helped_by_people"] == 3
    assert r.json()["advice"]["sources"] == []  # someone-else may read none of them
    assert asyncio.run(mcp_advice(loop.m.url, scope, NEW_TASKS["sql"][1])) == r.json()
    for text in UNRELATED:
        assert u1.post("/advice", json={"scope": scope, "task": text}).json() == {
            "advice": None}

    # A note that does not help is retired and no longer served.
    email_key = notes[situation_of_kind["email"]]["key"]
    email_task = NEW_TASKS["email"][0]
    for user in USERS[:4]:
        _, advice = loop.session(user, email_task, -1.0, "email")
        assert advice["key"] == email_key
    assert loop.learn()["retired"] == 1
    note = loop.notes()[situation_of_kind["email"]]
    assert note["state"] == "retired" and note["evidence"]["helped"] == 0
    _, advice = loop.session("u5", email_task, 1.0, "email")
    assert advice is None

    # Re-clustering commits a new version that keeps the situations' ids.
    settings = loop.settings()
    svc = MemoryService.open(settings)
    try:
        reports = [cluster_pass(svc, WordLlamaEmbedder(), None,
                                settings.advice_situation_min_similarity,
                                parse_scope(scope))["scopes"][0] for _ in range(2)]
    finally:
        svc.close()
    assert reports[0]["committed"] and reports[1]["committed"] is None  # nothing new
    again = u1.get("/situations", params={"scope": scope}).json()
    assert again["versions"] == 2
    assert {s["id"] for s in again["situations"]} >= set(situation_of_kind.values())


def test_the_inspector_shows_only_the_advice_evidence_one_may_read(
        loop: Loop, request: pytest.FixtureRequest) -> None:
    """The advice page in a real browser on what the loop above left (a promoted, a
    retired and a candidate note, their evidence, the situation map): each user sees the
    notes with When / Steps / Pitfalls, counters and gate state, and only the sessions
    (runs) they may read, as GET /notes and GET /situations answer them."""
    if request.node.callspec.params.get("loop") != "sqlite":
        pytest.skip("the page is the same on every backend: checked once, on SQLite")
    from tests.browser import chromium
    from tests.test_inspector import Inspector

    shown: dict[str, set[str]] = {}
    with chromium() as browser:
        ins = Inspector(browser, loop.m.url)
        try:
            for user in ("u1", "someone-else"):
                http = loop.m.as_user(user).http
                notes = http.get("/notes", params={"scope": loop.scope}).json()["notes"]
                assert {n["state"] for n in notes} == {"candidate", "promoted", "retired"}
                ins.be(user=user)
                ins.go(f"#/advice?scope={loop.scope.replace('/', '%2F')}", ".note")
                page = ins.page
                cards = page.locator(".note")
                assert cards.count() == len(notes)
                for i, n in enumerate(notes):
                    card = cards.nth(i)
                    text = card.inner_text()
                    assert n["state"] in text and n["when"] in text
                    assert all(step in text for step in n["steps"] + n["pitfalls"])
                    assert card.locator(".evidence").inner_text() == " · ".join(
                        f"{k} {v}" for k, v in n["evidence"].items())
                    ids = {c.get_attribute("data-session")
                           for c in card.locator("[data-session]").all()}
                    assert ids == set(n["sources"])
                situations = http.get("/situations", params={"scope": loop.scope}).json()
                members = {m for s in situations["situations"] for m in s["members"]}
                listed = {m for cell in page.locator("[data-members]").all()
                          for m in (cell.get_attribute("data-members") or "").split()}
                assert listed == members
                # The notes' sources: the Sessions list below carries data-session too
                # (its rows), and is checked against GET /sessions on its own.
                shown[user] = {c.get_attribute("data-session") or ""
                               for c in page.locator(".note [data-session]").all()} | listed
                sessions = http.get("/sessions", params={"scope": loop.scope,
                                                         "limit": 25}).json()["sessions"]
                rows = page.locator("#sessions tbody tr")
                rows.first.wait_for()
                page.wait_for_function(  # the list's first page has arrived
                    "n => document.querySelectorAll('#sessions tbody tr').length >= n",
                    arg=max(len(sessions), 1))
                assert [r.get_attribute("data-session")
                        for r in page.locator("#sessions tr[data-session]").all()] == [
                    s["id"] for s in sessions]
                for ses in shown[user]:  # every session shown is one the user may read
                    assert http.get(f"/sessions/{ses}").status_code == 200
                if user == "u1":
                    ins.shot("advice")
                    html_u1 = page.content()
            assert shown["u1"] and not shown["someone-else"]  # nothing of u1's runs
            html = ins.page.content()
            assert not any(ses in html for ses in shown["u1"]) and html != html_u1
            assert ins.errors == [], f"console errors: {ins.errors}"
        finally:
            ins.close()


async def mcp_advice(url: str, scope: str, task: str) -> Any:
    headers = {"X-AMP-Agent-ID": "agent_other", "X-AmpUp-User": "someone-else"}
    async with http_client_for(url, headers) as client:
        return json.loads(await ok(client, "get_advice", scope=scope, task=task))


def test_every_session_field_is_bounded_by_the_one_constant() -> None:
    """A session id as a request names it is at most `sessions.MAX_SESSION_ID` characters,
    wherever it is named: `AdviceRequest.session` kept its own literal 64 beside it, free to
    drift. No field or argument called `session` spells its bound as a number."""
    import ast

    src = Path(__file__).resolve().parent.parent / "src" / "ampup_memory"
    literal = []
    for path in sorted(src.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.AnnAssign | ast.arg) and (
                    getattr(node, "arg", None) == "session"
                    or getattr(getattr(node, "target", None), "id", None) == "session")):
                continue
            for call in ast.walk(node):
                for kw in getattr(call, "keywords", []):
                    if kw.arg == "max_length" and isinstance(kw.value, ast.Constant):
                        literal.append(f"{path.relative_to(src)}:{node.lineno}")
    assert literal == []


def test_advice_errors(loop: Loop) -> None:
    http = loop.m.http
    assert http.post("/advice", json={"scope": loop.scope}).status_code == 422
    r = http.post("/advice", json={"scope": loop.scope, "task": "x",
                                   "session": f"ses_{'0' * 26}"})
    assert (r.status_code, r.json()["error"]["code"]) == (404, "NOT_FOUND")
    # One bound for a session id, as POST /sessions/end has it.
    too_long = "s" * (MAX_SESSION_ID + 1)
    for path, body in (("/advice", {"scope": loop.scope, "task": "x", "session": too_long}),
                       ("/sessions/end", {"session": too_long, "outcome": "done"})):
        r = http.post(path, json=body)
        assert r.status_code == 422, r.text
        assert [(e["loc"][-1], e["type"]) for e in r.json()["error"]["details"]["errors"]
                if e["loc"][-1] == "session"] == [("session", "string_too_long")], r.text
    assert loop.m.http.get("/situations", params={"scope": "nope"}).status_code == 422
    # An ended session is refused whether or not anything would be served: a scope with no
    # situations or procedures serves nothing, and still answers 409, as api.md says.
    fresh = new_scope()
    ses = http.post("/sessions/start", json={"scope": fresh, "task": "x"}).json()["id"]
    assert http.post("/sessions/end", json={"session": ses, "transcript": "t",
                                            "outcome": "done"}).status_code == 200
    r = http.post("/advice", json={"scope": fresh, "task": "x", "session": ses})
    assert (r.status_code, r.json()["error"]["code"]) == (409, "SESSION_ENDED"), r.text
