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
from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ampup_memory.errors import field_error
from ampup_memory.memory.facts import FactRecord, Window, current, current_values, lines
from ampup_memory.memory.ledger import CommitText
from ampup_memory.memory.schemas import (
    NAME_PATTERN,
    SCHEMA_ENTITY,
    Attribute,
    BadValue,
    Schema,
    entity_type,
    sort_key,
    validate_value,
)
from ampup_memory.memory.scopes import BranchText, ScopeText
from ampup_memory.memory.segments import NO_LIMIT, Segment
from ampup_memory.timefmt import Instant, utc_text
from ampup_memory.web.body import JsonInt

if TYPE_CHECKING:
    from ampup_memory.memory.acl import Principal
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
    type: str | None = Field(default=None, pattern=NAME_PATTERN, description=(
        "Entity type (ids `<type>:<key>`); required for entities."))
    entity: str | None = Field(default=None, max_length=256, description="facts: one entity.")
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


# -- conditions ---------------------------------------------------------------------------------
Key = tuple[Any, ...] | None


def _operand(attr: Attribute | None, raw: Any, loc: list[str | int]) -> Any:
    if attr is None:
        return raw
    try:
        return validate_value(attr, raw)
    except BadValue as exc:
        raise field_error(loc, f"{attr.name} is {attr.type}: {exc}", "value_invalid") from None


def compile_condition(attr: Attribute | None, cond: Condition, loc: list[str | int],
                      ) -> Callable[[list[Any]], bool]:
    """A condition as a test on the list of an attribute's current values."""
    kind = attr.type if attr else None
    if cond.op == "contains":
        if kind not in TEXT_TYPES or not isinstance(cond.value, str) or not cond.value:
            raise field_error([*loc, "op"], "contains compares text: a non-empty string "
                              "operand on a string, text, enum or ref attribute", "op_invalid")
        needle = cond.value.casefold()
        return lambda values: any(isinstance(v, str) and needle in v.casefold()
                                  for v in values)
    if cond.op == "in":
        if not isinstance(cond.value, list) or not cond.value:
            raise field_error([*loc, "value"], "in takes a non-empty list", "value_invalid")
        keys = {sort_key(attr, _operand(attr, v, [*loc, "value", i]))
                for i, v in enumerate(cond.value)}
        return lambda values: any(sort_key(attr, v) in keys for v in values)
    want = sort_key(attr, _operand(attr, cond.value, [*loc, "value"]))
    if want is None:
        raise field_error([*loc, "value"], "the operand has no order", "value_invalid")
    if cond.op == "eq":
        return lambda values: any(sort_key(attr, v) == want for v in values)
    if cond.op == "ne":
        return lambda values: bool(values) and all(sort_key(attr, v) != want for v in values)
    if kind in ("bool", "ref", "text") and kind is not None:
        raise field_error([*loc, "op"], f"{cond.op} does not order a {kind}", "op_invalid")
    test: Callable[[Any, Any], bool] = {
        "lt": operator.lt, "lte": operator.le, "gt": operator.gt, "gte": operator.ge}[cond.op]

    def ordered(values: list[Any]) -> bool:
        for v in values:
            k = sort_key(attr, v)  # only within one kind: money within its currency
            if k is not None and k[0] == want[0] and test(k[1], want[1]):
                return True
        return False

    return ordered


# -- running a query ----------------------------------------------------------------------------
def _cite_wire(w: Window[FactRecord]) -> dict[str, Any]:
    v = w.version
    return {"value": json.loads(v.value) if v.value is not None else None, "fact": v.fact_id,
            "quote": v.quote, "cites": [{"episode": e, "unit": u} for e, u in v.cites],
            "valid_from": utc_text(v.valid_from),
            "valid_to": utc_text(w.end) if w.end else None, "commit": v.commit_id}


def _order_key(key: Key) -> tuple[int, Any]:
    return (0, key) if key is not None else (1, ())


