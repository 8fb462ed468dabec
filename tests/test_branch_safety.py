"""Branches under crashes and concurrent writers, over real HTTP, on both catalogs.

A crash at any point of branch creation, deletion or merge leaves the old state or the new
one (the fault hook kills the server between data rows and ledger row, or just after the
ledger row); four server processes writing to one branch while two other branches are
merged into it keep its history one chain, with nothing lost.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.memory_support import BACKENDS, Memory, backend_env, new_scope, start
from tests.server_process import ServerProcess


def _die(home: Path, env: dict[str, str], point: str, call: Any,
         check: Any = None) -> None:
    """Run ``call(memory)`` on a server armed to exit at ``point``; it must die there.
    ``check(memory)`` runs first on the same server: reads of the state the last crash
    left (a read never reaches a fault point), without a server of their own."""
    faulty = ServerProcess(home, env={**env, "AMPUP_MEMORY_TEST_FAULT": f"{point}@{home}"}
                           ).start(90)
    m = Memory(faulty.url)
    try:
        if check is not None:
            check(m)
        with pytest.raises(httpx.HTTPError):
            call(m)
        assert faulty.proc is not None and faulty.proc.wait(30) == 70
    finally:
        m.close()
        faulty.stop()


def _value(m: Memory, scope: str, branch: str = "main") -> Any:
    facts = m.facts(scope, "acme", predicate="budget", branch=branch).json()["facts"]
    return facts[0]["value"] if facts else None


def _on(m: Memory, scope: str, branch: str, text: str, value: str) -> None:
    ep = m.http.post("/episodes", json={"scope": scope, "branch": branch, "source": f"doc:{text}",
                                         "body": text, "acl": ["*"]})
    assert ep.status_code == 201, ep.text
    r = m.http.post("/facts", json={
        "scope": scope, "branch": branch, "entity": "acme", "predicate": "budget",
        "value": value, "quote": text, "cites": [{"episode": ep.json()["id"], "unit": 1}]})
    assert r.status_code == 201, r.text


@pytest.mark.parametrize("kind", BACKENDS)
def test_a_crash_leaves_the_old_state_or_the_new(kind: str, request: pytest.FixtureRequest,
                                                  tmp_path: Path) -> None:
    env = backend_env(kind, request)
    home = tmp_path / "home"
    scope = new_scope()
    with _serving(home, env) as m:
        _on(m, scope, "main", "budget is 50k", "50k")
    # Creation dies before its ledger row: no branch.
    _die(home, env, "after-rows", lambda m: m.http.post(
        "/branches", json={"scope": scope, "name": "exp"}))
    with _serving(home, env) as m:
        assert m.http.get("/branches", params={"scope": scope}).json()["branches"][-1][
            "name"] == "main"
        assert m.http.post("/branches", json={"scope": scope, "name": "exp"}).status_code == 201
        _on(m, scope, "exp", "budget is 70k", "70k")
    # A merge dies after its data rows: main is as it was (checked on the next server,
    # before its own crash).
    _die(home, env, "after-rows", lambda m: m.http.post(
        "/merge", json={"scope": scope, "from": "exp"}))

    def merge_undone(m: Memory) -> None:
        assert _value(m, scope) == "50k"
        assert [c["kind"] for c in m.ledger(scope)] == ["commit", "commit"]

    # A merge dies just after its ledger row: the merge stands, once, after a restart.
    _die(home, env, "after-ledger", lambda m: m.http.post(
        "/merge", json={"scope": scope, "from": "exp"}), check=merge_undone)

    def merge_stands(m: Memory) -> None:
        assert _value(m, scope) == "70k"
        assert [c["kind"] for c in m.ledger(scope)] == ["merge", "commit", "commit"]
        again = m.http.post("/merge", json={"scope": scope, "from": "exp"})  # no commit
        assert again.status_code == 200 and again.json()["merged"] is False, again.text

    # A deletion dies just after its ledger row: the branch is gone after a restart.
    _die(home, env, "after-ledger", lambda m: m.http.delete(
        "/branches/exp", params={"scope": scope}), check=merge_stands)
    with _serving(home, env) as m:
        assert m.facts(scope, "acme", branch="exp").status_code == 404
        assert m.http.post("/branches", json={"scope": scope, "name": "exp"}).status_code == 201
        assert _value(m, scope, "exp") == "70k"  # the new exp starts from main


class _serving:  # noqa: N801 - a context manager read like a function
    def __init__(self, home: Path, env: dict[str, str]) -> None:
        self.proc = start(home, env)
        self.m = Memory(self.proc.url)

    def __enter__(self) -> Memory:
        return self.m

    def __exit__(self, *exc: object) -> None:
        self.m.close()
        self.proc.stop()


# Contention between the four processes starts at their first commits, so 25 each (100
# concurrent commits, 4 x 50 before) still prove one chain; the merges are made to land
# while the writers are mid-way (after a quarter, then half of their commits), which a
# fixed sleep did not ensure.
WRITERS, COMMITS, SIDE_COMMITS = 4, 25, 5


@pytest.mark.parametrize("kind", BACKENDS)
def test_writers_and_merges_keep_one_chain(kind: str, request: pytest.FixtureRequest,
                                           tmp_path: Path) -> None:
    """Four server processes write 25 commits each to branch ``work`` while two other
    branches, made from it, are merged into it from a fifth thread."""
    env = backend_env(kind, request)
    home = tmp_path / "home"
    scope = new_scope()
    servers = [start(home, {**env, "AMPUP_MEMORY_INDEX_URI": f"sqlite:///{home}/idx{i}.db"})
               for i in range(WRITERS)]
    try:
        lead = Memory(servers[0].url, "lead")
        assert lead.write(scope, "the start", source="doc:start").status_code == 201
        assert lead.http.post("/branches", json={"scope": scope, "name": "work"}
                              ).status_code == 201
        sides = {}
        for name in ("side/a", "side/b"):
            assert lead.http.post("/branches", json={"scope": scope, "name": name,
                                                     "from": "work"}).status_code == 201
            sides[name] = []
            for n in range(SIDE_COMMITS):
                r = lead.http.post("/episodes", json={
                    "scope": scope, "branch": name, "source": f"doc:{name}:{n}",
                    "body": f"{name} note {n}", "acl": ["*"]})
                assert r.status_code == 201, r.text
                sides[name].append(r.json()["id"])

        progress = threading.Condition()
        acked = [0]  # the writers' commits so far

        def writer(i: int) -> list[str]:
            m = Memory(servers[i].url, f"writer{i}")
            ids = []
            for n in range(COMMITS):
                r = m.http.post("/episodes", json={
                    "scope": scope, "branch": "work", "source": f"slack:C{i}:{n}",
                    "body": f"writer{i}: message {n}", "acl": ["*"]})
                assert r.status_code == 201, r.text
                ids.append(r.json()["id"])
                with progress:
                    acked[0] += 1
                    progress.notify_all()
            return ids

        def merger() -> list[str]:
            m = Memory(servers[1].url, "merger")
            done = []
            for k, name in enumerate(sides, start=1):
                with progress:  # a writer that failed shows in its own result
                    progress.wait_for(lambda k=k: acked[0] >= k * WRITERS * COMMITS // 4,
                                      timeout=120)
                r = m.http.post("/merge", json={"scope": scope, "from": name, "into": "work"})
                assert r.status_code == 200 and r.json()["merged"], r.text
                done.append(r.json()["commit"])
            return done

        began = time.monotonic()
        with ThreadPoolExecutor(WRITERS + 1) as pool:
            merging = pool.submit(merger)
            written = [i for ids in pool.map(writer, range(WRITERS)) for i in ids]
            merges = merging.result()
        print(f"\n{kind}: {WRITERS}x{COMMITS} commits + 2 merges in "
              f"{time.monotonic() - began:.1f} s")

        def chain(s: ServerProcess) -> list[dict[str, Any]]:
            r = httpx.get(f"{s.url}/ledger", params={"scope": scope, "branch": "work",
                                                     "limit": 1000},
                          headers={"X-AmpUp-User": "reader"}, timeout=60)
            assert r.status_code == 200, r.text
            return list(reversed(r.json()["commits"]))

        chains = [chain(s) for s in servers]
        assert all(c == chains[0] for c in chains[1:]), "servers disagree on the ledger"
        line = chains[0]
        assert [c["seq"] for c in line] == list(range(1, len(line) + 1))
        assert len(line) == 1 + WRITERS * COMMITS + 2  # creation marker, writes, 2 merges
        assert all(b["parent"] == a["id"] for a, b in zip(line, line[1:], strict=False))
        assert [c["id"] for c in line if c["kind"] == "merge"] == merges
        authors: dict[str, int] = {}
        for c in line:
            authors[c["author"]] = authors.get(c["author"], 0) + 1
        assert authors == {"lead": 1, "merger": 2, **{f"writer{i}": COMMITS
                                                      for i in range(WRITERS)}}
        reader = Memory(servers[-1].url, "reader")
        for ep in written + sides["side/a"] + sides["side/b"]:
            assert reader.episode(scope, ep, branch="work").status_code == 200, ep
            assert reader.episode(scope, ep).status_code == 404  # main never saw them
    finally:
        for s in servers:
            s.stop()
