"""Runs, rewards and sessions of the advice loop, over real HTTP against a real server on
both catalogs (SQLite and PostgreSQL), real Iceberg tables, and the scripted judge model.

Judging runs in this process through the same service the server opens (a second real
process on the same tables and index, as the `advice judge` command is); one test runs the
command itself. Advice steps are appended with `record_advice_step`, the function POST
/advice calls.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from ampup_memory.advice.judge import judge_pass
from ampup_memory.advice.runs import rewarded_tasks
from ampup_memory.advice.sessions import EndSession, end_session, record_advice_step
from ampup_memory.memory.service import MemoryService
from ampup_memory.models.chat import Role, chat_model
from ampup_memory.settings import Settings
from tests.memory_support import (
    BACKENDS,
    QUIET,
    Memory,
    backend_env,
    cli_in_process,
    new_scope,
    run_cli,
    start,
)
from tests.model_support import ScriptedModel
from tests.test_mcp import http_client_for, ok


@dataclass
class Served:
    m: Memory
    home: Path
    env: dict[str, str]

    def settings(self) -> Settings:
        return Settings.model_validate({**self.env, "AMPUP_MEMORY_HOME": str(self.home)})

    @contextmanager
    def service(self) -> Iterator[MemoryService]:
        svc = MemoryService.open(self.settings())
        try:
            yield svc
        finally:
            svc.close()


@pytest.fixture(scope="module", params=BACKENDS)
def srv(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
        scripted_model_process: ScriptedModel) -> Iterator[Served]:
    env = {**backend_env(request.param, request), **scripted_model_process.env("JUDGE_"),
           "AMPUP_MEMORY_MODEL_RETRIES": "0",
           "AMPUP_MEMORY_ADVICE_JUDGE_INTERVAL_SECONDS": "0"}
    home = tmp_path_factory.mktemp(f"advice-{request.param}")
    proc = start(home, env)
    client = Memory(proc.url)
    yield Served(client, home, env)
    client.close()
    proc.stop()


def err(r: Any) -> tuple[int, str]:
    body = r.json()
    assert set(body) == {"error"}, body
    return r.status_code, body["error"]["code"]


def record(m: Memory, scope: str, **extra: Any) -> str:
    r = m.http.post("/runs", json={"scope": scope, "task": "fix the flaky login test",
                                   **extra})
    assert r.status_code == 201, r.text
    run_id: str = r.json()["id"]
    assert run_id.startswith("run_") and len(run_id) == 30
    return run_id


def test_a_run_is_read_only_by_its_readers(srv: Served) -> None:
    m, bob = srv.m, srv.m.as_user("bob")
    scope = new_scope()
    private = record(m, scope, trace="ran pytest -x; fixed the wait", outcome="green",
                     advice_key="note_login")
    shared = record(m, scope, acl=["*"])

    got = m.http.get(f"/runs/{private}").json()
    assert (got["id"], got["scope"], got["user"], got["acl"]) == (
        private, scope, "alice", ["user:alice"])
    assert (got["trace"], got["outcome"], got["advice_key"]) == (
        "ran pytest -x; fixed the wait", "green", "note_login")
    assert got["reward"] is None and got["rewards"] == []

    # Someone who may not read it gets exactly the answer of an id that does not exist.
    hidden, unknown = bob.http.get(f"/runs/{private}"), bob.http.get(f"/runs/run_{'0' * 26}")
    assert err(hidden) == err(unknown) == (404, "NOT_FOUND")
    assert hidden.json() == unknown.json()
    assert err(bob.http.get(f"/sessions/{private}")) == (404, "NOT_FOUND")  # not a session

    assert [r["id"] for r in m.http.get("/runs", params={"scope": scope}).json()["runs"]] == [
        shared, private]  # newest first
    assert [r["id"] for r in bob.http.get("/runs", params={"scope": scope}).json()["runs"]] == [
        shared]
    page = m.http.get("/runs", params={"scope": scope, "limit": 1}).json()
    assert [r["id"] for r in page["runs"]] == [shared] and page["next_before"] == shared
    rest = m.http.get("/runs", params={"scope": scope, "before": shared}).json()
    assert [r["id"] for r in rest["runs"]] == [private] and rest["next_before"] is None
    # A cursor that is no run id is a 422, not a page cut at an arbitrary string.
    for bad in ("x", "", "\u202e", "run_" + "0" * 25, shared.lower()):
        r = m.http.get("/runs", params={"scope": scope, "before": bad})
        assert err(r) == (422, "VALIDATION_ERROR"), (bad, r.text)

    # Each run is one commit in the scope's ledger.
    assert [c["changes"].get("events") for c in m.ledger(scope)] == [1, 1]
    assert err(m.http.post("/runs", json={"scope": scope})) == (422, "VALIDATION_ERROR")
    assert err(m.as_user("").http.post("/runs", json={"scope": scope, "task": "x"}))[0] == 401


def test_a_retried_recording_with_its_key_records_one_run(srv: Served) -> None:
    """A client that lost the answer to POST /runs sends it again: with the same
    ``idempotency_key`` that is the run the first one recorded (200, ``created: false``),
    however many retries race, on either catalog; the key with another body is a 409; the
    same key is another user's own, and a run sent without a key is recorded each time."""
    m, bob = srv.m, srv.m.as_user("bob")
    scope = new_scope()
    run = {"scope": scope, "task": "rotate the keys", "outcome": "done",
           "idempotency_key": "3f1c-retry-me"}
    first = m.http.post("/runs", json=run)
    assert first.status_code == 201 and first.json()["created"] is True, first.text
    again = m.http.post("/runs", json=run)
    assert again.status_code == 200, again.text
    assert again.json() == {**first.json(), "created": False}

    racing = {**run, "idempotency_key": "raced"}
    with ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(lambda _: m.http.post("/runs", json=racing), range(6)))
    assert sorted(a.status_code for a in answers) == [200] * 5 + [201], [
        a.text for a in answers]
    assert len({a.json()["id"] for a in answers}) == 1

    changed = m.http.post("/runs", json={**run, "outcome": "failed"})
    assert err(changed) == (409, "IDEMPOTENCY_KEY_REUSED")
    assert first.json()["id"] in changed.json()["error"]["message"]
    theirs = bob.http.post("/runs", json=run)
    assert theirs.status_code == 201 and theirs.json()["id"] != first.json()["id"]
    unkeyed = {k: v for k, v in run.items() if k not in ("idempotency_key", "scope")}
    assert len({record(m, scope, **unkeyed) for _ in range(2)}) == 2
    listed = m.http.get("/runs", params={"scope": scope}).json()["runs"]
    assert len(listed) == 4, listed  # the keyed, the raced and two unkeyed
    for blank in ("", "  "):
        assert err(m.http.post("/runs", json={**run, "idempotency_key": blank})) == (
            422, "VALIDATION_ERROR")
    # A session's start, the same way; its key apart from a run's.
    start = {"scope": scope, "task": "review", "idempotency_key": "3f1c-retry-me"}
    opened = m.http.post("/sessions/start", json=start)
    assert opened.status_code == 201 and opened.json()["created"] is True, opened.text
    reopened = m.http.post("/sessions/start", json=start)
    assert reopened.status_code == 200 and reopened.json() == {**opened.json(),
                                                               "created": False}
    assert err(m.http.post("/sessions/start", json={**start, "task": "other"})) == (
        409, "IDEMPOTENCY_KEY_REUSED")
    assert len(m.http.get("/sessions", params={"scope": scope}).json()["sessions"]) == 1


