"""The rules of AmpUp Memory core, each shown over real HTTP against real server processes,
on a SQLite catalog and on a PostgreSQL catalog."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from pyiceberg.catalog.sql import SqlCatalog

from ampup_memory.memory.tables import CATALOG_NAME, sqlalchemy_url
from tests.memory_support import (
    BACKENDS,
    Memory,
    backend_env,
    new_scope,
    run_cli,
    serving,
    start,
)
from tests.server_process import ServerProcess

VALID_NAMESPACE = re.compile(r"^(memory_system|[a-z0-9]+(_[a-z0-9]+)*__[a-z0-9]+(_[a-z0-9]+)*)$")


@pytest.fixture(scope="module", params=BACKENDS)
def shared(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
           ) -> Iterator[tuple[Memory, Path, dict[str, str]]]:
    env = backend_env(request.param, request)
    home = tmp_path_factory.mktemp(f"mem-{request.param}")
    proc = start(home, env)
    client = Memory(proc.url)
    yield client, home, env
    client.close()
    proc.stop()


def catalog(home: Path, env: dict[str, str]) -> SqlCatalog:
    uri = env.get("AMPUP_MEMORY_CATALOG_URI") or f"sqlite:///{home / 'catalog.db'}"
    return SqlCatalog(CATALOG_NAME, uri=sqlalchemy_url(uri, setting="catalog"),
                      warehouse=f"file://{home / 'warehouse'}")


def episode_id(source: str, body: str) -> str:
    """The spec's id for a type that hashes the source too (all but doc:)."""
    return hashlib.sha256(f"{source}\n{body}".encode()).hexdigest()


# -- scope names ------------------------------------------------------------------------------
BAD_SCOPES = [
    "Acme/sales", "acme/Sales", "acme__x/sales", "acme/sales__x", "_acme/sales", "acme_/sales",
    "acme/sa les", "acme/sales/x", "acme", "../etc/passwd", "acme/..", "acme/sälës",
    "a" * 65 + "/b", "", "acme/", "/sales", "acme/sales;drop table", "acme\\x/y",
    "acme/sales%2F..", "acme.x/sales", "acme/sales\n",
]


def _scope_refused(r: httpx.Response) -> bool:
    body = r.json()
    return (r.status_code == 422 and body["error"]["code"] == "VALIDATION_ERROR"
            and any(e["loc"][-1] == "scope" for e in body["error"]["details"]["errors"]))


def test_scope_names_are_refused_before_any_catalog(
        shared: tuple[Memory, Path, dict[str, str]]) -> None:
    m, home, env = shared
    cites = [{"episode": "0" * 64, "unit": 1}]
    for bad in BAD_SCOPES:
        calls = [
            m.http.post("/episodes", json={"scope": bad, "source": "doc:x", "body": "b",
                                           "acl": ["*"]}),
            m.http.post("/episodes/batch", json={"scope": bad, "episodes": [
                {"source": "doc:x", "body": "b", "acl": ["*"]}]}),
            m.http.post("/facts", json={"scope": bad, "entity": "e", "predicate": "p",
                                        "value": 1, "quote": "b", "cites": cites}),
            m.http.post("/close", json={"scope": bad, "entity": "e", "predicate": "p",
                                        "reason": "r"}),
            m.http.post("/document", json={"scope": bad, "document": "d"}),
            m.http.get("/facts", params={"scope": bad, "entity": "e"}),
            m.http.get("/ledger", params={"scope": bad}),
            m.http.get(f"/episodes/{'0' * 64}", params={"scope": bad}),
        ]
        for r in calls:
            assert _scope_refused(r), (bad, r.request.url, r.text)
    # Nothing of them reached the catalog or the warehouse.
    names = [ns[0] for ns in catalog(home, env).list_namespaces()]
    assert names and all(VALID_NAMESPACE.fullmatch(n) for n in names), names
    folders = [p.name for p in (home / "warehouse").iterdir()]
    assert all(VALID_NAMESPACE.fullmatch(f.removesuffix(".db")) for f in folders), folders


