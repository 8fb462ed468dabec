"""Edges an outside reviewer hit over real HTTP (branches, holds, schemas, extraction,
advice), each one a case the docs promise and the server once got wrong."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.memory_support import ADMIN_TOKEN, QUIET, Memory, new_scope, run_cli, start


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("review")


@pytest.fixture(scope="module")
def m(home: Path) -> Iterator[Memory]:
    # No workspace gc pass: a workspace that expires stays expired (not dropped) while a
    # test reads it.
    proc = start(home, {**QUIET, "AMPUP_MEMORY_WORKSPACE_GC_INTERVAL_SECONDS": "0"})
    client = Memory(proc.url)
    yield client
    client.close()
    proc.stop()


def seeded(m: Memory) -> tuple[str, str]:
    scope = new_scope()
    r = m.write(scope, "Acme plan is basic.")
    assert r.status_code == 201, r.text
    ep = r.json()["id"]
    r = m.fact(scope, "acme", "plan", "basic", "plan is basic", [(ep, 1)])
    assert r.status_code == 201, r.text
    return scope, ep


def test_a_fresh_branch_head_reads_through_at_commit_pin_and_snapshot(m: Memory) -> None:
    """A branch with no commit of its own has its creation marker for head (GET /branches
    says so); a pin or snapshot holds that head, and reading it must see the fork point,
    not answer 404 as if the commit were on no branch."""
    scope, _ = seeded(m)
    made = m.http.post("/branches", json={"scope": scope, "name": "try/fresh"})
    assert made.status_code == 201, made.text
    head = made.json()["head"]
    listed = {b["name"]: b["head"] for b in
              m.http.get("/branches", params={"scope": scope}).json()["branches"]}
    assert listed["try/fresh"] == head
    on_main = m.facts(scope, "acme").json()["facts"]
    assert [f["value"] for f in on_main] == ["basic"]

    r = m.facts(scope, "acme", branch="try/fresh", at_commit=head)
    assert r.status_code == 200, r.text
    assert r.json()["facts"] == on_main
    held = m.http.post("/pin", json={"scope": scope, "branch": "try/fresh", "ttl": "1h"})
    assert held.status_code == 201 and held.json()["commit"] == head, held.text
    r = m.facts(scope, "acme", pin=held.json()["id"])
    assert r.status_code == 200, r.text
    assert r.json()["facts"] == on_main
    snap = m.http.post("/snapshots", json={"scopes": [scope]})
    assert snap.json()["heads"][f"{scope}@try/fresh"] == head, snap.text
    sid = snap.json()["id"]
    r = m.facts(scope, "acme", snapshot=sid, branch="try/fresh")
    assert r.status_code == 200, r.text
    assert r.json()["facts"] == on_main
    r = m.http.post("/search", json={"scope": scope, "query": "acme plan",
                                     "snapshot": sid, "branch": "try/fresh"})
    assert r.status_code == 200, r.text
    # The fork point is main's commit, not the branch's: still refused there.
    r = m.facts(scope, "acme", branch="try/fresh", at_commit=on_main[0]["commit"])
    assert r.status_code == 404, r.text


def test_a_schema_refused_across_its_parts_names_where(m: Memory) -> None:
    """schemas-and-queries.md: a refused schema's ``details.errors[0].loc`` points at the
    problem, the cross-part ones too (a ref to an unknown type, a name defined twice, an
    extract rule naming what the schema lacks)."""
    def deal(*attrs: dict[str, object]) -> dict[str, object]:
        return {"name": "deal", "attributes": list(attrs) or [{"name": "a", "type": "string"}]}

    cases = [
        ({"entities": [deal({"name": "acct", "type": "ref", "entity": "account"})]},
         ["body", "schema", "entities", 0, "attributes", 0, "entity"]),
        ({"entities": [deal({"name": "a", "type": "string"}, {"name": "a", "type": "text"})]},
         ["body", "schema", "entities", 0, "attributes", 1, "name"]),
        ({"entities": [deal(), deal()]}, ["body", "schema", "entities", 1, "name"]),
        ({"entities": [deal()], "extract": [{"episode_types": ["fax"],
                                             "targets": {"deal": ["a"]}}]},
         ["body", "schema", "extract", 0, "episode_types"]),
        ({"entities": [deal()], "extract": [{"episode_types": ["call"],
                                             "targets": {"deal": ["zz"]}}]},
         ["body", "schema", "extract", 0, "targets", "deal"]),
    ]
    admin = {"X-AMP-Admin-Token": QUIET["AMP_ADMIN_TOKEN"]}
    org, team = new_scope().split("/")
    for body, loc in cases:
        r = m.http.put(f"/schemas/{org}/{team}", headers=admin,
                       json={"schema": {"name": "t", **body}})
        assert r.status_code == 422, r.text
        err = r.json()["error"]["details"]["errors"][0]
        assert (err["type"], err["loc"]) == ("schema_invalid", loc), r.text


WIRE_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")


def test_situations_keep_one_shape_and_the_wire_time_spelling(m: Memory, home: Path) -> None:
    """GET /situations answers the same keys before and after the first map (advice.md's
    shape), and its time is spelled like every other time on the wire (RFC 3339, Z)."""
    scope = new_scope()
    before = m.http.get("/situations", params={"scope": scope})
    assert before.status_code == 200, before.text
    assert before.json()["versions"] == 0 and before.json()["named_by"] is None
    for task in ("refund a late order", "refund a damaged order", "reset a password",
                 "reset a forgotten password"):
        r = m.http.post("/runs", json={"scope": scope, "task": task, "acl": ["*"]})
        assert r.status_code == 201, r.text
        r = m.http.post("/runs/reward", json={"run": r.json()["id"], "reward": 0.5,
                                              "reason": "ok"})
        assert r.status_code == 201, r.text
    done = run_cli(home, QUIET, "advice", "cluster", "--scope", scope)
    assert done.returncode == 0, done.stderr
    after = m.http.get("/situations", params={"scope": scope}).json()
    assert set(after) == set(before.json()), (after, before.text)
    assert after["versions"] == 1 and after["named_by"] == "words"
    assert WIRE_TIME.fullmatch(after["built_at"]), after["built_at"]


@pytest.fixture
def page(m: Memory) -> Iterator[tuple[Any, list[str]]]:
    """A browser page on the inspector as alice, and the console and page errors it met."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.skip("no chromium on this machine (apt-get install chromium)")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=exe, args=["--no-sandbox"])
        tab = browser.new_page()
        tab.set_default_timeout(15000)
        errors: list[str] = []
        tab.on("pageerror", lambda e: errors.append(str(e)))
        tab.on("console", lambda msg: msg.type == "error" and errors.append(msg.text))
        tab.goto(m.url + "/")
        tab.fill("#who-user", "alice")
        tab.click("#who-apply")
        tab.wait_for_selector("text=Scopes")
        yield tab, errors
        browser.close()


