"""AMP operations, independent of HTTP. The REST routes and the MCP tools both call these."""

from __future__ import annotations

import logging
import math
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from pydantic import ValidationError
from ulid import ULID

from ampup_memory.amp import lifecycle
from ampup_memory.amp.access import Guard, can_manage, can_read, can_write
from ampup_memory.amp.model import (
    AMP_VERSION,
    MAX_CELL_SIZE_BYTES,
    AccessPolicy,
    Content,
    CreateMemory,
    Identity,
    Lifecycle,
    LifecycleRunRequest,
    ListQuery,
    MemoryCell,
    PatchMemory,
    Provenance,
    Scoring,
    SearchRequest,
    Status,
    StoredCell,
    to_utc,
)
from ampup_memory.amp.store.base import (
    CellFilter,
    CellStore,
    PassRecord,
    Screen,
    StatusMove,
    UpdateOutcome,
    UpdateTx,
    iter_all,
)
from ampup_memory.errors import (
    AccessDenied,
    AmpError,
    InvalidTransition,
    PayloadTooLarge,
    RateLimited,
    RetentionWindow,
    ServiceUnavailable,
    ValidationFailed,
    disk_full,
    field_error,
)
from ampup_memory.progress import Progress
from ampup_memory.search.embed import Embedder
from ampup_memory.search.rank import score_parts, with_decay
from ampup_memory.search.tokenize import keyword_terms
from ampup_memory.timefmt import format_time
from ampup_memory.web.body import parse_body, validation_errors, validation_message
from ampup_memory.web.conditional import Condition, etag_of

log = logging.getLogger(__name__)

T = TypeVar("T")

LIFECYCLE_LEASE = "amp-lifecycle"
PROGRESS_EVERY = 500  # cells between two progress reports of a lifecycle pass
# Cells a pass reads whole at once (one `get_many`) before it moves them.
MOVE_BATCH = 200
# Cells a purge pass deletes in one transaction (one page of `deleted_before`). On SQLite
# the write lock is held for the page: 500 took 77 ms at 1M cells beside a writer (about
# 0.15 ms a cell), and writes waited for it (docs/performance.md, session 31).
PURGE_PAGE = 100
LIST_BATCH = 200
MAX_CANDIDATES = 25_600


def utcnow() -> datetime:
    return datetime.now(UTC)


def _kept_out(agent_id: str, write: bool) -> Screen:
    """The screen of `CellStore.get` for a read (``write``: a PATCH or DELETE) by
    ``agent_id``: a deleted cell, or one the read (write) rule refuses by the guard
    column, is refused without its document being read, so the refusal costs what an
    unknown id costs. A guard that does not name the writers (a row written by an older
    version) leaves a write's decision to the whole cell."""

    def kept_out(status: str, guard: Guard, writers_known: bool) -> bool:
        if status == Status.deleted.value:
            return True
        if write:
            return writers_known and not can_write(guard, agent_id)
        return not can_read(guard, agent_id)

    return kept_out


@dataclass(frozen=True)
class ScoringLimit:
    max_patches: int
    window_seconds: int

    @property
    def enabled(self) -> bool:
        return self.max_patches > 0 and self.window_seconds > 0


@dataclass
class LifecycleReport:
    evaluated: int = 0
    transitions: dict[str, int] = field(
        default_factory=lambda: {t.value: 0 for t in lifecycle.Transition}
    )
    purged: int = 0

    def wire(self) -> dict[str, Any]:
        return {
            "evaluated": self.evaluated,
            "transitions": dict(self.transitions),
            "purged": self.purged,
        }


