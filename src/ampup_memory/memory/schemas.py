"""Schemas: what types a scope's facts, checked on every fact write and used by typed queries.

A schema is JSON data (:class:`Schema`): entity types, each with attributes ``{name, type,
cardinality, description}`` (types ``string, text, enum, number, money, date, timestamp,
bool, ref``), and an ``extract`` section saying which episode types a model reads for which
entity types and attributes. Three ship built in (package data in ``ampup_memory/schemas``).

**How a fact names its entity type.** With a schema, an entity id is ``<type>:<key>``
(``opportunity:acme-2025``): the type is the part before the first colon. POST /facts keeps
its shape (no new field, so every existing client and fact still reads the same), an id says
what it is wherever it appears (in ``about``, in a ``ref`` value, in search results), and
``find: "entities"`` of a type is a prefix read of the facts index.

**How a schema is stored.** As an episode of the reserved type ``schema`` (the canonical JSON
body, ACL ``*``, so it is content-addressed: its id is the schema's version) plus one fact
``(_schema, schema) = <version>`` citing it, both in one commit. So a schema change is a
commit like any other: crash-safe (rows first, then the ledger row), with a history (the
fact's timeline), ``as_of``/``at_commit`` reads, branches, and a three-way merge (the fact
merges per (entity, predicate) like any one-valued attribute; the episode is united).

One rule each: :func:`validate_value` normalises one raw value for one attribute (POST
/facts, query operands and extraction use it), :func:`check_fact` checks an entity,
predicate and value against a schema, :func:`schema_for` reads a view's schema.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import replace
from datetime import UTC, date, datetime
from decimal import Decimal, InvalidOperation
from functools import cache, lru_cache
from importlib import resources
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    model_validator,
)

from ampup_memory.caches import Remembered
from ampup_memory.errors import field_error
from ampup_memory.memory.episode_types import TYPES as EPISODE_TYPES
from ampup_memory.memory.scopes import BranchText
from ampup_memory.ruled import published, ruled
from ampup_memory.timefmt import in_utc, utc_text
from ampup_memory.web.conditional import Condition, quote

if TYPE_CHECKING:
    from ampup_memory.memory.facts import FactRecord
    from ampup_memory.memory.readindex import ReadIndex
    from ampup_memory.memory.segments import Segments
    from ampup_memory.memory.service import MemoryService

SCHEMA_ENTITY = "_schema"  # the reserved (entity, predicate) holding a scope's schema
SCHEMA_PREDICATE = "schema"
SCHEMA_SOURCE = "schema:"
SCHEMA_DOCUMENT = "schema"
BUILTINS = ("sales", "engineering", "corpus")
NAME_PATTERN = r"^[a-z][a-z0-9_]{0,63}$"
MAX_STRING = 1000
MAX_TEXT = 4000

ValueType = Literal["string", "text", "enum", "number", "money", "date", "timestamp", "bool",
                    "ref"]
Name = Annotated[str, ruled(NAME_PATTERN, "name_invalid", "name", "lower-case letters, "
                            "digits and _, starting with a letter (at most 64)"),
                 published(NAME_PATTERN)]
CURRENCY_PATTERN = r"^[A-Z]{3}$"
# A money value's currency, as a schema attribute or a posted value names it.
Currency = Annotated[str, ruled(CURRENCY_PATTERN, "currency_invalid", "currency",
                                "three upper-case letters, an ISO 4217 code such as EUR"),
                     published(CURRENCY_PATTERN)]


class Attribute(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: Name
    type: ValueType
    cardinality: Literal["one", "many"] = "one"
    description: str = Field(default="", max_length=2000)
    values: list[Annotated[str, Field(min_length=1, max_length=200)]] | None = Field(
        default=None, max_length=200, description="enum: the allowed values, in order.")
    currency: Currency | None = Field(default=None,
                                      description="money: the currency of a bare number.")
    entity: Name | None = Field(default=None, description="ref: the entity type named.")

    @model_validator(mode="after")
    def _parameters(self) -> Attribute:
        if self.type == "enum":
            if not self.values:
                raise ValueError("an enum attribute lists its values")
            if len(set(self.values)) != len(self.values):
                raise ValueError("an enum's values are distinct")
        elif self.values is not None:
            raise ValueError("only an enum attribute has values")
        if self.type == "ref" and self.entity is None:
            raise ValueError("a ref attribute names its entity type (entity)")
        if self.type != "ref" and self.entity is not None:
            raise ValueError("only a ref attribute names an entity type")
        if self.type != "money" and self.currency is not None:
            raise ValueError("only a money attribute has a currency")
        return self


class EntityType(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: Name
    description: str = Field(default="", max_length=2000)
    attributes: list[Attribute] = Field(min_length=1, max_length=200)

    def attribute(self, name: str) -> Attribute | None:
        return next((a for a in self.attributes if a.name == name), None)


class ExtractRule(BaseModel):
    """Which episodes a model reads, for which entity types and attributes."""

    model_config = ConfigDict(extra="forbid")

    episode_types: list[str] = Field(min_length=1, max_length=32)
    targets: dict[Name, list[Name]] = Field(
        min_length=1, description="entity type → the attributes read from these episodes.")
    instructions: str = Field(default="", max_length=8000)


class Inconsistent(ValueError):
    """A problem across parts of a schema, with where it is: pydantic gives a model
    validator's error no location, and the 422 promises one."""

    def __init__(self, msg: str, loc: tuple[str | int, ...]) -> None:
        super().__init__(msg)
        self.loc = loc


