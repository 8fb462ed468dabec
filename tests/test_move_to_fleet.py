"""A laptop's memory moves to the fleet: `backup` of the embedded home, `restore` with the
fleet's settings (PostgreSQL cells, catalog and index, an S3 warehouse), two servers.

The property: every read a user or agent makes answers on both fleet servers as it did on
the laptop, the cell store holds exactly what the laptop's did (cells whole with their
vectors and clocks, API keys, lifecycle history, the embedder record), a restore into
stores holding data is refused, and one stopped midway runs again and finishes, the
servers refusing the stores until then (docs/deployment.md, "Moving from a laptop to
several servers").
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from ampup_memory.amp.store.base import PASS_HISTORY, CellStore
from ampup_memory.amp.store.registry import open_store
from tests.memory_support import ADMIN_TOKEN, QUIET, cli_in_process, serving
from tests.pg import PostgresFactory
from tests.s3 import S3Server, s3  # noqa: F401  (fixture)
from tests.server_process import ServerProcess

pytestmark = [pytest.mark.postgres, pytest.mark.fleet]

SCOPE = "move/team"
AGENT, OTHER = {"X-AMP-Agent-ID": "agent_a"}, {"X-AMP-Agent-ID": "agent_b"}
ADMIN = {"X-AMP-Admin-Token": ADMIN_TOKEN}


def _ok(r: httpx.Response) -> Any:
    assert r.status_code in (200, 201), (r.request.method, r.request.url, r.text)
    return r.json()


def _write(url: str) -> dict[str, Any]:
    """Records of the kinds a laptop holds; their ids."""
    w: dict[str, Any] = {}
    with httpx.Client(base_url=url, timeout=120) as c:
        def cell(text: str, **extra: Any) -> str:
            return str(_ok(c.post("/amp/v1/memories", headers=AGENT, json={
                "type": "semantic", "content": {"text": text, "metadata": {"n": len(text)}},
                "identity": {"owner_id": "user_1", "owner_type": "user"}, **extra}))["id"])

        cells = {
            "plain": cell("Dana prefers e-mail over calls.",
                          scoring={"importance": 0.7, "confidence": 0.9, "decay_rate": 0.02}),
            "shared": cell("The Acme budget is forty thousand.",
                           access_policy={"readable_by": ["agent_b"]}),
            "public": cell("Acme met the team on Tuesday.", access_policy={"public": True}),
            "patched": cell("Acme is on the Basic plan."),
            "archived": cell("Acme used the old portal."),
            "deleted": cell("A secret to forget."),
            "expiring": cell("The trial ends next year.",
                             lifecycle={"expires_at": "2031-01-01T00:00:00Z"}),
        }
        _ok(c.patch(f"/amp/v1/memories/{cells['patched']}", headers=AGENT,
                    json={"content": {"text": "Acme is on the Pro plan."}}))
        _ok(c.patch(f"/amp/v1/memories/{cells['plain']}", headers=AGENT,
                    json={"scoring": {"importance": 0.95}}))  # a counted scoring PATCH
        _ok(c.patch(f"/amp/v1/memories/{cells['archived']}", headers=AGENT,
                    json={"lifecycle": {"status": "archived"}}))
        _ok(c.patch(f"/amp/v1/memories/{cells['deleted']}", headers=AGENT,
                    json={"lifecycle": {"status": "archived"}}))  # only archived cells go
        assert c.delete(f"/amp/v1/memories/{cells['deleted']}",
                        headers=AGENT).status_code in (200, 204)
        for _ in range(3):  # access counts and clocks
            _ok(c.get(f"/amp/v1/memories/{cells['public']}", headers=OTHER))
        w["cells"] = cells
        _ok(c.put("/principals/alice", headers=ADMIN,
                  json={"groups": ["sales"], "roles": ["lead"]}))
        user = {"X-AmpUp-User": "alice"}
        batch = _ok(c.post("/episodes/batch", headers=user, json={"scope": SCOPE, "episodes": [
            {"source": "doc:handbook", "document": "handbook", "acl": ["*"],
             "body": "Handbook v1. Acme renews in March.\n\nThe budget is 40k."},
            {"source": "slack:C1", "body": "Acme moved to the Pro plan.",
             "acl": ["user:alice"]},
            {"source": "slack:C2", "body": "Acme's lead is Jane.", "acl": ["group:sales"]}]}))
        eps = [e["id"] for e in batch["episodes"]]
        v2 = _ok(c.post("/episodes", headers=user, json={
            "scope": SCOPE, "source": "doc:handbook", "document": "handbook", "acl": ["*"],
            "body": "Handbook v2. Acme renews in April."}))
        w["episodes"] = [*eps, v2["id"]]
        _ok(c.post("/facts", headers=user, json={
            "scope": SCOPE, "entity": "acme", "predicate": "plan", "value": "Pro",
            "quote": "Pro plan", "cites": [{"episode": eps[1], "unit": 1}]}))
        _ok(c.post("/facts", headers=user, json={
            "scope": SCOPE, "entity": "acme", "predicate": "plan", "value": "Enterprise",
            "quote": "Acme moved", "cites": [{"episode": eps[1], "unit": 1}]}))
        _ok(c.post("/facts", headers=user, json={
            "scope": SCOPE, "entity": "acme", "predicate": "renews", "value": "March",
            "quote": "renews in", "cites": [{"episode": eps[0], "unit": 1}]}))
        _ok(c.post("/close", headers=user, json={"scope": SCOPE, "entity": "acme",
                                                 "predicate": "renews", "reason": "v2"}))
        _ok(c.post("/branches", headers=user, json={"scope": SCOPE, "name": "trial"}))
        _ok(c.post("/episodes", headers=user, json={
            "scope": SCOPE, "branch": "trial", "source": "slack:C4", "acl": ["*"],
            "body": "On trial: Acme wants SSO."}))
        _ok(c.post("/merge", headers=user, json={"scope": SCOPE, "from": "trial"}))
        w["pin"] = _ok(c.post("/pin", headers=user, json={"scope": SCOPE, "ttl": "24h"}))["id"]
        w["snapshot"] = _ok(c.post("/snapshots", headers=user,
                                   json={"scopes": [SCOPE]}))["id"]
        ws = _ok(c.post("/workspaces", headers=user, json={"name": "draft", "ttl": "24h"}))
        w["workspace"] = ws["id"]
        _ok(c.post("/episodes", headers=user, json={
            "scope": f"{ws['id']}/team", "source": "doc:x", "acl": ["*"],
            "body": "In a workspace: draft plan."}))
    return w


def _cells_in(body: Any) -> list[Any]:
    """The AMP cells in an answer: itself, or its page's."""
    if not isinstance(body, dict):
        return []
    return [body, *(body.get("items") or body.get("results") or [])]


