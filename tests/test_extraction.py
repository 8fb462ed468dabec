"""Extraction over real HTTP with the scripted model server (the one edge we do not own).

The server and ``ampup-memory extract`` share one home; the scripted OpenAI-compatible
process answers the prompts. Checked: correct facts are written with ``written_by:
extract:<model>``, cites and ``valid_from``; a hallucinated quote, a quote from another unit
and wrong types are rejected and counted per reason; malformed JSON, 500 and 429 leave the
episode pending with nothing written; a kill -9 between the data rows and the ledger row
leaves neither facts nor read marks; re-running reads nothing twice; a branch's pass writes
to the branch; with no model configured nothing runs, nothing fails and the status says so.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.memory_support import ADMIN_TOKEN, QUIET, Memory, new_scope, run_cli, start
from tests.model_support import ScriptedModel
from tests.server_process import ServerProcess

ADMIN = {"X-AMP-Admin-Token": ADMIN_TOKEN}
DEALS = {"name": "deals", "entities": [
    {"name": "deal", "attributes": [
        {"name": "stage", "type": "enum", "values": ["open", "won", "lost"]},
        {"name": "amount", "type": "money", "currency": "USD"},
        {"name": "close_date", "type": "date"}]}],
    "extract": [{"episode_types": ["doc"],
                 "targets": {"deal": ["stage", "amount", "close_date"]}}]}
BODY = ("The Acme deal\nis now won.\n\nThey signed for $50k in total.\n\n"
        "Close date is 2025-07-01.")
WHEN = "2025-06-02T09:00:00Z"


def fact(entity: str, predicate: str, value: Any, unit: int, quote: str) -> dict[str, Any]:
    return {"entity": entity, "predicate": predicate, "value": value, "unit": unit,
            "quote": quote}


GOOD = [fact("deal:acme", "stage", "won", 1, "Acme deal is now  won"),  # whitespace differs
        fact("deal:acme", "amount", "$50k", 2, "signed for $50k")]
BAD = [fact("deal:acme", "close_date", "2025-07-01", 2, "Close date is 2025-07-01"),  # unit 3's
       fact("deal:acme", "amount", "$90k", 2, "signed for $90k"),  # hallucinated
       fact("deal:acme", "stage", "maybe", 1, "is now won"),  # not one of the enum's values
       fact("deal:acme", "close_date", 17, 3, "2025-07-01"),  # a number is no date
       fact("deal:acme", "owner", "ann", 1, "Acme deal"),  # no such attribute
       fact("deal:acme", "stage", "won", 9, "won")]  # no such unit


class Setup:
    def __init__(self, home: Path, proc: ServerProcess, model: ScriptedModel | None) -> None:
        self.home, self.proc, self.model = home, proc, model
        self.m = Memory(proc.url)
        self.scope = new_scope()
        org, team = self.scope.split("/")
        r = self.m.http.put(f"/schemas/{org}/{team}", json={"schema": DEALS}, headers=ADMIN)
        assert r.status_code == 200, r.text

    def env(self, **extra: str) -> dict[str, str]:
        model = self.model.env() if self.model else {}
        return {**QUIET, **model, "AMPUP_MEMORY_MODEL_RETRIES": "1",
                "AMPUP_MEMORY_MODEL_TIMEOUT_SECONDS": "2", **extra}

    def write(self, body: str = BODY, **extra: Any) -> str:
        r = self.m.write(self.scope, body, occurred_at=WHEN, **extra)
        assert r.status_code in (200, 201), r.text
        return str(r.json()["id"])

    def extract(self, *args: str, **env: str) -> tuple[int, list[dict[str, Any]], str]:
        import json

        done = run_cli(self.home, self.env(**env), "extract", "--scope", self.scope, *args)
        lines = [json.loads(x) for x in done.stdout.splitlines() if x.startswith("{")]
        return done.returncode, lines, done.stderr

    def status(self, **params: Any) -> dict[str, Any]:
        r = self.m.http.get("/extraction/status", params={"scope": self.scope, **params})
        assert r.status_code == 200, r.text
        body: dict[str, Any] = r.json()
        return body

    def facts(self, **params: Any) -> list[dict[str, Any]]:
        r = self.m.facts(self.scope, "deal:acme", history=True, **params)
        assert r.status_code == 200, r.text
        return list(r.json()["facts"])


@pytest.fixture(scope="module")
def model_home(tmp_path_factory: pytest.TempPathFactory,
               scripted_model_process: ScriptedModel) -> Iterator[tuple[Path, ServerProcess]]:
    home = tmp_path_factory.mktemp("extraction")
    proc = start(home, {**QUIET, **scripted_model_process.env(),
                        "AMPUP_MEMORY_MODEL_RETRIES": "1"})
    yield home, proc
    proc.stop()


@pytest.fixture
def s(model_home: tuple[Path, ServerProcess], scripted_model: ScriptedModel) -> Setup:
    return Setup(*model_home, scripted_model)


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
    # One commit held the facts and the read mark.
    assert [c["message"] for c in s.m.ledger(s.scope)][0] == (
        "extract 2 fact(s) from 1 episode(s)")
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


@pytest.mark.parametrize("reply", [
    {"reply": "this is {not json", "status": 200},
    {"reply": {"error": {"message": "boom"}}, "status": 500},
    {"reply": {"error": {"message": "slow down"}}, "status": 429,
     "headers": {"Retry-After": "0"}},
], ids=["malformed", "http500", "http429"])
def test_a_failing_model_leaves_the_episode_pending_and_writes_nothing(
        s: Setup, reply: dict[str, Any]) -> None:
    assert s.model is not None
    s.write()
    commits = len(s.m.ledger(s.scope))
    s.model.script([], default=reply)
    code, out, err = s.extract()
    assert code == 2 and "the model failed" in err
    assert out[0]["read"] == 0 and out[0]["error"]
    assert len(s.model.calls()) == 2  # one try and the one retry the settings allow
    assert len(s.m.ledger(s.scope)) == commits and s.facts() == []
    st = s.status()
    assert st["episodes_pending"] == 1 and st["episodes_read"] == 0
    assert "gave no usable answer" in st["last_error"]
    # The model is back: the episode is read now, once, and the error is cleared.
    s.model.script([], default={"reply": {"facts": GOOD}})
    code, out, err = s.extract()
    assert code == 0, err
    assert out[0]["facts_written"] == 2 and len(s.facts()) == 2
    st = s.status()
    assert (st["episodes_pending"], st["episodes_read"], st["last_error"]) == (0, 1, None)


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


def test_only_extraction_writes_read_marks(s: Setup) -> None:
    ep = s.write()
    r = s.m.fact(s.scope, f"_extracted:{ep}", "read:x", "y", "Acme", [(ep, 1)])
    assert r.status_code == 422
    assert r.json()["error"]["details"]["errors"][0]["type"] == "entity_reserved"


def test_no_model_configured_runs_nothing_and_says_so(tmp_path: Path) -> None:
    proc = start(tmp_path, dict(QUIET))
    try:
        s = Setup(tmp_path, proc, None)
        s.write()
        st = s.status()
        assert st["model"] == "no model configured"
        assert (st["episodes_pending"], st["episodes_read"], st["last_error"]) == (1, 0, None)
        code, _, err = s.extract()
        assert code == 0 and "no model configured" in err
        assert s.facts() == []
    finally:
        proc.stop()


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
