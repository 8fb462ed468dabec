"""The AmpUp advice routes, once for both clients: advice, runs, sessions, situations,
notes, procedures and the items a model pass set aside."""

from __future__ import annotations

from collections.abc import Sequence

from ampup_memory.client._ampup_face import AmpUpFace, R, W, _fields, _names
from ampup_memory.client._base import path_segment


class AdviceCalls(AmpUpFace[R, W]):
    def advice(self, scope: str, task: str, session: str | None = None) -> R:
        """The advice for ``task`` (recorded on ``session``): ``{advice}``."""
        return self._post("/advice", _fields(scope=scope, task=task, session=session))

    # ---- runs ------------------------------------------------------------------------

    def record_run(
        self, scope: str, task: str, *, trace: str | None = None, outcome: str | None = None,
        advice_key: str | None = None, acl: str | Sequence[str] | None = None,
        branch: str | None = None, idempotency_key: str | None = None,
    ) -> R:
        """Record finished work: ``{id, commit, created}``. Without ``acl`` only you may read
        it. With ``idempotency_key`` (e.g. a ``uuid4()`` you keep), sending it again after a
        lost answer returns the run the first call recorded (``created: False``)."""
        return self._post("/runs", _fields(
            scope=scope, task=task, trace=trace, outcome=outcome, advice_key=advice_key,
            acl=self._optional_acl(acl), branch=branch, idempotency_key=idempotency_key))

    def reward_run(self, run: str, reward: float, reason: str) -> R:
        """Reward a run or an ended session, in [-1, 1]: ``{id, reward, commit}``."""
        return self._post("/runs/reward", {"run": run, "reward": reward, "reason": reason})

    def get_run(self, run: str) -> R:
        return self._get(f"/runs/{path_segment(run, 'run')}")

    def runs(
        self, scope: str, *, branch: str | None = None, limit: int | None = None,
        before: str | None = None,
    ) -> R:
        """One page of the runs you may read, newest first: ``{runs, next_before}``."""
        return self._get("/runs", scope=scope, branch=branch, limit=limit, before=before)

    def iter_runs(
        self, scope: str, *, branch: str | None = None, page_size: int = 1000,
    ) -> W:
        """Every run you may read, newest first, page by page."""
        return self._listing("/runs", "runs", "before", scope=scope, branch=branch,
                             limit=page_size)

    # ---- sessions --------------------------------------------------------------------

    def start_session(
        self, scope: str, task: str | None = None, *, acl: str | Sequence[str] | None = None,
        branch: str | None = None, idempotency_key: str | None = None,
    ) -> R:
        """Open a session (advice served on it is recorded): ``{id, commit, created}``;
        ``idempotency_key`` as for `record_run`."""
        return self._post("/sessions/start", _fields(
            scope=scope, task=task, acl=self._optional_acl(acl), branch=branch,
            idempotency_key=idempotency_key))

    def end_session(
        self, session: str, transcript: str, outcome: str, *, reward: float | None = None,
        reason: str | None = None,
    ) -> R:
        """End it; with ``reward`` that is its explicit reward. Answers the ended session."""
        return self._post("/sessions/end", _fields(
            session=session, transcript=transcript, outcome=outcome, reward=reward,
            reason=reason))

    def get_session(self, session: str) -> R:
        return self._get(f"/sessions/{path_segment(session, 'session')}")

    def sessions(
        self, scope: str, *, branch: str | None = None, limit: int | None = None,
        before: str | None = None,
    ) -> R:
        """One page of the sessions you may read, newest first: ``{sessions, next_before}``."""
        return self._get("/sessions", scope=scope, branch=branch, limit=limit, before=before)

    def iter_sessions(
        self, scope: str, *, branch: str | None = None, page_size: int = 1000,
    ) -> W:
        """Every session you may read, newest first, page by page."""
        return self._listing("/sessions", "sessions", "before", scope=scope, branch=branch,
                             limit=page_size)

    # ---- what the loop learned -------------------------------------------------------

    def situations(self, scope: str) -> R:
        """The scope's latest situation map: ``{scope, version, versions, built_at,
        named_by, categories, situations}`` (members: only runs and sessions you may read)."""
        return self._get("/situations", scope=scope)

    def notes(self, scope: str, situation: str | None = None) -> R:
        """The scope's notes (of one situation), oldest first: ``{scope, notes}``."""
        return self._get("/notes", scope=scope, situation=situation)

    def procedures(self, scope: str) -> R:
        """The scope's latest compiled procedures: ``{scope, version, compiled_at, model,
        procedures}``."""
        return self._get("/procedures", scope=scope)

    def procedure_sources(self, scope: str, *, if_none_match: str | None = None) -> R:
        """Admin: the documents compiled into the scope's procedures: ``{scope,
        documents}``, with its ``etag`` (for `set_procedure_sources`' ``if_match``)."""
        return self._get("/procedures/sources", scope=scope, if_none_match=if_none_match)

    def set_procedure_sources(
        self, scope: str, documents: str | Sequence[str], *, if_match: str | None = None,
    ) -> R:
        """Admin: the documents compiled into the scope's procedures (replaces the list):
        ``{scope, documents, commit}`` (``commit`` None when the list did not change).
        ``if_match``: only over that list, else `PreconditionFailedError`."""
        return self._put("/procedures/sources", {"scope": scope, "documents": _names(documents)},
                         if_match=if_match)

    def set_aside(
        self, scope: str, *, kind: str | None = None, limit: int | None = None,
        after: str | None = None,
    ) -> R:
        """One page of the items a model pass set aside (``kind``: extract, judge, learn,
        compile), oldest first: ``{scope, items, next_after}``."""
        return self._get("/set-aside", scope=scope, kind=kind, limit=limit, after=after)

    def iter_set_aside(
        self, scope: str, *, kind: str | None = None, page_size: int = 1000,
    ) -> W:
        """Every item set aside, oldest first, page by page."""
        return self._listing("/set-aside", "items", "after", scope=scope, kind=kind,
                             limit=page_size)


__all__ = ["AdviceCalls"]