def _reads(url: str, w: dict[str, Any]) -> dict[str, Any]:
    """Every read of the records, as their owner and as another caller: status, ETag and
    body (a read's own time and the access clock it moves left out: not data)."""
    out: dict[str, Any] = {}

    def keep(name: str, r: httpx.Response) -> None:
        body = r.json() if r.content else None
        if isinstance(body, dict):
            body.pop("as_of", None)
        for cell in _cells_in(body):
            if isinstance(cell, dict) and isinstance(cell.get("lifecycle"), dict):
                cell["lifecycle"].pop("last_accessed_at", None)
        out[name] = [r.status_code, r.headers.get("etag"), body]

    with httpx.Client(base_url=url, timeout=120) as c:
        for name, cid in w["cells"].items():
            for who, h in (("a", AGENT), ("b", OTHER)):
                keep(f"cell {name} as {who}", c.get(f"/amp/v1/memories/{cid}", headers=h))
        for status in ("active", "archived", "deleted"):
            keep(f"cells {status}", c.get("/amp/v1/memories", headers=AGENT,
                                          params={"status": status, "limit": 100}))
        keep("cell search", c.post("/amp/v1/memories/search", headers=AGENT,
                                   json={"query": "Acme plan budget", "limit": 10}))
        keep("principal", c.get("/principals/alice", headers=ADMIN))
        for user in ("alice", "bob"):
            h = {"X-AmpUp-User": user}
            keep(f"{user} ledger", c.get("/ledger", headers=h,
                                         params={"scope": SCOPE, "limit": 1000}))
            keep(f"{user} episodes", c.get("/episodes", headers=h,
                                           params={"scope": SCOPE, "limit": 1000}))
            for e in w["episodes"]:
                keep(f"{user} episode {e}", c.get(f"/episodes/{e}", headers=h,
                                                  params={"scope": SCOPE}))
            keep(f"{user} facts", c.get("/facts", headers=h,
                                        params={"scope": SCOPE, "entity": "acme"}))
            keep(f"{user} query", c.post("/query", headers=h, json={
                "scope": SCOPE, "query": "acme plan renews", "find": "passages"}))
            keep(f"{user} search", c.post("/search", headers=h,
                                          json={"scope": SCOPE, "query": "acme"}))
            keep(f"{user} pinned", c.get("/facts", headers=h, params={
                "scope": SCOPE, "entity": "acme", "pin": w["pin"]}))
            keep(f"{user} branches", c.get("/branches", headers=h, params={"scope": SCOPE}))
            keep(f"{user} workspace", c.get(f"/workspaces/{w['workspace']}", headers=h))
            keep(f"{user} snapshot", c.get("/episodes", headers=h, params={
                "scope": SCOPE, "snapshot": w["snapshot"]}))
    return out


