"""Setting aside what a model cannot answer: one rule for every model pass.

An item (an episode to extract, a session to judge, a situation to learn a note for, a
scope's documents to compile) whose every attempt got an answer of the wrong shape
(`chat.AnswerUnusable`) on `UNUSABLE_PASSES` passes in a row, asked the same way, is set
aside: asked again, the model is likely to give the same answer, and each pass would pay a
call for it and say nothing new. "The same way" is ``key``: the model and the inputs
(`asked_key`); a new model or changed inputs ask again. Outages (no answer at all) neither
count nor break the run. The count lives in the read index's bookkeeping, one record per
``slot`` (one per item: extraction's episode, judge's session, learn's situation,
compile's scope), so a pass may go on past an item it could not use. A slot is the kind of
work, the scope, then what names the item in it; :func:`set_aside_items` lists the records
that set their item aside. Being bookkeeping, not data, the records go with a read index
rebuild: every item is then asked again, up to UNUSABLE_PASSES times.

A request the endpoint refuses (HTTP 400, 413, 422: `chat.RequestRefused`, "context length
exceeded") is that item's problem too, unless the endpoint refuses every request: each pass
asks through one `Asker`, which holds it apart from an outage (its docstring).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar

from ampup_memory.models.chat import AnswerUnusable, RequestRefused

UNUSABLE_PASSES = 3
REFUSED_RUN = 3  # refused requests before any answer that make a pass an outage (`Asker`)
KINDS = ("extract", "judge", "learn", "compile")  # a slot's first part
_PREFIX = "unusable:"
T = TypeVar("T")


class Bookkeeping(Protocol):
    def get_meta(self, key: str) -> str | None: ...
    def set_meta(self, key: str, value: str) -> None: ...


class Listing(Bookkeeping, Protocol):
    def meta_items(self, prefix: str) -> list[tuple[str, str]]: ...


Item = dict[str, Any]
Rule = Callable[[str, list[Item]], tuple[list[Item], list[Item]]]
"""What one kind's records are to a listing (`set_aside_items`): given one scope's items,
those to list (the item still exists and the caller may read it) and those whose item is
gone (deleted, or no longer work for the model: their records are dropped). Any other
exists but is hidden from the caller: not listed, and nothing says it exists."""


class SetAside(Exception):
    """The item is set aside; ``reason`` is why its last answer was refused."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class AsideNews:
    """For a timer's log line: whether the count of its kind's items set aside (as the
    listing shows them, `set_aside_items`) changed since the pass that last said it. An
    item stays set aside until its model or inputs change, so a line every pass said
    nothing new."""

    def __init__(self) -> None:
        self._said = 0

    def changed(self, count: int) -> bool:
        changed, self._said = count != self._said, count
        return changed


def asked_key(model: str, *inputs: str) -> str:
    """What asking the same way means: the model's name and everything it is shown. Every
    key is ``<model>:<digest>`` (`set_aside_items` names the model from it)."""
    digest = hashlib.sha256()
    for part in (model, *inputs):
        digest.update(part.encode())
        digest.update(b"\0")
    return f"{model}:{digest.hexdigest()[:32]}"


def _meta_key(slot: Sequence[str]) -> str:
    return _PREFIX + hashlib.sha256("\n".join(slot).encode()).hexdigest()[:55]


def _record(index: Bookkeeping, slot: Sequence[str]) -> dict[str, Any]:
    raw = index.get_meta(_meta_key(slot))
    return json.loads(raw) if raw else {}


def set_aside_reason(index: Bookkeeping, slot: Sequence[str], item: str, key: str
                     ) -> str | None:
    """Why ``item``, asked as ``key``, is set aside; None when it is not."""
    last = _record(index, slot)
    if (last.get("item"), last.get("key")) != (item, key):
        return None
    return str(last.get("reason", "")) if int(last.get("passes", 0)) >= UNUSABLE_PASSES else None


