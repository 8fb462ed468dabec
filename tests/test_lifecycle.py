"""The lifecycle engine end to end: timer-free passes driven by `now`, purge, the CLI."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from ampup_memory.amp.service import PURGE_PAGE
from tests.memory_support import bar_line, cli_in_process
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


def backdate_deletion(home: Path, cell_id: str, days: float) -> None:
    """Play the passing of real time: the tombstone says the cell was deleted `days` ago.
    (The real server's real SQLite file; no clock in the server is touched.)"""
    when = datetime.now(UTC) - timedelta(days=days)
    db = sqlite3.connect(home / "amp.db", timeout=30)
    try:
        with db:
            done = db.execute("UPDATE cells SET deleted_at = ? WHERE id = ?",
                              (when.isoformat(timespec="microseconds").replace("+00:00", "Z"),
                               cell_id))
            assert done.rowcount == 1
    finally:
        db.close()


def keyword_index_holds(home: Path, word: str) -> bool:
    """Does any block or term of the SQLite keyword index hold ``word`` (its last 24
    characters, which FTS5's prefix compression stores literally for a word shared with no
    other)?"""
    db = sqlite3.connect(home / "amp.db", timeout=30)
    try:
        rows = [*db.execute("SELECT block FROM cells_fts_data"),
                *db.execute("SELECT term FROM cells_fts_idx")]
    finally:
        db.close()
    return any(word[-24:].encode() in bytes(b) for (b,) in rows if b)


def test_purge_pass_is_opt_in_and_judges_the_window_by_the_real_clock(tmp_path: Path) -> None:
    me = {"X-AMP-Agent-ID": "a"}
    for opt_in, expected in (("0", 0), ("1", 1)):
        home = tmp_path / opt_in
        env = {"AMP_ADMIN_TOKEN": "t", "AMP_LIFECYCLE_ENABLED": "0",
               "AMP_PURGE_RETENTION": opt_in}
        with ServerProcess(home, env=env) as srv, \
                httpx.Client(base_url=srv.url + "/amp/v1") as c:

            def deleted_cell(text: str = "t") -> str:
                cell: str = c.post("/memories", headers=me, json={
                    "type": "semantic", "content": {"text": text},
                    "identity": {"owner_id": "o", "owner_type": "user"}}).json()["id"]
                c.patch(f"/memories/{cell}", headers=me,
                        json={"lifecycle": {"status": "archived"}})
                assert c.delete(f"/memories/{cell}", headers=me).status_code == 204
                return cell

            def kept(cell: str) -> bool:
                r = c.post("/lifecycle/purge", headers=TOKEN, json={"id": cell})
                # Inside the window: 409 and kept; purged: gone (an unknown id: the 403).
                assert r.status_code in (403, 409), r.text
                return r.status_code == 409

            # The purged cell's words must leave the file (seed: "permanently hard-deleted
            # from the physical database"): one word of it no other cell holds.
            # It ends in a digit: the porter stemmer cut a final "e" (or "ed") of a hex
            # word, so the check before the purge failed one run in about sixteen.
            word = f"zq{uuid.uuid4().hex}7"
            old, young = deleted_cell(f"call me at {word} tomorrow"), deleted_cell()
            assert keyword_index_holds(home, word)
            # A what-if `now` never purges a cell deleted moments ago, dry or not.
            for days in (29, 31, 10_000):
                assert run(c, days, dry=True)["purged"] == 0
                assert run(c, days)["purged"] == 0
            r = c.post("/lifecycle/run", headers=TOKEN, json={"now": "2099-12-31T00:00:00Z"})
            assert r.status_code == 200 and r.json()["purged"] == 0
            assert kept(old) and kept(young)
            # 29 real days after deletion: still inside the window.
            backdate_deletion(home, old, 29)
            assert run(c, 0)["purged"] == 0 and run(c, 5000)["purged"] == 0
            refused = c.post("/lifecycle/purge", headers=TOKEN, json={"id": old}).json()
            assert refused["error"]["details"]["days_remaining"] == 1
            assert refused["error"]["message"].endswith("(1 day remaining)."), refused
            # 31 real days: purgeable (with the opt-in), whatever `now` the run names.
            backdate_deletion(home, old, 31)
            assert run(c, -5000, dry=True)["purged"] == expected
            assert run(c, -5000)["purged"] == expected
            assert kept(young)
            # Purged by the pass: gone (the 403). Kept (no opt-in): the admin may purge it.
            r = c.post("/lifecycle/purge", headers=TOKEN, json={"id": old})
            assert r.status_code == (403 if expected else 200), r.text
            # SQLite's FTS5 index kept a deleted row's terms (and its delete marker's) in
            # its segments until they merged: the words outlived the purge.
            assert not keyword_index_holds(home, word)


def test_a_dry_run_counts_every_purgeable_cell(tmp_path: Path) -> None:
    """docs/api.md: `dry_run` applies nothing and counts what would change. The purge pass
    works in pages (`PURGE_PAGE` ids, 500 then); a dry run counted the first page only, so
    501 purgeable cells answered 500 while the real pass then purged 501. One cell more
    than a page here."""
    cells = PURGE_PAGE + 1
    me = {"X-AMP-Agent-ID": "a"}
    env = {"AMP_ADMIN_TOKEN": "t", "AMP_LIFECYCLE_ENABLED": "0", "AMP_PURGE_RETENTION": "1"}
    with ServerProcess(tmp_path, env=env) as srv, \
            httpx.Client(base_url=srv.url + "/amp/v1") as c:
        for _ in range(cells):
            cell = c.post("/memories", headers=me, json={
                "type": "semantic", "content": {"text": "t"},
                "identity": {"owner_id": "o", "owner_type": "user"}}).json()["id"]
            c.patch(f"/memories/{cell}", headers=me, json={"lifecycle": {"status": "archived"}})
            assert c.delete(f"/memories/{cell}", headers=me).status_code == 204
        when = datetime.now(UTC) - timedelta(days=31)
        db = sqlite3.connect(tmp_path / "amp.db", timeout=30)
        try:
            with db:
                done = db.execute(
                    "UPDATE cells SET deleted_at = ? WHERE status = 'deleted'",
                    (when.isoformat(timespec="microseconds").replace("+00:00", "Z"),))
                assert done.rowcount == cells
        finally:
            db.close()
        assert run(c, 0, dry=True)["purged"] == cells
        assert run(c, 0)["purged"] == cells
        assert run(c, 0, dry=True)["purged"] == 0


def test_an_expired_cell_scores_zero(tmp_path: Path) -> None:
    """docs/api.md: a cell past `lifecycle.expires_at` scores 0 in the decay formula, so the
    next pass moves it to stale; search blends that 0 in (score = relevance × (0.5 + 0.5 ·
    decay)), and default search, active cells only, drops it once it is stale."""
    env = {"AMP_ADMIN_TOKEN": "t", "AMP_LIFECYCLE_ENABLED": "0"}
    with ServerProcess(tmp_path, env=env) as srv, \
            httpx.Client(base_url=srv.url + "/amp/v1") as c:
        me = {"X-AMP-Agent-ID": "a"}

        def make(text: str, importance: float, expires_at: str | None = None) -> str:
            body: dict[str, Any] = {
                "type": "semantic", "content": {"text": text},
                "identity": {"owner_id": "o", "owner_type": "user"},
                "scoring": {"importance": importance, "confidence": 1.0, "decay_rate": 0.0}}
            if expires_at:
                body["lifecycle"] = {"expires_at": expires_at}
            r = c.post("/memories", headers=me, json=body)
            assert r.status_code == 201, r.text
            cell_id: str = r.json()["id"]
            return cell_id

        # decay_rate 0: without an expiry each score stays its importance for ever.
        expiry = datetime.now(UTC) + timedelta(days=3)
        soon = make("quarterly heron census", 1.0, expiry.isoformat())
        make("quarterly heron census", 0.31)  # 0.31 ≥ 0.3: stays active
        make("quarterly heron census", 0.29)  # 0.29 < 0.3: stale on any pass

        def stale_count(when: datetime) -> int:
            r = c.post("/lifecycle/run", headers=TOKEN,
                       json={"now": when.isoformat(), "dry_run": True})
            count: int = r.json()["transitions"]["active_to_stale"]
            return count

        assert stale_count(expiry - timedelta(seconds=1)) == 1  # 1.0 a second before
        assert stale_count(expiry) == 2  # 0 from the expiry instant on
        assert stale_count(expiry + timedelta(days=400)) == 2
        report = c.post("/lifecycle/run", headers=TOKEN,
                        json={"now": (expiry + timedelta(minutes=1)).isoformat()}).json()
        assert report["transitions"]["active_to_stale"] == 2
        assert statuses(c, "a", "o")[soon] == "stale"

        # Search on the real clock: two identical texts tie (older id first) until one
        # expires; then its score is halved, 0.5 + 0.5 × 0, and it drops behind.
        first = make("lighthouse keeper rota", 1.0,
                     (datetime.now(UTC) + timedelta(seconds=6)).isoformat())
        second = make("lighthouse keeper rota", 1.0)

        def order() -> list[str]:
            r = c.post("/memories/search", headers=me,
                       json={"query": "lighthouse keeper rota", "owner_id": "o"})
            return [cell["id"] for cell in r.json()["results"] if cell["id"] in pair]

        pair = (first, second)
        assert order() == [first, second]
        time.sleep(6.5)
        assert order() == [second, first]
        c.post("/lifecycle/run", headers=TOKEN, json={})
        assert order() == [second]  # stale now: out of the default search
        r = c.post("/memories/search", headers=me, json={
            "query": "lighthouse keeper rota", "owner_id": "o", "include_stale": True})
        assert [cell["id"] for cell in r.json()["results"] if cell["id"] in pair] == [
            second, first]


def test_cli_lifecycle_and_purge(tmp_path: Path) -> None:
    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return cli_in_process(tmp_path, {}, *args)

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
    assert "1/1" in bar_line(done.stderr, "evaluating cells")
    refused = cli("purge", cell)
    assert refused.returncode == 2 and "INVALID_TRANSITION" in refused.stderr
    bad = cli("lifecycle", "run", "--now", "tomorrow")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    # The rule of the route's `now`: a date alone, or a time without an offset, was read
    # as UTC midnight by the CLI alone.
    for text, says in (("2030-01-01", "RFC 3339 time with an offset"),
                       ("2030-01-01T00:00:00", "timezone"),
                       ("1741100000", "RFC 3339 time with an offset")):
        bad = cli("lifecycle", "run", "--now", text, "--dry-run")
        assert bad.returncode == 2 and bad.stderr.startswith(f"error: --now {text!r}: "), (
            bad.stderr)
        assert says in bad.stderr and bad.stderr.count("\n") == 1, bad.stderr


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