def test_inspector_survives_a_bad_escape_in_its_link(m: Memory,
                                                     page: tuple[Any, list[str]]) -> None:
    """A hand-typed inspector link with a bad %-escape draws its page (or its error box)
    instead of throwing before the page is drawn and leaving the last page on screen."""
    tab, errors = page
    scope, _ = seeded(m)
    tab.evaluate("h => { location.hash = h; }", f"#/scope/{scope}/entity/acme%ZZ")
    tab.wait_for_selector("h2:has-text('acme%ZZ')")
    assert errors == []


def test_inspector_shows_memory_as_of_a_branch_commit(m: Memory,
                                                      page: tuple[Any, list[str]]) -> None:
    """inspector.md: History's "show memory as of this commit" opens the memory that commit
    left. For a commit on a branch the read must name the branch (it answered 404, as the
    commit is on no other branch)."""
    tab, errors = page
    scope, _ = seeded(m)
    assert m.http.post("/branches", json={"scope": scope, "name": "try/side"}).status_code == 201
    r = m.write(scope, "Only the side branch says this.", source="doc:side", branch="try/side")
    assert r.status_code == 201, r.text
    side_commit = r.json()["commit"]
    tab.evaluate("h => { location.hash = h; }", f"#/scope/{scope}/history")
    tab.click(f"li[data-commit='{side_commit}'] a.asof-link")
    tab.wait_for_selector("tr:has-text('doc:side')")
    assert "try/side" in tab.inner_text("p.asof")
    tab.click("nav.tabs a:has-text('Facts')")  # the tabs keep reading that commit
    tab.wait_for_selector("li[data-entity='acme']")
    assert errors == []


async def test_remember_memory_names_its_own_argument_when_refused(m: Memory) -> None:
    """mcp.md: a refused value answers ``Invalid request: <field>: <problem>``. The note's
    text is stored as the episode's body; the error names ``text``, the tool's argument
    (it named no field at all)."""
    from tests.test_mcp import http_client_for, refused

    scope = new_scope()
    async with http_client_for(m.url, {"X-AMP-Agent-ID": "agent_alice",
                                       "X-AmpUp-User": "alice"}) as alice:
        empty = await refused(alice, "remember_memory", scope=scope, text="")
    assert empty.startswith("Invalid request: text: "), empty


