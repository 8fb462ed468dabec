"""Extraction over real HTTP with the scripted model server (the one edge we do not own).

The server and ``ampup-memory extract`` share one home; the scripted OpenAI-compatible
process answers the prompts. Checked: correct facts are written with ``written_by:
extract:<model>``, cites and ``valid_from``; a hallucinated quote, a quote from another unit
and wrong types are rejected and counted per reason; malformed JSON, 500 and 429 leave the
episode pending with nothing written; a kill -9 between the data rows and the ledger row
leaves neither facts nor read marks, and a real kill -9 of the serving server in the middle
of its timer's pass leaves every batch all-or-none; re-running reads nothing twice; read
marks are rows of their own table (never facts), mirrored in the read index and rebuilt
from the tables; a branch's pass writes to the branch and a merge carries its read marks;
the status counts only episodes the caller may read; with no model configured nothing
runs, nothing fails and the status says so. The shared-home tests run on SQLite and on
PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.extraction_data import BAD, BODY, DEALS, GOOD, WHEN, fact
from tests.memory_support import (
    ADMIN_TOKEN,
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
from tests.server_process import ServerProcess

ADMIN = {"X-AMP-Admin-Token": ADMIN_TOKEN}


class Setup:
    def __init__(self, home: Path, proc: ServerProcess, model: ScriptedModel | None,
                 base: dict[str, str] = QUIET, scope: str | None = None) -> None:
        self.home, self.proc, self.model, self.base = home, proc, model, base
        self.m = Memory(proc.url)
        self.scope = scope or new_scope()
        if scope:  # a scope set up before (by another server process)
            return
        org, team = self.scope.split("/")
        r = self.m.http.put(f"/schemas/{org}/{team}", json={"schema": DEALS}, headers=ADMIN)
        assert r.status_code == 200, r.text

    def env(self, **extra: str) -> dict[str, str]:
        model = self.model.env() if self.model else {}
        return {**self.base, **model, "AMPUP_MEMORY_MODEL_RETRIES": "1",
                "AMPUP_MEMORY_MODEL_TIMEOUT_SECONDS": "2", **extra}

    def write(self, body: str = BODY, **extra: Any) -> str:
        r = self.m.write(self.scope, body, occurred_at=WHEN, **extra)
        assert r.status_code in (200, 201), r.text
        return str(r.json()["id"])

    def extract(self, *args: str, **env: str) -> tuple[int, list[dict[str, Any]], str]:
        import json

        # In this process, but a pass armed to die at a fault point dies in its own.
        run = run_cli if "AMPUP_MEMORY_TEST_FAULT" in env else cli_in_process
        done = run(self.home, self.env(**env), "extract", "--scope", self.scope, *args)
        lines = [json.loads(x) for x in done.stdout.splitlines() if x.startswith("{")]
        return done.returncode, lines, done.stderr

    def status(self, **params: Any) -> dict[str, Any]:
        r = self.m.http.get("/extraction/status", params={"scope": self.scope, **params})
        assert r.status_code == 200, r.text
        body: dict[str, Any] = r.json()
        return body

    def set_aside(self) -> list[dict[str, Any]]:
        r = self.m.http.get("/extraction/set-aside", params={"scope": self.scope})
        assert r.status_code == 200, r.text
        return list(r.json()["items"])

    def facts(self, **params: Any) -> list[dict[str, Any]]:
        r = self.m.facts(self.scope, "deal:acme", history=True, **params)
        assert r.status_code == 200, r.text
        return list(r.json()["facts"])


@pytest.fixture(scope="module", params=BACKENDS)
def model_home(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
               scripted_model_process: ScriptedModel,
               ) -> Iterator[tuple[Path, ServerProcess, dict[str, str]]]:
    home = tmp_path_factory.mktemp("extraction")
    base = backend_env(request.param, request)
    # No serve timer: its pass (every 300 s by default) would read main behind a test's back.
    proc = start(home, {**base, **scripted_model_process.env(),
                        "AMPUP_MEMORY_MODEL_RETRIES": "1",
                        "AMPUP_MEMORY_EXTRACTION_INTERVAL_SECONDS": "0"})
    yield home, proc, base
    proc.stop()


@pytest.fixture
def s(model_home: tuple[Path, ServerProcess, dict[str, str]],
      scripted_model: ScriptedModel) -> Setup:
    home, proc, base = model_home
    return Setup(home, proc, scripted_model, base)


def test_checked_facts_are_written_and_the_rest_rejected_per_reason(s: Setup) -> None:
    assert s.model is not None
    ep = s.write()
    before = s.status()
    assert (before["model"], before["episodes_pending"], before["episodes_read"]) == (
        "scripted-1", 1, 0)
    s.model.script([{"match": "They signed for", "reply": {"facts": GOOD + BAD}}])
    code, out, err = s.extract()
    assert code == 0, err
    assert out[0]["read"] == 1 and out[0]["facts_written"] == 2
    got = sorted(s.facts(), key=lambda f: f["predicate"])
    assert [(f["predicate"], f["value"]) for f in got] == [
        ("amount", {"amount": 50000, "currency": "USD"}), ("stage", "won")]
    for f in got:
        assert f["written_by"] == "extract:scripted-1"
        assert f["valid_from"] == WHEN
    assert got[0]["cites"] == [{"episode": ep, "unit": 2}]
    assert got[1]["cites"] == [{"episode": ep, "unit": 1}]
    assert got[1]["quote"] == "Acme deal\nis now won"  # the unit's own text, verbatim
    # What the model was shown: the schema's attributes and the numbered units.
    prompt = s.model.calls()[0]["messages"][1]["content"]
    assert "stage (one of open, won, lost)" in prompt and "[unit 3] Close date" in prompt
    after = s.status()
    assert (after["episodes_pending"], after["episodes_read"], after["facts_written"]) == (
        0, 1, 2)
    assert after["rejected"] == {"predicate_unknown": 1, "quote_not_found": 2,
                                 "unit_unknown": 1, "value_invalid": 2}
    assert after["last_error"] is None
    # One commit held the facts and the read mark; the mark is no fact (its own table).
    head = s.m.ledger(s.scope)[0]
    assert head["message"] == "extract 2 fact(s) from 1 episode(s)"
    assert head["changes"]["facts"] == 2
    # Re-running reads nothing twice: no model call, no commit.
    commits, calls = len(s.m.ledger(s.scope)), len(s.model.calls())
    code, out, err = s.extract()
    assert code == 0, err
    assert out[0]["read"] == 0
    assert (len(s.m.ledger(s.scope)), len(s.model.calls())) == (commits, calls)
    # Read marks are bookkeeping: search answers the facts, never a mark.
    r = s.m.http.post("/search", json={"scope": s.scope, "query": "scripted-1 acme won"})
    assert r.status_code == 200, r.text
    found = {f["entity"] for f in r.json()["results"]}
    assert "deal:acme" in found and not any(e.startswith("_extracted:") for e in found)
    r = s.m.http.post("/query", json={"scope": s.scope, "find": "facts"})
    assert r.status_code == 200, r.text
    assert {f["entity"] for f in r.json()["facts"]} == {"deal:acme"}
    # A new schema version reads the episode again (newest-wins sorts out the versions).
    org, team = s.scope.split("/")
    r = s.m.http.put(f"/schemas/{org}/{team}",
                     json={"schema": {**DEALS, "description": "v2"}}, headers=ADMIN)
    assert r.status_code == 200, r.text
    assert s.status()["episodes_pending"] == 1
    s.model.script([], default={"reply": {"facts": GOOD[:1]}})
    code, out, err = s.extract()
    assert code == 0, err
    assert out[0]["read"] == 1 and out[0]["facts_written"] == 1
    assert s.status()["episodes_pending"] == 0


def test_a_candidate_of_the_wrong_shape_is_rejected_alone(s: Setup) -> None:
    """A unit of ``true`` was read as unit 1 (a bool is an int to Python) and its fact
    written. A unit is a JSON integer: true, 2.0 or "2" is rejected as ``unit_unknown``,
    a candidate missing a field or not an object as ``candidate_invalid``; the rest of the
    answer is written, as with every other rejection."""
    assert s.model is not None
    s.write()
    wrong = [{**GOOD[0], "unit": True}, {**GOOD[1], "unit": 2.0}, {**GOOD[1], "unit": "2"},
             {k: v for k, v in GOOD[0].items() if k != "quote"}, "deal:acme stage won"]
    s.model.script([], default={"reply": {"facts": [*wrong, *GOOD]}})
    code, out, err = s.extract()
    assert code == 0, err
    assert (out[0]["read"], out[0]["facts_written"]) == (1, 2), out
    assert out[0]["rejected"] == {"unit_unknown": 3, "candidate_invalid": 2}, out
    assert sorted(f["cites"][0]["unit"] for f in s.facts()) == [1, 2]


FAILURES = {
    "malformed": {"reply": "this is {not json", "status": 200},
    "http500": {"reply": {"error": {"message": "boom"}}, "status": 500},
    "http429": {"reply": {"error": {"message": "slow down"}}, "status": 429,
                "headers": {"Retry-After": "0"}},
    # Python's parser recursed into it: `extract` died with a RecursionError traceback.
    "nested too deep": {"reply": '{"facts": ' + "[" * 50_000 + "]" * 50_000 + "}"},
}


def test_a_failing_model_leaves_the_episode_pending_and_writes_nothing(s: Setup) -> None:
    """Each way a model fails, one after the other on the same pending episode (one server
    and one scope for all three: the rule is per pass, not per server)."""
    assert s.model is not None
    s.write()
    commits = len(s.m.ledger(s.scope))
    for name, reply in FAILURES.items():
        s.model.script([], default=reply)
        calls = len(s.model.calls())
        code, out, err = s.extract()
        assert code == 2 and "the model failed" in err, name
        assert out[0]["read"] == 0 and out[0]["error"], name
        # one try and the one retry the settings allow
        assert len(s.model.calls()) - calls == 2, name
        assert len(s.m.ledger(s.scope)) == commits and s.facts() == [], name
        st = s.status()
        assert st["episodes_pending"] == 1 and st["episodes_read"] == 0, name
        assert "gave no usable answer" in st["last_error"], name
    # The model is back: the episode is read now, once, and the error is cleared.
    s.model.script([], default={"reply": {"facts": GOOD}})
    code, out, err = s.extract()
    assert code == 0, err
    assert out[0]["facts_written"] == 2 and len(s.facts()) == 2
    st = s.status()
    assert (st["episodes_pending"], st["episodes_read"], st["last_error"]) == (0, 1, None)


def test_an_answer_refused_on_every_pass_is_set_aside_with_its_reason(s: Setup) -> None:
    """An answer of 10,000 facts was refused whole as "1 validation error for Answer", no
    reason given, and its episode, the oldest pending, stopped every pass there: it and
    every episode after it stayed pending forever. The reason is said now, and after
    UNUSABLE_PASSES passes whose every attempt got an answer of the wrong shape the episode
    is set aside: a read mark with no fact (``answer_unusable``), and the pass goes on."""
    from ampup_memory.memory.extraction import MAX_CANDIDATES
    from ampup_memory.models.setaside import UNUSABLE_PASSES

    assert s.model is not None
    poison = s.write(BODY + "\n\nA long call.", source="doc:long")
    fine = s.write(BODY, source="doc:fine")
    s.model.script([{"match": "A long call", "reply": {"facts": GOOD * 5000}}],
                   default={"reply": {"facts": GOOD}})
    reason = f"facts: List should have at most {MAX_CANDIDATES} items after validation, not 10000"
    for n in range(1, UNUSABLE_PASSES):
        code, out, err = s.extract()
        assert code == 2, err
        assert out[0]["read"] == 0 and reason in out[0]["error"], out
        st = s.status()
        assert reason in st["last_error"] and st["episodes_pending"] == 2, (n, st)
    calls = len(s.model.calls())
    code, out, err = s.extract()
    assert code == 0, err
    assert (out[0]["read"], out[0]["facts_written"], out[0]["pending"]) == (2, 2, 0), out
    assert out[0]["rejected"] == {"answer_unusable": 1}, out
    set_aside = [line for line in err.splitlines() if poison in line]
    assert len(set_aside) == 1 and "WARNING" in set_aside[0] and reason in set_aside[0], err
    assert len(s.model.calls()) - calls == 3  # the poison's try and retry, then the other
    assert {f["cites"][0]["episode"] for f in s.facts()} == {fine}
    st = s.status()
    assert (st["episodes_pending"], st["rejected"], st["last_error"]) == (
        0, {"answer_unusable": 1}, None)
    # Read: the next pass asks nothing.
    code, out, err = s.extract()
    assert code == 0 and out[0]["read"] == 0 and len(s.model.calls()) - calls == 3, err


def test_an_episode_the_endpoint_refuses_is_passed_over_then_set_aside(s: Setup) -> None:
    """An HTTP 400 ("context length exceeded") for one episode stopped the whole pass, so
    every episode after it stayed pending. It is that episode's problem now: not retried,
    left pending, the pass goes on with the next, and after UNUSABLE_PASSES passes it is
    set aside (read with no fact, ``request_refused``), then listed by ``GET
    /extraction/set-aside`` (to a caller who may read it) and ``ampup-memory set-aside``."""
    import json

    from ampup_memory.models.setaside import UNUSABLE_PASSES

    assert s.model is not None
    poison = s.write(BODY + "\n\nA long call.", source="doc:long", acl=["user:alice"])
    s.model.script([{"match": "A long call", "status": 400}],
                   default={"reply": {"facts": GOOD}})
    fine = []
    for n in range(1, UNUSABLE_PASSES):
        fine.append(s.write(BODY + f" Pass {n}.", source=f"doc:fine-{n}"))
        calls = len(s.model.calls())
        code, out, err = s.extract()
        assert code == 2 and "the model failed on 1 scope(s)" in err, err
        assert (out[0]["read"], out[0]["facts_written"], out[0]["refused"],
                out[0]["pending"], out[0]["error"]) == (1, 2, 1, 1, None), out
        assert len(s.model.calls()) - calls == 2  # the refused one is not asked twice
        st = s.status()
        assert st["episodes_pending"] == 1 and st["rejected"] == {}, st
        assert "refused the request: HTTP 400: scripted 400" in st["last_error"], st
        assert s.set_aside() == []  # counted, not set aside yet
    # The last pass: the poison alone is pending, refused again, and so set aside.
    code, out, err = s.extract()
    assert code == 0, err
    assert (out[0]["read"], out[0]["refused"], out[0]["pending"]) == (1, 0, 0), out
    assert out[0]["rejected"] == {"request_refused": 1}, out
    set_aside = [line for line in err.splitlines() if poison in line]
    assert len(set_aside) == 1 and "WARNING" in set_aside[0] and "HTTP 400" in set_aside[0]
    assert {f["cites"][0]["episode"] for f in s.facts()} == set(fine)
    st = s.status()
    assert (st["episodes_pending"], st["rejected"], st["last_error"]) == (
        0, {"request_refused": 1}, None)
    listed = s.set_aside()
    assert [(i["item"], i["model"], i["passes"]) for i in listed] == [
        (poison, s.model.name, UNUSABLE_PASSES)], listed
    assert "HTTP 400: scripted 400" in listed[0]["reason"] and listed[0]["at"], listed
    bob = s.m.as_user("bob")  # may not read the episode: it is not listed to him
    try:
        r = bob.http.get("/extraction/set-aside", params={"scope": s.scope})
        assert r.status_code == 200 and r.json() == {"items": []}, r.text
    finally:
        bob.close()
    done = cli_in_process(s.home, s.env(), "set-aside", "--scope", s.scope, "--kind", "extract")
    assert done.returncode == 0, done.stderr
    lines = [json.loads(x) for x in done.stdout.splitlines()]
    assert [(i["kind"], i["scope"], i["branch"], i["item"]) for i in lines] == [
        ("extract", s.scope, "main", poison)], lines
    assert cli_in_process(s.home, s.env(), "set-aside", "--kind", "judge").stdout == ""


def test_an_episode_set_aside_on_a_deleted_branch_is_listed_no_more(s: Setup) -> None:
    """A set-aside record outlived its item: listed forever once the branch holding the
    episode was deleted. The one listing (`setaside.set_aside_items`) skips it now, both
    routes and the command agree, and its record is dropped. ``GET /set-aside`` lists an
    episode as ``GET /extraction/set-aside`` does: only to whoever may read it."""
    from ampup_memory.memory.service import MemoryService
    from ampup_memory.models.setaside import UNUSABLE_PASSES, set_aside_items
    from ampup_memory.settings import Settings

    assert s.model is not None
    r = s.m.http.post("/branches", json={"scope": s.scope, "name": "try"})
    assert r.status_code == 201, r.text
    poison = s.write(BODY + "\n\nA long call.", source="doc:long", acl=["user:alice"],
                     branch="try")
    s.model.script([{"match": "A long call", "status": 400}])
    for n in range(1, UNUSABLE_PASSES + 1):
        code, out, err = s.extract("--branch", "try")
        assert code == (0 if n == UNUSABLE_PASSES else 2), (n, out, err)
    assert out[0]["rejected"] == {"request_refused": 1}, out
    listed = s.m.http.get("/set-aside", params={"scope": s.scope, "kind": "extract"}).json()
    assert [(i["item"], i["branch"]) for i in listed["items"]] == [(poison, "try")], listed
    r = s.m.http.get("/extraction/set-aside", params={"scope": s.scope, "branch": "try"})
    assert r.json()["items"] == listed["items"], r.text
    assert s.set_aside() == []  # main's: none
    bob = s.m.as_user("bob")
    try:
        r = bob.http.get("/set-aside", params={"scope": s.scope})
        assert (r.status_code, r.json()["items"]) == (200, []), r.text
    finally:
        bob.close()
    assert s.m.http.delete("/branches/try", params={"scope": s.scope}).status_code == 200
    assert s.m.http.get("/set-aside", params={"scope": s.scope}).json()["items"] == []
    r = s.m.http.get("/extraction/set-aside", params={"scope": s.scope, "branch": "try"})
    assert r.status_code == 404, r.text
    done = cli_in_process(s.home, s.env(), "set-aside", "--scope", s.scope)
    assert (done.returncode, done.stdout) == (0, ""), done.stderr
    svc = MemoryService.open(Settings.model_validate({**s.env(),
                                                      "AMPUP_MEMORY_HOME": str(s.home)}))
    try:  # not only hidden: the record is gone
        assert set_aside_items(svc.index, s.scope, "extract",
                               {"extract": lambda _scope, items: (items, [])}) == []
    finally:
        svc.close()


def test_an_endpoint_that_refuses_every_episode_stops_the_pass_and_sets_none_aside(
        s: Setup) -> None:
    """The first REFUSED_RUN episodes of a pass all refused: the endpoint's problem (a
    model that takes no JSON mode), not theirs. The pass stops as at an outage, nothing is
    counted, and so nothing is ever set aside for it; a 401 stops at the first."""
    from ampup_memory.models.setaside import REFUSED_RUN, UNUSABLE_PASSES

    assert s.model is not None
    for i in range(REFUSED_RUN + 1):
        s.write(BODY + f" Note {i}.", source=f"doc:{i}")
    s.model.script([], default={"status": 400})
    for _ in range(UNUSABLE_PASSES):
        calls = len(s.model.calls())
        code, out, err = s.extract()
        assert code == 2 and "HTTP 400" in out[0]["error"], (out, err)
        assert out[0]["read"] == 0 and len(s.model.calls()) - calls == REFUSED_RUN, out
    s.model.script([], default={"status": 401})
    calls = len(s.model.calls())
    code, out, err = s.extract()
    assert code == 2 and "HTTP 401" in out[0]["error"] and len(s.model.calls()) - calls == 1
    s.model.script([], default={"reply": {"facts": GOOD}})
    code, out, err = s.extract()
    assert code == 0, err
    assert (out[0]["read"], out[0]["rejected"]) == (REFUSED_RUN + 1, {}), out


def test_a_crash_before_the_ledger_row_leaves_neither_facts_nor_read_marks(s: Setup) -> None:
    assert s.model is not None
    s.write()
    s.write(BODY + "\n\nSigned again.")
    s.model.script([], default={"reply": {"facts": GOOD}})
    code, _, _ = s.extract(AMPUP_MEMORY_TEST_FAULT=f"after-rows@{s.home}")
    assert code == 70  # killed between the batch's data rows and its ledger row
    assert s.facts() == []
    assert s.status()["episodes_pending"] == 2
    code, out, err = s.extract()
    assert code == 0, err
    assert out[0]["read"] == 2
    # Each episode's facts once: the crashed batch's rows never became visible.
    assert sorted(len(f["cites"]) for f in s.facts()) == [1, 1, 1, 1]
    assert len({f["cites"][0]["episode"] for f in s.facts()}) == 2
    assert s.status()["episodes_pending"] == 0


def test_a_pass_on_a_branch_writes_to_the_branch(s: Setup) -> None:
    assert s.model is not None
    s.write()
    r = s.m.http.post("/branches", json={"scope": s.scope, "name": "try-extract"})
    assert r.status_code == 201, r.text
    s.model.script([], default={"reply": {"facts": GOOD}})
    code, out, err = s.extract("--branch", "try-extract")
    assert code == 0, err
    assert out[0]["read"] == 1
    assert len(s.facts(branch="try-extract")) == 2
    assert s.facts() == []  # main has not read it
    assert s.status()["episodes_pending"] == 1
    assert s.status(branch="try-extract")["episodes_pending"] == 0
    # The merge carries the branch's read marks: main does not read the episode again.
    r = s.m.http.post("/merge", json={"scope": s.scope, "from": "try-extract", "into": "main"})
    assert r.status_code == 200, r.text
    assert len(s.facts()) == 2
    assert (s.status()["episodes_pending"], s.status()["episodes_read"]) == (0, 1)
    calls = len(s.model.calls())
    code, out, err = s.extract()
    assert code == 0, err
    assert out[0]["read"] == 0 and len(s.model.calls()) == calls


def test_a_crash_after_the_ledger_row_keeps_facts_and_read_marks_together(s: Setup) -> None:
    # The CLI dies after the ledger row, before its own read index learns the commit: the
    # server learns facts and read marks alike from the tables alone.
    assert s.model is not None
    s.write()
    s.model.script([], default={"reply": {"facts": GOOD}})
    code, _, _ = s.extract(AMPUP_MEMORY_TEST_FAULT=f"after-ledger@{s.home}")
    assert code == 70
    assert len(s.facts()) == 2
    st = s.status()
    assert (st["episodes_pending"], st["episodes_read"], st["facts_written"]) == (0, 1, 2)
    calls = len(s.model.calls())
    code, out, err = s.extract()
    assert code == 0, err
    assert out[0]["read"] == 0 and len(s.model.calls()) == calls


def test_the_status_counts_only_episodes_the_caller_may_read(s: Setup) -> None:
    assert s.model is not None
    s.write(BODY + "\n\nFor everyone.")
    s.write(BODY + "\n\nFor alice alone.", acl=["user:alice"])
    bob = s.m.as_user("bob")
    try:
        def seen(m: Memory) -> tuple[int, int, int]:
            r = m.http.get("/extraction/status", params={"scope": s.scope})
            assert r.status_code == 200, r.text
            st = r.json()
            return st["episodes_pending"], st["episodes_read"], st["facts_written"]

        assert (seen(s.m), seen(bob)) == ((2, 0, 0), (1, 0, 0))
        s.model.script([], default={"reply": {"facts": GOOD}})
        code, out, err = s.extract()
        assert code == 0, err
        assert (seen(s.m), seen(bob)) == ((0, 2, 4), (0, 1, 2))
    finally:
        bob.close()


def test_no_model_configured_runs_nothing_and_says_so(tmp_path: Path) -> None:
    proc = start(tmp_path, dict(QUIET))
    try:
        s = Setup(tmp_path, proc, None)
        s.write()
        st = s.status()
        assert st["model"] == "no model configured"
        assert (st["episodes_pending"], st["episodes_read"], st["last_error"]) == (1, 0, None)
        code, _, err = s.extract()
        assert code == 0 and "no extract model configured: nothing was read" in err, err
        # The names a user sets (the fields' names were no variable anyone could export).
        assert "set AMPUP_MEMORY_MODEL_BASE_URL and AMPUP_MEMORY_MODEL" in err, err
        assert s.facts() == []
        # A pass with another model (here `ampup-memory extract` given one) that fails is
        # that model's error: this server's status, of no model, does not report it.
        other = {"AMPUP_MEMORY_MODEL_BASE_URL": "http://127.0.0.1:9/v1",
                 "AMPUP_MEMORY_MODEL": "absent"}
        code, out, err = s.extract(**other)
        assert code == 2 and out[0]["model"] == "absent" and out[0]["error"], (out, err)
        st = s.status()
        assert (st["model"], st["episodes_pending"], st["last_error"]) == (
            "no model configured", 1, None), st
        # (A server of that model reports it: the failure tests above.)
        # A bad scope is refused as every command refuses it, model or none.
        bad = cli_in_process(s.home, s.env(), "extract", "--scope", "Not A Scope")
        assert bad.returncode == 2 and "VALIDATION_ERROR: invalid scope" in bad.stderr
    finally:
        proc.stop()


def test_a_pass_with_no_scope_to_read_says_so(tmp_path: Path) -> None:
    """A model is configured but no scope has a schema: nothing is read, and the command
    says why on stderr instead of exiting 0 with no output at all."""
    env = {"AMPUP_MEMORY_MODEL_BASE_URL": "http://127.0.0.1:9/v1",
           "AMPUP_MEMORY_MODEL": "absent"}
    done = cli_in_process(tmp_path / "home", env, "extract")
    assert (done.returncode, done.stdout) == (0, ""), done
    assert "no scope has a schema: nothing was read" in done.stderr, done.stderr
    assert "ampup-memory doctor" in done.stderr


def test_the_serve_timer_reads_pending_episodes(tmp_path: Path,
                                                scripted_model: ScriptedModel) -> None:
    import time

    proc = start(tmp_path, {**QUIET, **scripted_model.env(), "AMPUP_MEMORY_MODEL_RETRIES": "0",
                            "AMPUP_MEMORY_EXTRACTION_INTERVAL_SECONDS": "1"})
    try:
        s = Setup(tmp_path, proc, scripted_model)
        scripted_model.script([], default={"reply": {"facts": GOOD}})
        s.write()
        deadline = time.monotonic() + 60
        while s.status()["episodes_read"] == 0 and time.monotonic() < deadline:
            time.sleep(0.5)
        st = s.status()
        assert (st["episodes_pending"], st["episodes_read"], st["facts_written"]) == (0, 1, 2)
        assert {f["written_by"] for f in s.facts()} == {"extract:scripted-1"}
    finally:
        proc.stop()


def test_a_kill_9_of_the_server_mid_pass_leaves_every_batch_all_or_none(
        tmp_path: Path, scripted_model: ScriptedModel) -> None:
    """The serve timer reads one batch and two episodes more; the model holds the second
    batch's first request while the server is killed with SIGKILL. What was committed
    stands whole (facts and read marks of the same episodes), the batch in flight left
    nothing; a pass after the restart reads only what was not committed, so an episode is
    asked twice only if the crash cost its answer; ``index rebuild`` from the tables alone
    keeps the read marks."""
    import collections
    import time

    from ampup_memory.memory.extraction import DEFAULT_BATCH

    env = {**QUIET, **scripted_model.env(), "AMPUP_MEMORY_MODEL_RETRIES": "0",
           "AMPUP_MEMORY_EXTRACTION_INTERVAL_SECONDS": "1"}
    proc = start(tmp_path, env)
    total = DEFAULT_BATCH + 2
    s = Setup(tmp_path, proc, scripted_model, scope=new_scope())  # no schema yet: no pass
    r = s.m.http.post("/episodes/batch", json={"scope": s.scope, "episodes": [
        {"source": "doc:note", "body": BODY + f"\n\nNote {n}.", "acl": ["*"],
         "occurred_at": WHEN} for n in range(1, total + 1)]})
    assert r.status_code == 201, r.text
    note = {e["id"]: f"Note {n}." for n, e in enumerate(r.json()["episodes"], 1)}
    ids = sorted(note)  # the order a pass reads one commit's episodes in
    held = ids[DEFAULT_BATCH]  # the second batch's first episode
    scripted_model.script([{"match": note[held], "delay": 60, "times": 1,
                            "reply": {"facts": GOOD}}], default={"reply": {"facts": GOOD}})
    org, team = s.scope.split("/")
    r = s.m.http.put(f"/schemas/{org}/{team}", json={"schema": DEALS}, headers=ADMIN)
    assert r.status_code == 200, r.text

    def asked() -> collections.Counter[str]:
        said = collections.Counter[str]()
        for call in scripted_model.calls():
            text = call["messages"][1]["content"]
            said.update(i for i in ids if note[i] in text)
        return said

    try:
        deadline = time.monotonic() + 120
        while asked()[held] == 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert asked()[held] == 1  # its request is in flight, held by the model
        proc.kill()
    finally:
        proc.stop()
    s.m.close()
    quiet = {**env, "AMPUP_MEMORY_EXTRACTION_INTERVAL_SECONDS": "0"}
    proc = start(tmp_path, quiet)
    try:
        s = Setup(tmp_path, proc, scripted_model, scope=s.scope)

        def per_episode() -> collections.Counter[str]:
            return collections.Counter(f["cites"][0]["episode"] for f in s.facts())

        before = asked()
        got = per_episode()
        done = len(got)
        assert 0 < done <= DEFAULT_BATCH  # a whole first batch (fewer: the 30 s cap)
        assert got == {i: 2 for i in ids[:done]}  # each committed episode whole
        st = s.status()
        assert (st["episodes_pending"], st["episodes_read"], st["facts_written"]) == (
            total - done, done, 2 * done)  # read marks exactly where the facts are
        code, out, err = s.extract()
        assert code == 0, err
        assert out[0]["read"] == total - done
        assert per_episode() == {i: 2 for i in ids}
        lost = [i for i in ids if before[i] and i not in got]  # asked, never committed
        assert held in lost
        assert asked() == {i: 2 if i in lost else 1 for i in ids}
        s.m.close()
    finally:
        proc.stop()
    # The read index rebuilt from the tables alone knows the same read marks.
    done_cli = cli_in_process(tmp_path, quiet, "index", "rebuild")
    assert done_cli.returncode == 0, done_cli.stderr
    proc = start(tmp_path, quiet)
    try:
        s = Setup(tmp_path, proc, scripted_model, scope=s.scope)
        st = s.status()
        assert (st["episodes_pending"], st["episodes_read"], st["facts_written"]) == (
            0, total, 2 * total)
        s.m.close()
    finally:
        proc.stop()


def test_the_extraction_lease_is_renewed_while_a_pass_runs_and_lapses_soon_after_a_kill(
        tmp_path: Path) -> None:
    """The serve timers' lease is short and renewed while its pass runs (extraction's was
    10 minutes, never renewed): the holder keeps it past its time while the pass lasts, and
    a holder that dies without releasing it (kill -9: the renewal dies with it) hands over
    once the short time has run out."""
    import time
    from datetime import UTC, datetime, timedelta

    from ampup_memory.memory.readindex import ReadIndex
    from ampup_memory.settings import Settings

    assert Settings().lease_seconds <= 60
    index, ttl = ReadIndex(f"sqlite:///{tmp_path / 'index.db'}"), timedelta(seconds=1.2)
    try:
        with index.hold_lease("x", "a", ttl) as held:
            assert held
            time.sleep(2.0)  # a pass longer than the lease
            assert not index.take_lease("x", "b", datetime.now(UTC), ttl)
        # a holder that dies keeps its lease only until it runs out: taken, not released
        assert index.take_lease("x", "a", datetime.now(UTC), ttl)
        assert not index.take_lease("x", "b", datetime.now(UTC), ttl)
        time.sleep(1.3)
        assert index.take_lease("x", "b", datetime.now(UTC), ttl)
    finally:
        index.close()


def _read_marks(s: Setup, prefix: str) -> int:
    """Extraction's read marks (``mem_reads``) of the scopes under ``prefix``."""
    from sqlalchemy import create_engine, text

    from ampup_memory.memory.tables import sqlalchemy_url

    uri = s.base.get("AMPUP_MEMORY_INDEX_URI") or f"sqlite:///{s.home / 'index.db'}"
    engine = create_engine(sqlalchemy_url(uri, setting="index"))
    try:
        with engine.begin() as conn:
            return int(conn.execute(text("SELECT count(*) FROM mem_reads WHERE scope LIKE :p"),
                                    {"p": prefix + "%"}).scalar() or 0)
    finally:
        engine.dispose()


