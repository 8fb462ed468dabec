"""AmpUp Memory's MCP tools, driven by the MCP SDK's own client.

HTTP: the session's real `serve` process; each client names its agent and its AmpUp user
in headers. stdio: one real `python -m ampup_memory.cli mcp` process. Facts are posted
through the REST API, exactly as an extractor would.

Memory writes do not feed the search index yet (no ledger-to-index catch-up is wired on
main), so the search tests copy what the REST API returns into the index themselves
(`feed_index`), the way `test_search_api` fills it; the strict xfail below flips when the
real feed lands.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
from jsonschema import Draft202012Validator
from mcp import Client, StdioServerParameters

from ampup_memory.search.embed import build_embedder
from ampup_memory.search.engine import SearchEngine
from ampup_memory.search.index.base import (
    Cite,
    DocumentBatch,
    EpisodeDoc,
    FactDoc,
    Unit,
)
from ampup_memory.search.index.registry import open_index
from ampup_memory.search.service import FactSearchRequest
from ampup_memory.settings import Settings
from tests.conftest import ADMIN_TOKEN
from tests.server_process import ServerProcess, plain_client
from tests.test_mcp import ADVICE_TOOLS, http_client_for, mcp_refusal, ok, refused
from tests.test_mcp import text as text_of

AMPUP_TOOLS = {"remember_memory", "get_episode", "close_memory", "branch_memory",
               "merge_memory", "search_memory",
               "query_memory"}
NOTE = "Acme budget for the pilot is 50k.\n\nRaj owns the Acme pilot rollout."


def new_scope() -> str:
    return f"t{uuid.uuid4().hex[:10]}/team_1"


def as_user(server: ServerProcess, user: str) -> Any:
    return http_client_for(server.url, {"X-AMP-Agent-ID": f"agent_{user}",
                                        "X-AmpUp-User": user})


def rest(server: ServerProcess, user: str) -> httpx.Client:
    return plain_client(base_url=server.url, timeout=60, headers={"X-AmpUp-User": user})


async def remember(client: Client, **args: Any) -> dict[str, Any]:
    reply: dict[str, Any] = json.loads(await ok(client, "remember_memory", **args))
    return reply


def when(text: str) -> datetime:
    return datetime.fromisoformat(text)


def feed_index(home: Path, http: httpx.Client, scope: str, episode_ids: list[str],
               entities: list[str]) -> None:
    """Copy episodes and current facts, as the REST API returns them, into the index
    (stands in for the memory-to-search feed main does not have yet)."""
    episodes = [http.get(f"/episodes/{e}", params={"scope": scope}).json() for e in episode_ids]
    facts = [f for entity in entities
             for f in http.get("/facts", params={"scope": scope, "entity": entity}).json()["facts"]]
    index = open_index(f"sqlite:///{home / 'index.db'}")
    try:
        engine = SearchEngine(index, build_embedder(Settings()))
        engine.ingest(DocumentBatch(
            [EpisodeDoc(id=e["id"], scope=scope, branch=e["branch"], commit=e["commit"],
                        occurred_at=when(e["occurred_at"]), acl=tuple(e["acl"]),
                        units=tuple(Unit(u["n"], u["kind"], u["text"]) for u in e["units"]),
                        source=e["source"]) for e in episodes],
            [FactDoc(id=f["id"], scope=scope, branch=f["branch"], commit=f["commit"],
                     entity=f["entity"], predicate=f["predicate"], value=json.dumps(f["value"]),
                     quote=f["quote"], valid_from=when(f["valid_from"]), valid_to=None,
                     cites=tuple(Cite(c["episode"], c["unit"]) for c in f["cites"]),
                     written_by=f["written_by"], commit_seq=i + 1)
             for i, f in enumerate(facts)]))
    finally:
        index.close()


def post_fact(http: httpx.Client, scope: str, episode: str, predicate: str, value: str,
              quote: str, unit: int = 1) -> None:
    r = http.post("/facts", json={"scope": scope, "entity": "acme", "predicate": predicate,
                                  "value": value, "quote": quote,
                                  "cites": [{"episode": episode, "unit": unit}]})
    assert r.status_code == 201, r.text


# ---- HTTP ------------------------------------------------------------------------------


async def test_ampup_tools_are_listed_beside_the_amp_tools(server: ServerProcess) -> None:
    async with as_user(server, "alice") as client:
        listed = {t.name: t.input_schema for t in (await client.list_tools()).tools}
        instructions = client.instructions or ""
    assert AMPUP_TOOLS <= set(listed) and "amp_remember" in listed
    # what a model reads at connection names every tool family and the advice loop's order
    assert all(name in instructions for name in AMPUP_TOOLS | ADVICE_TOOLS)
    assert (instructions.index("start_session") < instructions.index("get_advice")
            < instructions.index("end_session"))
    assert listed["remember_memory"]["required"] == ["scope", "text"]
    assert listed["get_episode"]["required"] == ["scope"]
    assert listed["close_memory"]["required"] == ["scope", "entity", "predicate", "reason"]
    assert listed["search_memory"]["required"] == ["scope", "query"]
    # query is for find: passages; typed finds (facts, entities) take a query language
    assert listed["query_memory"]["required"] == ["scope"]
    assert set(listed["query_memory"]["properties"]["find"]["enum"]) == {
        "passages", "facts", "entities"}


async def test_remember_then_get_episode_with_units(server: ServerProcess) -> None:
    scope = new_scope()
    async with as_user(server, "alice") as client:
        first = await remember(client, scope=scope, text=NOTE, source="standup")
        again = await remember(client, scope=scope, text=NOTE, source="standup")
        got = json.loads(await ok(client, "get_episode", scope=scope, id=first["id"]))
    assert first["created"] is True and again == {**first, "created": False}
    assert got["id"] == first["id"] and got["body"] == NOTE
    assert got["source"] == "mcp:remember_memory:alice:standup"
    assert got["acl"] == ["user:alice"]  # the author only, by default
    assert [u["text"] for u in got["units"]] == NOTE.split("\n\n")


async def test_an_ampup_user_alone_may_use_the_ampup_tools(server: ServerProcess) -> None:
    """Trust mode: X-AmpUp-User without X-AMP-Agent-ID opens /mcp for the AmpUp tools; the
    AMP tools, which need an agent, are refused one call at a time. Neither header: 401."""
    scope = new_scope()
    async with http_client_for(server.url, {"X-AmpUp-User": "uma"}) as uma:
        stored = await remember(uma, scope=scope, text=NOTE, source="standup")
        found = await ok(uma, "search_memory", scope=scope, query="Acme pilot budget")
        amp = await refused(uma, "amp_recall", query="x", owner_id="uma")
    assert stored["created"] is True and stored["id"] in found
    assert "X-AMP-Agent-ID" in amp and "\n" not in amp
    nobody = httpx.post(server.url + "/mcp", json={}, timeout=30)
    assert nobody.status_code == 401
    assert mcp_refusal(nobody)["code"] == "MISSING_AGENT_ID"
    bad = httpx.post(server.url + "/mcp", json={}, headers={"X-AmpUp-User": "a b"}, timeout=30)
    assert bad.status_code == 401


async def test_other_users_cannot_read_a_private_episode(server: ServerProcess) -> None:
    scope = new_scope()
    async with as_user(server, "alice") as alice:
        mine = await remember(alice, scope=scope, text="Alice's private plan: resign in May.")
        shared = await remember(alice, scope=scope, text="Team lunch is on Friday.",
                                acl=["user:alice", "user:bob"])
    async with as_user(server, "bob") as bob:
        hidden = await refused(bob, "get_episode", scope=scope, id=mine["id"])
        missing = await refused(bob, "get_episode", scope=scope, id="f" * 64)
        seen = json.loads(await ok(bob, "get_episode", scope=scope, id=shared["id"]))
    assert hidden == missing == "No such episode."
    assert seen["body"] == "Team lunch is on Friday."


async def test_search_memory_answers_in_text_and_query_memory_finds_passages(
        server: ServerProcess) -> None:
    scope = new_scope()
    async with as_user(server, "alice") as alice:
        ep = await remember(alice, scope=scope, text=NOTE, acl=["*"])
        secret = await remember(alice, scope=scope, text="Acme budget frozen: codename Nightjar.")
    with rest(server, "alice") as http:
        post_fact(http, scope, ep["id"], "budget", "50k", "budget for the pilot is 50k")
        post_fact(http, scope, ep["id"], "pilot_owner", "Raj", "Raj owns the Acme pilot", 2)
        feed_index(server.home, http, scope, [ep["id"], secret["id"]], ["acme"])
    async with as_user(server, "alice") as alice:
        answer = await ok(alice, "search_memory", scope=scope, query="Acme budget")
        passages = json.loads(await ok(alice, "query_memory", scope=scope,
                                       query="Nightjar codename"))
    lines = answer.splitlines()
    assert lines[0] == "acme"
    assert any(line.strip().startswith('- budget: "50k"') and "[e1 " in line for line in lines)
    assert lines[-1].startswith("episodes: ") and ep["id"] in lines[-1].split()
    assert passages["results"] and passages["results"][0]["episode"] == secret["id"]
    assert "Nightjar" in passages["results"][0]["text"]

    async with as_user(server, "bob") as bob:  # alice's private episode stays hers
        theirs = json.loads(await ok(bob, "query_memory", scope=scope, query="Nightjar"))
        answer_b = await ok(bob, "search_memory", scope=scope, query="Acme budget frozen")
    assert secret["id"] not in {p["episode"] for p in theirs["results"]}
    assert "Nightjar" not in answer_b and secret["id"] not in answer_b


async def test_search_memory_finds_a_posted_fact_without_a_test_feed(
        server: ServerProcess) -> None:
    scope = new_scope()
    async with as_user(server, "alice") as alice:
        ep = await remember(alice, scope=scope, text=NOTE, acl=["*"])
        with rest(server, "alice") as http:
            post_fact(http, scope, ep["id"], "budget", "50k", "budget for the pilot is 50k")
        answer = await ok(alice, "search_memory", scope=scope, query="Acme budget")
    assert ep["id"] in answer.splitlines()[-1]


async def test_search_tools_read_memory_as_of_a_commit(server: ServerProcess) -> None:
    scope = new_scope()
    async with as_user(server, "alice") as alice:
        first = await remember(alice, scope=scope, text=NOTE, acl=["*"])
        with rest(server, "alice") as http:
            post_fact(http, scope, first["id"], "budget", "50k", "budget for the pilot is 50k")
            c1 = http.get("/ledger", params={"scope": scope, "limit": 1}).json()["commits"][0]
            later = await remember(alice, scope=scope, acl=["*"],
                                   text="Acme budget for the pilot is now 70k.")
            post_fact(http, scope, later["id"], "budget", "70k", "budget for the pilot is now 70k")
        now = await ok(alice, "search_memory", scope=scope, query="Acme budget")
        then = await ok(alice, "search_memory", scope=scope, query="Acme budget",
                        at_commit=c1["id"])
        passages = json.loads(await ok(alice, "query_memory", scope=scope, query="Acme budget",
                                       at_commit=c1["id"]))
        unknown = await refused(alice, "search_memory", scope=scope, query="x",
                                at_commit="01" + "0" * 24)
        unknown_q = await refused(alice, "query_memory", scope=scope, query="x",
                                  at_commit="01" + "0" * 24)
    assert '"70k"' in now and '"50k"' not in now
    assert '"50k"' in then and "70k" not in then
    assert then.splitlines()[-1] == f"episodes: {first['id']}"
    assert passages["at_commit"] == c1["id"]
    assert {p["episode"] for p in passages["results"]} == {first["id"]}
    assert unknown == unknown_q == "No such commit on this scope and branch."


async def test_read_tools_take_a_pin_and_a_snapshot(server: ServerProcess) -> None:
    scope = new_scope()
    async with as_user(server, "alice") as alice:
        first = await remember(alice, scope=scope, text=NOTE, acl=["*"])
        with rest(server, "alice") as http:
            post_fact(http, scope, first["id"], "budget", "50k", "budget for the pilot is 50k")
            pin = http.post("/pin", json={"scope": scope, "ttl": "1h"}).json()
            snap = http.post("/snapshots", json={"scopes": [scope]}).json()
            later = await remember(alice, scope=scope, acl=["*"],
                                   text="Acme budget for the pilot is now 70k.")
            post_fact(http, scope, later["id"], "budget", "70k", "budget for the pilot is now 70k")
            by_commit = await ok(alice, "search_memory", scope=scope, query="Acme budget",
                                 at_commit=pin["commit"])
            pinned = await ok(alice, "search_memory", scope=scope, query="Acme budget",
                              pin=pin["id"])
            snapped = await ok(alice, "search_memory", scope=scope, query="Acme budget",
                               snapshot=snap["id"])
            passages = json.loads(await ok(alice, "query_memory", scope=scope,
                                           query="Acme budget", pin=pin["id"]))
            episode = await refused(alice, "get_episode", scope=scope, id=later["id"],
                                    snapshot=snap["id"])
            held = json.loads(await ok(alice, "get_episode", scope=scope, id=first["id"],
                                       pin=pin["id"]))
            # typed finds read a pin or snapshot as POST /query does (one function)
            for hold in ({"pin": pin["id"]}, {"snapshot": snap["id"]}, {"pin": "pin_x"}):
                ask = {"scope": scope, "find": "facts", "as_of": "2100-01-01T00:00:00Z", **hold}
                typed = await alice.call_tool("query_memory", ask)
                answer = http.post("/query", json=ask)
                if answer.status_code == 200:
                    assert json.loads(text_of(typed)) == answer.json(), hold
                else:
                    problem = answer.json()["error"]["details"]["errors"][0]
                    assert text_of(typed) == f"Invalid request: pin: {problem['msg']}"
            assert http.delete(f"/pin/{pin['id']}").status_code == 200
        released = await refused(alice, "search_memory", scope=scope, query="x",
                                 pin=pin["id"])
        combined = await refused(alice, "query_memory", scope=scope, query="x",
                                 pin=snap["id"])
    assert pinned == snapped == by_commit and '"50k"' in pinned and "70k" not in pinned
    assert passages["at_commit"] == pin["commit"]
    assert {p["episode"] for p in passages["results"]} == {first["id"]}
    assert episode == "No such episode." and held["id"] == first["id"]
    assert "released" in released and "pin" in combined


async def test_query_memory_answers_typed_finds_like_post_query(server: ServerProcess) -> None:
    scope = new_scope()
    async with as_user(server, "alice") as alice:
        ep = await remember(alice, scope=scope, text=NOTE, acl=["*"])
        with rest(server, "alice") as http:
            post_fact(http, scope, ep["id"], "budget", "50k", "budget for the pilot is 50k")
            body = {"scope": scope, "find": "facts", "predicate": ["budget"],
                    "where": [{"op": "eq", "value": "50k"}]}
            over_http = http.post("/query", json=body).json()
        typed = json.loads(await ok(alice, "query_memory", scope=scope, find="facts",
                                    predicate=["budget"],
                                    where=[{"op": "eq", "value": "50k"}]))
        bad = await refused(alice, "query_memory", scope=scope, find="entities")
    assert [f["value"] for f in typed["facts"]] == ["50k"]
    assert typed["facts"] == over_http["facts"]
    assert "type" in bad


async def test_close_memory_ends_the_current_value(server: ServerProcess) -> None:
    scope = new_scope()
    async with as_user(server, "alice") as alice:
        ep = await remember(alice, scope=scope, text=NOTE, acl=["*"])
        with rest(server, "alice") as http:
            post_fact(http, scope, ep["id"], "budget", "50k", "budget for the pilot is 50k")
            closed = json.loads(await ok(alice, "close_memory", scope=scope, entity="acme",
                                         predicate="budget", reason="The pilot was cancelled."))
            current = http.get("/facts", params={"scope": scope, "entity": "acme"}).json()
            history = http.get("/facts", params={"scope": scope, "entity": "acme",
                                                 "history": "true"}).json()
        reason = json.loads(await ok(alice, "get_episode", scope=scope, id=closed["episode"]))
        again = await refused(alice, "close_memory", scope=scope, entity="acme",
                              predicate="budget", reason="again")
    assert current["facts"] == []
    assert [f["kind"] for f in history["facts"]] == ["value", "closure"]
    assert reason["units"][0]["text"] == "The pilot was cancelled."
    assert "\n" not in again and "Traceback" not in again


async def test_close_memory_ends_one_value_of_a_many_valued_attribute(
        server: ServerProcess) -> None:
    """With the sales schema, an opportunity's competitors are many-valued: POST /close
    needs the value to end, and so does close_memory, which passes it through."""
    scope, deal = new_scope(), "opportunity:acme-renewal"
    org, team = scope.split("/")
    async with as_user(server, "alice") as alice:
        ep = await remember(alice, scope=scope, acl=["*"],
                            text="Globex is in the running.\n\nInitech bid too.")
        with rest(server, "alice") as http:
            set_schema = http.put(f"/schemas/{org}/{team}", json={"builtin": "sales"},
                                  headers={"X-AMP-Admin-Token": ADMIN_TOKEN})
            assert set_schema.status_code == 200, set_schema.text
            for unit, (name, quote) in enumerate(
                    [("Globex", "Globex is in the running."),
                     ("Initech", "Initech bid too.")], start=1):
                r = http.post("/facts", json={
                    "scope": scope, "entity": deal, "predicate": "competitors",
                    "value": name, "quote": quote, "cites": [{"episode": ep["id"],
                                                               "unit": unit}]})
                assert r.status_code == 201, r.text
            unnamed = await refused(alice, "close_memory", scope=scope, entity=deal,
                                    predicate="competitors", reason="Globex dropped out.")
            closed = json.loads(await ok(alice, "close_memory", scope=scope, entity=deal,
                                         predicate="competitors", value="Globex",
                                         reason="Globex dropped out."))
            current = http.get("/facts", params={"scope": scope, "entity": deal}).json()
    assert "value" in unnamed and "many-valued" in unnamed
    assert closed["closed"] and closed["episode"]
    assert [f["value"] for f in current["facts"]] == ["Initech"]


async def test_branch_and_merge_tools(server: ServerProcess) -> None:
    """A branch made and merged over MCP: its note is on the branch only until the merge;
    a conflicting merge is a one-line tool error that writes nothing."""
    scope = new_scope()
    async with as_user(server, "alice") as alice:
        await remember(alice, scope=scope, text=NOTE, acl=["*"])
        made = json.loads(await ok(alice, "branch_memory", scope=scope, name="try/mcp"))
        note = await remember(alice, scope=scope, text="Acme pilot moved to June.",
                              acl=["*"], branch="try/mcp")
        with rest(server, "alice") as http:
            assert http.get(f"/episodes/{note['id']}", params={"scope": scope}
                            ).status_code == 404
            merged = json.loads(await ok(alice, "merge_memory", scope=scope,
                                         source="try/mcp"))
            assert http.get(f"/episodes/{note['id']}", params={"scope": scope}
                            ).status_code == 200
        again = json.loads(await ok(alice, "merge_memory", scope=scope, source="try/mcp"))
        unknown = await refused(alice, "merge_memory", scope=scope, source="nope")
    assert made["name"] == "try/mcp" and made["base"]
    assert merged["merged"] is True and merged["changes"]["episodes"] == 1
    assert again["merged"] is False
    assert "\n" not in unknown and "Traceback" not in unknown


async def test_merge_conflict_error_lists_the_conflicts(server: ServerProcess) -> None:
    """merge_memory refused on a conflict names, on its one line, each (entity,
    predicate) that clashed with its base, ours and theirs, as POST /merge's
    details.conflicts do; nothing is written."""
    scope = new_scope()
    async with as_user(server, "alice") as alice:
        base = await remember(alice, scope=scope, text=NOTE, acl=["*"])
        with rest(server, "alice") as http:
            post_fact(http, scope, base["id"], "budget", "50k", "budget for the pilot is 50k")
            await ok(alice, "branch_memory", scope=scope, name="try/clash")
            for branch, amount in (("try/clash", "70k"), (None, "60k")):
                ep = await remember(alice, scope=scope, acl=["*"], branch=branch,
                                    text=f"Acme budget is now {amount}.")
                r = http.post("/facts", json={
                    "scope": scope, "branch": branch, "entity": "acme",
                    "predicate": "budget", "value": amount,
                    "quote": f"budget is now {amount}",
                    "cites": [{"episode": ep["id"], "unit": 1}]})
                assert r.status_code == 201, r.text
            head = http.get("/ledger", params={"scope": scope}).json()["commits"][0]["id"]
            clash = await refused(alice, "merge_memory", scope=scope, source="try/clash")
            after = http.get("/ledger", params={"scope": scope}).json()["commits"][0]["id"]
    assert "\n" not in clash and "conflicts on 1 value" in clash
    assert 'acme budget: base "50k", ours "60k", theirs "70k"' in clash
    assert after == head


async def test_errors_are_one_line_tool_errors(server: ServerProcess) -> None:
    async with http_client_for(server.url, {"X-AMP-Agent-ID": "agent_nouser"}) as nobody:
        no_user = await refused(nobody, "search_memory", scope="acme/sales", query="x")
    assert "X-AmpUp-User" in no_user
    async with as_user(server, "alice") as alice:
        bad_scope = await refused(alice, "remember_memory", scope="Not A Scope", text="hi")
        both = await refused(alice, "get_episode", scope="acme/sales", id="a" * 64,
                             document="d")
        bad_time = await refused(alice, "search_memory", scope="acme/sales", query="x",
                                 as_of="yesterday")
        # an episode id names one version: as_of with it was ignored without a word
        dated = await refused(alice, "get_episode", scope="acme/sales", id="a" * 64,
                              as_of="2025-01-01T00:00:00Z")
    for text in (no_user, bad_scope, both, bad_time):
        assert "\n" not in text and "Traceback" not in text, text
    assert "scope" in bad_scope and "as_of" in bad_time
    assert dated == ("Invalid request: as_of: as_of picks a version of a document: give it "
                     "with document, not with id")
    # a malformed id answers as GET /episodes/{id} does: as a missing (or unreadable) one
    async with as_user(server, "alice") as alice:
        malformed = await refused(alice, "get_episode", scope="acme/sales", id="xyz")
    with rest(server, "alice") as http:
        r = http.get("/episodes/xyz", params={"scope": "acme/sales"})
    assert (r.status_code, r.json()["error"]["message"]) == (404, malformed)
    assert malformed == "No such episode."


async def test_a_bad_argument_is_named_as_the_tool_names_it(server: ServerProcess) -> None:
    # docs/mcp.md: `Invalid request: <field>: <problem>`, the tool's own argument name.
    scope = new_scope()
    async with as_user(server, "alice") as alice:
        no_query = await refused(alice, "search_memory", scope=scope, query="")
        no_limit = await refused(alice, "query_memory", scope=scope, query="x", limit=0)
        # no query at all is what POST /query says of a body without one (it was "at
        # least 1 character", as if an empty one had been sent)
        left_out = await refused(alice, "query_memory", scope=scope)
    assert no_query.startswith("Invalid request: query: "), no_query
    assert no_limit.startswith("Invalid request: limit: "), no_limit
    assert left_out == "Invalid request: query: Field required"
    async with as_user(server, "alice") as alice:  # POST /branches' and /merge's `from`
        fork = await refused(alice, "branch_memory", scope=scope, name="b1", source="Bad!")
        join = await refused(alice, "merge_memory", scope=scope, source="Bad!")
    assert fork.startswith("Invalid request: source: invalid branch name"), fork
    async with as_user(server, "alice") as alice:  # POST /document's checks
        no_key = await refused(alice, "get_episode", scope=scope, document="")
    assert no_key == "Invalid request: document: String should have at least 1 character"
    assert join == fork


async def test_every_tool_describes_its_arguments_with_the_bounds_the_server_keeps(
        server: ServerProcess) -> None:
    """What a model reads in tools/list: a valid JSON Schema per tool, every argument
    described, the bounds of the REST model the tool's service checks (they were bare
    titles: no `limit` 1..100, no `reward` -1..1), and for the AmpUp and advice tools no
    unknown arguments, as the REST bodies allow none."""
    async with as_user(server, "alice") as alice:
        tools = (await alice.list_tools()).tools
    listed = {t.name: t.input_schema for t in tools}
    # which tools only read (a client may run those without asking) and which delete
    hints = {t.name: t.annotations for t in tools}
    assert all(h is not None for h in hints.values())
    assert {n for n, h in hints.items() if h and h.read_only_hint} == {
        "get_episode", "search_memory", "query_memory", "get_session", "amp_recall",
        "amp_list_memories", "amp_get"}
    assert {n for n, h in hints.items() if h and h.destructive_hint is not False} == {
        "amp_forget", *(n for n, h in hints.items() if h and h.read_only_hint)}
    strict = AMPUP_TOOLS | ADVICE_TOOLS
    for name, schema in listed.items():
        Draft202012Validator.check_schema(schema)
        undescribed = [a for a, p in schema["properties"].items() if not p.get("description")]
        assert undescribed == [], name
        assert schema.get("additionalProperties") is (False if name in strict else None), name

    def bounds(tool: str, arg: str) -> dict[str, Any]:
        prop = listed[tool]["properties"][arg]
        branch = next((b for b in prop.get("anyOf", []) if b["type"] != "null"), prop)
        return {k: v for k, v in branch.items()
                if k in ("minimum", "maximum", "minLength", "maxLength", "minItems")}

    rest_limit = FactSearchRequest.model_json_schema()["properties"]["limit"]
    assert bounds("search_memory", "limit") == {"minimum": 1, "maximum": 100} == {
        k: rest_limit[k] for k in ("minimum", "maximum")}
    # passages take up to 100, typed finds up to 1000: each checked by its own service
    assert bounds("query_memory", "limit") == {"minimum": 1}
    assert bounds("reward_run", "reward") == bounds("end_session", "reward") == {
        "minimum": -1.0, "maximum": 1.0}
    assert bounds("remember_memory", "text") == {"minLength": 1, "maxLength": 1_000_000}
    assert bounds("remember_memory", "acl") == bounds("start_session", "acl") == {
        "minItems": 1}
    assert bounds("get_advice", "task") == {"minLength": 1, "maxLength": 20_000}
    # a label inside POST /episodes' source, with its own limit (test_remember_memory_source…)
    # and not blank (test_remember_memory_refuses_a_blank_source_label)
    assert set(bounds("remember_memory", "source")) == {"minLength", "maxLength"}
    assert bounds("get_session", "session") == bounds("end_session", "session") == {
        "minLength": 1, "maxLength": 64}
    remember = Draft202012Validator(listed["remember_memory"])
    assert remember.is_valid({"scope": "acme/sales", "text": "a note", "acl": ["*"]})
    for bad in ({"scope": "Acme Sales", "text": "a note"}, {"scope": "acme/sales", "text": ""},
                {"scope": "acme/sales", "text": "a", "tags": ["x"]}):
        assert not remember.is_valid(bad), bad


async def test_no_argument_is_dropped_and_each_refusal_names_its_argument(
        server: ServerProcess) -> None:
    """Found by tools/mcp_audit.py: a blank note was refused as ``Invalid request: : the
    body has no text to cite`` (the episode's body, named by no argument); query_memory
    dropped without a word what its find does not take (``offset: -1`` or ``where`` with
    passages; ``query`` or an unknown ``tz`` with facts), which POST /query refuses; and
    close_memory's input schema allowed any object or text for ``value``, which the server
    then refused (POST /close's value: text up to 4000 characters or a money object)."""
    scope = new_scope()
    refusals = [({"query": "x", "offset": -1}, "passages"),
                ({"query": "x", "where": [{"attribute": "a", "op": "eq", "value": 1}],
                  "as_of": "2025-01-01T00:00:00Z"}, "passages"),
                ({"query": "x", "tz": "Nowhere/x"}, "facts"),
                ({"query": "x", "type": "deal"}, "entities")]
    async with as_user(server, "alice") as alice:
        blank = await refused(alice, "remember_memory", scope=scope, text="\n\n\n")
        answers = [await refused(alice, "query_memory", scope=scope, find=find, **args)
                   for args, find in refusals]
        schema = {t.name: t.input_schema for t in (await alice.list_tools()).tools}[
            "close_memory"]
        close = {"scope": scope, "entity": "acme", "predicate": "p", "reason": "r"}
        not_money = await refused(alice, "close_memory", **close, value={"a": 1})
        nul_money = await refused(alice, "close_memory", **close,
                                  value={"amount": "5\x00", "currency": "EUR"})
    assert blank == "Invalid request: text: the body has no text to cite"
    with rest(server, "alice") as http:
        for (args, find), answer in zip(refusals, answers, strict=True):
            r = http.post("/query", json={"scope": scope, "find": find, **args})
            assert r.status_code == 422, r.text
            problems = "; ".join(f"{'.'.join(map(str, e['loc'][1:]))}: {e['msg']}"
                                 for e in r.json()["error"]["details"]["errors"])
            assert answer == f"Invalid request: {problems}", (args, find)
            assert "Extra inputs are not permitted" in answer
    checker = Draft202012Validator(schema)
    assert not checker.is_valid({**close, "value": {"a": 1}})
    assert not checker.is_valid({**close, "value": "x" * 4001})
    assert checker.is_valid({**close, "value": {"amount": "5", "currency": "EUR"}})
    # An object naming neither money field is said to be no value, as POST /close says
    # it (it was "none of the types the input schema allows", from `amount` missing).
    assert not_money == ("Invalid request: value: a value is a JSON string, number or "
                         "boolean (or {amount, currency} for a money attribute)")
    assert nul_money == ("Invalid request: value.amount: text may not contain the NUL "
                         "character (U+0000)")


def raw_tool_calls(server: ServerProcess, user: str, calls: list[tuple[str, str]],
                   ) -> list[dict[str, Any]]:
    """tools/call results for arguments written as JSON text, over plain HTTP: what the SDK
    client cannot send (it writes NaN as null)."""
    headers = {"X-AmpUp-User": user, "Accept": "application/json, text/event-stream",
               "Content-Type": "application/json"}
    version = "2025-06-18"
    with plain_client(base_url=server.url, timeout=60, headers=headers) as http:
        init = http.post("/mcp", json={"jsonrpc": "2.0", "id": 0, "method": "initialize",
                                       "params": {"protocolVersion": version,
                                                  "capabilities": {},
                                                  "clientInfo": {"name": "t", "version": "1"}}})
        session = init.headers.get("mcp-session-id")
        http.headers.update({"mcp-protocol-version": version,
                             **({"mcp-session-id": session} if session else {})})
        http.post("/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"})
        results = []
        for n, (tool, arguments) in enumerate(calls, start=1):
            body = (f'{{"jsonrpc": "2.0", "id": {n}, "method": "tools/call", "params": '
                    f'{{"name": "{tool}", "arguments": {arguments}}}}}')
            r = http.post("/mcp", content=body.encode())
            assert r.status_code == 200, r.text
            data = next(line[5:] for line in r.text.splitlines() if line.startswith("data:"))
            results.append(json.loads(data)["result"])
        return results


async def test_a_number_json_has_not_is_refused_as_post_query_refuses_it(
        server: ServerProcess) -> None:
    """Found by tools/mcp_audit.py: the SDK's parser reads NaN, Infinity and 1e400, and a
    typed query's condition on NaN matched nothing where POST /query refuses the body."""
    scope = new_scope()
    numbers = ["NaN", "Infinity", "1e400"]
    bodies = [f'{{"scope": "{scope}", "find": "facts", "where": [{{"op": "eq", "value": '
              f'{number}}}]}}' for number in numbers]
    results = raw_tool_calls(server, "alice", [("query_memory", b) for b in bodies])
    with rest(server, "alice") as http:
        for number, body, result in zip(numbers, bodies, results, strict=True):
            r = http.post("/query", content=body, headers={"Content-Type": "application/json"})
            assert r.status_code == 422 and "must be finite" in r.text, r.text
            assert result["isError"] is True, (number, result)
            said = result["content"][0]["text"]
            assert said.startswith("Invalid request: where: numbers must be finite JSON "
                                   "numbers, not "), said


# A call the tool's argument check refuses (before the tool runs), and its one line: it was
# pydantic's several-line report ("Error executing tool …", a link, the value's Python
# repr), and an unknown argument was dropped without a word.
BAD_CALLS: list[tuple[str, dict[str, Any], str]] = [
    ("get_advice", {"scope": "acme/sales", "task": "x", "sesion": "ses_1"},
     "Invalid request: sesion: Extra inputs are not permitted"),
    ("remember_memory", {"scope": "acme/sales", "text": "a note", "tags": ["x"]},
     "Invalid request: tags: Extra inputs are not permitted"),
    ("remember_memory", {"scope": "acme/sales"}, "Invalid request: text: Field required"),
    ("remember_memory", {"scope": "acme/sales", "text": 5},
     "Invalid request: text: Input should be a valid string"),
    ("remember_memory", {"scope": "acme/sales", "text": "a", "occurred_at": "2026-01-01T09:00"},
     "Invalid request: occurred_at: Input should have timezone info"),
    ("get_episode", {"scope": "acme/sales", "id": "a" * 64, "as_of": "yesterday"},
     "Invalid request: as_of: Input should be an RFC 3339 time with an offset, "
     "e.g. 2025-07-01T00:00:00Z"),
    ("close_memory", {"scope": "acme/sales", "entity": "e", "predicate": "p", "reason": "r",
                      "value": [1, 2]},
     "Invalid request: value: a value is a JSON string, number or boolean (or {amount, "
     "currency} for a money attribute)"),
    ("end_session", {"session": "ses_1", "transcript": "t", "outcome": "o", "reward": "good"},
     "Invalid request: reward: Input should be a valid number"),
    # types as strict as the REST bodies' (test_tool_arguments_are_as_strict_as_rest_bodies)
    ("search_memory", {"scope": "acme/sales", "query": "x", "limit": "10"},
     "Invalid request: limit: Input should be a valid integer"),
    ("reward_run", {"run": "run_01ARZ3NDEKTSV4RRFFQ69G5FAV", "reward": "1", "reason": "r"},
     "Invalid request: reward: Input should be a valid number"),
    ("merge_memory", {"scope": "acme/sales", "source": "b", "dry_run": "true"},
     "Invalid request: dry_run: Input should be a valid boolean"),
    ("get_session", {"session": "x" * 65},
     "Invalid request: session: String should have at most 64 characters"),
    ("amp_recall", {"query": "x", "owner_id": "user_1", "limit": 1000},
     "Invalid request: limit: Input should be less than or equal to 100"),
    # a list sent as JSON text, nested deeper than the check parses (tools/mcp_audit.py):
    # it said "Invalid request: : Invalid JSON: recursion limit exceeded …", no argument
    ("query_memory", {"scope": "acme/sales", "find": "facts",
                      "where": '[{"op": "eq", "value": ' + "[" * 240 + "]" * 240 + "}]"},
     "Invalid request: where: Input should be a valid array"),
]


async def refuses_bad_calls_in_one_line(client: Client) -> None:
    for tool, args, expected in BAD_CALLS:
        assert await refused(client, tool, **args) == expected, (tool, args)
    # The AMP tools keep the reference's leniency: an unknown argument is dropped, a
    # number in text is taken.
    assert await ok(client, "amp_list_memories", owner_id="user_nobody", extra=1,
                    limit="5") == "No memories found."


async def test_arguments_the_schema_refuses_are_one_line_errors(server: ServerProcess) -> None:
    async with as_user(server, "alice") as alice:
        await refuses_bad_calls_in_one_line(alice)
        # the same words as the service's own check of as_of (search_memory takes text)
        searched = await refused(alice, "search_memory", scope="acme/sales", query="x",
                                 as_of="yesterday")
    assert searched == BAD_CALLS[5][2]
    with rest(server, "alice") as http:  # the refused note was not stored
        assert http.get("/episodes", params={"scope": "acme/sales"}).json()["total"] == 0


async def test_tool_arguments_are_as_strict_as_rest_bodies(server: ServerProcess) -> None:
    """A number or boolean sent as text was taken by the AmpUp and advice tools (the SDK's
    lax check) where the REST bodies refuse it (`parse_body`, strict): the same refusal
    now. A list sent as JSON text (some clients do) is still read as the list."""
    scope = new_scope()
    same = [("search_memory", {"scope": scope, "query": "x", "limit": "10"},
             "/search", {"scope": scope, "query": "x", "limit": "10"}),
            ("merge_memory", {"scope": scope, "source": "b", "dry_run": "true"},
             "/merge", {"scope": scope, "from": "b", "dry_run": "true"}),
            ("record_run", {"scope": scope, "task": "t", "outcome": 1},
             "/runs", {"scope": scope, "task": "t", "outcome": 1})]
    async with as_user(server, "alice") as alice:
        tool_said = [await refused(alice, tool, **args) for tool, args, _, _ in same]
        listed = await remember(alice, scope=scope, text="a note", acl='["*"]')
        # an integral number is an integer, as in JSON Schema and the REST bodies
        whole = await ok(alice, "search_memory", scope=scope, query="note", limit=10.0)
    with rest(server, "alice") as http:
        for said, (tool, _, path, body) in zip(tool_said, same, strict=True):
            r = http.post(path, json=body)
            assert r.status_code == 422, r.text
            problem = r.json()["error"]["details"]["errors"][0]
            assert said == f"Invalid request: {problem['loc'][-1].replace('from', 'source')}: "\
                f"{problem['msg']}", (tool, said, problem)
        got = http.get(f"/episodes/{listed['id']}", params={"scope": scope}).json()
    assert got["acl"] == ["*"] and listed["id"] in whole


async def test_remember_memory_source_is_a_label_with_its_own_limit(
        server: ServerProcess) -> None:
    """remember_memory's source goes into the episode's source after
    `mcp:remember_memory:<user>:`; its bound (and a refusal) said 512, the whole source's.
    The label's own limit fits every user id, the longest too."""
    async with as_user(server, "alice") as alice:
        schema = {t.name: t.input_schema for t in (await alice.list_tools()).tools}
    limit = schema["remember_memory"]["properties"]["source"]["maxLength"]
    assert limit == 512 - len("mcp:remember_memory:") - 200 - len(":")
    longest = "u" * 200  # a user id is at most 200 characters
    scope = new_scope()
    async with http_client_for(server.url, {"X-AmpUp-User": longest}) as client:
        stored = await remember(client, scope=scope, text="a note", source="s" * limit)
        too_long = await refused(client, "remember_memory", scope=scope, text="a note",
                                 source="s" * (limit + 1))
    assert too_long == f"Invalid request: source: String should have at most {limit} characters"
    with rest(server, longest) as http:
        got = http.get(f"/episodes/{stored['id']}", params={"scope": scope}).json()
    assert got["source"] == f"mcp:remember_memory:{longest}:{'s' * limit}"
    assert len(got["source"]) == 512


async def test_remember_memory_refuses_a_blank_source_label(server: ServerProcess) -> None:
    """A blank label was stored as `mcp:remember_memory:alice:` (a source naming nothing);
    it is refused as other blank text is, and the schema says so."""
    scope = new_scope()
    async with as_user(server, "alice") as alice:
        schema = {t.name: t.input_schema for t in (await alice.list_tools()).tools}
        empty = await refused(alice, "remember_memory", scope=scope, text="a note", source="")
        blank = await refused(alice, "remember_memory", scope=scope, text="a note",
                              source="   ")
    assert empty == "Invalid request: source: String should have at least 1 character"
    assert blank == "Invalid request: source: must hold a character other than white space"
    label = schema["remember_memory"]["properties"]["source"]
    assert label["minLength"] == 1
    assert Draft202012Validator(label).is_valid("chat")
    assert not Draft202012Validator(label).is_valid("   ")
    with rest(server, "alice") as http:
        assert http.get("/episodes", params={"scope": scope}).json()["total"] == 0


async def test_get_session_reads_a_session_as_the_rest_route_does(
        server: ServerProcess) -> None:
    """An agent sees its session's reward and state over MCP: the answer of
    GET /sessions/{id}; another user's private session answers as an unknown one."""
    scope = new_scope()
    async with as_user(server, "alice") as alice:
        ses = json.loads(await ok(alice, "start_session", scope=scope, task="the report"))["id"]
        opened = json.loads(await ok(alice, "get_session", session=ses))
        await ok(alice, "end_session", session=ses, transcript="wrote it", outcome="done",
                 reward=0.5, reason="late")
        ended = json.loads(await ok(alice, "get_session", session=ses))
    async with as_user(server, "bob") as bob:
        hidden = await refused(bob, "get_session", session=ses)
        unknown = await refused(bob, "get_session", session="ses_" + "0" * 26)
        not_a_session = await refused(bob, "get_session", session="run_" + "0" * 26)
    with rest(server, "alice") as http:
        assert ended == http.get(f"/sessions/{ses}").json()
    with rest(server, "bob") as http:
        assert http.get(f"/sessions/{ses}").json()["error"]["message"] == hidden
    assert (opened["state"], opened["reward"], opened["judging"]) == ("open", None, None)
    assert (ended["state"], ended["outcome"], ended["judging"]) == ("ended", "done",
                                                                     "not needed")
    assert (ended["reward"]["value"], ended["reward"]["by"]) == (0.5, "explicit")
    assert hidden == unknown == not_a_session == "No such session."


async def test_remember_memory_refuses_an_empty_acl_as_post_episodes_does(
        server: ServerProcess) -> None:
    # An empty list is not "no acl": POST /episodes and the other tools refuse it, and
    # storing the note as private instead would silently ignore what the caller sent.
    scope = new_scope()
    async with as_user(server, "alice") as alice:
        empty = await refused(alice, "remember_memory", scope=scope, text="a note", acl=[])
        record = await refused(alice, "record_run", scope=scope, task="t", acl=[])
    assert empty.startswith("Invalid request: acl: "), empty
    assert empty == record
    with rest(server, "alice") as http:
        assert http.get("/episodes", params={"scope": scope}).json()["total"] == 0
        refused_too = http.post("/episodes", json={"scope": scope, "source": "slack:c/1",
                                                   "body": "a note", "acl": []})
    assert refused_too.status_code == 422


# ---- stdio -----------------------------------------------------------------------------


@asynccontextmanager
async def stdio_as(home: Path, user: str | None,
                   extra: dict[str, str] | None = None) -> AsyncIterator[Client]:
    env = {**os.environ, "AMPUP_MEMORY_HOME": str(home), "AMP_MCP_AGENT_ID": "agent_desk",
           "AMP_EMBEDDING_PROVIDER": "hash", **(extra or {})}
    env.pop("AMPUP_MEMORY_MCP_USER", None)
    if user:
        env["AMPUP_MEMORY_MCP_USER"] = user
    params = StdioServerParameters(command=sys.executable,
                                   args=["-m", "ampup_memory.cli", "mcp"], env=env)
    async with Client(params) as client:
        yield client


async def test_stdio_acts_for_the_configured_user(tmp_path: Path) -> None:
    scope = new_scope()
    async with stdio_as(tmp_path, "carol") as client:
        note = await remember(client, scope=scope, text=NOTE)
        got = json.loads(await ok(client, "get_episode", scope=scope, id=note["id"]))
        found = json.loads(await ok(client, "query_memory", scope=scope, query="budget"))
    assert got["body"] == NOTE and len(got["units"]) == 2
    assert got["source"] == "mcp:remember_memory:carol:chat"
    # the stdio process feeds its own writes: the note is searchable at once
    assert [p["episode"] for p in found["results"]] == [note["id"]]
    async with stdio_as(tmp_path, None) as client:
        refusal = await refused(client, "get_episode", scope=scope, id=note["id"])
        stored = await ok(client, "amp_remember", content="still works", owner_id="user_1")
        await refuses_bad_calls_in_one_line(client)
    assert "AMPUP_MEMORY_MCP_USER" in refusal and "\n" not in refusal
    assert stored.startswith("Memory stored: ")


FILLED = {"scope": "acme/team_1", "text": "t", "task": "t", "reason": "r", "entity": "e",
          "predicate": "p", "name": "n", "source": "s", "transcript": "t", "outcome": "o",
          "query": "q", "reward": 0.5, "run": "run_01ARZ3NDEKTSV4RRFFQ69G5FAV",
          "session": "ses_01ARZ3NDEKTSV4RRFFQ69G5FAV"}


def _text_args(schema: dict[str, Any]) -> list[tuple[str, bool]]:
    """The free-text arguments of a tool's input schema: (name, is a list of strings)."""
    found = []
    for name, prop in schema["properties"].items():
        for alt in prop.get("anyOf", [prop]):
            if alt.get("type") == "string" and "enum" not in alt and "format" not in alt:
                found.append((name, False))
                break
            if alt.get("type") == "array" and alt.get("items", {}).get("type") == "string":
                found.append((name, True))
                break
    return found


async def test_every_ampup_tool_refuses_nul_in_every_text_argument(
        server: ServerProcess) -> None:
    """docs/api.md: U+0000 is a 422 wherever it comes, also in an MCP tool's text. The
    tools passed it on: `record_run` and `start_session` stored it (REST refuses it),
    `search_memory` searched for it, `remember_memory` named the field `2.0`, and on
    PostgreSQL `get_episode`, `close_memory`, `reward_run` and others answered the
    unexpected-error text (its text columns cannot hold U+0000)."""
    async with as_user(server, "alice") as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        wrong = []
        for tool in sorted(AMPUP_TOOLS | ADVICE_TOOLS):
            schema = tools[tool].input_schema
            base = {k: v for k, v in FILLED.items() if k in schema.get("required", [])}
            for name, many in _text_args(schema):
                bad = "x\u0000y"
                result = await client.call_tool(tool, {**base, name: [bad] if many else bad})
                expected = (f"Invalid request: {name}{'.0' if many else ''}: "
                            "text may not contain the NUL character (U+0000)")
                answer = result.content[0].text if result.content else ""
                if not result.is_error or answer != expected:
                    wrong.append(f"{tool}({name}): {answer[:80]!r}")
    assert not wrong, "\n".join(wrong)


# ---- keys on: the key names the user ---------------------------------------------------


def make_key(home: Path, agent: str, user: str | None) -> str:
    args = ["keys", "create", "--agent", agent] + (["--user", user] if user else [])
    made = subprocess.run([sys.executable, "-m", "ampup_memory.cli", *args],
                          env={**os.environ, "AMPUP_MEMORY_HOME": str(home)},
                          capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stderr
    return made.stdout.strip().splitlines()[-1]


async def test_keys_on_the_keys_user_acts_over_http_and_stdio(tmp_path: Path) -> None:
    served, local = tmp_path / "served", tmp_path / "local"
    served.mkdir()
    dave, nobody = make_key(served, "agent_k1", "dave"), make_key(served, "agent_k2", None)
    scope = new_scope()
    with ServerProcess(served, env={"AMP_REQUIRE_KEYS": "true"}) as server:
        # The header may name the key's user; one naming anyone else is refused before any
        # tool runs (tests/test_keys.py has the whole rule).
        async with http_client_for(server.url, {"X-AMP-Agent-ID": "agent_k1",
                                                "X-AMP-API-Key": dave,
                                                "X-AmpUp-User": "dave"}) as client:
            note = await remember(client, scope=scope, text=NOTE)
            got = json.loads(await ok(client, "get_episode", scope=scope, id=note["id"]))
        async with http_client_for(server.url, {"X-AMP-Agent-ID": "agent_k2",
                                                "X-AMP-API-Key": nobody}) as client:
            refusal = await refused(client, "get_episode", scope=scope, id=note["id"])
        spoofed = httpx.post(server.url + "/mcp", timeout=60, json={
            "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"}}},
            headers={"X-AMP-Agent-ID": "agent_k1", "X-AMP-API-Key": dave,
                     "X-AmpUp-User": "eve", "Accept": "application/json, text/event-stream"})
    assert spoofed.status_code == 401 and "another user" in spoofed.text, spoofed.text
    assert got["source"] == "mcp:remember_memory:dave:chat"
    assert "speaks for no AmpUp user" in refusal and "\n" not in refusal

    local.mkdir()
    key = make_key(local, "agent_desk", "dave")
    async with stdio_as(local, None, {"AMP_REQUIRE_KEYS": "true",
                                      "AMP_MCP_API_KEY": key}) as client:
        mine = await remember(client, scope=scope, text=NOTE)
        desk = json.loads(await ok(client, "get_episode", scope=scope, id=mine["id"]))
    assert desk["source"] == "mcp:remember_memory:dave:chat"


