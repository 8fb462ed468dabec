"""`ampup_memory.client` against a real server process: every method, sync and async."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import httpx
import pytest

from ampup_memory.client import (
    AccessDeniedError,
    AMPClient,
    AMPConnectionError,
    AMPError,
    AsyncAMPClient,
    AuthenticationError,
    ConflictError,
    NotFoundError,
    PayloadTooLargeError,
    RateLimitedError,
    ValidationError,
)
from tests.client_support import (
    KeyedServer,
    keyed_server,  # noqa: F401  (fixture)
)
from tests.server_process import ServerProcess


@pytest.fixture
def agent(uid: str) -> str:
    return f"agent_cs_{uid}"


@pytest.fixture
def owner(uid: str) -> str:
    return f"user_{uid}"


@pytest.fixture
def client(server: ServerProcess, agent: str) -> Iterator[AMPClient]:
    with AMPClient(server.url, agent) as c:
        yield c


def _ids(cells: list[dict[str, object]]) -> list[object]:
    return [c["id"] for c in cells]


# ---- the reference surface ---------------------------------------------------------------


def test_reference_methods_round_trip(client: AMPClient, owner: str, agent: str) -> None:
    assert client.health() is True
    cell = client.remember("User prefers email correspondence.", owner, type="semantic",
                           importance=0.7, readable_by=["agent_billing_*"])
    assert cell["id"].startswith("mem_")
    assert cell["identity"] == {"owner_id": owner, "owner_type": "user", "created_by": agent,
                                "session_id": None}
    assert cell["scoring"]["importance"] == 0.7
    assert cell["access_policy"]["readable_by"] == ["agent_billing_*"]
    other = client.remember({"text": "Prefers tea to coffee", "metadata": {"k": 1}}, owner,
                            type="episodic")
    assert other["content"]["metadata"] == {"k": 1}

    assert client.get_memory(cell["id"])["scoring"]["access_count"] == 1
    assert client.get_memory(cell["id"])["scoring"]["access_count"] == 2

    hits = client.recall("email correspondence", owner)
    assert hits[0]["id"] == cell["id"]
    assert set(_ids(hits)) == {cell["id"], other["id"]}
    assert len(client.recall("email correspondence", owner, limit=1)) == 1
    assert _ids(client.recall("email correspondence", owner, limit=1, offset=1)) == _ids(hits[1:2])

    assert _ids(client.list_memories(owner)) == [other["id"], cell["id"]]  # newest first
    assert _ids(client.list_memories(owner, type="episodic")) == [other["id"]]
    assert _ids(client.list_memories(owner, limit=1, offset=1)) == [cell["id"]]

    # forget = archive then delete, end to end: afterwards the cell is gone for everyone.
    assert client.forget(cell["id"]) is True
    with pytest.raises(AccessDeniedError) as denied:
        client.get_memory(cell["id"])
    assert (denied.value.status_code, denied.value.code) == (403, "ACCESS_DENIED")
    assert cell["id"] not in _ids(client.list_memories(owner))
    assert cell["id"] not in _ids(client.search("email", owner, status=["active", "archived",
                                                                      "stale"])["results"])
    with pytest.raises(AccessDeniedError):
        client.forget(cell["id"])


def test_forget_works_from_every_live_status(client: AMPClient, owner: str) -> None:
    for status in ("active", "stale", "archived"):
        cell = client.remember(f"{status} cell", owner)
        if status != "active":
            client.update(cell["id"], lifecycle={"status": status})
        assert client.forget(cell["id"]) is True
        with pytest.raises(AccessDeniedError):
            client.get_memory(cell["id"])


def test_forget_by_an_agent_that_may_write_but_not_read(server: ServerProcess,
                                                        client: AMPClient, owner: str,
                                                        uid: str) -> None:
    # The reference Node client reads the cell first, so it cannot do this; ours can.
    cell = client.remember("editable, not readable", owner, writable_by=[f"agent_ed_{uid}"])
    with AMPClient(server.url, f"agent_ed_{uid}") as editor:
        with pytest.raises(AccessDeniedError):
            editor.get_memory(cell["id"])
        assert editor.forget(cell["id"]) is True
    with pytest.raises(AccessDeniedError):
        client.get_memory(cell["id"])


def test_url_forms_and_base_url(server: ServerProcess, agent: str, owner: str) -> None:
    for url in (server.url, server.url + "/", server.url + "/amp/v1", server.url + "/amp/v1/"):
        with AMPClient(url, agent) as c:
            assert c.server_url == server.url + "/amp/v1"
            assert c.health()
    with AMPClient(base_url=server.url, agent_id=agent) as c:
        assert c.remember("via base_url", owner)["identity"]["created_by"] == agent
    assert AMPClient().server_url == "http://127.0.0.1:8765/amp/v1"


# ---- beyond the reference ----------------------------------------------------------------


def test_remember_extras(client: AMPClient, owner: str) -> None:
    cell = client.remember(
        "Call after 5pm", owner, type="procedural", importance=0.4,
        owner_type="organization", metadata={"channel": "phone"}, writable_by=["agent_w*"],
        public=True, confidence=0.8, decay_rate=0.05, session_id="s1",
        provenance={"source_type": "conversation", "source_ref": "turn-9"},
        expires_at="2099-01-01T00:00:00Z",
    )
    assert cell["type"] == "procedural"
    assert cell["identity"]["owner_type"] == "organization"
    assert cell["identity"]["session_id"] == "s1"
    assert cell["content"]["metadata"] == {"channel": "phone"}
    assert cell["access_policy"] == {"readable_by": [], "writable_by": ["agent_w*"],
                                     "public": True}
    assert cell["scoring"] == {"importance": 0.4, "confidence": 0.8, "decay_rate": 0.05,
                               "access_count": 0}
    assert cell["provenance"]["source_ref"] == "turn-9"
    assert cell["lifecycle"]["expires_at"].startswith("2099-01-01T00:00:00")


def test_reference_drop_in_details(client: AMPClient, owner: str) -> None:
    """What code written for amp-client 0.1.0 touches besides the methods."""
    import ampup_memory.client as package
    assert isinstance(package.__version__, str) and "__version__" in package.__all__
    assert client.session.headers is not None  # the reference's `session` attribute
    cell = client.remember(123, owner)  # type: ignore[arg-type]  # the reference str()s it
    assert cell["content"]["text"] == "123"


def test_update_deep_merges_and_archive(client: AMPClient, owner: str) -> None:
    cell = client.remember("original text", owner, importance=0.5, readable_by=["agent_r"])
    updated = client.update(cell["id"], scoring={"importance": 0.9},
                            content={"metadata": {"tag": "x"}})
    assert updated["scoring"] == {**cell["scoring"], "importance": 0.9}
    assert updated["content"] == {"text": "original text", "metadata": {"tag": "x"}}
    assert updated["access_policy"]["readable_by"] == ["agent_r"]
    assert updated["lifecycle"]["last_updated_at"] > cell["lifecycle"]["last_updated_at"]

    archived = client.archive(cell["id"])
    assert archived["lifecycle"]["status"] == "archived"
    with pytest.raises(ConflictError) as conflict:
        client.update(cell["id"], lifecycle={"status": "active"})
    assert (conflict.value.status_code, conflict.value.code) == (409, "INVALID_TRANSITION")
    assert conflict.value.details == {"from": "archived", "to": "active"}


async def test_a_datetime_anywhere_in_a_body_is_sent_as_rfc_3339(server: ServerProcess,
                                                                   client: AMPClient,
                                                                   owner: str) -> None:
    """`remember(expires_at=<datetime>)` was sent, but the same datetime inside `update`'s
    fields raised "Object of type datetime is not JSON serializable" and sent nothing (the
    Node client sends a Date there as its ISO string); sync and async alike."""
    cell = client.remember("renew by spring", owner)
    when = datetime(2031, 3, 1, 12, tzinfo=timezone(timedelta(hours=2)))
    moved = client.update(cell["id"], lifecycle={"expires_at": when})
    assert moved["lifecycle"]["expires_at"] == "2031-03-01T10:00:00.000000Z"
    async with AsyncAMPClient(server.url, client.agent_id) as again:
        later = await again.update(cell["id"], lifecycle={"expires_at": when + timedelta(days=1)})
    assert later["lifecycle"]["expires_at"] == "2031-03-02T10:00:00.000000Z"


def test_search_filters(client: AMPClient, owner: str, uid: str) -> None:
    word = f"zebra{uid}"
    sem = client.remember(f"{word} semantic fact", owner, type="semantic")
    epi = client.remember(f"{word} episode", owner, type="episodic")
    stale = client.remember(f"{word} stale note", owner)
    client.update(stale["id"], lifecycle={"status": "stale"})
    arch = client.remember(f"{word} archived note", owner)
    client.archive(arch["id"])
    foreign = client.remember(f"{word} someone else's", f"other_{owner}")

    page = client.search(word, owner)
    assert set(_ids(page["results"])) == {sem["id"], epi["id"]}
    assert (page["query"], page["offset"], page["limit"], page["has_more"]) == (word, 0, 10,
                                                                               False)
    assert _ids(client.search(word, owner, types=["episodic"])["results"]) == [epi["id"]]
    assert set(_ids(client.search(word, owner, include_stale=True)["results"])) == {
        sem["id"], epi["id"], stale["id"]}
    assert _ids(client.search(word, owner, status="archived")["results"]) == [arch["id"]]
    assert _ids(client.search(word, owner, status=["stale"])["results"]) == [stale["id"]]
    everyone = client.search(word, limit=100)["results"]  # no owner filter
    assert {sem["id"], epi["id"], foreign["id"]} <= set(_ids(everyone))
    assert foreign["id"] not in _ids(page["results"])
    first = client.search(word, owner, limit=1)
    assert first["has_more"] is True and first["returned"] == 1
    # recall is the reference's shape of the same search: active (+ stale) cells, a list.
    assert set(_ids(client.recall(word, owner, include_stale=True))) == {
        sem["id"], epi["id"], stale["id"]}


def test_list_page_and_status(client: AMPClient, owner: str) -> None:
    cell = client.remember("soon archived", owner)
    client.archive(cell["id"])
    assert client.list_memories(owner) == []
    assert _ids(client.list_memories(owner, status="archived")) == [cell["id"]]
    page = client.list_page(owner, status="archived", limit=5)
    assert (page["returned"], page["has_more"], page["limit"]) == (1, False, 5)


def test_iterators_walk_every_page(client: AMPClient, owner: str, uid: str) -> None:
    word = f"walrus{uid}"
    made = [client.remember(f"{word} note number {i}", owner)["id"] for i in range(7)]
    assert client.list_page(owner, limit=3)["has_more"] is True
    assert list(c["id"] for c in client.iter_memories(owner, page_size=3)) == made[::-1]
    assert [c["id"] for c in client.iter_memories(owner)] == made[::-1]
    hits = [c["id"] for c in client.iter_search(word, owner, page_size=3)]
    assert sorted(hits) == sorted(made) and len(hits) == 7
    assert list(client.iter_memories(f"nobody_{uid}")) == []


def test_spec(client: AMPClient) -> None:
    spec = client.spec()
    assert spec["amp_version"] == "0.1.0"
    assert spec["capabilities"]["max_page_size"] == 100


# ---- errors ------------------------------------------------------------------------------


def test_access_denied_for_other_agents(server: ServerProcess, client: AMPClient,
                                        owner: str, uid: str) -> None:
    cell = client.remember("private", owner, readable_by=["agent_billing_*"])
    with AMPClient(server.url, f"agent_marketing_{uid}") as stranger:
        for call in (lambda: stranger.get_memory(cell["id"]),
                     lambda: stranger.update(cell["id"], content={"text": "x"}),
                     lambda: stranger.forget(cell["id"]),
                     lambda: stranger.get_memory("mem_01NOSUCHCELL00000000000000")):
            with pytest.raises(AccessDeniedError) as denied:
                call()
            err = denied.value
            assert (err.status_code, err.code, err.message) == (403, "ACCESS_DENIED",
                                                                 "Access denied.")
            assert str(err) == "ACCESS_DENIED: Access denied."
            assert err.request is not None and "/amp/v1/memories/mem_" in str(err.request.url)
        assert stranger.search("private", owner)["results"] == []
    with AMPClient(server.url, f"agent_billing_{uid}") as billing:
        assert billing.get_memory(cell["id"])["id"] == cell["id"]
        with pytest.raises(AccessDeniedError):  # readable_by grants no write
            billing.archive(cell["id"])


def test_validation_size_and_missing_agent(server: ServerProcess, client: AMPClient,
                                           owner: str) -> None:
    with pytest.raises(ValidationError) as invalid:
        client.remember("", owner)
    err = invalid.value
    assert (err.status_code, err.code) == (422, "VALIDATION_ERROR")
    assert err.errors[0]["loc"] == ["body", "content", "text"]
    assert err.request is not None and err.request.method == "POST"
    with pytest.raises(ValidationError):
        client.remember("bad importance", owner, importance=1.5)
    with pytest.raises(ValidationError):
        client.list_memories(owner, limit=101)

    with pytest.raises(PayloadTooLargeError) as big:
        client.remember("x" * 70_000, owner)
    assert (big.value.status_code, big.value.code) == (413, "CELL_TOO_LARGE")
    assert big.value.details["max_cell_size_bytes"] == 65536

    with AMPClient(server.url) as anonymous:
        assert anonymous.health() is True  # /health stays open
        with pytest.raises(AuthenticationError) as missing:
            anonymous.list_memories(owner)
        assert (missing.value.status_code, missing.value.code) == (401, "MISSING_AGENT_ID")


def test_rate_limited_scoring_patches(client: AMPClient, owner: str) -> None:
    cell = client.remember("tuned often", owner)
    for i in range(5):
        client.update(cell["id"], scoring={"importance": 0.1 * (i + 1)})
    with pytest.raises(RateLimitedError) as limited:
        client.update(cell["id"], scoring={"importance": 0.9})
    err = limited.value
    assert (err.status_code, err.code) == (429, "RATE_LIMITED")
    assert err.retry_after is not None and 0 < err.retry_after <= 3600
    assert err.details["retry_after_seconds"] == int(err.retry_after)
    # A PATCH without scoring is not budgeted.
    assert client.update(cell["id"], content={"text": "still editable"})["content"]["text"] == \
        "still editable"


def test_not_found_and_connection_errors(server: ServerProcess, agent: str) -> None:
    with AMPClient(server.url + "/no-such-prefix", agent) as lost:
        with pytest.raises(NotFoundError) as missing:
            lost.list_memories("u")
        assert (missing.value.status_code, missing.value.code) == (404, "NOT_FOUND")
        assert lost.health() is False

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"  # bound, never listening
        with AMPClient(dead, agent, timeout=2) as c:
            assert c.health() is False
            with pytest.raises(AMPConnectionError) as refused:
                c.get_memory("mem_x")
            assert refused.value.status_code is None and refused.value.code is None
            assert isinstance(refused.value, AMPError)


def test_api_keys(keyed_server: KeyedServer, uid: str) -> None:  # noqa: F811
    owner = f"user_{uid}"
    a, b = "agent_keyed_a", "agent_keyed_b"
    with AMPClient(keyed_server.url, a, api_key=keyed_server.keys[a]) as c:
        cell = c.remember("keyed memory", owner)
        assert cell["identity"]["created_by"] == a
        assert c.get_memory(cell["id"])["id"] == cell["id"]
        assert c.forget(cell["id"]) is True
    for bad in (AMPClient(keyed_server.url, a),                              # no key
                AMPClient(keyed_server.url, a, api_key="ampk_wrong"),        # wrong key
                AMPClient(keyed_server.url, a, api_key=keyed_server.keys[b]),  # b's key
                AMPClient(keyed_server.url, None, api_key=keyed_server.keys[a])):  # no agent
        with bad:
            with pytest.raises(AuthenticationError) as denied:
                bad.list_memories(owner)
            assert (denied.value.status_code, denied.value.code) == (401, "UNAUTHENTICATED")
            assert bad.health() is True  # /health stays open with keys on


# ---- async -------------------------------------------------------------------------------


async def test_async_every_method(server: ServerProcess, agent: str, owner: str,
                                  uid: str) -> None:
    word = f"otter{uid}"
    async with AsyncAMPClient(server.url, agent) as c:
        assert await c.health() is True
        assert (await c.spec())["amp_version"] == "0.1.0"
        cells = [await c.remember(f"{word} fact {i}", owner, type="semantic",
                                  importance=0.6, readable_by=["agent_billing_*"])
                 for i in range(5)]
        ids = [x["id"] for x in cells]
        assert (await c.get_memory(ids[0]))["scoring"]["access_count"] == 1
        assert set(_ids(await c.recall(word, owner))) == set(ids)
        assert len(await c.recall(word, owner, limit=2, offset=4)) == 1
        assert _ids(await c.list_memories(owner, type="semantic", limit=2)) == ids[:-3:-1]
        assert (await c.list_page(owner, limit=2))["has_more"] is True
        assert [x["id"] async for x in c.iter_memories(owner, page_size=2)] == ids[::-1]
        assert sorted([x["id"] async for x in c.iter_search(word, owner, page_size=2)]) == \
            sorted(ids)
        page = await c.search(word, owner, types=["semantic"], limit=3)
        assert page["returned"] == 3 and page["has_more"] is True
        merged = await c.update(ids[1], scoring={"importance": 0.95})
        assert merged["scoring"]["confidence"] == 1.0 and merged["scoring"]["importance"] == 0.95
        assert (await c.archive(ids[1]))["lifecycle"]["status"] == "archived"
        assert await c.forget(ids[0]) is True
        with pytest.raises(AccessDeniedError) as denied:
            await c.get_memory(ids[0])
        assert (denied.value.status_code, denied.value.code) == (403, "ACCESS_DENIED")
        with pytest.raises(ConflictError):
            await c.update(ids[1], lifecycle={"status": "active"})
        for i in range(5):
            await c.update(ids[2], scoring={"importance": 0.2 + i / 10})
        with pytest.raises(RateLimitedError) as limited:
            await c.update(ids[2], scoring={"importance": 0.1})
        assert limited.value.code == "RATE_LIMITED" and limited.value.retry_after
        with pytest.raises(ValidationError):
            await c.remember("", owner)


async def test_async_without_context_manager(server: ServerProcess, agent: str,
                                             owner: str) -> None:
    c = AsyncAMPClient(server.url, agent)
    cell = await c.remember("no context manager", owner)
    assert (await c.get_memory(cell["id"]))["id"] == cell["id"]
    assert await c.forget(cell["id"]) is True
    async with AsyncAMPClient("http://127.0.0.1:1", agent, timeout=2) as dead:
        assert await dead.health() is False
        with pytest.raises(AMPConnectionError):
            await dead.list_memories(owner)


async def test_async_api_keys(keyed_server: KeyedServer, uid: str) -> None:  # noqa: F811
    a = "agent_keyed_a"
    async with AsyncAMPClient(keyed_server.url, a, api_key=keyed_server.keys[a]) as c:
        cell = await c.remember("async keyed", f"user_{uid}")
        assert await c.forget(cell["id"])
    async with AsyncAMPClient(keyed_server.url, a, api_key="nope") as bad:
        with pytest.raises(AuthenticationError) as denied:
            await bad.list_memories(f"user_{uid}")
        assert denied.value.code == "UNAUTHENTICATED"


def test_errors_keep_the_response(client: AMPClient, owner: str) -> None:
    with pytest.raises(ValidationError) as invalid:
        client.remember("", owner)
    response = invalid.value.response
    assert isinstance(response, httpx.Response) and response.status_code == 422
    assert response.json()["error"]["code"] == "VALIDATION_ERROR"


# ---- arguments the server never sees as sent --------------------------------------------


def test_one_pattern_as_a_string_is_one_pattern(server: ServerProcess, client: AMPClient,
                                                owner: str) -> None:
    """`readable_by="agent_billing_*"` was sent as fifteen one-letter patterns, one of
    them `*`, which let every agent read (and, for `writable_by`, write) the cell."""
    cell = client.remember("one pattern", owner, readable_by="agent_billing_*",
                           writable_by="agent_billing_*")
    assert cell["access_policy"]["readable_by"] == ["agent_billing_*"]
    assert cell["access_policy"]["writable_by"] == ["agent_billing_*"]
    with AMPClient(server.url, "agent_marketing") as marketing:
        with pytest.raises(AccessDeniedError):
            marketing.get_memory(cell["id"])
    with AMPClient(server.url, "agent_billing_v1") as billing:
        assert billing.get_memory(cell["id"])["id"] == cell["id"]


async def test_async_one_pattern_as_a_string_is_one_pattern(server: ServerProcess,
                                                            agent: str, owner: str) -> None:
    async with AsyncAMPClient(server.url, agent) as c:
        cell = await c.remember("one pattern", owner, readable_by="agent_billing_*")
    assert cell["access_policy"]["readable_by"] == ["agent_billing_*"]
    async with AsyncAMPClient(server.url, "agent_marketing") as marketing:
        with pytest.raises(AccessDeniedError):
            await marketing.get_memory(cell["id"])


def _unsendable(c: AMPClient | AsyncAMPClient, owner: str) -> list[tuple[str, object]]:
    """Calls whose arguments cannot go on the wire at all (each a fresh call or coroutine)."""
    return [
        ("NaN importance", lambda: c.remember("nan", owner, importance=float("nan"))),
        ("infinite decay", lambda: c.remember("inf", owner, decay_rate=float("inf"))),
        ("a set in metadata", lambda: c.remember("set", owner, metadata={"tags": {"a"}})),
        ("an object in a PATCH", lambda: c.update("mem_x", content={"metadata": object()})),
        ("no id", lambda: c.get_memory(None)),  # type: ignore[arg-type]
        ("an empty id", lambda: c.forget("")),
        ("a number as id", lambda: c.archive(7)),  # type: ignore[arg-type]
        # httpx resolves dot segments: /amp/v1/memories/.. would be GET /amp/v1
        ("a dot-dot id", lambda: c.get_memory("..")),
    ]


def test_unsendable_arguments_are_validation_errors(server: ServerProcess, agent: str,
                                                    owner: str) -> None:
    """They raised json's ValueError / TypeError, quote's TypeError or a UnicodeEncodeError
    from inside the client; now the documented ValidationError, before anything is sent
    (status_code None), and nothing is stored."""
    with AMPClient(server.url, agent) as c:
        for what, call in _unsendable(c, owner):
            with pytest.raises(ValidationError) as invalid:
                call()  # type: ignore[operator]
            assert invalid.value.status_code is None, what
            assert invalid.value.request is None and invalid.value.response is None, what
        assert c.list_memories(owner) == []
    with AMPClient(server.url, "agént") as accented:  # a header is ASCII
        with pytest.raises(ValidationError) as invalid:
            accented.list_memories(owner)
        assert "ascii" in str(invalid.value).lower()
    with AMPClient("http://[::1", agent) as broken:  # httpx.InvalidURL is no HTTPError
        with pytest.raises(AMPConnectionError):
            broken.list_memories(owner)


async def test_async_unsendable_arguments_are_validation_errors(
        server: ServerProcess, agent: str, owner: str) -> None:
    for pooled in (True, False):  # inside `async with` and with a client per call
        c = AsyncAMPClient(server.url, agent)
        if pooled:
            await c.__aenter__()
        for what, call in _unsendable(c, owner):
            with pytest.raises(ValidationError) as invalid:
                await call()  # type: ignore[operator]
            assert invalid.value.status_code is None, what
        await c.aclose()
    async with AsyncAMPClient(server.url, agent) as c:
        assert await c.list_memories(owner) == []
    async with AsyncAMPClient(server.url, "agént") as accented:
        with pytest.raises(ValidationError):
            await accented.list_memories(owner)
    async with AsyncAMPClient("http://[::1", agent) as broken:
        with pytest.raises(AMPConnectionError):
            await broken.list_memories(owner)


def test_sync_client_after_close(server: ServerProcess, agent: str, owner: str) -> None:
    """A closed AMPClient raised httpx's RuntimeError on its next call; it now opens a new
    session, as the async client (a client per call outside `async with`) and the
    reference client's requests.Session do."""
    with AMPClient(server.url, agent) as c:
        cell = c.remember("before close", owner)
    assert c.get_memory(cell["id"])["id"] == cell["id"]
    c.close()
    assert c.forget(cell["id"]) is True
    c.close()
    assert c.session.get(f"{server.url}/amp/v1/health").status_code == 200
    c.close()