def test_a_dropped_workspace_takes_its_read_marks(s: Setup) -> None:
    """Deleting a workspace removes its scopes' extraction read marks with its other
    read-index rows; marks a drop left behind (an older version's) go at the next gc."""
    import json

    from sqlalchemy import create_engine, text

    from ampup_memory.memory.tables import sqlalchemy_url

    assert s.model is not None
    r = s.m.http.post("/workspaces", json={"name": "reads", "ttl": "1d"})
    assert r.status_code == 201, r.text
    org = r.json()["id"]
    ws = Setup(s.home, s.proc, s.model, s.base, scope=f"{org}/team_1")
    put = ws.m.http.put(f"/schemas/{org}/team_1", json={"schema": DEALS}, headers=ADMIN)
    assert put.status_code == 200, put.text
    ws.write()
    s.model.script([{"match": "They signed for", "reply": {"facts": GOOD}}])
    code, out, err = ws.extract()
    assert code == 0 and out[0]["read"] == 1, (out, err)
    marks = _read_marks(s, org + "/")
    assert marks == 1
    gone = s.m.http.delete(f"/workspaces/{org}")
    assert gone.status_code == 200 and gone.json()["dropped"] is True, gone.text
    assert _read_marks(s, org + "/") == 0
    # A mark an older version's drop left behind: the next gc pass removes it.
    uri = s.base.get("AMPUP_MEMORY_INDEX_URI") or f"sqlite:///{s.home / 'index.db'}"
    engine = create_engine(sqlalchemy_url(uri, setting="index"))
    try:
        with engine.begin() as conn:
            conn.execute(text(
                "INSERT INTO mem_reads (scope, branch, key, episode, seq, commit_id, model,"
                " schema, facts, rejected, read_at) VALUES (:s, 'main', 'k', 'e', 1, 'c',"
                " 'm', NULL, 0, '{}', 0)"), {"s": f"{org}/team_1"})
    finally:
        engine.dispose()
    done = cli_in_process(s.home, s.env(), "workspace", "gc")
    assert done.returncode == 0, done.stderr
    assert _read_marks(s, org + "/") == 0, json.dumps(done.stdout)


def test_a_nul_in_the_model_answer_is_rejected_and_the_scope_keeps_serving(s: Setup) -> None:
    """U+0000 is refused in every fact a client sends (api.md), since PostgreSQL's text
    cannot hold it; a model's candidate carrying one (in the entity's key) was written, so
    on PostgreSQL its commit landed and then failed in the read index. The fact check
    refuses it for every writer: the candidate is rejected as `string_nul`, the rest of
    the answer is written, and the scope reads and writes on."""
    assert s.model is not None
    s.write()
    nul = fact("deal:ac\u0000me", "stage", "won", 1, "is now won")
    s.model.script([{"match": "They signed for", "reply": {"facts": [nul, *GOOD]}}])
    code, out, err = s.extract()
    assert code == 0, err
    assert (out[0]["read"], out[0]["facts_written"]) == (1, 2), out
    assert s.status()["rejected"] == {"string_nul": 1}
    assert sorted(f["predicate"] for f in s.facts()) == ["amount", "stage"]
    r = s.m.http.get("/entities", params={"scope": s.scope})
    assert r.status_code == 200, r.text
    assert [e["entity"] for e in r.json()["entities"]] == ["deal:acme"]
    assert s.m.write(s.scope, "Later note.").status_code == 201
