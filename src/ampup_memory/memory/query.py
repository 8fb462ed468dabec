"""Typed queries: ``POST /query`` with ``find: "facts"`` or ``find: "entities"``.

Both read the current values of a view (``branch``/``at_commit``) at a valid time
(``as_of``, default now) through :meth:`MemoryService.visible_facts` (the one ACL rule:
a version counts only if the caller may read every episode it cites) and newest-wins
(facts.py, per value for a many-valued attribute). Conditions compare values as their
schema types them (schemas.sort_key): money within its currency, dates and timestamps in
time, enums in their listed order, numbers as numbers; an operand is normalised by
schemas.validate_value first, so ``"$50k"`` and ``{"amount": 50000, "currency": "USD"}``
are the same operand.

Semantics (docs/schemas-and-queries.md): a condition holds for an entity when *some*
current value of the attribute satisfies it (``ne``: when no value equals the operand); an
entity with no visible value of an attribute matches no condition on it. An entity is
listed when the caller sees at least one current value of the attributes the query reads.
"""

from __future__ import annotations

import json
import operator
import threading
import weakref
from bisect import bisect_left, bisect_right
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from operator import itemgetter
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ampup_memory.errors import field_error
from ampup_memory.memory.acl import Principal
from ampup_memory.memory.facts import FactRecord, Window, current, current_values, lines
from ampup_memory.memory.ledger import CommitText
from ampup_memory.memory.schemas import (
    SCHEMA_ENTITY,
    Attribute,
    BadValue,
    Name,
    Schema,
    entity_type,
    sort_key,
    validate_value,
)
from ampup_memory.memory.scopes import MAIN, BranchText, ScopeText
from ampup_memory.memory.segments import NO_LIMIT, Segment
from ampup_memory.memory.snapshots import PinText, SnapshotText, read_view
from ampup_memory.ruled import Composed
from ampup_memory.timefmt import Instant, utc_text
from ampup_memory.web.body import JsonInt

if TYPE_CHECKING:
    from ampup_memory.memory.service import MemoryService, View

Op = Literal["eq", "ne", "lt", "lte", "gt", "gte", "in", "contains"]
MAX_LIMIT = 1000
TEXT_TYPES = {"string", "text", "enum", "ref", None}


class Condition(BaseModel):
    model_config = ConfigDict(extra="forbid")

    attribute: str | None = Field(
        default=None, max_length=128, description="entities: the attribute compared; "
        "facts: leave out (the fact's value is compared).")
    op: Op
    value: Any = Field(description="The operand (a list for `in`), read as the attribute's "
                       "type reads a value.")


class Order(BaseModel):
    model_config = ConfigDict(extra="forbid")

    attribute: str = Field(max_length=128, description="entities: an attribute or `entity`; "
                           "facts: `entity`, `predicate`, `value` or `valid_from`.")
    desc: bool = False