def test_a_second_reward_replaces_the_first_and_both_stay(srv: Served) -> None:
    m, bob = srv.m, srv.m.as_user("bob")
    scope = new_scope()
    run = record(m, scope)
    first = m.http.post("/runs/reward", json={"run": run, "reward": 0.5, "reason": "ok"})
    assert first.status_code == 201, first.text
    second = m.http.post("/runs/reward", json={"run": run, "reward": -1, "reason": "broke CI"})
    assert second.status_code == 201

    got = m.http.get(f"/runs/{run}").json()
    assert (got["reward"]["value"], got["reward"]["by"], got["reward"]["reason"]) == (
        -1.0, "explicit", "broke CI")
    assert [r["value"] for r in got["rewards"]] == [0.5, -1.0]
    listed = m.http.get("/runs", params={"scope": scope}).json()["runs"]
    assert listed[0]["reward"]["value"] == -1.0

    for bad in (1.5, -1.01, "high"):
        r = m.http.post("/runs/reward", json={"run": run, "reward": bad, "reason": "x"})
        assert err(r) == (422, "VALIDATION_ERROR")
    assert err(bob.http.post("/runs/reward", json={"run": run, "reward": 1, "reason": "x"})
               ) == (404, "NOT_FOUND")
    assert len(m.http.get(f"/runs/{run}").json()["rewards"]) == 2  # nothing else landed

    with srv.service() as svc:
        tasks = {t.id: t for t in rewarded_tasks(svc, scope)}
        assert set(tasks) == {run} and tasks[run].reward == -1.0
        assert (tasks[run].kind, tasks[run].user) == ("run", "alice")
        assert rewarded_tasks(svc, scope, principal=svc.principal("bob")) == []


def test_session_lifecycle(srv: Served) -> None:
    m, bob = srv.m, srv.m.as_user("bob")
    scope = new_scope()
    r = m.http.post("/sessions/start", json={"scope": scope, "task": "triage ticket 42"})
    assert r.status_code == 201, r.text
    ses = r.json()["id"]
    assert ses.startswith("ses_")
    opened = m.http.get(f"/sessions/{ses}").json()
    assert (opened["state"], opened["task"], opened["steps"], opened["judging"]) == (
        "open", "triage ticket 42", [], None)

    with srv.service() as svc:
        step = record_advice_step(svc, "alice", ses, {"key": "note_triage", "kind": "note"})
        assert step["session"] == ses
        with pytest.raises(Exception, match="No such session"):
            record_advice_step(svc, "bob", ses, {"key": "note_triage"})

    assert err(bob.http.get(f"/sessions/{ses}")) == (404, "NOT_FOUND")
    assert err(bob.http.post("/sessions/end", json={
        "session": ses, "transcript": "t", "outcome": "o"})) == (404, "NOT_FOUND")
    end = m.http.post("/sessions/end", json={"session": ses, "transcript": "read logs",
                                             "outcome": "closed as duplicate"})
    assert end.status_code == 200, end.text
    got = m.http.get(f"/sessions/{ses}").json()
    assert (got["state"], got["transcript"], got["outcome"]) == (
        "ended", "read logs", "closed as duplicate")
    assert [s["served"] for s in got["steps"]] == [{"key": "note_triage", "kind": "note"}]
    assert (got["reward"], got["judging"]) == (None, "pending")

    again = m.http.post("/sessions/end", json={"session": ses, "transcript": "x",
                                               "outcome": "y"})
    assert err(again) == (409, "SESSION_ENDED")
    # the same request again (its answer lost) answers the session it ended, writing nothing
    retried = m.http.post("/sessions/end", json={"session": ses, "transcript": "read logs",
                                                 "outcome": "closed as duplicate"})
    assert retried.status_code == 200, retried.text
    assert retried.json() == end.json() | {"judging": "pending"}
    assert err(m.http.post("/sessions/end", json={  # ... and not with a reward it had not
        "session": ses, "transcript": "read logs", "outcome": "closed as duplicate",
        "reward": 1})) == (409, "SESSION_ENDED")
    with srv.service() as svc:
        with pytest.raises(Exception, match="has ended"):
            record_advice_step(svc, "alice", ses, {"key": "late"})
    assert m.http.get(f"/sessions/{ses}").json() == got  # nothing else landed

    rewarded = m.http.post("/sessions/start", json={"scope": scope}).json()["id"]
    # An open session has no outcome to judge yet: its reward comes with its end.
    early = m.http.post("/runs/reward", json={"run": rewarded, "reward": 1, "reason": "r"})
    assert err(early) == (409, "SESSION_OPEN")
    assert m.http.get(f"/sessions/{rewarded}").json()["rewards"] == []
    done = m.http.post("/sessions/end", json={"session": rewarded, "transcript": "t",
                                              "outcome": "shipped", "reward": 1}).json()
    assert (done["reward"]["value"], done["reward"]["by"], done["judging"]) == (
        1.0, "explicit", "not needed")
    same = {"session": rewarded, "transcript": "t", "outcome": "shipped", "reward": 1}
    assert m.http.post("/sessions/end", json=same).json()["commit"] == done["commit"]
    for other in ({"reward": 0.5}, {"reason": "another"}, {"reward": None}):
        assert err(m.http.post("/sessions/end", json={**same, **other})) == (
            409, "SESSION_ENDED"), other
    assert err(m.http.post("/sessions/end", json={
        "session": rewarded, "transcript": "t", "outcome": "o", "reward": 2})) == (
        422, "VALIDATION_ERROR")


