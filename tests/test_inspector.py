"""The web inspector in a real browser (Playwright driving the system's Chromium) against a
real server with seeded data, plus the listing routes it reads (GET /scopes, /episodes,
/entities) over plain HTTP.

One server and one browser for the module: the whole file stays well under 90 seconds.
Screenshots of every page go to ``AMPUP_INSPECTOR_ARTIFACTS`` (default
``tests/artifacts/inspector``); with ``AMPUP_DOCS_SCREENSHOTS=1`` also to
``docs/img/inspector`` (how the docs' pictures are made).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from ampup_memory.advice.sessions import record_advice_step
from ampup_memory.amp.lifecycle import clock, decay_score
from ampup_memory.amp.model import MemoryCell
from ampup_memory.memory.service import MemoryService
from ampup_memory.settings import Settings
from tests.browser import chromium
from tests.memory_support import ADMIN_TOKEN, QUIET, Memory, cli_in_process, run_cli
from tests.server_process import ServerProcess

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = Path(os.environ.get("AMPUP_INSPECTOR_ARTIFACTS")
                 or ROOT / "tests" / "artifacts" / "inspector")
DOCS_IMG = ROOT / "docs" / "img" / "inspector"
SCOPE = "acme/sales"
HIDDEN = "acme/board"
SECRET = "Zanzibar merger"  # words only the secret episode (readable by alice) holds
QUOTE = "renewal is set at 120 seats"

CHAT = ("Dana: hi team, quick update on Globex\n"
        "Sam: the renewal is set at 120 seats, signed yesterday\n"
        "Dana: great, and the champion is still Priya")
SECRET_BODY = f"Board only: the {SECRET} closes in March at 40 million."


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    home = tmp_path_factory.mktemp("inspector")
    with ServerProcess(home, env=QUIET) as server:
        alice = Memory(server.url, "alice")
        ids: dict[str, Any] = {"url": server.url, "home": home}
        r = alice.write(SCOPE, CHAT, ["*"], source="slack:C1/1700000000.000100",
                        occurred_at="2026-03-02T10:00:00Z", about=["account:globex"])
        assert r.status_code == 201, r.text
        ids["chat"] = r.json()["id"]
        r = alice.write(SCOPE, SECRET_BODY, ["user:alice"], source="doc:board/minutes",
                        occurred_at="2026-03-03T10:00:00Z")
        assert r.status_code == 201, r.text
        ids["secret"] = r.json()["id"]
        for version, day in (("Seats were 100 at signing.", "2025-03-01"),
                             ("Seats are 120 after the renewal.", "2026-03-01")):
            r = alice.write(SCOPE, version, ["*"], source="doc:globex/contract",
                            document="globex-contract", occurred_at=f"{day}T09:00:00Z")
            assert r.status_code == 201, r.text
            ids.setdefault("contract", []).append(r.json()["id"])
        r = alice.fact(SCOPE, "account:globex", "seats", 100, "Seats were 100",
                       [(ids["contract"][0], 1)], valid_from="2025-03-01T09:00:00Z")
        assert r.status_code == 201, r.text
        r = alice.fact(SCOPE, "account:globex", "seats", 120, QUOTE, [(ids["chat"], 2)])
        assert r.status_code == 201, r.text
        ids["seats_fact"] = r.json()["id"]
        r = alice.fact(SCOPE, "account:globex", "pending_deal", "Zanzibar merger",
                       SECRET, [(ids["secret"], 1)])
        assert r.status_code == 201, r.text
        r = alice.write(HIDDEN, "Board agenda, private.", ["user:alice"], source="doc:agenda")
        assert r.status_code == 201, r.text
        # A branch with a commit of its own, merged back: the history draws a join.
        r = alice.http.post("/branches", json={"scope": SCOPE, "name": "review"})
        assert r.status_code == 201, r.text
        r = alice.write(SCOPE, "Reviewed: champion confirmed.", ["*"], source="doc:review",
                        branch="review")
        assert r.status_code == 201, r.text
        r = alice.http.post("/merge", json={"scope": SCOPE, "from": "review"})
        assert r.status_code == 200, r.text
        # An AMP cell of agent-1.
        r = httpx.post(f"{server.url}/amp/v1/memories", headers={"X-AMP-Agent-ID": "agent-1"},
                       json={"type": "semantic", "content": {"text": "Globex prefers email."},
                             "identity": {"owner_id": "agent-1", "owner_type": "agent"}})
        assert r.status_code == 201, r.text
        ids["bob"] = alice.as_user("bob")
        ids["alice"] = alice
        yield ids
        alice.close()
        ids["bob"].close()


# -- the listing routes, over HTTP ---------------------------------------------------------

def test_scopes_count_only_what_the_caller_may_read(seeded: dict[str, Any]) -> None:
    alice, bob = seeded["alice"], seeded["bob"]
    mine = {s["scope"]: s for s in alice.http.get("/scopes").json()["scopes"]}
    theirs = {s["scope"]: s for s in bob.http.get("/scopes").json()["scopes"]}
    # alice: chat, secret, two contract versions, the merged review; 3 fact versions, 1 entity
    assert mine[SCOPE] == {"scope": SCOPE, "episodes": 5, "facts": 3, "entities": 1}
    assert mine[HIDDEN]["episodes"] == 1
    # bob reads neither the secret episode nor the fact citing it, nor the board scope
    assert theirs == {SCOPE: {"scope": SCOPE, "episodes": 4, "facts": 2, "entities": 1}}
    assert httpx.get(f"{seeded['url']}/scopes").status_code == 401
    # A deleted workspace's scope is not listed, and does not break the listing.
    ws = alice.http.post("/workspaces", json={"name": "scratch", "ttl": "1h"}).json()["id"]
    assert alice.write(f"{ws}/tmp", "scratch note", ["*"]).status_code == 201
    assert f"{ws}/tmp" in {s["scope"] for s in alice.http.get("/scopes").json()["scopes"]}
    assert alice.http.delete(f"/workspaces/{ws}").status_code == 200
    after = alice.http.get("/scopes")
    assert after.status_code == 200, after.text
    assert {s["scope"] for s in after.json()["scopes"]} == {SCOPE, HIDDEN}


def test_episodes_page_by_cursor_and_hide_unreadable(seeded: dict[str, Any]) -> None:
    alice, bob = seeded["alice"], seeded["bob"]
    seen: list[str] = []
    after = None
    while True:
        params = {"scope": SCOPE, "limit": 2, **({"after": after} if after else {})}
        page = bob.http.get("/episodes", params=params).json()
        assert page["total"] == 4 and len(page["episodes"]) <= 2
        seen += [e["id"] for e in page["episodes"]]
        after = page["next_after"]
        if not after:
            break
    assert len(seen) == len(set(seen)) == 4 and seeded["secret"] not in seen
    contract = [e for e in alice.http.get("/episodes", params={"scope": SCOPE}).json()["episodes"]
                if e["document"] == "globex-contract"]
    assert [e["document_versions"] for e in contract] == [2, 2]
    # A cursor bob may not read answers exactly like an unknown one.
    hidden = bob.http.get("/episodes", params={"scope": SCOPE, "after": seeded["secret"]})
    unknown = bob.http.get("/episodes", params={"scope": SCOPE, "after": "0" * 64})
    assert hidden.status_code == unknown.status_code == 422
    assert hidden.json() == unknown.json()


def test_entities_list_only_visible_facts(seeded: dict[str, Any]) -> None:
    mine = seeded["alice"].http.get("/entities", params={"scope": SCOPE}).json()
    theirs = seeded["bob"].http.get("/entities", params={"scope": SCOPE}).json()
    assert mine["entities"] == [{"entity": "account:globex",
                                 "predicates": ["pending_deal", "seats"], "versions": 3}]
    assert theirs["entities"] == [{"entity": "account:globex", "predicates": ["seats"],
                                   "versions": 2}]


def test_inspector_is_served_without_the_api_schema(seeded: dict[str, Any]) -> None:
    url = seeded["url"]
    page = httpx.get(url + "/")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    assert "default-src 'self'" in page.headers["content-security-policy"]
    assert "/inspector/app.js" in page.text
    assert "/inspector/rooms.js" in page.text
    for asset in ("app.js", "rooms.js", "app.css"):
        assert httpx.get(f"{url}/inspector/{asset}").status_code == 200, asset
    for path in ("/", "/inspector/app.js", "/health", "/amp/v1/health"):  # HEAD as GET, no body
        head = httpx.head(url + path)
        assert (head.status_code, head.content) == (200, b""), path
    missing = httpx.get(url + "/inspector/../pyproject.toml")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "NOT_FOUND"
    assert httpx.get(url + "/inspector/nothing.js").json()["error"]["code"] == "NOT_FOUND"
    paths = httpx.get(url + "/openapi.json").json()["paths"]
    assert "/" not in paths and not any(p.startswith("/inspector") for p in paths)


def test_amp_cells_carry_the_one_decay_score(seeded: dict[str, Any]) -> None:
    url, agent = seeded["url"], {"X-AMP-Agent-ID": "agent-1"}
    first = httpx.get(f"{url}/amp-cells", params={"owner_id": "agent-1"}, headers=agent)
    assert first.status_code == 200, first.text
    [item] = first.json()["cells"]
    cell = MemoryCell.model_validate(item["cell"])
    now = datetime.fromisoformat(first.json()["now"])
    assert item["decay_score"] == decay_score(cell, now) > 0
    assert datetime.fromisoformat(item["decay_clock"]) == clock(cell)
    # Listing is not a read: the clock stays; another agent sees nothing of the cell.
    again = httpx.get(f"{url}/amp-cells", params={"owner_id": "agent-1"}, headers=agent)
    assert again.json()["cells"][0]["decay_clock"] == item["decay_clock"]
    other = httpx.get(f"{url}/amp-cells", params={"owner_id": "agent-1"},
                      headers={"X-AMP-Agent-ID": "agent-2"})
    assert other.status_code == 200 and other.json()["cells"] == []
    assert httpx.get(f"{url}/amp-cells").status_code == 401


def test_lifecycle_history_counts_states_per_pass(seeded: dict[str, Any]) -> None:
    url, admin = seeded["url"], {"X-AMP-Admin-Token": ADMIN_TOKEN}
    # Now, in 2099 (the cell goes stale) and now again (it is active again).
    for body in ({}, {"now": "2099-01-01T00:00:00Z"}, {}):
        r = httpx.post(f"{url}/amp/v1/lifecycle/run", json=body, headers=admin)
        assert r.status_code == 200, r.text
    passes = httpx.get(f"{url}/amp-lifecycle", params={"limit": 3}, headers=admin)
    assert passes.status_code == 200, passes.text
    assert [p["states"] for p in passes.json()["passes"]] == [
        {"active": 1}, {"stale": 1}, {"active": 1}]
    # The counts cover every owner's cells: admins only.
    denied = httpx.get(f"{url}/amp-lifecycle", headers={"X-AMP-Agent-ID": "agent-1"})
    assert denied.status_code == 403


# -- in the browser ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def browser(seeded: dict[str, Any]) -> Iterator[Any]:
    with chromium() as b:
        yield b


class Inspector:
    """One browser page on the inspector; every console error and page error is kept."""

    def __init__(self, browser: Any, url: str, width: int = 1280, height: int = 860) -> None:
        self.url = url
        self.seeded_home: Path | None = None  # the server's home, for `ampup-memory keys`
        self.context = browser.new_context(viewport={"width": width, "height": height})
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.requests: list[str] = []  # every URL the page asked for
        self.page.on("console", lambda m: m.type == "error" and self.errors.append(m.text))
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.set_default_timeout(15000)

    def be(self, user: str = "", agent: str = "", admin: str = "", key: str = "") -> None:
        self.page.goto(self.url + "/")
        self.page.fill("#who-user", user)
        self.page.fill("#who-agent", agent)
        self.page.fill("#who-key", key)
        self.page.fill("#who-admin", admin)
        self.page.click("#who-apply")

    def go(self, hash_: str, ready: str) -> None:
        self.page.evaluate("h => { location.hash = h; }", hash_)
        self.page.wait_for_selector(ready)

    def shot(self, name: str) -> None:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)
        if os.environ.get("AMPUP_DOCS_SCREENSHOTS") == "1":
            DOCS_IMG.mkdir(parents=True, exist_ok=True)
            shutil.copy(ARTIFACTS / f"{name}.png", DOCS_IMG / f"{name}.png")

    def close(self) -> None:
        self.context.close()


@pytest.fixture
def inspector(browser: Any, seeded: dict[str, Any]) -> Iterator[Inspector]:
    ins = Inspector(browser, seeded["url"])
    ins.seeded_home = seeded["home"]
    yield ins
    ins.close()
    assert ins.errors == [], f"console errors: {ins.errors}"


def test_walk_scopes_episode_fact_unit(inspector: Inspector, seeded: dict[str, Any]) -> None:
    page = inspector.page
    inspector.be(user="alice")
    page.wait_for_selector(f"tr[data-scope='{SCOPE}']")
    row = page.locator(f"tr[data-scope='{SCOPE}'] td")
    assert row.all_inner_texts() == [SCOPE, "5", "3", "1"]
    inspector.shot("scopes")
    page.click(f"tr[data-scope='{SCOPE}'] a")
    page.wait_for_selector("#episodes tbody tr")
    assert page.locator("#episodes tbody tr").count() == 5
    assert "globex-contract (2)" in page.inner_text("#episodes")
    inspector.shot("episodes")
    page.click(".tabs a:has-text('Facts')")
    page.click("li[data-entity='account:globex'] a")
    page.wait_for_selector(f".fact[data-fact='{seeded['seats_fact']}']")
    assert page.locator(".fact").count() == 3
    assert page.locator(".fact .track .bar").count() == 3
    current = page.locator(".fact.current")
    assert current.count() == 2  # seats = 120 and the pending deal hold now
    inspector.shot("facts")
    page.click(f".fact[data-fact='{seeded['seats_fact']}'] a.cite")
    page.wait_for_selector("li.unit.cited mark.quote")
    assert page.get_attribute("li.unit.cited", "data-unit") == "2"
    assert page.inner_text("li.unit.cited mark.quote") == QUOTE
    assert page.locator("#units li").count() == 3
    inspector.shot("episode")


def test_history_graph_and_memory_as_of_a_commit(inspector: Inspector) -> None:
    page = inspector.page
    inspector.be(user="alice")
    inspector.go(f"#/scope/{SCOPE}/history", "#commits li")
    assert page.locator("#commits .pill.merge").count() == 1
    assert page.locator("svg.graph path.edge.merge").count() == 1
    # the scopes page, still loading when the hash moved on, drew nothing into this one
    assert page.locator("tr[data-scope]").count() == 0
    assert page.locator("#commits .pill:has-text('review')").count() >= 1
    inspector.shot("history")
    # The oldest commit on main wrote only the chat: memory as of it holds one episode.
    page.locator("#commits li:has(.pill:text-is('main')) a.asof-link").last.click()
    page.wait_for_selector(".asof")
    page.wait_for_selector("#episodes tbody tr")
    assert page.locator("#episodes tbody tr").count() == 1
    assert "slack:C1" in page.inner_text("#episodes tbody")


def test_search_side_by_side(inspector: Inspector) -> None:
    page = inspector.page
    inspector.be(user="alice")
    inspector.go("#/search", "#search-form")
    # The scope field offers the scopes alice may read (GET /scopes), the hidden one too.
    page.wait_for_selector("#known-scopes option", state="attached")
    offered = page.eval_on_selector_all("#known-scopes option", "os => os.map(o => o.value)")
    assert sorted(offered) == sorted([SCOPE, HIDDEN])
    page.fill("#search-form input[name=scope]", SCOPE)
    page.fill("#search-form input[name=q]", "renewal seats")
    page.click("#search-form button")
    page.wait_for_selector("#search-answer")
    facts = page.inner_text("#search-facts")
    assert "account:globex" in facts and "keyword" in facts and "meaning" in facts
    assert page.locator("#search-facts mark.word").count() >= 1
    assert page.locator("#search-passages .hit").count() >= 1
    assert "account:globex" in page.inner_text("#search-answer")
    inspector.shot("search")
    # A query of white space passes the form's `required`: the page sends nothing (the
    # routes would refuse it, 422, in the console) and says why.
    asked = len(inspector.requests)
    page.fill("#search-form input[name=q]", "   ")
    page.press("#search-form input[name=q]", "Enter")
    page.wait_for_selector("#search-blank")
    assert not [u for u in inspector.requests[asked:] if u.endswith(("/search", "/query"))]


def test_a_user_without_access_sees_nothing_of_it(browser: Any, seeded: dict[str, Any]) -> None:
    """bob, on a phone-width screen: neither the secret episode, nor the fact citing it,
    nor the hidden scope, nor a count that would reveal them, on any page."""
    ins = Inspector(browser, seeded["url"], width=390, height=844)
    page = ins.page
    try:
        ins.be(user="bob")
        page.wait_for_selector(f"tr[data-scope='{SCOPE}']")
        assert page.locator("tr[data-scope]").count() == 1  # not acme/board
        assert page.locator(f"tr[data-scope='{SCOPE}'] td").all_inner_texts() == [
            SCOPE, "4", "2", "1"]
        ins.shot("scopes-phone")
        seen = [page.content()]
        ins.go(f"#/scope/{SCOPE}/episodes", "#episodes tbody tr")
        assert page.locator("#episodes tbody tr").count() == 4
        assert page.locator(f"tr[data-episode='{seeded['secret']}']").count() == 0
        assert "4 episodes" in page.inner_text("main")
        seen.append(page.content())
        ins.go(f"#/scope/{SCOPE}/entity/account%3Aglobex", ".fact")
        assert page.locator(".fact").count() == 2
        seen.append(page.content())
        ins.go(f"#/search?scope={SCOPE.replace('/', '%2F')}&q=Zanzibar+merger", "#search-answer")
        page.wait_for_selector("#known-scopes option", state="attached")
        assert page.eval_on_selector_all("#known-scopes option",
                                         "os => os.map(o => o.value)") == [SCOPE]
        # the query names the secret, so the page holds it: the results must not
        results = page.inner_text("#search-facts") + page.inner_text("#search-passages")
        assert SECRET not in results and "Zanzibar" not in results
        assert "40 million" not in page.inner_text("#search-answer")
        ins.go(f"#/scope/{SCOPE}/history", "#commits li")
        seen.append(page.content())
        for html in seen:
            assert SECRET not in html and seeded["secret"] not in html
            assert "40 million" not in html and "pending_deal" not in html
        assert ins.errors == [], f"console errors: {ins.errors}"
    finally:
        ins.close()


def test_cells_and_advice_pages(inspector: Inspector) -> None:
    page = inspector.page
    inspector.be(user="alice")  # no agent: the page asks for one (and sends no request)
    inspector.go("#/cells", "main .empty")
    assert "name one above" in page.inner_text("main")
    # An agent alone reads the cells; the AmpUp pages say they need a user, and ask nothing
    # the routes would refuse (a 401 would show in the console: the fixture fails on it).
    inspector.be(agent="agent-1")
    page.wait_for_selector("main .empty")
    assert "name one above (User)" in page.inner_text("main")
    inspector.be(user="alice", agent="agent-1")
    inspector.go("#/cells?owner=agent-1", "#cells tbody tr")
    assert "Globex prefers email." in page.inner_text("#cells")
    assert page.locator("#cell-states .chart-row").all_inner_texts()[0].split() == [
        "active", "1"]
    # The decay score is the route's (GET /amp-cells), the lifecycle history needs an admin.
    listed = httpx.get(f"{inspector.url}/amp-cells", params={"owner_id": "agent-1"},
                       headers={"X-AMP-Agent-ID": "agent-1"}).json()["cells"][0]
    shown = float(page.inner_text("#cells td.decay"))
    assert abs(shown - listed["decay_score"]) < 0.002
    assert "shown to an admin" in page.inner_text("#lifecycle")
    admin = {"X-AMP-Admin-Token": ADMIN_TOKEN}
    # A non-admin key, or a wrong admin token: GET /amp-cells says so, and the page asks
    # nothing it would be refused (a 403 shows in the console as a failed load).
    assert inspector.seeded_home is not None
    made = run_cli(inspector.seeded_home, QUIET, "keys", "create", "--agent", "agent-1")
    assert made.returncode == 0, made.stderr
    key = made.stdout.strip().splitlines()[-1]
    for who in ({"key": key}, {"admin": "not-the-token"}):
        inspector.be(user="alice", agent="agent-1", **who)
        inspector.go("#/cells?owner=agent-1", "#cells tbody tr")
        assert "shown to an admin" in page.inner_text("#lifecycle"), who
        assert not [u for u in inspector.requests if "/amp-lifecycle" in u], who
    for body in ({"now": "2099-01-01T00:00:00Z"}, {}):  # stale in 2099, active again now
        assert httpx.post(f"{inspector.url}/amp/v1/lifecycle/run", json=body,
                          headers=admin).status_code == 200
    inspector.be(user="alice", agent="agent-1", admin=ADMIN_TOKEN)
    inspector.go("#/cells?owner=agent-1", "#lifecycle svg")
    bars = page.locator("#lifecycle svg g[data-pass]")
    assert bars.count() >= 2
    assert page.locator("#lifecycle svg g[data-pass] rect.st-stale").count() >= 1
    assert page.locator("#lifecycle svg g[data-pass]").last.locator(
        "rect.st-active").count() == 1
    inspector.shot("cells")
    inspector.go(f"#/advice?scope={SCOPE.replace('/', '%2F')}", "main h2")
    assert "No situation map yet." in page.inner_text("main")
    inspector.shot("advice-empty")  # the page with data: tests/test_advice_loop.py


# -- the newer rooms: schema, runs, procedures, workspaces, set aside -----------------------

ADVICE = "acme/ops"
SECRET_RUN = "Rotate the board's signing keys"  # a run only alice may read
POISON = "Summarise the quarterly churn review"  # a session the judge's answers never fit
JUDGED = "Restart the stuck billing queue"  # a public session the judge rewards
RUNBOOK = ("Refunds: check the order is under 30 days old.\n\n"
           "If it is, ask the team lead to approve the refund.\n\n"
           "Gift cards are never refunded in cash.")
TINY_SCHEMA = {"name": "ops", "description": "What the ops team tracks.", "entities": [
    {"name": "service", "attributes": [
        {"name": "tier", "type": "enum", "values": ["gold", "silver"]},
        {"name": "budget", "type": "money", "currency": "EUR"},
        {"name": "depends_on", "type": "ref", "entity": "service", "cardinality": "many",
         "description": "What it calls."}]}],
    "extract": [{"episode_types": ["slack", "doc"], "targets": {"service": ["tier"]},
                 "instructions": "Only what is stated."}]}


@pytest.fixture(scope="module")
def rooms(seeded: dict[str, Any], scripted_model_process: Any) -> dict[str, Any]:
    """The newer rooms seeded through their routes and commands: a schema, 27 runs (one
    alice's alone, one rewarded), a compiled procedure, a workspace, and a session of
    alice's the judge set aside. Every model pass is the CLI's, on the scripted model."""
    alice, home, model = seeded["alice"], seeded["home"], scripted_model_process
    admin = {"X-AMP-Admin-Token": ADMIN_TOKEN}
    out: dict[str, Any] = {}
    r = alice.http.put(f"/schemas/{ADVICE}", json={"schema": TINY_SCHEMA}, headers=admin)
    assert r.status_code == 200, r.text
    runs = []
    for n in range(26):
        r = alice.http.post("/runs", json={"scope": ADVICE, "task": f"Restart worker {n}",
                                           "outcome": "restarted", "acl": ["*"],
                                           "advice_key": "note_restart" if n == 25 else None})
        assert r.status_code == 201, r.text
        runs.append(r.json()["id"])
    r = alice.http.post("/runs/reward", json={"run": runs[-1], "reward": 0.75,
                                              "reason": "back within the SLO"})
    assert r.status_code == 201, r.text
    r = alice.http.post("/runs", json={"scope": ADVICE, "task": SECRET_RUN, "outcome": "done",
                                       "acl": ["user:alice"], "trace": "step 1: sign"})
    assert r.status_code == 201, r.text
    out["runs"], out["secret_run"] = runs, r.json()["id"]
    # A compiled procedure, from a document the admin chose.
    r = alice.write(ADVICE, RUNBOOK, ["*"], document="refund-runbook")
    assert r.status_code == 201, r.text
    out["runbook"] = episode = r.json()["id"]
    r = alice.http.put("/procedures/sources", headers=admin,
                       json={"scope": ADVICE, "documents": ["refund-runbook"]})
    assert r.status_code == 200, r.text
    env = {**QUIET, **model.env("COMPILE_"), **model.env("JUDGE_"), **model.env("EXTRACT_"),
           "AMPUP_MEMORY_MODEL_RETRIES": "0"}
    model.script([{"match": "Refunds: check the order", "reply": {"skills": [
        {"name": "Refund an order", "when": "A customer asks for a refund.",
         "steps": [{"id": "age", "text": "Check the order is under 30 days old",
                    "cites": [{"episode": episode, "unit": 1}]},
                   {"id": "lead", "text": "Ask the team lead to approve",
                    "cites": [{"episode": episode, "unit": 2}]}],
         "edges": [{"from": "age", "to": "lead", "condition": "under 30 days"}],
         "edge_cases": [{"text": "Gift cards are never refunded in cash",
                         "cites": [{"episode": episode, "unit": 3}]}]}]}}])
    done = cli_in_process(home, env, "advice", "compile", "--scope", ADVICE)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["scopes"][0]["procedures"] == 1, done.stdout
    # A session of alice's whose judge answers never have the right shape: set aside.
    ses = alice.http.post("/sessions/start", json={"scope": ADVICE, "task": POISON,
                                                   "acl": ["user:alice"]})
    assert ses.status_code == 201, ses.text
    out["poison"] = ses.json()["id"]
    r = alice.http.post("/sessions/end", json={"session": out["poison"], "transcript": "read it",
                                               "outcome": "summarised"})
    assert r.status_code == 200, r.text
    # A public session that was served a note, ended, and is judged on the first pass.
    out["judged"] = alice.http.post("/sessions/start", json={
        "scope": ADVICE, "task": JUDGED, "acl": ["*"]}).json()["id"]
    svc = MemoryService.open(Settings.model_validate({**QUIET, "AMPUP_MEMORY_HOME": str(home)}))
    try:  # a step as POST /advice appends it (no note is promoted in this scope)
        record_advice_step(svc, "alice", out["judged"], {"key": "note_restart", "kind": "note"})
    finally:
        svc.close()
    r = alice.http.post("/sessions/end", json={"session": out["judged"],
                                               "transcript": "drained, then restarted",
                                               "outcome": "queue moving"})
    assert r.status_code == 200, r.text
    # ... and the runbook (public; the schema's extract rule reads doc episodes) too.
    model.script([{"match": POISON, "reply": "not json at all"},
                  {"match": JUDGED, "reply": {"reward": 0.5, "reason": "restarted, slowly",
                                              "notes": {"note_restart": {"applied": True,
                                                                         "helped": False}}}},
                  {"match": "Refunds: check the order", "reply": "not json either"}])
    for _ in range(3):
        cli_in_process(home, env, "advice", "judge", "--scope", ADVICE)
        cli_in_process(home, env, "extract", "--scope", ADVICE)
    aside = alice.http.get("/set-aside", params={"scope": ADVICE}).json()["items"]
    assert sorted(i["item"] for i in aside) == sorted([out["poison"], episode]), aside
    # A workspace of alice's with a note in one of its scopes.
    r = alice.http.post("/workspaces", json={"name": "triage scratch", "ttl": "2d",
                                             "caps": {"scopes": 3}})
    assert r.status_code == 201, r.text
    out["workspace"] = r.json()["id"]
    assert alice.write(f"{out['workspace']}/notes", "scratch", ["*"]).status_code == 201
    r = alice.http.post(f"/workspaces/{out['workspace']}/snapshots")
    assert r.status_code == 201, r.text
    out["snapshot"] = r.json()["id"]
    return out


def test_schema_tab_shows_the_routes_schema(inspector: Inspector, rooms: dict[str, Any]) -> None:
    page = inspector.page
    inspector.be(user="alice")
    inspector.go(f"#/scope/{ADVICE}/schema", "#schema h2")
    answer = seeded_get(inspector.url, "alice", f"/schemas/{ADVICE}")
    assert answer["schema"] == TINY_SCHEMA | {"entities": answer["schema"]["entities"]}
    for entity in answer["schema"]["entities"]:
        for a in entity["attributes"]:
            cells = page.locator(f"tr[data-attribute='{entity['name']}.{a['name']}'] td")
            texts = cells.all_inner_texts()
            assert texts[0] == a["name"] and texts[1].startswith(a["type"])
            assert texts[2] == a.get("cardinality", "one")
    assert page.inner_text("tr[data-attribute='service.tier'] td:nth-child(2)") == (
        "enum (gold, silver)")
    assert page.locator(".extract-rule td").all_inner_texts() == [
        "slack, doc", "service: tier", "Only what is stated."]
    assert "null" not in page.inner_text("#schema")  # no absent part written as text
    inspector.shot("schema")
    inspector.go(f"#/scope/{SCOPE}/schema", "#schema .empty")
    assert "No schema" in page.inner_text("#schema")


def seeded_get(url: str, user: str, path: str, **params: Any) -> Any:
    r = httpx.get(url + path, params=params, headers={"X-AmpUp-User": user})
    assert r.status_code == 200, r.text
    return r.json()


def test_advice_runs_and_procedures(inspector: Inspector, rooms: dict[str, Any]) -> None:
    page = inspector.page
    inspector.be(user="alice")
    inspector.go(f"#/advice?scope={ADVICE.replace('/', '%2F')}", "#runs tbody tr[data-run]")
    listed = seeded_get(inspector.url, "alice", "/runs", scope=ADVICE, limit=25)
    shown = page.locator("#runs tr[data-run]")
    assert [shown.nth(i).get_attribute("data-run") for i in range(shown.count())] == [
        r["id"] for r in listed["runs"]]
    assert listed["runs"][0]["task"] == SECRET_RUN and listed["next_before"]
    page.click("#runs button.more")
    page.wait_for_selector(f"#runs tr[data-run='{rooms['runs'][0]}']")
    assert shown.count() == 27 and page.locator("#runs button.more").count() == 0
    rewarded = page.locator(f"#runs tr[data-run='{rooms['runs'][-1]}'] td").all_inner_texts()
    [got] = [r for r in listed["runs"] if r["id"] == rooms["runs"][-1]]
    given = got["reward"]
    assert (given["value"], given["user"]) == (0.75, "alice")
    assert rewarded[1:6] == ["Restart worker 25", "restarted",
                             f"0.75 by {given['by']} (alice): {given['reason']}",
                             got["advice_key"], "*"]
    compiled = seeded_get(inspector.url, "alice", "/procedures", scope=ADVICE)
    [skill] = compiled["procedures"]
    card = page.locator(f"#procedures [data-procedure='{skill['key']}']")
    assert card.locator("ol li").all_inner_texts() == skill["steps"]
    assert card.locator("ul li").all_inner_texts() == skill["edge_cases"]
    assert card.locator("a.cite").count() == len(skill["sources"]) == 3
    sessions = seeded_get(inspector.url, "alice", "/sessions", scope=ADVICE, limit=25)
    assert [s["id"] for s in sessions["sessions"]] == [rooms["judged"], rooms["poison"]]
    rows = page.locator("#sessions tr[data-session]")
    page.wait_for_selector(f"#sessions tr[data-session='{rooms['poison']}']")
    assert [rows.nth(i).get_attribute("data-session") for i in range(rows.count())] == [
        s["id"] for s in sessions["sessions"]]
    judged = sessions["sessions"][0]
    given = judged["reward"]
    assert (given["by"], given["value"]) == ("judge", 0.5)
    cells = page.locator(f"#sessions tr[data-session='{rooms['judged']}'] td").all_inner_texts()
    assert cells[1:3] == [JUDGED, "ended"]
    assert given["user"] == "judge"  # named once: not "by judge (judge)"
    assert cells[5] == f"0.5 by judge: {given['reason']}"
    assert cells[6] == "note_restart: applied, did not help" and cells[7] == "*"
    poisoned = page.locator(f"#sessions tr[data-session='{rooms['poison']}'] td")
    assert poisoned.all_inner_texts()[5] == "judging pending"
    inspector.shot("advice-runs")
    page.click(f"#sessions tr[data-session='{rooms['judged']}'] a")
    page.wait_for_selector("#session")
    one = seeded_get(inspector.url, "alice", f"/sessions/{rooms['judged']}")
    assert one["transcript"] in page.inner_text("main") and JUDGED in page.inner_text("#session")
    assert page.inner_text("#session-verdicts") == "note_restart: applied, did not help"
    assert page.locator("ul.steps li").all_inner_texts() == [
        f"{one['steps'][0]['at'].replace('T', ' ').replace('Z', '')} note_restart (note)"]
    inspector.shot("session")
    inspector.go(f"#/advice?scope={ADVICE.replace('/', '%2F')}", "#runs tbody tr[data-run]")
    page.click(f"#runs tr[data-run='{rooms['secret_run']}'] a")
    page.wait_for_selector("#run")
    one = seeded_get(inspector.url, "alice", f"/runs/{rooms['secret_run']}")
    assert one["trace"] in page.inner_text("main") and one["task"] in page.inner_text("#run")


def test_workspaces_and_set_aside(inspector: Inspector, rooms: dict[str, Any]) -> None:
    page = inspector.page
    inspector.be(user="alice")
    inspector.go("#/workspaces", f"tr[data-workspace='{rooms['workspace']}']")
    [ws] = seeded_get(inspector.url, "alice", "/workspaces")["workspaces"]
    row = page.locator(f"tr[data-workspace='{ws['id']}'] td").all_inner_texts()
    assert row[1:3] == ["triage scratch", "alice"] and row[5] == "1 / 3"
    page.click(f"tr[data-workspace='{ws['id']}'] a")
    page.wait_for_selector("#workspace")
    for cap in ("scopes", "episodes", "facts", "bytes"):
        used = page.inner_text(f"[data-cap='{cap}'] .used")
        assert used == f"{ws['usage'][cap]} / {ws['caps'][cap]}", cap
    page.wait_for_selector(f"#snapshots tr[data-snapshot='{rooms['snapshot']}']")
    one = seeded_get(inspector.url, "alice", f"/workspaces/{ws['id']}")
    assert page.locator("ul.ws-scopes li").all_inner_texts() == one["scopes"] == [
        f"{ws['id']}/notes"]
    [snap] = seeded_get(inspector.url, "alice", f"/workspaces/{ws['id']}/snapshots")["snapshots"]
    cells = page.locator(f"#snapshots tr[data-snapshot='{snap['id']}'] td").all_inner_texts()
    assert cells[2:4] == ["alice", "live"] and list(snap["heads"])[0] in cells[4]
    inspector.shot("workspace")
    inspector.go(f"#/set-aside?scope={ADVICE.replace('/', '%2F')}", "#extraction-status")
    items = seeded_get(inspector.url, "alice", "/set-aside", scope=ADVICE)["items"]
    assert {i["kind"] for i in items} == {"judge", "extract"}
    for item in items:
        cells = page.locator(f"#set-aside tr[data-item='{item['item']}'] td").all_inner_texts()
        assert cells == [item["kind"], item["item"], item["branch"] or "—", item["model"],
                         item["reason"], str(item["passes"]), cells[6]], cells
    status = seeded_get(inspector.url, "alice", "/extraction/status", scope=ADVICE)
    shown = page.inner_text("#extraction-status")
    assert status["model"] in shown and status["schema_name"] in shown
    [extracted] = seeded_get(inspector.url, "alice", "/extraction/set-aside",
                             scope=ADVICE)["items"]
    assert extracted["item"] == rooms["runbook"]
    row = page.locator(f"#extraction-set-aside tr[data-item='{rooms['runbook']}'] td")
    assert row.all_inner_texts()[4] == extracted["reason"]
    inspector.shot("set-aside")
    page.click(f"#set-aside tr[data-item='{rooms['runbook']}'] a")  # the episode it is
    page.wait_for_selector("#units li")
    assert "Gift cards" in page.inner_text("#units")
    inspector.go(f"#/set-aside?scope={ADVICE.replace('/', '%2F')}", "#extraction-status")
    page.click(f"#set-aside tr[data-item='{rooms['poison']}'] a")  # the session it is
    page.wait_for_selector("#session")
    assert POISON in page.inner_text("#session") and "pending" in page.inner_text("#session")


def test_a_second_user_sees_none_of_the_first_users_rooms(
        browser: Any, seeded: dict[str, Any], rooms: dict[str, Any]) -> None:
    """bob, at phone width: the runs page without alice's restricted run (and the count
    the route pages), no workspace of alice's, none of her set-aside sessions."""
    ins = Inspector(browser, seeded["url"], width=390, height=844)
    page = ins.page
    try:
        ins.be(user="bob")
        ins.go(f"#/advice?scope={ADVICE.replace('/', '%2F')}", "#runs tbody tr[data-run]")
        page.wait_for_selector(f"#sessions tr[data-session='{rooms['judged']}']")
        assert page.locator("#sessions tr[data-session]").count() == 1  # not her own one
        page.click("#runs button.more")
        page.wait_for_selector(f"#runs tr[data-run='{rooms['runs'][0]}']")
        listed = [r["id"] for r in seeded_get(seeded["url"], "bob", "/runs", scope=ADVICE,
                                              limit=100)["runs"]]
        shown = page.locator("#runs tr[data-run]")
        assert [shown.nth(i).get_attribute("data-run") for i in range(shown.count())] == listed
        assert rooms["secret_run"] not in listed and len(listed) == 26
        html = [page.content()]
        ins.shot("advice-runs-phone")
        # At phone width the page itself never scrolls sideways (its tables do, inside).
        fits = "document.documentElement.scrollWidth <= window.innerWidth"
        assert page.evaluate(fits)
        # Everyone's workspaces are an admin's to list (the route answers 403 without the
        # credential, where it passed off bob's own list as everyone's): the page asks for it.
        ins.go("#/workspaces?all=true", "main .empty")
        assert "an admin's to list" in page.inner_text("main .empty") and page.evaluate(fits)
        html.append(page.content())
        ins.go(f"#/set-aside?scope={ADVICE.replace('/', '%2F')}", "#extraction-status")
        # The public runbook's extraction, as the route lists it to bob; not her session.
        assert [page.locator("#set-aside tbody tr").nth(0).get_attribute("data-item")] == [
            i["item"] for i in seeded_get(seeded["url"], "bob", "/set-aside",
                                          scope=ADVICE)["items"]] == [rooms["runbook"]]
        assert page.locator("#set-aside tbody tr").count() == 1 and page.evaluate(fits)
        # The scope fields offer what GET /scopes lists to bob: alice's workspace scope is
        # among them, its note being readable by everyone ("*"), as the route's rule says
        # (a workspace's scopes are read by their ACLs, docs/api.md). Nothing else of her
        # workspace may show.
        page.wait_for_selector(f"#known-scopes option[value='{rooms['workspace']}/notes']",
                               state="attached")
        offered = page.eval_on_selector_all("#known-scopes option", "os => os.map(o => o.value)")
        assert sorted(offered) == sorted(
            s["scope"] for s in seeded_get(seeded["url"], "bob", "/scopes")["scopes"])
        assert f"{rooms['workspace']}/notes" in offered
        html.append(page.content())
        ins.go(f"#/session/{rooms['poison']}", "main .error")  # her session: the route's 404
        assert "404 NOT_FOUND" in page.inner_text("main .error")
        ins.errors = [e for e in ins.errors if "404" not in e]  # the refused load itself
        html.append(page.content())
        ins.go(f"#/workspace/{rooms['workspace']}", "main .error")
        assert "404 NOT_FOUND" in page.inner_text("main .error")
        ins.errors = [e for e in ins.errors if "404" not in e]
        html.append(page.content())
        ins.go(f"#/scope/{ADVICE}/schema", "#schema h2")  # any caller reads a schema
        assert page.locator("tr[data-attribute]").count() == 3 and page.evaluate(fits)
        for text in html:
            text = re.sub(r'<datalist id="known-scopes">.*?</datalist>', "", text)
            assert SECRET_RUN not in text and rooms["secret_run"] not in text
            assert rooms["workspace"] not in text and rooms["poison"] not in text
            assert POISON not in text
        assert ins.errors == [], f"console errors: {ins.errors}"
    finally:
        ins.close()


