"""Extraction: a model reads episodes and proposes facts; only checked ones are written.

Which episodes: those of the types the scope's schema says to read (``Schema.extract``) that
this model has not read with this schema version. The model answers JSON (entity,
predicate, value, unit number, verbatim quote). A candidate is kept only if its quote occurs
in that unit of that episode (whitespace-normalised; the stored quote is the unit's own
text) and its entity, predicate and value validate against the schema (the same
:func:`check_fact` and quote check as POST /facts). Kept facts are written with
``written_by: extract:<model>``, citing (episode, unit), ``valid_from`` the episode's
``occurred_at``.

**Read marks.** That an episode was read is a row of the commit too: one row per episode in
the scope's ``reads`` table (reads.py), keyed by the model and schema version, counting what
was written and rejected. So the facts of a batch and the record that its episodes were
read land in ONE commit: a crash (kill -9) before the ledger row leaves neither, after it
both, and an episode is never read twice by the same model and schema version. A new model
or schema version has another key and reads again; newest-wins takes care of the rest.
Read marks are not facts: no fact read, search or query sees them.

**Failures.** No model configured: nothing runs. A model that is down, slow, rate-limited or
answering garbage (after the client's bounded retries, models/chat.py) leaves the episode
pending, writes nothing and records the error for ``GET /extraction/status``. An episode
whose answers were of the wrong shape on some passes in a row is set aside (read, no fact;
the rule of every model pass, models/setaside.py): the same answer would come again, and it
held back every episode after it. An episode the endpoint refuses (HTTP 400: too long, say)
is passed over and counts toward the same rule (`REFUSED`; `setaside.Asker`, as in every
model pass).
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from functools import partial
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ampup_memory.errors import Conflict, NotFound, ValidationFailed
from ampup_memory.memory.acl import Principal
from ampup_memory.memory.episode_types import Unit, by_name
from ampup_memory.memory.facts import FactIn, FactRecord
from ampup_memory.memory.reads import ReadMark, read_key
from ampup_memory.memory.rows import fact_id
from ampup_memory.memory.schemas import (
    Attribute,
    Schema,
    check_fact,
    schema_at,
)
from ampup_memory.memory.scopes import parse_branch, parse_scope
from ampup_memory.models.chat import AnswerInt, ChatModel, ModelUnavailable
from ampup_memory.models.setaside import (
    Asker,
    Item,
    Refused,
    Rule,
    SetAside,
    asked_key,
    set_aside_items,
)
from ampup_memory.progress import Progress
from ampup_memory.timefmt import utc_text

if TYPE_CHECKING:
    from ampup_memory.memory.episodes import EpisodeRecord
    from ampup_memory.memory.service import MemoryService

log = logging.getLogger("ampup_memory.extraction")

NO_MODEL = "no model configured"
AUTHOR = "extract"
# A batch is one commit: three Iceberg appends (facts, read marks, ledger row) of some 0.1 s
# each whatever their size, so fewer, larger batches are what keeps our overhead per episode
# small (benchmarks/extract_bench.py); a slow model commits sooner (BATCH_SECONDS), so a
# crash loses little model time.
DEFAULT_BATCH = 100
BATCH_SECONDS = 30.0
MAX_CANDIDATES = 200  # per episode: more is a model gone astray, not more knowledge
# An episode set aside (models/setaside.py: UNUSABLE_PASSES passes in a row whose every
# attempt got an answer of the wrong shape) is read with no fact, counted so. The pass
# stops at a failure and reads the oldest first: until then it held back every later one.
UNUSABLE = "answer_unusable"
# An episode the endpoint refused (HTTP 400, 413, 422: `chat.RequestRefused`, "context
# length exceeded") is that episode's problem (`setaside.Asker`, the rule of every model
# pass): the pass goes on with the next, and the refusal counts toward setting it aside
# (read with no fact, counted so) like an answer of the wrong shape. Only REFUSED_RUN
# episodes refused before any answer say the endpoint refuses everything: the pass stops
# as at an outage and nothing is counted.
REFUSED = "request_refused"


# -- the model's answer ------------------------------------------------------------------------
class Candidate(BaseModel):
    model_config = ConfigDict(extra="ignore")

    entity: str
    predicate: str
    value: Any
    unit: AnswerInt
    quote: str


class Answer(BaseModel):
    """The answer's shape; each candidate is read on its own (`candidate`), so one of the
    wrong shape is rejected alone, as one with a wrong value is, and the rest is kept."""

    model_config = ConfigDict(extra="ignore")

    facts: list[Any] = Field(default_factory=list, max_length=MAX_CANDIDATES)


def candidate(raw: Any) -> tuple[str, Candidate | None]:
    """One item of ``facts`` as a `Candidate`, or the reason it is rejected: a unit that
    is no JSON integer names no unit (``unit_unknown``); anything else of the wrong shape
    (a field missing or of the wrong type, an item that is no object) is
    ``candidate_invalid``."""
    try:
        return "", Candidate.model_validate(raw)
    except ValidationError as exc:
        unit_only = all(e["loc"][:1] == ("unit",) for e in exc.errors())
        return ("unit_unknown" if unit_only else "candidate_invalid"), None


SYSTEM = (
    "You extract facts from one text for a memory store. Answer ONLY with JSON of the form "
    '{"facts": [{"entity": "<type>:<key>", "predicate": "<attribute>", "value": <value>, '
    '"unit": <unit number>, "quote": "<exact words copied from that unit>"}]}. '
    "Use only the entity types and attributes listed. The entity key is a short lowercase "
    "slug naming the thing (e.g. opportunity:acme-2025). The quote must be copied verbatim "
    "from the numbered unit it comes from and must state the value. State nothing that the "
    'text does not say; if it says nothing relevant, answer {"facts": []}.'
)


def _attribute_text(attr: Attribute) -> str:
    kind: str = attr.type
    if attr.type == "enum" and attr.values:
        kind = "one of " + ", ".join(attr.values)
    elif attr.type == "ref":
        kind = f"ref to {attr.entity} (<{attr.entity}>:<key>)"
    elif attr.type == "money":
        kind = "money" + (f" (default currency {attr.currency})" if attr.currency else "")
    many = ", may hold several values" if attr.cardinality == "many" else ""
    desc = f": {attr.description}" if attr.description else ""
    return f"  - {attr.name} ({kind}{many}){desc}"


@dataclass(frozen=True)
class _Rule:
    """What the schema asks of one episode type: the prompt's head (the attributes to
    extract, with instructions) and the (entity type, attribute) pairs it may yield.
    Worked out once per pass and episode type, not per episode and candidate."""

    head: str
    allowed: frozenset[tuple[str, str]]


def _rule(schema: Schema, episode_type: str) -> _Rule:
    parts = [f"Schema {schema.name}. Extract these attributes:"]
    notes = []
    allowed: set[tuple[str, str]] = set()
    for etype, attrs, instructions in schema.extraction_for(episode_type):
        parts.append(f"Entity type {etype}:")
        parts.extend(_attribute_text(a) for a in attrs)
        allowed.update((etype, a.name) for a in attrs)
        if instructions and instructions not in notes:
            notes.append(instructions)
    parts.extend(f"Instructions: {n}" for n in notes)
    return _Rule("\n".join(parts), frozenset(allowed))


def prompt(schema: Schema, episode: EpisodeRecord, units: list[Unit],
           rule: _Rule | None = None) -> str:
    """The user message for one episode: what to extract, then its numbered units."""
    rule = rule or _rule(schema, episode.type)
    parts = [rule.head, f"\nText ({episode.type}, occurred {utc_text(episode.occurred_at)}), "
             "by unit:"]
    parts.extend(f"[unit {u.n}] {u.text}" for u in units)
    return "\n".join(parts)


# -- checking a candidate -------------------------------------------------------------------------
def locate(quote: str, text: str) -> str | None:
    """The span of ``text`` that ``quote`` matches with runs of whitespace read as one
    space (and the ends trimmed), or None: what is stored is the unit's own text."""
    words = quote.split()
    if not words:
        return None
    found = re.search(r"\s+".join(re.escape(w) for w in words), text)
    return found.group(0) if found else None