def test_a_branch_needs_a_name(m: Memory) -> None:
    """An empty name is refused as a bad name (422), not read as main (409 'Branch main
    already exists', an answer about a branch the caller never named)."""
    scope, _ = seeded(m)
    r = m.http.post("/branches", json={"scope": scope, "name": ""})
    assert r.status_code == 422, r.text
    err = r.json()["error"]["details"]["errors"][0]
    assert (err["loc"], err["type"]) == (["body", "name"], "branch_invalid"), r.text


def test_branches_of_a_gone_workspace_are_a_workspace_gone(m: Memory) -> None:
    """branches.md: a read or write of a workspace org that is not live answers 404
    WORKSPACE_GONE; GET /branches listed a main branch for it instead, and a branch delete
    or merge answered the NOT_FOUND of an unknown branch."""
    made = m.http.post("/workspaces", json={"name": "review", "ttl": "1h"})
    assert made.status_code == 201, made.text
    ws = made.json()["id"]
    r = m.http.get("/branches", params={"scope": f"{ws}/sales"})
    assert r.status_code == 200, r.text
    assert m.http.delete(f"/workspaces/{ws}").status_code == 200
    for org in (ws, "ws_0000000000000000"):
        scope = f"{org}/sales"
        for r in (m.http.get("/branches", params={"scope": scope}),
                  m.http.delete("/branches/x", params={"scope": scope}),
                  m.http.post("/merge", json={"scope": scope, "from": "x"})):
            assert (r.status_code, r.json()["error"]["code"]) == (404, "WORKSPACE_GONE"), r.text


def test_runs_and_sessions_of_an_expired_workspace_read_as_gone(m: Memory) -> None:
    """branches.md: an expired workspace reads and writes as gone at once. GET /runs/{id}
    and GET /sessions/{id} take no scope, and answered a run or session of one with 200
    until the gc pass dropped it. A reader gets WORKSPACE_GONE, as a reward or an end of
    it already did; anyone else the NOT_FOUND of an unknown id, byte for byte."""
    import time

    made = m.http.post("/workspaces", json={"name": "review", "ttl": "2s"})
    assert made.status_code == 201, made.text
    scope = f"{made.json()['id']}/sales"
    run = m.http.post("/runs", json={"scope": scope, "task": "renew the contract"})
    assert run.status_code == 201, run.text
    ses = m.http.post("/sessions/start", json={"scope": scope, "task": "renew"})
    assert ses.status_code == 201, ses.text
    paths = [f"/runs/{run.json()['id']}", f"/sessions/{ses.json()['id']}"]
    for path in paths:
        assert m.http.get(path).status_code == 200
    time.sleep(2.5)
    bob = m.as_user("bob")
    try:
        for path, unknown in zip(paths, ["/runs/run_" + "0" * 26, "/sessions/ses_" + "0" * 26],
                                 strict=True):
            r = m.http.get(path)
            assert (r.status_code, r.json()["error"]["code"]) == (404, "WORKSPACE_GONE"), r.text
            hidden, missing = bob.http.get(path), bob.http.get(unknown)
            assert hidden.status_code == missing.status_code == 404, hidden.text
            assert hidden.content == missing.content
        r = m.http.post("/runs/reward", json={"run": run.json()["id"], "reward": 1,
                                             "reason": "done"})
        assert (r.status_code, r.json()["error"]["code"]) == (404, "WORKSPACE_GONE"), r.text
    finally:
        bob.close()


def test_every_ttl_field_publishes_the_rule_the_server_applies(m: Memory) -> None:
    """One spelling of a time to live (timefmt.parse_ttl) serves pins, their renewal and
    workspaces; the OpenAPI schema published `^[0-9]{1,9}[smhd]$` for the pin and both
    renew bodies while the server took `1w` and `1d12h` there, as on workspace creation.
    Each ttl field's published pattern must say exactly what its route accepts."""
    scope, _ = seeded(m)
    spec = m.http.get("/openapi.json").json()["components"]["schemas"]
    ws = m.http.post("/workspaces", json={"name": "ttl", "ttl": "1h"}).json()["id"]
    pin = m.http.post("/pin", json={"scope": scope, "ttl": "1h"}).json()["id"]
    patterns = {name: spec[name]["properties"]["ttl"]["pattern"]
                for name in ("PinRequest", "RenewRequest", "CreateWorkspace")}
    assert len(set(patterns.values())) == 1, patterns
    pattern = patterns["PinRequest"]
    routes = [("/pin", {"scope": scope}, 201), (f"/pin/{pin}/renew", {}, 200),
              ("/workspaces", {"name": "ttl"}, 201), (f"/workspaces/{ws}/renew", {}, 200)]
    for path, body, ok in routes:
        for ttl in ("30m", "7d", "1w", "1d12h", "7D", "1.5h", "1 h", "h"):
            r = m.http.post(path, json={**body, "ttl": ttl})
            want = ok if re.search(pattern, ttl) else 422
            assert r.status_code == want, (path, ttl, r.text)