def _differences(a: Any, b: Any, path: str = "") -> list[str]:
    """Where two answers differ (path: laptop value, fleet value), for the failure."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b), key=str)
                for d in _differences(a.get(k), b.get(k), f"{path}.{k}")]
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True))
                for d in _differences(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: {a!r} != {b!r}"]


def _ranked(name: str) -> bool:
    """A read the search index ranks (passages and episode search, not AMP cells)."""
    return name.endswith((" query", " search")) and not name.startswith("cell")


def _same_answers(laptop: dict[str, Any], fleet: dict[str, Any]) -> None:
    """Every read answers as on the laptop; those the search index ranks, by the
    fleet's PostgreSQL search index, whose raw keyword scores differ a little from
    SQLite's (docs/search.md): the same status and scope there. (With each server's own
    SQLite index, the default, they answer exactly as on the laptop too.)"""
    found = _differences({k: v for k, v in laptop.items() if not _ranked(k)},
                         {k: v for k, v in fleet.items() if not _ranked(k)})
    assert found == [], "\n".join(found)
    assert {k: (v[0], v[2]["scope"]) for k, v in laptop.items() if _ranked(k)} == {
        k: (v[0], v[2]["scope"]) for k, v in fleet.items() if _ranked(k)}


def _without_counts(reads: dict[str, Any]) -> dict[str, Any]:
    """``reads`` without the AMP cells' access counts (and so their ETags), which an
    earlier round of reads on another server moved."""
    out = json.loads(json.dumps(reads))
    for name, answer in out.items():
        if name.startswith("cell"):
            answer[1] = None
            for cell in _cells_in(answer[2]):
                if isinstance(cell, dict) and isinstance(cell.get("scoring"), dict):
                    cell["scoring"].pop("access_count", None)
    return out


def _held(store: CellStore) -> dict[str, Any]:
    """Everything a cell store holds, read through the store."""
    cells, after = [], None
    while batch := store.copies(after, 100):
        cells += batch
        after = batch[-1].stored.cell.id
    return {"cells": cells, "keys": store.list_keys(),
            "passes": store.recent_passes(PASS_HISTORY),
            "model": store.embedding_model(), "count": store.count()}


@dataclass
class Laptop:
    backup: Path
    reads: dict[str, Any]
    held: dict[str, Any]
    written: dict[str, Any]
    key: str


@pytest.fixture(scope="module")
def laptop(tmp_path_factory: pytest.TempPathFactory) -> Laptop:
    """A laptop home with records of every kind, an API key and a lifecycle pass, backed
    up while its server runs; its reads after the backup (the state the backup holds)."""
    root = tmp_path_factory.mktemp("laptop")
    home, dest = root / "home", root / "backup"
    with serving(home, QUIET) as server:
        written = _write(server.url)
        made = cli_in_process(home, QUIET, "keys", "create", "--agent", "agent_a")
        assert made.returncode == 0, made.stderr
        ran = cli_in_process(home, QUIET, "lifecycle", "run")
        assert ran.returncode == 0, ran.stderr
        done = cli_in_process(home, QUIET, "backup", str(dest))
        assert done.returncode == 0, done.stderr
        reads = _reads(server.url, written)
    (root / "copy.db").write_bytes((dest / "amp.db").read_bytes())  # the backup's, a copy
    store = open_store(f"sqlite:///{root / 'copy.db'}", None)
    try:
        held = _held(store)
    finally:
        store.close()
    assert held["keys"] and held["passes"] and held["model"] is not None
    return Laptop(dest, reads, held, written, made.stdout.strip().splitlines()[-1])


@pytest.fixture
def fleet(postgres: PostgresFactory, s3: S3Server,  # noqa: F811
          tmp_path: Path) -> dict[str, str]:
    """The fleet's settings: new databases and a new bucket."""
    return {**QUIET, **s3.env(s3.new_bucket("move")),
            "AMP_STORE_URI": postgres.new_database("move_cells"),
            "AMPUP_MEMORY_CATALOG_URI": postgres.new_database("move_catalog"),
            "AMPUP_MEMORY_INDEX_URI": postgres.new_database("move_index")}


