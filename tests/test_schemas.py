"""Schemas and typed queries over real HTTP, on both catalogs (SQLite, PostgreSQL).

A schema is set by an admin as a commit (history, branches, merge); with one, POST /facts
is checked and its values normalised; ``cardinality: many`` keeps every value until each is
closed; ``POST /query`` answers ``find: "facts"`` and ``find: "entities"`` exactly as a
brute-force evaluation over the same facts does, under randomized ACLs.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterator
from datetime import date
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.memory_support import (
    ADMIN_TOKEN,
    QUIET,
    Memory,
    backend_env,
    cli_in_process,
    new_scope,
    serving,
    start,
)

ADMIN = {"X-AMP-Admin-Token": ADMIN_TOKEN}


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def m(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
      ) -> Iterator[Memory]:
    proc = start(tmp_path_factory.mktemp("schemas"), backend_env(request.param, request))
    client = Memory(proc.url)
    yield client
    client.close()
    proc.stop()


def put_schema(m: Memory, scope: str, **body: Any) -> httpx.Response:
    org, team = scope.split("/")
    return m.http.put(f"/schemas/{org}/{team}", json=body, headers=ADMIN)


def get_schema(m: Memory, scope: str, **params: Any) -> dict[str, Any]:
    org, team = scope.split("/")
    r = m.http.get(f"/schemas/{org}/{team}", params=params)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def err(r: httpx.Response) -> tuple[int, str, str]:
    e = r.json()["error"]
    first = (e.get("details") or {}).get("errors", [{}])[0]
    return r.status_code, str(first.get("type", e["code"])), str(first.get("msg", e["message"]))


def query(m: Memory, scope: str, **body: Any) -> httpx.Response:
    return m.http.post("/query", json={"scope": scope, **body})


TINY = {"name": "tiny", "entities": [
    {"name": "deal", "attributes": [
        {"name": "stage", "type": "enum", "values": ["open", "won", "lost"]},
        {"name": "tags", "type": "string", "cardinality": "many"}]}]}


def test_the_schema_is_no_entity_in_listings(m: Memory) -> None:
    """The schema is kept as a fact of a reserved entity; GET /entities and GET /scopes
    list and count only the facts clients wrote."""
    scope = new_scope()
    assert put_schema(m, scope, schema=TINY).status_code == 200
    ep = m.write(scope, "deal d1 is open").json()["id"]
    r = m.fact(scope, "deal:d1", "stage", "open", "deal d1 is open", [(ep, 1)])
    assert r.status_code == 201, r.text
    listed = m.http.get("/entities", params={"scope": scope}).json()
    assert [e["entity"] for e in listed["entities"]] == ["deal:d1"] and listed["total"] == 1
    row, = [s for s in m.http.get("/scopes").json()["scopes"] if s["scope"] == scope]
    assert (row["facts"], row["entities"]) == (1, 1)
    assert get_schema(m, scope)["schema"]["name"] == "tiny"
    # Nor is it a search answer: "tiny" is a word of the schema fact's quote, and a query
    # naming only a window ranks every fact valid in it.
    for q in ("tiny deal stage", "since 2020"):
        r = m.http.post("/search", json={"scope": scope, "query": q})
        assert [f["entity"] for f in r.json()["results"]] == ["deal:d1"], r.text
        text = m.http.post("/search", json={"scope": scope, "query": q, "format": "text"})
        assert "_schema" not in text.text and "deal:d1" in text.text, text.text


def test_builtins_set_show_history_and_as_of(m: Memory) -> None:
    names = [s["name"] for s in m.http.get("/schemas").json()["schemas"]]
    assert names == ["sales", "engineering", "corpus"]
    scope = new_scope()
    assert get_schema(m, scope)["schema"] is None  # no schema: everything as before
    first = put_schema(m, scope, builtin="sales")
    assert first.status_code == 200, first.text
    v1 = first.json()
    assert v1["changed"] and v1["name"] == "sales" and len(v1["version"]) == 64
    again = put_schema(m, scope, builtin="sales").json()
    assert again["changed"] is False and again["version"] == v1["version"]
    shown = get_schema(m, scope)
    assert shown["name"] == "sales" and shown["commit"] == v1["commit"]
    assert [e["name"] for e in shown["schema"]["entities"]] == ["account", "contact",
                                                                 "opportunity"]
    v2 = put_schema(m, scope, schema=TINY).json()
    assert v2["changed"] and v2["name"] == "tiny" and v2["version"] != v1["version"]
    assert get_schema(m, scope)["name"] == "tiny"
    history = get_schema(m, scope, history="true")["history"]
    assert [h["name"] for h in history] == ["sales", "tiny"]
    assert history[0]["valid_to"] == history[1]["valid_from"]
    # as_of a time the first version held; at_commit the first version's commit
    assert get_schema(m, scope, as_of=v1["set_at"])["name"] == "sales"
    assert get_schema(m, scope, at_commit=v1["commit"])["name"] == "sales"
    messages = [c["message"] for c in m.ledger(scope)]
    assert messages[:2] == ["set schema tiny", "set schema sales"]
    # the schema's JSON is configuration, not memory: passages do not find it, and fact
    # search does not answer the reserved fact that names its version (it did: `_schema
    # schema <hash>`, quoting the schema's name), in JSON or in text
    found = query(m, scope, find="passages", query="opportunity stage amount").json()
    assert found["results"] == []
    for words in ("schema tiny", "name tiny", "opportunity stage amount"):
        r = m.http.post("/search", json={"scope": scope, "query": words})
        assert r.status_code == 200, r.text
        assert r.json()["results"] == [], r.text
        text = m.http.post("/search", json={"scope": scope, "query": words, "format": "text"})
        assert "_schema" not in text.text, text.text


def test_a_pin_or_a_snapshot_reads_the_schema_it_holds(m: Memory) -> None:
    """GET /schemas/{org}/{team} takes pin= and snapshot= as every read route does
    (docs/branches.md): the schema in force at the held commit, whatever was set since;
    it refused them (422 extra_forbidden), so a reader holding a commit could not ask
    which schema its typed queries were typed by."""
    scope = new_scope()
    assert put_schema(m, scope, builtin="sales").status_code == 200
    pin = m.http.post("/pin", json={"scope": scope, "ttl": "1h"}).json()["id"]
    snap = m.http.post("/snapshots", json={"scopes": [scope]}).json()["id"]
    assert put_schema(m, scope, schema=TINY).json()["name"] == "tiny"
    assert get_schema(m, scope)["name"] == "tiny"
    for hold in ({"pin": pin}, {"snapshot": snap}):
        held = get_schema(m, scope, **hold)
        assert held["name"] == "sales" and held["at_commit"] is not None, held
        org, team = scope.split("/")
        mixed = m.http.get(f"/schemas/{org}/{team}", params={**hold, "at_commit": held["commit"]})
        assert err(mixed)[:2] == (422, "hold_combined"), mixed.text
    other = new_scope().split("/")
    wrong = m.http.get(f"/schemas/{other[0]}/{other[1]}", params={"pin": pin})
    assert err(wrong)[:2] == (422, "hold_scope"), wrong.text
    m.http.delete(f"/pin/{pin}")
    org, team = scope.split("/")
    assert m.http.get(f"/schemas/{org}/{team}", params={"pin": pin}).status_code == 410


def test_the_next_typed_query_sees_a_schema_change(m: Memory) -> None:
    """A typed query reads the schema fact each time and keeps the schema it names by
    version: a new version (and a return to an old one, kept from before) is what the
    very next query types by."""
    scope = new_scope()
    ship = {"name": "fleet", "entities": [
        {"name": "ship", "attributes": [{"name": "port", "type": "string"}]}]}

    def typed(kind: str) -> tuple[int, str | None, str]:
        r = query(m, scope, find="entities", type=kind)
        body = r.json()
        return (r.status_code, body.get("schema"),
                "" if r.status_code == 200 else err(r)[1])

    assert put_schema(m, scope, schema=TINY).status_code == 200
    assert typed("deal") == (200, "tiny", "")
    assert typed("ship")[2] == "entity_type_unknown"
    assert put_schema(m, scope, schema=ship).status_code == 200
    assert typed("ship") == (200, "fleet", "")
    assert typed("deal")[2] == "entity_type_unknown"
    assert put_schema(m, scope, schema=TINY).json()["changed"] is True
    assert typed("deal") == (200, "tiny", "")
    assert typed("ship")[2] == "entity_type_unknown"


def test_an_admin_write_is_committed_as_the_user_it_names(m: Memory) -> None:
    """PUT /schemas and PUT /procedures/sources take their author by one rule
    (`admin_author`): the X-AmpUp-User named, a blank or malformed one a 401 as on every
    route, none at all "admin"."""
    scope = new_scope()
    org, team = scope.split("/")
    plain = httpx.Client(base_url=m.http.base_url, timeout=60)
    try:
        cases = [({"X-AmpUp-User": "carol"}, "carol"), ({}, "admin")]
        for i, (named, author) in enumerate(cases):
            body = {"builtin": "sales"} if i == 0 else {"builtin": "engineering"}
            r = plain.put(f"/schemas/{org}/{team}", json=body, headers={**ADMIN, **named})
            assert r.status_code == 200, r.text
            assert m.ledger(scope)[0]["author"] == author
        for path, body in ((f"/schemas/{org}/{team}", {"builtin": "corpus"}),
                           ("/procedures/sources", {"scope": scope, "documents": ["d"]})):
            for named in ("bad user", ""):  # named, even blank: a valid id or a 401
                bad = plain.put(path, json=body, headers={**ADMIN, "X-AmpUp-User": named})
                assert bad.status_code == 401, (path, named, bad.text)
                assert bad.json()["error"]["code"] == "UNAUTHENTICATED"
        assert get_schema(m, scope)["schema"]["name"] == "engineering"
    finally:
        plain.close()


def test_with_keys_on_an_admin_write_is_committed_as_the_key_says(tmp_path: Path) -> None:
    """Keys on, X-AmpUp-User names no author (api.md, Caller): an admin key's write is
    committed as the key's user (a header naming anyone else is a 401) and the admin
    token's as `admin`, whatever user the header names; admin_author read the header and
    let an admin commit as anyone."""
    def key(*args: str) -> str:
        done = cli_in_process(tmp_path, {}, "keys", "create", *args)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip().splitlines()[-1]

    ops = key("--agent", "ops", "--admin", "--user", "olga")
    bare = key("--agent", "ops2", "--admin")
    env = {**QUIET, "AMP_REQUIRE_KEYS": "1"}
    with serving(tmp_path, env) as srv, httpx.Client(base_url=srv.url, timeout=60) as http:
        reader = {"X-AMP-Agent-ID": "ops", "X-AMP-API-Key": ops}
        scope = new_scope()
        org, team = scope.split("/")
        cases = [(reader, "olga"), ({"X-AMP-Admin-Token": ADMIN_TOKEN}, "admin"),
                 ({"X-AMP-Agent-ID": "ops2", "X-AMP-API-Key": bare}, "admin")]
        for i, (creds, author) in enumerate(cases):
            headers = {**creds, "X-AmpUp-User": "mallory"}
            if "X-AMP-API-Key" in creds:
                spoofed = http.put("/procedures/sources", headers=headers,
                                   json={"scope": scope, "documents": ["x"]})
                assert spoofed.status_code == 401, spoofed.text
                headers = creds
            for path, body in (
                    (f"/schemas/{org}/{team}", {"builtin": ["sales", "engineering",
                                                            "corpus"][i]}),
                    ("/procedures/sources", {"scope": scope, "documents": [f"d{i}"]})):
                r = http.put(path, json=body, headers=headers)
                assert r.status_code == 200, r.text
                top = http.get("/ledger", params={"scope": scope, "limit": 1},
                               headers=reader).json()["commits"][0]
                assert top["author"] == author, (path, creds, top)
        # A key that does not check out is the routes' 401, even beside the admin token.
        r = http.put(f"/schemas/{org}/{team}", json={"builtin": "sales"}, headers={
            "X-AMP-Admin-Token": ADMIN_TOKEN, "X-AMP-Agent-ID": "ops", "X-AMP-API-Key": "x"})
        assert r.status_code == 401, r.text


def test_put_schema_is_admin_only_and_names_the_first_problem(m: Memory) -> None:
    scope = new_scope()
    org, team = scope.split("/")
    r = m.http.put(f"/schemas/{org}/{team}", json={"builtin": "sales"})
    assert r.status_code in (401, 403), r.text
    assert err(put_schema(m, scope, builtin="nope"))[0] == 422
    code, kind, _ = err(put_schema(m, scope))
    assert (code, kind) == (422, "schema_missing")
    bad_ref = {"name": "x", "entities": [{"name": "deal", "attributes": [
        {"name": "owner", "type": "ref", "entity": "person"}]}]}
    code, kind, msg = err(put_schema(m, scope, schema=bad_ref))
    assert (code, kind) == (422, "schema_invalid") and "person" in msg
    no_values = {"name": "x", "entities": [{"name": "deal", "attributes": [
        {"name": "stage", "type": "enum"}]}]}
    r = put_schema(m, scope, schema=no_values)
    assert err(r)[:2] == (422, "schema_invalid") and "values" in err(r)[2]
    loc = r.json()["error"]["details"]["errors"][0]["loc"]
    assert loc[:5] == ["body", "schema", "entities", 0, "attributes"], loc
    bad_extract = {**TINY, "extract": [{"episode_types": ["fax"], "targets": {"deal": []}}]}
    assert "fax" in err(put_schema(m, scope, schema=bad_extract))[2]
    assert get_schema(m, scope)["schema"] is None  # nothing was committed


def test_a_schema_too_large_to_store_is_a_422_not_a_500(m: Memory) -> None:
    """Every part within its limits, the request under 4 MiB: a schema stored as more than
    a body's 1,000,000 bytes failed inside the commit with the server's unexpected error.
    It is refused like any other schema problem, and nothing is committed."""
    scope = new_scope()
    big = {"name": "big", "entities": [
        {"name": f"e{i}", "attributes": [
            {"name": f"a{j}", "type": "enum", "values": [f"v{k}" for k in range(10)]}
            for j in range(200)]} for i in range(100)]}
    assert len(json.dumps(big)) < 4_000_000
    r = put_schema(m, scope, schema=big)
    code, kind, msg = err(r)
    assert (code, kind) == (422, "schema_invalid"), r.text
    assert "1000000 bytes" in msg and r.json()["error"]["details"]["errors"][0]["loc"] == [
        "body", "schema"], r.text
    assert get_schema(m, scope)["schema"] is None
    big["entities"] = big["entities"][:5]  # the same shape, smaller: accepted
    assert put_schema(m, scope, schema=big).status_code == 200


def _episode(m: Memory, scope: str, body: str, acl: list[str] | None = None,
             branch: str | None = None) -> str:
    extra = {"branch": branch} if branch else {}
    r = m.write(scope, body, acl=acl, source=f"doc:{random.random()}", **extra)
    assert r.status_code == 201, r.text
    ep: str = r.json()["id"]
    return ep


def test_facts_are_checked_and_normalised(m: Memory) -> None:
    scope = new_scope()
    ep = _episode(m, scope, "Acme renewal: $50k, closes July 4, 2025, stage negotiation.")
    # without a schema: as before, but no object values and no reserved entity
    assert m.fact(scope, "acme", "amount", "$50k", "$50k", [(ep, 1)]).status_code == 201
    assert err(m.fact(scope, "acme", "amount", {"amount": 5}, "$50k", [(ep, 1)]))[0] == 422
    assert err(m.fact(scope, "_schema", "schema", "x", "$50k", [(ep, 1)]))[1] == \
        "entity_reserved"
    assert put_schema(m, scope, builtin="sales").status_code == 200
    opp = "opportunity:acme-2025"

    def post(entity: str, predicate: str, value: Any) -> httpx.Response:
        return m.fact(scope, entity, predicate, value, "Acme renewal", [(ep, 1)])

    code, kind, msg = err(post("acme", "amount", "$50k"))
    assert (code, kind) == (422, "entity_type_unknown")
    assert "account, contact, opportunity" in msg
    # a known type with no key says so (it said the id named no entity type); the same
    # type, so extraction counts it under the same reason
    code, kind, msg = err(post("opportunity:", "amount", "$50k"))
    assert (code, kind) == (422, "entity_type_unknown") and "opportunity:<key>" in msg, msg
    code, kind, msg = err(post(opp, "color", "red"))
    assert (code, kind) == (422, "predicate_unknown") and "next_step" in msg
    code, kind, msg = err(post(opp, "stage", "Negotiation"))  # enums are exact
    assert (code, kind) == (422, "value_invalid") and "negotiation" in msg
    assert err(post(opp, "close_date", "soon"))[1] == "value_invalid"
    assert err(post(opp, "champion", "account:acme"))[1] == "value_invalid"
    for predicate, raw in (("amount", "$50k"), ("close_date", "July 4, 2025"),
                           ("stage", "negotiation"), ("champion", "jane-doe")):
        assert post(opp, predicate, raw).status_code == 201
    r = m.http.post("/facts/batch", json={"scope": scope, "facts": [
        {"entity": opp, "predicate": "budget", "value": {"amount": "60,000", "currency": "EUR"},
         "quote": "Acme renewal", "cites": [{"episode": ep, "unit": 1}]},
        {"entity": opp, "predicate": "probability", "value": "high",
         "quote": "Acme renewal", "cites": [{"episode": ep, "unit": 1}]}]})
    assert err(r)[:2] == (422, "value_invalid")
    assert r.json()["error"]["details"]["errors"][0]["loc"] == ["body", "facts", 1, "value"]
    got = {f["predicate"]: f["value"] for f in m.facts(scope, opp).json()["facts"]}
    assert got == {"amount": {"amount": 50000, "currency": "USD"},
                   "close_date": "2025-07-04", "stage": "negotiation",
                   "champion": "contact:jane-doe"}


def test_cardinality_many_keeps_every_value_until_closed(m: Memory) -> None:
    scope = new_scope()
    assert put_schema(m, scope, schema=TINY).status_code == 200
    ep = _episode(m, scope, "Deal d1 is open, tagged urgent and tagged emea.")
    deal = "deal:d1"
    for predicate, value in (("stage", "open"), ("tags", "urgent"), ("tags", "emea"),
                             ("stage", "won")):
        assert m.fact(scope, deal, predicate, value, "Deal d1", [(ep, 1)]).status_code == 201
    facts = m.facts(scope, deal).json()["facts"]
    assert sorted((f["predicate"], f["value"]) for f in facts) == [
        ("stage", "won"), ("tags", "emea"), ("tags", "urgent")]
    # a many-valued closure names its value; a one-valued one must not
    close = {"scope": scope, "entity": deal, "predicate": "tags", "reason": "not urgent now"}
    assert err(m.http.post("/close", json=close))[1] == "value_required"
    assert m.http.post("/close", json={**close, "value": "urgent"}).status_code == 201
    assert m.http.post("/close", json={**close, "value": "urgent"}).status_code == 404
    one = {"scope": scope, "entity": deal, "predicate": "stage", "reason": "x", "value": "won"}
    assert err(m.http.post("/close", json=one))[1] == "value_unexpected"
    assert [f["value"] for f in m.facts(scope, deal, predicate="tags").json()["facts"]] == [
        "emea"]
    history = m.facts(scope, deal, predicate="tags", history="true").json()["facts"]
    assert sorted((f["kind"], f["value"]) for f in history) == [
        ("closure", "urgent"), ("value", "emea"), ("value", "urgent")]
    assert err(m.http.post("/close", json={
        "scope": scope, "entity": "_schema", "predicate": "schema", "reason": "x"}))[1] == \
        "entity_reserved"


def test_schema_lives_on_a_branch_until_merged(m: Memory) -> None:
    scope = new_scope()
    ep = _episode(m, scope, "Deal d1 is open.")
    assert put_schema(m, scope, builtin="corpus").status_code == 200
    assert m.http.post("/branches", json={"scope": scope, "name": "typed"}).status_code == 201
    assert put_schema(m, scope, schema=TINY, branch="typed").status_code == 200
    assert get_schema(m, scope)["name"] == "corpus"
    assert get_schema(m, scope, branch="typed")["name"] == "tiny"
    # the branch's schema checks the branch's writes only
    body = {"scope": scope, "entity": "deal:d1", "predicate": "stage", "value": "open",
            "quote": "Deal d1", "cites": [{"episode": ep, "unit": 1}]}
    assert m.http.post("/facts", json={**body, "branch": "typed"}).status_code == 201
    assert err(m.http.post("/facts", json=body))[1] == "entity_type_unknown"
    # Carrying the branch's schema into main sets main's: admin rights, as PUT /schemas.
    # Anyone may still merge it into another branch, or fork the schema's branch.
    for dry in (True, False):
        refused = m.http.post("/merge", json={"scope": scope, "from": "typed", "dry_run": dry})
        assert err(refused)[:2] == (403, "ACCESS_DENIED") and "schema" in refused.text, refused.text
    assert get_schema(m, scope)["name"] == "corpus"
    assert m.http.post("/branches", json={"scope": scope, "name": "mine"}).status_code == 201
    into_mine = m.http.post("/merge", json={"scope": scope, "from": "typed", "into": "mine"})
    assert into_mine.status_code == 200 and into_mine.json()["merged"], into_mine.text
    assert get_schema(m, scope, branch="mine")["name"] == "tiny"
    merged = m.http.post("/merge", json={"scope": scope, "from": "typed"}, headers=ADMIN)
    assert merged.status_code == 200 and merged.json()["merged"], merged.text
    assert get_schema(m, scope)["name"] == "tiny"
    assert m.http.post("/facts", json={**body, "value": "won"}).status_code == 201
    # a many-valued attribute merges per value: tags added on both sides are united
    assert m.http.post("/branches", json={"scope": scope, "name": "tags"}).status_code == 201
    tag = {**body, "predicate": "tags"}
    assert m.http.post("/facts", json={**tag, "value": "emea", "branch": "tags"}
                       ).status_code == 201
    assert m.http.post("/facts", json={**tag, "value": "urgent"}).status_code == 201
    merged = m.http.post("/merge", json={"scope": scope, "from": "tags"})
    assert merged.status_code == 200 and merged.json()["merged"], merged.text
    assert sorted(f["value"] for f in m.facts(scope, "deal:d1", predicate="tags").json()[
        "facts"]) == ["emea", "urgent"]
    # a schema changed on both sides to different versions is a merge conflict
    assert m.http.post("/branches", json={"scope": scope, "name": "b2"}).status_code == 201
    assert put_schema(m, scope, builtin="sales", branch="b2").status_code == 200
    assert put_schema(m, scope, builtin="engineering").status_code == 200
    r = m.http.post("/merge", json={"scope": scope, "from": "b2"}, headers=ADMIN)
    assert r.status_code == 409 and r.json()["error"]["code"] == "MERGE_CONFLICT"


# -- typed queries against brute force ----------------------------------------------------------
STAGES = ["prospecting", "discovery", "demo", "proposal", "negotiation", "closed_won",
          "closed_lost"]
OPEN = STAGES[:5]
ACLS = [["*"], ["group:sales"], ["group:emea"], ["user:bob"]]
READERS = {"alice": set(), "bob": {"group:sales"}, "carol": {"group:sales", "group:emea"}}


def _may(user: str, acl: list[str]) -> bool:
    return any(a == "*" or a == f"user:{user}" or a in READERS[user] for a in acl)


def test_typed_queries_match_brute_force(m: Memory) -> None:
    rng = random.Random(11)
    scope = new_scope()
    for user, groups in READERS.items():
        assert m.set_principal(user, sorted(g.split(":")[1] for g in groups)).status_code == 200
    assert put_schema(m, scope, builtin="sales").status_code == 200
    # Each opportunity: per attribute one or two versions (older then newer), each citing an
    # episode with a random ACL. Truth per reader: the newest version it may read.
    facts: list[dict[str, Any]] = []
    versions: dict[tuple[str, str], list[tuple[Any, list[str]]]] = {}
    episodes: dict[str, str] = {}

    def cite(acl: list[str]) -> str:
        key = ",".join(acl)
        if key not in episodes:
            episodes[key] = _episode(m, scope, f"Pipeline notes for {key}.", acl=acl)
        return episodes[key]

    for n in range(30):
        opp = f"opportunity:o{n:02d}"
        attrs = {
            "stage": [rng.choice(STAGES) for _ in range(rng.randint(1, 2))],
            "amount": [{"amount": rng.choice([20, 45, 50, 51, 80, 120]) * 1000,
                        "currency": rng.choice(["USD", "USD", "EUR"])}
                       for _ in range(rng.randint(1, 2))],
            "close_date": [date(2025, rng.randint(5, 11), rng.randint(1, 28)).isoformat()
                           for _ in range(rng.randint(1, 2))],
            "owner": [rng.choice(["ann", "ben", "cy"])],
            "next_step": [f"call {n}"],
        }
        for predicate, values in attrs.items():
            for i, value in enumerate(values):
                acl = rng.choice(ACLS)
                versions.setdefault((opp, predicate), []).append((value, acl))
                facts.append({"entity": opp, "predicate": predicate, "value": value,
                              "quote": "Pipeline notes", "valid_from":
                              f"2025-0{1 + i}-01T00:00:00Z",
                              "cites": [{"episode": cite(acl), "unit": 1}]})
    # each fact posted by a reader of its episode (bob reads user:bob, carol the rest)
    for writer in ("bob", "carol"):
        mine = [f for f in facts if (writer == "bob") == (f["cites"][0]["episode"]
                                                         == episodes.get("user:bob"))]
        r = m.as_user(writer).http.post("/facts/batch", json={"scope": scope, "facts": mine})
        assert r.status_code == 201, r.text

    def truth(user: str) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for (opp, predicate), vs in versions.items():
            seen = [v for v, acl in vs if _may(user, acl)]
            if seen:
                out.setdefault(opp, {})[predicate] = seen[-1]
        return out

    def open_big_this_quarter(rec: dict[str, Any]) -> bool:
        amount = rec.get("amount")
        return (rec.get("stage") in OPEN and amount is not None
                and amount["currency"] == "USD" and amount["amount"] > 50000
                and "2025-07-01" <= rec.get("close_date", "") <= "2025-09-30")

    the_query = {"find": "entities", "type": "opportunity", "where": [
        {"attribute": "stage", "op": "in", "value": OPEN},
        {"attribute": "amount", "op": "gt", "value": "$50k"},
        {"attribute": "close_date", "op": "gte", "value": "2025-07-01"},
        {"attribute": "close_date", "op": "lte", "value": "2025-09-30"}],
        "select": ["owner", "next_step", "amount", "close_date", "stage"],
        "order_by": [{"attribute": "amount", "desc": True}, {"attribute": "entity"}]}
    nonempty = 0
    for user in READERS:
        reader = m.as_user(user)
        expected = truth(user)
        want = sorted((e for e, rec in expected.items() if open_big_this_quarter(rec)),
                      key=lambda e: (-expected[e]["amount"]["amount"], e))
        r = query(reader, scope, **the_query)
        assert r.status_code == 200, r.text
        got = r.json()
        assert [e["entity"] for e in got["entities"]] == want, user
        nonempty += bool(want)
        for e in got["entities"]:
            for name, shown in e["attributes"].items():
                assert shown["value"] == expected[e["entity"]][name]
                assert shown["cites"] and shown["quote"] == "Pipeline notes"
        # every entity, every attribute, paged two at a time
        seen: list[dict[str, Any]] = []
        offset: int | None = 0
        while offset is not None:
            page = query(reader, scope, find="entities", type="opportunity", limit=2,
                         offset=offset).json()
            seen += page["entities"]
            offset = page["next_offset"]
        assert {e["entity"]: {k: v["value"] for k, v in e["attributes"].items()}
                for e in seen} == expected
        # the other operators on entities, one condition each, against the truth
        for cond, holds in [
                ({"attribute": "owner", "op": "ne", "value": "ann"},
                 lambda rec: rec.get("owner") not in (None, "ann")),
                ({"attribute": "owner", "op": "eq", "value": "ben"},
                 lambda rec: rec.get("owner") == "ben"),
                ({"attribute": "next_step", "op": "contains", "value": "CALL 1"},
                 lambda rec: "call 1" in rec.get("next_step", "")),
                ({"attribute": "amount", "op": "lt", "value": {"amount": 50000,
                                                               "currency": "EUR"}},
                 lambda rec: "amount" in rec and rec["amount"]["currency"] == "EUR"
                 and rec["amount"]["amount"] < 50000),
                ({"attribute": "close_date", "op": "lt", "value": "2025-07-15"},
                 lambda rec: "" < rec.get("close_date", "") < "2025-07-15")]:
            r = query(reader, scope, find="entities", type="opportunity", where=[cond],
                      limit=1000)
            assert r.status_code == 200, r.text
            assert [e["entity"] for e in r.json()["entities"]] == sorted(
                e for e, rec in expected.items() if holds(rec)), (user, cond)
        # find: facts, money within a currency: EUR amounts never compare with a USD operand
        r = query(reader, scope, find="facts", type="opportunity", predicate=["amount"],
                  where=[{"op": "lte", "value": {"amount": 50000, "currency": "EUR"}}],
                  order_by=[{"attribute": "value"}, {"attribute": "entity"}])
        want_facts = sorted(((e, rec["amount"]["amount"]) for e, rec in expected.items()
                             if "amount" in rec and rec["amount"]["currency"] == "EUR"
                             and rec["amount"]["amount"] <= 50000),
                            key=lambda x: (x[1], x[0]))
        assert r.status_code == 200, r.text
        assert [(f["entity"], f["value"]["amount"]) for f in r.json()["facts"]] == want_facts
        r = query(reader, scope, find="facts", predicate=["owner"],
                  where=[{"op": "ne", "value": "ann"}])
        assert sorted(f["entity"] for f in r.json()["facts"]) == sorted(
            e for e, rec in expected.items() if rec.get("owner") not in (None, "ann"))
    assert nonempty >= 2  # the sample exercises the query for more than one reader


def _reference(m: Memory, scope: str, entities: list[str],
               params: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Each entity's current values as GET /facts reads them (every version read from the
    read index and evaluated on the spot, nothing kept): one value per one-valued
    attribute, the sorted list of a many-valued one, each as (value, fact, end)."""
    out: dict[str, dict[str, Any]] = {}
    for entity in entities:
        r = m.facts(scope, entity, **params)
        assert r.status_code == 200, r.text
        by_predicate: dict[str, list[Any]] = {}
        for f in r.json()["facts"]:
            by_predicate.setdefault(f["predicate"], []).append(
                (json.dumps(f["value"], sort_keys=True), f["id"], f["valid_to"]))
        if by_predicate:
            out[entity] = {p: sorted(vs) if p in ("competitors", "risks") else vs[0]
                           for p, vs in by_predicate.items() if len(vs) == 1 or p in (
                               "competitors", "risks")}
            assert all(len(vs) == 1 for p, vs in by_predicate.items()
                       if p not in ("competitors", "risks"))
    return out