def test_racing_retries_of_one_end_end_the_session_once(srv: Served) -> None:
    """Six copies of one POST /sessions/end at once (a client retrying on a timeout): each
    answers the session with the one commit that ended it, on either catalog (the commit's
    recheck, inside the ledger's compare-and-set, finds the end another copy wrote)."""
    m = srv.m
    scope = new_scope()
    ses = m.http.post("/sessions/start", json={"scope": scope, "task": "t"}).json()["id"]
    end = {"session": ses, "transcript": "t", "outcome": "done", "reward": 0.5}
    with ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(lambda _: m.http.post("/sessions/end", json=end), range(6)))
    assert [a.status_code for a in answers] == [200] * 6, [a.text for a in answers]
    assert len({a.json()["commit"] for a in answers}) == 1
    assert [c["changes"].get("events") for c in m.ledger(scope)] == [2, 1]  # end+reward; start
    assert len(m.http.get(f"/sessions/{ses}").json()["rewards"]) == 1


def test_the_end_answers_the_session_as_its_commit_found_it(srv: Served) -> None:
    """An advice step that another server commits between the end's first read of the
    session and the end's commit is in the session, so it is in the end's answer too (it
    was missing: the answer was built from the first read). The interleaving is forced:
    the step is written right after that read returns, through a second service on the
    same tables, as another server would write it."""
    m = srv.m
    ses = m.http.post("/sessions/start", json={"scope": new_scope(), "task": "t"}).json()["id"]
    with srv.service() as svc, srv.service() as other:
        read = svc.index.events_of
        stepped: list[dict[str, Any]] = []

        def read_then_step(subjects: Any) -> Any:
            found = read(subjects)
            if not stepped:
                stepped.append(record_advice_step(other, m.user, ses, {"key": "late_note"}))
            return found

        svc.index.events_of = read_then_step  # type: ignore[method-assign]
        answer = end_session(svc, m.user, EndSession(session=ses, transcript="t",
                                                     outcome="done"))
    assert stepped, "the step was not written in between"
    assert [s["served"] for s in answer["steps"]] == [{"key": "late_note"}]
    stored = m.http.get(f"/sessions/{ses}").json()
    assert {k: v for k, v in answer.items() if k != "commit"} == stored


def _ended_session(m: Memory, srv: Served, scope: str, served: list[str],
                   reward: float | None = None) -> str:
    ses: str = m.http.post("/sessions/start", json={"scope": scope, "task": "deploy"}
                           ).json()["id"]
    with srv.service() as svc:
        for key in served:
            record_advice_step(svc, m.user, ses, {"key": key})
    body: dict[str, Any] = {"session": ses, "transcript": "followed the note; deployed",
                            "outcome": "deployed"}
    if reward is not None:
        body["reward"] = reward
    assert m.http.post("/sessions/end", json=body).status_code == 200
    return ses


def test_judging_stores_a_reward_and_an_explicit_one_wins(srv: Served,
                                                          scripted_model: ScriptedModel) -> None:
    m = srv.m
    scope = new_scope()
    judged = _ended_session(m, srv, scope, ["note_deploy"])
    explicit = _ended_session(m, srv, scope, [], reward=-0.5)
    scripted_model.script([], default={"reply": {
        "reward": 0.75, "reason": "deployed as asked",
        "notes": {"note_deploy": {"applied": True, "helped": True},
                  "never_served": {"applied": True, "helped": False}}}})
    with srv.service() as svc:
        report = judge_pass(svc, chat_model(srv.settings(), Role.JUDGE), svc.view(scope).scope)
        assert (report["judged"], report["failed"]) == (1, 0)
        # Judged once: a second pass finds nothing pending.
        assert judge_pass(svc, chat_model(srv.settings(), Role.JUDGE),
                          svc.view(scope).scope)["judged"] == 0
    calls = scripted_model.calls()
    assert len(calls) == 1 and "note_deploy" in calls[0]["messages"][1]["content"]

    got = m.http.get(f"/sessions/{judged}").json()
    assert (got["reward"]["value"], got["reward"]["by"], got["judging"]) == (
        0.75, "judge", "judged")
    assert got["reward"]["notes"] == {"note_deploy": {"applied": True, "helped": True}}
    assert m.http.get(f"/sessions/{explicit}").json()["reward"]["value"] == -0.5

    # An explicit reward given after the judge's wins; the judge's stays in history.
    r = m.http.post("/runs/reward", json={"run": judged, "reward": -0.25, "reason": "rolled back"})
    assert r.status_code == 201, r.text
    got = m.http.get(f"/sessions/{judged}").json()
    assert (got["reward"]["value"], got["reward"]["by"]) == (-0.25, "explicit")
    assert [(x["by"], x["value"]) for x in got["rewards"]] == [("judge", 0.75),
                                                              ("explicit", -0.25)]
    with srv.service() as svc:
        tasks = {t.id: t for t in rewarded_tasks(svc, scope)}
    assert (tasks[judged].kind, tasks[judged].reward, tasks[judged].served) == (
        "session", -0.25, ("note_deploy",))
    assert tasks[judged].trace == "followed the note; deployed"


def _sessions(m: Memory, scope: str, **params: Any) -> dict[str, Any]:
    r = m.http.get("/sessions", params={"scope": scope, **params})
    assert r.status_code == 200, r.text
    assert set(r.json()) == {"sessions", "next_before"}, r.text
    return dict(r.json())