def test_every_route_of_a_gone_workspace_answers_a_published_404(m: Memory) -> None:
    """A scope of a workspace that is not live is 404 WORKSPACE_GONE on every route that
    takes one (api.md, Workspaces), and the OpenAPI schema must list that 404: GET
    /branches and POST /snapshots answered it without publishing it."""
    spec = m.http.get("/openapi.json").json()["paths"]
    scope, ep = "ws_0000000000000000/sales", "0" * 64
    admin = {"X-AMP-Admin-Token": ADMIN_TOKEN}
    fact = {"entity": "acme", "predicate": "plan", "value": "basic", "quote": "basic",
            "cites": [{"episode": ep, "unit": 1}]}
    episode = {"source": "doc:x", "body": "text", "acl": ["*"]}
    calls: list[tuple[str, str, str, dict[str, Any], dict[str, Any], dict[str, str]]] = [
        ("GET", "/branches", "/branches", {"scope": scope}, {}, {}),
        ("POST", "/branches", "/branches", {}, {"scope": scope, "name": "b"}, {}),
        ("DELETE", "/branches/b", "/branches/{name}", {"scope": scope}, {}, {}),
        ("POST", "/merge", "/merge", {}, {"scope": scope, "from": "b"}, {}),
        ("POST", "/snapshots", "/snapshots", {}, {"scopes": [scope]}, {}),
        ("POST", "/pin", "/pin", {}, {"scope": scope, "ttl": "1h"}, {}),
        ("GET", "/episodes", "/episodes", {"scope": scope}, {}, {}),
        ("GET", "/entities", "/entities", {"scope": scope}, {}, {}),
        ("GET", "/facts", "/facts", {"scope": scope, "entity": "acme"}, {}, {}),
        ("GET", "/ledger", "/ledger", {"scope": scope}, {}, {}),
        ("GET", f"/episodes/{ep}", "/episodes/{episode_id}", {"scope": scope}, {}, {}),
        ("PUT", f"/episodes/{ep}/acl", "/episodes/{episode_id}/acl", {},
         {"scope": scope, "acl": ["*"]}, {}),
        ("POST", "/episodes", "/episodes", {}, {"scope": scope, **episode}, {}),
        ("POST", "/episodes/batch", "/episodes/batch", {},
         {"scope": scope, "episodes": [episode]}, {}),
        ("POST", "/facts", "/facts", {}, {"scope": scope, **fact}, {}),
        ("POST", "/facts/batch", "/facts/batch", {}, {"scope": scope, "facts": [fact]}, {}),
        ("POST", "/close", "/close", {},
         {"scope": scope, "entity": "acme", "predicate": "plan", "reason": "gone"}, {}),
        ("POST", "/document", "/document", {}, {"scope": scope, "document": "d"}, {}),
        ("POST", "/search", "/search", {}, {"scope": scope, "query": "plan"}, {}),
        ("POST", "/query", "/query", {}, {"scope": scope, "find": "passages", "query": "plan"},
         {}),
        ("GET", "/extraction/status", "/extraction/status", {"scope": scope}, {}, {}),
        ("GET", f"/schemas/{scope}", "/schemas/{org}/{team}", {}, {}, {}),
        ("PUT", f"/schemas/{scope}", "/schemas/{org}/{team}", {}, {"builtin": "sales"}, admin),
        ("POST", "/runs", "/runs", {}, {"scope": scope, "task": "t"}, {}),
        ("GET", "/runs", "/runs", {"scope": scope}, {}, {}),
        ("POST", "/sessions/start", "/sessions/start", {}, {"scope": scope}, {}),
        ("GET", "/situations", "/situations", {"scope": scope}, {}, {}),
        ("GET", "/notes", "/notes", {"scope": scope}, {}, {}),
        ("GET", "/procedures", "/procedures", {"scope": scope}, {}, {}),
        ("POST", "/advice", "/advice", {}, {"scope": scope, "task": "t"}, {}),
        ("PUT", "/procedures/sources", "/procedures/sources", {},
         {"scope": scope, "documents": []}, admin),
    ]
    for method, path, template, params, body, headers in calls:
        r = m.http.request(method, path, params=params, json=body or None, headers=headers)
        assert (r.status_code, r.json()["error"]["code"]) == (404, "WORKSPACE_GONE"), \
            (method, path, r.text)
        assert "404" in spec[template][method.lower()]["responses"], (method, template)


