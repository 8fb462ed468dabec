"""AmpUp Memory routes end to end: episodes, batches, facts, closures, documents, ledger,
errors. One real server on the embedded default (SQLite catalog, file:// warehouse)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.memory_support import ADMIN_TOKEN, QUIET, Memory, new_scope, start


@pytest.fixture(scope="module")
def m(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Memory]:
    proc = start(tmp_path_factory.mktemp("mem-api"), dict(QUIET))
    client = Memory(proc.url)
    yield client
    client.close()
    proc.stop()


def error(r: object) -> tuple[int, str]:
    body = r.json()  # type: ignore[attr-defined]
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "details"}
    return r.status_code, body["error"]["code"]  # type: ignore[attr-defined]


CALL = "Alice: Our budget is 50k for this year.\nBob: Great.\n[00:03] Alice: We sign in May."


def test_episode_written_once_and_read_with_units(m: Memory) -> None:
    scope = new_scope()
    first = m.write(scope, CALL, source="call:acme:1", about=["acme"], acl=["user:alice"],
                    occurred_at="2024-03-01T10:00:00Z")
    assert first.status_code == 201, first.text
    again = m.write(scope, CALL, source="call:acme:1", about=["acme"], acl=["user:alice"],
                    occurred_at="2024-03-01T11:00:00+01:00")  # the same instant
    assert again.status_code == 200
    assert again.json()["id"] == first.json()["id"]
    assert again.json()["commit"] == first.json()["commit"]
    assert len(m.ledger(scope)) == 1  # no new commit

    got = m.episode(scope, first.json()["id"]).json()
    assert got["id"] == hashlib.sha256(f"call:acme:1\n{CALL}".encode()).hexdigest()
    assert got["body_ref"] == hashlib.sha256(CALL.encode()).hexdigest()
    assert got["type"] == "call" and got["about"] == ["acme"]
    assert [(u["n"], u["kind"]) for u in got["units"]] == [(1, "turn"), (2, "turn"), (3, "turn")]
    assert got["units"][2]["text"] == "[00:03] Alice: We sign in May."


def test_rewrite_with_other_fields_is_409_naming_them(m: Memory) -> None:
    scope = new_scope()
    assert m.write(scope, "hi", source="slack:C1:1", acl=["*"], about=["a"]).status_code == 201
    r = m.write(scope, "hi", source="slack:C1:1", acl=["group:x"], about=["b"],
                occurred_at="2020-01-01T00:00:00Z")
    assert error(r) == (409, "CONFLICT")
    assert r.json()["error"]["details"]["fields"] == ["acl", "occurred_at", "about"]
    assert len(m.ledger(scope)) == 1


def test_unclaimed_source_is_422_naming_prefixes(m: Memory) -> None:
    r = m.write(new_scope(), "x", source="fax:123")
    assert error(r) == (422, "VALIDATION_ERROR")
    assert "slack:, gmail:, call:, crm:, doc:, mcp:remember_memory:, close:" in r.text
    crm = m.write(new_scope(), "not json", source="crm:1")
    assert error(crm) == (422, "VALIDATION_ERROR")
    # A record with no field has nothing to cite (it was one unit ": {}").
    empty = m.write(new_scope(), "{}", source="crm:2")
    assert error(empty) == (422, "VALIDATION_ERROR")
    assert empty.json()["error"]["details"]["errors"][0]["type"] == "body_empty"


def test_a_note_source_names_its_writer_alone(m: Memory) -> None:
    """`mcp:remember_memory:<author>:<label>` is how a note says whose it is (the MCP tool
    writes it), so a writer naming someone else is refused, alone or in a batch; naming
    yourself is a note like the tool's. The ledger's author was right either way."""
    scope = new_scope()  # m acts as alice
    forged = m.write(scope, "Bob agreed to the raise.", source="mcp:remember_memory:bob:chat")
    assert error(forged) == (422, "VALIDATION_ERROR")
    first = forged.json()["error"]["details"]["errors"][0]
    assert (first["type"], first["loc"]) == ("source_author", ["body", "source"]), first
    assert "mcp:remember_memory:alice:<label>" in first["msg"]
    for near in ("mcp:remember_memory:alicia:chat", "mcp:remember_memory:ali:ce:x"):
        assert error(m.write(scope, "x", source=near)) == (422, "VALIDATION_ERROR"), near
    own = m.write(scope, "I prefer tea.", source="mcp:remember_memory:alice:chat")
    assert own.status_code == 201, own.text
    batch = m.http.post("/episodes/batch", json={"scope": scope, "episodes": [
        {"source": "doc:ok", "body": "fine", "acl": ["*"]},
        {"source": "mcp:remember_memory:bob:chat", "body": "forged", "acl": ["*"]}]})
    assert error(batch) == (422, "VALIDATION_ERROR")
    assert batch.json()["error"]["details"]["errors"][0]["loc"] == [
        "body", "episodes", 1, "source"]
    assert len(m.ledger(scope)) == 1  # the own note alone


@pytest.mark.parametrize("body", [
    {"source": "doc:x", "body": "b"},                             # no acl
    {"source": "doc:x", "body": "b", "acl": []},
    {"source": "doc:x", "body": "b", "acl": ["everyone"]},
    {"source": "doc:x", "body": "", "acl": ["*"]},
    {"source": "doc:x", "body": "b", "acl": ["*"], "occurred_at": "2024-01-01T00:00:00"},
    {"source": "doc:x", "body": "b", "acl": ["*"], "extra": 1},
    {"source": "doc:x", "body": "b", "acl": "*"},
])
def test_bad_episode_bodies_are_422(m: Memory, body: dict[str, object]) -> None:
    assert error(m.http.post("/episodes", json={"scope": new_scope(), **body})) == (
        422, "VALIDATION_ERROR")


def test_a_bad_acl_entry_or_group_says_the_rule_not_the_regex(m: Memory) -> None:
    """An ACL entry, a group, a cited episode id or a schema's name that a request's shape
    refuses answered pydantic's "String should match pattern '^(?:\\*|(?:user|group|role):…'";
    now the rule, in words, at the same place (the published pattern is unchanged)."""
    scope = new_scope()
    for path, body, loc in (
            ("/episodes", {"scope": scope, "source": "doc:x", "body": "b",
                           "acl": ["*", "everyone"]}, ["body", "acl", 1]),
            ("/runs", {"scope": scope, "task": "t", "acl": ["group:a b"]}, ["body", "acl", 0]),
            ("/sessions/start", {"scope": scope, "acl": ["user:"]}, ["body", "acl", 0])):
        r = m.http.post(path, json=body)
        assert error(r) == (422, "VALIDATION_ERROR"), r.text
        [problem] = r.json()["error"]["details"]["errors"]
        assert problem["loc"] == loc and problem["type"] == "acl_invalid", r.text
        assert problem["msg"].startswith("invalid ACL entry '"), r.text
        assert "use '*', 'user:<id>', 'group:<id>' or 'role:<name>'" in problem["msg"]
    r = m.http.put("/principals/dana", json={"groups": ["sales", "bad group"]},
                   headers={"X-AMP-Admin-Token": ADMIN_TOKEN})
    assert error(r) == (422, "VALIDATION_ERROR"), r.text
    [problem] = r.json()["error"]["details"]["errors"]
    assert problem["loc"] == ["body", "groups", 1], r.text
    assert problem["msg"] == ("invalid id 'bad group': letters, digits and ._@+- (max 200, "
                              "starting with a letter or digit)"), r.text
    # A cite's episode id, and a schema's names, the same way.
    r = m.http.post("/facts", json={"scope": scope, "entity": "e", "predicate": "p",
                                    "value": "v", "quote": "q",
                                    "cites": [{"episode": "ep-1", "unit": 1}]})
    assert error(r) == (422, "VALIDATION_ERROR"), r.text
    [problem] = r.json()["error"]["details"]["errors"]
    assert problem["loc"] == ["body", "cites", 0, "episode"], r.text
    assert problem["msg"] == ("invalid episode id 'ep-1': 64 lower-case hex digits, as POST "
                              "/episodes answers it"), r.text
    r = m.http.put(f"/schemas/{scope}", json={"schema": {"name": "My Schema", "entities": []}},
                   headers={"X-AMP-Admin-Token": ADMIN_TOKEN})
    assert error(r) == (422, "VALIDATION_ERROR"), r.text
    [problem] = r.json()["error"]["details"]["errors"]
    assert problem["loc"] == ["body", "schema", "name"], r.text
    assert problem["msg"].startswith("invalid name 'My Schema': lower-case letters"), r.text


def test_malformed_json_and_missing_user(m: Memory) -> None:
    r = m.http.post("/episodes", content=b"{nope", headers={"content-type": "application/json"})
    assert error(r) == (422, "VALIDATION_ERROR")
    anon = m.http.get("/ledger", params={"scope": "a/b"}, headers={"X-AmpUp-User": ""})
    assert error(anon) == (401, "MISSING_USER")
    # Each says what to send (they said "names the caller" and "is not a valid id").
    assert "X-AmpUp-User: <user id>" in anon.json()["error"]["message"], anon.text
    bad = m.http.get("/ledger", params={"scope": "a/b"}, headers={"X-AmpUp-User": "a b"})
    assert error(bad) == (401, "UNAUTHENTICATED")
    assert "letters, digits and ._@+-" in bad.json()["error"]["message"], bad.text
    # An admin write's author too (it said "The caller's user id is not a valid id.").
    admin = {"X-AMP-Admin-Token": ADMIN_TOKEN, "X-AmpUp-User": "a b"}
    for r in (m.http.put("/schemas/a/b", json={"builtin": "sales"}, headers=admin),
              m.http.put("/procedures/sources", json={"scope": "a/b", "documents": []},
                         headers=admin)):
        assert error(r) == (401, "UNAUTHENTICATED"), r.text
        assert r.json()["error"]["message"] == bad.json()["error"]["message"], r.text
    # No principal body at all is the body missing (loc ["body"]), not a field named "body".
    for empty in (b"", b"  "):
        r = m.http.put("/principals/dana", content=empty,
                       headers={"X-AMP-Admin-Token": ADMIN_TOKEN})
        assert error(r) == (422, "VALIDATION_ERROR"), r.text
        [problem] = r.json()["error"]["details"]["errors"]
        assert (problem["loc"], problem["type"]) == (["body"], "missing"), r.text


def test_batch_is_one_commit_and_idempotent(m: Memory) -> None:
    scope = new_scope()
    eps = [{"source": f"slack:C9:{i}", "body": f"bob: message {i}", "acl": ["*"]}
           for i in range(1000)]
    r = m.http.post("/episodes/batch", json={"scope": scope, "episodes": eps})
    assert r.status_code == 201, r.text
    assert {e["status"] for e in r.json()["episodes"]} == {"created"}
    ledger = m.ledger(scope)
    assert len(ledger) == 1 and ledger[0]["changes"]["episodes"] == 1000
    again = m.http.post("/episodes/batch", json={"scope": scope, "episodes": eps[:10] + [
        {"source": "slack:C9:new", "body": "bob: new", "acl": ["*"]}]})
    assert again.status_code == 201
    assert [e["status"] for e in again.json()["episodes"]] == ["existing"] * 10 + ["created"]
    same = m.http.post("/episodes/batch", json={"scope": scope, "episodes": eps[:5]})
    assert same.status_code == 200 and same.json()["commit"] is None
    too_many = m.http.post("/episodes/batch", json={"scope": scope, "episodes": eps + eps[:1]})
    assert error(too_many) == (422, "VALIDATION_ERROR")
    clash = m.http.post("/episodes/batch", json={"scope": scope, "episodes": [
        {**eps[3], "acl": ["user:z"]}]})
    assert error(clash) == (409, "CONFLICT")
    assert clash.json()["error"]["details"]["conflicts"] == [
        {"index": 0, "id": r.json()["episodes"][3]["id"], "fields": ["acl"]}]
    assert len(m.ledger(scope)) == 2


def test_bodies_are_stored_once(m: Memory) -> None:
    scope = new_scope()
    a = m.write(scope, "same words", source="slack:C1:1").json()
    b = m.write(scope, "same words", source="slack:C2:1").json()
    assert a["id"] != b["id"]
    ledger = m.ledger(scope)
    # The ledger does not say whether a body was new: that depends on episodes a reader
    # may not see (test_memory_audit.py).
    assert [c["changes"] for c in ledger] == [
        {"acl_changes": 0, "closures": 0, "episodes": 1, "facts": 0}] * 2
    assert m.episode(scope, b["id"]).json()["body"] == "same words"


def test_facts_quote_cites_and_newest_wins(m: Memory) -> None:
    scope = new_scope()
    e1 = m.write(scope, CALL, source="call:1", occurred_at="2024-01-10T00:00:00Z").json()["id"]
    e2 = m.write(scope, "Alice: budget is now 80k.", source="call:2",
                 occurred_at="2024-05-01T00:00:00Z").json()["id"]
    bad_quote = m.fact(scope, "acme", "budget", "50k", "budget is 60k", [(e1, 1)])
    assert error(bad_quote) == (422, "VALIDATION_ERROR")
    assert bad_quote.json()["error"]["details"]["errors"][0]["loc"] == ["body", "quote"]
    assert error(m.fact(scope, "acme", "budget", "50k", "Bob", [(e1, 1)]))[0] == 422
    assert error(m.fact(scope, "acme", "budget", "50k", "x", [(e1, 9)]))[0] == 422
    assert error(m.fact(scope, "acme", "budget", "50k", "x", [("a" * 64, 1)]))[0] == 422
    # A value of no allowed type is one error at ["body", "value"], the field as sent: it
    # was six, one per union branch (`body.value.constrained-str`, `body.value.int`, …).
    for wrong, loc, says in (([1], ["body", "value"], "a value is a JSON string"),
                             ("x" * 4001, ["body", "value"], "at most 4000 characters"),
                             ({"amount": [5]}, ["body", "value", "amount"], "an amount is"),
                             # an object that is no money at all: not "amount: required"
                             ({"a": {"b": 1}}, ["body", "value"], "a value is a JSON string"),
                             ({"currency": "EUR"}, ["body", "value", "amount"], "required")):
        r = m.fact(scope, "acme", "budget", wrong, "budget is 50k", [(e1, 1)])
        [problem] = r.json()["error"]["details"]["errors"]
        assert (problem["loc"], says in problem["msg"]) == (loc, True), r.text

    old = m.fact(scope, "acme", "budget", "50k", "budget is 50k", [(e1, 1)])
    assert old.status_code == 201, old.text
    # Posted later but valid earlier: newest valid_from wins, not newest write.
    new = m.fact(scope, "acme", "budget", "80k", "budget is now 80k", [(e2, 1)])
    stale = m.fact(scope, "acme", "budget", "40k", "budget is 50k", [(e1, 1)],
                   valid_from="2023-06-01T00:00:00Z")
    assert new.status_code == stale.status_code == 201
    now = m.facts(scope, "acme").json()["facts"]
    assert [(f["value"], f["written_by"]) for f in now] == [("80k", "posted")]
    march = m.facts(scope, "acme", as_of="2024-03-01T00:00:00Z").json()["facts"]
    assert [f["value"] for f in march] == ["50k"]
    assert march[0]["valid_from"] == "2024-01-10T00:00:00Z"  # the episode's time
    assert march[0]["valid_to"] == "2024-05-01T00:00:00Z"
    history = m.facts(scope, "acme", history="true").json()["facts"]
    assert [f["value"] for f in history] == ["40k", "50k", "80k"]
    assert m.facts(scope, "acme", as_of="2020-01-01T00:00:00Z").json()["facts"] == []
    assert error(m.facts(scope, "acme", as_of="yesterday"))[0] == 422


def test_close_ends_the_value_and_keeps_history(m: Memory) -> None:
    scope = new_scope()
    e1 = m.write(scope, "Dana owns the Acme account.", source="doc:owners",
                 acl=["group:sales"], occurred_at="2024-01-01T00:00:00Z").json()["id"]
    assert m.set_principal("alice", groups=["sales"]).status_code == 200
    assert m.fact(scope, "acme", "owner", "dana", "Dana owns", [(e1, 1)]).status_code == 201
    r = m.http.post("/close", json={"scope": scope, "entity": "acme", "predicate": "owner",
                                    "reason": "Dana left the company."})
    assert r.status_code == 201, r.text
    closed = r.json()
    reason = m.episode(scope, closed["episode"]).json()
    assert reason["type"] == "close" and reason["acl"] == ["group:sales"]
    assert reason["units"] == [{"n": 1, "kind": "reason", "text": "Dana left the company."}]
    assert m.ledger(scope)[0]["id"] == closed["commit"]  # reason + closure: one commit
    assert m.ledger(scope)[0]["changes"] == {"acl_changes": 0, "closures": 1,
                                             "episodes": 1, "facts": 0}
    assert m.facts(scope, "acme").json()["facts"] == []
    before = m.facts(scope, "acme", as_of="2024-06-01T00:00:00Z").json()["facts"]
    assert [f["value"] for f in before] == ["dana"]
    history = m.facts(scope, "acme", history="true").json()["facts"]
    assert [f["kind"] for f in history] == ["value", "closure"]
    assert history[1]["cites"] == [{"episode": closed["episode"], "unit": 1}]
    again = m.http.post("/close", json={"scope": scope, "entity": "acme", "predicate": "owner",
                                        "reason": "again"})
    assert error(again) == (404, "NOT_FOUND")


def test_document_versions_by_as_of_and_acl(m: Memory) -> None:
    scope = new_scope()
    for when, text, acl in [("2024-01-01", "v1 public", ["*"]),
                            ("2024-02-01", "v2 secret", ["user:carol"]),
                            ("2024-03-01", "v3 public", ["*"])]:
        r = m.write(scope, text, source=f"doc:handbook@{when}", document="handbook",
                    acl=acl, occurred_at=f"{when}T00:00:00Z")
        assert r.status_code == 201

    def doc(as_of: str | None = None, user: str = "alice") -> object:
        body = {"scope": scope, "document": "handbook", **({"as_of": as_of} if as_of else {})}
        return m.as_user(user).http.post("/document", json=body)

    assert doc().json()["body"] == "v3 public"  # type: ignore[attr-defined]
    assert doc("2024-02-15T00:00:00Z").json()["body"] == "v1 public"  # type: ignore[attr-defined]
    assert doc("2024-02-15T00:00:00Z", "carol").json()["body"] == "v2 secret"  # type: ignore
    assert error(doc("2023-01-01T00:00:00Z")) == (404, "NOT_FOUND")


def test_ledger_pages(m: Memory) -> None:
    scope = new_scope()
    ids = [m.write(scope, f"n{i}", source=f"slack:C:{i}").json()["commit"] for i in range(5)]
    page = m.http.get("/ledger", params={"scope": scope, "limit": 2}).json()
    assert [c["id"] for c in page["commits"]] == ids[::-1][:2]
    assert {"id", "parent", "seq", "author", "time", "changes"} <= set(page["commits"][0])
    assert page["commits"][0]["author"] == "alice"
    nxt = m.http.get("/ledger", params={"scope": scope, "limit": 2,
                                        "before": page["next_before"]}).json()
    assert [c["id"] for c in nxt["commits"]] == ids[::-1][2:4]
    assert error(m.http.get("/ledger", params={"scope": scope, "before": "nope"}))[0] == 422
    for blank in ("", " ", "\t"):  # blank names no commit: string_blank, as at_commit says
        r = m.http.get("/ledger", params={"scope": scope, "before": blank})
        assert error(r) == (422, "VALIDATION_ERROR"), r.text
        (one,) = r.json()["error"]["details"]["errors"]
        assert (one["loc"], one["type"]) == (["query", "before"], "string_blank"), r.text
        assert "leave before out" in one["msg"], r.text
    assert error(m.http.get("/ledger", params={"scope": scope, "limit": 0}))[0] == 422
    assert m.http.get("/ledger", params={"scope": new_scope()}).json() == {
        "commits": [], "next_before": None}


def test_other_branches_do_not_exist_yet(m: Memory) -> None:
    scope = new_scope()
    assert error(m.write(scope, "x", branch="feature"))[0] == 404
    assert error(m.write(scope, "x", branch="Bad Branch"))[0] == 422
    assert m.write(scope, "x", branch="main").status_code == 201


def test_every_unit_kind_has_a_citation_letter() -> None:
    """The text answer cites `[e1 m2]`: each type's unit kind must be one of issue 5's
    letters (t m p f n r), or its citations would carry a letter nobody documented."""
    from ampup_memory.memory.episode_types import TYPES
    from ampup_memory.search.index.base import UNIT_LETTERS
    assert {t.unit_kind for t in TYPES} <= set(UNIT_LETTERS)
    assert set(UNIT_LETTERS.values()) == set("tmpfnr")


def test_episode_types_route(m: Memory) -> None:
    types = m.http.get("/episode-types").json()["types"]
    assert [t["prefix"] for t in types] == ["slack:", "gmail:", "call:", "crm:", "doc:",
                                            "mcp:remember_memory:", "close:"]


API_DOC = (Path(__file__).resolve().parent.parent / "docs" / "api.md").read_text()


def documented_fields(heading: str, marker: str) -> set[str]:
    """The field names api.md lists in braces after ``marker`` in the section ``heading``
    opens, e.g. ``each `{id, scope, …}``` -> {"id", "scope", …}."""
    section = API_DOC.split(heading, 1)[1].split("\n### ", 1)[0]
    after = section.split(marker, 1)[1]
    inner = after[after.index("{") + 1:after.index("}")]
    return {name.strip(" `\n") for name in inner.replace("\n", " ").split(",")}


def test_answers_carry_exactly_the_documented_fields(m: Memory) -> None:
    scope = new_scope()
    ep = m.write(scope, "Alice: The price is ten.", source="call:doc-fields").json()["id"]
    assert m.fact(scope, "acme", "price", "ten", "price is ten", [(ep, 1)]).status_code == 201
    fact = m.facts(scope, "acme").json()["facts"][0]
    assert set(fact) == documented_fields("### `GET /facts?", "each `")
    listed = m.http.get("/episodes", params={"scope": scope}).json()["episodes"][0]
    assert set(listed) == documented_fields("### `GET /episodes?", "`{episodes: [")
    kind = m.http.get("/episode-types").json()["types"][0]
    assert set(kind) == documented_fields("### `GET /episode-types`", "`{types: [")


def test_fact_batch_is_one_commit_or_nothing(m: Memory) -> None:
    scope = new_scope()
    ep = m.write(scope, "Acme: stage is won.\n\nAcme: amount 12k.", source="doc:crm-notes"
                 ).json()["id"]
    good = [{"entity": "acme", "predicate": "stage", "value": "won", "quote": "stage is won",
             "cites": [{"episode": ep, "unit": 1}]},
            {"entity": "acme", "predicate": "amount", "value": 12000, "quote": "amount 12k",
             "cites": [{"episode": ep, "unit": 2}]}]
    bad = {**good[1], "quote": "amount 13k"}
    refused = m.http.post("/facts/batch", json={"scope": scope, "facts": [good[0], bad]})
    assert error(refused) == (422, "VALIDATION_ERROR")
    assert refused.json()["error"]["details"]["errors"][0]["loc"] == [
        "body", "facts", 1, "quote"]
    assert len(m.ledger(scope)) == 1
    r = m.http.post("/facts/batch", json={"scope": scope, "facts": good})
    assert r.status_code == 201, r.text
    assert len(m.ledger(scope)) == 2 and m.ledger(scope)[0]["changes"]["facts"] == 2
    values = {f["predicate"]: f["value"] for f in m.facts(scope, "acme").json()["facts"]}
    assert values == {"stage": "won", "amount": 12000}


def test_acl_change_is_its_own_commit(m: Memory) -> None:
    scope = new_scope()
    ivy = m.as_user("ivy")
    w = m.write(scope, "alice: draft plan", source="slack:C5:1", acl=["user:alice"]).json()
    assert ivy.episode(scope, w["id"]).status_code == 404
    r = m.http.put(f"/episodes/{w['id']}/acl", json={"scope": scope,
                                                     "acl": ["user:alice", "user:ivy"]})
    assert r.status_code == 200, r.text
    assert r.json()["acl"] == ["user:alice", "user:ivy"] and r.json()["commit"]
    assert ivy.episode(scope, w["id"]).json()["acl"] == ["user:alice", "user:ivy"]
    ledger = m.ledger(scope)
    assert [c["changes"]["acl_changes"] for c in ledger] == [1, 0]
    # The current ACL decides every version: as of the first commit too.
    assert ivy.episode(scope, w["id"], at_commit=w["commit"]).status_code == 200
    # Ivy may read it but did not write it; the same ACL again commits nothing.
    other = ivy.http.put(f"/episodes/{w['id']}/acl", json={"scope": scope, "acl": ["*"]})
    assert error(other) == (403, "ACCESS_DENIED")
    assert other.json()["error"]["message"] == (
        "Only the author of the commit that wrote this episode, or an admin, may change "
        "its ACL."), other.text
    same = m.http.put(f"/episodes/{w['id']}/acl", json={"scope": scope,
                                                        "acl": ["user:ivy", "user:alice"]})
    assert same.json()["commit"] is None and len(m.ledger(scope)) == 2
    hidden = m.as_user("zed").http.put(f"/episodes/{w['id']}/acl",
                                       json={"scope": scope, "acl": ["*"]})
    assert error(hidden) == (404, "NOT_FOUND")


def test_ledger_names_nothing_a_reader_may_not_see(m: Memory) -> None:
    """The ledger is shown to every caller of a scope, so its messages carry kinds and
    counts only: no entity, predicate, value or episode id of hidden material."""
    scope = new_scope()
    secret = m.write(scope, "Zanzibar merger closes in May.", source="doc:deals",
                     acl=["user:alice"]).json()
    assert m.fact(scope, "zanzibar_corp", "merger_month", "May", "closes in May",
                  [(secret["id"], 1)]).status_code == 201
    assert m.http.post("/close", json={"scope": scope, "entity": "zanzibar_corp",
                                       "predicate": "merger_month",
                                       "reason": "Called off."}).status_code == 201
    assert m.http.put(f"/episodes/{secret['id']}/acl",
                      json={"scope": scope, "acl": ["user:alice", "user:bo"]}).status_code == 200
    raw = m.as_user("ivy").http.get("/ledger", params={"scope": scope}).text
    for word in ("zanzibar", "merger", "May", "Called off", secret["id"], secret["id"][:12]):
        assert word not in raw
    messages = [c["message"] for c in m.as_user("ivy").ledger(scope)]
    assert messages == ["change acl of 1 episode", "close 1 value", "post 1 fact",
                        "write 1 episode(s)"]