async def test_stdio_a_key_revoked_while_running_refuses_every_tool(tmp_path: Path) -> None:
    """docs/security-model.md: a revocation counts on the next request. The stdio process
    checked its key once at start for the AMP tools (which kept storing after a revoke)
    while the AmpUp tools checked it per call: one process, two answers."""
    key = make_key(tmp_path, "agent_desk", "dave")
    listing = subprocess.run([sys.executable, "-m", "ampup_memory.cli", "keys", "list", "--json"],
                             env={**os.environ, "AMPUP_MEMORY_HOME": str(tmp_path)},
                             capture_output=True, text=True, timeout=120)
    key_id = json.loads(listing.stdout.splitlines()[-1])["key_id"]
    scope = new_scope()
    async with stdio_as(tmp_path, None, {"AMP_REQUIRE_KEYS": "true",
                                         "AMP_MCP_API_KEY": key}) as client:
        await remember(client, scope=scope, text=NOTE)
        await ok(client, "amp_remember", content="before", owner_id="user_1")
        revoked = subprocess.run(
            [sys.executable, "-m", "ampup_memory.cli", "keys", "revoke", key_id],
            env={**os.environ, "AMPUP_MEMORY_HOME": str(tmp_path)},
            capture_output=True, text=True, timeout=120)
        assert revoked.returncode == 0, revoked.stderr
        refusals = [await refused(client, "amp_remember", content="after", owner_id="user_1"),
                    await refused(client, "amp_list_memories", owner_id="user_1"),
                    await refused(client, "remember_memory", scope=scope, text="after")]
    assert set(refusals) == {"A valid API key for this agent is required."}