def test_an_acl_conflict_shows_each_side_only_to_its_readers(m: Memory) -> None:
    """branches.md: an episode's ACL that differs on each side is compared the same way as
    a value, whose conflict shows each side only to who may read it there. The ACL conflict
    showed all three sides to anyone who could read the episode on `into`: erin, a reader
    on main only, learned who may read it on the branch (dave); dave, its reader there,
    saw nothing."""
    carol = m.as_user("carol")
    try:
        scope = new_scope()
        r = carol.write(scope, "Shared text.", acl=["user:carol"])
        assert r.status_code == 201, r.text
        ep = r.json()["id"]
        assert carol.http.post("/branches", json={"scope": scope, "name": "b"}).status_code \
            == 201
        for branch, reader in (("b", "user:dave"), (None, "user:erin")):
            body = {"scope": scope, "acl": ["user:carol", reader],
                    **({"branch": branch} if branch else {})}
            assert carol.http.put(f"/episodes/{ep}/acl", json=body).status_code == 200
        h = "hidden"
        want = {"carol": (ep, ["user:carol"], ["user:carol", "user:erin"],
                          ["user:carol", "user:dave"]),
                "erin": (ep, h, ["user:carol", "user:erin"], h),
                "dave": (ep, h, h, ["user:carol", "user:dave"]),
                "bob": (h, h, h, h)}
        for user, (episode, base, ours, theirs) in want.items():
            caller = m.as_user(user)
            r = caller.http.post("/merge", json={"scope": scope, "from": "b",
                                                 "dry_run": True})
            caller.close()
            assert r.status_code == 409, r.text
            conflicts = r.json()["error"]["details"]["conflicts"]
            assert conflicts == [{"episode": episode, "field": "acl", "base": base,
                                  "ours": ours, "theirs": theirs}], (user, conflicts)
    finally:
        carol.close()


def test_an_acl_conflict_hides_a_base_acl_that_a_narrowing_revoked(m: Memory) -> None:
    """The ACL that counts is the current one, for every version: a public episode narrowed
    on both sides after the fork is hidden from bob on main, on the branch and as of the
    base. The merge report judged the base side by the ACL it had then (`*`), so bob, who
    may read the episode nowhere, was shown its id and its old ACL (sec31)."""
    carol = m.as_user("carol")
    bob = m.as_user("bob")
    try:
        scope = new_scope()
        r = carol.write(scope, "Once public text.", acl=["*"])
        assert r.status_code == 201, r.text
        ep, base = r.json()["id"], r.json()["commit"]
        assert carol.http.post("/branches", json={"scope": scope, "name": "b"}).status_code \
            == 201
        for branch, acl in (("b", ["user:carol", "user:dave"]), (None, ["user:carol"])):
            body = {"scope": scope, "acl": acl, **({"branch": branch} if branch else {})}
            assert carol.http.put(f"/episodes/{ep}/acl", json=body).status_code == 200
        assert bob.episode(scope, ep, at_commit=base).status_code == 404
        r = bob.http.post("/merge", json={"scope": scope, "from": "b", "dry_run": True})
        assert r.status_code == 409, r.text
        assert r.json()["error"]["details"]["conflicts"] == [
            {"episode": "hidden", "field": "acl", "base": "hidden", "ours": "hidden",
             "theirs": "hidden"}], r.text
        dave = m.as_user("dave")
        r = dave.http.post("/merge", json={"scope": scope, "from": "b", "dry_run": True})
        dave.close()
        assert r.json()["error"]["details"]["conflicts"] == [
            {"episode": ep, "field": "acl", "base": "hidden", "ours": "hidden",
             "theirs": ["user:carol", "user:dave"]}], r.text
    finally:
        carol.close()
        bob.close()