@dataclass
class Outcome:
    """One pass: what it read, wrote and rejected, and why it stopped early if it did."""

    model: str
    schema: str | None
    read: int = 0
    facts: int = 0
    rejected: Counter[str] = field(default_factory=Counter)
    commits: list[str] = field(default_factory=list)
    error: str | None = None
    pending: int = 0
    refused: int = 0  # episodes the endpoint refused this pass, left pending (`REFUSED`)
    refusal: str | None = None  # the last refusal's reason, for the status

    def wire(self) -> dict[str, Any]:
        return {"model": self.model, "schema": self.schema, "read": self.read,
                "facts_written": self.facts, "rejected": dict(sorted(self.rejected.items())),
                "commits": self.commits, "error": self.error, "refused": self.refused,
                "pending": self.pending}


@dataclass
class _Read:
    """One episode's checked answer, ready to commit."""

    episode: EpisodeRecord
    items: list[FactIn]
    rejected: Counter[str]
    units: list[Unit]


def _slot(scope: str, branch: str, ep: EpisodeRecord) -> tuple[str, ...]:
    """Where an episode's passes with no usable answer are counted (models/setaside.py):
    one record per episode, as a pass goes on past an episode the endpoint refused."""
    return ("extract", scope, branch, ep.id)


def _what(scope: str, branch: str, ep: EpisodeRecord) -> str:
    return f"extraction: episode {ep.id} of {scope}/{branch}, read with no fact,"


