"""Advice passes run at once on one home (a command beside ``serve``'s timer, or two servers
whose lease ran out under a paused holder) record each result once.

Two services open the same SQLite home, as two processes do. The first pass reads, and is
held at its commit by its own service's write lock (held here) until the second pass has
read the same and committed; then it commits. Before each commit rechecked its subject
inside the compare-and-set, the first pass committed again what the second had: a note's
new outcomes twice in its history, the same situation map as one more version, the same
compilation again. The judge already checked for a reward inside its commit; it is here
so it stays so.
Counts from two real processes (and two on one PostgreSQL) are in docs/deployment.md.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ampup_memory.advice import loop
from ampup_memory.advice.gate import GateRules
from ampup_memory.advice.judge import judge_pass
from ampup_memory.advice.loop import (
    LEARNER,
    NOTE,
    _learning_event,
    cached_state,
    cluster_pass,
    learn_pass,
    load_state,
)
from ampup_memory.advice.notes import Note
from ampup_memory.advice.procedures import PutSources, compile_pass, put_sources
from ampup_memory.advice.runs import REWARD, RecordRun, RewardRun, record_run, reward
from ampup_memory.advice.sessions import EndSession, StartSession, end_session, start_session
from ampup_memory.memory.episodes import WriteEpisode
from ampup_memory.memory.scopes import MAIN, parse_scope
from ampup_memory.memory.service import MemoryService
from ampup_memory.models.chat import Role, chat_model
from ampup_memory.search.embed import WordLlamaEmbedder
from ampup_memory.settings import Settings
from tests.memory_support import QUIET, new_scope
from tests.model_support import ScriptedModel
from tests.test_advice_procedures import RUNBOOK, answer

KEY = "note_01JZ0000000000000000000000"
RULES = GateRules(retire_min_served=10_000)
TASKS = ["Write a SQL query for monthly revenue by region",
         "Fix the failing unit test in the payment service",
         "Draft a follow-up email to the buyer after the demo"]


@pytest.fixture
def settings(tmp_path: Path, scripted_model: ScriptedModel) -> Settings:
    return Settings.model_validate({**QUIET, **scripted_model.env("COMPILE_"),
                                    **scripted_model.env("JUDGE_"),
                                    "AMPUP_MEMORY_MODEL_RETRIES": "0",
                                    "AMPUP_MEMORY_HOME": str(tmp_path)})


@pytest.fixture
def two(settings: Settings) -> Iterator[tuple[MemoryService, MemoryService]]:
    first = MemoryService.open(settings)
    second = MemoryService.open(settings)
    yield first, second
    first.close()
    second.close()


def runs(svc: MemoryService, scope: str, n: int, advice_key: str | None = None,
         start: int = 0) -> None:
    for i in range(start, start + n):
        user = f"u{i}"
        done = record_run(svc, user, RecordRun(scope=scope, task=f"{TASKS[i % 3]} {i}",
                                               advice_key=advice_key))
        reward(svc, user, RewardRun(run=done.subject, reward=1.0 if i % 2 else -0.5,
                                    reason="r"))


def first_held_at_commit(held: MemoryService, job: Callable[[MemoryService], Any],
                         other: Callable[[], Any]) -> Any:
    """``job(held)`` in a thread, held at its commit (``held``'s write lock, taken here)
    until ``other()`` ran to its end; ``job``'s result."""
    result: list[Any] = []
    with held._write_lock:
        thread = threading.Thread(target=lambda: result.append(job(held)), daemon=True)
        thread.start()
        deadline = time.monotonic() + 60
        while not _waits_in(thread, "write_events"):
            assert thread.is_alive() and time.monotonic() < deadline, "it did not commit"
            time.sleep(0.01)
        other()
    thread.join(60)
    assert not thread.is_alive() and len(result) == 1
    return result[0]


def _waits_in(thread: threading.Thread, name: str) -> bool:
    frame = sys._current_frames().get(thread.ident or 0)
    while frame is not None:
        if frame.f_code.co_name == name:
            return True
        frame = frame.f_back
    return False


def test_two_learn_passes_record_a_notes_new_outcomes_once(
        two: tuple[MemoryService, MemoryService]) -> None:
    a, b = two
    scope = new_scope()
    note = Note(key=KEY, situation="sit_x", when="w", steps=("s",), pitfalls=(), sources=(),
                model="m", created_at="2026-12-06T00:00:00Z")
    a.write_events(LEARNER, parse_scope(scope), MAIN, "learn note",
                   [_learning_event(KEY, NOTE, {"note": note.to_dict()})])
    runs(a, scope, 4, KEY)

    def learn(svc: MemoryService) -> dict[str, Any]:
        report: dict[str, Any] = learn_pass(svc, None, RULES, 5, parse_scope(scope))
        return report["scopes"][0]

    others: list[dict[str, Any]] = []
    held = first_held_at_commit(a, learn, lambda: others.append(learn(b)))
    assert (others[0]["reviewed"], held["reviewed"]) == (1, 0)  # was (1, 1)
    state = load_state(a, parse_scope(scope))
    steps = [h for h in state.history[KEY] if h["kind"] == "outcome"]
    assert len(steps) == 4, len(steps)  # was 8: each of the four twice
    assert state.notes[KEY].evidence.served == 4

    # A pass that read before a new reward commits after one that read it: it reads again
    # instead of committing its older outcomes over the newer ones.
    runs(a, scope, 1, KEY, start=4)

    def newer() -> None:
        runs(b, scope, 1, KEY, start=5)
        others.append(learn(b))

    held = first_held_at_commit(a, learn, newer)
    assert (others[1]["reviewed"], held["reviewed"]) == (1, 0)
    state = load_state(a, parse_scope(scope))
    assert state.notes[KEY].evidence.served == 6  # was 5: the newer reward's outcome lost
    assert len(state.outcomes[KEY]) == 6  # was 5 until the next pass
    assert len([h for h in state.history[KEY] if h["kind"] == "outcome"]) == 6


def test_two_cluster_passes_commit_one_map(two: tuple[MemoryService, MemoryService]) -> None:
    a, b = two
    scope = new_scope()
    runs(a, scope, 6)
    embedder = WordLlamaEmbedder()

    def cluster(svc: MemoryService) -> dict[str, Any]:
        report: dict[str, Any] = cluster_pass(svc, embedder, None, 0.35, parse_scope(scope))
        return report["scopes"][0]

    others: list[dict[str, Any]] = []
    held = first_held_at_commit(a, cluster, lambda: others.append(cluster(b)))
    assert others[0]["committed"] and held["committed"] is None  # was a second commit
    assert load_state(a, parse_scope(scope)).versions == 1  # was 2, the same map twice


def test_two_compile_passes_commit_one_compilation(
        two: tuple[MemoryService, MemoryService], settings: Settings,
        scripted_model: ScriptedModel) -> None:
    a, b = two
    scope = new_scope()
    episode = a.write_episode("alice", WriteEpisode(
        scope=scope, source="doc:note", body=RUNBOOK, acl=["user:alice"],
        document="refund-runbook"))[0]
    put_sources(a, "admin", PutSources(scope=scope, documents=["refund-runbook"]))
    scripted_model.script([{"match": "refund", "reply": answer(episode)}])
    model = chat_model(settings, Role.COMPILE)

    def compile_(svc: MemoryService) -> dict[str, Any]:
        report: dict[str, Any] = compile_pass(svc, model, WordLlamaEmbedder(),
                                              parse_scope(scope))
        return report["scopes"][0]

    others: list[dict[str, Any]] = []
    held = first_held_at_commit(a, compile_, lambda: others.append(compile_(b)))
    assert others[0]["committed"] and held["committed"] is None  # was a second commit
    assert held["failed"] == 0
    assert load_state(a, parse_scope(scope)).procedures_commit == others[0]["committed"]
    assert len(scripted_model.calls()) == 2  # each pass asked once; neither asked again


def test_two_judge_passes_judge_a_session_once(
        two: tuple[MemoryService, MemoryService], settings: Settings,
        scripted_model: ScriptedModel) -> None:
    a, b = two
    scope = new_scope()
    ses = start_session(a, "alice", StartSession(scope=scope, task=TASKS[0])).subject
    end_session(a, "alice", EndSession(session=ses, transcript="t", outcome="done"))
    scripted_model.script([], default={"reply": {"reward": 0.5, "reason": "ok"}})
    model = chat_model(settings, Role.JUDGE)

    def judge(svc: MemoryService) -> dict[str, Any]:
        return judge_pass(svc, model, parse_scope(scope))

    others: list[dict[str, Any]] = []
    held = first_held_at_commit(a, judge, lambda: others.append(judge(b)))
    assert (others[0]["judged"], held["judged"], held["skipped"]) == (1, 0, 1)
    assert len(a.index.events(scope, None, (REWARD,), [ses])) == 1


def test_the_learned_state_is_kept_for_a_bounded_number_of_scopes(
        two: tuple[MemoryService, MemoryService], monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = two
    monkeypatch.setattr(loop, "STATES_KEPT", 3)  # a setting of the cache, not a mock
    scopes = [parse_scope(new_scope()) for _ in range(5)]
    for scope in scopes:
        cached_state(a, scope)
    assert len(loop._kept(a)) == 3  # every scope ever asked was kept
    cached_state(b, scopes[0])  # another home's (here: the same) is kept apart
    assert len(loop._kept(b)) == 1
    kept = loop._kept(a)
    assert kept.get(str(scopes[0])) is None and kept.get(str(scopes[-1])) is not None