def test_a_hold_and_a_branch_delete_racing_never_both_win(m: Memory) -> None:
    """A live pin or snapshot keeps its branches (409 BRANCH_HELD). A snapshot or pin made
    while the branch was being deleted read the branch's head before the delete and wrote
    its hold after the delete's check: both answered success (every time, on one server),
    and reads through the hold then met a deleted branch. Now one of them loses: the
    delete is a 409, or the hold does not hold the branch (a pin: 404)."""
    from concurrent.futures import ThreadPoolExecutor

    scope, _ = seeded(m)
    with ThreadPoolExecutor(2) as pool:
        for i in range(6):
            name = f"race/{i}"
            assert m.http.post("/branches", json={"scope": scope, "name": name}
                               ).status_code == 201
            if i % 2:
                hold = pool.submit(m.http.post, "/pin", json={
                    "scope": scope, "branch": name, "ttl": "1h"})
            else:
                hold = pool.submit(m.http.post, "/snapshots", json={"scopes": [scope]})
            gone = pool.submit(m.http.delete, f"/branches/{name}", params={"scope": scope})
            held, deleted = hold.result(), gone.result()
            holds = held.status_code == 201 and (
                held.json().get("branch") == name
                or f"{scope}@{name}" in held.json().get("heads", {}))
            assert not (holds and deleted.status_code == 200), (i, held.text, deleted.text)
            assert holds or deleted.status_code == 200, (i, held.text, deleted.text)
            if holds:
                assert deleted.json()["error"]["code"] == "BRANCH_HELD", deleted.text
                kind = "pin" if i % 2 else "snapshots"
                r = m.facts(scope, "acme", **({"pin": held.json()["id"]} if i % 2 else {
                    "snapshot": held.json()["id"], "branch": name}))
                assert r.status_code == 200, r.text
                m.http.delete(f"/{kind}/{held.json()['id']}")
            elif held.status_code == 201:
                m.http.delete(f"/snapshots/{held.json()['id']}")


# -- session 22's edge audit: ids, cursors, durations and tasks -------------------------------

def _refusal(r: Any) -> tuple[list[Any], str, str]:
    assert r.status_code == 422, r.text
    error = r.json()["error"]["details"]["errors"][0]
    return error["loc"], error["type"], error["msg"]


def test_a_duration_takes_ascii_digits_only_as_its_published_pattern_says(m: Memory) -> None:
    """Python's ``\\d`` read "１h" (a full-width digit) and "٣d" as times to live, which
    the published ``[0-9]`` (and a client checking it) refuses."""
    scope, _ = seeded(m)
    for ttl in ("\uff11h", "\u0663d", "1\u0660m"):
        for path, body in (("/pin", {"scope": scope, "ttl": ttl}),
                           ("/workspaces", {"name": "w", "ttl": ttl})):
            loc, kind, _ = _refusal(m.http.post(path, json=body))
            assert (loc, kind) == (["body", "ttl"], "ttl_invalid"), (path, ttl)
    made = m.http.post("/pin", json={"scope": scope, "ttl": "1h"})
    assert made.status_code == 201, made.text


def test_a_malformed_id_or_cursor_is_refused_in_words_not_by_regex(m: Memory) -> None:
    """A run id, episode id, set-aside cursor, user id, entity type or currency that misses
    its pattern answered pydantic's "String should match pattern '^run_[0-9A-HJKM…'"; each
    now says what to send (ruled.py), under the same published pattern."""
    scope, ep = seeded(m)
    admin = {"X-AMP-Admin-Token": ADMIN_TOKEN}
    cases = [
        (m.http.get("/runs", params={"scope": scope, "before": "run_1"}),
         ["query", "before"], "run id"),
        (m.http.get("/episodes", params={"scope": scope, "after": "ZZ"}),
         ["query", "after"], "episode id"),
        (m.http.get("/set-aside", params={"scope": scope, "after": "\u200b"}),
         ["query", "after"], "cursor"),
        (m.http.get("/set-aside", params={"scope": scope, "after": "a" * 3000}),
         ["query", "after"], "cursor"),
        (m.http.get("/principals/b%C3%A9", headers=admin), ["path", "user"], "user id"),
        # A body's run (or session) id: it was looked up and answered 404 "No such run."
        (m.http.post("/runs/reward", json={"run": "run_1\n", "reward": 1, "reason": "r"}),
         ["body", "run"], "run or session id"),
        (m.http.post("/query", json={"scope": scope, "find": "entities", "type": "Acct"}),
         ["body", "type"], "name"),
        (m.fact(scope, "acme", "arr", {"amount": 5, "currency": "eur"}, "plan is basic",
                [(ep, 1)]), ["body", "value", "currency"], "currency"),
    ]
    for r, want_loc, what in cases:
        assert r.status_code == 422, r.text
        said = {tuple(e["loc"]): e["msg"] for e in r.json()["error"]["details"]["errors"]}
        assert said[tuple(want_loc)].startswith(f"invalid {what} "), r.text
        assert "should match pattern" not in r.text, r.text


