"""Workspaces over real HTTP on both catalogs: create, list, caps, expiry, drop, crash."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from sqlalchemy import create_engine, text

from ampup_memory.errors import ValidationFailed
from ampup_memory.memory.tables import CATALOG_NAME, SCOPE_TABLES, sqlalchemy_url
from ampup_memory.timefmt import parse_ttl
from tests.conftest import ADMIN_TOKEN as SERVER_ADMIN_TOKEN
from tests.memory_support import (
    ADMIN_TOKEN,
    BACKENDS,
    LEASE,
    Memory,
    backend_env,
    bar_line,
    cli_in_process,
    maintenance_lease_free,
    new_scope,
    serving,
    start,
    wait_until_lease_free,
)
from tests.server_process import ServerProcess, plain_client

ADMIN = {"X-AMP-Admin-Token": ADMIN_TOKEN}
# The scope's rows; its commits stay in the ledger (and mem_ledger mirrors the ledger).
MEM_TABLES = ("mem_episodes", "mem_facts", "mem_fact_cites", "mem_bodies", "mem_acl")


@pytest.fixture(scope="module", params=BACKENDS)
def shared(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
           ) -> Iterator[tuple[Memory, Path, dict[str, str]]]:
    env = {**backend_env(request.param, request),
           "AMPUP_MEMORY_WORKSPACE_GC_INTERVAL_SECONDS": "1"}
    home = tmp_path_factory.mktemp(f"ws-{request.param}")
    proc = start(home, env)
    client = Memory(proc.url)
    yield client, home, env
    client.close()
    proc.stop()


def catalog(home: Path, env: dict[str, str]) -> SqlCatalog:
    uri = env.get("AMPUP_MEMORY_CATALOG_URI") or f"sqlite:///{home / 'catalog.db'}"
    return SqlCatalog(CATALOG_NAME, uri=sqlalchemy_url(uri, setting="catalog"),
                      warehouse=f"file://{home / 'warehouse'}")


def namespaces(home: Path, env: dict[str, str]) -> set[str]:
    cat = catalog(home, env)
    try:
        return {ns[0] for ns in cat.list_namespaces()}
    finally:
        cat.engine.dispose()


def index_rows(home: Path, env: dict[str, str], org: str) -> int:
    """mem_* rows of any scope of ``org`` in the read index."""
    uri = env.get("AMPUP_MEMORY_INDEX_URI") or f"sqlite:///{home / 'index.db'}"
    engine = create_engine(sqlalchemy_url(uri, setting="index"))
    try:
        with engine.connect() as conn:
            return sum(int(conn.execute(text(f"SELECT count(*) FROM {t} WHERE scope LIKE :p"),
                                        {"p": org + "/%"}).scalar() or 0) for t in MEM_TABLES)
    finally:
        engine.dispose()


def table_rows(home: Path, env: dict[str, str], namespace: str, name: str) -> int:
    cat = catalog(home, env)
    try:
        return len(cat.load_table((namespace, name)).scan().to_arrow())
    finally:
        cat.engine.dispose()


def files_digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def create(m: Memory, name: str = "demo", ttl: str = "7d", **extra: Any) -> dict[str, Any]:
    r = m.http.post("/workspaces", json={"name": name, "ttl": ttl, **extra})
    assert r.status_code == 201, r.text
    return dict(r.json())


def error(r: httpx.Response) -> tuple[int, str, dict[str, Any]]:
    body = r.json()
    assert set(body) == {"error"}, body
    return r.status_code, body["error"]["code"], body["error"]["details"]


def fact_on(m: Memory, scope: str, episode: str, value: str) -> httpx.Response:
    return m.fact(scope, "acme", "stage", value, "hello", [(episode, 1)])


def normal_reads(m: Memory, scope: str) -> tuple[Any, ...]:
    found = m.http.post("/search", json={"scope": scope, "query": "hello", "format": "json"})
    assert found.status_code == 200 and found.json()["sources"], found.text
    return m.ledger(scope), {k: v for k, v in found.json().items() if k != "as_of"}


# -- create, use, list, delete ------------------------------------------------------------------
def test_workspace_org_works_and_delete_drops_only_it(
        shared: tuple[Memory, Path, dict[str, str]]) -> None:
    m, home, env = shared
    bob = m.as_user("bob")
    normal = new_scope()
    assert m.write(normal, "hello normal world").status_code == 201
    ws = create(m, caps={"scopes": 3})
    org = ws["id"]
    assert org.startswith("ws_") and ws["org"] == org and ws["created_by"] == "alice"
    assert ws["caps"] == {"scopes": 3, "episodes": 100000, "facts": 1000000,
                          "bytes": 1024 ** 3}
    assert ws["usage"] == {"scopes": 0, "episodes": 0, "facts": 0, "bytes": 0}

    scope = f"{org}/team_1"
    ep = m.write(scope, "hello workspace world")
    assert ep.status_code == 201, ep.text
    assert fact_on(m, scope, ep.json()["id"], "won").status_code == 201
    assert m.write(f"{org}/team_2", "hello second team").status_code == 201
    got = m.facts(scope, "acme")
    assert [f["value"] for f in got.json()["facts"]] == ["won"]
    found = m.http.post("/search", json={"scope": scope, "query": "hello", "format": "json"})
    assert found.status_code == 200 and found.json()["results"], found.text

    mine = m.http.get("/workspaces").json()["workspaces"]
    assert [w["id"] for w in mine if w["id"] == org] == [org]
    listed = next(w for w in mine if w["id"] == org)
    assert listed["usage"]["scopes"] == 2 and listed["usage"]["episodes"] == 2
    assert listed["usage"]["facts"] == 1 and listed["usage"]["bytes"] > 0
    assert all(w["id"] != org for w in bob.http.get("/workspaces").json()["workspaces"])
    # all=true is an admin's: bob alone gets the admin routes' 403 (it was his own list).
    refused = bob.http.get("/workspaces", params={"all": "true"})
    assert error(refused)[:2] == (403, "ACCESS_DENIED"), refused.text
    everyone = bob.http.get("/workspaces", params={"all": "true"}, headers=ADMIN).json()
    assert org in {w["id"] for w in everyone["workspaces"]}

    # Another user's workspace is the same 404 as one that never existed.
    unknown = "ws_" + "0" * 16
    for method in ("GET", "DELETE"):
        theirs = bob.http.request(method, f"/workspaces/{org}")
        nothing = bob.http.request(method, f"/workspaces/{unknown}")
        assert theirs.status_code == nothing.status_code == 404
        assert theirs.json() == nothing.json()
    assert m.http.get(f"/workspaces/{org}").status_code == 200

    # Holds of its scopes, and one of the normal scope, made before the delete.
    holds = {f"/snapshots/{m.http.post(f'/workspaces/{org}/snapshots').json()['id']}",
             f"/snapshots/{m.http.post('/snapshots', json={'scopes': [scope]}).json()['id']}",
             f"/pin/{m.http.post('/pin', json={'scope': scope, 'ttl': '1h'}).json()['id']}"}
    normal_pin = f"/pin/{m.http.post('/pin', json={'scope': normal, 'ttl': '1h'}).json()['id']}"
    assert {m.http.get(path).json()["state"] for path in (*holds, normal_pin)} == {"live"}

    # Snapshot the normal scope: its reads and its files must not change.
    ns_folder = home / "warehouse" / normal.replace("/", "__")
    before_files = files_digest(ns_folder)
    before_reads = normal_reads(m, normal)

    gone = m.http.delete(f"/workspaces/{org}")
    assert gone.status_code == 200, gone.text
    assert gone.json()["dropped"] is True
    assert gone.json()["scopes"] == [f"{org}/team_1", f"{org}/team_2"]
    assert not {ns for ns in namespaces(home, env) if ns.startswith(org)}
    assert not [p for p in (home / "warehouse").iterdir() if p.name.startswith(org)]
    assert index_rows(home, env, org) == 0
    assert m.http.get(f"/workspaces/{org}").status_code == 404
    assert all(w["id"] != org for w in m.http.get("/workspaces").json()["workspaces"])
    for r in (m.write(scope, "hello again"), m.facts(scope, "acme"),
              m.http.post("/search", json={"scope": scope, "query": "hello"})):
        assert error(r)[:2] == (404, "WORKSPACE_GONE")
    assert not {ns for ns in namespaces(home, env) if ns.startswith(org)}  # not recreated
    # Its holds say what a read through them answers (they said "live").
    for path in holds:
        assert m.http.get(path).json()["state"] == "gone", path
        kind = path.split("/")[1].replace("snapshots", "snapshot")
        assert error(m.http.get("/episodes", params={"scope": scope, kind: path.split("/")[2]})
                     )[:2] == (404, "WORKSPACE_GONE")
    renewed = m.http.post(f"/pin/{next(p for p in holds if p.startswith('/pin'))[5:]}/renew",
                          json={"ttl": "2h"})
    assert (renewed.status_code, renewed.json()["state"]) == (200, "gone"), renewed.text
    assert m.http.get(normal_pin).json()["state"] == "live"
    for path in (*holds, normal_pin):
        assert m.http.delete(path).json()["state"] == "released"

    assert files_digest(ns_folder) == before_files
    assert normal_reads(m, normal) == before_reads


def test_a_workspace_names_its_scopes_and_lists_its_snapshots(
        shared: tuple[Memory, Path, dict[str, str]]) -> None:
    """GET /workspaces/{id} names its scopes; GET /workspaces/{id}/snapshots lists the
    snapshots taken of it, newest first, released ones with their state. Both for its
    creator or an admin; to anyone else the same 404 as an id that never existed."""
    m, home, env = shared
    bob = m.as_user("bob")
    org = create(m)["id"]
    listing = f"/workspaces/{org}/snapshots"
    try:
        got = m.http.get(f"/workspaces/{org}").json()
        assert (got["scopes"], got["usage"]["scopes"]) == ([], 0)
        assert m.http.get(listing).json() == {"snapshots": []}
        for team in ("zulu", "alpha"):
            assert m.write(f"{org}/{team}", f"hello {team}").status_code == 201
        got = m.http.get(f"/workspaces/{org}").json()
        assert got["scopes"] == [f"{org}/alpha", f"{org}/zulu"] and got["usage"]["scopes"] == 2

        first = m.http.post(f"/workspaces/{org}/snapshots")
        assert first.status_code == 201, first.text
        assert m.write(f"{org}/alpha", "hello again").status_code == 201
        second = m.http.post(f"/workspaces/{org}/snapshots").json()
        # A snapshot that names a scope of the workspace is not one taken of it.
        other = m.http.post("/snapshots", json={"scopes": [f"{org}/alpha"]})
        assert other.status_code == 201, other.text
        assert m.http.delete(f"/snapshots/{first.json()['id']}").status_code == 200

        snaps = m.http.get(listing).json()["snapshots"]
        assert [s["id"] for s in snaps] == [second["id"], first.json()["id"]]
        assert [s["state"] for s in snaps] == ["live", "released"]
        assert snaps[0] == m.http.get(f"/snapshots/{second['id']}").json()
        assert snaps[0]["workspace"] == org and set(snaps[0]["heads"]) == {
            f"{org}/alpha@main", f"{org}/zulu@main"}

        unknown = "ws_" + "0" * 16
        for path in (listing, f"/workspaces/{org}"):
            theirs = bob.http.get(path)
            nothing = bob.http.get(path.replace(org, unknown))
            assert theirs.status_code == nothing.status_code == 404
            assert theirs.json() == nothing.json()
        assert error(m.http.get("/workspaces/nope/snapshots"))[:2] == (404, "NOT_FOUND")
        admin = bob.http.get(listing, headers=ADMIN)
        assert admin.status_code == 200 and admin.json()["snapshots"] == snaps
        assert bob.http.get(f"/workspaces/{org}", headers=ADMIN).json()["scopes"] == [
            f"{org}/alpha", f"{org}/zulu"]
        assert httpx.get(m.url + listing).status_code == 401
        # The operator's command lists the same, whoever made the workspace.
        listed = cli_in_process(home, env, "workspace", "snapshots", org)
        assert listed.returncode == 0, listed.stderr
        assert json.loads(listed.stdout) == {"snapshots": snaps}
        assert m.http.delete(f"/workspaces/{org}").status_code == 200
        assert error(m.http.get(listing))[:2] == (404, "NOT_FOUND")
        for gone in (org, unknown, "nope"):
            refused = cli_in_process(home, env, "workspace", "snapshots", gone)
            assert refused.returncode == 2 and refused.stdout == "", refused.stdout
            assert refused.stderr.strip().splitlines()[-1] == (
                "error: NOT_FOUND: No such workspace."), refused.stderr
    finally:
        bob.close()


def test_a_workspace_listing_reads_its_own_snapshots_as_a_scan_of_all_would(
        shared: tuple[Memory, Path, dict[str, str]]) -> None:
    """`Holds.of_workspace` answers what filtering every hold of the server by workspace
    did (GET /workspaces/{id}/snapshots read all of them per request), for each workspace,
    after a release, and after another process took a snapshot (the table moved)."""
    from ampup_memory.memory.service import MemoryService
    from ampup_memory.memory.snapshots import SNAPSHOT, TABLE, fold
    from ampup_memory.settings import Settings

    m, home, env = shared
    orgs = [create(m, name=f"of-ws-{i}")["id"] for i in range(3)]
    for org in orgs[:2]:
        assert m.write(f"{org}/t", "hello").status_code == 201
        for _ in range(2):
            assert m.http.post(f"/workspaces/{org}/snapshots").status_code == 201
    plain = m.http.post("/snapshots", json={"scopes": [f"{orgs[0]}/t"]}).json()["id"]
    newest = m.http.get(f"/workspaces/{orgs[1]}/snapshots").json()["snapshots"][0]["id"]
    assert m.http.delete(f"/snapshots/{newest}").status_code == 200

    settings = Settings.model_validate({**env, "AMPUP_MEMORY_HOME": str(home)})
    svc = MemoryService.open(settings)
    try:
        def scanned(org: str) -> list[str]:
            every = fold(svc.tables.system(TABLE).scan().to_arrow().to_pylist())
            return sorted(h.id for h in every.values()
                          if h.kind == SNAPSHOT and h.workspace == org)

        def agree(counts: list[int]) -> None:
            for org in orgs:
                own = sorted(h.id for h in svc.holds.of_workspace(org))
                assert own == scanned(org)
                listed = m.http.get(f"/workspaces/{org}/snapshots").json()["snapshots"]
                assert sorted(s["id"] for s in listed) == own
            assert [len(scanned(org)) for org in orgs] == counts
            assert all(plain not in scanned(org) for org in orgs)

        agree([2, 2, 0])
        # Another process (the server) takes one: this process folds the moved table.
        assert m.http.post(f"/workspaces/{orgs[0]}/snapshots").status_code == 201
        agree([3, 2, 0])
    finally:
        svc.close()
        for org in orgs:
            m.http.delete(f"/workspaces/{org}")


def test_a_workspace_read_is_one_404_for_every_id_its_caller_may_not_see(
        shared: tuple[Memory, Path, dict[str, str]]) -> None:
    """GET /workspaces/{id} and its /snapshots, as an outside check drives them: an expired
    workspace, another user's, a mis-spelled id and one that never existed answer the same
    404 body (no id is echoed to tell them apart); an id over 64 characters is a 422 in
    the envelope; neither route takes a query parameter that could change it."""
    m, _, _ = shared
    made = create(m, name="expiring", ttl="1s")
    org = made["id"]
    theirs = m.as_user("carol")
    other = create(theirs, name="carols")["id"]
    try:
        time.sleep(1.2)  # past its expiry (the gc pass may have dropped it too: same answer)
        nobody = {tail: m.http.get(f"/workspaces/ws_0000000000000000{tail}")
                  for tail in ("", "/snapshots")}
        for tail, unknown in nobody.items():
            assert error(unknown)[:2] == (404, "NOT_FOUND"), unknown.text
            for ws in (org, other, other.upper(), other[:-1], "ws_", "nope"):
                r = m.http.get(f"/workspaces/{ws}{tail}")
                assert (r.status_code, r.json()) == (404, unknown.json()), (ws, r.text)
            r = m.http.get(f"/workspaces/{'w' * 65}{tail}")
            assert error(r)[:2] == (422, "VALIDATION_ERROR"), r.text
            assert error(r)[2]["errors"][0]["loc"] == ["path", "workspace_id"], r.text
            assert theirs.http.get(f"/workspaces/{other}{tail}").status_code == 200
            # A parameter the route does not take is refused alike for every id (it was
            # ignored), so the refusal says nothing of whose workspace it is.
            for ws in (other, "ws_0000000000000000"):
                r = theirs.http.get(f"/workspaces/{ws}{tail}", params={"limit": "0", "x": "y"})
                assert error(r)[:2] == (422, "VALIDATION_ERROR"), r.text
                assert [e["loc"] for e in error(r)[2]["errors"]] == [["query", "limit"],
                                                                     ["query", "x"]]
    finally:
        theirs.http.delete(f"/workspaces/{other}")
        theirs.close()


def test_reserved_org_without_a_workspace_is_refused(
        shared: tuple[Memory, Path, dict[str, str]]) -> None:
    m, home, env = shared
    scope = "ws_0123456789abcdef/team"
    assert error(m.write(scope, "hello"))[:2] == (404, "WORKSPACE_GONE")
    assert error(m.facts(scope, "acme"))[:2] == (404, "WORKSPACE_GONE")
    assert "ws_0123456789abcdef__team" not in namespaces(home, env)
    # Orgs that only look alike stay normal orgs.
    assert m.write("ws_demo/team", "hello").status_code == 201


# -- caps ---------------------------------------------------------------------------------------
def _refused(m: Memory, home: Path, env: dict[str, str], scope: str, r: httpx.Response,
             cap: str, usage: int, limit: int) -> None:
    status, code, details = error(r)
    assert (status, code) == (409, "WORKSPACE_CAP"), r.text
    assert details["cap"] == cap and details["usage"] == usage and details["limit"] == limit
    assert cap in r.json()["error"]["message"]


def test_each_cap_refuses_and_writes_nothing(
        shared: tuple[Memory, Path, dict[str, str]]) -> None:
    m, home, env = shared
    # episodes
    org = create(m, caps={"episodes": 2})["id"]
    scope, ns = f"{org}/team", f"{org}__team"
    first = m.http.post("/episodes/batch", json={"scope": scope, "episodes": [
        {"source": "doc:a", "body": "hello one", "acl": ["*"]},
        {"source": "doc:b", "body": "hello two", "acl": ["*"]}]})
    assert first.status_code == 201, first.text
    ledger, rows = m.ledger(scope), table_rows(home, env, ns, "episodes")
    _refused(m, home, env, scope, m.write(scope, "hello three"), "episodes", 2, 2)
    assert m.ledger(scope) == ledger and table_rows(home, env, ns, "episodes") == rows
    assert m.write(scope, "hello one", source="doc:a").status_code == 200  # held: no commit

    # facts
    org = create(m, caps={"facts": 1})["id"]
    scope, ns = f"{org}/team", f"{org}__team"
    ep = m.write(scope, "hello")
    assert fact_on(m, scope, ep.json()["id"], "a").status_code == 201
    ledger, rows = m.ledger(scope), table_rows(home, env, ns, "facts")
    _refused(m, home, env, scope, fact_on(m, scope, ep.json()["id"], "b"), "facts", 1, 1)
    close = m.http.post("/close", json={"scope": scope, "entity": "acme", "predicate": "stage",
                                        "reason": "deal off"})
    _refused(m, home, env, scope, close, "facts", 1, 1)
    assert m.ledger(scope) == ledger and table_rows(home, env, ns, "facts") == rows
    assert [f["value"] for f in m.facts(scope, "acme").json()["facts"]] == ["a"]

    # bytes (UTF-8 bytes of bodies; a body held already costs nothing)
    org = create(m, caps={"bytes": 10})["id"]
    scope, ns = f"{org}/team", f"{org}__team"
    assert m.write(scope, "héllo", source="doc:x").status_code == 201  # 6 bytes
    ledger, rows = m.ledger(scope), table_rows(home, env, ns, "episodes")
    _refused(m, home, env, scope, m.write(scope, "hello", source="doc:y"), "bytes", 6, 10)
    assert m.ledger(scope) == ledger and table_rows(home, env, ns, "episodes") == rows

    # scopes: the refused scope's namespace is never created
    org = create(m, caps={"scopes": 1})["id"]
    assert m.write(f"{org}/one", "hello").status_code == 201
    _refused(m, home, env, f"{org}/two", m.write(f"{org}/two", "hello"), "scopes", 1, 1)
    assert f"{org}__two" not in namespaces(home, env)
    assert m.write(f"{org}/one", "hello more").status_code == 201  # its own scope still takes


def test_every_write_a_cap_refuses_publishes_its_409(server: ServerProcess) -> None:
    """docs/api.md: the OpenAPI schema lists every status each route answers. Each write
    below answers 409 WORKSPACE_CAP over HTTP; the served schema must say so for it."""
    user = {"X-AmpUp-User": "capper"}
    with plain_client(base_url=server.url, headers=user, timeout=60) as http:
        def workspace(**caps: int) -> str:
            r = http.post("/workspaces", json={"name": "caps", "ttl": "1h", "caps": caps})
            assert r.status_code == 201, r.text
            return str(r.json()["id"])

        full = workspace(scopes=1)  # one scope written: any other scope of it is refused
        assert http.post("/episodes", json={"scope": f"{full}/one", "source": "doc:a",
                                            "body": "hello", "acl": ["*"]}).status_code == 201
        new = f"{full}/two"
        facts_full = workspace(facts=1)  # one fact written, on main and a branch
        scope = f"{facts_full}/one"
        ep = http.post("/episodes", json={"scope": scope, "source": "doc:a", "body": "hello",
                                          "acl": ["*"]}).json()["id"]
        assert http.post("/branches", json={"scope": scope, "name": "b"}).status_code == 201
        fact = {"entity": "acme", "predicate": "stage", "value": "a", "quote": "hello",
                "cites": [{"episode": ep, "unit": 1}]}
        assert http.post("/facts", json={"scope": scope, "branch": "b",
                                         **fact}).status_code == 201
        admin = {"X-AMP-Admin-Token": SERVER_ADMIN_TOKEN}
        writes = [
            ("post", "/episodes", {"scope": new, "source": "doc:a", "body": "x", "acl": ["*"]}),
            ("post", "/episodes/batch", {"scope": new, "episodes": [
                {"source": "doc:a", "body": "x", "acl": ["*"]}]}),
            ("post", "/facts", {"scope": scope, **fact}),
            ("post", "/facts/batch", {"scope": scope, "facts": [fact]}),
            ("post", "/close", {"scope": scope, "branch": "b", "entity": "acme",
                                "predicate": "stage", "reason": "off"}),
            ("post", "/merge", {"scope": scope, "from": "b"}),
            ("post", "/runs", {"scope": new, "task": "t"}),
            ("post", "/sessions/start", {"scope": new}),
            ("put", "/procedures/sources", {"scope": new, "documents": ["d"]}),
            ("put", "/schemas/{org}/{team}", {"builtin": "sales"}),
        ]
        published = http.get("/openapi.json").json()["paths"]
        missing = []
        for method, path, body in writes:
            url = path.replace("{org}/{team}", new)
            r = http.request(method.upper(), url, json=body, headers=admin)
            assert (r.status_code, r.json()["error"]["code"]) == (409, "WORKSPACE_CAP"), \
                (path, r.text)
            said = published[path][method]["responses"].get("409", {}).get("description", "")
            if "WORKSPACE_CAP" not in said:
                missing.append(f"{method.upper()} {path}")
    assert missing == []


# -- time to live -------------------------------------------------------------------------------
def test_expiry_refuses_writes_and_the_timer_drops_it(
        shared: tuple[Memory, Path, dict[str, str]]) -> None:
    m, home, env = shared
    org = create(m, ttl="3s")["id"]
    scope = f"{org}/team"
    assert m.write(scope, "short lived").status_code == 201
    assert f"{org}__team" in namespaces(home, env)
    time.sleep(3.2)
    assert error(m.write(scope, "too late"))[:2] == (404, "WORKSPACE_GONE")
    assert all(w["id"] != org for w in m.http.get("/workspaces").json()["workspaces"])
    deadline = time.monotonic() + 30
    while f"{org}__team" in namespaces(home, env) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert f"{org}__team" not in namespaces(home, env)
    deadline = time.monotonic() + 10
    while index_rows(home, env, org) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert index_rows(home, env, org) == 0


def test_renew_extends_the_time_to_live(shared: tuple[Memory, Path, dict[str, str]]) -> None:
    """POST /workspaces/{id}/renew sets expires_at to ttl from now: a workspace made for 3 s
    and renewed for 1 h still takes writes after the 3 s. Its creator or an admin only;
    the ttl is checked as on create; a deleted one is the same 404."""
    m, _, _ = shared
    made = create(m, ttl="3s")
    org = made["id"]
    scope = f"{org}/team"
    renew = f"/workspaces/{org}/renew"
    bob = m.as_user("bob")
    try:
        assert error(bob.http.post(renew, json={"ttl": "1h"}))[:2] == (404, "NOT_FOUND")
        for bad in ({"ttl": "0s"}, {"ttl": "-1d"}, {"ttl": "soon"}, {"ttl": "99999d"}, {},
                    {"ttl": "1h", "extra": 1}):
            assert error(m.http.post(renew, json=bad))[:2] == (422, "VALIDATION_ERROR"), bad
        r = m.http.post(renew, json={"ttl": "1h"})
        assert r.status_code == 200, r.text
        assert r.json()["id"] == org and r.json()["expires_at"] > made["expires_at"]
        assert m.http.get(f"/workspaces/{org}").json()["expires_at"] == r.json()["expires_at"]
        r = bob.http.post(renew, json={"ttl": "2h"}, headers=ADMIN)  # an admin may
        assert r.status_code == 200, r.text
        time.sleep(3.2)
        assert m.write(scope, "still here").status_code == 201
        assert any(w["id"] == org for w in m.http.get("/workspaces").json()["workspaces"])
        assert m.http.delete(f"/workspaces/{org}").status_code == 200
        assert error(m.http.post(renew, json={"ttl": "1h"}))[:2] == (404, "NOT_FOUND")
    finally:
        bob.close()


def test_concurrent_deletes_answer_as_deletes_in_turn(
        shared: tuple[Memory, Path, dict[str, str]]) -> None:
    """Four DELETEs of one workspace at once: one deletes it (200), the others get the 404
    of a deleted workspace, as a second DELETE sent after the first does; the drop is
    recorded once."""
    m, home, env = shared
    org = create(m)["id"]
    assert m.write(f"{org}/team", "hello").status_code == 201
    barrier = threading.Barrier(4)

    def delete(_: int) -> httpx.Response:
        with httpx.Client(base_url=m.url, headers={"X-AmpUp-User": m.user}, timeout=120) as c:
            barrier.wait()
            return c.delete(f"/workspaces/{org}")

    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(delete, range(4)))
    assert sorted(r.status_code for r in answers) == [200, 404, 404, 404], [
        r.text for r in answers]
    done = next(r.json() for r in answers if r.status_code == 200)
    assert done["deleted"] and done["scopes"] == [f"{org}/team"]
    assert all(error(r)[:2] == (404, "NOT_FOUND") for r in answers if r.status_code == 404)
    assert error(m.http.delete(f"/workspaces/{org}"))[:2] == (404, "NOT_FOUND")


# -- bad input ----------------------------------------------------------------------------------
BAD_BODIES: list[dict[str, Any]] = [
    {"name": "x", "ttl": "0s"}, {"name": "x", "ttl": "-1d"}, {"name": "x", "ttl": "soon"},
    {"name": "x", "ttl": "99999d"}, {"name": "x", "ttl": ""}, {"name": "x", "ttl": 5},
    {"name": "x", "ttl": "1h1"}, {"name": "x" * 600, "ttl": "1h"},
    {"name": "a\u0000b", "ttl": "1h"}, {"name": "", "ttl": "1h"}, {"name": " ", "ttl": "1h"},
    {"name": "x", "ttl": "1h", "caps": {"scopes": 0}},
    {"name": "x", "ttl": "1h", "caps": {"episodes": -1}},
    {"name": "x", "ttl": "1h", "caps": {"episodes": "1"}},
    {"name": "x", "ttl": "1h", "caps": {"files": 1}},
    {"name": "x", "ttl": "1h", "extra": 1}, {"ttl": "1h"}, {"name": "x"},
]


@pytest.mark.parametrize("body", BAD_BODIES, ids=range(len(BAD_BODIES)))
def test_bad_create_bodies_are_422(shared: tuple[Memory, Path, dict[str, str]],
                                   body: dict[str, Any]) -> None:
    m, _, _ = shared
    assert error(m.http.post("/workspaces", json=body))[:2] == (422, "VALIDATION_ERROR")


def test_a_misspelled_ttl_says_how_to_write_one(shared: tuple[Memory, Path, dict[str, str]]
                                                 ) -> None:
    """Creating a workspace with `"ttl": "7x"` answered pydantic's "String should match
    pattern '^\\s*([0-9]{1,9}[smhdwSMHDW])+\\s*$'"; a pin's ttl, and a renew's, said how to
    write one. Now all three say it."""
    m, _, _ = shared
    for ttl in ("7x", "soon", "1h1", "1 h"):
        r = m.http.post("/workspaces", json={"name": "x", "ttl": ttl})
        status, code, details = error(r)
        assert (status, code) == (422, "VALIDATION_ERROR"), r.text
        [problem] = details["errors"]
        assert problem["loc"] == ["body", "ttl"], r.text
        assert "a number and a unit s, m, h, d or w" in problem["msg"], r.text
        assert "pattern" not in r.text
    # A blank name, the same way (it quoted its regex too).
    for name in ("\t", "   ", "a\x07b"):
        r = m.http.post("/workspaces", json={"name": name, "ttl": "1h"})
        [problem] = error(r)[2]["errors"]
        assert problem["loc"] == ["body", "name"], r.text
        assert problem["msg"] == (f"invalid workspace name {name!r}: printable text, not only "
                                  "spaces"), r.text


def test_identity_and_odd_ids(shared: tuple[Memory, Path, dict[str, str]]) -> None:
    m, _, _ = shared
    anon = httpx.post(m.url + "/workspaces", json={"name": "x", "ttl": "1h"})
    assert error(anon)[:2] == (401, "MISSING_USER")
    for odd in ("ws_zz", "..", "ws_" + "a" * 60, "x" * 65):
        r = m.http.delete(f"/workspaces/{odd}")
        # ".." is resolved by the client: DELETE / meets the inspector page's GET-only route
        expected = (405,) if odd == ".." else (404, 422)
        assert r.status_code in expected and set(r.json()) == {"error"}, r.text


@pytest.mark.parametrize("spelled, seconds", [("30m", 1800), ("1h", 3600), ("7d", 604800),
                                              ("1d12h", 129600), ("2w", 1209600), ("2s", 2)])
def test_parse_ttl_spellings(spelled: str, seconds: int) -> None:
    assert parse_ttl(spelled, ["ttl"]) == timedelta(seconds=seconds)


@pytest.mark.parametrize("bad", ["0s", "-1d", "1.5h", "1 h", "h", "367d", "0d0h", None, 3])
def test_parse_ttl_refuses(bad: object) -> None:
    with pytest.raises(ValidationFailed) as caught:
        parse_ttl(bad, ["ttl"])
    assert caught.value.details["errors"][0]["loc"] == ["ttl"]


# -- crash in the middle of a drop ----------------------------------------------------------------
@pytest.mark.parametrize("kind", BACKENDS)
def test_crash_mid_drop_reads_as_gone_and_gc_finishes(
        kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    env = {**backend_env(kind, request), "AMPUP_MEMORY_WORKSPACE_GC_INTERVAL_SECONDS": "0"}
    home = tmp_path / "home"
    armed = {**env, "AMPUP_MEMORY_TEST_FAULT": f"workspace-mid-drop@{home}",
             "AMPUP_MEMORY_LEASE_SECONDS": str(LEASE)}
    faulty = ServerProcess(home, env=armed).start(90)
    m = Memory(faulty.url)
    org = create(m)["id"]
    scope, ns = f"{org}/team", f"{org}__team"
    ep = m.write(scope, "hello before the crash")
    assert fact_on(m, scope, ep.json()["id"], "won").status_code == 201
    with pytest.raises(httpx.HTTPError):
        m.http.delete(f"/workspaces/{org}")
    assert faulty.proc is not None and faulty.proc.wait(30) == 70  # died mid-drop
    died = time.monotonic()
    m.close()
    # The dead holder's lease (renewed every LEASE / 3 s while it dropped) runs out within
    # one lease of the crash, not 30 minutes after the drop began.
    assert not maintenance_lease_free(home, env)
    wait_until_lease_free(home, env, died)
    cat = catalog(home, env)
    # Half dropped: the fault fires once the first table is gone; the others are still there.
    assert ns in {n[0] for n in cat.list_namespaces()}
    assert sorted(t[1] for t in cat.list_tables(ns)) == sorted(list(SCOPE_TABLES)[1:])
    cat.engine.dispose()

    with serving(home, env) as again:
        m = Memory(again.url)
        assert m.http.get(f"/workspaces/{org}").status_code == 404
        assert all(w["id"] != org for w in m.http.get("/workspaces").json()["workspaces"])
        assert error(m.write(scope, "after the crash"))[:2] == (404, "WORKSPACE_GONE")
        assert error(m.facts(scope, "acme"))[:2] == (404, "WORKSPACE_GONE")
        m.close()
    done = cli_in_process(home, env, "workspace", "gc")
    assert done.returncode == 0, done.stderr
    assert org in done.stdout
    scopes = len(json.loads(done.stdout)["scopes"])
    assert f"{scopes}/{scopes}" in bar_line(done.stderr, "dropping workspace scopes")
    assert ns not in namespaces(home, env)
    assert not (home / "warehouse" / ns).exists()
    assert index_rows(home, env, org) == 0
    again_gc = cli_in_process(home, env, "workspace", "gc")
    assert again_gc.returncode == 0 and '"dropped": []' in again_gc.stdout.replace(
        '"dropped":[]', '"dropped": []'), again_gc.stdout


def test_cli_create_list_delete(tmp_path: Path) -> None:
    env = {"AMP_EMBEDDING_PROVIDER": "hash"}
    home = tmp_path / "home"
    made = cli_in_process(home, env, "workspace", "create", "demo", "--ttl", "1h",
                          "--user", "alice", "--max-episodes", "5")
    assert made.returncode == 0, made.stderr
    assert '"episodes": 5' in made.stdout.replace('"episodes":5', '"episodes": 5')
    org = json.loads(made.stdout)["id"]
    listed = cli_in_process(home, env, "workspace", "list", "--user", "alice")
    assert org in listed.stdout
    assert org not in cli_in_process(home, env, "workspace", "list", "--user", "bob").stdout
    bad = cli_in_process(home, env, "workspace", "create", "demo", "--ttl", "0s", "--user", "alice")
    assert bad.returncode != 0 and "time to live" in bad.stderr
    bad = cli_in_process(home, env, "workspace", "create", "demo", "--ttl", "7x", "--user", "alice")
    assert bad.returncode != 0 and "a number and a unit" in bad.stderr, bad.stderr
    # Named as the command takes it (`at --ttl`), as `pin create` and `renew` name it.
    assert "at --ttl" in bad.stderr, bad.stderr
    renewed = cli_in_process(home, env, "workspace", "renew", org, "--ttl", "7d")
    assert renewed.returncode == 0, renewed.stderr
    assert json.loads(renewed.stdout)["expires_at"] > json.loads(made.stdout)["expires_at"]
    bad = cli_in_process(home, env, "workspace", "renew", org, "--ttl", "-1d")
    assert bad.returncode != 0 and "time to live" in bad.stderr
    gone = cli_in_process(home, env, "workspace", "delete", org)
    assert gone.returncode == 0, gone.stderr
    assert org not in cli_in_process(home, env, "workspace", "list").stdout


@pytest.mark.parametrize("kind", BACKENDS)
def test_lease_is_taken_on_both_index_backends(kind: str, request: pytest.FixtureRequest,
                                               tmp_path: Path) -> None:
    """A drop (and maintenance, and backup) waits for this lease: on PostgreSQL it was
    never granted (rowcount -1), so DELETE never dropped and maintenance never ran."""
    from ampup_memory.memory.readindex import ReadIndex

    url = (request.getfixturevalue("postgres").new_database("lease") if kind == "postgres"
           else f"sqlite:///{tmp_path / 'index.db'}")
    index, now, ttl = ReadIndex(url), datetime.now(UTC), timedelta(minutes=30)
    try:
        assert index.take_lease("l", "a", now, ttl) and index.take_lease("l", "a", now, ttl)
        assert not index.take_lease("l", "b", now, ttl)
        assert index.take_lease("l", "b", now + ttl + timedelta(seconds=1), ttl)
        index.release_lease("l", "b")
        assert index.take_lease("l", "c", now, ttl)
    finally:
        index.close()


def test_a_delete_racing_a_gc_pass_still_drops(tmp_path: Path) -> None:
    """A gc pass holds the maintenance lease, then takes the write lock (as the timer's
    pass does). A DELETE arriving in between must not hold the write lock while it waits
    for the lease (the gc pass would wait for it in turn, and the delete would give up
    after its wait, leaving the drop to the next pass): the workspace is dropped now."""
    import threading

    from ampup_memory.memory.service import MAINTENANCE_LEASE, MemoryService
    from ampup_memory.memory.workspaces import CreateWorkspace
    from ampup_memory.settings import Settings

    svc = MemoryService.open(Settings.model_validate({"AMPUP_MEMORY_HOME": str(tmp_path)}))
    try:
        ws = svc.workspaces.create("alice", CreateWorkspace(name="race", ttl="1h"))
        leased, go = threading.Event(), threading.Event()

        def gc_pass() -> None:  # gc_if_free, with a pause between the lease and the pass
            with svc.index.hold_lease(MAINTENANCE_LEASE, "timer") as held:
                assert held
                leased.set()
                go.wait(30)
                svc.workspaces.gc()

        gc = threading.Thread(target=gc_pass)
        gc.start()
        assert leased.wait(30)
        answer: list[dict[str, Any]] = []
        deleting = threading.Thread(target=lambda: answer.append(
            svc.workspaces.delete("alice", ws["id"], admin=False)))
        deleting.start()
        time.sleep(0.3)  # the delete is waiting now
        go.set()
        gc.join(30)
        deleting.join(30)
        assert answer and answer[0]["dropped"] is True, answer
        assert ws["id"] not in {w["id"] for w in svc.workspaces.listing("alice", False)}
    finally:
        svc.close()


def test_a_server_keeps_no_dropped_workspace_and_answers_one_as_before(
        shared: tuple[Memory, Path, dict[str, str]]) -> None:
    """The registry kept every workspace ever made in each server's memory and folded all
    of its rows again whenever it moved (leak audit, session 32). A dropped workspace is
    now left out (and its rows read by no Python code); it answers as before: the same
    404 to GET, a write to its scope 404 `WORKSPACE_GONE`, nothing for gc to drop. A live
    one and one deleted but not yet dropped stay known."""
    from ampup_memory.memory.service import MemoryService
    from ampup_memory.settings import Settings

    m, home, env = shared
    kept, dropped = create(m, name="kept")["id"], create(m, name="dropped")["id"]
    assert m.write(f"{dropped}/t", "hello").status_code == 201
    assert m.http.delete(f"/workspaces/{dropped}").json()["dropped"] is True
    svc = MemoryService.open(Settings.model_validate({**env,
                                                      "AMPUP_MEMORY_HOME": str(home)}))
    try:
        known = svc.workspaces.all()
        assert kept in known and dropped not in known
        assert error(m.http.get(f"/workspaces/{dropped}"))[:2] == (404, "NOT_FOUND")
        assert error(m.write(f"{dropped}/t", "again"))[:2] == (404, "WORKSPACE_GONE")
        assert svc.workspaces.gc()["dropped"] == []
        assert m.http.get(f"/workspaces/{kept}").status_code == 200
    finally:
        svc.close()
        m.http.delete(f"/workspaces/{kept}")