def _answered(m: Memory, scope: str, params: dict[str, str], **body: Any,
              ) -> tuple[list[str], dict[str, dict[str, Any]]]:
    r = query(m, scope, find="entities", type="opportunity", limit=1000, **params, **body)
    assert r.status_code == 200, r.text

    def shown(w: dict[str, Any]) -> tuple[str, str, str | None]:
        return (json.dumps(w["value"], sort_keys=True), w["fact"], w["valid_to"])

    got = {e["entity"]: {name: sorted(shown(w) for w in v) if isinstance(v, list)
                         else shown(v) for name, v in e["attributes"].items()}
           for e in r.json()["entities"]}
    return [e["entity"] for e in r.json()["entities"]], got


def test_typed_queries_follow_commits_exactly(m: Memory) -> None:
    """Writes (values, a new entity, closures seen by some readers only, an ACL narrowed,
    a branch) interleaved with the same queries: after each commit every answer, for every
    reader and view (now, as_of, a branch, at_commit), equals what the facts read afresh
    say (the server folds each commit into what it kept for the view; this checks the
    folded answer against an evaluation from scratch)."""
    rng = random.Random(5)
    scope = new_scope()
    for user, groups in READERS.items():
        assert m.set_principal(user, sorted(g.split(":")[1] for g in groups)).status_code == 200
    assert put_schema(m, scope, builtin="sales").status_code == 200
    eps = {",".join(acl): _episode(m, scope, f"Pipeline notes ({acl[0]}).", acl=acl)
           for acl in ACLS}
    opps = [f"opportunity:o{n:02d}" for n in range(6)]
    month = iter(range(1, 13))

    def post(entities: list[str], branch: str | None = None) -> str:
        """New versions of a few attributes of ``entities``, each citing a random episode,
        posted by a reader of it (bob reads user:bob, carol the rest); the last commit."""
        facts: dict[str, list[dict[str, Any]]] = {"bob": [], "carol": []}
        m_no = next(month)
        when = f"2025-{m_no:02d}-01T00:00:00Z"
        for opp in entities:
            for predicate in rng.sample(["stage", "amount", "owner", "competitors"], 2):
                value = {"stage": rng.choice(STAGES), "owner": rng.choice(["ann", "ben"]),
                         "amount": f"${m_no * 10 + rng.choice([0, 5])}k",  # grows
                         "competitors": rng.choice(["rivals", "others"])}[predicate]
                acl = rng.choice(ACLS)
                writer = "bob" if acl == ["user:bob"] else "carol"
                facts[writer].append({
                    "entity": opp, "predicate": predicate, "value": value,
                    "quote": "Pipeline notes", "valid_from": when,
                    "cites": [{"episode": eps[",".join(acl)], "unit": 1}]})
        commit = ""
        for writer, items in facts.items():
            if items:
                extra = {"branch": branch} if branch else {}
                r = m.as_user(writer).http.post("/facts/batch", json={
                    "scope": scope, "facts": items, **extra})
                assert r.status_code == 201, r.text
                commit = r.json()["commit"]
        return commit

    views: list[tuple[str, dict[str, str]]] = []

    def check() -> None:
        for user in READERS:
            reader = m.as_user(user)
            for name, params in [("now", {}), ("as_of", {"as_of": "2025-04-15T00:00:00Z"}),
                                 *views]:
                if name != "now" and user == "bob":
                    continue  # every view for two readers (kept short)
                want = _reference(reader, scope, opps, params)
                order, got = _answered(reader, scope, params)
                assert got == want, (user, name)
                assert order == sorted(want), (user, name)
                if name not in ("now", "branch"):
                    continue
                # a condition and an order read the columns kept for the view
                order, _ = _answered(reader, scope, params, where=[
                    {"attribute": "amount", "op": "gt", "value": "$50k"}],
                    order_by=[{"attribute": "amount", "desc": True},
                              {"attribute": "entity"}])
                big = [e for e, rec in want.items() if "amount" in rec
                       and json.loads(rec["amount"][0])["amount"] > 50000]
                assert order == sorted(big, key=lambda e: (
                    -json.loads(want[e]["amount"][0])["amount"], e)), (user, name)
                order, _ = _answered(reader, scope, params, where=[
                    {"attribute": "competitors", "op": "eq", "value": "rivals"}])
                assert order == sorted(e for e, rec in want.items() if any(
                    v[0] == '"rivals"' for v in rec.get("competitors", []))), (user, name)
                for op in ("eq", "ne"):
                    order, _ = _answered(reader, scope, params, where=[
                        {"attribute": "owner", "op": op, "value": "ann"}],
                        order_by=[{"attribute": "amount"}, {"attribute": "entity"}])
                    chosen = [e for e, rec in want.items() if "owner" in rec
                              and (rec["owner"][0] == '"ann"') == (op == "eq")]
                    assert order == sorted(chosen, key=lambda e: (
                        "amount" not in want[e], json.loads(want[e]["amount"][0])[
                            "amount"] if "amount" in want[e] else 0, e)), (user, name, op)

    post(opps[:4])
    first = post(opps[2:6])
    views.append(("at_commit", {"at_commit": first}))
    check()
    post(rng.sample(opps, 3))  # newer values
    check()
    post(["opportunity:o99"])  # a new entity, last in entity order
    opps.append("opportunity:o99")
    check()
    # a closure whose reason only group:sales reads: bob and carol lose the value, alice
    # (if she saw it) keeps it
    carol = m.as_user("carol")
    closing = next(o for o in opps if carol.facts(scope, o, predicate="stage").json()["facts"])
    r = carol.http.post("/close", json={"scope": scope, "entity": closing, "predicate": "stage",
                                        "reason": "on hold", "acl": ["group:sales"]})
    assert r.status_code == 201, r.text
    check()
    many = next(o for o in opps if carol.facts(scope, o, predicate="competitors").json()["facts"])
    value = carol.facts(scope, many, predicate="competitors").json()["facts"][0]["value"]
    r = carol.http.post("/close", json={"scope": scope, "entity": many,
                                        "predicate": "competitors", "value": value,
                                        "reason": "dropped out", "acl": ["*"]})
    assert r.status_code == 201, r.text
    check()
    # an ACL narrowed: every value citing the episode leaves alice's and bob's answers
    r = m.http.put(f"/episodes/{eps['*']}/acl", json={"scope": scope, "acl": ["group:emea"]},
                   headers=ADMIN)
    assert r.status_code == 200, r.text
    check()
    # a branch: its own writes, main's not
    assert m.http.post("/branches", json={"scope": scope, "name": "what_if"}).status_code == 201
    views.append(("branch", {"branch": "what_if"}))
    check()
    post(rng.sample(opps, 3), branch="what_if")
    post(rng.sample(opps, 2))
    check()
    # and widened again; an episode written with no facts is a commit too
    r = m.as_user("carol").http.put(f"/episodes/{eps['*']}/acl",
                                    json={"scope": scope, "acl": ["*"]}, headers=ADMIN)
    assert r.status_code == 200, r.text
    _episode(m, scope, "Unrelated note.", acl=["user:bob"])
    check()