class TypedQuery(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    scope: ScopeText
    find: Literal["facts", "entities"]
    type: Name | None = Field(default=None, description=(
        "Entity type (ids `<type>:<key>`); required for entities."))
    entity: Composed | None = Field(default=None, max_length=256,
                                    description="facts: one entity.")
    predicate: list[str] | None = Field(default=None, max_length=64,
                                        description="facts: these predicates only.")
    where: list[Condition] = Field(default_factory=list, max_length=32)
    select: list[str] | None = Field(default=None, max_length=200, description=(
        "entities: the attributes returned (default all)."))
    order_by: list[Order] = Field(default_factory=list, max_length=4)
    limit: JsonInt = Field(default=50, ge=1, le=MAX_LIMIT)
    offset: JsonInt = Field(default=0, ge=0, le=10**9)
    as_of: Instant | None = Field(default=None, description="Valid time (default now).")
    branch: BranchText | None = None
    at_commit: CommitText | None = None
    pin: PinText | None = None
    snapshot: SnapshotText | None = None


# -- conditions ---------------------------------------------------------------------------------
Key = tuple[Any, ...] | None


def _operand(attr: Attribute | None, raw: Any, loc: list[str | int]) -> Any:
    if attr is None:
        return raw
    try:
        return validate_value(attr, raw)
    except BadValue as exc:
        raise field_error(loc, f"{attr.name} is {attr.type}: {exc}", "value_invalid") from None


@dataclass(frozen=True)
class Test:
    """A compiled condition: on one list of an attribute's current values (``find:
    facts``, one value per fact) and, with the same semantics, as the set of entities of a
    :class:`Column` it holds for (``find: entities``)."""

    attr: Attribute | None
    op: Op
    want: Key = None  # eq, ne, lt, lte, gt, gte
    keys: frozenset[Key] = frozenset()  # in
    needle: str = ""  # contains

    def __call__(self, values: list[Any]) -> bool:
        attr = self.attr
        if self.op == "contains":
            return any(isinstance(v, str) and self.needle in v.casefold() for v in values)
        if self.op == "in":
            return any(sort_key(attr, v) in self.keys for v in values)
        if self.op == "eq":
            return any(sort_key(attr, v) == self.want for v in values)
        if self.op == "ne":
            return bool(values) and all(sort_key(attr, v) != self.want for v in values)
        assert self.want is not None
        test = ORDERED[self.op]
        for v in values:
            k = sort_key(attr, v)  # only within one kind: money within its currency
            if k is not None and k[0] == self.want[0] and test(k[1], self.want[1]):
                return True
        return False

    def select(self, col: Column) -> set[str]:
        """The entities for which ``self(values)`` holds, from the column's index (of a
        column laid over another: the other's, less the entities it holds anew, and its
        own)."""
        if col.under is None:
            return self._picked(col)
        picked = self._picked(col.under)
        picked.difference_update(col.touched)
        picked |= self._picked(col)
        return picked

    def _picked(self, col: Column) -> set[str]:
        if self.op == "contains":
            return {e for e, values in col.values.items() if self(values)}
        if self.op == "in":
            return set().union(*(col.by_key.get(k, ()) for k in self.keys))
        if self.op == "eq":
            return set(col.by_key.get(self.want, ()))
        if self.op == "ne":
            return set(col.values).difference(col.by_key.get(self.want, ()))
        assert self.want is not None
        kind = self.want[0]  # keys of one kind compare; the kind's keys are one run
        start = bisect_left(col.keys, (kind,))
        end = bisect_left(col.keys, (kind + "\0",))
        lo, hi = {"lt": (start, bisect_left(col.keys, self.want)),
                  "lte": (start, bisect_right(col.keys, self.want)),
                  "gt": (bisect_right(col.keys, self.want), end),
                  "gte": (bisect_left(col.keys, self.want), end)}[self.op]
        return set(col.owners[lo:hi])


ORDERED: dict[str, Callable[[Any, Any], bool]] = {
    "lt": operator.lt, "lte": operator.le, "gt": operator.gt, "gte": operator.ge}


def compile_condition(attr: Attribute | None, cond: Condition, loc: list[str | int]) -> Test:
    """A condition as a test on the list of an attribute's current values."""
    kind = attr.type if attr else None
    if cond.op == "contains":
        if kind not in TEXT_TYPES or not isinstance(cond.value, str) or not cond.value:
            raise field_error([*loc, "op"], "contains compares text: a non-empty string "
                              "operand on a string, text, enum or ref attribute", "op_invalid")
        return Test(attr, cond.op, needle=cond.value.casefold())
    if cond.op == "in":
        if not isinstance(cond.value, list) or not cond.value:
            raise field_error([*loc, "value"], "in takes a non-empty list", "value_invalid")
        return Test(attr, cond.op, keys=frozenset(
            sort_key(attr, _operand(attr, v, [*loc, "value", i]))
            for i, v in enumerate(cond.value)))
    want = sort_key(attr, _operand(attr, cond.value, [*loc, "value"]))
    if want is None:
        raise field_error([*loc, "value"], "the operand has no order", "value_invalid")
    if cond.op not in ("eq", "ne") and kind in ("bool", "ref", "text") and kind is not None:
        raise field_error([*loc, "op"], f"{cond.op} does not order a {kind}", "op_invalid")
    return Test(attr, cond.op, want=want)


@dataclass
class Column:
    """One attribute's current values over a stretch's entities, indexed once for the
    conditions and the ordering of every query that reads it (sort keys computed once)."""

    values: dict[str, list[Any]]  # entity → its decoded current values (some)
    keys: list[tuple[Any, ...]]  # every value's sort key that has one, sorted
    owners: list[str]  # the entity of each of ``keys``
    by_key: dict[Key, set[str]]  # sort key (None included) → entities holding it
    least: dict[str, Key]  # entity → its least sort key (what it is ordered by)
    # A column laid over ``under`` (a fold after a few commits): the fields above hold the
    # ``touched`` entities alone, every other entity reads as in ``under``.
    under: Column | None = None
    touched: frozenset[str] = frozenset()

    def least_of(self) -> Callable[[str], Key]:
        """An entity's least sort key (what it is ordered by), None when it has none."""
        if self.under is None:
            return self.least.get
        mine, theirs, touched = self.least.get, self.under.least.get, self.touched
        return lambda entity: mine(entity) if entity in touched else theirs(entity)


def _column(records: Records, name: str, attr: Attribute | None) -> Column:
    values: dict[str, list[Any]] = {}
    pairs: list[tuple[tuple[Any, ...], str]] = []
    by_key: dict[Key, set[str]] = {}
    least: dict[str, Key] = {}
    for entity, rec in records.items():
        found = rec.get(name)
        if found is None or not found[1]:
            continue
        values[entity] = found[1]
        for v in found[1]:
            k = sort_key(attr, v)
            by_key.setdefault(k, set()).add(entity)
            if k is not None:
                pairs.append((k, entity))
                if entity not in least or k < least[entity]:  # type: ignore[operator]
                    least[entity] = k
    pairs.sort()
    return Column(values, [k for k, _ in pairs], [e for _, e in pairs], by_key, least)


# -- running a query ----------------------------------------------------------------------------
def _cite_wire(w: Window[FactRecord]) -> dict[str, Any]:
    v = w.version
    return {"value": json.loads(v.value) if v.value is not None else None, "fact": v.fact_id,
            "quote": v.quote, "cites": [{"episode": e, "unit": u} for e, u in v.cites],
            "valid_from": utc_text(v.valid_from),
            "valid_to": utc_text(w.end) if w.end else None, "commit": v.commit_id}


def _sorted(items: list[Any], orders: list[tuple[Callable[[Any], Key], bool]]) -> list[Any]:
    """Stable sorts, last criterion first; a missing value sorts last either way. Each
    item's key is computed once per criterion."""
    out = list(items)
    for key_of, desc in reversed(orders):
        keyed = [(key_of(i), i) for i in out]
        present = [pair for pair in keyed if pair[0] is not None]
        present.sort(key=itemgetter(0), reverse=desc)
        out = [i for _, i in present] + [i for k, i in keyed if k is None]
    return out


# The fact rows a typed query reads, per view as of its heads: a view's rows up to a
# commit never change, so a repeated query (dashboards) reads them once, and a view whose
# heads moved on reads only the rows of the commits since (``_grow``). Rows only: who may
# see which is decided per call by MemoryService.visible_facts.
_ROWS_LOCK = threading.Lock()
ROW_CACHE = 4
EPISODE_PIECES = 32
Pair = tuple[str, str]  # (entity, predicate)


@dataclass(frozen=True)
class _Rows:
    key: tuple[Any, ...]  # the view's resolved heads, type and predicates
    rows: list[FactRecord]
    cited: frozenset[str]  # the episodes the rows cite
    by_pair: Mapping[Pair, list[FactRecord]]  # the rows of each (entity, predicate)
    # the pairs with a row citing each episode, in pieces (a commit adds one; merged
    # past EPISODE_PIECES): a union per commit copied ~2,500 pairs per cited episode
    by_episode: dict[str, tuple[frozenset[Pair], ...]]
    base: _Rows | None = None  # grown from these rows (the view at earlier heads) ...
    touched: frozenset[Pair] = frozenset()  # ... by rows of these pairs


def _indexed(key: tuple[Any, ...], rows: list[FactRecord]) -> _Rows:
    by_pair: dict[Pair, list[FactRecord]] = {}
    by_episode: dict[str, set[Pair]] = {}
    for f in rows:
        pair = (f.entity, f.predicate)
        by_pair.setdefault(pair, []).append(f)
        for e, _ in f.cites:
            by_episode.setdefault(e, set()).add(pair)
    return _Rows(key, rows, frozenset(by_episode), by_pair,
                 {e: (frozenset(p),) for e, p in by_episode.items()})


def _grown_from(old: tuple[Segment, ...], new: tuple[Segment, ...]) -> bool:
    """``new`` is ``old`` with some segments reaching further (later heads, same chain)."""
    return len(old) == len(new) and all(
        a.branch == b.branch and a.after == b.after and a.upto <= b.upto
        for a, b in zip(old, new, strict=True))


def _grow(svc: MemoryService, old: _Rows, key: tuple[Any, ...], prefix: str | None,
          predicates: list[str] | set[str] | None) -> _Rows:
    """``old`` and the rows of the commits after its heads up to ``key``'s: each grown
    segment's new commits read by seq range, folded into copies of the indexes."""
    ns, segs = key[0], key[1]
    added: list[FactRecord] = []
    for layer, (a, b) in enumerate(zip(old.key[1], segs, strict=True)):
        if a.upto < b.upto:
            added.extend(svc.index.facts_between(ns, Segment(b.branch, a.upto, b.upto), layer,
                                                 entity_prefix=prefix, predicates=predicates))
    changes: dict[Pair, list[FactRecord]] = {}
    new_cites: dict[str, set[Pair]] = {}
    for f in added:
        pair = (f.entity, f.predicate)
        if pair not in changes:  # copy on write: ``old`` stays as it was
            changes[pair] = list(old.by_pair.get(pair, ()))
        changes[pair].append(f)
        for e, _ in f.cites:
            new_cites.setdefault(e, set()).add(pair)
    by_episode = dict(old.by_episode)
    for e, pairs in new_cites.items():
        pieces = (*by_episode.get(e, ()), frozenset(pairs))
        by_episode[e] = pieces if len(pieces) <= EPISODE_PIECES else (
            frozenset().union(*pieces),)
    return _Rows(key, old.rows + added, old.cited.union(new_cites),
                 _laid(old.by_pair, changes), by_episode, _unlinked(old),
                 frozenset(changes))


def _unlinked(rows: _Rows) -> _Rows:
    """``rows`` without its own base (the chain of bases stays one link long)."""
    return rows if rows.base is None else replace(rows, base=None, touched=frozenset())


@dataclass
class _Kept:
    """What typed queries keep of one read index: the views' rows and evaluations."""

    rows: OrderedDict[tuple[Any, ...], _Rows] = field(default_factory=OrderedDict)
    evaluated: OrderedDict[tuple[Any, ...], _Evaluated] = field(default_factory=OrderedDict)
    warming: dict[tuple[str, str], threading.Event] = field(default_factory=dict)  # by
    # (scope, type prefix): set when :func:`warm` is done with that type on main


# Per read index, not per process: a key names a scope and seqs, which two homes open in
# one process (tests, benchmarks) share; one home's rows answered the other's queries.
_KEPT: weakref.WeakKeyDictionary[Any, _Kept] = weakref.WeakKeyDictionary()


def _kept(svc: MemoryService) -> _Kept:
    with _ROWS_LOCK:
        found = _KEPT.get(svc.index)
        if found is None:
            found = _KEPT[svc.index] = _Kept()
        return found


def _rows(svc: MemoryService, view: View, prefix: str | None,
          predicates: list[str] | set[str] | None) -> _Rows | None:
    """The view's fact rows of a type (and predicates), cached by the view's resolved
    heads; None (read them directly) while commits are still being applied."""
    kept = _kept(svc).rows
    ns = str(view.scope)
    segs = []
    for s in view.segments:
        if s.upto >= NO_LIMIT:
            head = svc.index.head(ns, s.branch)
            s = Segment(s.branch, s.after, head.seq if head else s.after)
        segs.append(s)
    key = (ns, tuple(segs), prefix, None if predicates is None else tuple(sorted(predicates)))
    with _ROWS_LOCK:
        hit = kept.get(key)
        if hit is not None:
            kept.move_to_end(key)
            return hit
        # the same view at earlier heads, the furthest along: grown instead of read again
        bases = [r for k, r in kept.items() if k[0] == ns and k[2:] == key[2:]
                 and _grown_from(k[1], key[1])]
        base = max(bases, key=lambda r: sum(s.upto for s in r.key[1]), default=None)
    if svc.index.pending(ns):
        return None
    if base is not None:
        found = _grow(svc, base, key, prefix, predicates)
    else:
        found = _indexed(key, svc.index.facts(ns, key[1], None, None, entity_prefix=prefix,
                                              predicates=predicates))
    with _ROWS_LOCK:
        kept[key] = found
        while len(kept) > ROW_CACHE:
            kept.popitem(last=False)
    return found


# What find: entities evaluates, kept per rows and visibility: the timelines of every
# visible (entity, attribute), and per stretch of time between two window boundaries (the
# current values cannot change inside one) the entities' current values, decoded. A repeated
# query then only tests its conditions and orders; who sees what is still decided per call
# (the caller's readable episodes, MemoryService.readable_episodes, pick the entry). After a
# commit (rows grown, ``_grow``) or an ACL change, the evaluation, the current values and
# the columns of the view at its earlier heads are copied and only the (entity, attribute)
# pairs with new rows or with a citation whose visibility changed are evaluated again.
Attr = tuple[list[Window[FactRecord]], list[Any]]  # current windows, their decoded values
Records = dict[str, dict[str, Attr]]
Interval = tuple[datetime | None, datetime | None]  # [start, end): None is unbounded


@dataclass
class _Stretch:
    """The entities' current values in one stretch of time, and the attributes' columns
    (sort keys and indexes) built from them as queries ask for them (or folded from the
    columns of the stretch this one was folded from: ``base``, minus ``touched``)."""

    records: Records
    columns: dict[tuple[Any, ...], Column] = field(default_factory=dict)
    base: dict[tuple[Any, ...], Column] = field(default_factory=dict)
    touched: frozenset[str] = frozenset()  # entities whose values differ from base's

    def column(self, name: str, attr: Attribute | None) -> Column:
        key = (name, attr.type if attr else None,  # what sort_key reads of the attribute
               tuple(attr.values) if attr is not None and attr.values else None)
        with _ROWS_LOCK:
            hit = self.columns.get(key)
            base = self.base.pop(key, None) if hit is None else None
        if hit is None:
            hit = (_column_fold(base, self.records, name, attr, self.touched)
                   if base is not None else _column(self.records, name, attr))
            with _ROWS_LOCK:
                self.columns[key] = hit
        return hit


@dataclass
class _Evaluated:
    lines: Mapping[Pair, list[list[Window[FactRecord]]]]
    bounds: list[datetime]
    at: OrderedDict[Interval, _Stretch] = field(default_factory=OrderedDict)
    base: dict[Interval, _Stretch] = field(default_factory=dict)  # folded from these ...
    touched: frozenset[Pair] = frozenset()  # ... with these pairs evaluated again


STRETCHES = 8
FOLD_ALWAYS = 64  # a column folds at most this many touched entities, or a quarter
COLUMN_LAYER = 256  # a column is laid over an older one for at most this many entities
LAYER_SHARE = 16  # a mapping is laid over another for changes up to 1/16 of its size


_GONE: Any = object()  # in a layer's changes: the key is removed
_ABSENT: Any = object()


class _Laid(Mapping[Any, Any]):
    """A copy of the dict ``base`` with ``changes`` laid over it (``_GONE``: removed),
    made in O(changes) where a copy costs O(size): the kept indexes of 50,000 fact rows
    were copied whole for a commit of five (made by :func:`_laid` only; ``base`` is never
    changed, so every mapping laid over it stays as it was made)."""

    __slots__ = ("base", "changes", "_len")

    def __init__(self, base: dict[Any, Any], changes: dict[Any, Any], length: int) -> None:
        self.base, self.changes, self._len = base, changes, length

    def __getitem__(self, key: Any) -> Any:
        got = self.changes.get(key, _ABSENT)
        if got is _ABSENT:
            return self.base[key]
        if got is _GONE:
            raise KeyError(key)
        return got

    def get(self, key: Any, default: Any = None) -> Any:
        got = self.changes.get(key, _ABSENT)
        if got is _ABSENT:
            return self.base.get(key, default)
        return default if got is _GONE else got

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[Any]:
        changes, base = self.changes, self.base
        yield from (k for k in base if changes.get(k, _ABSENT) is not _GONE)
        yield from (k for k, v in changes.items() if v is not _GONE and k not in base)


def _laid(old: Mapping[Any, Any], changes: dict[Any, Any]) -> Mapping[Any, Any]:
    """``old`` with ``changes`` (``_GONE``: the key removed); ``old`` stays as it was. The
    changes since the last copy accumulate in one layer (each call copies them), which is
    merged into a new dict once past 1/``LAYER_SHARE`` of it."""
    if isinstance(old, _Laid):
        base, merged = old.base, {**old.changes, **changes}
    else:
        assert isinstance(old, dict)
        base, merged = old, dict(changes)
    if LAYER_SHARE * len(merged) > len(base):
        flat = dict(base)
        for k, v in merged.items():
            if v is _GONE:
                flat.pop(k, None)
            else:
                flat[k] = v
        return flat
    length = len(base)
    for k, v in merged.items():
        if k in base:
            length -= v is _GONE
        else:
            length += v is not _GONE
    return _Laid(base, merged, length)


def _lines_of(pairs: frozenset[Pair], key: Pair,
              versions: list[FactRecord]) -> list[list[Window[FactRecord]]]:
    many = bool(pairs) and (key[0].partition(":")[0], key[1]) in pairs
    return lines(versions, many)


def _add_bounds(bounds: set[datetime], found: list[list[Window[FactRecord]]]) -> None:
    for line in found:
        for w in line:
            if w.version.valid_from is not None:  # None: from the beginning
                bounds.add(w.version.valid_from)
            if w.end is not None:
                bounds.add(w.end)


def _evaluate(groups: dict[Pair, list[FactRecord]], pairs: frozenset[Pair]) -> _Evaluated:
    found: dict[Pair, list[list[Window[FactRecord]]]] = {}
    bounds: set[datetime] = set()
    for key, versions in groups.items():
        if key[0] == SCHEMA_ENTITY:
            continue  # the schema's bookkeeping
        found[key] = _lines_of(pairs, key, versions)
        _add_bounds(bounds, found[key])
    return _Evaluated(found, sorted(bounds))


def _fold(old: _Evaluated, groups: dict[Pair, list[FactRecord]], pairs: frozenset[Pair],
          touched: frozenset[Pair]) -> _Evaluated:
    """``old`` with the ``touched`` pairs evaluated again from their visible versions
    (``groups``; a pair missing there has none left). The boundaries only grow: a stale one
    splits a stretch in two equal halves, a missing one would merge two different ones."""
    changes: dict[Pair, Any] = {}
    bounds = set(old.bounds)
    for key in touched:
        versions = groups.get(key)
        if key[0] == SCHEMA_ENTITY or not versions:
            changes[key] = _GONE
            continue
        changes[key] = _lines_of(pairs, key, versions)
        _add_bounds(bounds, changes[key])
    with _ROWS_LOCK:
        base = dict(old.at)
    return _Evaluated(_laid(old.lines, changes), sorted(bounds), base=base, touched=touched)


def _interval(bounds: list[datetime], at: datetime) -> Interval:
    i = bisect_right(bounds, at)
    return (bounds[i - 1] if i else None, bounds[i] if i < len(bounds) else None)


def _holds(iv: Interval, at: datetime) -> bool:
    return (iv[0] is None or iv[0] <= at) and (iv[1] is None or at < iv[1])


def _attr_at(found: list[list[Window[FactRecord]]], at: datetime) -> Attr | None:
    windows = [w for line in found if (w := current(line, at)) is not None]
    if not windows:
        return None
    return windows, [json.loads(w.version.value) for w in windows if w.version.value is not None]


def _records_at(ev: _Evaluated, at: datetime) -> _Stretch:
    """Each entity's current values at ``at`` (newest-wins, facts.current), decoded; the
    entities in order (what find: entities lists by default)."""
    iv = _interval(ev.bounds, at)
    with _ROWS_LOCK:
        hit = ev.at.get(iv)
        base = None if hit is not None else next(
            (s for b, s in ev.base.items() if _holds(b, at)), None)
    if hit is not None:
        return hit
    if base is not None:  # the stretch holding ``at`` before the fold: only touched change
        made = _records_fold(base, ev, at) if ev.touched else base
    else:
        records: Records = {}
        for (entity, predicate), found in sorted(ev.lines.items()):
            got = _attr_at(found, at)
            if got is not None:
                records.setdefault(entity, {})[predicate] = got
        made = _Stretch(records)
    with _ROWS_LOCK:
        ev.at[iv] = made
        while len(ev.at) > STRETCHES:
            ev.at.popitem(last=False)
    return made


def _records_fold(base: _Stretch, ev: _Evaluated, at: datetime) -> _Stretch:
    records = dict(base.records)
    copied: set[str] = set()
    for entity, predicate in ev.touched:
        if entity not in copied:  # copy on write: ``base`` stays as it was
            copied.add(entity)
            records[entity] = dict(records.get(entity, {}))
        found = ev.lines.get((entity, predicate))
        got = _attr_at(found, at) if found is not None else None
        if got is None:
            records[entity].pop(predicate, None)
        else:
            records[entity][predicate] = got
    for entity in copied:
        if not records[entity]:
            del records[entity]
    if not copied <= base.records.keys():  # new entities: back in entity order
        records = {e: records[e] for e in sorted(records)}
    with _ROWS_LOCK:
        columns = dict(base.columns)
    return _Stretch(records, base=columns, touched=frozenset(copied))


def _column_fold(old: Column, records: Records, name: str, attr: Attribute | None,
                 touched: frozenset[str]) -> Column:
    """``old`` (the column before a fold) with the ``touched`` entities' values replaced
    by theirs in ``records``; answers as :func:`_column` on ``records`` would. A few
    entities since the last flat column: a small column of theirs laid over that one
    (O(entities touched); copying the flat column's five indexes cost ~1 ms of CPU per
    attribute at 10k entities, for a commit of five values). More: the flat column edited
    entity by entity (a bisection and a shift each). Past a quarter of many entities,
    built anew: cheaper than that edit (~9x at 10k entities with nine in ten touched: a
    caller with two fifths hidden)."""
    under = old if old.under is None else old.under
    changed = touched | old.touched
    if len(changed) <= COLUMN_LAYER:
        own = _column({e: records[e] for e in sorted(changed) if e in records}, name, attr)
        return replace(own, under=under, touched=changed)
    if len(changed) <= FOLD_ALWAYS or 4 * len(changed) <= len(records):
        return _column_edit(under, records, name, attr, changed)
    return _column(records, name, attr)


def _column_edit(old: Column, records: Records, name: str, attr: Attribute | None,
                 touched: frozenset[str]) -> Column:
    """The flat column ``old`` with the ``touched`` entities' values replaced by theirs in
    ``records``, without re-keying the rest (the sorted keys are edited in place of a
    copy, each pair found by bisection)."""
    values = dict(old.values)
    by_key = dict(old.by_key)
    least = dict(old.least)
    keys, owners = list(old.keys), list(old.owners)
    for entity in touched:  # out with the old values (their sets copied, not changed)
        least.pop(entity, None)
        for v in values.pop(entity, ()):
            k = sort_key(attr, v)
            held = by_key.get(k)
            if held is not None and entity in held:
                if len(held) == 1:
                    del by_key[k]
                else:
                    by_key[k] = held - {entity}
            if k is not None:  # (k, entity) is one pair of the sorted run of k
                lo, hi = bisect_left(keys, k), bisect_right(keys, k)
                i = bisect_left(owners, entity, lo, hi)
                del keys[i], owners[i]
    for entity in touched:  # in with the new
        found = records.get(entity, {}).get(name)
        if found is None or not found[1]:
            continue
        values[entity] = found[1]
        for v in found[1]:
            k = sort_key(attr, v)
            by_key[k] = by_key.get(k, set()) | {entity}
            if k is not None:
                lo, hi = bisect_left(keys, k), bisect_right(keys, k)
                i = bisect_left(owners, entity, lo, hi)
                keys.insert(i, k)
                owners.insert(i, entity)
                if entity not in least or k < least[entity]:  # type: ignore[operator]
                    least[entity] = k
    return Column(values, keys, owners, by_key, least)


def _current_records(svc: MemoryService, principal: Principal, view: View,
                     schema: Schema | None, at: datetime, prefix: str,
                     wanted: set[str] | None) -> _Stretch:
    """The current values of the type's entities that the caller sees at ``at``: of every
    attribute of the type when kept (one evaluation serves every ``select``, and what
    :func:`warm` built), else of the ``wanted`` ones."""
    pairs = schema.many_pairs() if schema is not None else frozenset()
    if view.branch == MAIN and view.at_commit is None:
        kept = _kept(svc)
        with _ROWS_LOCK:
            warming = kept.warming.get((str(view.scope), prefix))
        if warming is not None:  # the same work under way: wait for it, not do it alongside
            warming.wait(WARM_WAIT_SECONDS)
    cached = _rows(svc, view, prefix, None)
    if cached is None:  # commits still being applied: nothing kept
        groups = svc.visible_facts(principal, view, None, None, entity_prefix=prefix,
                                   predicates=wanted)
        return _records_at(_evaluate(groups, pairs), at)
    readable = svc.readable_episodes(principal, str(view.scope), view.segments, cached.cited)
    return _records_at(_evaluation(svc, principal, view, cached, readable, pairs), at)


def _evaluation(svc: MemoryService, principal: Principal, view: View, cached: _Rows,
                readable: dict[str, Any], pairs: frozenset[Pair]) -> _Evaluated:
    """The kept evaluation of ``cached`` for a caller who reads ``readable`` of the
    episodes the rows cite, made (or folded) on first use."""
    kept = _kept(svc).evaluated
    hidden = cached.cited.difference(readable)
    key = (cached.key, hidden, pairs)
    olds: list[tuple[tuple[Any, ...], _Evaluated]] = []
    with _ROWS_LOCK:
        ev = kept.get(key)
        if ev is not None:
            kept.move_to_end(key)
        else:
            olds = [(k, e) for k, e in kept.items() if k[2] == pairs and (
                k[0] == cached.key or (cached.base is not None and k[0] == cached.base.key))]
    if ev is None:
        ev = _evaluated(svc, principal, view, cached, readable, hidden, pairs, olds)
        with _ROWS_LOCK:
            kept[key] = ev
            while len(kept) > ROW_CACHE:
                kept.popitem(last=False)
    return ev


def _evaluated(svc: MemoryService, principal: Principal, view: View, cached: _Rows,
               readable: dict[str, Any], hidden: frozenset[str], pairs: frozenset[Pair],
               olds: list[tuple[tuple[Any, ...], _Evaluated]]) -> _Evaluated:
    """The evaluation for the caller's visibility (``hidden``): folded from the closest
    kept one of these rows or of the rows they grew from, else built from every row."""
    best: tuple[int, _Evaluated, frozenset[Pair]] | None = None
    for k, old in olds:
        same_rows = k[0] == cached.key
        rows_then = cached if same_rows else cached.base
        assert rows_then is not None
        # citations hidden then and not now, or the other way (an ACL change, or another
        # caller): every pair citing one is evaluated again, as are the pairs with new rows
        flipped = k[1].symmetric_difference(hidden.intersection(rows_then.cited))
        touched = set() if same_rows else set(cached.touched)
        for e in flipped:
            for piece in cached.by_episode.get(e, ()):
                touched.update(piece)
        if best is None or len(touched) < best[0]:
            best = (len(touched), old, frozenset(touched))
    if best is not None and best[0] <= len(cached.by_pair) // 2:
        _, old, again = best
        rows = [f for pair in again for f in cached.by_pair.get(pair, ())]
        groups = svc.visible_facts(principal, view, None, None, rows=rows, readable=readable)
        return _fold(old, groups, pairs, again)
    return _evaluate(svc.visible_facts(principal, view, None, None, rows=cached.rows,
                                       readable=readable), pairs)


def warm(svc: MemoryService, scope_text: str, at: datetime | None = None,
         limit: int = ROW_CACHE) -> list[str]:
    """Build what a first ``find: entities`` on ``main`` of the scope would, for each entity
    type of its schema that has facts (the first ``limit``): the type's rows, their
    evaluation for a caller who reads every cited episode, the current values at ``at``
    (default now) and every attribute's column. The functions a query calls build them,
    so a query finds them kept and answers as it would have; a caller who may not read
    some of the citations folds from them (``_evaluated``). Memory only: a restart warms
    again. The types warmed, in schema order."""
    view = svc.view(scope_text)
    schema = svc.schema(view)
    if schema is None:
        return []
    at = (at or svc.now_on(view.scope, view.branch)).astimezone(UTC)
    kept = _kept(svc)
    warmed: list[str] = []
    for etype in schema.entities:
        if len(warmed) >= min(limit, ROW_CACHE):
            break
        prefix = f"{etype.name}:"
        if not svc.index.facts(str(view.scope), view.segments, None, None, limit=1,
                               entity_prefix=prefix):
            continue  # nothing to read: kept, it would only push a type with facts out
        key, done = (str(view.scope), prefix), threading.Event()
        with _ROWS_LOCK:
            kept.warming[key] = done
        try:
            if not _warm_type(svc, view, schema, etype.name, prefix, at):
                break  # commits still being applied: the first query reads them
        finally:
            with _ROWS_LOCK:
                kept.warming.pop(key, None)
            done.set()
        warmed.append(etype.name)
    return warmed


def _warm_type(svc: MemoryService, view: View, schema: Schema, name: str, prefix: str,
               at: datetime) -> bool:
    cached = _rows(svc, view, prefix, None)
    if cached is None:
        return False
    everyone = dict.fromkeys(cached.cited)  # given this, no principal's ACL is read
    ev = _evaluation(svc, Principal(WARM_USER), view, cached, everyone, schema.many_pairs())
    stretch = _records_at(ev, at)
    etype = schema.entity(name)
    for attr in etype.attributes if etype is not None else ():
        stretch.column(attr.name, attr)
    return True


WARM_USER = "ampup:warm"
WARM_WAIT_SECONDS = 120  # a query waits at most this long for a warm-up of its type


def run(svc: MemoryService, user: str, req: TypedQuery) -> dict[str, Any]:
    view = read_view(svc, req.scope, req.branch, req.at_commit, req.pin, req.snapshot)
    now = svc.now_on(view.scope, view.branch)
    at = (req.as_of or now).astimezone(UTC)
    schema = svc.schema(view, now)
    principal = svc.principal(user)
    head = {"scope": str(view.scope), "branch": view.branch, "find": req.find,
            "as_of": utc_text(at), "at_commit": view.at_commit,
            "schema": schema.name if schema else None}
    if req.find == "entities":
        return {**head, **_entities(svc, principal, view, schema, at, req)}
    return {**head, **_facts(svc, principal, view, schema, at, req)}


def _check_type(schema: Schema | None, name: str | None, loc: list[str | int]) -> None:
    if schema is not None and name is not None and schema.entity(name) is None:
        raise field_error(loc, f"schema {schema.name} has no entity type {name!r}; known: "
                          + ", ".join(e.name for e in schema.entities), "entity_type_unknown")


def _current(groups: dict[tuple[str, str], list[FactRecord]], schema: Schema | None,
             at: datetime) -> Iterable[tuple[tuple[str, str], list[Window[FactRecord]]]]:
    pairs = schema.many_pairs() if schema is not None else frozenset()
    for key in sorted(groups):
        if key[0] == SCHEMA_ENTITY:
            continue  # the schema's bookkeeping
        many = bool(pairs) and (key[0].partition(":")[0], key[1]) in pairs
        windows = current_values(groups[key], at, many)
        if windows:
            yield key, windows


def _facts(svc: MemoryService, principal: Any, view: View, schema: Schema | None,
           at: datetime, req: TypedQuery) -> dict[str, Any]:
    if req.select is not None:
        raise field_error(["select"], "select is for find: entities", "select_unexpected")
    _check_type(schema, req.type, ["type"])
    for i, cond in enumerate(req.where):
        if cond.attribute is not None:
            raise field_error(["where", i, "attribute"], "find: facts compares each fact's "
                              "value: leave attribute out (filter with predicate)",
                              "attribute_unexpected")
    prefix = f"{req.type}:" if req.type else None
    cached = _rows(svc, view, prefix, req.predicate) if req.entity is None else None
    groups = svc.visible_facts(principal, view, req.entity, None, entity_prefix=prefix,
                               predicates=req.predicate,
                               rows=cached.rows if cached is not None else None)
    tests_of: dict[int, list[Callable[[list[Any]], bool]]] = {}  # by attribute (identity)

    def tests(attr: Attribute | None) -> list[Callable[[list[Any]], bool]]:
        if id(attr) not in tests_of:
            tests_of[id(attr)] = [compile_condition(attr, c, ["where", i])
                                  for i, c in enumerate(req.where)]
        return tests_of[id(attr)]

    if req.where and schema is None:
        tests(None)  # operands checked even when no fact matches
    rows: list[tuple[Attribute | None, Window[FactRecord]]] = []
    for (entity, predicate), windows in _current(groups, schema, at):
        attr = schema.attribute_of(entity, predicate) if schema else None
        for w in windows:
            value = json.loads(w.version.value) if w.version.value is not None else None
            if all(t([value]) for t in tests(attr)):
                rows.append((attr, w))
    fields: dict[str, Callable[[tuple[Attribute | None, Window[FactRecord]]], Key]] = {
        "entity": lambda r: ("s", r[1].version.entity),
        "predicate": lambda r: ("s", r[1].version.predicate),
        "value": lambda r: sort_key(r[0], json.loads(r[1].version.value or "null")),
        "valid_from": lambda r: ("t", r[1].version.valid_from)}
    orders: list[tuple[Callable[[Any], Key], bool]] = []
    for i, o in enumerate(req.order_by):
        if o.attribute not in fields:
            raise field_error(["order_by", i, "attribute"], "facts order by entity, "
                              "predicate, value or valid_from", "order_invalid")
        orders.append((fields[o.attribute], o.desc))
    rows = _sorted(rows, orders)
    page = rows[req.offset:req.offset + req.limit]
    scope = str(view.scope)
    facts = []
    for attr, w in page:
        wire = w.version.wire(scope, w.end)
        wire["entity_type"] = entity_type(w.version.entity)
        wire["value_type"] = attr.type if attr else None
        facts.append(wire)
    more = req.offset + req.limit < len(rows)
    return {"total": len(rows), "facts": facts,
            "next_offset": req.offset + req.limit if more else None}


def _entities(svc: MemoryService, principal: Any, view: View, schema: Schema | None,
              at: datetime, req: TypedQuery) -> dict[str, Any]:
    if req.type is None:
        raise field_error(["type"], "find: entities needs the entity type", "missing")
    if req.entity is not None or req.predicate is not None:
        raise field_error(["entity"] if req.entity is not None else ["predicate"],
                          "entity and predicate are for find: facts (use where and select)",
                          "field_unexpected")
    _check_type(schema, req.type, ["type"])
    etype = schema.entity(req.type) if schema else None

    def attribute(name: str, loc: list[str | int]) -> Attribute | None:
        if etype is None:
            return None
        attr = etype.attribute(name)
        if attr is None:
            raise field_error(loc, f"{req.type} has no attribute {name!r}; allowed: "
                              + ", ".join(a.name for a in etype.attributes),
                              "attribute_unknown")
        return attr

    conds = []
    for i, c in enumerate(req.where):
        if c.attribute is None:
            raise field_error(["where", i, "attribute"], "name the attribute compared",
                              "missing")
        attr = attribute(c.attribute, ["where", i, "attribute"])
        conds.append((c.attribute, attr, compile_condition(attr, c, ["where", i])))
    for i, name in enumerate(req.select or []):
        attribute(name, ["select", i])
    orders_attr = []
    for i, o in enumerate(req.order_by):
        if o.attribute != "entity":
            orders_attr.append((o.attribute, attribute(o.attribute, ["order_by", i,
                                                                      "attribute"])))
    wanted = None
    if req.select is not None:
        wanted = {*req.select, *(n for n, _, _ in conds), *(n for n, _ in orders_attr)}
    stretch = _current_records(svc, principal, view, schema, at, f"{req.type}:", wanted)
    records = stretch.records
    # Each condition picks its entities from the attribute's column (indexed once per
    # stretch); an entity matches when every condition picked it.
    chosen: set[str] | None = None
    for name, attr, test in conds:
        picked = test.select(stretch.column(name, attr))
        chosen = picked if chosen is None else chosen & picked
    # entity ids in entity order (_records_at fills records in that order); records may
    # hold attributes the query does not read: an entity is listed for those it reads
    if chosen is not None:
        matched = sorted(chosen)
    elif wanted is None:
        matched = list(records)
    else:
        matched = [e for e, rec in records.items() if not wanted.isdisjoint(rec)]

    orders: list[tuple[Callable[[Any], Key], bool]] = []
    for o in req.order_by:
        if o.attribute == "entity":
            orders.append((lambda entity: ("s", entity), o.desc))
        else:
            attr = etype.attribute(o.attribute) if etype else None
            orders.append((stretch.column(o.attribute, attr).least_of(), o.desc))
    ordered = _sorted(matched, orders) if orders else matched  # by entity already
    page = ordered[req.offset:req.offset + req.limit]
    many: dict[str, bool] = {}  # per attribute: the type is one
    out = []
    for entity in page:
        rec = records[entity]
        shown = req.select if req.select is not None else sorted(rec)
        attrs: dict[str, Any] = {}
        for name in shown:
            windows = rec[name][0] if name in rec else []
            if not windows:
                continue
            if name not in many:
                many[name] = schema is not None and schema.many(entity, name)
            attrs[name] = ([_cite_wire(w) for w in windows] if many[name]
                           else _cite_wire(windows[0]))
        out.append({"entity": entity, "type": req.type,
                    "key": entity.partition(":")[2], "attributes": attrs})
    more = req.offset + req.limit < len(ordered)
    return {"type": req.type, "total": len(ordered), "entities": out,
            "next_offset": req.offset + req.limit if more else None}