@dataclass
class AmpService:
    store: CellStore
    embedder: Embedder
    scoring_limit: ScoringLimit
    retention_days: int = 30
    purge_retention: bool = False
    clock: Callable[[], datetime] = utcnow

    # ---- create / read ---------------------------------------------------------------

    def create(
        self, agent_id: str | None, raw: bytes | None, vector: list[float] | None = None
    ) -> MemoryCell:
        """Create a cell. ``vector`` lets a bulk loader pass an embedding it computed in a
        batch; it must come from this service's embedder."""
        req = parse_body(CreateMemory, raw, nul=True)
        created_by = agent_id or req.identity.created_by
        if not created_by:
            raise field_error(
                ["body", "identity", "created_by"],
                "identity.created_by is required when no X-AMP-Agent-ID is sent",
                "missing", located=True,
            )
        now = self.clock()
        cell = MemoryCell(
            id=f"mem_{ULID()}",
            amp_version=AMP_VERSION,
            type=req.type,
            content=Content(text=req.content.text, metadata=req.content.metadata),
            identity=Identity(
                owner_id=req.identity.owner_id,
                owner_type=req.identity.owner_type,
                created_by=created_by,
                session_id=req.identity.session_id,
            ),
            scoring=Scoring(
                importance=req.scoring.importance,
                confidence=req.scoring.confidence,
                decay_rate=req.scoring.decay_rate,
                access_count=0,
            ),
            lifecycle=Lifecycle(
                created_at=now,
                last_accessed_at=now,
                last_updated_at=now,
                expires_at=to_utc(req.lifecycle.expires_at) if req.lifecycle.expires_at else None,
                status=Status.active,
            ),
            access_policy=AccessPolicy(**req.access_policy.model_dump()),
            provenance=req.provenance,
        )
        self._check_size(cell)
        if vector is None:
            vector = self.embedder.embed([cell.content.text])[0]
        self.store.create(StoredCell(cell=cell), vector)
        return cell

    def _readable(self, cell_id: str, agent_id: str) -> StoredCell:
        stored = self.store.get(cell_id, _kept_out(agent_id, write=False))
        if stored is None or stored.cell.lifecycle.status is Status.deleted:
            raise AccessDenied()
        if not can_read(stored.cell, agent_id):
            raise AccessDenied()
        return stored

    def get(self, cell_id: str, agent_id: str) -> MemoryCell:
        """A read: checks the read rule, then counts the access atomically. On a full disk
        the cell is handed over uncounted: counting is a write, and a memory that can no
        longer learn should still answer what it holds (writes answer 507 meanwhile)."""
        stored = self._readable(cell_id, agent_id)
        try:
            touched = self.store.touch(cell_id, self.clock())
        except Exception as exc:
            if not disk_full(exc):
                raise
            log.warning("disk full: a read of %s was answered without counting the access",
                        cell_id)
            return stored.cell
        if touched is None:
            raise AccessDenied()
        return touched.cell

    def peek(self, cell_id: str, agent_id: str) -> MemoryCell:
        """The read rule without counting an access (internal callers, not the wire)."""
        return self._readable(cell_id, agent_id).cell

    # ---- write -----------------------------------------------------------------------

    def _writable(self, stored: StoredCell | None, agent_id: str) -> StoredCell:
        if stored is None or stored.cell.lifecycle.status is Status.deleted:
            raise AccessDenied()
        if not can_write(stored.cell, agent_id):
            raise AccessDenied()
        return stored

    @staticmethod
    def _check_size(cell: MemoryCell, reveal: bool = True) -> None:
        """413 for a cell over the limit; its size only to a caller who may read it."""
        size = cell.size_bytes()
        if size <= MAX_CELL_SIZE_BYTES:
            return
        if not reveal:
            raise PayloadTooLarge(
                f"The changed cell would be over the limit of {MAX_CELL_SIZE_BYTES} bytes.",
                details={"max_cell_size_bytes": MAX_CELL_SIZE_BYTES},
            )
        raise PayloadTooLarge(
            f"The cell is {size} bytes; the limit is {MAX_CELL_SIZE_BYTES}.",
            details={"size_bytes": size, "max_cell_size_bytes": MAX_CELL_SIZE_BYTES},
        )

    @staticmethod
    def _check_manage(stored: StoredCell, req: PatchMemory, agent_id: str) -> None:
        # Sent at all, not "changed": comparing would tell a blind writer the stored value.
        if (req.access_policy is not None or req.identity is not None) and not can_manage(
                stored.cell, agent_id):
            raise AccessDenied()

    def _check_budget(self, tx: UpdateTx, now: datetime) -> None:
        limit = self.scoring_limit
        if not limit.enabled:
            return
        window = timedelta(seconds=limit.window_seconds)
        used = tx.scoring_patches_since(now - window)
        if len(used) >= limit.max_patches:
            retry = max(1, math.ceil((used[0] + window - now).total_seconds()))
            raise RateLimited(
                f"At most {limit.max_patches} scoring PATCHes per cell every "
                f"{limit.window_seconds} seconds.",
                details={"retry_after_seconds": retry},
                headers={"Retry-After": str(retry)},
            )

    def patch(self, cell_id: str, agent_id: str, raw: bytes | None,
              condition: Condition | None = None) -> MemoryCell:
        """Apply a PATCH and return the new cell; what the caller may see of it is
        `write_answer`'s business. Order of checks: access 403 -> precondition 412 ->
        validation 422 -> access_policy/identity 403 -> budget 429 -> transition 409 ->
        size 413. ``condition`` (If-Match / If-None-Match) is checked again on the locked
        cell, in the write's own transaction: of two writers holding one ETag, one wins."""
        stored = self._writable(self.store.get(cell_id, _kept_out(agent_id, write=True)),
                                agent_id)
        _check_condition(stored, condition)  # early: 412 before the body is judged
        req = parse_body(PatchMemory, raw, nul=True)
        self._check_manage(stored, req, agent_id)
        vector = (
            self.embedder.embed([req.content.text])[0]
            if req.content is not None and req.content.text is not None
            else None
        )

        def change(stored: StoredCell, tx: UpdateTx) -> UpdateOutcome:
            self._writable(stored, agent_id)
            _check_condition(stored, condition)
            self._check_manage(stored, req, agent_id)
            reveal = can_read(stored.cell, agent_id)
            now = self.clock()
            new = _apply_patch(stored, req, now, reveal)
            carries_scoring = req.scoring is not None
            if carries_scoring:
                self._check_budget(tx, now)
            _check_transition(stored.cell.lifecycle.status, req, reveal)
            self._check_size(new.cell, reveal)
            return UpdateOutcome(new, count_scoring_patch=carries_scoring, vector=vector)

        result = self.store.update(cell_id, change)
        if result is None:
            raise AccessDenied()
        return result.cell

    def delete(self, cell_id: str, agent_id: str, condition: Condition | None = None) -> None:
        """Delete an archived cell; ``condition`` as for :meth:`patch`."""
        _check_condition(self._writable(self.store.get(cell_id, _kept_out(agent_id, write=True)),
                                        agent_id), condition)

        def change(stored: StoredCell, tx: UpdateTx) -> UpdateOutcome:
            self._writable(stored, agent_id)
            _check_condition(stored, condition)
            status = stored.cell.lifecycle.status
            if status is not Status.archived:
                raise _transition_error(
                    "Only archived cells can be deleted; this one is {status}. "
                    "Archive it first (PATCH lifecycle.status = archived).",
                    status, Status.deleted, can_read(stored.cell, agent_id))
            now = self.clock()
            life = stored.cell.lifecycle.model_copy(update={
                "status": Status.deleted,
                "last_updated_at": lifecycle.touched_at(stored.cell, now)})
            cell = stored.cell.model_copy(update={"lifecycle": life})
            return UpdateOutcome(StoredCell(cell=cell, stale_since=None, deleted_at=now))

        if self.store.update(cell_id, change) is None:
            raise AccessDenied()

    # ---- listing and search ----------------------------------------------------------

    def list_cells(self, agent_id: str, query: ListQuery) -> dict[str, Any]:
        """A page of readable cells, newest first. Paging counts only readable cells."""
        page, more = self._readable_page(agent_id, query)
        return {
            "results": [c.wire() for c in page],
            "returned": len(page),
            "has_more": more,
            "offset": query.offset,
            "limit": query.limit,
        }

    def list_decay(self, agent_id: str, query: ListQuery) -> dict[str, Any]:
        """``list_cells``' page with each cell's decay score at ``now`` and the time its
        clock runs from (``lifecycle.decay_score`` and ``lifecycle.clock``, the one rule).
        Listing is not a read: no clock moves."""
        page, more = self._readable_page(agent_id, query)
        now = self.clock()
        return {
            "now": format_time(now),
            "stale_below": lifecycle.STALE_THRESHOLD,
            "cells": [{"cell": c.wire(), "decay_score": lifecycle.decay_score(c, now),
                       "decay_clock": format_time(lifecycle.clock(c))} for c in page],
            "has_more": more,
            "offset": query.offset,
            "limit": query.limit,
        }

    def _readable_page(self, agent_id: str, query: ListQuery,
                       ) -> tuple[list[MemoryCell], bool]:
        statuses = [] if query.status is Status.deleted else [query.status]
        flt = CellFilter(
            agent_id=agent_id,
            statuses=statuses,
            owner_id=query.owner_id,
            types=[query.type] if query.type else None,
        )
        # The readable cells before the page are counted, not kept: with every cell kept,
        # one listing at offset 2**31 - 1 held all the cells its caller may read in memory
        # at once (2,000 public cells of 60 KB: 126 MB more, per request).
        skipped = 0
        page: list[MemoryCell] = []
        before: str | None = None
        while True:
            batch = self.store.list_candidates(flt, before, max(LIST_BATCH, query.limit + 1))
            if not batch:
                return page, False
            for stored in batch:
                if not can_read(stored.cell, agent_id):
                    continue
                if skipped < query.offset:
                    skipped += 1
                elif len(page) < query.limit:
                    page.append(stored.cell)
                else:
                    return page, True
            before = batch[-1].cell.id

    def search(self, agent_id: str, req: SearchRequest) -> dict[str, Any]:
        ranked = self.rank(agent_id, req)
        page_ids = [cell_id for cell_id, _ in ranked[req.offset : req.offset + req.limit]]
        cells = {s.cell.id: s.cell for s in self.store.get_many(page_ids)}
        # A cell deleted or re-permissioned since it was ranked drops out of the page.
        page = [cells[i] for i in page_ids if i in cells and can_read(cells[i], agent_id)
                and cells[i].lifecycle.status in req.statuses()]
        return {
            "results": [cell.wire() for cell in page],
            "returned": len(page),
            "has_more": len(ranked) > req.offset + req.limit,
            "offset": req.offset,
            "limit": req.limit,
            "query": req.query,
        }

    def rank(self, agent_id: str, req: SearchRequest) -> list[tuple[str, float]]:
        """Ids of readable cells matching the request with their blended scores, best first.

        Scores come from the hits alone (keyword, cosine, access guard, decay inputs), so
        only the cells of the page are ever loaded.
        """
        want = req.offset + req.limit + 1
        flt = CellFilter(
            agent_id=agent_id, statuses=req.statuses(), owner_id=req.owner_id, types=req.types
        )
        vector = self.embedder.embed([req.query])[0]
        terms = keyword_terms(req.query)
        k = min(max(100, want * 4), MAX_CANDIDATES)
        while True:
            found = self.store.search_candidates(flt, terms, vector, k)
            # The read rule runs on every hit before scores are normalised, so hidden
            # cells shape neither the ranking nor the counts.
            hits = [h for h in found if can_read(h.guard, agent_id)]
            if len(hits) >= want or len(found) < k or k >= MAX_CANDIDATES:
                break
            k *= 4  # hidden cells took the candidate slots: look deeper
        parts = score_parts([h.keyword for h in hits], [h.cosine for h in hits])
        now = self.clock()
        scored = [
            (h.cell_id, with_decay(p.relevance, lifecycle.decay_score(h.decay, now)))
            for h, p in zip(hits, parts, strict=True)
        ]
        scored.sort(key=lambda item: (-item[1], item[0]))
        return scored

    # ---- lifecycle -------------------------------------------------------------------

    def run_lifecycle(
        self, req: LifecycleRunRequest, wait_seconds: float = 30.0,
        progress: Progress | None = None,
    ) -> LifecycleReport:
        """One pass of the engine; at most one runs at a time across all processes.
        ``progress`` is told (cells evaluated, active and stale cells) as it goes."""
        if req.dry_run:
            return self._pass(req, progress)
        deadline = time.monotonic() + wait_seconds
        while True:
            with self.store.lease(LIFECYCLE_LEASE, ttl_seconds=600) as held:
                if held:
                    return self._pass(req, progress)
            if time.monotonic() >= deadline:
                raise ServiceUnavailable(
                    "Another lifecycle pass is running; try again shortly.",
                    headers={"Retry-After": "5"},
                )
            time.sleep(0.2)

    def run_lifecycle_if_free(self) -> LifecycleReport | None:
        """For timers: run a pass only if no other process is running one."""
        with self.store.lease(LIFECYCLE_LEASE, ttl_seconds=600) as held:
            if not held:
                return None
            return self._pass(LifecycleRunRequest())

    def _pass(self, req: LifecycleRunRequest,
              progress: Progress | None = None) -> LifecycleReport:
        started = self.clock()
        now = to_utc(req.now) if req.now else started
        report = LifecycleReport()
        total = 0
        if progress is not None:
            counts = self.store.status_counts()
            total = counts.get(Status.active.value, 0) + counts.get(Status.stale.value, 0)
            progress(0, total)
        pending: dict[str, lifecycle.Decision] = {}
        for standing in iter_all(self.store):
            report.evaluated += 1
            if progress is not None and report.evaluated % PROGRESS_EVERY == 0:
                progress(report.evaluated, max(total, report.evaluated))
            decision = lifecycle.evaluate(standing, now)
            if decision is None:
                continue
            if req.dry_run:
                report.transitions[decision.transition.value] += 1
                continue
            pending[standing.cell_id] = decision
            if len(pending) >= MOVE_BATCH:
                self._move(pending, now, report)
                pending.clear()
        self._move(pending, now, report)
        if progress is not None:
            progress(report.evaluated, report.evaluated)  # the count moved if cells came
        if self.purge_retention:
            # The retention window is judged by the real clock only: a what-if `now`
            # moves statuses, never the erasure of a cell still inside its window.
            cutoff = self.clock() - timedelta(days=self.retention_days)
            after = ""
            while ids := self.store.deleted_before(cutoff, PURGE_PAGE, after):
                after = ids[-1]
                if req.dry_run:
                    report.purged += len(ids)
                    continue
                report.purged += self.store.purge(ids)  # one transaction a page
            if not req.dry_run:
                # Once a pass, not a page: on SQLite it merges the whole keyword index
                # (about 1 s at 1M cells, the write lock held); pages are PURGE_PAGE cells.
                self.store.erase_purged()
        if not req.dry_run:  # the history (one row per pass, still under the lease)
            self.store.record_pass(PassRecord(
                started_at=started, finished_at=self.clock(), holder=_process_name(),
                evaluated=report.evaluated, transitions=dict(report.transitions),
                purged=report.purged, states=self.store.status_counts(),
            ))
        return report

    def _move(self, decided: dict[str, lifecycle.Decision], now: datetime,
              report: LifecycleReport) -> None:
        """Apply a pass's decisions to the whole cells, read now, and count those applied.
        A cell read, written or moved since the pass read its standing is judged again,
        and `set_statuses` leaves one that changes between this read and the write."""
        moves: list[StatusMove] = []
        for stored in self.store.get_many(list(decided)):
            decision = decided[stored.cell.id]
            if lifecycle.evaluate(stored, now) != decision:
                continue
            stale_since = (
                now if decision.new_status is Status.stale
                else stored.stale_since if decision.new_status is Status.archived
                else None
            )
            moves.append(StatusMove(stored, decision.new_status, stale_since))
        for cell_id in self.store.set_statuses(moves):
            report.transitions[decided[cell_id].transition.value] += 1

    def purge(self, cell_id: str) -> int:
        """Hard-delete one deleted cell, never inside its retention window."""
        stored = self.store.get(cell_id)
        if stored is None:
            # The contract's one answer for an unknown id, even to an admin.
            raise AccessDenied()
        if stored.cell.lifecycle.status is not Status.deleted or stored.deleted_at is None:
            raise InvalidTransition(
                "Only deleted cells can be purged; this one is "
                f"{stored.cell.lifecycle.status.value}.",
                details={"from": stored.cell.lifecycle.status.value, "to": "purged"},
            )
        now = self.clock()
        when = lifecycle.purgeable_at(stored.deleted_at, self.retention_days)
        if now < when:
            remaining = math.ceil((when - now).total_seconds() / lifecycle.SECONDS_PER_DAY)
            raise RetentionWindow(
                f"Deleted at {format_time(stored.deleted_at)}; purgeable at "
                f"{format_time(when)} ({remaining} day{'' if remaining == 1 else 's'} "
                "remaining).",
                details={
                    "deleted_at": format_time(stored.deleted_at),
                    "purgeable_at": format_time(when),
                    "days_remaining": remaining,
                },
            )
        gone = self.store.purge([cell_id])
        self.store.erase_purged()
        return gone


