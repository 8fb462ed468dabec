"""Newest-wins over the versions a reader may see, and each version's effective window.

Until schemas say otherwise every predicate is one-valued. Versions of one
(entity, predicate) are ordered by ``valid_from`` (ties: later commit, then position in
the commit). A version holds from its ``valid_from`` until the next visible version
begins or its own ``valid_to``, whichever is first. A closure is a version with no value:
it ends the one before it and is never itself a current value.

This is the same rule as ``memory/facts.py`` (``timeline``/``current``) applied to index
rows; ``tests/test_search_api.py`` checks that /search and GET /facts agree.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Generic, Protocol, TypeVar

_EPOCH = datetime.min.replace(tzinfo=UTC)
CLOSURE = "closure"


class Version(Protocol):
    @property
    def entity(self) -> str: ...
    @property
    def predicate(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def valid_from(self) -> datetime | None: ...
    @property
    def valid_to(self) -> datetime | None: ...
    @property
    def commit_seq(self) -> int: ...
    @property
    def ord(self) -> int: ...


V = TypeVar("V", bound=Version)


@dataclass(frozen=True)
class Held(Generic[V]):
    version: V
    end: datetime | None  # exclusive; None = still holds

    def holds_at(self, at: datetime) -> bool:
        start = self.version.valid_from or _EPOCH
        return start <= at and (self.end is None or at < self.end)


def _order(v: Version) -> tuple[datetime, int, int]:
    return (v.valid_from or _EPOCH, v.commit_seq, v.ord)


def timelines(versions: Iterable[V]) -> dict[tuple[str, str], list[Held[V]]]:
    """Per (entity, predicate): the versions oldest first, each with its effective end."""
    by_key: dict[tuple[str, str], list[V]] = {}
    for v in versions:
        by_key.setdefault((v.entity, v.predicate), []).append(v)
    found: dict[tuple[str, str], list[Held[V]]] = {}
    for key, group in by_key.items():
        ordered = sorted(group, key=_order)
        held: list[Held[V]] = []
        for i, v in enumerate(ordered):
            ends = [v.valid_to] if v.valid_to else []
            if i + 1 < len(ordered) and ordered[i + 1].valid_from is not None:
                ends.append(ordered[i + 1].valid_from)  # type: ignore[arg-type]
            held.append(Held(v, min(ends) if ends else None))
        found[key] = held
    return found


def current(line: list[Held[V]], at: datetime) -> Held[V] | None:
    """The version holding at ``at``; None when nothing holds or a closure ended it."""
    for held in reversed(line):
        if (held.version.valid_from or _EPOCH) <= at:
            if held.version.kind == CLOSURE or not held.holds_at(at):
                return None
            return held
    return None