def test_sessions_are_listed_newest_first_to_their_readers_only(
        srv: Served, scripted_model: ScriptedModel) -> None:
    """GET /sessions: the sessions alice may read, newest first, each as GET /sessions/{id}
    answers it less transcript and rewards; bob never learns of her restricted one, neither
    in a page nor through its size, `next_before` or a cursor naming it."""
    m, bob = srv.m, srv.m.as_user("bob")
    scope = new_scope()
    judged = _ended_session(m, srv, scope, ["note_deploy"])  # alice only (the default ACL)
    public = m.http.post("/sessions/start", json={"scope": scope, "task": "open and public",
                                                  "acl": ["*"]}).json()["id"]
    rewarded = _ended_session(m, srv, scope, [], reward=0.5)
    bobs = bob.http.post("/sessions/start", json={"scope": scope, "task": "bob's"}).json()["id"]
    scripted_model.script([], default={"reply": {
        "reward": 0.75, "reason": "deployed as asked",
        "notes": {"note_deploy": {"applied": True, "helped": False}}}})
    with srv.service() as svc:
        assert judge_pass(svc, chat_model(srv.settings(), Role.JUDGE),
                          svc.view(scope).scope)["judged"] == 1

    listed = _sessions(m, scope)
    assert [s["id"] for s in listed["sessions"]] == [rewarded, public, judged]
    assert listed["next_before"] is None
    for item in listed["sessions"]:  # the one shape, less the history
        full = m.http.get(f"/sessions/{item['id']}").json()
        assert item == {k: v for k, v in full.items() if k not in ("transcript", "rewards")}
    by_id = {s["id"]: s for s in listed["sessions"]}
    assert by_id[judged]["reward"]["by"] == "judge" and by_id[judged]["reward"]["notes"] == {
        "note_deploy": {"applied": True, "helped": False}}
    assert [s["served"] for s in by_id[judged]["steps"]] == [{"key": "note_deploy"}]
    assert (by_id[rewarded]["reward"]["value"], by_id[rewarded]["judging"]) == (
        0.5, "not needed")
    assert (by_id[public]["state"], by_id[public]["reward"]) == ("open", None)

    # Pages of one: each names only what the caller may read.
    seen, before = [], None
    while True:
        page = _sessions(m, scope, limit=1, **({"before": before} if before else {}))
        seen += [s["id"] for s in page["sessions"]]
        before = page["next_before"]
        if before is None:
            break
        assert before == seen[-1]
    assert seen == [rewarded, public, judged]

    # bob: his own and the public one; alice's restricted sessions leave no trace.
    assert [s["id"] for s in _sessions(bob, scope)["sessions"]] == [bobs, public]
    first = _sessions(bob, scope, limit=1)
    assert [s["id"] for s in first["sessions"]] == [bobs] and first["next_before"] == bobs
    last = _sessions(bob, scope, limit=1, before=bobs)
    assert [s["id"] for s in last["sessions"]] == [public] and last["next_before"] is None
    # A cursor of hers answers the page below it, as any id placed there would.
    assert [s["id"] for s in _sessions(bob, scope, before=rewarded)["sessions"]] == [public]
    assert _sessions(bob, scope, before=public) == {"sessions": [], "next_before": None}

    # Bad cursors and limits: 422 in the envelope, naming the parameter.
    for params in ({"before": "x"}, {"before": ""}, {"before": judged.lower()},
                   {"before": "run_" + judged[4:]}, {"before": "ses_" + "0" * 25},
                   {"limit": 0}, {"limit": 1001}, {"limit": "many"}):
        r = m.http.get("/sessions", params={"scope": scope, **params})
        assert err(r) == (422, "VALIDATION_ERROR"), (params, r.text)
        assert list(params)[0] in json.dumps(r.json()["error"]["details"]), r.text
    assert err(m.http.get("/sessions")) == (422, "VALIDATION_ERROR")  # no scope
    assert err(m.http.get("/sessions", params={"scope": "nope"})) == (422, "VALIDATION_ERROR")
    assert err(httpx.get(f"{m.url}/sessions", params={"scope": scope}))[0] == 401
    assert _sessions(m, new_scope()) == {"sessions": [], "next_before": None}


def test_the_sessions_listing_refuses_odd_queries_and_pages_stably_while_sessions_start(
        srv: Served) -> None:
    """GET /sessions as an outside conformance check drives it: each odd query value is a
    documented 4xx in the one envelope (never a 500), and paging with `before` while
    sessions start (readable and hidden ones) neither repeats nor skips a session."""
    m, bob = srv.m, srv.m.as_user("bob")
    scope = new_scope()

    def start(client: Memory, **extra: Any) -> str:
        r = client.http.post("/sessions/start", json={"scope": scope, "task": "t", **extra})
        assert r.status_code == 201, r.text
        return str(r.json()["id"])

    # "1_0", "+5", " 5" and "5.0" were read as numbers (pydantic's lax int): not what the
    # published integer says, on this route or any with an integer in its query.
    for params in ({"limit": -1}, {"limit": 10**30}, {"limit": 1.5}, {"limit": ""},
                   {"limit": "1_0"}, {"limit": "+5"}, {"limit": " 5"}, {"limit": "5.0"},
                   {"branch": "../x"}, {"branch": "A"}, {"scope": "Bad Scope"},
                   {"scope": "a" * 65 + "/b"}, {"scope": "x\u0000/y"}):
        r = m.http.get("/sessions", params={"scope": scope, **params})
        assert err(r) == (422, "VALIDATION_ERROR"), (params, r.text)
        assert list(params)[0] in json.dumps(r.json()["error"]["details"]), r.text
    r = m.http.get("/sessions", params={"scope": scope, "branch": "no-such-branch"})
    assert err(r) == (404, "NOT_FOUND"), r.text
    r = m.http.get("/sessions", params={"scope": "ws_0000000000000000/team"})
    assert err(r) == (404, "WORKSPACE_GONE"), r.text
    assert _sessions(m, scope, limit=1000) == {"sessions": [], "next_before": None}
    assert _sessions(m, scope, limit="007") == {"sessions": [], "next_before": None}
    for path, params in (("/runs", {"scope": scope}), ("/ledger", {"scope": scope}),
                         ("/set-aside", {"scope": scope}), ("/amp/v1/memories", {}),
                         ("/amp/v1/memories", {"limit": 5})):
        name = "offset" if "limit" in params else "limit"
        r = m.http.get(path, params={**params, name: "1_0"},
                       headers={"X-AMP-Agent-ID": "agent_audit"})
        assert err(r) == (422, "VALIDATION_ERROR"), (path, r.text)
        assert r.json()["error"]["details"]["errors"][0]["loc"] == ["query", name], r.text
    # Each status it answers is one its OpenAPI entry lists (503: test_pg_outage.py).
    listed = m.http.get("/openapi.json").json()["paths"]["/sessions"]["get"]["responses"]
    assert {"200", "401", "404", "422", "503"} <= set(listed), sorted(listed)

    mine = [start(m) if i % 2 else start(m, acl=["*"]) for i in range(7)]
    for _ in range(2):
        start(bob)  # hers to list never counts these
    seen: list[str] = []
    before: str | None = None
    started_since: list[str] = []
    while True:
        page = _sessions(m, scope, limit=2, **({"before": before} if before else {}))
        seen += [s["id"] for s in page["sessions"]]
        # New sessions, hers and hidden ones, between pages: newer than every cursor.
        started_since += [start(m), start(bob)]
        before = page["next_before"]
        if before is None:
            break
    assert seen == mine[::-1], (seen, mine)
    assert [s["id"] for s in _sessions(m, scope)["sessions"]] == (
        [i for i in started_since[::-1] if i in {*started_since[::2]}] + mine[::-1])