def test_a_blank_task_is_refused_on_runs_sessions_and_advice(m: Memory) -> None:
    """A task is what the loop clusters runs by and matches advice to; " " was recorded as
    a run's task and a session's, and asked for advice (answered null)."""
    scope, _ = seeded(m)
    for text in (" ", "\u3000\t", "\ufeff"):
        for path in ("/runs", "/sessions/start", "/advice"):
            loc, kind, _ = _refusal(m.http.post(path, json={"scope": scope, "task": text}))
            assert (loc, kind) == (["body", "task"], "string_blank"), (path, text)
    for path, ok in (("/runs", 201), ("/sessions/start", 201), ("/advice", 200)):
        r = m.http.post(path, json={"scope": scope, "task": "renew acme"})
        assert r.status_code == ok, r.text


def test_names_in_another_unicode_normal_form_are_refused_not_stored_twice(
        m: Memory) -> None:
    """An entity, predicate or document key is matched as sent: "café" in NFD (e + U+0301)
    was a second entity beside the NFC one, printing alike. It is refused wherever a name
    is sent, with what to send instead; the NFC spelling is stored and found."""
    import unicodedata

    scope, ep = seeded(m)
    nfc, nfd = "café", unicodedata.normalize("NFD", "café")
    assert nfc != nfd
    sent = [
        (m.fact(scope, f"acct:{nfd}", "plan", "x", "plan is basic", [(ep, 1)]),
         ["body", "entity"]),
        (m.fact(scope, "acme", f"plan_{nfd}", "x", "plan is basic", [(ep, 1)]),
         ["body", "predicate"]),
        (m.write(scope, "About a café.", about=[nfd]), ["body", "about", 0]),
        (m.write(scope, "Menu v1.", document=nfd), ["body", "document"]),
        (m.http.post("/document", json={"scope": scope, "document": nfd}),
         ["body", "document"]),
        (m.facts(scope, nfd), ["query", "entity"]),
        (m.facts(scope, "acme", predicate=nfd), ["query", "predicate"]),
        (m.http.post("/close", json={"scope": scope, "entity": nfd, "predicate": "plan",
                                     "reason": "x"}), ["body", "entity"]),
    ]
    for r, want in sent:
        loc, kind, msg = _refusal(r)
        assert (loc, kind) == (want, "string_not_nfc"), r.text
        assert "NFC" in msg, r.text
    assert m.fact(scope, f"acct:{nfc}", "plan", "x", "plan is basic", [(ep, 1)]
                  ).status_code == 201
    assert [f["value"] for f in m.facts(scope, f"acct:{nfc}").json()["facts"]] == ["x"]
    assert m.write(scope, "Menu v1.", document=nfc).status_code == 201
    assert m.http.post("/document", json={"scope": scope, "document": nfc}
                       ).status_code == 200
    # AMP keeps its spec's rule: a user owner's id is any 1-256 characters, as sent.
    agent = {"X-AMP-Agent-ID": "nfc_agent"}
    r = m.http.post("/amp/v1/memories", headers=agent, json={
        "type": "semantic", "content": {"text": "likes coffee"},
        "identity": {"owner_id": nfd, "owner_type": "user"}})
    assert r.status_code == 201, r.text
    assert r.json()["identity"]["owner_id"] == nfd
    listed = m.http.get("/amp/v1/memories", headers=agent, params={"owner_id": nfd})
    assert [c["id"] for c in listed.json()["results"]] == [r.json()["id"]]


def test_a_document_key_is_one_rule_wherever_it_is_sent(m: Memory) -> None:
    """A document key was two types: PUT /procedures/sources trimmed " runbook" to
    "runbook" while POST /episodes stored " runbook" as a second key printing alike (and
    took a blank key). One rule now: white space at either end is refused on every route
    that takes a key, naming the field, and a key is stored exactly as sent."""
    scope, _ = seeded(m)
    admin = {"X-AMP-Admin-Token": ADMIN_TOKEN}
    for key, kind in ((" runbook", "string_padded"), ("runbook\n", "string_padded"),
                      ("\u3000runbook", "string_padded"), ("  ", "string_blank")):
        sent = [
            (m.write(scope, "Runbook v1.", document=key), ["body", "document"]),
            (m.http.post("/episodes/batch", json={"scope": scope, "episodes": [
                {"source": "doc:x", "body": "Runbook v1.", "acl": ["*"],
                 "document": key}]}), ["body", "episodes", 0, "document"]),
            (m.http.post("/document", json={"scope": scope, "document": key}),
             ["body", "document"]),
            (m.http.put("/procedures/sources", json={"scope": scope,
                                                     "documents": ["ok", key]},
                        headers=admin), ["body", "documents", 1]),
        ]
        for r, want in sent:
            loc, got, msg = _refusal(r)
            assert (loc, got) == (want, kind), r.text
            assert ("white space" in msg) and "\n" not in msg, r.text
    assert m.write(scope, "Runbook v1.", document="the runbook").status_code == 201
    assert m.http.post("/document", json={"scope": scope, "document": "the runbook"}
                       ).json()["document"] == "the runbook"
    chosen = m.http.put("/procedures/sources", json={"scope": scope,
                                                     "documents": ["the runbook"]},
                        headers=admin)
    assert chosen.json()["documents"] == ["the runbook"], chosen.text


