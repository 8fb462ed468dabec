"""Facts: posting shapes, the verbatim-quote check, and newest-wins at read time.

A fact version is ``(entity, predicate, value)`` with a valid-time window, a verbatim quote
and the episode units it cites. A predicate is one-valued unless the scope's schema says
``cardinality: many`` (schemas.py): among the versions a reader may see, the one with the
latest ``valid_from`` wins (ties: the later commit, then the later position in the commit),
and a version's window ends where the next visible version begins (or at its own
``valid_to``). A closure is a version with no value: it ends the one before it. A
many-valued predicate is one such timeline per value (:func:`lines`): every value holds
until its own closure (which carries the value it closes) or ``valid_to`` ends it.

Newest-wins lives here once (:func:`newest_order`, :func:`timeline`, :func:`current`) over
any :class:`Version`: ``GET /facts`` applies it to core's records, search
(`search/engine.py`) to its index rows.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Generic, Protocol, TypeVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from ampup_memory.memory.acl import AclEntry
from ampup_memory.memory.episode_types import Unit
from ampup_memory.memory.episodes import (
    EPISODE_ID_PATTERN,
    MAX_ACL,
    EntityId,
    Predicate,
)
from ampup_memory.memory.scopes import BranchText, ScopeText
from ampup_memory.memory.segments import layer_order
from ampup_memory.timefmt import Instant, utc_text
from ampup_memory.web.body import JsonInt

VALUE = "value"
CLOSURE = "closure"
MAX_VALUE_CHARS = 4000  # as long as a quote: a value is an answer, not a document
Scalar = (Annotated[str, Field(max_length=MAX_VALUE_CHARS)] | int
          | Annotated[float, Field(allow_inf_nan=False)] | bool)


class Money(BaseModel):
    """A money value as an object (a scope's schema must type the predicate as money)."""

    model_config = ConfigDict(extra="forbid")

    amount: Annotated[str, Field(max_length=64)] | int | Annotated[
        float, Field(allow_inf_nan=False)]
    currency: str | None = Field(default=None, pattern=r"^[A-Z]{3}$")


Value = Scalar | Money


def raw_value(value: Value) -> Any:
    """A posted value as plain JSON data (what schemas.check_fact reads)."""
    return value.model_dump(exclude_none=True) if isinstance(value, Money) else value


class Cite(BaseModel):
    model_config = ConfigDict(extra="forbid")

    episode: str = Field(pattern=EPISODE_ID_PATTERN, description="Episode id.")
    unit: JsonInt = Field(ge=1, le=2**31 - 1, description="Unit number, from 1.")


class FactIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    entity: EntityId
    predicate: Predicate
    value: Value = Field(description="A JSON string, number or boolean; with a schema, a "
                         "money value may also be {amount, currency}.")
    valid_from: Instant | None = Field(
        default=None, description="Default: the latest occurred_at of the cited episodes.")
    valid_to: Instant | None = None
    quote: str = Field(min_length=1, max_length=4000,
                       description="Must occur verbatim in one of the cited units.")
    cites: list[Cite] = Field(min_length=1, max_length=32)


class PostFact(FactIn):
    scope: ScopeText
    branch: BranchText | None = None


MAX_FACT_BATCH = 1000


class PostFacts(BaseModel):
    model_config = ConfigDict(extra="forbid")

    scope: ScopeText
    branch: BranchText | None = None
    facts: list[FactIn] = Field(min_length=1, max_length=MAX_FACT_BATCH)


class CloseValue(BaseModel):
    model_config = ConfigDict(extra="forbid")

    scope: ScopeText
    branch: BranchText | None = None
    entity: EntityId
    predicate: Predicate
    value: Value | None = Field(
        default=None, description="For a many-valued attribute (schema cardinality many): "
        "the one value to close.")
    reason: str = Field(min_length=1, max_length=20000,
                        description="Why; stored as its own episode and cited.")
    acl: list[AclEntry] | None = Field(
        default=None, min_length=1, max_length=MAX_ACL,
        description="ACL of the reason episode (default: entries shared by the ACLs of the "
        "episodes the closed value cites).")


@dataclass(frozen=True)
class FactRecord:
    fact_id: str
    kind: str
    entity: str
    predicate: str
    value: str | None  # JSON text; None for a closure
    valid_from: datetime
    valid_to: datetime | None
    quote: str
    cites: tuple[tuple[str, int], ...]
    written_by: str
    branch: str
    commit_id: str = ""
    seq: int = 0
    ord: int = 0  # position within its commit: the last tie-break
    layer: int = 0  # its branch's place in the view's chain (segments.py): ancestors first

    @property
    def commit_seq(self) -> int:
        # Along the view's chain: a branch's own commits are newer than its ancestors'.
        return layer_order(self.layer, self.seq)

    def wire(self, scope: str, window_end: datetime | None) -> dict[str, Any]:
        return {
            "id": self.fact_id,
            "scope": scope,
            "branch": self.branch,
            "kind": self.kind,
            "entity": self.entity,
            "predicate": self.predicate,
            "value": None if self.value is None else json.loads(self.value),
            "valid_from": utc_text(self.valid_from),
            "valid_to": utc_text(window_end) if window_end else None,
            "stated_valid_to": utc_text(self.valid_to) if self.valid_to else None,
            "quote": self.quote,
            "cites": [{"episode": e, "unit": u} for e, u in self.cites],
            "written_by": self.written_by,
            "commit": self.commit_id,
        }


def quote_found(quote: str, units: list[Unit], texts: CitedTexts | None = None) -> bool:
    """The rule for a fact's quote: it occurs verbatim (``in``) in one of the cited units.
    ``texts``, one per batch, answers the same faster when many quotes ask one long unit."""
    texts = texts if texts is not None else CitedTexts()
    return any(texts.holds(unit.text, quote) for unit in units)


# A batch may hold 1,000 facts citing up to 32 units of 1 MB each: a scan of the unit per
# quote cost up to 1,000 x 32 MB (4.1 s of CPU for 1,000-character quotes in the last unit).
# A unit asked often is sampled instead: its windows of w characters at every w-th
# position, hashed. A quote at least 2w - 1 long that occurs at p holds the window starting
# at the first multiple j of w from p, as its own characters from o = j - p < w; so looking
# up the quote's first w windows finds every place it may start, and each is checked with
# startswith (a hash collision costs a check, never an answer). w is 16, or 8 for quotes of
# 15 to 30 characters. Shorter quotes, short units, units asked a few times and repetitive
# text (too many places to check) are scanned.
SAMPLES = (16, 8)  # window widths, widest first
SAMPLED_FROM = 64 * 1024  # characters: below, a scan costs less than a look-up
SCANS_BEFORE_SAMPLING = 32  # sampling a unit costs about as much as this many scans
MAX_CANDIDATES = 64
_WINDOWS = {w: np.arange(w)[:, None] + np.arange(w) for w in SAMPLES}  # row o: window at o
_POWERS = {w: np.array([pow(0x100000001B3, i, 2**64) for i in range(w)], dtype=np.uint64)
           for w in SAMPLES}


def _window_hashes(windows: np.ndarray) -> np.ndarray:
    """One number per row of code points (uint64 arithmetic wraps, as wanted)."""
    powers = _POWERS[windows.shape[1]]
    hashes: np.ndarray = (windows.astype(np.uint64) * powers).sum(axis=1, dtype=np.uint64)
    return hashes


def _code_points(text: str) -> np.ndarray:
    return np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)