def _sorted(items: list[Any], orders: list[tuple[Callable[[Any], Key], bool]]) -> list[Any]:
    """Stable sorts, last criterion first; a missing value sorts last either way."""
    out = list(items)
    for key_of, desc in reversed(orders):
        present = [i for i in out if key_of(i) is not None]
        missing = [i for i in out if key_of(i) is None]
        present.sort(key=lambda i, k=key_of: _order_key(k(i)), reverse=desc)  # type: ignore[misc]
        out = present + missing
    return out


# The fact rows a typed query reads, per view as of its heads: a view's rows up to a
# commit never change, so a repeated query (dashboards) reads them once. Rows only: who may
# see which is decided per call by MemoryService.visible_facts.
_ROWS: OrderedDict[tuple[Any, ...], _Rows] = OrderedDict()
_ROWS_LOCK = threading.Lock()
ROW_CACHE = 4


@dataclass(frozen=True)
class _Rows:
    key: tuple[Any, ...]  # the view's resolved heads, type and predicates
    rows: list[FactRecord]
    cited: frozenset[str]  # the episodes the rows cite


def _rows(svc: MemoryService, view: View, prefix: str | None,
          predicates: list[str] | set[str] | None) -> _Rows | None:
    """The view's fact rows of a type (and predicates), cached by the view's resolved
    heads; None (read them directly) while commits are still being applied."""
    ns = str(view.scope)
    segs = []
    for s in view.segments:
        if s.upto >= NO_LIMIT:
            head = svc.index.head(ns, s.branch)
            s = Segment(s.branch, s.after, head.seq if head else s.after)
        segs.append(s)
    key = (ns, tuple(segs), prefix, None if predicates is None else tuple(sorted(predicates)))
    with _ROWS_LOCK:
        hit = _ROWS.get(key)
        if hit is not None:
            _ROWS.move_to_end(key)
            return hit
    if svc.index.pending(ns):
        return None
    rows = svc.index.facts(ns, tuple(segs), None, None, entity_prefix=prefix,
                           predicates=predicates)
    found = _Rows(key, rows, frozenset(e for f in rows for e, _ in f.cites))
    with _ROWS_LOCK:
        _ROWS[key] = found
        while len(_ROWS) > ROW_CACHE:
            _ROWS.popitem(last=False)
    return found


# What find: entities evaluates, kept per rows and visibility: the timelines of every
# visible (entity, attribute), and per stretch of time between two window boundaries (the
# current values cannot change inside one) the entities' current values, decoded. A repeated
# query then only tests its conditions and orders; who sees what is still decided per call
# (the caller's readable episodes, MemoryService.readable_episodes, pick the entry).
Attr = tuple[list[Window[FactRecord]], list[Any]]  # current windows, their decoded values
Records = dict[str, dict[str, Attr]]


@dataclass
class _Evaluated:
    lines: dict[tuple[str, str], list[list[Window[FactRecord]]]]
    bounds: list[datetime]
    at: OrderedDict[int, Records] = field(default_factory=OrderedDict)


_EVALUATED: OrderedDict[tuple[Any, ...], _Evaluated] = OrderedDict()
STRETCHES = 8


def _evaluate(groups: dict[tuple[str, str], list[FactRecord]],
              schema: Schema | None) -> _Evaluated:
    pairs = schema.many_pairs() if schema is not None else frozenset()
    found: dict[tuple[str, str], list[list[Window[FactRecord]]]] = {}
    bounds: set[datetime] = set()
    for key, versions in groups.items():
        if key[0] == SCHEMA_ENTITY:
            continue  # the schema's bookkeeping
        many = bool(pairs) and (key[0].partition(":")[0], key[1]) in pairs
        found[key] = lines(versions, many)
        for line in found[key]:
            for w in line:
                if w.version.valid_from is not None:  # None: from the beginning
                    bounds.add(w.version.valid_from)
                if w.end is not None:
                    bounds.add(w.end)
    return _Evaluated(found, sorted(bounds))


def _records_at(ev: _Evaluated, at: datetime) -> Records:
    """Each entity's current values at ``at`` (newest-wins, facts.current), decoded."""
    stretch = bisect_right(ev.bounds, at)
    with _ROWS_LOCK:
        hit = ev.at.get(stretch)
    if hit is not None:
        return hit
    records: Records = {}
    for (entity, predicate), found in sorted(ev.lines.items()):
        windows = [w for line in found if (w := current(line, at)) is not None]
        if windows:
            records.setdefault(entity, {})[predicate] = (windows, [
                json.loads(w.version.value) for w in windows if w.version.value is not None])
    with _ROWS_LOCK:
        ev.at[stretch] = records
        while len(ev.at) > STRETCHES:
            ev.at.popitem(last=False)
    return records


