"""The published reference clients, unchanged, against our server (a real process).

`amp-client` 0.1.0 (PyPI) is driven directly when it is importable (it is in the `test`
extra). The reference Node client `@glatinone/amp-client` 0.1.0 is not on the npm registry
(404), so it cannot be a devDependency; instead its exact request sequences, which differ
from the Python client's, are replayed over HTTP here so the server keeps accepting them.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from tests.client_support import KeyedServer, keyed_server  # noqa: F401  (fixture)
from tests.server_process import ServerProcess

amp_client = pytest.importorskip("amp_client")
from amp_client import AMPClient, AMPError, AsyncAMPClient  # noqa: E402


def test_reference_sync_client(server: ServerProcess, uid: str) -> None:
    owner, agent = f"user_{uid}", f"agent_ref_{uid}"
    client = AMPClient(server.url, agent)
    assert client.health() is True
    cell = client.remember(content="User prefers email correspondence.", owner_id=owner,
                           type="semantic", importance=0.7, readable_by=["agent_billing_*"])
    assert cell["identity"]["created_by"] == agent
    assert cell["access_policy"]["readable_by"] == ["agent_billing_*"]
    other = client.remember({"text": "Likes green tea", "metadata": {"k": 1}}, owner,
                            type="episodic")
    hits = client.recall(query="email correspondence", owner_id=owner)
    assert hits[0]["id"] == cell["id"]
    assert [c["id"] for c in client.recall("email", owner, limit=1, offset=1,
                                           include_stale=True)] == [hits[1]["id"]]
    assert client.get_memory(cell["id"])["scoring"]["access_count"] == 1
    assert [c["id"] for c in client.list_memories(owner_id=owner)] == [other["id"], cell["id"]]
    assert [c["id"] for c in client.list_memories(owner, type="episodic", limit=20,
                                                  offset=0)] == [other["id"]]
    assert client.forget(cell["id"]) is True
    with pytest.raises(AMPError) as denied:
        client.get_memory(cell["id"])
    assert denied.value.status_code == 403
    assert str(denied.value) == "ACCESS_DENIED: Access denied."
    with pytest.raises(AMPError) as invalid:
        client.remember(content="", owner_id=owner)
    assert invalid.value.status_code == 422
    assert invalid.value.details["errors"][0]["loc"] == ["body", "content", "text"]


def test_reference_async_client(server: ServerProcess, uid: str) -> None:
    owner, agent = f"user_{uid}", f"agent_ref_{uid}"

    async def run() -> None:
        loose = AsyncAMPClient(server.url, agent)  # no context manager: a client per call
        assert await loose.health() is True
        first = await loose.remember("Async memory about green tea", owner, type="episodic")
        async with AsyncAMPClient(server.url, agent) as client:
            assert [c["id"] for c in await client.recall("green tea", owner)] == [first["id"]]
            assert (await client.get_memory(first["id"]))["id"] == first["id"]
            assert [c["id"] for c in await client.list_memories(owner, type="episodic")] == [
                first["id"]]
            assert await client.forget(first["id"]) is True
            with pytest.raises(AMPError) as denied:
                await client.get_memory(first["id"])
            # The reference async client drops the status (its bug, not the server's);
            # the server's code still reaches the message.
            assert str(denied.value).startswith("ACCESS_DENIED")

    asyncio.run(run())


def test_reference_clients_with_api_keys(keyed_server: KeyedServer, uid: str) -> None:  # noqa: F811
    agent = "agent_keyed_a"
    client = AMPClient(keyed_server.url, agent, api_key=keyed_server.keys[agent])
    cell = client.remember("keyed memory", f"user_{uid}")
    assert client.recall("keyed", f"user_{uid}")[0]["id"] == cell["id"]
    assert client.forget(cell["id"]) is True
    with pytest.raises(AMPError) as denied:
        AMPClient(keyed_server.url, agent, api_key="ampk_wrong").list_memories(f"user_{uid}")
    assert denied.value.status_code == 401
    assert str(denied.value).startswith("UNAUTHENTICATED")

    async def run() -> None:
        async with AsyncAMPClient(keyed_server.url, agent,
                                  api_key=keyed_server.keys[agent]) as a:
            made = await a.remember("async keyed", f"user_{uid}")
            assert await a.forget(made["id"]) is True

    asyncio.run(run())


def test_reference_langchain_memory_interoperates(server: ServerProcess, uid: str) -> None:
    pytest.importorskip("langchain_core")
    from amp_client.integrations.langchain import AMPMemory as ReferenceMemory
    from langchain_core.messages import AIMessage, HumanMessage

    from ampup_memory.client import AMPClient as OurClient
    from ampup_memory.client.langchain import AMPMemory as OurMemory

    owner, agent = f"user_{uid}", f"agent_chat_{uid}"
    ref = ReferenceMemory(client=AMPClient(server.url, agent), owner_id=owner)
    ref.add_message(HumanMessage(content="Hi, my name is John."))
    ref.add_message(AIMessage(content="Nice to meet you, John."))
    with OurClient(server.url, agent) as client:
        ours = OurMemory(client, owner)
        ours.add_user_message("I write Python.")
        expected = [("human", "Hi, my name is John."), ("ai", "Nice to meet you, John."),
                    ("human", "I write Python.")]
        assert [(m.type, m.content) for m in ref.messages] == expected
        assert [(m.type, m.content) for m in ours.messages] == expected
        # The reference clear() asks for limit=1000; the contract caps pages at 100 (422),
        # and it swallows the error, so nothing is cleared. Ours clears.
        ref.clear()
        assert len(ours.messages) == 3
        ours.clear()
        assert ref.messages == []


def _cell_body(owner: str, text: str) -> dict[str, Any]:
    # Exactly the reference Node client's remember() body.
    return {"type": "semantic", "content": {"text": text, "metadata": {}},
            "identity": {"owner_id": owner, "owner_type": "user"},
            "scoring": {"importance": 0.5}}


def test_reference_node_client_wire_sequences(http: httpx.Client, uid: str) -> None:
    """@glatinone/amp-client 0.1.0's forget(): GET, then PATCH lifecycle with the cell's own
    created_at and status archived, then DELETE. The server must accept the echoed
    created_at (same instant) and still refuse a different one."""
    h = {"X-AMP-Agent-ID": f"agent_node_{uid}"}
    owner = f"user_{uid}"
    cell = http.post("/memories", headers=h, json=_cell_body(owner, "Node memory")).json()
    got = http.get(f"/memories/{cell['id']}", headers=h).json()
    moved = http.patch(f"/memories/{cell['id']}", headers=h, json={
        "lifecycle": {"created_at": got["lifecycle"]["created_at"], "status": "archived"}})
    assert moved.status_code == 200, moved.text
    assert moved.json()["lifecycle"]["status"] == "archived"
    assert http.delete(f"/memories/{cell['id']}", headers=h).status_code == 204

    other = http.post("/memories", headers=h, json=_cell_body(owner, "Node memory 2")).json()
    refused = http.patch(f"/memories/{other['id']}", headers=h, json={
        "lifecycle": {"created_at": "2001-01-01T00:00:00Z", "status": "archived"}})
    assert refused.status_code == 422
    assert refused.json()["error"]["details"]["errors"][0]["loc"] == [
        "body", "lifecycle", "created_at"]
    # listMemories / recall query shapes: limit and offset as strings in the query, and
    # the search body with include_stale and offset.
    listed = http.get("/memories", headers=h,
                      params={"owner_id": owner, "limit": "20", "offset": "0", "type": "semantic"})
    assert [c["id"] for c in listed.json()["results"]] == [other["id"]]
    found = http.post("/memories/search", headers=h, json={
        "query": "Node memory", "owner_id": owner, "limit": 5, "include_stale": False,
        "offset": 0})
    assert [c["id"] for c in found.json()["results"]] == [other["id"]]