class CitedTexts:
    """The cited units' texts of one batch, each sampled once it has been scanned often."""

    def __init__(self) -> None:
        # keyed by the text (a str keeps its hash) and the window width
        self._scans: dict[tuple[str, int], int] = {}
        self._samples: dict[tuple[str, int], tuple[np.ndarray, np.ndarray]] = {}
        self._quote: tuple[str, int, np.ndarray] | None = None  # a fact's cites ask one

    def holds(self, text: str, quote: str) -> bool:
        """``quote in text``."""
        width = next((w for w in SAMPLES if len(quote) >= 2 * w - 1), None)
        if width is None or len(text) < SAMPLED_FROM:
            return quote in text
        key = (text, width)
        sampled = self._samples.get(key)
        if sampled is None:
            scans = self._scans[key] = self._scans.get(key, 0) + 1
            if scans <= SCANS_BEFORE_SAMPLING:
                return quote in text
            sampled = self._samples[key] = _sample(text, width)
        hashes, starts = sampled
        if self._quote is None or self._quote[:2] != (quote, width):
            head = _code_points(quote[:2 * width - 1])
            self._quote = quote, width, _window_hashes(head[_WINDOWS[width]])
        wanted = self._quote[2]
        lo = hashes.searchsorted(wanted)
        hit = hashes[np.minimum(lo, len(hashes) - 1)] == wanted
        if not hit.any():
            return False
        hi = hashes.searchsorted(wanted, "right")
        if int((hi - lo)[hit].sum()) > MAX_CANDIDATES:
            return quote in text
        for o in np.flatnonzero(hit).tolist():
            for j in starts[lo[o]:hi[o]].tolist():
                if j >= o and text.startswith(quote, j - o):
                    return True
        return False


