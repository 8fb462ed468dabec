"""Two `ampup-memory serve` processes on one PostgreSQL database, over real HTTP.

They must behave as one server: one scoring budget per cell, one lifecycle pass at a time
(background timers every second plus concurrent manual runs), no lost read counts, no
lost fields. Both processes start at the same moment, so schema creation races too.
"""

from __future__ import annotations

import socket
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

import httpx
import httpx2
import pytest

from ampup_memory.amp.store.base import CellStore
from ampup_memory.amp.store.registry import open_store
from tests.pg import PostgresFactory
from tests.server_process import ServerProcess, start_together

pytestmark = pytest.mark.postgres

ADMIN = {"X-AMP-Admin-Token": "multi-admin-token"}
MAX_PATCHES = 5


@pytest.fixture(scope="module")
def pg_url(postgres: PostgresFactory) -> str:
    return postgres.new_database("multi")


@pytest.fixture(scope="module")
def servers(
    pg_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[ServerProcess]]:
    env = {
        "AMP_STORE_URI": pg_url,
        "AMP_ADMIN_TOKEN": ADMIN["X-AMP-Admin-Token"],
        "AMP_LIFECYCLE_ENABLED": "1",
        "AMP_LIFECYCLE_INTERVAL_SECONDS": "1",
        "AMP_SCORING_PATCH_LIMIT": str(MAX_PATCHES),
        "AMP_SCORING_PATCH_WINDOW_SECONDS": "3600",
    }
    procs = [ServerProcess(tmp_path_factory.mktemp(f"home{i}"), env=env) for i in range(2)]
    errors = start_together(procs, timeout=90)
    try:
        assert not errors, errors
        yield procs
    finally:
        for p in procs:
            p.stop()


@pytest.fixture(scope="module")
def store(pg_url: str, servers: list[ServerProcess]) -> Iterator[CellStore]:
    """The database as a third party sees it (no embedder: it never searches)."""
    s = open_store(pg_url, None)
    yield s
    s.close()


@pytest.fixture
def clients(servers: list[ServerProcess]) -> Iterator[list[httpx.Client]]:
    cs = [httpx.Client(base_url=p.url + "/amp/v1", timeout=60) for p in servers]
    yield cs
    for c in cs:
        c.close()


def agent() -> dict[str, str]:
    return {"X-AMP-Agent-ID": f"agent_{uuid.uuid4().hex[:8]}"}


def create(client: httpx.Client, headers: dict[str, str], text: str,
           **extra: Any) -> dict[str, Any]:
    body = {"type": "semantic", "content": {"text": text},
            "identity": {"owner_id": headers["X-AMP-Agent-ID"], "owner_type": "agent"}, **extra}
    r = client.post("/memories", headers=headers, json=body)
    assert r.status_code == 201, r.text
    cell: dict[str, Any] = r.json()
    return cell


def test_both_servers_serve_the_same_cells(clients: list[httpx.Client]) -> None:
    h = agent()
    cell = create(clients[0], h, "the deploy key rotates every friday")
    got = clients[1].get(f"/memories/{cell['id']}", headers=h)
    assert got.status_code == 200 and got.json()["content"] == cell["content"]
    found = clients[1].post("/memories/search", headers=h, json={"query": "deploy key"}).json()
    assert [c["id"] for c in found["results"]] == [cell["id"]]
    spec = clients[0].get("/spec").json()
    assert spec["capabilities"]["storage_backends"] == ["postgresql"]


