"""The seed's learning loop walked by an agent that speaks MCP only (docs/mcp.md, the AmpUp
docs' "The learning loop"): start_session → get_advice → remember_memory / search_memory →
end_session with transcript and outcome, no reward → the judge model rewards it (read back
with get_session) → the sessions are sorted into situations and a note is learned → a
later session's get_advice serves the note; then close_memory and a read as of before the close.

The server and the scripted OpenAI-compatible model are real processes; the judge, cluster
and learn passes run through the CLI's own entry in this process (`cli_in_process`), as
in test_advice_loop.py, instead of waiting for serve's timers.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.memory_support import QUIET, cli_in_process, new_scope, start
from tests.model_support import ScriptedModel
from tests.server_process import ServerProcess, plain_client
from tests.test_advice_learning import KINDS, NEW_TASKS
from tests.test_mcp import http_client_for, ok

NOTE = {"when": "For SQL reporting tasks.", "steps": ["Write the query.", "Check the rows."],
        "pitfalls": ["Skipping the row check."]}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory,
           scripted_model_process: ScriptedModel) -> Iterator[tuple[ServerProcess, Path,
                                                                    dict[str, str]]]:
    env = {**QUIET, **scripted_model_process.env("JUDGE_"),
           **scripted_model_process.env("LEARN_"),
           "AMP_EMBEDDING_PROVIDER": "wordllama",  # clustering needs meaning, not hashes
           "AMPUP_MEMORY_MODEL_RETRIES": "0",
           "AMPUP_MEMORY_ADVICE_JUDGE_INTERVAL_SECONDS": "0",
           "AMPUP_MEMORY_ADVICE_CLUSTER_INTERVAL_SECONDS": "0",
           "AMPUP_MEMORY_ADVICE_LEARN_INTERVAL_SECONDS": "0",
           "AMPUP_MEMORY_ADVICE_MIN_RUNS_FOR_NOTE": "2",
           "AMPUP_MEMORY_ADVICE_TRIAL_SHARE": "1.0"}
    home = tmp_path_factory.mktemp("mcp-advice-loop")
    proc = start(home, env)
    yield proc, home, env
    proc.stop()


async def a_session(url: str, user: str, scope: str, task: str) -> str:
    """One conversation as the seed lays it out, over one MCP connection."""
    async with http_client_for(url, {"X-AmpUp-User": user}) as client:
        ses = json.loads(await ok(client, "start_session", scope=scope, task=task,
                                  acl=["*"]))["id"]
        assert json.loads(await ok(client, "get_advice", scope=scope, task=task,
                                   session=ses)) == {"advice": None}
        await ok(client, "remember_memory", scope=scope, text=f"Worked on: {task}")
        assert "Worked on" in await ok(client, "search_memory", scope=scope, query=task)
        ended = json.loads(await ok(client, "end_session", session=ses,
                                    transcript=f"{user} wrote the query and checked it",
                                    outcome="the report had the right rows"))
    assert (ended["state"], ended["reward"], ended["judging"]) == ("ended", None, "pending")
    return str(ses)


async def test_the_learning_loop_over_mcp_only(
        served: tuple[ServerProcess, Path, dict[str, str]],
        scripted_model_process: ScriptedModel) -> None:
    proc, home, env = served
    model, scope = scripted_model_process, new_scope()
    model.reset()
    sessions = [await a_session(proc.url, f"u{i}", scope, task)
                for i, task in enumerate(KINDS["sql"][:5])]

    # Nobody rewarded them: the judge model does, then the loop learns a note.
    model.script([], default={"reply": {"reward": 1.0, "reason": "right rows", "notes": {}}})
    for step in ("judge", "cluster"):
        done = cli_in_process(home, env, "advice", step, "--scope", scope)
        assert done.returncode == 0, done.stderr
    # The agent reads the judge's verdict over MCP (get_session), as GET /sessions/{id}.
    async with http_client_for(proc.url, {"X-AmpUp-User": "u0"}) as client:
        read = [json.loads(await ok(client, "get_session", session=s)) for s in sessions]
    with plain_client(base_url=proc.url, timeout=60, headers={"X-AmpUp-User": "u0"}) as http:
        assert read == [http.get(f"/sessions/{s}").json() for s in sessions]
    assert [(r["reward"]["value"], r["reward"]["by"], r["judging"]) for r in read] == [
        (1.0, "judge", "judged")] * 5
    model.script([], default={"reply": NOTE})
    done = cli_in_process(home, env, "advice", "learn", "--scope", scope)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["scopes"][0]["learned"] >= 1

    # A later session of that kind of task is served the note, on trial, with its source.
    task = NEW_TASKS["sql"][0]
    async with http_client_for(proc.url, {"X-AmpUp-User": "u9"}) as client:
        ses = json.loads(await ok(client, "start_session", scope=scope, task=task))["id"]
        advice = json.loads(await ok(client, "get_advice", scope=scope, task=task,
                                     session=ses))["advice"]
        await ok(client, "end_session", session=ses, transcript="followed the note",
                 outcome="done", reward=1.0)
    assert (advice["kind"], advice["trial"], advice["steps"]) == ("note", True, NOTE["steps"])
    assert advice["sources"] and set(advice["sources"]) <= set(sessions)

    # close_memory ends a value; a read as of before the close still shows it.
    async with http_client_for(proc.url, {"X-AmpUp-User": "u0"}) as client:
        note = json.loads(await ok(client, "remember_memory", scope=scope, acl=["*"],
                                   text="The revenue report's budget is 5k."))
        with plain_client(base_url=proc.url, timeout=60,
                          headers={"X-AmpUp-User": "u0"}) as http:
            r = http.post("/facts", json={
                "scope": scope, "entity": "report", "predicate": "budget", "value": "5k",
                "quote": "budget is 5k", "cites": [{"episode": note["id"], "unit": 1}]})
            assert r.status_code == 201, r.text
        before = datetime.now(UTC).isoformat().replace("+00:00", "Z")
        await ok(client, "close_memory", scope=scope, entity="report", predicate="budget",
                 reason="The budget was withdrawn.")
        now = json.loads(await ok(client, "query_memory", scope=scope, find="facts",
                                  entity="report"))
        then = json.loads(await ok(client, "query_memory", scope=scope, find="facts",
                                   entity="report", as_of=before))
        searched = await ok(client, "search_memory", scope=scope, query="report budget",
                            as_of=before)
    assert now["facts"] == []
    assert [f["value"] for f in then["facts"]] == ["5k"]
    assert '"5k"' in searched