# A read counts an access: these two fields move on every GET, and are not a write.
_ACCESS_FIELDS = (("scoring", "access_count"), ("lifecycle", "last_accessed_at"))


def cell_etag(cell: MemoryCell) -> str:
    """The cell's version: a hash of everything a write can change (content, type, scores,
    policy, provenance, status, expiry, last_updated_at), from the stored cell alone, so
    every server and face agrees. The access count and last access a read moves are left
    out: two readers never fail each other's conditional writes."""
    wire = cell.wire()
    for part, name in _ACCESS_FIELDS:
        wire[part] = {k: v for k, v in wire[part].items() if k != name}
    return etag_of(wire)


def _check_condition(stored: StoredCell, condition: Condition | None) -> None:
    """412 unless the cell meets the request's If-Match / If-None-Match; only ever asked
    after the access rule let the caller write the cell (never a probe)."""
    if condition is not None and not condition.empty:
        condition.check(cell_etag(stored.cell))


def _process_name() -> str:
    """Who ran a lifecycle pass: enough to tell server processes apart in the history."""
    return f"{socket.gethostname()}:{os.getpid()}"


def write_answer(cell: MemoryCell, agent_id: str) -> dict[str, Any]:
    """What a successful PATCH answers: the cell to a caller who may read it, else only its
    id. `writable_by` grants no read, so a write never shows more than a GET would."""
    return cell.wire() if can_read(cell, agent_id) else {"id": cell.id}


