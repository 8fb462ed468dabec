"""Shutdown of a real `serve` process while a timer's pass runs (SIGTERM, as a supervisor
sends it). The pass is an extraction pass held by the scripted model (the one edge we do
not own): the server stops scheduling passes, waits for the running one up to
AMPUP_MEMORY_SHUTDOWN_GRACE_SECONDS, and only then closes its stores. A pass that ends in
time commits whole and the process exits 0 with no traceback; one that outlasts the grace
is left as a kill would leave it (its batch all-or-none), said in one warning line, and the
process still exits within the grace."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from tests.extraction_data import BODY, DEALS, GOOD, WHEN
from tests.memory_support import ADMIN_TOKEN, QUIET, Memory, new_scope, start
from tests.model_support import ScriptedModel
from tests.server_process import ServerProcess

ADMIN = {"X-AMP-Admin-Token": ADMIN_TOKEN}
# Once shut down, uvicorn raises the signal it caught again: SIGTERM ends the process by
# that signal, SIGINT is the CLI's Ctrl-C (exit code 130).
EXITED = {signal.SIGTERM: -signal.SIGTERM, signal.SIGINT: 130}


def _env(model: ScriptedModel, **extra: str) -> dict[str, str]:
    return {**QUIET, **model.env(), "AMPUP_MEMORY_MODEL_RETRIES": "0",
            "AMPUP_MEMORY_MODEL_TIMEOUT_SECONDS": "60",
            "AMPUP_MEMORY_EXTRACTION_INTERVAL_SECONDS": "1", **extra}


def _pass_held(proc: ServerProcess, model: ScriptedModel, delay: float) -> str:
    """A scope with one pending episode whose extraction request the model holds for
    ``delay`` seconds; returns the scope once the server's timer pass has asked."""
    m = Memory(proc.url)
    scope = new_scope()
    try:
        model.script([{"match": "Acme", "delay": delay, "times": 1, "reply": {"facts": GOOD}}],
                     default={"reply": {"facts": GOOD}})
        r = m.write(scope, BODY, occurred_at=WHEN)
        assert r.status_code in (200, 201), r.text
        org, team = scope.split("/")
        r = m.http.put(f"/schemas/{org}/{team}", json={"schema": DEALS}, headers=ADMIN)
        assert r.status_code == 200, r.text
    finally:
        m.close()
    deadline = time.monotonic() + 60
    while not model.calls() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert model.calls(), "the timer's extraction pass never asked the model"
    return scope


def _terminate(proc: ServerProcess, within: float,
               sig: signal.Signals = signal.SIGTERM) -> tuple[int, float, str]:
    assert proc.proc is not None
    sent = time.monotonic()
    proc.proc.send_signal(sig)
    code = proc.proc.wait(within)
    return code, time.monotonic() - sent, proc.log_path.read_text()


def _extraction(home: Path, env: dict[str, str], scope: str) -> tuple[dict[str, int], int]:
    """The scope's extraction status and its fact count, read by a fresh server (no timer)."""
    proc = start(home, {**env, "AMPUP_MEMORY_EXTRACTION_INTERVAL_SECONDS": "0"})
    m = Memory(proc.url)
    try:
        r = m.http.get("/extraction/status", params={"scope": scope})
        assert r.status_code == 200, r.text
        st = r.json()
        r = m.facts(scope, "deal:acme", history=True)
        assert r.status_code == 200, r.text
        return ({k: st[k] for k in ("episodes_pending", "episodes_read", "facts_written")},
                len(r.json()["facts"]))
    finally:
        m.close()
        proc.stop()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["term", "int"])
def test_a_signal_waits_for_the_running_pass_then_closes(
        tmp_path: Path, scripted_model: ScriptedModel, sig: signal.Signals) -> None:
    env = _env(scripted_model)
    proc = start(tmp_path, env)
    try:
        scope = _pass_held(proc, scripted_model, delay=3)
        code, took, log = _terminate(proc, within=30, sig=sig)
    finally:
        proc.stop()
    assert code == EXITED[sig], log
    assert "Traceback" not in log and "failed" not in log, log
    assert 1.5 <= took < 15, f"exited {took:.1f} s after the signal: the pass held 3 s"
    assert len(scripted_model.calls()) == 1  # no pass was started after the signal
    # The pass ran to its end before the stores closed: its batch is committed whole.
    assert _extraction(tmp_path, env, scope) == (
        {"episodes_pending": 0, "episodes_read": 1, "facts_written": 2}, 2)


def test_a_pass_longer_than_the_grace_is_left_as_a_kill_leaves_it(
        tmp_path: Path, scripted_model: ScriptedModel) -> None:
    env = _env(scripted_model, AMPUP_MEMORY_SHUTDOWN_GRACE_SECONDS="1")
    proc = start(tmp_path, env)
    try:
        scope = _pass_held(proc, scripted_model, delay=30)
        code, took, log = _terminate(proc, within=20)
    finally:
        proc.stop()
    assert code == 1, log
    assert took < 10, f"exited {took:.1f} s after SIGTERM, past a grace of 1 s"
    assert "Traceback" not in log, log
    assert "extraction pass still running after the shutdown grace of 1 s" in log, log
    # Nothing of the abandoned batch landed, and the episode is still pending.
    assert _extraction(tmp_path, env, scope) == (
        {"episodes_pending": 1, "episodes_read": 0, "facts_written": 0}, 0)