@pytest.fixture
def servers(fleet: dict[str, str], tmp_path: Path) -> Iterator[list[ServerProcess]]:
    """Two fleet servers, started by the test when the stores are ready."""
    procs = [ServerProcess(tmp_path / f"server{n}", env=fleet) for n in (1, 2)]
    yield procs
    for p in procs:
        p.stop()


def _fleet_holds(fleet: dict[str, str]) -> dict[str, Any]:
    store = open_store(fleet["AMP_STORE_URI"], None)
    try:
        return _held(store)
    finally:
        store.close()


def test_a_laptop_moves_to_postgres_and_s3_and_two_servers_answer_alike(
        laptop: Laptop, fleet: dict[str, str], servers: list[ServerProcess],
        tmp_path: Path) -> None:
    done = cli_in_process(tmp_path / "mover", fleet, "restore", str(laptop.backup))
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["cells"] == laptop.held["count"] and report["resumed"] is False
    assert report["cell_store"]["reembedded"] == 0  # the same embedder: vectors kept
    assert _fleet_holds(fleet) == laptop.held
    for proc in servers:
        proc.start(timeout=120)
    first = _reads(servers[0].url, laptop.written)
    _same_answers(laptop.reads, first)
    second = _reads(servers[1].url, laptop.written)
    assert _differences(_without_counts(first), _without_counts(second)) == []
    # The laptop's API key is the fleet's: a server requiring keys takes it, and no other.
    servers[1].stop()
    servers[1] = ServerProcess(servers[1].home, env={**fleet, "AMP_REQUIRE_KEYS": "1"})
    servers[1].start(timeout=120)
    with httpx.Client(base_url=servers[1].url, timeout=60) as c:
        path = f"/amp/v1/memories/{laptop.written['cells']['plain']}"
        r = c.get(path, headers={**AGENT, "X-AMP-API-Key": laptop.key})
        assert r.status_code == 200, r.text
        r = c.get(path, headers={**AGENT, "X-AMP-API-Key": laptop.key[:-4] + "xxxx"})
        assert r.status_code == 401, r.text
    # And the fleet takes new writes.
    with httpx.Client(base_url=servers[0].url, timeout=60) as c:
        _ok(c.post("/episodes", headers={"X-AmpUp-User": "alice"}, json={
            "scope": SCOPE, "source": "doc:new", "acl": ["*"], "body": "After the move."}))
        _ok(c.post("/amp/v1/memories", headers=AGENT, json={
            "type": "semantic", "content": {"text": "A cell after the move."},
            "identity": {"owner_id": "user_1", "owner_type": "user"}}))
    again = cli_in_process(tmp_path / "mover", fleet, "restore", str(laptop.backup))
    assert again.returncode == 2, again.stderr
    assert "restore writes into empty stores only; these hold AMP cells (8), API keys (1)" \
        in again.stderr, again.stderr