def test_scoring_budget_is_shared(clients: list[httpx.Client]) -> None:
    h = agent()
    cell = create(clients[0], h, "budget shared across processes")
    codes = []
    for i in range(MAX_PATCHES + 3):
        r = clients[i % 2].patch(f"/memories/{cell['id']}", headers=h,
                                 json={"scoring": {"importance": 0.6 + i / 100}})
        codes.append(r.status_code)
        if r.status_code == 429:
            assert r.json()["error"]["code"] == "RATE_LIMITED"
            assert int(r.headers["Retry-After"]) >= 1
    assert codes == [200] * MAX_PATCHES + [429] * 3
    # the budget is for scoring only: other fields still change, on either server
    r = clients[1].patch(f"/memories/{cell['id']}", headers=h,
                         json={"content": {"metadata": {"k": "v"}}})
    assert r.status_code == 200
    assert r.json()["scoring"]["importance"] == pytest.approx(0.6 + (MAX_PATCHES - 1) / 100)

    # concurrently, from both processes at once: still exactly MAX_PATCHES
    other = create(clients[1], h, "a second cell, patched in a burst")

    def patch(i: int) -> int:
        return clients[i % 2].patch(f"/memories/{other['id']}", headers=h,
                                    json={"scoring": {"confidence": 0.8 + i / 100}}).status_code

    with ThreadPoolExecutor(16) as pool:
        burst = list(pool.map(patch, range(16)))
    assert sorted(burst) == [200] * MAX_PATCHES + [429] * (16 - MAX_PATCHES)


def test_concurrent_reads_lose_no_access_count(
    clients: list[httpx.Client], store: CellStore
) -> None:
    h = agent()
    cell = create(clients[0], h, "read fifty times at once")
    start = threading.Barrier(50)

    def read(i: int) -> int:
        start.wait()
        r = clients[i % 2].get(f"/memories/{cell['id']}", headers=h)
        assert r.status_code == 200, r.text
        count: int = r.json()["scoring"]["access_count"]
        return count

    with ThreadPoolExecutor(50) as pool:
        counts = list(pool.map(read, range(50)))
    assert sorted(counts) == list(range(1, 51))  # every read saw its own increment
    stored = store.get(cell["id"])
    assert stored is not None and stored.cell.scoring.access_count == 50


def test_concurrent_patches_of_different_fields_all_land(
    clients: list[httpx.Client], store: CellStore
) -> None:
    h = agent()
    cell = create(clients[0], h, "patched from every side")
    bodies: list[dict[str, Any]] = [
        {"content": {"text": "patched from every side, text changed"}},
        {"content": {"metadata": {"team": "infra"}}},
        {"access_policy": {"readable_by": ["agent_ops_*"]}},
        {"access_policy": {"writable_by": ["agent_admin"]}},
        {"provenance": {"source_ref": "ticket-42"}},
        {"lifecycle": {"expires_at": "2031-01-01T00:00:00Z"}},
        {"type": "procedural"},
        {"scoring": {"decay_rate": 0.05}},
    ]
    start = threading.Barrier(len(bodies))

    def patch(i: int) -> int:
        start.wait()
        return clients[i % 2].patch(f"/memories/{cell['id']}", headers=h,
                                    json=bodies[i]).status_code

    with ThreadPoolExecutor(len(bodies)) as pool:
        assert list(pool.map(patch, range(len(bodies)))) == [200] * len(bodies)
    stored = store.get(cell["id"])
    assert stored is not None
    final = stored.cell
    assert final.content.text == "patched from every side, text changed"
    assert final.content.metadata == {"team": "infra"}
    assert final.access_policy.readable_by == ["agent_ops_*"]
    assert final.access_policy.writable_by == ["agent_admin"]
    assert final.provenance.source_ref == "ticket-42"
    assert final.lifecycle.expires_at == datetime(2031, 1, 1, tzinfo=UTC)
    assert final.type.value == "procedural"
    assert final.scoring.decay_rate == 0.05