def _current_records(svc: MemoryService, principal: Principal, view: View,
                     schema: Schema | None, at: datetime, prefix: str,
                     wanted: set[str] | None) -> Records:
    cached = _rows(svc, view, prefix, wanted)
    if cached is None:  # commits still being applied: nothing kept
        groups = svc.visible_facts(principal, view, None, None, entity_prefix=prefix,
                                   predicates=wanted)
        return _records_at(_evaluate(groups, schema), at)
    readable = svc.readable_episodes(principal, str(view.scope), view.segments, cached.cited)
    key = (cached.key, cached.cited.difference(readable))
    with _ROWS_LOCK:
        ev = _EVALUATED.get(key)
        if ev is not None:
            _EVALUATED.move_to_end(key)
    if ev is None:
        ev = _evaluate(svc.visible_facts(principal, view, None, None, entity_prefix=prefix,
                                         predicates=wanted, rows=cached.rows), schema)
        with _ROWS_LOCK:
            _EVALUATED[key] = ev
            while len(_EVALUATED) > ROW_CACHE:
                _EVALUATED.popitem(last=False)
    return _records_at(ev, at)


def run(svc: MemoryService, user: str, req: TypedQuery) -> dict[str, Any]:
    view = svc.view(req.scope, req.branch, req.at_commit)
    at = (req.as_of or datetime.now(UTC)).astimezone(UTC)
    schema = svc.schema(view)
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
        conds.append((c.attribute, compile_condition(attr, c, ["where", i])))
    for i, name in enumerate(req.select or []):
        attribute(name, ["select", i])
    orders_attr = []
    for i, o in enumerate(req.order_by):
        if o.attribute != "entity":
            orders_attr.append((o.attribute, attribute(o.attribute, ["order_by", i,
                                                                      "attribute"])))
    wanted = None
    if req.select is not None:
        wanted = {*req.select, *(n for n, _ in conds), *(n for n, _ in orders_attr)}
    records = _current_records(svc, principal, view, schema, at, f"{req.type}:", wanted)

    def values(rec: dict[str, Attr], name: str) -> list[Any]:
        found = rec.get(name)
        return found[1] if found is not None else []

    matched = [(e, rec) for e, rec in records.items()
               if all(test(values(rec, name)) for name, test in conds)]

    def by_attr(name: str, attr: Attribute | None,
                ) -> Callable[[tuple[str, dict[str, Attr]]], Key]:
        def key(item: tuple[str, dict[str, Attr]]) -> Key:
            keys = [k for v in values(item[1], name) if (k := sort_key(attr, v)) is not None]
            return min(keys) if keys else None
        return key

    orders: list[tuple[Callable[[Any], Key], bool]] = []
    for o in req.order_by or [Order(attribute="entity")]:
        if o.attribute == "entity":
            orders.append((lambda item: ("s", item[0]), o.desc))
        else:
            attr = etype.attribute(o.attribute) if etype else None
            orders.append((by_attr(o.attribute, attr), o.desc))
    ordered = _sorted(sorted(matched, key=lambda item: item[0]), orders)
    page = ordered[req.offset:req.offset + req.limit]
    out = []
    for entity, rec in page:
        shown = req.select if req.select is not None else sorted(rec)
        attrs: dict[str, Any] = {}
        for name in shown:
            windows = rec[name][0] if name in rec else []
            if not windows:
                continue
            many = schema is not None and schema.many(entity, name)
            attrs[name] = [_cite_wire(w) for w in windows] if many else _cite_wire(windows[0])
        out.append({"entity": entity, "type": req.type,
                    "key": entity.partition(":")[2], "attributes": attrs})
    more = req.offset + req.limit < len(ordered)
    return {"type": req.type, "total": len(ordered), "entities": out,
            "next_offset": req.offset + req.limit if more else None}