class Schema(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: Name
    description: str = Field(default="", max_length=4000)
    entities: list[EntityType] = Field(min_length=1, max_length=100)
    extract: list[ExtractRule] = Field(default_factory=list, max_length=100)
    _types: dict[str, EntityType] = PrivateAttr(default_factory=dict)
    _attrs: dict[tuple[str, str], Attribute] = PrivateAttr(default_factory=dict)

    @model_validator(mode="after")
    def _consistent(self) -> Schema:
        names = [e.name for e in self.entities]
        for i, e in enumerate(self.entities):
            at: tuple[str | int, ...] = ("entities", i)
            if e.name in names[:i]:
                raise Inconsistent(f"entity type {e.name!r} is defined twice", (*at, "name"))
            seen: set[str] = set()
            for j, a in enumerate(e.attributes):
                where = (*at, "attributes", j)
                if a.name in seen:
                    raise Inconsistent(f"{e.name}.{a.name} is defined twice", (*where, "name"))
                seen.add(a.name)
                if a.type == "ref" and a.entity not in names:
                    raise Inconsistent(f"{e.name}.{a.name} refers to unknown entity type "
                                       f"{a.entity!r}; known: {', '.join(names)}",
                                       (*where, "entity"))
        known = {t.name for t in EPISODE_TYPES if not t.reserved}
        for r, rule in enumerate(self.extract):
            for t in rule.episode_types:
                if t not in known:
                    raise Inconsistent(f"extract reads unknown episode type {t!r}; known: "
                                       + ", ".join(sorted(known)),
                                       ("extract", r, "episode_types"))
            for etype, names in rule.targets.items():
                ent = next((e for e in self.entities if e.name == etype), None)
                if ent is None:
                    raise Inconsistent(f"extract targets unknown entity type {etype!r}",
                                       ("extract", r, "targets", etype))
                for n in names:
                    if ent.attribute(n) is None:
                        raise Inconsistent(f"extract targets unknown attribute {etype}.{n}",
                                           ("extract", r, "targets", etype))
        return self

    # -- lookups ------------------------------------------------------------------------------
    def model_post_init(self, _context: Any) -> None:
        self._types = {e.name: e for e in self.entities}
        self._attrs = {(e.name, a.name): a for e in self.entities for a in e.attributes}

    def entity(self, name: str) -> EntityType | None:
        return self._types.get(name)

    def attribute_of(self, entity: str, predicate: str) -> Attribute | None:
        """The attribute a fact of ``entity`` (an id ``type:key``) and ``predicate`` has."""
        head, sep, _ = entity.partition(":")
        return self._attrs.get((head, predicate)) if sep else None

    def many_pairs(self) -> frozenset[tuple[str, str]]:
        """(entity type, attribute) of every many-valued attribute (for loops over many
        facts: one set lookup each)."""
        return frozenset((e.name, a.name) for e in self.entities for a in e.attributes
                         if a.cardinality == "many")

    def many(self, entity: str, predicate: str) -> bool:
        attr = self.attribute_of(entity, predicate)
        return attr is not None and attr.cardinality == "many"

    def extraction_for(self, episode_type: str) -> list[tuple[str, list[Attribute], str]]:
        """What a model reads from an episode of ``episode_type``: (entity type, its
        attributes, instructions) per rule that names the type (the extraction half)."""
        out = []
        for rule in self.extract:
            if episode_type in rule.episode_types:
                for etype, attrs in rule.targets.items():
                    ent = self.entity(etype)
                    assert ent is not None  # checked by _consistent
                    out.append((etype, [a for a in ent.attributes if a.name in attrs],
                                rule.instructions))
        return out

    def body(self) -> str:
        """The canonical JSON text stored as the schema's episode (its id is the version)."""
        return json.dumps(self.model_dump(exclude_none=True), indent=2, ensure_ascii=False)


def entity_type(entity: str) -> str | None:
    """``opportunity:acme-2025`` → ``opportunity``; None for an id with no type prefix."""
    head, sep, key = entity.partition(":")
    return head if sep and key and re.fullmatch(NAME_PATTERN, head) else None


# -- built-ins ----------------------------------------------------------------------------------
@cache
def builtin(name: str) -> Schema | None:
    if name not in BUILTINS:
        return None
    text = resources.files("ampup_memory.schemas").joinpath(f"{name}.json").read_text("utf-8")
    return Schema.model_validate_json(text)


def builtins() -> list[Schema]:
    return [s for s in (builtin(n) for n in BUILTINS) if s is not None]


def parse_schema(data: Any, loc: list[str | int]) -> Schema:
    """A schema body, or a 422 naming the first problem."""
    try:
        return Schema.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = [*loc, *(p for p in err["loc"] if isinstance(p, (str, int)))]
        cause = (err.get("ctx") or {}).get("error")
        if isinstance(cause, Inconsistent):
            where += cause.loc
        msg = str(err["msg"]).removeprefix("Value error, ")
        raise field_error(where, msg, "schema_invalid") from None


@lru_cache(maxsize=256)
def _parsed(body: str) -> Schema:
    return Schema.model_validate_json(body)


# -- values -------------------------------------------------------------------------------------
_SYMBOLS = {"$": "USD", "€": "EUR", "£": "GBP", "¥": "JPY", "₹": "INR"}
# Possessive (`*+`): each run of spaces is taken whole, once. With plain `\s*` on both
# sides of an optional part, a refused "1" + 10,000 spaces + "x" (a typed query's operand,
# a fact's value) tried every way to share the spaces out: cubic, over a minute of CPU.
_MONEY = re.compile(r"\s*+(?P<pre>[A-Za-z]{3}|[$€£¥₹])?\s*+(?P<num>[-+]?[0-9][0-9,]*+"
                    r"(?:\.[0-9]++)?|[-+]?\.[0-9]++)\s*+(?P<mult>[kKmMbB]|thousand|million|"
                    r"billion)?\s*+(?P<post>[A-Za-z]{3})?\s*+")
_MULT = {"k": 1000, "thousand": 1000, "m": 10**6, "million": 10**6, "b": 10**9,
         "billion": 10**9}
_DATE_FORMATS = ("%Y-%m-%d", "%Y/%m/%d", "%B %d, %Y", "%b %d, %Y", "%d %B %Y", "%d %b %Y")
_TRUE = {"true", "yes", "y"}
_FALSE = {"false", "no", "n"}


class BadValue(ValueError):
    """A raw value that does not fit its attribute's type (the message says why)."""


def _number(raw: Any) -> Decimal:
    if isinstance(raw, bool):
        raise BadValue("expected a number, got a boolean")
    if isinstance(raw, (int, float)):
        return Decimal(str(raw))
    if isinstance(raw, str):
        try:
            return Decimal(raw.strip().replace(",", ""))
        except InvalidOperation:
            pass
    raise BadValue(f"expected a number, got {_shown(raw)}")


def _plain(d: Decimal) -> int | float:
    if not d.is_finite() or abs(d) > Decimal(10) ** 15:
        raise BadValue("the number is out of range")
    return int(d) if d == d.to_integral_value() else float(d)


def _money(attr: Attribute, raw: Any) -> dict[str, Any]:
    if isinstance(raw, dict):
        if set(raw) - {"amount", "currency"} or "amount" not in raw:
            raise BadValue("money is {amount, currency}")
        amount = _number(raw["amount"])
        currency = raw.get("currency") or attr.currency
    elif isinstance(raw, (int, float)) and not isinstance(raw, bool):
        amount, currency = _number(raw), attr.currency
    elif isinstance(raw, str):
        m = _MONEY.fullmatch(raw)
        if m is None or (m["pre"] and m["post"]):
            raise BadValue(f"expected an amount such as '$50k' or '50000 EUR', got "
                           f"{_shown(raw)}")
        amount = _number(m["num"]) * _MULT.get((m["mult"] or "").lower(), 1)
        code = m["pre"] or m["post"]
        currency = _SYMBOLS.get(code, code.upper()) if code else attr.currency
    else:
        raise BadValue(f"expected an amount, got {_shown(raw)}")
    if not isinstance(currency, str) or not re.fullmatch(r"[A-Z]{3}", currency):
        raise BadValue("money needs a currency (a three-letter code): this attribute has no "
                       "default currency")
    return {"amount": _plain(amount), "currency": currency}


def _date(raw: Any) -> str:
    if not isinstance(raw, str):
        raise BadValue(f"expected a date (YYYY-MM-DD), got {_shown(raw)}")
    text = raw.strip()
    for fmt in _DATE_FORMATS:
        try:
            return datetime.strptime(text, fmt).date().isoformat()
        except ValueError:
            continue
    try:  # a full timestamp: the date as it is written there
        return datetime.fromisoformat(text.replace("Z", "+00:00")).date().isoformat()
    except ValueError:
        raise BadValue(f"expected a date (YYYY-MM-DD), got {_shown(raw)}") from None


def _timestamp(raw: Any) -> str:
    if not isinstance(raw, str):
        raise BadValue(f"expected an RFC 3339 time, got {_shown(raw)}")
    try:
        value = datetime.fromisoformat(raw.strip().replace("Z", "+00:00"))
    except ValueError:
        raise BadValue(f"expected an RFC 3339 time, got {_shown(raw)}") from None
    if value.tzinfo is None:
        raise BadValue("a timestamp needs an offset (e.g. Z or +02:00)")
    try:
        return utc_text(in_utc(value))
    except ValueError as exc:
        raise BadValue(str(exc)) from None


def _text(raw: Any, limit: int) -> str:
    if isinstance(raw, bool) or not isinstance(raw, (str, int, float)):
        raise BadValue(f"expected text, got {_shown(raw)}")
    text = raw.strip() if isinstance(raw, str) else json.dumps(raw)
    if not text:
        raise BadValue("the text is empty")
    if len(text) > limit:
        raise BadValue(f"at most {limit} characters")
    return text


def validate_value(attr: Attribute, raw: Any) -> Any:
    """One raw value for ``attr`` → its normalised JSON value, or :class:`BadValue`.

    string/text: trimmed text; enum: one of its values, exactly; number: a JSON number
    (numeric strings read); money: ``{amount, currency}`` ("$50k", "50000 EUR", a bare
    number in the attribute's currency); date: ``YYYY-MM-DD``; timestamp: RFC 3339 in UTC;
    bool: true/false; ref: ``<type>:<key>`` of the attribute's entity type (a bare key gets
    the type)."""
    match attr.type:
        case "string":
            return _text(raw, MAX_STRING)
        case "text":
            return _text(raw, MAX_TEXT)
        case "enum":
            assert attr.values is not None
            if not isinstance(raw, str) or raw not in attr.values:
                raise BadValue(f"{_shown(raw)} is not one of: {', '.join(attr.values)}")
            return raw
        case "number":
            return _plain(_number(raw))
        case "money":
            return _money(attr, raw)
        case "date":
            return _date(raw)
        case "timestamp":
            return _timestamp(raw)
        case "bool":
            if isinstance(raw, bool):
                return raw
            if isinstance(raw, str) and raw.strip().lower() in _TRUE | _FALSE:
                return raw.strip().lower() in _TRUE
            raise BadValue(f"expected true or false, got {_shown(raw)}")
        case "ref":
            text = _text(raw, 256)
            kind = entity_type(text)
            if kind is None:
                return f"{attr.entity}:{text}"
            if kind != attr.entity:
                raise BadValue(f"expected a {attr.entity} (e.g. {attr.entity}:<key>), got "
                               f"a {kind}")
            return text
    raise BadValue(f"unknown type {attr.type}")  # pragma: no cover - Literal above


def _shown(raw: Any) -> str:
    text = json.dumps(raw, ensure_ascii=False)
    return text if len(text) <= 60 else text[:57] + "..."


def check_fact(schema: Schema | None, entity: str, predicate: str, value: Any,
               loc: list[str | int]) -> Any:
    """A fact's entity, predicate and value against ``schema`` → the value to store
    (normalised), or a 422 at ``loc`` listing what is allowed. No schema: the value as
    posted, which must then be a JSON string, number or boolean (as before schemas)."""
    if entity == SCHEMA_ENTITY:
        raise field_error([*loc, "entity"], f"{SCHEMA_ENTITY} is reserved for the scope's "
                          "schema (PUT /schemas)", "entity_reserved")
    if schema is None:
        if isinstance(value, dict):
            raise field_error([*loc, "value"], "an object value needs a schema that types "
                              "it (money)", "value_invalid")
        return value
    kind = entity_type(entity)
    types = [e.name for e in schema.entities]
    etype = schema.entity(kind) if kind else None
    head, sep, key = entity.partition(":")
    if etype is None and sep and not key and schema.entity(head) is not None:
        raise field_error([*loc, "entity"], f"entity {entity[:80]!r} has no key after its "
                          f"type: use {head}:<key>", "entity_type_unknown")
    if etype is None:
        raise field_error([*loc, "entity"], f"entity {entity[:80]!r} names no entity type of "
                          f"schema {schema.name}: use <type>:<key> with type one of "
                          + ", ".join(types), "entity_type_unknown")
    attr = etype.attribute(predicate)
    if attr is None:
        raise field_error([*loc, "predicate"], f"{kind} has no attribute {predicate[:80]!r}; "
                          "allowed: " + ", ".join(a.name for a in etype.attributes),
                          "predicate_unknown")
    try:
        return validate_value(attr, value)
    except BadValue as exc:
        raise field_error([*loc, "value"], f"{kind}.{predicate} is {_type_text(attr)}: {exc}",
                          "value_invalid") from None


def _type_text(attr: Attribute) -> str:
    if attr.type == "ref":
        return f"a ref to {attr.entity}"
    return {"enum": "an enum", "money": "money", "text": "text", "bool": "a bool"}.get(
        attr.type, f"a {attr.type}")


# -- comparing typed values (typed queries) -----------------------------------------------------
def sort_key(attr: Attribute | None, value: Any) -> tuple[Any, ...] | None:
    """A key that orders normalised values of one attribute as their type orders them:
    numbers numerically, dates and timestamps in time, enums in their listed order, money
    within its currency (the currency is the first part, so two currencies never compare
    as amounts). None for a value with no order (objects of no known type)."""
    kind = attr.type if attr else None
    if kind == "money" or (kind is None and isinstance(value, dict)):
        if not isinstance(value, dict) or "amount" not in value:
            return None
        return ("$" + str(value.get("currency")), float(value["amount"]))
    if kind == "enum" and attr is not None and attr.values and value in attr.values:
        return ("e", attr.values.index(value))
    if kind == "timestamp" and isinstance(value, str):
        try:
            return ("t", datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(UTC))
        except ValueError:
            return None
    if kind == "date" and isinstance(value, str):
        try:
            return ("d", date.fromisoformat(value))
        except ValueError:
            return None
    if isinstance(value, bool):
        return ("b", int(value))
    if isinstance(value, (int, float)):
        try:
            return ("n", float(value))
        except OverflowError:  # an integer past every double, stored before they were refused
            return ("n", math.inf if value > 0 else -math.inf)
    if isinstance(value, str):
        return ("s", value)
    return None


# -- the schema of a view ---------------------------------------------------------------------
def schema_for(svc: MemoryService, scope: object, branch: object = None,
               at_commit: str | None = None, as_of: datetime | None = None) -> Schema | None:
    """The schema of a scope's branch (at a commit, at a valid time; default now), or None.
    What POST /facts checks against, and what extraction reads (``Schema.extract``)."""
    view = svc.view(scope, branch, at_commit)
    got = schema_at(svc.index, str(view.scope), view.segments,
                    as_of or svc.now_on(view.scope, view.branch))
    return got[0] if got else None


def schema_versions(index: ReadIndex, scope: str, segs: Segments) -> list[FactRecord]:
    """The schema fact's versions in the view (closures included)."""
    return index.facts(scope, segs, SCHEMA_ENTITY, SCHEMA_PREDICATE)


def schema_at(index: ReadIndex, scope: str, segs: Segments, at: datetime,
              ) -> tuple[Schema, FactRecord] | None:
    """The schema current at valid time ``at`` in the view, with the fact that set it.

    The schema fact is read every time (a new version is seen by the next read); the
    schema it names is read once per (scope, version) and kept (`_KNOWN`): a version is
    its episode's id, a hash of the body, so it always names the same schema."""
    from ampup_memory.memory.facts import current, timeline

    window = current(timeline(schema_versions(index, scope, segs)), at)
    if window is None or window.version.value is None:
        return None
    version = json.loads(window.version.value)

    def read() -> Schema | None:
        body = _schema_body(index, scope, segs, version)
        return _parsed(body) if body is not None else None

    schema = _KNOWN.get((scope, version), read)
    return (schema, window.version) if schema is not None else None


_KNOWN: Remembered[tuple[str, str], Schema | None] = Remembered(1024)


def _schema_body(index: ReadIndex, scope: str, segs: Segments, version: str) -> str | None:
    found = index.episodes(scope, segs, [version]).get(version)
    return index.body(scope, found.body_ref) if found is not None else None


# -- setting and reading a scope's schema -------------------------------------------------------
class PutSchema(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    builtin: Literal["sales", "engineering", "corpus"] | None = Field(
        default=None, description="A built-in schema by name (GET /schemas lists them).")
    schema_: dict[str, Any] | None = Field(default=None, alias="schema",
                                           description="A schema body (see the docs).")
    branch: BranchText | None = None


def _schema_record(version: str, name: str, commit_id: str, branch: str,
                   now: datetime) -> FactRecord:
    from ampup_memory.memory.facts import VALUE, FactRecord
    from ampup_memory.memory.rows import fact_id

    return FactRecord(
        fact_id=fact_id(commit_id, 0), kind=VALUE, entity=SCHEMA_ENTITY,
        predicate=SCHEMA_PREDICATE, value=json.dumps(version), valid_from=now, valid_to=None,
        quote=f'"name": "{name}"', cites=((version, 1),), written_by="posted", branch=branch)


def set_schema(svc: MemoryService, user: str, scope_text: str,
               req: PutSchema, condition: Condition | None = None) -> dict[str, Any]:
    """Validate and commit a scope's schema on a branch: its episode (if the branch does not
    hold that version yet) and the fact naming it, in one commit. The same schema again
    commits nothing. ``condition`` (If-Match / If-None-Match on the schema's commit,
    `schema_etag`) is checked again inside the commit's compare-and-set, on the branch
    as of the ledger the append asserts: of two writers holding one ETag, one lands."""
    from ampup_memory.memory.branches import branch_segments
    from ampup_memory.memory.episode_types import by_name
    from ampup_memory.memory.episodes import MAX_BODY_BYTES, EpisodeIn, prepare
    from ampup_memory.memory.scopes import parse_branch, parse_scope
    from ampup_memory.memory.service import _HeldMeanwhile

    if (req.builtin is None) == (req.schema_ is None):
        raise field_error(["builtin"], "give either builtin (a built-in's name) or schema "
                          "(a schema body)", "schema_missing")
    schema = builtin(req.builtin) if req.builtin else parse_schema(req.schema_, ["schema"])
    assert schema is not None
    scope, branch = parse_scope(scope_text), parse_branch(req.branch)
    ns = str(scope)
    body = schema.body()
    if len(body.encode("utf-8")) > MAX_BODY_BYTES:  # stored as an episode: its limit holds
        raise field_error(["schema"], f"a schema is stored as at most {MAX_BODY_BYTES} "
                          f"bytes of JSON; this one takes {len(body.encode('utf-8'))}: "
                          "fewer entity types, attributes or enum values", "schema_invalid")
    kind = by_name("schema")
    with svc._write_lock:
        while True:
            segs = svc._write_view(scope, branch)
            now = svc.now_on(scope, branch)
            prepared = prepare(EpisodeIn(source=SCHEMA_SOURCE + schema.name, body=body,
                                         occurred_at=now, acl=["*"],
                                         document=SCHEMA_DOCUMENT),
                               branch, now, ["schema"], kind)
            version = prepared.record.id
            was = schema_at(svc.index, ns, segs, now)
            if condition is not None:
                condition.check(schema_etag(was))  # early: before any row is written
            if was is not None and json.loads(was[1].value or "null") == version:
                return _wire(ns, branch, schema, was[1], changed=False)
            held = bool(svc.index.episodes(ns, segs, [version]))
            commit_id = svc.next_commit_id(scope, branch)
            fact = _schema_record(version, schema.name, commit_id, branch, now)

            def recheck(segs: Segments = segs, held: bool = held,
                        version: str = version) -> None:
                if condition is not None and not condition.empty:
                    now_segs = branch_segments(svc.index, ns, branch)
                    condition.check(schema_etag(schema_at(svc.index, ns, now_segs,
                                                          svc.now_on(ns, branch))))
                if not held:
                    svc._none_held(ns, segs, [version])

            try:
                entry = svc._commit(
                    scope, branch, user, f"set schema {schema.name}",
                    [] if held else [prepared], [fact], commit_id, recheck=recheck)
            except _HeldMeanwhile:
                continue
            return _wire(ns, branch, schema, replace(fact, commit_id=entry.commit_id),
                         changed=True)


def schema_etag(got: tuple[Schema, FactRecord] | None) -> str | None:
    """A schema's version for If-Match: the commit that set it (None: the scope has none
    on the branch). Every server reads the same ledger, so every server agrees."""
    return None if got is None else quote(got[1].commit_id)


def _wire(scope: str, branch: str, schema: Schema, fact: FactRecord,
          changed: bool | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "scope": scope, "branch": branch, "name": schema.name,
        "version": json.loads(fact.value or "null"), "commit": fact.commit_id,
        "set_at": utc_text(fact.valid_from), "schema": schema.model_dump(exclude_none=True)}
    if changed is not None:
        out["changed"] = changed
    return out


def get_schema(svc: MemoryService, scope_text: object, branch_text: object,
               at_commit: str | None, as_of: datetime | None,
               history: bool, pin: str | None = None,
               snapshot: str | None = None) -> dict[str, Any]:
    """A scope's schema in a view at a valid time (default now), and on request every
    version with its window. A schema is scope metadata: every reader of the scope sees it.
    A pin or a snapshot picks the commit as on every read (``read_view``)."""
    from ampup_memory.memory.facts import timeline
    from ampup_memory.memory.snapshots import read_view

    view = read_view(svc, scope_text, branch_text, at_commit, pin, snapshot)
    ns, at = str(view.scope), (as_of or svc.now_on(view.scope, view.branch)).astimezone(UTC)
    got = schema_at(svc.index, ns, view.segments, at)
    base: dict[str, Any] = {"scope": ns, "branch": view.branch, "as_of": utc_text(at),
            "at_commit": view.at_commit}
    out = ({**_wire(ns, view.branch, got[0], got[1]), **base} if got else
           {**base, "name": None, "version": None, "commit": None, "set_at": None,
            "schema": None})
    if history:
        versions: list[dict[str, Any]] = []
        out["history"] = versions
        for w in timeline(schema_versions(svc.index, ns, view.segments)):
            version = json.loads(w.version.value) if w.version.value else None
            body = _schema_body(svc.index, ns, view.segments, version) if version else None
            versions.append({
                "version": version, "name": _parsed(body).name if body else None,
                "commit": w.version.commit_id, "valid_from": utc_text(w.version.valid_from),
                "valid_to": utc_text(w.end) if w.end else None})
    return out


def list_builtins() -> dict[str, Any]:
    return {"schemas": [s.model_dump(exclude_none=True) for s in builtins()]}
