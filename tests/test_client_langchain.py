"""The LangChain chat history (`ampup_memory.client.langchain`) against a real server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest.importorskip("langchain_core")

from langchain_core.messages import AIMessage, HumanMessage, SystemMessage  # noqa: E402

from ampup_memory.client import AMPClient, ValidationError  # noqa: E402
from ampup_memory.client.langchain import AMPChatMessageHistory, AMPMemory  # noqa: E402
from tests.server_process import ServerProcess  # noqa: E402


@pytest.fixture
def client(server: ServerProcess, uid: str) -> Iterator[AMPClient]:
    with AMPClient(server.url, f"agent_chat_{uid}") as c:
        yield c


def test_turns_are_episodic_cells_read_back_in_order(client: AMPClient, uid: str) -> None:
    owner = f"user_{uid}"
    history = AMPChatMessageHistory(client, owner)
    history.add_messages([SystemMessage(content="Be brief."),
                          HumanMessage(content="Hi, I am John and I write Python."),
                          AIMessage(content="Nice to meet you, John.")])
    history.add_user_message("I prefer dark mode.")
    assert [(m.type, m.content) for m in history.messages] == [
        ("system", "Be brief."),
        ("human", "Hi, I am John and I write Python."),
        ("ai", "Nice to meet you, John."),
        ("human", "I prefer dark mode."),
    ]
    cells = client.list_memories(owner)
    assert {c["type"] for c in cells} == {"episodic"}
    ai = next(c for c in cells if c["content"]["metadata"]["role"] == "ai")
    assert ai["content"]["text"] == "AI: Nice to meet you, John."  # the reference's format
    assert AMPMemory is AMPChatMessageHistory


def test_history_walks_past_one_page(client: AMPClient, uid: str) -> None:
    history = AMPChatMessageHistory(client, f"user_{uid}")
    for i in range(105):  # the server's page is at most 100 cells
        history.add_message(HumanMessage(content=f"turn {i}"))
    assert [m.content for m in history.messages] == [f"turn {i}" for i in range(105)]


def test_sessions_recall_and_clear(client: AMPClient, uid: str) -> None:
    owner = f"user_{uid}"
    monday = AMPChatMessageHistory(client, owner, session_id="monday")
    tuesday = AMPChatMessageHistory(client, owner, session_id="tuesday", recall_limit=1)
    monday.save_context({"input": "My cat is called Miso."}, {"output": "Lovely name."})
    tuesday.save_context({"input": "I am flying to Lisbon on Friday."},
                         {"output": "Have a good trip."})
    tuesday.add_user_message("The weather in Lisbon should be sunny.")
    assert [m.content for m in monday.messages] == ["My cat is called Miso.", "Lovely name."]
    assert len(tuesday.messages) == 3

    found = tuesday.search_messages("Which city am I flying to?", limit=2)
    assert found and all("Miso" not in str(m.content) for m in found)
    assert "Lisbon" in str(found[0].content)
    assert AMPChatMessageHistory(client, owner).search_messages("my cat Miso", 1)[0].content == \
        "My cat is called Miso."

    recalled = tuesday.load_memory_variables({"input": "flight to Lisbon"})["history"]
    assert recalled.count("\n") == 0 and "Lisbon" in recalled  # recall_limit=1: one turn
    whole = monday.load_memory_variables({})
    assert whole == {"history": "Human: My cat is called Miso.\nAI: Lovely name."}
    as_messages = AMPChatMessageHistory(client, owner, session_id="monday",
                                        memory_key="chat", return_messages=True)
    assert as_messages.memory_variables == ["chat"]
    assert [m.type for m in as_messages.load_memory_variables({})["chat"]] == ["human", "ai"]

    tuesday.clear()
    assert tuesday.messages == []
    assert len(monday.messages) == 2  # another session's turns are untouched


def test_clear_leaves_cells_it_may_not_write(server: ServerProcess, client: AMPClient,
                                            uid: str) -> None:
    owner = f"user_{uid}"
    with AMPClient(server.url, f"agent_peer_{uid}") as peer:
        peer.remember("Human: shared by a peer", owner, type="episodic",
                      readable_by=[client.agent_id or ""])
    history = AMPChatMessageHistory(client, owner)
    history.add_ai_message("mine")
    assert [m.content for m in history.messages] == ["shared by a peer", "mine"]
    history.clear()
    assert [m.content for m in history.messages] == ["shared by a peer"]


def test_clear_forgets_the_turns_the_lifecycle_retired(client: AMPClient, uid: str) -> None:
    """`clear()` walked only the active turns: one the lifecycle had moved to stale (its
    importance decayed) or archived stayed stored after the history was cleared."""
    owner = f"user_{uid}"
    history = AMPChatMessageHistory(client, owner, session_id="chat")
    other = AMPChatMessageHistory(client, owner, session_id="other")
    history.add_messages([HumanMessage(content="My order is 1234."),
                          AIMessage(content="Noted."), HumanMessage(content="Thanks.")])
    other.add_user_message("another conversation")
    first, second, _ = sorted(client.list_memories(owner, type="episodic"),
                              key=lambda c: c["lifecycle"]["created_at"])[:3]
    client.update(first["id"], lifecycle={"status": "stale"})  # as the lifecycle moves them
    client.archive(second["id"])
    history.clear()
    for status in ("active", "stale", "archived"):
        left = client.list_memories(owner, status=status)
        assert [c["content"]["text"] for c in left] == (
            ["Human: another conversation"] if status == "active" else [])


def test_reference_conveniences(client: AMPClient, uid: str) -> None:
    """As the reference: several unnamed inputs store the first value; extra keyword
    arguments reach the base class."""
    memory = AMPMemory(client, f"user_{uid}")
    memory.save_context({"topic": "Lisbon trip", "mood": "happy"}, {"text": "Noted."})
    assert [m.content for m in memory.messages] == ["Lisbon trip", "Noted."]
    with pytest.raises(TypeError):
        AMPMemory(client, f"user_{uid}", no_such_option=1)  # reaches the base class


def test_search_messages_below_one_is_the_servers_422(client: AMPClient, uid: str) -> None:
    """`search_messages(q, limit=0)` (or -1) answered one message: the page size was
    raised to 1 and the first hit kept before the count was checked. A limit below one is
    now the server's 422, as `recall(q, owner, limit=0)` is."""
    history = AMPChatMessageHistory(client, f"user_{uid}")
    history.add_message(HumanMessage(content="alpha order"))
    for limit in (0, -1):
        with pytest.raises(ValidationError) as invalid:
            history.search_messages("alpha", limit=limit)
        assert invalid.value.status_code == 422
    assert [m.content for m in history.search_messages("alpha", limit=1)] == ["alpha order"]
