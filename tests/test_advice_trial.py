"""The trial share of a candidate note, through the code that serves it.

`tests/test_advice_learning.py` checks the pure gate (`gate.serves`) over 1,000 draws. Here
a real server holds one real candidate note (rewarded runs → `cluster_pass` → `learn_pass`
with the scripted learning model), and:

- over real HTTP, ``POST /advice`` serves the candidate — and records it on the session —
  in exactly the sessions the gate's draw selects, and in no other (each session costs two
  commits, start and the served step, so only a few dozen);
- in process, `advise` — the serving rule ``POST /advice`` itself calls, on the state read
  from storage — serves it in the configured share of 1,000 sessions (±5 %), and answers
  the HTTP sessions exactly as the server did.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from ampup_memory.advice.gate import GateRules, NoteState, serves
from ampup_memory.advice.loop import advise, cached_state, cluster_pass, learn_pass
from ampup_memory.advice.runs import SESSION_PREFIX, new_id
from ampup_memory.memory.scopes import parse_scope
from ampup_memory.memory.service import MemoryService
from ampup_memory.models.chat import Role, chat_model
from ampup_memory.search.embed import WordLlamaEmbedder
from ampup_memory.settings import Settings
from tests.memory_support import QUIET, Memory, new_scope, start
from tests.model_support import ScriptedModel
from tests.test_advice_learning import KINDS, NEW_TASKS

SHARE = 0.5  # half the sessions: both answers show up in a few dozen of them
TASK = NEW_TASKS["sql"][0]
NOTE = {"when": "For SQL reports.", "steps": ["Write the query.", "Check the totals."],
        "pitfalls": ["Forgetting the date range."]}


@dataclass
class Trial:
    m: Memory
    settings: Settings
    scope: str
    key: str  # the candidate note
    situation: str


@pytest.fixture(scope="module")
def trial(tmp_path_factory: pytest.TempPathFactory,
          scripted_model_process: ScriptedModel) -> Iterator[Trial]:
    env = {**QUIET, **scripted_model_process.env("LEARN_"),
           "AMP_EMBEDDING_PROVIDER": "wordllama",
           "AMPUP_MEMORY_MODEL_RETRIES": "0",
           "AMPUP_MEMORY_ADVICE_JUDGE_INTERVAL_SECONDS": "0",
           "AMPUP_MEMORY_ADVICE_CLUSTER_INTERVAL_SECONDS": "0",
           "AMPUP_MEMORY_ADVICE_LEARN_INTERVAL_SECONDS": "0",
           "AMPUP_MEMORY_ADVICE_MIN_RUNS_FOR_NOTE": "2",
           "AMPUP_MEMORY_ADVICE_TRIAL_SHARE": str(SHARE)}
    home: Path = tmp_path_factory.mktemp("advice-trial")
    server = start(home, env)
    m = Memory(server.url)
    scope = new_scope()
    for text in KINDS["sql"][:3]:
        r = m.http.post("/runs", json={"scope": scope, "task": text, "trace": "wrote it"})
        assert r.status_code == 201, r.text
        r = m.http.post("/runs/reward", json={"run": r.json()["id"], "reward": 1.0,
                                              "reason": "right numbers"})
        assert r.status_code == 201, r.text
    settings = Settings.model_validate({**env, "AMPUP_MEMORY_HOME": str(home)})
    scripted_model_process.script([], default={"reply": NOTE})
    svc = MemoryService.open(settings)
    try:
        assert cluster_pass(svc, WordLlamaEmbedder(), None,
                            settings.advice_situation_min_similarity,
                            parse_scope(scope))["scopes"][0]["committed"]
        assert learn_pass(svc, chat_model(settings, Role.LEARN),
                          GateRules.from_settings(settings), settings.advice_min_runs_for_note,
                          parse_scope(scope))["scopes"][0]["learned"] == 1
    finally:
        svc.close()
    [note] = m.http.get("/notes", params={"scope": scope}).json()["notes"]
    assert note["state"] == "candidate"
    yield Trial(m, settings, scope, note["key"], note["situation"])
    m.close()
    server.stop()


def test_post_advice_serves_the_candidate_exactly_where_the_gate_draws_it(
        trial: Trial) -> None:
    rules = GateRules.from_settings(trial.settings)
    assert rules.trial_share == SHARE
    served: dict[str, bool] = {}
    for _ in range(16):
        r = trial.m.http.post("/sessions/start", json={"scope": trial.scope, "task": TASK})
        assert r.status_code == 201, r.text
        ses = r.json()["id"]
        r = trial.m.http.post("/advice", json={"scope": trial.scope, "task": TASK,
                                               "session": ses})
        assert r.status_code == 200, r.text
        advice = r.json()["advice"]
        drawn, _ = serves(trial.key, NoteState.CANDIDATE, ses, rules)
        if drawn:
            assert (advice["key"], advice["trial"], advice["state"]) == (
                trial.key, True, "candidate")
        else:
            assert r.json() == {"advice": None, "situation": trial.situation}
        steps = trial.m.http.get(f"/sessions/{ses}").json()["steps"]
        assert [s["served"]["key"] for s in steps] == ([trial.key] if drawn else [])
        served[ses] = drawn
    assert set(served.values()) == {True, False}  # both answers were checked

    # The serving rule in process answers those sessions as the server did, and serves the
    # candidate in the trial share of 1,000 sessions.
    svc = MemoryService.open(trial.settings)
    try:
        state = cached_state(svc, parse_scope(trial.scope))
    finally:
        svc.close()
    embedder = WordLlamaEmbedder()
    vector = embedder.embed([TASK])[0]
    for share in (SHARE, 0.2):
        settings = trial.settings.model_copy(update={"advice_trial_share": share})
        picks = {ses: advise(state, vector, embedder.name, ses, settings)
                 for ses in (new_id(SESSION_PREFIX) for _ in range(1000))}
        assert all(p.situation == trial.situation and p.skill is None
                   for p in picks.values())
        got = [p.note is not None and (p.note.key, p.trial) == (trial.key, True)
               for p in picks.values()]
        assert sum(p.note is not None for p in picks.values()) == sum(got)
        assert abs(sum(got) / len(got) - share) <= 0.05, sum(got)
    assert {ses: advise(state, vector, embedder.name, ses, trial.settings).note is not None
            for ses in served} == served
    # Without a session no candidate is served.
    assert advise(state, vector, embedder.name, None, trial.settings).note is None