def _sample(text: str, width: int) -> tuple[np.ndarray, np.ndarray]:
    """The hashes of ``text``'s windows of ``width`` characters at every ``width``-th
    position, sorted, and the start of each."""
    points = _code_points(text)
    rows = len(points) // width
    hashes = _window_hashes(points[:rows * width].reshape(rows, width))
    order = np.argsort(hashes)
    return hashes[order], order.astype(np.int64) * width


class Version(Protocol):
    """What newest-wins needs of a fact version: core's records and the search index's
    rows both have it."""

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
_EPOCH = datetime.min.replace(tzinfo=UTC)
EPOCH = _EPOCH  # where `newest_order` places a version without valid_from


def newest_order(v: Version) -> tuple[datetime, int, int]:
    """The order of versions of one attribute, oldest first: ``valid_from``; on a tie the
    later commit (ledger seq) is newer, then the later position in the commit."""
    return (v.valid_from or _EPOCH, v.commit_seq, v.ord)


@dataclass(frozen=True)
class Window(Generic[V]):
    version: V
    end: datetime | None  # exclusive; None = open

    def holds_at(self, at: datetime) -> bool:
        start = self.version.valid_from or _EPOCH
        return start <= at and (self.end is None or at < self.end)


def timeline(versions: Iterable[V]) -> list[Window[V]]:
    """Visible versions of one (entity, predicate), oldest first, each with its window: it
    ends where the next version begins or at its own ``valid_to``, whichever is first."""
    ordered = sorted(versions, key=newest_order)
    windows: list[Window[V]] = []
    for i, v in enumerate(ordered):
        ends = [v.valid_to] if v.valid_to else []
        if i + 1 < len(ordered):
            ends.append(ordered[i + 1].valid_from or _EPOCH)
        windows.append(Window(v, min(ends) if ends else None))
    return windows


def timelines(versions: Iterable[V]) -> dict[tuple[str, str], list[Window[V]]]:
    """:func:`timeline` per (entity, predicate)."""
    by_key: dict[tuple[str, str], list[V]] = {}
    for v in versions:
        by_key.setdefault((v.entity, v.predicate), []).append(v)
    return {key: timeline(group) for key, group in by_key.items()}


class Valued(Version, Protocol):
    @property
    def value(self) -> str | None: ...


VV = TypeVar("VV", bound=Valued)


def lines(versions: Iterable[VV], many: bool = False) -> list[list[Window[VV]]]:
    """The timelines of one (entity, predicate): one for a one-valued attribute; for a
    many-valued one, one per value (a closure carries the value it ends), by value."""
    if not many:
        return [timeline(versions)]
    by_value: dict[str, list[VV]] = {}
    for v in versions:
        by_value.setdefault(v.value or "", []).append(v)
    return [timeline(by_value[k]) for k in sorted(by_value)]


def current_values(versions: Iterable[VV], at: datetime,
                   many: bool = False) -> list[Window[VV]]:
    """Newest-wins (:func:`current`) on each of :func:`lines`: at most one window for a
    one-valued attribute, every value holding at ``at`` for a many-valued one."""
    out = []
    for line in lines(versions, many):
        window = current(line, at)
        if window is not None:
            out.append(window)
    return out


_MICROSECOND = timedelta(microseconds=1)


def begin_instant(at: datetime | None) -> int:
    """An instant on newest-wins' time line as whole microseconds from its epoch (None: the
    epoch, where a version without ``valid_from`` begins). :func:`begun` compares these;
    an index that filters candidates in bulk (a numpy array of them) keeps to the same
    integers, so it drops exactly the versions :func:`begun` would."""
    return ((at or _EPOCH) - _EPOCH) // _MICROSECOND


def begun(v: Version, at: datetime) -> bool:
    """Whether a version's validity has begun at ``at``: one that has not is never
    :func:`current` there (a search asks its candidate lists for begun versions only).
    An index's SQL form of this test is checked against it (tests/test_index_contract.py)."""
    return begin_instant(v.valid_from) <= begin_instant(at)


def current(line: list[Window[V]], at: datetime) -> Window[V] | None:
    """Newest-wins, the only implementation: the version of a :func:`timeline` holding at
    ``at``; None when nothing holds or a closure ended it."""
    for window in reversed(line):
        if begun(window.version, at):
            if window.version.kind == CLOSURE or not window.holds_at(at):
                return None
            return window
    return None