def test_model_down_writes_nothing_and_the_session_is_judged_later(
        srv: Served, scripted_model: ScriptedModel) -> None:
    m = srv.m
    scope = new_scope()
    ses = _ended_session(m, srv, scope, ["note_x"])
    commits = len(m.ledger(scope))
    model = chat_model(srv.settings(), Role.JUDGE)
    # A reward of true is no number (Python read it as 1.0, a full reward).
    for failure in ({"status": 500}, {"reply": "no JSON here"},
                    {"reply": {"reward": 3, "notes": {}}}, {"reply": {"reward": True}}):
        scripted_model.script([], default=failure)
        with srv.service() as svc:
            report = judge_pass(svc, model, svc.view(scope).scope)
        # The third answer of the wrong shape in a row sets the session aside (an outage
        # does not count): test_a_session_whose_answers_are_refused_..._is_set_aside.
        last = failure == {"reply": {"reward": True}}
        assert (report["judged"], report["failed"], report["set_aside"]) == (
            0, int(not last), int(last)), failure
        got = m.http.get(f"/sessions/{ses}").json()
        assert (got["reward"], got["rewards"], got["judging"]) == (None, [], "pending")
        assert len(m.ledger(scope)) == commits
    scripted_model.script([], default={"reply": {"reward": -0.2, "notes": {}}})
    with srv.service() as svc:  # set aside for this model: another judges it
        again = chat_model(srv.settings().model_copy(update={"judge_model_name": "scripted-2"}),
                           Role.JUDGE)
        assert judge_pass(svc, again, svc.view(scope).scope)["judged"] == 1
    assert m.http.get(f"/sessions/{ses}").json()["reward"]["value"] == -0.2


def test_the_judge_command_exits_2_when_the_model_failed_on_any_session(
        srv: Served, scripted_model: ScriptedModel) -> None:
    """`extract`'s rule, one function for every model pass (`cliutil.fail_if_model_failed`):
    the report is printed, then one error line and exit 2 when the model failed on any item,
    however many others it did. `advice judge` exited 0 with ``failed: 3``."""
    m = srv.m
    scope = new_scope()
    sessions = []
    for task in ("deploy the web tier", "rotate the keys", "restore the replica"):
        ses = m.http.post("/sessions/start", json={"scope": scope, "task": task}).json()["id"]
        assert m.http.post("/sessions/end", json={"session": ses, "transcript": "done",
                                                   "outcome": "ok"}).status_code == 200
        sessions.append(ses)
    env = {**srv.env, "AMPUP_MEMORY_MODEL_RETRIES": "0"}
    scripted_model.script([], default={"status": 500})
    done = cli_in_process(srv.home, env, "advice", "judge", "--scope", scope)
    assert done.returncode == 2, done.stderr
    assert json.loads(done.stdout)["failed"] == 3
    assert done.stderr.splitlines()[-1] == (
        "error: the model failed on 3 session(s); they stay pending for the next pass")
    # One judged, two failed: still 2. All judged: 0.
    scripted_model.script([{"match": "rotate the keys", "reply": {"reward": 0.5}}],
                          default={"status": 500})
    done = cli_in_process(srv.home, env, "advice", "judge", "--scope", scope)
    assert done.returncode == 2, done.stderr
    assert (json.loads(done.stdout)["judged"], json.loads(done.stdout)["failed"]) == (1, 2)
    scripted_model.script([], default={"reply": {"reward": 0.5}})
    done = cli_in_process(srv.home, env, "advice", "judge", "--scope", scope)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["judged"] == 2


