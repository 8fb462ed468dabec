"""The lifecycle engine end to end: timer-free passes driven by `now`, purge, the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from tests.server_process import ServerProcess

TOKEN = {"X-AMP-Admin-Token": "t"}


def at(days: float) -> str:
    return (datetime.now(UTC) + timedelta(days=days)).isoformat()


def run(c: httpx.Client, days: float, dry: bool = False) -> dict[str, Any]:
    r = c.post("/lifecycle/run", headers=TOKEN, json={"now": at(days), "dry_run": dry})
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


def statuses(c: httpx.Client, agent: str, owner: str) -> dict[str, str]:
    found = {}
    for status in ("active", "stale", "archived"):
        page = c.get("/memories", params={"owner_id": owner, "status": status, "limit": 100},
                      headers={"X-AMP-Agent-ID": agent}).json()
        found |= {cell["id"]: status for cell in page["results"]}
    return found


def test_active_stale_archived_and_back(tmp_path: Path) -> None:
    env = {"AMP_ADMIN_TOKEN": "t", "AMP_LIFECYCLE_ENABLED": "0"}
    with ServerProcess(tmp_path, env=env) as srv, \
            httpx.Client(base_url=srv.url + "/amp/v1") as c:
        me = {"X-AMP-Agent-ID": "a"}

        def make(importance: float, rate: float = 0.01) -> str:
            r = c.post("/memories", headers=me, json={
                "type": "semantic", "content": {"text": "t"},
                "identity": {"owner_id": "o", "owner_type": "user"},
                "scoring": {"importance": importance, "decay_rate": rate}})
            cell_id: str = r.json()["id"]
            return cell_id

        strong, weak, fading = make(0.9), make(0.2), make(0.5, rate=0.1)
        # 0.5 * e^(-0.1 * 10) = 0.18 < 0.3 after 10 days; 0.9 * e^(-0.01 * 10) = 0.81.
        assert run(c, 10, dry=True)["transitions"]["active_to_stale"] == 2
        assert statuses(c, "a", "o") == {strong: "active", weak: "active", fading: "active"}
        report = run(c, 10)
        assert report["transitions"] == {"active_to_stale": 2, "stale_to_active": 0,
                                         "stale_to_archived": 0}
        assert statuses(c, "a", "o") == {strong: "active", weak: "stale", fading: "stale"}
        # A scoring PATCH lifts `weak` back over 0.3; the next pass reactivates it.
        assert c.patch(f"/memories/{weak}", headers=me,
                       json={"scoring": {"importance": 0.95}}).status_code == 200
        assert run(c, 10)["transitions"]["stale_to_active"] == 1
        # `fading` stays stale 30 days with no access or update: archived.
        report = run(c, 41)
        assert report["transitions"]["stale_to_archived"] == 1
        assert statuses(c, "a", "o")[fading] == "archived"
        # Archived cells are never evaluated again.
        assert run(c, 400)["evaluated"] == 2


def test_purge_pass_is_opt_in_and_respects_the_window(tmp_path: Path) -> None:
    for opt_in, expected in (("0", 0), ("1", 1)):
        env = {"AMP_ADMIN_TOKEN": "t", "AMP_LIFECYCLE_ENABLED": "0",
               "AMP_PURGE_RETENTION": opt_in}
        with ServerProcess(tmp_path / opt_in, env=env) as srv, \
                httpx.Client(base_url=srv.url + "/amp/v1") as c:
            me = {"X-AMP-Agent-ID": "a"}
            cell = c.post("/memories", headers=me, json={
                "type": "semantic", "content": {"text": "t"},
                "identity": {"owner_id": "o", "owner_type": "user"}}).json()["id"]
            c.patch(f"/memories/{cell}", headers=me, json={"lifecycle": {"status": "archived"}})
            assert c.delete(f"/memories/{cell}", headers=me).status_code == 204
            assert run(c, 29)["purged"] == 0
            assert run(c, 31, dry=True)["purged"] == expected
            assert run(c, 31)["purged"] == expected
            after = c.post("/lifecycle/purge", headers=TOKEN, json={"id": cell})
            # Purged: gone for good (an unknown id: the one 403). Kept (no opt-in): still
            # inside today's window.
            assert after.status_code == (403 if expected else 409)


def test_cli_lifecycle_and_purge(tmp_path: Path) -> None:
    env = {**os.environ, "AMPUP_MEMORY_HOME": str(tmp_path)}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "ampup_memory.cli", *args], env=env,
                              capture_output=True, text=True, timeout=120)

    with ServerProcess(tmp_path, env={"AMP_LIFECYCLE_ENABLED": "0"}) as srv:
        me = {"X-AMP-Agent-ID": "a"}
        cell = httpx.post(f"{srv.url}/amp/v1/memories", headers=me, json={
            "type": "semantic", "content": {"text": "t"}, "scoring": {"importance": 0.1},
            "identity": {"owner_id": "o", "owner_type": "user"}}).json()["id"]
    dry = cli("lifecycle", "run", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert json.loads(dry.stdout)["transitions"]["active_to_stale"] == 1
    done = cli("lifecycle", "run", "--now", at(1))
    assert json.loads(done.stdout)["transitions"]["active_to_stale"] == 1
    refused = cli("purge", cell)
    assert refused.returncode == 2 and "INVALID_TRANSITION" in refused.stderr
    bad = cli("lifecycle", "run", "--now", "tomorrow")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr


def test_background_timer_runs_at_the_advertised_interval(tmp_path: Path) -> None:
    for enabled in ("1", "0"):
        env = {"AMP_LIFECYCLE_ENABLED": enabled, "AMP_LIFECYCLE_INTERVAL_SECONDS": "1"}
        with ServerProcess(tmp_path / enabled, env=env) as srv, \
                httpx.Client(base_url=srv.url + "/amp/v1") as c:
            sched = c.get("/spec").json()["capabilities"]["lifecycle_scheduler"]
            assert sched["enabled"] is (enabled == "1") and sched["interval_seconds"] == 1
            me = {"X-AMP-Agent-ID": "a"}
            cell = c.post("/memories", headers=me, json={
                "type": "semantic", "content": {"text": "t"}, "scoring": {"importance": 0.1},
                "identity": {"owner_id": "o", "owner_type": "user"}}).json()["id"]
            time.sleep(2.5)  # no manual run: only the timer can move it
            expected = "stale" if enabled == "1" else "active"
            assert statuses(c, "a", "o") == {cell: expected}