def _blank_refused(r: Any, where: list[str]) -> None:
    assert r.status_code == 422, (where, r.text)
    err = r.json()["error"]
    assert err["code"] == "VALIDATION_ERROR", r.text
    (one,) = err["details"]["errors"]
    assert (one["loc"], one["type"]) == (where, "string_blank"), r.text
    assert "\n" not in err["message"], r.text


def test_a_blank_query_parameter_is_refused_never_read_as_left_out(m: Memory) -> None:
    """`?branch=` (or `?branch=%20`) read main, `?at_commit=` the head, `?predicate=` every
    predicate and `?situation=` every situation, as if the parameter were left out: a
    template whose variable was empty read other data than it asked for, and said
    nothing. Each blank value is 422 `string_blank` naming the parameter, on every GET
    route that takes it (taken from the OpenAPI document, so a new route is covered)."""
    scope, ep = seeded(m)
    org, team = scope.split("/")
    filled = {"episode_id": ep, "org": org, "team": team}
    needs = {"scope": scope, "entity": "acme"}
    doc = m.http.get("/openapi.json").json()
    checked: set[tuple[str, str]] = set()
    for path, ops in doc["paths"].items():
        get = ops.get("get")
        if get is None:
            continue
        names = {p["name"] for p in get.get("parameters", []) if p["in"] == "query"}
        named = names & {"branch", "at_commit", "predicate", "situation", "entity", "after",
                         "before"}
        if not named:
            continue
        url = path.format(**filled)
        for name in sorted(named):
            for blank in ("", " ", "\t"):
                params = {k: v for k, v in needs.items() if k in names}
                params[name] = blank
                r = m.http.get(url, params=params)
                if name in ("after", "before") and r.status_code == 422 and r.json()[
                        "error"]["details"]["errors"][0]["type"] != "string_blank":
                    continue  # a cursor of a set form (an episode id) says so in its words
                _blank_refused(r, ["query", name])
                checked.add((path, name))
    assert {("/facts", "branch"), ("/ledger", "branch"), ("/runs", "branch"),
            ("/schemas/{org}/{team}", "branch"), ("/episodes/{episode_id}", "at_commit"),
            ("/facts", "predicate"), ("/facts", "entity"), ("/notes", "situation"),
            ("/entities", "after"), ("/ledger", "before")} <= checked, checked
    # The same in a body, and beside a pin (which holds its own branch).
    _blank_refused(m.http.post("/episodes", json={
        "scope": scope, "branch": "", "source": "doc:x", "body": "x", "acl": ["*"]}),
        ["body", "branch"])
    _blank_refused(m.http.post("/search", json={"scope": scope, "query": "plan",
                                                "at_commit": " "}), ["body", "at_commit"])
    _blank_refused(m.http.post("/branches", json={"scope": scope, "name": "b1", "from": ""}),
                   ["body", "from"])
    pin = m.http.post("/pin", json={"scope": scope, "ttl": "1h"})
    assert pin.status_code == 201, pin.text
    _blank_refused(m.facts(scope, "acme", pin=pin.json()["id"], branch=""), ["query", "branch"])
    # Left out, each reads as before.
    assert m.facts(scope, "acme").status_code == 200
    assert m.http.get("/notes", params={"scope": scope}).status_code == 200


async def test_an_mcp_tool_refuses_a_blank_branch(m: Memory) -> None:
    """`search_memory(branch="")` searched main, as if no branch were named."""
    from tests.test_mcp import http_client_for, refused

    scope, _ = seeded(m)
    async with http_client_for(m.url, {"X-AMP-Agent-ID": "agent_alice",
                                       "X-AmpUp-User": "alice"}) as alice:
        said = await refused(alice, "search_memory", scope=scope, query="plan", branch="")
        said_ep = await refused(alice, "remember_memory", scope=scope, text="x", branch=" ")
    for text in (said, said_ep):
        assert text.startswith("Invalid request: branch: ") and "blank" in text, text