def test_a_restore_stopped_midway_runs_again_and_finishes(
        laptop: Laptop, fleet: dict[str, str], servers: list[ServerProcess],
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ampup_memory.ops import backup as ops
    from ampup_memory.settings import Settings

    monkeypatch.setattr(ops, "COPY_BATCH", 3)

    def stopped_after(steps: int) -> list[str]:
        """A restore stopped (as by Ctrl-C or kill) after so many steps; their names."""
        seen: list[str] = []

        def step(what: str, n: int) -> None:
            seen.append(what)
            if len(seen) == steps:
                raise KeyboardInterrupt

        with monkeypatch.context() as env:
            for name, value in {**fleet, "AMPUP_MEMORY_HOME": str(tmp_path / "mover")}.items():
                env.setenv(name, value)
            with pytest.raises(KeyboardInterrupt):
                ops.restore(Settings(), laptop.backup, step)
        return seen

    # A server started on the empty stores before the move: the restore marks them, finds
    # the server by its lease and stops there; with it stopped, the same command goes on.
    with ServerProcess(tmp_path / "early", env=fleet) as early:
        busy = cli_in_process(tmp_path / "mover", fleet, "restore", str(laptop.backup))
        assert busy.returncode == 2, busy.stderr
        assert "a server is using this store" in busy.stderr, busy.stderr
        assert _fleet_holds(fleet)["count"] == 0
        early.stop()
    assert stopped_after(2) == ["AMP cells", "AMP cells"]
    assert _fleet_holds(fleet)["count"] == 6  # two batches of 3 of the 7
    refused = cli_in_process(tmp_path / "server", fleet, "status")
    assert refused.returncode == 2, refused.stderr
    assert "holds a restore that was stopped before it finished" in refused.stderr
    # Again, stopped once two tables are in: the cells all there, keys and history too.
    tables = stopped_after(5)[3:]
    assert len(tables) == 2 and all("." in t for t in tables), tables
    midway = _fleet_holds(fleet)
    assert (midway["count"], midway["keys"], midway["passes"]) == (
        7, laptop.held["keys"], laptop.held["passes"])
    other = tmp_path / "other-backup"
    shutil.copytree(laptop.backup, other)
    manifest = json.loads((other / "manifest.json").read_text())
    manifest["created_at"] = "2020-01-01T00:00:00Z"
    (other / "manifest.json").write_text(json.dumps(manifest))
    wrong = cli_in_process(tmp_path / "mover", fleet, "restore", str(other))
    assert wrong.returncode == 2 and "unfinished restore of another backup" in wrong.stderr

    done = cli_in_process(tmp_path / "mover", fleet, "restore", str(laptop.backup))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["resumed"] is True
    assert _fleet_holds(fleet) == laptop.held
    servers[0].start(timeout=120)
    _same_answers(laptop.reads, _reads(servers[0].url, laptop.written))


def test_a_fleet_with_another_embedder_gets_every_vector_from_it(
        laptop: Laptop, fleet: dict[str, str], tmp_path: Path) -> None:
    """The laptop's vectors come with their embedder's record; a fleet embedding with
    another (here another width) has every cell re-embedded by the restore's last step,
    and only the vectors change."""
    other = {**fleet, "AMP_EMBEDDING_DIMENSIONS": "64"}
    done = cli_in_process(tmp_path / "mover", other, "restore", str(laptop.backup))
    assert done.returncode == 0, done.stderr
    store = _fleet_holds(other)
    assert json.loads(done.stdout)["cell_store"]["reembedded"] == laptop.held["count"]
    assert store["model"].dimensions == 64 != laptop.held["model"].dimensions
    assert {len(c.vector) for c in store["cells"]} == {64}
    assert [c.stored for c in store["cells"]] == [c.stored for c in laptop.held["cells"]]