def test_lifecycle_passes_never_overlap(
    clients: list[httpx.Client], servers: list[ServerProcess], store: CellStore
) -> None:
    began = datetime.now(UTC)
    h = agent()
    n = 120
    # importance 0.1 is below the stale threshold at once: every pass that meets one of
    # these cells moves it to stale, and no pass may move it twice.
    with ThreadPoolExecutor(8) as pool:
        cells = list(pool.map(
            lambda i: create(clients[i % 2], h, f"fading note {i}",
                             scoring={"importance": 0.1}),
            range(n),
        ))

    def run(i: int) -> dict[str, Any]:
        r = clients[i % 2].post("/lifecycle/run", headers=ADMIN, json={})
        assert r.status_code == 200, r.text
        report: dict[str, Any] = r.json()
        return report

    with ThreadPoolExecutor(8) as pool:  # manual runs at both servers, all at once
        reports = list(pool.map(run, range(8)))
    time.sleep(2.5)  # and let the 1-second background timers of both run a few times

    passes = sorted(store.recent_passes(10_000), key=lambda p: p.started_at)
    assert len(passes) >= len(reports)
    for earlier, later in zip(passes, passes[1:], strict=False):
        assert earlier.started_at <= earlier.finished_at <= later.started_at, (earlier, later)
    host = socket.gethostname()
    holders = {p.holder for p in passes}
    assert {f"{host}:{s.proc.pid}" for s in servers if s.proc} <= holders

    # Passes that finished before the cells existed could not have moved them.
    moved = sum(p.transitions["active_to_stale"] for p in passes if p.finished_at >= began)
    assert moved == n
    assert sum(p.transitions["stale_to_active"] + p.transitions["stale_to_archived"]
               for p in passes if p.finished_at >= began) == 0
    assert sum(r["transitions"]["active_to_stale"] for r in reports) <= n
    for c in cells:
        stored = store.get(c["id"])
        assert stored is not None and stored.cell.lifecycle.status.value == "stale"


def test_principals_set_through_two_servers_at_once(postgres: PostgresFactory,
                                                    tmp_path_factory: pytest.TempPathFactory,
                                                    ) -> None:
    """Two servers sharing one catalog and one PostgreSQL read index, each setting
    principals at the same moment: each copies the principals table into the shared index
    on its next read. Both did it at once (a DELETE and an INSERT of every row in one
    transaction), so the second's INSERT met the first's rows: a 500 (UniqueViolation on
    `mem_principals`, race audit, session 28). Now one process copies at a time, always
    the table's newest rows: every PUT answers 200 and both servers read what was set."""
    from tests.memory_support import ADMIN_TOKEN, QUIET

    url = postgres.new_database("principals")
    home = tmp_path_factory.mktemp("shared")
    env = {**QUIET, "AMPUP_MEMORY_CATALOG_URI": url, "AMPUP_MEMORY_INDEX_URI": url,
           "AMP_STORE_URI": url}
    procs = [ServerProcess(home, env=env) for _ in range(2)]
    errors = start_together(procs, timeout=90)
    admin = {"X-AMP-Admin-Token": ADMIN_TOKEN}
    clients = [httpx.Client(base_url=p.url, timeout=60, headers=admin) for p in procs]
    try:
        assert not errors, errors
        users = [f"user{uuid.uuid4().hex[:6]}" for _ in range(8)]
        for n in range(6):
            go = threading.Barrier(len(users))

            def put(i: int, n: int = n, go: threading.Barrier = go) -> httpx.Response:
                go.wait()
                return clients[i % 2].put(f"/principals/{users[i]}",
                                          json={"groups": [f"g{n}"], "roles": []})

            with ThreadPoolExecutor(len(users)) as pool:
                answers = list(pool.map(put, range(len(users))))
            assert [r.status_code for r in answers] == [200] * len(users), [
                r.text for r in answers if r.status_code != 200]
        for c in clients:
            for u in users:
                assert c.get(f"/principals/{u}").json()["groups"] == ["g5"]
    finally:
        for c in clients:
            c.close()
        for p in procs:
            p.stop()