def test_typed_query_errors(m: Memory) -> None:
    scope = new_scope()
    assert put_schema(m, scope, builtin="sales").status_code == 200
    cases = [
        ({"find": "entities"}, "missing"),
        ({"find": "entities", "type": "ship"}, "entity_type_unknown"),
        ({"find": "entities", "type": "opportunity", "select": ["colour"]},
         "attribute_unknown"),
        ({"find": "entities", "type": "opportunity",
          "where": [{"attribute": "amount", "op": "gt", "value": "lots"}]}, "value_invalid"),
        ({"find": "entities", "type": "opportunity",
          "where": [{"attribute": "amount", "op": "contains", "value": "5"}]}, "op_invalid"),
        ({"find": "facts", "where": [{"attribute": "x", "op": "eq", "value": 1}]},
         "attribute_unexpected"),
        ({"find": "rows"}, "literal_error"),
    ]
    for body, kind in cases:
        r = query(m, scope, **body)
        assert err(r)[:2] == (422, kind), (body, r.text)
    # a scope without a schema still answers, comparing plain JSON values
    bare = new_scope()
    ep = _episode(m, bare, "Deal x is worth 10.")
    assert m.fact(bare, "deal:x", "worth", 10, "worth 10", [(ep, 1)]).status_code == 201
    r = query(m, bare, find="entities", type="deal",
              where=[{"attribute": "worth", "op": "gte", "value": 10}])
    assert [e["entity"] for e in r.json()["entities"]] == ["deal:x"]
    # a repeated query sees the next commit, and an ACL narrowed since (rows are reused
    # between identical queries; who sees what is decided on each)
    ep2 = _episode(m, bare, "Deal y is worth 12.")
    assert m.fact(bare, "deal:y", "worth", 12, "worth 12", [(ep2, 1)]).status_code == 201
    again = {"find": "entities", "type": "deal"}
    assert [e["entity"] for e in query(m, bare, **again).json()["entities"]] == [
        "deal:x", "deal:y"]
    r = m.http.put(f"/episodes/{ep2}/acl", json={"scope": bare, "acl": ["user:alice"]})
    assert r.status_code == 200, r.text
    bob = m.as_user("bob")
    assert [e["entity"] for e in query(bob, bare, **again).json()["entities"]] == ["deal:x"]
    assert [e["entity"] for e in query(m, bare, **again).json()["entities"]] == [
        "deal:x", "deal:y"]