def _error_key(scope: str, branch: str, model: str) -> str:
    """Where a pass records its last error: per model, as the read marks and the status's
    counts are (a pass of `ampup-memory extract` given another model is not the error of
    a server's model, nor of a server with none)."""
    return "extract_error:" + hashlib.sha256(
        f"{scope}\n{branch}\n{model}".encode()).hexdigest()[:48]


# -- the pass -------------------------------------------------------------------------------------
class Extractor:
    """Extraction for one service and one model (``model`` None: nothing runs)."""

    def __init__(self, svc: MemoryService, model: ChatModel | None) -> None:
        self.svc = svc
        self.model = model

    @property
    def writer(self) -> str:
        return f"extract:{self.model.name}" if self.model else ""

    def _state(self, scope_text: str, branch_text: str | None,
               ) -> tuple[Any, str, Any, tuple[Schema, FactRecord] | None]:
        scope, branch = parse_scope(scope_text), parse_branch(branch_text)
        segs = self.svc._write_view(scope, branch)
        return scope, branch, segs, schema_at(self.svc.index, str(scope), segs,
                                              datetime.now(UTC))

    def pending(self, scope_text: str, branch_text: str | None = None,
                ) -> tuple[list[EpisodeRecord], list[ReadMark]]:
        """Episodes still to read (oldest first) and the read marks of this model and
        schema version in the branch's view."""
        scope, _branch, segs, typed = self._state(scope_text, branch_text)
        if typed is None:
            return [], []
        schema, fact = typed
        types = sorted({t for rule in schema.extract for t in rule.episode_types})
        episodes = self.svc.index.episodes_of_types(str(scope), segs, types)
        if self.model is None:
            return episodes, []
        key = read_key(self.model.name, json.loads(fact.value or "null"))
        marks = self.svc.index.reads(str(scope), segs, key)
        read = {m.episode for m in marks}
        return [e for e in episodes if e.id not in read], marks

    def run(self, scope_text: str, branch_text: str | None = None, limit: int | None = None,
            batch: int = DEFAULT_BATCH,
            progress: Progress | None = None) -> Outcome:
        """Read up to ``limit`` pending episodes, ``batch`` per commit. Stops at the first
        model failure (the rest stay pending; the error is recorded)."""
        if self.model is None:
            return Outcome(NO_MODEL, None)
        scope, branch, _segs, typed = self._state(scope_text, branch_text)
        version = json.loads(typed[1].value or "null") if typed else None
        out = Outcome(self.model.name, version)
        if typed is None:  # no schema: nothing says what to read
            return out
        todo, _ = self.pending(scope_text, branch_text)
        if limit is not None:
            todo = todo[:max(0, limit)]
        if progress:
            progress(0, len(todo))
        done = 0
        rules: dict[str, _Rule] = {}
        # Asked the same way (models/setaside.py): the model and the schema version, as its
        # read marks are keyed.
        key = asked_key(self.model.name, str(version))
        # Episodes refused and held by the asker (`setaside.Asker`), by id.
        held: dict[str, EpisodeRecord] = {}
        asker = Asker(self.svc.index, log)
        while done < len(todo) and out.error is None:
            chunk = todo[done:done + batch]
            bodies = self.svc.index.bodies(str(scope), {e.body_ref for e in chunk})
            reads: list[_Read] = []
            asked = 0
            began = time.monotonic()
            try:
                for ep in chunk:
                    asked += 1
                    if ep.type not in rules:
                        rules[ep.type] = _rule(typed[0], ep.type)
                    try:
                        reads.append(asker.ask(
                            _slot(str(scope), branch, ep), ep.id, key,
                            partial(self._read, typed[0], ep, bodies.get(ep.body_ref, ""),
                                    rules[ep.type]),
                            _what(str(scope), branch, ep)))
                    except SetAside:
                        reads.append(_Read(ep, [], Counter({UNUSABLE: 1}), []))
                    except Refused as exc:
                        out.refused, out.refusal = out.refused + 1, exc.message
                        held[ep.id] = ep
                        log.info("extraction: episode %s of %s/%s refused, left pending: %s",
                                 ep.id, scope, branch, exc.message)
                    # Set aside by a counted refusal: read with no fact, in this batch.
                    aside = asker.settle(end=done + asked == len(todo))
                    reads.extend(_Read(held.pop(slot[-1]), [], Counter({REFUSED: 1}), [])
                                 for slot in aside)
                    out.refused -= len(aside)
                    if time.monotonic() - began >= BATCH_SECONDS:
                        break  # a slow model: commit what it gave before asking on
            except ModelUnavailable as exc:
                out.error = exc.message
            if reads:
                self._commit(scope_text, branch, typed, reads, out)
            done += asked
            if progress:
                progress(done, len(todo))
        self._record_error(str(scope), branch,
                           out.error or (out.refusal if out.refused else None))
        out.pending = len(self.pending(scope_text, branch_text)[0])
        return out

    def _read(self, schema: Schema, ep: EpisodeRecord, body: str, rule: _Rule) -> _Read:
        """Ask the model about one episode and check each candidate (no write)."""
        assert self.model is not None
        etype = by_name(ep.type)
        units = etype.units(body) if etype else []
        answer = self.model.ask(SYSTEM, prompt(schema, ep, units, rule), Answer)
        items: list[FactIn] = []
        rejected: Counter[str] = Counter()
        seen: set[tuple[str, str, str]] = set()
        for raw in answer.facts:
            reason, c = candidate(raw)
            item = None
            if c is not None:
                reason, item = self._check(schema, ep, units, c, rule)
            if item is None:
                rejected[reason] += 1
                continue
            key = (item.entity, item.predicate, json.dumps(item.model_dump(mode="json")["value"],
                                                           sort_keys=True))
            if key in seen:
                rejected["duplicate"] += 1
                continue
            seen.add(key)
            items.append(item)
        return _Read(ep, items, rejected, units)

    @staticmethod
    def _check(schema: Schema, ep: EpisodeRecord, units: list[Unit], c: Candidate,
               rule: _Rule) -> tuple[str, FactIn | None]:
        if not 1 <= c.unit <= len(units):
            return "unit_unknown", None
        quote = locate(c.quote, units[c.unit - 1].text)
        if quote is None:
            return "quote_not_found", None
        try:
            value = check_fact(schema, c.entity, c.predicate, c.value, [])
        except ValidationFailed as exc:
            errors = exc.details.get("errors") or [{}]
            return str(errors[0].get("type", "invalid")), None
        if (c.entity.partition(":")[0], c.predicate) not in rule.allowed:
            return "not_extracted_here", None
        try:
            return "", FactIn.model_validate({
                "entity": c.entity, "predicate": c.predicate, "value": value, "quote": quote,
                "valid_from": ep.occurred_at, "cites": [{"episode": ep.id, "unit": c.unit}]})
        except ValidationError:
            return "invalid", None

    def _commit(self, scope_text: str, branch: str,
                typed: tuple[Schema, FactRecord] | None, reads: list[_Read],
                out: Outcome) -> None:
        """The batch's facts and read marks in one commit, checked against the schema the
        model was asked with (a new schema meanwhile: the batch is dropped, read again)."""
        assert self.model is not None and typed is not None
        svc = self.svc
        scope = parse_scope(scope_text)
        ns = str(scope)
        version = json.loads(typed[1].value or "null")
        key = read_key(self.model.name, version)
        with svc._write_lock:
            segs = svc._write_view(scope, branch)
            ids = [r.episode.id for r in reads]
            cited = svc.index.episodes(ns, segs, ids)
            units_of = {r.episode.id: r.units for r in reads}  # the units the model saw
            commit_id = svc.next_commit_id(scope, branch)
            facts: list[FactRecord] = []
            counts: list[tuple[_Read, int]] = []
            for r in reads:
                wrote = 0
                for item in r.items:
                    try:
                        rec = svc._check_fact(scope, item, cited, units_of, [], self.writer)
                    except ValidationFailed as exc:  # cannot happen after _check; counted
                        errors = exc.details.get("errors") or [{}]
                        r.rejected[str(errors[0].get("type", "invalid"))] += 1
                        continue
                    n = len(facts)  # the value is the schema's normal form already (_check)
                    facts.append(replace(rec, fact_id=fact_id(commit_id, n), ord=n,
                                         branch=branch))
                    wrote += 1
                counts.append((r, wrote))
            now = datetime.now(UTC)
            marks = [ReadMark(episode=r.episode.id, key=key, model=self.model.name,
                              schema=version, facts=wrote, rejected=dict(r.rejected),
                              read_at=now, branch=branch) for r, wrote in counts]
            wrote_total = sum(w for _, w in counts)
            try:
                entry = svc._commit(
                    scope, branch, AUTHOR,
                    f"extract {wrote_total} fact(s) from {len(reads)} episode(s)", [], facts,
                    commit_id, recheck=partial(self._unread, scope, segs, typed, key, ids),
                    reads=marks)
            except Conflict as exc:  # schema changed or another server read them: not ours
                log.info("extraction batch on %s/%s dropped: %s", ns, branch, exc.message)
                return
        out.commits.append(entry.commit_id)
        out.read += len(reads)
        out.facts += wrote_total
        for r, _ in counts:
            out.rejected.update(r.rejected)

    def _unread(self, scope: Any, segs: Any, typed: tuple[Schema, FactRecord], key: str,
                ids: list[str]) -> None:
        """Inside the compare-and-set: the schema is the one asked with, and no other
        commit has marked these episodes read meanwhile (another server's pass)."""
        self.svc._schema_unchanged(scope, segs, typed)
        if self.svc.index.reads(str(scope), segs, key, ids):
            raise Conflict("These episodes were read meanwhile.", code="ALREADY_READ")

    def _record_error(self, scope: str, branch: str, error: str | None) -> None:
        assert self.model is not None  # only a pass records one
        value = json.dumps({"error": error, "at": utc_text(datetime.now(UTC))} if error else {})
        self.svc.index.set_meta(_error_key(scope, branch, self.model.name), value)

    def status(self, scope_text: str, branch_text: str | None = None,
               principal: Principal | None = None) -> dict[str, Any]:
        """What ``GET /extraction/status`` answers. With ``principal``, every count covers
        only the episodes that caller may read (the one read rule): the status of a scope
        never tells how many episodes hide behind ACLs."""
        scope, branch, segs, typed = self._state(scope_text, branch_text)
        todo, marks = self.pending(scope_text, branch_text)
        if principal is not None:
            seen = self.svc.readable_episodes(
                principal, str(scope), segs, [e.id for e in todo] + [m.episode for m in marks])
            todo = [e for e in todo if e.id in seen]
            marks = [m for m in marks if m.episode in seen]
        rejected: Counter[str] = Counter()
        for m in marks:
            rejected.update(m.rejected)
        raw = None if self.model is None else self.svc.index.get_meta(
            _error_key(str(scope), branch, self.model.name))
        last = json.loads(raw) if raw else {}
        return {
            "scope": str(scope), "branch": branch,
            "model": self.model.name if self.model else NO_MODEL,
            "schema": json.loads(typed[1].value or "null") if typed else None,
            "schema_name": typed[0].name if typed else None,
            "episodes_pending": len(todo),
            "episodes_read": len(marks),
            "facts_written": sum(m.facts for m in marks),
            "rejected": dict(sorted(rejected.items())),
            "last_error": last.get("error"),
            "last_error_at": last.get("at"),
        }


    def set_aside(self, scope_text: str, branch_text: str | None = None,
                  principal: Principal | None = None) -> list[Item]:
        """The branch's episodes set aside (models/setaside.py), oldest first; with
        ``principal``, only those the caller may read (as `status` counts them)."""
        scope, branch, _segs, _typed = self._state(scope_text, branch_text)
        models = {} if self.model is None else {"extract": self.model.name}
        return [i for i in set_aside_items(self.svc.index, str(scope), "extract",
                                           {"extract": episode_rule(self.svc, principal)},
                                           models)
                if i["branch"] == branch]


