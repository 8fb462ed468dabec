"""LangChain chat history on AMP: each turn is one episodic cell, recalled by search.

Needs the ``langchain`` extra (``pip install 'ampup-memory[langchain]'``); importing
`ampup_memory.client` never imports LangChain, only this module does.

Cells are written the way the reference ``amp_client.integrations.langchain.AMPMemory``
writes them (text prefixed ``Human: `` / ``AI: ``), plus ``content.metadata.role``, so
histories written by either library read back in both. Unlike the reference, reading walks
every page (the reference stops at 100 turns), ``clear()`` forgets only this conversation's
cells, those the lifecycle moved to stale or archived too, and reports failures (the
reference asks for a 1000-cell page, which the protocol refuses with 422, and swallows the
error, so it never clears anything), and ``search_messages`` / ``recall_limit`` recall the
turns relevant to a query.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ampup_memory.client._base import MemoryCell
from ampup_memory.client._sync import AMPClient
from ampup_memory.client.errors import AccessDeniedError

try:
    from langchain_core.chat_history import BaseChatMessageHistory
    from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "ampup_memory.client.langchain needs langchain-core: "
        "pip install 'ampup-memory[langchain]'"
    ) from exc

_PREFIXES = {"ai": "AI: ", "system": "System: "}
_HUMAN_PREFIX = "Human: "
_LIVE = ("active", "stale", "archived")
"""Every status a stored turn can have (a deleted one is gone already)."""


def _text_of(message: BaseMessage) -> str:
    content = message.content
    return content if isinstance(content, str) else str(content)


def _to_message(cell: MemoryCell) -> BaseMessage:
    content = cell.get("content") or {}
    text = str(content.get("text", ""))
    metadata = content.get("metadata") or {}
    role = metadata.get("role") if isinstance(metadata, dict) else None
    if role is None:  # a cell written by the reference library: the prefix is the role
        role = next((r for r, p in _PREFIXES.items() if text.startswith(p)), "human")
    prefix = _PREFIXES.get(str(role), _HUMAN_PREFIX)
    if text.startswith(prefix):
        text = text[len(prefix):]
    if role == "ai":
        return AIMessage(content=text)
    if role == "system":
        return SystemMessage(content=text)
    return HumanMessage(content=text)


class AMPChatMessageHistory(BaseChatMessageHistory):
    """A `BaseChatMessageHistory` whose turns live in an AMP server.

    ``session_id`` (optional) is stored as each cell's ``identity.session_id`` and limits
    reads to that conversation. With ``recall_limit`` set, `load_memory_variables` returns
    the turns most relevant to the chain's input (by search) instead of the whole history.
    """

    def __init__(
        self,
        client: AMPClient,
        owner_id: str,
        memory_key: str = "history",
        return_messages: bool = False,
        session_id: str | None = None,
        *,
        recall_limit: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)  # as the reference: the base class's own options
        self.client = client
        self.owner_id = owner_id
        self.memory_key = memory_key
        self.return_messages = return_messages
        self.session_id = session_id
        self.recall_limit = recall_limit

    def _mine(self, cell: MemoryCell) -> bool:
        if self.session_id is None:
            return True
        identity = cell.get("identity") or {}
        return bool(identity.get("session_id") == self.session_id)

    def _cells(self, statuses: Sequence[str] = ("active",)) -> list[MemoryCell]:
        """This conversation's turns of ``statuses``, oldest first (the history shows the
        active ones; `clear` forgets those the lifecycle retired too)."""
        cells = [c for status in statuses
                 for c in self.client.iter_memories(self.owner_id, type="episodic",
                                                    status=status)
                 if self._mine(c)]
        cells.sort(key=lambda c: (str((c.get("lifecycle") or {}).get("created_at", "")),
                                  str(c.get("id", ""))))
        return cells

    # ---- BaseChatMessageHistory ------------------------------------------------------

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        """The whole conversation, oldest first."""
        return [_to_message(c) for c in self._cells()]

    def add_message(self, message: BaseMessage) -> None:
        prefix = _PREFIXES.get(message.type, _HUMAN_PREFIX)
        self.client.remember(
            f"{prefix}{_text_of(message)}",
            self.owner_id,
            type="episodic",
            metadata={"role": message.type, "source": "langchain"},
            session_id=self.session_id,
        )

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        for message in messages:
            self.add_message(message)

    def clear(self) -> None:
        """Forget this conversation's cells, those the lifecycle moved to stale or archived
        too; cells this agent may not write are left alone."""
        for cell in self._cells(_LIVE):
            try:
                self.client.forget(str(cell["id"]))
            except AccessDeniedError:
                continue

    # ---- recall ----------------------------------------------------------------------

    def search_messages(self, query: str, limit: int = 5) -> list[BaseMessage]:
        """The turns most relevant to ``query``, best first."""
        found: list[BaseMessage] = []
        # A limit below 1 goes to the server as the page size: its 422, as `recall` gets.
        for cell in self.client.iter_search(query, self.owner_id, types=["episodic"],
                                            page_size=min(limit, 100)):
            if self._mine(cell):
                found.append(_to_message(cell))
                if len(found) >= limit:
                    break
        return found

    # ---- chain-facing conveniences (the reference's memory interface) ----------------

    @property
    def memory_variables(self) -> list[str]:
        return [self.memory_key]

    def load_memory_variables(self, inputs: dict[str, Any]) -> dict[str, Any]:
        query = _pick(inputs, ("input", "query", "question"))
        if self.recall_limit and query:
            messages = self.search_messages(query, self.recall_limit)
        else:
            messages = self.messages
        if self.return_messages:
            return {self.memory_key: messages}
        lines = [f"{_PREFIXES.get(m.type, _HUMAN_PREFIX)}{_text_of(m)}" for m in messages]
        return {self.memory_key: "\n".join(lines)}

    def save_context(self, inputs: dict[str, Any], outputs: dict[str, Any]) -> None:
        said = _pick(inputs, ("input", "query", "question"))
        answered = _pick(outputs, ("output", "response", "answer"))
        if said:
            self.add_message(HumanMessage(content=said))
        if answered:
            self.add_message(AIMessage(content=answered))


def _pick(source: dict[str, Any], keys: Sequence[str]) -> str:
    if not source:
        return ""
    if len(source) == 1:
        return str(next(iter(source.values())))
    for key in keys:
        if key in source:
            return str(source[key])
    return str(next(iter(source.values())))  # no known key: the first value, as the reference


AMPMemory = AMPChatMessageHistory
"""The reference library's name for the same class."""

__all__ = ["AMPChatMessageHistory", "AMPMemory"]