def test_a_money_text_of_many_spaces_is_refused_at_once(m: Memory) -> None:
    """A money operand or value is read by one pattern: a refused text with long runs of
    spaces took time cubic in their length (3,000 spaces: some 20 s of CPU per request)."""
    scope = new_scope()
    assert put_schema(m, scope, builtin="sales").status_code == 200
    ep = _episode(m, scope, "Acme renewal: $50k.")
    spaced = "1" + " " * 3000 + "x"  # a fact's value: at most 4,000 characters
    began = time.monotonic()
    r = query(m, scope, find="entities", type="opportunity",
              where=[{"attribute": "amount", "op": "gt", "value": spaced}])
    assert err(r)[:2] == (422, "value_invalid"), r.text
    assert err(m.fact(scope, "opportunity:acme", "amount", spaced, "$50k", [(ep, 1)]))[0] == 422
    assert time.monotonic() - began < 5
    spaced = "  USD " + " " * 1000 + "50" + " " * 1000 + "k " + " " * 1000
    r = m.fact(scope, "opportunity:acme", "amount", spaced, "$50k", [(ep, 1)])
    assert r.status_code == 201, r.text


def test_schema_commands(tmp_path: Path) -> None:
    listed = cli_in_process(tmp_path, QUIET, "schema", "list")
    assert listed.returncode == 0 and "opportunity: name, account, stage" in listed.stdout
    assert "competitors*" in listed.stdout  # many-valued attributes are marked
    scope = new_scope()
    made = cli_in_process(tmp_path, QUIET, "schema", "set", scope, "--builtin", "engineering")
    assert made.returncode == 0, made.stderr
    assert json.loads(made.stdout)["changed"] is True
    shown = json.loads(cli_in_process(tmp_path, QUIET, "schema", "show", scope).stdout)
    assert shown["name"] == "engineering" and shown["commit"]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"name": "x", "entities": [{"name": "a", "attributes": [
        {"name": "b", "type": "ref", "entity": "nope"}]}]}))
    refused = cli_in_process(tmp_path, QUIET, "schema", "set", scope, "--file", str(bad))
    assert refused.returncode != 0 and "nope" in refused.stderr
    assert json.loads(cli_in_process(tmp_path, QUIET, "schema", "show", scope).stdout)[
        "name"] == "engineering"
    # Neither or both: the flags are named (the API's message named `builtin` and `schema`).
    for flags in ([], ["--builtin", "sales", "--file", str(bad)]):
        refused = cli_in_process(tmp_path, QUIET, "schema", "set", scope, *flags)
        assert refused.returncode == 2 and refused.stderr == (
            "error: give one of --builtin NAME (sales, engineering or corpus) or --file "
            "PATH\n"), refused.stderr
    builtin = json.loads(cli_in_process(tmp_path, QUIET, "schema", "show", "--builtin", "corpus"
                                        ).stdout)
    assert [e["name"] for e in builtin["entities"]] == ["document", "topic", "claim",
                                                        "definition"]