def _transition_error(message: str, current: Status, wanted: Status,
                      reveal: bool) -> InvalidTransition:
    """409 INVALID_TRANSITION; the current status only to a caller who may read the cell
    (``message`` names it as ``{status}``; a blind writer reads "this one is not")."""
    if not reveal:
        return InvalidTransition(message.format(status="not"), details={"to": wanted.value})
    return InvalidTransition(message.format(status=current.value),
                             details={"from": current.value, "to": wanted.value})


def _check_transition(current: Status, req: PatchMemory, reveal: bool = True) -> None:
    wanted = req.lifecycle.status if req.lifecycle else None
    if wanted is None or wanted is current:
        return
    if wanted is Status.deleted:
        raise _transition_error("Use DELETE to delete a cell.", current, wanted, reveal)
    if current is Status.archived:
        raise _transition_error(
            "Archived cells cannot change status; re-create the cell instead.",
            current, wanted, reveal)


def _same_instant(a: datetime, b: datetime) -> bool:
    return to_utc(a) == to_utc(b)


def _apply_patch(stored: StoredCell, req: PatchMemory, now: datetime,
                 reveal: bool = True) -> StoredCell:
    """The deep merge of a PATCH into a cell; raises 422 for a change to a fixed field.

    Without ``reveal`` (the caller may write but not read) a sent ``created_at`` is refused
    whatever its value: "equal is ignored" would confirm the hidden value.
    """
    cell = stored.cell
    errors: list[dict[str, Any]] = []

    def fixed(loc: list[str], sent: Any, kept: Any) -> None:
        if sent is not None and sent != kept:
            errors.append({"loc": ["body", *loc], "msg": f"{'.'.join(loc)} cannot be changed",
                           "type": "immutable"})

    fixed(["id"], req.id, cell.id)
    fixed(["amp_version"], req.amp_version, cell.amp_version)
    if req.identity is not None:
        for name in req.identity.model_fields_set:
            sent = getattr(req.identity, name)
            kept = getattr(cell.identity, name)
            if sent != kept:
                errors.append({"loc": ["body", "identity", name],
                               "msg": f"identity.{name} cannot be changed", "type": "immutable"})
    for loc, sent_at in ((["created_at"], req.created_at),
                         (["lifecycle", "created_at"], req.lifecycle and req.lifecycle.created_at)):
        if sent_at and not (reveal and _same_instant(sent_at, cell.lifecycle.created_at)):
            errors.append({"loc": ["body", *loc], "msg": "created_at cannot be changed",
                           "type": "immutable"})
    if errors:
        raise ValidationFailed(validation_message(errors), errors, located=True)

    content = cell.content
    if req.content is not None:
        content = Content(
            text=req.content.text if req.content.text is not None else content.text,
            metadata=req.content.metadata if req.content.metadata is not None else content.metadata,
        )
    scoring = cell.scoring
    if req.scoring is not None:
        scoring = scoring.model_copy(
            update={k: getattr(req.scoring, k) for k in req.scoring.model_fields_set
                    if getattr(req.scoring, k) is not None}
        )
    policy = cell.access_policy
    if req.access_policy is not None:
        policy = AccessPolicy(
            readable_by=_pick(req.access_policy.readable_by, policy.readable_by),
            writable_by=_pick(req.access_policy.writable_by, policy.writable_by),
            public=_pick(req.access_policy.public, policy.public),
        )
    provenance = cell.provenance
    if req.provenance is not None:
        provenance = Provenance(**{
            **provenance.model_dump(),
            **{k: getattr(req.provenance, k) for k in req.provenance.model_fields_set},
        })
    life = cell.lifecycle.model_copy(update={"last_updated_at": lifecycle.touched_at(cell, now)})
    stale_since = stored.stale_since
    if req.lifecycle is not None:
        if "expires_at" in req.lifecycle.model_fields_set:
            expires = req.lifecycle.expires_at
            life = life.model_copy(update={"expires_at": to_utc(expires) if expires else None})
        wanted = req.lifecycle.status
        if wanted is not None and wanted is not life.status:
            life = life.model_copy(update={"status": wanted})
            stale_since = now if wanted is Status.stale else None
    new_cell = cell.model_copy(update={
        "type": req.type or cell.type,
        "content": content,
        "scoring": scoring,
        "access_policy": policy,
        "provenance": provenance,
        "lifecycle": life,
    })
    try:  # re-validate the merged whole: a merge must not produce an invalid cell
        new_cell = MemoryCell.model_validate(new_cell.model_dump())
    except ValidationError as exc:
        raise validation_errors(exc) from exc
    return StoredCell(cell=new_cell, stale_since=stale_since, deleted_at=stored.deleted_at)


def _pick(sent: T | None, kept: T) -> T:
    return kept if sent is None else sent


__all__ = ["AmpService", "ScoringLimit", "LifecycleReport", "write_answer", "cell_etag",
           "AmpError"]