def test_a_session_whose_answers_are_refused_on_every_pass_is_set_aside(
        srv: Served, scripted_model: ScriptedModel) -> None:
    """Extraction's rule (models/setaside.py) for the judge: a session whose every attempt
    got an answer of the wrong shape was asked again on every pass, forever, a model call
    each time, and only ``failed: 1`` said so. After UNUSABLE_PASSES such passes it is set
    aside: one WARNING line naming it and the reason, ``set_aside`` in the report, no call
    on later passes; a new judge model asks again. The answer here: verdicts of 1 and
    "yes", which lax booleans read as true (the session was judged on the first pass)."""
    from ampup_memory.models.setaside import UNUSABLE_PASSES

    m = srv.m
    scope = new_scope()
    ids = {}
    for task in ("restore the replica", "rotate the keys"):
        ses = m.http.post("/sessions/start", json={"scope": scope, "task": task}).json()["id"]
        assert m.http.post("/sessions/end", json={"session": ses, "transcript": "done",
                                                   "outcome": "ok"}).status_code == 200
        ids[task] = ses
    poison = ids["restore the replica"]
    scripted_model.script([{"match": "restore the replica", "reply": {
        "reward": 0.5, "notes": {"note_x": {"applied": 1, "helped": "yes"}}}}],
        default={"reply": {"reward": 0.5}})
    reason = "notes.note_x.applied: Input should be a valid boolean"
    env = {**srv.env, "AMPUP_MEMORY_MODEL_RETRIES": "0"}
    for n in range(1, UNUSABLE_PASSES):
        done = cli_in_process(srv.home, env, "advice", "judge", "--scope", scope)
        assert done.returncode == 2, done.stderr
        report = json.loads(done.stdout)
        assert (report["judged"], report["failed"], report["set_aside"]) == (
            2 - n, 1, 0), report
        assert reason in done.stderr and "set aside" not in done.stderr, done.stderr
    calls = len(scripted_model.calls())
    done = cli_in_process(srv.home, env, "advice", "judge", "--scope", scope)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["judged"], report["failed"], report["set_aside"]) == (0, 0, 1), report
    warned = [line for line in done.stderr.splitlines() if poison in line]
    assert len(warned) == 1 and "WARNING" in warned[0] and reason in warned[0], done.stderr
    assert "warning: 1 session(s) set aside" in done.stderr, done.stderr
    assert len(scripted_model.calls()) - calls == 1
    # Set aside: pending still, and the next pass asks nothing.
    done = cli_in_process(srv.home, env, "advice", "judge", "--scope", scope)
    assert done.returncode == 0 and json.loads(done.stdout)["set_aside"] == 1, done.stderr
    assert poison not in done.stderr and len(scripted_model.calls()) - calls == 1
    assert m.http.get(f"/sessions/{poison}").json()["judging"] == "pending"
    assert _set_aside(srv, env, scope) == [("judge", scope, poison, "scripted-1")]
    # A new judge model asks again.
    done = cli_in_process(srv.home, {**env, "AMPUP_MEMORY_JUDGE_MODEL": "scripted-2"},
                          "advice", "judge", "--scope", scope)
    assert done.returncode == 2 and json.loads(done.stdout)["failed"] == 1, done.stderr
    assert len(scripted_model.calls()) - calls == 2
    assert _set_aside(srv, env, scope) == []  # counted once for the new model, not aside


def _set_aside(srv: Served, env: dict[str, str], scope: str) -> list[tuple[str, ...]]:
    done = cli_in_process(srv.home, env, "set-aside", "--scope", scope)
    assert done.returncode == 0, done.stderr
    return [(i["kind"], i["scope"], i["item"], i["model"])
            for i in map(json.loads, done.stdout.splitlines())]


def _listed(m: Memory, scope: str, **params: Any) -> dict[str, Any]:
    r = m.http.get("/set-aside", params={"scope": scope, **params})
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def _ended(m: Memory, scope: str, task: str) -> str:
    ses: str = m.http.post("/sessions/start", json={"scope": scope, "task": task}).json()["id"]
    assert m.http.post("/sessions/end", json={"session": ses, "transcript": "done",
                                               "outcome": "ok"}).status_code == 200
    return ses


def test_a_session_the_endpoint_refuses_is_passed_over_then_set_aside_and_listed(
        srv: Served, scripted_model: ScriptedModel) -> None:
    """Extraction's rule for a refused request (`setaside.Asker`), the judge's now: an
    HTTP 400 ("context length exceeded") for one session is that session's problem, not
    an outage. It stays pending (``failed``), the pass goes on, and once the endpoint
    answers another session the refusal counts; after UNUSABLE_PASSES passes the session
    is set aside (no call), listed by ``GET /set-aside`` to whoever may read it, a page at
    a time. Rewarded by hand meanwhile, it is no work for the judge: the listing drops it."""
    from ampup_memory.models.setaside import UNUSABLE_PASSES, set_aside_items

    m = srv.m
    scope = new_scope()
    poisons = [_ended(m, scope, f"restore the replica {n}") for n in (1, 2)]
    scripted_model.script([{"match": "restore the replica", "status": 400}],
                          default={"reply": {"reward": 0.5}})
    model = chat_model(srv.settings(), Role.JUDGE)
    for n in range(1, UNUSABLE_PASSES + 1):
        fine = _ended(m, scope, f"rotate the keys {n}")
        calls = len(scripted_model.calls())
        with srv.service() as svc:
            report = judge_pass(svc, model, svc.view(scope).scope)
        last = n == UNUSABLE_PASSES
        assert (report["judged"], report["failed"], report["set_aside"]) == (
            1, 0 if last else 2, 2 if last else 0), (n, report)
        assert len(scripted_model.calls()) - calls == 3  # each refused one asked once
        assert m.http.get(f"/sessions/{fine}").json()["judging"] == "judged"
        if not last:
            assert _listed(m, scope)["items"] == []  # counted, not set aside yet
    calls = len(scripted_model.calls())
    with srv.service() as svc:  # set aside: not asked again
        report = judge_pass(svc, model, svc.view(scope).scope)
    assert (report["failed"], report["set_aside"]) == (0, 2), report
    assert len(scripted_model.calls()) == calls
    listed = _listed(m, scope)
    assert sorted(i["item"] for i in listed["items"]) == sorted(poisons), listed
    assert listed["next_after"] is None
    for item in listed["items"]:
        assert (item["kind"], item["scope"], item["branch"], item["model"], item["passes"]) \
            == ("judge", scope, None, "scripted-1", UNUSABLE_PASSES), item
        assert "HTTP 400: scripted 400" in item["reason"] and item["at"], item
    assert _listed(m, scope, kind="judge") == listed
    assert _listed(m, scope, kind="extract")["items"] == []
    # A page at a time, in the listing's order.
    first = _listed(m, scope, limit=1)
    assert first["items"] == listed["items"][:1] and first["next_after"], first
    second = _listed(m, scope, limit=1, after=first["next_after"])
    assert (second["items"], second["next_after"]) == (listed["items"][1:], None), second
    # Bob may read neither session: nothing is listed to him.
    bob = m.as_user("bob")
    try:
        assert _listed(bob, scope) == {"scope": scope, "items": [], "next_after": None}
    finally:
        bob.close()
    # Rewarded by hand: no longer pending, so no longer set aside; its record is dropped.
    r = m.http.post("/runs/reward", json={"run": poisons[0], "reward": 1.0, "reason": "ok"})
    assert r.status_code == 201, r.text
    assert [i["item"] for i in _listed(m, scope)["items"]] == [poisons[1]]
    with srv.service() as svc:
        every = set_aside_items(svc.index, scope, "judge",
                                {"judge": lambda _scope, items: (items, [])})
    assert [i["item"] for i in every] == [poisons[1]], every