# -- crash safety -----------------------------------------------------------------------------
@pytest.mark.parametrize("kind", BACKENDS)
def test_crash_between_rows_and_ledger_leaves_nothing_visible(
        kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    env = backend_env(kind, request)
    home = tmp_path / "home"
    scope = new_scope()
    namespace = scope.replace("/", "__")
    source, body = "slack:C42:1", "alice: the crash-test message"
    lost = episode_id(source, body)

    with serving(home, env) as healthy:
        first = Memory(healthy.url).write(scope, "alice: before the crash", source="slack:C42:0")
        assert first.status_code == 201, first.text

    armed = {**env, "AMPUP_MEMORY_TEST_FAULT": f"after-rows@{home}"}  # point@own home
    faulty = ServerProcess(home, env=armed).start(90)
    with pytest.raises(httpx.HTTPError):
        Memory(faulty.url).write(scope, body, source=source)
    assert faulty.proc is not None and faulty.proc.wait(30) == 70  # died at the fault hook

    # The data row did land in Iceberg: the crash fell between rows and ledger row.
    rows = catalog(home, env).load_table((namespace, "episodes")).scan().to_arrow().to_pylist()
    assert [r["id"] for r in rows].count(lost) == 1

    with serving(home, env) as again:
        m = Memory(again.url)
        gone = m.episode(scope, lost)
        missing = m.episode(scope, "f" * 64)
        assert (gone.status_code, gone.json()) == (missing.status_code, missing.json()) == (
            404, missing.json())
        assert [c["seq"] for c in m.ledger(scope)] == [1]
        retry = m.write(scope, body, source=source)
        assert retry.status_code == 201, retry.text
        assert retry.json()["id"] == lost
        assert m.episode(scope, lost).json()["body"] == body
        ledger = m.ledger(scope)
        assert [c["seq"] for c in ledger] == [2, 1]
        assert ledger[0]["parent"] == ledger[1]["id"]

        done = run_cli(home, env, "maintenance", "--orphan-grace", "0s")
        assert done.returncode == 0, done.stderr
        assert '"orphan_rows": 1' in done.stdout.split(f'"{namespace}.episodes"')[1]
        tables = len(json.loads(done.stdout)["tables"])  # one tick of the bar per table
        assert "maintenance" in done.stderr and f"{tables}/{tables}" in done.stderr
        rows = catalog(home, env).load_table((namespace, "episodes")).scan().to_arrow()
        held = [r for r in rows.to_pylist() if r["id"] == lost]
        assert [r["commit_id"] for r in held] == [ledger[0]["id"]]
        assert held[0]["body"] == body  # the retry stored the body the crash lost
        assert m.episode(scope, lost).status_code == 200


# -- concurrency ------------------------------------------------------------------------------
# One chain under four concurrent server processes: tests/test_branch_safety.py
# (4 x 50 commits to one branch while two other branches merge into it).


# -- visibility -------------------------------------------------------------------------------
def test_visibility_follows_acl_and_membership(
        shared: tuple[Memory, Path, dict[str, str]]) -> None:
    alice, _, _ = shared
    bob = alice.as_user("bob" + new_scope()[1:7])
    scope = new_scope()
    assert alice.set_principal("alice", groups=["sales"], roles=["manager"]).status_code == 200
    ids, commits = {}, {}
    acls = {"all": ["*"], "alice": ["user:alice"], "sales": ["group:sales"],
            "mgr": ["role:manager"]}
    for name, acl in acls.items():
        r = alice.write(scope, f"note for {name}", acl=acl, source=f"slack:C1:{name}")
        assert r.status_code == 201, r.text
        ids[name], commits[name] = r.json()["id"], r.json()["commit"]
    fact = alice.fact(scope, "acme", "owner", "dana", "note for sales",
                      [(ids["sales"], 1), (ids["all"], 1)])
    assert fact.status_code == 201, fact.text

    def sees() -> set[str]:
        return {n for n, i in ids.items() if bob.episode(scope, i).status_code == 200}

    def sees_fact() -> bool:
        return bool(bob.facts(scope, "acme").json()["facts"])

    missing = bob.episode(scope, "e" * 64)
    hidden = bob.episode(scope, ids["alice"])
    assert (hidden.status_code, hidden.json()) == (missing.status_code, missing.json())
    assert missing.status_code == 404
    assert sees() == {"all"} and not sees_fact()

    ledger_before = alice.ledger(scope)
    assert alice.set_principal(bob.user, groups=["sales"]).status_code == 200
    assert sees() == {"all", "sales"} and sees_fact()
    assert alice.set_principal(bob.user, roles=["manager"]).status_code == 200
    assert sees() == {"all", "mgr"} and not sees_fact()
    assert alice.set_principal(bob.user).status_code == 200
    assert sees() == {"all"}
    # Membership changes touched no episode: no commit, and every episode is as written.
    assert alice.ledger(scope) == ledger_before
    for name, ep in ids.items():
        got = alice.episode(scope, ep).json()
        assert (got["commit"], got["acl"]) == (commits[name], acls[name])

    denied = bob.http.put(f"/principals/{bob.user}", json={"groups": ["sales"]})
    assert denied.status_code == 403 and denied.json()["error"]["code"] == "ACCESS_DENIED"
    bad = alice.set_principal("bad user!", groups=["x"])
    assert bad.status_code == 422


# -- time travel ------------------------------------------------------------------------------
def _reads(m: Memory, scope: str, e2: str, at: str | None = None) -> dict[str, Any]:
    extra = {"at_commit": at} if at else {}
    doc = m.http.post("/document", json={"scope": scope, "document": "handbook", **extra})
    return {
        "current": m.facts(scope, "acme", **extra).json(),
        "history": m.facts(scope, "acme", history="true", **extra).json(),
        "document": (doc.status_code, doc.json()),
        "e2": m.episode(scope, e2, **extra).status_code,
    }


def test_at_commit_reads_agree_with_the_ledger(
        shared: tuple[Memory, Path, dict[str, str]]) -> None:
    m, _, _ = shared
    scope = new_scope()
    seen: dict[str, dict[str, Any]] = {}
    e2 = hashlib.sha256(b"Budget: 20k.").hexdigest()  # doc: ids hash the body alone

    def step(r: httpx.Response) -> str:
        assert r.status_code == 201, r.text
        commit = str(r.json()["commit"])
        seen[commit] = _reads(m, scope, e2)
        return commit

    e1 = m.write(scope, "Budget: 10k.", document="handbook",
                 occurred_at="2024-01-01T00:00:00Z")
    step(e1)
    step(m.fact(scope, "acme", "budget", "10k", "10k", [(e1.json()["id"], 1)]))
    step(m.write(scope, "Budget: 20k.", document="handbook",
                 occurred_at="2024-06-01T00:00:00Z"))
    step(m.fact(scope, "acme", "budget", "20k", "20k", [(e2, 1)]))
    step(m.http.post("/close", json={"scope": scope, "entity": "acme",
                                     "predicate": "budget", "reason": "Deal lost."}))
    # Later writes must not change what an earlier commit shows.
    e3 = m.write(scope, "Budget: 30k.", document="handbook",
                 occurred_at="2024-09-01T00:00:00Z")
    assert m.fact(scope, "acme", "budget", "30k", "30k", [(e3.json()["id"], 1)]
                  ).status_code == 201

    ledger = {c["id"]: c for c in m.ledger(scope)}
    assert len(ledger) == 7
    for commit, expected in seen.items():
        assert _reads(m, scope, e2, commit) == expected, commit
        cut = ledger[commit]["seq"]
        in_ledger = {c for c, e in ledger.items() if e["seq"] <= cut}
        shown = {f["commit"] for f in expected["history"]["facts"]}
        assert shown <= in_ledger
        assert shown == {c for c in in_ledger if ledger[c]["changes"]["facts"]
                         or ledger[c]["changes"]["closures"]}
    first = next(iter(seen))
    assert seen[first]["document"][1]["body"] == "Budget: 10k."
    assert seen[first]["e2"] == 404
    assert m.facts(scope, "acme", at_commit="01" + "0" * 24).status_code == 404
    other = new_scope()
    assert m.write(other, "elsewhere").status_code == 201
    assert m.facts(other, "acme", at_commit=first).status_code == 404
