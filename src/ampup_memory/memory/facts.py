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
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Annotated, Any, Generic, Protocol, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    ValidatorFunctionWrapHandler,
    WrapValidator,
)
from pydantic_core import PydanticCustomError

from ampup_memory.memory.acl import AclEntry
from ampup_memory.memory.episode_types import Unit
from ampup_memory.memory.episodes import (
    MAX_ACL,
    EntityId,
    EpisodeId,
    Predicate,
)
from ampup_memory.memory.schemas import Currency
from ampup_memory.memory.scopes import BranchText, ScopeText
from ampup_memory.memory.segments import layer_order
from ampup_memory.timefmt import Instant, utc_text
from ampup_memory.web.body import JsonInt

if TYPE_CHECKING:  # numpy loads only where a batch checks its quotes
    from ampup_memory.memory.quotes import CitedTexts

VALUE = "value"
CLOSURE = "closure"
MAX_VALUE_CHARS = 4000  # as long as a quote: a value is an answer, not a document
_FINITE = Annotated[float, Field(allow_inf_nan=False)]


def _fits_a_double(value: int) -> int:
    # An integer past the largest double is Infinity to most JSON readers, and compared
    # as a number (a query's `where`, `order_by`) it has no float: a request body never
    # brings one (web.jsontext), a model's answer or a corpus could.
    try:
        float(value)
    except OverflowError:
        raise PydanticCustomError("finite_number", "Input should be a finite number: this "
                                  "integer is beyond a double") from None
    return value


_INT = Annotated[int, AfterValidator(_fits_a_double)]


def _one_branch(branches: dict[type, Any], expected: str,
                claims: Callable[[Any], bool] = lambda _: True) -> WrapValidator:
    """A union's errors as the branch of the input's own JSON type gives them. Pydantic
    reports every branch, each under its type's name (`value.constrained-str: …` and 5
    more), which no request spells (docs/api.md: a field is named as the request names
    it); a type no branch takes, or a value ``claims`` says is meant for none, is one
    error saying what is taken."""
    adapters = {kind: TypeAdapter(branch) for kind, branch in branches.items()}

    def check(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        adapter = adapters.get(type(value))
        if adapter is None or not claims(value):
            raise PydanticCustomError("value_type", expected)
        try:
            return handler(value)
        except ValidationError:
            adapter.validate_python(value)  # raises that branch's own error
            raise
    return WrapValidator(check)


class Money(BaseModel):
    """A money value as an object (a scope's schema must type the predicate as money)."""

    model_config = ConfigDict(extra="forbid")

    amount: Annotated[Annotated[str, Field(max_length=64)] | _INT | _FINITE, _one_branch(
        {str: Annotated[str, Field(max_length=64)], int: _INT, float: _FINITE},
        "an amount is a number, or a decimal number as text")]
    currency: Currency | None = None


_STR = Annotated[str, Field(max_length=MAX_VALUE_CHARS)]
Scalar = _STR | _INT | _FINITE | bool
Value = Annotated[Scalar | Money, _one_branch(
    {str: _STR, int: _INT, float: _FINITE, bool: bool, dict: Money},
    "a value is a JSON string, number or boolean (or {amount, currency} for a money "
    "attribute)",
    # An object naming neither money field is no money gone wrong: saying `amount` is
    # missing would send the caller the wrong way.
    lambda v: not isinstance(v, dict) or bool(v.keys() & {"amount", "currency"}))]


def raw_value(value: Value) -> Any:
    """A posted value as plain JSON data (what schemas.check_fact reads)."""
    return value.model_dump(exclude_none=True) if isinstance(value, Money) else value


class Cite(BaseModel):
    model_config = ConfigDict(extra="forbid")

    episode: EpisodeId = Field(description="Episode id.")
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
    ``texts`` (`quotes.CitedTexts`, one per batch) answers the same faster when many quotes
    ask one long unit."""
    if texts is None:
        return any(quote in unit.text for unit in units)
    return any(texts.holds(unit.text, quote) for unit in units)


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