def test_the_set_aside_listing_answers_bad_input_with_a_4xx_in_the_envelope(
        srv: Served) -> None:
    """A bad kind, scope, limit or cursor is a 422 naming the field; no caller a 401; a
    workspace that never existed the 404 of any read of it. A cursor names an order key,
    never an item, so any well-formed one is a page (empty here), not an error."""
    import base64

    m, scope = srv.m, new_scope()
    bad = [({"scope": scope, "kind": "extraction"}, "kind"), ({"scope": "nope"}, "scope"),
           ({}, "scope"), ({"scope": scope, "limit": 0}, "limit"),
           ({"scope": scope, "limit": 1001}, "limit"), ({"scope": scope, "limit": "x"}, "limit"),
           ({"scope": scope, "after": "not a cursor!"}, "after"),
           ({"scope": scope, "after": "bm90IGEgY3Vyc29y"}, "after"),  # base64, not a key
           ({"scope": scope, "after": "W1tbW1tbW1tbW1tbW1s"}, "after"),  # "[[[[…": no JSON
           ({"scope": scope, "after": "x" * 3000}, "after")]
    for params, field in bad:
        r = m.http.get("/set-aside", params=params)
        assert err(r) == (422, "VALIDATION_ERROR"), (params, r.text)
        assert field in json.dumps(r.json()["error"]["details"]), (params, r.text)
    r = httpx.get(f"{m.url}/set-aside", params={"scope": scope})
    assert r.status_code == 401 and set(r.json()) == {"error"}, r.text
    r = m.http.get("/set-aside", params={"scope": "ws_" + "0" * 16 + "/ops"})
    assert err(r) == (404, "WORKSPACE_GONE"), r.text
    key = json.dumps(["2026-01-01T00:00:00Z", "judge", "", "ses_x"]).encode()
    after = base64.urlsafe_b64encode(key).decode().rstrip("=")
    r = m.http.get("/set-aside", params={"scope": scope, "after": after})
    assert r.json() == {"scope": scope, "items": [], "next_after": None}, r.text


def test_an_endpoint_that_refuses_every_session_stops_the_judge_pass(
        srv: Served, scripted_model: ScriptedModel) -> None:
    """REFUSED_RUN sessions refused before any answer: the endpoint refuses everything (a
    model that takes no JSON mode), so the pass stops as at an outage, the rest stay
    pending unasked, and nothing is counted: never set aside, however many passes."""
    from ampup_memory.models.setaside import REFUSED_RUN, UNUSABLE_PASSES

    m = srv.m
    scope = new_scope()
    ids = [_ended(m, scope, f"deploy tier {n}") for n in range(REFUSED_RUN + 1)]
    scripted_model.script([], default={"status": 400})
    model = chat_model(srv.settings(), Role.JUDGE)
    for _ in range(UNUSABLE_PASSES + 1):
        calls = len(scripted_model.calls())
        with srv.service() as svc:
            report = judge_pass(svc, model, svc.view(scope).scope)
        assert (report["judged"], report["failed"], report["set_aside"]) == (
            0, REFUSED_RUN, 0), report
        assert len(scripted_model.calls()) - calls == REFUSED_RUN
    assert _listed(m, scope)["items"] == []
    scripted_model.script([], default={"reply": {"reward": 0.5}})
    with srv.service() as svc:
        assert judge_pass(svc, model, svc.view(scope).scope)["judged"] == len(ids)


def test_the_judge_timer_says_a_set_aside_session_once_not_every_pass(
        tmp_path: Path, scripted_model: ScriptedModel) -> None:
    """The serve timer logged its report on every pass while a session stayed set aside
    (nothing new to say); it says the count when it changes: the count of what the
    listing (`GET /set-aside`) shows."""
    from ampup_memory.models.setaside import UNUSABLE_PASSES

    env = {**QUIET, **scripted_model.env("JUDGE_"), "AMPUP_MEMORY_MODEL_RETRIES": "0",
           "AMPUP_MEMORY_ADVICE_JUDGE_INTERVAL_SECONDS": "1",
           "AMPUP_MEMORY_LOG_LEVEL": "info"}
    scripted_model.script([], default={"reply": {"reward": True}})  # never of the shape
    proc = start(tmp_path / "home", env)
    m = Memory(proc.url)
    try:
        ses = m.http.post("/sessions/start", json={"scope": new_scope(),
                                                   "task": "restore"}).json()["id"]
        assert m.http.post("/sessions/end", json={"session": ses, "transcript": "done",
                                                   "outcome": "ok"}).status_code == 200
        deadline = time.monotonic() + 120
        while len(scripted_model.calls()) < UNUSABLE_PASSES and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(5)  # some passes more, each finding the session set aside
    finally:
        m.close()
        proc.stop()
    lines = [x for x in proc.log_path.read_text().splitlines() if "advice judge pass:" in x]
    assert len(scripted_model.calls()) == UNUSABLE_PASSES, lines
    said = [x for x in lines if "'set_aside': 1" in x]
    assert len(said) == 1, lines
    assert said[0].endswith("; 1 session(s) set aside now"), said  # as GET /set-aside lists
    assert sum("set aside after" in x and ses in x
               for x in proc.log_path.read_text().splitlines()) == 1