def test_listing_filters_take_one_value(client: AMPClient, owner: str) -> None:
    """`list_memories(owner, status=["active", "stale"])` went out as two `status`
    parameters; the server kept the last and the active cells were silently missing.
    A listing filter is one value (search takes several); a list is a ValidationError."""
    client.remember("listed", owner)
    for kwargs in ({"status": ["active", "stale"]}, {"type": ["semantic"]}):
        with pytest.raises(ValidationError) as invalid:
            client.list_memories(owner, **kwargs)  # type: ignore[arg-type]
        assert invalid.value.status_code is None
        with pytest.raises(ValidationError):
            list(client.iter_memories(owner, **kwargs))  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        client.list_page([owner])  # type: ignore[arg-type]
    assert len(client.list_memories(owner, status="active")) == 1


def test_the_two_clients_have_the_same_methods() -> None:
    def public(cls: type) -> set[str]:
        return {name for name in dir(cls) if not name.startswith("_")}

    sync, wait = public(AMPClient), public(AsyncAMPClient)
    assert sync - {"close", "session"} == wait - {"aclose"}
    for name in sync - {"close", "session", "base_url"}:
        # One definition serves both: nothing to drift apart.
        assert getattr(AMPClient, name) is getattr(AsyncAMPClient, name), name
    assert len(sync) > 15


async def test_a_server_that_never_answers_is_a_timeout_that_says_so() -> None:
    """python-client.md: a timeout is `AMPConnectionError`. The async clients' message was
    `HTTP request failed: ` (httpx's ReadTimeout has no text); it names what failed."""
    with socket.socket() as listening:  # accepts connections, never answers
        listening.bind(("127.0.0.1", 0))
        listening.listen(8)
        silent = f"http://127.0.0.1:{listening.getsockname()[1]}"
        with pytest.raises(AMPConnectionError) as sync_timeout:
            AMPClient(silent, "agent_t", timeout=0.3).list_memories("u")
        async with AsyncAMPClient(silent, "agent_t", timeout=0.3) as c:
            with pytest.raises(AMPConnectionError) as async_timeout:
                await c.list_memories("u")
    for raised in (sync_timeout.value, async_timeout.value):
        assert raised.status_code is None and raised.code is None
        assert "timeout" in str(raised).lower() or "timed out" in str(raised), str(raised)