def count_unusable(index: Bookkeeping, slot: Sequence[str], item: str, key: str,
                   reason: str) -> bool:
    """Count one more pass in a row whose every attempt at ``item`` got an unusable answer;
    True when that makes it set aside."""
    last = _record(index, slot)
    same = (last.get("item"), last.get("key")) == (item, key)
    passes = int(last.get("passes", 0)) + 1 if same else 1
    index.set_meta(_meta_key(slot), json.dumps({
        "slot": list(slot), "item": item, "key": key, "passes": passes, "reason": reason,
        "at": datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")}))
    return passes >= UNUSABLE_PASSES


def count_or_set_aside(index: Bookkeeping, slot: Sequence[str], item: str, key: str,
                       reason: str, log: logging.Logger, what: str) -> bool:
    """`count_unusable`, and when that sets ``item`` aside one WARNING line naming
    ``what`` and the reason; True then."""
    if not count_unusable(index, slot, item, key, reason):
        return False
    log.warning("%s set aside after %d passes with no usable answer (a new model or "
                "changed inputs ask again): %s", what, UNUSABLE_PASSES, reason)
    return True


def ask_or_set_aside(index: Bookkeeping, slot: Sequence[str], item: str, key: str,
                     ask: Callable[[], T], log: logging.Logger, what: str) -> T:
    """``ask()`` unless ``item`` is set aside. Raises `SetAside` when it is, or becomes so
    with this pass (then one WARNING line names ``what`` and the reason); an unusable answer
    short of that, or an outage, raises as ``ask`` did."""
    reason = set_aside_reason(index, slot, item, key)
    if reason is not None:
        raise SetAside(reason)
    try:
        answer = ask()
    except AnswerUnusable as exc:
        if not count_or_set_aside(index, slot, item, key, exc.message, log, what):
            raise
        raise SetAside(exc.message) from exc
    if _record(index, slot):  # counted before, usable now: not set aside any more
        index.set_meta(_meta_key(slot), "")
    return answer


class Refused(Exception):
    """The endpoint refused this item's request (`chat.RequestRefused`), and the pass goes
    on; `Asker` holds it to count toward setting the item aside. ``message`` is the
    endpoint's, named as on `chat.ModelUnavailable`, so a pass that treats both alike reads
    it from either."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class Asker:
    """How every model pass asks about its items (extraction's episodes, the judge's
    sessions, learn's situations, compile's scopes): each through `ask_or_set_aside`.

    A request the endpoint refuses (HTTP 400, 413, 422: "context length exceeded") is that
    item's problem, not the endpoint's: `ask` raises `Refused`, the pass goes on with the
    next item, and the refusal counts toward setting the item aside (as an answer of the
    wrong shape does) once the endpoint answers another item of the pass, or the pass runs
    out of items first (`settle`). Only REFUSED_RUN items refused before any answer say
    the endpoint refuses everything (a model that takes no JSON mode, say): `ask` then
    raises that `RequestRefused`, `stopped` is set, the pass stops as at an outage, and
    nothing it held is counted. An outage (no answer at all) raises as ``ask`` did and
    neither counts nor breaks the run."""

    def __init__(self, index: Bookkeeping, log: logging.Logger) -> None:
        self._index, self._log = index, log
        self._held: list[tuple[tuple[str, ...], str, str, str, str]] = []
        self._answered = False
        self._run = 0  # refusals before the endpoint answered any item of the pass
        self.stopped = False

    def ask(self, slot: Sequence[str], item: str, key: str, ask: Callable[[], T],
            what: str) -> T:
        """`ask_or_set_aside`, with a refused request held (`Refused`) or, the
        REFUSED_RUN-th before any answer, raised as the endpoint's outage."""
        try:
            answer = ask_or_set_aside(self._index, slot, item, key, ask, self._log, what)
        except RequestRefused as exc:
            if not self._answered:
                self._run += 1
                if self._run >= REFUSED_RUN:
                    self._held.clear()
                    self.stopped = True
                    raise
            self._held.append((tuple(slot), item, key, exc.message, what))
            raise Refused(exc.message) from exc
        self._answered = True
        return answer

    def settle(self, end: bool = False) -> list[tuple[str, ...]]:
        """Count the held refusals once the endpoint answered another item of this pass,
        or (``end``) when the pass ran out of items; the slots that sets aside (one
        WARNING line each)."""
        if not self._held or not (self._answered or end):
            return []
        newly = [slot for slot, item, key, reason, what in self._held
                 if count_or_set_aside(self._index, slot, item, key, reason, self._log, what)]
        self._held.clear()
        return newly


def set_aside_items(index: Listing, scope: str | None, kind: str | None,
                    rules: Mapping[str, Rule], models: Mapping[str, str] | None = None
                    ) -> list[Item]:
    """Every item set aside now (of one scope, of one kind) that its kind's rule lists,
    oldest first: ``kind``, ``scope``, ``item``, ``branch`` (extraction's; None for the
    others), the ``model`` that was asked, the ``reason`` of its last refused answer,
    ``passes`` and ``at`` (when the last one was counted). The one listing of the set-aside
    records (every route, command and timer count reads it): a record whose item the rule
    says is gone is dropped, one of a kind with no rule is not listed. Records of an older
    version, with no slot, are left out (they count on, and are listed once they count
    again).

    ``models`` names the model each kind asks now (a kind with none configured: absent).
    A record another model set aside is not listed: the next pass asks that item again,
    as `set_aside_reason` says (the key names the model). It is kept, not dropped, so it
    holds again should that model come back."""
    found: dict[tuple[str, str], list[tuple[str, Item]]] = {}
    for meta, raw in index.meta_items(_PREFIX):
        try:
            rec = json.loads(raw) if raw else {}
        except ValueError:
            continue
        slot = rec.get("slot") if isinstance(rec, dict) else None
        if (not isinstance(slot, list) or len(slot) < 2
                or int(rec.get("passes", 0)) < UNUSABLE_PASSES):
            continue
        if ((scope is not None and slot[1] != scope) or (kind is not None and slot[0] != kind)
                or slot[0] not in rules):
            continue
        model = str(rec.get("key", "")).rpartition(":")[0]
        if models is not None and models.get(slot[0], model) != model:
            continue
        found.setdefault((slot[0], slot[1]), []).append((meta, {
            "kind": slot[0], "scope": slot[1], "item": str(rec.get("item")),
            "branch": slot[2] if slot[0] == "extract" else None,
            "model": model,
            "reason": rec.get("reason"), "passes": rec.get("passes"), "at": rec.get("at")}))
    out: list[Item] = []
    for (kind_of, scope_of), pairs in found.items():
        listed, gone = rules[kind_of](scope_of, [item for _, item in pairs])
        dropped = {id(item) for item in gone}
        for meta, item in pairs:
            if id(item) in dropped:
                index.set_meta(meta, "")  # as a usable answer clears it
        out.extend(listed)
    return sorted(out, key=order)


def order(item: Item) -> tuple[str, str, str, str, str]:
    """A listing's order (oldest first), and so what a page's cursor names."""
    return (str(item["at"]), item["kind"], item["scope"], item["branch"] or "",
            str(item["item"]))