class _RoundRobin(httpx2.AsyncBaseTransport):
    """A load balancer in the client: each request goes to the next server, as nginx's
    round-robin upstream sends them (docs/deployment.md: no sticky sessions)."""

    def __init__(self, urls: list[str]) -> None:
        self.urls = [httpx2.URL(u) for u in urls]
        self.sent: list[int] = []
        self._inner = httpx2.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        n = len(self.sent) % len(self.urls)
        self.sent.append(n)
        request.url = request.url.copy_with(port=self.urls[n].port)
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_an_mcp_client_behind_round_robin_reaches_both_servers(
        servers: list[ServerProcess], mode: str) -> None:
    """An MCP client's requests spread over two servers. Each server kept its own MCP
    sessions in memory, so a legacy (handshake) client's second request, sent to the
    other server with the first's Mcp-Session-Id, was 404 "Session not found" and the
    client failed: a fleet needed sticky sessions for /mcp. Now /mcp keeps no session
    (identity is per request anyway): every call works on either server."""
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    h = agent()
    balancer = _RoundRobin([p.url for p in servers])
    http = httpx2.AsyncClient(headers=h, transport=balancer,
                              timeout=httpx2.Timeout(30, read=120))
    async with http, Client(streamable_http_client(servers[0].url + "/mcp", http_client=http),
                            mode=mode) as client:
        texts = []
        for i in range(3):
            stored = await client.call_tool("amp_remember", {
                "content": f"round robin note {i}", "owner_id": h["X-AMP-Agent-ID"]})
            assert not stored.is_error, stored
            texts.append(stored.content[0].text)  # type: ignore[union-attr]
        found = await client.call_tool("amp_recall", {
            "query": "round robin note", "owner_id": h["X-AMP-Agent-ID"]})
        assert not found.is_error, found
    assert set(balancer.sent) == {0, 1}
    assert all(text.startswith("Memory stored: mem_") for text in texts), texts
    recalled = found.content[0].text  # type: ignore[union-attr]
    assert all(f"round robin note {i}" in recalled for i in range(3)), recalled


def test_a_server_left_on_another_embedder_answers_503_not_500(
        postgres: PostgresFactory, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Two servers share one index; the second starts with another embedder width and
    re-embeds it (a rolling upgrade that changes the embedder, docs/operations.md says to
    stop them all). The first still embeds in its old width: PostgreSQL refused its
    vectors, so every search and passage query it answered was a 500 (and each commit's
    search feed logged a traceback). Now it answers 503 UNAVAILABLE naming both embedders
    (a balancer's retry may reach a server that was restarted), and its writes still land."""
    from tests.memory_support import QUIET

    url = postgres.new_database("width")
    home = tmp_path_factory.mktemp("width")
    env = {**QUIET, "AMPUP_MEMORY_CATALOG_URI": url, "AMPUP_MEMORY_INDEX_URI": url,
           "AMP_STORE_URI": url, "AMPUP_MEMORY_WAREHOUSE": f"file://{home}/warehouse"}
    old = ServerProcess(home / "old", env=env).start(timeout=90)
    new = None
    user = {"X-AmpUp-User": "alice"}
    try:
        a = httpx.Client(base_url=old.url, timeout=60, headers=user)
        write = {"scope": "width/team", "source": "slack:C1", "acl": ["*"],
                 "body": "The otter team moved to the Oslo office."}
        assert a.post("/episodes", json=write).status_code == 201
        new = ServerProcess(home / "new", env={**env, "AMP_EMBEDDING_DIMENSIONS": "128"}
                            ).start(timeout=90)
        b = httpx.Client(base_url=new.url, timeout=60, headers=user)
        search = {"scope": "width/team", "query": "otter Oslo"}
        assert b.post("/query", json={**search, "find": "passages"}).status_code == 200
        later = a.post("/episodes", json={**write, "body": "The otter team left Oslo."})
        assert later.status_code == 201, later.text
        for route, body in (("/search", search), ("/query", {**search, "find": "passages"})):
            r = a.post(route, json=body)
            assert r.status_code == 503, (route, r.text)
            error = r.json()["error"]
            assert error["code"] == "UNAVAILABLE"
            assert "hash/128" in error["message"] and "hash/256" in error["message"], error
            assert r.headers["Retry-After"]
        found = b.post("/query", json={**search, "find": "passages"}).json()["results"]
        assert len(found) == 2  # the old server's commit is searchable through the new one
        assert "Traceback" not in old.log_path.read_text()
    finally:
        old.stop()
        if new is not None:
            new.stop()
