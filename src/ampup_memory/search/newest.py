"""Newest-wins: which version of an (entity, predicate) a reader sees at a valid time.

Until schemas say otherwise every predicate is one-valued. Among the versions the reader
may see, the newest is the one with the latest ``valid_from`` at or before ``as_of``
(ties: the later commit). If that version's ``valid_to`` has passed, the value was closed
and there is no current value. Versions with no ``valid_from`` count as oldest.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Protocol, TypeVar

_EPOCH = datetime.min.replace(tzinfo=UTC)


class Version(Protocol):
    @property
    def entity(self) -> str: ...
    @property
    def predicate(self) -> str: ...
    @property
    def valid_from(self) -> datetime | None: ...
    @property
    def valid_to(self) -> datetime | None: ...
    @property
    def commit_seq(self) -> int: ...


V = TypeVar("V", bound=Version)


def _order(v: Version) -> tuple[datetime, int]:
    return (v.valid_from or _EPOCH, v.commit_seq)


def current_versions(versions: Iterable[V], as_of: datetime) -> dict[tuple[str, str], V]:
    """The current version per (entity, predicate) at ``as_of``; closed keys are absent."""
    newest: dict[tuple[str, str], V] = {}
    for v in versions:
        if v.valid_from is not None and v.valid_from > as_of:
            continue
        key = (v.entity, v.predicate)
        held = newest.get(key)
        if held is None or _order(v) > _order(held):
            newest[key] = v
    return {k: v for k, v in newest.items() if v.valid_to is None or v.valid_to > as_of}
