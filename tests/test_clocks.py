"""Two servers on one PostgreSQL whose clocks disagree: one runs 10 minutes ahead.

The skew is made from outside the process by libfaketime (LD_PRELOAD; `.ci/run` installs
the `faketime` package, and these tests skip where it is missing), so no code of ours is
faked. Valid time a write or read takes by default, and commit times and ids, never run
back along a branch's chain (`MemoryService.now_on`, `next_commit_id`): before, a value
written on the true clock after one written on the fast clock lost to it for the 10
minutes and the read of the fast server's value on the true one found nothing; a close
of it answered 404. tools/clock_audit.py runs the
same and more (a third server behind, a clock stepping back while it writes).
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.memory_support import QUIET
from tests.pg import PostgresFactory
from tests.server_process import ServerProcess, plain_client, start_together

pytestmark = pytest.mark.postgres

FAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")
AHEAD = "+600s"
USER = {"X-AmpUp-User": "clock.user"}
AGENT = {**USER, "X-AMP-Agent-ID": "clock_agent"}


FAST = {"LD_PRELOAD": str(FAKETIME), "FAKETIME": AHEAD}


@pytest.fixture(scope="module")
def url(postgres: PostgresFactory) -> str:
    if not FAKETIME.exists():
        pytest.skip(f"{FAKETIME} missing (apt-get install faketime): no clock to skew")
    return postgres.new_database("clocks")


@pytest.fixture(scope="module")
def pair(url: str, tmp_path_factory: pytest.TempPathFactory,
         ) -> Iterator[tuple[httpx.Client, httpx.Client]]:
    """(the fast server, the true one), sharing every store."""
    warehouse = tmp_path_factory.mktemp("clocks_warehouse")
    env = {**QUIET, "AMP_STORE_URI": url, "AMPUP_MEMORY_CATALOG_URI": url,
           "AMPUP_MEMORY_INDEX_URI": url, "AMPUP_MEMORY_WAREHOUSE": f"file://{warehouse}"}
    procs = [ServerProcess(tmp_path_factory.mktemp("clock_fast"), env={**env, **FAST}),
             ServerProcess(tmp_path_factory.mktemp("clock_true"), env=env)]
    errors = start_together(procs, timeout=120)
    try:
        assert not errors, errors
        with plain_client(base_url=procs[0].url, headers=USER, timeout=60) as a, \
                plain_client(base_url=procs[1].url, headers=USER, timeout=60) as n:
            yield a, n
    finally:
        for p in procs:
            p.stop()


def _ok(r: httpx.Response, code: int = 200) -> Any:
    assert r.status_code == code, (r.request.url, r.status_code, r.text)
    return r.json()


def _value(c: httpx.Client, scope: str, entity: str, value: str) -> None:
    ep = _ok(c.post("/episodes", json={"scope": scope, "source": f"doc:{uuid.uuid4().hex}",
                                       "body": f"{entity} moved to {value}.",
                                       "acl": ["*"]}), 201)
    _ok(c.post("/facts", json={"scope": scope, "entity": entity, "predicate": "office",
                               "value": value, "quote": value,
                               "cites": [{"episode": ep["id"], "unit": 1}]}), 201)


def _current(c: httpx.Client, scope: str, entity: str) -> list[str]:
    got = _ok(c.get("/facts", params={"scope": scope, "entity": entity}))["facts"]
    return [f["value"] for f in got]


def test_the_fast_server_is_ahead(pair: tuple[httpx.Client, httpx.Client]) -> None:
    """The skew is real: the fast server stamps a cell 10 minutes after the true one."""
    a, n = pair
    owner = {"owner_id": f"u_{uuid.uuid4().hex[:8]}", "owner_type": "user"}
    made = [_ok(c.post("/amp/v1/memories", headers=AGENT, json={
        "type": "semantic", "content": {"text": "when"}, "identity": owner}), 201)
        for c in (a, n)]
    times = [datetime.fromisoformat(m["lifecycle"]["created_at"].replace("Z", "+00:00"))
             for m in made]
    assert 590 < (times[0] - times[1]).total_seconds() < 610, times


def test_the_newest_value_wins_and_is_read_on_every_server(
        pair: tuple[httpx.Client, httpx.Client]) -> None:
    a, n = pair
    scope = f"clocks/v{uuid.uuid4().hex[:6]}"
    _value(a, scope, "acct_1", "Lisbon")
    # The true server reads what the fast one wrote (it was 10 minutes in its future).
    assert _current(n, scope, "acct_1") == ["Lisbon"]
    found = _ok(n.post("/search", json={"scope": scope, "query": "acct_1 office Lisbon",
                                        "format": "json"}))
    assert [f["value"] for f in found["results"]] == ["Lisbon"], found
    _value(n, scope, "acct_1", "Porto")  # written after: it replaces Lisbon everywhere
    assert _current(n, scope, "acct_1") == ["Porto"]
    assert _current(a, scope, "acct_1") == ["Porto"]


def test_a_close_ends_a_value_written_on_the_fast_server(
        pair: tuple[httpx.Client, httpx.Client]) -> None:
    a, n = pair
    scope = f"clocks/c{uuid.uuid4().hex[:6]}"
    _value(a, scope, "acct_2", "Faro")
    _ok(n.post("/close", json={"scope": scope, "entity": "acct_2", "predicate": "office",
                               "reason": "The office closed."}), 201)
    assert _current(n, scope, "acct_2") == [] and _current(a, scope, "acct_2") == []


def test_commit_times_and_ids_never_run_back(
        pair: tuple[httpx.Client, httpx.Client]) -> None:
    """Each commit's time and id sort after its parent's (they did not after a commit of
    the fast server: 10 minutes back)."""
    a, n = pair
    scope = f"clocks/l{uuid.uuid4().hex[:6]}"
    for c in (a, n, a, n):
        _value(c, scope, "acct_3", uuid.uuid4().hex[:6])
    commits = _ok(n.get("/ledger", params={"scope": scope}))["commits"]  # newest first
    times, ids = [c["time"] for c in commits], [c["id"] for c in commits]
    assert len(times) == 8 and times == sorted(times, reverse=True), times
    assert ids == sorted(ids, reverse=True), ids


def test_a_patch_never_moves_updated_at_back(pair: tuple[httpx.Client, httpx.Client]) -> None:
    a, n = pair
    owner = {"owner_id": f"u_{uuid.uuid4().hex[:8]}", "owner_type": "user"}
    made = _ok(a.post("/amp/v1/memories", headers=AGENT, json={
        "type": "semantic", "content": {"text": "first"}, "identity": owner}), 201)
    path = f"/amp/v1/memories/{made['id']}"
    tag = n.get(path, headers=AGENT).headers["ETag"]
    patched = _ok(n.patch(path, headers={**AGENT, "If-Match": tag},
                          json={"content": {"text": "second"}}))
    assert patched["lifecycle"]["last_updated_at"] >= made["lifecycle"]["last_updated_at"]


def test_a_fast_clock_takes_no_live_lease(url: str) -> None:
    """The timed passes' lease on PostgreSQL runs on the database's clock: a process 10
    minutes ahead took a 30 s lease the holder was renewing (it read it as run out) and ran
    its pass beside the holder's."""
    from ampup_memory.memory.readindex import ReadIndex

    probe = ("import sys; from datetime import timedelta; "
             "from ampup_memory.memory.readindex import ReadIndex; "
             "index = ReadIndex(sys.argv[1]); "
             "held = index.hold_lease('clock-lease', 'fast', timedelta(seconds=30)); "
             "print(held.__enter__())")
    index = ReadIndex(url)
    try:
        with index.hold_lease("clock-lease", "true", timedelta(seconds=30)) as held:
            assert held
            fast = subprocess.run([sys.executable, "-c", probe, url], capture_output=True,
                                  text=True, timeout=60, env={**os.environ, **FAST})
            assert fast.stdout.strip() == "False", (fast.stdout, fast.stderr[-2000:])
    finally:
        index.close()
