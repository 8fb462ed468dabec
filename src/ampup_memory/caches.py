"""Caches kept in memory: bounded, safe across threads, shared by modules that are not
related otherwise (the search index, the schemas)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

_Key = TypeVar("_Key", bound=Hashable)
_Value = TypeVar("_Value")


class Remembered(Generic[_Key, _Value]):
    """Values remembered by key, the ``kept`` most recently used; safe across threads.
    For keys that name what was computed and the content it was computed from (the SQLite
    index's space versions, a schema's version), so an entry is never stale: a write makes
    new keys and the old ones age out. `search.budget.RecentCounts` is the form for keys
    that do not change with the content (PostgreSQL's counts): there an entry lives a
    fixed time."""

    def __init__(self, kept: int) -> None:
        self._kept = kept
        self._found: OrderedDict[_Key, _Value] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: _Key, make: Callable[[], _Value]) -> _Value:
        """The remembered value, or ``make()`` (run outside the lock) remembered; a None
        (nothing found to remember) is not."""
        with self._lock:
            found = self._found.get(key)
            if found is not None:
                self._found.move_to_end(key)
                return found
        value = make()
        if value is None:
            return value
        with self._lock:
            self._found[key] = value
            while len(self._found) > self._kept:
                self._found.popitem(last=False)
        return value


class Kept(Generic[_Key, _Value]):
    """The ``kept`` most recently used values by key, for a caller that decides itself
    whether an entry is still good (a table object checked against the catalog's pointer):
    `get` and `put`, the oldest dropped past ``kept``, `pop`. Safe across threads. What a
    process meets one by one (every scope ever read, workspaces made and dropped) then
    stays within a bound however long it runs."""

    def __init__(self, kept: int) -> None:
        self._kept = kept
        self._found: OrderedDict[_Key, _Value] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: _Key) -> _Value | None:
        with self._lock:
            found = self._found.get(key)
            if found is not None:
                self._found.move_to_end(key)
            return found

    def put(self, key: _Key, value: _Value) -> None:
        with self._lock:
            self._found[key] = value
            self._found.move_to_end(key)
            while len(self._found) > self._kept:
                self._found.popitem(last=False)

    def pop(self, key: _Key) -> None:
        with self._lock:
            self._found.pop(key, None)

    def __len__(self) -> int:
        return len(self._found)