def episode_rule(svc: MemoryService, principal: Principal | None) -> Rule:
    """Extraction's items to a set-aside listing (`setaside.Rule`): an episode is gone
    when its branch's view no longer holds it (the branch or its workspace deleted);
    ``principal`` sees those it may read (the one episode read rule); None: every one."""
    def rule(scope: str, items: list[Item]) -> tuple[list[Item], list[Item]]:
        listed: list[Item] = []
        gone: list[Item] = []
        by_branch: dict[str, list[Item]] = {}
        for item in items:
            by_branch.setdefault(str(item["branch"]), []).append(item)
        for branch, group in by_branch.items():
            try:
                segs = svc.view(scope, branch).segments
            except NotFound:
                gone.extend(group)
                continue
            ids = [str(i["item"]) for i in group]
            held = svc.index.episodes(scope, segs, ids)
            seen = held if principal is None else svc.readable_episodes(principal, scope,
                                                                        segs, ids)
            gone.extend(i for i in group if i["item"] not in held)
            listed.extend(i for i in group if i["item"] in seen)
        return listed, gone
    return rule


def extractor(svc: MemoryService, settings: Any) -> Extractor:
    from ampup_memory.models.chat import Role, chat_model

    return Extractor(svc, chat_model(settings, Role.EXTRACT))

