"""Shutdown of a real `serve` process while a timer's pass runs (SIGTERM, as a supervisor
sends it). The pass is an extraction pass held by the scripted model (the one edge we do
not own): the server stops scheduling passes, waits for the running one up to
AMPUP_MEMORY_SHUTDOWN_GRACE_SECONDS, and only then closes its stores. A pass that ends in
time commits whole and the process exits 0 with no traceback; one that outlasts the grace
is left as a kill would leave it (its batch all-or-none), said in one warning line, and the
process still exits within the grace."""

from __future__ import annotations

import shutil
import signal
import time
from pathlib import Path

import httpx
import pytest

from tests.extraction_data import BODY, DEALS, GOOD, WHEN
from tests.memory_support import ADMIN_TOKEN, QUIET, Memory, new_scope, serving, start
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


# A graph build of the AMP cells' HNSW graph (embedded SQLite store) that takes seconds:
# the threshold low, M and efConstruction high, random unit vectors.
GRAPH = {**QUIET, "AMPUP_MEMORY_SEARCH_ANN_MIN_VECTORS": "1000",
         "AMPUP_MEMORY_SEARCH_ANN_CONNECTIVITY": "64",
         "AMPUP_MEMORY_SEARCH_ANN_EXPANSION_ADD": "1000", "AMPUP_MEMORY_LOG_LEVEL": "info"}
CELLS = 6000
AMP = {"X-AMP-Agent-ID": "agent_t"}


@pytest.fixture(scope="module")
def cells_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A home holding CELLS AMP cells, written in-process through AmpService.create (the
    server's own write path) with random unit vectors; each test copies it."""
    import json

    import numpy as np

    from ampup_memory.runtime import open_runtime
    from ampup_memory.settings import load_settings

    home = tmp_path_factory.mktemp("graph-build") / "home"
    rt = open_runtime(load_settings(home=str(home), embedding_provider="hash"))
    try:
        rt.store._conn().execute("PRAGMA synchronous=OFF")  # type: ignore[attr-defined]
        rng = np.random.default_rng(7)
        vectors = rng.standard_normal((CELLS, rt.embedder.dimensions)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        for i, vector in enumerate(vectors):
            body = {"type": "semantic", "content": {"text": f"note {i} about {i % 97}"},
                    "identity": {"owner_id": "user_a", "owner_type": "user"}}
            rt.amp.create("agent_t", json.dumps(body).encode(), vector)
    finally:
        rt.close()
    return home


def _copy_cells(cells_home: Path, home: Path) -> None:
    """A new home holding ``cells_home``'s AMP cells alone: its catalog names its own
    warehouse's files by their full paths, so a copy of it would be another server's
    tables (which `serve` refuses)."""
    home.mkdir()
    for db in cells_home.glob("amp.db*"):
        shutil.copy2(db, home / db.name)


def _graphs(proc: ServerProcess) -> dict[str, int]:
    r = httpx.get(f"{proc.url}/status", headers=ADMIN)
    assert r.status_code == 200, r.text
    graphs: dict[str, int] = r.json()["stores"]["amp"]["graphs"]
    return graphs


def _search(proc: ServerProcess, queries: list[str]) -> list[list[str]]:
    with httpx.Client(base_url=proc.url + "/amp/v1", headers=AMP, timeout=60) as http:
        out = []
        for q in queries:
            r = http.post("/memories/search", json={"query": q, "limit": 10})
            assert r.status_code == 200, r.text
            out.append([cell["id"] for cell in r.json()["results"]])
        return out


def _building(home: Path, env: dict[str, str]) -> ServerProcess:
    """A server whose first search started the cell graph's build, still running."""
    proc = start(home, env)
    _search(proc, ["note 1"])
    graphs = _graphs(proc)
    assert graphs["building"] == 1 and graphs["built"] == 0, graphs
    return proc


QUERIES = [f"note {i} about {i % 97}" for i in range(0, 600, 60)]


def test_a_graph_build_is_stopped_at_shutdown_and_a_restart_builds_it_whole(
        tmp_path: Path, cells_home: Path) -> None:
    home = tmp_path / "home"
    _copy_cells(cells_home, home)
    proc = _building(home, GRAPH)
    try:
        code, took, log = _terminate(proc, within=30)
    finally:
        proc.stop()
    assert code == EXITED[signal.SIGTERM], log
    assert "waiting up to" in log and "for the search graph builds" in log, log
    assert took < 10, f"exited {took:.1f} s after SIGTERM: a build stops at its next chunk"
    assert "Traceback" not in log and "terminate called" not in log, log
    # Nothing half-built was saved: the restart builds the graph from the cells and its
    # answers are exact search's (threshold 0, same files).
    assert not list(home.rglob("*.ann")) and not list(home.rglob("*.tmp"))
    with serving(home, GRAPH) as proc:
        _search(proc, ["note 1"])
        deadline = time.monotonic() + 120
        while (graphs := _graphs(proc))["built"] < 1 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert graphs == {"built": 1, "loaded": 0, "rejected": 0, "saved": graphs["saved"],
                          "building": 0}, graphs
        by_graph = _search(proc, QUERIES)
    with serving(home, {**GRAPH, "AMPUP_MEMORY_SEARCH_ANN_MIN_VECTORS": "0"}) as proc:
        exact = _search(proc, QUERIES)
    hits = sum(len(set(g) & set(e)) for g, e in zip(by_graph, exact, strict=True))
    assert hits / sum(len(e) for e in exact) >= 0.95, (by_graph, exact)


def test_a_graph_build_outlasting_the_grace_ends_the_process_within_it(
        tmp_path: Path, cells_home: Path) -> None:
    home = tmp_path / "home"
    _copy_cells(cells_home, home)
    # No timer's pass may be running at the signal: then it, not the build, is named.
    quiet = {f"AMPUP_MEMORY_{name}": "0" for name in (
        "SEARCH_REFRESH_SECONDS", "WORKSPACE_GC_INTERVAL_SECONDS",
        "ADVICE_JUDGE_INTERVAL_SECONDS", "ADVICE_CLUSTER_INTERVAL_SECONDS",
        "ADVICE_LEARN_INTERVAL_SECONDS", "ADVICE_COMPILE_INTERVAL_SECONDS")}
    proc = _building(home, {**GRAPH, **quiet, "AMPUP_MEMORY_QUERY_WARM": "false",
                            "AMPUP_MEMORY_SHUTDOWN_GRACE_SECONDS": "0"})
    try:
        code, took, log = _terminate(proc, within=30)
    finally:
        proc.stop()
    assert code == 1, log
    assert took < 5, f"exited {took:.1f} s after SIGTERM, past a grace of 0 s"
    assert "1 search graph build(s) still running after the shutdown grace of 0 s" in log, log
    assert "Traceback" not in log, log
    with serving(home, GRAPH) as proc:  # nothing of the cut build is trusted
        _search(proc, ["note 1"])
        assert _graphs(proc)["rejected"] == 0