# Stored text that would run if any page put it in as markup: a script, event handlers on
# an image and an SVG, a javascript: link, and quotes that end an attribute first.
HOSTILE = ('"\'><script>window.__pwned=1</script><img src=x onerror="window.__pwned=2">'
           '<svg onload="window.__pwned=3"></svg><a href="javascript:window.__pwned=4">j</a>')
# Elements only that markup would make (the pages draw no image, no script in <main>).
INJECTED = ("main script, main img, main svg[onload], main [onerror], main [onload], "
            "a[href^='javascript' i], iframe, object, embed")
WATCH = """document.addEventListener('securitypolicyviolation',
  e => (window.__csp = window.__csp || []).push(e.violatedDirective + ' ' + e.blockedURI));"""


def test_stored_hostile_text_is_shown_as_text(browser: Any, seeded: dict[str, Any]) -> None:
    """mallory stores markup in every field a page shows (episode body, source, about,
    document, fact entity and value, a schema's descriptions and enum value, a run's and a
    session's texts, a workspace's name, a cell's text, metadata and session id, an agent
    id) and opens every page, and links whose hash holds markup: no script runs, the
    policy refuses nothing (nothing reached the page as markup) and the text shows as it
    was stored."""
    url, scope = seeded["url"], f"evil{datetime.now():%H%M%S%f}/team_1"
    me = {"X-AmpUp-User": "mallory", "X-AMP-Agent-ID": "agent-evil"}
    acl = ["user:mallory"]
    with httpx.Client(base_url=url, headers=me, timeout=60) as http:
        def made(r: httpx.Response) -> dict[str, Any]:
            assert r.status_code in (200, 201), r.text
            body: dict[str, Any] = r.json()
            return body
        episode = made(http.post("/episodes", json={
            "scope": scope, "source": "doc:" + HOSTILE, "body": HOSTILE + "\n\nsecond unit",
            "acl": acl, "about": [HOSTILE], "document": HOSTILE}))["id"]
        made(http.post("/facts", json={"scope": scope, "entity": HOSTILE, "predicate": "plan",
                                       "value": HOSTILE, "quote": "<script>window.__pwned=1",
                                       "cites": [{"episode": episode, "unit": 1}]}))
        made(http.put(f"/schemas/{scope}", headers={"X-AMP-Admin-Token": ADMIN_TOKEN}, json={
            "schema": {"name": "ops", "description": HOSTILE, "entities": [
                {"name": "service", "attributes": [
                    {"name": "tier", "type": "enum", "values": [HOSTILE, "b"],
                     "description": HOSTILE}]}],
                "extract": [{"episode_types": ["doc"], "targets": {"service": ["tier"]},
                             "instructions": HOSTILE}]}}))
        run = made(http.post("/runs", json={"scope": scope, "task": HOSTILE,
                                            "outcome": HOSTILE, "trace": HOSTILE}))["id"]
        session = made(http.post("/sessions/start", json={"scope": scope, "task": HOSTILE}))
        made(http.post("/sessions/end", json={"session": session["id"], "transcript": HOSTILE,
                                              "outcome": HOSTILE, "reward": 1,
                                              "reason": HOSTILE}))
        workspace = made(http.post("/workspaces", json={"name": HOSTILE, "ttl": "1h"}))["id"]
        made(http.post("/amp/v1/memories", json={
            "type": "semantic", "content": {"text": HOSTILE, "metadata": {HOSTILE: HOSTILE}},
            "identity": {"owner_id": "agent-evil", "owner_type": "agent",
                         "session_id": HOSTILE}}))
    ins = Inspector(browser, url)
    page = ins.page
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.add_init_script(WATCH)
    esc = scope.replace("/", "%2F")
    pages = ["#/", f"#/scope/{scope}/episodes", f"#/scope/{scope}/episode/{episode}?unit=1",
             f"#/scope/{scope}/facts", f"#/scope/{scope}/entity/{quote(HOSTILE, safe='')}",
             f"#/scope/{scope}/schema", f"#/scope/{scope}/history", f"#/advice?scope={esc}",
             f"#/run/{run}", f"#/session/{session['id']}", "#/workspaces",
             f"#/workspace/{workspace}", "#/cells", f"#/set-aside?scope={esc}",
             # Markup in the link itself (a page reads its hash).
             f"#/scope/{quote(HOSTILE, safe='')}/x/episodes", f"#/run/{quote(HOSTILE)}",
             f"#/search?scope={quote(HOSTILE, safe='')}", f"#/advice?scope={quote(HOSTILE)}"]
    try:
        ins.be(user="mallory", agent="agent-evil")
        shown = []
        for hash_ in pages:
            page.evaluate("h => { location.hash = h; }", hash_)
            try:
                page.wait_for_function(
                    "() => document.querySelector('main .error') "
                    "|| !document.getElementById('main').innerText.includes('Loading…')")
            except Exception:
                raise AssertionError((hash_, page.inner_text("main"))) from None
            page.wait_for_timeout(50)
            shown.append(page.inner_text("main"))
            assert page.locator(INJECTED).count() == 0, (hash_, page.content()[:3000])
        ins.go(f"#/search?scope={esc}", "#search-form")
        page.fill("#search-form input[name=scope]", scope)
        page.fill("#search-form input[name=q]", "pwned script")
        page.click("#search-form button")
        page.wait_for_selector("#search-answer")
        shown.append(page.inner_text("main"))
        assert page.locator(INJECTED).count() == 0, page.content()[:3000]
        assert page.evaluate("window.__pwned") is None
        assert page.evaluate("window.__csp || []") == []
        assert dialogs == []
        assert not [e for e in ins.errors if "Content Security Policy" in e], ins.errors
        # The markup shows as the text it is, on the pages that show each field.
        text = "\n".join(shown)
        assert text.count('<script>window.__pwned=1</script>') >= 10, text[:2000]
        assert 'onerror="window.__pwned=2"' in text and "javascript:window.__pwned=4" in text
    finally:
        ins.close()