def test_the_judge_command_without_a_model_judges_nothing(srv: Served) -> None:
    if srv.env.get("AMPUP_MEMORY_CATALOG_URI"):
        pytest.skip("the command's no-model path is the same on every catalog (time)")
    scope = new_scope()
    ses = _ended_session(srv.m, srv, scope, [])
    env = {k: v for k, v in srv.env.items() if "_MODEL" not in k}
    done = cli_in_process(srv.home, env, "advice", "judge", "--scope", scope)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"judged": 0, "failed": 0, "skipped": 0,
                                          "set_aside": 0, "model": None}
    # Said in one line, with what to set (the report's `"model": null` alone said neither).
    assert done.stderr.splitlines()[-1] == (
        "no judge model configured: nothing was judged (sessions stay pending); set "
        "AMPUP_MEMORY_MODEL_BASE_URL and AMPUP_MEMORY_MODEL (or AMPUP_MEMORY_JUDGE_MODEL_*; "
        "docs/models.md)"), done.stderr
    learned = run_cli(srv.home, env, "advice", "learn", "--scope", scope)
    assert learned.returncode == 0, learned.stderr
    assert learned.stderr.splitlines()[-1].startswith(
        "no learn model configured: no note was learned"), learned.stderr
    # compile says what to set too, as judge and learn do (it said only "nothing compiled")
    compiled = cli_in_process(srv.home, env, "advice", "compile", "--scope", scope)
    assert compiled.returncode == 0, compiled.stderr
    assert compiled.stderr.splitlines()[-1].startswith(
        "no compile model configured: nothing compiled; set AMPUP_MEMORY_MODEL_BASE_URL"), (
        compiled.stderr)
    assert srv.m.http.get(f"/sessions/{ses}").json()["judging"] == "pending"


async def test_mcp_tools_round_trip(srv: Served) -> None:
    scope = new_scope()
    headers = {"X-AMP-Agent-ID": "agent_alice", "X-AmpUp-User": "alice"}
    async with http_client_for(srv.m.url, headers) as client:
        run = json.loads(await ok(client, "record_run", scope=scope, task="write the docs",
                                  outcome="merged", idempotency_key="docs-1"))
        retried = json.loads(await ok(client, "record_run", scope=scope,
                                      task="write the docs", outcome="merged",
                                      idempotency_key="docs-1"))
        assert retried == {**run, "created": False} and run["created"] is True
        rewarded = json.loads(await ok(client, "reward_run", run=run["id"], reward=0.9,
                                       reason="clear"))
        ses = json.loads(await ok(client, "start_session", scope=scope, task="review PR"))
        ended = json.loads(await ok(client, "end_session", session=ses["id"],
                                    transcript="read diff", outcome="approved", reward=1))
        again = await client.call_tool("end_session", {"session": ses["id"],
                                                       "transcript": "x", "outcome": "y"})
        bad = await client.call_tool("reward_run", {"run": run["id"], "reward": 7,
                                                    "reason": "x"})
    assert rewarded["reward"]["value"] == 0.9
    assert ended["state"] == "ended" and ended["reward"]["value"] == 1.0
    assert again.is_error and bad.is_error
    got = srv.m.http.get(f"/runs/{run['id']}").json()
    assert (got["task"], got["reward"]["value"]) == ("write the docs", 0.9)
    assert srv.m.http.get(f"/sessions/{ses['id']}").json()["outcome"] == "approved"


def test_a_crash_before_the_ledger_row_leaves_nothing_and_the_index_rebuilds(
        tmp_path: Path, scripted_model: ScriptedModel) -> None:
    """Rows first, then the ledger row: a server killed in between shows no run. The read
    index is derived: rebuilt from the tables alone, it holds the same runs and rewards.
    The restarted server also judges on its timer (every second here)."""
    home = tmp_path / "home"
    env = {**QUIET, "AMPUP_MEMORY_ADVICE_JUDGE_INTERVAL_SECONDS": "0"}
    crashing = start(home, {**env, "AMPUP_MEMORY_TEST_FAULT": f"after-rows@{home}"})
    scope = new_scope()
    m = Memory(crashing.url)
    try:
        with pytest.raises(httpx.HTTPError):  # the server exits mid-request
            m.http.post("/runs", json={"scope": scope, "task": "lost", "acl": ["*"]})
    finally:
        m.close()
        crashing.kill()
    scripted_model.script([], default={"reply": {"reward": 0.5, "notes": {}}})
    env = {**env, **scripted_model.env("JUDGE_"),
           "AMPUP_MEMORY_ADVICE_JUDGE_INTERVAL_SECONDS": "1"}
    proc = start(home, env)
    m = Memory(proc.url)
    try:
        assert m.http.get("/runs", params={"scope": scope}).json()["runs"] == []
        ses = m.http.post("/sessions/start", json={"scope": scope}).json()["id"]
        assert m.http.post("/sessions/end", json={"session": ses, "transcript": "t",
                                                  "outcome": "o"}).status_code == 200
        deadline = time.monotonic() + 30
        while m.http.get(f"/sessions/{ses}").json()["judging"] == "pending":
            assert time.monotonic() < deadline, "the timer never judged the session"
            time.sleep(0.2)
        assert m.http.get(f"/sessions/{ses}").json()["reward"]["by"] == "judge"
        run = record(m, scope)
        for value, reason in ((1, "a"), (0, "b")):
            assert m.http.post("/runs/reward", json={"run": run, "reward": value,
                                                     "reason": reason}).status_code == 201
        before = m.http.get(f"/runs/{run}").json()
        served = Served(m, home, env)
        with served.service() as svc:  # what `index rebuild` does first, the server idle
            assert svc.sync.rebuild() >= 3
        assert m.http.get(f"/runs/{run}").json() == before
        assert [r["id"] for r in m.http.get("/runs", params={"scope": scope}).json()["runs"]
                ] == [run]
    finally:
        m.close()
        proc.stop()
    # The crashed commit's event row is an orphan, which maintenance removes. It skipped
    # events (and extraction's reads) on every pass: they had no written_at to age by.
    done = run_cli(home, env, "maintenance", "--orphan-grace", "0s")
    assert done.returncode == 0, done.stderr
    tables = json.loads(done.stdout)["tables"]
    namespace = scope.replace("/", "__")
    assert tables[f"{namespace}.events"]["orphan_rows"] == 1, tables[f"{namespace}.events"]
    assert not any(report["skipped"] for report in tables.values()), tables
