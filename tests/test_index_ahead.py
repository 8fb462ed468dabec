"""Tables restored from a backup under a newer index (the operator's mistake deployment.md
warns of): the index is derived, so a server that finds it holding commits the tables do
not starts it again from the tables instead of answering what the backup never held.

Embedded home: the catalog file and the warehouse folder are copied while no server
runs, two more commits land, and the copy is put back with the newer index left in
place. Before the fix every read answered the newer commits' episodes, ledger rows and
passages."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import httpx

from tests.memory_support import QUIET
from tests.server_process import ServerProcess

SCOPE = "restore/team_b"
USER = {"X-AmpUp-User": "alice"}


def _write(http: httpx.Client, source: str, body: str) -> str:
    r = http.post("/episodes", json={"scope": SCOPE, "source": source, "body": body,
                                     "acl": ["*"]}, headers=USER)
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


def _reads(http: httpx.Client) -> dict[str, Any]:
    listed = http.get("/episodes", params={"scope": SCOPE}, headers=USER)
    ledger = http.get("/ledger", params={"scope": SCOPE}, headers=USER)
    found = http.post("/query", json={"scope": SCOPE, "find": "passages",
                            "query": "zebra quartz harbour"},
                      headers=USER)
    assert listed.status_code == ledger.status_code == found.status_code == 200
    return {"episodes": sorted(e["id"] for e in listed.json()["episodes"]),
            "commits": [c["id"] for c in ledger.json()["commits"]],
            "found": sorted({p["episode"] for p in found.json()["results"]})}


def test_a_server_on_tables_older_than_its_index_answers_from_the_tables(
        tmp_path: Path) -> None:
    home, saved = tmp_path / "home", tmp_path / "saved"
    server = ServerProcess(home, dict(QUIET)).start()
    try:
        with httpx.Client(base_url=server.url) as http:
            first = _write(http, "doc:first", "The harbour office opens at nine.")
            before = _reads(http)
    finally:
        server.stop()
    saved.mkdir()
    shutil.copy2(home / "catalog.db", saved / "catalog.db")
    shutil.copytree(home / "warehouse", saved / "warehouse")

    server = ServerProcess(home, dict(QUIET)).start()
    try:
        with httpx.Client(base_url=server.url) as http:
            later = [_write(http, f"doc:later{i}", f"A zebra quartz harbour crate, lot {i}.")
                     for i in range(2)]
            assert set(later) <= set(_reads(http)["found"])
    finally:
        server.stop()
    (home / "catalog.db").unlink()
    shutil.rmtree(home / "warehouse")
    shutil.copy2(saved / "catalog.db", home / "catalog.db")
    shutil.copytree(saved / "warehouse", home / "warehouse")

    server = ServerProcess(home, dict(QUIET)).start()
    try:
        with httpx.Client(base_url=server.url) as http:
            assert _reads(http) == before
            assert before["episodes"] == before["found"] == [first]
            assert len(before["commits"]) == 1
            # Writing goes on from the restored head, and is found.
            again = _write(http, "doc:again", "A zebra quartz harbour crate, relabelled.")
            after = _reads(http)
            assert after["episodes"] == sorted([first, again])
            assert after["found"] == sorted([first, again])
            assert after["commits"][1:] == before["commits"]
        assert "which the ledger table does not" in server.log_path.read_text()
    finally:
        server.stop()