def _warm_up_done(m: Memory, scope: str) -> bool:
    r = m.http.get("/status", headers=ADMIN)
    assert r.status_code == 200, r.text
    timer = next(t for t in r.json()["timers"] if t["name"] == "typed query warm-up")
    assert timer["last_error"] is None, timer
    return timer["runs"] >= 1 and scope in (timer["last_result"] or "")


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_typed_answers_same_cold_warm_and_after_restart(
        kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """The first typed query (nothing kept), the same query again (kept), after a restart
    once the server's warm-up built the type (a caller who reads every citation finds it;
    the others fold from it), and after one more restart at once, answer alike, and as the
    facts read afresh say."""
    rng = random.Random(18)
    env = backend_env(kind, request)
    scope = new_scope()
    opps = [f"opportunity:w{n:02d}" for n in range(12)]
    queries: list[dict[str, Any]] = [
        {},
        {"select": ["owner"]},  # lists only entities with an owner someone may see
        {"where": [{"attribute": "amount", "op": "gt", "value": "$50k"}],
         "order_by": [{"attribute": "amount", "desc": True}, {"attribute": "entity"}],
         "select": ["owner", "amount"]},
        {"where": [{"attribute": "competitors", "op": "eq", "value": "rivals"}]},
    ]

    def answers(m: Memory) -> list[Any]:
        out = []
        for user in READERS:
            for body in queries:
                r = query(m.as_user(user), scope, find="entities", type="opportunity",
                          limit=1000, **body)
                assert r.status_code == 200, r.text
                out.append({k: v for k, v in r.json().items() if k != "as_of"})
        return out

    with serving(tmp_path / "home", env) as proc:
        m = Memory(proc.url)
        for user, groups in READERS.items():
            assert m.set_principal(user, sorted(g.split(":")[1] for g in groups)
                                   ).status_code == 200
        assert put_schema(m, scope, builtin="sales").status_code == 200
        eps = {",".join(acl): _episode(m, scope, f"Pipeline notes ({acl[0]}).", acl=acl)
               for acl in ACLS}
        by_writer: dict[str, list[dict[str, Any]]] = {"bob": [], "carol": []}
        for n, opp in enumerate(opps):
            # the last two have competitors only: no query that selects owner lists them
            names = ["competitors"] if n >= 10 else ["stage", "amount", "owner", "competitors"]
            for predicate in names:
                for month in (1, 2):  # an older and a newer version, random ACLs
                    acl = rng.choice(ACLS)
                    value = {"stage": rng.choice(STAGES), "owner": rng.choice(["ann", "ben"]),
                             "amount": f"${rng.randrange(10, 100)}k",
                             "competitors": rng.choice(["rivals", "others"])}[predicate]
                    by_writer["bob" if acl == ["user:bob"] else "carol"].append({
                        "entity": opp, "predicate": predicate, "value": value,
                        "quote": "Pipeline notes", "valid_from": f"2025-0{month}-01T00:00:00Z",
                        "cites": [{"episode": eps[",".join(acl)], "unit": 1}]})
        for writer, items in by_writer.items():
            r = m.as_user(writer).http.post("/facts/batch", json={"scope": scope,
                                                                  "facts": items})
            assert r.status_code == 201, r.text
        cold = answers(m)  # the first typed queries this server answers
        assert answers(m) == cold
        left_out = False  # some reader sees an entity with no visible owner
        for user in READERS:
            reader = m.as_user(user)
            want = _reference(reader, scope, opps, {})
            assert _answered(reader, scope, {}) == (sorted(want), want), user
            _, owners = _answered(reader, scope, {}, select=["owner"])
            assert sorted(owners) == sorted(e for e, rec in want.items() if "owner" in rec)
            left_out = left_out or len(owners) < len(want)
        assert left_out
        m.close()
    with serving(tmp_path / "home", env) as proc:
        m = Memory(proc.url)
        deadline = time.monotonic() + 60
        while not _warm_up_done(m, scope):
            assert time.monotonic() < deadline, "the warm-up did not run"
            time.sleep(0.2)
        assert answers(m) == cold
        m.close()
    with serving(tmp_path / "home", env) as proc:  # asked at once: alongside the warm-up,
        m = Memory(proc.url)  # or waiting for it
        assert answers(m) == cold
        m.close()


def test_the_warm_up_can_be_turned_off(tmp_path: Path) -> None:
    """AMPUP_MEMORY_QUERY_WARM=false: over a scope the warm-up would warm, it never runs,
    `/status` shows its timer disabled, and a typed query still answers (it builds what it
    needs itself). Turned on again, the next start warms the scope."""
    scope = new_scope()
    with serving(tmp_path, QUIET) as proc:
        m = Memory(proc.url)
        assert put_schema(m, scope, schema=TINY).status_code == 200
        ep = _episode(m, scope, "The Acme deal is won.")
        r = m.fact(scope, "deal:acme", "stage", "won", "is won", [(ep, 1)])
        assert r.status_code == 201, r.text
        m.close()

    def timers(m: Memory) -> dict[str, dict[str, Any]]:
        r = m.http.get("/status", headers=ADMIN)
        assert r.status_code == 200, r.text
        return {t["name"]: t for t in r.json()["timers"]}

    with serving(tmp_path, {**QUIET, "AMPUP_MEMORY_QUERY_WARM": "false"}) as proc:
        m = Memory(proc.url)
        deadline = time.monotonic() + 60
        # started with the warm-up, at the same point of the start: by its first run's end
        # the warm-up would have begun
        while timers(m)["search index refresh"]["runs"] < 1:
            assert time.monotonic() < deadline, "the search index refresh did not run"
            time.sleep(0.1)
        r = query(m, scope, find="entities", type="deal", select=["stage"])
        assert r.status_code == 200, r.text
        assert [e["entity"] for e in r.json()["entities"]] == ["deal:acme"]
        warm = timers(m)["typed query warm-up"]
        assert (warm["enabled"], warm["runs"], warm["last_started_at"]) == (False, 0, None)
        m.close()
    with serving(tmp_path, QUIET) as proc:
        m = Memory(proc.url)
        while not _warm_up_done(m, scope):
            assert time.monotonic() < deadline, "the warm-up did not run"
            time.sleep(0.1)
        assert timers(m)["typed query warm-up"]["enabled"] is True
        m.close()


def test_typed_queries_keep_one_home_apart_from_another(tmp_path: Path) -> None:
    """Two homes open in one process, with the same scope and seqs: each answers its own
    facts (what is kept for typed queries is per read index)."""
    from ampup_memory.memory.episodes import EpisodeIn
    from ampup_memory.memory.facts import FactIn
    from ampup_memory.memory.query import TypedQuery, run, warm
    from ampup_memory.memory.schemas import PutSchema, set_schema
    from ampup_memory.memory.service import MemoryService
    from ampup_memory.settings import load_settings

    req = TypedQuery.model_validate({"scope": "acme/sales", "find": "entities",
                                     "type": "opportunity"})
    for n, stage in enumerate(["demo", "proposal"]):
        svc = MemoryService.open(load_settings(home=tmp_path / str(n),
                                               embedding_provider="hash"))
        try:
            svc.set_principal("w", [], [], "t")
            set_schema(svc, "t", "acme/sales", PutSchema(builtin="sales"))
            ep = svc.write_episodes("w", "acme/sales", None, [EpisodeIn.model_validate(
                {"source": "crm:1", "acl": ["*"], "body": json.dumps({"stage": stage})})])
            svc.post_facts("w", "acme/sales", None, [FactIn.model_validate({
                "entity": "opportunity:o1", "predicate": "stage", "value": stage,
                "quote": stage, "cites": [{"episode": ep.episodes[0][0], "unit": 1}]})])
            if n:  # the second home's query finds its own type warmed, not the first's
                assert warm(svc, "acme/sales") == ["opportunity"]
            got = run(svc, "w", req)["entities"]
            assert [e["attributes"]["stage"]["value"] for e in got] == [stage]
        finally:
            svc.close()


@pytest.mark.parametrize("merge_often", [False, True])
def test_kept_answers_after_small_commits_equal_a_cold_evaluation(
        merge_often: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """After each of many small commits (a few values, a new entity, values citing an
    episode one reader may not read) the kept path (rows grown, evaluation, current values
    and columns folded: small layers laid over what was kept) answers every query exactly
    as an evaluation from nothing kept, for a reader who reads every citation and one who
    may not read some. ``merge_often``: the layers are merged into flat copies every few
    commits, so merging, the column edit and layering over a merged copy run too."""
    from ampup_memory.memory import query as typed
    from ampup_memory.memory.episodes import ChangeAcl, EpisodeIn
    from ampup_memory.memory.facts import CloseValue, FactIn
    from ampup_memory.memory.query import TypedQuery, run
    from ampup_memory.memory.schemas import PutSchema, set_schema
    from ampup_memory.memory.service import MemoryService
    from ampup_memory.settings import load_settings

    if merge_often:
        monkeypatch.setattr(typed, "LAYER_SHARE", 150)
        monkeypatch.setattr(typed, "COLUMN_LAYER", 8)
        monkeypatch.setattr(typed, "EPISODE_PIECES", 2)
    rng = random.Random(21)
    scope = "acme/kept"
    svc = MemoryService.open(load_settings(home=tmp_path, embedding_provider="hash"))
    try:
        svc.set_principal("x", ["sales", "emea"], [], "t")  # reads every episode
        svc.set_principal("reader", ["sales"], [], "t")  # not group:emea, not user:x
        set_schema(svc, "t", scope, PutSchema(builtin="sales"))
        eps = [svc.write_episodes("x", scope, None, [EpisodeIn.model_validate({
            "source": f"crm:export/{i}", "acl": acl,
            "body": json.dumps({"export": i, "note": "Pipeline export"})})]).episodes[0][0]
            for i, acl in enumerate([["*"], ["group:sales"], ["group:emea"], ["user:x"]])]
        opps = [f"opportunity:k{n:03d}" for n in range(300)]

        def value(predicate: str) -> Any:
            return {"stage": rng.choice(STAGES), "owner": rng.choice(["ann", "ben", "cy"]),
                    "amount": f"${rng.randrange(10, 100)}k",
                    "close_date": f"2025-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
                    "next_step": rng.choice(["call back", "send deck", "demo"]),
                    "competitors": rng.choice(["rivals", "others", "third"])}[predicate]

        def facts(entities: list[str], predicates: list[str], when: str) -> list[FactIn]:
            return [FactIn.model_validate({
                "entity": e, "predicate": p, "value": value(p), "quote": "Pipeline export",
                "cites": [{"episode": rng.choice(eps), "unit": 2}], "valid_from": when})
                for e in entities for p in predicates]

        every = ["stage", "owner", "amount", "close_date", "next_step", "competitors"]
        svc.post_facts("x", scope, None, facts(opps, every, "2025-01-01T00:00:00Z"))
        bodies: list[dict[str, Any]] = [
            {"where": [{"attribute": "stage", "op": "in", "value": STAGES[:5]},
                       {"attribute": "amount", "op": "gt", "value": "$50k"},
                       {"attribute": "close_date", "op": "gte", "value": "2025-04-01"},
                       {"attribute": "close_date", "op": "lte", "value": "2025-09-30"}],
             "select": ["owner", "next_step", "amount"],
             "order_by": [{"attribute": "amount", "desc": True}]},
            {},
            {"where": [{"attribute": "owner", "op": "ne", "value": "ann"}],
             "order_by": [{"attribute": "close_date"}, {"attribute": "entity", "desc": True}]},
            {"where": [{"attribute": "next_step", "op": "contains", "value": "BACK"},
                       {"attribute": "competitors", "op": "eq", "value": "rivals"}]},
            {"select": ["owner"], "order_by": [{"attribute": "owner", "desc": True}]},
        ]
        reqs = [TypedQuery.model_validate({"scope": scope, "find": "entities",
                                           "type": "opportunity", "limit": 1000, **b})
                for b in bodies]

        def answers(cold: bool) -> list[dict[str, Any]]:
            if cold:  # nothing kept for this read index: every row read and evaluated
                kept = typed._KEPT.pop(svc.index)
            try:
                out = []
                for user in ("x", "reader"):
                    for req in reqs:
                        got = run(svc, user, req)
                        got.pop("as_of")
                        out.append(got)
                return out
            finally:
                if cold:
                    typed._KEPT[svc.index] = kept

        answers(cold=False)  # kept from here on: each commit below is folded into it
        laid = 0
        for r in range(14):
            when = f"2025-02-{r + 1:02d}T00:00:00Z"
            batch = facts(rng.sample(opps, 3), rng.sample(every, 2), when)
            if r == 5:
                opps.append("opportunity:k999")  # a new entity, last in entity order
                batch += facts(["opportunity:k999"], ["stage", "amount"], when)
            if r == 8:  # a new entity whose values cite one episode alone ...
                alone = svc.write_episodes("x", scope, None, [EpisodeIn.model_validate({
                    "source": "crm:export/alone", "acl": ["*"],
                    "body": json.dumps({"export": 99, "note": "Pipeline export"})})]
                ).episodes[0][0]
                batch += [FactIn.model_validate({
                    "entity": "opportunity:k998", "predicate": p, "value": value(p),
                    "quote": "Pipeline export", "cites": [{"episode": alone, "unit": 2}],
                    "valid_from": when}) for p in ("stage", "amount")]
            svc.post_facts("x", scope, None, batch)
            if r == 10:  # ... hidden from the reader: its pairs leave the reader's layers
                svc.change_acl("x", ChangeAcl(scope=scope, acl=["user:x"]), alone, False)
            if r == 12:  # a value closed: its pair has no current value left
                svc.close_value("x", CloseValue(scope=scope, entity=opps[0],
                                                predicate="stage", reason="lost"))
            kept_answers = answers(cold=False)
            assert kept_answers == answers(cold=True), r
            assert {a["total"] for a in kept_answers} != {0}
            laid += any(c.under is not None for ev in typed._kept(svc).evaluated.values()
                        for s in ev.at.values() for c in s.columns.values())
        assert laid  # the kept path did lay columns over older ones (what is tested)
    finally:
        svc.close()


def test_an_integer_past_every_double_is_no_fact_value_and_sorts_if_stored_before() -> None:
    """A request body never brings one (its JSON reader refuses it), but a model's answer
    or a corpus could: stored, it made every `where` or `order_by` over its predicate a
    500 (no float holds it). Refused as a value; one stored earlier sorts as ±infinity."""
    import math

    from pydantic import ValidationError

    from ampup_memory.memory.facts import FactIn
    from ampup_memory.memory.schemas import sort_key

    fact = {"entity": "acme", "predicate": "n", "quote": "q",
            "cites": [{"episode": "0" * 64, "unit": 1}]}
    for value in (2 * 10**308, -(2 * 10**308)):
        with pytest.raises(ValidationError, match="beyond a double"):
            FactIn.model_validate({**fact, "value": value})
    assert FactIn.model_validate({**fact, "value": 10**308}).value == 10**308
    assert sort_key(None, 10**400) == ("n", math.inf)
    assert sort_key(None, -(10**400)) == ("n", -math.inf)