async def test_a_table_storage_failure_is_the_rest_routes_503_as_a_tool_error(
        tmp_path: Path) -> None:
    """The warehouse gone under a running server (an OSError from pyarrow, as an S3 store
    down gives): an MCP write gets the REST routes' 503 text and retry hint as a tool
    error, never the SDK's "Error executing tool" or a traceback."""
    from ampup_memory.errors import storage_unavailable

    scope = new_scope()
    with ServerProcess(tmp_path / "home") as proc:
        async with as_user(proc, "alice") as alice:
            await remember(alice, scope=scope, text=NOTE, source="standup")
            warehouse = proc.home / "warehouse"
            warehouse.rename(proc.home / "warehouse.away")
            warehouse.write_text("not a folder")  # every path under it now fails
            try:
                down = await refused(alice, "remember_memory", scope=scope,
                                     text="Raj moved to Lisbon.", source="standup")
            finally:
                warehouse.unlink()
                (proc.home / "warehouse.away").rename(warehouse)
        with rest(proc, "alice") as http:
            r = http.post("/episodes", json={"scope": scope, "source": "doc:after",
                                              "body": "Raj moved to Lisbon.", "acl": ["*"]})
        log = proc.log_path.read_text()
    assert down == f"{storage_unavailable().message} (Retry after 5 s.)"
    assert r.status_code == 201, r.text
    assert "storage error in an MCP tool call" in log and "Traceback" not in log
